"""The shape of a query kakeibo answers, and the :class:`AnalyzedQuery` an accepted one becomes.

:func:`parse_select` reads the analyst's text, in one of the SQL dialects of :data:`DIALECTS` (sqlglot's
names), as exactly one plain SELECT statement: T-SQL's ``SELECT TOP n`` and ``FETCH FIRST n ROWS ONLY``
are its LIMIT, and an ``OFFSET 0`` (as T-SQL writes before FETCH) skips nothing. The rest of the analysis
works on the parsed statement, and the engine statement is written from it, so a dialect changes how the
query is read, never what is computed from it. Subqueries, CTEs, set operations, window functions, query
parameters and clauses outside ``SELECT ... FROM ... [WHERE] [GROUP BY] [HAVING] [ORDER BY] [LIMIT]`` are
refused: they would break the contribution bounds the noise is
calibrated to (each is a transformation whose stability kakeibo does not track). The dataclasses describe
the accepted query, as the rewriter and the noise planner need it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import sqlglot
from sqlglot import exp
from sqlglot.errors import ParseError, SqlglotError

from ..accounting.overlap import Box
from .catalog import DIALECTS, ColumnSpec, ColumnType, QueryRefused, TableSpec
from .derived import Derived
from .predicates import numeric_literal

__all__ = [
    "DIALECTS",
    "Aggregate",
    "AggregateFunction",
    "AnalyzedQuery",
    "GroupExpression",
    "JoinSpec",
    "check_dialect",
    "parse_select",
]

AggregateFunction = Literal["count", "count_distinct_unit", "sum", "avg", "variance", "stddev", "quantile"]


@dataclass(frozen=True)
class Aggregate:
    """One aggregate of the SELECT list.

    ``alias`` is its output name (the SQL alias, or a generated ``count``, ``count_<col>``,
    ``count_distinct_<unit>``, ``sum_<col>``, ``avg_<col>``, ``variance_<col>`` / ``var_pop_<col>``,
    ``stddev_<col>`` / ``stddev_pop_<col>``, ``median_<col>``, ``min_<col>``, ``max_<col>`` or
    ``quantile_<col>_<q>``, made unique with a ``_2``, ``_3``... suffix). ``column`` is the lower-case
    catalog column (``None`` for COUNT(*) and COUNT(DISTINCT unit)). ``quantile`` is set for quantiles
    (0.5 for MEDIAN, 0 for MIN, 1 for MAX). ``sample`` tells VAR_SAMP/STDDEV_SAMP (the default of
    VARIANCE, VAR and STDDEV) from VAR_POP/STDDEV_POP.
    """

    alias: str
    function: AggregateFunction
    column: str | None
    quantile: float | None = None
    sample: bool = True


@dataclass(frozen=True)
class GroupExpression:
    """A GROUP BY key computed from columns (:mod:`kakeibo.sql.group_keys`).

    ``sql`` is the engine's expression (a CASE over total conditions with literal results, or a date
    truncation; identifiers as
    the WHERE clause writes them), ``type`` the key's catalog type, ``public_values`` every value the key
    can take when they follow from the query and the catalog alone (else ``None``: the keys found go through
    partition selection), and ``text`` the analyst's expression.
    ``not_null`` is a condition that holds exactly where the key is not NULL (``None``: it never is).
    """

    sql: exp.Expression
    type: ColumnType
    public_values: tuple[object, ...] | None
    text: str
    not_null: exp.Expression | None

    @property
    def key(self) -> tuple[str, str]:
        """What tells two GROUP BY keys apart (as a column's ``(table, column)``)."""
        return ("", self.sql.sql("duckdb"))


@dataclass(frozen=True)
class JoinSpec:
    """An inner equi-join of the sensitive table to a public table.

    ``left_column`` is the sensitive table's join column, ``right_column`` the public table's; ``alias``
    is the public table's alias in the query (``None`` when it has none).
    """

    table: TableSpec
    left_column: str
    right_column: str
    alias: str | None = None


@dataclass(frozen=True)
class AnalyzedQuery:
    """The structure of an accepted query, as the rewriter and the noise planner need it.

    * ``group_by``: grouping columns (lower case) in GROUP BY order; ``group_aliases`` holds the output name
      of each (its SQL alias, else the column name; a grouping column absent from the SELECT list keeps
      its column name and is not in ``output``); ``group_tables`` the catalog table each comes from (the
      public table of a join, or the sensitive table); ``group_expressions`` holds, per key, the
      :class:`GroupExpression` it is computed by (its ``group_by`` entry is then its output name), or
      ``None`` for a plain column (:meth:`group_spec` gives either).
    * ``output``: the output column names in SELECT order.
    * ``where``: the WHERE predicate with lower-case, quoted identifiers. Without a join its columns are
      unqualified; with a join each column is qualified by ``table_alias or table.name`` (sensitive table)
      or ``join.alias or join.table.name`` (public table).
    * ``having``: the HAVING predicate over output names only (aggregates written in HAVING are replaced
      by the output column of the same aggregate).
    * ``order_by``: ``(output name, descending)`` pairs; ``limit``: the LIMIT count.
    * ``dialect``: the SQL dialect ``sql`` was read in (one of :data:`DIALECTS`).
    * ``derived``: outputs computed from released aggregates (:mod:`kakeibo.sql.derived`); an aggregate
      they read that is not selected on its own is in ``aggregates`` but not in ``output`` (hidden).
    * ``where_box``: the region the WHERE clause selects, when it is a conjunction of comparisons of
      numeric columns of the sensitive table with numeric literals (``<``, ``<=``, ``>``, ``>=``, ``=``,
      ``BETWEEN``), for parallel composition (see :mod:`kakeibo.accounting.overlap`): ``unit="record"``
      for a row-level table, ``unit="user"`` when every column it constrains is constant per user (the
      privacy unit itself counts as such); otherwise ``None``. ``None`` also when there is no WHERE
      clause (the query covers the whole table) or the conjunction selects nothing.
    """

    sql: str
    table: TableSpec
    group_by: tuple[str, ...]
    aggregates: tuple[Aggregate, ...]
    output: tuple[str, ...]
    where: exp.Expression | None
    having: exp.Expression | None
    order_by: tuple[tuple[str, bool], ...]
    limit: int | None
    join: JoinSpec | None
    where_box: Box | None
    group_aliases: tuple[str, ...] = ()
    table_alias: str | None = None
    group_tables: tuple[str, ...] = ()
    derived: tuple[Derived, ...] = ()
    dialect: str = "duckdb"
    group_expressions: tuple[GroupExpression | None, ...] = ()

    def __post_init__(self) -> None:
        if not self.group_expressions:
            object.__setattr__(self, "group_expressions", (None,) * len(self.group_by))
        if not self.group_aliases and self.group_by:
            object.__setattr__(self, "group_aliases", self.group_by)
        if not self.group_tables and self.group_by:
            object.__setattr__(self, "group_tables", (self.table.name,) * len(self.group_by))
        if len({len(self.group_aliases), len(self.group_tables), len(self.group_expressions)}) != 1 or len(
            self.group_aliases
        ) != len(self.group_by):
            raise ValueError(
                "group_aliases, group_tables and group_expressions must have one entry per GROUP BY key."
            )

    def group_spec(self, i: int) -> ColumnSpec | GroupExpression:
        """The i-th GROUP BY key: its catalog column, or the expression it is computed by (both tell the
        key's ``type`` and ``public_values``)."""
        expression = self.group_expressions[i]
        if expression is not None:
            return expression
        owner = self.group_tables[i]
        table = self.join.table if self.join is not None and owner == self.join.table.name else self.table
        return table.column(self.group_by[i])

    def aggregate(self, alias: str) -> Aggregate:
        """The aggregate with output name ``alias``."""
        for agg in self.aggregates:
            if agg.alias == alias:
                return agg
        raise KeyError(alias)


_SELECT_CLAUSES = {
    "into": "SELECT ... INTO",
    "laterals": "LATERAL",
    "qualify": "QUALIFY",
    "windows": "WINDOW",
    "sample": "USING SAMPLE",
    "pivots": "PIVOT",
    "locks": "FOR UPDATE / FOR SHARE",
    "connect": "CONNECT BY",
    "prewhere": "PREWHERE",
    "distribute": "DISTRIBUTE BY",
    "sort": "SORT BY",
    "cluster": "CLUSTER BY",
    "settings": "SETTINGS",
    "format": "FORMAT",
    "options": "OPTION",
    "for_": "FOR",
    "hint": "query hint",
    "kind": "SELECT AS",
    "operation_modifiers": "SELECT modifier",
    "exclude": "EXCLUDE",
    "match": "MATCH_RECOGNIZE",
}
_ALLOWED_SELECT_ARGS = frozenset(
    {"expressions", "from_", "joins", "where", "group", "having", "order", "limit", "offset"}
)


def check_dialect(dialect: object) -> str:
    """``dialect`` as one of :data:`DIALECTS` (in any case), else :class:`QueryRefused`."""
    name = dialect.lower() if isinstance(dialect, str) else ""
    if name not in DIALECTS:
        raise QueryRefused(
            f"the SQL dialect {dialect!r} is not supported; use one of {', '.join(DIALECTS[:-1])} or "
            f"{DIALECTS[-1]}."
        )
    return name


def parse_select(sql: str, dialect: str) -> exp.Select:
    """``sql`` parsed as one SELECT statement whose clauses kakeibo knows, else :class:`QueryRefused`."""
    select = _statement(sql, check_dialect(dialect))
    _clauses(select)
    _global_checks(select)
    return select


def _statement(sql: str, dialect: str) -> exp.Select:
    try:
        parsed = sqlglot.parse(sql, dialect=dialect)
    except ParseError as exc:
        detail = exc.errors[0] if exc.errors else {}
        where = f" (line {detail.get('line')}, column {detail.get('col')})" if detail else ""
        raise QueryRefused(f"the query could not be parsed: {_parse_problem(detail)}{where}.") from None
    except SqlglotError as exc:
        first = str(exc).splitlines()[0].rstrip(".") if str(exc) else "syntax error"
        raise QueryRefused(f"the query could not be parsed: {first}.") from None
    statements = [s for s in parsed if s is not None]
    if not statements:
        raise QueryRefused("the query is empty; send one SELECT statement.")
    if len(statements) > 1:
        raise QueryRefused(
            f"the query holds {len(statements)} statements; send one SELECT statement at a time."
        )
    stmt = statements[0]
    if isinstance(stmt, exp.SetOperation):
        kind = type(stmt).__name__.upper()
        raise QueryRefused(f"{kind} is not supported; run each SELECT as its own query.")
    if isinstance(stmt, exp.Subquery):
        raise QueryRefused(
            "a parenthesised query is a subquery, which is not supported; remove the parentheses."
        )
    if not isinstance(stmt, exp.Select):
        raise QueryRefused(f"only SELECT queries are answered, not {_statement_kind(stmt)} statements.")
    return stmt


def _statement_kind(stmt: exp.Expr) -> str:
    if isinstance(stmt, exp.Command):
        return str(stmt.this).upper()
    return type(stmt).__name__.upper()


def _parse_problem(detail: dict[str, object]) -> str:
    """sqlglot's parse error in analyst terms (without its token and class dumps)."""
    description = str(detail.get("description") or "syntax error")
    if "missing for <class" in description:  # "Required keyword: 'this' missing for <class '...Where'>"
        part = description.rsplit(".", 1)[-1].strip("'>").upper()
        return f"the {part} part is incomplete"
    return description.split(" but got <Token")[0].split(". Line ")[0].rstrip(".")


def _clauses(select: exp.Select) -> None:
    if select.args.get("with_"):
        raise QueryRefused(
            "WITH (common table expressions) is not supported; write one SELECT over a catalog table."
        )
    distinct = select.args.get("distinct")
    if distinct:
        plain = [e.this if isinstance(e, exp.Alias) else e for e in select.expressions]
        if (
            distinct.args.get("on")
            or select.args.get("group")
            or not all(isinstance(e, exp.Column) for e in plain)
        ):
            raise QueryRefused(
                "SELECT DISTINCT is supported over plain columns only (a release of the keys, as GROUP BY "
                "without an aggregate); use GROUP BY with aggregates such as COUNT(*) otherwise."
            )
        select.set("distinct", None)  # SELECT DISTINCT a, b is GROUP BY a, b: the keys alone
        select.set("group", exp.Group(expressions=[e.copy() for e in plain]))
    offset = select.args.get("offset")
    if offset is not None and numeric_literal(offset.expression) != 0:  # OFFSET 0 skips nothing
        raise QueryRefused("OFFSET is not supported; use ORDER BY and LIMIT on the released rows.")
    for key, value in select.args.items():
        if value and key not in _ALLOWED_SELECT_ARGS:
            label = _SELECT_CLAUSES.get(key, key.rstrip("_").upper())
            raise QueryRefused(f"the {label} clause is not supported in private queries.")


def _global_checks(select: exp.Select) -> None:
    for node in select.walk():
        if node is select:
            continue
        if isinstance(node, (exp.Query, exp.Exists)):
            raise QueryRefused("subqueries are not supported; write one SELECT over a catalog table.")
        if isinstance(node, exp.Window):
            raise QueryRefused("window functions (OVER ...) are not supported in private queries.")
        if isinstance(node, (exp.Placeholder, exp.Parameter, exp.SessionParameter)):
            raise QueryRefused("query parameters are not supported; write the values into the query.")
        if isinstance(node, exp.Lambda):
            raise QueryRefused("lambda functions are not supported in private queries.")
