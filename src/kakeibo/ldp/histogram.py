"""Summation with histogram encoding (SHE; Wang et al. 2017, Sec. 4.2.1; seed 003).

The client adds independent noise to each coordinate of its one-hot vector and sends the whole noisy
vector; the server sums the vectors. Two values' one-hot vectors differ by 1 in two coordinates (L1
sensitivity 2), so noise of scale ``2 / eps`` per coordinate gives eps-LDP. kakeibo uses the exact discrete
Laplace (Canonne, Kamath and Steinke 2020) on the integer one-hot vector: ``P(Z = z) ∝ exp(-|z| eps / 2)``,
so ``P(y | v) / P(y | v') <= exp(eps/2 (|y_v - 1| - |y_v| + |y_v'| - |y_v' - 1|)) <= e^eps``, with no real
numbers involved. In the framework's terms the "support count" is the plain sum, ``p* - q* = 1``, ``q* = 0``,
and every report contributes the noise variance ``2 e^-a / (1 - e^-a)^2`` (``a = eps/2``) to each count.
SHE is dominated by THE and by OUE (Wang et al., Table 1); it is here for completeness and comparison.

The server accepts exactly what a client can send: signed integers of at most 32 bits whose magnitude is
below ``2^31 - 1`` (the client refuses to send a coordinate that large, which the epsilon floor makes an
``e^-16000`` event). Column sums are then exact: a block of at most ``2^32`` reports sums in int64 without
overflow, since ``2^32 (2^31 - 2) < 2^63``, and blocks are added as Python integers (:func:`column_sums`).
"""

from __future__ import annotations

import math
from fractions import Fraction
from typing import Any

import numpy as np
from numpy.typing import NDArray

from ..errors import ArgumentError
from ..noise import discrete_laplace
from ..noise.source import RandomSource
from ..privacy import Number
from .framework import FloatArray, FrequencyOracle, IntArray
from .reports import Reports

__all__ = ["SHE", "column_sums"]

#: Clients per chunk, so the noise for a chunk stays near 2**24 coordinates.
_CHUNK_COORDINATES = 1 << 24
#: Every coordinate a client sends has magnitude below this (client and server check the same bound).
_LIMIT = 2**31 - 1
#: Rows summed in one int64 block: ``2^32 * (2^31 - 2) < 2^63``, so a block sum never overflows.
_SUM_ROWS = 1 << 32


def column_sums(noisy: NDArray[np.signedinteger[Any]]) -> FloatArray:
    """Exact column sums of a 2-d array of integers of magnitude below ``2^31``, as floats.

    Each block of at most ``2^32`` rows is summed in int64 (``|sum| < 2^32 * 2^31 = 2^63``: no overflow);
    the block sums are added as Python integers, so any number of rows is exact before the final rounding.
    """
    total = np.zeros(noisy.shape[1], dtype=object)
    for start in range(0, noisy.shape[0], _SUM_ROWS):
        total += noisy[start : start + _SUM_ROWS].sum(axis=0, dtype=np.int64).astype(object)
    return np.asarray(total.astype(np.float64), dtype=np.float64)


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
            raise ArgumentError(f"SHE needs epsilon >= 2**-16, got {self.epsilon:g}.")

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
            if np.abs(noise).max(initial=0) >= _LIMIT:
                raise AssertionError("an SHE coordinate left int32, which the epsilon floor rules out; a bug")
            noisy[start : start + rows] = noise
        return {"noisy": noisy}

    def _check_payload(self, reports: Reports) -> None:
        """Refuse anything but what a client sends: a signed integer array (at most 32 bits) of shape
        ``(n, d)`` whose entries have magnitude below ``2^31 - 1``."""
        arr = reports.arrays.get("noisy")
        if (
            arr is None
            or arr.dtype.kind != "i"
            or arr.dtype.itemsize > 4
            or arr.ndim != 2
            or arr.shape[1] != self._d
            or (arr.size and (int(arr.min()) <= -_LIMIT or int(arr.max()) >= _LIMIT))
        ):
            raise ArgumentError(
                f"SHE reports need an int32 array 'noisy' of shape (n, {self._d}) with entries of magnitude "
                f"below 2**31 - 1."
            )

    def _support_counts(self, reports: Reports) -> FloatArray:
        return column_sums(reports["noisy"])

    def _candidate_support_counts(self, reports: Reports, candidates: IntArray) -> FloatArray:
        return column_sums(reports["noisy"][:, candidates])

    def _supports(self, reports: Reports, values: IntArray) -> NDArray[np.bool_]:
        """SHE has no support set; a noisy coordinate above 1/2 is taken as support (THE's view of it)."""
        return np.asarray(reports["noisy"][np.arange(values.size), values] >= 1)
