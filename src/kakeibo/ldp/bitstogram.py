"""Bitstogram: heavy hitters by hashing and bit-by-bit recovery (Bassily, Nissim, Stemmer and Thakurta,
"Practical Locally Private Heavy Hitters", NeurIPS 2017 / JMLR 21(16) 2020, Sec. 4; seed 003).

A public hash ``h`` sends each ``bits``-bit key to one of ``T`` buckets, so that (for ``T`` large enough)
each heavy hitter has a bucket in which it outweighs everything else. Half of the clients, chosen with
exact uniform coins independently of their values, are split evenly into ``bits`` groups; a client of group
``l`` reports the pair ``(h(key), bit l of key)`` -- the item ``2 h(key) + bit`` -- through the Hadamard
response over ``2T`` items (one randomized-response bit on a public ``+-1`` entry: the paper's public
matrix ``Z``). The other half report their key through a :class:`~kakeibo.ldp.hashtogram.Hashtogram`.

The server estimates, in every group ``l``, the counts of all ``2T`` items (one Walsh-Hadamard transform)
and sets bit ``l`` of bucket ``t``'s candidate to the larger of ``(t, 0)`` and ``(t, 1)``. That gives one
candidate key per bucket; candidates that do not hash back to their bucket are dropped, the rest are
estimated through the Hashtogram half (scaled to all ``n`` clients, the sampling of that half in
its error bound), and the ``k`` largest are returned with their counts and that bound.

Error (the paper's Thm. 4.3: heavy hitters of count ``O(sqrt(n log(|X| / beta)) / epsilon)`` are found).
In kakeibo's terms: in group ``l`` (``n_l ~ n / (2 bits)`` clients) the two items of a bucket are each
estimated with variance at most ``n_l / (4 (p - 1/2)^2)`` (:class:`~kakeibo.ldp.hadamard.HadamardResponse`
with ``q* = 1/2``), so the bit of a key is recovered when its bucket's margin between the two items exceeds
``z`` standard deviations of their difference: in population units, a count above ``z sqrt(2 n bits) / (2 p
- 1)`` (plus the mass of the other keys in its bucket, ``2 n / T`` on average), for each of its ``bits``
bits (:meth:`Bitstogram.bit_threshold`). The error therefore grows as ``sqrt(n log |X|) / epsilon``, the
``sqrt(log |X|)`` coming from the split into ``log |X|`` groups; the paper's error-correcting code, which
turns per-bit failures into a per-key one, is not used (a key with one wrong bit is missed).

Privacy. Neighbour relation: local, any two values of one client. Sensitivity: not applicable. Privacy
loss: ``PureDP(epsilon)`` per client: the group is drawn independently of the value, and each client sends
one report through an epsilon-LDP randomizer (parallel composition over the groups).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any, ClassVar

import numpy as np
from numpy.typing import ArrayLike
from scipy.special import ndtri

from ..errors import ArgumentError
from ..mechanisms.base import Rng, check_beta
from ..noise import resolve_source
from ..noise.exact import uniform_below
from ..privacy import Number
from ._hash import HashFamily
from .counted import CountedHeavyHitters
from .framework import IntArray, check_integer
from .hadamard import HadamardResponse
from .reports import Param, Reports

__all__ = ["Bitstogram"]


class Bitstogram(CountedHeavyHitters):
    """Bitstogram over ``bits``-bit keys: ``buckets`` (``T``) buckets for the candidates, the ``k`` largest
    returned, their counts from a Hashtogram with ``count_buckets`` buckets and ``repetitions`` repetitions
    (module docstring).

    * Neighbour relation: local, any two values of one client.
    * Sensitivity: not applicable (each client randomizes its own value once).
    * Privacy loss: ``PureDP(epsilon)`` per client.

    >>> bitstogram = Bitstogram(epsilon=4, bits=20, k=2, buckets=64)
    >>> values = np.repeat([7, 1_000_003, 12], [40_000, 25_000, 100])
    >>> found = bitstogram.estimate(bitstogram.randomize(values, rng=np.random.default_rng(1)))
    >>> found.values.tolist()
    [7, 1000003]
    """

    protocol: ClassVar[str] = "Bitstogram"

    def __init__(
        self,
        *,
        epsilon: Number,
        bits: int,
        k: int,
        buckets: int = 1024,
        count_buckets: int = 1024,
        repetitions: int = 16,
        hash_seed: int = 0,
    ) -> None:
        super().__init__(
            epsilon=epsilon,
            bits=bits,
            k=k,
            count_buckets=count_buckets,
            repetitions=repetitions,
            hash_seed=hash_seed,
        )
        self._t = check_integer(buckets, "buckets", 2, 1 << 20, "2**20")
        if self._t & (self._t - 1):
            raise ArgumentError(f"buckets must be a power of two, got {self._t}.")
        self._hash = HashFamily(seed=hash_seed, count=1, buckets=self._t)
        self._oracle = HadamardResponse(epsilon=self._epsilon, domain_size=2 * self._t)

    @property
    def buckets(self) -> int:
        return self._t

    @property
    def groups(self) -> int:
        """Report batches: one per bit, then the Hashtogram's."""
        return self._bits + 1

    def group_params(self, group: int) -> dict[str, Param]:
        """The parameters of group ``group``'s batches (the last group's are the Hashtogram's)."""
        if group == self._bits:
            return self._count_params()
        return {
            "epsilon": str(self._epsilon),
            "bits": self._bits,
            "buckets": self._t,
            "hash_seed": self._hash.seed,
            "group": group,
            "p": self._oracle.params["p"],
            "heavy_hitters": repr(self),
        }

    def __repr__(self) -> str:
        return (
            f"Bitstogram(epsilon={self.epsilon!r}, bits={self._bits}, k={self._k}, buckets={self._t}, "
            f"count_buckets={self._counts.buckets}, repetitions={self._counts.repetitions}, "
            f"hash_seed={self._hash.seed})"
        )

    def randomize(self, values: ArrayLike | Sequence[Any], rng: Rng = None) -> list[Reports]:
        """One epsilon-LDP report per client, batched by group: ``bits`` bit groups, then the Hashtogram's."""
        keys = self.encode(values)
        source = resolve_source(rng)
        draw = uniform_below(2 * self._bits, keys.size, source)  # < bits: that bit's group; else: counts
        group = np.minimum(draw, self._bits)
        batches = []
        for ell in range(self._bits):
            mine = keys[group == ell]
            items = 2 * self._hash.hash(np.zeros(mine.size, dtype=np.int64), mine.astype(np.uint64))
            items += (mine >> ell) & 1
            column = self._oracle.randomize(items, rng=source)["column"]
            batches.append(Reports(self.protocol, self.group_params(ell), {"column": column}))
        batches.append(self._count_batch(keys[group == self._bits], source))
        return batches

    # -- server --------------------------------------------------------------------------------------------
    def _candidates(self, groups: Sequence[Reports]) -> IntArray:
        """One candidate key per bucket, bit by bit, keeping those that hash back to their bucket."""
        key = np.zeros(self._t, dtype=np.int64)
        for ell in range(self._bits):
            inner = Reports(self._oracle.protocol, self._oracle.params, groups[ell].arrays)
            items = self._oracle.estimate(inner).counts.reshape(self._t, 2)
            key |= (items[:, 1] > items[:, 0]).astype(np.int64) << ell
        buckets = self._hash.hash(np.zeros(self._t, dtype=np.int64), key.astype(np.uint64))
        return np.unique(key[buckets == np.arange(self._t)])

    def bit_threshold(self, n: int, beta: float = 0.05) -> float:
        """The count above which a key alone in its bucket has each of its bits recovered with probability
        at least ``1 - beta / bits`` (normal approximation): ``z sqrt(2 n bits) / (2p - 1)`` with ``z =
        Phi^-1(1 - beta / bits)``, for groups of the expected size ``n / (2 bits)``."""
        check_beta(beta, "beta")
        z = float(-ndtri(beta / self._bits))
        return z * math.sqrt(2 * n * self._bits) / (2 * self._oracle.p_star - 1)

    def _check_finding(self, batch: Reports) -> None:
        self._oracle.check_reports(Reports(self._oracle.protocol, self._oracle.params, batch.arrays))
