"""What a mechanism's privacy looks like to a tight accountant: its Renyi curve and its privacy-loss
distribution (PLD), for the ledger's ``"rdp"`` and ``"pld"`` books (:mod:`.composition`).

A :class:`Curve` describes one mechanism by its parameters (exact rationals, so a ledger entry that stores
them hashes the same forever) and gives

* :meth:`Curve.rdp`: upper bounds on its Renyi divergences ``D_alpha(P || Q)`` at the given orders, for
  both directions of the neighbour relation (Mironov, CSF 2017);
* :meth:`Curve.distributions`: pessimistic PLDs ``(remove, add)`` -- ``P`` the output with the person,
  ``Q`` without, and the reverse (:mod:`.pld`).

The curves, each with its neighbour relation and sensitivity:

* :class:`EpsilonDelta` -- any (epsilon, delta)-DP mechanism. Kairouz, Oh and Viswanath (ICML 2015, Thm.
  2.1) show every such mechanism is, on each pair of neighbours, a post-processing of the four-outcome
  mechanism that reveals the input with probability delta and is otherwise randomized response at
  epsilon; by data processing its curves are that mechanism's. Its loss is ``+inf`` with mass delta and
  ``+-epsilon`` with masses ``(1 - delta) e^eps / (1 + e^eps)`` and ``(1 - delta) / (1 + e^eps)``; for
  delta = 0 its Renyi divergence is that of randomized response,
  ``D_alpha = ln((e^(alpha eps) + e^((1 - alpha) eps)) / (1 + e^eps)) / (alpha - 1)``, and for delta > 0 it
  has none. Pure-DP charges (Laplace, geometric, exponential, randomized response, whatever their grid
  and rounding) are accounted this way.
* :class:`Concentrated` -- rho-zCDP: ``D_alpha <= rho alpha`` (Bun and Steinke 2016); no PLD (zCDP does
  not pin one down). kakeibo's discrete Gaussian is ``(Delta^2 / (2 sigma^2))``-zCDP (Canonne, Kamath and
  Steinke 2020, Thm. 14).
* :class:`GaussianNoise` -- continuous Gaussian noise of standard deviation ``noise_multiplier`` times the
  L2 sensitivity: ``D_alpha = alpha / (2 sigma^2)`` (Mironov 2017, Table II); its loss is normal with mean
  ``mu^2 / 2`` and variance ``mu^2``, ``mu = 1 / sigma`` (the same both ways).
* :class:`LaplaceNoise` -- continuous Laplace noise of scale ``noise_multiplier`` times the L1 sensitivity
  of a one-dimensional answer (b): ``D_alpha = ln(alpha / (2 alpha - 1) e^((alpha - 1) / b) +
  (alpha - 1) / (2 alpha - 1) e^(-alpha / b)) / (alpha - 1)`` (Mironov 2017, Table II); its loss is
  ``1/b`` with mass 1/2, ``-1/b`` with mass ``e^(-1/b) / 2`` and ``(1 - 2x) / b`` for ``x`` in (0, 1)
  between.
* :class:`SubsampledGaussian` -- the Gaussian above applied to a subsample: ``"poisson"`` (each record
  kept independently with probability q; add/remove neighbours) or ``"fixed"`` (a uniformly random subset
  of a fixed size, q = size / n; replace-one neighbours, the noise multiplier relative to the replace-one
  sensitivity). Poisson, integer orders: ``A_alpha = sum_k C(alpha, k) (1 - q)^(alpha - k) q^k
  e^((k^2 - k) / (2 sigma^2))``, ``D_alpha = ln A_alpha / (alpha - 1)`` (Mironov, Talwar and Zhang 2019,
  Sec. 3.3, which also shows the remove direction bounds the add one). Fixed size: Wang, Balle and
  Kasiviswanathan (AISTATS 2019, Thm. 9) with ``eps(infinity) = infinity``. Fractional orders: the
  cumulant ``(alpha - 1) D_alpha`` is convex in alpha, so it is bounded by the chord between the
  neighbouring integers (WBK 2019, Cor. 10). Every order is capped by the unsampled Gaussian's. PLD
  (Poisson): ``remove`` is ``P = (1 - q) N(0, s^2) + q N(1, s^2)`` against ``Q = N(0, s^2)``, with loss
  ``ln(1 - q + q e^((2x - 1) / (2 s^2)))`` increasing in x; ``add`` is the reverse pair (Zhu, Dong and
  Wang, AISTATS 2022). Fixed-size sampling has no PLD here (the ledger's PLD books refuse it): under
  replace-one neighbours its dominating pair depends on how the sensitivity is stated: with each record's
  contribution of norm at most 1, replacing one record already gives ``(1 - q) N(0, s^2) + q N(1, s^2)``
  against ``(1 - q) N(0, s^2) + q N(-1, s^2)`` (at q = 1 a shift of 2), which the Poisson pair at the same
  noise does not dominate; and dp-accounting, the reference the PLDs here are tested against, has none.
* :class:`Composed` -- ``count`` runs of each part (a DP-SGD run: ``steps`` subsampled Gaussians). Renyi
  divergences add (Mironov 2017, Prop. 1); PLDs convolve.

**Rounding.** Every Renyi value is rounded up: closed forms exactly in rationals where they are rational
(the Gaussian's), others inflated by a margin above the float error of their few operations.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass, field
from fractions import Fraction
from functools import lru_cache
from typing import Any, ClassVar

import numpy as np
from numpy.typing import NDArray
from scipy import special

from ..errors import ArgumentError, ArgumentTypeError
from ..privacy import (
    ZCDP,
    ApproxDP,
    Number,
    PrivacyLoss,
    PureDP,
    as_fraction,
    format_fraction,
    fraction_text,
    positive_fraction,
)
from .pld import TAIL, Cdf, LossDistribution, Pair, from_atoms, from_cdf, quantile

__all__ = [
    "Composed",
    "Concentrated",
    "Curve",
    "EpsilonDelta",
    "GaussianNoise",
    "LaplaceNoise",
    "MechanismLoss",
    "SubsampledGaussian",
    "curve_from_json",
    "curve_of",
]

#: Relative inflation of a Renyi value computed in floats (far above the error of a few dozen operations).
_MARGIN = 2.0**-36


def _up(value: float, scale: float) -> float:
    """``value`` plus a margin for the float error of terms of magnitude up to ``scale``."""
    return value + _MARGIN * (abs(value) + abs(scale)) + 1e-300


def _orders(orders: Sequence[float]) -> NDArray[np.float64]:
    grid = np.asarray(orders, dtype=np.float64)
    if grid.ndim != 1 or not np.all(np.isfinite(grid)) or not np.all(grid > 1):
        raise ArgumentError("Renyi orders must be finite numbers greater than 1.")
    return grid


class Curve(ABC):
    """One mechanism as a tight accountant sees it (see the module docstring). Immutable and hashable."""

    name: ClassVar[str]

    @abstractmethod
    def rdp(self, orders: Sequence[float]) -> tuple[Fraction, ...]:
        """Upper bounds on ``D_alpha`` at ``orders`` (both directions), rounded up to exact rationals."""

    def distributions(self, interval: float) -> tuple[LossDistribution, LossDistribution]:
        """Pessimistic PLDs ``(remove, add)`` on a grid of step ``interval``."""
        raise ArgumentTypeError(f"{self} has no privacy-loss distribution; account it with rdp books.")

    @abstractmethod
    def parameters(self) -> dict[str, Any]:
        """The parameters, JSON-ready (rationals as ``"num/den"`` text)."""

    def to_json(self) -> dict[str, Any]:
        """The description stored in a ledger entry: ``{"name": ..., **parameters}``."""
        return {"name": self.name, **self.parameters()}

    def parts(self) -> tuple[tuple[Curve, int], ...]:
        """The mechanisms run, each with how many times (one part for a single mechanism)."""
        return ((self, 1),)


@dataclass(frozen=True)
class EpsilonDelta(Curve):
    """Any (epsilon, delta)-DP mechanism, through the dominating four-outcome pair (module docstring).

    >>> [round(float(v), 6) for v in EpsilonDelta(1).rdp([2.0, 64.0])]  # below epsilon = 1 at every order
    [0.735326, 0.995028]
    """

    epsilon: Fraction
    delta: Fraction = Fraction(0)
    name: ClassVar[str] = "epsilon_delta"

    def __init__(self, epsilon: Number, delta: Number = 0) -> None:
        loss = ApproxDP(epsilon, delta)
        object.__setattr__(self, "epsilon", loss.epsilon)
        object.__setattr__(self, "delta", loss.delta)

    def __str__(self) -> str:
        return f"an (epsilon={format_fraction(self.epsilon)}, delta={format_fraction(self.delta)})-DP release"

    def rdp(self, orders: Sequence[float]) -> tuple[Fraction, ...]:
        if self.delta > 0:
            raise ArgumentTypeError(
                f"{self} has no Renyi curve (its divergence is infinite); account it with pld or "
                "sequential books."
            )
        eps = float(self.epsilon)
        out = []
        for a in _orders(orders):
            bracket = math.log1p(math.exp((1 - 2 * a) * eps)) - math.log1p(math.exp(-eps))
            value = _up(max(eps + bracket / (a - 1), 0.0), eps + abs(bracket) / (a - 1))
            out.append(min(Fraction(value), self.epsilon))  # epsilon-DP caps every order at epsilon
        return tuple(out)

    def distributions(self, interval: float) -> tuple[LossDistribution, LossDistribution]:
        eps, dlt = float(self.epsilon), float(self.delta)
        keep = 1 - dlt
        high = keep / (1 + math.exp(-eps))
        atoms = {eps: high, -eps: keep - high} if eps > 0 else {0.0: keep}
        pair = from_atoms(atoms, dlt, interval=interval)
        return pair, pair

    def parameters(self) -> dict[str, Any]:
        return {"epsilon": fraction_text(self.epsilon), "delta": fraction_text(self.delta)}


@dataclass(frozen=True)
class Concentrated(Curve):
    """rho-zCDP: ``D_alpha <= rho alpha`` at every order (Bun and Steinke 2016, Def. 1.1).

    >>> Concentrated(0.5).rdp([2.0, 4.0])
    (Fraction(1, 1), Fraction(2, 1))
    """

    rho: Fraction
    name: ClassVar[str] = "zcdp"

    def __init__(self, rho: Number) -> None:
        object.__setattr__(self, "rho", ZCDP(rho).rho)

    def __str__(self) -> str:
        return f"a rho={format_fraction(self.rho)}-zCDP release"

    def rdp(self, orders: Sequence[float]) -> tuple[Fraction, ...]:
        return tuple(self.rho * Fraction(float(a)) for a in _orders(orders))

    def parameters(self) -> dict[str, Any]:
        return {"rho": fraction_text(self.rho)}


@dataclass(frozen=True)
class GaussianNoise(Curve):
    """Gaussian noise of standard deviation ``noise_multiplier`` times the L2 sensitivity.

    >>> GaussianNoise(2).rdp([2.0])
    (Fraction(1, 4),)
    """

    noise_multiplier: Fraction
    name: ClassVar[str] = "gaussian"

    def __init__(self, noise_multiplier: Number) -> None:
        object.__setattr__(self, "noise_multiplier", positive_fraction(noise_multiplier, "noise_multiplier"))

    def __str__(self) -> str:
        return f"Gaussian noise (noise multiplier {format_fraction(self.noise_multiplier)})"

    def rdp(self, orders: Sequence[float]) -> tuple[Fraction, ...]:
        return tuple(Fraction(float(a)) / (2 * self.noise_multiplier**2) for a in _orders(orders))

    def distributions(self, interval: float) -> tuple[LossDistribution, LossDistribution]:
        mu = 1 / float(self.noise_multiplier)
        mean, spread = mu * mu / 2, mu
        z = -float(special.ndtri(TAIL))

        def normal(centre: float) -> Pair:
            return (
                lambda losses: np.asarray(special.ndtr((losses - centre) / spread)),
                lambda losses: np.asarray(special.ndtr((centre - losses) / spread)),
            )

        pair = from_cdf(normal(mean), normal(-mean), mean - z * spread, mean + z * spread, 0.0, interval)
        return pair, pair

    def parameters(self) -> dict[str, Any]:
        return {"noise_multiplier": fraction_text(self.noise_multiplier)}


@dataclass(frozen=True)
class LaplaceNoise(Curve):
    """Laplace noise of scale ``noise_multiplier`` times the L1 sensitivity of a one-dimensional answer.

    >>> [round(float(v), 6) for v in LaplaceNoise(1).rdp([2.0, 1024.0])]  # tends to epsilon = 1/b = 1
    [0.619124, 0.999323]
    """

    noise_multiplier: Fraction
    name: ClassVar[str] = "laplace"

    def __init__(self, noise_multiplier: Number) -> None:
        object.__setattr__(self, "noise_multiplier", positive_fraction(noise_multiplier, "noise_multiplier"))

    def __str__(self) -> str:
        return f"Laplace noise (noise multiplier {format_fraction(self.noise_multiplier)})"

    def rdp(self, orders: Sequence[float]) -> tuple[Fraction, ...]:
        inverse = 1 / float(self.noise_multiplier)
        out = []
        for a in _orders(orders):
            # ln(a/(2a-1) e^((a-1)/b) + (a-1)/(2a-1) e^(-a/b)) = (a-1)/b + ln(a/(2a-1) + ...e^(-(2a-1)/b))
            inner = math.log(a / (2 * a - 1) + (a - 1) / (2 * a - 1) * math.exp(-(2 * a - 1) * inverse))
            value = min(inverse + inner / (a - 1), inverse)
            out.append(Fraction(_up(max(value, 0.0), inverse + abs(inner) / (a - 1))))
        return tuple(out)

    def distributions(self, interval: float) -> tuple[LossDistribution, LossDistribution]:
        top = 1 / float(self.noise_multiplier)

        def cdf(losses: NDArray[np.float64]) -> NDArray[np.float64]:
            """P(L <= l): ``-1/b`` with mass ``e^(-1/b) / 2``, then ``e^(l/2 - 1/(2b)) / 2``, then 1."""
            inside = np.exp(np.minimum(losses, top) / 2 - top / 2) / 2
            return np.where(losses < -top, 0.0, np.where(losses >= top, 1.0, inside))

        def below(losses: NDArray[np.float64]) -> NDArray[np.float64]:
            """P(L < l), the left limit of ``cdf``."""
            inside = np.exp(np.minimum(losses, top) / 2 - top / 2) / 2
            return np.where(losses <= -top, 0.0, np.where(losses > top, 1.0, inside))

        # The pair is symmetric: L under Q is -L under P, so Q(L <= l) = 1 - P(L < -l).
        p_loss: Pair = (cdf, lambda losses: 1.0 - cdf(losses))
        q_loss: Pair = (lambda losses: 1.0 - below(-losses), lambda losses: below(-losses))
        pair = from_cdf(p_loss, q_loss, -top, top, 0.0, interval)
        return pair, pair

    def parameters(self) -> dict[str, Any]:
        return {"noise_multiplier": fraction_text(self.noise_multiplier)}


SAMPLINGS = ("poisson", "fixed")


@dataclass(frozen=True)
class SubsampledGaussian(Curve):
    """Gaussian noise on a subsample (module docstring): ``sampling_rate`` q in (0, 1], ``sampling``
    ``"poisson"`` or ``"fixed"``.

    >>> float(SubsampledGaussian(1, 0.01).rdp([8.0])[0]) < float(GaussianNoise(1).rdp([8.0])[0]) / 100
    True
    """

    noise_multiplier: Fraction
    sampling_rate: Fraction
    sampling: str = "poisson"
    name: ClassVar[str] = "subsampled_gaussian"

    def __init__(self, noise_multiplier: Number, sampling_rate: Number, sampling: str = "poisson") -> None:
        rate = positive_fraction(sampling_rate, "sampling_rate")
        if rate > 1:
            raise ArgumentError(f"sampling_rate must lie in (0, 1], got {float(rate)}.")
        if sampling not in SAMPLINGS:
            raise ArgumentError(f'sampling must be "poisson" or "fixed", got {sampling!r}.')
        object.__setattr__(self, "noise_multiplier", positive_fraction(noise_multiplier, "noise_multiplier"))
        object.__setattr__(self, "sampling_rate", rate)
        object.__setattr__(self, "sampling", sampling)

    def __str__(self) -> str:
        return (
            f"Gaussian noise (noise multiplier {format_fraction(self.noise_multiplier)}) on a "
            f"{self.sampling} subsample (rate {format_fraction(self.sampling_rate)})"
        )

    def rdp(self, orders: Sequence[float]) -> tuple[Fraction, ...]:
        full = GaussianNoise(self.noise_multiplier).rdp(orders)
        if self.sampling_rate == 1:
            return full
        cumulant = _poisson_cumulant if self.sampling == "poisson" else _fixed_cumulant
        q, sigma = float(self.sampling_rate), float(self.noise_multiplier)
        out = []
        for a, cap in zip(_orders(orders), full, strict=True):
            low, high = math.floor(a), math.ceil(a)
            t = a - low
            k_low = 0.0 if low == 1 else cumulant(q, sigma, low)
            k_high = k_low if high == low else cumulant(q, sigma, high)
            value = ((1 - t) * k_low + t * k_high) / (a - 1)  # the chord of the convex cumulant
            out.append(min(Fraction(value), cap))
        return tuple(out)

    def distributions(self, interval: float) -> tuple[LossDistribution, LossDistribution]:
        if self.sampling != "poisson":
            return super().distributions(interval)
        if self.sampling_rate == 1:
            return GaussianNoise(self.noise_multiplier).distributions(interval)
        return _poisson_pair(float(self.sampling_rate), float(self.noise_multiplier), interval)

    def parameters(self) -> dict[str, Any]:
        return {
            "noise_multiplier": fraction_text(self.noise_multiplier),
            "sampling_rate": fraction_text(self.sampling_rate),
            "sampling": self.sampling,
        }


def _log_binomials(alpha: int) -> NDArray[np.float64]:
    k = np.arange(alpha + 1, dtype=np.float64)
    return np.asarray(special.gammaln(alpha + 1) - special.gammaln(k + 1) - special.gammaln(alpha - k + 1))


def _log_sum(terms: NDArray[np.float64]) -> float:
    """``ln sum exp(terms)``, rounded up: each term carries an error of a few ulps of itself, which moves the
    result by its weight in the sum times that error, plus the error of the sum and the logarithm."""
    top = float(np.max(terms))
    scaled = np.exp(terms - top)
    total = float(np.sum(scaled))
    value = top + math.log(total)
    weighted = float(np.sum(scaled * np.abs(terms))) / total
    return value + 16 * 2.0**-53 * (abs(top) + weighted + terms.size) + _MARGIN * abs(value)


@lru_cache(maxsize=4096)
def _poisson_cumulant(q: float, sigma: float, alpha: int) -> float:
    """``ln A_alpha`` of the Poisson-subsampled Gaussian at integer ``alpha`` (MTZ 2019, Sec. 3.3)."""
    k = np.arange(alpha + 1, dtype=np.float64)
    terms = (
        _log_binomials(alpha) + (alpha - k) * math.log1p(-q) + k * math.log(q) + (k * k - k) / (2 * sigma**2)
    )
    return max(_log_sum(terms), 0.0)


@lru_cache(maxsize=4096)
def _fixed_cumulant(q: float, sigma: float, alpha: int) -> float:
    """``ln`` of WBK 2019 Thm. 9's bound at integer ``alpha``, for Gaussian noise (``eps(j) = j / (2
    sigma^2)``, ``eps(infinity) = infinity``)."""
    binomials = _log_binomials(alpha)
    eps2 = 2 / (2 * sigma**2)
    second = (
        2 * math.log(q) + binomials[2] + min(math.log(4) + math.log(math.expm1(eps2)), eps2 + math.log(2))
    )
    j = np.arange(3, alpha + 1, dtype=np.float64)
    rest = j * math.log(q) + binomials[3:] + math.log(2) + (j - 1) * j / (2 * sigma**2)
    return max(_log_sum(np.concatenate(([0.0, second], rest))), 0.0)


def _poisson_pair(q: float, sigma: float, interval: float) -> tuple[LossDistribution, LossDistribution]:
    """The pessimistic PLDs ``(remove, add)`` of the Poisson-subsampled Gaussian (module docstring)."""
    floor = math.log1p(-q)  # the loss of the mixture against N(0, s^2) never reaches ln(1 - q)

    def point(loss: NDArray[np.float64]) -> NDArray[np.float64]:
        """The x with ln(1 - q + q e^((2x - 1) / (2 s^2))) = loss, for loss > ln(1 - q)."""
        with np.errstate(divide="ignore", invalid="ignore"):
            return np.asarray(sigma**2 * (np.log(np.expm1(loss) + q) - math.log(q)) + 0.5)

    def mixture(x: NDArray[np.float64]) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
        """P(X <= x) and P(X > x) for X ~ (1 - q) N(0, s^2) + q N(1, s^2)."""
        return (
            (1 - q) * special.ndtr(x / sigma) + q * special.ndtr((x - 1) / sigma),
            (1 - q) * special.ndtr(-x / sigma) + q * special.ndtr((1 - x) / sigma),
        )

    def remove(under_mixture: bool, upper: bool) -> Cdf:
        """remove: L = ln(1 - q + q e^((2x - 1) / (2 s^2))), increasing in x, under the mixture (P) or
        N(0, s^2) (Q); ``upper`` picks P(L > l) over P(L <= l)."""

        def function(loss: NDArray[np.float64]) -> NDArray[np.float64]:
            x = point(np.maximum(loss, floor))
            value = mixture(x)[upper] if under_mixture else special.ndtr((-x if upper else x) / sigma)
            return np.where(loss <= floor, float(upper), value)

        return function

    def add(under_mixture: bool, upper: bool) -> Cdf:
        """add: L = -ln(1 - q + q e^((2x - 1) / (2 s^2))), decreasing in x, under N(0, s^2) (P) or the
        mixture (Q): L <= l exactly when x >= x(-l)."""

        def function(loss: NDArray[np.float64]) -> NDArray[np.float64]:
            x = point(np.maximum(-loss, floor))
            value = mixture(x)[not upper] if under_mixture else special.ndtr((x if upper else -x) / sigma)
            return np.where(loss >= -floor, float(not upper), value)

        return function

    reach = 0.5 + sigma * (-float(special.ndtri(TAIL)) + 1)  # |x| beyond which each tail is below TAIL
    top = max(float(np.log1p(q * np.expm1((2 * reach - 1) / (2 * sigma**2)))), interval)
    remove_cdf = remove(True, False)
    bottom = quantile(remove_cdf, TAIL, floor, 0.0) if remove_cdf(np.array([0.0]))[0] > TAIL else floor
    removed = from_cdf(
        (remove_cdf, remove(True, True)),
        (remove(False, False), remove(False, True)),
        bottom,
        top,
        0.0,
        interval,
    )
    added = from_cdf(
        (add(False, False), add(False, True)),
        (add(True, False), add(True, True)),
        -top,
        -floor,
        0.0,
        interval,
    )
    return removed, added


@dataclass(frozen=True)
class Composed(Curve):
    """``count`` runs of each part, in any order (Renyi divergences add; PLDs convolve).

    >>> run = Composed(((SubsampledGaussian(1, 0.01), 1000),))
    >>> run.parts()[0][1]
    1000
    """

    runs: tuple[tuple[Curve, int], ...] = field(default=())
    name: ClassVar[str] = "composed"

    def __init__(self, runs: Sequence[tuple[Curve, int]]) -> None:
        merged: dict[Curve, int] = {}
        for curve, count in runs:
            if not isinstance(curve, Curve):
                raise ArgumentTypeError(f"a composed curve is made of curves, not {type(curve).__name__}.")
            if isinstance(count, bool) or not isinstance(count, int) or count < 1:
                raise ArgumentError(
                    f"each part of a composition runs a positive whole number of times, not {count!r}."
                )
            for part, times in curve.parts():
                merged[part] = merged.get(part, 0) + times * count
        if not merged:
            raise ArgumentError("a composed curve needs at least one part.")
        object.__setattr__(self, "runs", tuple(sorted(merged.items(), key=lambda item: _key(item[0]))))

    def __str__(self) -> str:
        return "; ".join(f"{count} x {curve}" for curve, count in self.runs)

    def parts(self) -> tuple[tuple[Curve, int], ...]:
        return self.runs

    def rdp(self, orders: Sequence[float]) -> tuple[Fraction, ...]:
        totals = [Fraction(0)] * len(_orders(orders))
        for curve, count in self.runs:
            for i, value in enumerate(curve.rdp(orders)):
                totals[i] += count * value
        return tuple(totals)

    def distributions(self, interval: float) -> tuple[LossDistribution, LossDistribution]:
        remove: LossDistribution | None = None
        add: LossDistribution | None = None
        for curve, count in self.runs:
            one_remove, one_add = curve.distributions(interval)
            many_remove, many_add = one_remove.power(count), one_add.power(count)
            remove = many_remove if remove is None else remove.compose(many_remove)
            add = many_add if add is None else add.compose(many_add)
        assert remove is not None and add is not None
        return remove, add

    def parameters(self) -> dict[str, Any]:
        return {"runs": [[curve.to_json(), count] for curve, count in self.runs]}


def _key(curve: Curve) -> str:
    return repr(sorted(curve.to_json().items()))


_LEAVES: dict[str, type[Curve]] = {
    cls.name: cls for cls in (EpsilonDelta, Concentrated, GaussianNoise, LaplaceNoise, SubsampledGaussian)
}


def curve_from_json(data: object) -> Curve:
    """The curve a ledger entry stored (:meth:`Curve.to_json`); ArgumentError if it is not one."""
    if not isinstance(data, dict) or not isinstance(data.get("name"), str):
        raise ArgumentError(f"not a stored mechanism description: {data!r}")
    values = {key: value for key, value in data.items() if key != "name"}
    if data["name"] == Composed.name:
        runs = values.get("runs")
        if not isinstance(runs, list) or set(values) != {"runs"}:
            raise ArgumentError("a stored composition needs its runs.")
        return Composed([(curve_from_json(part), count) for part, count in runs])
    cls = _LEAVES.get(data["name"])
    if cls is None:
        raise ArgumentError(f"unknown mechanism description {data['name']!r}")
    parsed = {key: Fraction(value) if key != "sampling" else value for key, value in values.items()}
    try:
        return cls(**parsed)
    except TypeError as exc:
        raise ArgumentError(f"the stored {data['name']} description has wrong parameters ({exc}).") from None


@lru_cache(maxsize=4096)
def curve_of(loss: PrivacyLoss) -> Curve:
    """The curve a ledger's tight books account ``loss`` by: a :class:`MechanismLoss`'s own; a pure or
    approximate loss's :class:`EpsilonDelta`; a zCDP loss's :class:`Concentrated`."""
    if isinstance(loss, MechanismLoss):
        return loss.curve
    if isinstance(loss, PureDP):
        return EpsilonDelta(loss.epsilon)
    if isinstance(loss, ApproxDP):
        return EpsilonDelta(loss.epsilon, loss.delta)
    if isinstance(loss, ZCDP):
        return Concentrated(loss.rho)
    raise ArgumentTypeError(f"{type(loss).__name__} losses cannot be accounted for by the ledger.")


@dataclass(frozen=True)
class MechanismLoss(PrivacyLoss):
    """A release's loss stated two ways: ``declared``, the pure, approximate or zCDP loss the mechanism was
    calibrated to (what sequential, advanced and zCDP books count), and ``curve``, the mechanism itself
    (what rdp and pld books compose). Whoever builds one states both; :meth:`of` derives ``declared`` from
    the curve's PLD at a delta.

    >>> loss = MechanismLoss(ApproxDP(1, 1e-5), GaussianNoise(5))
    >>> loss.to_approx(1e-5)
    ApproxDP(epsilon=Fraction(1, 1), delta=Fraction(1, 100000))
    """

    declared: PrivacyLoss
    curve: Curve

    def __post_init__(self) -> None:
        if not isinstance(self.declared, (PureDP, ApproxDP, ZCDP)):
            raise ArgumentTypeError(
                "a mechanism's declared loss is PureDP, ApproxDP or ZCDP, "
                f"not {type(self.declared).__name__}."
            )
        if not isinstance(self.curve, Curve):
            raise ArgumentTypeError(f"a mechanism's curve is a Curve, not {type(self.curve).__name__}.")

    @classmethod
    def of(cls, curve: Curve, delta: Number, *, interval: float = 1e-4) -> MechanismLoss:
        """``curve`` with its declared loss ``(epsilon, delta)``, epsilon from its PLD (rounded up).

        >>> round(float(MechanismLoss.of(GaussianNoise(1), 1e-5).declared.epsilon), 5)  # exact: 4.37718
        4.37718
        """
        remove, add = curve.distributions(interval)
        target = float(as_fraction(delta, "delta"))
        epsilon = max(remove.epsilon(target), add.epsilon(target))
        if not math.isfinite(epsilon):
            raise ArgumentError(f"{curve} is not ({target:g})-DP for any epsilon.")
        return cls(ApproxDP(epsilon, delta), curve)

    def __str__(self) -> str:
        return f"{self.declared} ({self.curve})"

    def to_approx(self, delta: Number = 0) -> ApproxDP:
        return self.declared.to_approx(delta)
