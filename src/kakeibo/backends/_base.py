"""The engine interface: kakeibo sends one SQL statement per query and gets a small aggregate table back.

Statement timeouts
------------------
Every backend takes ``statement_timeout`` (seconds; ``None``: no limit) and :meth:`Backend.execute` a
``timeout`` for one statement. A statement still running at its deadline is cancelled inside the engine
(PostgreSQL's ``statement_timeout``, DuckDB's ``interrupt()``, Spark's job tags) and :class:`StatementTimeout`
is raised; the backend stays usable for the next statement. Which of these an engine uses is the
``cancellation`` of its semantics (:mod:`kakeibo.sql.dialects`), which ``tests/test_engine_semantics.py``
checks by the engine error under the :class:`StatementTimeout`.

Database names
--------------
kakeibo reads every catalog table by its bare name, from the engine's default schema, and lets a query
say so with a qualifier (:mod:`kakeibo.sql.tables`): ``main.t``, or a three-part ``db.main.t`` when ``db``
is the database the backend reads from. A backend tells that name with a ``database_name()`` method (read
once, then cached), which the built-in backends have; :func:`database_name` asks for it. The method is not
part of :class:`Backend`, so a backend written without it still is one: its three-part names are refused.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Protocol, runtime_checkable

import pyarrow as pa

from ..errors import ArgumentError, StatementTimeout

__all__ = ["DEFAULT_STATEMENT_TIMEOUT", "Backend", "cancel_at_deadline", "check_timeout", "database_name"]

#: Seconds a statement may run unless the backend is given another ``statement_timeout``.
DEFAULT_STATEMENT_TIMEOUT = 60.0

# How often a watchdog repeats its cancellation after the deadline: a cancel that arrives before the engine
# has started the statement's work (DuckDB before execution, Spark before the first job) has nothing to stop.
_CANCEL_RETRY_SECONDS = 0.1


def check_timeout(timeout: float | None, default: float | None = None) -> float | None:
    """``timeout`` as seconds, ``default`` when it is ``None``; :class:`~kakeibo.errors.ArgumentError` (a
    ``ValueError``) unless positive and finite.

    >>> check_timeout(2), check_timeout(None), check_timeout(None, default=5.0)
    (2.0, None, 5.0)
    """
    if timeout is None:
        return default
    seconds = float(timeout)
    if not (math.isfinite(seconds) and seconds > 0):
        raise ArgumentError(
            f"a statement timeout must be a positive number of seconds or None, not {timeout!r}"
        )
    return seconds


@contextmanager
def cancel_at_deadline(timeout: float | None, cancel: Callable[[], object]) -> Iterator[None]:
    """Run the block under a deadline: once ``timeout`` seconds have passed, a watchdog thread calls
    ``cancel`` (and again every 0.1 s) until the block ends, and an exception the block then raises becomes
    :class:`StatementTimeout`. ``cancel`` is never called after the block has ended, so it may act on
    whatever the block's statement runs on (a cursor, a session). ``None``: no deadline.

    >>> import time
    >>> with cancel_at_deadline(0.05, lambda: None):
    ...     time.sleep(0.01)
    """
    if timeout is None:
        yield
        return
    done = threading.Event()
    lock = threading.Lock()  # taken around each cancel and when the block ends
    expired = False

    def watch() -> None:
        nonlocal expired
        wait = timeout
        while not done.wait(wait):
            with lock:
                if done.is_set():
                    return
                expired = True
                cancel()
            wait = _CANCEL_RETRY_SECONDS

    watchdog = threading.Thread(target=watch, name="kakeibo-statement-deadline", daemon=True)
    watchdog.start()
    try:
        yield
    except Exception as exc:
        with lock:
            done.set()
        if expired:
            raise StatementTimeout(timeout) from exc
        raise
    finally:
        with lock:
            done.set()
        watchdog.join()


@runtime_checkable
class Backend(Protocol):
    """A SQL engine that runs kakeibo's bounded aggregate queries.

    Implementations: :class:`kakeibo.backends.duckdb.DuckDBBackend` (embedded default),
    :class:`kakeibo.backends.postgres.PostgresBackend`, :class:`kakeibo.backends.spark.SparkBackend`. Each
    takes ``statement_timeout=`` (seconds, default :data:`DEFAULT_STATEMENT_TIMEOUT`; ``None``: no limit).
    """

    #: sqlglot dialect name the statements are translated to: "duckdb", "postgres" or "spark", which names
    #: the engine's semantics too (:data:`kakeibo.sql.dialects.ENGINES`: a new backend adds its own).
    dialect: str

    #: Seconds a statement may run before the engine cancels it (``None``: no limit).
    statement_timeout: float | None

    def execute(self, sql: str, *, timeout: float | None = None) -> pa.Table:
        """Run one SELECT statement (in :attr:`dialect`) and return all its rows.

        ``timeout`` (seconds) replaces :attr:`statement_timeout` for this statement; ``None`` keeps it. A
        statement still running at its deadline is cancelled and raises :class:`StatementTimeout`.
        """
        ...

    def load_table(self, name: str, data: pa.Table) -> None:
        """Create or replace table ``name`` from Arrow data (tests, demos, benchmarks; no timeout)."""
        ...

    def close(self) -> None:
        """Release the connection."""
        ...


def table_schema(backend: Backend, table: str) -> pa.Schema:
    """The engine's declared types of the columns of ``table`` (a quoted name in the backend's dialect),
    read from an empty result: the backend's own ``table_schema`` when it has one (PostgreSQL's, which
    reads ``numeric``'s declared digits that its results drop), else the schema :meth:`Backend.execute`
    gives ``SELECT * ... LIMIT 0``.

    >>> from kakeibo.backends import DuckDBBackend
    >>> duck = DuckDBBackend(":memory:")
    >>> _ = duck.execute("CREATE TABLE t AS SELECT CAST(1.5 AS DECIMAL(15, 2)) AS price")
    >>> table_schema(duck, '"t"').field("price").type
    Decimal128Type(decimal128(15, 2))
    """
    method = getattr(backend, "table_schema", None)
    if callable(method):
        schema = method(table)
        if isinstance(schema, pa.Schema):
            return schema
    return backend.execute(f"SELECT * FROM {table} LIMIT 0").schema


def database_name(backend: Backend) -> str | None:
    """The name of the database ``backend`` reads its tables from, which a three-part table name may start
    with; ``None`` when the backend has none or cannot tell (see the module docstring).

    >>> from kakeibo.backends import DuckDBBackend
    >>> database_name(DuckDBBackend(":memory:")), database_name(object())
    ('memory', None)
    """
    method = getattr(backend, "database_name", None)
    name = method() if callable(method) else None
    return name if isinstance(name, str) else None
