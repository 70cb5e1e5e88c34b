"""Summation with histogram encoding (SHE; Wang et al. 2017, Sec. 4.2.1; seed 003).

The client adds independent noise to each coordinate of its one-hot vector and sends the whole noisy
vector; the server sums the vectors. Two values' one-hot vectors differ by 1 in two coordinates (L1
sensitivity 2), so noise of scale ``2 / eps`` per coordinate gives eps-LDP. kakeibo uses the exact discrete
Laplace (Canonne, Kamath and Steinke 2020) on the integer one-hot vector: ``P(Z = z) ∝ exp(-|z| eps / 2)``,
so ``P(y | v) / P(y | v') <= exp(eps/2 (|y_v - 1| - |y_v| + |y_v'| - |y_v' - 1|)) <= e^eps``, with no real
numbers involved. In the framework's terms the "support count" is the plain sum, ``p* - q* = 1``, ``q* = 0``,
and every report contributes the noise variance ``2 e^-a / (1 - e^-a)^2`` (``a = eps/2``) to each count.
SHE is dominated by THE and by OUE (Wang et al., Table 1); it is here for completeness and comparison.
"""

from __future__ import annotations

import math
from fractions import Fraction
from typing import Any

import numpy as np
from numpy.typing import NDArray

from ..noise import discrete_laplace
from ..noise._source import RandomSource
from ..privacy import Number
from .framework import FloatArray, FrequencyOracle, IntArray
from .reports import Reports

__all__ = ["SHE"]

#: Clients per chunk, so the noise for a chunk stays near 2**24 coordinates.
_CHUNK_COORDINATES = 1 << 24


class SHE(FrequencyOracle):
    """Summation with histogram encoding: one noisy integer per value and client (``d`` int32 per report).

    * Neighbour relation: local, any two values of one client; L1 sensitivity 2 of the one-hot vector.
    * Privacy loss ``PureDP(epsilon)``: discrete Laplace with scale ``2 / epsilon`` per coordinate.

    >>> import numpy as np
    >>> she = SHE(epsilon=1, domain_size=3)
    >>> she.randomize(np.array([0, 2]), rng=np.random.default_rng(0))["noisy"].shape
    (2, 3)
    """

    protocol = "SHE"

    def __init__(self, *, epsilon: Number, domain_size: int) -> None:
        super().__init__(epsilon=epsilon, domain_size=domain_size)
        if self._epsilon < Fraction(1, 2**16):
            # Keeps the noise scale below 2**17, so an int32 coordinate overflows with probability < e^-16000.
            raise ValueError(f"SHE needs epsilon >= 2**-16, got {self.epsilon:g}.")

    @property
    def p_star(self) -> float:
        return 1.0

    @property
    def q_star(self) -> float:
        return 0.0

    @property
    def report_bits(self) -> int:
        return 32 * self._d

    @property
    def noise_variance(self) -> float:
        """Variance of the discrete Laplace with scale ``2 / epsilon``: ``2 e^-a / (1 - e^-a)^2``,
        ``a = eps/2``."""
        a = self.epsilon / 2
        return 2 * math.exp(-a) / (-math.expm1(-a)) ** 2

    def _indicator_variances(self) -> tuple[float, float]:
        return self.noise_variance, self.noise_variance

    def _perturb(self, values: IntArray, source: RandomSource) -> dict[str, NDArray[Any]]:
        n, d = values.size, self._d
        noisy = np.empty((n, d), dtype=np.int32)
        step = max(1, _CHUNK_COORDINATES // d)
        scale = Fraction(2) / self._epsilon
        for start in range(0, n, step):
            rows = min(step, n - start)
            noise = np.asarray(discrete_laplace(scale, size=rows * d, rng=source)).reshape(rows, d)
            noise[np.arange(rows), values[start : start + rows]] += 1
            if np.abs(noise).max(initial=0) >= 2**31 - 1:
                raise AssertionError("an SHE coordinate left int32, which the epsilon floor rules out; a bug")
            noisy[start : start + rows] = noise
        return {"noisy": noisy}

    def _check_payload(self, reports: Reports) -> None:
        arr = reports.arrays.get("noisy")
        if arr is None or arr.dtype.kind != "i" or arr.ndim != 2 or arr.shape[1] != self._d:
            raise ValueError(f"SHE reports need an integer array 'noisy' of shape (n, {self._d}).")

    def _support_counts(self, reports: Reports) -> FloatArray:
        return np.asarray(reports["noisy"].sum(axis=0, dtype=np.int64), dtype=np.float64)

    def _candidate_support_counts(self, reports: Reports, candidates: IntArray) -> FloatArray:
        return np.asarray(reports["noisy"][:, candidates].sum(axis=0, dtype=np.int64), dtype=np.float64)

    def _supports(self, reports: Reports, values: IntArray) -> NDArray[np.bool_]:
        """SHE has no support set; a noisy coordinate above 1/2 is taken as support (THE's view of it)."""
        return np.asarray(reports["noisy"][np.arange(values.size), values] >= 1)
