"""Apple's count-mean sketch (CMS) and Hadamard count-mean sketch (HCMS): frequency estimation over an open
domain of strings or integers (Apple Differential Privacy Team 2017, "Learning with Privacy at Scale",
Apple Machine Learning Journal; seed 003, "Apple's implementation of LDP").

Both protocols share ``k`` public hash functions ``h_1 .. h_k`` into ``m`` buckets
(:class:`~kakeibo.ldp._hash.HashFamily`, fixed by a public seed) and a ``k x m`` server sketch ``M``.

* **CMS** (Algorithm A_client-CMS): the client draws ``j`` uniform in ``[k]``, encodes its value ``d`` as
  ``v`` in ``{-1, +1}^m`` with ``+1`` only at ``h_j(d)``, flips every coordinate independently with
  probability ``f = 1 / (1 + e^(eps/2))`` and sends ``(v~, j)`` (``m + log2 k`` bits). Server
  (A_server-CMS): ``x = k (c/2 v~ + 1/2)`` with ``c = (e^(eps/2) + 1) / (e^(eps/2) - 1) = 1 / (1 - 2f)``, and
  ``M[j, :] += x``.
* **HCMS** (Algorithm A_client-HCMS): the client draws ``j`` uniform in ``[k]`` and ``l`` uniform in ``[m]``
  (``m`` a power of two), takes the Sylvester-Hadamard entry ``w = H_m[h_j(d), l] =
  (-1)^popcount(h_j(d) & l)``, flips its sign with probability ``f = 1 / (1 + e^eps)`` and sends
  ``(w~, j, l)`` (``1 + log2 k + log2 m`` bits). Server (A_server-HCMS): ``M[j, l] += k c w~`` with
  ``c = (e^eps + 1) / (e^eps - 1) = 1 / (1 - 2f)``; then ``M <- M H_m^T`` (a fast Walsh-Hadamard transform
  of each row).
* **Frequency estimate** (both; Apple 2017, "private frequency estimate"):
  ``f(d) = m/(m - 1) ((1/k) sum_l M[l, h_l(d)] - n/m)``.

Analysis for *fixed* hash functions and a fixed population (derived here; ``n_v`` clients hold ``v``).
Let ``a_v = #{l : h_l(v) = h_l(d)} / k`` be the share of functions under which ``v`` collides with ``d``
(``a_d = 1``). A client holding ``v`` adds ``Y = x_(h_j(d)) / k`` (CMS) or ``Y = c w~ H_m[h_j(d), l]``
(HCMS, after the transform) to ``S(d) = (1/k) sum_l M[l, h_l(d)]``. Given ``j``, CMS's
``Y = c/2 s b + 1/2`` with ``s = +-1`` the encoded coordinate and ``b`` the sign flip (``E b = 1 - 2f``),
so ``E[Y | j] = [h_j(v) = h_j(d)]`` and ``E[Y^2 | j] = (c^2 - 1)/4 + [h_j(v) = h_j(d)]``; HCMS's
``Y^2 = c^2`` and, the rows of ``H_m`` being orthogonal, ``E[Y | j] = [h_j(v) = h_j(d)]`` as well. Hence::

    E Y_v = a_v,    Var Y_v = (c^2 - 1)/4 + a_v (1 - a_v)   (CMS),    Var Y_v = c^2 - a_v^2   (HCMS)

    E f(d)   = m/(m-1) (sum_v n_v a_v - n/m) = n_d + m/(m-1) sum_(v != d) n_v (a_v - 1/m)
    Var f(d) = (m/(m-1))^2 sum_v n_v Var Y_v          (clients are independent)

For fixed hashes the bias is exactly the collision term ``sum_(v != d) n_v a_v`` corrected by ``m/(m-1)``
and ``-n/m``; averaged over the hash seed (``E a_v = 1/m`` for ``v != d``) it vanishes, which is the sense
in which Apple's estimator is unbiased. CMS's noise term ``(c^2 - 1)/4 = f (1 - f) / (1 - 2f)^2`` equals
``e^(eps/2) / (e^(eps/2) - 1)^2``, the variance of symmetric unary encoding; HCMS pays ``c^2 >= 1`` per
client for sending one bit. :meth:`~CountMeanSketch.expected_counts` and
:meth:`~CountMeanSketch.count_variance` evaluate these formulas for a known population. The variances
released with estimates plug in the clipped estimate for ``n_d`` and, for the other ``n - n_d`` clients,
the hash-seed average of ``Var Y_v`` under ideal hashing, where ``k a_v ~ Binomial(k, 1/m)``:
``E a = 1/m`` and ``E a^2 = 1/m^2 + (1 - 1/m)/(m k)``.

Exact coins: ``f`` is rounded *up* to a dyadic rational (more noise, never less) and
``((1 - f)/f)^t <= e^eps`` is verified in rational arithmetic (``t = 2`` for CMS, whose reports for two
values differ in two coordinates given ``j``; ``t = 1`` for HCMS); ``c = 1/(1 - 2f)`` is computed from the
rounded ``f``, so the estimator stays unbiased.
"""

from __future__ import annotations

import itertools
from abc import ABC, abstractmethod
from typing import Any, ClassVar

import numpy as np
from numpy.typing import ArrayLike, NDArray

from ..errors import ArgumentError, ArgumentTypeError
from ..mechanisms.base import Rng
from ..noise import resolve_source
from ..noise.exact import uniform_below
from ..noise.source import RandomSource
from ..privacy import Number
from ._coins import bernoulli_words, flip_probability, unpack_bits
from ._hash import HashFamily, KeyArray, value_keys
from .direct import value_dtype
from .estimates import CountEstimate, deprecated_alias
from .framework import (
    FloatArray,
    IntArray,
    LocalRandomizer,
    check_domain_size,
    check_integer,
    check_payload_range,
)
from .hadamard import parity, walsh_hadamard
from .reports import Param, Reports

__all__ = ["CountMeanSketch", "HadamardCountMeanSketch"]

#: Most hash functions (the limit of :class:`~kakeibo.ldp._hash.HashFamily`).
_MAX_HASHES = 1 << 20
#: Largest sketch ``k * m`` (float64 cells the server holds: 512 MiB).
_MAX_CELLS = 1 << 26
#: Largest integer domain :meth:`~_MeanSketch.estimate` enumerates (``domain_size=``).
_MAX_DOMAIN = 1 << 26
#: Rows summed at once in the byte lanes of a 64-bit word (a lane holds at most 255).
_LANE_ROWS = 255
#: Cells processed per chunk when unpacking reports or comparing hashes (bounded memory).
_CHUNK_CELLS = 1 << 23


class _MeanSketch(LocalRandomizer, ABC):
    """What CMS and HCMS share: calibration, hash family, wire parameters, the frequency estimate and its
    variance (see the module docstring)."""

    protocol: ClassVar[str]
    #: Coordinates in which two values' encodings differ given the public coins (exponent ``t``).
    _differing: ClassVar[int]
    #: ``beta`` in ``Var Y_v = noise + beta a_v - a_v^2``.
    _collision_slope: ClassVar[float]

    def __init__(self, *, epsilon: Number, hashes: int, buckets: int, seed: int = 0) -> None:
        super().__init__(epsilon=epsilon)
        check_integer(hashes, "hashes", 1, _MAX_HASHES)
        self._family = HashFamily(seed=seed, count=hashes, buckets=buckets)
        if hashes * buckets > _MAX_CELLS:
            raise ArgumentError(
                f"hashes * buckets (the server's sketch) must be at most 2**26, got {hashes * buckets}."
            )
        self._check_buckets(buckets)
        self._flip = flip_probability(self._epsilon, self.protocol, self._differing)

    def _check_buckets(self, buckets: int) -> None:
        """Raise ``ValueError`` unless this protocol accepts ``buckets``."""

    # -- description ---------------------------------------------------------------------------------------
    @property
    def hashes(self) -> int:
        """``k``, the number of public hash functions (rows of the sketch)."""
        return self._family.count

    @property
    def buckets(self) -> int:
        """``m``, the number of buckets of each hash function (columns of the sketch)."""
        return self._family.buckets

    @property
    def seed(self) -> int:
        """The public seed fixing the hash functions."""
        return self._family.seed

    @property
    def flip_probability(self) -> float:
        """``f``, the (rounded-up, dyadic) probability that a client flips a coordinate."""
        return float(self._flip)

    @property
    def c_eps(self) -> float:
        """The server's debiasing constant ``c = 1 / (1 - 2f)`` for the rounded ``f``."""
        return float(1 / (1 - 2 * self._flip))

    @property
    @abstractmethod
    def report_bits(self) -> int:
        """Bits one report takes on the wire (communication cost)."""

    @property
    def params(self) -> dict[str, Param]:
        """Everything the server needs to decode these reports."""
        return {
            "epsilon": str(self._epsilon),
            "hashes": self.hashes,
            "buckets": self.buckets,
            "seed": self.seed,
            "flip": str(self._flip),
        }

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(epsilon={self.epsilon!r}, hashes={self.hashes}, "
            f"buckets={self.buckets}, seed={self.seed})"
        )

    # -- client --------------------------------------------------------------------------------------------
    def randomize(self, values: ArrayLike, rng: Rng = None) -> Reports:
        """One epsilon-LDP report per client (``values[i]`` is client ``i``'s string, bytes or non-negative
        integer)."""
        keys = value_keys(values)
        source = resolve_source(rng)
        functions = uniform_below(self.hashes, keys.size, source)
        buckets = self._family.hash(functions, keys)
        payload = self._perturb(buckets, source)
        return Reports(
            self.protocol, self.params, {"function": functions.astype(value_dtype(self.hashes)), **payload}
        )

    @abstractmethod
    def _perturb(self, buckets: IntArray, source: RandomSource) -> dict[str, NDArray[Any]]:
        """The report arrays (besides ``function``) for clients whose value lands in ``buckets[i]``."""

    # -- server --------------------------------------------------------------------------------------------
    def sketch(self, reports: Reports) -> FloatArray:
        """The server's ``k x m`` sketch ``M`` of these reports (A_server-CMS / A_server-HCMS)."""
        reports.check(self.protocol, self.params)
        check_payload_range(reports, "function", self.hashes)
        self._check_payload(reports)
        if reports.n == 0:
            raise ArgumentError(f"a {self.protocol} sketch needs at least one report.")
        return self._sketch(reports)

    @abstractmethod
    def _check_payload(self, reports: Reports) -> None:
        """Raise ``ValueError`` unless the report arrays have the shapes and ranges this protocol sends."""

    @abstractmethod
    def _sketch(self, reports: Reports) -> FloatArray: ...

    def estimate(
        self, reports: Reports, candidates: ArrayLike | None = None, *, domain_size: int | None = None
    ) -> CountEstimate:
        """Estimated number of clients holding each candidate (Apple 2017's frequency estimate), in the
        candidates' order, with the plug-in variance of the module docstring; or, instead of candidates,
        of every integer value ``0 .. domain_size - 1`` (the sketch has no domain of its own)."""
        if candidates is not None and domain_size is None:
            return self._estimate(reports, value_keys(candidates, "candidates"))
        if candidates is None and domain_size is not None:
            d = check_domain_size(domain_size)
            if d > _MAX_DOMAIN:
                raise ArgumentError(f"estimate_domain enumerates at most 2**26 values, got {d}.")
            return self._estimate(reports, np.arange(d, dtype=np.uint64))
        raise ArgumentTypeError("estimate needs either candidates or domain_size, not both.")

    #: Deprecated names of :meth:`estimate` (removed in the next release).
    estimate_candidates = deprecated_alias("estimate")
    estimate_domain = deprecated_alias(
        "estimate", lambda self, reports, domain_size: self.estimate(reports, domain_size=domain_size)
    )

    def _estimate(self, reports: Reports, keys: KeyArray) -> CountEstimate:
        matrix, n, k = self.sketch(reports), reports.n, self.hashes
        sums = np.empty(keys.size, dtype=np.float64)
        step = max(1, _CHUNK_CELLS // k)
        for start in range(0, keys.size, step):
            rows = self._family.hash_all(keys[start : start + step])
            sums[start : start + step] = matrix[np.arange(k), rows].sum(axis=1) / k
        counts = self._debias(sums, n)
        variance = self._plugin_variance(np.clip(counts, 0, n), n)
        return CountEstimate(counts=counts, variance=variance, n=n, privacy_loss=self.privacy_loss)

    def _debias(self, collided: FloatArray, n: int) -> FloatArray:
        """``m/(m-1) (collided - n/m)``: the frequency estimate from ``S(d)`` (or its expectation)."""
        m = self.buckets
        return np.asarray(m / (m - 1) * (collided - n / m), dtype=np.float64)

    # -- variance ------------------------------------------------------------------------------------------
    @property
    @abstractmethod
    def _noise(self) -> float:
        """``Var Y_v + a_v^2 - beta a_v``: the part of one client's variance that does not depend on ``v``."""

    def _client_variance(self, share: FloatArray, share_squared: FloatArray) -> FloatArray:
        """``Var Y_v`` of one client from ``a_v`` and ``a_v^2`` (or their hash-seed averages)."""
        return np.asarray(self._noise + self._collision_slope * share - share_squared, dtype=np.float64)

    def _plugin_variance(self, counts: FloatArray, n: int) -> FloatArray:
        """The variance released with estimates: ``counts`` holders (``a = 1``) and ``n - counts`` others
        with ideal-hash averages ``E a = 1/m``, ``E a^2 = 1/m^2 + (1 - 1/m)/(m k)``."""
        m, k = self.buckets, self.hashes
        shares = np.array([1.0, 1 / m])
        holder, other = self._client_variance(shares, np.array([1.0, 1 / m**2 + (1 - 1 / m) / (m * k)]))
        return np.asarray((m / (m - 1)) ** 2 * (counts * holder + (n - counts) * other), dtype=np.float64)

    def expected_counts(self, population: ArrayLike, candidates: ArrayLike) -> FloatArray:
        """Exact expectation of each candidate's estimate for these hash functions when the clients hold
        ``population`` (one value each): ``m/(m-1) (sum_v n_v a_v - n/m)`` (module docstring)."""
        counts, shares = self._collision_shares(population, candidates)
        return self._debias(shares @ counts, int(counts.sum()))

    def count_variance(self, population: ArrayLike, candidates: ArrayLike) -> FloatArray:
        """Exact variance of each candidate's estimate for these hash functions when the clients hold
        ``population``: ``(m/(m-1))^2 sum_v n_v Var Y_v`` (module docstring)."""
        counts, shares = self._collision_shares(population, candidates)
        m = self.buckets
        return np.asarray((m / (m - 1)) ** 2 * (self._client_variance(shares, shares**2) @ counts))

    def _collision_shares(
        self, population: ArrayLike, candidates: ArrayLike
    ) -> tuple[FloatArray, FloatArray]:
        """How many clients hold each distinct value ``v`` of ``population``, and ``a_v`` for every
        (candidate, distinct value) pair: shape ``(len(candidates), distinct values)``."""
        distinct, holders = np.unique(value_keys(population, "population"), return_counts=True)
        wanted = value_keys(candidates, "candidates")
        held = self._family.hash_all(distinct)
        shares = np.empty((wanted.size, distinct.size), dtype=np.float64)
        step = max(1, _CHUNK_CELLS // max(1, held.size))
        for start in range(0, wanted.size, step):
            rows = self._family.hash_all(wanted[start : start + step])
            shares[start : start + step] = (rows[:, None, :] == held[None, :, :]).mean(axis=2)
        return holders.astype(np.float64), shares


class CountMeanSketch(_MeanSketch):
    """Apple's count-mean sketch: each client sends ``m`` randomized-response bits of a one-hot
    encoding under one of ``k`` public hash functions, and its index.

    * Neighbour relation: local, any two values of one client; sensitivity: given the (value-independent)
      function index ``j``, two values' encodings differ in at most two of the ``m`` coordinates.
    * Privacy loss: ``PureDP(epsilon)`` per client; each coordinate flips with ``f >= 1/(1 + e^(eps/2))``
      (dyadic), and ``((1 - f)/f)^2 <= e^eps`` is checked exactly.
    * Variance of the estimate: ``(m/(m-1))^2 (n (c^2 - 1)/4 + sum_v n_v a_v (1 - a_v))`` (module docstring).

    >>> import numpy as np
    >>> cms = CountMeanSketch(epsilon=4, hashes=16, buckets=64, seed=1)
    >>> reports = cms.randomize(["a"] * 300 + ["b"] * 100, rng=np.random.default_rng(0))
    >>> reports["bits"].shape, cms.sketch(reports).shape
    ((400, 8), (16, 64))
    >>> est = cms.estimate(reports, ["a", "b", "c"])
    >>> bool(np.all(np.abs(est.counts - [300, 100, 0]) < 5 * np.sqrt(est.variance)))
    True
    """

    protocol = "CMS"
    _differing = 2
    _collision_slope = 1.0

    @property
    def report_bits(self) -> int:
        return self.buckets + (self.hashes - 1).bit_length()

    @property
    def _noise(self) -> float:
        f = self._flip
        return float(f * (1 - f) / (1 - 2 * f) ** 2)

    @property
    def _row_bytes(self) -> int:
        return -(-self.buckets // 8)

    def _perturb(self, buckets: IntArray, source: RandomSource) -> dict[str, NDArray[Any]]:
        n, m, width = buckets.size, self.buckets, self._row_bytes
        # Bit 1 means +1. Every coordinate starts as a flip coin (the encoding of all -1's after flipping),
        # then the client's own coordinate is toggled: +1 at h_j(d), flipped by the same coin.
        words = bernoulli_words(self._flip, n * -(-m // 64), source).reshape(n, -1)
        packed = np.ascontiguousarray(words.astype("<u8", copy=False).view(np.uint8)[:, :width])
        if m % 8:
            packed[:, -1] &= np.uint8((1 << (m % 8)) - 1)
        packed[np.arange(n), buckets >> 3] ^= np.uint8(1) << (buckets & 7).astype(np.uint8)
        return {"bits": packed}

    def _check_payload(self, reports: Reports) -> None:
        check_payload_range(reports, "bits", 256, columns=self._row_bytes)
        spare = self.buckets % 8
        if spare and reports.n and int(np.max(reports["bits"][:, -1] >> np.uint8(spare))):
            raise ArgumentError(f"{self.protocol} reports set bits beyond the {self.buckets} buckets.")

    def _sketch(self, reports: Reports) -> FloatArray:
        """``M[j, :] = sum over reports with function j of k (c/2 v~ + 1/2) = k (c ones + (1 - c)/2 n_j)``."""
        k, c = self.hashes, self.c_eps
        functions = reports["function"].astype(np.intp)
        per_function = np.bincount(functions, minlength=k)
        ones = _grouped_bit_counts(reports["bits"], functions, k, self.buckets)
        return np.asarray(k * (c * ones + (1 - c) / 2 * per_function[:, None]), dtype=np.float64)


class HadamardCountMeanSketch(_MeanSketch):
    """Apple's Hadamard count-mean sketch: each client sends one randomized-response bit of one
    Walsh-Hadamard coefficient of its one-hot encoding, with the function and coefficient indices.

    * Neighbour relation: local, any two values of one client; sensitivity: given the (value-independent)
      indices ``(j, l)``, two values' encodings are single ``+-1`` entries that differ in sign or not at all.
    * Privacy loss: ``PureDP(epsilon)`` per client; the sign flips with ``f >= 1/(1 + e^eps)`` (dyadic),
      and ``(1 - f)/f <= e^eps`` is checked exactly.
    * Variance of the estimate: ``(m/(m-1))^2 (n c^2 - sum_v n_v a_v^2)`` (module docstring).

    >>> import numpy as np
    >>> hcms = HadamardCountMeanSketch(epsilon=4, hashes=16, buckets=64, seed=1)
    >>> reports = hcms.randomize(["a", "b"], rng=np.random.default_rng(0))
    >>> sorted(reports.arrays), hcms.report_bits
    (['bit', 'column', 'function'], 11)
    >>> population = np.array([7] * 3000 + [9] * 1000)
    >>> est = hcms.estimate(hcms.randomize(population, rng=np.random.default_rng(0)), domain_size=12)
    >>> mean = hcms.expected_counts(population, np.arange(12))  # truth plus this seed's collision bias
    >>> bool(np.all(np.abs(est.counts - mean) < 5 * np.sqrt(est.variance)))
    True
    """

    protocol = "HCMS"
    _differing = 1
    _collision_slope = 0.0

    def _check_buckets(self, buckets: int) -> None:
        if buckets & (buckets - 1):
            raise ArgumentError(f"HCMS needs a power-of-two number of buckets, got {buckets}.")

    @property
    def report_bits(self) -> int:
        return 1 + (self.hashes - 1).bit_length() + (self.buckets - 1).bit_length()

    @property
    def _noise(self) -> float:
        return self.c_eps**2

    def _perturb(self, buckets: IntArray, source: RandomSource) -> dict[str, NDArray[Any]]:
        n = buckets.size
        columns = uniform_below(self.buckets, n, source)
        plus = parity(buckets & columns) == 0
        flipped = unpack_bits(bernoulli_words(self._flip, -(-n // 64), source), n).astype(np.bool_)
        return {
            "bit": (plus != flipped).astype(np.uint8),
            "column": columns.astype(value_dtype(self.buckets)),
        }

    def _check_payload(self, reports: Reports) -> None:
        check_payload_range(reports, "bit", 2)
        check_payload_range(reports, "column", self.buckets)

    def _sketch(self, reports: Reports) -> FloatArray:
        """``M[j, l] += k c w~`` for every report, then each row times ``H_m^T`` (``H_m`` is symmetric)."""
        k, m = self.hashes, self.buckets
        cell = reports["function"].astype(np.int64) * m + reports["column"].astype(np.int64)
        signs = 2.0 * reports["bit"] - 1.0
        signed_sums = np.asarray(np.bincount(cell, weights=signs, minlength=k * m), dtype=np.float64)
        return walsh_hadamard(signed_sums.reshape(k, m)) * (k * self.c_eps)


def _grouped_bit_counts(
    packed: NDArray[np.uint8], groups: NDArray[np.intp], n_groups: int, columns: int
) -> IntArray:
    """``counts[g, i]``: how many rows of the bit matrix ``packed`` (little-endian bits, one row per report)
    whose ``groups`` entry is ``g`` have bit ``i`` set.

    Rows are sorted by group and cut into segments of at most 255 rows of one group. A segment's rows,
    unpacked to 0/1 bytes, are summed as 64-bit words: eight columns per addition, each in its own byte
    lane, which cannot overflow into the next. The per-segment sums are then added up per group. Rows are
    processed in chunks of whole segments, so memory stays bounded.
    """
    n, width = packed.shape
    order = np.argsort(groups, kind="stable")
    sorted_groups = groups[order]
    run_starts = np.flatnonzero(np.r_[True, sorted_groups[1:] != sorted_groups[:-1]])
    offset = np.arange(n) - np.repeat(run_starts, np.diff(np.r_[run_starts, n]))
    segments = np.flatnonzero(offset % _LANE_ROWS == 0)
    budget = max(_LANE_ROWS, _CHUNK_CELLS // (8 * width))
    cuts = np.unique(np.searchsorted(segments, np.arange(0, n, budget)))  # first segment of each chunk
    counts = np.zeros((n_groups, 8 * width), dtype=np.int64)
    for first, last in itertools.pairwise([*cuts[cuts < segments.size].tolist(), segments.size]):
        lo, hi = int(segments[first]), int(segments[last]) if last < segments.size else n
        starts = segments[first:last] - lo
        bits = np.unpackbits(packed[order[lo:hi]], axis=1, bitorder="little")
        lanes = np.add.reduceat(bits.view(np.uint64), starts, axis=0).view(np.uint8)
        owner = sorted_groups[lo + starts]
        firsts = np.flatnonzero(np.r_[True, owner[1:] != owner[:-1]])
        counts[owner[firsts]] += np.add.reduceat(lanes, firsts, axis=0, dtype=np.int64)
    return counts[:, :columns]
