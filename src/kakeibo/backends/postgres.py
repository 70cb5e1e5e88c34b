"""PostgreSQL: run kakeibo's statements on a PostgreSQL server through psycopg 3.

Result types
------------
:meth:`PostgresBackend.execute` builds an Arrow table typed from the result's column types (not from the
values), so an empty result has the same schema as a full one:

=============================================  ==============================================
PostgreSQL result column                       Arrow column
=============================================  ==============================================
``boolean``                                    ``bool``
``smallint`` / ``integer`` / ``bigint``        ``int16`` / ``int32`` / ``int64``
``oid``                                        ``int64``
``real`` / ``double precision``                ``float32`` / ``float64``
``numeric(p, 0)`` with ``p <= 18``             ``int64``
``numeric(p, s)`` otherwise                    ``float64``
``numeric`` (no modifier: ``SUM(bigint)``,     ``int64`` when every value is NULL or a whole number
``AVG``, ``SUM(numeric)``, ...)                that fits in 64 bits, otherwise ``float64``
``text`` / ``varchar`` / ``char`` / ``name``   ``string``
``json`` / ``jsonb`` / ``uuid`` / other        ``string`` (the value's text) unless Arrow can take
                                               the loaded Python value as it is
``bytea``                                      ``binary``
``date`` / ``time``                            ``date32`` / ``time64[us]``
``timestamp`` / ``timestamptz``                ``timestamp[us]`` / ``timestamp[us, tz=UTC]``
=============================================  ==============================================

So ``SUM`` over integer columns (``numeric`` in PostgreSQL for ``bigint`` input) comes back as
``int64``, never as Python ``Decimal`` objects; a sum too large for 64 bits comes back as ``float64``.
Wrap a sum in ``CAST(... AS DOUBLE PRECISION)`` or ``CAST(... AS BIGINT)`` to pin the type regardless of
the values.

Loading
-------
:meth:`PostgresBackend.load_table` drops and re-creates the table with column types matching the Arrow
schema (see :func:`postgres_type`) and streams the rows in with ``COPY ... FROM STDIN (FORMAT csv)``,
the CSV being written by Arrow's C++ writer in batches, so a million rows load in seconds.

Timeouts
--------
With a ``statement_timeout``, :meth:`PostgresBackend.execute` runs the statement in a transaction of its own
after ``SET LOCAL statement_timeout``, so the server cancels it at the deadline (also while it waits for a
lock) and :class:`~kakeibo.errors.StatementTimeout` is raised; the setting ends with the transaction
(loads and other users of the connection are not limited). One statement or load runs on the connection at
a time.
"""

from __future__ import annotations

import io
import math
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.csv as pa_csv

from ..errors import ArgumentError, ArgumentTypeError, StatementTimeout
from ._base import DEFAULT_STATEMENT_TIMEOUT, check_timeout

if TYPE_CHECKING:
    import psycopg

__all__ = ["PostgresBackend", "postgres_type"]

# Built-in type OIDs (stable across PostgreSQL versions: they are fixed in pg_type.dat).
_BOOL, _BYTEA, _CHAR, _NAME, _INT8, _INT2, _INT4, _TEXT, _OID = 16, 17, 18, 19, 20, 21, 23, 25, 26
_FLOAT4, _FLOAT8, _BPCHAR, _VARCHAR = 700, 701, 1042, 1043
_DATE, _TIME, _TIMESTAMP, _TIMESTAMPTZ, _NUMERIC = 1082, 1083, 1114, 1184, 1700
_JSON, _JSONB, _UUID = 114, 3802, 2950

_FIXED_TYPES: dict[int, pa.DataType] = {
    _BOOL: pa.bool_(),
    _BYTEA: pa.binary(),
    _CHAR: pa.string(),
    _NAME: pa.string(),
    _TEXT: pa.string(),
    _BPCHAR: pa.string(),
    _VARCHAR: pa.string(),
    _JSON: pa.string(),
    _JSONB: pa.string(),
    _INT2: pa.int16(),
    _INT4: pa.int32(),
    _INT8: pa.int64(),
    _OID: pa.int64(),
    _FLOAT4: pa.float32(),
    _FLOAT8: pa.float64(),
    _DATE: pa.date32(),
    _TIME: pa.time64("us"),
    _TIMESTAMP: pa.timestamp("us"),
    _TIMESTAMPTZ: pa.timestamp("us", tz="UTC"),
}

_INT64_MIN, _INT64_MAX = -(2**63), 2**63 - 1

# Rows per CSV chunk sent to COPY: bounds the memory of a load to a few MB of text at a time.
_COPY_BATCH_ROWS = 65_536


def postgres_type(arrow_type: pa.DataType) -> str:
    """The PostgreSQL column type :meth:`PostgresBackend.load_table` creates for an Arrow type.

    >>> postgres_type(pa.int64()), postgres_type(pa.float32()), postgres_type(pa.string())
    ('bigint', 'real', 'text')
    >>> postgres_type(pa.decimal128(12, 2)), postgres_type(pa.timestamp("ms", tz="Europe/Paris"))
    ('numeric(12, 2)', 'timestamptz')
    """
    t = arrow_type
    if pa.types.is_dictionary(t):
        return postgres_type(t.value_type)
    if pa.types.is_boolean(t):
        return "boolean"
    if pa.types.is_int8(t) or pa.types.is_int16(t) or pa.types.is_uint8(t):
        return "smallint"
    if pa.types.is_int32(t) or pa.types.is_uint16(t):
        return "integer"
    if pa.types.is_int64(t) or pa.types.is_uint32(t):
        return "bigint"
    if pa.types.is_uint64(t):
        return "numeric(20, 0)"
    if pa.types.is_float16(t) or pa.types.is_float32(t):
        return "real"
    if pa.types.is_float64(t):
        return "double precision"
    if pa.types.is_decimal(t):
        return f"numeric({t.precision}, {t.scale})"
    if (
        pa.types.is_string(t)
        or pa.types.is_large_string(t)
        or pa.types.is_string_view(t)
        or pa.types.is_null(t)
    ):
        return "text"
    if _is_binary(t):
        return "bytea"
    if pa.types.is_date(t):
        return "date"
    if pa.types.is_time(t):
        return "time"
    if pa.types.is_timestamp(t):
        return "timestamptz" if t.tz is not None else "timestamp"
    raise ArgumentTypeError(f"no PostgreSQL column type for Arrow type {t}")


def _is_binary(t: pa.DataType) -> bool:
    return bool(
        pa.types.is_binary(t)
        or pa.types.is_large_binary(t)
        or pa.types.is_fixed_size_binary(t)
        or pa.types.is_binary_view(t)
    )


def _quote_ident(name: str) -> str:
    """Double-quote an identifier (``a"b`` -> ``"a""b"``)."""
    if "\x00" in name:
        raise ArgumentError("identifier contains a NUL character")
    return '"' + name.replace('"', '""') + '"'


def _numeric_column(values: Sequence[Any], precision: int | None, scale: int | None) -> pa.Array:
    """Arrow array for a ``numeric`` result column (the mapping is in the module docstring)."""
    if scale is not None and precision is not None:
        declared_int = scale == 0 and precision <= 18
        if declared_int:
            return pa.array([None if v is None else int(v) for v in values], pa.int64())
        return pa.array([None if v is None else float(v) for v in values], pa.float64())
    whole = all(
        v is None or (v.is_finite() and v == v.to_integral_value() and _INT64_MIN <= v <= _INT64_MAX)
        for v in values
    )
    if whole:
        return pa.array([None if v is None else int(v) for v in values], pa.int64())
    return pa.array([None if v is None else float(v) for v in values], pa.float64())


def _column(values: Sequence[Any], type_code: int, precision: int | None, scale: int | None) -> pa.Array:
    if type_code == _NUMERIC:
        return _numeric_column(values, precision, scale)
    fixed = _FIXED_TYPES.get(type_code)
    if fixed is not None:
        return pa.array(values, fixed)
    if type_code == _UUID:
        return _text_column(values)
    try:
        return pa.array(values)
    except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError):
        return _text_column(values)


def _text_column(values: Sequence[Any]) -> pa.Array:
    return pa.array([None if v is None else str(v) for v in values], pa.string())


def _bytea_hex(column: pa.ChunkedArray) -> pa.Array:
    """Binary values as PostgreSQL's hex input text (``\\x0a1b``), for CSV."""
    return pa.array([None if v is None else "\\x" + v.hex() for v in column.to_pylist()], pa.string())


def _csv_ready(data: pa.Table) -> pa.Table:
    """Columns rewritten where Arrow's CSV text is not what PostgreSQL's COPY parses."""
    columns: list[pa.ChunkedArray | pa.Array] = []
    for column in data.columns:
        t = column.type
        if pa.types.is_dictionary(t):
            column = column.cast(t.value_type)
            t = t.value_type
        if _is_binary(t):
            columns.append(_bytea_hex(column))
        elif pa.types.is_null(t):
            columns.append(pa.nulls(len(column), pa.string()))
        elif pa.types.is_float16(t):
            columns.append(column.cast(pa.float32()))
        else:
            columns.append(column)
    return pa.table(columns, names=data.column_names)


class PostgresBackend:
    """Run kakeibo's statements on PostgreSQL.

    ``conninfo`` is a libpq connection string or URI (``"host=127.0.0.1 port=5432 dbname=app user=me"``,
    ``"postgresql://me@db/app"``); an open ``psycopg.Connection`` is also accepted (and is then closed by
    :meth:`close`). The connection runs in autocommit mode: every :meth:`execute` is its own statement.
    ``statement_timeout`` (seconds; ``None``: no limit) is how long a statement may run before the server
    cancels it (see the module docstring). Needs ``psycopg`` 3 (``pip install 'psycopg[binary]'``).
    """

    dialect = "postgres"

    def __init__(
        self,
        conninfo: str | psycopg.Connection[Any],
        *,
        statement_timeout: float | None = DEFAULT_STATEMENT_TIMEOUT,
    ) -> None:
        try:
            import psycopg
            import psycopg.types.string
        except ImportError as exc:  # pragma: no cover - depends on the environment
            raise ImportError("PostgresBackend needs psycopg 3: pip install 'psycopg[binary]'") from exc
        self.statement_timeout = check_timeout(statement_timeout)
        self._canceled = psycopg.errors.QueryCanceled
        self._database: str | None = None
        # a transaction (a timed statement, a load) must not take in another thread's statements
        self._lock = threading.Lock()
        if isinstance(conninfo, str):
            self._conn: psycopg.Connection[Any] = psycopg.connect(conninfo, autocommit=True)
        else:
            self._conn = conninfo
            self._conn.autocommit = True
        # JSON comes back as its text rather than as Python dicts/lists Arrow would turn into structs.
        for json_type in ("json", "jsonb"):
            self._conn.adapters.register_loader(json_type, psycopg.types.string.TextLoader)

    @property
    def connection(self) -> psycopg.Connection[Any]:
        """The underlying psycopg connection."""
        return self._conn

    def execute(self, sql: str, *, timeout: float | None = None) -> pa.Table:
        """Run one statement and return its rows, typed as the module docstring's table says. The server
        cancels it after ``timeout`` seconds (default :attr:`statement_timeout`), raising
        :class:`~kakeibo.errors.StatementTimeout`."""
        with self._lock, self._cursor(check_timeout(timeout, self.statement_timeout)) as cur:
            # bytes: sent as they are (no placeholder processing of '%'), and typed as psycopg wants.
            cur.execute(sql.encode())
            description = cur.description
            if description is None:
                return pa.table({})
            rows = cur.fetchall()
        names = [d.name for d in description]
        by_column: list[Sequence[Any]] = list(zip(*rows, strict=True)) if rows else [()] * len(names)
        arrays = [
            _column(values, d.type_code, d.precision, d.scale)
            for values, d in zip(by_column, description, strict=True)
        ]
        return pa.Table.from_arrays(arrays, names=names)

    @contextmanager
    def _cursor(self, timeout: float | None) -> Iterator[psycopg.Cursor[Any]]:
        """A cursor whose statements the server cancels after ``timeout`` seconds (``None``: no limit)."""
        if timeout is None:
            with self._conn.cursor() as cur:
                yield cur
            return
        started = time.monotonic()
        try:
            with self._conn.transaction(), self._conn.cursor() as cur:
                milliseconds = max(1, math.ceil(timeout * 1000))
                cur.execute(f"SET LOCAL statement_timeout = {milliseconds}".encode())
                yield cur
        except self._canceled as exc:
            # also raised by pg_cancel_backend: that one before the deadline stays what it is
            if time.monotonic() - started >= timeout:
                raise StatementTimeout(timeout) from exc
            raise

    def table_schema(self, table: str) -> pa.Schema:
        """The declared types of ``table``'s columns (a quoted name), as results type them but for
        ``numeric``: ``numeric(p, s)`` with ``p <= 38`` (and not the ``int64`` of ``s = 0, p <= 18``) is
        ``decimal128(p, s)``, and a ``numeric`` of more digits or of none declared is ``decimal256(76, 0)``,
        which no catalog type takes (its values may lie beyond the double range, where a cast fails on their
        rows only). Read by :func:`~kakeibo.backends.table_schema` to check the catalog's types."""
        with self._lock, self._cursor(self.statement_timeout) as cur:
            cur.execute(f"SELECT * FROM {table} LIMIT 0".encode())
            description = cur.description or []
        fields = []
        for d in description:
            kind = _column((), d.type_code, d.precision, d.scale).type
            if d.type_code == _NUMERIC:
                precision, scale = d.precision or 0, d.scale or 0
                declared = d.precision is not None and d.scale is not None and precision <= 38
                kind = pa.decimal256(76, 0) if not declared else kind
                if declared and not (scale == 0 and precision <= 18):
                    kind = pa.decimal128(precision, scale)
            fields.append(pa.field(d.name, kind))
        return pa.schema(fields)

    def database_name(self) -> str:
        """The name of the database the connection reads its tables from, PostgreSQL's
        ``current_database()`` (a connection stays in one database). Read on the first call, then cached."""
        if self._database is None:
            with self._lock, self._cursor(self.statement_timeout) as cur:
                cur.execute(b"SELECT current_database()")
                self._database = str(cur.fetchall()[0][0])
        return self._database

    def load_table(self, name: str, data: pa.Table) -> None:
        """Create or replace table ``name`` (one transaction: DROP, CREATE, COPY; no statement timeout)."""
        if data.num_columns == 0:
            raise ArgumentError("cannot load a table with no columns")
        table = _quote_ident(name)
        columns = ", ".join(f"{_quote_ident(f.name)} {postgres_type(f.type)}" for f in data.schema)
        ready = _csv_ready(data)
        options = pa_csv.WriteOptions(include_header=False, batch_size=_COPY_BATCH_ROWS)
        with self._lock, self._conn.transaction(), self._conn.cursor() as cur:
            # Arrow writes UTF-8, whatever the connection's client encoding was.
            cur.execute(b"SET LOCAL client_encoding = 'UTF8'")
            cur.execute(f"DROP TABLE IF EXISTS {table}".encode())
            cur.execute(f"CREATE TABLE {table} ({columns})".encode())
            statement = f"COPY {table} FROM STDIN (FORMAT csv)"
            with cur.copy(statement.encode()) as copy:
                for batch in ready.to_batches(max_chunksize=_COPY_BATCH_ROWS):
                    buffer = io.BytesIO()
                    pa_csv.write_csv(batch, buffer, options)
                    copy.write(buffer.getbuffer())

    def close(self) -> None:
        """Close the connection."""
        self._conn.close()
