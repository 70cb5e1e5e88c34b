"""The region a checked WHERE clause selects, as a :class:`~kakeibo.accounting.overlap.Box`.

Parallel composition charges queries over disjoint regions once (:mod:`kakeibo.accounting.overlap`). A
WHERE clause has a region when it is a conjunction of comparisons of numeric columns of the sensitive table
with numeric literals; the literals are the ones :mod:`kakeibo.sql.predicates` rewrote into the values the
engine compares, so the box holds exactly the rows the engine selects.
"""

from __future__ import annotations

from fractions import Fraction
from typing import Literal

from sqlglot import exp

from ..accounting.overlap import Box, Interval
from .predicates import numeric_literal, strip
from .tables import ColumnRef, Tables

__all__ = ["where_box"]


def where_box(where: exp.Expression | None, tables: Tables) -> Box | None:
    """The region of the checked WHERE predicate (its literals are the values the engine compares), see
    :attr:`~kakeibo.sql.shape.AnalyzedQuery.where_box`."""
    table = tables.private.spec
    if where is None or any(join.kind != "public" for join in tables.joins):
        return None  # the rows are join results, not the records of one table: no region of the dataset
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
        found = _comparison(node, tables)
        if found is None:
            return None
        ref, lo, lo_closed, hi, hi_closed = found
        if ref.source is not tables.private or ref.column.type not in ("int", "float"):
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
