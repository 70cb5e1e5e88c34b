"""GROUP BY an expression over columns (issue 17): ``CASE WHEN age < 30 THEN 'young' ELSE 'old' END``,
``age / 10``, ``FLOOR(age / 5)``, ``educ % 4``, ``DATE_TRUNC('month', day)``.

**What the engine runs.** Two engines do not agree on ``age / 10`` (DuckDB and Spark divide exactly,
PostgreSQL and T-SQL truncate integers), nor on casts, rounding or division by zero (the engines'
``integer_division``, ``round_double`` and ``division_by_zero``, :mod:`kakeibo.sql.dialects`), and an
expression that fails or slows down for some rows tells whether such rows exist (``../shared/DESIGN.md``,
threat model).
So the engine never evaluates the analyst's expression. kakeibo turns it into a CASE whose conditions are
total comparisons (:mod:`kakeibo.sql.predicates`) and whose results are literals; every engine evaluates
that alike, on every row, in the same time.

* A **CASE** key keeps the analyst's conditions (each checked like a WHERE condition; the simple form
  ``CASE x WHEN v THEN ...`` is ``CASE WHEN x = v THEN ...``) and requires literal results of one type.
* An **arithmetic** key reads one ``int`` column with bounds ``[L, U]`` and is built from integer or
  decimal literals, ``+ - *``, ``/`` (the dialect's: integers truncate in PostgreSQL, T-SQL and SQLite and
  divide exactly elsewhere), ``//`` / ``DIV`` (truncating), ``%`` (the sign of the dividend), ``ABS``,
  ``FLOOR``, ``CEIL`` and ``ROUND`` (half away from zero, as every engine rounds a decimal and DuckDB and
  Spark a double, where PostgreSQL's ``/`` keeps integers). kakeibo evaluates it, in numpy, on every
  value of ``[L, U]`` (at most :data:`MAX_KEY_DOMAIN` of them): integers exactly, anything else in double
  precision. Consecutive values with the same result form a piece, and the engine receives
  ``CASE WHEN age < 20 THEN 1 WHEN age < 30 THEN 2 ... WHEN age >= 90 THEN 9 END`` (at most
  :data:`MAX_KEY_PIECES` pieces). A value outside ``[L, U]`` falls in the first or last piece: the key
  reads the column clamped to its bounds, as the aggregates do. An expression that divides by zero or
  leaves the exact integers on some value of ``[L, U]`` is refused.
* A **date** key truncates one date column to its YEAR, QUARTER, MONTH, WEEK (starting on Monday) or DAY,
  in any dialect's spelling (``DATE_TRUNC('month', d)``, T-SQL's ``DATETRUNC(month, d)``, BigQuery's
  ``DATE_TRUNC(d, MONTH)``, Spark's ``TRUNC(d, 'MM')``). The engine runs
  ``CAST(DATE_TRUNC('MONTH', d) AS DATE)``, which DuckDB, PostgreSQL and Spark compute alike and which no
  date makes fail.

**Which keys are released.** A CASE or arithmetic key can take only the values of its results, known from
the query and the catalog, so its keys are public (no partition selection, Desfontaines et al. 2022, is
needed): a key with no rows is released with its noisy zero. A NULL key (a NULL column, or a CASE without
ELSE that no branch matched) is no released group, like a NULL in a column with public values. A date key
is public when its column lists public values (the keys are theirs, truncated); otherwise the months found
go through private partition selection, as the values of a column without public values do.

**Neighbours.** Which key a row has depends on that row alone, so grouping by an expression is as stable
as grouping by a column: one user's rows move the same L0 groups by the same contribution bounds.
"""

from __future__ import annotations

import datetime
from collections.abc import Callable
from typing import ClassVar

import numpy as np
from numpy.typing import NDArray
from sqlglot import exp

from .catalog import ColumnType, QueryRefused
from .dialects import double_text
from .predicates import numeric_literal, strip
from .shape import GroupExpression
from .tables import ColumnRef, Tables, sql_text

__all__ = ["MAX_KEY_DOMAIN", "MAX_KEY_PIECES", "group_expression", "truncate_date"]

#: the most values of a column an arithmetic key is evaluated on
MAX_KEY_DOMAIN = 1 << 20
#: the most pieces (branches of the engine's CASE) a key may have
MAX_KEY_PIECES = 1000
#: integers beyond this size are not all exact in a double, which the engines may convert them to
_EXACT_INTEGERS = 2**53


def group_expression(node: exp.Expr, tables: Tables) -> GroupExpression:
    """``node``, an expression over columns without an aggregate, as a GROUP BY key; :class:`QueryRefused`
    when kakeibo cannot compute it (see the module docstring)."""
    node = strip(node)
    text = sql_text(node, tables.dialect)
    if isinstance(node, exp.Case):
        return _case_key(node, tables, text)
    if isinstance(node, (exp.DateTrunc, exp.TimestampTrunc)):
        return _date_key(node, tables, text)
    return _arithmetic_key(node, tables, text)


# -- CASE ---------------------------------------------------------------------------------------------


def _case_key(case: exp.Case, tables: Tables, text: str) -> GroupExpression:
    subject = case.this
    conditions, results = [], []
    for branch in case.args.get("ifs") or []:
        condition = branch.this
        if subject is not None:
            condition = exp.EQ(this=subject.copy(), expression=condition.copy())
        conditions.append(tables.engine_condition("GROUP BY", condition))
        results.append(_result(branch.args.get("true"), text))
    default = case.args.get("default")
    defaulted = default is not None
    if defaulted:
        results.append(_result(default, text))
    key_type = _result_type([r for r in results if r is not None], text)
    values = [_typed(r, key_type) for r in results]
    ifs = [
        exp.If(this=condition, true=_literal(value, key_type))
        for condition, value in zip(conditions, values, strict=False)
    ]
    sql = exp.Case(ifs=ifs, default=_literal(values[-1], key_type) if defaulted else None)
    public = tuple(dict.fromkeys(v for v in values if v is not None))
    nullable = not defaulted or None in values
    not_null = exp.Not(this=exp.Is(this=sql.copy(), expression=exp.Null())) if nullable else None
    return GroupExpression(sql, key_type, public, text, not_null)


def _result(node: exp.Expr | None, text: str) -> object:
    """A CASE result as a Python value (``None`` for NULL); literals only."""
    node = strip(node) if node is not None else exp.Null()
    if isinstance(node, exp.Null):
        return None
    if isinstance(node, exp.Boolean):
        return bool(node.this)
    if isinstance(node, exp.Literal) and node.is_string:
        return str(node.this)
    number = numeric_literal(node)
    if number is None:
        raise QueryRefused(
            f"GROUP BY {text}: a CASE key must give literals (such as 'young' or 3), and "
            f"{node.sql()} is not one."
        )
    written = node.sql()
    if number.denominator == 1 and not any(ch in written for ch in ".eE"):
        return int(number)
    return float(number)


def _result_type(results: list[object], text: str) -> ColumnType:
    kinds = {
        "bool" if isinstance(r, bool) else "str" if isinstance(r, str) else type(r).__name__ for r in results
    }
    if not kinds:
        raise QueryRefused(f"GROUP BY {text}: every branch gives NULL, so the key has no value.")
    if kinds <= {"int", "float"}:
        return "float" if "float" in kinds else "int"
    if len(kinds) == 1:
        return "bool" if "bool" in kinds else "str"
    raise QueryRefused(
        f"GROUP BY {text}: the CASE key mixes results of the types {' and '.join(sorted(kinds))}; give "
        "every branch a literal of one type."
    )


def _typed(value: object, key_type: ColumnType) -> object:
    if value is None or key_type != "float":
        return value
    return float(value) + 0.0  # type: ignore[arg-type]  # an int of a float key; -0.0 is 0.0


def _literal(value: object, key_type: ColumnType) -> exp.Expression:
    """``value`` written so that every engine reads it with the key's type, exactly."""
    if value is None:
        return exp.Null()
    if key_type == "str":
        return exp.Literal.string(str(value))
    if key_type == "bool":
        return exp.Boolean(this=bool(value))
    if key_type == "int":
        return exp.cast(exp.Literal.number(int(value)), "BIGINT")  # type: ignore[call-overload]
    return exp.cast(exp.Literal.number(double_text(float(value))), "DOUBLE")  # type: ignore[arg-type]


# -- dates --------------------------------------------------------------------------------------------

#: the date units a key may truncate to, in the spellings of the dialects
_DATE_UNITS = {
    **dict.fromkeys(("YEAR", "YYYY", "YY"), "YEAR"),
    "QUARTER": "QUARTER",
    **dict.fromkeys(("MONTH", "MM", "MON"), "MONTH"),
    "WEEK": "WEEK",
    **dict.fromkeys(("DAY", "DD"), "DAY"),
}


def _date_key(node: exp.Expr, tables: Tables, text: str) -> GroupExpression:
    unit_node = node.args.get("unit")
    unit = _DATE_UNITS.get(unit_node.name.upper()) if unit_node is not None else None
    if unit is None:
        raise QueryRefused(f"GROUP BY {text}: a date key truncates to YEAR, QUARTER, MONTH, WEEK or DAY.")
    column = strip(node.this)
    spec = tables.resolve(column).column if isinstance(column, exp.Column) else None
    if spec is None or spec.type != "date" or not isinstance(column, exp.Column):
        what = f"{spec.name} is {spec.type}" if spec is not None else "it does not truncate a column"
        raise QueryRefused(f"GROUP BY {text}: a date key truncates one date column, and {what}.")
    engine = tables.engine_column(column)
    sql = exp.cast(exp.TimestampTrunc(this=engine.copy(), unit=exp.Var(this=unit)), "DATE")
    public = None
    if spec.public_values is not None:
        public = tuple(dict.fromkeys(truncate_date(v, unit) for v in spec.public_values))
    not_null = exp.Not(this=exp.Is(this=engine, expression=exp.Null()))
    return GroupExpression(sql, "date", public, text, not_null)


def truncate_date(day: datetime.date, unit: str) -> datetime.date:
    """``day`` truncated to the start of its ``unit`` (weeks start on Monday), as the engines truncate.

    >>> day = datetime.date(2026, 11, 25)
    >>> truncate_date(day, "QUARTER"), truncate_date(day, "WEEK")
    (datetime.date(2026, 10, 1), datetime.date(2026, 11, 23))
    """
    if unit == "YEAR":
        return day.replace(month=1, day=1)
    if unit == "QUARTER":
        return day.replace(month=3 * ((day.month - 1) // 3) + 1, day=1)
    if unit == "MONTH":
        return day.replace(day=1)
    if unit == "WEEK":
        return day - datetime.timedelta(days=day.weekday())
    return day


# -- arithmetic ---------------------------------------------------------------------------------------

Values = tuple[NDArray[np.int64] | NDArray[np.float64], bool]  # the values and whether they are integers
_PLAIN: dict[type[exp.Expr], np.ufunc] = {exp.Add: np.add, exp.Sub: np.subtract, exp.Mul: np.multiply}


def _arithmetic_key(node: exp.Expr, tables: Tables, text: str) -> GroupExpression:
    refs = {ref.key: ref for ref in (tables.resolve(c) for c in node.find_all(exp.Column))}
    if len(refs) != 1:
        raise QueryRefused(
            f"GROUP BY {text}: an expression key reads one int column with bounds (a CASE WHEN key may read "
            "more), and this one reads " + (f"{len(refs)}." if refs else "none.")
        )
    (ref,) = refs.values()
    low, high = _domain(ref, text)
    domain = np.arange(low, high + 1, dtype=np.int64)
    values, integer = _Evaluator(domain, tables.dialect, text).evaluate(node)
    key_type: ColumnType = "int" if integer else "float"
    results = [int(v) if integer else float(v) + 0.0 for v in values.tolist()]
    starts = [0, *(i for i in range(1, len(results)) if results[i] != results[i - 1])]
    if len(starts) > MAX_KEY_PIECES:
        raise QueryRefused(
            f"GROUP BY {text} changes value {len(starts) - 1:,} times over [{low}, {high}]; a key may "
            f"have at most {MAX_KEY_PIECES:,} pieces; group by a coarser one, such as "
            f"FLOOR({ref.column.name} / 10)."
        )
    column = tables.engine_column(_first_column(node))
    not_null = exp.Not(this=exp.Is(this=column.copy(), expression=exp.Null()))
    ifs = []
    for j, start in enumerate(starts):
        if j + 1 < len(starts):
            condition: exp.Expression = exp.LT(this=column.copy(), expression=_integer(low + starts[j + 1]))
        elif j:
            condition = exp.GTE(this=column.copy(), expression=_integer(low + start))
        else:
            condition = not_null.copy()
        ifs.append(exp.If(this=condition, true=_literal(results[start], key_type)))
    public = tuple(dict.fromkeys(results[start] for start in starts))
    return GroupExpression(exp.Case(ifs=ifs), key_type, public, text, not_null)


def _domain(ref: ColumnRef, text: str) -> tuple[int, int]:
    spec = ref.column
    if spec.type != "int" or spec.lower is None or spec.upper is None:
        what = spec.type if spec.type != "int" else "int without bounds"
        raise QueryRefused(
            f"GROUP BY {text}: an expression key is computed over the values of an int column with bounds, "
            f"and {spec.name} is {what}; group by CASE WHEN ranges instead."
        )
    low, high = int(spec.lower), int(spec.upper)
    if high - low + 1 > MAX_KEY_DOMAIN or max(abs(low), abs(high)) > _EXACT_INTEGERS:
        raise QueryRefused(
            f"GROUP BY {text}: the bounds of {spec.name} span {high - low + 1:,} values, and an expression "
            f"key is computed over at most {MAX_KEY_DOMAIN:,}; group by CASE WHEN ranges instead."
        )
    return low, high


def _first_column(node: exp.Expr) -> exp.Column:
    column = node.find(exp.Column)
    assert column is not None  # _arithmetic_key found exactly one column
    return column


def _integer(value: int) -> exp.Expression:
    return exp.Literal.number(value) if value >= 0 else exp.Neg(this=exp.Literal.number(-value))


class _Evaluator:
    """An arithmetic key's value on every value of its column's domain (see the module docstring)."""

    def __init__(self, domain: NDArray[np.int64], dialect: str, text: str) -> None:
        self.domain = domain
        self.dialect = dialect
        self.text = text

    def evaluate(self, node: exp.Expr) -> Values:
        node = strip(node)
        handler = self._HANDLERS.get(type(node))
        if isinstance(node, exp.Column):
            return self.domain, True
        if isinstance(node, exp.Literal) or (isinstance(node, exp.Neg) and numeric_literal(node) is not None):
            return self._number(node)
        if handler is None:
            raise self._refuse(f"{sql_text(node, self.dialect)} is not an operation a key may use")
        values, integer = handler(self, node)
        if not integer and not np.all(np.isfinite(values)):
            raise self._refuse("it overflows for some values of the column")
        if integer and np.any(np.abs(values) > _EXACT_INTEGERS):
            raise self._refuse("it leaves the exact integers for some values of the column")
        return values, integer

    def _refuse(self, why: str) -> QueryRefused:
        return QueryRefused(
            f"GROUP BY {self.text}: {why}; a key may use numbers, + - * / // %, ABS, FLOOR, CEIL and ROUND "
            "over one int column."
        )

    def _number(self, node: exp.Expr) -> Values:
        number = numeric_literal(node)
        if number is None:
            raise self._refuse(f"{node.sql()} is not a number")
        if number.denominator == 1 and not any(ch in node.sql() for ch in ".eE"):
            return np.full(len(self.domain), int(number), dtype=np.int64), True
        return np.full(len(self.domain), float(number)), False

    def _operands(self, node: exp.Expr) -> tuple[Values, Values]:
        return self.evaluate(node.this), self.evaluate(node.expression)

    def _negate(self, node: exp.Expr) -> Values:
        values, integer = self.evaluate(node.this)
        return -values, integer

    def _plain(self, node: exp.Expr) -> Values:
        (a, a_int), (b, b_int) = self._operands(node)
        operation = _PLAIN[type(node)]
        if a_int and b_int:
            if np.any(np.abs(operation(a.astype(np.float64), b.astype(np.float64))) > _EXACT_INTEGERS):
                raise self._refuse("it leaves the exact integers for some values of the column")
            return operation(a, b), True
        return operation(a.astype(np.float64), b.astype(np.float64)), False

    def _divide(self, node: exp.Expr) -> Values:
        (a, a_int), (b, b_int) = self._operands(node)
        if np.any(b == 0):
            raise self._refuse("it divides by zero for some values of the column")
        truncating = isinstance(node, exp.IntDiv) or (isinstance(node, exp.Div) and node.args.get("typed"))
        if truncating and a_int and b_int:
            return np.sign(a) * np.sign(b) * (np.abs(a) // np.abs(b)), True
        if isinstance(node, exp.IntDiv):
            raise self._refuse("integer division takes integers")
        return a.astype(np.float64) / b.astype(np.float64), False

    def _modulo(self, node: exp.Expr) -> Values:
        (a, a_int), (b, b_int) = self._operands(node)
        if np.any(b == 0):
            raise self._refuse("it divides by zero for some values of the column")
        if a_int and b_int:
            return np.fmod(a, b), True
        return np.fmod(a.astype(np.float64), b.astype(np.float64)), False

    def _unary(self, node: exp.Expr) -> Values:
        decimals = node.args.get("decimals")
        if any(node.args.get(k) is not None for k in ("to", "truncate")) or (
            decimals is not None and numeric_literal(decimals) != 0
        ):
            raise self._refuse(f"{sql_text(node, self.dialect)} takes one argument here")
        values, integer = self.evaluate(node.this)
        if integer or isinstance(node, exp.Abs):
            return np.abs(values) if isinstance(node, exp.Abs) else values, integer
        if isinstance(node, exp.Round):  # half away from zero (module docstring)
            return np.sign(values) * np.floor(np.abs(values) + 0.5), False
        return (np.floor if isinstance(node, exp.Floor) else np.ceil)(values), False

    _HANDLERS: ClassVar[dict[type[exp.Expr], Callable[[_Evaluator, exp.Expr], Values]]] = {
        exp.Neg: _negate,
        exp.Add: _plain,
        exp.Sub: _plain,
        exp.Mul: _plain,
        exp.Div: _divide,
        exp.IntDiv: _divide,
        exp.Mod: _modulo,
        exp.Abs: _unary,
        exp.Floor: _unary,
        exp.Ceil: _unary,
        exp.Round: _unary,
    }
