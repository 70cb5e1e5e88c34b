"""The region a checked WHERE clause selects, as a :class:`~kakeibo.accounting.overlap.Box`.

Parallel composition charges queries over disjoint regions once (:mod:`kakeibo.accounting.overlap`). A
WHERE clause has a region when it is a conjunction of comparisons of numeric columns of sensitive tables
with numeric literals; the literals are the ones :mod:`kakeibo.sql.predicates` rewrote into the values the
engine compares, so the box holds exactly the rows the engine selects.

**Whose point is it.** McSherry's parallel composition (2009, Thm. 4) holds only when each *person* (what
the neighbour relation adds or removes) sits at one point of the region's columns; a person whose rows fall
in two disjoint boxes is changed by both queries, and the maximum understates their loss (issue 29, R2: 50
queries over disjoint ``o_totalprice`` slices of TPC-H ``orders`` were charged epsilon 1, the loss is 50,
since one customer's orders fall in many slices). So the region's unit comes from the person, never from
whether the queried table names a ``privacy_unit`` itself:

* a **row-level** table (no ``privacy_unit`` and no reference: each row is a person) gets a record-level box
  over any of its numeric columns;
* the rows of any other query belong to a person (the table names its own unit, or reaches one through a
  chain of references, or the query joins sensitive tables): its box is user-level and may constrain only
  columns constant per person: a column that holds the person's key (the unit, or a reference to it; see
  :meth:`~kakeibo.sql.tables.Tables.is_unit`), or one the catalog declares ``user_constant``. Any other
  column, a public table's included, leaves the charge without a region (sequential composition, always
  sound).

A false ``user_constant`` declaration would cost privacy here (for L0 it only costs accuracy,
:mod:`kakeibo.sql.plan`), so the session checks every declared column a region relies on against the
engine before the draw (:func:`constant_check_sql`, :func:`declared_constants`) and refuses the query with a
:class:`~kakeibo.sql.session.CatalogMismatch` when a person holds two values of it.

**One name per dimension.** All the tables whose rows reach one person are charged under one ledger dataset
(the person table's name), so a box's column names must never let two different columns pass for one: the
person's key is named by the person table's unit whichever column holds it (``orders.o_custkey`` and
``customer.c_custkey`` are one coordinate: a person's key is the same in both, so disjoint key ranges are
disjoint people), a column of the person table by its name, a column of another table as
``table.column``. A column name holding a dot could make those names collide, so it gets no region.
"""

from __future__ import annotations

from fractions import Fraction
from typing import TYPE_CHECKING

from sqlglot import exp

from ..accounting.overlap import Box, Interval
from .catalog import Catalog, TableSpec
from .predicates import numeric_literal, strip
from .tables import ColumnRef, Tables

if TYPE_CHECKING:
    from .shape import AnalyzedQuery

__all__ = ["constant_check_sql", "declared_constants", "where_box"]


def where_box(where: exp.Expression | None, tables: Tables) -> Box | None:
    """The region of the checked WHERE predicate (its literals are the values the engine compares), see
    :attr:`~kakeibo.sql.shape.AnalyzedQuery.where_box` and the module docstring for whose point it is."""
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
    # per dimension: [lo, lo_closed, hi, hi_closed] with None for unbounded
    ranges: dict[str, list[object]] = {}
    for node in conjuncts:
        found = _comparison(node, tables)
        if found is None:
            return None
        ref, lo, lo_closed, hi, hi_closed = found
        dimension = _dimension(ref, tables)
        if dimension is None or ref.column.type not in ("int", "float"):
            return None
        current = ranges.setdefault(dimension, [None, True, None, True])
        _tighten(current, lo, lo_closed, hi, hi_closed)
    try:
        bounds = {
            column: Interval(_frac(lo), _frac(hi), lo_closed=bool(lo_closed), hi_closed=bool(hi_closed))
            for column, (lo, lo_closed, hi, hi_closed) in ranges.items()
        }
    except ValueError:  # the conjunction selects nothing
        return None
    return Box(bounds, unit="record" if tables.person is None else "user")


def _dimension(ref: ColumnRef, tables: Tables) -> str | None:
    """The box coordinate a WHERE comparison of ``ref`` constrains, or ``None`` when ``ref`` need not be at
    one point per person (the module docstring: whose point, and one name per dimension)."""
    spec, person = ref.source.spec, tables.person
    if spec.public:
        return None  # one person's rows may join different public rows
    if person is None:
        return ref.column.name  # a row-level table: each row is a person, at its own point
    qualifier: str | None = None
    if tables.is_unit(ref):
        bare = person.privacy_unit
    elif ref.column.user_constant:
        bare = ref.column.name
        qualifier = None if spec.name == person.name else spec.name
    else:
        return None
    if bare is None or "." in bare:
        return None
    return bare if qualifier is None else f"{qualifier}.{bare}"


def declared_constants(box: Box, query: AnalyzedQuery) -> tuple[tuple[TableSpec, str], ...]:
    """The columns declared ``user_constant`` that ``box``, the WHERE region of ``query``, relies on, as
    ``(table, column)``: each must be checked against the engine before the region is charged
    (:func:`constant_check_sql`). The person's key needs no check (it is the person), and a record-level
    box relies on no declaration. This reads back the names :func:`where_box` gives (one name per
    dimension: a bare name is the person table's, ``table.column`` another table's)."""
    person = query.person
    if box.unit != "user" or person is None:
        return ()
    found = []
    for dimension in box.columns:
        if dimension == person.privacy_unit:
            continue
        table, _, column = dimension.rpartition(".")
        found.append((query.table_spec(table) if table else person, column))
    return tuple(found)


def constant_check_sql(catalog: Catalog, table: TableSpec, column: str) -> str:
    """The engine statement (DuckDB's dialect) that checks the declaration ``user_constant`` of ``column``
    of ``table``: it returns a row exactly when some person holds two values of it among their rows of the
    table. The person is found as a query finds them (:class:`~kakeibo.sql.tables.Tables`, through the
    tables the references lead to), and the rows without one (a NULL unit) are skipped, as the bounded
    statement drops them. NULL values of the column are skipped as well (``COUNT(DISTINCT ...)``): no
    comparison selects a NULL, so a person's NULL rows lie in no region and their other rows still sit at
    one point. NaN counts as a value of its own. The statement only groups and counts, so it cannot fail
    for a row on DuckDB, PostgreSQL or Spark; it filters the counts in a derived table rather than HAVING,
    which the Spark backend's statement check does not run.

    >>> catalog = Catalog.from_dict({"tables": {
    ...     "customer": {"privacy_unit": "id", "columns": {"id": "int"}},
    ...     "orders": {"references": {"cust": "customer.id"},
    ...                "columns": {"cust": "int", "region": {"type": "int", "user_constant": True}}}}})
    >>> statement = constant_check_sql(catalog, catalog.table("orders"), "region")
    >>> print(statement)  # doctest: +NORMALIZE_WHITESPACE
    SELECT 1 AS r FROM (SELECT COUNT(DISTINCT "orders"."region") AS n FROM "orders" AS "orders"
    WHERE "orders"."cust" IS NOT NULL GROUP BY "orders"."cust") AS __values WHERE n > 1 LIMIT 1
    """
    tables = Tables(exp.select("1").from_(exp.to_table(_quoted(table.name))), catalog, "duckdb")
    assert tables.unit is not None, "a user-level region reaches a person"
    source = [f"{table.engine_name()} AS {_quoted(table.name)}"]
    for join in tables.joins:
        source.append(
            f"JOIN {join.table.engine_name()} AS {_quoted(join.qualifier)} "
            f"ON {_quoted(join.qualifier, join.column)} = {_quoted(join.left_qualifier, join.left_column)}"
        )
    unit = _quoted(*tables.unit)
    values = (
        f"SELECT COUNT(DISTINCT {_quoted(table.name, column)}) AS n FROM {' '.join(source)} "
        f"WHERE {unit} IS NOT NULL GROUP BY {unit}"
    )
    return f"SELECT 1 AS r FROM ({values}) AS __values WHERE n > 1 LIMIT 1"


def _quoted(*parts: str) -> str:
    """A quoted, dot-separated identifier in DuckDB's dialect: ``"table"."column"``."""
    return ".".join(exp.to_identifier(part, quoted=True).sql("duckdb") for part in parts)


def _comparison(
    node: exp.Expr, tables: Tables
) -> tuple[ColumnRef, Fraction | None, bool, Fraction | None, bool] | None:
    """``column op literal`` (either side) or ``column BETWEEN a AND b`` as an interval, else None."""
    if isinstance(node, exp.Between):
        column = strip(node.this)
        if node.args.get("symmetric") or not isinstance(column, exp.Column):
            return None
        low, high = numeric_literal(node.args["low"]), numeric_literal(node.args["high"])
        if low is None or high is None:
            return None
        return tables.resolve(column), low, True, high, True
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
    ref = tables.resolve(left)
    if kind is exp.EQ:
        return ref, value, True, value, True
    if kind in (exp.GT, exp.GTE):
        return ref, value, kind is exp.GTE, None, True
    return ref, None, True, value, kind is exp.LTE


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
