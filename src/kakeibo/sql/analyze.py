"""Static analysis of an analyst's SQL query against the :class:`~kakeibo.sql.catalog.Catalog`.

:func:`analyze` parses one statement with sqlglot and accepts exactly one shape::

    SELECT <grouping columns>, <aggregates>
    FROM <sensitive table> [[INNER] JOIN <public table> ON a = b | USING (c)]
    [WHERE <deterministic predicate>] [GROUP BY <columns>] [HAVING <predicate over output columns>]
    [ORDER BY <output columns>] [LIMIT <n>]

The aggregates are COUNT(*), COUNT(column), COUNT(DISTINCT <privacy unit>), SUM, AVG, VARIANCE (VAR,
VAR_SAMP, VAR_POP), STDDEV (STDDEV_SAMP, STDDEV_POP), and quantiles: MEDIAN, QUANTILE(c, q),
QUANTILE_CONT / QUANTILE_DISC(c, q), PERCENTILE_CONT / PERCENTILE_DISC(q) WITHIN GROUP (ORDER BY c), MIN
(quantile 0) and MAX (quantile 1). Their arguments are plain columns of the sensitive table; SUM, AVG,
variances and quantiles need a column with clamping bounds in the catalog.

Everything else is refused with :class:`~kakeibo.sql.catalog.QueryRefused`, whose message says why in one
sentence, before any data is read: the analysis never touches the data, so a refusal costs no budget.
Why each shape is refused:

* raw rows (``SELECT *``, a column that is neither grouped nor aggregated) would publish records;
* aggregating or grouping by the privacy unit would publish per-person values;
* a sum over an unbounded column has unbounded sensitivity;
* subqueries, CTEs, set operations, window functions and joins between sensitive tables would break the
  contribution bounds the noise is calibrated to (each is a transformation whose stability kakeibo does
  not track);
* expressions around aggregates (``SUM(x) / COUNT(*)``) would combine noisy values in ways whose error is
  not reported -- AVG is the private way to get the ratio;
* WHERE runs inside the engine before contributions are bounded, so any deterministic predicate over the
  query's tables is a stable filter (one record in or out changes its output by at most that record).
  ``random()`` and friends are refused: they would tie the released rows to the engine's (not
  cryptographic) generator and make answers irreproducible; subqueries would read other data, and
  functions sqlglot does not know cannot be checked.

A JOIN to a public table is accepted as an inner equi-join on one column (not on the privacy unit) whose
two columns compare without a conversion. It may repeat a sensitive row once per matching public row, so on
a user-level table contribution bounding runs after the join; a row-level table has no unit to bound by, so
it may only be joined on a public column the catalog declares ``unique`` (the session checks that against
the engine). HAVING, ORDER BY and LIMIT act on the released (noisy) values only, so they may name output
columns only, and HAVING follows WHERE's totality rules (:mod:`kakeibo.sql.predicates`).
Identifiers are case-insensitive and come back in lower case.

>>> from kakeibo.sql import Catalog
>>> catalog = Catalog.from_dict({"tables": {"visits": {
...     "privacy_unit": "user_id", "max_partitions": 3, "max_rows_per_partition": 5,
...     "columns": {"user_id": "int", "category": "str",
...                 "amount": {"type": "float", "lower": 0, "upper": 100}}}}})
>>> q = analyze("SELECT category, COUNT(*) AS n, AVG(amount) FROM visits GROUP BY category", catalog)
>>> q.group_by, q.output
(('category',), ('category', 'n', 'avg_amount'))
>>> [(a.function, a.column) for a in q.aggregates]
[('count', None), ('avg', 'amount')]
>>> analyze("SELECT * FROM visits", catalog)  # doctest: +ELLIPSIS
Traceback (most recent call last):
...
kakeibo.sql.catalog.QueryRefused: SELECT * would return individual rows; select aggregates such as ...
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from fractions import Fraction
from typing import Literal, cast

import sqlglot
from sqlglot import exp
from sqlglot.errors import ParseError, SqlglotError

from ..accounting.overlap import Box, Interval
from .catalog import Catalog, ColumnSpec, QueryRefused, TableSpec
from .predicates import TotalPredicate, numeric_literal, strip

__all__ = ["Aggregate", "AggregateFunction", "AnalyzedQuery", "JoinSpec", "QueryRefused", "analyze"]

AggregateFunction = Literal["count", "count_distinct_unit", "sum", "avg", "variance", "stddev", "quantile"]

SUPPORTED_AGGREGATES = (
    "one of COUNT, COUNT(DISTINCT <privacy unit>), SUM, AVG, VARIANCE, STDDEV, MEDIAN, QUANTILE, MIN or MAX"
)


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
      public table of a join, or the sensitive table).
    * ``output``: the output column names in SELECT order.
    * ``where``: the WHERE predicate with lower-case, quoted identifiers. Without a join its columns are
      unqualified; with a join each column is qualified by ``table_alias or table.name`` (sensitive table)
      or ``join.alias or join.table.name`` (public table).
    * ``having``: the HAVING predicate over output names only (aggregates written in HAVING are replaced
      by the output column of the same aggregate).
    * ``order_by``: ``(output name, descending)`` pairs; ``limit``: the LIMIT count.
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

    def __post_init__(self) -> None:
        if not self.group_aliases and self.group_by:
            object.__setattr__(self, "group_aliases", self.group_by)
        if not self.group_tables and self.group_by:
            object.__setattr__(self, "group_tables", (self.table.name,) * len(self.group_by))
        if len(self.group_aliases) != len(self.group_by) or len(self.group_tables) != len(self.group_by):
            raise ValueError("group_aliases and group_tables must have one entry per GROUP BY column.")

    def aggregate(self, alias: str) -> Aggregate:
        """The aggregate with output name ``alias``."""
        for agg in self.aggregates:
            if agg.alias == alias:
                return agg
        raise KeyError(alias)


def analyze(sql: str, catalog: Catalog, *, dialect: str = "duckdb") -> AnalyzedQuery:
    """Check ``sql`` against ``catalog`` and return its structure; :class:`QueryRefused` if kakeibo cannot
    answer it privately (see the module docstring for what is accepted). No data is read.

    >>> from kakeibo.sql import Catalog
    >>> catalog = Catalog.from_dict({"tables": {"people": {"columns": {
    ...     "age": {"type": "int", "lower": 0, "upper": 120}, "city": "str"}}}})
    >>> q = analyze("SELECT city AS c, MEDIAN(age) FROM people WHERE age BETWEEN 18 AND 65 GROUP BY city",
    ...             catalog)
    >>> q.output, q.aggregates[0].quantile, str(q.where_box)
    (('c', 'median_age'), 0.5, 'age in [18, 65] [record-level]')
    >>> analyze("SELECT city, SUM(age) / COUNT(*) FROM people GROUP BY city", catalog)  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    kakeibo.sql.catalog.QueryRefused: SUM(age) / COUNT(*) combines aggregates ...; use AVG(column) ...
    """
    if not isinstance(sql, str):
        raise TypeError(f"the query must be a string, got {type(sql).__name__}.")
    if not isinstance(catalog, Catalog):
        raise TypeError(f"catalog must be a Catalog, got {type(catalog).__name__}.")
    return _Analyzer(sql, catalog, dialect).run()


# ---------------------------------------------------------------------------------------------- helpers


def _refuse(reason: str) -> QueryRefused:
    return QueryRefused(reason)


def _name(identifier: exp.Expr | str | None) -> str:
    if identifier is None:
        return ""
    if isinstance(identifier, str):
        return identifier.lower()
    return identifier.name.lower()


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
    {"expressions", "from_", "joins", "where", "group", "having", "order", "limit"}
)

_NONDETERMINISTIC = (exp.Rand, exp.Randn, exp.Randstr, exp.Uuid)
_NONDETERMINISTIC_NAMES = frozenset({"random", "setseed", "nextval", "currval", "gen_random_uuid", "uuid"})

_VALUE_AGGREGATES: dict[type[exp.Expr], tuple[AggregateFunction, bool]] = {
    exp.Sum: ("sum", True),
    exp.Avg: ("avg", True),
    exp.Variance: ("variance", True),
    exp.VariancePop: ("variance", False),
    exp.Stddev: ("stddev", True),
    exp.StddevSamp: ("stddev", True),
    exp.StddevPop: ("stddev", False),
}
_FIXED_QUANTILES: dict[type[exp.Expr], tuple[Fraction, str]] = {
    exp.Median: (Fraction(1, 2), "median"),
    exp.Min: (Fraction(0), "min"),
    exp.Max: (Fraction(1), "max"),
}


@dataclass(frozen=True)
class _Source:
    """A table of the FROM clause."""

    spec: TableSpec
    alias: str | None

    @property
    def qualifier(self) -> str:
        return self.alias or self.spec.name


@dataclass(frozen=True)
class _Ref:
    """A resolved column reference."""

    source: _Source
    column: ColumnSpec

    @property
    def key(self) -> tuple[str, str]:
        return (self.source.spec.name, self.column.name)


@dataclass(frozen=True)
class _AggSpec:
    """An aggregate before it gets its output name."""

    function: AggregateFunction
    column: str | None
    quantile: float | None
    sample: bool
    base_name: str

    @property
    def identity(self) -> tuple[object, ...]:
        return (self.function, self.column, self.quantile, self.sample)


def _is_aggregate_node(node: exp.Expr) -> bool:
    if isinstance(node, (exp.AggFunc, exp.WithinGroup, exp.Filter)):
        return True
    if isinstance(node, (exp.IgnoreNulls, exp.RespectNulls)):
        return _is_aggregate_node(node.this)
    return isinstance(node, exp.Anonymous) and _name(node.this) == "var"


def _contains_aggregate(node: exp.Expr) -> bool:
    return any(_is_aggregate_node(n) for n in node.walk())


def _sql(node: exp.Expr, dialect: str) -> str:
    try:
        return node.sql(dialect=dialect)
    except SqlglotError:  # pragma: no cover - sqlglot renders what it parsed
        return node.sql()


def _quantile_text(q: Fraction) -> str:
    text = f"{float(q):.6g}"
    return text.replace(".", "_").replace("-", "m")


# ------------------------------------------------------------------------------------------- analyzer


class _Analyzer:
    def __init__(self, sql: str, catalog: Catalog, dialect: str) -> None:
        self.sql = sql
        self.catalog = catalog
        self.dialect = dialect
        self.sources: list[_Source] = []
        self.private: _Source | None = None
        self.public: _Source | None = None
        self.using: str | None = None

    # -- entry ------------------------------------------------------------------------------------

    def run(self) -> AnalyzedQuery:
        select = self._statement()
        self._clauses(select)
        self._global_checks(select)
        self._from(select)
        assert self.private is not None
        join = self._join(select)

        items = self._select_items(select)
        group_refs = self._group_by(select, items)
        group_aliases, aggregates, output = self._outputs(items, group_refs)
        where = self._where(select)
        having = self._having(select, items, aggregates, group_refs, group_aliases, output)
        order_by = self._order_by(select, items, aggregates, group_refs, group_aliases, output)
        limit = self._limit(select)
        return AnalyzedQuery(
            sql=self.sql,
            table=self.private.spec,
            group_by=tuple(ref.column.name for ref in group_refs),
            aggregates=aggregates,
            output=output,
            where=where,
            having=having,
            order_by=order_by,
            limit=limit,
            join=join,
            where_box=self._where_box(where),
            group_aliases=group_aliases,
            table_alias=self.private.alias,
            group_tables=tuple(ref.source.spec.name for ref in group_refs),
        )

    # -- statement and clauses ---------------------------------------------------------------------

    def _statement(self) -> exp.Select:
        try:
            parsed = sqlglot.parse(self.sql, dialect=self.dialect)
        except ParseError as exc:
            detail = exc.errors[0] if exc.errors else {}
            where = f" (line {detail.get('line')}, column {detail.get('col')})" if detail else ""
            raise _refuse(f"the query could not be parsed: {_parse_problem(detail)}{where}.") from None
        except SqlglotError as exc:
            first = str(exc).splitlines()[0].rstrip(".") if str(exc) else "syntax error"
            raise _refuse(f"the query could not be parsed: {first}.") from None
        statements = [s for s in parsed if s is not None]
        if not statements:
            raise _refuse("the query is empty; send one SELECT statement.")
        if len(statements) > 1:
            raise _refuse(
                f"the query holds {len(statements)} statements; send one SELECT statement at a time."
            )
        stmt = statements[0]
        if isinstance(stmt, exp.SetOperation):
            kind = type(stmt).__name__.upper()
            raise _refuse(f"{kind} is not supported; run each SELECT as its own query.")
        if isinstance(stmt, exp.Subquery):
            raise _refuse(
                "a parenthesised query is a subquery, which is not supported; remove the parentheses."
            )
        if not isinstance(stmt, exp.Select):
            raise _refuse(f"only SELECT queries are answered, not {self._statement_kind(stmt)} statements.")
        return stmt

    @staticmethod
    def _statement_kind(stmt: exp.Expr) -> str:
        if isinstance(stmt, exp.Command):
            return str(stmt.this).upper()
        return type(stmt).__name__.upper()

    def _clauses(self, select: exp.Select) -> None:
        if select.args.get("with_"):
            raise _refuse(
                "WITH (common table expressions) is not supported; write one SELECT over a catalog table."
            )
        if select.args.get("distinct"):
            raise _refuse(
                "SELECT DISTINCT is not supported, since it would list raw values; use GROUP BY with an "
                "aggregate such as COUNT(*)."
            )
        if select.args.get("offset"):
            raise _refuse("OFFSET is not supported; use ORDER BY and LIMIT on the released rows.")
        for key, value in select.args.items():
            if value and key not in _ALLOWED_SELECT_ARGS:
                label = _SELECT_CLAUSES.get(key, key.rstrip("_").upper())
                raise _refuse(f"the {label} clause is not supported in private queries.")

    def _global_checks(self, select: exp.Select) -> None:
        for node in select.walk():
            if node is select:
                continue
            if isinstance(node, (exp.Query, exp.Exists)):
                raise _refuse("subqueries are not supported; write one SELECT over a catalog table.")
            if isinstance(node, exp.Window):
                raise _refuse("window functions (OVER ...) are not supported in private queries.")
            if isinstance(node, (exp.Placeholder, exp.Parameter, exp.SessionParameter)):
                raise _refuse("query parameters are not supported; write the values into the query.")
            if isinstance(node, exp.Lambda):
                raise _refuse("lambda functions are not supported in private queries.")

    # -- tables ---------------------------------------------------------------------------------------

    def _table(self, node: exp.Expr) -> _Source:
        if not isinstance(node, exp.Table) or not isinstance(node.this, exp.Identifier):
            raise _refuse(
                "reading files, table functions or VALUES in FROM is not allowed; "
                "query a catalog table by name."
            )
        name = node.name
        if node.args.get("db") or node.args.get("catalog"):
            raise _refuse(
                f"refer to table {name.lower()!r} by its catalog name alone, without a schema or database."
            )
        if node.args.get("sample"):
            raise _refuse("TABLESAMPLE is not supported; sampling is not part of the privacy analysis.")
        for key, value in node.args.items():
            if value and key not in ("this", "alias"):
                raise _refuse(
                    f"table modifiers such as {_sql(node, self.dialect)} are not supported; name the table "
                    "alone."
                )
        if node.this.quoted and any(ch in name for ch in "./\\"):
            raise _refuse(f"reading files such as {name!r} is not allowed; query a catalog table by name.")
        spec = self.catalog.table(name)
        alias_node = node.args.get("alias")
        alias: str | None = None
        if alias_node is not None:
            if alias_node.args.get("columns"):
                raise _refuse(
                    f"column aliases on table {spec.name} are not supported; alias columns in SELECT."
                )
            alias = _name(alias_node.this) or None
        return _Source(spec, alias)

    def _from(self, select: exp.Select) -> None:
        from_ = select.args.get("from_")
        if from_ is None:
            raise _refuse("the query has no FROM clause; name a catalog table to aggregate.")
        self.sources.append(self._table(from_.this))
        for join in select.args.get("joins") or []:
            self.sources.append(self._table(join.this))
        if len(self.sources) > 2:
            raise _refuse("at most one JOIN (to a public table) is supported.")
        names = [s.spec.name for s in self.sources]
        if len(set(names)) != len(names):
            raise _refuse(f"table {names[0]} appears twice; self-joins are not supported.")
        qualifiers = [s.qualifier for s in self.sources]
        if len(set(qualifiers)) != len(qualifiers):
            raise _refuse(
                f"two tables of the query go by the name {qualifiers[0]!r}; give them distinct aliases."
            )
        private = [s for s in self.sources if not s.spec.public]
        if not private:
            raise _refuse(
                f"the query reads only public data ({', '.join(names)}); private queries must aggregate a "
                "sensitive table."
            )
        if len(private) > 1:
            raise _refuse(
                f"joining two sensitive tables ({private[0].spec.name} and {private[1].spec.name}) is not "
                "supported; JOIN only to public tables."
            )
        self.private = private[0]
        publics = [s for s in self.sources if s.spec.public]
        self.public = publics[0] if publics else None

    def _join(self, select: exp.Select) -> JoinSpec | None:
        joins = select.args.get("joins") or []
        if not joins:
            return None
        join = joins[0]
        assert self.private is not None and self.public is not None
        private, public = self.private, self.public
        method, kind, side = (_name(join.args.get(k)) for k in ("method", "kind", "side"))
        label = " ".join(x.upper() for x in (method, side, kind) if x)
        if method or side or kind not in ("", "inner"):
            raise _refuse(f"{label} JOIN is not supported; use an inner JOIN ... ON a = b to a public table.")
        for key, value in join.args.items():
            if value and key not in ("this", "on", "using", "kind"):
                raise _refuse(f"the JOIN modifier {key.rstrip('_').upper()} is not supported.")
        using = join.args.get("using")
        on = join.args.get("on")
        if using:
            if len(using) != 1:
                raise _refuse("JOIN ... USING must name exactly one column.")
            column = _name(using[0])
            for source in (private, public):
                if not source.spec.has_column(column):
                    raise _refuse(f"the JOIN column {column!r} is not a column of table {source.spec.name}.")
            self.using = column
            left, right = column, column
        elif on is not None:
            condition = strip(on)
            if not (
                isinstance(condition, exp.EQ)
                and isinstance(strip(condition.this), exp.Column)
                and isinstance(strip(condition.expression), exp.Column)
            ):
                raise _refuse(
                    f"the JOIN condition must be a single equality between a column of {private.spec.name} "
                    f"and a column of {public.spec.name}, such as ON a = b."
                )
            sides = [strip(condition.this), strip(condition.expression)]
            refs = [self._resolve(side) for side in sides if isinstance(side, exp.Column)]
            by_table = {ref.source.spec.name: ref for ref in refs}
            if set(by_table) != {private.spec.name, public.spec.name}:
                raise _refuse(
                    f"the JOIN condition must compare a column of {private.spec.name} with a column of "
                    f"{public.spec.name}."
                )
            left, right = by_table[private.spec.name].column.name, by_table[public.spec.name].column.name
        else:
            raise _refuse("a JOIN needs an ON or USING condition; cross joins are not supported.")
        pair = exp.EQ(
            this=exp.column(left, table=private.qualifier),
            expression=exp.column(right, table=public.qualifier),
        )
        self._condition("JOIN ... ON", pair)  # the two columns compare without a row-by-row conversion
        if private.spec.privacy_unit is None and not public.spec.column(right).unique:
            raise _refuse(
                f"table {private.spec.name} has row-level privacy, so a join may not repeat its rows: join "
                f"on a column the catalog declares unique in {public.spec.name} (unique = true), not {right}."
            )
        if left == private.spec.privacy_unit:
            raise _refuse(
                f"joining on the privacy unit {left} is not supported, since it would attach public data to "
                "individual users."
            )
        return JoinSpec(public.spec, left, right, public.alias)

    # -- columns --------------------------------------------------------------------------------------

    def _resolve(self, column: exp.Column) -> _Ref:
        if isinstance(column.this, exp.Star):
            raise _refuse(
                "SELECT * would return individual rows; select aggregates such as COUNT(*) or AVG(column), "
                "grouped by columns."
            )
        name = column.name.lower()
        if column.args.get("db") or column.args.get("catalog"):
            raise _refuse(f"the column reference {_sql(column, self.dialect)} has too many qualifiers.")
        qualifier = _name(column.args.get("table"))
        if qualifier:
            for source in self.sources:
                if source.qualifier == qualifier:
                    return _Ref(source, source.spec.column(name))
            raise _refuse(f"the column {qualifier}.{name} names an unknown table or alias {qualifier!r}.")
        holders = [s for s in self.sources if s.spec.has_column(name)]
        if len(holders) == 1:
            return _Ref(holders[0], holders[0].spec.column(name))
        if not holders:
            if len(self.sources) == 1:
                raise _refuse(f"table {self.sources[0].spec.name} has no column {name!r}.")
            raise _refuse(f"no table of the query has a column {name!r}.")
        if name == self.using and self.private is not None:
            return _Ref(self.private, self.private.spec.column(name))
        options = " or ".join(f"{s.qualifier}.{name}" for s in holders)
        raise _refuse(f"the column {name!r} is ambiguous; write {options}.")

    def _columns(self, node: exp.Expr) -> Iterator[exp.Column]:
        for n in node.walk():
            if isinstance(n, exp.Column):
                yield n

    # -- SELECT list ----------------------------------------------------------------------------------

    def _select_items(self, select: exp.Select) -> list[tuple[str | None, _Ref | _AggSpec, exp.Expr]]:
        """Each SELECT item as (alias, grouping-column reference or aggregate, the expression)."""
        items: list[tuple[str | None, _Ref | _AggSpec, exp.Expr]] = []
        for expression in select.expressions:
            alias: str | None = None
            inner = expression
            if isinstance(expression, exp.Alias):
                alias = _name(expression.args.get("alias")) or None
                inner = expression.this
            if isinstance(inner, exp.Star) or (
                isinstance(inner, exp.Column) and isinstance(inner.this, exp.Star)
            ):
                raise _refuse(
                    "SELECT * would return individual rows; select aggregates such as COUNT(*) or "
                    "AVG(column), grouped by columns."
                )
            if isinstance(inner, exp.Columns):
                raise _refuse("COLUMNS(...) would return individual rows; name the aggregates one by one.")
            if isinstance(inner, exp.Column):
                items.append((alias, self._resolve(inner), inner))
            elif _is_aggregate_node(inner):
                items.append((alias, self._aggregate(inner), inner))
            elif _contains_aggregate(inner):
                raise _refuse(
                    f"{_sql(inner, self.dialect)} combines aggregates in an expression, which is not "
                    "supported; use AVG(column) for a mean, or select each aggregate on its own."
                )
            elif isinstance(inner, exp.Anonymous):
                raise _refuse(
                    f"the function {self._typed_name(inner)} is not supported; use {SUPPORTED_AGGREGATES}."
                )
            elif any(True for _ in self._columns(inner)):
                raise _refuse(
                    f"the output {_sql(inner, self.dialect)} is an expression over columns; select plain "
                    "grouping columns and aggregates only."
                )
            else:
                raise _refuse(
                    f"the constant output {_sql(inner, self.dialect)} is not supported; select grouping "
                    "columns and aggregates only."
                )
        return items

    def _aggregate(self, node: exp.Expr) -> _AggSpec:
        """Recognise one aggregate call (see the module docstring) or refuse it."""
        if isinstance(node, (exp.IgnoreNulls, exp.RespectNulls)):
            inner = self._aggregate(node.this)  # refuses an unsupported aggregate by its own name
            raise _refuse(
                f"{inner.function.upper()} with IGNORE NULLS or RESPECT NULLS is not supported; aggregates "
                "skip NULLs already."
            )
        if isinstance(node, exp.WithinGroup):
            return self._within_group(node)
        text = _sql(node, self.dialect)
        if isinstance(node, exp.Filter):
            raise _refuse(f"{text} uses FILTER, which is not supported; move the condition into WHERE.")
        if isinstance(node, exp.Count):
            return self._count(node, text)
        if isinstance(node, exp.Anonymous):  # VAR(x)
            args = node.expressions
            if len(args) != 1:
                raise _refuse(f"{text}: VAR takes exactly one column.")
            column = self._value_column(args[0], "VAR", text)
            return _AggSpec("variance", column, None, True, f"variance_{column}")
        kind = type(node)
        if kind in _VALUE_AGGREGATES:
            function, sample = _VALUE_AGGREGATES[kind]
            self._only_this(node, text)
            column = self._value_column(node.this, function.upper(), text)
            prefix: str = function
            if function in ("variance", "stddev") and not sample:
                prefix = "var_pop" if function == "variance" else "stddev_pop"
            return _AggSpec(function, column, None, sample, f"{prefix}_{column}")
        if kind in _FIXED_QUANTILES:
            q, label = _FIXED_QUANTILES[kind]
            self._only_this(node, text)
            column = self._value_column(node.this, label.upper(), text)
            return _AggSpec("quantile", column, float(q), True, f"{label}_{column}")
        if kind is exp.Quantile:
            return self._quantile(node.this, node.args.get("quantile"), text)
        if kind in (exp.PercentileCont, exp.PercentileDisc):
            if not isinstance(strip(node.this), exp.Column) and node.args.get("expression") is None:
                raise _refuse(f"{self._typed_name(node)}(q) needs WITHIN GROUP (ORDER BY column).")
            return self._quantile(node.this, node.args.get("expression"), text)
        raise _refuse(f"the aggregate {self._typed_name(node)} is not supported; use {SUPPORTED_AGGREGATES}.")

    def _typed_name(self, node: exp.Expr) -> str:
        """The function name as the analyst typed it (sqlglot renames some, e.g. STRING_AGG)."""
        meta = node.meta if isinstance(node, exp.Expression) else {}
        start, end = meta.get("start"), meta.get("end")
        if isinstance(start, int) and isinstance(end, int) and 0 <= start <= end < len(self.sql):
            typed = self.sql[start : end + 1]
            if typed.replace("_", "").isalnum():
                return typed.upper()
        if isinstance(node, exp.Anonymous):
            return _name(node.this).upper()
        if isinstance(node, exp.Func):
            return node.sql_name()
        return type(node).__name__.upper()

    def _only_this(self, node: exp.Expr, text: str) -> None:
        extra = [key for key, value in node.args.items() if value and key != "this"]
        if extra:
            raise _refuse(f"{text} takes exactly one column argument.")

    def _count(self, node: exp.Count, text: str) -> _AggSpec:
        arg = node.this
        extra = [key for key, value in node.args.items() if value and key not in ("this", "big_int")]
        if extra or node.expressions:
            raise _refuse(f"{text} takes exactly one argument: *, a column or DISTINCT {self._unit_hint()}.")
        if arg is None or isinstance(arg, exp.Star):
            return _AggSpec("count", None, None, True, "count")
        arg = strip(arg)
        if isinstance(arg, exp.Literal):
            return _AggSpec("count", None, None, True, "count")
        assert self.private is not None
        table = self.private.spec
        if isinstance(arg, exp.Distinct):
            if table.privacy_unit is None:
                raise _refuse(
                    f"{text} is not supported: table {table.name} has row-level privacy, so "
                    "COUNT(DISTINCT ...) cannot be bounded; use COUNT(*)."
                )
            targets = arg.expressions
            if len(targets) != 1:
                listed = ", ".join(_sql(t, self.dialect) for t in targets)
                raise _refuse(
                    f"COUNT(DISTINCT {listed}) is not supported; COUNT(DISTINCT ...) is only available for "
                    f"the privacy unit, as COUNT(DISTINCT {table.privacy_unit})."
                )
            target = strip(targets[0])
            if isinstance(target, exp.Column):
                ref = self._resolve(target)
                if ref.source is self.private and ref.column.name == table.privacy_unit:
                    return _AggSpec(
                        "count_distinct_unit", None, None, True, f"count_distinct_{ref.column.name}"
                    )
            raise _refuse(
                f"{text} is not supported; COUNT(DISTINCT ...) is only available for the privacy unit "
                f"{table.privacy_unit}, as COUNT(DISTINCT {table.privacy_unit})."
            )
        if not isinstance(arg, exp.Column):
            raise _refuse(f"{text} is not supported; aggregate arguments must be plain columns.")
        ref = self._resolve(arg)
        self._private_column(ref, text)
        if ref.column.name == table.privacy_unit:
            raise _refuse(
                f"{text} aggregates the privacy unit; use COUNT(*) to count rows or "
                f"COUNT(DISTINCT {table.privacy_unit}) to count users."
            )
        return _AggSpec("count", ref.column.name, None, True, f"count_{ref.column.name}")

    def _unit_hint(self) -> str:
        assert self.private is not None
        return self.private.spec.privacy_unit or "<privacy unit>"

    def _private_column(self, ref: _Ref, text: str) -> None:
        if ref.source is not self.private:
            raise _refuse(
                f"{text} aggregates a column of the public table {ref.source.spec.name}, which is not "
                "supported; aggregate columns of the sensitive table."
            )

    def _value_column(self, arg: exp.Expr | None, function: str, text: str) -> str:
        """The bounded numeric column a SUM/AVG/variance/quantile reads, or a refusal."""
        if arg is None:
            raise _refuse(f"{text} needs a column argument.")
        arg = strip(arg)
        if isinstance(arg, exp.Distinct):
            raise _refuse(
                f"{text} is not supported; DISTINCT inside an aggregate is only available as COUNT(DISTINCT "
                f"{self._unit_hint()})."
            )
        if _contains_aggregate(arg):
            raise _refuse(f"{text} nests one aggregate inside another, which is not supported.")
        if not isinstance(arg, exp.Column):
            raise _refuse(
                f"{text} is not supported; aggregate arguments must be plain columns (move conditions into "
                "WHERE)."
            )
        ref = self._resolve(arg)
        self._private_column(ref, text)
        assert self.private is not None
        table = self.private.spec
        spec = ref.column
        if spec.name == table.privacy_unit:
            raise _refuse(
                f"{text} aggregates the privacy unit {spec.name}, which would reveal identifiers; use "
                f"COUNT(DISTINCT {spec.name}) to count users."
            )
        if spec.type not in ("int", "float"):
            raise _refuse(f"{text} needs a numeric column, but {spec.name} has type {spec.type}.")
        if not spec.bounded:
            raise _refuse(
                f"column {spec.name} has no clamping bounds in the catalog, so {function} over it has "
                "unbounded sensitivity; the data owner must declare lower and upper bounds."
            )
        return spec.name

    def _quantile(self, column: exp.Expr | None, q_node: exp.Expr | None, text: str) -> _AggSpec:
        q = self._quantile_value(q_node, text)
        name = self._value_column(column, "a quantile", text)
        return _AggSpec("quantile", name, float(q), True, f"quantile_{name}_{_quantile_text(q)}")

    def _quantile_value(self, q_node: exp.Expr | None, text: str) -> Fraction:
        if q_node is None:
            raise _refuse(f"{text} needs a quantile between 0 and 1.")
        if isinstance(strip(q_node), (exp.Array, exp.Tuple)):
            raise _refuse(f"{text} asks for several quantiles; write one aggregate per quantile.")
        q = numeric_literal(q_node)
        if q is None or not 0 <= q <= 1:
            raise _refuse(f"{text}: the quantile must be a number between 0 and 1.")
        return q

    def _within_group(self, node: exp.WithinGroup) -> _AggSpec:
        func = node.this
        order = node.args.get("expression")
        name = self._typed_name(func)
        if not isinstance(func, (exp.PercentileCont, exp.PercentileDisc)) or func.args.get("expression"):
            raise _refuse(f"{name} ... WITHIN GROUP is not supported; use PERCENTILE_CONT(q) WITHIN GROUP.")
        keys = order.expressions if isinstance(order, exp.Order) else []
        arg = _sql(func.this, self.dialect) if func.this is not None else ""
        text = f"{name}({arg}) WITHIN GROUP (ORDER BY {', '.join(_sql(k, self.dialect) for k in keys)})"
        if len(keys) != 1:
            raise _refuse(f"{text} must order by exactly one column.")
        ordered = keys[0]
        q = self._quantile_value(func.this, text)
        if ordered.args.get("desc"):
            q = 1 - q
        name = self._value_column(ordered.this, "a quantile", text)
        return _AggSpec("quantile", name, float(q), True, f"quantile_{name}_{_quantile_text(q)}")

    # -- GROUP BY -------------------------------------------------------------------------------------

    def _group_by(
        self, select: exp.Select, items: list[tuple[str | None, _Ref | _AggSpec, exp.Expr]]
    ) -> list[_Ref]:
        group = select.args.get("group")
        refs: list[_Ref] = []
        if group is not None:
            for key in ("grouping_sets", "cube", "rollup", "totals"):
                if group.args.get(key):
                    raise _refuse(
                        "GROUPING SETS, ROLLUP and CUBE are not supported; run one query per grouping."
                    )
            if group.args.get("all"):
                refs = [kind for _, kind, _ in items if isinstance(kind, _Ref)]
            for expression in group.expressions:
                if isinstance(expression, (exp.Rollup, exp.Cube, exp.GroupingSets)):
                    raise _refuse(
                        "GROUPING SETS, ROLLUP and CUBE are not supported; run one query per grouping."
                    )
                refs.append(self._group_item(expression, items))
        seen: set[tuple[str, str]] = set()
        assert self.private is not None
        table = self.private.spec
        for ref in refs:
            if ref.key in seen:
                raise _refuse(f"GROUP BY lists {ref.column.name} twice.")
            seen.add(ref.key)
            if ref.source is self.private:
                if ref.column.name == table.privacy_unit:
                    raise _refuse(
                        f"grouping by the privacy unit {ref.column.name} would release one group per user; "
                        "group by other columns."
                    )
                if ref.column.type == "float" and ref.column.public_values is None:
                    raise _refuse(
                        f"grouping by the float column {ref.column.name} is not supported, since nearly "
                        "every value would be its own group; group by a coarser column or declare "
                        "public_values."
                    )
        selected: set[tuple[str, str]] = set()
        for _, kind, expression in items:
            if not isinstance(kind, _Ref):
                continue
            if kind.key not in seen:
                raise _refuse(
                    f"selecting {_sql(expression, self.dialect)} without aggregating it would reveal "
                    "individual rows; add it to GROUP BY or wrap it in an aggregate such as COUNT or AVG."
                )
            if kind.key in selected:
                raise _refuse(f"the grouping column {kind.column.name} is selected twice.")
            selected.add(kind.key)
        if not any(isinstance(kind, _AggSpec) for _, kind, _ in items):
            raise _refuse(
                "the query computes no aggregate; kakeibo releases aggregates only, so add one such as "
                "COUNT(*)."
            )
        return refs

    def _group_item(
        self, expression: exp.Expr, items: list[tuple[str | None, _Ref | _AggSpec, exp.Expr]]
    ) -> _Ref:
        node = strip(expression)
        text = _sql(node, self.dialect)
        if isinstance(node, exp.Literal) and not node.is_string:
            position = numeric_literal(node)
            if position is None or position.denominator != 1 or not 1 <= position <= len(items):
                raise _refuse(f"GROUP BY {text} does not name a column of the SELECT list.")
            kind = items[int(position) - 1][1]
            if not isinstance(kind, _Ref):
                raise _refuse(f"GROUP BY {text} refers to an aggregate; group by plain columns only.")
            return kind
        if isinstance(node, exp.Column):
            name = node.name.lower()
            if not node.args.get("table") and not any(s.spec.has_column(name) for s in self.sources):
                for alias, kind, _ in items:
                    if alias == name:
                        if isinstance(kind, _Ref):
                            return kind
                        raise _refuse(f"GROUP BY {name} refers to an aggregate; group by plain columns only.")
            return self._resolve(node)
        if _contains_aggregate(node):
            raise _refuse(f"GROUP BY {text} groups by an aggregate; group by plain columns only.")
        raise _refuse(f"GROUP BY {text} is an expression; GROUP BY accepts plain columns only.")

    # -- output names ---------------------------------------------------------------------------------

    def _outputs(
        self, items: list[tuple[str | None, _Ref | _AggSpec, exp.Expr]], group_refs: list[_Ref]
    ) -> tuple[tuple[str, ...], tuple[Aggregate, ...], tuple[str, ...]]:
        names: list[str | None] = []
        taken: set[str] = set()
        for alias, kind, _ in items:
            name = alias if alias is not None else (kind.column.name if isinstance(kind, _Ref) else None)
            if name is not None:
                if name in taken:
                    raise _refuse(
                        f"the output name {name!r} is used twice; give each output column its own alias."
                    )
                taken.add(name)
            names.append(name)
        selected = {kind.key for _, kind, _ in items if isinstance(kind, _Ref)}
        for ref in group_refs:
            if ref.key not in selected and ref.column.name in taken:
                raise _refuse(
                    f"the output name {ref.column.name!r} is also a grouping column that is not selected; "
                    "choose another alias."
                )
            taken.add(ref.column.name)
        aggregates: list[Aggregate] = []
        for i, (_, kind, _) in enumerate(items):
            if not isinstance(kind, _AggSpec):
                continue
            name = names[i]
            if name is None:
                name, suffix = kind.base_name, 2
                while name in taken:
                    name, suffix = f"{kind.base_name}_{suffix}", suffix + 1
                taken.add(name)
                names[i] = name
            aggregates.append(Aggregate(name, kind.function, kind.column, kind.quantile, kind.sample))
        group_aliases = []
        for ref in group_refs:
            alias = ref.column.name
            for i, (_, kind, _) in enumerate(items):
                if isinstance(kind, _Ref) and kind.key == ref.key:
                    alias = names[i] or alias
            group_aliases.append(alias)
        output = tuple(name for name in names if name is not None)
        return tuple(group_aliases), tuple(aggregates), output

    # -- WHERE ----------------------------------------------------------------------------------------

    def _where(self, select: exp.Select) -> exp.Expression | None:
        where = select.args.get("where")
        if where is None:
            return None
        predicate = where.this
        for node in predicate.walk():
            if _is_aggregate_node(node):
                raise _refuse(
                    "aggregates are not allowed in WHERE; filter released results with HAVING on an "
                    "output column."
                )
            self._scalar(node, "WHERE")
        predicate = self._condition("WHERE", predicate)
        qualify = self.public is not None

        def rewrite(node: exp.Expr) -> exp.Expr:
            if isinstance(node, exp.Column):
                ref = self._resolve(node)
                table = ref.source.qualifier if qualify else None
                return exp.column(ref.column.name, table=table, quoted=True)
            return node

        return cast(exp.Expression, predicate.transform(rewrite))

    def _scalar(self, node: exp.Expr, clause: str) -> None:
        """Refuse what a filter may not contain: randomness, unknown functions, star expansions."""
        self._deterministic(node, clause)
        if isinstance(node, exp.Anonymous):
            raise _refuse(
                f"the function {_name(node.this)}() is unknown to kakeibo's query checker, so it "
                f"cannot be used in {clause}."
            )
        if isinstance(node, (exp.Star, exp.Columns)):
            raise _refuse(f"* and COLUMNS(...) are not supported in {clause}; name the columns.")

    def _condition(self, clause: str, predicate: exp.Expr) -> exp.Expression:
        """``predicate`` checked total over the query's tables, literals in their engine-exact form
        (:mod:`kakeibo.sql.predicates`)."""
        return TotalPredicate(clause, lambda c: self._resolve(c).column.type, self.dialect).check(predicate)

    def _deterministic(self, node: exp.Expr, clause: str) -> None:
        if isinstance(node, _NONDETERMINISTIC) or (
            isinstance(node, exp.Anonymous) and _name(node.this) in _NONDETERMINISTIC_NAMES
        ):
            raise _refuse(
                f"{_sql(node, self.dialect)} is non-deterministic and is not allowed in {clause}; "
                "filters must give the same rows every time."
            )

    def _where_box(self, where: exp.Expression | None) -> Box | None:
        """The region of the checked WHERE predicate (its literals are the values the engine compares)."""
        assert self.private is not None
        table = self.private.spec
        if where is None:
            return None
        conjuncts: list[exp.Expr] = []
        stack = [where]
        while stack:
            node = strip(stack.pop())
            if isinstance(node, exp.And):
                stack.extend([node.expression, node.this])
            else:
                conjuncts.append(node)
        # per column: [lo, lo_closed, hi, hi_closed] with None for unbounded
        ranges: dict[str, list[object]] = {}
        for node in conjuncts:
            found = self._comparison(node)
            if found is None:
                return None
            ref, lo, lo_closed, hi, hi_closed = found
            if ref.source is not self.private or ref.column.type not in ("int", "float"):
                return None
            current = ranges.setdefault(ref.column.name, [None, True, None, True])
            _tighten(current, lo, lo_closed, hi, hi_closed)
        if table.privacy_unit is None:
            unit: Literal["record", "user"] = "record"
        elif all(table.column(c).user_constant or c == table.privacy_unit for c in ranges):
            unit = "user"
        else:
            return None
        try:
            bounds = {
                column: Interval(_frac(lo), _frac(hi), lo_closed=bool(lo_closed), hi_closed=bool(hi_closed))
                for column, (lo, lo_closed, hi, hi_closed) in ranges.items()
            }
        except ValueError:  # the conjunction selects nothing
            return None
        return Box(bounds, unit=unit)

    def _comparison(self, node: exp.Expr) -> tuple[_Ref, Fraction | None, bool, Fraction | None, bool] | None:
        """``column op literal`` (either side) or ``column BETWEEN a AND b`` as an interval, else None."""
        if isinstance(node, exp.Between):
            column = strip(node.this)
            if node.args.get("symmetric") or not isinstance(column, exp.Column):
                return None
            low, high = numeric_literal(node.args["low"]), numeric_literal(node.args["high"])
            if low is None or high is None:
                return None
            return self._resolve(column), low, True, high, True
        flips: dict[type[exp.Expr], type[exp.Expr]] = {
            exp.LT: exp.GT,
            exp.LTE: exp.GTE,
            exp.GT: exp.LT,
            exp.GTE: exp.LTE,
            exp.EQ: exp.EQ,
        }
        kind = type(node)
        if kind not in flips:
            return None
        left, right = strip(node.this), strip(node.expression)
        if not isinstance(left, exp.Column):
            left, right, kind = right, left, flips[kind]
        value = numeric_literal(right)
        if not isinstance(left, exp.Column) or value is None:
            return None
        ref = self._resolve(left)
        if kind is exp.EQ:
            return ref, value, True, value, True
        if kind in (exp.GT, exp.GTE):
            return ref, value, kind is exp.GTE, None, True
        return ref, None, True, value, kind is exp.LTE

    # -- HAVING / ORDER BY / LIMIT -----------------------------------------------------------------

    def _output_name(
        self,
        node: exp.Expr,
        clause: str,
        items: list[tuple[str | None, _Ref | _AggSpec, exp.Expr]],
        aggregates: Sequence[Aggregate],
        group_refs: list[_Ref],
        group_aliases: Sequence[str],
        output: Sequence[str],
    ) -> str | None:
        """The output column ``node`` names (by name, grouping column or selected aggregate), else None."""
        node = strip(node)
        if _is_aggregate_node(node):
            spec = self._aggregate(node)
            for agg in aggregates:
                if (agg.function, agg.column, agg.quantile, agg.sample) == spec.identity:
                    return agg.alias
            raise _refuse(
                f"{clause} uses {_sql(node, self.dialect)}, which is not in the SELECT list; select it "
                f"with an alias and use that name in {clause}."
            )
        if isinstance(node, exp.Column) and not isinstance(node.this, exp.Star):
            name = node.name.lower()
            if not node.args.get("table") and name in output:
                return name
            try:
                ref = self._resolve(node)
            except QueryRefused:
                return None
            for group_ref, alias in zip(group_refs, group_aliases, strict=True):
                if group_ref.key == ref.key and alias in output:
                    return alias
        return None

    def _having(
        self,
        select: exp.Select,
        items: list[tuple[str | None, _Ref | _AggSpec, exp.Expr]],
        aggregates: Sequence[Aggregate],
        group_refs: list[_Ref],
        group_aliases: Sequence[str],
        output: Sequence[str],
    ) -> exp.Expression | None:
        having = select.args.get("having")
        if having is None:
            return None
        for node in having.this.walk():
            self._deterministic(node, "HAVING")

        def rewrite(node: exp.Expr) -> exp.Expr:
            if _is_aggregate_node(node) or isinstance(node, exp.Column):
                name = self._output_name(node, "HAVING", items, aggregates, group_refs, group_aliases, output)
                if name is None:
                    raise _refuse(
                        f"HAVING can only filter on output columns ({', '.join(output)}), and "
                        f"{_sql(node, self.dialect)} is not one."
                    )
                return exp.column(name, quoted=True)
            return node

        rewritten = cast(exp.Expression, having.this.transform(rewrite))
        for node in rewritten.walk():
            self._scalar(node, "HAVING")
        # the released table's types: noisy counts are integers, every other aggregate a double
        types = {ref_alias: ref.column.type for ref, ref_alias in zip(group_refs, group_aliases, strict=True)}
        for agg in aggregates:
            types[agg.alias] = "int" if agg.function in ("count", "count_distinct_unit") else "float"
        return TotalPredicate("HAVING", lambda c: types[c.name], self.dialect).check(rewritten)

    def _order_by(
        self,
        select: exp.Select,
        items: list[tuple[str | None, _Ref | _AggSpec, exp.Expr]],
        aggregates: Sequence[Aggregate],
        group_refs: list[_Ref],
        group_aliases: Sequence[str],
        output: Sequence[str],
    ) -> tuple[tuple[str, bool], ...]:
        order = select.args.get("order")
        if order is None:
            return ()
        result: list[tuple[str, bool]] = []
        for ordered in order.expressions:
            if ordered.args.get("with_fill"):
                raise _refuse("ORDER BY ... WITH FILL is not supported.")
            node = strip(ordered.this)
            name: str | None
            if isinstance(node, exp.Literal) and not node.is_string:
                position = numeric_literal(node)
                if position is None or position.denominator != 1 or not 1 <= position <= len(output):
                    raise _refuse(f"ORDER BY {_sql(node, self.dialect)} does not name an output column.")
                name = output[int(position) - 1]
            else:
                name = self._output_name(
                    node, "ORDER BY", items, aggregates, group_refs, group_aliases, output
                )
            if name is None:
                raise _refuse(
                    f"ORDER BY can only name output columns ({', '.join(output)}), and "
                    f"{_sql(node, self.dialect)} is not one."
                )
            result.append((name, bool(ordered.args.get("desc"))))
        return tuple(result)

    def _limit(self, select: exp.Select) -> int | None:
        limit = select.args.get("limit")
        if limit is None:
            return None
        if isinstance(limit, exp.Fetch):
            options = limit.args.get("limit_options")
            if options is not None and (options.args.get("percent") or options.args.get("with_ties")):
                raise _refuse("FETCH with PERCENT or WITH TIES is not supported; use LIMIT n.")
            value_node = limit.args.get("count")
        else:
            if limit.args.get("offset"):
                raise _refuse("OFFSET is not supported; use ORDER BY and LIMIT on the released rows.")
            options = limit.args.get("limit_options")
            if options is not None and (options.args.get("percent") or options.args.get("with_ties")):
                raise _refuse("LIMIT with a percentage or WITH TIES is not supported; use LIMIT n.")
            value_node = limit.args.get("expression")
        value = None if value_node is None else numeric_literal(value_node)
        if value is None or value.denominator != 1 or not 0 <= value < 2**62:
            raise _refuse("LIMIT must be a whole number of rows below 2**62, such as LIMIT 10.")
        return int(value)


def _parse_problem(detail: dict[str, object]) -> str:
    """sqlglot's parse error in analyst terms (without its token and class dumps)."""
    description = str(detail.get("description") or "syntax error")
    if "missing for <class" in description:  # "Required keyword: 'this' missing for <class '...Where'>"
        part = description.rsplit(".", 1)[-1].strip("'>").upper()
        return f"the {part} part is incomplete"
    return description.split(" but got <Token")[0].split(". Line ")[0].rstrip(".")


def _frac(value: object) -> Fraction | None:
    return value if isinstance(value, Fraction) else None


def _tighten(
    current: list[object], lo: Fraction | None, lo_closed: bool, hi: Fraction | None, hi_closed: bool
) -> None:
    """Intersect the interval ``current`` ([lo, lo_closed, hi, hi_closed]) with another, in place."""
    cur_lo, cur_hi = _frac(current[0]), _frac(current[2])
    if lo is not None:
        if cur_lo is None or lo > cur_lo:
            current[0], current[1] = lo, lo_closed
        elif lo == cur_lo:
            current[1] = bool(current[1]) and lo_closed
    if hi is not None:
        if cur_hi is None or hi < cur_hi:
            current[2], current[3] = hi, hi_closed
        elif hi == cur_hi:
            current[3] = bool(current[3]) and hi_closed
