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

Neighbour relation: local, any two values of this device's person, report by report; the books bound the
sequential composition of everything the device sent.
"""

from __future__ import annotations

import os
import sqlite3
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime, timezone
from fractions import Fraction
from typing import TYPE_CHECKING, Any

import numpy as np

from ..errors import Error
from ..mechanisms.base import Rng
from ..privacy import Number, PureDP, as_fraction, format_fraction
from .framework import LocalRandomizer
from .rappor import RapporClient
from .reports import Reports

if TYPE_CHECKING:
    from .campaign import Campaign

__all__ = ["ClientBudgetExceeded", "ClientLedger", "SentReport"]

#: The columns of a report row after its sequence number.
_COLUMNS = "sent_at, day, campaign, randomizer, report_epsilon, charged, memo, payload"

PathLike = str | os.PathLike[str]
Clock = Callable[[], datetime]

_SCHEMA = """
CREATE TABLE IF NOT EXISTS settings (name TEXT PRIMARY KEY, value TEXT);
CREATE TABLE IF NOT EXISTS campaigns (
    name TEXT PRIMARY KEY, enrolled_at TEXT NOT NULL, days INTEGER NOT NULL,
    daily TEXT NOT NULL, total TEXT NOT NULL, asks TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS reports (
    seq INTEGER PRIMARY KEY, sent_at TEXT NOT NULL, day TEXT NOT NULL, campaign TEXT NOT NULL,
    randomizer TEXT NOT NULL, report_epsilon TEXT NOT NULL, charged TEXT NOT NULL, memo TEXT,
    payload BLOB NOT NULL
);
CREATE INDEX IF NOT EXISTS reports_day ON reports (day);
CREATE INDEX IF NOT EXISTS reports_campaign ON reports (campaign);
CREATE INDEX IF NOT EXISTS reports_memo ON reports (memo);
"""


class ClientBudgetExceeded(Error):  # noqa: N818 -- the name reads as the event it reports
    """The device refused to randomize: the report would exceed a budget (nothing was sent or charged)."""


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

    ``daily_budget`` and ``lifetime_budget`` (pure epsilon; at least one) are fixed when the file is
    created; reopening it with other values is refused, and reopening it without them uses the stored
    ones. ``clock`` (default: the system clock) gives the time; its UTC date is the day.

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
        self._conn = sqlite3.connect(os.fspath(path), isolation_level=None, timeout=30)
        self._conn.executescript(_SCHEMA)
        wanted = {"daily_budget": _budget(daily_budget, "daily_budget")}
        wanted["lifetime_budget"] = _budget(lifetime_budget, "lifetime_budget")
        with self._transaction() as conn:
            stored = dict(conn.execute("SELECT name, value FROM settings").fetchall())
            if not stored:
                if all(v is None for v in wanted.values()):
                    raise ValueError("a new client ledger needs a daily_budget or a lifetime_budget.")
                conn.executemany(
                    "INSERT INTO settings VALUES (?, ?)",
                    [(k, "none" if v is None else str(v)) for k, v in wanted.items()],
                )
                stored = {k: "none" if v is None else str(v) for k, v in wanted.items()}
        self._budgets = {k: None if v == "none" else Fraction(v) for k, v in stored.items()}
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
        with self._transaction() as conn:
            row = _declared(conn, campaign.name)
            if row is not None:
                if row != (daily, total, asks):
                    raise ValueError(f"a different campaign named {campaign.name!r} is already enrolled.")
                return
            enrolled = (campaign.name, self._now().isoformat(), campaign.days, str(daily), str(total), asks)
            conn.execute("INSERT INTO campaigns VALUES (?, ?, ?, ?, ?, ?)", enrolled)

    def campaigns(self) -> list[str]:
        """The names of the enrolled campaigns, in enrolment order."""
        rows = self._conn.execute("SELECT name FROM campaigns ORDER BY enrolled_at, name").fetchall()
        return [name for (name,) in rows]

    # -- reporting -----------------------------------------------------------------------------------------
    def report(
        self, campaign: str, randomizer: LocalRandomizer | RapporClient, value: Any, *, rng: Rng = None
    ) -> Any:
        """Randomize ``value`` with ``randomizer`` for ``campaign`` and return what to send (the randomizer's
        output for a one-client batch), or raise :class:`ClientBudgetExceeded` without randomizing.

        The charge is the randomizer's ``privacy_loss``; for a :class:`RapporClient` it is credited for
        memoisation (module docstring). It must fit in the campaign's declared daily and total losses, the
        device's daily budget and its lifetime budget.
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
        with self._transaction() as conn:
            declared = _declared(conn, campaign)
            if declared is None:
                raise ClientBudgetExceeded(
                    f"This device has not enrolled in campaign {campaign!r}; nothing was sent."
                )
            if name not in declared[2].split("\n"):
                raise ClientBudgetExceeded(
                    f"Campaign {campaign!r} did not declare reports by {name}; nothing was sent."
                )
            charge = loss
            if memo is not None and cap is not None:
                so_far = _sum(conn, "memo = ? AND randomizer = ?", (memo, name))
                charge = max(Fraction(0), min(loss, cap - so_far))
            self._check(conn, campaign, day, charge, declared[:2])
            sent = _randomize(randomizer, value, rng)
            row = (now.isoformat(), day, campaign, name, str(loss), str(charge), memo, _wire(sent))
            conn.execute(f"INSERT INTO reports ({_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?)", row)
        return sent

    def _check(
        self,
        conn: sqlite3.Connection,
        campaign: str,
        day: str,
        charge: Fraction,
        declared: tuple[Fraction, Fraction],
    ) -> None:
        """Raise :class:`ClientBudgetExceeded` unless ``charge`` fits in every cap: the campaign's declared
        daily and total losses, the device's daily and lifetime budgets."""
        named = f"Campaign {campaign!r} declared at most"
        caps = [
            (
                declared[0],
                _sum(conn, "campaign = ? AND day = ?", (campaign, day)),
                named + " {cap} a day and has spent {spent} today",
            ),
            (
                declared[1],
                _sum(conn, "campaign = ?", (campaign,)),
                named + " {cap} in all and has spent {spent}",
            ),
        ]
        if (cap := self._budgets["daily_budget"]) is not None:
            caps.append(
                (
                    cap,
                    _sum(conn, "day = ?", (day,)),
                    "This device allows {cap} a day and has spent {spent} today",
                )
            )
        if (cap := self._budgets["lifetime_budget"]) is not None:
            caps.append(
                (
                    cap,
                    _sum(conn, "1 = 1", ()),
                    "This device allows {cap} in its lifetime and has spent {spent}",
                )
            )
        for cap, spent, message in caps:
            if spent + charge > cap:
                text = message.format(cap=PureDP(cap), spent=PureDP(spent))
                raise ClientBudgetExceeded(f"{text}; this report ({PureDP(charge)}) was not sent.")

    # -- the books -----------------------------------------------------------------------------------------
    def entries(self, campaign: str | None = None) -> list[SentReport]:
        """Every report sent (for ``campaign``, if given), oldest first."""
        where, args = ("WHERE campaign = ?", (campaign,)) if campaign is not None else ("", ())
        rows = self._conn.execute(
            f"SELECT seq, {_COLUMNS} FROM reports {where} ORDER BY seq", args
        ).fetchall()
        return [
            SentReport(
                seq, at, day, name, rand, Fraction(eps), Fraction(paid), memo is not None, bytes(payload)
            )
            for seq, at, day, name, rand, eps, paid, memo, payload in rows
        ]

    def spent(self, *, day: str | None = None, campaign: str | None = None) -> PureDP:
        """What the device has been charged: in all, on ``day`` (``YYYY-MM-DD``, UTC), for ``campaign``."""
        chosen = [(sql, v) for sql, v in (("day = ?", day), ("campaign = ?", campaign)) if v is not None]
        where = " AND ".join(sql for sql, _ in chosen) or "1 = 1"
        return PureDP(_sum(self._conn, where, tuple(v for _, v in chosen)))

    def remaining_today(self) -> PureDP | None:
        """What the daily budget leaves today (None without a daily budget)."""
        cap = self._budgets["daily_budget"]
        if cap is None:
            return None
        return PureDP(max(Fraction(0), cap - self.spent(day=self._now().date().isoformat()).epsilon))

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

    @contextmanager
    def _transaction(self) -> Iterator[sqlite3.Connection]:
        self._conn.execute("BEGIN IMMEDIATE")
        try:
            yield self._conn
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


def _declared(conn: sqlite3.Connection, campaign: str) -> tuple[Fraction, Fraction, str] | None:
    """The enrolled campaign's declared daily and total losses and its randomizers, or None."""
    row = conn.execute("SELECT daily, total, asks FROM campaigns WHERE name = ?", (campaign,)).fetchone()
    return None if row is None else (Fraction(row[0]), Fraction(row[1]), row[2])


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


def _sum(conn: sqlite3.Connection, where: str, args: Sequence[Any]) -> Fraction:
    """The exact sum of the charges of the reports matching ``where`` (one of this module's fixed clauses)."""
    rows = conn.execute(f"SELECT charged FROM reports WHERE {where}", tuple(args)).fetchall()
    return sum((Fraction(c) for (c,) in rows), Fraction(0))
