"""What every LDP server's ``estimate(reports, ...)`` returns: one family of frozen results.

* counts with variances: :class:`CountEstimate` (frequency oracles, sketches, padding, RAPPOR's bits),
  with :class:`RapporDecoding` (RAPPOR's regression on candidates, with detection) and
  :class:`SpatialCounts` (with a simultaneous bound) as special cases; :class:`MedianCounts` (medians over
  repetitions with a rigorous error bound instead of a variance: the Hashtogram);
* means with variances: :class:`MeanEstimate` (one numeric attribute) and
  :class:`MultidimensionalEstimate` (several, with categorical counts);
* heavy hitters, the keys found with their estimates: :class:`HeavyHitters` (with variances),
  :class:`MedianHeavyHitters` (with an error bound), and the top-k item(set)s of the set-valued miners
  (:class:`TopItems`, :class:`FrequentItems`, :class:`FrequentItemsets`).

Every member is an :class:`Estimate`: ``confidence_interval(beta)`` takes ``beta``, the probability that
the interval misses, as the central side's ``accuracy=(alpha, beta)`` does (there ``alpha`` is an additive
error). The old ``alpha=`` keyword of the interval methods meant that failure probability; it keeps working
for one release with a ``DeprecationWarning`` and gives the same numbers. :func:`deprecated_alias` keeps
the servers' old method names for one release.

>>> import numpy as np
>>> from kakeibo.ldp import OUE
>>> oue = OUE(epsilon=2, domain_size=8)
>>> estimate = oue.estimate(oue.randomize(np.array([1, 1, 3, 7]), rng=np.random.default_rng(0)))
>>> isinstance(estimate, Estimate), estimate.counts.shape
(True, (8,))
"""

from __future__ import annotations

import functools
import math
import warnings
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
from numpy.typing import NDArray
from scipy.special import ndtri

from ..errors import ArgumentError, ArgumentTypeError
from ..mechanisms.base import check_beta
from ..privacy import PrivacyLoss, PureDP

if TYPE_CHECKING:
    from .itemsets import LengthChoice

__all__ = [
    "CountEstimate",
    "Estimate",
    "FrequentItems",
    "FrequentItemsets",
    "HeavyHitters",
    "MeanEstimate",
    "MedianCounts",
    "MedianHeavyHitters",
    "MultidimensionalEstimate",
    "RapporDecoding",
    "SpatialCounts",
    "TopItems",
    "deprecated_alias",
    "failure_probability",
]

FloatArray = NDArray[np.float64]
IntArray = NDArray[np.int64]
BoolArray = NDArray[np.bool_]

#: The failure probability of an interval when none is given (a 95% interval).
DEFAULT_BETA = 0.05


def failure_probability(beta: float | None, alpha: float | None) -> tuple[float, str]:
    """The failure probability an interval method was given, checked, and the keyword it came under.

    ``beta`` is the name; ``alpha`` the deprecated one it replaces (it meant the same probability, so the
    numbers do not change); neither gives :data:`DEFAULT_BETA`. Both at once are refused."""
    if alpha is None:
        value, name = (DEFAULT_BETA if beta is None else beta), "beta"
    elif beta is not None:
        raise ArgumentTypeError("give beta (the failure probability) only; alpha is its deprecated name.")
    else:
        warnings.warn(
            "alpha= is deprecated here: the failure probability is beta= across kakeibo (alpha is an "
            "additive error in accuracy=(alpha, beta)); alpha= is removed in the next release.",
            DeprecationWarning,
            stacklevel=3,
        )
        value, name = alpha, "alpha"
    return check_beta(value, name), name


def normal_half_width(variance: FloatArray | float, beta: float) -> FloatArray:
    """``z_(1-beta/2) sqrt(variance)``: the half width of a two-sided normal interval missing with
    probability ``beta``."""
    return np.asarray(float(-ndtri(beta / 2)) * np.sqrt(variance), dtype=np.float64)


def deprecated_alias(new: str, call: Callable[..., Any] | None = None) -> Any:
    """A class attribute that keeps an old server method name for one release: calling it warns
    (``DeprecationWarning``, pointing at the caller) and returns what ``new`` returns, which is what the
    old name returned. ``call(self, *args, **kwargs)`` maps the old signature onto ``new`` where the two
    differ (default: the same arguments)."""
    return _Alias(new, call)


class _Alias:
    """The descriptor behind :func:`deprecated_alias` (its old name comes from ``__set_name__``)."""

    def __init__(self, new: str, call: Callable[..., Any] | None) -> None:
        self._new, self._call, self._old = new, call, ""

    def __set_name__(self, owner: type, name: str) -> None:
        self._old = name

    def __get__(self, obj: object, owner: type | None = None) -> Any:
        if obj is None:
            return self
        return functools.partial(self._warn_and_call, obj)

    def _warn_and_call(self, obj: object, *args: Any, **kwargs: Any) -> Any:
        warnings.warn(
            f"{type(obj).__name__}.{self._old} is deprecated; use {self._new} (the old name is removed in "
            "the next release).",
            DeprecationWarning,
            stacklevel=2,
        )
        if self._call is not None:
            return self._call(obj, *args, **kwargs)
        return getattr(obj, self._new)(*args, **kwargs)


class Estimate(ABC):
    """A member of the LDP result family (module docstring)."""

    @abstractmethod
    def confidence_interval(
        self, beta: float | None = None, *, alpha: float | None = None
    ) -> tuple[Any, Any]:
        """Lower and upper ends that miss the estimated quantity with probability at most ``beta`` (per
        entry; ``alpha`` is ``beta``'s deprecated name)."""


@dataclass(frozen=True, eq=False)
class CountEstimate(Estimate):
    """Estimated number of clients holding each value, with the estimator's variance (Wang et al. 2017
    Eq. (2) with the estimate, clipped to ``[0, n]``, plugged in for the true count), from ``n`` reports;
    ``privacy_loss``: the loss of each client's report (local DP; the client's ledger holds the charge)."""

    counts: FloatArray
    variance: FloatArray
    n: int
    privacy_loss: PrivacyLoss

    def __post_init__(self) -> None:
        for a in (self.counts, self.variance):
            a.setflags(write=False)

    @property
    def frequencies(self) -> FloatArray:
        """``counts / n``: estimated shares (unbiased; may fall outside [0, 1], see :mod:`.postprocess`)."""
        return self.counts / self.n

    def confidence_interval(
        self, beta: float | None = None, *, alpha: float | None = None
    ) -> tuple[FloatArray, FloatArray]:
        """Per-value normal interval ``counts +- z_(1-beta/2) sqrt(variance)``: the estimate is a sum of
        ``n`` independent bounded terms, so each misses with probability ``beta`` asymptotically in ``n``."""
        half = normal_half_width(self.variance, failure_probability(beta, alpha)[0])
        return self.counts - half, self.counts + half


@dataclass(frozen=True, eq=False)
class HeavyHitters(CountEstimate):
    """The heavy hitters found: ``values`` (keys, largest estimated count first) with their estimated
    numbers of holders among all ``n`` clients (``counts``) and the variances of those estimates;
    ``privacy_loss``: the loss of each client's report (local DP; the client's ledger holds the charge)."""

    values: IntArray


@dataclass(frozen=True, eq=False)
class RapporDecoding(CountEstimate):
    """What :meth:`RAPPOR.estimate <kakeibo.ldp.rappor.RAPPOR.estimate>` found, per candidate (in the
    order given).

    * ``counts``: estimated number of clients holding the candidate (least squares; 0 when LASSO dropped
      it), ``std_errors`` their standard errors (NaN when dropped) and ``variance`` their squares,
      ``p_values`` the one-sided p-values of "nobody holds it" (1 when dropped);
    * ``selected``: kept by the LASSO screen; ``detected``: ``p_value < beta / len(candidates)``
      (Bonferroni at family-wise failure probability ``beta``);
    * ``other_count`` (``other_std_error``): estimated number of clients whose value is none of the
      candidates (the background coefficient of the fit on all candidates, which assumes those values hash
      like random ones; NaN when that fit is not feasible);
    * ``n``: the number of reports; ``privacy_loss``: the loss of each client's report (local DP; the
      client's ledger holds the charge): the protocol's ``privacy_loss`` (all reports of one value together:
      its ``longitudinal_loss``).

    :meth:`confidence_interval` is the normal interval of each selected candidate's count (NaN for the
    dropped ones).
    """

    candidates: tuple[Any, ...]
    std_errors: FloatArray
    p_values: FloatArray
    selected: BoolArray
    detected: BoolArray
    beta: float
    other_count: float
    other_std_error: float

    @property
    def alpha(self) -> float:
        """Deprecated name of :attr:`beta` (removed in the next release)."""
        warnings.warn(
            "RapporDecoding.alpha is deprecated; use beta (the failure probability).",
            DeprecationWarning,
            stacklevel=2,
        )
        return self.beta

    @property
    def threshold(self) -> float:
        """The p-value below which a candidate is detected, ``beta / len(candidates)``."""
        return self.beta / len(self.candidates)

    @property
    def detected_candidates(self) -> list[Any]:
        """The detected candidates, most frequent first."""
        order = np.argsort(-self.counts, kind="stable")
        return [self.candidates[i] for i in order if self.detected[i]]


@dataclass(frozen=True, eq=False)
class SpatialCounts(CountEstimate):
    """Estimated number of users at every location of a hierarchy.

    ``counts`` is unbiased, ``variance`` its variance (the exact formula with the clipped estimate plugged
    in; exactly 0 where no user reported, e.g. outside a cluster's region), and ``bound`` a *simultaneous*
    error bound: with probability at least ``1 - beta``, ``|counts[l] - true[l]| <= bound[l]`` for every
    location ``l`` at once (Hoeffding's inequality and a union bound, see :meth:`~.spatial.PCEP.error_bound`).
    ``privacy_loss``: the loss of each client's report (local DP; the client's ledger holds the charge),
    over the locations of its safe region; for a sum of clusters (:meth:`combine`,
    :meth:`~.spatial.PSDA.estimate`) the largest of their losses, which no user's report exceeds.
    """

    bound: FloatArray
    beta: float

    @property
    def max_bound(self) -> float:
        """The bound on ``max_l |counts[l] - true[l]|`` (the quantity PSDA's clustering minimises)."""
        return float(self.bound.max())

    def simultaneous_interval(self) -> tuple[FloatArray, FloatArray]:
        """``counts -+ bound``: covers every true count at once with probability at least ``1 - beta``."""
        return self.counts - self.bound, self.counts + self.bound

    @classmethod
    def combine(cls, parts: Sequence[SpatialCounts]) -> SpatialCounts:
        """The sum of the estimates of disjoint groups of users: counts, variances (the groups are
        independent), bounds and failure probabilities (union bound) add up."""
        if not parts:
            raise ArgumentError("combine needs at least one estimate.")
        if len({p.counts.size for p in parts}) != 1:
            raise ArgumentError("combine needs estimates over the same locations.")
        arrays = [np.sum([getattr(p, k) for p in parts], axis=0) for k in ("counts", "variance", "bound")]
        for a in arrays:
            a.setflags(write=False)
        return cls(
            counts=arrays[0],
            variance=arrays[1],
            n=sum(p.n for p in parts),
            privacy_loss=_largest_loss([p.privacy_loss for p in parts]),
            bound=arrays[2],
            beta=sum(p.beta for p in parts),
        )


def _largest_loss(losses: Sequence[PrivacyLoss]) -> PrivacyLoss:
    """The loss no report of these estimates exceeds: the common one, or the largest pure-DP epsilon."""
    distinct = set(losses)
    if len(distinct) == 1:
        return distinct.pop()
    pure = [loss for loss in distinct if isinstance(loss, PureDP)]
    if len(pure) < len(distinct):
        raise ArgumentError("combine needs estimates whose privacy losses are all pure DP or all equal.")
    return PureDP(max(loss.epsilon for loss in pure))


@dataclass(frozen=True, eq=False)
class MedianCounts(Estimate):
    """Estimated numbers of clients holding each candidate (medians over the repetitions), the error bound
    ``bound`` that each holds with probability at least ``confidence`` (for candidates fixed in advance),
    ``n`` reports and the loss of each (local DP)."""

    counts: FloatArray
    bound: float
    confidence: float
    n: int
    privacy_loss: PrivacyLoss

    def __post_init__(self) -> None:
        self.counts.setflags(write=False)

    def confidence_interval(
        self, beta: float | None = None, *, alpha: float | None = None
    ) -> tuple[FloatArray, FloatArray]:
        """``counts -+ bound``: each covers its candidate's count with probability at least ``confidence``.

        The bound is fixed when the estimate is made (the server's ``estimate(..., beta=)``), so ``beta``
        may only repeat that one (``1 - confidence``); another is refused."""
        if beta is not None or alpha is not None:
            given, name = failure_probability(beta, alpha)
            if 1 - given != self.confidence:
                raise ArgumentError(
                    f"this estimate's bound holds at {name} = {1 - self.confidence:g}; estimate again with "
                    f"beta={given:g} for another."
                )
        return self.counts - self.bound, self.counts + self.bound

    #: Deprecated name of :meth:`confidence_interval` (removed in the next release).
    interval = deprecated_alias("confidence_interval")


@dataclass(frozen=True, eq=False)
class MedianHeavyHitters(MedianCounts):
    """Heavy hitters found (``values``, keys, largest estimated count first), with their Hashtogram
    estimates and error bound."""

    values: IntArray


@dataclass(frozen=True)
class MeanEstimate(Estimate):
    """The mean of the ``n`` reports with a bound on its variance: every client's report variance taken at
    the randomizer's worst-case input (the values themselves are unknown to the server); ``privacy_loss``:
    the loss of each client's report (local DP; the client's ledger holds the charge)."""

    mean: float
    variance: float
    n: int
    privacy_loss: PrivacyLoss

    def confidence_interval(
        self, beta: float | None = None, *, alpha: float | None = None, z: float | None = None
    ) -> tuple[float, float]:
        """Normal interval ``mean +- z_(1-beta/2) sqrt(variance)`` (the mean of ``n`` independent bounded
        reports; the variance is a bound, so it misses with probability at most about ``beta``).

        ``z=`` (the normal quantile itself) is deprecated: give ``beta``; it is removed in the next
        release."""
        if z is None:
            half = float(normal_half_width(self.variance, failure_probability(beta, alpha)[0]))
        else:
            warnings.warn(
                "z= is deprecated: give beta= (the failure probability); z= is removed in the next release.",
                DeprecationWarning,
                stacklevel=2,
            )
            half = z * math.sqrt(self.variance)
        return self.mean - half, self.mean + half


class _Ranked(Estimate):
    """What the top-k answers share: an ``estimate`` (a :class:`CountEstimate`) of the items or itemsets
    returned, whose loss and intervals are the answer's."""

    estimate: CountEstimate

    @property
    def privacy_loss(self) -> PrivacyLoss:
        return self.estimate.privacy_loss

    def confidence_interval(
        self, beta: float | None = None, *, alpha: float | None = None
    ) -> tuple[FloatArray, FloatArray]:
        """The normal interval of each returned item's (itemset's) count
        (:meth:`CountEstimate.confidence_interval`)."""
        return self.estimate.confidence_interval(failure_probability(beta, alpha)[0])


@dataclass(frozen=True, eq=False)
class TopItems(_Ranked):
    """A top-k answer: the ``items`` (most frequent first) and their estimated numbers of holders among all
    ``n`` users (``estimate``: counts, variances, intervals), the ``candidates`` the protocol considered
    (largest first-round estimate first) with the final estimates of all of them (``candidate_estimate``,
    same order). ``privacy_loss``: the loss of each client (local DP; the client's ledger holds the
    charge), the estimate's."""

    items: IntArray
    estimate: CountEstimate
    candidates: IntArray
    candidate_estimate: CountEstimate


@dataclass(frozen=True, eq=False)
class FrequentItems(TopItems):
    """SVIM's answer (:class:`TopItems`), with step 2's :class:`LengthChoice`."""

    length_choice: LengthChoice


@dataclass(frozen=True, eq=False)
class FrequentItemsets(_Ranked):
    """SVSM's answer: the top-k ``itemsets`` (each a sorted tuple of items; single items included), most
    frequent first, with the estimated number of users holding each among all ``n`` users. Also the
    candidate itemsets of two or more items with their estimates (``candidate_estimate``, same order) and
    the itemset round's :class:`LengthChoice`, and the item miner's answer ``items``. ``privacy_loss``: the
    loss of each client's report (local DP; the client's ledger holds the charge), the estimate's."""

    itemsets: tuple[tuple[int, ...], ...]
    estimate: CountEstimate
    candidates: tuple[tuple[int, ...], ...]
    candidate_estimate: CountEstimate
    length_choice: LengthChoice
    items: FrequentItems


@dataclass(frozen=True, eq=False)
class MultidimensionalEstimate(Estimate):
    """What the server learns from a batch of :class:`~kakeibo.ldp.multidim.MultidimensionalSampling` reports.

    ``columns`` are the numeric attributes, ``means`` their unbiased estimated means (not clipped to
    ``[-1, 1]``) and ``variances`` a bound on each mean's variance: every client's report variance taken at
    its worst-case value (the values are unknown to the server). ``categories`` maps each categorical
    attribute to its estimated counts with their variances (the estimate, clipped to ``[0, n]``, plugged in
    for the true counts). ``privacy_loss``: the loss of each client's report (local DP; the client's ledger
    holds the charge): the whole record's ``PureDP(epsilon)``, the per-client total of its ``k`` sampled
    attributes at ``eps / k`` each (:class:`~.multidim.MultidimensionalSampling`), also in each of
    ``categories``.
    """

    columns: tuple[int, ...]
    means: FloatArray
    variances: FloatArray
    n: int
    privacy_loss: PrivacyLoss
    categories: Mapping[int, CountEstimate]

    def confidence_interval(
        self, beta: float | None = None, *, alpha: float | None = None
    ) -> tuple[FloatArray, FloatArray]:
        """Per-column normal interval ``means +- z_(1-beta/2) sqrt(variances)``: each mean is an average of
        ``n`` independent bounded terms, as a count is, so each misses with probability about ``beta``."""
        half = normal_half_width(self.variances, failure_probability(beta, alpha)[0])
        return self.means - half, self.means + half

    #: Deprecated name of :meth:`confidence_interval` (removed in the next release).
    confidence_intervals = deprecated_alias("confidence_interval")
