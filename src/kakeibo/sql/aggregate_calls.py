"""The aggregate calls a SELECT list may hold, recognised one by one.

The aggregates are COUNT(*), COUNT(column), COUNT(DISTINCT <privacy unit>), COUNT(DISTINCT column) of a
row-level table (not a float column: engines disagree on -0.0 and NaN) (each also as T-SQL's COUNT_BIG),
SUM, AVG, VARIANCE (VAR, VAR_SAMP; VAR_POP and T-SQL's VARP for the population variance),
STDDEV (STD, STDEV, STDDEV_SAMP; STDDEV_POP and T-SQL's STDEVP), and quantiles: MEDIAN, QUANTILE(c, q),
APPROX_QUANTILE / APPROX_PERCENTILE / PERCENTILE_APPROX(c, q), QUANTILE_CONT / QUANTILE_DISC /
PERCENTILE_CONT / PERCENTILE_DISC(c, q), PERCENTILE_CONT / PERCENTILE_DISC(q) WITHIN GROUP (ORDER BY c),
MIN (quantile 0) and MAX (quantile 1); every quantile is kakeibo's private one, whatever name it is asked
by. A name means what the query's dialect says it means (sqlglot reads MySQL's STD, STDDEV and VARIANCE as
population statistics). Their arguments are plain columns of the sensitive table; SUM, AVG,
variances and quantiles need a column with clamping bounds in the catalog, since a sum over an unbounded
column has unbounded sensitivity. Aggregating the privacy unit (other than counting its distinct values)
would publish per-person values.

The one-column spellings (SUM, AVG, the variances and standard deviations, MEDIAN, MIN, MAX, VAR, STD, ...)
are the registry's (:attr:`AggregateSpec.calls <kakeibo.sql.aggregates.AggregateSpec.calls>`): a new one
is a spelling there. COUNT's forms and the quantiles that take ``q`` are grammar read here.
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction

from sqlglot import exp

from .aggregates import AGGREGATES, Call, CallKey
from .catalog import QueryRefused
from .predicates import numeric_literal, strip
from .shape import AggregateFunction, ValueColumn
from .tables import Tables, lower_name, sql_text
from .values import Values

__all__ = ["SUPPORTED_AGGREGATES", "AggregateCall", "AggregateReader", "contains_aggregate", "is_aggregate"]

SUPPORTED_AGGREGATES = (
    "one of COUNT, COUNT(DISTINCT <privacy unit>), SUM, AVG, VARIANCE, STDDEV, MEDIAN, QUANTILE, MIN or MAX "
    "(or a synonym such as COUNT_BIG, VAR_POP, STD, STDDEV_POP, APPROX_QUANTILE or PERCENTILE_CONT)"
)

#: aggregates sqlglot reads as anonymous functions whose arguments are grammar of their own here, by
#: lower-case name: Trino's and Spark's approximate quantiles, T-SQL's COUNT_BIG (the one-column ones, such
#: as VAR, VARP, STD and STDEVP, are spellings in the registry)
_ANONYMOUS_QUANTILES = frozenset({"approx_percentile", "percentile_approx"})
_ANONYMOUS_GRAMMAR = frozenset({*_ANONYMOUS_QUANTILES, "count_big"})


def _one_column_calls() -> dict[CallKey, tuple[AggregateFunction, Call]]:
    """The parser's name map: every aggregate's one-column spellings (:attr:`AggregateSpec.calls
    <kakeibo.sql.aggregates.AggregateSpec.calls>`) with the aggregate's name, read from the registry when a
    call is read."""
    return {key: (name, call) for name, spec in AGGREGATES.items() for key, call in spec.calls.items()}


@dataclass(frozen=True)
class AggregateCall:
    """An aggregate before it gets its output name."""

    function: AggregateFunction
    column: str | None
    quantile: float | None
    sample: bool
    base_name: str

    @property
    def identity(self) -> tuple[object, ...]:
        return (self.function, self.column, self.quantile, self.sample)


def is_aggregate(node: exp.Expr) -> bool:
    """Whether ``node`` is an aggregate call (supported or not)."""
    if isinstance(node, (exp.AggFunc, exp.WithinGroup, exp.Filter)):
        return True
    if isinstance(node, (exp.IgnoreNulls, exp.RespectNulls)):
        return is_aggregate(node.this)
    if not isinstance(node, exp.Anonymous):
        return False
    name = lower_name(node.this)
    return name in _ANONYMOUS_GRAMMAR or name in _one_column_calls()


def contains_aggregate(node: exp.Expr) -> bool:
    """Whether an aggregate call occurs anywhere in ``node``."""
    return any(is_aggregate(n) for n in node.walk())


def _quantile_text(q: Fraction) -> str:
    text = f"{float(q):.6g}"
    return text.replace(".", "_").replace("-", "m")


class AggregateReader:
    """Reads aggregate calls of the query ``sql`` over ``tables``."""

    def __init__(self, tables: Tables, sql: str) -> None:
        self.tables = tables
        self.sql = sql
        self.dialect = tables.dialect
        self._values = Values(tables)

    @property
    def values(self) -> dict[str, ValueColumn]:
        """What each aggregate's ``column`` reads, by that name (:mod:`kakeibo.sql.values`)."""
        return self._values.values

    def read(self, node: exp.Expr) -> AggregateCall:
        """Recognise one aggregate call (see the module docstring) or refuse it."""
        if isinstance(node, (exp.IgnoreNulls, exp.RespectNulls)):
            inner = self.read(node.this)  # refuses an unsupported aggregate by its own name
            raise QueryRefused(
                f"{inner.function.upper()} with IGNORE NULLS or RESPECT NULLS is not supported; aggregates "
                "skip NULLs already."
            )
        if isinstance(node, exp.WithinGroup):
            return self._within_group(node)
        text = sql_text(node, self.dialect)
        if isinstance(node, exp.Filter):
            raise QueryRefused(f"{text} uses FILTER, which is not supported; move the condition into WHERE.")
        one_column = self._one_column(node, text)
        if one_column is not None:
            return one_column
        if isinstance(
            node, exp.Anonymous
        ):  # COUNT_BIG(*), APPROX_PERCENTILE(x, q): read as the call it means
            node = self._typed(node, text)
        if isinstance(node, exp.Count):
            return self._count(node, text)
        kind = type(node)
        if isinstance(node, exp.Quantile):  # QUANTILE, APPROX_QUANTILE
            if any(value for key, value in node.args.items() if key not in ("this", "quantile")):
                raise QueryRefused(
                    f"{self.typed_name(node)} takes a column and one quantile only, without an accuracy or "
                    "weight: kakeibo's quantiles are private, and epsilon sets their accuracy."
                )
            return self._quantile(node.this, node.args.get("quantile"), text)
        if kind in (exp.PercentileCont, exp.PercentileDisc):
            if not isinstance(strip(node.this), exp.Column) and node.args.get("expression") is None:
                raise QueryRefused(f"{self.typed_name(node)}(q) needs WITHIN GROUP (ORDER BY column).")
            return self._quantile(node.this, node.args.get("expression"), text)
        raise QueryRefused(
            f"the aggregate {self.typed_name(node)} is not supported; use {SUPPORTED_AGGREGATES}."
        )

    def typed_name(self, node: exp.Expr) -> str:
        """The function name as the analyst typed it (sqlglot renames some, e.g. STRING_AGG)."""
        meta = node.meta if isinstance(node, exp.Expression) else {}
        start, end = meta.get("start"), meta.get("end")
        if isinstance(start, int) and isinstance(end, int) and 0 <= start <= end < len(self.sql):
            typed = self.sql[start : end + 1]
            if typed.replace("_", "").isalnum():
                return typed.upper()
        if isinstance(node, exp.Anonymous):
            return lower_name(node.this).upper()
        if isinstance(node, exp.Func):
            return node.sql_name()
        return type(node).__name__.upper()

    def _one_column(self, node: exp.Expr, text: str) -> AggregateCall | None:
        """A one-column spelling of an aggregate in the registry (SUM(x), VAR(x), MEDIAN(x), ...), else
        ``None``."""
        if isinstance(node, exp.Anonymous):
            name = lower_name(node.this)
            found = _one_column_calls().get(name)
            if found is None:
                return None
            if len(node.expressions) != 1:
                raise QueryRefused(f"{text}: {name.upper()} takes exactly one column.")
            argument = node.expressions[0]
        else:
            found = _one_column_calls().get(type(node))
            if found is None:
                return None
            self._only_this(node, text)
            argument = node.this
        function, call = found
        column = self._value_column(argument, call.shown, text)
        quantile = None if call.quantile is None else float(call.quantile)
        return AggregateCall(function, column, quantile, call.sample, f"{call.prefix}_{column}")

    def _typed(self, node: exp.Anonymous, text: str) -> exp.Expr:
        """The typed call an anonymous aggregate such as COUNT_BIG(*) means, or a refusal."""
        name = lower_name(node.this)
        args = node.expressions
        if name == "count_big":
            if len(args) != 1:
                raise QueryRefused(
                    f"{text} takes exactly one argument: *, a column or DISTINCT {self._unit_hint()}."
                )
            return exp.Count(this=args[0], big_int=True)
        if name in _ANONYMOUS_QUANTILES:
            if len(args) != 2:
                raise QueryRefused(f"{text} takes a column and one quantile between 0 and 1.")
            return exp.ApproxQuantile(this=args[0], quantile=args[1])
        raise QueryRefused(
            f"the aggregate {self.typed_name(node)} is not supported; use {SUPPORTED_AGGREGATES}."
        )

    def _only_this(self, node: exp.Expr, text: str) -> None:
        extra = [key for key, value in node.args.items() if value and key != "this"]
        if extra:
            raise QueryRefused(f"{text} takes exactly one column argument.")

    def _count(self, node: exp.Count, text: str) -> AggregateCall:
        arg = node.this
        extra = [key for key, value in node.args.items() if value and key not in ("this", "big_int")]
        if extra or node.expressions:
            raise QueryRefused(
                f"{text} takes exactly one argument: *, a column or DISTINCT {self._unit_hint()}."
            )
        if arg is None or isinstance(arg, exp.Star):
            return AggregateCall("count", None, None, True, "count")
        arg = strip(arg)
        if isinstance(arg, exp.Literal):
            return AggregateCall("count", None, None, True, "count")
        if isinstance(arg, exp.Distinct):
            return self._count_distinct(arg, text)
        if not isinstance(arg, exp.Column):
            if contains_aggregate(arg):
                raise QueryRefused(f"{text} nests one aggregate inside another, which is not supported.")
            name = self._values.expression(arg, text)
            return AggregateCall("count", name, None, True, f"count_{name}")
        ref = self.tables.resolve(arg)
        if self.tables.is_unit(ref):  # rows whose unit is NULL are dropped: it is COUNT(*)
            return AggregateCall("count", None, None, True, f"count_{ref.column.name}")
        name = self._values.column(ref, arg)
        return AggregateCall("count", name, None, True, f"count_{name}")

    def _count_distinct(self, arg: exp.Distinct, text: str) -> AggregateCall:
        targets = arg.expressions
        if not self.tables.person:
            return self._distinct_values(targets, text)
        unit = self._unit_hint()
        if len(targets) != 1:
            listed = ", ".join(sql_text(t, self.dialect) for t in targets)
            raise QueryRefused(
                f"COUNT(DISTINCT {listed}) is not supported; COUNT(DISTINCT ...) is only available for the "
                f"privacy unit, as COUNT(DISTINCT {unit})."
            )
        target = strip(targets[0])
        if isinstance(target, exp.Column):
            ref = self.tables.resolve(target)
            if self.tables.is_unit(ref):
                return AggregateCall(
                    "count_distinct_unit", None, None, True, f"count_distinct_{ref.column.name}"
                )
        raise QueryRefused(
            f"{text} is not supported; COUNT(DISTINCT ...) is only available for the privacy unit {unit}, as "
            f"COUNT(DISTINCT {unit})."
        )

    def _distinct_values(self, targets: list[exp.Expr], text: str) -> AggregateCall:
        """COUNT(DISTINCT c) on a row-level table (each row a person): one row adds at most one distinct
        value to its group (:class:`~kakeibo.sql.aggregates.DISTINCT`). One column of the sensitive table,
        not a float: engines disagree on whether -0.0 and 0.0, or two NaNs, are one value."""
        target = strip(targets[0]) if len(targets) == 1 else None
        if not isinstance(target, exp.Column):
            raise QueryRefused(f"{text} is not supported; count the distinct values of one column.")
        ref = self.tables.resolve(target)
        if ref.source.spec.public or ref.column.type == "float":
            why = (
                "a public table's column has no rows of persons"
                if ref.source.spec.public
                else "engines disagree on whether -0.0 and 0.0, or two NaNs, are one value"
            )
            raise QueryRefused(f"{text} is not supported: {why}.")
        name = self._values.column(ref, target)
        return AggregateCall("count_distinct", name, None, True, f"count_distinct_{name}")

    def _unit_hint(self) -> str:
        unit = self.tables.unit
        return "<privacy unit>" if unit is None or unit[0].startswith("__") else unit[1]

    def _value_column(self, arg: exp.Expr | None, function: str, text: str) -> str:
        """The bounded numeric column a SUM/AVG/variance/quantile reads, or a refusal."""
        if arg is None:
            raise QueryRefused(f"{text} needs a column argument.")
        arg = strip(arg)
        if isinstance(arg, exp.Distinct):
            raise QueryRefused(
                f"{text} is not supported; DISTINCT inside an aggregate is only available as COUNT(DISTINCT "
                f"{self._unit_hint()})."
            )
        if contains_aggregate(arg):
            raise QueryRefused(f"{text} nests one aggregate inside another, which is not supported.")
        if not isinstance(arg, exp.Column):
            return self._values.expression(arg, text)
        ref = self.tables.resolve(arg)
        spec = ref.column
        if self.tables.is_unit(ref) or any(r.column == spec.name for r in ref.source.spec.references):
            raise QueryRefused(
                f"{text} aggregates the privacy unit {spec.name}, which would reveal identifiers; use "
                f"COUNT(DISTINCT {spec.name}) to count users."
                if self.tables.is_unit(ref)
                else f"{text} aggregates {spec.name}, which identifies people's rows; aggregate values."
            )
        if spec.type not in ("int", "float", "decimal"):
            raise QueryRefused(f"{text} needs a numeric column, but {spec.name} has type {spec.type}.")
        if not spec.bounded:
            raise QueryRefused(
                f"column {spec.name} has no clamping bounds in the catalog, so {function} over it has "
                "unbounded sensitivity; the data owner must declare lower and upper bounds."
            )
        return self._values.column(ref, arg)

    def _quantile(self, column: exp.Expr | None, q_node: exp.Expr | None, text: str) -> AggregateCall:
        q = self._quantile_value(q_node, text)
        name = self._value_column(column, "a quantile", text)
        return AggregateCall("quantile", name, float(q), True, f"quantile_{name}_{_quantile_text(q)}")

    def _quantile_value(self, q_node: exp.Expr | None, text: str) -> Fraction:
        if q_node is None:
            raise QueryRefused(f"{text} needs a quantile between 0 and 1.")
        if isinstance(strip(q_node), (exp.Array, exp.Tuple)):
            raise QueryRefused(f"{text} asks for several quantiles; write one aggregate per quantile.")
        q = numeric_literal(q_node)
        if q is None or not 0 <= q <= 1:
            raise QueryRefused(f"{text}: the quantile must be a number between 0 and 1.")
        return q

    def _within_group(self, node: exp.WithinGroup) -> AggregateCall:
        func = node.this
        order = node.args.get("expression")
        name = self.typed_name(func)
        if not isinstance(func, (exp.PercentileCont, exp.PercentileDisc)) or func.args.get("expression"):
            raise QueryRefused(
                f"{name} ... WITHIN GROUP is not supported; use PERCENTILE_CONT(q) WITHIN GROUP."
            )
        keys = order.expressions if isinstance(order, exp.Order) else []
        arg = sql_text(func.this, self.dialect) if func.this is not None else ""
        text = f"{name}({arg}) WITHIN GROUP (ORDER BY {', '.join(sql_text(k, self.dialect) for k in keys)})"
        if len(keys) != 1:
            raise QueryRefused(f"{text} must order by exactly one column.")
        ordered = keys[0]
        q = self._quantile_value(func.this, text)
        if ordered.args.get("desc"):
            q = 1 - q
        name = self._value_column(ordered.this, "a quantile", text)
        return AggregateCall("quantile", name, float(q), True, f"quantile_{name}_{_quantile_text(q)}")
