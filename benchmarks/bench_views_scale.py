"""How long a view takes to build at scale, and how fast it answers (issue 20's goals: a view over 10^6 rows
and 8 attributes in under 60 s; 10^4 range counts per second).

A DuckDB table of ``--rows`` persons with 8 numeric attributes (three latent Gaussian factors, so the
attributes are correlated in pairs and the tensor has structure), each binned into 16 by the catalog. Timed
side by side in one run: the engine's GROUP BY over the 8 binned columns alone (the floor: what any view
must read), ``Session.create_view`` end to end (the binning statement with the per-person bound, the
HDPView build, the ledger charge), then range counts over 2-4 random attributes answered from the view:
cold (the first query of each set of attributes makes its dense marginal) and warm, and the same counts
through ``Session.sql`` (parsing included). Run::

    .venv/bin/python benchmarks/bench_views_scale.py --rows 1000000
"""

from __future__ import annotations

import argparse
import time

import numpy as np
import pyarrow as pa

import kakeibo
from kakeibo.backends import DuckDBBackend
from kakeibo.sql import Catalog

ATTRIBUTES = [f"a{i}" for i in range(8)]


def _table(rows: int, seed: int) -> pa.Table:
    rng = np.random.default_rng(seed)
    factors = rng.normal(size=(rows, 3))
    columns = {"uid": np.arange(rows)}
    for i, name in enumerate(ATTRIBUTES):
        columns[name] = 50 + 12 * (factors[:, i % 3] + 0.5 * rng.normal(size=rows))
    return pa.table(columns)


def _catalog() -> Catalog:
    columns: dict[str, object] = {"uid": "int"}
    columns |= {name: {"type": "float", "lower": 0, "upper": 100, "bins": 16} for name in ATTRIBUTES}
    return Catalog.from_dict({"tables": {"t": {"privacy_unit": "uid", "columns": columns}}})


def _queries(count: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Ranges of bins over 2-4 random attributes; the others span every bin, the NULL bin (16) too."""
    rng = np.random.default_rng(seed)
    lows, highs = np.zeros((count, 8), np.int64), np.full((count, 8), 16, np.int64)
    for q in range(count):
        dims = rng.choice(8, int(rng.integers(2, 5)), replace=False)
        ends = np.sort(rng.integers(0, 16, size=(2, dims.size)), axis=0)
        lows[q, dims], highs[q, dims] = ends
    return lows, highs


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--queries", type=int, default=10_000)
    parser.add_argument("--sql-queries", type=int, default=200)
    parser.add_argument("--epsilon", type=float, default=1.0)
    args = parser.parse_args()

    backend = DuckDBBackend()
    backend.load_table("t", _table(args.rows, seed=0))
    session = kakeibo.connect(backend, catalog=_catalog(), ledger=":memory:", budget=args.epsilon)
    binned = ", ".join(f"LEAST(15, GREATEST(0, CAST(FLOOR({a} / 6.25) AS BIGINT)))" for a in ATTRIBUTES)
    start = time.perf_counter()
    cells = backend.execute(f"SELECT {binned}, COUNT(*) FROM t GROUP BY ALL")
    floor = time.perf_counter() - start

    start = time.perf_counter()
    built = session.create_view("v", f"SELECT {', '.join(ATTRIBUTES)} FROM t", epsilon=args.epsilon)
    build = time.perf_counter() - start
    view = built.view.view

    lows, highs = _queries(args.queries, seed=1)
    start = time.perf_counter()
    view.range_counts(lows, highs)
    cold = time.perf_counter() - start
    lows, highs = _queries(args.queries, seed=2)
    start = time.perf_counter()
    view.range_counts(lows, highs)
    warm = time.perf_counter() - start

    start = time.perf_counter()
    for q in range(args.sql_queries):
        dims = np.flatnonzero((lows[q] > 0) | (highs[q] < 16))
        where = " AND ".join(
            f"{ATTRIBUTES[d]} >= {lows[q, d] * 6.25} AND {ATTRIBUTES[d]} < {(highs[q, d] + 1) * 6.25}"
            for d in dims
        )
        session.sql(f"SELECT COUNT(*) AS n FROM v WHERE {where}")
    through_sql = time.perf_counter() - start

    print(
        f"{args.rows:,} rows, 8 attributes of 16 bins, {cells.num_rows:,} non-zero cells, "
        f"epsilon {args.epsilon:g}"
    )
    print("| step | seconds | per second |")
    print("| --- | --- | --- |")
    print(f"| engine GROUP BY of the binned columns (floor) | {floor:.2f} | |")
    print(f"| create_view end to end ({view.blocks:,} blocks) | {build:.2f} | |")
    print(f"| {args.queries:,} range counts, cold marginals | {cold:.3f} | {args.queries / cold:,.0f} |")
    print(f"| {args.queries:,} range counts, warm | {warm:.3f} | {args.queries / warm:,.0f} |")
    print(
        f"| {args.sql_queries} counts through Session.sql | {through_sql:.2f} | "
        f"{args.sql_queries / through_sql:,.0f} |"
    )


if __name__ == "__main__":
    main()
