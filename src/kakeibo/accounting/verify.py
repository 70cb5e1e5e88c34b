"""Tamper evidence: re-checking a ledger's stored rows from scratch, for :meth:`.ledger.Ledger.verify`.

:func:`verify_ledger` recomputes both hash chains (:mod:`.records`) from the header, compares them with the
head hash and length the meta table recorded, checks every stored release against its SHA-256, and then
that no budget is overspent, with a tally rebuilt from the rows rather than the ledger's cache. So it
detects an edited, deleted (including the last), reordered or inserted row, and an edited budget or
header. The chain is unkeyed: someone able to rewrite the whole file can recompute it, so publish
:attr:`~kakeibo.accounting.Ledger.head_hash` somewhere they cannot write.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ..privacy import PrivacyLoss
from .composition import CompositionPolicy, loss_leq
from .records import (
    LedgerEntry,
    Scope,
    budget_record,
    chain_hash,
    entry_from_row,
    entry_record,
    genesis_hash,
    loss_from_columns,
)
from .tally import Item, Tally

__all__ = ["Verification", "verify_ledger"]


@dataclass(frozen=True)
class Verification:
    """The outcome of :meth:`~kakeibo.accounting.Ledger.verify`: truthy exactly when no problem was found."""

    ok: bool
    problems: tuple[str, ...]
    entries: int

    def __bool__(self) -> bool:
        return self.ok


def verify_ledger(
    meta: Mapping[str, str],
    entry_rows: Sequence[Sequence[Any]],
    budget_rows: Sequence[Sequence[Any]],
    release_rows: Sequence[Sequence[Any]],
    *,
    policy: CompositionPolicy,
    kind: type[PrivacyLoss],
) -> Verification:
    """Check rows read in one snapshot: the ``meta`` table, the entry and budget rows in ``seq`` order and the
    ``(request_id, seq, payload, sha256)`` release rows; budgets are composed by ``policy`` in ``kind``.

    Each problem is one sentence naming the row.
    """
    problems: list[str] = []
    header = meta.get("header")
    if header is None:
        return Verification(False, ("the ledger header is missing.",), len(entry_rows))
    genesis = genesis_hash(header)
    if meta.get("genesis") != genesis:
        problems.append("the ledger header (id, budget kind or composition policy) was edited.")

    parsed: list[LedgerEntry] = []
    for name, rows, record, width in (
        ("entry", entry_rows, entry_record, 11),
        ("budget row", budget_rows, budget_record, 8),
    ):
        previous, expected = genesis, 1
        for row in rows:
            seq = row[0]
            if seq != expected:
                problems.append(
                    f"{name} {seq} stands where {name} {expected} should be: rows were deleted, inserted "
                    "or renumbered."
                )
            if chain_hash(previous, record(row)) != row[width]:
                problems.append(
                    f"{name} {seq} does not match its hash: it was edited, or the row before it was "
                    "replaced or reordered."
                )
            try:
                if name == "entry":
                    parsed.append(entry_from_row(row))
                else:
                    loss_from_columns(row[3], row[4], row[5], row[6])
            except Exception as exc:  # any damage to a row is a finding, not a crash
                problems.append(f"{name} {seq} cannot be read: {exc}.")
            previous = str(row[width])
            expected = int(seq) + 1
        key = "entries" if name == "entry" else "budgets"
        if meta.get(f"{key}_count") != str(len(rows)):
            problems.append(
                f"the ledger records {meta.get(f'{key}_count')} {key} but holds {len(rows)}: "
                "rows were deleted or inserted."
            )
        if meta.get(f"{key}_head") != previous:
            problems.append(
                f"the last {name} does not match the recorded head hash: the last row was deleted, "
                "edited or appended without the ledger."
            )
    owners = {entry.request_id: entry.seq for entry in parsed if entry.request_id is not None}
    for request_id, seq, payload, digest in release_rows:
        if owners.get(request_id) != seq:
            problems.append(f"the release stored for request_id {request_id!r} has no matching entry.")
        elif hashlib.sha256(bytes(payload)).hexdigest() != digest:
            problems.append(f"the release stored for request_id {request_id!r} was altered.")
    if not problems:
        problems.extend(_overspending(parsed, budget_rows, policy, kind))
    return Verification(not problems, tuple(problems), len(entry_rows))


def _overspending(
    entries: list[LedgerEntry],
    budget_rows: Sequence[Sequence[Any]],
    policy: CompositionPolicy,
    kind: type[PrivacyLoss],
) -> list[str]:
    budgets = {Scope(r[1], r[2]): loss_from_columns(r[3], r[4], r[5], r[6]) for r in budget_rows}
    tally = Tally(policy, kind)  # rebuilt from the rows just read, independent of the cache
    for entry in entries:
        tally.add(Item.from_entry(entry, policy, kind))
    out = []
    for scope, budget in budgets.items():
        spent = tally.spent(scope)
        if not loss_leq(spent, budget):
            out.append(f"{scope.describe()} of {budget!s} is overspent: {spent!s}.")
    return out
