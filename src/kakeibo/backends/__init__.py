"""SQL engines kakeibo runs its bounded aggregate queries in (DuckDB embedded by default)."""

from __future__ import annotations

from ..errors import StatementTimeout
from ._base import DEFAULT_STATEMENT_TIMEOUT, Backend, database_name, table_schema
from .duckdb import DuckDBBackend

__all__ = [
    "DEFAULT_STATEMENT_TIMEOUT",
    "Backend",
    "DuckDBBackend",
    "StatementTimeout",
    "database_name",
    "table_schema",
]
