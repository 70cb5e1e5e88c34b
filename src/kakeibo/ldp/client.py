"""A device's own privacy books: every local report passes through its :class:`ClientLedger`, which refuses
to randomize past the device's budgets and keeps what was sent, at what epsilon, with memoisation credited.

Seed 003 describes Apple's deployment: a device may send one to two epsilon per report and up to 16 reports
a day, so a person can lose epsilon 16 a day; an LDP guarantee is per report, and nothing adds the reports
up unless the device does. Here it does, in a SQLite file that survives restarts:

* **Campaigns.** A device reports only for a campaign it has enrolled in (:meth:`ClientLedger.enrol`, with
  the server's :class:`~kakeibo.ldp.campaign.Campaign`): the campaign declares each kind of report it
  asks for (the randomizer, how many a day, for how many days) and so its worst-case loss per day and in
  all. The device refuses a campaign that asks more per day than the device allows at all, and refuses any
  report that the campaign did not declare or that would take it past its declared losses.
* **Budgets.** ``daily_budget`` caps the loss of all reports of one UTC day, across campaigns;
  ``lifetime_budget`` caps everything the device ever sends. A refused report is never randomized, so a
  refusal reveals nothing about the value and costs nothing (:class:`ClientBudgetExceeded`).
* **Charges.** Reports compose sequentially (pure epsilon adds up). A report from a memoising
  :class:`~kakeibo.ldp.rappor.RapporClient` is charged ``min(privacy_loss, epsilon_infinity - charged so
  far for the same value)``: all reports of one value together reveal at most ``epsilon_infinity``
  (Erlingsson et al. 2014, Sec. 3), so two-step RAPPOR charges ``epsilon_one`` per report until that cap
  and one-time RAPPOR charges ``epsilon_infinity`` once, its repeats nothing. The ledger tells values apart
  by the client's own keyed hash of the value (:meth:`RapporClient.memo_key`), never the value itself.
* **Atomicity.** Each report is one ``BEGIN IMMEDIATE`` transaction: check, randomize, record, commit; the
  report is handed back only after the commit, so a report that was sent is always in the books, and two
  processes of one device cannot both spend the last epsilon.
* **Integrity.** The books are hash-chained like the central ledger (:mod:`kakeibo.accounting.records`):
  every enrolment and every report stores SHA-256 of the previous row's hash and its own canonical contents
  (a report's bytes by their SHA-256); both chains start from the hash of the books' header (format, id,
  budgets), and a meta row holds each chain's head and length, updated in the same transaction as the row.
  Each stored amount must read as an exact non-negative fraction, a charge at most its report's epsilon.
  Opening the books and :meth:`ClientLedger.verify` check the whole file: a ``charged`` edited from 1 to 0,
  a deleted, reordered or inserted row anywhere, an edited budget or altered report bytes are all found
  (:class:`ClientLedgerIntegrityError`). The open books keep what they verified, with running exact sums
  of the charges, and every later read and report checks, inside its own transaction and before it sums a
  charge, what can have changed since in time independent of how many reports the books hold (as the
  central ledger does, :mod:`kakeibo.accounting.ledger`): the header is the one verified; each chain's last
  verified row is still there, numbered and hashed as verified, its contents re-hashed; every row appended
  since (by this process or another one of the device) is checked like on open; and the meta row's head
  and count are the chains' new ends. An edit of an older row that leaves the meta row and the last rows
  alone is not seen by a running process until :meth:`~ClientLedger.verify` or the next open, but it cannot
  make the process spend more: the process never reads such a row again; it sums its own verified copy
  (:meth:`~ClientLedger.entries` checks every report's bytes it returns). Once anything fails to verify,
  what was verified is dropped and every later read and report re-checks the whole file as on open, bytes
  included, so the device stays stopped. The chain has no secret key: whoever can rewrite the whole file
  can recompute it. What it stops is corruption and edits of some rows, by mistake or by software that
  does not recompute the chain.
* **Creation.** New books are created only where no file exists (or at ``":memory:"``), and whole: in a
  temporary file beside ``path`` that is hard-linked into place once complete and only if ``path`` is
  still free. So a file at ``path`` is always meant to be books, and one that is not intact kakeibo books
  (truncated to 0 bytes, an empty or foreign SQLite database, random bytes) is refused naming the path,
  never taken for new books with a fresh lifetime budget. Deleting the file does start new books: nothing
  on a device can stop its owner from forgetting its history; what this stops is losing it by accident.

Neighbour relation: local, any two values of this device's person, report by report; the books bound the
sequential composition of everything the device sent.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import sqlite3
import tempfile
import uuid
from collections import defaultdict
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime, timezone
from fractions import Fraction
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

import numpy as np

from ..errors import ArgumentError, ArgumentTypeError, Error
from ..mechanisms.base import Rng
from ..privacy import Number, PureDP, as_fraction, format_fraction
from .framework import LocalRandomizer
from .rappor import RapporClient
from .reports import Reports

if TYPE_CHECKING:
    from .campaign import Campaign

__all__ = ["ClientBudgetExceeded", "ClientLedger", "ClientLedgerIntegrityError", "SentReport"]

#: The books' format, stored in the meta table (the creation marker) and hashed into the start of both chains.
FORMAT = "kakeibo-client-books/1"

#: What a campaign's and a report's hash covers, after the row's kind: every column but the hash (and a
#: report's payload, covered by its SHA-256).
_CAMPAIGN_COLUMNS = "seq, name, enrolled_at, days, daily, total, asks"
_REPORT_COLUMNS = "seq, sent_at, day, campaign, randomizer, report_epsilon, charged, memo, payload_sha256"

PathLike = str | os.PathLike[str]
Clock = Callable[[], datetime]

_SCHEMA = (
    "CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)",
    """CREATE TABLE campaigns (
    seq INTEGER PRIMARY KEY, name TEXT NOT NULL UNIQUE, enrolled_at TEXT NOT NULL, days INTEGER NOT NULL,
    daily TEXT NOT NULL, total TEXT NOT NULL, asks TEXT NOT NULL, hash TEXT NOT NULL
)""",
    """CREATE TABLE reports (
    seq INTEGER PRIMARY KEY, sent_at TEXT NOT NULL, day TEXT NOT NULL, campaign TEXT NOT NULL,
    randomizer TEXT NOT NULL, report_epsilon TEXT NOT NULL, charged TEXT NOT NULL, memo TEXT,
    payload_sha256 TEXT NOT NULL, hash TEXT NOT NULL, payload BLOB NOT NULL
)""",
)
_FRACTION_TEXT = re.compile(r"(0|[1-9][0-9]*)/([1-9][0-9]*)")
_SHA256_TEXT = re.compile(r"[0-9a-f]{64}")
#: The chains: each one's table (also its meta keys' prefix) and the kind hashed into each record.
_CHAINS = (("campaigns", "campaign"), ("reports", "report"))


class ClientBudgetExceeded(Error):  # noqa: N818 -- the name reads as the event it reports
    """The device refused to randomize: the report would exceed a budget (nothing was sent or charged)."""


class ClientLedgerIntegrityError(Error, RuntimeError):
    """The file at a device's books path is not intact kakeibo books: not books at all (empty, foreign,
    damaged) or books whose hash chains do not verify. The device reports nothing from it; ``problems``
    lists what was found, one sentence each naming the row."""

    def __init__(self, message: str, problems: Sequence[str] = ()) -> None:
        super().__init__(message)
        self.problems = tuple(problems)

    @classmethod
    def not_books(cls, path: str) -> ClientLedgerIntegrityError:
        """The refusal of a file that holds no kakeibo books (an existing file never becomes new books)."""
        return cls(
            f"{path} holds no intact kakeibo client books (it is empty, another file or damaged), so this "
            "device will not report from it; move it away to start new books, with a fresh lifetime budget."
        )

    @classmethod
    def unverified(cls, path: str, problems: Sequence[str]) -> ClientLedgerIntegrityError:
        """The refusal of books whose chains or amounts do not verify (``problems`` is not empty; the message
        quotes none of them, since they name rows)."""
        return cls(
            f"The client books at {path} do not verify (rows or their header were edited, deleted, "
            "inserted or damaged: see the problems), so this device will not report from them.",
            problems,
        )


@dataclass(frozen=True)
class SentReport:
    """One report in the device's books: when (UTC), for which campaign, by which randomizer, the loss of
    the report itself, what was charged for it (less when memoisation credits it), and the bytes sent."""

    seq: int
    sent_at: str
    day: str
    campaign: str
    randomizer: str
    report_epsilon: Fraction
    charged: Fraction
    memoised: bool
    payload: bytes


def randomizer_name(randomizer: LocalRandomizer) -> str:
    """How books name a randomizer: its class and parameters (``repr``), which fix its loss."""
    return repr(randomizer)


def _utc_now() -> datetime:
    return datetime.now(timezone.utc)


def _wire(sent: Any) -> bytes:
    """The bytes of what a randomizer returns: report batches in their wire format, numbers as float64."""
    if isinstance(sent, Reports):
        return sent.to_bytes()
    if isinstance(sent, (list, tuple)) and all(isinstance(r, Reports) for r in sent):
        return b"".join(r.to_bytes() for r in sent)
    return np.ascontiguousarray(sent, dtype="<f8").tobytes()


def _budget(value: Number | None, name: str) -> Fraction | None:
    if value is None:
        return None
    exact = as_fraction(value, name)
    if exact <= 0:
        raise ArgumentError(f"{name} must be positive, got {format_fraction(exact)}.")
    return exact


class ClientLedger:
    """The privacy books of one device (module docstring), in the SQLite file ``path``.

    ``daily_budget`` and ``lifetime_budget`` (pure epsilon; at least one) are fixed when the books are
    created, which happens only when no file exists at ``path``; reopening them with other values is
    refused, and reopening them without values uses the stored ones. A file at ``path`` that is not intact
    kakeibo books is refused (:class:`ClientLedgerIntegrityError`), never replaced. ``clock`` (default: the
    system clock) gives the time; its UTC date is the day.

    >>> from kakeibo.ldp import OUE, Campaign, Ask
    >>> books = ClientLedger(":memory:", daily_budget=2)
    >>> oue = OUE(epsilon=1, domain_size=8)
    >>> books.enrol(Campaign("emoji", [Ask(oue, reports_per_day=2)], days=7))
    >>> _ = books.report("emoji", oue, 3)
    >>> _ = books.report("emoji", oue, 5)
    >>> books.report("emoji", oue, 6)
    Traceback (most recent call last):
    ...
    kakeibo.ldp.client.ClientBudgetExceeded: Campaign 'emoji' declared at most epsilon=2 a day and has spent \
epsilon=2 today; this report (epsilon=1) was not sent.
    """

    def __init__(
        self,
        path: PathLike,
        *,
        daily_budget: Number | None = None,
        lifetime_budget: Number | None = None,
        clock: Clock | None = None,
    ) -> None:
        self._clock = clock or _utc_now
        self._books: _Books | None = None  # what the last transaction verified (module docstring)
        wanted = {"daily_budget": _budget(daily_budget, "daily_budget")}
        wanted["lifetime_budget"] = _budget(lifetime_budget, "lifetime_budget")
        self.path = os.fspath(path)
        new = self.path == ":memory:" or not os.path.lexists(self.path)
        if new and all(v is None for v in wanted.values()):
            raise ArgumentError("a new client ledger needs a daily_budget or a lifetime_budget.")
        if self.path == ":memory:":
            self._conn = sqlite3.connect(":memory:", isolation_level=None)
            _create(self._conn, wanted)
        else:
            if new:
                _create_file(self.path, wanted)
            try:  # mode=rw: SQLite never creates a file here, whatever happened to it since
                uri = Path(self.path).absolute().as_uri() + "?mode=rw"
                self._conn = sqlite3.connect(uri, uri=True, isolation_level=None, timeout=30)
            except sqlite3.DatabaseError as exc:  # a directory, an unreadable file
                raise ClientLedgerIntegrityError.not_books(self.path) from exc
        try:
            self._budgets = self._read(full=True)[0].budgets
        except BaseException:
            self.close()
            raise
        for name, value in wanted.items():
            if value is not None and self._budgets[name] != value:
                self.close()
                raise ArgumentError(
                    f"this client ledger was created with {name} {_shown(self._budgets[name])}, "
                    f"not {format_fraction(value)}."
                )

    # -- campaigns -----------------------------------------------------------------------------------------
    def enrol(self, campaign: Campaign) -> None:
        """Accept ``campaign``: record what it declared. Refused when it asks more per day than the device's
        daily budget, or when a campaign of that name with other asks is already enrolled; enrolling the same
        campaign again changes nothing."""
        daily, total = campaign.daily_loss.epsilon, campaign.per_client_loss.epsilon
        asks = "\n".join(sorted(randomizer_name(a.randomizer) for a in campaign.asks))
        cap = self._budgets["daily_budget"]
        if cap is not None and daily > cap:
            raise ClientBudgetExceeded(
                f"Campaign {campaign.name!r} asks up to {PureDP(daily)} a day; this device allows "
                f"{PureDP(cap)} a day in all."
            )
        with self._transaction() as (conn, books, _):
            known = books.campaigns.get(campaign.name)
            if known is not None:
                if known != (daily, total, asks):
                    raise ArgumentError(f"a different campaign named {campaign.name!r} is already enrolled.")
                return
            row = (
                books.counts["campaigns"] + 1,
                campaign.name,
                self._now().isoformat(),
                campaign.days,
                _text(daily),
                _text(total),
                asks,
            )
            _append(conn, books, "campaigns", row)

    def campaigns(self) -> list[str]:
        """The names of the enrolled campaigns, in enrolment order."""
        return list(self._read()[0].campaigns)

    # -- reporting -----------------------------------------------------------------------------------------
    def report(
        self, campaign: str, randomizer: LocalRandomizer | RapporClient, value: Any, *, rng: Rng = None
    ) -> Any:
        """Randomize ``value`` with ``randomizer`` for ``campaign`` and return what to send (the randomizer's
        output for a one-client batch), or raise :class:`ClientBudgetExceeded` without randomizing.

        The charge is the randomizer's ``privacy_loss``; for a :class:`RapporClient` it is credited for
        memoisation (module docstring). It must fit in the campaign's declared daily and total losses, the
        device's daily budget and its lifetime budget, summed from books verified in the same transaction
        (what has changed since the last one, module docstring; :class:`ClientLedgerIntegrityError` when it
        does not verify, and nothing is randomized).
        """
        if isinstance(randomizer, RapporClient):
            protocol: LocalRandomizer = randomizer.rappor
            memo: str | None = randomizer.memo_key(value)
            cap: Fraction | None = randomizer.rappor.longitudinal_loss.epsilon
        elif isinstance(randomizer, LocalRandomizer):
            protocol, memo, cap = randomizer, None, None
        else:
            kind = type(randomizer).__name__
            raise ArgumentTypeError(f"randomizer must be a local randomizer or a RapporClient, not {kind}.")
        name, loss = randomizer_name(protocol), protocol.privacy_loss.epsilon
        now = self._now()
        day = now.date().isoformat()
        with self._transaction() as (conn, books, _):
            declared = books.campaigns.get(campaign)
            if declared is None:
                raise ClientBudgetExceeded(
                    f"This device has not enrolled in campaign {campaign!r}; nothing was sent."
                )
            if name not in declared.asks.split("\n"):
                raise ClientBudgetExceeded(
                    f"Campaign {campaign!r} did not declare reports by {name}; nothing was sent."
                )
            charge = loss
            if memo is not None and cap is not None:
                charge = max(Fraction(0), min(loss, cap - books.spent(memo=memo, randomizer=name)))
            self._check(books, campaign, day, charge, declared)
            sent = _randomize(randomizer, value, rng)
            payload = _wire(sent)
            digest = hashlib.sha256(payload).hexdigest()
            row = (
                books.counts["reports"] + 1,
                now.isoformat(),
                day,
                campaign,
                name,
                _text(loss),
                _text(charge),
            )
            _append(conn, books, "reports", (*row, memo, digest), payload)
        return sent

    def _check(self, books: _Books, campaign: str, day: str, charge: Fraction, declared: _Declared) -> None:
        """Raise :class:`ClientBudgetExceeded` unless ``charge`` fits in every cap: the campaign's declared
        daily and total losses, the device's daily and lifetime budgets (the verified ``books``' own)."""
        named = f"Campaign {campaign!r} declared at most"
        caps = [
            (
                declared.daily,
                books.spent(campaign=campaign, day=day),
                named + " {cap} a day and has spent {spent} today",
            ),
            (declared.total, books.spent(campaign=campaign), named + " {cap} in all and has spent {spent}"),
        ]
        if (cap := books.budgets["daily_budget"]) is not None:
            caps.append(
                (cap, books.spent(day=day), "This device allows {cap} a day and has spent {spent} today")
            )
        if (cap := books.budgets["lifetime_budget"]) is not None:
            caps.append(
                (cap, books.spent(), "This device allows {cap} in its lifetime and has spent {spent}")
            )
        for cap, spent, message in caps:
            if spent + charge > cap:
                text = message.format(cap=PureDP(cap), spent=PureDP(spent))
                raise ClientBudgetExceeded(f"{text}; this report ({PureDP(charge)}) was not sent.")

    # -- the books -----------------------------------------------------------------------------------------
    def entries(self, campaign: str | None = None) -> list[SentReport]:
        """Every report sent (for ``campaign``, if given), oldest first, from verified books, each report's
        bytes checked against its verified digest."""
        books, payloads = self._read(payloads=True)
        return [
            SentReport(
                r.seq,
                r.sent_at,
                r.day,
                r.campaign,
                r.randomizer,
                r.report_epsilon,
                r.charged,
                r.memo is not None,
                payloads[r.seq],
            )
            for r in books.reports
            if campaign is None or r.campaign == campaign
        ]

    def spent(self, *, day: str | None = None, campaign: str | None = None) -> PureDP:
        """What the device has been charged: in all, on ``day`` (``YYYY-MM-DD``, UTC), for ``campaign``."""
        return PureDP(self._read()[0].spent(day=day, campaign=campaign))

    def remaining_today(self) -> PureDP | None:
        """What the daily budget leaves today (None without a daily budget)."""
        cap = self._budgets["daily_budget"]
        if cap is None:
            return None
        return PureDP(max(Fraction(0), cap - self.spent(day=self._now().date().isoformat()).epsilon))

    def verify(self) -> None:
        """Re-check everything from the stored rows: the books' format and header, both hash chains against
        their recorded heads and lengths, every stored amount, every report's bytes against their SHA-256.

        Returns nothing when the books verify; otherwise raises :class:`ClientLedgerIntegrityError`, whose
        ``problems`` name each finding's row. Opening the books runs this; every read and report checks only
        what can have changed since the last one, so an edit of an older row that leaves the meta row alone
        is found here and at the next open (module docstring). The chain is unkeyed: it finds edits and
        corruption, not a rewrite of the whole file.
        """
        self._read(full=True)

    @property
    def daily_budget(self) -> PureDP | None:
        cap = self._budgets["daily_budget"]
        return None if cap is None else PureDP(cap)

    @property
    def lifetime_budget(self) -> PureDP | None:
        cap = self._budgets["lifetime_budget"]
        return None if cap is None else PureDP(cap)

    # -- plumbing ------------------------------------------------------------------------------------------
    def _now(self) -> datetime:
        now = self._clock()
        if now.tzinfo is None:
            raise ArgumentError("the client ledger's clock must return timezone-aware datetimes.")
        return now.astimezone(timezone.utc)

    def _read(self, *, full: bool = False, payloads: bool = False) -> tuple[_Books, dict[int, bytes]]:
        """The verified books, read in one snapshot, and with ``payloads`` every report's bytes, checked
        (``full``: the whole file re-verified, bytes included)."""
        with self._transaction(immediate=False, full=full, payloads=payloads) as (_, books, stored):
            return books, stored

    @contextmanager
    def _transaction(
        self, *, immediate: bool = True, full: bool = False, payloads: bool = False
    ) -> Iterator[tuple[sqlite3.Connection, _Books, dict[int, bytes]]]:
        """A transaction (``BEGIN IMMEDIATE`` to write), the books verified inside it and, with ``payloads``,
        the reports' bytes. The verified books are kept for the next transaction only when this one's
        check completed; any failure in it (a problem found, a busy file, an interrupt) drops them, so the
        next transaction verifies the whole file again."""
        try:
            self._conn.execute("BEGIN IMMEDIATE" if immediate else "BEGIN")
        except sqlite3.DatabaseError as exc:
            if _busy(exc):
                raise
            raise ClientLedgerIntegrityError.not_books(self.path) from exc
        try:
            known, self._books = self._books, None
            books, stored = _sync(self._conn, self.path, None if full else known, payloads=payloads)
            self._books = books
            yield self._conn, books, stored
        except BaseException:
            self._conn.execute("ROLLBACK")
            raise
        self._conn.execute("COMMIT")

    def close(self) -> None:
        self._conn.close()

    def __enter__(self) -> ClientLedger:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        daily, lifetime = (_shown(self._budgets[k]) for k in ("daily_budget", "lifetime_budget"))
        return f"ClientLedger(daily_budget={daily}, lifetime_budget={lifetime})"


# -- the stored books ---------------------------------------------------------------------------------------
class _Declared(NamedTuple):
    """An enrolled campaign's declared daily and total losses and its randomizers (one per line)."""

    daily: Fraction
    total: Fraction
    asks: str


class _Report(NamedTuple):
    """A verified report row, its amounts parsed (its bytes stay in the file, checked against ``digest``
    when read)."""

    seq: int
    sent_at: str
    day: str
    campaign: str
    randomizer: str
    report_epsilon: Fraction
    charged: Fraction
    memo: str | None
    digest: str


#: The report fields whose charges :class:`_Books` keeps running sums over: every match that
#: :meth:`_Books.spent` is asked for (names in alphabetical order).
_SUMMED: tuple[tuple[str, ...], ...] = (
    (),
    ("day",),
    ("campaign",),
    ("campaign", "day"),
    ("memo", "randomizer"),
)
#: Below every sequence number (SQLite's smallest integer): where a first verification starts reading, so
#: that a row inserted before the first one is read and refused too.
_BEFORE_ALL = -(1 << 63)


class _Books:
    """The books as verified, kept between transactions: the header and budgets, the campaigns in enrolment
    order, the reports, each chain's length and last two hashes, and exact running sums of the charges, so
    that a report checks its caps in time independent of how many reports came before. Only :meth:`extend`
    changes it, with rows whose chain and amounts it has just checked."""

    def __init__(self, meta: dict[str, str], budgets: dict[str, Fraction | None]) -> None:
        self.header = (meta.get("header"), meta.get("genesis"))
        self.budgets = budgets
        self.campaigns: dict[str, _Declared] = {}
        self.reports: list[_Report] = []
        self.counts = {table: 0 for table, _ in _CHAINS}
        genesis = meta.get("genesis", "")
        #: Per chain: the hash before its last row and the last row's own (the head); genesis for both first.
        self.ends = {table: (genesis, genesis) for table, _ in _CHAINS}
        self.sums: dict[tuple[str, ...], dict[tuple[Any, ...], Fraction]] = {by: {} for by in _SUMMED}

    def spent(self, **match: str | None) -> Fraction:
        """The exact sum of the charges of the reports whose fields equal every value given (None: any)."""
        chosen = sorted((field, value) for field, value in match.items() if value is not None)
        by = self.sums[tuple(field for field, _ in chosen)]
        return by.get(tuple(value for _, value in chosen), Fraction(0))

    def start(self, table: str) -> int:
        """The sequence number from which a check of ``table`` reads: its last verified row (it is re-checked,
        anchoring the new rows to what was verified), or before every row when none was."""
        return self.counts[table] or _BEFORE_ALL

    def extend(
        self, table: str, rows: Sequence[Sequence[Any]], meta: dict[str, str], problems: list[str]
    ) -> None:
        """Check ``rows`` (``table``'s rows from :meth:`start` on, each ending in its stored hash) and take in
        the new ones: the last verified row must still be the first, as verified; every row must follow the
        one before it in number and hash; the meta row's head and count must be the last row's; amounts
        must be exact, a charge at most its report's epsilon, a report's campaign enrolled. Findings go to
        ``problems`` (the caller then drops these books)."""
        kind, count = dict(_CHAINS)[table], self.counts[table]
        (previous, head), expected = self.ends[table], count
        if count == 0:
            previous, expected = head, 1
        elif not rows or rows[0][0] != count or rows[0][-1] != head:
            problems.append(
                f"{kind} {count}, the last this device verified, was deleted, renumbered or replaced."
            )
        ends = self.ends[table]
        for row in rows:
            if row[0] != expected:
                problems.append(
                    f"{kind} {row[0]} stands where {kind} {expected} should be: rows were deleted, inserted "
                    "or renumbered."
                )
            if _link(previous, [kind, *row[:-1]]) != row[-1]:
                problems.append(
                    f"{kind} {row[0]} does not match its hash: it was edited, or the row before it was "
                    "replaced or reordered."
                )
            ends, previous, expected = (previous, str(row[-1])), str(row[-1]), row[0] + 1
        fresh = rows[1:] if count else rows
        if meta.get(f"{table}_count") != str(count + len(fresh)) or meta.get(f"{table}_head") != previous:
            problems.append(
                f"the last {kind} does not match the recorded head and count: rows were deleted, inserted "
                "or appended without the books."
            )
        self.counts[table], self.ends[table] = count + len(fresh), ends
        if table == "campaigns":
            for row in fresh:
                self._enrolled(row, problems)
        else:
            self._add([self._reported(row, problems) for row in fresh])

    def _enrolled(self, row: Sequence[Any], problems: list[str]) -> None:
        seq, name, _, days, daily, total, asks, _ = row
        declared = _Declared(_amount(daily), _amount(total), asks)
        if not (isinstance(days, int) and days > 0 and declared.daily > 0 and declared.total > 0):
            problems.append(f"campaign {seq} holds a declaration that is not a positive loss.")
        self.campaigns[name] = declared

    def _reported(self, row: Sequence[Any], problems: list[str]) -> _Report:
        seq, at, day, name, randomizer, eps, paid, memo, digest, _ = row
        report = _Report(seq, at, day, name, randomizer, _amount(eps), _amount(paid), memo, digest)
        if not 0 <= report.charged <= report.report_epsilon or report.report_epsilon <= 0:
            problems.append(
                f"report {seq} holds a charge that is negative, not an exact number, or above its report's "
                "epsilon."
            )
        if name not in self.campaigns or not isinstance(digest, str) or not _SHA256_TEXT.fullmatch(digest):
            problems.append(f"report {seq} names no enrolled campaign or holds no digest of its bytes.")
        return report

    def _add(self, reports: list[_Report]) -> None:
        """Take in ``reports`` and add their charges to the running sums: as integer numerators per sum and
        denominator first, then one Fraction per distinct denominator, exact all the same (a Fraction
        addition per report and sum made opening 10,000 reports about twice as slow)."""
        parts: dict[tuple[tuple[str, ...], tuple[Any, ...], int], int] = defaultdict(int)
        for report in reports:
            numerator, denominator = report.charged.numerator, report.charged.denominator
            for by in _SUMMED:
                parts[by, tuple(getattr(report, field) for field in by), denominator] += numerator
        for (by, key, denominator), numerator in parts.items():
            sums = self.sums[by]
            sums[key] = sums.get(key, Fraction(0)) + Fraction(numerator, denominator)
        self.reports += reports


def _sync(
    conn: sqlite3.Connection, path: str, books: _Books | None, *, payloads: bool
) -> tuple[_Books, dict[int, bytes]]:
    """Verify the books in ``conn``'s open transaction (module docstring, "Integrity"): the whole file when
    ``books`` is None, reports' bytes included, else what can have changed since ``books`` were verified,
    which are then brought up to date in place. Returns the books and, with ``payloads`` or in full, every
    report's bytes, each checked against its verified digest; raises :class:`ClientLedgerIntegrityError`:
    not books at all, or every problem found."""
    payloads = payloads or books is None
    problems: list[str] = []
    try:
        meta = dict(conn.execute("SELECT key, value FROM meta").fetchall())
        if meta.get("format") != FORMAT:
            raise ClientLedgerIntegrityError.not_books(path)
        if books is None:
            books = _Books(meta, _header(meta, problems))
        elif (meta.get("header"), meta.get("genesis")) != books.header:
            problems.append("the books' header (format, id or budgets) was edited.")
        columns = {"campaigns": _CAMPAIGN_COLUMNS, "reports": _REPORT_COLUMNS}
        rows = {
            table: conn.execute(
                f"SELECT {columns[table]}, hash FROM {table} WHERE seq >= ? ORDER BY seq",
                (books.start(table),),
            ).fetchall()
            for table, _ in _CHAINS
        }
        stored = dict(conn.execute("SELECT seq, payload FROM reports").fetchall()) if payloads else {}
    except sqlite3.DatabaseError as exc:
        if _busy(exc):
            raise
        raise ClientLedgerIntegrityError.not_books(path) from exc
    for table, _ in _CHAINS:
        books.extend(table, rows[table], meta, problems)
    for report in books.reports if payloads else ():
        payload = stored.get(report.seq)
        if not isinstance(payload, bytes) or hashlib.sha256(payload).hexdigest() != report.digest:
            problems.append(
                f"report {report.seq}'s bytes are missing or do not match their digest: they were altered."
            )
    if problems:
        raise ClientLedgerIntegrityError.unverified(path, problems)
    return books, stored


def _header(meta: dict[str, str], problems: list[str]) -> dict[str, Fraction | None]:
    """The budgets the header fixes; a problem (and no budgets) when it was edited or cannot be read."""
    header = meta.get("header", "")
    if meta.get("genesis") != _genesis(header):
        problems.append("the books' header (format, id or budgets) was edited.")
    try:
        fields = json.loads(header)
        texts = [fields["daily_budget"], fields["lifetime_budget"]]
    except (ValueError, TypeError, KeyError):
        problems.append("the books' header cannot be read.")
        return {"daily_budget": None, "lifetime_budget": None}
    budgets = [None if text is None else _amount(text) for text in texts]
    if all(b is None for b in budgets) or any(b is not None and b <= 0 for b in budgets):
        problems.append("the books' header holds no positive budget.")
    return dict(zip(("daily_budget", "lifetime_budget"), budgets, strict=True))


@lru_cache(maxsize=4096)
def _amount(text: object) -> Fraction:
    """A stored amount: ``num/den`` text as written by :func:`_text` (no sign, no NaN, no exponent), else
    -1, which every check refuses. Cached: a device's charges repeat a few epsilons, and parsing each
    again was a fifth of opening 10,000 reports."""
    match = _FRACTION_TEXT.fullmatch(text) if isinstance(text, str) else None
    if match is None:
        return Fraction(-1)
    try:
        return Fraction(int(match[1]), int(match[2]))
    except ValueError:  # more digits than Python reads from text
        return Fraction(-1)


def _text(value: Fraction) -> str:
    """How the books store an amount: exact ``num/den`` text."""
    return f"{value.numerator}/{value.denominator}"


def _canonical(value: Any) -> str:
    """The one serialisation that is hashed: sorted keys, no spaces; anything JSON lacks (bytes written
    into a text column) by its ``repr``, so it hashes differently rather than failing."""
    return json.dumps(value, ensure_ascii=False, sort_keys=True, separators=(",", ":"), default=repr)


def _genesis(header: str) -> str:
    """Where both chains start: the hash of the format and the header."""
    return hashlib.sha256(f"{FORMAT}\n{header}".encode()).hexdigest()


def _link(previous: str, record: Sequence[Any]) -> str:
    """``sha256(previous hash || canonical record)``, the central ledger's chain rule
    (:func:`kakeibo.accounting.records.chain_hash`), restated here because a device loads no ledger."""
    return hashlib.sha256(previous.encode("ascii", "replace") + _canonical(list(record)).encode()).hexdigest()


def _append(
    conn: sqlite3.Connection, books: _Books, table: str, row: tuple[Any, ...], payload: bytes | None = None
) -> None:
    """Insert ``row`` (its columns before the hash; ``row[0]`` is the next sequence number) into ``table``,
    chained to the verified head, and move the head and count in the same transaction."""
    digest = _link(books.ends[table][1], [dict(_CHAINS)[table], *row])
    columns = _CAMPAIGN_COLUMNS if table == "campaigns" else _REPORT_COLUMNS
    values = (*row, digest) if payload is None else (*row, digest, payload)
    names = "hash" if payload is None else "hash, payload"
    marks = ", ".join("?" * len(values))
    conn.execute(f"INSERT INTO {table} ({columns}, {names}) VALUES ({marks})", values)
    conn.executemany(
        "UPDATE meta SET value = ? WHERE key = ?",
        [(digest, f"{table}_head"), (str(row[0]), f"{table}_count")],
    )


def _create(conn: sqlite3.Connection, budgets: dict[str, Fraction | None]) -> None:
    """Write empty books with ``budgets`` into the empty database ``conn``, in one transaction."""
    fields = {name: None if value is None else _text(value) for name, value in budgets.items()}
    header = _canonical({"format": FORMAT, "id": uuid.uuid4().hex, **fields})
    genesis = _genesis(header)
    conn.execute("BEGIN IMMEDIATE")
    for statement in _SCHEMA:
        conn.execute(statement)
    meta = {"format": FORMAT, "header": header, "genesis": genesis}
    meta |= {
        f"{table}_{key}": value for table, _ in _CHAINS for key, value in (("head", genesis), ("count", "0"))
    }
    conn.executemany("INSERT INTO meta VALUES (?, ?)", list(meta.items()))
    conn.execute("COMMIT")


def _create_file(path: str, budgets: dict[str, Fraction | None]) -> None:
    """Create books at ``path`` whole, or keep the books another process created there first: build them in
    a temporary file beside it, then hard-link that into place (``os.link`` never replaces a file)."""
    directory = os.path.dirname(os.path.abspath(path))
    handle, temporary = tempfile.mkstemp(prefix=f".{os.path.basename(path)}.", suffix=".new", dir=directory)
    os.close(handle)
    try:
        conn = sqlite3.connect(temporary, isolation_level=None)
        try:
            _create(conn, budgets)
        finally:
            conn.close()
        try:
            os.link(temporary, path)
        except FileExistsError:
            return  # another process's books, opened and checked like any others
        if os.name == "posix":  # the new name must outlive a power cut before a report relies on it
            handle = os.open(directory, os.O_RDONLY)
            try:
                os.fsync(handle)
            finally:
                os.close(handle)
    finally:
        os.unlink(temporary)


def _busy(exc: sqlite3.DatabaseError) -> bool:
    """Whether SQLite's error means that another process holds the books (its own to report), rather than
    that the file is not books."""
    return "locked" in str(exc) or "busy" in str(exc)


def _randomize(randomizer: LocalRandomizer | RapporClient, value: Any, rng: Rng) -> Any:
    """One report of ``value``: a memoising client's, or the randomizer's for a one-client batch."""
    if isinstance(randomizer, RapporClient):
        return randomizer.report([value], rng=rng)
    randomize = getattr(randomizer, "randomize", None)
    if not callable(randomize):
        raise ArgumentTypeError(
            f"{type(randomizer).__name__} has no client side (randomize) to report through."
        )
    return randomize([value], rng=rng)


def _shown(value: Fraction | None) -> str:
    return "none" if value is None else format_fraction(value)
