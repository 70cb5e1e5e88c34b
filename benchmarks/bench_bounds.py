"""How kakeibo's bound choices compare: on the visits workloads (``--suite visits``: hand-set bounds,
bounds chosen from histograms at several shares of epsilon, and the R2T race, per aggregate) and on
heavy-tailed tables against the oracle truncation (``--suite heavy``, issue 31; see below and
``heavy_tails.py``), in one run.

Run: ``.venv/bin/python benchmarks/bench_bounds.py [--suite visits heavy] [--rows 1000000] [--runs 8]
[--shares 0.1 0.2 0.3]``

Data: ``make_visits`` of ``bench_sql.py`` (Zipf users: a few hold up to 500 rows over the 20 categories)
and ``make_light_visits`` of ``bench_sql_peers.py`` (1-3 rows per user), loaded once into DuckDB.

Queries, epsilon 1 each: ``COUNT(*)``, ``SUM(amount)`` per category (every variant), and the same with
``AVG(amount)`` and ``MEDIAN(amount)`` (all but the race, which races counts and sums only).

Variants (catalog of the ``visits`` table):

* ``hand-set``: the shape's hand-set bounds (visits: kappa 5, L0 3, amount in [0, 100]; light: kappa 20,
  L0 10, amount in [0, 3000], 100 times too large);
* ``histogram s=<share>``: kappa, L0 and the amount bounds ``"auto"``, chosen at ``bounds_share = share``;
* ``ladder``: as ``histogram s=0.1`` with ``bound_selection = "ladder"``, on the query without MEDIAN (a
  quantile keeps the histogram's choice);
* ``race``: ``bound_selection = "race"``, kappa ``"auto"`` (grid base 10 up to 10^6 rows), L0 = 20 (every
  category) and the hand-set amount bounds declared.

Each cell is the median over ``--runs`` releases of the median relative error over the 20 categories,
against the exact, unbounded answer; the chosen bounds of the first run are shown.

``--suite heavy``: the shapes of ``heavy_tails.py`` (``sales`` from ``gen_sales.py``, ``pareto``, ``whales``),
every limit and the amount's upper bound ``"auto"`` (``lower = 0``: amounts are never negative), region and
category public. Queries: ``COUNT(*)`` and ``SUM(amount)`` per region (constant per person), per category
(not), and over the whole table, at epsilon 0.1, 1 and 10. Variants: ``bounds={"bound_selection":
"histogram"}`` and ``{"bound_selection": "ladder"}``, and R2T's race over per-person totals
(``heavy_tails.race_error``: kakeibo's race mechanisms on the exact totals, thresholds 10^j, at the oracle's
L0). Per statistic: kakeibo's median relative error (median over ``--runs`` releases of the median over the
groups), the oracle's (``heavy_tails.oracle_error``), their ratio; the share of the mass the chosen bounds
drop as kakeibo states it (its estimate, and its 95% interval when it measures one) against the true share
(the bounded total at the chosen limits, in expectation over which groups of a person are kept, over the exact
total); how often the interval covered the truth; and how often an ``AccuracyWarning`` fired.
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
import heavy_tails
from bench_sql import CATEGORIES
from bench_sql_peers import SHAPES, kakeibo_catalog, make_table

SUMS = "SELECT category, COUNT(*) AS n, SUM(amount) AS total FROM visits GROUP BY category"
WITHOUT_MEDIAN = (
    "SELECT category, COUNT(*) AS n, SUM(amount) AS total, AVG(amount) AS mean FROM visits GROUP BY category"
)
ALL = (
    "SELECT category, COUNT(*) AS n, SUM(amount) AS total, AVG(amount) AS mean, MEDIAN(amount) AS median "
    "FROM visits GROUP BY category"
)


def catalog(shape: str, variant: str) -> Catalog:
    """The shape's catalog of ``bench_sql_peers`` (hand-set, or all ``"auto"``), at a share or raced."""
    if variant == "hand-set":
        return Catalog.from_dict(kakeibo_catalog(SHAPES[shape], "handset"))
    if variant.startswith("histogram") or variant == "ladder":
        data = kakeibo_catalog(SHAPES[shape], "auto")
        data["tables"]["visits"]["bound_selection"] = variant.split(" ")[0]
        if variant != "ladder":
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
    query = {"race": SUMS, "ladder": WITHOUT_MEDIAN}.get(variant, ALL)
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


HEAVY_QUERIES = {
    "region": "SELECT region, COUNT(*) AS n, SUM(amount) AS total FROM sales GROUP BY region",
    "category": "SELECT category, COUNT(*) AS n, SUM(amount) AS total FROM sales GROUP BY category",
    "whole": "SELECT COUNT(*) AS n, SUM(amount) AS total FROM sales",
}
HEAVY_GROUPS = {"region": heavy_tails.REGIONS, "category": heavy_tails.CATEGORIES, "whole": ["all"]}


def heavy_catalog() -> Catalog:
    """Every limit and the amount's upper bound chosen privately (amounts are never negative: ``lower =
    0``); region and category public."""
    return Catalog.from_dict(
        {
            "tables": {
                "sales": {
                    "privacy_unit": "customer_id",
                    "max_rows_per_partition": "auto",
                    "max_partitions": "auto",
                    "columns": {
                        "customer_id": {"type": "int"},
                        "region": {"type": "str", "public_values": heavy_tails.REGIONS},
                        "category": {"type": "str", "public_values": heavy_tails.CATEGORIES},
                        "amount": {"type": "float", "lower": 0, "upper": "auto"},  # never negative
                    },
                }
            }
        }
    )


def true_drop(con: duckdb.DuckDBPyConnection, key: str, value: str | None, bounds: Any) -> float:
    """The share of the statistic's mass the chosen bounds drop, in expectation over which of a person's
    groups are kept (``min(1, L0 / g)`` each)."""
    group = "'all'" if key == "whole" else key
    kappa = bounds.max_rows_per_partition or 10**9
    l0 = bounds.max_partitions or 10**9
    if value is None:
        bounded = f"LEAST(COUNT(*), {kappa})"
    elif value in bounds.totals:
        bounded = f"LEAST(SUM(amount), {bounds.totals[value]!r})"
    else:
        low, high = bounds.columns.get(value, (-1e308, 1e308))
        clamped = f"SUM(LEAST(GREATEST(amount, {low!r}), {high!r}))"
        bounded = f"{clamped} * LEAST(COUNT(*), {kappa}) / COUNT(*)"
    exact = "COUNT(*)" if value is None else "SUM(amount)"
    kept, total = con.execute(
        f"SELECT SUM(b * LEAST(1.0, {l0} / g)), SUM(e) FROM (SELECT {bounded} AS b, {exact} AS e, "
        f"COUNT(*) OVER (PARTITION BY customer_id) AS g FROM sales GROUP BY customer_id, {group})"
    ).fetchone()
    return 1 - float(kept) / float(total)


def heavy_cell(
    con: duckdb.DuckDBPyConnection, query: str, epsilon: float, variant: str, runs: int
) -> dict[str, Any]:
    """kakeibo's errors, stated and true drops, coverage and warnings of one (query, epsilon, variant)."""
    session = kakeibo.connect(
        DuckDBBackend(con), catalog=heavy_catalog(), ledger=tempfile.mkdtemp() + "/l.sqlite", budget=1e9
    )
    groups = HEAVY_GROUPS[query]
    exact = dict(zip(groups, [0.0] * len(groups), strict=True)), dict.fromkeys(groups, 0.0)
    group = "'all'" if query == "whole" else query
    for key, n, total in con.execute(
        f"SELECT {group}, COUNT(*), SUM(amount) FROM sales GROUP BY 1"
    ).fetchall():
        exact[0][key], exact[1][key] = float(n), float(total)
    options = {"bounds": {"bound_selection": variant}}
    errors: dict[str, list[float]] = {"n": [], "total": []}
    drops: dict[str, list[tuple[float, float, float | None, float | None]]] = {"n": [], "total": []}
    # releases whose true bias exceeds the noise (needed) or not, and how many of each warned; and how many
    # warned of a measured bias (plain AccuracyWarning, not UnresolvedBiasWarning)
    warned = {"needed": [0, 0], "else": [0, 0], "measured": [0, runs]}
    seconds = []
    for i in range(runs):
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always", AccuracyWarning)
            start = time.perf_counter()
            result = session.sql(HEAVY_QUERIES[query], epsilon=epsilon, request_id=str(i), **options)
            seconds.append(time.perf_counter() - start)
        fired = any(issubclass(w.category, AccuracyWarning) for w in caught)
        warned["measured"][0] += any(w.category is AccuracyWarning for w in caught)
        rows = result.to_arrow().to_pylist()
        for name, truth in zip(("n", "total"), exact, strict=True):
            released = {r.get(query, "all"): r[name] for r in rows}
            errors[name].append(
                float(np.median([abs(released.get(g, 0.0) - truth[g]) / truth[g] for g in groups]))
            )
        bounds = result.bounds
        assert bounds is not None
        needed = False
        for name, value, stated, key in (
            ("n", None, bounds.dropped_rows, "rows"),
            ("total", "amount", bounds.clipped_values.get("amount"), "amount"),
        ):
            interval = bounds.dropped_intervals.get(key)
            low, high = (None, None) if interval is None else interval[:2]
            share = true_drop(con, query, value, bounds)
            drops[name].append((share, stated or 0.0, low, high))
            # the true bias per group against the statistic's 95% noise half-width, as the warning compares
            half = float(np.mean([(r[f"{name}_ci_high"] - r[f"{name}_ci_low"]) / 2 for r in rows]))
            truth = exact[0] if name == "n" else exact[1]
            needed |= share * sum(truth.values()) / len(groups) > half
        tally = warned["needed" if needed else "else"]
        tally[0], tally[1] = tally[0] + fired, tally[1] + 1
    out: dict[str, Any] = {"seconds": statistics.median(seconds), "warned": warned}
    for name in ("n", "total"):
        out[name] = float(np.median(errors[name]))
        true_share = [d[0] for d in drops[name]]
        measured = [d for d in drops[name] if d[2] is not None]
        stated = (  # the point share, or the median ends of the measured intervals
            f"{np.median([d[1] for d in drops[name]]):.1%}"
            if not measured
            else f"{np.median([d[2] for d in measured]):.1%}..{np.median([d[3] for d in measured]):.0%}"
        )
        out[f"{name}_drop"] = f"{np.median(true_share):.1%} / {stated}"
        out[f"{name}_cover"] = (
            None if not measured else sum(d[2] <= d[0] <= d[3] for d in measured) / len(measured)
        )
    return out


def heavy(runs: int, shapes: list[str]) -> None:
    """The heavy-tailed suite (module docstring): one table row per (shape, query, epsilon, variant)."""
    print(
        "| shape | query | epsilon | variant | seconds | COUNT err | oracle | ratio | SUM err | oracle "
        "| ratio | COUNT drop true / stated | SUM drop true / stated | covered | warned: bias > noise / "
        "not / of a measured bias |"
    )
    print("| --- " * 15 + "|")
    for shape in shapes:
        table = heavy_tails.SHAPES[shape]()
        con = duckdb.connect()
        con.register("data", table)
        con.execute("CREATE TABLE sales AS SELECT * FROM data")
        for query, groups in HEAVY_GROUPS.items():
            key = None if query == "whole" else query
            pairs = [heavy_tails.Pairs.of(table, key, value, groups) for value in (None, "amount")]
            for epsilon in (0.1, 1.0, 10.0):
                oracle = [
                    heavy_tails.oracle_error(p, epsilon / 2, runs, np.random.default_rng(1)) for p in pairs
                ]
                race = [
                    heavy_tails.race_error(p, epsilon / 2, runs, np.random.default_rng(2), integer)
                    for p, integer in zip(pairs, (True, False), strict=True)
                ]
                print(
                    f"| {shape} | {query} | {epsilon:g} | R2T race over totals | | {race[0]:.4f} | "
                    f"{oracle[0]:.4f} | {race[0] / oracle[0]:.2f} | {race[1]:.4f} | {oracle[1]:.4f} | "
                    f"{race[1] / oracle[1]:.2f} | | | | |",
                    flush=True,
                )
                for variant in ("histogram", "ladder"):
                    row = heavy_cell(con, query, epsilon, variant, runs)
                    cover = [row[f"{n}_cover"] for n in ("n", "total")]
                    covered = "/".join("-" if c is None else f"{c:.0%}" for c in cover)
                    print(
                        f"| {shape} | {query} | {epsilon:g} | {variant} | {row['seconds']:.2f} | "
                        f"{row['n']:.4f} | {oracle[0]:.4f} | {row['n'] / oracle[0]:.2f} | "
                        f"{row['total']:.4f} | {oracle[1]:.4f} | {row['total'] / oracle[1]:.2f} | "
                        f"{row['n_drop']} | {row['total_drop']} | {covered} | "
                        f"{' / '.join('{}/{}'.format(*row['warned'][k]) for k in row['warned'])} |",
                        flush=True,
                    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--runs", type=int, default=8)
    parser.add_argument("--shares", type=float, nargs="+", default=[0.1, 0.2, 0.3])
    parser.add_argument("--suite", nargs="+", choices=("visits", "heavy"), default=["visits", "heavy"])
    parser.add_argument(
        "--heavy-shapes", nargs="+", choices=sorted(heavy_tails.SHAPES), default=list(heavy_tails.SHAPES)
    )
    args = parser.parse_args()
    if "heavy" in args.suite:
        heavy(args.runs, args.heavy_shapes)
    if "visits" not in args.suite:
        return
    variants = ["hand-set", *(f"histogram s={s:g}" for s in args.shares), "ladder", "race"]
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
