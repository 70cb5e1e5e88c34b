"""Privacy-loss distributions: pessimistic discretisation, composition by FFT, and their (epsilon, delta).

A mechanism run on neighbouring datasets gives two output distributions ``P`` and ``Q``; its *privacy
loss* is ``L = ln(P(o) / Q(o))`` for ``o ~ P`` (``+inf`` where ``Q(o) = 0``), and its tight
(epsilon, delta) curve is the hockey-stick divergence (Meiser and Mohammadi, CCS 2018; Koskela, Jalko and
Honkela, AISTATS 2020; Google's ``dp_accounting`` design notes, "Privacy loss distributions")::

    delta(eps) = E_P[(1 - e^(eps - L))_+]  =  P(L = inf) + sum_{l > eps} P(L = l) (1 - e^(eps - l)).

Independent mechanisms compose by adding their losses, so the composition's distribution is the
convolution of theirs; kakeibo convolves with the FFT and raises a distribution to the ``k``-th power by
repeated squaring.

**Pessimism.** Every approximation here replaces a pair of distributions by one that dominates it
(whose delta is at least as large at every epsilon), and composing dominating pairs dominates the
composition (Zhu, Dong and Wang, AISTATS 2022, Thm. 10). So the table's delta bounds the true one from
above:

* discretisation: each cell's mass is spread to the cell's two ends by "connecting the dots" (see
  :func:`from_cdf`; ``h``: the grid's ``interval``);
* truncation: mass above the table's top goes to ``+inf``; mass below its bottom sits at the bottom. Each
  tail cut holds at most :data:`TAIL` of mass.

**Floating point.** Masses are floats. Each distribution carries ``error``, a bound on the L1 norm of the
float error in its table (the initial CDF differences: a few ulps each; an FFT convolution: the classical
bound ``c u log2(n) ||a||_2 ||b||_2`` on the 2-norm of the error, Higham, *Accuracy and Stability of
Numerical Algorithms*, 2nd ed., Section 24.1, times ``sqrt(n)`` for the L1 norm, with ``c = 16``). Every
delta adds ``error``, since a delta weighs each mass by at most 1.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray
from scipy import fft as sp_fft

from ..errors import ArgumentError

__all__ = ["TAIL", "LossDistribution", "from_atoms", "from_cdf"]

#: The most mass one tail cut moves (to ``+inf`` above, to the bottom below).
TAIL = 1e-15
_U = 2.0**-53  # unit roundoff
_FFT_CONSTANT = 16.0

Cdf = Callable[[NDArray[np.float64]], NDArray[np.float64]]
#: A loss's distribution as ``(cdf, sf)``.
Pair = tuple[Cdf, Cdf]
#: Below this, ``e^(-loss)`` overflows a float.
_LOWEST_LOSS = -700.0


@dataclass(frozen=True)
class LossDistribution:
    """A pessimistic discretised privacy-loss distribution: ``pmf[i]`` is the mass at loss
    ``(offset + i) * interval``, ``infinity`` the mass at ``+inf``; ``error`` bounds the L1 norm of the float
    error in ``pmf`` and ``dipole`` the part of it that only moves mass between neighbouring grid points
    (see the module docstring)."""

    interval: float
    offset: int
    pmf: NDArray[np.float64]
    infinity: float
    error: float
    dipole: float = 0.0

    def losses(self) -> NDArray[np.float64]:
        """The loss of each entry of ``pmf``."""
        return (self.offset + np.arange(self.pmf.size, dtype=np.float64)) * self.interval

    def compose(self, other: LossDistribution) -> LossDistribution:
        """The distribution of the sum of the two losses (independent mechanisms run one after the other).

        >>> rr = from_atoms({1.0: 0.7, -1.0: 0.3}, 0.0, interval=0.5)
        >>> two = rr.compose(rr)
        >>> [round(float(p), 12) for p in two.pmf[::4]], two.offset
        ([0.09, 0.42, 0.49], -4)
        """
        if self.interval != other.interval:
            raise ArgumentError("privacy-loss distributions compose only on the same grid interval.")
        n = self.pmf.size + other.pmf.size - 1
        size = sp_fft.next_fast_len(n, real=True)
        product = sp_fft.irfft(sp_fft.rfft(self.pmf, size) * sp_fft.rfft(other.pmf, size), size)[:n]
        np.maximum(product, 0.0, out=product)
        fft_error = (
            _FFT_CONSTANT * _U * math.log2(max(size, 2)) * math.sqrt(n)
            * float(np.linalg.norm(self.pmf)) * float(np.linalg.norm(other.pmf))
        )  # fmt: skip
        mass_a, mass_b = float(self.pmf.sum()), float(other.pmf.sum())
        # a dipole convolved with a distribution is a sum of dipoles of the same spacing; the product of
        # two errors is counted as a plain error
        dipole = self.dipole * mass_b + other.dipole * mass_a
        error = (
            self.error * mass_b + other.error * mass_a
            + (self.error + self.dipole) * (other.error + other.dipole) + fft_error
        )  # fmt: skip
        infinity = self.infinity + other.infinity - self.infinity * other.infinity
        return _truncated(
            LossDistribution(self.interval, self.offset + other.offset, product, infinity, error, dipole)
        )

    def power(self, k: int) -> LossDistribution:
        """The ``k``-fold composition with itself, by repeated squaring (``k >= 1``)."""
        if k < 1:
            raise ArgumentError(
                f"a privacy-loss distribution is composed a positive number of times, not {k}."
            )
        result: LossDistribution | None = None
        base: LossDistribution = self
        while True:
            if k & 1:
                result = base if result is None else result.compose(base)
            k >>= 1
            if not k:
                assert result is not None
                return result
            base = base.compose(base)

    def delta(self, epsilon: float) -> float:
        """``delta(epsilon)``, an upper bound on the true one (see the module docstring).

        >>> from_atoms({1.0: 0.7, -1.0: 0.3}, 0.0, interval=0.5).delta(0.0) > 0.7 * (1 - math.exp(-1))
        True
        """
        losses = self.losses()
        above = losses > epsilon
        gap = epsilon - losses[above]
        # a dipole of mass m between neighbours moves delta by at most m (1 - e^(-h)) (the integrand's
        # increment over one cell); any other error by at most its mass
        slack = self.error + self.dipole * -math.expm1(-self.interval)
        value = self.infinity + float(np.sum(self.pmf[above] * -np.expm1(gap))) + slack
        return min(1.0, value * (1 + 8 * _U * max(1.0, math.log2(max(self.pmf.size, 2)))))

    def epsilon(self, delta: float) -> float:
        """The least ``epsilon >= 0`` with :meth:`delta` at most ``delta`` (``inf`` if there is none),
        found by bisection to the float and rounded up."""
        if self.delta(0.0) <= delta:
            return 0.0
        top = float(self.losses()[-1]) if self.pmf.size else 0.0
        if top <= 0 or self.delta(top) > delta:
            return math.inf
        low, high = 0.0, top
        while True:
            mid = (low + high) / 2
            if mid in (low, high):
                return high
            if self.delta(mid) <= delta:
                high = mid
            else:
                low = mid


def from_cdf(
    p_loss: Pair, q_loss: Pair, low: float, high: float, infinity: float, interval: float
) -> LossDistribution:
    """The connect-the-dots discretisation (Doroshenko, Ghazi, Kamath, Kumar and Manurangsi, PoPETs 2022)
    of a loss whose distribution under ``P`` is ``p_loss = (cdf, sf)`` (``cdf(l) = P(L <= l)``, ``sf(l) =
    P(L > l)``, vectorised, the finite part only) and under ``Q`` is ``q_loss``, whose ``P``-mass outside
    ``[low, high]`` is at most :data:`TAIL` on each side, plus ``infinity`` at ``+inf``.

    The ``P``-mass ``m_P`` of each cell ``(l_j, l_(j+1)]`` is split between its two ends so that both
    ``m_P`` and its ``Q``-mass ``m_Q = E_P[e^(-L); cell]`` are kept: the end ``l_(j+1)`` gets
    ``(m_P - e^(l_j) m_Q) / (1 - e^(-h))``. In ``y = e^(-l)`` this spreads each cell's mass to the cell's
    ends keeping its mean, and ``(1 - e^eps y)_+`` is convex in ``y``, so every ``delta(eps)`` (every eps,
    negative too, hence also after composition: Zhu, Dong and Wang, AISTATS 2022, Thm. 10) can only grow;
    without the shift of rounding every loss up. Mass at or below the bottom sits at the bottom; mass above
    the top goes to ``+inf``. Each cell's mass is a difference of whichever of ``cdf`` and ``sf`` is smaller
    there (no cancellation).
    """
    first, last = math.floor(low / interval), math.ceil(high / interval)
    edges = (first + np.arange(last - first + 1, dtype=np.float64)) * interval
    if edges[0] < _LOWEST_LOSS:
        raise ArgumentError(
            "this mechanism's privacy loss reaches below -700 nats; its PLD is not tabulated."
        )
    p_cells, p_below, p_above, p_error = _cells(p_loss, edges)
    q_cells, _, _, q_error = _cells(q_loss, edges)
    q_error_scaled = float(np.sum(q_error * np.exp(edges[:-1])))
    scale = -math.expm1(-interval)
    upper = (p_cells - np.exp(edges[:-1]) * q_cells) / scale
    np.clip(upper, 0.0, p_cells, out=upper)
    masses = np.zeros_like(edges)
    masses[1:] += upper
    masses[:-1] += p_cells - upper
    masses[0] += p_below  # everything at or below the bottom sits at the bottom
    # an error in a cell's split moves mass between the cell's two ends: a dipole
    dipole = (float(np.sum(p_error)) + q_error_scaled) / scale + 4 * _U * float(np.sum(upper))
    error = float(np.sum(p_error)) + 4 * _U * float(np.sum(masses))
    return LossDistribution(interval, first, masses, infinity + p_above, error, dipole)


def _cells(
    loss: Pair, edges: NDArray[np.float64]
) -> tuple[NDArray[np.float64], float, float, NDArray[np.float64]]:
    """The mass of each cell between ``edges``, the mass at or below the first edge and above the last one,
    and a bound on the float error of each cell's mass."""
    cdf, sf = loss
    below, above = cdf(edges), sf(edges)
    use_cdf = below[1:] <= 0.5
    cells = np.where(use_cdf, below[1:] - below[:-1], above[:-1] - above[1:])
    np.maximum(cells, 0.0, out=cells)
    smaller = np.where(use_cdf, below[1:], above[:-1])
    return cells, float(below[0]), float(above[-1]), 4 * _U * smaller


def from_atoms(atoms: dict[float, float], infinity: float, *, interval: float) -> LossDistribution:
    """A loss taking finitely many values (``{loss: mass}``) and ``+inf`` with mass ``infinity``; each atom
    between two grid points is split between them as :func:`from_cdf` splits a cell.

    >>> d = from_atoms({0.25: 0.5, -0.25: 0.5}, 0.0, interval=0.1)
    >>> d.offset, [round(float(p), 4) for p in d.pmf]
    (-3, [0.2438, 0.2562, 0.0, 0.0, 0.0, 0.2438, 0.2562])
    """
    first = min(math.floor(value / interval) for value in atoms)
    last = max(math.ceil(value / interval) for value in atoms)
    pmf = np.zeros(last - first + 1)
    scale = -math.expm1(-interval)
    for value, mass in atoms.items():
        low = math.floor(value / interval)
        upper = min(mass, max(0.0, mass * -math.expm1(low * interval - value) / scale))
        pmf[low - first] += mass - upper
        if upper:
            pmf[low + 1 - first] += upper
    return LossDistribution(interval, first, pmf, infinity, 4 * _U * len(atoms), 4 * _U * len(atoms) / scale)


def quantile(function: Cdf, target: float, low: float, high: float) -> float:
    """A point ``l`` in ``[low, high]`` with ``function(l)`` within a bisection step of ``target``, for a
    monotone ``function`` that crosses ``target`` in the interval (used to place the tail cuts)."""
    rising = bool(function(np.array([high]))[0] >= function(np.array([low]))[0])
    for _ in range(200):
        mid = (low + high) / 2
        if mid in (low, high):
            break
        above = bool(function(np.array([mid]))[0] >= target)
        if above == rising:
            high = mid
        else:
            low = mid
    return low if rising else high


def _truncated(table: LossDistribution) -> LossDistribution:
    """Cut the tails that hold at most :data:`TAIL` each: the top's mass to ``+inf``, the bottom's to the
    lowest entry kept (both dominate)."""
    pmf = table.pmf
    from_top = np.cumsum(pmf[::-1])
    cut_top = int(np.searchsorted(from_top, TAIL, side="right"))  # entries whose upper tail is <= TAIL
    from_bottom = np.cumsum(pmf)
    cut_bottom = int(np.searchsorted(from_bottom, TAIL, side="right"))
    if cut_top + cut_bottom >= pmf.size:
        return table
    kept = pmf[cut_bottom : pmf.size - cut_top].copy()
    if cut_bottom:
        kept[0] += from_bottom[cut_bottom - 1]
    moved_up = float(from_top[cut_top - 1]) if cut_top else 0.0
    return LossDistribution(
        table.interval, table.offset + cut_bottom, kept, table.infinity + moved_up, table.error, table.dipole
    )
