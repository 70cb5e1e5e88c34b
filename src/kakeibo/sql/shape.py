"""The shape of a query kakeibo answers, and the :class:`AnalyzedQuery` an accepted one becomes.

:func:`parse_select` reads the analyst's text, in one of the SQL dialects of :data:`DIALECTS` (sqlglot's
names), as exactly one plain SELECT statement: T-SQL's ``SELECT TOP n`` (in every dialect, as
SmartNoise's users write it) and ``FETCH FIRST n ROWS ONLY`` are its LIMIT, and an ``OFFSET 0`` (as
T-SQL writes before FETCH) skips nothing. The rest of the analysis works on the parsed statement, and
the engine statement is written from it, so a dialect changes how the query is read, never what is
computed from it. A subquery in FROM or one WITH is first read as the flat query it means
(:mod:`kakeibo.sql.nested`); other subqueries and CTEs, set operations, window functions, query parameters
and clauses outside ``SELECT ... FROM ... [WHERE] [GROUP BY] [HAVING] [ORDER BY] [LIMIT]`` are refused:
they would break the contribution bounds the noise is calibrated to (each is a transformation whose
stability kakeibo does not track). The dataclasses describe
the accepted query, as the rewriter and the noise planner need it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import sqlglot
from sqlglot import exp
from sqlglot.errors import ParseError, SqlglotError
from sqlglot.tokenizer_core import TokenType

from ..accounting.overlap import Box
from ..errors import ArgumentError
from .catalog import DIALECTS, ColumnSpec, ColumnType, QueryRefused, TableSpec
from .derived import Derived
from .nested import flatten
from .predicates import numeric_literal

__all__ = [
    "DIALECTS",
    "Aggregate",
    "AggregateFunction",
    "AnalyzedQuery",
    "GroupExpression",
    "JoinSpec",
    "check_dialect",
    "named_columns",
    "parse_select",
]

#: an aggregate function's name: a key of :data:`kakeibo.sql.aggregates.AGGREGATES`, the registry that says
#: everything about it (a new aggregate is an entry there, and no name here)
AggregateFunction = str


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
    """A table joined into the rows a query aggregates: ``table``, under ``alias`` (``None``: its name), ON
    its ``column`` = ``left_column`` of the table an earlier step joined as ``left_qualifier``.

    ``kind`` says why: ``"reference"``, a sensitive table along a reference the catalog declares;
    ``"public"``, a public table; ``"person"``, a table the query does not name, which kakeibo joins to
    reach the person the rows belong to (its alias is ``__person_<i>``).
    """

    table: TableSpec
    column: str
    left_qualifier: str
    left_column: str
    alias: str | None = None
    kind: Literal["reference", "public", "person"] = "public"

    @property
    def qualifier(self) -> str:
        """The name the statement knows the table by."""
        return self.alias or self.table.name


@dataclass(frozen=True)
class ValueColumn:
    """What an aggregate reads from each row (:mod:`kakeibo.sql.values`): ``spec`` is named as the
    aggregate's ``column`` and carries the bounds it is clamped to (the catalog's for a column; for an
    expression, the ones interval arithmetic derives from its columns' bounds); ``sql`` is the expression
    the engine computes, its columns written as WHERE writes them; ``text`` the analyst's expression
    (``""`` for a plain column)."""

    spec: ColumnSpec
    sql: exp.Expression
    text: str = ""


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
    * ``where``: the WHERE predicate (and the ON conditions that join no table) with lower-case, quoted
      identifiers. Without a join its columns are unqualified; with joins each column is qualified by its
      table's alias or name (``table_alias or table.name`` for ``table``, the first sensitive table).
    * ``joins``: the tables joined to ``table``, in the statement's order (:class:`JoinSpec`); ``person``
      the table of persons (``None``: each row is a person), ``unit`` the ``(qualifier, column)`` holding
      the privacy unit in the joined rows, ``grain`` the table whose rows the join results are, whose
      limits bound the query (:attr:`max_partitions`, :attr:`max_rows_per_partition`).
    * ``values``: what each aggregate's ``column`` reads per row, when it is not a column of ``table``
      (:meth:`value`).
    * ``having``: the HAVING predicate over output names only (aggregates written in HAVING are replaced
      by the output column of the same aggregate).
    * ``order_by``: ``(output name, descending)`` pairs; ``limit``: the LIMIT count.
    * ``terms``: HAVING operands and ORDER BY items computed from released columns (``n * 100 / 2``,
      ``CAST(educ AS INT)``), which kakeibo evaluates on the released table as hidden columns that
      ``having`` and ``order_by`` name (:meth:`~kakeibo.sql.outputs.Outputs.term`).
    * ``dialect``: the SQL dialect ``sql`` was read in (one of :data:`DIALECTS`).
    * ``derived``: outputs computed from released aggregates (:mod:`kakeibo.sql.derived`); an aggregate
      they read that is not selected on its own is in ``aggregates`` but not in ``output`` (hidden).
    * ``where_box``: the region the WHERE clause selects, when it is a conjunction of comparisons of
      numeric columns of sensitive tables with numeric literals (``<``, ``<=``, ``>``, ``>=``, ``=``,
      ``BETWEEN``), for parallel composition (see :mod:`kakeibo.accounting.overlap`): ``unit="record"``
      for a row-level table (each row is a person), ``unit="user"`` when the rows belong to a person and
      every column it constrains is constant per person: one that holds the person's key, or one declared
      ``user_constant`` (which the session checks against the engine); otherwise ``None``
      (:mod:`kakeibo.sql.region`). ``None`` also when there is no WHERE clause (the query covers the whole
      table) or the conjunction selects nothing.
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
    where_box: Box | None
    group_aliases: tuple[str, ...] = ()
    table_alias: str | None = None
    group_tables: tuple[str, ...] = ()
    derived: tuple[Derived, ...] = ()
    terms: tuple[Derived, ...] = ()
    dialect: str = "duckdb"
    group_expressions: tuple[GroupExpression | None, ...] = ()
    joins: tuple[JoinSpec, ...] = ()
    person: TableSpec | None = None
    unit: tuple[str, str] | None = None
    grain: TableSpec | None = None
    values: tuple[ValueColumn, ...] = ()

    def __post_init__(self) -> None:
        if self.grain is None:
            object.__setattr__(self, "grain", self.table)
        if self.person is None and self.table.privacy_unit is not None:
            object.__setattr__(self, "person", self.table)
            object.__setattr__(self, "unit", (self.table_alias or self.table.name, self.table.privacy_unit))
        if not self.group_expressions:
            object.__setattr__(self, "group_expressions", (None,) * len(self.group_by))
        if not self.group_aliases and self.group_by:
            object.__setattr__(self, "group_aliases", self.group_by)
        if not self.group_tables and self.group_by:
            object.__setattr__(self, "group_tables", (self.table.name,) * len(self.group_by))
        if len({len(self.group_aliases), len(self.group_tables), len(self.group_expressions)}) != 1 or len(
            self.group_aliases
        ) != len(self.group_by):
            raise ArgumentError(
                "group_aliases, group_tables and group_expressions must have one entry per GROUP BY key."
            )

    @property
    def dataset(self) -> str:
        """What the query's rows are about, the ledger's dataset for its charge: the table of persons (every
        table that references it is about the same people), else the queried table."""
        return (self.person or self.table).name

    @property
    def user_level(self) -> bool:
        """Whether the rows belong to persons with many rows (else each row is a person)."""
        return self.unit is not None

    @property
    def max_partitions(self) -> int:
        """L0: the most groups of one person the query keeps (the grain table's limit; 1 per row)."""
        assert self.grain is not None
        l0 = self.grain.max_partitions
        assert isinstance(l0, int), "limits are declared or chosen before planning (analyze, bounds)"
        return l0 if self.user_level else 1

    @property
    def auto_truncation(self) -> bool:
        """Whether each person's contribution to a group is truncated by the R2T race
        (:mod:`kakeibo.sql.truncation`): the grain table's ``max_rows_per_partition`` is ``"auto"``."""
        assert self.grain is not None
        return self.user_level and self.grain.auto_truncation

    @property
    def max_rows_per_partition(self) -> int:
        """kappa: the most rows of one person in one group the query keeps (the grain table's limit; 1, and
        unused but for the distinct users, under :attr:`auto_truncation`)."""
        assert self.grain is not None
        kappa = self.grain.max_rows_per_partition
        if not self.user_level or self.auto_truncation:
            return 1
        assert isinstance(kappa, int), "limits are declared or chosen before planning (analyze, bounds)"
        return kappa

    @property
    def tables(self) -> tuple[TableSpec, ...]:
        """Every table the statement reads: the query's and those kakeibo joins to reach the person."""
        return (self.table, *(join.table for join in self.joins))

    def table_spec(self, name: str) -> TableSpec:
        """The table called ``name`` among :attr:`tables`."""
        return next(table for table in self.tables if table.name == name)

    def value(self, name: str) -> ValueColumn:
        """What an aggregate's ``column`` reads from each row: a column, or an expression over columns."""
        for value in self.values:
            if value.spec.name == name:
                return value
        qualifier = (self.table_alias or self.table.name) if self.joins else None
        return ValueColumn(self.table.column(name), exp.column(name, table=qualifier, quoted=True))

    def group_spec(self, i: int) -> ColumnSpec | GroupExpression:
        """The i-th GROUP BY key: its catalog column, or the expression it is computed by (both tell the
        key's ``type`` and ``public_values``)."""
        expression = self.group_expressions[i]
        if expression is not None:
            return expression
        return self.table_spec(self.group_tables[i]).column(self.group_by[i])

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


def named_columns(query: AnalyzedQuery) -> frozenset[str] | None:
    """The lower-case names the query's text gives anything (columns, and with them tables and aliases),
    plus the keys its tables' references join on: a superset of the columns its statement reads; ``None``
    when a ``*`` other than COUNT's may read every column (the session checks the types of these,
    :meth:`~kakeibo.sql.session.Session._check_tables`).

    >>> from kakeibo.sql import Catalog, analyze
    >>> catalog = Catalog.from_dict({"tables": {"t": {"columns": {"a": "int", "b": "str"}}}})
    >>> sorted(named_columns(analyze("SELECT b, COUNT(*) AS n FROM t GROUP BY b", catalog)))
    ['b', 'n', 't']
    """
    try:  # read as parse_select read it (TOP n included)
        tree = sqlglot.parse_one(_top_as_limit(query.sql, query.dialect), read=query.dialect)
    except SqlglotError:  # the analysed text always parses; were it not to, every column is checked
        return None
    if any(not isinstance(star.parent, exp.Count) for star in tree.find_all(exp.Star)):
        return None
    keys = {reference.key for table in query.tables for reference in table.references}
    return frozenset({identifier.name.lower() for identifier in tree.find_all(exp.Identifier)} | keys)


def check_dialect(dialect: object) -> str:
    """``dialect`` as one of :data:`DIALECTS` (in any case), else :class:`QueryRefused`."""
    name = dialect.lower() if isinstance(dialect, str) else ""
    if name not in DIALECTS:
        raise QueryRefused(
            f"the SQL dialect {dialect!r} is not supported; use one of {', '.join(DIALECTS[:-1])} or "
            f"{DIALECTS[-1]}."
        )
    return name


def parse_select(sql: str, dialect: str, units: frozenset[str] = frozenset()) -> exp.Select:
    """``sql`` parsed as one SELECT statement whose clauses kakeibo knows, else :class:`QueryRefused`;
    a nested query flattened first (:func:`~kakeibo.sql.nested.flatten`, which reads ``units``, the
    columns that name a person)."""
    select = flatten(_statement(sql, check_dialect(dialect)), dialect, units)
    _clauses(select)
    _global_checks(select)
    return select


def _top_as_limit(sql: str, dialect: str) -> str:
    """``sql`` with T-SQL's ``SELECT [DISTINCT] TOP n`` of its outermost SELECT written as a ``LIMIT n`` at
    its end, for the dialects whose parser has no TOP (SmartNoise's and SQL Server users write it whatever
    the engine); ``sql`` itself otherwise, or when it has a LIMIT or FETCH of its own already.

    >>> _top_as_limit("SELECT TOP 5 educ, COUNT(*) AS n FROM t GROUP BY educ ORDER BY n;", "duckdb")
    'SELECT educ, COUNT(*) AS n FROM t GROUP BY educ ORDER BY n LIMIT 5'
    """
    if dialect == "tsql":  # its parser reads TOP itself
        return sql
    try:
        tokens = sqlglot.Dialect.get_or_raise(dialect).tokenize(sql)
    except SqlglotError:
        return sql
    depth, top = 0, None
    for i, token in enumerate(tokens):
        depth += (token.token_type == TokenType.L_PAREN) - (token.token_type == TokenType.R_PAREN)
        if depth or token.token_type != TokenType.SELECT or top is not None:
            if depth == 0 and top is not None and token.token_type in (TokenType.LIMIT, TokenType.FETCH):
                return sql
            continue
        at = i + 1 + (i + 1 < len(tokens) and tokens[i + 1].token_type == TokenType.DISTINCT)
        counted = at + 1 < len(tokens) and tokens[at + 1].token_type == TokenType.NUMBER
        plain = at + 2 >= len(tokens) or tokens[at + 2].text.upper() not in ("PERCENT", "WITH")
        if counted and plain and tokens[at].text.upper() == "TOP":
            top = (tokens[at].start, tokens[at + 1].end + 1, tokens[at + 1].text)
    if top is None:
        return sql
    start, end, count = top
    rest = sql[end:].lstrip().rstrip().rstrip(";").rstrip()
    return f"{sql[:start]}{rest} LIMIT {count}"


def _statement(sql: str, dialect: str) -> exp.Select:
    sql = _top_as_limit(sql, dialect)
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
