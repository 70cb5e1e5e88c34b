"""How kakeibo reads a query written in T-SQL (SQL Server's dialect). T-SQL is a dialect an analyst may write
in, not an engine kakeibo runs on, so it has a :class:`QueryDialect` and no :class:`EngineSemantics`: its
facts decide what the query means, and the compiled statement then runs on one of the engines.

Neither field can be probed here (kakeibo has no SQL Server to ask); both follow SQL Server's documentation:
LIKE's ``[ ]`` "any single character within the specified range or set" (Transact-SQL reference, LIKE), and
``dbo`` as the default schema of a database's users (CREATE SCHEMA, "the default schema is dbo").
"""

from __future__ import annotations

from .semantics import QueryDialect

__all__ = ["TSQL"]

TSQL = QueryDialect(name="tsql", like_classes=True, default_schema="dbo")
