"""The DuckDB backend under concurrent use: each thread runs on its own cursor of one database; read-only
files shared by several backends (service replicas); statement timeouts."""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import duckdb
import numpy as np
import pyarrow as pa
import pytest

from kakeibo.backends import DEFAULT_STATEMENT_TIMEOUT, DuckDBBackend, StatementTimeout


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


def test_a_read_only_file_is_shared_and_cannot_be_changed(tmp_path: Path) -> None:
    path = tmp_path / "data.duckdb"
    writer = DuckDBBackend(path)
    writer.load_table("t", pa.table({"x": [1, 2, 3]}))
    writer.close()
    first, second = DuckDBBackend(path, read_only=True), DuckDBBackend(path, read_only=True)  # two replicas
    query = "SELECT CAST(SUM(x) AS BIGINT) AS s FROM t"
    assert first.execute(query).to_pylist() == second.execute(query).to_pylist() == [{"s": 6}]
    for statement in ("DELETE FROM t", "CREATE TABLE u (y INTEGER)", "DROP TABLE t"):
        with pytest.raises(duckdb.Error, match="read-only"):
            first.execute(statement)
    assert second.execute(query).to_pylist() == [{"s": 6}]
    first.close()
    second.close()


# 10^10 rows of a cross join: minutes of work, so only the timeout ends it.
SLOW_DUCKDB = "SELECT SUM(a.range * b.range) AS s FROM range(100000) a, range(100000) b"


def test_a_slow_statement_is_interrupted_at_its_timeout() -> None:
    db = DuckDBBackend(statement_timeout=0.5)
    started = time.monotonic()
    with pytest.raises(StatementTimeout, match=r"0\.5 s limit"):
        db.execute(SLOW_DUCKDB)
    assert time.monotonic() - started < 5  # interrupted, not finished
    assert db.execute("SELECT 42 AS x").to_pylist() == [{"x": 42}]  # the cursor takes the next statement
    started = time.monotonic()
    with pytest.raises(StatementTimeout, match=r"0\.2 s limit"):
        db.execute(SLOW_DUCKDB, timeout=0.2)  # a statement's own timeout replaces the backend's
    assert time.monotonic() - started < 5
    db.close()


def test_timeouts_of_concurrent_statements_stay_on_their_own_cursor() -> None:
    db = DuckDBBackend(statement_timeout=None)
    db.load_table("t", pa.table({"x": list(range(1000))}))
    fast = "SELECT CAST(SUM(x) AS BIGINT) AS s FROM t"

    def slow() -> str:
        try:
            db.execute(SLOW_DUCKDB, timeout=0.5)
        except StatementTimeout:
            return "timeout"
        return "finished"

    with ThreadPoolExecutor(4) as pool:
        slow_runs = [pool.submit(slow) for _ in range(2)]
        fast_runs = [pool.submit(lambda: db.execute(fast, timeout=30).to_pylist()) for _ in range(40)]
        assert [f.result() for f in fast_runs] == [[{"s": 499500}]] * 40
        assert [f.result() for f in slow_runs] == ["timeout", "timeout"]
    assert DuckDBBackend().statement_timeout == DEFAULT_STATEMENT_TIMEOUT
    with pytest.raises(ValueError, match="positive number of seconds"):
        DuckDBBackend(statement_timeout=0)
