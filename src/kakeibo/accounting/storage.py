"""Where the ledger (and the query service's analyst registry) keep their rows: a SQLite file, or PostgreSQL.

Both stores give their owner the same two things, so the owner's logic is written once:

* ``transaction(write=True)``: one transaction that no other writer of the same store can interleave with,
  in any process or on any machine, and which sees every transaction committed before it. SQLite: ``BEGIN
  IMMEDIATE`` (the database's write lock). PostgreSQL: ``READ COMMITTED`` plus a transaction-scoped advisory
  lock on (owner, schema), taken first -- the PostgreSQL form of the same write lock. Once a writer holds it,
  no other writer can commit, and every statement of a ``READ COMMITTED`` transaction sees all commits
  made before the statement began (the previous holder committed before its lock was released), so a
  charge's check-then-append is atomic across service replicas. Readers are not blocked.
* ``transaction(write=False)``: a consistent snapshot for reading (SQLite: a deferred transaction under WAL;
  PostgreSQL: ``REPEATABLE READ READ ONLY``), so the meta row and the rows it describes always agree.

Statements use ``?`` placeholders and portable SQL; DDL is written with ``{int}``, ``{blob}``, ``{real}`` and
``{strict}`` for the column types that differ (:meth:`Store.ddl`). A PostgreSQL store is named by a URL
(``postgresql://user:password@host:port/database``; ``?options=-csearch_path%3Dname`` keeps several ledgers
in one database, one per schema); anything else is a SQLite path. A broken PostgreSQL connection (a server
restart) is replaced by a new one at the next transaction; the transaction that was cut off either
committed or left no trace.
"""

from __future__ import annotations

import os
import re
import sqlite3
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any, ClassVar, Protocol

from ..errors import Error

__all__ = ["Connection", "Store", "StoreError", "is_postgres_url", "open_store", "redact"]

_PG_URL = re.compile(r"postgres(ql)?://", re.IGNORECASE)
_PASSWORD = re.compile(r"(://[^:/@]*:)[^@]*@")


class StoreError(Error, ValueError):
    """The location holds no usable database (not a SQLite file, or a PostgreSQL server that refuses us)."""


class Cursor(Protocol):
    @property
    def rowcount(self) -> int: ...

    @property
    def description(self) -> Any: ...

    def fetchone(self) -> Any: ...

    def fetchall(self) -> list[Any]: ...

    def __iter__(self) -> Iterator[Any]: ...


class Connection(Protocol):
    """What a store's transaction hands out: ``execute`` with ``?`` placeholders, and ``executemany``."""

    def execute(self, sql: str, parameters: Any = ..., /) -> Cursor: ...

    def executemany(self, sql: str, parameters: Any, /) -> Any: ...


def is_postgres_url(location: str | os.PathLike[str]) -> bool:
    """Whether ``location`` names a PostgreSQL database (``postgresql://`` or ``postgres://``)."""
    return isinstance(location, str) and _PG_URL.match(location) is not None


def redact(location: str) -> str:
    """``location`` with the password of a URL replaced by ``***`` (for messages and logs)."""
    return _PASSWORD.sub(r"\1***@", location)


class Store:
    """One database connection, used by one owner (a ledger or a registry) under a lock; see the module."""

    kind: str  # "sqlite" or "postgres"
    #: the exception classes meaning "the database refused this" (not a bug of kakeibo's)
    database_errors: tuple[type[Exception], ...]
    _TYPES: ClassVar[dict[str, str]]

    def __init__(self, location: str) -> None:
        self.location = location
        self._lock = threading.RLock()

    def ddl(self, text: str) -> list[str]:
        """The statements of ``text`` (``;``-separated) with this store's column types filled in."""
        rendered = text.format(**self._TYPES)
        return [statement for statement in rendered.split(";") if statement.strip()]

    @contextmanager
    def transaction(self, *, write: bool) -> Iterator[Connection]:
        """One transaction (see the module docstring): committed if the block ends normally, else rolled
        back; a failed COMMIT is rolled back too."""
        with self._lock:
            conn = self._begin(write)
            try:
                yield conn
            except BaseException:
                self._rollback()
                raise
            try:
                conn.execute("COMMIT")
            except BaseException:
                self._rollback()
                raise

    def _begin(self, write: bool) -> Connection:
        raise NotImplementedError

    def _rollback(self) -> None:
        raise NotImplementedError

    def has_table(self, conn: Connection, name: str) -> bool:
        raise NotImplementedError

    def close(self) -> None:
        raise NotImplementedError

    def describe(self) -> str:
        """The location for messages: the path, or the URL without its password."""
        return redact(self.location)


class SQLiteStore(Store):
    """A SQLite file (or ``":memory:"``) in WAL mode with full fsync, shared by processes on one machine."""

    kind = "sqlite"
    database_errors = (sqlite3.DatabaseError,)
    _TYPES: ClassVar[dict[str, str]] = {"int": "INTEGER", "blob": "BLOB", "real": "REAL", "strict": " STRICT"}

    def __init__(self, path: str, *, timeout: float) -> None:
        super().__init__(path)
        self._timeout = timeout
        try:
            self._conn = sqlite3.connect(path, timeout=timeout, isolation_level=None, check_same_thread=False)
        except sqlite3.Error as exc:  # a directory that does not exist, or a path that is one
            raise StoreError(f"{path} cannot be opened as a SQLite database ({exc})") from exc
        try:
            self._conn.execute(f"PRAGMA busy_timeout = {int(timeout * 1000)}")
            if path != ":memory:":
                self._conn.execute("PRAGMA journal_mode = WAL")
            self._conn.execute("PRAGMA synchronous = FULL")
        except sqlite3.DatabaseError as exc:
            self._conn.close()
            raise StoreError(f"{path} is not a usable SQLite database ({exc})") from exc
        except BaseException:
            self._conn.close()
            raise

    def _begin(self, write: bool) -> Connection:
        deadline = time.monotonic() + self._timeout
        while True:
            try:
                self._conn.execute("BEGIN IMMEDIATE" if write else "BEGIN")
                return self._conn
            except sqlite3.OperationalError as exc:
                # busy_timeout already waited; retry the rare cases SQLite reports busy at once
                busy = "locked" in str(exc) or "busy" in str(exc)
                if not busy or time.monotonic() > deadline:
                    raise
                time.sleep(0.005)

    def _rollback(self) -> None:
        if self._conn.in_transaction:
            self._conn.execute("ROLLBACK")

    def has_table(self, conn: Connection, name: str) -> bool:
        row = conn.execute("SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name = ?", (name,))
        return bool(row.fetchone()[0])

    def close(self) -> None:
        with self._lock:
            self._conn.close()


class _PostgresConnection:
    """A psycopg connection that takes ``?`` placeholders (kakeibo's statements contain no other ``?``)."""

    def __init__(self, conn: Any) -> None:
        self._conn = conn

    def execute(self, sql: str, parameters: Sequence[Any] = (), /) -> Cursor:
        cursor: Cursor = self._conn.execute(sql.replace("?", "%s"), parameters)
        return cursor

    def executemany(self, sql: str, parameters: Sequence[Sequence[Any]], /) -> None:
        with self._conn.cursor() as cursor:
            cursor.executemany(sql.replace("?", "%s"), parameters)


class PostgresStore(Store):
    """A PostgreSQL database shared by any number of processes and machines (service replicas).

    ``owner`` names the advisory lock that serialises this owner's writers (the ledger and the registry may
    share a database without waiting for each other); the lock is also keyed by the current schema."""

    kind = "postgres"
    _TYPES: ClassVar[dict[str, str]] = {
        "int": "BIGINT",
        "blob": "BYTEA",
        "real": "DOUBLE PRECISION",
        "strict": "",
    }

    def __init__(self, url: str, *, timeout: float, owner: str) -> None:
        try:
            import psycopg
        except ImportError:
            raise ImportError("a PostgreSQL ledger needs psycopg: pip install 'kakeibo[postgres]'") from None
        super().__init__(url)
        self.database_errors = (psycopg.DatabaseError,)
        self._psycopg = psycopg
        self._timeout = timeout
        self._owner = owner
        self._conn: Any = None
        with self._lock:
            self._connect()

    def _connect(self) -> Any:
        if self._conn is None or self._conn.closed or self._conn.broken:
            if self._conn is not None:
                self._conn.close()
            try:
                conn = self._psycopg.connect(
                    self.location, autocommit=True, connect_timeout=max(1, int(self._timeout))
                )
            except self._psycopg.OperationalError as exc:
                raise StoreError(f"cannot connect to PostgreSQL at {self.describe()}: {exc}") from None
            conn.execute(f"SET lock_timeout = {int(self._timeout * 1000)}")
            self._conn = conn
        return self._conn

    def _begin(self, write: bool) -> Connection:
        """Open a transaction (write: with the owner's lock). A connection the server dropped since the last
        use (restart, idle timeout) is only noticed here; nothing has run on it yet, so reconnect once."""
        begin = "BEGIN ISOLATION LEVEL " + ("READ COMMITTED" if write else "REPEATABLE READ READ ONLY")
        raw = self._connect()
        try:
            raw.execute(begin)
        except self._psycopg.OperationalError:
            if not raw.broken:
                raise
            raw = self._connect()
            raw.execute(begin)
        if write:
            try:
                raw.execute(
                    "SELECT pg_advisory_xact_lock(hashtext(%s), hashtext(current_schema()))",
                    (f"kakeibo.{self._owner}",),
                )
            except BaseException:
                self._rollback()
                raise
        return _PostgresConnection(raw)

    def _rollback(self) -> None:
        if not self._conn.closed and not self._conn.broken:
            self._conn.execute("ROLLBACK")

    def has_table(self, conn: Connection, name: str) -> bool:
        return bool(conn.execute("SELECT to_regclass(?) IS NOT NULL", (name,)).fetchone()[0])

    def close(self) -> None:
        with self._lock:
            if self._conn is not None:
                self._conn.close()


def open_store(location: str, *, timeout: float, owner: str) -> Store:
    """A :class:`PostgresStore` for a ``postgresql://`` URL, else a :class:`SQLiteStore` for the path."""
    if is_postgres_url(location):
        return PostgresStore(location, timeout=timeout, owner=owner)
    return SQLiteStore(location, timeout=timeout)
