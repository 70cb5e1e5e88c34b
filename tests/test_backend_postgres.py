"""PostgresBackend on a real PostgreSQL server (started by the ``postgres_server`` fixture)."""

from __future__ import annotations

import datetime as dt
import math
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from decimal import Decimal
from typing import Any

import numpy as np
import pyarrow as pa
import pytest

from backend_fixtures import (
    BOUND_K,
    BOUNDED_COUNTS_SQL,
    BOUNDED_ROWS_SQL,
    CLAMP_EXPECTED,
    CLAMP_SQL,
    GROUP_BY_EXPECTED,
    GROUP_BY_SQL,
    PORTABLE_BOUNDED_ROWS_SQL,
    SAMPLE_TABLE,
    check_bounded_rows,
    run,
    sample_events,
    user_row_counts,
)
from kakeibo.backends import Backend, StatementTimeout
from kakeibo.backends.postgres import PostgresBackend, postgres_type

pytestmark = pytest.mark.xdist_group("postgres")


@pytest.fixture
def pg(postgres_backend: PostgresBackend) -> PostgresBackend:
    postgres_backend.load_table(SAMPLE_TABLE, sample_events())
    return postgres_backend


def test_is_a_backend(postgres_backend: PostgresBackend) -> None:
    assert isinstance(postgres_backend, Backend)
    assert postgres_backend.dialect == "postgres"


def test_load_table_column_types(pg: PostgresBackend) -> None:
    types = pg.execute(
        "SELECT column_name, data_type FROM information_schema.columns "
        f"WHERE table_name = '{SAMPLE_TABLE}' ORDER BY ordinal_position"
    ).to_pylist()
    assert [(t["column_name"], t["data_type"]) for t in types] == [
        ("row_id", "bigint"),
        ("user_id", "bigint"),
        ("region", "text"),
        ("weight", "bigint"),
        ("score", "double precision"),
        ("amount", "double precision"),
        ("qty", "integer"),
        ("label", "text"),
    ]


def test_round_trip_of_sample(pg: PostgresBackend) -> None:
    back = pg.execute(f"SELECT * FROM {SAMPLE_TABLE} ORDER BY row_id")
    assert back.equals(sample_events())


def test_group_by_aggregate(pg: PostgresBackend) -> None:
    result = run(pg, GROUP_BY_SQL)
    assert result.to_pylist() == GROUP_BY_EXPECTED
    # COUNT is bigint; SUM(integer) is bigint; SUM(double) is double.
    assert result.schema.field("n_rows").type == pa.int64()
    assert result.schema.field("total_qty").type == pa.int64()
    assert result.schema.field("total_amount").type == pa.float64()


def test_clamping(pg: PostgresBackend) -> None:
    result = run(pg, CLAMP_SQL)
    assert result.to_pylist() == CLAMP_EXPECTED
    assert result.schema.field("amount_c").type == pa.float64()
    assert result.schema.field("qty_c").type == pa.int32()


def test_row_number_bounds_each_user(pg: PostgresBackend) -> None:
    counts = run(pg, BOUNDED_COUNTS_SQL).to_pylist()
    assert counts == [{"user_id": u, "n": min(n, BOUND_K)} for u, n in sorted(user_row_counts().items())]
    # random() is drawn per row and per run: the 2 rows kept of user 1's 5 change between runs (the same
    # pair in all 20 runs has probability 10**-19).
    kept_for_user_1 = {check_bounded_rows(run(pg, BOUNDED_ROWS_SQL).to_pylist()) for _ in range(20)}
    assert len(kept_for_user_1) > 1


def test_portable_row_number_bounds_each_user(pg: PostgresBackend) -> None:
    kept_for_user_1 = {check_bounded_rows(run(pg, PORTABLE_BOUNDED_ROWS_SQL).to_pylist()) for _ in range(20)}
    assert len(kept_for_user_1) > 1


def test_sum_of_bigint_is_int64_not_decimal(pg: PostgresBackend) -> None:
    # SUM(bigint) is numeric in PostgreSQL.
    result = pg.execute("SELECT SUM(weight) AS s, SUM(row_id) FILTER (WHERE false) AS none FROM events")
    assert result.schema.field("s").type == pa.int64()
    assert result.to_pylist() == [{"s": 5 * 5 + 2 * 2 + 1 * 3 + 3 * 1, "none": None}]


def test_numeric_mapping(postgres_backend: PostgresBackend) -> None:
    result = postgres_backend.execute(
        "SELECT 12345::numeric(10, 0) AS whole_declared, 1.5::numeric(10, 2) AS frac_declared, "
        "SUM(x) AS whole_sum, AVG(x) AS avg, SUM(x) * 0.5 AS frac_sum, "
        "SUM(x) * 1e20 AS huge, NULL::numeric AS nothing "
        "FROM (VALUES (1::bigint), (2::bigint), (4::bigint)) AS v(x)"
    )
    types = {f.name: f.type for f in result.schema}
    assert types == {
        "whole_declared": pa.int64(),
        "frac_declared": pa.float64(),
        "whole_sum": pa.int64(),
        "avg": pa.float64(),
        "frac_sum": pa.float64(),
        "huge": pa.float64(),
        "nothing": pa.int64(),
    }
    row = result.to_pylist()[0]
    assert row == {
        "whole_declared": 12345,
        "frac_declared": 1.5,
        "whole_sum": 7,
        "avg": pytest.approx(7 / 3),
        "frac_sum": 3.5,
        "huge": 7e20,
        "nothing": None,
    }
    assert not any(isinstance(v, Decimal) for v in row.values())


def test_other_result_types(postgres_backend: PostgresBackend) -> None:
    result = postgres_backend.execute(
        "SELECT true AS b, 1::smallint AS i2, 2::int AS i4, 3::bigint AS i8, 1.5::real AS f4, "
        "2.5::double precision AS f8, 'x'::text AS t, 'y'::varchar(3) AS v, 'z'::char(2) AS c, "
        "'\\x00ff'::bytea AS bin, DATE '2024-02-29' AS d, TIMESTAMP '2024-01-02 03:04:05.123456' AS ts, "
        "TIMESTAMPTZ '2024-01-02 03:04:05+02' AS tstz, '{\"a\": [1, 2]}'::jsonb AS j, "
        "'00000000-0000-0000-0000-000000000001'::uuid AS u"
    )
    assert [f.type for f in result.schema] == [
        pa.bool_(),
        pa.int16(),
        pa.int32(),
        pa.int64(),
        pa.float32(),
        pa.float64(),
        pa.string(),
        pa.string(),
        pa.string(),
        pa.binary(),
        pa.date32(),
        pa.timestamp("us"),
        pa.timestamp("us", tz="UTC"),
        pa.string(),
        pa.string(),
    ]
    row = result.to_pylist()[0]
    assert row["bin"] == b"\x00\xff"
    assert row["c"] == "z "
    assert row["ts"] == dt.datetime(2024, 1, 2, 3, 4, 5, 123456)
    assert row["tstz"] == dt.datetime(2024, 1, 2, 1, 4, 5, tzinfo=dt.timezone.utc)
    assert row["j"] == '{"a": [1, 2]}'
    assert row["u"] == "00000000-0000-0000-0000-000000000001"


def test_empty_result_keeps_types(pg: PostgresBackend) -> None:
    result = pg.execute(
        "SELECT region, COUNT(*) AS n, SUM(amount) AS s FROM events WHERE false GROUP BY region"
    )
    assert result.num_rows == 0
    assert result.schema == pa.schema([("region", pa.string()), ("n", pa.int64()), ("s", pa.float64())])


def test_load_table_types_and_awkward_values(postgres_backend: PostgresBackend) -> None:
    data = pa.table(
        {
            "i8": pa.array([1, None, -128], pa.int8()),
            "u32": pa.array([0, 4_000_000_000, None], pa.uint32()),
            "u64": pa.array([2**64 - 1, None, 0], pa.uint64()),
            "f32": pa.array([0.1, None, -2.5], pa.float32()),
            "f64": pa.array([float("nan"), float("inf"), -float("inf")], pa.float64()),
            "tiny": pa.array([5e-324, 1.7976931348623157e308, 0.1 + 0.2], pa.float64()),
            "s": pa.array(['a "quoted", comma', "", None], pa.string()),
            "ls": pa.array(["line\nbreak\r\n", "back\\slash \\N", "ünïcødé ✓"], pa.large_string()),
            "cat": pa.array(["x", "y", "x"]).dictionary_encode(),
            "b": pa.array([True, None, False]),
            "bin": pa.array([b'\x00\x01,\n"', None, b""], pa.binary()),
            "d": pa.array([dt.date(1970, 1, 1), None, dt.date(2038, 1, 19)], pa.date32()),
            "ts": pa.array(
                [dt.datetime(2024, 1, 2, 3, 4, 5, 6), None, dt.datetime(1900, 1, 1)], pa.timestamp("us")
            ),
            "tz": pa.array(
                [dt.datetime(2024, 1, 2, 3, 4, 5, tzinfo=dt.timezone.utc), None, None],
                pa.timestamp("ms", tz="UTC"),
            ),
            "dec": pa.array([Decimal("1.25"), None, Decimal("-99999.99")], pa.decimal128(7, 2)),
            "nul": pa.nulls(3),
        }
    )
    postgres_backend.load_table("awkward", data)
    back = postgres_backend.execute("SELECT * FROM awkward").to_pydict()

    def same(column: str, expected: list[Any]) -> None:
        got = back[column]
        assert len(got) == len(expected)
        for g, e in zip(got, expected, strict=True):
            if isinstance(e, float) and math.isnan(e):
                assert isinstance(g, float) and math.isnan(g), column
            else:
                assert g == e, column

    same("i8", [1, None, -128])
    same("u32", [0, 4_000_000_000, None])
    same("u64", [float(2**64 - 1), None, 0.0])  # numeric(20, 0): wider than int64, so float64
    same("f32", data["f32"].to_pylist())
    same("f64", [float("nan"), float("inf"), -float("inf")])
    same("tiny", [5e-324, 1.7976931348623157e308, 0.1 + 0.2])
    same("s", ['a "quoted", comma', "", None])
    same("ls", ["line\nbreak\r\n", "back\\slash \\N", "ünïcødé ✓"])
    same("cat", ["x", "y", "x"])
    same("b", [True, None, False])
    same("bin", [b'\x00\x01,\n"', None, b""])
    same("d", [dt.date(1970, 1, 1), None, dt.date(2038, 1, 19)])
    same("ts", [dt.datetime(2024, 1, 2, 3, 4, 5, 6), None, dt.datetime(1900, 1, 1)])
    same("tz", [dt.datetime(2024, 1, 2, 3, 4, 5, tzinfo=dt.timezone.utc), None, None])
    same("dec", [1.25, None, -99999.99])
    same("nul", [None, None, None])


def test_load_table_replaces(postgres_backend: PostgresBackend) -> None:
    postgres_backend.load_table("replaced", pa.table({"a": [1, 2, 3]}))
    postgres_backend.load_table("replaced", pa.table({"b": ["x"], "c": [0.5]}))
    assert postgres_backend.execute("SELECT * FROM replaced").to_pylist() == [{"b": "x", "c": 0.5}]


def test_load_table_quotes_names(postgres_backend: PostgresBackend) -> None:
    postgres_backend.load_table('odd "name"', pa.table({"user": [1, 2], "Mixed Case": ["a", None]}))
    result = postgres_backend.execute('SELECT "user", "Mixed Case" FROM "odd ""name""" ORDER BY "user"')
    assert result.to_pylist() == [{"user": 1, "Mixed Case": "a"}, {"user": 2, "Mixed Case": None}]


def test_unsupported_arrow_type_is_rejected() -> None:
    with pytest.raises(TypeError, match="no PostgreSQL column type"):
        postgres_type(pa.list_(pa.int64()))


def test_load_million_rows_with_copy(postgres_backend: PostgresBackend) -> None:
    n = 1_000_000
    rng = np.random.default_rng(7)
    data = pa.table(
        {
            "user_id": rng.integers(0, 50_000, n),
            "region": pa.array(rng.choice(["north", "south", "east", "west"], n)),
            "amount": rng.normal(100.0, 30.0, n),
            "qty": pa.array(rng.integers(0, 10, n), pa.int32()),
        }
    )
    start = time.perf_counter()
    postgres_backend.load_table("million", data)
    seconds = time.perf_counter() - start
    result = postgres_backend.execute(
        "SELECT COUNT(*) AS n, SUM(user_id) AS su, SUM(qty) AS sq, COUNT(DISTINCT region) AS r FROM million"
    )
    assert result.to_pylist() == [
        {
            "n": n,
            "su": int(np.sum(data["user_id"].to_numpy())),
            "sq": int(np.sum(data["qty"].to_numpy())),
            "r": 4,
        }
    ]
    # COPY takes ~1 s here; row-by-row INSERTs would take minutes.
    assert seconds < 30, f"loading 1e6 rows took {seconds:.1f} s"


def test_percent_signs_are_not_placeholders(pg: PostgresBackend) -> None:
    result = pg.execute(
        "SELECT 5 % 2 AS m, 'a%s' AS t, COUNT(*) FILTER (WHERE label LIKE 'a%') AS n FROM events"
    )
    assert result.to_pylist() == [{"m": 1, "t": "a%s", "n": 3}]


def test_accepts_an_open_connection(postgres_server: str) -> None:
    import psycopg

    backend = PostgresBackend(psycopg.connect(postgres_server))
    try:
        assert backend.connection.autocommit
        assert backend.execute("SELECT 1 AS one").to_pylist() == [{"one": 1}]
    finally:
        backend.close()
    assert backend.connection.closed


# 10^10 rows of a cross join: hours of work, so only the timeout ends it.
SLOW_POSTGRES = (
    "SELECT COUNT(*) AS n FROM generate_series(1, 100000) a CROSS JOIN generate_series(1, 100000) b"
)


def test_a_slow_statement_is_cancelled_at_its_timeout(postgres_server: str) -> None:
    backend = PostgresBackend(postgres_server, statement_timeout=0.5)
    try:
        started = time.monotonic()
        with pytest.raises(StatementTimeout, match=r"0\.5 s limit"):
            backend.execute(SLOW_POSTGRES)
        assert time.monotonic() - started < 5  # cancelled by the server, not finished
        assert backend.execute("SELECT 42 AS x").to_pylist() == [{"x": 42}]  # the connection goes on
        started = time.monotonic()
        with pytest.raises(StatementTimeout, match=r"0\.2 s limit"):
            backend.execute(SLOW_POSTGRES, timeout=0.2)  # a statement's own timeout replaces the backend's
        assert time.monotonic() - started < 5
        # the limit is set for the statement's own transaction only: the connection keeps the server's
        timed = backend.execute("SELECT current_setting('statement_timeout') AS s", timeout=3)
        assert timed.to_pylist() == [{"s": "3s"}]
        assert backend.connection.execute("SHOW statement_timeout").fetchone() == ("0",)
        assert not backend.connection.info.transaction_status  # idle, no transaction left open
        backend.load_table("after", pa.table({"x": [1, 2]}))
        assert backend.execute("SELECT CAST(SUM(x) AS INT) AS s FROM after").to_pylist() == [{"s": 3}]
    finally:
        backend.close()


def test_a_cancel_before_the_deadline_is_not_a_timeout(postgres_server: str) -> None:
    """Only the backend's deadline becomes StatementTimeout: an administrator's cancel stays QueryCanceled."""
    import psycopg

    backend = PostgresBackend(postgres_server, statement_timeout=60)
    pid = backend.connection.info.backend_pid

    def cancel_soon() -> None:
        with psycopg.connect(postgres_server, autocommit=True) as admin:
            while not admin.execute(
                "SELECT pg_cancel_backend(pid) FROM pg_stat_activity WHERE pid = %s AND state = 'active' "
                "AND query LIKE '%%generate_series%%'",
                (pid,),
            ).fetchall():
                time.sleep(0.05)

    canceller = threading.Thread(target=cancel_soon)
    canceller.start()
    try:
        with pytest.raises(psycopg.errors.QueryCanceled):
            backend.execute(SLOW_POSTGRES)
        canceller.join(timeout=30)
        assert backend.execute("SELECT 1 AS one").to_pylist() == [{"one": 1}]
    finally:
        backend.close()


def test_threads_share_the_connection_with_their_own_timeouts(postgres_server: str) -> None:
    backend = PostgresBackend(postgres_server, statement_timeout=None)

    def slow() -> str:
        try:
            backend.execute(SLOW_POSTGRES, timeout=0.3)
        except StatementTimeout:
            return "timeout"
        return "finished"

    try:
        with ThreadPoolExecutor(4) as pool:
            slow_runs = [pool.submit(slow) for _ in range(2)]
            fast_runs = [
                pool.submit(lambda i: backend.execute(f"SELECT {i} AS i", timeout=30).to_pylist(), i)
                for i in range(20)
            ]
            assert [f.result() for f in fast_runs] == [[{"i": i}] for i in range(20)]
            assert [f.result() for f in slow_runs] == ["timeout", "timeout"]
        assert backend.execute("SHOW statement_timeout").to_pylist() == [{"statement_timeout": "0"}]
    finally:
        backend.close()
