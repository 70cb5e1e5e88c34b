"""Local hashing: binary (BLH) and optimal (OLH) local hashing (Wang et al. 2017, Sec. 4.4; seed 003).

The client draws a hash function ``h`` from a universal family into ``g`` buckets, applies ``g``-ary
randomized response to ``h(v)`` and sends ``(h, y)``. The report supports every value ``v'`` with
``h(v') = y``, so ``p* = e^eps / (e^eps + g - 1)`` and, if ``P(h(v) = h(v')) = 1/g`` for ``v != v'``,
``q* = 1/g``. BLH takes ``g = 2``; OLH takes ``g ≈ e^eps + 1``, which minimises the variance (Eq. (13):
``n 4 e^eps / (e^eps - 1)^2`` at ``g = e^eps + 1``, the same as OUE) at ``O(log d)`` bits per report.

The family (kakeibo's choice, so that ``q* = 1/g`` holds *exactly* rather than for an idealised random
hash): ``g`` is prime, a value ``v`` is written in base ``g`` as the digit vector ``(v_1, ..., v_m)``,
``g^m >= d``, and ``h_a(v) = a . v mod g`` for ``a`` uniform in ``GF(g)^m``. For ``v != v'`` the difference
of digit vectors is non-zero, so ``a . (v - v') = 0`` for exactly a ``1/g`` share of the ``a``. The prime is
the one next to ``e^eps + 1`` (below or above) with the smaller variance ``q*(1 - q*) / (p* - q*)^2``.

Privacy: ``a`` is independent of ``v``; given ``a``, ``y`` is ``g``-ary randomized response of ``h_a(v)``
(exact, :class:`kakeibo.mechanisms.RandomizedResponse`), which is eps-LDP for any two buckets, hence for
any two values. Aggregation never loops over clients: the server tabulates the reports by ``(a, y)``
(``g^(m+1)`` cells) and evaluates every hash once per value, or, for large tables, scans the reports in
vectorised chunks.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
from numpy.typing import NDArray

from ..errors import ArgumentError
from ..mechanisms import RandomizedResponse
from ..noise.exact import uniform_below
from ..noise.source import RandomSource
from ..privacy import Number
from .direct import value_dtype
from .framework import FloatArray, FrequencyOracle, IntArray, check_epsilon, check_payload_range
from .reports import Param, Reports

__all__ = ["BLH", "OLH", "LocalHashing"]

#: Largest number of buckets: larger g means e^eps > 2^20, where GRR is the better oracle anyway.
_MAX_BUCKETS = 1 << 20
#: Cell budget for the table of the tabulated aggregation (``g^m`` hash functions times ``g`` buckets).
_TABLE_CELLS = 1 << 26
#: Report-by-value cells evaluated per chunk in the scanning aggregation.
_SCAN_CELLS = 1 << 24


class LocalHashing(FrequencyOracle):
    """Local hashing with ``g`` buckets (``g`` prime) over ``0 .. domain_size - 1``.

    * Neighbour relation: local, any two values of one client. Privacy loss ``PureDP(epsilon)`` per report.
    * ``p* = e^eps' / (e^eps' + g - 1)`` (``eps' <= epsilon``, the exact sampler's rational) and ``q* = 1/g``.
    """

    def __init__(self, *, epsilon: Number, domain_size: int, buckets: int) -> None:
        super().__init__(epsilon=epsilon, domain_size=domain_size)
        if not _is_prime(buckets) or buckets > _MAX_BUCKETS:
            raise ArgumentError(f"local hashing needs a prime number of buckets up to 2**20, got {buckets}.")
        self._g = buckets
        self._m = _digits_needed(self._d, buckets)
        self._rr = RandomizedResponse(epsilon=self._epsilon, categories=buckets)

    @property
    def buckets(self) -> int:
        """``g``, the number of hash buckets (a prime)."""
        return self._g

    @property
    def p_star(self) -> float:
        return self._rr.p

    @property
    def q_star(self) -> float:
        return 1 / self._g

    @property
    def report_bits(self) -> int:
        return (self._m + 1) * max(1, (self._g - 1).bit_length())

    def _extra_params(self) -> dict[str, Param]:
        return {"buckets": self._g}

    def hash_values(self, keys: NDArray[np.int64], values: IntArray) -> IntArray:
        """``h_a(v) = a . digits(v) mod g`` for each row ``a`` of ``keys`` and the matching ``values``."""
        return np.asarray((keys * self._digits(values)).sum(axis=1) % self._g, dtype=np.int64)

    def _digits(self, values: IntArray) -> NDArray[np.int64]:
        """Base-``g`` digits of ``values``, least significant first: shape ``(len(values), m)``."""
        powers = np.power(self._g, np.arange(self._m, dtype=np.int64), dtype=np.int64)
        return np.asarray((values[:, None] // powers) % self._g, dtype=np.int64)

    def _perturb(self, values: IntArray, source: RandomSource) -> dict[str, NDArray[Any]]:
        n = values.size
        keys = uniform_below(self._g, n * self._m, source).reshape(n, self._m)
        buckets = self.hash_values(keys, values)
        reported = np.asarray(self._rr.release(buckets, rng=source), dtype=np.int64)
        dtype = value_dtype(self._g)
        return {"hash": keys.astype(dtype), "value": reported.astype(dtype)}

    def _check_payload(self, reports: Reports) -> None:
        check_payload_range(reports, "hash", self._g, columns=self._m)
        check_payload_range(reports, "value", self._g)

    def _support_counts(self, reports: Reports) -> FloatArray:
        """Tabulated when the table of ``g^m`` functions by ``g`` buckets fits the cell budget and there are
        no more functions than reports (evaluating each function once on every value then costs less than
        evaluating every report on every value); scanned otherwise. Both are exact."""
        functions = self._g**self._m
        if functions * self._g <= _TABLE_CELLS and functions <= reports.n:
            return self._tabulated_counts(reports, functions)
        return self._scanned_counts(reports, np.arange(self._d, dtype=np.int64))

    def _candidate_support_counts(self, reports: Reports, candidates: IntArray) -> FloatArray:
        return self._scanned_counts(reports, candidates)

    def _tabulated_counts(self, reports: Reports, functions: int) -> FloatArray:
        """Count reports per (hash function, bucket), then evaluate each hash function once per value."""
        powers = np.power(self._g, np.arange(self._m, dtype=np.int64), dtype=np.int64)
        index = reports["hash"].astype(np.int64) @ powers
        table = np.bincount(
            index * self._g + reports["value"].astype(np.int64), minlength=functions * self._g
        )
        table = table.reshape(functions, self._g)
        value_digits = self._digits(np.arange(self._d, dtype=np.int64))
        totals = np.zeros(self._d, dtype=np.int64)
        step = max(1, _SCAN_CELLS // self._d)
        for start in range(0, functions, step):
            keys = self._digits(np.arange(start, min(functions, start + step), dtype=np.int64))
            hashed = (keys @ value_digits.T) % self._g
            totals += np.take_along_axis(table[start : start + keys.shape[0]], hashed, axis=1).sum(axis=0)
        return totals.astype(np.float64)

    def _scanned_counts(self, reports: Reports, values: IntArray) -> FloatArray:
        """Evaluate every report's hash on each of ``values``, chunk by chunk (for large ``g^m``)."""
        value_digits = self._digits(values).T
        totals = np.zeros(values.size, dtype=np.int64)
        step = max(1, _SCAN_CELLS // max(values.size, 1))
        keys, reported = reports["hash"], reports["value"]
        for start in range(0, reports.n, step):
            hashed = (keys[start : start + step].astype(np.int64) @ value_digits) % self._g
            totals += (hashed == reported[start : start + step, None]).sum(axis=0)
        return totals.astype(np.float64)

    def _supports(self, reports: Reports, values: IntArray) -> NDArray[np.bool_]:
        hashed = self.hash_values(reports["hash"].astype(np.int64), values)
        return np.asarray(hashed == reports["value"])


class BLH(LocalHashing):
    """Binary local hashing: ``g = 2`` (Bassily and Smith 2015 as framed by Wang et al. 2017)."""

    protocol = "BLH"

    def __init__(self, *, epsilon: Number, domain_size: int) -> None:
        super().__init__(epsilon=epsilon, domain_size=domain_size, buckets=2)


class OLH(LocalHashing):
    """Optimal local hashing: ``g`` the prime next to ``e^eps + 1`` with the smaller variance.

    >>> OLH(epsilon=1, domain_size=1024).buckets, OLH(epsilon=4, domain_size=1024).buckets
    (3, 53)
    """

    protocol = "OLH"

    def __init__(self, *, epsilon: Number, domain_size: int) -> None:
        super().__init__(
            epsilon=epsilon, domain_size=domain_size, buckets=_optimal_buckets(float(check_epsilon(epsilon)))
        )


def _optimal_buckets(epsilon: float) -> int:
    """The prime ``g`` on either side of ``e^eps + 1`` minimising ``q (1 - q) / (p - q)^2``."""
    target = min(math.exp(min(epsilon, 20.0)) + 1, _MAX_BUCKETS - 3)
    below = next(g for g in range(math.floor(target), 1, -1) if _is_prime(g))
    above = next(g for g in range(math.ceil(target), _MAX_BUCKETS) if _is_prime(g))

    def variance(g: int) -> float:
        p, q = math.exp(epsilon) / (math.exp(epsilon) + g - 1), 1 / g
        return q * (1 - q) / (p - q) ** 2

    return min((below, above), key=variance)


def _digits_needed(domain_size: int, base: int) -> int:
    """The least ``m`` with ``base^m >= domain_size``."""
    m, reach = 1, base
    while reach < domain_size:
        m, reach = m + 1, reach * base
    return m


def _is_prime(n: int) -> bool:
    if n < 2:
        return False
    return all(n % f for f in range(2, math.isqrt(n) + 1))
