"""DP SQL on a synthetic ``visits`` table: wall time, peak memory and error, next to raw DuckDB, in one run.

Run: ``.venv/bin/python benchmarks/bench_sql.py [--rows 1000000 10000000] [--spark]``

Table: ``visits(user_id, category, amount)`` with 20 categories, amount in [0, 100], and a skewed number
of rows per user (Zipf). Query: per-category COUNT(*), SUM(amount), AVG(amount) with kappa = 5, L0 = 3,
epsilon = 1 (public category list, so no partition selection).

Rows per size:
* raw DuckDB ``GROUP BY category`` (no DP);
* the floor: the non-private aggregate grouped by (user, category), which any user-level engine computes;
* kakeibo's bounded engine statement alone (pre-aggregation per user and category), the alternative
  bounding by row sampling (``ROW_SAMPLING``), and the whole ``session.sql`` (analysis, plan, engine,
  noise, ledger charge), also with every limit ``"auto"`` (``AUTO_CATALOG``: the histograms' statement,
  and under ``bound_selection = "ladder"`` the ladders' one, before the answer's);
* optionally kakeibo's bounded statement on Spark ``local[2]`` (driver memory 6g; loading the table from
  Arrow is not timed).

Errors are the median relative error per category against the exact answer, split into the bias of
contribution bounding (bounded vs exact) and the noise (released vs bounded).
"""

from __future__ import annotations

import argparse
import resource
import tempfile
import time
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import duckdb
import numpy as np
import pyarrow as pa

import kakeibo
from kakeibo.backends import Backend, DuckDBBackend
from kakeibo.mechanisms import AccuracyWarning
from kakeibo.sql import Catalog
from kakeibo.sql.rewrite import bounded_sql

CATEGORIES = [f"c{i:02d}" for i in range(20)]
CATALOG = Catalog.from_dict(
    {
        "tables": {
            "visits": {
                "privacy_unit": "user_id",
                "max_partitions": 3,
                "max_rows_per_partition": 5,
                "columns": {
                    "user_id": {"type": "int"},
                    "category": {"type": "str", "public_values": CATEGORIES},
                    "amount": {"type": "float", "lower": 0, "upper": 100},
                },
            }
        }
    }
)
#: the same table with every limit and the amount's upper bound "auto" (bounds chosen privately, issue 31)
AUTO_CATALOG = Catalog.from_dict(
    {
        "tables": {
            "visits": {
                "privacy_unit": "user_id",
                "max_partitions": "auto",
                "max_rows_per_partition": "auto",
                "columns": {
                    "user_id": {"type": "int"},
                    "category": {"type": "str", "public_values": CATEGORIES},
                    "amount": {"type": "float", "lower": 0, "upper": "auto"},
                },
            }
        }
    }
)
QUERY = (
    "SELECT category, COUNT(*) AS n, SUM(amount) AS total, AVG(amount) AS mean FROM visits GROUP BY category"
)

# The bounding strategy kakeibo did not take, for comparison: keep kappa random ROWS per (user, category)
# (Wilson et al. 2020), then L0 random categories per user; same outputs (count, sum).
ROW_SAMPLING = f"""
WITH filtered AS (
  SELECT user_id AS u, category AS g, LEAST(GREATEST(amount, 0), 100) AS v, random() AS rr FROM visits
  WHERE category IN ({", ".join(f"'{c}'" for c in CATEGORIES)}) AND user_id IS NOT NULL),
sampled AS (SELECT *, ROW_NUMBER() OVER (PARTITION BY u, g ORDER BY rr) AS k FROM filtered),
per_key AS (SELECT u, g, COUNT(*) AS n, SUM(v) AS s, random() AS r FROM sampled WHERE k <= 5 GROUP BY u, g),
ranked AS (SELECT *, ROW_NUMBER() OVER (PARTITION BY u ORDER BY r) AS rank FROM per_key)
SELECT g, SUM(n), SUM(s) FROM ranked WHERE rank <= 3 GROUP BY g
"""


def make_visits(rows: int, seed: int = 1) -> pa.Table:
    rng = np.random.default_rng(seed)
    per_user = np.minimum(rng.zipf(1.6, size=rows), 500)
    users = np.repeat(np.arange(per_user.size), per_user)[:rows]
    weights = 1 / np.arange(1, 21)
    category = rng.choice(np.array(CATEGORIES), size=users.size, p=weights / weights.sum())
    amount = np.round(rng.gamma(2.0, 15.0, size=users.size), 2)
    return pa.table({"user_id": users, "category": category, "amount": amount})


def timed(run: Callable[[], Any], repeats: int = 3) -> tuple[float, Any]:
    best, result = float("inf"), None
    for _ in range(repeats):
        start = time.perf_counter()
        result = run()
        best = min(best, time.perf_counter() - start)
    return best, result


def peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def by_category(rows: list[dict[str, Any]], key: str, value: str) -> dict[str, float]:
    return {r[key]: float(r[value]) for r in rows}


def median_relative(estimate: dict[str, float], truth: dict[str, float]) -> float:
    return float(np.median([abs(estimate[c] - truth[c]) / max(abs(truth[c]), 1e-9) for c in truth]))


def run_size(rows: int, spark: Backend | None) -> list[tuple[str, float, str]]:
    data = make_visits(rows)
    con = duckdb.connect()
    con.register("src", data)
    con.execute("CREATE TABLE visits AS SELECT * FROM src")
    db = DuckDBBackend(con)
    out: list[tuple[str, float, str]] = []
    t_raw, exact = timed(
        lambda: con.sql(
            "SELECT category, COUNT(*) AS n, SUM(amount) AS s FROM visits GROUP BY category"
        ).fetchall()
    )
    out.append(("raw DuckDB GROUP BY category (no DP)", t_raw, ""))
    t_floor, _ = timed(
        lambda: con.sql(
            "SELECT category, SUM(n), SUM(s) FROM ("
            "SELECT user_id, category, COUNT(*) AS n, SUM(amount) AS s FROM visits GROUP BY user_id, category"
            ") GROUP BY category"
        ).fetchall()
    )
    out.append(("floor: aggregate by (user, category), then category", t_floor, ""))
    plan = kakeibo.sql.plan_query(kakeibo.sql.analyze(QUERY, CATALOG), epsilon=1)
    statement = bounded_sql(plan)
    t_bounded, bounded = timed(lambda: db.execute(statement).to_pylist())
    out.append(("kakeibo bounded statement on DuckDB", t_bounded, f"{t_bounded / t_floor:.1f}x floor"))
    t_sampled, _ = timed(lambda: con.sql(ROW_SAMPLING).fetchall())
    out.append(("alternative: row sampling, then L0 groups", t_sampled, f"{t_sampled / t_floor:.1f}x floor"))
    with tempfile.TemporaryDirectory() as tmp:
        session = kakeibo.connect(db, catalog=CATALOG, ledger=Path(tmp) / "l.sqlite", budget=1000)
        counter = iter(range(10**6))
        # a different LIMIT each time, so the session's cache of identical queries does not answer
        t_session, released = timed(
            lambda: session.sql(f"{QUERY} LIMIT {1000 + next(counter)}", epsilon=1).to_arrow().to_pylist()
        )
    out.append(("kakeibo session.sql on DuckDB (end to end)", t_session, f"{t_session / t_floor:.1f}x floor"))
    for selection in ("ladder", "histogram"):  # every limit and the amount's upper bound chosen privately
        with tempfile.TemporaryDirectory() as tmp, warnings.catch_warnings():
            warnings.simplefilter("ignore", AccuracyWarning)
            auto = kakeibo.connect(db, catalog=AUTO_CATALOG, ledger=Path(tmp) / "l.sqlite", budget=1000)
            t_auto, _ = timed(
                lambda auto=auto, selection=selection: auto.sql(
                    f"{QUERY} LIMIT {1000 + next(counter)}", epsilon=1, bounds={"bound_selection": selection}
                )
            )
        note = f"{t_auto / t_floor:.1f}x floor"
        out.append((f'  the same, every limit "auto" ({selection})', t_auto, note))
    true_n = {c: float(n) for c, n, _ in exact}
    true_s = {c: float(s) for c, _, s in exact}
    b_n = by_category(bounded, "__g0", "rows")
    # SUM sits next to AVG, so the engine returns its moments: SUM = mid * n + centred sum (mid = 50)
    b_s = {r["__g0"]: 50.0 * r["n_amount"] + r["sc_amount"] for r in bounded}
    r_n, r_s = by_category(released, "category", "n"), by_category(released, "category", "total")
    out.append(
        (
            "  median relative error, COUNT: bias | noise",
            float("nan"),
            f"{median_relative(b_n, true_n):.3f} | {median_relative(r_n, b_n):.4f}",
        )
    )
    out.append(
        (
            "  median relative error, SUM: bias | noise",
            float("nan"),
            f"{median_relative(b_s, true_s):.3f} | {median_relative(r_s, b_s):.4f}",
        )
    )
    if spark is not None:
        spark.load_table("visits", data)
        import sqlglot

        spark_sql = sqlglot.transpile(statement, read="duckdb", write="spark")[0]
        t_spark, _ = timed(lambda: spark.execute(spark_sql))
        out.append(
            ("kakeibo bounded statement on Spark local[2]", t_spark, f"{t_spark / t_floor:.1f}x floor")
        )
    out.append(("peak RSS of this process so far", float("nan"), f"{peak_rss_mb():,.0f} MB"))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, nargs="+", default=[1_000_000, 10_000_000])
    parser.add_argument("--spark", action="store_true", help="also run the statement on Spark local[2]")
    args = parser.parse_args()
    spark: Backend | None = None
    if args.spark:
        from kakeibo.backends.spark import SparkBackend

        spark = SparkBackend(conf={"spark.driver.memory": "6g"}, quick_jit=False)
    for rows in args.rows:
        print(f"\n# visits, {rows:,} rows; kappa=5, L0=3, epsilon=1; best of 3")
        print(f"| {'what':<52} | {'seconds':>8} | {'note':<16} |")
        print(f"|{'-' * 54}|{'-' * 10}|{'-' * 18}|")
        for name, seconds, note in run_size(rows, spark):
            shown = "" if seconds != seconds else f"{seconds:8.3f}"
            print(f"| {name:<52} | {shown:>8} | {note:<16} |")
    if spark is not None:
        spark.close()


if __name__ == "__main__":
    main()
