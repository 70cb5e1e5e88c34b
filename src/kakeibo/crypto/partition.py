"""DP summaries of a histogram for range counts: a partition of the bins into consecutive blocks, each with
one noisy count, answered by spreading a block's count evenly over its bins.

Two ways to choose the blocks, both computable by servers that see only ciphertexts and noisy values:

* **Equi-width** (Crypto-epsilon's DP index, Roy Chowdhury et al., SIGMOD 2020; seed 002 p.99): blocks of
  ``width`` bins, chosen without the data; the whole epsilon goes to the counts.
* **HE-friendly partitioning** (Ushiyama, Takahashi, Kudo and Yamana, IEEE BigData 2022; seed 002 p.101):
  with ``epsilon = epsilon_1 + epsilon_2``, the gap between every two adjacent bins, ``g_i = x_{i+1} - x_i``,
  is released with noise at ``epsilon_1`` and compared with the threshold ``t = 1/epsilon_2`` (the noise
  scale of a block's count): a gap above ``t`` divides, one at or below merges. One pass over the ``n - 1``
  gaps, ``O(n)`` (a data-aware partition such as DAWA's compares every interval, DP-Summary's cost over
  ciphertexts). The slide's example: ``epsilon = 0.5``, ``epsilon_1 = 0.125``, ``epsilon_2 = 0.375``,
  ``t = 2.67``, seven bins into ``{{1,2},{3,4,5},{6,7}}`` (``tests/test_crypto_summary.py``).

**Neighbour relation and sensitivities.** One person added or removed, with every row they hold; each data
owner keeps at most ``max_rows`` rows of a person before encrypting, and a person may appear at up to
``owners_per_person`` owners, so one person moves the histogram by at most ``sensitivity = max_rows *
owners_per_person`` in L1. The gap vector then moves by at most ``2 * sensitivity`` in L1 (a bin's change
enters two gaps), the block counts by at most ``sensitivity`` (blocks are disjoint). Each released vector
gets two-sided geometric noise at its sensitivity over its share of epsilon (:class:`~kakeibo.mechanisms.
Geometric`), so the partition is ``epsilon_1``-DP, the counts ``epsilon_2``-DP given the partition, and the
summary ``epsilon``-DP by sequential composition. Range counts read from the summary are post-processing.

**Two servers, two noises.** In the encrypted protocol (:mod:`kakeibo.crypto.parties`) no single party may
know the noise of a value another party sees in the clear. Each of the two servers adds an independent
draw at the full calibration (as Crypto-epsilon's servers do): the crypto service provider decrypts values
noised by the analytics server, the analytics server learns values noised by the provider, and each view is
DP from the other's noise alone. The answer carries both noises (twice the variance of a trusted curator);
``parties = 1`` is kakeibo's plaintext summary with one noise, for comparison.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

import numpy as np
from numpy.typing import ArrayLike, NDArray

from .. import release
from ..accounting import Ledger, LedgerEntry
from ..errors import ArgumentError
from ..mechanisms import Geometric
from ..mechanisms.accuracy import geometric_sum_error
from ..mechanisms.base import check_beta
from ..noise.source import RandomSource
from ..privacy import Number, PureDP, positive_fraction

__all__ = ["METHODS", "Partition", "RangeCount", "Segments", "Summary", "SummaryPlan", "cumulative_at_ends"]

IntArray = NDArray[np.int64]
#: a range count's cells: disjoint ranges ``(lo, hi)`` of cells, inclusive, in increasing order (one for a
#: range of one attribute; a box of several is one range per row of its leading attributes, :class:`Grid`)
Segments = tuple[tuple[int, int], ...]
#: the largest noise scale a plan accepts: the provider encrypts its cumulative block noise, which must stay
#: within :data:`~kakeibo.crypto.he.CAPACITY` (2^37); a sum of 65,536 draws at scale 2^24 has a standard
#: deviation near 2^33, so exceeding it would take a deviation of more than 16 of them
MAX_NOISE_SCALE = 2**24
#: how a summary chooses its blocks
METHODS = ("he-friendly", "equi-width")


@dataclass(frozen=True)
class Partition:
    """Consecutive blocks of the bins ``0 .. bins - 1``: block ``b`` holds the bins ``ends[b - 1] + 1 ..
    ends[b]`` (``ends`` increasing, the last one ``bins - 1``)."""

    ends: tuple[int, ...]

    def __post_init__(self) -> None:
        e = self.ends
        if not e or e[0] < 0 or any(b <= a for a, b in itertools.pairwise(e)):
            raise ArgumentError("a partition's block ends must increase from 0.")

    @property
    def bins(self) -> int:
        return self.ends[-1] + 1

    @property
    def blocks(self) -> int:
        return len(self.ends)

    @property
    def starts(self) -> tuple[int, ...]:
        """Each block's first bin."""
        return (0, *(e + 1 for e in self.ends[:-1]))

    @property
    def sets(self) -> list[list[int]]:
        """The blocks as lists of bins (the slide's ``B``, counted from 0)."""
        return [list(range(s, e + 1)) for s, e in zip(self.starts, self.ends, strict=True)]

    @classmethod
    def equi_width(cls, bins: int, width: int) -> Partition:
        """Blocks of ``width`` bins (the last one shorter when ``width`` does not divide ``bins``)."""
        if width < 1 or bins < 1:
            raise ArgumentError("an equi-width partition needs at least one bin and a positive width.")
        return cls(tuple(min(e, bins) - 1 for e in range(width, bins + width, width)))

    @classmethod
    def from_gaps(cls, noisy_gaps: IntArray, threshold: Fraction) -> Partition:
        """HE-friendly partitioning's one pass: divide between bins ``i`` and ``i + 1`` when ``|noisy gap i|
        > threshold``, merge otherwise (``noisy_gaps`` has ``bins - 1`` entries)."""
        gaps = np.asarray(noisy_gaps, np.int64)
        # |g| > p/q  <=>  |g| q > p, in Python integers: exact
        above = [abs(int(g)) * threshold.denominator > threshold.numerator for g in gaps]
        return cls((*(i for i, cut in enumerate(above) if cut), gaps.size))

    def _segments(self, segments: Segments) -> Segments:
        ordered = tuple((int(lo), int(hi)) for lo, hi in segments)
        if not ordered or any(not 0 <= lo <= hi < self.bins for lo, hi in ordered):
            raise ArgumentError(
                f"a range count is one or more ranges lo .. hi with 0 <= lo <= hi < {self.bins}."
            )
        if any(b[0] <= a[1] for a, b in itertools.pairwise(ordered)):
            raise ArgumentError("a range count's ranges must be disjoint and in increasing order.")
        return ordered

    def terms(self, segments: Segments) -> list[tuple[int, Fraction]]:
        """The count over the bins of ``segments`` (disjoint ranges ``lo .. hi``, inclusive) as ``sum of w *
        S[e]`` over block ends ``e`` (at most four per range), where ``S[e]`` is the cumulative (noisy) count
        of every block up to the one ending at ``e``: full blocks by a difference of two ends, a partly
        covered block by its share of its own count."""
        out: dict[int, Fraction] = {}

        def add(end: int, w: Fraction) -> None:
            out[end] = out.get(end, Fraction(0)) + w

        starts = self.starts
        for lo, hi in self._segments(segments):
            first, last = (int(np.searchsorted(self.ends, b)) for b in (lo, hi))
            for block in {first, last}:  # the ends: each by its covered share of its own count
                start = starts[block]
                covered = min(hi, self.ends[block]) - max(lo, start) + 1
                w = Fraction(covered, self.ends[block] - start + 1)
                add(self.ends[block], w)
                if block > 0:
                    add(self.ends[block - 1], -w)
            if last - first >= 2:  # the whole blocks between telescope: S[end of last - 1] - S[end of first]
                add(self.ends[last - 1], Fraction(1))
                add(self.ends[first], Fraction(-1))
        return [(e, w) for e, w in sorted(out.items()) if w != 0]

    def shares(self, segments: Segments) -> NDArray[np.float64]:
        """The share of each block the ranges cover (the weights on the blocks' noises)."""
        starts = np.asarray(self.starts, np.int64)
        ends = np.asarray(self.ends, np.int64)
        covered = np.zeros(ends.size, np.int64)
        for lo, hi in self._segments(segments):
            covered += np.clip(np.minimum(hi, ends) - np.maximum(lo, starts) + 1, 0, None)
        shares: NDArray[np.float64] = covered / (ends - starts + 1)
        return shares


@dataclass(frozen=True)
class SummaryPlan:
    """The public parameters every party of a summary agrees on.

    ``sensitivity`` is one person's largest L1 move of the histogram (``max_rows * owners_per_person``);
    ``split`` the share of epsilon the HE-friendly partition spends on its gaps (the slide's 0.125 of 0.5 is
    1/4); ``threshold`` defaults to the count noise's scale ``sensitivity / epsilon_2``; ``width`` is the
    equi-width blocks' width; ``parties`` the number of servers that each add a full draw of noise."""

    method: str
    epsilon: Fraction
    bins: int
    sensitivity: int = 1
    split: Fraction = Fraction(1, 4)
    threshold: Fraction | None = None
    width: int = 1
    parties: int = 2

    @classmethod
    def of(
        cls,
        method: str,
        epsilon: Number,
        bins: int,
        *,
        sensitivity: int = 1,
        split: Number = Fraction(1, 4),
        threshold: Number | None = None,
        width: int = 1,
        parties: int = 2,
    ) -> SummaryPlan:
        """Validated parameters (a bad one is refused by name, before anything is encrypted)."""
        if method not in METHODS:
            raise ArgumentError(f"method must be one of {', '.join(METHODS)}, got {method!r}.")
        for name, value, low in (("bins", bins, 2), ("sensitivity", sensitivity, 1), ("width", width, 1)):
            if isinstance(value, bool) or not isinstance(value, int) or value < low:
                raise ArgumentError(f"{name} must be an integer of at least {low}, got {value!r}.")
        if parties not in (1, 2):
            raise ArgumentError("parties is 1 (a trusted curator) or 2 (the two servers).")
        share = positive_fraction(split, "split")
        if share >= 1:
            raise ArgumentError("split is the partition's share of epsilon: strictly between 0 and 1.")
        t = None if threshold is None else positive_fraction(threshold, "threshold")
        plan = cls(method, positive_fraction(epsilon, "epsilon"), bins, sensitivity, share, t, width, parties)
        noises = [plan.count_noise] + ([plan.gap_noise] if method == "he-friendly" else [])
        if max(n.scale for n in noises) > MAX_NOISE_SCALE:
            raise ArgumentError(
                "epsilon is too small for an encrypted summary: its noise would not fit the encryption's "
                "plaintext space (a noise scale of at most 2^24, sensitivity / epsilon)."
            )
        return plan

    @property
    def privacy_loss(self) -> PureDP:
        return PureDP(self.epsilon)

    @property
    def gap_epsilon(self) -> Fraction:
        return self.epsilon * self.split if self.method == "he-friendly" else Fraction(0)

    @property
    def gap_noise(self) -> Geometric:
        """Each party's noise on the gaps: sensitivity ``2 * sensitivity`` at ``epsilon_1``."""
        if self.method != "he-friendly":
            raise ArgumentError("only the HE-friendly partition releases gaps.")
        return Geometric(sensitivity=2 * self.sensitivity, epsilon=self.gap_epsilon)

    @property
    def count_noise(self) -> Geometric:
        """Each party's noise on the block counts: ``sensitivity`` at ``epsilon_2``."""
        return Geometric(sensitivity=self.sensitivity, epsilon=self.epsilon - self.gap_epsilon)

    @property
    def cut_threshold(self) -> Fraction:
        """``t``: the given threshold, else the count noise's scale ``sensitivity / epsilon_2``."""
        return self.threshold or Fraction(self.sensitivity) / (self.epsilon - self.gap_epsilon)

    def fixed_partition(self) -> Partition:
        """The equi-width partition (chosen without the data)."""
        if self.method != "equi-width":
            raise ArgumentError("only the equi-width partition is chosen without the data.")
        return Partition.equi_width(self.bins, self.width)

    def partition(self, noisy_gaps: IntArray) -> Partition:
        """The HE-friendly partition of gaps released with every party's noise."""
        if np.asarray(noisy_gaps).shape != (self.bins - 1,):
            raise ArgumentError(f"a histogram of {self.bins} bins has {self.bins - 1} gaps.")
        return Partition.from_gaps(noisy_gaps, self.cut_threshold)

    def noise(self, mechanism: Geometric, size: int, source: RandomSource) -> IntArray:
        """One party's draw of ``mechanism``'s noise on ``size`` values."""
        noise: IntArray = mechanism.release(np.zeros(size, np.int64), rng=source)
        return noise

    def error_bound(self, partition: Partition, segments: Segments, beta: float) -> float:
        """``a`` with ``Pr(|answer - noise-free answer| > a) <= beta`` for the range ``lo .. hi``: the noise
        only (each block's count spread evenly over its bins is the noise-free answer; how far that is from
        the true count depends on the data and is not bounded here). Every covered block carries
        ``parties`` independent geometric draws; :func:`~kakeibo.mechanisms.accuracy.geometric_sum_error`."""
        check_beta(beta)
        shares = partition.shares(segments)
        weights = np.repeat(shares[shares > 0], self.parties)
        noise = self.count_noise
        union = float(weights.sum()) * noise.error_bound(beta / weights.size)
        return min(union, geometric_sum_error(scale=noise.scale, weights=weights, beta=beta))


def cumulative_at_ends(partition: Partition, block_values: IntArray) -> IntArray:
    """A vector over the bins holding, at each block's end, the sum of ``block_values`` over that block and
    every block before it, and 0 elsewhere (the summary's layout: a range count reads at most four ends)."""
    out = np.zeros(partition.bins, np.int64)
    out[list(partition.ends)] = np.cumsum(np.asarray(block_values, np.int64))
    return out


@dataclass(frozen=True)
class RangeCount:
    """A count over the cells ``segments`` read from a summary: ``value``, and ``error`` with
    ``Pr(|value - noise-free value| > error) <= 1 - confidence`` (the noise only: see
    :meth:`SummaryPlan.error_bound`)."""

    segments: Segments
    value: float
    error: float
    confidence: float

    @classmethod
    def of(
        cls, plan: SummaryPlan, partition: Partition, cumulative: IntArray, segments: Segments, beta: float
    ) -> RangeCount:
        """The answer from the cumulative noisy counts at the block ends (exact rationals, rounded once)."""
        terms = partition.terms(segments)
        value = float(sum((w * int(cumulative[e]) for e, w in terms), Fraction(0)))
        return cls(tuple(segments), value, plan.error_bound(partition, segments, beta), 1 - beta)


@dataclass(frozen=True)
class Summary:
    """kakeibo's plaintext summary: the same partition and noisy counts as the encrypted protocol, computed
    by one trusted process from the histogram (``plan.parties`` draws of each noise: 1 for a trusted
    curator, 2 for the protocol's distribution), charged once through :func:`kakeibo.release.run`."""

    plan: SummaryPlan
    partition: Partition
    cumulative: IntArray
    ledger_entry: LedgerEntry | None

    @classmethod
    def build(
        cls,
        histogram: ArrayLike,
        plan: SummaryPlan,
        ledger: Ledger,
        *,
        rng: Any = None,
        label: str = "summary",
    ) -> Summary:
        h = np.asarray(histogram)
        if h.shape != (plan.bins,) or not np.issubdtype(h.dtype, np.integer) or (h < 0).any():
            raise ArgumentError(f"a histogram is {plan.bins} non-negative integer counts.")

        def draw(source: RandomSource) -> tuple[Partition, IntArray]:
            def noise(mechanism: Geometric, size: int) -> IntArray:
                return sum((plan.noise(mechanism, size, source) for _ in range(plan.parties)), np.int64(0))

            if plan.method == "equi-width":
                partition = plan.fixed_partition()
            else:
                partition = plan.partition(np.diff(h) + noise(plan.gap_noise, plan.bins - 1))
            counts = np.add.reduceat(h.astype(np.int64), partition.starts)
            return partition, cumulative_at_ends(
                partition, counts + noise(plan.count_noise, partition.blocks)
            )

        out = release.run(ledger, release.Charge(plan.privacy_loss, label), draw, rng=rng)
        return cls(plan, out.value[0], out.value[1], out.ledger_entry)

    def count(self, segments: Segments, beta: float = 0.05) -> RangeCount:
        """The count over the cells of ``segments`` (see :data:`Segments`)."""
        return RangeCount.of(self.plan, self.partition, self.cumulative, segments, beta)

    def range_count(self, lo: int, hi: int, beta: float = 0.05) -> RangeCount:
        """The count over the cells ``lo .. hi``."""
        return self.count(((lo, hi),), beta)
