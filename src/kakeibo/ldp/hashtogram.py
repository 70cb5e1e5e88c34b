"""Hashtogram: the frequency oracle of Bun, Nelson and Stemmer ("Heavy Hitters and the Structure of Local
Privacy", PODS 2018 / ACM TALG 2019; seed 003), for domains too large to enumerate.

Public randomness: ``R`` hash functions ``h_1 .. h_R`` from keys to ``T`` buckets (one seeded
:class:`~kakeibo.ldp._hash.HashFamily`), and for each client a column of the Hadamard matrix. A client
draws its repetition ``r`` uniformly (exact coins, independently of its value), hashes its key to
``t = h_r(key)`` and reports bucket ``t`` through the Hadamard response over ``T`` values (one column, i.e.
one randomized-response bit on the public ``+-1`` entry ``H[t + 1, column]``: the paper's public matrix
``Z`` with pairwise-independent rows). It sends ``(r, column)``: ``log2 R + log2 2T`` bits.

The server turns each repetition's reports into unbiased bucket counts (one Walsh-Hadamard transform,
:class:`~kakeibo.ldp.hadamard.HadamardResponse`), scales them to the population (``n / n_r``) and estimates
a key's count as the **median** over the repetitions of its bucket's count. Each repetition's estimate is
the key's count plus the counts of the other keys in its bucket (never negative) plus noise; the median
discards the repetitions where a heavy key collides.

Error guarantee (the paper's Thm. 3.7, with explicit constants instead of its O()): let ``sigma`` bound
the standard deviation of one repetition's noise (oracle and sampling, :meth:`Hashtogram.noise_sd`) and let
two distinct keys collide under one hash function with probability at most ``2/T`` (the multiply-add-shift
family's; an assumption about kakeibo's public family, which the tests check empirically). One repetition
errs by more than ``sigma / sqrt(q1) + 2 n / (T q2)`` with probability at most ``q1 + q2`` (Chebyshev on
the noise, Markov on the colliding mass, whose mean is at most ``2 n / T``). The median of ``R``
repetitions errs by more only if at least ``ceil(R/2)`` of them do, which has probability at most
``P(Binomial(R, q1 + q2) >= ceil(R/2))`` (given the repetition sizes, the repetitions are independent).
:meth:`Hashtogram.error_bound` takes the largest ``q = q1 + q2`` for which that tail is at most ``beta``
and the split of ``q`` that minimises the bound. With ``T ~ sqrt(n)`` and ``R ~ log(1/beta)`` the bound is
``O(sqrt(n log(1/beta)) / epsilon)``: the optimal error of a frequency oracle. It holds for any data, so
its collision term is what Markov's inequality allows; on data whose other keys are spread thin the
errors are far below it (the tests measure both).

Privacy. Neighbour relation: local, any two values of one client. Privacy loss: ``PureDP(epsilon)`` per
client: the repetition is chosen independently of the value and the bucket is reported through an
epsilon-LDP Hadamard response.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any, ClassVar

import numpy as np
from numpy.typing import ArrayLike, NDArray

from ..errors import ArgumentError
from ..mechanisms.base import Rng, check_beta
from ..noise import resolve_source
from ..noise.exact import uniform_below
from ..privacy import Number
from ._hash import HashFamily
from .estimates import MedianCounts, deprecated_alias
from .framework import (
    FloatArray,
    IntArray,
    LocalRandomizer,
    check_integer,
    check_payload_range,
)
from .hadamard import HadamardResponse
from .heavy_hitters import key_bits, population_count_variance
from .reports import Param, Reports

__all__ = ["Hashtogram", "MedianCounts"]

#: Longest key, as for the other heavy-hitter protocols.
_MAX_BITS = 40


class Hashtogram(LocalRandomizer):
    """Hashtogram over ``bits``-bit keys with ``buckets`` (``T``, a power of two) buckets and
    ``repetitions`` (``R``) hash functions (module docstring).

    * Neighbour relation: local, any two values of one client.
    * Sensitivity: not applicable (each client randomizes its own value once).
    * Privacy loss: ``PureDP(epsilon)`` per client.

    >>> oracle = Hashtogram(epsilon=2, bits=32, buckets=256, repetitions=16)
    >>> values = np.repeat([7, 123_456_789], [20_000, 10_000])
    >>> estimate = oracle.estimate(oracle.randomize(values, rng=np.random.default_rng(0)), [7, 8])
    >>> bool(abs(estimate.counts[0] - 20_000) < estimate.bound), estimate.confidence
    (True, 0.95)
    """

    protocol: ClassVar[str] = "Hashtogram"

    def __init__(
        self, *, epsilon: Number, bits: int, buckets: int = 1024, repetitions: int = 16, hash_seed: int = 0
    ) -> None:
        super().__init__(epsilon=epsilon)
        self._bits = check_integer(bits, "bits", 1, _MAX_BITS)
        self._t = check_integer(buckets, "buckets", 2, 1 << 24, "2**24")
        if self._t & (self._t - 1):
            raise ArgumentError(f"buckets must be a power of two, got {self._t}.")
        self._r = check_integer(repetitions, "repetitions", 1, 1 << 10)
        self._hashes = HashFamily(seed=hash_seed, count=self._r, buckets=self._t)
        self._oracle = HadamardResponse(epsilon=self._epsilon, domain_size=self._t)

    # -- description ---------------------------------------------------------------------------------------
    @property
    def bits(self) -> int:
        return self._bits

    @property
    def buckets(self) -> int:
        return self._t

    @property
    def repetitions(self) -> int:
        return self._r

    @property
    def oracle(self) -> HadamardResponse:
        """The Hadamard response every client reports its bucket through."""
        return self._oracle

    @property
    def report_bits(self) -> int:
        """Bits of one report: the repetition and the Hadamard column."""
        return (self._r - 1).bit_length() + self._oracle.report_bits

    @property
    def params(self) -> dict[str, Param]:
        return {
            "epsilon": str(self._epsilon),
            "bits": self._bits,
            "buckets": self._t,
            "repetitions": self._r,
            "hash_seed": self._hashes.seed,
            "p": self._oracle.params["p"],
        }

    def __repr__(self) -> str:
        return (
            f"Hashtogram(epsilon={self.epsilon!r}, bits={self._bits}, buckets={self._t}, "
            f"repetitions={self._r}, hash_seed={self._hashes.seed})"
        )

    # -- client --------------------------------------------------------------------------------------------
    def encode(self, values: ArrayLike | Sequence[Any]) -> IntArray:
        """The ``bits``-bit key of each value (:func:`~kakeibo.ldp.heavy_hitters.key_bits`)."""
        return key_bits(values, self._bits)

    def randomize(self, values: ArrayLike | Sequence[Any], rng: Rng = None) -> Reports:
        """One epsilon-LDP report per client: its repetition and its Hadamard column."""
        keys = self.encode(values)
        source = resolve_source(rng)
        repetition = uniform_below(self._r, keys.size, source)
        buckets = self._hashes.hash(repetition, keys.astype(np.uint64))
        column = self._oracle.randomize(buckets, rng=source)["column"]
        arrays: dict[str, NDArray[Any]] = {"repetition": repetition.astype(np.uint16), "column": column}
        return Reports(self.protocol, self.params, arrays)

    # -- server --------------------------------------------------------------------------------------------
    def check_reports(self, reports: Reports) -> None:
        """Raise ``ValueError`` unless ``reports`` are this protocol's, with these parameters, and every
        repetition and column is one an honest client can send."""
        reports.check(self.protocol, self.params)
        check_payload_range(reports, "repetition", self._r)
        check_payload_range(reports, "column", self._oracle.columns)

    def bucket_counts(self, reports: Reports, population: int | None = None) -> FloatArray:
        """Population-scaled unbiased bucket counts, shape ``(R, T)``: row ``r`` estimates, for each bucket,
        the number of clients whose key ``h_r`` maps there, from repetition ``r``'s ``n_r`` clients times
        ``N / n_r``; NaN rows for repetitions nobody drew. ``population`` (``N``, default: the number of
        reports) is the number of clients the reports are a uniform sample of, when only some of them
        reported through this oracle (as in :class:`~kakeibo.ldp.bitstogram.Bitstogram`)."""
        self.check_reports(reports)
        total = self._population(reports, population)
        repetition = reports["repetition"].astype(np.int64)
        column = reports["column"]
        rows = np.full((self._r, self._t), np.nan)
        for r in range(self._r):
            mine = column[repetition == r]
            if mine.size:
                inner = Reports(self._oracle.protocol, self._oracle.params, {"column": mine})
                rows[r] = self._oracle.estimate(inner).counts * (total / mine.size)
        return rows

    def estimate(
        self,
        reports: Reports,
        candidates: ArrayLike | Sequence[Any],
        beta: float = 0.05,
        population: int | None = None,
    ) -> MedianCounts:
        """Each candidate's estimated count among ``population`` clients (the median over the repetitions of
        its bucket's count, :meth:`bucket_counts`) with the error bound :meth:`error_bound` at the smallest
        repetition seen: each candidate fixed in advance is within it with probability at least
        ``1 - beta``."""
        check_beta(beta, "beta")
        keys = self.encode(candidates)
        rows = self.bucket_counts(reports, population)
        if np.isnan(rows).any():
            raise ArgumentError(
                "every repetition needs reports; collect more clients or use fewer repetitions."
            )
        buckets = self._hashes.hash_all(keys.astype(np.uint64))  # (M, R)
        estimates = rows[np.arange(self._r)[None, :], buckets]
        sizes = np.bincount(reports["repetition"].astype(np.int64), minlength=self._r)
        total = self._population(reports, population)
        return MedianCounts(
            counts=np.median(estimates, axis=1),
            bound=self.error_bound(total, int(sizes.min()), beta),
            confidence=1 - beta,
            n=total,
            privacy_loss=self.privacy_loss,
        )

    #: Deprecated name of :meth:`estimate` (removed in the next release).
    estimate_candidates = deprecated_alias("estimate")

    @staticmethod
    def _population(reports: Reports, population: int | None) -> int:
        if population is None:
            return reports.n
        return check_integer(population, "population", max(reports.n, 1), 1 << 62, "2**62")

    def noise_sd(self, n: int, repetition_size: int) -> float:
        """An upper bound on the standard deviation of one repetition's population-scaled estimate of a
        bucket, over every count the bucket may hold: the Hadamard response's variance is largest for an
        empty bucket (``p(1 - p) < 1/4 = q*(1 - q*)``) and the hypergeometric sampling term ``C (1 - C/n)
        n (n - n_r) / (n_r (n - 1))`` for ``C = n/2``."""
        oracle = population_count_variance(self._oracle, n, repetition_size, 0.0).item()
        sampling = (n / 4) * n * (n - repetition_size) / (repetition_size * max(n - 1, 1))
        return math.sqrt(oracle + sampling)

    def error_bound(self, n: int, repetition_size: int, beta: float = 0.05) -> float:
        """The error that a candidate's median exceeds with probability at most ``beta`` when ``n`` clients
        report and every repetition has at least ``repetition_size`` of them (module docstring): the
        smallest ``sigma / sqrt(q1) + 2 n / (T q2)`` over ``q1 + q2 = q``, the largest ``q`` with
        ``P(Binomial(R, q) >= ceil(R/2)) <= beta``."""
        from scipy.optimize import brentq, minimize_scalar  # server side only
        from scipy.stats import binom

        check_beta(beta, "beta")
        needed = math.ceil(self._r / 2)

        def tail(q: float) -> float:
            return float(binom.sf(needed - 1, self._r, q)) - beta

        if tail(1e-12) > 0:
            return math.inf  # too few repetitions for this beta
        q = float(brentq(tail, 1e-12, 1 - 1e-12, xtol=1e-12))
        sigma, collisions = self.noise_sd(n, repetition_size), 2 * n / self._t

        def bound(q1: float) -> float:
            return sigma / math.sqrt(q1) + collisions / (q - q1)

        best = minimize_scalar(bound, bounds=(q * 1e-9, q * (1 - 1e-9)), method="bounded")
        return float(bound(float(best.x)))
