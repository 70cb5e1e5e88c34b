"""The noise plan of a DP SQL query: which bounded statistics the engine computes, their sensitivities under
the user-level neighbour relation, the mechanism of each, and private partition selection.

Neighbour relation: add or remove one privacy unit (user) with all their rows, in every table whose
references lead to them (:mod:`kakeibo.sql.catalog`); for a row-level table, one row. After bounding (see
:mod:`kakeibo.sql.rewrite`) a user touches at most ``L0 = max_partitions`` groups of the grain table (one,
when every GROUP BY key is a column constant per user) and contributes to each group's statistics at most
their per-group sensitivities, which :mod:`kakeibo.sql.aggregates` lists with the statistics each aggregate
needs; with ``max_rows_per_partition = "auto"`` each count and sum is raced instead
(:mod:`kakeibo.sql.truncation`).

A statistic over all groups then has L1 sensitivity ``L0`` times its per-group one; each is released with
Laplace noise (the geometric mechanism for integer statistics) at ``epsilon / k``, where ``k`` counts the
statistics and the quantile aggregates. A quantile is not a sum: it is selected by the exponential
mechanism over an engine-computed histogram of the column (:mod:`kakeibo.sql.quantiles`).
Group keys come from the catalog's public values when every GROUP BY column has them; otherwise they are
selected privately by the optimal keep probability of Desfontaines, Voss, Gipson and Mandayam (PoPETs 2022;
:class:`~kakeibo.mechanisms.PartitionSelection`): each key the engine found is kept with probability
``pi(n)`` of its ``n`` distinct users, at ``epsilon / (k + 1)`` and ``delta`` over a user's ``L0`` keys
(``epsilon / L0`` and ``1 - (1 - delta)^(1 / L0)`` per key), which makes the whole query
(epsilon, delta)-DP. It keeps more keys at every ``n`` than a threshold on a noisy user count.

On a table whose catalog declares a correlation graph over its users, every statistic instead gets Laplace
noise of scale ``Delta (1 + l*) / share``: ``Delta`` is the replace range of one user's contribution and
``l*`` the graph's certified largest leakage coefficient (seed 001, eq. 26). Variances, quantiles and
private partition selection are refused there; :mod:`kakeibo.sql.correlation` gives the model, the
neighbour relation and the proofs.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from fractions import Fraction

from ..accounting.overlap import Box
from ..errors import ArgumentError
from ..mechanisms import Geometric, Laplace, Mechanism, PartitionSelection
from ..privacy import ApproxDP, Number, PrivacyLoss, PureDP, as_fraction
from .aggregates import (
    AGGREGATES,
    CONFIDENCE,
    SUM,
    USERS,
    Statistic,
    StatisticKind,
    aggregate_spec,
    direct_statistic,
)
from .analyze import AnalyzedQuery, QueryRefused
from .catalog import ColumnSpec
from .correlation import CorrelationBound
from .quantiles import Buckets, QuantileEstimate, make_quantile
from .shape import Aggregate
from .truncation import make_race

__all__ = [
    "CONFIDENCE",
    "EPSILON_RANGE",
    "NoisePlan",
    "Statistic",
    "check_epsilon",
    "direct_statistic",
    "epsilon_for_accuracy",
    "plan_query",
    "refused_when_out_of_range",
]

#: the epsilons a query may ask for: beyond them noise scales leave the exact samplers' range (or a float's)
EPSILON_RANGE = (Fraction(1, 2**40), Fraction(2**40))


def check_epsilon(epsilon: Fraction, what: str = "epsilon") -> Fraction:
    """``epsilon`` when it lies in :data:`EPSILON_RANGE`, else :class:`QueryRefused`: the planner's rule for
    every epsilon a release is built at (a query's, a view's, a share of either), checked before the draw
    so that no parameter can make a release fail after its charge (issue 29, R9)."""
    if not EPSILON_RANGE[0] <= epsilon <= EPSILON_RANGE[1]:
        raise QueryRefused(f"{what} must lie between 2**-40 and 2**40, got {_shown(epsilon)}.")
    return epsilon


@contextmanager
def refused_when_out_of_range() -> Iterator[None]:
    """Turn a mechanism that cannot be built (its noise beyond the range of the exact samplers, or planning
    arithmetic beyond a float's) into :class:`QueryRefused`. Every mechanism checks its range when it is
    built, from public inputs only, so wrapping the planning step refuses such a release before its draw
    instead of failing inside it, charged, or as a raw ``ValueError`` / ``OverflowError`` (issue 29, R9)."""
    try:
        yield
    except QueryRefused:
        raise
    except (ValueError, OverflowError, ZeroDivisionError):
        raise QueryRefused(
            "the noise this release needs is beyond the range of kakeibo's exact samplers; raise epsilon, or "
            "declare smaller limits and bounds."
        ) from None


@dataclass(frozen=True)
class NoisePlan:
    """Everything decided before any data is read: bounds, statistics, mechanisms, selection, cost."""

    query: AnalyzedQuery
    epsilon: Fraction
    delta: Fraction
    max_partitions: int
    max_rows_per_partition: int
    statistics: tuple[Statistic, ...]
    public_keys: tuple[tuple[object, ...], ...] | None  # the released keys, or None for private selection
    selection: PartitionSelection | None  # private selection: keeps each key by its distinct users
    quantiles: tuple[QuantileEstimate, ...] = ()
    correlation: CorrelationBound | None = None  # set when the table's users are correlated
    quantile_limits: tuple[int, int] | None = None  # the quantiles' own (kappa, L0 <= L0), when chosen
    # per summed column: each person's total in a group truncated at this tau (bounds chosen privately)
    totals: tuple[tuple[str, float], ...] = ()

    @property
    def raced_form(self) -> bool:
        """Whether each person's totals are truncated (by the R2T race, or at chosen thresholds), so that
        AVG is released as a ratio of truncated sums (:func:`~kakeibo.sql.aggregates.aggregate_spec`)."""
        return self.query.auto_truncation or bool(self.totals)

    @property
    def quantile_rows(self) -> int:
        """kappa of the quantiles' histograms: rows of one person in one group they weigh."""
        return self.max_rows_per_partition if self.quantile_limits is None else self.quantile_limits[0]

    @property
    def quantile_partitions(self) -> int:
        """L0 of the quantiles' histograms: the first of a person's kept groups they weigh."""
        return self.max_partitions if self.quantile_limits is None else self.quantile_limits[1]

    @property
    def region(self) -> Box | None:
        """The ledger region of the charge: the WHERE box, or none (overlapping everything) on a correlated
        table, where a correlated user outside the box is evidence about one inside it."""
        return None if self.correlation is not None else self.query.where_box

    @property
    def privacy_loss(self) -> PrivacyLoss:
        return PureDP(self.epsilon) if self.delta == 0 else ApproxDP(self.epsilon, self.delta)

    def statistic(self, name: str) -> Statistic:
        return next(s for s in self.statistics if s.name == name)

    def column(self, name: str) -> ColumnSpec:
        """What an aggregate's ``column`` reads, with the bounds it is clamped to."""
        return self.query.value(name).spec

    @property
    def histogram_columns(self) -> tuple[str, ...]:
        """The columns the engine buckets for quantiles, in first-use order (one histogram each)."""
        return tuple(dict.fromkeys(q.column for q in self.quantiles))

    def buckets(self, column: str) -> Buckets:
        """The buckets of a histogram column (the same for every quantile of that column)."""
        return next(q.buckets for q in self.quantiles if q.column == column)


def _needed(query: AnalyzedQuery, raced: bool) -> list[tuple[StatisticKind, str | None]]:
    """The statistics the aggregates are estimated from (a selected aggregate needs none), each once, in
    first-use order; ``raced``: each person's totals are truncated (:attr:`NoisePlan.raced_form`)."""
    sums = [(aggregate_spec(agg.function, raced), agg.column) for agg in query.aggregates]
    centred = {column for spec, column in sums if spec.centred}
    needed = [need for spec, column in sums for need in spec.needs(column, column in centred)]
    return list(dict.fromkeys(needed))


def epsilon_for_accuracy(query: AnalyzedQuery, *, alpha: float, beta: float, delta: Number = 0) -> Fraction:
    """The least epsilon, rounded up to two significant digits, at which every aggregate of ``query`` is
    within ``alpha`` of its bounded true value with probability at least ``1 - beta`` (each aggregate on
    its own). Only COUNT, COUNT(DISTINCT unit) and SUM qualify: their error does not depend on the data.

    The error bounds shrink as epsilon grows, so a bisection on log(epsilon) finds the least epsilon to
    within 2**-20 relative; rounding it up keeps the guarantee and gives the ledger a readable number.
    """
    if isinstance(alpha, bool) or not isinstance(alpha, (int, float)) or not 0 < alpha < math.inf:
        raise ArgumentError(f"accuracy alpha must be a positive number, got {alpha!r}.")
    if isinstance(beta, bool) or not isinstance(beta, (int, float)) or not 0 < beta < 1:
        raise ArgumentError(f"accuracy beta must lie strictly between 0 and 1, got {beta!r}.")
    names = [direct_statistic(agg.function, agg.column) for agg in query.aggregates]
    if query.auto_truncation:
        raise QueryRefused(
            "accuracy= needs an error that does not depend on the data, but the R2T race truncates at a "
            'threshold it chooses from the data (max_rows_per_partition = "auto"); give epsilon=.'
        )
    if None in names:
        raise QueryRefused(
            "accuracy= is available for COUNT, COUNT(DISTINCT unit) and SUM, whose error does not depend on "
            "the data; give epsilon= for AVG, variances and quantiles."
        )

    def error(epsilon: Fraction) -> float:
        try:
            plan = plan_query(query, epsilon=epsilon, delta=delta)
        except ValueError:  # an epsilon so small that its noise is beyond the grid's range
            return math.inf
        return max(plan.statistic(str(name)).mechanism.error_bound(beta) for name in names)

    low, high = Fraction(1, 2**30), Fraction(2**30)
    if error(high) > alpha:
        raise ArgumentError(
            f"no epsilon up to 2**30 reaches an error of {alpha:g} with probability {1 - beta:g}."
        )
    if error(low) <= alpha:
        return low
    while high / low > 1 + Fraction(1, 2**20):
        middle = Fraction(math.sqrt(low * high)).limit_denominator(2**62)
        low, high = (middle, high) if error(middle) > alpha else (low, middle)
    digits = Fraction(10) ** (math.floor(math.log10(high)) - 1)
    rounded = math.ceil(high / digits) * digits
    assert error(rounded) <= alpha
    return rounded


def plan_query(
    query: AnalyzedQuery,
    *,
    epsilon: Number,
    delta: Number = 0,
    quantile_limits: tuple[int, int] | None = None,
    totals: Mapping[str, float] | None = None,
) -> NoisePlan:
    """Decide bounds, statistics, mechanisms and partition selection for ``query`` at (epsilon, delta);
    ``quantile_limits`` gives the quantiles a kappa and an L0 of their own, at most the query's L0, and
    ``totals`` truncates each person's total of a summed column in a group at its threshold instead of
    bounding their rows (sensitivity ``tau`` per group; the column's values must be clamped to ``[0,
    tau]``, or ``[-tau, tau]`` when its positive and negative parts are truncated apart;
    :mod:`kakeibo.sql.bounds` chooses both)."""
    eps = check_epsilon(as_fraction(epsilon, "epsilon"))
    dlt = as_fraction(delta, "delta")
    if not 0 <= dlt < 1:
        raise ArgumentError(f"delta must lie in [0, 1), got {_shown(dlt)}.")
    kappa = query.max_rows_per_partition
    l0 = query.max_partitions if query.group_by and not _one_group_per_person(query) else 1
    public = _public_keys(query)
    selection = bool(query.group_by) and public is None
    correlation = _correlation(query, selection)
    _refuse_unplannable(query, selection, dlt)
    truncated = tuple(sorted((totals or {}).items()))
    needed = _needed(query, query.auto_truncation or bool(truncated))
    selected = [agg for agg in query.aggregates if AGGREGATES[agg.function].selected]
    share = eps / (len(needed) + len(selected) + selection)
    released = len(needed)
    if selection and (USERS, None) not in needed:
        needed.append((USERS, None))  # computed by the engine for the selection, never noised
    own = None  # the quantiles' own limits, L0 at most the query's
    if quantile_limits is not None and selected:
        own = (quantile_limits[0], min(quantile_limits[1], l0))
    noise = _Noise(query, share, l0, correlation, len(public or ((),)), dict(truncated))
    with refused_when_out_of_range():  # every mechanism checks its range when it is built
        statistics = tuple(
            noise.statistic(kind, column, i < released) for i, (kind, column) in enumerate(needed)
        )
        partitions = PartitionSelection(epsilon=share, delta=dlt, max_partitions=l0) if selection else None
        quantiles = tuple(noise.selection(agg, own or (kappa, l0)) for agg in selected)
    return NoisePlan(
        query=query,
        epsilon=eps,
        delta=dlt if selection else Fraction(0),
        max_partitions=l0,
        max_rows_per_partition=kappa,
        statistics=statistics,
        public_keys=public,
        selection=partitions,
        quantiles=quantiles,
        correlation=correlation,
        quantile_limits=own,
        totals=truncated,
    )


def _correlation(query: AnalyzedQuery, selection: bool) -> CorrelationBound | None:
    """The certified bound of the queried table's correlation graph, if it declares one, after refusing
    what its calibration does not cover."""
    person = query.person
    if person is None or person.correlation is None:
        return None
    assert person.privacy_unit is not None  # the catalog requires one for a correlation graph
    _refuse_correlated(query, selection)  # the analyser allows a correlated table alone in a query
    return person.correlation.bound(person.column(person.privacy_unit).type)


def _refuse_unplannable(query: AnalyzedQuery, selection: bool, delta: Fraction) -> None:
    """Refuse a private partition selection without delta, a release of public keys alone, and what the R2T
    race does not cover."""
    if selection and delta == 0:
        raise QueryRefused(
            "grouping by columns without public values needs private partition selection, which needs "
            "delta > 0 (or declare public_values for the GROUP BY columns in the catalog)."
        )
    if not query.aggregates and not selection:
        raise QueryRefused(
            "every GROUP BY key of this query is public (the catalog lists its values), so releasing the "
            "keys alone would tell nothing the catalog does not; add an aggregate such as COUNT(*)."
        )
    if query.auto_truncation:
        _refuse_race(query)
    counted = [a.alias for a in query.aggregates if a.function == "count_distinct"]
    if counted and any(AGGREGATES[a.function].selected for a in query.aggregates):
        raise QueryRefused(
            f"{counted[0]} counts distinct values, which kakeibo does not release in one query with a "
            "quantile (its statement weighs rows); ask them in two queries."
        )


@dataclass(frozen=True)
class _Noise:
    """The mechanisms of one query's releases at ``share`` of its epsilon each, a user moving at most
    ``l0`` groups (``correlation``: the table's users are correlated, and ``coordinates`` public keys are
    released)."""

    query: AnalyzedQuery
    share: Fraction
    l0: int
    correlation: CorrelationBound | None
    coordinates: int
    totals: dict[str, float]

    def statistic(self, kind: StatisticKind, column: str | None, released: bool) -> Statistic:
        """A statistic and its noise: the correlated calibration, the R2T race, or Laplace (geometric for a
        count) at L0 times its per-group sensitivity."""
        query, share, l0 = self.query, self.share, self.l0
        kappa = query.max_rows_per_partition
        spec = None if column is None else query.value(column).spec
        per_group = kind.per_group(kappa, spec)
        if self.correlation is not None:  # every group may move with a correlated user (its keys are public)
            replace = _replace_sensitivity(kind.contribution(kappa, spec), bool(query.group_by), l0)
            mechanism: Mechanism = Laplace(
                sensitivity=replace * self.correlation.factor, epsilon=share, coordinates=self.coordinates
            )
        elif kind.integer:
            mechanism = Geometric(sensitivity=int(per_group) * l0, epsilon=share)
        else:  # a user moves at most L0 groups: the grid depends on L0, not on how many groups there are
            mechanism = Laplace(sensitivity=per_group * l0, epsilon=share, coordinates=l0)
        race, tau = None, self.totals.get(column or "") if kind is SUM else None
        if tau is not None:  # each person's group total truncated at tau: at most tau per group
            per_group = tau
            mechanism = Laplace(sensitivity=tau * l0, epsilon=share, coordinates=l0)
        if query.auto_truncation and kind is not USERS:
            assert query.grain is not None
            race = make_race(
                row_bound=1.0 if spec is None or kind.integer else float(spec.upper or 0),
                integer=kind.integer,
                max_rows=query.grain.max_rows_bound,
                base=query.grain.truncation_base,
                epsilon=share,
                max_partitions=l0,
                beta=1 - CONFIDENCE,
            )
            mechanism, per_group = race.mechanisms[-1], race.taus[-1]
        return Statistic(kind.statistic(column), kind, column, per_group, mechanism, race, released, tau)

    def selection(self, agg: Aggregate, limits: tuple[int, int]) -> QuantileEstimate:
        """The selections of a selected aggregate (a quantile) under ``limits``: its (kappa, L0)."""
        assert agg.column is not None and agg.quantile is not None
        spec = self.query.value(agg.column).spec  # the analyser refused unbounded columns
        return make_quantile(
            agg.alias, spec, agg.quantile, epsilon=self.share, kappa=limits[0], max_partitions=limits[1]
        )


def _one_group_per_person(query: AnalyzedQuery) -> bool:
    """Whether every GROUP BY key is a column of a sensitive table the catalog declares constant per person
    (``user_constant``): a person's rows then fall in one group, so L0 = 1. The bounded statement keeps
    one group per person whatever the data (it keeps each person's first L0 groups), so a wrong declaration
    costs accuracy, never privacy."""
    if not query.user_level or (query.person is not None and query.person.correlation is not None):
        return False  # a correlated table keeps its calibration's L0 (kakeibo.sql.correlation)
    for i, expression in enumerate(query.group_expressions):
        spec = query.group_spec(i)
        if expression is not None or query.table_spec(query.group_tables[i]).public:
            return False
        if not getattr(spec, "user_constant", False):
            return False
    return True


def _refuse_race(query: AnalyzedQuery) -> None:
    """Refuse what the R2T race (:mod:`kakeibo.sql.truncation`) does not cover: it races sums of
    contributions that are never negative (counts, sums of values bounded below by 0)."""
    grain = query.grain.name if query.grain is not None else query.table.name
    for agg in query.aggregates:
        aggregate = AGGREGATES[agg.function]
        if aggregate.under_race() is None:
            raise QueryRefused(
                f"{agg.alias}: table {grain} truncates contributions by the R2T race "
                '(max_rows_per_partition = "auto"), which races counts, sums and averages; give the table a '
                "fixed max_rows_per_partition for variances and quantiles."
            )
        lower = None if agg.column is None else query.value(agg.column).spec.lower
        if lower is not None and not aggregate.never_negative(lower):
            raise QueryRefused(
                f"{agg.alias}: the R2T race truncates each person's total from above, so it needs "
                f"values that are never negative, but {agg.column} can be as low as {lower:g}."
            )


def _shown(value: Fraction) -> str:
    """``value`` for a message, also when it is beyond the range of a float."""
    try:
        return f"{float(value):g}"
    except OverflowError:
        return "a number beyond 1e308" if value > 0 else "a number below -1e308"


def _refuse_correlated(query: AnalyzedQuery, selection: bool) -> None:
    """Refuse what the Gaussian correlation model's calibration does not cover (see
    :mod:`kakeibo.sql.correlation`)."""
    name = query.table.name
    if query.auto_truncation:  # the catalog refuses the declaration; this is the second line
        raise QueryRefused(
            f"the users of table {name} are correlated, and the R2T race's noise is calibrated for "
            "independent persons only; declare a fixed max_rows_per_partition (COUNT, SUM and AVG are then "
            "calibrated to the correlation)."
        )
    for agg in query.aggregates:
        reason = AGGREGATES[agg.function].correlated_refusal
        if reason is not None:
            raise QueryRefused(f"{agg.alias}: the users of table {name} are correlated, and {reason}")
    if selection:
        raise QueryRefused(
            f"the users of table {name} are correlated, so GROUP BY needs public_values for every grouping "
            "column: private partition selection bounds delta for independent users only."
        )


def _replace_sensitivity(contribution: tuple[float, float], grouped: bool, l0: int) -> float:
    """L1 distance between the statistic's values for two records of one user (absence included): ``hi - lo``
    for one group, ``2 L0 max(-lo, hi)`` over groups, where ``[lo, hi] = contribution`` bounds one user's
    contribution to one group (:meth:`~kakeibo.sql.aggregates.StatisticKind.contribution`,
    :mod:`kakeibo.sql.correlation`)."""
    low, high = contribution
    return high - low if not grouped else 2 * l0 * max(-low, high)


def _public_keys(query: AnalyzedQuery) -> tuple[tuple[object, ...], ...] | None:
    if not query.group_by:
        return ((),)
    value_lists = []
    for i in range(len(query.group_by)):
        values = query.group_spec(i).public_values
        if values is None:
            return None
        value_lists.append(values)
    keys: list[tuple[object, ...]] = [()]
    for values in value_lists:
        keys = [(*key, v) for key in keys for v in values]
    return tuple(keys)
