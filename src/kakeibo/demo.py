"""End-to-end demo on the bundled sample data (``python -m kakeibo.demo``; ``make demo``).

A synthetic household-expense table (``kakeibo/data/household_expenses.csv``: user_id, category, amount,
age) is released under user-level DP: each person's contribution is bounded first (seed 002, slides
67-75), every release goes through ``@private`` and is charged to a persisted ledger, every number is
printed with its 95% interval, and the ledger is verified and audited at the end. The same table then
goes through DP SQL on DuckDB (``kakeibo.connect``), bounded inside the engine: counts and sums of the
amounts, which cannot be negative, are clamped at 0 (``nonnegative=True``), and one query chooses its limits
and the bounds of ``amount`` privately (``"auto"``) and prints what it chose and what that drops.
"""

from __future__ import annotations

import argparse
import csv
import tempfile
import warnings
from importlib import resources
from pathlib import Path

import duckdb
import numpy as np
from numpy.typing import NDArray

from . import connect, private
from .accounting import BudgetExceeded, Ledger
from .audit import audit
from .mechanisms import Gaussian, Geometric, Laplace
from .mechanisms.accuracy import AccuracyWarning, check_accuracy
from .privacy import ApproxDP
from .sql import Catalog, Result
from .sql.catalog import DEFAULT_SHARE

MAX_ROWS_PER_USER = 5
AMOUNT_BOUNDS = (0.0, 100.0)


def load_expenses() -> dict[str, NDArray[np.generic]]:
    """The bundled sample table as numpy columns."""
    text = resources.files("kakeibo.data").joinpath("household_expenses.csv").read_text()
    rows = list(csv.DictReader(text.splitlines()))
    return {
        "user_id": np.array([int(r["user_id"]) for r in rows]),
        "category": np.array([r["category"] for r in rows]),
        "amount": np.array([float(r["amount"]) for r in rows]),
    }


def bound_contributions(table: dict[str, NDArray[np.generic]], rng: np.random.Generator) -> NDArray[np.bool_]:
    """Keep at most ``MAX_ROWS_PER_USER`` uniformly random rows per user (Wilson et al. 2020)."""
    order = rng.permutation(table["user_id"].size)
    users = table["user_id"][order]
    by_user = np.argsort(users, kind="stable")
    sorted_users = users[by_user]
    first = np.searchsorted(sorted_users, sorted_users, side="left")
    rank = np.arange(sorted_users.size) - first
    keep = np.zeros(users.size, dtype=np.bool_)
    keep[order[by_user[rank < MAX_ROWS_PER_USER]]] = True
    return keep


def show(name: str, release: object) -> None:
    value, (low, high) = release.value, release.confidence_interval  # type: ignore[attr-defined]
    print(f"  {name:<34} {value:>12,.1f}   95% CI [{low:,.1f}, {high:,.1f}]")


def sql_demo(folder: Path) -> None:
    """Load the bundled CSV into a DuckDB file, then answer DP SQL queries bounded inside the engine: three
    at the catalog's limits, and one that chooses its limits and the bounds of ``amount`` privately."""
    source = resources.files("kakeibo.data").joinpath("household_expenses.csv")
    database, ledger_path = folder / "expenses.duckdb", folder / "sql-ledger.sqlite"
    with duckdb.connect(str(database)) as con:
        con.execute(f"CREATE OR REPLACE TABLE expenses AS SELECT * FROM read_csv_auto('{source}')")
    catalog = Catalog.from_dict(
        {
            "tables": {
                "expenses": {
                    "privacy_unit": "user_id",
                    "max_partitions": 3,
                    "max_rows_per_partition": MAX_ROWS_PER_USER,
                    "columns": {
                        "user_id": {"type": "int"},
                        "category": {"type": "str"},
                        "amount": {"type": "float", "lower": AMOUNT_BOUNDS[0], "upper": AMOUNT_BOUNDS[1]},
                        "age": {"type": "int", "lower": 18, "upper": 90, "user_constant": True},
                    },
                }
            }
        }
    )
    session = connect(database, catalog=catalog, ledger=ledger_path, budget=ApproxDP(4, 1e-5))
    print(f"\nDP SQL on DuckDB file {database}, ledger budget (epsilon=4, delta=1e-5):")
    by_category = "SELECT category, COUNT(*) AS n, SUM(amount) AS total FROM expenses GROUP BY category"
    for query, epsilon in [
        ("SELECT AVG(amount) AS mean_amount, MEDIAN(amount) AS median_amount FROM expenses", 0.5),
        (by_category, 1.0),
        ("SELECT COUNT(*) AS n FROM expenses WHERE age BETWEEN 18 AND 39", 0.5),
    ]:
        # counts and the amounts (bounded below by 0) cannot be negative: clamp the noise there, for free
        show_sql(query, session.sql(query, epsilon=epsilon, nonnegative=True), epsilon)
    print(
        "  the same by category, with the limits and the upper bound of amount chosen privately from the\n"
        f'  data ("auto": {DEFAULT_SHARE:.0%} of epsilon goes to noisy histograms, part of the rest to a\n'
        "  private scan for each person's truncation, the rest to the answer; amount is never negative):"
    )
    auto = {"max_rows_per_partition": "auto", "max_partitions": "auto", "amount": (0, "auto")}
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", AccuracyWarning)
        result = session.sql(by_category, epsilon=1.0, nonnegative=True, bounds=auto)
    show_sql(by_category, result, 1.0)
    if result.bounds is not None:
        print(f"    bounds {result.bounds.describe()}")
    for warning in caught:
        print(f"    {warning.category.__name__}: {warning.message}")
    print(f"  remaining: {session.ledger.remaining()}")
    session.close()


def show_sql(query: str, result: Result, epsilon: float) -> None:
    """One DP SQL answer under its query, rounded, with its 95% intervals."""
    print(f"  {query}   [epsilon={epsilon}]")
    print("    " + result.to_pandas().round(1).to_string(index=False).replace("\n", "\n    "))


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="kakeibo end-to-end demo")
    parser.add_argument("--ledger", type=Path, default=None, help="ledger file (default: a new temp file)")
    args = parser.parse_args(argv)
    path = args.ledger or Path(tempfile.mkdtemp(prefix="kakeibo-demo-")) / "ledger.sqlite"

    table = load_expenses()
    n_users = np.unique(table["user_id"]).size
    print(f"sample data: {table['user_id'].size:,} expense rows from {n_users:,} people")
    keep = bound_contributions(table, np.random.default_rng())  # public randomness: not a release
    amount = np.clip(table["amount"][keep], *AMOUNT_BOUNDS)
    category = table["category"][keep]
    print(f"bounded to <= {MAX_ROWS_PER_USER} rows per person: {keep.sum():,} rows kept")

    ledger = Ledger(path, budget=ApproxDP(2, 1e-6))
    print(f"\nledger {path} with budget (epsilon=2, delta=1e-6); user-level releases:")

    @private(mechanism=Geometric(sensitivity=MAX_ROWS_PER_USER, epsilon=0.5), ledger=ledger, label="count")
    def count_rows(rows: NDArray[np.float64]) -> int:
        return int(rows.size)

    @private(mechanism=Laplace(sensitivity=MAX_ROWS_PER_USER * AMOUNT_BOUNDS[1], epsilon=0.5), ledger=ledger)
    def total_amount(rows: NDArray[np.float64]) -> float:
        return float(rows.sum())

    categories = np.unique(table["category"])

    @private(
        mechanism=Gaussian(sensitivity=MAX_ROWS_PER_USER, epsilon=0.5, delta=1e-7),
        ledger=ledger,
        label="hist",
    )
    def histogram(cats: NDArray[np.generic]) -> NDArray[np.float64]:
        return np.array([np.sum(cats == c) for c in categories], dtype=np.float64)

    count = count_rows(amount)
    total = total_amount(amount)
    show("expense rows (geometric)", count)
    show("total amount, k yen (Laplace)", total)
    # Post-processing: the ratio of the two releases, with a 90% interval from the two 95% intervals.
    (s_low, s_high), (c_low, c_high) = total.confidence_interval, count.confidence_interval
    mean, mean_low, mean_high = total.value / count.value, s_low / c_high, s_high / max(c_low, 1)
    name = "mean amount, k yen (sum / count)"
    print(f"  {name:<34} {mean:>12,.2f}   90% CI [{mean_low:,.2f}, {mean_high:,.2f}]")
    hist = histogram(category)
    for name, value in zip(categories, hist.value, strict=True):
        print(f"  rows in {name!s:<26} {value:>12,.1f}   95% CI +-{hist.error_bound:,.1f}")

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", AccuracyWarning)
        check_accuracy(Laplace(sensitivity=MAX_ROWS_PER_USER * 100, epsilon=0.5), 100.0, 0.05)
    for warning in caught:
        print(f"\nAccuracyWarning: {warning.message}")

    try:
        total_amount(amount)
        total_amount(amount)
    except BudgetExceeded as refused:
        print(f"BudgetExceeded: {refused}")

    print(f"\nspent {ledger.spent()}, remaining {ledger.remaining()}")
    verification = ledger.verify()
    print(f"ledger verify: {'ok' if verification else 'FAILED'} ({verification.entries} entries)")

    sql_demo(path.parent)

    result = audit(Laplace(sensitivity=1, epsilon=1), 0.0, 1.0, trials=200_000, rng=np.random.default_rng(7))
    print(
        f"audit of Laplace(eps=1) on neighbours 0 vs 1, 200k trials per side: 95% lower bound on epsilon "
        f"{result.epsilon_lower_bound:.3f} <= 1"
    )


if __name__ == "__main__":
    main()
