"""What an aggregate reads from each row: a column, or arithmetic and CASE over bounded columns.

``SUM(l_extendedprice * (1 - l_discount))`` sums an expression. Its sensitivity needs a bound on every
row's value, which interval arithmetic derives from the catalog's column bounds (Moore, "Interval
Analysis", 1966): ``[a, b] + [c, d] = [a + c, b + d]``, ``[a, b] - [c, d] = [a - d, b - c]``, a product's
ends are the least and greatest of the four products of ends, a quotient is the product with
``[1 / d, 1 / c]`` when ``0`` is outside ``[c, d]``, and a ``CASE`` spans the union of its results. The
engine computes the expression on each column clamped to its bounds and clamps the result to the derived
bounds too, so the bound holds whatever the floating-point rounding of the engine.

An expression is *total* like a WHERE condition (:mod:`kakeibo.sql.predicates`): no row may make the engine
fail, since an error answers a question about that row for free, however little the error costs. Totality
holds *by construction*, whatever the interval arithmetic concludes; the analysis is the second line, which
refuses what would be meaningless (a divisor that can be 0, a value beyond ``HUGE``). Everything is computed
in DOUBLE (an int column is cast, so no integer division and no integer overflow), and:

* PostgreSQL raises an error when a product or quotient of non-zero doubles rounds to 0, and on overflow,
  where DuckDB and Spark round; Spark in ANSI mode and PostgreSQL raise on a division by 0 (the engines'
  ``underflow``, ``overflow`` and ``division_by_zero``, :mod:`kakeibo.sql.dialects`). So every column
  is clamped into its bounds, which are 0 or of magnitude in ``[TINY, HUGE]`` (:class:`ColumnSpec` checks
  that), and *flushed* (a magnitude below ``TINY = 1e-100`` becomes exactly 0); every product and quotient
  is flushed and clamped into ``[-HUGE, HUGE]`` (``HUGE = 1e100``) in the engine; every divisor is written
  ``NULLIF(d, 0)``, so a 0 the analysis did not foresee gives NULL, never an error. Why nothing can then
  fail: a flushed non-zero value has magnitude at least 1e-100 > 2^-333, hence is a multiple of 2^-385, and
  so is every sum or difference of such values (exactly, since doubles below 2^-333 that are multiples of
  2^-385 are representable); a non-zero one is at least 2^-385 (about 1.6e-116) in size. Sums of ``k``
  operands stay within ``k HUGE``. So a product is at least 2^-770 (about 2.6e-232) and at most ``k^2
  HUGE^2``, a quotient at least 2^-385 / (k HUGE) and at most ``k HUGE 2^385``: never 0, never beyond the
  double range, for any ``k`` an analyst can write. At most ``MAX_PRODUCTS`` products and quotients per
  aggregate, since each bound writes its operand three times (the engine's expression grows as 3 to the
  power of their nesting);
* sub-expressions of literals only are folded in Python, by the same rules, into one literal: the engine
  never computes a number kakeibo's analysis did not compute itself (an engine's quotient of two literals
  once differed from the analysis's by an ulp across ``TINY``, which decided between a value and an error);
* the interval arithmetic rounds outward: an end whose double is not the exact result is moved one ulp
  away from the interval (IEEE rounding to nearest is within half an ulp), then flushed and clamped as the
  engine's value is;
* CASE conditions follow WHERE's rules (total comparisons of columns with literals);
* a column must have clamping bounds (an unbounded column makes the expression unbounded), and identifiers
  of people (the privacy unit, a column that references another table) are refused.

The module docstring of :mod:`kakeibo.sql.aggregate_calls` says where expressions are accepted.
"""

from __future__ import annotations

import math
import operator
from collections.abc import Callable
from dataclasses import dataclass, replace
from fractions import Fraction
from typing import Any

from sqlglot import exp

from .catalog import HUGE, TINY, ColumnSpec, QueryRefused
from .dialects import double_text
from .predicates import numeric_literal, strip
from .shape import ValueColumn
from .tables import ColumnRef, Tables, sql_text

__all__ = ["HUGE", "MAX_PRODUCTS", "TINY", "Values"]

#: the most products and quotients one aggregate argument may hold: each bound writes its operand three
#: times, so the engine's expression grows as 3 to the power of their nesting
MAX_PRODUCTS = 4


@dataclass(frozen=True)
class _Interval:
    """An expression for the engine and the interval its value lies in (infinite ends: only NULL).
    ``constant`` is its value when it is a literal; ``bounded``: the engine's value is 0 or of magnitude in
    ``[TINY, HUGE]`` (columns, literals, products and quotients; not sums)."""

    sql: exp.Expression
    low: float
    high: float
    constant: float | None = None
    bounded: bool = True


class Values:
    """The values the aggregates of one query read, by name (:attr:`values`), over ``tables``."""

    def __init__(self, tables: Tables) -> None:
        self.tables = tables
        self.values: dict[str, ValueColumn] = {}

    def column(self, ref: ColumnRef, node: exp.Column) -> str:
        """The name of the value that is the column ``ref``: the column's name, or ``table_column`` when
        that is taken by another value."""
        sql = self.tables.engine_column(node)
        qualified = f"{ref.source.spec.name}_{ref.column.name}"
        names = (ref.column.name, qualified, *(f"{qualified}_{i}" for i in range(2, len(self.values) + 3)))
        return self._add(names, ref.column, sql)

    def expression(self, node: exp.Expr, text: str) -> str:
        """The name of the value that is the expression ``node`` (``text`` as the analyst wrote its
        aggregate), its bounds derived (see the module docstring); :class:`QueryRefused` when it can fail
        or is unbounded."""
        interval = _Reader(self.tables, text).read(node)
        if not (math.isfinite(interval.low) and math.isfinite(interval.high)):
            raise QueryRefused(f"{text}: the expression is NULL on every row; aggregate a value.")
        sql = interval.sql if interval.bounded else _bound(interval.sql)
        spec = ColumnSpec("expr", "float", lower=_flushed(interval.low), upper=_flushed(interval.high))
        names = tuple(f"expr{i}" for i in range(1, len(self.values) + 2))
        return self._add(names, spec, sql, sql_text(node, self.tables.dialect))

    def _add(self, names: tuple[str, ...], spec: ColumnSpec, sql: exp.Expression, text: str = "") -> str:
        """The value computed by ``sql``: its name if it is known already, else the first of ``names`` no
        other value has."""
        key = sql.sql("duckdb")
        for name, value in self.values.items():
            if value.sql.sql("duckdb") == key:
                return name
        name = next(n for n in names if n not in self.values)
        self.values[name] = ValueColumn(replace(spec, name=name), sql, text)
        return name


_EMPTY = (math.inf, -math.inf)


class _Reader:
    """Interval arithmetic over one aggregate argument (see the module docstring)."""

    def __init__(self, tables: Tables, text: str) -> None:
        self.tables = tables
        self.text = text
        self.products = 0  # products and quotients so far: each flush writes its operands twice

    def refuse(self, why: str) -> QueryRefused:
        return QueryRefused(f"{self.text}: {why}")

    def read(self, node: exp.Expr) -> _Interval:
        node = strip(node)
        if isinstance(node, exp.Column):
            return self._column(node)
        if isinstance(node, exp.Null):
            return _Interval(exp.null(), *_EMPTY)
        value = numeric_literal(node)
        if value is not None:
            return self._constant(float(value), node)
        if isinstance(node, exp.Neg):
            inner = self.read(node.this)
            if inner.constant is not None:
                return self._constant(-inner.constant, node)
            sql = exp.Neg(this=exp.Paren(this=inner.sql))
            return _Interval(sql, -inner.high, -inner.low, bounded=inner.bounded)
        if isinstance(node, (exp.Add, exp.Sub, exp.Mul, exp.Div)):
            return self._arithmetic(node)
        if isinstance(node, exp.Case):
            return self._case(node)
        if isinstance(node, exp.If):
            return self._branches([(node.this, node.args.get("true"))], node.args.get("false"))
        if isinstance(node, exp.Literal):
            raise self.refuse(f"the text {sql_text(node, self.tables.dialect)} is not a number.")
        raise self.refuse(
            f"{sql_text(node, self.tables.dialect)} is not supported inside an aggregate; use "
            f"bounded numeric "
            "columns, numbers, + - * / and CASE WHEN <condition> THEN <value> ELSE <value> END."
        )

    def _constant(self, number: float, node: exp.Expr) -> _Interval:
        """The literal ``number`` (flushed), refused beyond :data:`HUGE`."""
        number = _flushed(number)
        if abs(number) > HUGE:
            raise self.refuse(f"{sql_text(node, self.tables.dialect)} is beyond 1e100.")
        return _Interval(exp.Literal.number(double_text(number)), number, number, constant=number)

    def _column(self, node: exp.Column) -> _Interval:
        ref = self.tables.resolve(node)
        spec, table = ref.column, ref.source.spec
        if spec.name == table.privacy_unit or any(r.column == spec.name for r in table.references):
            raise self.refuse(f"{spec.name} identifies people's rows, so kakeibo does not compute with it.")
        if spec.type not in ("int", "float", "decimal"):
            raise self.refuse(f"the column {spec.name} has type {spec.type}; expressions compute on numbers.")
        if spec.auto_bounds:
            raise self.refuse(
                f'the bounds of column {spec.name} are chosen when a query runs ("auto"), and an expression '
                "needs them before; aggregate the column itself, or declare its bounds."
            )
        if spec.lower is None or spec.upper is None:
            raise self.refuse(
                f"column {spec.name} has no clamping bounds in the catalog, so the expression is unbounded; "
                "the data owner must declare lower and upper bounds."
            )
        column = self.tables.engine_column(node)
        sql: exp.Expression = exp.maybe_parse(
            clamped_sql(column.sql("duckdb"), spec.lower, spec.upper), dialect="duckdb"
        )
        return _Interval(sql, float(spec.lower), float(spec.upper))

    def _arithmetic(self, node: exp.Add | exp.Sub | exp.Mul | exp.Div) -> _Interval:
        left, right = self.read(node.this), self.read(node.expression)
        if math.isinf(left.low) or math.isinf(right.low):
            raise self.refuse("arithmetic on NULL is NULL on every row; aggregate a value.")
        a, b, c, d = left.low, left.high, right.low, right.high
        if isinstance(node, exp.Div) and c <= TINY and d >= -TINY:
            divisor = sql_text(node.expression, self.tables.dialect)
            raise self.refuse(
                f"{divisor} can be 0 (its bounds are [{c:g}, {d:g}]), and a division by 0 fails in "
                "the engine; divide by a value whose bounds exclude 0."
            )
        kind = type(node)
        folded = _fold(kind, left.constant, right.constant)
        if folded is not None:
            return self._constant(folded, node)
        sum_like = kind in (exp.Add, exp.Sub)
        if not sum_like:
            self.products += 1
            if self.products > MAX_PRODUCTS:
                raise self.refuse(
                    f"it multiplies or divides more than {MAX_PRODUCTS} times; kakeibo computes at most "
                    f"{MAX_PRODUCTS} products and quotients in one aggregate."
                )
        low, high = _ends(kind, a, b, c, d)
        if max(abs(low), abs(high)) > HUGE:
            raise self.refuse(
                f"{sql_text(node, self.tables.dialect)} can reach {max(abs(low), abs(high)):.3g}, "
                "beyond 1e100."
            )
        operands = {"this": _p(left.sql), "expression": _p(right.sql)}
        if sum_like:
            return _Interval(kind(**operands), low, high, bounded=False)
        if kind is exp.Div:
            operands["expression"] = _divisor(right.sql)
        return _Interval(_bound(kind(**operands)), _flushed(max(low, -HUGE)), _flushed(min(high, HUGE)))

    def _case(self, node: exp.Case) -> _Interval:
        if node.this is not None:
            raise self.refuse("write CASE WHEN <column> = <value> THEN ..., not CASE <column> WHEN ....")
        return self._branches(
            [(w.this, w.args.get("true")) for w in node.args.get("ifs") or []], node.args.get("default")
        )

    def _branches(self, ifs: list[tuple[exp.Expr, exp.Expr | None]], default: exp.Expr | None) -> _Interval:
        case = exp.Case()
        low, high = _EMPTY
        bounded = True
        for condition, result in ifs:
            checked = self.tables.engine_condition("CASE WHEN", condition)
            value = self.read(result if result is not None else exp.null())
            case = case.when(checked, value.sql)
            low, high, bounded = min(low, value.low), max(high, value.high), bounded and value.bounded
        otherwise = self.read(default if default is not None else exp.null())
        low, high = min(low, otherwise.low), max(high, otherwise.high)
        return _Interval(case.else_(otherwise.sql), low, high, bounded=bounded and otherwise.bounded)


def _p(node: exp.Expression) -> exp.Expression:
    return exp.Paren(this=node)


#: the arithmetic of + - * / on doubles, as every engine computes it (IEEE 754, rounded to nearest)
_OPERATORS: dict[type[exp.Expression], Callable[[Any, Any], Any]] = {
    exp.Add: operator.add,
    exp.Sub: operator.sub,
    exp.Mul: operator.mul,
    exp.Div: operator.truediv,
}


def _fold(kind: type[exp.Expression], x: float | None, y: float | None) -> float | None:
    """``x kind y`` when both operands are literals (then the engine gets this one literal), else ``None``.
    The divisor of a quotient is non-zero here (the analysis refused it otherwise)."""
    if x is None or y is None:
        return None
    return float(_OPERATORS[kind](x, y))


def _ends(kind: type[exp.Expression], a: float, b: float, c: float, d: float) -> tuple[float, float]:
    """The least and greatest of ``x kind y`` over ``x`` in ``[a, b]`` and ``y`` in ``[c, d]`` (``0`` outside
    ``[c, d]`` for a quotient): attained at two corners, each computed by the one operation the engine
    performs and rounded outward (:func:`_outward`). Rounding to nearest is monotone, so the engine's value
    for any operands in the intervals lies between them (a quotient computed as a product with ``1 / d``
    did not: it may round the other way)."""
    corners = [
        _outward(_OPERATORS[kind](x, y), _OPERATORS[kind](Fraction(x), Fraction(y)))
        for x in (a, b)
        for y in (c, d)
    ]
    return min(low for low, _ in corners), max(high for _, high in corners)


def _outward(rounded: float, exact: Fraction) -> tuple[float, float]:
    """An interval around the exact value ``exact`` of one operation whose double is ``rounded``: the double
    itself when it is exact, else one ulp either way (rounding to nearest errs by half an ulp at most)."""
    if Fraction(rounded) == exact:
        return rounded, rounded
    return math.nextafter(rounded, -math.inf), math.nextafter(rounded, math.inf)


def _divisor(node: exp.Expression) -> exp.Expression:
    """A divisor as the engine gets it: ``NULLIF(d, 0)``, so a 0 the analysis did not foresee is NULL, never a
    division error (PostgreSQL, and Spark in ANSI mode)."""
    return exp.Nullif(this=node, expression=exp.Literal.number(0))


def _flushed(value: float) -> float:
    """``value``, or 0 when its magnitude is below :data:`TINY`."""
    return 0.0 if abs(value) < TINY else value


def clamped_sql(value: str, lower: float, upper: float, *, flush: bool = True) -> str:
    """The engine's DOUBLE of ``value`` (DuckDB's dialect) clamped into ``[lower, upper]`` (0 or of magnitude
    in ``[TINY, HUGE]``, :class:`ColumnSpec` checks that) and, with ``flush``, flushed; NULL stays NULL
    (GREATEST and LEAST skip NULLs). Every value an aggregate reads passes through this."""
    clamped = f"LEAST(GREATEST(CAST({value} AS DOUBLE), {double_text(lower)}), {double_text(upper)})"
    if flush:
        clamped = f"CASE WHEN ABS({clamped}) < {double_text(TINY)} THEN CAST(0 AS DOUBLE) ELSE {clamped} END"
    return f"CASE WHEN {value} IS NULL THEN NULL ELSE {clamped} END"


def _bound(node: exp.Expression) -> exp.Expression:
    """``node`` (a DOUBLE) flushed below :data:`TINY` and clamped into ``[-HUGE, HUGE]``; NULL stays NULL
    (``SIGN(NULL)`` is NULL, where ``LEAST`` would skip it)."""
    x = node.sql("duckdb")
    tiny, huge = double_text(TINY), double_text(HUGE)
    text = (
        f"(CASE WHEN ABS({x}) < {tiny} THEN CAST(0 AS DOUBLE) ELSE SIGN({x}) * LEAST(ABS({x}), {huge}) END)"
    )
    return exp.maybe_parse(text, dialect="duckdb")
