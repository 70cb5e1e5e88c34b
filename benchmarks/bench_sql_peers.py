"""DP SQL against peers on the same ``visits`` data: wall time, peak memory and error, in one run.

Run: ``.venv/bin/python benchmarks/bench_sql_peers.py [--rows 1000000 10000000] [--spark] [--skip-slow N]``
(the peers come with ``pip install -e '.[bench]'``).

Query: per-category COUNT(*), SUM(amount), AVG(amount) over ``make_visits`` (see ``bench_sql.py``), with
the same bounds for every system: at most kappa = 5 rows per user and category, at most L0 = 3 categories
per user, amount clamped to [0, 100], epsilon = 1 for the whole query, the 20 categories public.

Each system runs in a child process of its own (``--child``) that reads the table from a Parquet file,
times only the query (best of ``--repeats``), and reports its peak resident memory (``VmHWM``), so the
memory figures do not mix; a child that only loads the data gives the baseline. Errors are median
relative errors over the 20 categories against the exact (unbounded, noise-free) answer; kakeibo also
splits its error into bounding bias (its engine's bounded aggregates, noise-free) and noise.

Peers and how the bounds map onto them:

* SmartNoise SQL (``snsql.from_df`` on pandas): it bounds only the total rows per user (``max_ids``),
  set to kappa * L0 = 15, and selects keys with delta = 1e-6 (its ``censor_dims``; it has no public key
  list for a pandas reader).
* PipelineDP (``LocalBackend``): ``max_partitions_contributed = 3``, ``max_contributions_per_partition =
  5``, ``min_value = 0``, ``max_value = 100``, public partitions = the 20 categories; Laplace noise.
* OpenDP (polars frontend): privacy unit ``user_id`` with ``Bound(per_group=5)`` and ``num_groups=3``,
  truncated per group and number of groups (``keep="first"``: its random ``"sample"`` fails on a single
  grouping column in 0.14.2 with "multiple fields with name 'category'"), public keys, the table size as
  the public bound on a group's length; ``len`` and ``sum`` of the clamped amount. OpenDP 0.14 needs
  polars 1.32 while kakeibo's dev environment has polars 2, so this child runs in a separate environment
  given by ``--opendp-python`` (``python -m venv V && V/bin/pip install opendp polars==1.32.0 -e .``);
  without it, it is skipped.

``--corpus`` runs a different comparison instead (issue 17): every query of the SQL corpus of
``tests/sql_corpus.py`` on kakeibo, SmartNoise SQL, Qrlew and OpenDP's polars front end, counting what each
answers and its median time per query; each peer may run in an environment of its own
(``--smartnoise-python``, ``--qrlew-python``, ``--opendp-python``). See ``sql_corpus_peers.py`` for the
environments, the mapping of the catalog onto each peer and what is timed.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow.parquet as pq

sys.path.insert(0, str(Path(__file__).parent))
from bench_sql import CATALOG, CATEGORIES, QUERY, make_visits
from sql_corpus_peers import add_arguments, main_corpus

KAPPA, L0, EPSILON = 5, 3, 1.0
Answer = dict[str, tuple[float, float]]  # category -> (count, sum)


def _peak_mb() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def _best(run: Callable[[], Answer], repeats: int) -> tuple[float, Answer]:
    best, answer = float("inf"), {}
    for _ in range(repeats):
        start = time.perf_counter()
        answer = run()
        best = min(best, time.perf_counter() - start)
    return best, answer


def _duckdb_table(path: str) -> Any:
    import duckdb

    con = duckdb.connect()
    con.execute(f"CREATE TABLE visits AS SELECT * FROM read_parquet('{path}')")
    return con


def child_load(path: str, repeats: int) -> tuple[float, Answer]:
    pq.read_table(path)
    return float("nan"), {}


def child_raw(path: str, repeats: int) -> tuple[float, Answer]:
    con = _duckdb_table(path)
    sql = "SELECT category, COUNT(*), SUM(amount) FROM visits GROUP BY category"
    return _best(lambda: {c: (float(n), float(s)) for c, n, s in con.sql(sql).fetchall()}, repeats)


def child_floor(path: str, repeats: int) -> tuple[float, Answer]:
    con = _duckdb_table(path)
    sql = (
        "SELECT category, SUM(n), SUM(s) FROM (SELECT user_id, category, COUNT(*) AS n, SUM(amount) AS s "
        "FROM visits GROUP BY user_id, category) GROUP BY category"
    )
    return _best(lambda: {c: (float(n), float(s)) for c, n, s in con.sql(sql).fetchall()}, repeats)


def _kakeibo(backend: Any, repeats: int) -> tuple[float, Answer]:
    import kakeibo
    from kakeibo.accounting import Ledger

    session = kakeibo.connect(backend, catalog=CATALOG, ledger=Ledger(":memory:", budget=10**6))
    counter = iter(range(10**6))

    def run() -> Answer:  # a new LIMIT each time, so the stored release does not answer
        rows = session.sql(f"{QUERY} LIMIT {1000 + next(counter)}", epsilon=EPSILON).to_arrow().to_pylist()
        return {r["category"]: (float(r["n"]), float(r["total"])) for r in rows}

    return _best(run, repeats)


def child_kakeibo(path: str, repeats: int) -> tuple[float, Answer]:
    from kakeibo.backends import DuckDBBackend

    return _kakeibo(DuckDBBackend(_duckdb_table(path)), repeats)


def child_kakeibo_spark(path: str, repeats: int) -> tuple[float, Answer]:
    from kakeibo.backends.spark import SparkBackend

    spark = SparkBackend(conf={"spark.driver.memory": "6g"}, quick_jit=False)
    spark.load_table("visits", pq.read_table(path))
    return _kakeibo(spark, repeats)


def child_smartnoise(path: str, repeats: int) -> tuple[float, Answer]:
    import snsql

    frame = pq.read_table(path).to_pandas()
    metadata = {
        "bench": {
            "visits": {
                "visits": {
                    "max_ids": KAPPA * L0,
                    "row_privacy": False,
                    "user_id": {"type": "int", "private_id": True},
                    "category": {"type": "string"},
                    "amount": {"type": "float", "lower": 0, "upper": 100},
                }
            }
        }
    }
    reader = snsql.from_df(frame, privacy=snsql.Privacy(epsilon=EPSILON, delta=1e-6), metadata=metadata)
    sql = QUERY.replace("FROM visits", "FROM visits.visits")

    def run() -> Answer:
        rows = reader.execute(sql)
        return {str(r[0]): (float(r[1]), float(r[2])) for r in rows[1:]}

    return _best(run, repeats)


def child_pipelinedp(path: str, repeats: int) -> tuple[float, Answer]:
    import pipeline_dp

    table = pq.read_table(path)
    rows = list(
        zip(
            table["user_id"].to_numpy().tolist(),
            table["category"].to_pylist(),
            table["amount"].to_numpy().tolist(),
            strict=True,
        )
    )

    def run() -> Answer:
        accountant = pipeline_dp.NaiveBudgetAccountant(total_epsilon=EPSILON, total_delta=1e-6)
        engine = pipeline_dp.DPEngine(accountant, pipeline_dp.LocalBackend())
        params = pipeline_dp.AggregateParams(
            metrics=[pipeline_dp.Metrics.COUNT, pipeline_dp.Metrics.SUM, pipeline_dp.Metrics.MEAN],
            noise_kind=pipeline_dp.NoiseKind.LAPLACE,
            max_partitions_contributed=L0,
            max_contributions_per_partition=KAPPA,
            min_value=0.0,
            max_value=100.0,
        )
        extractors = pipeline_dp.DataExtractors(
            privacy_id_extractor=lambda r: r[0],
            partition_extractor=lambda r: r[1],
            value_extractor=lambda r: r[2],
        )
        result = engine.aggregate(rows, params, extractors, public_partitions=CATEGORIES)
        accountant.compute_budgets()
        return {key: (float(m.count), float(m.sum)) for key, m in result}

    return _best(run, repeats)


def child_opendp(path: str, repeats: int) -> tuple[float, Answer]:
    import opendp.prelude as dp
    import polars as pl

    dp.enable_features("contrib")
    table = pq.read_table(path)
    frame = pl.from_arrow(table).lazy()
    keys = pl.DataFrame({"category": CATEGORIES})

    def run() -> Answer:
        context = dp.Context.compositor(
            data=frame,
            privacy_unit=dp.unit_of(
                contributions=[
                    dp.polars.Bound(by=["category"], per_group=KAPPA),
                    dp.polars.Bound(num_groups=L0),
                ],
                identifier="user_id",
            ),
            privacy_loss=dp.loss_of(epsilon=EPSILON),
            split_evenly_over=1,
            margins=[dp.polars.Margin(by=["category"], invariant="keys", max_length=table.num_rows)],
        )
        query = (
            context.query()
            .truncate_per_group(KAPPA, by=[pl.col("category")])
            .truncate_num_groups(L0, by=[pl.col("category")], keep="first")
            .group_by("category")
            .agg(dp.len(), pl.col("amount").fill_null(0.0).dp.sum((0.0, 100.0)))
            .with_keys(keys)
        )
        released = query.release().collect()
        return {
            c: (float(n), float(s)) for c, n, s in released.select("category", "len", "amount").iter_rows()
        }

    return _best(run, repeats)


CHILDREN: dict[str, tuple[str, Callable[[str, int], tuple[float, Answer]]]] = {
    "load": ("load the data only (baseline memory)", child_load),
    "raw": ("raw DuckDB GROUP BY category (no DP)", child_raw),
    "floor": ("floor: DuckDB aggregate by (user, category)", child_floor),
    "kakeibo": ("kakeibo session.sql on DuckDB", child_kakeibo),
    "spark": ("kakeibo session.sql on Spark local[2]", child_kakeibo_spark),
    "smartnoise": ("SmartNoise SQL (pandas reader)", child_smartnoise),
    "pipelinedp": ("PipelineDP (LocalBackend)", child_pipelinedp),
    "opendp": ("OpenDP (polars frontend)", child_opendp),
}


def _bounded(path: str) -> Answer:
    """kakeibo's bounded, noise-free aggregates (to split its error into bias and noise)."""
    import kakeibo
    from kakeibo.sql.rewrite import bounded_sql

    con = _duckdb_table(path)
    plan = kakeibo.sql.plan_query(kakeibo.sql.analyze(QUERY, CATALOG), epsilon=EPSILON)
    rows = con.sql(bounded_sql(plan)).to_arrow_table().to_pylist()
    # the query's SUM sits next to its AVG, so the engine returns the moments: SUM = 50 * n + centred sum
    return {r["__g0"]: (float(r["rows"]), 50 * r["n_amount"] + r["sc_amount"]) for r in rows}


def _median_relative(estimate: Answer, truth: Answer, index: int) -> float:
    return float(
        np.median(
            [
                abs(estimate.get(c, (0.0, 0.0))[index] - t[index]) / max(abs(t[index]), 1e-9)
                for c, t in truth.items()
            ]
        )
    )


def _run_child(name: str, path: str, repeats: int, timeout: float, python: str) -> dict[str, Any]:
    command = [python, __file__, "--child", name, "--data", path, "--repeats", str(repeats)]
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return {"error": f"did not finish in {timeout:.0f} s"}
    if done.returncode != 0:
        return {"error": (done.stderr.strip().splitlines() or ["failed"])[-1]}
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, nargs="+", default=[1_000_000, 10_000_000])
    parser.add_argument("--spark", action="store_true", help="also run kakeibo on Spark local[2]")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--timeout", type=float, default=900, help="seconds allowed per system and size")
    parser.add_argument(
        "--skip-slow",
        type=int,
        default=10**7,
        help="run PipelineDP and SmartNoise only up to this many rows",
    )
    parser.add_argument("--opendp-python", help="interpreter of an environment with opendp and polars 1.32")
    add_arguments(parser)
    parser.add_argument("--child", choices=sorted(CHILDREN), help=argparse.SUPPRESS)
    parser.add_argument("--data", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.corpus:
        main_corpus(args)
        return
    if args.child:
        seconds, answer = CHILDREN[args.child][1](args.data, args.repeats)
        print(json.dumps({"seconds": seconds, "peak_mb": _peak_mb(), "answer": answer}))
        return
    names = [n for n in CHILDREN if n != "spark" or args.spark]
    with tempfile.TemporaryDirectory() as tmp:
        for rows in args.rows:
            path = str(Path(tmp) / f"visits_{rows}.parquet")
            pq.write_table(make_visits(rows), path)
            results = {}
            for name in names:
                if name in ("smartnoise", "pipelinedp") and rows > args.skip_slow:
                    results[name] = {"error": f"skipped above {args.skip_slow:,} rows (--skip-slow)"}
                    continue
                if name == "opendp" and not args.opendp_python:
                    results[name] = {"error": "skipped: no --opendp-python environment"}
                    continue
                repeats = 1 if name in ("smartnoise", "pipelinedp", "opendp", "spark") else args.repeats
                python = args.opendp_python if name == "opendp" else sys.executable
                results[name] = _run_child(name, path, repeats, args.timeout, python)
            truth, bounded = results["raw"]["answer"], _bounded(path)
            floor = results["floor"]["seconds"]
            print(f"\n# visits, {rows:,} rows; kappa={KAPPA}, L0={L0}, epsilon={EPSILON}; a process each")
            print("| system | seconds | x floor | peak RSS MB | count error | sum error |")
            print("| --- | --- | --- | --- | --- | --- |")
            for name in names:
                label, result = CHILDREN[name][0], results[name]
                if "error" in result:
                    print(f"| {label} | {result['error']} | | | | |")
                    continue
                seconds, answer = result["seconds"], result["answer"]
                timing = "" if seconds != seconds else f"{seconds:.3f} | {seconds / floor:.1f}x"
                errors = " | |"
                if name not in ("load", "raw") and answer:
                    count, total = _median_relative(answer, truth, 0), _median_relative(answer, truth, 1)
                    errors = f" | {count:.4f} | {total:.4f}"
                print(f"| {label} | {timing or ' | '} | {result['peak_mb']:,.0f}{errors} |")
            count, total = _median_relative(bounded, truth, 0), _median_relative(bounded, truth, 1)
            print(f"| kakeibo bounding bias only (bounded vs exact) | | | | {count:.4f} | {total:.4f} |")


if __name__ == "__main__":
    main()
