"""Relational DP SQL on TPC-H: kakeibo next to raw DuckDB and the per-(person, group) floor, in one run.

Run: ``.venv/bin/python benchmarks/bench_tpch.py [--scale 1] [--runs 10] [--epsilon 0.8]
[--bases 2 2.718281828 5.5 10] [--bounds 1000000 10000] [--queries Q1 R2T-Q18 ...]``

Data: TPC-H at ``--scale`` from ``tpchgen-cli`` (``kakeibo.data.tpch``), cached under the system temp
folder and loaded into a DuckDB file; the customer is the person (``kakeibo/data/tpch_catalog.toml``).

Queries: the SPJA forms of ``kakeibo.data.tpch.QUERIES`` (Q1, Q3, Q5, Q6, Q10, Q12, Q14, Q18) and the forms
R2T's authors ran (their repository's ``Query/*.txt``: Q10 = COUNT(*) of orders x customer x nation,
Q12 = COUNT(*) of orders x lineitem, Q18 = SUM(l_quantity) of customer x orders x lineitem), whose relative
errors at epsilon 0.8 they report: Q10 0.17%, Q12 0.023% (orders as the person, ``R2T-Q12-orders`` here),
Q18 0.13%.

Per query and catalog:
* ``raw``: DuckDB running the query text (no privacy);
* ``floor``: the same joins and filters aggregated per (person, group) without bounds or noise
  (``kakeibo.sql.rewrite.per_person_sql``), which any person-level DP engine computes at least;
* ``kakeibo``: the whole ``session.sql`` (analysis, plan, the bounded statement, noise, ledger charge),
  median over ``--runs`` warm runs, each a fresh release;
* the median relative error of every released aggregate against the raw (untruncated) answer over the runs
  and groups; for R2T's forms also the mean relative error after dropping the two best and two worst runs,
  as their scripts compute it.

Catalogs: ``fixed`` (the catalog's limits: 20 orders, 100 line items per group), ``chosen`` (both limits of
orders and lineitem ``"auto"``, chosen privately from histograms at 10% of epsilon, ``kakeibo.sql.bounds``)
and ``auto b=<base> GS=<bound>`` (``max_rows_per_partition = "auto"`` with ``bound_selection = "race"`` for
orders and lineitem: the R2T race with the grid base b and ``max_rows_bound`` GS rows of a person per
group).
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import duckdb
import numpy as np

import kakeibo
from kakeibo.data import tpch
from kakeibo.sql import Catalog, analyze
from kakeibo.sql.bounds import provisional
from kakeibo.sql.plan import plan_query
from kakeibo.sql.rewrite import per_person_sql

R2T_QUERIES = {
    "R2T-Q10": "SELECT COUNT(*) AS n FROM orders, customer, nation WHERE c_custkey = o_custkey "
    "AND c_nationkey = n_nationkey",
    "R2T-Q12": "SELECT COUNT(*) AS n FROM orders, lineitem WHERE o_orderkey = l_orderkey",
    "R2T-Q18": "SELECT SUM(l_quantity) AS q FROM customer, orders, lineitem WHERE c_custkey = o_custkey "
    "AND o_orderkey = l_orderkey",
}
#: what the authors' result files give at epsilon 0.8 (``../shared/research/wave2-notes.md``)
R2T_REPORTED = {"R2T-Q10": 0.0017, "R2T-Q18": 0.0013, "R2T-Q12-orders": 0.00023}


def _race(bound: int, base: float) -> dict[str, object]:
    """A table's settings for the R2T race up to ``bound`` rows on the grid of ``base``."""
    return {
        "max_rows_per_partition": "auto",
        "max_rows_bound": bound,
        "bound_selection": "race",
        "truncation_base": base,
    }


def catalogs(bases: list[float], bounds: list[int]) -> dict[str, Catalog]:
    """The shipped catalog (``fixed``), its limits of orders and lineitem chosen privately (``chosen``),
    and for every base and bound the R2T race on orders and lineitem."""
    out = {"fixed": Catalog.from_toml(tpch.catalog())}
    data = Catalog.from_toml(tpch.catalog()).to_dict()
    for name in ("orders", "lineitem"):
        data["tables"][name].update(max_rows_per_partition="auto", max_partitions="auto")
    out["chosen"] = Catalog.from_dict(data)
    for bound in bounds:
        for b in bases:
            data = Catalog.from_toml(tpch.catalog()).to_dict()
            for name in ("orders", "lineitem"):
                data["tables"][name].update(_race(bound, b))
            out[f"auto b={b:.3g} GS={bound:.0e}"] = Catalog.from_dict(data)
    return out


def orders_as_person(base: float, bound: int) -> Catalog:
    """The TPC-H catalog with the order as the person (R2T's Q12 setting): line items reference orders."""
    data = Catalog.from_toml(tpch.catalog()).to_dict()
    orders = data["tables"]["orders"]
    orders.pop("references")
    orders.update(privacy_unit="o_orderkey", max_rows_per_partition=1, max_partitions=1)
    data["tables"]["lineitem"].update(_race(bound, base))
    data["tables"].pop("customer")
    return Catalog.from_dict(data)


def timed(run: Callable[[], Any]) -> tuple[float, Any]:
    start = time.perf_counter()
    out = run()
    return time.perf_counter() - start, out


def key_of(row: dict[str, Any], values: set[str]) -> tuple[Any, ...]:
    return tuple(v for k, v in row.items() if k not in values)


def measure(
    con: duckdb.DuckDBPyConnection, path: Path, catalog: Catalog, name: str, sql: str, args: Any, ledger: Path
) -> dict[str, Any]:
    raw_time, raw = timed(lambda: con.sql(sql).to_arrow_table())
    truth_rows = raw.to_pylist()
    values = {c for c in raw.column_names if not isinstance(truth_rows[0][c], str) and c != "c_nationkey"}
    truth = {key_of(r, values): r for r in truth_rows}
    plan = plan_query(analyze(sql, provisional(catalog)), epsilon=args.epsilon, delta=1e-6)  # "auto" as 1
    floor_time, _ = timed(lambda: con.sql(per_person_sql(plan)).fetchall())
    times, errors, per_run = [], [], []
    with kakeibo.connect(str(path), catalog=catalog, ledger=str(ledger), budget=(1e9, 0.5)) as session:
        session.sql(sql, epsilon=args.epsilon, delta=1e-6, request_id="warm-up")
        for run in range(args.runs):
            t, result = timed(
                lambda run=run: session.sql(sql, epsilon=args.epsilon, delta=1e-6, request_id=f"run-{run}")
            )
            times.append(t)
            run_errors = []
            for row in result.table.to_pylist():
                expected = truth.get(key_of({k: v for k, v in row.items() if k in raw.column_names}, values))
                if expected is None:
                    continue
                for column in values:
                    exact = float(expected[column])
                    if exact != 0:
                        run_errors.append(abs(float(row[column]) - exact) / abs(exact))
            errors.extend(run_errors)
            per_run.append(float(np.mean(run_errors)) if run_errors else float("nan"))
    trimmed = sorted(per_run)[2:-2] if len(per_run) > 4 else per_run
    return {
        "query": name,
        "raw": raw_time,
        "floor": floor_time,
        "kakeibo": statistics.median(times),
        "error": float(np.median(errors)) if errors else float("nan"),
        "r2t_style": float(np.mean(trimmed)) if trimmed else float("nan"),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scale", type=float, default=1.0)
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--epsilon", type=float, default=0.8)
    parser.add_argument("--bases", type=float, nargs="+", default=[2.0, 2.718281828, 5.5, 10.0])
    parser.add_argument("--bounds", type=int, nargs="+", default=[1_000_000, 10_000])
    parser.add_argument("--queries", nargs="*", default=None)
    args = parser.parse_args()
    cache = Path(tempfile.gettempdir()) / f"kakeibo-tpch-sf{args.scale:g}"
    gen_time, folder = timed(lambda: tpch.generate(args.scale, cache / "parquet"))
    database = cache / "tpch.duckdb"
    if not database.exists():
        load_time, _ = timed(lambda: tpch.load_duckdb(database, folder))
    else:
        load_time = 0.0
    print(f"TPC-H SF {args.scale:g}: generate {gen_time:.1f} s, load {load_time:.1f} s -> {database}")
    queries = {**tpch.QUERIES, **R2T_QUERIES}
    if args.queries:
        queries = {k: v for k, v in queries.items() if k in args.queries}
    work = tempfile.mkdtemp()
    header = (
        f"| {'query':<16} | {'catalog':<18} | raw s | floor s | kakeibo s | x floor | median rel. error "
        "| R2T-style |"
    )
    print(header)
    print("|" + "|".join("-" * (len(part)) for part in header.split("|")[1:-1]) + "|")
    with duckdb.connect(str(database), read_only=True) as con:
        jobs = [
            (label, catalog, name, sql)
            for label, catalog in catalogs(args.bases, args.bounds).items()
            for name, sql in queries.items()
        ]
        jobs += [
            (
                f"auto b={b:.3g} GS={bound:.0e}",
                orders_as_person(b, bound),
                "R2T-Q12-orders",
                R2T_QUERIES["R2T-Q12"],
            )
            for bound in args.bounds
            for b in args.bases
        ]
        for i, (label, catalog, name, sql) in enumerate(jobs):
            try:
                row = measure(con, database, catalog, name, sql, args, Path(work) / f"ledger-{i}.db")
            except kakeibo.Error as error:
                print(f"| {name:<16} | {label:<20} | refused: {error}")
                continue
            reported = R2T_REPORTED.get(name)
            print(
                f"| {name:<16} | {label:<20} | {row['raw']:.3f} | {row['floor']:.3f} | "
                f"{row['kakeibo']:.3f} | {row['kakeibo'] / row['floor']:.2f} | {row['error']:.3%} | "
                f"{row['r2t_style']:.3%}"
                + (f" (R2T: {reported:.3%})" if reported is not None else "")
                + " |",
                flush=True,
            )


if __name__ == "__main__":
    main()
