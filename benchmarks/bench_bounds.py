"""How kakeibo's bound choices compare on the visits workloads: hand-set bounds, bounds chosen from
histograms at several shares of epsilon, and the R2T race, per aggregate, in one run.

Run: ``.venv/bin/python benchmarks/bench_bounds.py [--rows 1000000] [--runs 8] [--shares 0.1 0.2 0.3]``

Data: ``make_visits`` of ``bench_sql.py`` (Zipf users: a few hold up to 500 rows over the 20 categories)
and ``make_light_visits`` of ``bench_sql_peers.py`` (1-3 rows per user), loaded once into DuckDB.

Queries, epsilon 1 each: ``COUNT(*)``, ``SUM(amount)`` per category (every variant), and the same with
``AVG(amount)`` and ``MEDIAN(amount)`` (all but the race, which races counts and sums only).

Variants (catalog of the ``visits`` table):

* ``hand-set``: the shape's hand-set bounds (visits: kappa 5, L0 3, amount in [0, 100]; light: kappa 20,
  L0 10, amount in [0, 3000], 100 times too large);
* ``histogram s=<share>``: kappa, L0 and the amount bounds ``"auto"``, chosen at ``bounds_share = share``;
* ``race``: ``bound_selection = "race"``, kappa ``"auto"`` (grid base 10 up to 10^6 rows), L0 = 20 (every
  category) and the hand-set amount bounds declared.

Each cell is the median over ``--runs`` releases of the median relative error over the 20 categories,
against the exact, unbounded answer; the chosen bounds of the first run are shown.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
import warnings
from pathlib import Path
from typing import Any

import duckdb
import numpy as np

import kakeibo
from kakeibo.backends import DuckDBBackend
from kakeibo.mechanisms import AccuracyWarning
from kakeibo.sql import Catalog

sys.path.insert(0, str(Path(__file__).parent))
from bench_sql import CATEGORIES
from bench_sql_peers import SHAPES, kakeibo_catalog, make_table

SUMS = "SELECT category, COUNT(*) AS n, SUM(amount) AS total FROM visits GROUP BY category"
ALL = (
    "SELECT category, COUNT(*) AS n, SUM(amount) AS total, AVG(amount) AS mean, MEDIAN(amount) AS median "
    "FROM visits GROUP BY category"
)


def catalog(shape: str, variant: str) -> Catalog:
    """The shape's catalog of ``bench_sql_peers`` (hand-set, or all ``"auto"``), at a share or raced."""
    if variant == "hand-set":
        return Catalog.from_dict(kakeibo_catalog(SHAPES[shape], "handset"))
    if variant.startswith("histogram"):
        data = kakeibo_catalog(SHAPES[shape], "auto")
        data["tables"]["visits"]["bounds_share"] = float(variant[12:])
        return Catalog.from_dict(data)
    data = kakeibo_catalog(SHAPES[shape], "handset")
    data["tables"]["visits"].update(
        max_partitions=len(CATEGORIES), max_rows_per_partition="auto", bound_selection="race"
    )
    return Catalog.from_dict(data)


def exact(con: duckdb.DuckDBPyConnection) -> dict[str, dict[str, float]]:
    rows = con.execute(
        "SELECT category, COUNT(*), SUM(amount), AVG(amount), MEDIAN(amount) FROM visits GROUP BY 1"
    ).fetchall()
    return {
        name: {r[0]: float(r[i + 1]) for r in rows} for i, name in enumerate(("n", "total", "mean", "median"))
    }


def run(shape: str, variant: str, con: duckdb.DuckDBPyConnection, runs: int) -> dict[str, Any]:
    truth = exact(con)
    query = SUMS if variant == "race" else ALL
    session = kakeibo.connect(
        DuckDBBackend(con),
        catalog=catalog(shape, variant),
        ledger=tempfile.mkdtemp() + "/l.sqlite",
        budget=1e9,
    )
    errors: dict[str, list[float]] = {}
    seconds, chosen = [], ""
    for i in range(runs):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", AccuracyWarning)
            start = time.perf_counter()
            result = session.sql(query, epsilon=1, request_id=str(i))
            seconds.append(time.perf_counter() - start)
        if i == 0 and result.bounds is not None:
            chosen = result.bounds.describe().split(": ", 1)[1]
        for row in result.to_arrow().to_pylist():
            for name in ("n", "total", "mean", "median"):
                if name in row:
                    expected = truth[name][row["category"]]
                    errors.setdefault(name, []).append(abs(row[name] - expected) / abs(expected))
    out: dict[str, Any] = {"seconds": statistics.median(seconds), "chosen": chosen}
    for name, values in errors.items():  # every run releases the 20 public categories
        out[name] = float(np.median(np.median(np.array(values).reshape(runs, -1), axis=1)))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--runs", type=int, default=8)
    parser.add_argument("--shares", type=float, nargs="+", default=[0.1, 0.2, 0.3])
    args = parser.parse_args()
    variants = ["hand-set", *(f"histogram s={s:g}" for s in args.shares), "race"]
    print("| shape | variant | seconds | COUNT | SUM | AVG | MEDIAN | bounds of the first run |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    for shape in ("visits", "light"):
        con = duckdb.connect()
        con.register("data", make_table(shape, args.rows))
        con.execute("CREATE TABLE visits AS SELECT * FROM data")
        for variant in variants:
            row = run(shape, variant, con, args.runs)
            cells = " | ".join(
                f"{row[k]:.4f}" if k in row else "n/a" for k in ("n", "total", "mean", "median")
            )
            print(f"| {shape} | {variant} | {row['seconds']:.3f} | {cells} | {row['chosen']} |", flush=True)


if __name__ == "__main__":
    main()
