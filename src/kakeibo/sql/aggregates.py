"""The aggregates of DP SQL in one place: the statistics the engine computes per group, and the aggregate
functions estimated from them.

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
==========================  ====================================  ===============================

An aggregate function (:class:`AggregateSpec`, one per function in :data:`AGGREGATES`) says which
statistics it is estimated from and how their noisy values recombine into its value and confidence
interval. :mod:`kakeibo.sql.plan` noises the statistics, :mod:`kakeibo.sql.rewrite` compiles them and
:mod:`kakeibo.sql.session` releases the aggregates, all from here. Quantiles (MEDIAN, QUANTILE, MIN, MAX)
are selections, not sums: :mod:`kakeibo.sql.quantiles`.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np

from .catalog import ColumnSpec, QueryRefused

if TYPE_CHECKING:
    from .plan import NoisePlan

__all__ = [
    "AGGREGATES",
    "AVG_OF_TRUNCATED_SUMS",
    "CENTRED_SQUARES",
    "CENTRED_SUM",
    "ROWS",
    "SUM",
    "USERS",
    "VALUES",
    "AggregateSpec",
    "NoisyStatistics",
    "Operands",
    "StatisticKind",
    "Weights",
    "aggregate_spec",
    "direct_statistic",
]

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
        """The clamped values are at least 0 (the plan refuses a race otherwise), so is each user's total."""
        return f"COALESCE(SUM(LEAST(COALESCE({sql.total}, 0), {tau!r})), 0)"


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


ROWS, VALUES, USERS = _RowCount(), _ValueCount(), _UserCount()
SUM, CENTRED_SUM, CENTRED_SQUARES = _ValueSum(), _CentredSum(), _CentredSquares()


@dataclass(frozen=True)
class NoisyStatistics:
    """The noisy statistics of the released groups (an array per statistic name) and the plan that drew
    them."""

    plan: NoisePlan
    values: Mapping[str, Any]

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
        spec = self.plan.query.value(column or "").spec
        return float(spec.lower or 0), float(spec.upper or 0)


#: the statistics one aggregate is estimated from: (kind, column) pairs
Needs = tuple[tuple[StatisticKind, str | None], ...]


class AggregateSpec(ABC):
    """An aggregate function released from noisy per-group statistics."""

    centred: ClassVar[bool] = False  # estimated from the column's centred moments (AVG, VARIANCE, STDDEV)
    #: why the Gaussian correlation model does not cover it: refused on a table with correlated users
    correlated_refusal: ClassVar[str | None] = None

    @abstractmethod
    def needs(self, column: str | None, centred: bool) -> Needs:
        """The statistics it is estimated from; ``centred``: the query needs the column's centred moments
        anyway (it also asks for an AVG, VARIANCE or STDDEV of it)."""

    def direct(self, column: str | None) -> str | None:
        """The statistic it releases as it is, if any: its error does not depend on the data."""
        return None

    @abstractmethod
    def estimate(self, noisy: NoisyStatistics, column: str | None, beta: float, sample: bool) -> Estimate:
        """Its value and ``1 - beta`` interval per released group (``sample``: VAR_SAMP, not VAR_POP)."""


class _Direct(AggregateSpec):
    """An aggregate that is one statistic, released as it is with its mechanism's interval."""

    @abstractmethod
    def kind(self, column: str | None) -> StatisticKind:
        """The statistic's kind."""

    def needs(self, column: str | None, centred: bool) -> Needs:
        return ((self.kind(column), column),)

    def direct(self, column: str | None) -> str:
        return self.kind(column).statistic(column)

    def estimate(self, noisy: NoisyStatistics, column: str | None, beta: float, sample: bool) -> Estimate:
        return noisy.interval(self.direct(column), beta)


class _Count(_Direct):
    """COUNT(*) and COUNT(c)."""

    def kind(self, column: str | None) -> StatisticKind:
        return ROWS if column is None else VALUES


class _CountUsers(_Direct):
    """COUNT(DISTINCT unit)."""

    def kind(self, column: str | None) -> StatisticKind:
        return USERS


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

    def kind(self, column: str | None) -> StatisticKind:
        return SUM

    def needs(self, column: str | None, centred: bool) -> Needs:
        return AGGREGATES["avg"].needs(column, centred) if centred else super().needs(column, centred)

    def estimate(self, noisy: NoisyStatistics, column: str | None, beta: float, sample: bool) -> Estimate:
        if self.direct(column) in noisy.values:
            return super().estimate(noisy, column, beta, sample)
        lower, upper = noisy.bounds(column)
        mid = (lower + upper) / 2
        (n, n_low, n_high), (sc, sc_low, sc_high) = _count_and_centred_sum(noisy, column, beta)
        ends = (mid * n_low, mid * n_high)
        return mid * n + sc, sc_low + np.minimum(*ends), sc_high + np.maximum(*ends)


class _Avg(AggregateSpec):
    """AVG(c) = mid + centred sum / count, clipped to the column's bounds."""

    centred = True

    def needs(self, column: str | None, centred: bool) -> Needs:
        return (VALUES, column), (CENTRED_SUM, column)

    def estimate(self, noisy: NoisyStatistics, column: str | None, beta: float, sample: bool) -> Estimate:
        lower, upper = noisy.bounds(column)
        mid = (lower + upper) / 2
        (n, n_low, n_high), (sc, sc_low, sc_high) = _count_and_centred_sum(noisy, column, beta)
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

    def estimate(self, noisy: NoisyStatistics, column: str | None, beta: float, sample: bool) -> Estimate:
        lower, upper = noisy.bounds(column)
        n, n_low, n_high = noisy.interval(VALUES.statistic(column), beta / 2)
        s, s_low, s_high = noisy.interval(SUM.statistic(column), beta / 2)
        with np.errstate(divide="ignore", invalid="ignore"):
            value = np.where(n > 0, np.clip(s / np.maximum(n, 1), lower, upper), (lower + upper) / 2)
            low = np.where(n_high > 0, np.clip(s_low / np.maximum(n_high, 1), lower, upper), lower)
            high = np.where(n_low > 0, np.clip(s_high / np.maximum(n_low, 1), lower, upper), upper)
        return value, low, high


class _Variance(AggregateSpec):
    """VAR = E[(x - mid)^2] - E[x - mid]^2 from noisy n, centred sum and centred squares; the 95% interval
    combines three 98.33% intervals (union bound) by interval arithmetic, clipped to [0, ((U - L)/2)^2]
    (times n / (n - 1) for the sample variance, which can exceed the population one's ceiling)."""

    centred = True
    correlated_refusal = (
        "the Gaussian correlation model calibrates sums of per-user values, not the sum of squares a "
        "variance needs."
    )

    def needs(self, column: str | None, centred: bool) -> Needs:
        return (VALUES, column), (CENTRED_SUM, column), (CENTRED_SQUARES, column)

    def estimate(self, noisy: NoisyStatistics, column: str | None, beta: float, sample: bool) -> Estimate:
        lower, upper = noisy.bounds(column)
        cap = ((upper - lower) / 2) ** 2
        n, n_low, n_high = noisy.interval(VALUES.statistic(column), beta / 3)
        sc, sc_low, sc_high = noisy.interval(CENTRED_SUM.statistic(column), beta / 3)
        sq, sq_low, sq_high = noisy.interval(CENTRED_SQUARES.statistic(column), beta / 3)
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

    def estimate(self, noisy: NoisyStatistics, column: str | None, beta: float, sample: bool) -> Estimate:
        value, low, high = super().estimate(noisy, column, beta, sample)
        return np.sqrt(value), np.sqrt(low), np.sqrt(high)


#: the aggregate functions released from the statistics, by the analyser's name (quantiles: :mod:`.quantiles`)
AGGREGATES: Mapping[str, AggregateSpec] = {
    "count": _Count(),
    "count_distinct_unit": _CountUsers(),
    "sum": _Sum(),
    "avg": _Avg(),
    "variance": _Variance(),
    "stddev": _StdDev(),
}


#: AVG when each person's contributions are truncated by the R2T race: a ratio of raced sums
AVG_OF_TRUNCATED_SUMS: AggregateSpec = _AvgOfTruncatedSums()


def aggregate_spec(function: str, raced: bool) -> AggregateSpec:
    """The aggregate function ``function`` is released by, ``raced``: under the R2T race.

    >>> type(aggregate_spec("avg", False)).__name__, type(aggregate_spec("avg", True)).__name__
    ('_Avg', '_AvgOfTruncatedSums')
    """
    return AVG_OF_TRUNCATED_SUMS if raced and function == "avg" else AGGREGATES[function]


def direct_statistic(function: str, column: str | None) -> str | None:
    """The statistic an aggregate releases as it is (COUNT, COUNT(DISTINCT unit), SUM), else ``None``.

    >>> direct_statistic("count", None), direct_statistic("sum", "amount"), direct_statistic("avg", "amount")
    ('rows', 's_amount', None)
    """
    aggregate = AGGREGATES.get(function)
    return None if aggregate is None else aggregate.direct(column)
