"""Numeric values in [-1, 1] under eps-LDP: Duchi et al., the Piecewise mechanism and the Hybrid mechanism
(Wang, Xiao, Yang, Zhao, Hui, Shin, Shin and Yu 2019, "Collecting and Analyzing Multidimensional Data with
Local Differential Privacy", ICDE; seed 004, Algorithm 1).

Each randomizer maps a client's ``x`` to one report ``y`` with ``E[y | x] = x``, so the mean of the reports
estimates the mean of the values, with variance ``sum Var(y | x_j) / n^2``.

Floating point is an attack surface, so kakeibo does not draw a real number whose low bits depend on
``x``. Every report is one of finitely many outputs fixed by the parameters (two for Duchi; the centres of
``M = 2^16`` equal cells of ``[-C, C]`` for the Piecewise mechanism), and every coin whose probability the
privacy argument uses is dyadic and exact. Coins whose probability depends on ``x`` (where the Piecewise
window sits, Duchi's sign) are placed so that *any* value of them keeps the ratio at most ``e^eps``: the
privacy proof never looks at them, and their floating-point rounding can only move the estimate by
``2^-53``.

The server side mirrors this: :meth:`NumericRandomizer.estimate` (and :mod:`.multidim`, through
:meth:`NumericRandomizer.check_reports`) accepts exactly the finite output space :attr:`~NumericRandomizer.
outputs` of the randomizer and refuses any other number, NaN and infinities included. The estimator of
Wang et al. 2019 (Sec. III) is only unbiased, with the stated variance, over reports from that space: one
forged report of ``1e6`` among ``10^5`` honest ones would move the mean by 10.
"""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
from numpy.typing import ArrayLike, NDArray

from ..errors import ArgumentError
from ..mechanisms.base import Rng
from ..noise import resolve_source
from ..noise.exact import uniform_below
from ..noise.source import RandomSource
from ..privacy import Number
from ._coins import (
    bernoulli_words,
    dyadic_at_most,
    flip_probability,
    ln_upper,
    precision_bits,
    unpack_bits,
)
from .estimates import MeanEstimate, deprecated_alias
from .framework import FloatArray, LocalRandomizer

__all__ = ["DuchiMechanism", "HybridMechanism", "MeanEstimate", "NumericRandomizer", "PiecewiseMechanism"]

#: Number of output cells of the Piecewise mechanism.
_CELLS = 1 << 16


def check_unit_values(values: ArrayLike) -> FloatArray:
    arr = np.asarray(values, dtype=np.float64)
    if arr.ndim != 1:
        raise ArgumentError(f"values must be a 1-d array with one value per client, got shape {arr.shape}.")
    if not np.all(np.isfinite(arr)) or np.any(np.abs(arr) > 1):
        raise ArgumentError("values must be finite numbers in [-1, 1]; scale them first.")
    return arr


def _uniform_unit(n: int, source: RandomSource) -> FloatArray:
    """``n`` uniform doubles in [0, 1) (53 random bits each): only for coins the privacy proof ignores."""
    return np.asarray((source.words(n) >> np.uint64(11)).astype(np.float64) * 2.0**-53, dtype=np.float64)


def _exact_coins(probability: Fraction, n: int, source: RandomSource) -> NDArray[np.bool_]:
    return unpack_bits(bernoulli_words(probability, -(-n // 64), source), n).astype(np.bool_)


def _output_space(values: ArrayLike) -> FloatArray:
    """``values`` sorted, without repeats and read-only: an output space for :meth:`NumericRandomizer.
    check_reports`."""
    space = np.unique(np.asarray(values, dtype=np.float64))
    space.setflags(write=False)
    return space


class NumericRandomizer(LocalRandomizer):
    """Common surface: ``randomize(values, rng=None)`` and ``estimate(reports)``.

    Neighbour relation: local, any two values in [-1, 1] of one client. Privacy loss ``PureDP(epsilon)``.
    """

    neighbour = "local: any two values in [-1, 1] of one client"
    #: Every report the randomizer can send, sorted (set by each subclass; see :attr:`outputs`).
    _outputs: FloatArray
    #: The output space in words, for refusals.
    _output_words: str

    def randomize(self, values: ArrayLike, rng: Rng = None) -> FloatArray:
        """One report per client; ``E[report | x] = x``."""
        return self._perturb(check_unit_values(values), resolve_source(rng))

    def _perturb(self, values: FloatArray, source: RandomSource) -> FloatArray:
        raise NotImplementedError

    def variance(self, x: ArrayLike) -> FloatArray:
        """Exact ``Var(report | x)`` of this (discretised) randomizer."""
        raise NotImplementedError

    @property
    def output_bound(self) -> float:
        """The largest ``|report|`` this randomizer sends (a server refuses anything beyond it, and every
        other number outside :attr:`outputs`)."""
        raise NotImplementedError

    @property
    def outputs(self) -> FloatArray:
        """Every report an honest client can send, sorted and read-only: the randomizer's exact (finite)
        output space, which is all :meth:`check_reports` accepts."""
        return self._outputs

    def check_reports(self, reports: ArrayLike, what: str = "reports") -> FloatArray:
        """``reports`` as a float array, or a one-sentence ``ValueError`` unless every entry is one of
        :attr:`outputs` (so no NaN, no infinity, nothing beyond :attr:`output_bound` and nothing between two
        outputs); ``what`` names the reports in the refusal.

        The membership test is exact: each report is compared with the output the binary search finds for
        it, and the client sends these very doubles (module docstring)."""
        y = np.asarray(reports)
        if y.dtype.kind not in "iuf":
            raise ArgumentError(f"{what} must be real numbers, got an array of {y.dtype}.")
        y = y.astype(np.float64, copy=False)
        space = self._outputs
        nearest = space[np.minimum(np.searchsorted(space, y), space.size - 1)]
        outside = int(np.count_nonzero(nearest != y))  # NaN never equals, so it is counted
        if outside:
            raise ArgumentError(
                f"{outside} of the {y.size} {what} lie outside the output space of {self!r} "
                f"({self._output_words}); an honest client never sends them."
            )
        return y

    def estimate(self, reports: ArrayLike) -> MeanEstimate:
        """The unbiased mean of the clients' values; its variance takes each client at the worst case
        ``|x| = 1`` (a bound, since the values are unknown). Reports outside :attr:`outputs` are refused
        (:meth:`check_reports`)."""
        y = np.asarray(reports)
        if y.ndim != 1 or y.size == 0:
            raise ArgumentError("reports must be a non-empty 1-d array.")
        y = self.check_reports(y)
        worst = float(np.max(self.variance(np.array([-1.0, 0.0, 1.0]))))
        return MeanEstimate(
            mean=float(y.mean()), variance=worst / y.size, n=int(y.size), privacy_loss=self.privacy_loss
        )

    #: Deprecated name of :meth:`estimate` (removed in the next release).
    estimate_mean = deprecated_alias("estimate")


class DuchiMechanism(NumericRandomizer):
    """Duchi, Jordan and Wainwright's one-dimensional mechanism: report ``+B`` or ``-B``.

    A fair-sign coin is used with probability ``2 p0`` (``p0`` = ``1 / (e^eps + 1)`` rounded up to a dyadic
    rational), otherwise the sign is ``+`` with probability ``(1 + x) / 2``; so ``P(+ | x)`` lies in
    ``[p0, 1 - p0]`` whatever ``x`` and the ratio is at most ``(1 - p0) / p0 <= e^eps`` (checked exactly).
    ``B = 1 / (1 - 2 p0)`` (``(e^eps + 1) / (e^eps - 1)`` before rounding) makes the report unbiased;
    ``Var(y | x) = B^2 - x^2``.
    """

    def __init__(self, *, epsilon: Number) -> None:
        super().__init__(epsilon=epsilon)
        self._p0 = flip_probability(self._epsilon, "Duchi mechanism")
        self._bound = float(1 / (1 - 2 * self._p0))
        self._outputs = _output_space(np.array([-self._bound, self._bound]))
        self._output_words = f"{{-B, +B}} with B = {self._bound!r}"

    @property
    def output_bound(self) -> float:
        """``B``: every report is ``+B`` or ``-B``."""
        return self._bound

    def _perturb(self, values: FloatArray, source: RandomSource) -> FloatArray:
        n = values.size
        fair = _exact_coins(2 * self._p0, n, source)
        fair_sign = (source.words(n) & np.uint64(1)).astype(np.bool_)
        biased_sign = _uniform_unit(n, source) < (1 + values) / 2
        positive = np.where(fair, fair_sign, biased_sign)
        return np.where(positive, self._bound, -self._bound)

    def variance(self, x: ArrayLike) -> FloatArray:
        return np.asarray(self._bound**2 - np.square(np.asarray(x, dtype=np.float64)), dtype=np.float64)


class PiecewiseMechanism(NumericRandomizer):
    """The Piecewise mechanism (Wang et al. 2019, Algorithm 2; seed 004, Algorithm 1), discretised.

    ``[-C, C]`` (``C = (e^(eps/2) + 1) / (e^(eps/2) - 1)``) is cut into ``M = 2^16`` cells; ``k`` of them
    (``k / M ≈ (C - 1) / 2C``) form a window placed around ``x`` (its centre at ``x / g``, by randomized
    rounding between two cell positions). The report is the centre of a cell drawn uniformly from the window
    with probability ``P`` and uniformly from the other ``M - k`` cells otherwise. Any cell's probability is
    ``P / k`` or ``(1 - P) / (M - k)`` under any input, so the loss is ``ln(P (M - k) / ((1 - P) k))``;
    ``P`` is the largest dyadic rational keeping it at most epsilon (about ``e^(eps/2) / (e^(eps/2) + 1)``,
    the continuous mechanism's). Because the cell centres are symmetric, ``E[y | window centre t] = g t``
    with the gain ``g = P - (1 - P) k / (M - k)``, so ``E[y | x] = x``. The variance is within 0.1% of the
    continuous ``x^2 / (e^(eps/2) - 1) + (e^(eps/2) + 3) / (3 (e^(eps/2) - 1)^2)``.

    >>> import numpy as np
    >>> pm = PiecewiseMechanism(epsilon=1)
    >>> y = pm.randomize(np.array([-1.0, 0.0, 0.5]), rng=np.random.default_rng(0))
    >>> y.shape, bool(np.all(np.abs(y) <= pm.output_bound))
    ((3,), True)
    """

    def __init__(self, *, epsilon: Number) -> None:
        super().__init__(epsilon=epsilon)
        half = math.exp(self.epsilon / 2)
        self._c = (half + 1) / (half - 1) if self.epsilon < 80 else 1.0 + 2 / half
        m = _CELLS
        k = max(1, min(m - 1, round(m * (self._c - 1) / (2 * self._c))))
        target = half / (half + 1)
        p = dyadic_at_most(target, precision_bits(target))
        while ln_upper(p * (m - k) / ((1 - p) * k)) > self._epsilon:
            p -= Fraction(1, p.denominator)
        if p <= Fraction(k, m):
            raise ArgumentError(
                f"epsilon = {self.epsilon:g} is too small for the discretised Piecewise mechanism."
            )
        self._m, self._k, self._p = m, k, p
        width = 2 * self._c / m
        self._centres = -self._c + width * (np.arange(m) + 0.5)
        self._gain = float(p) - float(1 - p) * k / (m - k)
        # Window starts range over 0 .. m - k; the window centre is then -C + width (start + k / 2).
        self._width = width
        # Every cell has probability P / k or (1 - P) / (M - k) > 0, so every centre can be sent.
        self._outputs = _output_space(self._centres)
        self._output_words = f"the {m} cell centres of [-C, C] with C = {self._c!r}"

    @property
    def output_bound(self) -> float:
        """``C``: every report lies in ``[-C, C]``."""
        return self._c

    def _window_start(self, values: FloatArray) -> FloatArray:
        """The real-valued window start whose centre is ``x / g`` (clipped to the range of starts)."""
        start = (values / self._gain + self._c) / self._width - self._k / 2
        return np.clip(start, 0, self._m - self._k)

    def _perturb(self, values: FloatArray, source: RandomSource) -> FloatArray:
        n = values.size
        position = self._window_start(values)
        low = np.floor(position)
        start = (low + (_uniform_unit(n, source) < position - low)).astype(np.int64)
        inside = _exact_coins(self._p, n, source)
        in_window = start + uniform_below(self._k, n, source)
        outside = uniform_below(self._m - self._k, n, source)
        outside = np.where(outside < start, outside, outside + self._k)
        cell = np.where(inside, in_window, outside)
        return np.asarray(self._centres[cell], dtype=np.float64)

    def variance(self, x: ArrayLike) -> FloatArray:
        xs = np.atleast_1d(np.asarray(x, dtype=np.float64))
        squares = np.concatenate([[0.0], np.cumsum(self._centres**2)])
        total = squares[-1]
        position = self._window_start(xs)
        low = np.floor(position)
        frac = position - low
        second = np.zeros_like(xs)
        for start, weight in ((low, 1 - frac), (np.minimum(low + 1, self._m - self._k), frac)):
            s = start.astype(np.int64)
            window = squares[s + self._k] - squares[s]
            inside = float(self._p) * window / self._k + float(1 - self._p) * (total - window) / (
                self._m - self._k
            )
            second += weight * inside
        return np.asarray(second - xs**2, dtype=np.float64)


class HybridMechanism(NumericRandomizer):
    """The Hybrid mechanism (Wang et al. 2019, Sec. III-C): for ``eps > 0.61`` the Piecewise mechanism with
    probability ``a = 1 - e^(-eps/2)`` and Duchi's otherwise, each at the full epsilon (a mixture of two
    eps-LDP randomizers is eps-LDP); Duchi's alone below 0.61. Worst-case variance below both."""

    def __init__(self, *, epsilon: Number) -> None:
        super().__init__(epsilon=epsilon)
        self._duchi = DuchiMechanism(epsilon=self._epsilon)
        self._pm = PiecewiseMechanism(epsilon=self._epsilon)
        self._a = -math.expm1(-self.epsilon / 2) if self.epsilon > 0.61 else 0.0
        if self._a > 0:
            self._outputs = _output_space(np.concatenate([self._duchi.outputs, self._pm.outputs]))
            self._output_words = f"{self._duchi._output_words}, and {self._pm._output_words}"
        else:  # Duchi's mechanism alone: a Piecewise cell is not an honest report
            self._outputs = self._duchi.outputs
            self._output_words = f"Duchi's alone at this epsilon, {self._duchi._output_words}"

    @property
    def output_bound(self) -> float:
        """``max(B, C)``, or Duchi's ``B`` when the Piecewise mechanism is never used."""
        pm = self._pm.output_bound if self._a > 0 else 0.0
        return max(self._duchi.output_bound, pm)

    @property
    def piecewise_share(self) -> float:
        """Probability that a client uses the Piecewise mechanism."""
        return self._a

    def _perturb(self, values: FloatArray, source: RandomSource) -> FloatArray:
        use_pm = _uniform_unit(values.size, source) < self._a
        out = self._duchi._perturb(values, source)
        if np.any(use_pm):
            out[use_pm] = self._pm._perturb(values[use_pm], source)
        return out

    def variance(self, x: ArrayLike) -> FloatArray:
        return np.asarray(
            self._a * self._pm.variance(x) + (1 - self._a) * self._duchi.variance(x), dtype=np.float64
        )
