"""The aggregates of DP SQL in one place: the statistics the engine computes per group, and the registry of
aggregate functions, estimated from them or selected on their own.

A statistic kind (:class:`StatisticKind`) says how one user's contribution to it is bounded and how the
engine computes it at each step of the bounded statement (:mod:`kakeibo.sql.rewrite`). After bounding a
user touches at most ``L0`` groups and contributes to each group's statistics at most (Wilson et al. 2020,
"Differentially Private SQL with Bounded User Contribution"; seed 002, slides 67-77):

==========================  ====================================  ===============================
statistic (per group)       one user's contribution               per-group sensitivity
==========================  ====================================  ===============================
``rows``  COUNT(*)          min(rows, kappa)                      kappa
``n_c``   COUNT(c)          min(non-null rows, kappa)             kappa
``s_c``   SUM(c)            (scaled) sum of clamped values        kappa * max(|lower|, |upper|)
``sc_c``  SUM(c - mid)      centred sum, for AVG and VAR          kappa * (upper - lower) / 2
``sq_c``  SUM((c - mid)^2)  centred sum of squares, for VAR       kappa * ((upper - lower) / 2)^2
``users`` distinct users    1                                     1
``d_c``   COUNT(DISTINCT c) one row (row-level tables only)       1
==========================  ====================================  ===============================

An aggregate function is one :class:`AggregateSpec` in :data:`AGGREGATES`, the one registry every
module asks instead of branching on a name: its one-column spellings (:attr:`~AggregateSpec.calls`, read
by :mod:`kakeibo.sql.aggregate_calls`), its released type (HAVING's checks, :mod:`.condition_types`), when
its true value cannot be negative (``nonnegative=True`` clamps), its form under the R2T race, why the
correlated calibration does not cover it, and how it is released: from the noisy statistics it needs
(:meth:`~AggregateSpec.needs`, recombined by :meth:`~AggregateSpec.estimate`), or, for quantiles (MEDIAN,
QUANTILE, PERCENTILE_CONT, MIN, MAX), by a selection of its own (:attr:`~AggregateSpec.selected`: the
permute-and-flip path of :mod:`kakeibo.sql.quantiles`). :mod:`kakeibo.sql.plan` noises the statistics and
plans the selections, :mod:`kakeibo.sql.rewrite` compiles them and :mod:`kakeibo.sql.execute` releases
the aggregates, all from here.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping
from dataclasses import dataclass
from fractions import Fraction
from typing import Any, ClassVar, Protocol

import numpy as np
from sqlglot import exp

from ..mechanisms import Mechanism
from .catalog import ColumnSpec, ColumnType, QueryRefused
from .shape import Aggregate
from .truncation import Race

__all__ = [
    "AGGREGATES",
    "AVG_OF_TRUNCATED_SUMS",
    "CENTRED_SQUARES",
    "CENTRED_SUM",
    "CONFIDENCE",
    "ROWS",
    "SUM",
    "USERS",
    "VALUES",
    "AggregateSpec",
    "Call",
    "NoisyStatistics",
    "Operands",
    "Planned",
    "Statistic",
    "StatisticKind",
    "Weights",
    "aggregate_spec",
    "direct_statistic",
]

#: the level of every released interval, and 1 - beta of the R2T race
CONFIDENCE = 0.95

#: an aggregate's value and the ends of its interval, one entry per released group
Estimate = tuple[Any, Any, Any]


@dataclass(frozen=True)
class Operands:
    """What a statistic's SQL reads in one bounded statement, as :mod:`kakeibo.sql.rewrite` names it: the
    statistic's column (``None`` for COUNT(*) and users) clamped in ``filtered``, and the partial aggregates
    of one user in one group in ``per_key``."""

    kappa: int
    column: ColumnSpec | None
    value: str  # the row's clamped value
    rows: str  # the user's rows in the group
    count: str  # the user's non-null values in the group
    total: str  # their sum
    squares: str  # the sum of their centred squares
    positive: str  # the sum of their positive values (a truncated total of a column that can be negative)
    negative: str  # the sum of their negative values' magnitudes (likewise)
    distinct: str = ""  # the row's value as stored, neither cast nor clamped (COUNT(DISTINCT c))

    @property
    def signed(self) -> bool:
        """Whether the column's values can be negative, so that a truncated total truncates its positive
        and negative parts apart."""
        return self.column is not None and (self.column.lower or 0) < 0

    @property
    def mid(self) -> float:
        """The centre of the column's clamping bounds (plan refused unbounded columns for centred sums)."""
        assert self.column is not None and self.column.lower is not None and self.column.upper is not None
        return (self.column.lower + self.column.upper) / 2

    @property
    def square(self) -> str:
        """The row's centred square ``(value - mid)^2``."""
        return f"({self.value} - {self.mid!r}) * ({self.value} - {self.mid!r})"

    @property
    def bounded_count(self) -> str:
        """``min(n, kappa)``: the user's values in the group that count."""
        return f"LEAST({self.count}, {self.kappa})"

    def scaled(self, partial: str) -> str:
        """A user's partial sum scaled by ``min(n, kappa) / n``, as if they had ``min(n, kappa)`` rows at
        their mean (:mod:`kakeibo.sql.rewrite`, step 3)."""
        return f"CASE WHEN {self.count} > 0 THEN {partial} * {self.bounded_count} / {self.count} ELSE 0 END"


@dataclass(frozen=True)
class Weights:
    """A row's weights in the statement of a query with quantiles, whose weighted statistics summed over a
    histogram's buckets are the bounded ones (:mod:`kakeibo.sql.rewrite`)."""

    rows: str  # for COUNT(*): min(rows, kappa) / rows of the user's kept group
    users: str  # for the distinct users: 1 / rows
    value: str  # for the column's values: min(n, kappa) / n


class StatisticKind(ABC):
    """A bounded per-group statistic: its sensitivities and its SQL at each step of the bounded statement.
    Its expressions sum over a group: the rows of a row-level table (:meth:`row_level`), each kept user's
    bounded partial aggregates (:meth:`user_level`), or weighted rows (:meth:`weighted`)."""

    name: ClassVar[str]
    integer: ClassVar[bool] = False  # a count: geometric noise, and a BIGINT in the engine
    raw: ClassVar[bool] = False  # reads the column's values as stored (``Operands.distinct``), not clamped

    def __repr__(self) -> str:
        return f"StatisticKind({self.name!r})"

    def statistic(self, column: str | None) -> str:
        """The statistic's name, its column in the engine's result: ``rows``, ``n_amount``, ...

        >>> ROWS.statistic(None), CENTRED_SUM.statistic("amount")
        ('rows', 'sc_amount')
        """
        return self.name if column is None else f"{self.name}_{column}"

    @abstractmethod
    def per_group(self, kappa: int, column: ColumnSpec | None) -> float:
        """The most one user moves one group's value: the add/remove sensitivity of the module docstring's
        table."""

    def contribution(self, kappa: int, column: ColumnSpec | None) -> tuple[float, float]:
        """``[lo, hi]`` bounding one user's contribution to one group (the replace neighbour of a correlated
        table, :mod:`kakeibo.sql.correlation`): from nothing up to the per-group bound, unless overridden."""
        return 0.0, self.per_group(kappa, column)

    def partials(self, sql: Operands) -> tuple[str, ...]:
        """What ``per_key`` computes for this statistic beyond each column's count and sum."""
        return ()

    @abstractmethod
    def row_level(self, sql: Operands) -> str:
        """The statistic over the rows of a group of a row-level table (each row a person)."""

    @abstractmethod
    def user_level(self, sql: Operands) -> str:
        """The statistic over the bounded partial aggregates of a group's kept users."""

    @abstractmethod
    def weighted(self, sql: Operands, weights: Weights) -> str:
        """The statistic over a group's weighted rows."""

    def truncated(self, sql: Operands, tau: float) -> str:
        """The statistic over a group's kept users with each user's total truncated at ``tau``: a candidate of
        the R2T race (:mod:`kakeibo.sql.truncation`), for the statistics whose contributions are never
        negative."""
        raise QueryRefused(f"the statistic {self.name} has no truncated form for the R2T race.")

    def parts(self, sql: Operands) -> tuple[str, ...]:
        """Each user's never-negative totals in a group that truncation truncates (a signed column: its
        positive and negative parts)."""
        raise QueryRefused(f"the statistic {self.name} has no per-person total to truncate.")

    def step_mass(self, sql: Operands, low: float, high: float) -> str:
        """The mass of a group's kept users' totals between two thresholds, ``sum min(t, high) - min(t,
        low)``, each user's term computed before the sum (in ``[0, high - low]`` per part): what a ladder's
        soft counts and a drop's layers are made of (:mod:`kakeibo.sql.truncation`), exact to the sum's own
        rounding however large the totals below ``low``."""
        terms = [f"LEAST({p}, {float(high)!r}) - LEAST({p}, {float(low)!r})" for p in self.parts(sql)]
        return f"COALESCE(SUM({' + '.join(terms)}), 0)"

    def truncation_partials(self, sql: Operands) -> tuple[str, ...]:
        """What ``per_key`` computes beyond each column's count and sum when the statistic is truncated."""
        return ()


def _bounds(column: ColumnSpec | None) -> tuple[float, float]:
    """The clamping bounds of a summed column; refused when it has none."""
    assert column is not None
    if column.lower is None or column.upper is None:
        raise QueryRefused(
            f"column {column.name} has no clamping bounds in the catalog, so its sum is unbounded."
        )
    return column.lower, column.upper


class _RowCount(StatisticKind):
    """COUNT(*): a user adds ``min(rows, kappa)``."""

    name = "rows"
    integer = True

    def per_group(self, kappa: int, column: ColumnSpec | None) -> float:
        return float(kappa)

    def row_level(self, sql: Operands) -> str:
        return "COUNT(*)"

    def user_level(self, sql: Operands) -> str:
        return f"COALESCE(SUM(LEAST({sql.rows}, {sql.kappa})), 0)"

    def weighted(self, sql: Operands, weights: Weights) -> str:
        return f"SUM({weights.rows})"

    def truncated(self, sql: Operands, tau: float) -> str:
        return f"COALESCE(SUM(LEAST({sql.rows}, {int(tau)})), 0)"

    def parts(self, sql: Operands) -> tuple[str, ...]:
        return (sql.rows,)


class _ValueCount(StatisticKind):
    """COUNT(c): a user adds ``min(non-null rows, kappa)``."""

    name = "n"
    integer = True

    def per_group(self, kappa: int, column: ColumnSpec | None) -> float:
        return float(kappa)

    def row_level(self, sql: Operands) -> str:
        return f"COUNT({sql.value})"

    def user_level(self, sql: Operands) -> str:
        return f"COALESCE(SUM({sql.bounded_count}), 0)"

    def weighted(self, sql: Operands, weights: Weights) -> str:
        return f"SUM(CASE WHEN {sql.value} IS NOT NULL THEN {weights.value} ELSE 0 END)"

    def truncated(self, sql: Operands, tau: float) -> str:
        return f"COALESCE(SUM(LEAST({sql.count}, {int(tau)})), 0)"

    def parts(self, sql: Operands) -> tuple[str, ...]:
        return (sql.count,)


class _UserCount(StatisticKind):
    """The distinct users of a group (COUNT(DISTINCT unit), private partition selection): a user adds 1."""

    name = "users"
    integer = True

    def per_group(self, kappa: int, column: ColumnSpec | None) -> float:
        return 1.0

    def row_level(self, sql: Operands) -> str:
        return "COUNT(*)"

    def user_level(self, sql: Operands) -> str:
        return "COUNT(*)"

    def weighted(self, sql: Operands, weights: Weights) -> str:
        return f"SUM({weights.users})"


class _DistinctValues(StatisticKind):
    """COUNT(DISTINCT c) over the rows of a row-level table (each row a person): adding or removing one row
    moves the distinct values of its one group by at most 1, so the sensitivity is 1 (L0 = 1). Only on a
    row-level table (a person's many rows could each add a value) and beside no quantile (whose weighted
    statement has no distinct values): :mod:`kakeibo.sql.aggregate_calls` and the planner refuse the rest
    before any read."""

    name = "d"
    integer = True
    raw = True

    def per_group(self, kappa: int, column: ColumnSpec | None) -> float:
        return 1.0

    def row_level(self, sql: Operands) -> str:
        return f"COUNT(DISTINCT {sql.distinct})"

    def user_level(self, sql: Operands) -> str:
        raise AssertionError("COUNT(DISTINCT c) is read on row-level tables only")

    def weighted(self, sql: Operands, weights: Weights) -> str:
        raise AssertionError("the planner refuses COUNT(DISTINCT c) beside a quantile")


class _ValueSum(StatisticKind):
    """SUM(c): a user adds their scaled sum of clamped values, in ``kappa [min(lower, 0), max(upper, 0)]``."""

    name = "s"

    def per_group(self, kappa: int, column: ColumnSpec | None) -> float:
        lower, upper = _bounds(column)
        return kappa * max(abs(lower), abs(upper))

    def contribution(self, kappa: int, column: ColumnSpec | None) -> tuple[float, float]:
        lower, upper = _bounds(column)
        return kappa * min(lower, 0.0), kappa * max(upper, 0.0)

    def row_level(self, sql: Operands) -> str:
        return f"COALESCE(SUM({sql.value}), 0)"

    def user_level(self, sql: Operands) -> str:
        return f"COALESCE(SUM({sql.scaled(sql.total)}), 0)"

    def weighted(self, sql: Operands, weights: Weights) -> str:
        return f"SUM({sql.value} * {weights.value})"

    def truncated(self, sql: Operands, tau: float) -> str:
        """Each user's total truncated at ``tau``. The race's clamped values are at least 0 (the plan refuses
        it otherwise), so is each user's total; a column that can be negative (a ladder's) has its positive
        and negative parts truncated at ``tau`` apart: a user adds between ``-tau`` and ``tau``."""
        if sql.signed:
            return (
                f"COALESCE(SUM(LEAST(COALESCE({sql.positive}, 0), {float(tau)!r}) - "
                f"LEAST(COALESCE({sql.negative}, 0), {float(tau)!r})), 0)"
            )
        return f"COALESCE(SUM(LEAST(COALESCE({sql.total}, 0), {float(tau)!r})), 0)"

    def parts(self, sql: Operands) -> tuple[str, ...]:
        if sql.signed:
            return f"COALESCE({sql.positive}, 0)", f"COALESCE({sql.negative}, 0)"
        return (f"COALESCE({sql.total}, 0)",)

    def truncation_partials(self, sql: Operands) -> tuple[str, ...]:
        """A signed column's positive and negative parts, summed per user and group."""
        if not sql.signed:
            return ()
        return (
            f"SUM(GREATEST({sql.value}, 0)) AS {sql.positive}",
            f"SUM(GREATEST(-{sql.value}, 0)) AS {sql.negative}",
        )


class _CentredSum(StatisticKind):
    """SUM(c - mid), for AVG and VARIANCE: a user adds at most ``kappa (upper - lower) / 2`` either way."""

    name = "sc"

    def per_group(self, kappa: int, column: ColumnSpec | None) -> float:
        lower, upper = _bounds(column)
        return kappa * (upper - lower) / 2

    def contribution(self, kappa: int, column: ColumnSpec | None) -> tuple[float, float]:
        high = self.per_group(kappa, column)
        return -high, high

    def row_level(self, sql: Operands) -> str:
        return f"COALESCE(SUM({sql.value} - {sql.mid!r}), 0)"

    def user_level(self, sql: Operands) -> str:
        """Each user's scaled partial sum minus mid times their bounded count."""
        return f"COALESCE(SUM({sql.scaled(sql.total)} - {sql.mid!r} * {sql.bounded_count}), 0)"

    def weighted(self, sql: Operands, weights: Weights) -> str:
        return f"SUM(({sql.value} - {sql.mid!r}) * {weights.value})"


class _CentredSquares(StatisticKind):
    """SUM((c - mid)^2), for VARIANCE: a user adds at most ``kappa ((upper - lower) / 2)^2``."""

    name = "sq"

    def per_group(self, kappa: int, column: ColumnSpec | None) -> float:
        lower, upper = _bounds(column)
        return kappa * ((upper - lower) / 2) ** 2

    def partials(self, sql: Operands) -> tuple[str, ...]:
        return (f"SUM({sql.square}) AS {sql.squares}",)

    def row_level(self, sql: Operands) -> str:
        return f"COALESCE(SUM({sql.square}), 0)"

    def user_level(self, sql: Operands) -> str:
        """Each user's centred squares, scaled like their sum."""
        return f"COALESCE(SUM({sql.scaled(sql.squares)}), 0)"

    def weighted(self, sql: Operands, weights: Weights) -> str:
        return f"SUM({sql.square} * {weights.value})"


ROWS, VALUES, USERS, DISTINCT = _RowCount(), _ValueCount(), _UserCount(), _DistinctValues()
SUM, CENTRED_SUM, CENTRED_SQUARES = _ValueSum(), _CentredSum(), _CentredSquares()


@dataclass(frozen=True)
class Statistic:
    """One bounded per-group statistic the engine computes, and its noise (:mod:`kakeibo.sql.plan`)."""

    name: str  # column name in the engine's result, e.g. "rows", "n_amount", "s_amount"
    kind: StatisticKind
    column: str | None
    per_group_sensitivity: float
    mechanism: Mechanism
    race: Race | None = None  # truncated by the R2T race: one mechanism per threshold, ``mechanism`` the last
    released: bool = True  # False: the distinct users read by partition selection only, never noised
    truncation: float | None = None  # each person's total in a group truncated at this tau (SUM only)

    @property
    def integer(self) -> bool:
        return self.kind.integer


class Planned(Protocol):
    """What recombining the aggregates reads of the plan that drew the noise
    (:class:`kakeibo.sql.plan.NoisePlan`): a statistic's noise, and the column an aggregate reads."""

    def statistic(self, name: str) -> Statistic:
        """The statistic named ``name``."""

    def column(self, name: str) -> ColumnSpec:
        """What an aggregate's ``column`` reads, with the bounds it is clamped to."""


@dataclass(frozen=True)
class NoisyStatistics:
    """The noisy statistics of the released groups (an array per statistic name), the plan that drew them,
    and the quantiles' selections (value and interval by alias, :mod:`kakeibo.sql.quantiles`)."""

    plan: Planned
    values: Mapping[str, Any]
    selections: Mapping[str, Estimate]

    def interval(self, name: str, beta: float) -> Estimate:
        """A statistic's noisy value and its ``1 - beta`` interval: its mechanism's error bound either way."""
        value = self.values[name]
        race = self.plan.statistic(name).race
        if race is not None:  # an under-estimate of the untruncated value: its interval is one-sided
            return (value, *race.interval(self.values[f"{name}__shifted"], beta))
        half = self.plan.statistic(name).mechanism.error_bound(beta)
        return value, value - half, value + half

    def bounds(self, column: str | None) -> tuple[float, float]:
        """The clamping bounds of an aggregate's column."""
        spec = self.plan.column(column or "")
        return float(spec.lower or 0), float(spec.upper or 0)


#: the statistics one aggregate is estimated from: (kind, column) pairs
Needs = tuple[tuple[StatisticKind, str | None], ...]


@dataclass(frozen=True)
class Call:
    """One spelling of an aggregate as a call on one column (:mod:`kakeibo.sql.aggregate_calls`)."""

    prefix: str  # of the output name it gets without an alias: ``sum``, ``var_pop``, ``median``, ...
    shown: str  # its name in refusals: ``SUM``, ``VARIANCE``, ``MEDIAN``, ...
    sample: bool = True  # VAR_SAMP / STDDEV_SAMP rather than VAR_POP / STDDEV_POP
    quantile: Fraction | None = None  # the quantile MEDIAN, MIN and MAX fix


#: a call's key in :attr:`AggregateSpec.calls`: sqlglot's type of the call, or the lower-case name of a
#: call sqlglot reads as an anonymous function (VAR, STD, ...)
CallKey = type[exp.Expr] | str


class AggregateSpec(ABC):
    """An aggregate function: everything the compiler asks of it, so that no module branches on its name.

    The defaults describe a value aggregate released from noisy Laplace statistics: a double, negative
    only when its column's values can be, not covered by the R2T race, covered by the correlated
    calibration.
    """

    #: its spellings as a call on one column (COUNT's forms and the quantiles that take ``q`` are grammar
    #: :mod:`kakeibo.sql.aggregate_calls` reads itself)
    calls: ClassVar[Mapping[CallKey, Call]] = {}
    #: the released value's type as HAVING sees it (:mod:`kakeibo.sql.condition_types`)
    output_type: ClassVar[ColumnType] = "float"
    centred: ClassVar[bool] = False  # estimated from the column's centred moments (AVG, VARIANCE, STDDEV)
    #: why the Gaussian correlation model does not cover it: refused on a table with correlated users
    correlated_refusal: ClassVar[str | None] = None
    #: planned and released by a permute-and-flip selection of its own over a histogram of its column at one
    #: share of the budget (:mod:`kakeibo.sql.quantiles`), instead of from noisy statistics
    selected: ClassVar[bool] = False

    def never_negative(self, lower: float | None) -> bool:
        """Whether its true value cannot be negative when its column is bounded below by ``lower``
        (``None``: no column, or none declared): ``nonnegative=True`` clamps exactly these at 0. By default
        when the column's values cannot be."""
        return lower is not None and lower >= 0

    def under_race(self) -> AggregateSpec | None:
        """What it is released as when the R2T race truncates each person's contributions
        (:mod:`kakeibo.sql.truncation`), or ``None``: the race does not cover it (the plan refuses it). The
        race covers sums of contributions that are never negative (Dong et al. 2022, "R2T"), so it also
        needs :meth:`never_negative` to hold for the column's lower bound."""
        return None

    def needs(self, column: str | None, centred: bool) -> Needs:
        """The statistics it is estimated from; ``centred``: the query needs the column's centred moments
        anyway (it also asks for an AVG, VARIANCE or STDDEV of it). None for a selected aggregate."""
        return ()

    def direct(self, column: str | None) -> str | None:
        """The statistic it releases as it is, if any: its error does not depend on the data."""
        return None

    @abstractmethod
    def estimate(self, noisy: NoisyStatistics, agg: Aggregate, beta: float) -> Estimate:
        """Its value and ``1 - beta`` interval per released group."""


class _Direct(AggregateSpec):
    """An aggregate that is one statistic, released as it is with its mechanism's interval."""

    @abstractmethod
    def kind(self, column: str | None) -> StatisticKind:
        """The statistic's kind."""

    def needs(self, column: str | None, centred: bool) -> Needs:
        return ((self.kind(column), column),)

    def direct(self, column: str | None) -> str:
        return self.kind(column).statistic(column)

    def estimate(self, noisy: NoisyStatistics, agg: Aggregate, beta: float) -> Estimate:
        return noisy.interval(self.direct(agg.column), beta)


class _Count(_Direct):
    """COUNT(*) and COUNT(c): a whole number, never negative, raced as it is."""

    output_type = "int"

    def kind(self, column: str | None) -> StatisticKind:
        return ROWS if column is None else VALUES

    def never_negative(self, lower: float | None) -> bool:
        return True

    def under_race(self) -> AggregateSpec:
        return self


class _CountUsers(_Count):
    """COUNT(DISTINCT unit)."""

    def kind(self, column: str | None) -> StatisticKind:
        return USERS


class _CountDistinct(_Count):
    """COUNT(DISTINCT c) on a row-level table (:class:`_DistinctValues`)."""

    def kind(self, column: str | None) -> StatisticKind:
        return DISTINCT


def _count_and_centred_sum(
    noisy: NoisyStatistics, column: str | None, beta: float
) -> tuple[Estimate, Estimate]:
    """``n_c`` and ``sc_c`` with ``1 - beta / 2`` intervals each, for an AVG or SUM interval of ``1 - beta``
    (a 95% interval from two 97.5% intervals: union bound)."""
    return (
        noisy.interval(VALUES.statistic(column), beta / 2),
        noisy.interval(CENTRED_SUM.statistic(column), beta / 2),
    )


class _Sum(_Direct):
    """SUM(c): ``s_c`` as it is, or next to an AVG, VARIANCE or STDDEV of c ``mid * n + centred sum`` (no
    budget of its own)."""

    calls: ClassVar[Mapping[CallKey, Call]] = {exp.Sum: Call("sum", "SUM")}

    def kind(self, column: str | None) -> StatisticKind:
        return SUM

    def under_race(self) -> AggregateSpec:
        return self

    def needs(self, column: str | None, centred: bool) -> Needs:
        return AGGREGATES["avg"].needs(column, centred) if centred else super().needs(column, centred)

    def estimate(self, noisy: NoisyStatistics, agg: Aggregate, beta: float) -> Estimate:
        column = agg.column
        if self.direct(column) in noisy.values:
            return super().estimate(noisy, agg, beta)
        lower, upper = noisy.bounds(column)
        mid = (lower + upper) / 2
        (n, n_low, n_high), (sc, sc_low, sc_high) = _count_and_centred_sum(noisy, column, beta)
        ends = (mid * n_low, mid * n_high)
        return mid * n + sc, sc_low + np.minimum(*ends), sc_high + np.maximum(*ends)


class _Avg(AggregateSpec):
    """AVG(c) = mid + centred sum / count, clipped to the column's bounds."""

    calls: ClassVar[Mapping[CallKey, Call]] = {exp.Avg: Call("avg", "AVG")}
    centred = True

    def under_race(self) -> AggregateSpec:
        return AVG_OF_TRUNCATED_SUMS

    def needs(self, column: str | None, centred: bool) -> Needs:
        return (VALUES, column), (CENTRED_SUM, column)

    def estimate(self, noisy: NoisyStatistics, agg: Aggregate, beta: float) -> Estimate:
        lower, upper = noisy.bounds(agg.column)
        mid = (lower + upper) / 2
        (n, n_low, n_high), (sc, sc_low, sc_high) = _count_and_centred_sum(noisy, agg.column, beta)
        with np.errstate(divide="ignore", invalid="ignore"):
            value = np.clip(mid + sc / np.maximum(n, 1), lower, upper)
            candidates = np.stack([sc_low / n_low, sc_low / n_high, sc_high / n_low, sc_high / n_high])
            low = np.where(n_low > 0, np.clip(mid + candidates.min(axis=0), lower, upper), lower)
            high = np.where(n_low > 0, np.clip(mid + candidates.max(axis=0), lower, upper), upper)
        return value, low, high


class _AvgOfTruncatedSums(AggregateSpec):
    """AVG(c) under the R2T race (:mod:`kakeibo.sql.truncation`): the raced SUM(c) over the raced COUNT(c),
    with the interval from their intervals at ``1 - beta / 2`` each (both one-sided below the untruncated
    values; the values are at least 0, so the quotient's ends are those of the ends' quotients), clipped to
    the column's bounds."""

    def needs(self, column: str | None, centred: bool) -> Needs:
        return (VALUES, column), (SUM, column)

    def estimate(self, noisy: NoisyStatistics, agg: Aggregate, beta: float) -> Estimate:
        lower, upper = noisy.bounds(agg.column)
        n, n_low, n_high = noisy.interval(VALUES.statistic(agg.column), beta / 2)
        s, s_low, s_high = noisy.interval(SUM.statistic(agg.column), beta / 2)
        with np.errstate(divide="ignore", invalid="ignore"):
            value = np.where(n > 0, np.clip(s / np.maximum(n, 1), lower, upper), (lower + upper) / 2)
            low = np.where(n_high > 0, np.clip(s_low / np.maximum(n_high, 1), lower, upper), lower)
            high = np.where(n_low > 0, np.clip(s_high / np.maximum(n_low, 1), lower, upper), upper)
        return value, low, high


class _Variance(AggregateSpec):
    """VAR = E[(x - mid)^2] - E[x - mid]^2 from noisy n, centred sum and centred squares; the 95% interval
    combines three 98.33% intervals (union bound) by interval arithmetic, clipped to [0, ((U - L)/2)^2]
    (times n / (n - 1) for the sample variance, which can exceed the population one's ceiling)."""

    calls: ClassVar[Mapping[CallKey, Call]] = {
        exp.Variance: Call("variance", "VARIANCE"),
        "var": Call("variance", "VARIANCE"),
        exp.VariancePop: Call("var_pop", "VARIANCE", sample=False),
        "varp": Call("var_pop", "VARIANCE", sample=False),
    }
    centred = True
    correlated_refusal = (
        "the Gaussian correlation model calibrates sums of per-user values, not the sum of squares a "
        "variance needs."
    )

    def never_negative(self, lower: float | None) -> bool:
        return True

    def needs(self, column: str | None, centred: bool) -> Needs:
        return (VALUES, column), (CENTRED_SUM, column), (CENTRED_SQUARES, column)

    def estimate(self, noisy: NoisyStatistics, agg: Aggregate, beta: float) -> Estimate:
        lower, upper = noisy.bounds(agg.column)
        sample = agg.sample
        cap = ((upper - lower) / 2) ** 2
        n, n_low, n_high = noisy.interval(VALUES.statistic(agg.column), beta / 3)
        sc, sc_low, sc_high = noisy.interval(CENTRED_SUM.statistic(agg.column), beta / 3)
        sq, sq_low, sq_high = noisy.interval(CENTRED_SQUARES.statistic(agg.column), beta / 3)
        with np.errstate(divide="ignore", invalid="ignore"):
            count = np.maximum(n, 2 if sample else 1)
            value = sq / count - (sc / count) ** 2
            positive = n_low > (1 if sample else 0)
            low_n = np.maximum(n_low, 1)
            mean_sq_high = np.maximum(np.abs(sc_low), np.abs(sc_high)) / low_n
            mean_sq_low = np.where(
                (sc_low <= 0) & (sc_high >= 0), 0.0, np.minimum(np.abs(sc_low), np.abs(sc_high)) / n_high
            )
            low = np.where(positive, np.maximum(sq_low, 0) / n_high - mean_sq_high**2, 0.0)
            high = np.where(positive, np.maximum(sq_high, 0) / low_n - mean_sq_low**2, cap)
            # the most a population variance of values in [L, U] can be
            ceiling: Any = cap
            value_ceiling: Any = cap
            if sample:  # a sample variance is the population one times n / (n - 1): up to 2 * cap at n = 2
                least = np.maximum(n_low, 2)
                ceiling = np.where(positive, cap * least / (least - 1), 2 * cap)
                value_ceiling = cap * count / (count - 1)
                value, low, high = (
                    value * count / (count - 1),
                    low * n_high / np.maximum(n_high - 1, 1),
                    np.where(positive, high * low_n / np.maximum(low_n - 1, 1), ceiling),
                )
            value = np.clip(value, 0, value_ceiling)
            low, high = np.clip(low, 0, ceiling), np.clip(high, 0, ceiling)
        return value, low, high


class _StdDev(_Variance):
    """STDDEV = the square root of VARIANCE and of its interval's ends."""

    calls: ClassVar[Mapping[CallKey, Call]] = {
        exp.Stddev: Call("stddev", "STDDEV"),
        exp.StddevSamp: Call("stddev", "STDDEV"),
        "std": Call("stddev", "STDDEV"),
        exp.StddevPop: Call("stddev_pop", "STDDEV", sample=False),
        "stdevp": Call("stddev_pop", "STDDEV", sample=False),
    }

    def estimate(self, noisy: NoisyStatistics, agg: Aggregate, beta: float) -> Estimate:
        value, low, high = super().estimate(noisy, agg, beta)
        return np.sqrt(value), np.sqrt(low), np.sqrt(high)


class _Quantile(AggregateSpec):
    """A quantile (MEDIAN, QUANTILE, PERCENTILE_CONT, MIN, MAX): not a sum of contributions but a selection
    by the exponential mechanism over a histogram of its column (:mod:`kakeibo.sql.quantiles`), which
    neither the R2T race nor the correlated calibration covers."""

    calls: ClassVar[Mapping[CallKey, Call]] = {
        exp.Median: Call("median", "MEDIAN", quantile=Fraction(1, 2)),
        exp.Min: Call("min", "MIN", quantile=Fraction(0)),
        exp.Max: Call("max", "MAX", quantile=Fraction(1)),
    }
    correlated_refusal = (
        "the Bayesian calibration (seed 001, eq. 26) covers Laplace sums, not the exponential mechanism of "
        "quantiles, MIN and MAX."
    )
    selected = True

    def estimate(self, noisy: NoisyStatistics, agg: Aggregate, beta: float) -> Estimate:
        """Its selections. Their interval was drawn at the release's level (``beta = 1 - CONFIDENCE``); at
        a stricter one (an expression reading it beside other aggregates, :mod:`kakeibo.sql.derived`) it
        has none: NaN."""
        value, low, high = noisy.selections[agg.alias]
        if beta == 1 - CONFIDENCE:
            return value, low, high
        unknown = np.full(len(value), np.nan)
        return value, unknown, unknown


#: every aggregate function, by the name the analyser gives it (``Aggregate.function``)
AGGREGATES: Mapping[str, AggregateSpec] = {
    "count": _Count(),
    "count_distinct_unit": _CountUsers(),
    "count_distinct": _CountDistinct(),
    "sum": _Sum(),
    "avg": _Avg(),
    "variance": _Variance(),
    "stddev": _StdDev(),
    "quantile": _Quantile(),
}


#: AVG when each person's contributions are truncated by the R2T race: a ratio of raced sums
AVG_OF_TRUNCATED_SUMS: AggregateSpec = _AvgOfTruncatedSums()


def aggregate_spec(function: str, raced: bool) -> AggregateSpec:
    """The aggregate function ``function`` is released by, ``raced``: under the R2T race.

    >>> type(aggregate_spec("avg", False)).__name__, type(aggregate_spec("avg", True)).__name__
    ('_Avg', '_AvgOfTruncatedSums')
    """
    spec = AGGREGATES[function]
    if not raced:
        return spec
    raced_spec = spec.under_race()
    assert raced_spec is not None, f"the plan refuses {function} under the R2T race"
    return raced_spec


def direct_statistic(function: str, column: str | None) -> str | None:
    """The statistic an aggregate releases as it is (COUNT, COUNT(DISTINCT unit), SUM), else ``None``.

    >>> direct_statistic("count", None), direct_statistic("sum", "amount"), direct_statistic("avg", "amount")
    ('rows', 's_amount', None)
    """
    aggregate = AGGREGATES.get(function)
    return None if aggregate is None else aggregate.direct(column)
