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

    def execute(self, sql: str, *, timeout: float | None = None) -> pa.Table:
        """Run ``sql`` on this thread's cursor: statements from several threads run concurrently (a DuckDB
        connection must not be shared between threads; its cursors see the same database). After ``timeout``
        seconds (default :attr:`statement_timeout`) the cursor is interrupted and
        :class:`~kakeibo.errors.StatementTimeout` raised; the cursor then takes the next statement."""
        limit = check_timeout(timeout, self.statement_timeout)
        cursor = getattr(self._local, "cursor", None)
        if cursor is None:
            with self._cursor_lock:
                cursor = self._local.cursor = self._conn.cursor()
        with cancel_at_deadline(limit, cursor.interrupt):
            return cursor.sql(sql).to_arrow_table()

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
