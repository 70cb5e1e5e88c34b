"""The engine interface: kakeibo sends one SQL statement per query and gets a small aggregate table back."""

from __future__ import annotations

from typing import Protocol, runtime_checkable

import pyarrow as pa

__all__ = ["Backend"]


@runtime_checkable
class Backend(Protocol):
    """A SQL engine that runs kakeibo's bounded aggregate queries.

    Implementations: :class:`kakeibo.backends.duckdb.DuckDBBackend` (embedded default),
    :class:`kakeibo.backends.postgres.PostgresBackend`, :class:`kakeibo.backends.spark.SparkBackend`.
    """

    #: sqlglot dialect name the statements are translated to: "duckdb", "postgres" or "spark".
    dialect: str

    def execute(self, sql: str) -> pa.Table:
        """Run one SELECT statement (in :attr:`dialect`) and return all its rows."""
        ...

    def load_table(self, name: str, data: pa.Table) -> None:
        """Create or replace table ``name`` from Arrow data (tests, demos, benchmarks)."""
        ...

    def close(self) -> None:
        """Release the connection."""
        ...
