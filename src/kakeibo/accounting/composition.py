"""Composition: how the privacy losses of several measurements on the same data add up.

* **Sequential** (Dwork et al. 2006; seed 002, slide 50): epsilons add, and so do deltas. Exact, in
  rational arithmetic, for pure and approximate DP.
* **zCDP** (Bun and Steinke 2016, Lemma 2.3): rhos add; an epsilon-DP measurement counts as
  ``epsilon^2 / 2``-zCDP (Prop. 1.4).
* **Advanced** (Dwork, Rothblum and Vadhan 2010, Thm. III.3, in its heterogeneous form): for any slack
  ``delta' > 0``, measurements that are ``(eps_i, delta_i)``-DP compose to
  ``(sqrt(2 ln(1/delta') sum eps_i^2) + sum eps_i (e^eps_i - 1),  delta' + sum delta_i)``-DP.
* **Optimal homogeneous** (Kairouz, Oh and Viswanath 2015, "The composition theorem for differential
  privacy", Thm. 3.3): the exact privacy region of ``k`` adaptively composed ``(eps, delta)``-DP
  measurements, computed from the ``k``-fold composition of randomized response.
* **Renyi books** (Mironov 2017): curves add order by order; a privacy filter over a grid of orders
  (:class:`RDPComposition`).
* **PLD books** (Koskela, Jalko and Honkela 2020; :mod:`.pld`): privacy-loss distributions convolve; tight
  for sequences fixed in advance (:class:`PLDComposition` says why not for adaptive ones).
* **Parallel** (McSherry 2009; Smith et al. 2022): see :mod:`kakeibo.accounting.overlap`.

Transcendental functions are evaluated in floating point and every float result is rounded *up* (with
:func:`math.nextafter`, a few ulps beyond the worst-case rounding error) before it becomes an exact
:class:`~fractions.Fraction`, so a reported bound is never below the true one.

The ledger uses a :class:`CompositionPolicy`, which splits composition into per-charge additive weights
and a monotone final step; that split is what lets the ledger combine a policy with parallel composition
(maximise each weight over the overlap graph, then finish).
"""

from __future__ import annotations

import json
import math
from abc import ABC, abstractmethod
from collections.abc import Callable, Hashable, Mapping, Sequence
from dataclasses import dataclass, replace
from fractions import Fraction
from functools import lru_cache
from typing import ClassVar

import numpy as np

from ..errors import ArgumentError, ArgumentTypeError
from ..privacy import DEFAULT_ORDERS, ZCDP, ApproxDP, Number, PrivacyLoss, PureDP, as_fraction, fraction_text
from .curves import Curve, MechanismLoss, curve_from_json, curve_of
from .pld import LossDistribution

__all__ = [
    "AdvancedComposition",
    "CompositionPolicy",
    "LossKind",
    "PLDComposition",
    "RDPComposition",
    "SequentialComposition",
    "Weights",
    "ZCDPComposition",
    "advanced_composition",
    "convert",
    "kind_name",
    "loss_leq",
    "optimal_homogeneous_composition",
    "resolve_policy",
    "result_kind",
    "sequential_composition",
    "zcdp_composition",
]

LossKind = type[PureDP] | type[ApproxDP] | type[ZCDP]
#: A charge's additive weights, by key (a key a charge does not name weighs 0).
Weights = Mapping[Hashable, Fraction]

_KIND_NAMES: dict[type[PrivacyLoss], str] = {PureDP: "pure", ApproxDP: "approx", ZCDP: "zcdp"}
_TITLES: dict[type[PrivacyLoss], str] = {
    PureDP: "pure epsilon-DP",
    ApproxDP: "(epsilon, delta)-DP",
    ZCDP: "rho-zCDP",
}


def kind_name(kind: type[PrivacyLoss]) -> str:
    """The storage tag of a loss kind: ``"pure"``, ``"approx"`` or ``"zcdp"``."""
    try:
        return _KIND_NAMES[kind]
    except KeyError:
        raise ArgumentTypeError(f"{kind.__name__} losses cannot be accounted for by the ledger.") from None


def convert(loss: PrivacyLoss, kind: type[PrivacyLoss]) -> PrivacyLoss:
    """``loss`` restated as a loss of ``kind`` by a sound conversion, or TypeError if there is none.

    pure -> approximate: eps-DP is (eps, 0)-DP. pure -> zCDP: eps-DP is (eps^2/2)-zCDP (Bun and Steinke
    2016, Prop. 1.4). Approximate and zCDP losses convert only to themselves here (zCDP -> (eps, delta)
    needs a delta choice; do it explicitly with :meth:`~kakeibo.privacy.ZCDP.to_approx`).

    A :class:`~kakeibo.accounting.curves.MechanismLoss` converts by its declared loss.

    >>> convert(PureDP(1), ZCDP)
    ZCDP(rho=Fraction(1, 2))
    """
    if isinstance(loss, MechanismLoss):
        loss = loss.declared
    if type(loss) is kind:
        return loss
    if isinstance(loss, PureDP):
        if kind is ApproxDP:
            return ApproxDP(loss.epsilon, 0)
        if kind is ZCDP:
            return loss.to_zcdp()
    raise ArgumentTypeError(
        f"a {_TITLES.get(type(loss), type(loss).__name__)} charge cannot be counted against a "
        f"{_TITLES.get(kind, kind.__name__)} budget; convert it explicitly first."
    )


def result_kind(losses: Sequence[PrivacyLoss]) -> LossKind:
    """The kind that the sequential composition of ``losses`` lands in (pure < approximate; pure < zCDP).

    >>> result_kind([PureDP(1), ApproxDP(1, 1e-6)]).__name__
    'ApproxDP'
    """
    kinds = {type(loss.declared if isinstance(loss, MechanismLoss) else loss) for loss in losses}
    unknown = kinds - {PureDP, ApproxDP, ZCDP}
    if unknown:
        names = ", ".join(sorted(k.__name__ for k in unknown))
        raise ArgumentTypeError(f"only PureDP, ApproxDP and ZCDP losses can be composed here, got {names}.")
    if ApproxDP in kinds and ZCDP in kinds:
        raise ArgumentTypeError(
            "(epsilon, delta)-DP and zCDP losses do not compose directly; convert one kind first."
        )
    if ApproxDP in kinds:
        return ApproxDP
    if ZCDP in kinds:
        return ZCDP
    return PureDP


# -- exact / rounded-up float helpers ---------------------------------------------------------------


def _float_up(q: Fraction) -> float:
    """The smallest float >= q."""
    f = float(q)
    return f if Fraction(f) >= q else math.nextafter(f, math.inf)


def _float_down(q: Fraction) -> float:
    """The largest float <= q."""
    f = float(q)
    return f if Fraction(f) <= q else math.nextafter(f, -math.inf)


def _up(x: float, ulps: int = 4) -> float:
    """``x`` moved ``ulps`` floats towards +inf: covers the rounding error of a few correctly rounded ops."""
    for _ in range(ulps):
        x = math.nextafter(x, math.inf)
    return x


def _check_losses(losses: Sequence[PrivacyLoss]) -> list[PrivacyLoss]:
    if isinstance(losses, PrivacyLoss) or not isinstance(losses, Sequence):
        raise ArgumentTypeError("pass the losses to compose as a sequence (list or tuple) of privacy losses.")
    return list(losses)


# -- closed-form composition functions ------------------------------------------------------------


def sequential_composition(losses: Sequence[PrivacyLoss]) -> PrivacyLoss:
    """Basic composition (Dwork et al. 2006; Dwork and Roth 2014, Thm. 3.16): add every coordinate, exactly.

    >>> from fractions import Fraction
    >>> sequential_composition([PureDP(Fraction(1, 100))] * 100)
    PureDP(epsilon=Fraction(1, 1))
    """
    items = _check_losses(losses)
    kind = result_kind(items)
    return SequentialComposition().compose(items, kind)


def zcdp_composition(losses: Sequence[PrivacyLoss]) -> ZCDP:
    """zCDP composition (Bun and Steinke 2016, Lemma 2.3): rhos add; eps-DP counts as eps^2/2 (Prop. 1.4).

    >>> zcdp_composition([ZCDP(0.25), PureDP(1)])
    ZCDP(rho=Fraction(3, 4))
    """
    total = ZCDPComposition().compose(_check_losses(losses), ZCDP)
    assert isinstance(total, ZCDP)
    return total


def _check_slack(delta_slack: Number) -> Fraction:
    slack = as_fraction(delta_slack, "delta_slack")
    if not 0 < slack < 1 or float(slack) == 0.0:
        raise ArgumentError(f"delta_slack must lie strictly between 0 and 1, got {float(slack)}.")
    return slack


def _eps_expm1(eps: Fraction) -> Fraction:
    """An exact rational upper bound on ``eps * (e^eps - 1)`` (the expected privacy loss term of DRV 2010)."""
    if eps == 0:
        return Fraction(0)
    x = _float_up(eps)
    if x > 700:  # e^x overflows a float; any upper bound will do, and this one dwarfs eps itself
        return eps * Fraction(2) ** 1020
    return Fraction(_up(x * _up(math.expm1(x), 2)))


def _drv_epsilon(sum_sq: Fraction, sum_expected: Fraction, slack: Fraction) -> Fraction:
    """``sqrt(2 ln(1/slack) sum_sq) + sum_expected`` rounded up to an exact rational."""
    log_term = _up(-math.log(_float_down(slack)), 2)
    root = _up(math.sqrt(_up(2.0 * log_term * _float_up(sum_sq), 2)), 2)
    return Fraction(_up(root + _float_up(sum_expected), 2))


def advanced_composition(losses: Sequence[PrivacyLoss], *, delta_slack: Number) -> ApproxDP:
    """Advanced composition of Dwork, Rothblum and Vadhan 2010 (Thm. III.3), heterogeneous form.

    For measurements that are ``(eps_i, delta_i)``-DP (pure ones count as ``(eps_i, 0)``) and any
    ``delta' = delta_slack`` in (0, 1), their adaptive composition is ``(eps', delta' + sum delta_i)``-DP with

        eps' = sqrt(2 ln(1/delta') * sum_i eps_i^2) + sum_i eps_i (e^eps_i - 1).

    (With ``k`` equal epsilons this is DRV's ``sqrt(2k ln(1/delta')) eps + k eps (e^eps - 1)``; the proof
    is Azuma's inequality on the privacy-loss martingale, whose i-th step lies in ``[-eps_i, eps_i]`` and
    has mean at most ``eps_i (e^eps_i - 1)``.) DRV fix the parameters in advance. When the epsilons are
    chosen adaptively and the analysis stops by a budget rule (a *privacy filter*), Whitehouse, Ramdas,
    Rogers and Wu 2023 ("Fully-adaptive composition in differential privacy", ICML) construct a filter
    with the same ``sqrt(2 ln(1/delta') sum eps_i^2)`` term and an expected-loss term no larger than
    ``sum eps_i (e^eps_i - 1)``; a budget rule using this (larger) bound stops no later than theirs would.
    The result is rounded up, then exact.

    This is not always better than sequential composition: see :class:`AdvancedComposition` for the
    ledger policy that uses whichever is tighter.

    >>> r = advanced_composition([PureDP(0.1)] * 10, delta_slack=1e-5)
    >>> round(float(r.epsilon), 6), float(r.delta)
    (1.622598, 1e-05)
    """
    items = [convert(loss, ApproxDP) for loss in _check_losses(losses)]
    slack = _check_slack(delta_slack)
    approx = [loss for loss in items if isinstance(loss, ApproxDP)]
    sum_sq = sum((a.epsilon**2 for a in approx), Fraction(0))
    sum_expected = sum((_eps_expm1(a.epsilon) for a in approx), Fraction(0))
    total_delta = slack + sum((a.delta for a in approx), Fraction(0))
    if total_delta >= 1:
        raise ArgumentError("the composed delta reaches 1, so the combined guarantee would be vacuous.")
    return ApproxDP(_drv_epsilon(sum_sq, sum_expected, slack), total_delta)


def optimal_homogeneous_composition(epsilon: Number, delta: Number, k: int, target_delta: Number) -> ApproxDP:
    """The smallest eps' such that ``k`` adaptively composed ``(epsilon, delta)``-DP measurements are
    ``(eps', target_delta)``-DP -- Kairouz, Oh and Viswanath 2015, Thm. 3.3, which is tight.

    KOV show that the k-fold composition is dominated by that of a four-outcome mechanism: with
    probability ``delta`` it reveals the input, otherwise it is randomized response with parameter
    ``epsilon``. Its privacy region gives, for every eps' >= 0,

        delta(eps') = 1 - (1 - delta)^k (1 - delta_RR(eps')),
        delta_RR(eps') = sum_{l : (k-2l) eps > eps'} C(k,l) (e^{(k-l) eps} - e^{eps' + l eps}) / (1+e^eps)^k,

    which at ``eps' = (k - 2i) eps`` is the ``delta_i`` of Theorem 3.3. This function solves
    ``delta(eps') <= target_delta`` for the least eps' by bisection, evaluating delta_RR in log space with
    ``epsilon`` and ``delta`` rounded up and the result inflated by a bound on the float error, and rounds
    eps' up; it never exceeds ``k * epsilon`` (reached exactly when ``delta = target_delta = 0``).
    ``target_delta`` is the delta of the whole composition; it must be at least ``1 - (1 - delta)^k``.

    The theorem is for ``k`` fixed in advance (the mechanisms may be chosen adaptively, their parameters
    not); that is why the ledger's advanced policy uses :func:`advanced_composition` instead.

    >>> optimal_homogeneous_composition(0.5, 0, 4, 0)
    ApproxDP(epsilon=Fraction(2, 1), delta=Fraction(0, 1))
    >>> r = optimal_homogeneous_composition(0.1, 0, 10, 1e-5)
    >>> r.epsilon < advanced_composition([PureDP(0.1)] * 10, delta_slack=1e-5).epsilon
    True
    """
    eps, dlt, target = _homogeneous_arguments(epsilon, delta, k, target_delta)
    eps_f, dlt_f, target_f = _float_up(eps), _float_up(dlt), _float_down(target)
    if eps_f > 700:
        raise ArgumentError(
            "epsilon is too large for the optimal composition to be evaluated; use k * epsilon."
        )
    # Relative error bound of the float evaluation below (lgamma and k-term sums), with a wide margin.
    inflate = math.exp(64 * 2.0**-52 * (k * (math.log(k) + eps_f + 2) + 16))
    log_keep = k * math.log1p(-dlt_f)  # log (1 - delta)^k, delta rounded up: smaller, i.e. safer
    if dlt > 0 and -math.expm1(log_keep) * inflate > target_f:
        raise ArgumentError(
            f"target_delta {float(target)} is below 1 - (1 - delta)^k = {-math.expm1(log_keep):.3g}, "
            "which no epsilon can reach."
        )
    if eps == 0:
        return ApproxDP(0, target)

    delta_at = _kov_delta_curve(eps_f, k, log_keep, inflate)
    hi = 0.0 if delta_at(0.0) <= target_f else _bisect_least(delta_at, target_f, _up(k * eps_f))
    rounded = Fraction(0) if hi == 0.0 else Fraction(_up(hi, 2))
    return ApproxDP(min(rounded, k * eps), target)


def _homogeneous_arguments(
    epsilon: Number, delta: Number, k: int, target_delta: Number
) -> tuple[Fraction, Fraction, Fraction]:
    """``epsilon``, ``delta`` and ``target_delta`` as exact fractions after checking the arguments of
    :func:`optimal_homogeneous_composition` (``k`` a positive whole number)."""
    eps = as_fraction(epsilon, "epsilon")
    dlt = as_fraction(delta, "delta")
    target = as_fraction(target_delta, "target_delta")
    if eps < 0:
        raise ArgumentError(f"epsilon must be non-negative, got {float(eps)}.")
    if not 0 <= dlt < 1:
        raise ArgumentError(f"delta must lie in [0, 1), got {float(dlt)}.")
    if not 0 <= target < 1:
        raise ArgumentError(f"target_delta must lie in [0, 1), got {float(target)}.")
    if isinstance(k, bool) or not isinstance(k, int) or k < 1:
        raise ArgumentError(f"k must be a positive whole number of measurements, got {k!r}.")
    return eps, dlt, target


def _kov_delta_curve(eps_f: float, k: int, log_keep: float, inflate: float) -> Callable[[float], float]:
    """``eps' -> delta(eps')`` of Kairouz, Oh and Viswanath 2015, Thm. 3.3, for ``k`` compositions of
    ``(eps_f, delta)``-DP, where ``log_keep = k log(1 - delta)``; the randomized-response part is summed
    in log space and the result multiplied by ``inflate``, a bound on the float error, so it never
    undershoots."""
    ls = np.arange(0, (k + 1) // 2, dtype=np.float64)  # outcomes with positive privacy loss (k - 2l) eps
    log_norm = k * (eps_f + math.log1p(math.exp(-eps_f)))  # k ln(1 + e^eps)
    lgk = math.lgamma(k + 1)
    log_binom = np.array([lgk - math.lgamma(j + 1) - math.lgamma(k - j + 1) for j in range((k + 1) // 2)])
    log_p = log_binom + (k - ls) * eps_f - log_norm
    gaps = (k - 2 * ls) * eps_f

    def delta_at(eps_prime: float) -> float:
        mask = gaps > eps_prime
        if not mask.any():
            rr = 0.0
        else:
            terms = log_p[mask] + np.log(-np.expm1(eps_prime - gaps[mask]))
            top = float(np.max(terms))
            rr = min(1.0, math.exp(top + math.log(float(np.sum(np.exp(terms - top))))))
        if rr >= 1.0:
            return 1.0
        return -math.expm1(log_keep + math.log1p(-rr)) * inflate

    return delta_at


def _bisect_least(delta_at: Callable[[float], float], target: float, hi: float) -> float:
    """The least ``eps'`` in ``(0, hi]`` found by bisection with ``delta_at(eps') <= target``, given that it
    holds at ``hi`` and not at 0 (``delta_at`` falls as ``eps'`` grows); it stops when the interval cannot
    be halved in floats."""
    lo = 0.0
    for _ in range(200):
        mid = (lo + hi) / 2
        if mid in (lo, hi):
            break
        if delta_at(mid) <= target:
            hi = mid
        else:
            lo = mid
    return hi


# -- policies for the ledger -------------------------------------------------------------------------


class CompositionPolicy(ABC):
    """How a ledger turns its list of charges into the amount spent.

    A policy gives each charge sparse additive *weights* (:meth:`weights`) and turns their sums into a
    privacy loss with :meth:`total`, which is non-decreasing in every weight. Splitting it this way lets
    the ledger apply parallel composition: it maximises each weight separately over the query-overlap
    graph and then finishes, which is a sound upper bound for every policy.
    """

    name: ClassVar[str]

    @abstractmethod
    def check_budget(self, budget: PrivacyLoss) -> None:
        """Raise ValueError if this policy cannot account against ``budget`` (wrong kind, too small)."""

    @abstractmethod
    def weights(self, loss: PrivacyLoss, kind: type[PrivacyLoss]) -> Weights:
        """The additive weights of one charge, counted against a budget of ``kind``."""

    @abstractmethod
    def total(self, sums: Weights, kind: type[PrivacyLoss], *, any_charge: bool) -> PrivacyLoss:
        """The composed loss from summed weights; ``any_charge`` says whether anything was charged."""

    def within(
        self, sums: Weights, kind: type[PrivacyLoss], budget: PrivacyLoss, *, any_charge: bool
    ) -> bool:
        """Whether the composed loss fits in ``budget`` in the product order."""
        return loss_leq(self.total(sums, kind, any_charge=any_charge), budget)

    def for_budget(self, budget: PrivacyLoss) -> CompositionPolicy:
        """This policy as a new ledger with global budget ``budget`` keeps it (the tight books take their
        delta from it)."""
        return self

    def stated(self, loss: PrivacyLoss, kind: type[PrivacyLoss]) -> PrivacyLoss:
        """``loss`` as a refusal states it: in the budget's kind (the tight books keep it as charged)."""
        return convert(loss, kind)

    def compose(self, losses: Sequence[PrivacyLoss], kind: type[PrivacyLoss]) -> PrivacyLoss:
        """Compose ``losses`` against a budget of ``kind``: sum the weights, then :meth:`total`."""
        sums: dict[Hashable, Fraction] = {}
        for loss in losses:
            for key, weight in self.weights(loss, kind).items():
                sums[key] = sums.get(key, Fraction(0)) + weight
        return self.total(sums, kind, any_charge=bool(losses))

    @abstractmethod
    def config(self) -> dict[str, str]:
        """A JSON-ready description, stored in the ledger header."""


def _delta_below_one(sums: Weights, reserved: Fraction) -> bool:
    """Whether the summed deltas (weight 1 of the sequential and advanced policies) stay below 1."""
    return sums.get(1, Fraction(0)) + reserved < 1


def loss_leq(a: PrivacyLoss, b: PrivacyLoss) -> bool:
    """``a <= b`` in the product order for two losses of the same kind (False across kinds).

    >>> loss_leq(ApproxDP(1, 1e-6), ApproxDP(2, 1e-9))
    False
    """
    if isinstance(a, PureDP) and isinstance(b, PureDP):
        return a <= b
    if isinstance(a, ApproxDP) and isinstance(b, ApproxDP):
        return a <= b
    if isinstance(a, ZCDP) and isinstance(b, ZCDP):
        return a <= b
    return False


def _approx_total(epsilon: Fraction, delta: Fraction) -> ApproxDP:
    if delta >= 1:
        raise ArgumentError("the composed delta reaches 1, so the combined guarantee would be vacuous.")
    return ApproxDP(epsilon, delta)


@dataclass(frozen=True)
class SequentialComposition(CompositionPolicy):
    """Sequential composition: every coordinate adds, exactly (Dwork et al. 2006; seed 002, slide 50).

    For a zCDP budget this is zCDP's additive composition (Bun and Steinke 2016, Lemma 2.3). It is valid
    for adaptively chosen parameters too (Rogers et al. 2016, basic composition filter).
    """

    name: ClassVar[str] = "sequential"

    def check_budget(self, budget: PrivacyLoss) -> None:
        kind_name(type(budget))

    def weights(self, loss: PrivacyLoss, kind: type[PrivacyLoss]) -> Weights:
        value = convert(loss, kind)
        if isinstance(value, PureDP):
            return {0: value.epsilon}
        if isinstance(value, ApproxDP):
            return {0: value.epsilon, 1: value.delta}
        if isinstance(value, ZCDP):
            return {0: value.rho}
        raise ArgumentTypeError(f"{type(loss).__name__} losses cannot be accounted for by the ledger.")

    def within(
        self, sums: Weights, kind: type[PrivacyLoss], budget: PrivacyLoss, *, any_charge: bool
    ) -> bool:
        if kind is ApproxDP and not _delta_below_one(sums, Fraction(0)):
            return False
        return super().within(sums, kind, budget, any_charge=any_charge)

    def total(self, sums: Weights, kind: type[PrivacyLoss], *, any_charge: bool) -> PrivacyLoss:
        first, second = sums.get(0, Fraction(0)), sums.get(1, Fraction(0))
        if kind is PureDP:
            return PureDP(first)
        if kind is ApproxDP:
            return _approx_total(first, second)
        if kind is ZCDP:
            return ZCDP(first)
        raise ArgumentTypeError(f"{kind.__name__} losses cannot be accounted for by the ledger.")

    def config(self) -> dict[str, str]:
        return {"name": self.name}


@dataclass(frozen=True)
class ZCDPComposition(SequentialComposition):
    """zCDP composition (Bun and Steinke 2016, Lemma 2.3): rhos add; needs a zCDP budget."""

    name: ClassVar[str] = "zcdp"

    def check_budget(self, budget: PrivacyLoss) -> None:
        if not isinstance(budget, ZCDP):
            raise ArgumentError(f"zCDP composition needs a ZCDP budget, got {type(budget).__name__}.")


@dataclass(frozen=True)
class AdvancedComposition(CompositionPolicy):
    """The better of sequential and advanced composition, for an (epsilon, delta) budget.

    Spent is ``(min(sum eps_i, eps_DRV), sum delta_i + delta_slack)`` with ``eps_DRV`` from
    :func:`advanced_composition`: advanced composition is used only when it is tighter in epsilon.
    ``delta_slack`` is reserved from the first charge on, even while the sequential epsilon is smaller,
    because a ledger is a *privacy filter* (Rogers, Roth, Ullman and Vadhan 2016): which bound certifies
    the final transcript is decided by the charges, which depend on earlier answers, so the concentration
    step's failure probability must be paid on every path. For why the DRV bound may be used with
    adaptively chosen epsilons, see :func:`advanced_composition` (Whitehouse, Ramdas, Rogers and Wu 2023).
    :func:`optimal_homogeneous_composition` is not used here: it needs ``k`` fixed in advance.

    >>> AdvancedComposition(1e-6).compose([PureDP(0.01)] * 1000, ApproxDP).epsilon < 10
    True
    """

    delta_slack: Fraction
    name: ClassVar[str] = "advanced"

    def __init__(self, delta_slack: Number) -> None:
        object.__setattr__(self, "delta_slack", _check_slack(delta_slack))

    def check_budget(self, budget: PrivacyLoss) -> None:
        if not isinstance(budget, ApproxDP):
            raise ArgumentError(
                "advanced composition needs an (epsilon, delta) budget (ApproxDP), "
                f"got {type(budget).__name__}."
            )
        if budget.delta < self.delta_slack:
            raise ArgumentError(
                f"advanced composition reserves delta_slack={float(self.delta_slack)}, "
                f"more than the budget's delta={float(budget.delta)}."
            )

    def weights(self, loss: PrivacyLoss, kind: type[PrivacyLoss]) -> Weights:
        value = convert(loss, ApproxDP if kind is ApproxDP else kind)
        if not isinstance(value, ApproxDP):
            raise ArgumentTypeError(
                "advanced composition accounts only (epsilon, delta)-DP and pure DP charges."
            )
        return {0: value.epsilon, 1: value.delta, 2: value.epsilon**2, 3: _eps_expm1(value.epsilon)}

    def within(
        self, sums: Weights, kind: type[PrivacyLoss], budget: PrivacyLoss, *, any_charge: bool
    ) -> bool:
        if not _delta_below_one(sums, self.delta_slack if any_charge else Fraction(0)):
            return False
        return super().within(sums, kind, budget, any_charge=any_charge)

    def total(self, sums: Weights, kind: type[PrivacyLoss], *, any_charge: bool) -> PrivacyLoss:
        if kind is not ApproxDP:
            raise ArgumentTypeError("advanced composition accounts against an (epsilon, delta) budget only.")
        if not any_charge:
            return ApproxDP(0, 0)
        eps_sequential, delta, sum_sq, sum_expected = (sums.get(j, Fraction(0)) for j in range(4))
        eps = min(eps_sequential, _drv_epsilon(sum_sq, sum_expected, self.delta_slack))
        return _approx_total(eps, delta + self.delta_slack)

    def config(self) -> dict[str, str]:
        return {"name": self.name, "delta_slack": fraction_text(self.delta_slack)}


def _books_delta(budget: PrivacyLoss, name: str) -> Fraction:
    """The delta of an (epsilon, delta) budget the tight books convert at (0 < delta < 1)."""
    if not isinstance(budget, ApproxDP) or not 0 < budget.delta < 1:
        raise ArgumentError(
            f"{name} books convert to (epsilon, delta) to check the budget, so they need an (epsilon, delta) "
            f"budget with delta > 0, got {budget!s}."
        )
    return budget.delta


@dataclass(frozen=True)
class _TightBooks(CompositionPolicy):
    """What the RDP and PLD books share: an (epsilon, delta) budget whose delta every scope shares (the
    delta the books convert at, taken from the global budget when the ledger is created), charges kept as
    charged, the spent amount ``(epsilon at that delta, delta)``."""

    delta: Fraction | None

    def for_budget(self, budget: PrivacyLoss) -> CompositionPolicy:
        return replace(self, delta=_books_delta(budget, self.name))

    def check_budget(self, budget: PrivacyLoss) -> None:
        delta = _books_delta(budget, self.name)
        if self.delta is not None and delta != self.delta:
            raise ArgumentError(
                f"every budget of these {self.name} books has delta {float(self.delta):g} (the one they "
                f"convert at), not {float(delta):g}."
            )

    def stated(self, loss: PrivacyLoss, kind: type[PrivacyLoss]) -> PrivacyLoss:
        return loss

    def total(self, sums: Weights, kind: type[PrivacyLoss], *, any_charge: bool) -> PrivacyLoss:
        if kind is not ApproxDP or self.delta is None:
            raise ArgumentTypeError(f"{self.name} books account against an (epsilon, delta) budget only.")
        if not any_charge:
            return ApproxDP(0, 0)
        epsilon = self._epsilon(sums, float(self.delta))
        if not epsilon < float(MAX_SPENT):
            return ApproxDP(MAX_SPENT, self.delta)
        return ApproxDP(Fraction(_up(epsilon, 4)), self.delta)

    @abstractmethod
    def _epsilon(self, sums: Weights, delta: float) -> float:
        """The composed epsilon at ``delta`` (a float, ``inf`` when there is none)."""

    def config(self) -> dict[str, str]:
        if self.delta is None:
            return {"name": self.name}
        return {"name": self.name, "delta": fraction_text(self.delta)}


#: The epsilon reported when the composition has none at the books' delta (a charge can never fit then).
MAX_SPENT = Fraction(10**9)


@dataclass(frozen=True)
class RDPComposition(_TightBooks):
    """Renyi books: each charge's Renyi curve on the orders of :data:`~kakeibo.privacy.DEFAULT_ORDERS`
    (:func:`~kakeibo.accounting.curves.curve_of`: a mechanism's own, randomized response's for pure DP,
    ``rho alpha`` for zCDP; an (epsilon, delta) charge with delta > 0 has none and is refused), summed per
    order (Mironov 2017, Prop. 1), converted to (epsilon, delta) only to check the budget.

    **A privacy filter.** Analysts choose each charge after seeing earlier answers, so the books must stay
    sound when the curves are chosen adaptively and the ledger stops by a budget rule. For one order this
    is Feldman and Zrnic's Renyi filter (NeurIPS 2021, Thm. 3.1: ``exp((alpha - 1)(L_t - S_t(alpha)))`` is a
    supermartingale, ``L_t`` the transcript's privacy loss and ``S_t`` the summed charges). The books
    admit a charge when *some* order still converts within budget, and which order that is depends on the
    answers; so each order is given ``delta / n`` of the delta (``n`` orders; a union bound, as in Lecuyer
    2021's filters over several orders). Canonne, Kamath and Steinke's conversion (2020, Prop. 12) bounds
    ``(1 - e^(eps - L))_+`` pointwise by ``c_alpha e^((alpha - 1)(L - eps))``, so on the outcomes where order
    alpha is still within budget its share of delta is at most ``delta / n``, and the shares add to delta::

        epsilon = min over alpha of  S(alpha) + ln(1 - 1/alpha) - (ln(delta / n) + ln alpha) / (alpha - 1).

    The union costs ``ln(n) / (alpha - 1)`` against converting a fixed sequence once (measured in
    ``benchmarks/RESULTS.md``). Parallel composition (regions) bounds each order's sum by its maximum
    weighted depth, which holds person by person.

    Four Gaussians of noise multiplier 1 (together one of multiplier 1/2, whose exact epsilon at 1e-5 is
    10.00): converted once, the curve gives 10.77; as a filter, 12.14.

    >>> from kakeibo.accounting.curves import GaussianNoise, MechanismLoss
    >>> from kakeibo.privacy import RDPCurve
    >>> books = RDPComposition(Fraction(1, 10**5))
    >>> loss = MechanismLoss(ApproxDP(4.4, 1e-5), GaussianNoise(1))
    >>> curve = RDPCurve(books.orders, tuple(float(4 * v) for v in GaussianNoise(1).rdp(books.orders)))
    >>> once, books_total = curve.to_approx(1e-5), books.compose([loss] * 4, ApproxDP)
    >>> round(float(once.epsilon), 2), round(float(books_total.epsilon), 2)
    (10.77, 12.14)
    """

    orders: tuple[float, ...] = DEFAULT_ORDERS
    name: ClassVar[str] = "rdp"

    def __init__(self, delta: Fraction | None = None, orders: tuple[float, ...] = DEFAULT_ORDERS) -> None:
        object.__setattr__(self, "delta", delta)
        object.__setattr__(self, "orders", tuple(orders))

    def weights(self, loss: PrivacyLoss, kind: type[PrivacyLoss]) -> Weights:
        return _rdp_weights(curve_of(loss), self.orders)

    def _epsilon(self, sums: Weights, delta: float) -> float:
        share = math.log(delta / len(self.orders))
        best = math.inf
        for i, alpha in enumerate(self.orders):
            spent = _float_up(sums.get(i, Fraction(0)))
            best = min(best, spent + math.log1p(-1 / alpha) - (share + math.log(alpha)) / (alpha - 1))
        return max(best, 0.0)


@lru_cache(maxsize=4096)
def _rdp_weights(curve: Curve, orders: tuple[float, ...]) -> Weights:
    return dict(enumerate(curve.rdp(orders)))


@dataclass(frozen=True)
class PLDComposition(_TightBooks):
    """PLD books: each charge's privacy-loss distribution (:mod:`.pld`; :func:`.curves.curve_of`: a
    mechanism's own, the four-outcome pair of Kairouz, Oh and Viswanath for a pure or (epsilon, delta)
    charge; a zCDP charge has none and is refused; a mechanism whose curve has none, by its declared
    loss), composed by FFT on a grid of step ``interval``, and
    converted to (epsilon, delta) -- the larger of the two directions' -- only to check the budget. The
    weights count the runs of each distinct mechanism, so a repeated one is composed by repeated squaring.

    **Not a privacy filter under adaptively chosen charges.** The PLD's epsilon is the tight guarantee of a
    sequence of mechanisms *fixed before the first answer* (a training run's steps, a scheduled batch of
    reports). When an analyst picks the next mechanism after seeing answers, admitting it because the
    composed PLD still fits (the "natural filter") can fail: Regehr, Hu, Leeman, Manurangsi, Tholoniat and
    Lecuyer (2026) show natural filters are free only for families of mechanisms that are totally ordered
    under composition, and the natural approximate-DP filter can exceed its budget under an adaptive
    analyst. So keep PLD books for planned pipelines, and rdp books (a valid filter) for interactive
    analysts; the query service refuses a ledger with PLD books.

    >>> from kakeibo.accounting.curves import SubsampledGaussian, Composed, MechanismLoss
    >>> run = Composed([(SubsampledGaussian(1, 0.01), 1000)])
    >>> books = PLDComposition(Fraction(1, 10**5))
    >>> round(float(books.compose([MechanismLoss(ApproxDP(2, 1e-5), run)], ApproxDP).epsilon), 4)
    1.8282
    """

    interval: Fraction = Fraction(1, 10**4)
    name: ClassVar[str] = "pld"

    def __init__(self, delta: Fraction | None = None, interval: Number = Fraction(1, 10**4)) -> None:
        step = as_fraction(interval, "interval")
        if not 0 < step <= Fraction(1, 10):
            raise ArgumentError(f"the PLD grid interval must lie in (0, 0.1], got {float(step)}.")
        object.__setattr__(self, "delta", delta)
        object.__setattr__(self, "interval", step)

    def weights(self, loss: PrivacyLoss, kind: type[PrivacyLoss]) -> Weights:
        parts = curve_of(loss).parts()
        if isinstance(loss, MechanismLoss) and not all(_has_pld(curve, self.interval) for curve, _ in parts):
            parts = curve_of(
                loss.declared
            ).parts()  # a mechanism whose curve has no PLD: by its declared loss
        out: dict[Hashable, Fraction] = {}
        for curve, count in parts:
            _distributions(curve, float(self.interval))  # refuses a curve without a PLD, before charging
            key = json.dumps(curve.to_json(), sort_keys=True, separators=(",", ":"))
            out[key] = out.get(key, Fraction(0)) + count
        return out

    def _epsilon(self, sums: Weights, delta: float) -> float:
        runs = tuple(sorted((str(key), int(count)) for key, count in sums.items() if count))
        if not runs:
            return 0.0
        return _pld_epsilon(runs, float(self.interval), delta)

    def config(self) -> dict[str, str]:
        return {**super().config(), "interval": fraction_text(self.interval)}


def _has_pld(curve: Curve, interval: Fraction) -> bool:
    try:
        _distributions(curve, float(interval))
    except ArgumentTypeError:
        return False
    return True


@lru_cache(maxsize=256)
def _distributions(curve: Curve, interval: float) -> tuple[LossDistribution, LossDistribution]:
    return curve.distributions(interval)


@lru_cache(maxsize=64)
def _pld_epsilon(runs: tuple[tuple[str, int], ...], interval: float, delta: float) -> float:
    """The epsilon at ``delta`` of ``count`` runs of each stored mechanism (the larger direction's)."""
    remove: LossDistribution | None = None
    add: LossDistribution | None = None
    for key, count in runs:
        one_remove, one_add = _distributions(curve_from_json(json.loads(key)), interval)
        many_remove, many_add = one_remove.power(count), one_add.power(count)
        remove = many_remove if remove is None else remove.compose(many_remove)
        add = many_add if add is None else add.compose(many_add)
    assert remove is not None and add is not None
    return max(remove.epsilon(delta), add.epsilon(delta))


def resolve_policy(
    spec: str | CompositionPolicy | Mapping[str, str], delta_slack: Number | None = None
) -> CompositionPolicy:
    """A policy from a name (``"sequential"``, ``"advanced"``, ``"zcdp"``, ``"rdp"``, ``"pld"``), a policy,
    or a stored config. The tight books (``"rdp"``, ``"pld"``) take their delta from the ledger's budget.

    >>> resolve_policy("advanced", delta_slack=1e-6).name
    'advanced'
    """
    if isinstance(spec, CompositionPolicy):
        if delta_slack is not None:
            raise ArgumentError("pass delta_slack to the policy object, not next to it.")
        return spec
    if isinstance(spec, Mapping):
        if spec["name"] in ("rdp", "pld"):
            delta = Fraction(spec["delta"]) if "delta" in spec else None
            if spec["name"] == "pld":
                return PLDComposition(delta, Fraction(spec.get("interval", "1/10000")))
            return RDPComposition(delta)
        return resolve_policy(spec["name"], Fraction(spec["delta_slack"]) if "delta_slack" in spec else None)
    if not isinstance(spec, str):
        raise ArgumentTypeError(
            f'composition must be "sequential", "advanced", "zcdp", "rdp", "pld" or a policy, got {spec!r}.'
        )
    if spec == "advanced":
        if delta_slack is None:
            raise ArgumentError(
                'composition="advanced" needs delta_slack=, the delta it may add (e.g. 1e-7).'
            )
        return AdvancedComposition(delta_slack)
    if delta_slack is not None:
        raise ArgumentError(f'delta_slack only applies to composition="advanced", not {spec!r}.')
    if spec == "sequential":
        return SequentialComposition()
    if spec == "zcdp":
        return ZCDPComposition()
    if spec == "rdp":
        return RDPComposition()
    if spec == "pld":
        return PLDComposition()
    raise ArgumentError(
        f'composition must be "sequential", "advanced", "zcdp", "rdp", "pld" or a policy, got {spec!r}.'
    )
