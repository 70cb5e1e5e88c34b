"""Outputs computed from noisy aggregates: ``SUM(x) / COUNT(*)``, ``ROUND(AVG(x), 1)``, ``COUNT(*) * 5``,
``CASE WHEN COUNT(*) > 10 THEN 'many' ELSE 'few' END`` (issue 17); and constants (``3 AS three``,
``PI()``, ``'EUR' AS currency``), the same evaluation with no aggregate inside.

**Post-processing.** Each aggregate inside such an expression is released like a selected one (noised and
charged with the query; an aggregate selected on its own as well is released once), and the expression is
evaluated afterwards on the released values only, so it costs no privacy (post-processing, Dwork and Roth
2014, Prop. 2.1). The evaluation is kakeibo's own, in numpy, never the engine's: it is total by
construction -- a division by zero, the square root or logarithm of a negative number, an overflow or a
NULL operand give NULL, never an error -- so nothing after the draw can fail (the release rule). Its
semantics: ``/`` is true division (as in DuckDB; PostgreSQL would divide integers), ``ROUND`` rounds half
away from zero (as DuckDB does; PostgreSQL rounds a double half to even: the engines' ``integer_division``
and ``round_double``, :mod:`kakeibo.sql.dialects`), comparisons with NULL are unknown and a CASE branch
is taken only when its condition is true.

**Casts.** ``CAST(x AS INT)`` (or SMALLINT, TINYINT, BIGINT) rounds half away from zero, as DuckDB does,
and is NULL outside the type's range; ``CAST(x AS DOUBLE)`` (or FLOAT, REAL, read as DOUBLE) keeps the
value. In HAVING and ORDER BY (:func:`check_term`) a cast may also read a text grouping key, whose values
are parsed (a whole numeral for a whole type, any decimal numeral for DOUBLE; anything else is NULL), and
an ORDER BY item may cast a number to text (a whole value without a decimal point, else the shortest text
that reads back as the same double), to sort as text.

**Interval.** When each of the ``k`` aggregates an expression reads lies in its interval at level
``1 - beta / k``, all ``k`` do at once with probability ``>= 1 - beta`` (union bound), and interval
arithmetic over the expression then bounds its value computed from the true aggregates at level
``1 - beta``. Where a bound is not available -- a CASE, a division whose denominator interval contains 0, a
quantile read together with other aggregates (its interval ends are released values drawn at the query's
level) -- the interval is NULL.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray
from sqlglot import exp

from .catalog import QueryRefused
from .predicates import numeric_literal, strip

__all__ = ["Derived", "check_expression", "check_term", "derived_bounds", "derived_values"]

FloatArray = NDArray[np.float64]

#: functions of one argument, each with its numpy form; ``monotone`` ones map an interval's ends
_UNARY: dict[type[exp.Expr], Callable[[FloatArray], FloatArray]] = {
    exp.Sqrt: np.sqrt,
    exp.Ln: np.log,
    exp.Exp: np.exp,
    exp.Ceil: np.ceil,
    exp.Floor: np.floor,
    exp.Abs: np.abs,
    exp.Sign: np.sign,
}
_MONOTONE = (exp.Sqrt, exp.Ln, exp.Exp, exp.Ceil, exp.Floor, exp.Sign)
_COMPARISONS: dict[type[exp.Expr], Callable[[FloatArray, FloatArray], NDArray[np.bool_]]] = {
    exp.GT: np.greater,
    exp.GTE: np.greater_equal,
    exp.LT: np.less,
    exp.LTE: np.less_equal,
    exp.EQ: np.equal,
    exp.NEQ: np.not_equal,
}
_ARITHMETIC = (exp.Add, exp.Sub, exp.Mul, exp.Div)
#: the whole-number types a cast may name, with their ranges (as DuckDB's, PostgreSQL's and Spark's)
_WHOLE: dict[object, int] = {
    exp.DataType.Type.TINYINT: 2**7,
    exp.DataType.Type.SMALLINT: 2**15,
    exp.DataType.Type.INT: 2**31,
    exp.DataType.Type.BIGINT: 2**63,
}
_REAL = frozenset({exp.DataType.Type.DOUBLE, exp.DataType.Type.FLOAT})
_TEXT = frozenset({exp.DataType.Type.TEXT, exp.DataType.Type.VARCHAR})
#: a numeral a cast reads from a text key: whole for a whole-number type, any decimal one for DOUBLE
_WHOLE_NUMERAL = re.compile(r"\s*[+-]?\d+\s*")
_NUMERAL = re.compile(r"\s*[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?\s*")
#: what an expression around aggregates may contain (besides the aggregates themselves)
_ALLOWED: tuple[type[exp.Expr], ...] = (
    exp.Pi,
    exp.Paren,
    exp.Neg,
    exp.Literal,
    exp.Null,
    exp.Round,
    exp.Pow,
    exp.Greatest,
    exp.Least,
    exp.Case,
    exp.If,
    exp.And,
    exp.Or,
    exp.Not,
    exp.Column,
    exp.Identifier,  # inside a column
    exp.Cast,  # to a number (check_expression); its DataType
    exp.DataType,
    *_ARITHMETIC,
    *_UNARY,
    *_COMPARISONS,
)


@dataclass(frozen=True)
class Derived:
    """One output computed from released aggregates.

    ``expression`` has each aggregate replaced by a column naming the aggregate's output (``inputs``, in
    first-use order); ``text`` is True for a CASE whose results are strings."""

    alias: str
    expression: exp.Expr
    inputs: tuple[str, ...]
    text: bool = False


def check_expression(node: exp.Expr, text: str, inputs: frozenset[str], clause: str = "SELECT") -> bool:
    """Refuse what kakeibo does not evaluate, before anything is read; return whether the expression yields
    text (a CASE of string results). ``node`` has its aggregates replaced by columns named in ``inputs``;
    any other column is a value outside an aggregate. ``clause`` names where it stands in messages."""
    for part in node.walk():
        if isinstance(part, exp.Anonymous):
            name = f"the function {str(part.this).lower()}() (unknown to kakeibo's query checker)"
        else:
            name = part.sql_name() if isinstance(part, exp.Func) else part.key.upper()
        if isinstance(part, (exp.Rand, exp.Randn, exp.Uuid)):
            raise QueryRefused(
                f"{text} is non-deterministic; an output may depend on aggregates and literals only."
            )
        if not isinstance(part, _ALLOWED):
            raise QueryRefused(
                f"{text} uses {name}, which kakeibo does not evaluate in {clause}; use arithmetic (+ - * /), "
                "ROUND, ABS, POWER, SQRT, LN, EXP, CEIL, FLOOR, SIGN, GREATEST, LEAST, PI() or CASE WHEN on "
                "aggregates and literals."
            )
        if isinstance(part, exp.Cast) and part.to.this not in (*_WHOLE, *_REAL):
            raise QueryRefused(
                f"{text} casts to {part.to.sql()}; kakeibo casts to INT, SMALLINT, TINYINT, BIGINT, DOUBLE "
                "or FLOAT here."
            )
        if isinstance(part, exp.Column) and part.name not in inputs:
            raise QueryRefused(
                f"{text} reads the column {part.sql()} outside an aggregate, which would reveal rows; "
                "use columns inside aggregates only."
            )
        if isinstance(part, exp.Literal) and part.is_string and not (_is_result(part) or part is node):
            raise QueryRefused(f"{text} uses the text {part.sql()} where a number is needed.")
        if isinstance(part, exp.Literal) and not part.is_string and numeric_literal(part) is None:
            raise QueryRefused(
                f"{text} has a number kakeibo does not read: write it with at most 100 digits."
            )
        if isinstance(part, (*_COMPARISONS, exp.And, exp.Or, exp.Not)) != _is_condition(part):
            raise QueryRefused(f"{text} uses a condition as a value or a value as a condition.")
        second = part.args.get("decimals") if isinstance(part, exp.Round) else part.args.get("expression")
        needs = isinstance(part, exp.Pow) or (isinstance(part, exp.Round) and second is not None)
        if needs and not _small_literal(second, whole=isinstance(part, exp.Round)):
            raise QueryRefused(f"{text} needs a literal number up to 64 as the second argument of {name}.")
    results = _case_results(node) or [strip(node)]  # a CASE's results, or the expression itself
    texts = [isinstance(r, exp.Literal) and r.is_string for r in results]
    if any(texts) and not all(t or isinstance(r, exp.Null) for t, r in zip(texts, results, strict=True)):
        raise QueryRefused(f"{text} mixes text and numbers in its results; give every branch the same type.")
    return any(texts)


def check_term(
    node: exp.Expr, text: str, numbers: frozenset[str], texts: frozenset[str], clause: str
) -> bool:
    """Refuse what kakeibo does not evaluate in a HAVING operand or an ORDER BY item (``clause``) over
    released columns (``numbers``: numeric ones; ``texts``: text grouping keys, read only through a cast to
    a number), before anything is read; return whether it yields text (a number cast to text: ORDER BY
    only)."""
    node = strip(node)
    as_text = isinstance(node, exp.Cast) and node.to.this in _TEXT
    inner = strip(node.this) if as_text else node
    for part in inner.walk():
        if isinstance(part, exp.Column) and part.name in texts:
            cast = part.parent
            while isinstance(cast, exp.Paren):
                cast = cast.parent
            if not isinstance(cast, exp.Cast):
                raise QueryRefused(
                    f"{text} reads the text {part.name} as a number; cast it to INT or DOUBLE explicitly."
                )
    if as_text and isinstance(inner, exp.Column) and inner.name in texts:
        return True  # a text key as text
    check_expression(inner, text, numbers | texts, clause)
    return as_text


def derived_values(derived: Derived, columns: Mapping[str, FloatArray], rows: int) -> object:
    """The output's values per released row: a float64 array with NaN for NULL, or a list of texts (of a
    text key, a CASE of texts, or a number cast to text). A text key's column is a sequence of texts."""
    with np.errstate(all="ignore"):
        node = strip(derived.expression)
        if derived.text and isinstance(node, exp.Cast):
            inner = strip(node.this)
            if isinstance(inner, exp.Column) and not _numeric(columns[inner.name]):
                return [None if v is None else str(v) for v in columns[inner.name]]
            return [_number_text(v) for v in _finite(_evaluate(inner, columns, rows))]
        if derived.text:
            return _case_texts(node, columns, rows)
        return _finite(_evaluate(derived.expression, columns, rows))


def derived_bounds(
    derived: Derived, lows: Mapping[str, FloatArray], highs: Mapping[str, FloatArray], rows: int
) -> tuple[FloatArray, FloatArray]:
    """Interval ends from the inputs' interval ends (module docstring); NaN where not available."""
    none = np.full(rows, np.nan)
    if derived.text:
        return none, none.copy()
    with np.errstate(all="ignore"):
        low, high = _bounds(derived.expression, lows, highs, rows)
    low, high = _finite(low), _finite(high)
    missing = np.isnan(low) | np.isnan(high)
    return np.where(missing, np.nan, low), np.where(missing, np.nan, high)


# -- checking ---------------------------------------------------------------------------------------------


def _is_result(literal: exp.Expr) -> bool:
    """Whether ``literal`` is a THEN / ELSE result of a CASE (the only place text may appear)."""
    parent = literal.parent
    while isinstance(parent, exp.Paren):
        literal, parent = parent, parent.parent
    if isinstance(parent, exp.If):
        return literal is parent.args.get("true") or literal is parent.args.get("false")
    return isinstance(parent, exp.Case) and literal is parent.args.get("default")


def _case_results(node: exp.Expr) -> list[exp.Expr]:
    node = strip(node)
    if isinstance(node, exp.Case):
        return [strip(i.args["true"]) for i in node.args.get("ifs", [])] + [
            strip(node.args.get("default") or exp.Null())
        ]
    if isinstance(node, exp.If):
        return [strip(node.args["true"]), strip(node.args.get("false") or exp.Null())]
    return []


def _is_condition(node: exp.Expr) -> bool:
    """Whether ``node`` stands where a condition is read: a CASE WHEN / IF condition or an operand of
    AND, OR, NOT."""
    while isinstance(node.parent, exp.Paren):
        node = node.parent
    parent = node.parent
    if isinstance(parent, (exp.And, exp.Or, exp.Not)):
        return True
    return isinstance(parent, exp.If) and node is parent.this


def _small_literal(node: exp.Expr | None, *, whole: bool) -> bool:
    """A numeric literal (optionally negated) of magnitude at most 64, whole when ``whole``."""
    node = None if node is None else strip(node)
    if isinstance(node, exp.Neg):
        node = strip(node.this)
    value = numeric_literal(node) if isinstance(node, exp.Literal) else None
    return value is not None and abs(value) <= 64 and (value.denominator == 1 or not whole)


# -- values -----------------------------------------------------------------------------------------------


def _finite(values: FloatArray) -> FloatArray:
    """Infinities and NaN are NULL."""
    values = np.asarray(values, dtype=np.float64)
    return np.where(np.isfinite(values), values, np.nan)


def _numeric(values: object) -> bool:
    return bool(np.asarray(values).dtype.kind in "biuf")


def _number_text(value: float) -> str | None:
    """A number as text: a whole value without a decimal point, else the shortest text of the double."""
    if math.isnan(value):
        return None
    return str(int(value)) if value.is_integer() and abs(value) < 2**53 else repr(value)


def _cast(node: exp.Cast, columns: Mapping[str, FloatArray], rows: int) -> FloatArray:
    """A cast to a number (module docstring): of a number, or of a text key's values parsed."""
    target, inner = node.to.this, strip(node.this)
    if isinstance(inner, exp.Column) and not _numeric(columns[inner.name]):
        numeral = _WHOLE_NUMERAL if target in _WHOLE else _NUMERAL
        values = np.array(
            [float(v) if isinstance(v, str) and numeral.fullmatch(v) else np.nan for v in columns[inner.name]]
        )
    else:
        values = _evaluate(inner, columns, rows)
    if target not in _WHOLE:
        return values
    whole = _round(values, 0)
    limit = _WHOLE[target]
    return np.where((whole >= -limit) & (whole < limit), whole, np.nan)


def _literal(node: exp.Expr) -> float:
    node = strip(node)
    if isinstance(node, exp.Neg):
        return -_literal(node.this)
    return float(node.this)


def _evaluate(node: exp.Expr, columns: Mapping[str, FloatArray], rows: int) -> FloatArray:
    """The value of a numeric expression; NaN is NULL (it propagates, as NULL does in SQL)."""
    node = strip(node)
    if isinstance(node, exp.Column):
        return np.asarray(columns[node.name], dtype=np.float64)
    if isinstance(node, exp.Null):
        return np.full(rows, np.nan)
    if isinstance(node, exp.Pi):
        return np.full(rows, np.pi)
    if isinstance(node, exp.Literal):
        return np.full(rows, float(node.this))
    if isinstance(node, exp.Neg):
        return -_evaluate(node.this, columns, rows)
    if isinstance(node, _ARITHMETIC):
        left, right = _evaluate(node.this, columns, rows), _evaluate(node.expression, columns, rows)
        if isinstance(node, exp.Div):
            return np.where(right == 0, np.nan, left / np.where(right == 0, 1, right))
        return {exp.Add: np.add, exp.Sub: np.subtract, exp.Mul: np.multiply}[type(node)](left, right)
    if isinstance(node, exp.Round):
        decimals = node.args.get("decimals")
        return _round(_evaluate(node.this, columns, rows), 0 if decimals is None else int(_literal(decimals)))
    if isinstance(node, exp.Pow):
        return np.power(_evaluate(node.this, columns, rows), _literal(node.expression))
    if isinstance(node, exp.Cast):
        return _cast(node, columns, rows)
    if type(node) in _UNARY:
        return _UNARY[type(node)](_evaluate(node.this, columns, rows))
    if isinstance(node, (exp.Greatest, exp.Least)):
        parts = [_evaluate(p, columns, rows) for p in [node.this, *node.expressions]]
        combine = np.fmax if isinstance(node, exp.Greatest) else np.fmin  # NULLs ignored, as in SQL
        return np.asarray(combine.reduce(parts), dtype=np.float64)
    assert isinstance(node, (exp.Case, exp.If)), node  # check_expression admitted nothing else
    return _case_numbers(node, columns, rows)


def _round(values: FloatArray, decimals: int) -> FloatArray:
    """SQL ROUND: half away from zero."""
    scale = 10.0**decimals
    return np.sign(values) * np.floor(np.abs(values) * scale + 0.5) / scale


def _truth(node: exp.Expr, columns: Mapping[str, FloatArray], rows: int) -> FloatArray:
    """A condition in three-valued logic: 1.0 true, 0.0 false, NaN unknown."""
    node = strip(node)
    if type(node) in _COMPARISONS:
        left, right = _evaluate(node.this, columns, rows), _evaluate(node.expression, columns, rows)
        known = ~(np.isnan(left) | np.isnan(right))
        return np.where(known, _COMPARISONS[type(node)](left, right).astype(np.float64), np.nan)
    if isinstance(node, exp.Not):
        return 1.0 - _truth(node.this, columns, rows)
    if isinstance(node, (exp.And, exp.Or)):
        left, right = _truth(node.this, columns, rows), _truth(node.expression, columns, rows)
        decided = 0.0 if isinstance(node, exp.And) else 1.0  # a false AND / a true OR decides alone
        either = (left == decided) | (right == decided)
        return np.where(either, decided, np.where(np.isnan(left) | np.isnan(right), np.nan, 1.0 - decided))
    raise AssertionError(node)  # check_expression admits only comparisons, AND, OR, NOT as conditions


def _branches(node: exp.Expr) -> tuple[list[tuple[exp.Expr, exp.Expr]], exp.Expr]:
    if isinstance(node, exp.If):
        return [(node.this, node.args["true"])], node.args.get("false") or exp.Null()
    return [(i.this, i.args["true"]) for i in node.args.get("ifs", [])], node.args.get(
        "default"
    ) or exp.Null()


def _case_numbers(node: exp.Expr, columns: Mapping[str, FloatArray], rows: int) -> FloatArray:
    branches, default = _branches(node)
    result = _evaluate(default, columns, rows)
    for condition, value in reversed(branches):  # the first true condition wins
        result = np.where(_truth(condition, columns, rows) == 1.0, _evaluate(value, columns, rows), result)
    return result


def _case_texts(node: exp.Expr, columns: Mapping[str, FloatArray], rows: int) -> list[str | None]:
    if isinstance(node, exp.Literal):  # a text constant
        return [str(node.this)] * rows
    branches, default = _branches(node)

    def text(result: exp.Expr) -> str | None:
        result = strip(result)
        return None if isinstance(result, exp.Null) else str(result.this)

    chosen: list[str | None] = [text(default)] * rows
    for condition, value in reversed(branches):
        taken = _truth(condition, columns, rows) == 1.0
        chosen = [text(value) if t else c for t, c in zip(taken, chosen, strict=True)]
    return chosen


# -- intervals --------------------------------------------------------------------------------------------


def _bounds(
    node: exp.Expr, lows: Mapping[str, FloatArray], highs: Mapping[str, FloatArray], rows: int
) -> tuple[FloatArray, FloatArray]:
    """Interval arithmetic (Moore 1966); NaN ends where no bound is available."""
    node = strip(node)
    nothing = (np.full(rows, np.nan), np.full(rows, np.nan))
    if isinstance(node, exp.Column):
        return np.asarray(lows[node.name], dtype=np.float64), np.asarray(highs[node.name], dtype=np.float64)
    if isinstance(node, (exp.Literal, exp.Pi)):
        value = np.full(rows, np.pi if isinstance(node, exp.Pi) else float(node.this))
        return value, value
    if isinstance(node, exp.Neg):
        low, high = _bounds(node.this, lows, highs, rows)
        return -high, -low
    if isinstance(node, _ARITHMETIC):
        (a, b), (c, d) = _bounds(node.this, lows, highs, rows), _bounds(node.expression, lows, highs, rows)
        if isinstance(node, exp.Add):
            return a + c, b + d
        if isinstance(node, exp.Sub):
            return a - d, b - c
        if isinstance(node, exp.Div):
            spans_zero = (c <= 0) & (d >= 0)
            c, d = (
                np.where(spans_zero, np.nan, 1 / np.where(spans_zero, 1, d)),
                np.where(spans_zero, np.nan, 1 / np.where(spans_zero, 1, c)),
            )
        products = np.stack([a * c, a * d, b * c, b * d])
        return np.min(products, axis=0), np.max(products, axis=0)
    if isinstance(node, exp.Round):
        decimals = node.args.get("decimals")
        low, high = _bounds(node.this, lows, highs, rows)
        places = 0 if decimals is None else int(_literal(decimals))
        return _round(low, places), _round(high, places)
    if isinstance(node, exp.Abs):
        low, high = _bounds(node.this, lows, highs, rows)
        inner = np.where(low > 0, low, np.where(high < 0, -high, 0.0))
        return inner, np.fmax(np.abs(low), np.abs(high))
    if isinstance(node, exp.Pow):
        return _power_bounds(_bounds(node.this, lows, highs, rows), _literal(node.expression))
    if isinstance(node, exp.Cast):  # to a number (a text key is never an aggregate's input)
        low, high = _bounds(node.this, lows, highs, rows)
        if node.to.this not in _WHOLE:
            return low, high
        limit = _WHOLE[node.to.this]
        inside = (_round(low, 0) >= -limit) & (_round(high, 0) < limit)
        return np.where(inside, _round(low, 0), np.nan), np.where(inside, _round(high, 0), np.nan)
    if isinstance(node, _MONOTONE):
        low, high = _bounds(node.this, lows, highs, rows)
        function = _UNARY[type(node)]
        return function(low), function(high)  # sqrt/ln of a negative end: NaN, not available
    if isinstance(node, (exp.Greatest, exp.Least)):
        parts = [_bounds(p, lows, highs, rows) for p in [node.this, *node.expressions]]
        combine = np.maximum if isinstance(node, exp.Greatest) else np.minimum  # NaN: not available
        return combine.reduce([p[0] for p in parts]), combine.reduce([p[1] for p in parts])
    return nothing  # CASE and conditions


def _power_bounds(ends: tuple[FloatArray, FloatArray], exponent: float) -> tuple[FloatArray, FloatArray]:
    low, high = ends
    if exponent >= 0 and exponent % 2 == 0:  # even: through |x|
        inner = np.where(low > 0, low, np.where(high < 0, -high, 0.0))
        return np.power(inner, exponent), np.power(np.fmax(np.abs(low), np.abs(high)), exponent)
    if exponent > 0:  # odd: increasing
        return np.power(low, exponent), np.power(high, exponent)
    positive = low > 0  # a negative exponent: decreasing on (0, inf); no bound across 0
    return (
        np.where(positive, np.power(high, exponent), np.nan),
        np.where(positive, np.power(low, exponent), np.nan),
    )
