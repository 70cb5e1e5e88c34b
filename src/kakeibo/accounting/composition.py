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
* **Parallel** (McSherry 2009; Smith et al. 2022): see :mod:`kakeibo.accounting.overlap`.

Transcendental functions are evaluated in floating point and every float result is rounded *up* (with
:func:`math.nextafter`, a few ulps beyond the worst-case rounding error) before it becomes an exact
:class:`~fractions.Fraction`, so a reported bound is never below the true one.

The ledger uses a :class:`CompositionPolicy`, which splits composition into per-charge additive weights
and a monotone final step; that split is what lets the ledger combine a policy with parallel composition
(maximise each weight over the overlap graph, then finish).
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from fractions import Fraction
from typing import ClassVar

import numpy as np

from ..errors import ArgumentError, ArgumentTypeError
from ..privacy import ZCDP, ApproxDP, Number, PrivacyLoss, PureDP, as_fraction

__all__ = [
    "AdvancedComposition",
    "CompositionPolicy",
    "LossKind",
    "SequentialComposition",
    "ZCDPComposition",
    "advanced_composition",
    "convert",
    "kind_name",
    "kind_zero",
    "loss_leq",
    "optimal_homogeneous_composition",
    "resolve_policy",
    "result_kind",
    "sequential_composition",
    "zcdp_composition",
]

LossKind = type[PureDP] | type[ApproxDP] | type[ZCDP]

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

    >>> convert(PureDP(1), ZCDP)
    ZCDP(rho=Fraction(1, 2))
    """
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
    kinds = {type(loss) for loss in losses}
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

    A policy gives each charge a tuple of additive *weights* (:meth:`weights`) and turns their sums into a
    privacy loss with :meth:`total`, which is non-decreasing in every weight. Splitting it this way lets
    the ledger apply parallel composition: it maximises each weight separately over the query-overlap
    graph and then finishes, which is a sound upper bound for every policy.
    """

    name: ClassVar[str]

    @abstractmethod
    def check_budget(self, budget: PrivacyLoss) -> None:
        """Raise ValueError if this policy cannot account against ``budget`` (wrong kind, too small)."""

    @abstractmethod
    def weights(self, loss: PrivacyLoss, kind: type[PrivacyLoss]) -> tuple[Fraction, ...]:
        """The additive weights of one charge, counted against a budget of ``kind``."""

    @abstractmethod
    def total(self, sums: Sequence[Fraction], kind: type[PrivacyLoss], *, any_charge: bool) -> PrivacyLoss:
        """The composed loss from summed weights; ``any_charge`` says whether anything was charged."""

    def within(
        self, sums: Sequence[Fraction], kind: type[PrivacyLoss], budget: PrivacyLoss, *, any_charge: bool
    ) -> bool:
        """Whether the composed loss fits in ``budget`` in the product order."""
        if kind is ApproxDP and sums[1] + self._reserved_delta(any_charge) >= 1:
            return False
        return loss_leq(self.total(sums, kind, any_charge=any_charge), budget)

    def _reserved_delta(self, any_charge: bool) -> Fraction:
        return Fraction(0)

    def compose(self, losses: Sequence[PrivacyLoss], kind: type[PrivacyLoss]) -> PrivacyLoss:
        """Compose ``losses`` against a budget of ``kind``: sum the weights, then :meth:`total`."""
        rows = [self.weights(loss, kind) for loss in losses]
        width = len(self.weights(kind_zero(kind), kind))
        sums = tuple(sum((r[j] for r in rows), Fraction(0)) for j in range(width))
        return self.total(sums, kind, any_charge=bool(rows))

    @abstractmethod
    def config(self) -> dict[str, str]:
        """A JSON-ready description, stored in the ledger header."""


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


def kind_zero(kind: type[PrivacyLoss]) -> PrivacyLoss:
    """The zero loss of a kind."""
    if kind is ApproxDP:
        return ApproxDP(0, 0)
    if kind is ZCDP:
        return ZCDP(0)
    if kind is PureDP:
        return PureDP(0)
    raise ArgumentTypeError(f"{kind.__name__} losses cannot be accounted for by the ledger.")


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

    def weights(self, loss: PrivacyLoss, kind: type[PrivacyLoss]) -> tuple[Fraction, ...]:
        value = convert(loss, kind)
        if isinstance(value, PureDP):
            return (value.epsilon,)
        if isinstance(value, ApproxDP):
            return (value.epsilon, value.delta)
        if isinstance(value, ZCDP):
            return (value.rho,)
        raise ArgumentTypeError(f"{type(loss).__name__} losses cannot be accounted for by the ledger.")

    def total(self, sums: Sequence[Fraction], kind: type[PrivacyLoss], *, any_charge: bool) -> PrivacyLoss:
        if kind is PureDP:
            return PureDP(sums[0])
        if kind is ApproxDP:
            return _approx_total(sums[0], sums[1])
        if kind is ZCDP:
            return ZCDP(sums[0])
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

    def weights(self, loss: PrivacyLoss, kind: type[PrivacyLoss]) -> tuple[Fraction, ...]:
        value = convert(loss, ApproxDP if kind is ApproxDP else kind)
        if not isinstance(value, ApproxDP):
            raise ArgumentTypeError(
                "advanced composition accounts only (epsilon, delta)-DP and pure DP charges."
            )
        return (value.epsilon, value.delta, value.epsilon**2, _eps_expm1(value.epsilon))

    def _reserved_delta(self, any_charge: bool) -> Fraction:
        return self.delta_slack if any_charge else Fraction(0)

    def total(self, sums: Sequence[Fraction], kind: type[PrivacyLoss], *, any_charge: bool) -> PrivacyLoss:
        if kind is not ApproxDP:
            raise ArgumentTypeError("advanced composition accounts against an (epsilon, delta) budget only.")
        if not any_charge:
            return ApproxDP(0, 0)
        eps_sequential, delta, sum_sq, sum_expected = sums
        eps = min(eps_sequential, _drv_epsilon(sum_sq, sum_expected, self.delta_slack))
        return _approx_total(eps, delta + self.delta_slack)

    def config(self) -> dict[str, str]:
        slack = self.delta_slack
        return {"name": self.name, "delta_slack": f"{slack.numerator}/{slack.denominator}"}


def resolve_policy(
    spec: str | CompositionPolicy | Mapping[str, str], delta_slack: Number | None = None
) -> CompositionPolicy:
    """A policy from a name (``"sequential"``, ``"advanced"``, ``"zcdp"``), a policy, or a stored config.

    >>> resolve_policy("advanced", delta_slack=1e-6).name
    'advanced'
    """
    if isinstance(spec, CompositionPolicy):
        if delta_slack is not None:
            raise ArgumentError("pass delta_slack to the policy object, not next to it.")
        return spec
    if isinstance(spec, Mapping):
        return resolve_policy(spec["name"], Fraction(spec["delta_slack"]) if "delta_slack" in spec else None)
    if not isinstance(spec, str):
        raise ArgumentTypeError(
            f'composition must be "sequential", "advanced", "zcdp" or a policy, got {spec!r}.'
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
    raise ArgumentError(f'composition must be "sequential", "advanced" or "zcdp", got {spec!r}.')
