"""Regenerate the bundled synthetic sample data, ``src/kakeibo/data/household_expenses.csv``.

Synthetic households keep a kakeibo (household account book): each person (``user_id``) records a
varying number of expenses (``category``, ``amount`` in thousand yen) and has a constant ``age``. The
heavy-tailed number of rows per person is what user-level DP must bound. Deterministic (seed 20261122).

Run: ``.venv/bin/python scripts/make_sample_data.py``
"""

from __future__ import annotations

import csv
from pathlib import Path

import numpy as np

CATEGORIES = ("food", "housing", "utilities", "transport", "health", "leisure", "education")
MEAN_AMOUNT = (2.5, 60.0, 12.0, 4.0, 6.0, 8.0, 15.0)
OUT = Path(__file__).resolve().parents[1] / "src" / "kakeibo" / "data" / "household_expenses.csv"


def main(n_users: int = 2000, seed: int = 20261122) -> None:
    rng = np.random.default_rng(seed)
    ages = rng.integers(18, 90, size=n_users)
    rows_per_user = np.minimum(1 + rng.zipf(1.8, size=n_users), 200)
    with OUT.open("w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(["user_id", "category", "amount", "age"])
        for user in range(n_users):
            cats = rng.choice(
                len(CATEGORIES), size=rows_per_user[user], p=[0.35, 0.05, 0.1, 0.2, 0.08, 0.15, 0.07]
            )
            for c in cats:
                amount = rng.gamma(2.0, MEAN_AMOUNT[c] / 2.0)
                writer.writerow([user + 1, CATEGORIES[c], f"{amount:.2f}", int(ages[user])])


if __name__ == "__main__":
    main()
