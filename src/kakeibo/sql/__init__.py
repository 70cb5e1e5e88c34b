"""Differentially private SQL: the catalog of sensitive tables and the analysis of analysts' queries.

:class:`Catalog` declares each table's privacy unit, contribution limits and column bounds;
:func:`analyze` checks a query against it and returns its :class:`AnalyzedQuery` structure, or raises
:class:`QueryRefused` with the reason -- before any data is read. :class:`CorrelationSpec` declares a graph
over a table's users, whose releases are then calibrated for Bayesian DP (:mod:`.correlation`).
"""

from __future__ import annotations

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
