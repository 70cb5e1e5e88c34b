"""Succinct histograms: heavy hitters by hashing, an error-correcting code and one randomized coordinate
per client (Bassily and Smith, "Local, Private, Efficient Protocols for Succinct Histograms", STOC 2015,
Sec. 4, protocols PROT-PP-S-Hist and PROT-S-Hist; seed 003).

A client holding a ``bits``-bit key ``v`` encodes it with an error-correcting code ``c(v)`` of ``L`` bits
and places the codeword in the block ``h(v)`` of ``K`` blocks (a public hash): its vector is
``x = e_h(v) (x) c(v)``, with ``K L`` coordinates, of which only its own block is not empty. It then runs
the paper's basic randomizer (Algorithm 1) on that vector: it samples one coordinate ``j`` uniformly and
sends ``(j, y)`` where ``y`` is the coordinate's bit kept with probability ``p = e^eps / (e^eps + 1)``
(flipped otherwise) when ``j`` lies in its own block, and a fair coin when it does not. Half of the clients,
chosen with exact uniform coins independently of their values, do this; the other half report through a
:class:`~kakeibo.ldp.hashtogram.Hashtogram`, which counts the candidates (the paper's frequency oracle
PROT-FO; kakeibo's Hashtogram is its hashed, median-of-repetitions form).

The server sums ``2y - 1`` per coordinate, reads each block's codeword from the signs (the paper's
rounding step) and decodes it: one candidate key per block, kept when it hashes back to its block.

The code is the Hamming (7,4) code on each 4-bit group of the key (``L = 7 ceil(bits / 4)``), which
corrects one wrong bit in every 7: a concrete code in place of the paper's asymptotically good one (constant
rate and distance), which it needs only for its asymptotic analysis.

Error. A coordinate receives about ``n_s / (K L)`` of the ``n_s ~ n / 2`` sketching clients, and the holders
of a key ``v`` reach each coordinate of their block at that same rate, so the sign of coordinate ``(h(v),
l)`` is right when ``(2p - 1) f_v / (K L)`` (``f_v`` the key's sketching holders, net of the other keys in
its block) exceeds ``z`` standard deviations ``sqrt(n_s / (K L))``: for every bit, in population units, a
count above ``2 z sqrt(n_s K L) / (2p - 1)`` (:meth:`SuccinctHistogram.bit_threshold`, which ignores the
code's correction and so is conservative). The paper's Thm. 4.3 bound, ``O(sqrt(n log(d) / ...) / eps)``
with ``K`` chosen from the number of heavy hitters, grows like ``sqrt(K)`` at fixed ``n``: the blocks share
the clients.

Privacy. Neighbour relation: local, any two values of one client. Sensitivity: not applicable. Privacy
loss: ``PureDP(epsilon)`` per client: the half, the coordinate ``j`` and the hash are independent of the
value, and given ``j`` the bit is one of ``Bernoulli(p)``, ``Bernoulli(1 - p)`` and ``Bernoulli(1/2)``,
whose probabilities are within ``e^eps`` of each other (``2p <= e^eps`` since ``e^eps >= 1``); ``p`` is
rounded down to a dyadic rational and checked exactly.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from fractions import Fraction
from typing import Any, ClassVar

import numpy as np
from numpy.typing import ArrayLike, NDArray
from scipy.special import ndtri

from ..mechanisms.base import Rng, check_beta
from ..noise import resolve_source
from ..noise.exact import uniform_below
from ..noise.source import RandomSource
from ..privacy import Number
from ._coins import bernoulli_words, flip_probability, unpack_bits
from ._hash import HashFamily
from .counted import CountedHeavyHitters
from .framework import IntArray, check_integer, check_payload_range
from .reports import Param, Reports

__all__ = ["SuccinctHistogram", "codeword_bits", "hamming_decode", "hamming_encode"]

#: Hamming (7,4) generator: codeword bits (p1, p2, d1, p3, d2, d3, d4) from data bits (d1, d2, d3, d4).
_GENERATOR = np.array(
    [
        [1, 1, 1, 0, 0, 0, 0],
        [1, 0, 0, 1, 1, 0, 0],
        [0, 1, 0, 1, 0, 1, 0],
        [1, 1, 0, 1, 0, 0, 1],
    ],
    dtype=np.int64,
)
#: Parity checks: the syndrome ``s1 + 2 s2 + 4 s3`` is the (1-based) position of a single wrong bit.
_CHECKS = np.array([[1, 0, 1, 0, 1, 0, 1], [0, 1, 1, 0, 0, 1, 1], [0, 0, 0, 1, 1, 1, 1]], dtype=np.int64)
#: Positions of the data bits (d1, d2, d3, d4) in a codeword.
_DATA = np.array([2, 4, 5, 6])


def hamming_encode(keys: IntArray, bits: int) -> NDArray[np.uint8]:
    """Each key's Hamming (7,4) codeword, nibble by nibble from the lowest: shape ``(n, 7 ceil(bits/4))``.
    Key ``0b1011`` has data bits ``d1..d4 = 1, 1, 0, 1`` (lowest first), so ``p1 = d1^d2^d4 = 1``, ``p2 =
    d1^d3^d4 = 0``, ``p3 = d2^d3^d4 = 0``:

    >>> hamming_encode(np.array([0b1011]), 4).tolist()
    [[1, 0, 1, 0, 1, 0, 1]]
    """
    nibbles = -(-bits // 4)
    data = (keys[:, None] >> (4 * np.arange(nibbles))[None, :]) & 15
    data_bits = (data[:, :, None] >> np.arange(4)[None, None, :]) & 1  # (n, nibbles, 4): d1 is bit 0
    return np.asarray((data_bits @ _GENERATOR) % 2, dtype=np.uint8).reshape(keys.size, 7 * nibbles)


def codeword_bits(keys: IntArray, positions: IntArray) -> NDArray[np.uint8]:
    """Bit ``positions[i]`` of the Hamming (7,4) codeword of ``keys[i]``, computed from its one nibble (a
    client sends one bit of its codeword and needs no other).

    >>> codeword_bits(np.array([0b1011, 0b1011]), np.array([0, 1])).tolist()
    [1, 0]
    """
    block, offset = np.divmod(positions, 7)
    nibble = (keys >> (4 * block)) & 15
    data_bits = (nibble[:, None] >> np.arange(4)[None, :]) & 1
    return np.asarray((data_bits * _GENERATOR[:, offset].T).sum(axis=1) % 2, dtype=np.uint8)


def hamming_decode(codewords: NDArray[np.uint8]) -> IntArray:
    """The keys of ``(m, 7 b)`` codewords, correcting one wrong bit in each 7 (inverse of
    :func:`hamming_encode`).

    >>> word = hamming_encode(np.array([0b1011]), 4)
    >>> word[0, 5] ^= 1
    >>> hamming_decode(word).tolist()
    [11]
    """
    blocks = codewords.reshape(codewords.shape[0], -1, 7).astype(np.int64)
    syndrome = ((blocks @ _CHECKS.T) % 2) @ np.array([1, 2, 4])
    wrong = syndrome > 0
    rows, nibble = np.nonzero(wrong)
    blocks[rows, nibble, syndrome[wrong] - 1] ^= 1
    data = blocks[:, :, _DATA] @ (1 << np.arange(4))
    return np.asarray(data @ (1 << (4 * np.arange(data.shape[1]))), dtype=np.int64)


class SuccinctHistogram(CountedHeavyHitters):
    """Bassily and Smith's succinct histogram over ``bits``-bit keys with ``blocks`` (``K``) hash blocks,
    the ``k`` largest candidates returned with counts from a Hashtogram of ``count_buckets`` buckets and
    ``repetitions`` repetitions (module docstring).

    * Neighbour relation: local, any two values of one client.
    * Sensitivity: not applicable (each client randomizes its own value once).
    * Privacy loss: ``PureDP(epsilon)`` per client.

    >>> succinct = SuccinctHistogram(epsilon=4, bits=16, k=2, blocks=4)
    >>> values = np.repeat([7, 40_000, 12], [60_000, 40_000, 100])
    >>> found = succinct.estimate(succinct.randomize(values, rng=np.random.default_rng(3)))
    >>> found.values.tolist()
    [7, 40000]
    """

    protocol: ClassVar[str] = "SuccinctHistogram"

    def __init__(
        self,
        *,
        epsilon: Number,
        bits: int,
        k: int,
        blocks: int = 16,
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
        self._blocks = check_integer(blocks, "blocks", 1, 1 << 16)
        self._length = 7 * -(-self._bits // 4)
        self._hash = HashFamily(seed=hash_seed, count=1, buckets=max(self._blocks, 2))
        self._p = 1 - flip_probability(self._epsilon, "succinct histogram")

    @property
    def blocks(self) -> int:
        return self._blocks

    @property
    def code_length(self) -> int:
        """``L``: bits of a key's codeword."""
        return self._length

    @property
    def coordinates(self) -> int:
        """``K L``: the coordinates a sketching client samples one of."""
        return self._blocks * self._length

    @property
    def p(self) -> float:
        """Probability that a client keeps its own coordinate's bit (dyadic, at most ``e^eps/(e^eps+1)``)."""
        return float(self._p)

    @property
    def report_bits(self) -> int:
        """Bits of a sketching report: the coordinate and the bit."""
        return (self.coordinates - 1).bit_length() + 1

    @property
    def groups(self) -> int:
        """Two: the sketching half, the Hashtogram half."""
        return 2

    def group_params(self, group: int) -> dict[str, Param]:
        """Group 0 sketches, group 1 reports through the Hashtogram."""
        if group == 1:
            return self._count_params()
        return {
            "epsilon": str(self._epsilon),
            "bits": self._bits,
            "blocks": self._blocks,
            "code": "hamming-7-4",
            "hash_seed": self._hash.seed,
            "p": str(self._p),
            "group": 0,
            "heavy_hitters": repr(self),
        }

    def __repr__(self) -> str:
        return (
            f"SuccinctHistogram(epsilon={self.epsilon!r}, bits={self._bits}, k={self._k}, "
            f"blocks={self._blocks}, count_buckets={self._counts.buckets}, "
            f"repetitions={self._counts.repetitions}, hash_seed={self._hash.seed})"
        )

    def randomize(self, values: ArrayLike | Sequence[Any], rng: Rng = None) -> list[Reports]:
        """One epsilon-LDP report per client, in two batches: the sketching half's, the Hashtogram half's."""
        keys = self.encode(values)
        source = resolve_source(rng)
        counted = uniform_below(2, keys.size, source).astype(np.bool_)
        return [self._sketch(keys[~counted], source), self._count_batch(keys[counted], source)]

    def _sketch(self, keys: IntArray, source: RandomSource) -> Reports:
        """Algorithm 1 of the paper on ``e_h(v) (x) c(v)``: one uniform coordinate and its randomized bit."""
        n = keys.size
        coordinate = uniform_below(self.coordinates, n, source)
        block, position = np.divmod(coordinate, self._length)
        own = block == self._block_of(keys)
        codeword_bit = codeword_bits(keys, position)
        words = -(-n // 64)
        kept = unpack_bits(bernoulli_words(self._p, words, source), n)
        fair = unpack_bits(bernoulli_words(Fraction(1, 2), words, source), n)
        bit = np.where(own, codeword_bit ^ (1 - kept), fair).astype(np.uint8)
        arrays: dict[str, NDArray[Any]] = {"coordinate": coordinate.astype(np.uint32), "bit": bit}
        return Reports(self.protocol, self.group_params(0), arrays)

    def _block_of(self, keys: IntArray) -> IntArray:
        if self._blocks == 1:
            return np.zeros(keys.size, dtype=np.int64)
        return self._hash.hash(np.zeros(keys.size, dtype=np.int64), keys.astype(np.uint64))

    # -- server --------------------------------------------------------------------------------------------
    def _candidates(self, groups: Sequence[Reports]) -> IntArray:
        """One decoded key per block, kept when it hashes back to its block."""
        sketch = groups[0]
        signs = 2 * sketch["bit"].astype(np.float64) - 1
        sums = np.bincount(sketch["coordinate"].astype(np.intp), weights=signs, minlength=self.coordinates)
        codewords = (sums.reshape(self._blocks, self._length) > 0).astype(np.uint8)
        keys = hamming_decode(codewords)
        valid = (keys < (1 << self._bits)) & (self._block_of(keys) == np.arange(self._blocks))
        return np.unique(keys[valid])

    def bit_threshold(self, n: int, beta: float = 0.05) -> float:
        """The count above which a key alone in its block has every codeword bit's sign right with
        probability at least ``1 - beta`` (normal approximation, Bonferroni over the ``L`` bits; the code's
        correction ignored): ``2 z sqrt((n / 2) K L) / (2p - 1)``, ``z = Phi^-1(1 - beta / L)``."""
        check_beta(beta, "beta")
        z = float(-ndtri(beta / self._length))
        return 2 * z * math.sqrt(n / 2 * self.coordinates) / (2 * self._p - 1)

    def _check_finding(self, batch: Reports) -> None:
        check_payload_range(batch, "coordinate", self.coordinates)
        check_payload_range(batch, "bit", 2)
