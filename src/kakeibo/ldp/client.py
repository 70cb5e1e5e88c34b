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
  Opening the books verifies everything (:meth:`ClientLedger.verify`), and every later read and report
  re-verifies both chains inside its own transaction before it sums a charge, so a ``charged`` edited from
  1 to 0, a deleted (the last one included), reordered or inserted row, or an edited budget stops the
  device (:class:`ClientLedgerIntegrityError`) instead of letting it spend again; each stored amount must
  read as an exact non-negative fraction, a charge at most its report's epsilon. The chain has no secret
  key: whoever can rewrite the whole file can recompute it. What it stops is corruption and edits of some
  rows, by mistake or by software that does not recompute the chain.
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
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime, timezone
from fractions import Fraction
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

import numpy as np

from ..errors import Error
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
        raise ValueError(f"{name} must be positive, got {format_fraction(exact)}.")
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
        wanted = {"daily_budget": _budget(daily_budget, "daily_budget")}
        wanted["lifetime_budget"] = _budget(lifetime_budget, "lifetime_budget")
        self.path = os.fspath(path)
        new = self.path == ":memory:" or not os.path.lexists(self.path)
        if new and all(v is None for v in wanted.values()):
            raise ValueError("a new client ledger needs a daily_budget or a lifetime_budget.")
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
            self._budgets = self._read(payloads=True).budgets
        except BaseException:
            self.close()
            raise
        for name, value in wanted.items():
            if value is not None and self._budgets[name] != value:
                self.close()
                raise ValueError(
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
        with self._transaction() as (conn, books):
            known = books.campaigns.get(campaign.name)
            if known is not None:
                if known != (daily, total, asks):
                    raise ValueError(f"a different campaign named {campaign.name!r} is already enrolled.")
                return
            row = (
                len(books.campaigns) + 1,
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
        return list(self._read().campaigns)

    # -- reporting -----------------------------------------------------------------------------------------
    def report(
        self, campaign: str, randomizer: LocalRandomizer | RapporClient, value: Any, *, rng: Rng = None
    ) -> Any:
        """Randomize ``value`` with ``randomizer`` for ``campaign`` and return what to send (the randomizer's
        output for a one-client batch), or raise :class:`ClientBudgetExceeded` without randomizing.

        The charge is the randomizer's ``privacy_loss``; for a :class:`RapporClient` it is credited for
        memoisation (module docstring). It must fit in the campaign's declared daily and total losses, the
        device's daily budget and its lifetime budget, summed from books verified in the same transaction
        (:class:`ClientLedgerIntegrityError` when they do not verify, and nothing is randomized).
        """
        if isinstance(randomizer, RapporClient):
            protocol: LocalRandomizer = randomizer.rappor
            memo: str | None = randomizer.memo_key(value)
            cap: Fraction | None = randomizer.rappor.longitudinal_loss.epsilon
        elif isinstance(randomizer, LocalRandomizer):
            protocol, memo, cap = randomizer, None, None
        else:
            kind = type(randomizer).__name__
            raise TypeError(f"randomizer must be a local randomizer or a RapporClient, not {kind}.")
        name, loss = randomizer_name(protocol), protocol.privacy_loss.epsilon
        now = self._now()
        day = now.date().isoformat()
        with self._transaction() as (conn, books):
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
            row = (len(books.reports) + 1, now.isoformat(), day, campaign, name, _text(loss), _text(charge))
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
        """Every report sent (for ``campaign``, if given), oldest first, from verified books."""
        books = self._read(payloads=True)
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
                books.payloads[r.seq],
            )
            for r in books.reports
            if campaign is None or r.campaign == campaign
        ]

    def spent(self, *, day: str | None = None, campaign: str | None = None) -> PureDP:
        """What the device has been charged: in all, on ``day`` (``YYYY-MM-DD``, UTC), for ``campaign``."""
        return PureDP(self._read().spent(day=day, campaign=campaign))

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
        ``problems`` name each finding's row. (Opening the books runs this; every read and report re-checks
        the chains and amounts.) The chain is unkeyed: it finds edits and corruption, not a rewrite of the
        whole file (module docstring).
        """
        self._read(payloads=True)

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
            raise ValueError("the client ledger's clock must return timezone-aware datetimes.")
        return now.astimezone(timezone.utc)

    def _read(self, *, payloads: bool = False) -> _Books:
        """The verified books, read in one snapshot (``payloads``: with every report's bytes, checked)."""
        with self._transaction(immediate=False, payloads=payloads) as (_, books):
            return books

    @contextmanager
    def _transaction(
        self, *, immediate: bool = True, payloads: bool = False
    ) -> Iterator[tuple[sqlite3.Connection, _Books]]:
        """A transaction (``BEGIN IMMEDIATE`` to write) and the books verified inside it."""
        try:
            self._conn.execute("BEGIN IMMEDIATE" if immediate else "BEGIN")
        except sqlite3.DatabaseError as exc:
            if _busy(exc):
                raise
            raise ClientLedgerIntegrityError.not_books(self.path) from exc
        try:
            yield self._conn, _load(self._conn, self.path, payloads=payloads)
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
    """A verified report row, its amounts parsed (its bytes are in :attr:`_Books.payloads`)."""

    seq: int
    sent_at: str
    day: str
    campaign: str
    randomizer: str
    report_epsilon: Fraction
    charged: Fraction
    memo: str | None


@dataclass(frozen=True)
class _Books:
    """What one verified read holds: the budgets, the campaigns in enrolment order, the reports, each chain's
    head hash, and (when asked for) the reports' bytes by sequence number."""

    budgets: dict[str, Fraction | None]
    campaigns: dict[str, _Declared]
    reports: list[_Report]
    heads: dict[str, str]
    payloads: dict[int, bytes]

    def spent(self, **match: str | None) -> Fraction:
        """The exact sum of the charges of the reports whose fields equal every value given (None: any)."""
        wanted = [(field, value) for field, value in match.items() if value is not None]
        chosen = (r.charged for r in self.reports if all(getattr(r, f) == v for f, v in wanted))
        return sum(chosen, Fraction(0))


def _load(conn: sqlite3.Connection, path: str, *, payloads: bool) -> _Books:
    """Read the books in ``conn``'s open transaction and verify them (module docstring, "Integrity"), or raise
    :class:`ClientLedgerIntegrityError`: not books at all, or every problem found."""
    try:
        meta = dict(conn.execute("SELECT key, value FROM meta").fetchall())
        if meta.get("format") != FORMAT:
            raise ClientLedgerIntegrityError.not_books(path)
        rows = {
            "campaigns": conn.execute(
                f"SELECT {_CAMPAIGN_COLUMNS}, hash FROM campaigns ORDER BY seq"
            ).fetchall(),
            "reports": conn.execute(f"SELECT {_REPORT_COLUMNS}, hash FROM reports ORDER BY seq").fetchall(),
        }
        stored = conn.execute("SELECT seq, payload FROM reports").fetchall() if payloads else []
    except sqlite3.DatabaseError as exc:
        if _busy(exc):
            raise
        raise ClientLedgerIntegrityError.not_books(path) from exc
    problems: list[str] = []
    budgets = _header(meta, problems)
    heads = {}
    for table, kind in _CHAINS:
        previous, expected = meta.get("genesis", ""), 1
        for row in rows[table]:
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
            previous, expected = str(row[-1]), row[0] + 1
        if meta.get(f"{table}_count") != str(len(rows[table])) or meta.get(f"{table}_head") != previous:
            problems.append(
                f"the last {kind} does not match the recorded head and count: rows were deleted, inserted "
                "or appended without the books."
            )
        heads[table] = previous
    campaigns = {}
    for seq, name, _, days, daily, total, asks, _ in rows["campaigns"]:
        declared = _Declared(_amount(daily), _amount(total), asks)
        if not (isinstance(days, int) and days > 0 and declared.daily > 0 and declared.total > 0):
            problems.append(f"campaign {seq} holds a declaration that is not a positive loss.")
        campaigns[name] = declared
    reports = []
    for seq, at, day, name, randomizer, eps, paid, memo, digest, _ in rows["reports"]:
        report = _Report(seq, at, day, name, randomizer, _amount(eps), _amount(paid), memo)
        if not 0 <= report.charged <= report.report_epsilon or report.report_epsilon <= 0:
            problems.append(
                f"report {seq} holds a charge that is negative, not an exact number, or above its report's "
                "epsilon."
            )
        if name not in campaigns or not isinstance(digest, str) or not _SHA256_TEXT.fullmatch(digest):
            problems.append(f"report {seq} names no enrolled campaign or holds no digest of its bytes.")
        reports.append(report)
    digests = {row[0]: row[-2] for row in rows["reports"]}
    for seq, payload in stored:
        if not isinstance(payload, bytes) or hashlib.sha256(payload).hexdigest() != digests.get(seq):
            problems.append(f"report {seq}'s bytes do not match their digest: they were altered.")
    if problems:
        raise ClientLedgerIntegrityError.unverified(path, problems)
    return _Books(budgets, campaigns, reports, heads, dict(stored))


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


def _amount(text: object) -> Fraction:
    """A stored amount: ``num/den`` text as written by :func:`_text` (no sign, no NaN, no exponent), else
    -1, which every check refuses."""
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
    digest = _link(books.heads[table], [dict(_CHAINS)[table], *row])
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
        raise TypeError(f"{type(randomizer).__name__} has no client side (randomize) to report through.")
    return randomize([value], rng=rng)


def _shown(value: Fraction | None) -> str:
    return "none" if value is None else format_fraction(value)
