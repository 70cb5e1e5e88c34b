"""Static analysis of an analyst's SQL query against the :class:`~kakeibo.sql.catalog.Catalog`.

:func:`analyze` parses one statement with sqlglot and accepts exactly one shape::

    SELECT <grouping keys>, <aggregates and expressions around them>
    FROM <sensitive table> [[INNER] JOIN <public table> ON a = b | USING (c)]
    [WHERE <deterministic predicate>] [GROUP BY <columns or expressions over them>]
    [HAVING <predicate over output columns>] [ORDER BY <output columns>] [LIMIT <n>]

The query may be written in any dialect of :data:`~kakeibo.sql.shape.DIALECTS` (DuckDB's by default;
T-SQL's ``SELECT TOP n`` reads as LIMIT n), and tables may be qualified by the engine's default schema
(``main.visits``; T-SQL's ``dbo.visits``). A national string (``N'north'``, as T-SQL writes Unicode text)
is the string literal of the same text wherever one is accepted: right after parsing it becomes one, so
every rule for text literals applies to it alike.
Everything else is refused with :class:`~kakeibo.sql.catalog.QueryRefused`, whose message says why in one
sentence, before any data is read: the analysis never touches the data, so a refusal costs no budget.
Each part of the query is checked by its own module, whose docstring says why it refuses what it refuses:

* :mod:`~kakeibo.sql.shape`: one plain SELECT statement, and the :class:`AnalyzedQuery` it becomes;
* :mod:`~kakeibo.sql.nested`: a subquery in FROM or one WITH that reads its table's rows one by one,
  rewritten into the flat query it means before anything else reads it;
* :mod:`~kakeibo.sql.tables`: FROM and JOIN, and column resolution;
* :mod:`~kakeibo.sql.aggregate_calls`: the aggregates;
* :mod:`~kakeibo.sql.outputs`: the SELECT list, GROUP BY, output names, ORDER BY and LIMIT;
* :mod:`~kakeibo.sql.group_keys`: GROUP BY an expression, and the CASE the engine computes it by;
* :mod:`~kakeibo.sql.derived`: expressions around aggregates, evaluated on the released values;
* :mod:`~kakeibo.sql.condition_types`: WHERE and HAVING;
* :mod:`~kakeibo.sql.region`: the region of the WHERE clause, for parallel composition.

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
>>> q = analyze("SELECT TOP 3 category, COUNT_BIG(*) FROM dbo.visits WHERE category = N'b' "
...             "GROUP BY category", catalog, dialect="tsql")
>>> q.limit, q.output, q.aggregates[0].function
(3, ('category', 'count'), 'count')
>>> print(q.where.sql())
"category" = 'b'
>>> analyze("SELECT COUNT(*) FROM dbo.visits", catalog)  # doctest: +ELLIPSIS
Traceback (most recent call last):
...
kakeibo.sql.catalog.QueryRefused: the schema dbo is not the engine's default one, where kakeibo reads ...
>>> analyze("SELECT * FROM visits", catalog)  # doctest: +ELLIPSIS
Traceback (most recent call last):
...
kakeibo.sql.catalog.QueryRefused: SELECT * would return individual rows; select aggregates such as ...
"""

from __future__ import annotations

from dataclasses import replace
from typing import cast

from sqlglot import exp

from ..errors import ArgumentTypeError
from .aggregate_calls import AggregateReader
from .catalog import Catalog, ColumnSpec, QueryRefused, person_columns
from .condition_types import having_condition, where_condition
from .outputs import Outputs, limit
from .region import where_box
from .shape import Aggregate, AggregateFunction, AnalyzedQuery, JoinSpec, check_dialect, parse_select
from .tables import ColumnRef, Tables

__all__ = ["Aggregate", "AggregateFunction", "AnalyzedQuery", "JoinSpec", "QueryRefused", "analyze"]


def analyze(
    sql: str,
    catalog: Catalog,
    *,
    dialect: str = "duckdb",
    database: str | None = None,
    require_limits: bool = True,
) -> AnalyzedQuery:
    """Check ``sql`` against ``catalog`` and return its structure; :class:`QueryRefused` if kakeibo cannot
    answer it privately (see the module docstring for what is accepted). No data is read.

    ``dialect`` is the SQL dialect ``sql`` is written in (one of :data:`~kakeibo.sql.shape.DIALECTS`);
    ``database`` the name of the engine's database, when known, which a three-part table name may then
    start with. A query that needs a contribution limit its grain table leaves undeclared is refused
    (:func:`declared_limits`) unless ``require_limits`` is false: for an analysis that only finds the
    tables and columns a query's own ``bounds=`` name, which may declare the limit.

    >>> from kakeibo.sql import Catalog
    >>> catalog = Catalog.from_dict({"tables": {"people": {"columns": {
    ...     "age": {"type": "int", "lower": 0, "upper": 120}, "city": "str"}}}})
    >>> q = analyze("SELECT city AS c, MEDIAN(age) FROM people WHERE age BETWEEN 18 AND 65 GROUP BY city",
    ...             catalog)
    >>> q.output, q.aggregates[0].quantile, str(q.where_box)
    (('c', 'median_age'), 0.5, 'age in [18, 65] [record-level]')
    >>> analyze("SELECT city, SUM(age) % 2 FROM people GROUP BY city", catalog)  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    kakeibo.sql.catalog.QueryRefused: SUM(age) % 2 uses MOD, which kakeibo does not evaluate in SELECT; ...
    """
    if not isinstance(sql, str):
        raise ArgumentTypeError(f"the query must be a string, got {type(sql).__name__}.")
    if not isinstance(catalog, Catalog):
        raise ArgumentTypeError(f"catalog must be a Catalog, got {type(catalog).__name__}.")
    dialect = check_dialect(dialect)
    select = plain_strings(parse_select(sql, dialect, person_columns(catalog)))
    tables = Tables(select, catalog, dialect, database)
    reader = AggregateReader(tables, sql)
    outputs = Outputs(select, tables, reader)
    where = where_condition(select, tables)
    if tables.join_filters:
        on = [tables.engine_condition("JOIN ... ON", c) for c in tables.join_filters]
        where = cast(exp.Expression, exp.and_(*([where] if where is not None else []), *on))
    having = having_condition(select, outputs)
    order_by = outputs.order_by(select)
    query = AnalyzedQuery(
        sql=sql,
        table=tables.private.spec,
        group_by=tuple(
            ref.column.name if isinstance(ref, ColumnRef) else alias
            for ref, alias in zip(outputs.group_refs, outputs.group_aliases, strict=True)
        ),
        aggregates=outputs.aggregates,
        output=outputs.output,
        where=where,
        having=having,
        order_by=order_by,
        limit=limit(select),
        where_box=where_box(where, tables),
        group_aliases=outputs.group_aliases,
        table_alias=tables.private.alias,
        group_tables=tuple(
            (ref.source if isinstance(ref, ColumnRef) else tables.private).spec.name
            for ref in outputs.group_refs
        ),
        group_expressions=tuple(None if isinstance(ref, ColumnRef) else ref for ref in outputs.group_refs),
        derived=outputs.derived,
        terms=outputs.terms,
        dialect=dialect,
        joins=tables.joins,
        person=tables.person,
        unit=tables.unit,
        grain=tables.grain,
        values=tuple(reader.values.values()),
    )
    return declared_limits(query) if require_limits else query


#: what each contribution limit bounds, said in the refusal of a query that needs one its table leaves out
_LIMITS = {
    "max_rows_per_partition": "the most rows of one person a group keeps",
    "max_partitions": "the most groups of one person a query keeps",
}


def declared_limits(query: AnalyzedQuery) -> AnalyzedQuery:
    """``query`` when its grain table declares every contribution limit it needs, else
    :class:`QueryRefused` naming the table, the missing limit and the ways to declare it.

    A table with persons that omits a limit leaves it undeclared (:attr:`TableSpec.declared_limits`): 1,
    the old default, silently drops every row past a person's first (or every group past their first),
    and ``"auto"`` spends part of every query's epsilon choosing it; neither can be assumed for the data
    owner. ``max_rows_per_partition`` (kappa) bounds every query on persons' rows; ``max_partitions`` (L0)
    only a query whose groups one person's rows can span (:func:`spans_groups`). An ungrouped query, or one
    grouped by keys constant per person, keeps one group of each person whatever L0 is declared, so it is
    answered with L0 = 1 in place of the undeclared limit.

    >>> from kakeibo.sql import Catalog
    >>> catalog = Catalog.from_dict({"tables": {"visits": {
    ...     "privacy_unit": "user_id", "max_rows_per_partition": 5,
    ...     "columns": {"user_id": "int", "category": "str"}}}})
    >>> analyze("SELECT COUNT(*) FROM visits", catalog).max_partitions
    1
    >>> analyze("SELECT category, COUNT(*) FROM visits GROUP BY category", catalog)  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    kakeibo.sql.catalog.QueryRefused: table visits declares no max_partitions (the most groups of one ...
    """
    grain = query.grain
    if grain is None or not query.user_level:
        return query
    needed = (
        ("max_rows_per_partition", "max_partitions") if spans_groups(query) else ("max_rows_per_partition",)
    )
    for name in needed:
        if name not in grain.declared_limits:
            raise QueryRefused(
                f"table {grain.name} declares no {name} ({_LIMITS[name]}), which this query needs; "
                f'declare it in the catalog as a whole number ({name} = 3) or as "auto" (chosen privately '
                f'at a share of each query\'s epsilon), or give it with the query (bounds={{"{name}": 3}}).'
            )
    if grain.max_partitions is None:
        return replace(query, grain=replace(grain, max_partitions=1))
    return query


def spans_groups(query: AnalyzedQuery) -> bool:
    """Whether one person's rows can fall in several of ``query``'s groups, so that its answer depends on L0
    (``max_partitions``): it groups persons' rows by a key that is an expression, a public table's column
    or a column not declared ``user_constant``, or its persons are correlated (whose calibration keeps the
    declared L0, :mod:`kakeibo.sql.correlation`). Otherwise each person's rows fall in one group and the
    planner keeps L0 = 1 (a wrong ``user_constant`` declaration costs accuracy, never privacy: the bounded
    statement keeps each person's first L0 groups whatever the data)."""
    if not query.group_by or not query.user_level:
        return False
    if query.person is not None and query.person.correlation is not None:
        return True
    for i, table in enumerate(query.group_tables):
        spec = query.group_spec(i)
        if query.table_spec(table).public or not isinstance(spec, ColumnSpec) or not spec.user_constant:
            return True
    return False


def plain_strings(select: exp.Select) -> exp.Select:
    """``select`` with every national string literal (``N'north'``, which sqlglot reads as
    :class:`sqlglot.exp.National` in every dialect) replaced by the plain string literal of the same text.

    In T-SQL ``N'...'`` only marks the text as Unicode, and the engines kakeibo runs on compare it with a text
    column as they compare ``'...'``; so a national string is accepted wherever a text literal is (WHERE and
    HAVING comparisons, IN lists, LIKE patterns, constants in SELECT), by the same rules, and the engine
    statement, written from the parsed query, carries the plain literal.

    >>> from sqlglot import parse_one
    >>> plain_strings(parse_one("SELECT N'EUR' AS c FROM t WHERE a IN (N'it''s', 'b')", dialect="tsql")).sql()
    "SELECT 'EUR' AS c FROM t WHERE a IN ('it''s', 'b')"
    """
    for national in list(select.find_all(exp.National)):
        national.replace(exp.Literal.string(national.name))
    return select
