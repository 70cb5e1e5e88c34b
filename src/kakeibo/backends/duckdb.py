"""DuckDB: the embedded default engine (in-process; DuckDB files, Parquet and CSV)."""

from __future__ import annotations

import os
import threading

import duckdb
import pyarrow as pa

from ._base import DEFAULT_STATEMENT_TIMEOUT, cancel_at_deadline, check_timeout

__all__ = ["DuckDBBackend"]


class DuckDBBackend:
    """Run kakeibo's statements in DuckDB.

    ``database`` is a DuckDB file path, ``":memory:"``, or an existing connection. Tables declared in the
    catalog with ``source = "file.parquet"`` / ``"file.csv"`` are exposed as views over those files by
    :meth:`register_source`. ``read_only=True`` opens a file so that nothing can change it and several
    processes (service replicas) can open it at once; such a database cannot take source views.
    ``statement_timeout`` (seconds; ``None``: no limit) is how long a statement may run before it is
    interrupted and :class:`~kakeibo.errors.StatementTimeout` is raised.

    >>> import pyarrow as pa
    >>> db = DuckDBBackend(":memory:")
    >>> db.load_table("t", pa.table({"x": [1, 2, 3]}))
    >>> db.execute("SELECT CAST(SUM(x) AS BIGINT) AS s FROM t").to_pylist()
    [{'s': 6}]
    """

    dialect = "duckdb"

    def __init__(
        self,
        database: str | os.PathLike[str] | duckdb.DuckDBPyConnection = ":memory:",
        *,
        read_only: bool = False,
        statement_timeout: float | None = DEFAULT_STATEMENT_TIMEOUT,
    ) -> None:
        self.statement_timeout = check_timeout(statement_timeout)
        if isinstance(database, duckdb.DuckDBPyConnection):
            self._conn = database
        else:
            self._conn = duckdb.connect(os.fspath(database), read_only=read_only)
        self._local = threading.local()
        self._cursor_lock = threading.Lock()  # cursors are made one at a time (once per thread; cheap)
        self._database: str | None = None

    def execute(self, sql: str, *, timeout: float | None = None) -> pa.Table:
        """Run ``sql`` on this thread's cursor: statements from several threads run concurrently (a DuckDB
        connection must not be shared between threads; its cursors see the same database). After ``timeout``
        seconds (default :attr:`statement_timeout`) the cursor is interrupted and
        :class:`~kakeibo.errors.StatementTimeout` raised; the cursor then takes the next statement."""
        limit = check_timeout(timeout, self.statement_timeout)
        cursor = self._cursor()
        with cancel_at_deadline(limit, cursor.interrupt):
            return cursor.sql(sql).to_arrow_table()

    def _cursor(self) -> duckdb.DuckDBPyConnection:
        """This thread's cursor, made on its first statement."""
        cursor: duckdb.DuckDBPyConnection | None = getattr(self._local, "cursor", None)
        if cursor is None:
            with self._cursor_lock:
                cursor = self._local.cursor = self._conn.cursor()
        return cursor

    def database_name(self) -> str:
        """The name of the database the statements read their tables from, DuckDB's
        ``current_database()``: ``memory`` for an in-memory database, a file's name without its extension
        (``sales`` for ``sales.duckdb``). Read on the first call, then cached: kakeibo's statements never
        switch database (no ``USE``)."""
        if self._database is None:
            self._database = str(self._cursor().sql("SELECT current_database()").fetchall()[0][0])
        return self._database

    def load_table(self, name: str, data: pa.Table) -> None:
        self._conn.register("__kakeibo_load", data)
        try:
            self._conn.execute(f'CREATE OR REPLACE TABLE "{name}" AS SELECT * FROM __kakeibo_load')
        finally:
            self._conn.unregister("__kakeibo_load")

    def register_source(self, name: str, path: str | os.PathLike[str]) -> None:
        """Expose a Parquet or CSV file as view ``name``."""
        text = os.fspath(path)
        reader = "read_parquet" if text.lower().endswith(".parquet") else "read_csv_auto"
        literal = text.replace("'", "''")
        self._conn.execute(f"CREATE OR REPLACE VIEW \"{name}\" AS SELECT * FROM {reader}('{literal}')")

    def close(self) -> None:
        self._conn.close()
