"""PrivateExpanderSketch: heavy hitters through chunks linked along an expander (Bun, Nelson and Stemmer,
"Heavy Hitters and the Structure of Local Privacy", PODS 2018 / ACM TALG 2019, Sec. 5; seed 003), after the
ExpanderSketch of Larsen, Nelson, Nguyen and Thorup (FOCS 2016).

A ``bits``-bit key ``x`` is cut into ``D`` symbols of ``symbol_bits`` bits, the coefficients of a
polynomial over the prime field ``GF(P)`` (``P`` the least prime ``>= 2^symbol_bits``), and encoded by its
values at ``1 .. M`` (a Reed-Solomon code: any ``D`` of the ``M`` coordinates give ``x`` back). The ``M``
coordinates are the vertices of a fixed graph ``G`` (a circulant with offsets 1 and 2: degree 4, connected,
and still connected after losing any one vertex, for ``M >= 5``), and every edge ``{m, m'}`` of ``G`` has a
public hash ``g_mm'`` of ``x`` to ``link_bits`` bits. Chunk ``m`` of ``x`` is its code symbol together with
the hashes of its edges: ``z_m(x) = (c_m(x), g_mm'(x) for the neighbours m' of m)``.

Half of the clients, chosen with exact uniform coins independently of their values, are split evenly into
``M`` groups; a client of group ``m`` reports the item ``(h(x), z_m(x))`` -- its key's bucket under a public
hash ``h`` to ``T`` buckets, and its ``m``-th chunk -- through the Hadamard response over the ``T |Z|``
items. The other half report their key through a :class:`~kakeibo.ldp.hashtogram.Hashtogram`.

The server estimates every item of every group (one Walsh-Hadamard transform per group) and keeps, per
group, the items whose estimate exceeds ``z_fp`` standard deviations of an empty item's (``z_fp`` from a
union bound over all items of all groups at ``false_positive_rate``). In each bucket the kept chunks are
the vertices of a graph, two chunks of neighbouring coordinates joined when their hashes of the edge
between them agree: the chunks of one heavy key form a copy of ``G``, connected; chunks of different keys
meet only when ``link_bits``-bit hashes collide. Each connected component is decoded: one chunk per
coordinate (the largest estimate), Lagrange interpolation through ``D`` of them, the rest must agree, and
the key must hash back to its bucket and re-encode to the component's chunks. The candidates are counted
through the Hashtogram half.

Error (the paper's Thm. 5.1: ``O(sqrt(n log(|X| / beta)) / epsilon)``, the lower bound). A coordinate of a
key of count ``f`` holds about ``f / (2M)`` of the ``n / (2M)`` clients of its group, so it is kept when
``f`` exceeds ``(z_fp + z) sqrt(2 M n) / (2p - 1)`` (:meth:`PrivateExpanderSketch.detection_threshold`,
``z = Phi^-1(1 - beta / M)`` for all its ``M`` chunks). Against Bitstogram's ``sqrt(2 bits n)``, the
clients are split ``M ~ bits / symbol_bits`` ways instead of ``bits`` ways, and a key needs only ``D``
connected chunks of ``M``; the price is a per-group domain of ``T P 2^(4 link_bits)`` items. What differs
from the paper: a Reed-Solomon code with erasure decoding for its list-recoverable code, connected
components for its spectral clustering, a fixed circulant for its expander family; its asymptotic
statements need those, a deployment of this size does not.

Privacy. Neighbour relation: local, any two values of one client. Sensitivity: not applicable. Privacy
loss: ``PureDP(epsilon)`` per client: the group is drawn independently of the value, and each client sends
one report through an epsilon-LDP randomizer (the Hadamard response or the Hashtogram).
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

__all__ = ["PrivateExpanderSketch"]

#: Largest item domain of one group's Hadamard response (one transform of this many counts per group).
_MAX_ITEMS = 1 << 24
#: Most chunks kept per group (the largest estimates above the threshold).
_MAX_KEPT = 1 << 12
#: Offsets of the circulant graph on the coordinates.
_OFFSETS = (1, 2)

#: A kept chunk: its coordinate ``m``, code symbol, edge hashes (packed) and estimated count.
Chunk = tuple[int, int, int, float]


def _least_prime_at_least(value: int) -> int:
    candidate = max(value, 2)
    while any(candidate % f == 0 for f in range(2, math.isqrt(candidate) + 1)):
        candidate += 1
    return candidate


def circulant_edges(m: int) -> list[tuple[int, int]]:
    """The edges ``{i, i + o mod m}``, ``o`` in the offsets, as sorted pairs without repeats.

    >>> circulant_edges(6)[:4]
    [(0, 1), (0, 2), (0, 4), (0, 5)]
    """
    found = {tuple(sorted((i, (i + o) % m))) for i in range(m) for o in _OFFSETS if (i + o) % m != i}
    return sorted((a, b) for a, b in found)


class PrivateExpanderSketch(CountedHeavyHitters):
    """PrivateExpanderSketch over ``bits``-bit keys (module docstring): ``chunks`` (``M``, default ``2 D``)
    code coordinates of ``symbol_bits`` bits each, ``link_bits`` per edge hash, ``buckets`` (``T``) buckets;
    the ``k`` largest candidates returned with counts from a Hashtogram of ``count_buckets`` buckets and
    ``repetitions`` repetitions.

    * Neighbour relation: local, any two values of one client.
    * Sensitivity: not applicable (each client randomizes its own value once).
    * Privacy loss: ``PureDP(epsilon)`` per client.

    >>> sketch = PrivateExpanderSketch(epsilon=4, bits=16, k=2, buckets=8)
    >>> values = np.repeat([7, 40_000, 12], [60_000, 40_000, 100])
    >>> sketch.estimate(sketch.randomize(values, rng=np.random.default_rng(5))).values.tolist()
    [7, 40000]
    """

    protocol: ClassVar[str] = "PrivateExpanderSketch"

    def __init__(
        self,
        *,
        epsilon: Number,
        bits: int,
        k: int,
        buckets: int = 64,
        symbol_bits: int = 8,
        chunks: int | None = None,
        link_bits: int = 1,
        count_buckets: int = 1024,
        repetitions: int = 16,
        false_positive_rate: float = 0.05,
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
        self._t = check_integer(buckets, "buckets", 1, 1 << 16)
        self._symbol_bits = check_integer(symbol_bits, "symbol_bits", 2, 16)
        self._data = -(-self._bits // self._symbol_bits)
        self._prime = _least_prime_at_least(1 << self._symbol_bits)
        default = min(max(2 * self._data, 5), self._prime - 1)  # evaluation points 1 .. M, distinct mod P
        self._m = check_integer(default if chunks is None else chunks, "chunks", self._data, self._prime - 1)
        self._link_bits = check_integer(link_bits, "link_bits", 1, 8)
        self._fpr = check_beta(false_positive_rate, "false_positive_rate")
        self._edges = circulant_edges(self._m)
        self._neighbours = [
            [b if a == m else a for a, b in self._edges if m in (a, b)] for m in range(self._m)
        ]
        self._degree = max(len(n) for n in self._neighbours)
        self._links = 1 << (self._link_bits * self._degree)
        self._items = self._t * self._prime * self._links
        if self._items > _MAX_ITEMS:
            raise ArgumentError(
                f"buckets * P * 2^(link_bits * degree) = {self._items} items per group exceed {_MAX_ITEMS}; "
                "use fewer buckets, symbol bits or link bits."
            )
        self._bucket_hash = HashFamily(seed=hash_seed, count=1, buckets=max(self._t, 2))
        self._link_hash = HashFamily(seed=hash_seed + 2, count=len(self._edges), buckets=1 << self._link_bits)
        self._oracle = HadamardResponse(epsilon=self._epsilon, domain_size=self._items)

    @property
    def chunks(self) -> int:
        """``M``: code coordinates, one group of clients each."""
        return self._m

    @property
    def data_symbols(self) -> int:
        """``D``: coordinates needed to decode a key."""
        return self._data

    @property
    def prime(self) -> int:
        return self._prime

    @property
    def items(self) -> int:
        """``T |Z|``: the items of one group's Hadamard response."""
        return self._items

    @property
    def groups(self) -> int:
        return self._m + 1

    @property
    def report_bits(self) -> int:
        """Bits of a chunk report (the Hadamard column); the Hashtogram half sends its own."""
        return self._oracle.report_bits

    def group_params(self, group: int) -> dict[str, Param]:
        """Groups ``0 .. M-1`` report chunks; group ``M`` reports through the Hashtogram."""
        if group == self._m:
            return self._count_params()
        return {
            "epsilon": str(self._epsilon),
            "group": group,
            "p": self._oracle.params["p"],
            "heavy_hitters": repr(self),
        }

    def __repr__(self) -> str:
        return (
            f"PrivateExpanderSketch(epsilon={self.epsilon!r}, bits={self._bits}, k={self._k}, "
            f"buckets={self._t}, symbol_bits={self._symbol_bits}, chunks={self._m}, "
            f"link_bits={self._link_bits}, count_buckets={self._counts.buckets}, "
            f"repetitions={self._counts.repetitions}, false_positive_rate={self._fpr}, "
            f"hash_seed={self._bucket_hash.seed})"
        )

    # -- the code ------------------------------------------------------------------------------------------
    def codewords(self, keys: IntArray) -> IntArray:
        """Each key's Reed-Solomon codeword, shape ``(n, M)``: its ``D`` base-``2^symbol_bits`` digits
        (lowest first) as coefficients, evaluated at ``1 .. M`` modulo ``P``."""
        digits = (keys[:, None] >> (self._symbol_bits * np.arange(self._data))[None, :]) & (
            (1 << self._symbol_bits) - 1
        )
        points = np.arange(1, self._m + 1)
        powers = np.ones((self._m, self._data), dtype=np.int64)
        for i in range(1, self._data):
            powers[:, i] = powers[:, i - 1] * points % self._prime
        return np.asarray(digits @ powers.T % self._prime, dtype=np.int64)

    def chunk_items(self, keys: IntArray, m: int) -> IntArray:
        """The item ``(h(x), z_m(x))`` of chunk ``m`` of each key, as one index into the ``T |Z|`` items."""
        symbol = self.codewords(keys)[:, m]
        links = np.zeros(keys.size, dtype=np.int64)
        for slot, other in enumerate(self._neighbours[m]):
            edge = self._edges.index((min(m, other), max(m, other)))
            links |= self._link_hash.hash(np.full(keys.size, edge), keys.astype(np.uint64)) << (
                self._link_bits * slot
            )
        return (self._bucket_of(keys) * self._prime + symbol) * self._links + links

    def _bucket_of(self, keys: IntArray) -> IntArray:
        if self._t == 1:
            return np.zeros(keys.size, dtype=np.int64)
        return self._bucket_hash.hash(np.zeros(keys.size, dtype=np.int64), keys.astype(np.uint64))

    def randomize(self, values: ArrayLike | Sequence[Any], rng: Rng = None) -> list[Reports]:
        """One epsilon-LDP report per client, batched by group: ``M`` chunk groups, then the Hashtogram's."""
        keys = self.encode(values)
        source = resolve_source(rng)
        group = np.minimum(uniform_below(2 * self._m, keys.size, source), self._m)
        batches = []
        for m in range(self._m):
            column = self._oracle.randomize(self.chunk_items(keys[group == m], m), rng=source)["column"]
            batches.append(Reports(self.protocol, self.group_params(m), {"column": column}))
        batches.append(self._count_batch(keys[group == self._m], source))
        return batches

    # -- server --------------------------------------------------------------------------------------------
    @property
    def threshold_z(self) -> float:
        """``z_fp``: a chunk is kept when its estimate exceeds this many standard deviations of an empty
        item's (the union bound over the ``M T |Z|`` items at ``false_positive_rate``)."""
        return float(-ndtri(self._fpr / (self._m * self._items)))

    def detection_threshold(self, n: int, beta: float = 0.05) -> float:
        """The count above which every chunk of a key alone in its bucket is kept with probability at least
        ``1 - beta`` (normal approximation, groups of the expected size ``n / (2M)``):
        ``(z_fp + Phi^-1(1 - beta / M)) sqrt(2 M n) / (2p - 1)``."""
        check_beta(beta, "beta")
        z = self.threshold_z + float(-ndtri(beta / self._m))
        return z * math.sqrt(2 * self._m * n) / (2 * self._oracle.p_star - 1)

    def _kept(self, batch: Reports) -> tuple[IntArray, np.ndarray]:
        """The items of one chunk group above the threshold (at most ``_MAX_KEPT``, largest first)."""
        inner = Reports(self._oracle.protocol, self._oracle.params, batch.arrays)
        estimate = self._oracle.estimate(inner).counts
        empty_sd = math.sqrt(float(self._oracle.count_variance(batch.n, [0.0])[0]))
        above = np.flatnonzero(estimate > self.threshold_z * empty_sd)
        order = above[np.argsort(-estimate[above], kind="stable")][:_MAX_KEPT]
        return order, estimate[order]

    def _candidates(self, groups: Sequence[Reports]) -> IntArray:
        """The keys decoded from the connected components of kept chunks."""
        nodes: dict[int, list[Chunk]] = {}  # chunks by bucket
        for m in range(self._m):
            items, estimates = self._kept(groups[m])
            for item, estimate in zip(items.tolist(), estimates.tolist(), strict=True):
                rest, links = divmod(item, self._links)
                bucket, symbol = divmod(rest, self._prime)
                nodes.setdefault(bucket, []).append((m, symbol, links, estimate))
        found: set[int] = set()
        for bucket, chunks in nodes.items():
            for component in self._components(chunks):
                key = self._decode(component, bucket)
                if key is not None:
                    found.add(key)
        return np.array(sorted(found), dtype=np.int64)

    def _link(self, links: int, m: int, other: int) -> int:
        slot = self._neighbours[m].index(other)
        return (links >> (self._link_bits * slot)) & ((1 << self._link_bits) - 1)

    def _components(self, chunks: list[Chunk]) -> list[list[Chunk]]:
        """Connected components of the chunks of one bucket: ``(m, ...)`` and ``(m', ...)`` are joined when
        ``m, m'`` are neighbours in ``G`` and both carry the same hash of their edge."""
        parent = list(range(len(chunks)))

        def root(i: int) -> int:
            while parent[i] != i:
                parent[i] = parent[parent[i]]
                i = parent[i]
            return i

        for i, (m, _, links, _) in enumerate(chunks):
            for j in range(i + 1, len(chunks)):
                other, _, other_links, _ = chunks[j]
                if other in self._neighbours[m] and self._link(links, m, other) == self._link(
                    other_links, other, m
                ):
                    parent[root(i)] = root(j)
        grouped: dict[int, list[Chunk]] = {}
        for i, chunk in enumerate(chunks):
            grouped.setdefault(root(i), []).append(chunk)
        return list(grouped.values())

    def _decode(self, component: list[Chunk], bucket: int) -> int | None:
        """The key a component spells, or None: one chunk per coordinate (the largest estimate), at least
        ``D`` coordinates, Lagrange interpolation through ``D`` of them, every other coordinate in agreement,
        digits below ``2^symbol_bits``, the bucket and every chunk re-encoded exactly."""
        best: dict[int, Chunk] = {}
        for chunk in component:
            if chunk[0] not in best or chunk[3] > best[chunk[0]][3]:
                best[chunk[0]] = chunk
        if len(best) < self._data:
            return None
        coordinates = sorted(best)
        coefficients = self._interpolate([(m + 1, best[m][1]) for m in coordinates[: self._data]])
        if any(c >= 1 << self._symbol_bits for c in coefficients):
            return None
        key = sum(c << (self._symbol_bits * i) for i, c in enumerate(coefficients))
        if key >= 1 << self._bits:
            return None
        keys = np.array([key], dtype=np.int64)
        if int(self._bucket_of(keys)[0]) != bucket:
            return None
        for m in coordinates:
            expected = int(self.chunk_items(keys, m)[0]) % (self._prime * self._links)
            if expected != best[m][1] * self._links + best[m][2]:
                return None
        return key

    def _interpolate(self, points: list[tuple[int, int]]) -> list[int]:
        """The coefficients (lowest first) of the polynomial of degree below ``len(points)`` through
        ``points`` over ``GF(P)`` (Lagrange)."""
        p = self._prime
        result = [0] * len(points)
        for i, (xi, yi) in enumerate(points):
            basis = [1]
            denominator = 1
            for j, (xj, _) in enumerate(points):
                if j == i:
                    continue
                basis = [(a - xj * b) % p for a, b in zip([0, *basis], [*basis, 0], strict=True)]
                denominator = denominator * (xi - xj) % p
            scale = yi * pow(denominator, p - 2, p) % p
            result = [(r + scale * b) % p for r, b in zip(result, basis, strict=True)]
        return result

    def _check_finding(self, batch: Reports) -> None:
        self._oracle.check_reports(Reports(self._oracle.protocol, self._oracle.params, batch.arrays))
