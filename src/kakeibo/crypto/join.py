"""A private join of two organisations' tables: they learn a DP contingency table of the joined persons'
attributes, never who is in the intersection (seed 002 p.103: the data join of NTT docomo and JAL, salted
hashes whose salt is deleted, k-anonymity, secure matching and aggregation, DP on the aggregate).

**Protocol.** Each organisation holds rows ``(person, attribute)`` with the attribute one of ``categories``
public values, keeps at most ``max_rows`` rows of each person, and draws a fresh X25519 scalar (its
*blinding key*, the seed's salt) that never leaves its process:

1. each organisation hashes its persons onto the curve, ``H(id)`` (SHA-256 of a tagged encoding, read as
   an X25519 u-coordinate), blinds them with its key, ``a H(id)``, and sends them to the other;
2. each blinds the other's points with its own key, ``b (a H(id)) = ab H(id)`` (X25519 scalar
   multiplication commutes), and sends them, in the other's order, to the **matcher**;
3. each sends the matcher its kept rows' attributes, in its own order;
4. the matcher joins the two lists on ``ab H(id)``, counts the pairs of attributes of every person in both,
   adds two-sided geometric noise to every cell of the ``categories_a x categories_b`` table and suppresses
   the cells whose *noisy* count is below ``k`` (the seed's k-anonymity threshold, applied after the noise so
   it is post-processing), in one release charged to its ledger through :func:`kakeibo.release.run`;
5. the organisations' processes end, and their blinding keys with them.

**Who sees what.** An organisation sees the other's points blinded by a key it does not hold (without it
no candidate identifier can be tested) and the released table. The matcher sees pseudonyms it cannot invert
(both keys would be needed), each organisation's attribute of each pseudonym, the intersection's size and
the exact table: it is the party the seed puts in a TEE. **What a TEE would add, and what is trusted here
instead:** a TEE would attest to both organisations that the matcher runs exactly this code, that it keeps
nothing after the release and that the keys were deleted; here the matcher is an ordinary process the
organisations must trust not to keep or leak the table, and the three parties must not collude (the matcher
with either organisation links that organisation's identifiers to the intersection). The released table is
epsilon-DP whoever receives it.

**Neighbour relation and sensitivity.** One person added or removed with all their rows at both
organisations: a person with ``r_a <= max_rows[0]`` rows at the first and ``r_b <= max_rows[1]`` at the second
contributes ``r_a r_b`` pairs, so the table moves by at most ``max_rows[0] * max_rows[1]`` in L1.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey, X25519PublicKey
from numpy.typing import ArrayLike, NDArray
from scipy import sparse

from .. import release
from ..accounting import Ledger, LedgerEntry
from ..errors import ArgumentError
from ..mechanisms import Geometric
from ..noise.source import RandomSource
from ..privacy import Number, PureDP, positive_fraction
from .parties import ProtocolError, kept_rows
from .protocol import Party

__all__ = ["JoinPlan", "JoinTable", "Matcher", "Organisation", "hash_to_curve", "private_join"]

IntArray = NDArray[np.int64]
_TAG = b"kakeibo.crypto.join/v1:"


def hash_to_curve(persons: ArrayLike) -> list[bytes]:
    """``H(id)``: SHA-256 of a tagged encoding of each identifier (integers and strings; ``7`` and ``"7"``
    differ), read as an X25519 u-coordinate (every 32-byte string is one)."""
    out = []
    for person in np.asarray(persons, dtype=object):
        if isinstance(person, (int, np.integer)) and not isinstance(person, (bool, np.bool_)):
            encoded = b"i" + str(int(person)).encode()
        elif isinstance(person, str):
            encoded = b"s" + person.encode("utf-8", "surrogatepass")
        else:
            raise ArgumentError("a person identifier is an integer or a string.")
        out.append(hashlib.sha256(_TAG + encoded).digest())
    return out


@dataclass(frozen=True)
class JoinPlan:
    """The public parameters both organisations and the matcher agree on: ``categories`` of each side's
    attribute, ``max_rows`` each side keeps of a person, the threshold ``k`` below which a noisy cell is
    suppressed, and ``epsilon``."""

    epsilon: Number
    categories: tuple[int, int]
    max_rows: tuple[int, int] = (1, 1)
    k: int = 10

    def __post_init__(self) -> None:
        object.__setattr__(self, "epsilon", positive_fraction(self.epsilon, "epsilon"))
        for name, pair in (("categories", self.categories), ("max_rows", self.max_rows)):
            if len(pair) != 2 or any(isinstance(v, bool) or not isinstance(v, int) or v < 1 for v in pair):
                raise ArgumentError(f"{name} is a pair of positive integers, got {pair!r}.")
        if self.categories[0] * self.categories[1] > 2**20:
            raise ArgumentError("a joined table has at most 2^20 cells.")
        if isinstance(self.k, bool) or not isinstance(self.k, int) or self.k < 0:
            raise ArgumentError(f"k must be a non-negative integer, got {self.k!r}.")

    @property
    def sensitivity(self) -> int:
        return self.max_rows[0] * self.max_rows[1]

    @property
    def noise(self) -> Geometric:
        return Geometric(sensitivity=self.sensitivity, epsilon=self.epsilon)


@dataclass(frozen=True)
class JoinTable:
    """The released table: ``counts[a, b]`` noisy, ``suppressed[a, b]`` where the noisy count was below
    ``k`` (its count is then reported as 0), and ``error``: every unsuppressed cell is within it of its true
    count with probability ``confidence`` jointly (a union bound over the cells)."""

    counts: IntArray
    suppressed: NDArray[np.bool_]
    error: float
    confidence: float
    ledger_entry: LedgerEntry | None


class Organisation:
    """One organisation: its rows and its blinding key stay in this object (its own process)."""

    def __init__(
        self, persons: ArrayLike, attributes: ArrayLike, categories: int, max_rows: int, rng: Any = None
    ) -> None:
        who, what = np.asarray(persons), np.asarray(attributes)
        if who.shape != what.shape or who.ndim != 1:
            raise ArgumentError("persons and attributes must be two vectors of the same length.")
        if not np.issubdtype(what.dtype, np.integer) or (
            what.size and (what.min() < 0 or what.max() >= categories)
        ):
            raise ArgumentError(f"attributes are category codes 0 .. {categories - 1}.")
        keep = kept_rows(who, max_rows, rng)
        self._points = hash_to_curve(who[keep])
        self._attributes = what[keep].astype(np.int64)
        self._key: X25519PrivateKey | None = X25519PrivateKey.generate()

    def _blind(self, points: Sequence[bytes]) -> list[bytes]:
        if self._key is None:
            raise ProtocolError("this organisation's blinding key is deleted.")
        key = self._key
        return [key.exchange(X25519PublicKey.from_public_bytes(p)) for p in points]

    def blinded(self) -> list[bytes]:
        """Its persons' points under its key, for the other organisation."""
        return self._blind(self._points)

    def blind_theirs(self, points: Sequence[bytes]) -> list[bytes]:
        """The other organisation's blinded points under this key too, for the matcher (same order)."""
        return self._blind(points)

    def attributes(self) -> IntArray:
        """Its kept rows' attributes, for the matcher, in the order of its points."""
        return self._attributes

    def forget(self) -> None:
        """Delete the blinding key (the seed's salt deletion; the process ending does it too)."""
        self._key = None


class Matcher:
    """The party that joins doubly blinded pseudonyms and releases the noisy table, charged to ``ledger``
    (a :class:`Ledger` or its path)."""

    def __init__(
        self, ledger: Ledger | str, plan: JoinPlan, rng: Any = None, *, label: str = "private join"
    ) -> None:
        self.ledger = Ledger(ledger) if isinstance(ledger, str) else ledger
        self.plan, self.rng, self.label = plan, rng, label
        self._sides: dict[int, tuple[list[bytes], IntArray]] = {}

    def receive(self, side: int, pseudonyms: list[bytes], attributes: IntArray) -> None:
        """One organisation's rows: ``ab H(id)`` (from the other organisation) and attributes, same order."""
        if side not in (0, 1) or side in self._sides:
            raise ProtocolError("each of the two sides is received once.")
        codes = np.asarray(attributes, np.int64)
        if len(pseudonyms) != codes.size or (
            codes.size and (codes.min() < 0 or codes.max() >= self.plan.categories[side])
        ):
            raise ProtocolError("pseudonyms and attributes do not match the plan.")
        self._sides[side] = (list(pseudonyms), codes)

    def release(self, beta: float = 0.05) -> JoinTable:
        if len(self._sides) != 2:
            raise ProtocolError("both organisations' rows are needed.")
        plan = self.plan
        (left, a), (right, b) = self._sides[0], self._sides[1]

        def draw(source: RandomSource) -> IntArray:
            _, person = np.unique(np.array(left + right, dtype="S32"), return_inverse=True)
            people = int(person.max()) + 1 if person.size else 0
            rows_a = sparse.csr_matrix((np.ones(a.size), (person[: a.size], a)), (people, plan.categories[0]))
            rows_b = sparse.csr_matrix((np.ones(b.size), (person[a.size :], b)), (people, plan.categories[1]))
            table = np.rint((rows_a.T @ rows_b).toarray()).astype(np.int64)  # pairs of every joined person
            noisy: IntArray = plan.noise.release(table, rng=source)
            return noisy

        out = release.run(self.ledger, release.Charge(PureDP(plan.epsilon), self.label), draw, rng=self.rng)
        cells = plan.categories[0] * plan.categories[1]
        suppressed = out.value < plan.k
        counts = np.where(suppressed, 0, out.value)
        return JoinTable(counts, suppressed, plan.noise.error_bound(beta / cells), 1 - beta, out.ledger_entry)


def private_join(
    left: tuple[ArrayLike, ArrayLike],
    right: tuple[ArrayLike, ArrayLike],
    plan: JoinPlan,
    ledger: Ledger | str,
    *,
    processes: bool = True,
    rngs: tuple[Any, Any, Any] | None = None,
    beta: float = 0.05,
) -> tuple[JoinTable, list[tuple[str, str, str, int]]]:
    """Join ``left = (persons, attributes)`` and ``right`` privately; returns the released table and the
    transcript of every message (sender, receiver, kind, count). ``ledger`` is the matcher's (a path when
    ``processes``). ``rngs`` seeds the left and right row choices and the matcher's noise."""
    if processes and not isinstance(ledger, str):
        raise ArgumentError("with processes, pass the ledger's path: the matcher opens it in its process.")
    left_rng, right_rng, matcher_rng = rngs or (None, None, None)
    parties: list[Party] = []
    try:
        matcher = Party(Matcher, ledger, plan, matcher_rng, process=processes)
        parties.append(matcher)
        orgs = []
        for side, (persons, attributes), rng in ((0, left, left_rng), (1, right, right_rng)):
            org = Party(
                Organisation,
                persons,
                attributes,
                plan.categories[side],
                plan.max_rows[side],
                rng,
                process=processes,
            )
            parties.append(org)
            orgs.append(org)
        names = ("left", "right")
        log: list[tuple[str, str, str, int]] = []
        blinded = [org("blinded") for org in orgs]
        for side in (0, 1):
            other = 1 - side
            log.append((names[side], names[other], "blinded points", len(blinded[side])))
            twice = orgs[other]("blind_theirs", blinded[side])
            log.append((names[other], "matcher", "doubly blinded points", len(twice)))
            attributes = orgs[side]("attributes")
            log.append((names[side], "matcher", "attributes", int(attributes.size)))
            matcher("receive", side, twice, attributes)
        for org in orgs:
            org("forget")
        table: JoinTable = matcher("release", beta)
        log.extend(("matcher", name, "released table", int(table.counts.size)) for name in names)
        return table, log
    finally:
        for party in parties:
            party.close()
