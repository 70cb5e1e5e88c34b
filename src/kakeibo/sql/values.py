"""What an aggregate reads from each row: a column, or arithmetic and CASE over bounded columns.

``SUM(l_extendedprice * (1 - l_discount))`` sums an expression. Its sensitivity needs a bound on every
row's value, which interval arithmetic derives from the catalog's column bounds (Moore, "Interval
Analysis", 1966): ``[a, b] + [c, d] = [a + c, b + d]``, ``[a, b] - [c, d] = [a - d, b - c]``, a product's
ends are the least and greatest of the four products of ends, a quotient is the product with
``[1 / d, 1 / c]`` when ``0`` is outside ``[c, d]``, and a ``CASE`` spans the union of its results. The
engine computes the expression on each column clamped to its bounds and clamps the result to the derived
bounds too, so the bound holds whatever the floating-point rounding of the engine.

An expression is *total* like a WHERE condition (:mod:`kakeibo.sql.predicates`): no row may make the engine
fail, since an error answers a question about that row for free. Everything is computed in DOUBLE (an int
column is cast, so no integer division and no integer overflow), and:

* a divisor's interval must stay away from 0 (beyond ``TINY``), or the division is refused;
* PostgreSQL raises an error when a product or quotient of non-zero doubles rounds to 0 (and on overflow),
  where DuckDB and Spark round; so every column, literal, product and quotient is *flushed*: a magnitude
  below ``TINY = 1e-100`` becomes exactly 0, and every bound must stay within ``HUGE = 1e100``. Why sums need
  no flush: every flushed non-zero value is a double of magnitude at least 1e-100 > 2^-333, hence a multiple
  of 2^-385, and so is every sum or difference of such values (exactly, since doubles below 2^-333 that are
  multiples of 2^-385 are representable); a non-zero one is at least 2^-385 (about 1.6e-116) in size. A
  product of two such operands is then at least 2.6e-232 and a quotient at least 1.6e-216 (divisors are
  within 1e100): never 0, so no engine can fail on it. At most ``MAX_PRODUCTS`` products and quotients per
  aggregate, since each flush writes its operand twice;
* CASE conditions follow WHERE's rules (total comparisons of columns with literals);
* a column must have clamping bounds (an unbounded column makes the expression unbounded), and identifiers
  of people (the privacy unit, a column that references another table) are refused.

The module docstring of :mod:`kakeibo.sql.aggregate_calls` says where expressions are accepted.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from sqlglot import exp

from .catalog import ColumnSpec, QueryRefused
from .predicates import double_text, numeric_literal, strip
from .shape import ValueColumn
from .tables import ColumnRef, Tables, sql_text

__all__ = ["HUGE", "MAX_PRODUCTS", "TINY", "Values"]

#: magnitudes below this become exactly 0 in an expression (PostgreSQL fails on double underflow)
TINY = 1e-100
#: the largest magnitude an expression's bounds may reach (products of two stay far from overflow)
HUGE = 1e100
#: the most products and quotients one aggregate argument may hold: each flush writes its operand twice, so
#: the engine's expression grows as 2 to the power of their nesting
MAX_PRODUCTS = 4


@dataclass(frozen=True)
class _Interval:
    """An expression for the engine and the interval its value lies in (``None`` ends: only NULL)."""

    sql: exp.Expression
    low: float
    high: float


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
        spec = ColumnSpec("expr", "float", lower=interval.low, upper=interval.high)
        names = tuple(f"expr{i}" for i in range(1, len(self.values) + 2))
        return self._add(names, spec, interval.sql, sql_text(node, self.tables.dialect))

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
            number = _flushed(float(value))
            if abs(number) > HUGE:
                raise self.refuse(f"the number {sql_text(node, self.tables.dialect)} is beyond 1e100.")
            return _Interval(exp.Literal.number(double_text(number)), number, number)
        if isinstance(node, exp.Neg):
            inner = self.read(node.this)
            return _Interval(exp.Neg(this=exp.Paren(this=inner.sql)), -inner.high, -inner.low)
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

    def _column(self, node: exp.Column) -> _Interval:
        ref = self.tables.resolve(node)
        spec, table = ref.column, ref.source.spec
        if spec.name == table.privacy_unit or any(r.column == spec.name for r in table.references):
            raise self.refuse(f"{spec.name} identifies people's rows, so kakeibo does not compute with it.")
        if spec.type not in ("int", "float"):
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
        for bound in (spec.lower, spec.upper):
            if abs(bound) > HUGE:
                raise self.refuse(f"the bounds of column {spec.name} reach beyond 1e100.")
        column = self.tables.engine_column(node)
        value = f"CAST({column.sql('duckdb')} AS DOUBLE)"
        clamped = f"LEAST(GREATEST({value}, {double_text(spec.lower)}), {double_text(spec.upper)})"
        sql: exp.Expression = exp.maybe_parse(
            f"CASE WHEN {column.sql('duckdb')} IS NULL THEN NULL ELSE {_flush_text(clamped)} END",
            dialect="duckdb",
        )
        return _Interval(sql, _flushed(spec.lower), _flushed(spec.upper))

    def _arithmetic(self, node: exp.Add | exp.Sub | exp.Mul | exp.Div) -> _Interval:
        left, right = self.read(node.this), self.read(node.expression)
        if math.isinf(left.low) or math.isinf(right.low):
            raise self.refuse("arithmetic on NULL is NULL on every row; aggregate a value.")
        a, b, c, d = left.low, left.high, right.low, right.high
        operands = {"this": _p(left.sql), "expression": _p(right.sql)}
        sql: exp.Expression
        if isinstance(node, exp.Add):
            low, high, sql = a + c, b + d, exp.Add(**operands)
        elif isinstance(node, exp.Sub):
            low, high, sql = a - d, b - c, exp.Sub(**operands)
        else:
            if isinstance(node, exp.Div):
                if c <= TINY and d >= -TINY:
                    divisor = sql_text(node.expression, self.tables.dialect)
                    raise self.refuse(
                        f"{divisor} can be 0 (its bounds are [{c:g}, {d:g}]), and a division by 0 fails in "
                        "the engine; divide by a value whose bounds exclude 0."
                    )
                c, d = 1 / d, 1 / c
            self.products += 1
            if self.products > MAX_PRODUCTS:
                raise self.refuse(
                    f"it multiplies or divides more than {MAX_PRODUCTS} times; kakeibo computes at most "
                    f"{MAX_PRODUCTS} products and quotients in one aggregate."
                )
            ends = (a * c, a * d, b * c, b * d)
            low, high = _flushed(min(ends)), _flushed(max(ends))
            product = (exp.Div if isinstance(node, exp.Div) else exp.Mul)(**operands)
            sql = exp.maybe_parse(_flush_text(product.sql("duckdb")), dialect="duckdb")
        if max(abs(low), abs(high)) > HUGE:
            raise self.refuse(
                f"{sql_text(node, self.tables.dialect)} can reach {max(abs(low), abs(high)):.3g}, "
                "beyond 1e100."
            )
        return _Interval(sql, low, high)

    def _case(self, node: exp.Case) -> _Interval:
        if node.this is not None:
            raise self.refuse("write CASE WHEN <column> = <value> THEN ..., not CASE <column> WHEN ....")
        return self._branches(
            [(w.this, w.args.get("true")) for w in node.args.get("ifs") or []], node.args.get("default")
        )

    def _branches(self, ifs: list[tuple[exp.Expr, exp.Expr | None]], default: exp.Expr | None) -> _Interval:
        case = exp.Case()
        low, high = _EMPTY
        for condition, result in ifs:
            checked = self.tables.engine_condition("CASE WHEN", condition)
            value = self.read(result if result is not None else exp.null())
            case = case.when(checked, value.sql)
            low, high = min(low, value.low), max(high, value.high)
        otherwise = self.read(default if default is not None else exp.null())
        low, high = min(low, otherwise.low), max(high, otherwise.high)
        return _Interval(case.else_(otherwise.sql), low, high)


def _p(node: exp.Expression) -> exp.Expression:
    return exp.Paren(this=node)


def _flushed(value: float) -> float:
    """``value``, or 0 when its magnitude is below :data:`TINY`."""
    return 0.0 if abs(value) < TINY else value


def _flush_text(sql: str) -> str:
    """``sql`` (a DOUBLE), as 0 when its magnitude is below :data:`TINY` (DuckDB's dialect)."""
    return f"(CASE WHEN ABS({sql}) < {double_text(TINY)} THEN CAST(0 AS DOUBLE) ELSE {sql} END)"
