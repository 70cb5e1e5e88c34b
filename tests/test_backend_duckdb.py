"""The DuckDB backend under concurrent use: each thread runs on its own cursor of one database."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pyarrow as pa

from kakeibo.backends import DuckDBBackend


def test_threads_run_statements_concurrently_and_see_one_database() -> None:
    rng = np.random.default_rng(0)
    db = DuckDBBackend()
    db.load_table("t", pa.table({"g": rng.integers(0, 10, 50_000), "x": rng.uniform(0, 1, 50_000)}))
    query = "SELECT g, COUNT(*) AS n, SUM(x) AS s FROM t GROUP BY g ORDER BY g"
    expected = db.execute(query).to_pylist()
    with ThreadPoolExecutor(8) as pool:
        results = list(pool.map(lambda _: db.execute(query).to_pylist(), range(64)))
    assert all(r == expected for r in results)
    db.load_table("u", pa.table({"y": [1, 2, 3]}))  # a table made later is visible to existing cursors
    with ThreadPoolExecutor(8) as pool:
        sums = list(
            pool.map(lambda _: db.execute("SELECT CAST(SUM(y) AS BIGINT) AS s FROM u").to_pylist(), range(16))
        )
    assert sums == [[{"s": 6}]] * 16
