"""SparkBackend in local mode, and the same statements on DuckDB, PostgreSQL and Spark."""

from __future__ import annotations

import time
from collections.abc import Iterator
from decimal import Decimal
from typing import Any

import duckdb
import pyarrow as pa
import pytest
from pyspark.errors import AnalysisException

from backend_fixtures import (
    BOUND_K,
    BOUNDED_COUNTS_SQL,
    BOUNDED_ROWS_SQL,
    CLAMP_EXPECTED,
    CLAMP_SQL,
    GROUP_BY_EXPECTED,
    GROUP_BY_SQL,
    PIPELINE_EXPECTED,
    PIPELINE_SQL,
    PORTABLE_BOUNDED_ROWS_SQL,
    SAMPLE_TABLE,
    check_bounded_rows,
    run,
    sample_events,
    to_dialect,
    user_row_counts,
)
from kakeibo.backends import DEFAULT_STATEMENT_TIMEOUT, Backend, StatementTimeout
from kakeibo.backends.postgres import PostgresBackend
from kakeibo.backends.spark import SparkBackend, local_threads

pytestmark = pytest.mark.xdist_group("spark")


@pytest.fixture(scope="module")
def spark(spark_backend: SparkBackend) -> SparkBackend:
    spark_backend.load_table(SAMPLE_TABLE, sample_events())
    return spark_backend


def test_is_a_backend(spark: SparkBackend) -> None:
    assert isinstance(spark, Backend)
    assert spark.dialect == "spark"


def test_local_session_settings(spark: SparkBackend) -> None:
    conf = spark.session.conf
    assert conf.get("spark.sql.shuffle.partitions") == "2"
    assert conf.get("spark.ui.enabled") == "false"
    assert conf.get("spark.sql.session.timeZone") == "UTC"
    assert spark.session.sparkContext.master == "local[2]"


def test_local_threads() -> None:
    assert local_threads("local[4]") == 4
    assert local_threads("local[*]") is not None
    assert local_threads("local[2, 3]") == 2
    assert local_threads("spark://host:7077") is None
    assert local_threads("yarn") is None


def test_round_trip_of_sample(spark: SparkBackend) -> None:
    back = spark.execute(f"SELECT * FROM {SAMPLE_TABLE} ORDER BY row_id")
    assert back.to_pylist() == sample_events().to_pylist()
    assert back.schema.types == sample_events().schema.types


def test_group_by_aggregate(spark: SparkBackend) -> None:
    result = run(spark, GROUP_BY_SQL)
    assert result.to_pylist() == GROUP_BY_EXPECTED
    assert result.schema.field("n_rows").type == pa.int64()
    assert result.schema.field("total_qty").type == pa.int64()
    assert result.schema.field("total_amount").type == pa.float64()


def test_clamping(spark: SparkBackend) -> None:
    result = run(spark, CLAMP_SQL)
    assert result.to_pylist() == CLAMP_EXPECTED
    assert result.schema.field("amount_c").type in (pa.float64(), pa.decimal128(3, 1))
    assert result.schema.field("qty_c").type == pa.int32()


def test_row_number_bounds_each_user(spark: SparkBackend) -> None:
    counts = run(spark, BOUNDED_COUNTS_SQL).to_pylist()
    assert counts == [{"user_id": u, "n": min(n, BOUND_K)} for u, n in sorted(user_row_counts().items())]
    # rand() is drawn per row and per run: the 2 rows kept of user 1's 5 change between runs (the same
    # pair in all 10 runs has probability 10**-9).
    kept_for_user_1 = {check_bounded_rows(run(spark, BOUNDED_ROWS_SQL).to_pylist()) for _ in range(10)}
    assert len(kept_for_user_1) > 1


def test_portable_row_number_bounds_each_user(spark: SparkBackend) -> None:
    kept_for_user_1 = {
        check_bounded_rows(run(spark, PORTABLE_BOUNDED_ROWS_SQL).to_pylist()) for _ in range(10)
    }
    assert len(kept_for_user_1) > 1


def test_empty_result_keeps_types(spark: SparkBackend) -> None:
    result = spark.execute(
        "SELECT region, COUNT(*) AS n, SUM(amount) AS s FROM events WHERE false GROUP BY region"
    )
    assert result.num_rows == 0
    assert result.schema.types == [pa.string(), pa.int64(), pa.float64()]


def test_load_table_replaces(spark: SparkBackend) -> None:
    spark.load_table("replaced", pa.table({"a": [1, 2, 3]}))
    spark.load_table("replaced", pa.table({"b": ["x", None], "c": [0.5, None]}))
    assert spark.execute("SELECT * FROM replaced ORDER BY b").to_pylist() == [
        {"b": None, "c": None},
        {"b": "x", "c": 0.5},
    ]


def test_existing_session_is_borrowed(spark: SparkBackend) -> None:
    borrowed = SparkBackend(session=spark.session)
    assert borrowed.execute("SELECT 1 + 1 AS two").to_pylist() == [{"two": 2}]
    assert borrowed.session.sparkContext is spark.session.sparkContext
    with pytest.raises(AnalysisException, match="not loaded"):  # a session of its own: no shared views
        borrowed.execute(f"SELECT * FROM {SAMPLE_TABLE}")
    borrowed.close()  # leaves the session running
    assert spark.execute("SELECT 2 AS still_up").to_pylist() == [{"still_up": 2}]


def _normalized(table: pa.Table) -> list[dict[str, Any]]:
    """Rows with whole-number decimals (DuckDB's SUM of integers is a HUGEINT) as Python ints."""

    def value(v: Any) -> Any:
        if isinstance(v, Decimal) and v == v.to_integral_value():
            return int(v)
        return v

    return [{k: value(v) for k, v in row.items()} for row in table.to_pylist()]


@pytest.fixture
def duck() -> Iterator[duckdb.DuckDBPyConnection]:
    conn = duckdb.connect()
    conn.register("__events", sample_events())
    conn.execute(f"CREATE TABLE {SAMPLE_TABLE} AS SELECT * FROM __events")
    try:
        yield conn
    finally:
        conn.close()


def test_same_statement_same_aggregates_on_duckdb_postgres_spark(
    spark: SparkBackend, postgres_backend: PostgresBackend, duck: duckdb.DuckDBPyConnection
) -> None:
    postgres_backend.load_table(SAMPLE_TABLE, sample_events())

    def on_all(sql: str) -> dict[str, pa.Table]:
        results = {"duckdb": duck.sql(to_dialect(sql, "duckdb")).to_arrow_table()}
        for backend in (postgres_backend, spark):
            results[backend.dialect] = backend.execute(to_dialect(sql, backend.dialect))
        return results

    pipeline = on_all(PIPELINE_SQL)
    for engine, result in pipeline.items():
        assert _normalized(result) == PIPELINE_EXPECTED, engine
        assert result.schema.field("sum_w_int").type == pa.int64(), engine
        assert result.schema.field("n").type == pa.int64(), engine
        assert result.schema.field("sum_s").type == pa.float64(), engine
    # Without a cast, SUM over integers is int64 on PostgreSQL (numeric, mapped) and Spark, and
    # decimal128(38, 0) (HUGEINT) on DuckDB.
    assert pipeline["postgres"].schema.field("sum_w").type == pa.int64()
    assert pipeline["spark"].schema.field("sum_w").type == pa.int64()
    assert pipeline["duckdb"].schema.field("sum_w").type == pa.decimal128(38, 0)

    for sql, expected in ((GROUP_BY_SQL, GROUP_BY_EXPECTED), (CLAMP_SQL, CLAMP_EXPECTED)):
        for engine, result in on_all(sql).items():
            assert _normalized(result) == expected, engine

    for engine, result in on_all(PORTABLE_BOUNDED_ROWS_SQL).items():
        assert check_bounded_rows(result.to_pylist()), engine


def test_a_slow_statement_is_cancelled_at_its_timeout(spark: SparkBackend) -> None:
    spark.load_table("grid", pa.table({"x": pa.array(range(3000), pa.int64())}))
    slow = "SELECT SUM(a.x * b.x + c.x) AS s FROM grid a CROSS JOIN grid b CROSS JOIN grid c"  # 2.7e10 rows
    started = time.monotonic()
    with pytest.raises(StatementTimeout, match="1 s limit"):
        spark.execute(slow, timeout=1)
    assert time.monotonic() - started < 15  # cancelled, not finished (minutes of work)
    assert len(spark.session.sparkContext.getJobTags()) == 0  # the statement's tag went with it
    assert spark.execute("SELECT COUNT(*) AS n FROM grid").to_pylist() == [{"n": 3000}]
    assert spark.statement_timeout == DEFAULT_STATEMENT_TIMEOUT
