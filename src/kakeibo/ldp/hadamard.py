"""Hadamard response (Acharya, Sun and Zhang 2019, "Hadamard Response: Estimating Distributions Privately,
Efficiently, and with Little Communication", AISTATS), as a pure-LDP frequency oracle.

Let ``K`` be the least power of two above ``d`` and ``H`` the ``K x K`` Sylvester-Hadamard matrix,
``H[r, j] = (-1)^popcount(r & j)``. Value ``v`` owns row ``r = v + 1`` (row 0, all ones, is unused) and the
set ``C_v = {j : H[r, j] = +1}`` of ``K/2`` columns. The client sends one column ``j``: uniform in ``C_v``
with probability ``p = e^eps / (e^eps + 1)``, uniform outside it otherwise. Each column has probability
``2p/K`` or ``2(1 - p)/K`` under any value, so the report is ``ln(p / (1 - p)) = eps``-LDP.

The support of ``j`` is ``{v : H[v + 1, j] = +1}``: ``p* = p``, and because two distinct rows agree on
exactly half of each other's columns, ``q* = 1/2`` exactly. Communication: ``log2 K`` bits. The server
counts reports per column and recovers every value's support count with one fast Walsh-Hadamard
transform: ``sum_j count_j H[r, j] = 2 support(r) - n``, ``O(K log K)`` after the ``O(n)`` count.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from numpy.typing import NDArray

from ..errors import ArgumentError
from ..noise.source import RandomSource
from ..privacy import Number
from ._coins import bernoulli_words, flip_probability, unpack_bits
from .direct import value_dtype
from .framework import FloatArray, FrequencyOracle, IntArray, check_payload_range
from .reports import Param, Reports

#: Largest Sylvester factor applied as one matrix product in :func:`walsh_hadamard`.
_FACTOR = 64

__all__ = ["HadamardResponse", "walsh_hadamard"]


class HadamardResponse(FrequencyOracle):
    """Hadamard response over ``0 .. domain_size - 1`` with ``K = 2^ceil(log2(d + 1))`` columns.

    * Neighbour relation: local, any two values of one client. Privacy loss ``PureDP(epsilon)`` per report;
      the side coin's probability ``p`` is ``e^eps / (e^eps + 1)`` rounded down to a dyadic rational and
      ``ln(p / (1 - p)) <= epsilon`` is checked exactly.
    * ``p* = p``, ``q* = 1/2``.

    >>> import numpy as np
    >>> hr = HadamardResponse(epsilon=2, domain_size=5)
    >>> hr.columns, hr.q_star
    (8, 0.5)
    """

    protocol = "HR"

    def __init__(self, *, epsilon: Number, domain_size: int) -> None:
        super().__init__(epsilon=epsilon, domain_size=domain_size)
        self._k = 1 << self._d.bit_length()
        self._p = 1 - flip_probability(self._epsilon, "Hadamard response")

    @property
    def columns(self) -> int:
        """``K``, the number of possible reports."""
        return self._k

    @property
    def p_star(self) -> float:
        return float(self._p)

    @property
    def q_star(self) -> float:
        return 0.5

    @property
    def report_bits(self) -> int:
        return self._k.bit_length() - 1

    def _extra_params(self) -> dict[str, Param]:
        return {"p": str(self._p)}

    def _perturb(self, values: IntArray, source: RandomSource) -> dict[str, NDArray[Any]]:
        n = values.size
        rows = values + 1
        inside = unpack_bits(bernoulli_words(self._p, -(-n // 64), source), n).astype(np.bool_)
        column = (source.words(n) & np.uint64(self._k - 1)).astype(np.int64)
        # Uniform column, then moved to the wanted side by flipping the row's lowest set bit: a bijection
        # between C_v and its complement, so the result is uniform on the wanted side.
        plus = parity(rows & column) == 0
        column ^= np.where(plus != inside, rows & -rows, 0)
        return {"column": column.astype(value_dtype(self._k))}

    def _check_payload(self, reports: Reports) -> None:
        check_payload_range(reports, "column", self._k)

    def _support_counts(self, reports: Reports) -> FloatArray:
        counts = np.bincount(reports["column"].astype(np.intp), minlength=self._k).astype(np.float64)
        signed = walsh_hadamard(counts)
        return np.asarray((reports.n + signed[1 : self._d + 1]) / 2, dtype=np.float64)

    def _supports(self, reports: Reports, values: IntArray) -> NDArray[np.bool_]:
        return np.asarray(parity((values + 1) & reports["column"].astype(np.int64)) == 0)


def parity(x: IntArray) -> IntArray:
    """``popcount(x) mod 2`` for non-negative int64 values below 2**62."""
    x = x.copy()
    for shift in (32, 16, 8, 4, 2, 1):
        x ^= x >> shift
    return x & 1


def walsh_hadamard(array: FloatArray) -> FloatArray:
    """``array @ H_K`` along the last axis, for the Sylvester-Hadamard matrix ``H_K[r, c] =
    (-1)^popcount(r & c)`` of size ``K`` (the last axis' length, a power of two; ``H_K`` is symmetric).

    ``H_K`` factors over groups of binary digits of ``r`` and ``c`` as a Kronecker product of Sylvester
    matrices of at most 64 rows, so the transform is one matrix product per factor, lowest digits first:
    ``O(K log K)``-like work in large BLAS calls, for one vector or a whole sketch of rows at once.
    """
    values = np.asarray(array, dtype=np.float64)
    width = values.shape[-1] if values.ndim else 0
    if width < 1 or width & (width - 1):
        raise ArgumentError("the Walsh-Hadamard transform needs a power-of-two length.")
    size = min(width, _FACTOR)
    out = values.reshape(-1, size) @ _sylvester(size)
    done = size
    while done < width:
        size = min(width // done, _FACTOR)
        out = np.matmul(_sylvester(size), out.reshape(-1, size, done))
        done *= size
    return np.asarray(out.reshape(values.shape), dtype=np.float64)


def _sylvester(size: int) -> FloatArray:
    """The ``size x size`` Sylvester-Hadamard matrix."""
    index = np.arange(size, dtype=np.int64)
    return np.asarray(1.0 - 2.0 * parity(index[:, None] & index[None, :]), dtype=np.float64)
