"""SQL engines kakeibo runs its bounded aggregate queries in (DuckDB embedded by default)."""

from __future__ import annotations

from ._base import Backend
from .duckdb import DuckDBBackend

__all__ = ["Backend", "DuckDBBackend"]
