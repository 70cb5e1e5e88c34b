"""Differentially private SQL: the catalog of sensitive tables and the analysis of analysts' queries.

:class:`Catalog` declares each table's privacy unit, contribution limits and column bounds;
:func:`analyze` checks a query against it and returns its :class:`AnalyzedQuery` structure, or raises
:class:`QueryRefused` with the reason -- before any data is read. :class:`CorrelationSpec` declares a graph
over a table's users, whose releases are then calibrated for Bayesian DP (:mod:`.correlation`).
"""

from __future__ import annotations

# sqlglot loads a dialect on its first use and registers the class before it attaches the dialect's parser
# and generator: a thread that asks for the dialect in that window gets the generic ones (DuckDB's RANDOM()
# came out as RAND() under the query service's first concurrent requests). Load every dialect kakeibo reads
# or writes here, at import, which Python's import lock makes whole before any caller sees it.
import sqlglot.dialects.bigquery
import sqlglot.dialects.duckdb
import sqlglot.dialects.mysql
import sqlglot.dialects.postgres
import sqlglot.dialects.snowflake
import sqlglot.dialects.spark
import sqlglot.dialects.sqlite
import sqlglot.dialects.tsql  # noqa: F401

from .analyze import Aggregate, AnalyzedQuery, JoinSpec, analyze
from .catalog import Catalog, ColumnSpec, QueryRefused, TableSpec
from .correlation import CorrelationBound, CorrelationSpec
from .plan import NoisePlan, plan_query
from .session import Result, Session, connect

__all__ = [
    "Aggregate",
    "AnalyzedQuery",
    "Catalog",
    "ColumnSpec",
    "CorrelationBound",
    "CorrelationSpec",
    "JoinSpec",
    "NoisePlan",
    "QueryRefused",
    "Result",
    "Session",
    "TableSpec",
    "analyze",
    "connect",
    "plan_query",
]
