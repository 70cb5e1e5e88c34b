"""The parties of an encrypted DP summary (Crypto-epsilon's architecture, Roy Chowdhury et al., SIGMOD 2020;
HE-friendly partitioning over it, Ushiyama et al., IEEE BigData 2022; seed 002 p.99-101).

* **Data owners** (:class:`DataOwner`) bound each person's rows, histogram them over the public
  :class:`Domain` and encrypt two linear encodings of the histogram under the provider's public key: its
  adjacent gaps and its prefix sums (linear, so the owners' ciphertexts simply add up, and the server never
  needs a rotation).
* **The analytics server** (:class:`AnalyticsServer`) holds the public key only. It adds the owners'
  ciphertexts, adds its own noise to the encrypted gaps for the provider to decrypt, builds the encrypted
  summary (the prefix sums at the block ends, masked everywhere else, plus both parties' cumulative noise),
  and for each range count masks the summary down to the at most four block ends the answer reads.
* **The crypto service provider** (:class:`CryptoServiceProvider`) holds the secret key and the ledger.
  It decrypts only values that carry the server's noise: the noisy gaps (adding its own noise and choosing
  the partition, inside one charged release) and the masked summary of each query. The summary is charged
  once, when the provider's noise enters it; range counts read from it are post-processing.

What each party sees, and which noise covers it, is the threat table in ``docs/architecture.md`` ("Encrypted
summaries"). The servers are semi-honest and do not collude: a server that deviated (sending the provider
an unnoised ciphertext to decrypt) would learn data, and nothing here can stop it; the provider does refuse
a query ciphertext with values outside the slots the query reads.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import ArrayLike, NDArray

from .. import release
from ..accounting import Ledger, LedgerEntry
from ..errors import ArgumentError, Error
from ..mechanisms import Geometric
from ..noise import resolve_source
from ..noise.source import RandomSource
from .he import KeyPair, PublicKey
from .partition import Partition, RangeCount, Segments, SummaryPlan, cumulative_at_ends

__all__ = [
    "MAX_OWNERS",
    "MAX_OWNER_ROWS",
    "AnalyticsServer",
    "CryptoServiceProvider",
    "DataOwner",
    "Domain",
    "Grid",
    "ProtocolError",
    "Upload",
    "bounded_histogram",
    "kept_rows",
]

IntArray = NDArray[np.int64]
#: an owner's histogram holds at most 2^32 rows and a server adds at most 32 owners: every prefix sum stays
#: within 2^37 (:data:`~kakeibo.crypto.he.CAPACITY`), so no encrypted sum can wrap
MAX_OWNER_ROWS = 2**32
MAX_OWNERS = 32


class ProtocolError(Error):
    """A party received a message the protocol does not allow (the semi-honest assumption broke)."""


@dataclass(frozen=True)
class Domain:
    """The public binning of one numeric attribute: ``bins`` equal bins over ``[lower, upper]``; values
    outside are clamped into the first or last bin."""

    lower: float
    upper: float
    bins: int

    def __post_init__(self) -> None:
        if not (np.isfinite(self.lower) and np.isfinite(self.upper) and self.upper / 2 - self.lower / 2 > 0):
            raise ArgumentError(
                "a domain needs finite bounds with lower < upper (apart by more than 1e-323)."
            )
        if isinstance(self.bins, bool) or not isinstance(self.bins, int) or self.bins < 2:
            raise ArgumentError(f"a domain needs at least 2 bins, got {self.bins!r}.")

    @property
    def cells(self) -> int:
        return self.bins

    def cell_of(self, values: ArrayLike) -> IntArray:
        """The bin of each value. Halves are subtracted, so no difference overflows at +-1e308; the
        position is clipped before the cast, so infinities land in the end bins. NaN is refused."""
        v = np.asarray(values, np.float64)
        if v.ndim != 1:
            raise ArgumentError("the values of one attribute are a vector.")
        if np.isnan(v).any():
            raise ArgumentError("a value to histogram is NaN: drop or impute it before encrypting.")
        with np.errstate(over="ignore"):  # a value far outside a narrow domain: +-inf, clipped below
            position = (v / 2 - self.lower / 2) / (self.upper / 2 - self.lower / 2) * self.bins
        return np.floor(np.clip(position, 0, self.bins - 1)).astype(np.int64)

    def segments(self, lows: Sequence[int], highs: Sequence[int]) -> Segments:
        """The range of bins ``lows[0] .. highs[0]``, as :class:`Grid` gives a box."""
        return Grid((self,)).segments(lows, highs)


@dataclass(frozen=True)
class Grid:
    """The public binning of several numeric attributes: the cells of the product of their domains,
    numbered row-major (the last attribute varies fastest), so a histogram over them is one vector and an
    axis-aligned box is one range of cells per row of its leading attributes (:meth:`segments`)."""

    axes: tuple[Domain, ...]

    def __post_init__(self) -> None:
        if not self.axes or not all(isinstance(a, Domain) for a in self.axes):
            raise ArgumentError("a grid is one or more Domains.")

    @property
    def cells(self) -> int:
        return math.prod(a.bins for a in self.axes)

    def cell_of(self, values: ArrayLike) -> IntArray:
        """The cell of each row of ``values`` (rows by attributes)."""
        v = np.asarray(values, np.float64)
        if v.ndim == 1 and len(self.axes) == 1:
            v = v[:, None]
        if v.ndim != 2 or v.shape[1] != len(self.axes):
            raise ArgumentError(f"values are rows of {len(self.axes)} attributes.")
        bins = tuple(a.cell_of(v[:, i]) for i, a in enumerate(self.axes))
        cells: IntArray = np.ravel_multi_index(bins, tuple(a.bins for a in self.axes)).astype(np.int64)
        return cells

    def segments(self, lows: Sequence[int], highs: Sequence[int]) -> Segments:
        """The cells of the box ``lows[i] <= bin of attribute i <= highs[i]`` (inclusive), as disjoint
        increasing ranges (adjacent ones merged)."""
        sizes = tuple(a.bins for a in self.axes)
        if len(lows) != len(sizes) or len(highs) != len(sizes):
            raise ArgumentError(f"a box gives a low and a high bin for each of the {len(sizes)} attributes.")
        if any(not 0 <= lo <= hi < n for lo, hi, n in zip(lows, highs, sizes, strict=True)):
            raise ArgumentError("a box's bins must satisfy 0 <= low <= high < bins, on every attribute.")
        out: list[tuple[int, int]] = []
        leading = [range(int(lo), int(hi) + 1) for lo, hi in zip(lows[:-1], highs[:-1], strict=True)]
        for row in itertools.product(*leading):
            base = int(np.ravel_multi_index((*row, 0), sizes))
            lo, hi = base + int(lows[-1]), base + int(highs[-1])
            if out and out[-1][1] + 1 == lo:
                out[-1] = (out[-1][0], hi)
            else:
                out.append((lo, hi))
        return tuple(out)


def kept_rows(persons: ArrayLike, max_rows: int, rng: Any = None) -> IntArray:
    """The indices of at most ``max_rows`` rows of each person, chosen uniformly at random among theirs (a
    data owner's own coin, before anything leaves it, as DP SQL bounds a person's rows)."""
    if isinstance(max_rows, bool) or not isinstance(max_rows, int) or max_rows < 1:
        raise ArgumentError(f"max_rows must be a positive integer, got {max_rows!r}.")
    who = np.asarray(persons)
    if who.ndim != 1:
        raise ArgumentError("persons must be a vector.")
    if who.size > MAX_OWNER_ROWS:
        raise ArgumentError(f"one owner holds at most 2^32 rows, got {who.size}.")
    _, person = np.unique(who, return_inverse=True)
    order = np.lexsort((resolve_source(rng).words(who.size), person))  # each person's rows, shuffled
    sorted_person = person[order]
    first = np.r_[0, np.flatnonzero(np.diff(sorted_person)) + 1]
    rank = np.arange(who.size) - np.repeat(first, np.diff(np.r_[first, who.size]))
    kept: IntArray = np.sort(order[rank < max_rows])
    return kept


def bounded_histogram(
    persons: ArrayLike, values: ArrayLike, domain: Domain | Grid, max_rows: int, rng: Any = None
) -> IntArray:
    """The histogram over ``domain``'s cells of the rows :func:`kept_rows` keeps: one person moves it by at
    most ``max_rows`` in L1."""
    cells = domain.cell_of(values)
    if np.shape(persons) != cells.shape:
        raise ArgumentError("persons and values must have one row each.")
    return np.bincount(cells[kept_rows(persons, max_rows, rng)], minlength=domain.cells).astype(np.int64)


@dataclass(frozen=True)
class Upload:
    """One owner's encrypted encodings: the gaps (``bins - 1`` slots) and the prefix sums (``bins``)."""

    gaps: list[bytes]
    prefix: list[bytes]
    bins: int


class DataOwner:
    """A data owner: its rows stay here; it sends only ciphertexts of its bounded histogram."""

    def __init__(
        self, persons: ArrayLike, values: ArrayLike, domain: Domain | Grid, max_rows: int, rng: Any = None
    ) -> None:
        self.histogram = bounded_histogram(persons, values, domain, max_rows, rng)

    def upload(self, public_key: bytes) -> Upload:
        key = PublicKey(public_key)
        h = self.histogram
        return Upload(key.encrypt(np.diff(h)).serialize(), key.encrypt(np.cumsum(h)).serialize(), h.size)


class AnalyticsServer:
    """The server that computes on ciphertexts; it holds the public key only (:class:`PublicKey` refuses
    key bytes with a secret key in them)."""

    def __init__(self, public_key: bytes, plan: SummaryPlan, rng: Any = None) -> None:
        if plan.parties != 2:
            raise ArgumentError("the encrypted protocol has two servers: plan it with parties=2.")
        self.key, self.plan, self._rng = PublicKey(public_key), plan, rng
        self.owners = 0
        self._gaps: Any = None
        self._prefix: Any = None
        self._summary: Any = None
        self._partition: Partition | None = None

    @property
    def holds_secret_key(self) -> bool:
        return self.key.holds_secret_key

    def receive(self, upload: Upload) -> None:
        """Add one owner's ciphertexts."""
        if upload.bins != self.plan.bins:
            raise ProtocolError(f"an upload of {upload.bins} bins for a plan of {self.plan.bins}.")
        if self.owners == MAX_OWNERS:
            raise ProtocolError(f"a server adds at most {MAX_OWNERS} owners' histograms.")
        gaps, prefix = self.key.load(upload.gaps, upload.bins - 1), self.key.load(upload.prefix, upload.bins)
        self._gaps = gaps if self._gaps is None else self._gaps + gaps
        self._prefix = prefix if self._prefix is None else self._prefix + prefix
        self.owners += 1

    def _noise(self, mechanism: Geometric, size: int) -> IntArray:
        """The server's own draw of a two-server noise: it releases nothing itself (only the provider
        decrypts, inside its charged release)."""
        return self.plan.noise(mechanism, size, resolve_source(self._rng))

    def noisy_gaps(self) -> list[bytes]:
        """The encrypted gaps plus the server's noise, for the provider to decrypt."""
        if self._gaps is None:
            raise ProtocolError("no owner has uploaded a histogram.")
        noisy = self._gaps.plus(self._noise(self.plan.gap_noise, self.plan.bins - 1))
        serialized: list[bytes] = noisy.serialize()
        return serialized

    def summarise(self, ends: Sequence[int], provider_noise: list[bytes]) -> None:
        """The encrypted summary: the prefix sums at the block ends (0 elsewhere) plus both parties'
        cumulative block noise."""
        if self._prefix is None:
            raise ProtocolError("no owner has uploaded a histogram.")
        partition = Partition(tuple(int(e) for e in ends))
        if partition.bins != self.plan.bins:
            raise ProtocolError("the partition does not cover the plan's bins.")
        mask = np.zeros(self.plan.bins, np.int64)
        mask[list(partition.ends)] = 1
        own = cumulative_at_ends(partition, self._noise(self.plan.count_noise, partition.blocks))
        theirs = self.key.load(provider_noise, self.plan.bins)
        self._summary = self._prefix.times(mask).plus(own) + theirs
        self._partition = partition

    def query(self, segments: Segments) -> list[bytes]:
        """The summary masked to the block ends the count over ``segments`` reads."""
        if self._summary is None or self._partition is None:
            raise ProtocolError("the summary is not built yet.")
        mask = np.zeros(self.plan.bins, np.int64)
        mask[[e for e, _ in self._partition.terms(segments)]] = 1
        masked: list[bytes] = self._summary.times(mask).serialize()
        return masked


class CryptoServiceProvider:
    """The key holder: decrypts only noisy values, charges the summary to ``ledger`` (a :class:`Ledger` or
    its path) through :func:`kakeibo.release.run`, and keeps the log of every vector it decrypted
    (``decryptions``: the step and the values, the audit trail of what it saw)."""

    def __init__(
        self,
        ledger: Ledger | str,
        plan: SummaryPlan,
        rng: Any = None,
        *,
        label: str = "encrypted summary",
        analyst: str | None = None,
        dataset: str | None = None,
    ) -> None:
        if plan.parties != 2:
            raise ArgumentError("the encrypted protocol has two servers: plan it with parties=2.")
        self.ledger = Ledger(ledger) if isinstance(ledger, str) else ledger
        self.plan, self.rng = plan, rng
        self._charge = release.Charge(plan.privacy_loss, label, analyst, dataset)
        self._keys = KeyPair()
        self._public = self._keys.public()
        self._key = PublicKey(self._public)
        self._partition: Partition | None = None
        self.entry: LedgerEntry | None = None
        self.decryptions: list[tuple[str, IntArray]] = []

    def public_key(self) -> bytes:
        return self._public

    def _decrypt(self, step: str, data: list[bytes], size: int) -> IntArray:
        values = self._keys.decrypt(data, size)
        self.decryptions.append((step, values))
        return values

    def summarise(self, noisy_gaps: list[bytes] | None) -> tuple[tuple[int, ...], list[bytes]]:
        """Choose the partition (from the server's noisy gaps plus the provider's noise, for the HE-friendly
        method) and encrypt the provider's cumulative block noise, in one charged release; returns the
        block ends and that ciphertext for the server."""
        plan, key = self.plan, self._key
        if (noisy_gaps is None) != (plan.method == "equi-width"):
            raise ProtocolError("noisy gaps come with the HE-friendly method, and only with it.")

        def draw(source: RandomSource) -> tuple[Partition, list[bytes]]:
            if noisy_gaps is None:
                partition = plan.fixed_partition()
            else:
                seen = self._decrypt("gaps", noisy_gaps, plan.bins - 1)
                partition = plan.partition(seen + plan.noise(plan.gap_noise, plan.bins - 1, source))
            noise = cumulative_at_ends(partition, plan.noise(plan.count_noise, partition.blocks, source))
            return partition, key.encrypt(noise).serialize()

        out = release.run(self.ledger, self._charge, draw, rng=self.rng)
        self._partition, self.entry = out.value[0], out.ledger_entry
        return out.value[0].ends, out.value[1]

    def answer(self, masked: list[bytes], segments: Segments, beta: float = 0.05) -> RangeCount:
        """The count over ``segments`` from the server's masked summary, with its noise's error bound."""
        if self._partition is None:
            raise ProtocolError("the summary is not built yet.")
        terms = self._partition.terms(segments)
        seen = self._decrypt("query", masked, self.plan.bins)
        outside = np.ones(seen.size, bool)
        outside[[e for e, _ in terms]] = False
        if seen[outside].any():
            raise ProtocolError("the server's query ciphertext holds values the query does not read.")
        return RangeCount.of(self.plan, self._partition, seen, segments, beta)
