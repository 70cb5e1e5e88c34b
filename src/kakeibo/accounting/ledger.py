"""The privacy-budget ledger: a persisted, transactional, hash-chained record of every charge.

Every central-DP release in kakeibo is paid for here first (see ``DESIGN.md``: one choke point). The ledger
is a SQLite database so that several processes -- notebook kernels, web workers, batch jobs -- can share
one budget without a server, or a PostgreSQL database (a ``postgresql://`` URL as ``path``) so that
processes on several machines -- query-service replicas -- can (:mod:`.storage` gives both the same
transaction contract):

* **One transaction per charge.** :meth:`Ledger.charge` opens a write transaction (SQLite's ``BEGIN
  IMMEDIATE``; PostgreSQL's advisory write lock), checks the request id, recomputes what has been spent
  *including the new charge* under the ledger's composition policy, refuses with :class:`BudgetExceeded`
  if any applicable budget would be exceeded, and otherwise appends the entry and commits. Two processes
  can therefore never both spend the last epsilon. Readers are never blocked (SQLite's WAL journal;
  PostgreSQL's snapshots), and a killed process is harmless: a charge is either committed or absent.
* **Exact amounts.** Losses are stored as ``"num/den"`` text with a kind tag and added as Fractions, so
  100 charges of ``Fraction(1, 100)`` spend exactly 1. (A *float* 0.01 is slightly more than 1/100 and
  is charged as the exact binary value it denotes: 100 of them do not fit in 1, which is the sound way
  round.)
* **Tamper evidence.** Each entry stores ``sha256(previous hash || canonical serialisation of the
  entry)``; budget changes form a second chain; both start from the hash of the ledger header (id,
  composition policy, budget kind). A meta table keeps each chain's head hash and length, updated in the
  same transaction, so :meth:`Ledger.verify` detects an edited, deleted (including the last), reordered
  or inserted row, and an edited budget or header. The chain is unkeyed: someone able to rewrite the
  whole file can recompute it, so publish :attr:`Ledger.head_hash` somewhere they cannot write.
* **Scopes.** Besides the global budget, budgets can be set per analyst, per dataset, and per (analyst,
  dataset); a charge must fit in every budget whose scope covers it. A charge with ``dataset=None``
  might have read any dataset, so it counts against every dataset budget; a charge with
  ``analyst=None`` counts only against budgets that are not specific to an analyst.
* **Parallel composition.** A charge may carry ``region=`` (a :class:`~kakeibo.accounting.Box` over one
  ``dataset``); charges over non-overlapping regions of the same dataset compose by the maximum weighted
  depth of their regions (seed 002, slides 51-61). This is only sound when each privacy unit sits at one
  point of the region's columns: record-level DP, or user-level DP over columns that are constant per
  user -- otherwise a user whose rows fall in two regions is charged once but affected twice -- so the
  box must declare ``unit="record"`` or ``unit="user"``. Charges without a region overlap everything.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import re
import uuid
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime, timezone
from fractions import Fraction
from typing import Any

from ..errors import Error
from ..privacy import ZCDP, ApproxDP, Number, PrivacyLoss, PureDP
from .composition import CompositionPolicy, convert, kind_name, kind_zero, loss_leq, resolve_policy
from .overlap import Box, max_weighted_depth
from .storage import Connection, StoreError, is_postgres_url, open_store, redact

__all__ = [
    "BudgetExceeded",
    "Ledger",
    "LedgerEntry",
    "LedgerIntegrityError",
    "Scope",
    "Verification",
]

_FORMAT = "kakeibo-ledger/1"
_KINDS: dict[str, type[PrivacyLoss]] = {"pure": PureDP, "approx": ApproxDP, "zcdp": ZCDP}
_FRACTION_TEXT = re.compile(r"^(0|[1-9][0-9]*)/([1-9][0-9]*)$")
_MAX_TEXT = 10_000

PathLike = str | os.PathLike[str]


class BudgetExceeded(Error):  # noqa: N818 -- the name reads as the event it reports
    """A charge was refused because it would exceed a budget; nothing was written.

    ``requested`` is the charge (in the budget's kind), ``remaining`` what was left in ``scope``.
    """

    def __init__(self, message: str, *, requested: PrivacyLoss, remaining: PrivacyLoss, scope: Scope) -> None:
        super().__init__(message)
        self.requested = requested
        self.remaining = remaining
        self.scope = scope


class DuplicateRequest(Error, ValueError):  # noqa: N818 -- the name reads as the event it reports
    """A request id that was already charged, presented where a replay is not allowed."""


class LedgerIntegrityError(Error, RuntimeError):
    """The ledger's stored state is inconsistent (tampering or corruption); see :meth:`Ledger.verify`."""


@dataclass(frozen=True)
class LedgerEntry:
    """One committed charge. ``hash`` chains it to every entry before it.

    ``loss`` is the loss as charged (before any conversion to the budget's kind); ``region`` is the box
    it was declared over, if any.
    """

    seq: int
    loss: PrivacyLoss
    label: str
    analyst: str | None
    dataset: str | None
    request_id: str | None
    created_at: datetime
    hash: str
    region: Box | None = None


@dataclass(frozen=True)
class Verification:
    """The outcome of :meth:`Ledger.verify`: truthy exactly when no problem was found."""

    ok: bool
    problems: tuple[str, ...]
    entries: int

    def __bool__(self) -> bool:
        return self.ok


@dataclass(frozen=True)
class Scope:
    """Which charges a budget limits: ``None`` means any analyst / any dataset.

    A charge counts against a scope when its analyst matches (or the scope has none) and its dataset
    matches (or the scope has none, or the charge names no dataset, since it may have read any).
    """

    analyst: str | None = None
    dataset: str | None = None

    def covers(self, analyst: str | None, dataset: str | None) -> bool:
        """Whether a charge by ``analyst`` on ``dataset`` counts against this scope."""
        return (self.analyst is None or analyst == self.analyst) and (
            self.dataset is None or dataset is None or dataset == self.dataset
        )

    def parts(self, template: str = "{kind} {name!r}") -> list[str]:
        """The scope's named parts rendered with ``template`` (``kind`` is "analyst" or "dataset")."""
        named = (("analyst", self.analyst), ("dataset", self.dataset))
        return [template.format(kind=kind, name=name) for kind, name in named if name is not None]

    def describe(self) -> str:
        """E.g. ``"the budget of analyst 'alice' on dataset 'census'"``."""
        parts = self.parts()
        return "the budget of " + " on ".join(parts) if parts else "the global budget"


# -- validation ----------------------------------------------------------------------------------


_CREATE_HINT = "give a budget to create one (budget= in Python, --budget on the command line)."


def _canonical_loss(loss: object, what: str) -> PrivacyLoss:
    """Re-validate a loss (or a plain number, meaning pure epsilon) through its constructor."""
    if isinstance(loss, bool):
        raise TypeError(f"{what} must be a privacy loss or a number, not a bool.")
    if isinstance(loss, (int, float, Fraction)):
        return PureDP(loss)
    if isinstance(loss, tuple) and len(loss) == 2:  # (epsilon, delta)
        return ApproxDP(*loss)
    if isinstance(loss, PureDP):
        return PureDP(loss.epsilon)
    if isinstance(loss, ApproxDP):
        return ApproxDP(loss.epsilon, loss.delta)
    if isinstance(loss, ZCDP):
        return ZCDP(loss.rho)
    if isinstance(loss, PrivacyLoss):
        raise TypeError(
            f"the ledger accounts PureDP, ApproxDP and ZCDP losses, not {type(loss).__name__}; "
            "convert it first (for an RDP curve: .to_approx(delta))."
        )
    raise TypeError(
        f"{what} must be a PureDP, ApproxDP or ZCDP loss, an (epsilon, delta) pair or a number, got "
        f"{type(loss).__name__}."
    )


def _text(value: object, name: str, *, required: bool = False) -> str | None:
    if value is None and not required:
        return None
    if not isinstance(value, str):
        raise TypeError(f"{name} must be a string, got {type(value).__name__}.")
    if not value.strip():
        raise ValueError(f"{name} must not be empty.")
    if len(value) > _MAX_TEXT or "\x00" in value:
        raise ValueError(f"{name} must be at most {_MAX_TEXT} characters without NUL bytes.")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise ValueError(f"{name} must be valid Unicode text (it contains a lone surrogate).") from None
    return value


def _region(region: object, dataset: str | None) -> Box | None:
    if region is None:
        return None
    if not isinstance(region, Box):
        raise TypeError(f"region must be a kakeibo.accounting.Box, got {type(region).__name__}.")
    if region.unit is None:
        raise ValueError(
            'a region must declare unit="record" (record-level DP) or unit="user" (columns constant per '
            "user), because parallel composition is unsound otherwise."
        )
    if dataset is None:
        raise ValueError(
            "a charge with a region must name its dataset=, since regions of different datasets overlap."
        )
    return region


# -- storage encoding -----------------------------------------------------------------------------


def _frac_text(value: Fraction) -> str:
    return f"{value.numerator}/{value.denominator}"


def _parse_frac(text: object) -> Fraction:
    if not isinstance(text, str):
        raise ValueError(f"expected 'num/den' text, found {text!r}")
    match = _FRACTION_TEXT.match(text)
    if match is None:
        raise ValueError(f"expected 'num/den' text, found {text!r}")
    return Fraction(int(match.group(1)), int(match.group(2)))


def _loss_columns(loss: PrivacyLoss) -> tuple[str, str | None, str | None, str | None]:
    if isinstance(loss, PureDP):
        return "pure", _frac_text(loss.epsilon), None, None
    if isinstance(loss, ApproxDP):
        return "approx", _frac_text(loss.epsilon), _frac_text(loss.delta), None
    if isinstance(loss, ZCDP):
        return "zcdp", None, None, _frac_text(loss.rho)
    raise TypeError(f"cannot store a {type(loss).__name__} loss.")


def _loss_from_columns(kind: object, epsilon: object, delta: object, rho: object) -> PrivacyLoss:
    if kind == "pure" and delta is None and rho is None:
        return PureDP(_parse_frac(epsilon))
    if kind == "approx" and rho is None:
        return ApproxDP(_parse_frac(epsilon), _parse_frac(delta))
    if kind == "zcdp" and epsilon is None and delta is None:
        return ZCDP(_parse_frac(rho))
    raise ValueError(f"inconsistent loss columns (kind {kind!r})")


def _canonical_json(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, sort_keys=True, separators=(",", ":"))


def _chain(previous: str, record: Sequence[Any]) -> str:
    """``sha256(previous_hash || canonical serialisation of the record)``, hex."""
    return hashlib.sha256(
        previous.encode("ascii", "replace") + _canonical_json(list(record)).encode()
    ).hexdigest()


def _genesis(header_text: str) -> str:
    return hashlib.sha256(f"{_FORMAT}\n".encode() + header_text.encode()).hexdigest()


_ENTRY_COLUMNS = (
    "seq, kind, epsilon, delta, rho, label, analyst, dataset, request_id, region, created_at, hash"
)
_BUDGET_COLUMNS = "seq, analyst, dataset, kind, epsilon, delta, rho, created_at, hash"

# Column types in braces differ between SQLite and PostgreSQL (``Store.ddl`` fills them in).
_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL){strict};
CREATE TABLE IF NOT EXISTS entries (
    seq {int} PRIMARY KEY, kind TEXT NOT NULL, epsilon TEXT, delta TEXT, rho TEXT,
    label TEXT NOT NULL, analyst TEXT, dataset TEXT, request_id TEXT UNIQUE, region TEXT,
    created_at TEXT NOT NULL, hash TEXT NOT NULL
){strict};
CREATE TABLE IF NOT EXISTS budgets (
    seq {int} PRIMARY KEY, analyst TEXT, dataset TEXT, kind TEXT NOT NULL, epsilon TEXT, delta TEXT,
    rho TEXT, created_at TEXT NOT NULL, hash TEXT NOT NULL
){strict}
"""
#: Stored releases (see :meth:`Ledger.release`); added after the first ledger files were written, so it is
#: also created when an older ledger is opened.
_RELEASES_TABLE = """
CREATE TABLE IF NOT EXISTS releases (
    request_id TEXT PRIMARY KEY, seq {int} NOT NULL, payload {blob} NOT NULL, sha256 TEXT NOT NULL
){strict}
"""


def _entry_record(row: Sequence[Any]) -> list[Any]:
    return ["entry", *row[:11]]


def _budget_record(row: Sequence[Any]) -> list[Any]:
    return ["budget", *row[:8]]


def _entry_from_row(row: Sequence[Any]) -> LedgerEntry:
    seq, kind, eps, dlt, rho, label, analyst, dataset, request_id, region, created_at, digest = row
    return LedgerEntry(
        seq=int(seq),
        loss=_loss_from_columns(kind, eps, dlt, rho),
        label=str(label),
        analyst=analyst,
        dataset=dataset,
        request_id=request_id,
        created_at=datetime.fromisoformat(str(created_at)),
        hash=str(digest),
        region=None if region is None else Box.from_json(json.loads(region)),
    )


@dataclass(frozen=True)
class _Item:
    """A charge as the composition needs it: additive weights, region and scope keys."""

    weights: tuple[Fraction, ...]
    region: Box | None
    analyst: str | None
    dataset: str | None


_Key = tuple[str | None, str | None]


class _Tally:
    """Charges grouped by (analyst, dataset): exact running sums of those without a region, and per distinct
    region the summed weights of the charges over it (identical boxes always overlap, so merging them
    keeps the maximum weighted depth). A budget check then costs O(groups + distinct regions), not
    O(entries)."""

    def __init__(self, width: int) -> None:
        self.width = width
        self.counts: dict[_Key, int] = {}
        self.plain: dict[_Key, list[Fraction]] = {}
        self.regions: dict[_Key, dict[Box, list[Fraction]]] = {}

    def add(self, item: _Item) -> None:
        key = (item.analyst, item.dataset)
        self.counts[key] = self.counts.get(key, 0) + 1
        if item.region is None:
            sums = self.plain.setdefault(key, [Fraction(0)] * self.width)
        else:
            sums = self.regions.setdefault(key, {}).setdefault(item.region, [Fraction(0)] * self.width)
        for j, weight in enumerate(item.weights):
            sums[j] += weight

    def sums(self, scope: Scope, extra: _Item | None = None) -> tuple[tuple[Fraction, ...], bool]:
        """Per-weight totals of the charges ``scope`` covers (plus ``extra``): plain sums, plus the maximum
        weighted depth of the regions per dataset; and whether there is any charge at all."""
        covered = [key for key in self.counts if scope.covers(*key)]
        totals = [Fraction(0)] * self.width
        by_dataset: dict[str | None, dict[Box, list[Fraction]]] = {}
        for key in covered:
            for j, weight in enumerate(self.plain.get(key, ())):
                totals[j] += weight
            for box, weights in self.regions.get(key, {}).items():
                merged = by_dataset.setdefault(key[1], {}).setdefault(box, [Fraction(0)] * self.width)
                for j, weight in enumerate(weights):
                    merged[j] += weight
        if extra is not None:
            if extra.region is None:
                target = totals
            else:
                target = by_dataset.setdefault(extra.dataset, {}).setdefault(
                    extra.region, [Fraction(0)] * self.width
                )
            for j, weight in enumerate(extra.weights):
                target[j] += weight
        for group in by_dataset.values():
            boxes = list(group)
            for j in range(self.width):
                column = [group[box][j] for box in boxes]
                if any(column):
                    totals[j] += max_weighted_depth(boxes, column)
        return tuple(totals), bool(covered) or extra is not None


class Ledger:
    """A privacy-budget ledger stored in the SQLite file ``path``, or in the PostgreSQL database of a
    ``postgresql://`` URL (see the module docstring).

    ``budget`` (a loss, or a plain number meaning pure epsilon) is the global budget; it is stored in the
    ledger, so reopening needs ``budget=None`` (use the stored one) or the same value. ``composition`` is
    ``"sequential"`` (the default for a new ledger), ``"advanced"`` (with ``delta_slack=``), ``"zcdp"``
    or a :class:`~kakeibo.accounting.CompositionPolicy`; ``None`` reopens with the stored policy.
    ``timeout`` is how long (seconds) a charge waits for another process's transaction.

    >>> from fractions import Fraction
    >>> ledger = Ledger(":memory:", budget=1)
    >>> for _ in range(100):
    ...     _ = ledger.charge(PureDP(Fraction(1, 100)), label="count")
    >>> ledger.remaining(), bool(ledger.verify())
    (PureDP(epsilon=Fraction(0, 1)), True)
    """

    def __init__(
        self,
        path: PathLike,
        budget: PrivacyLoss | Number | tuple[Number, Number] | None = None,
        *,
        composition: str | CompositionPolicy | None = None,
        delta_slack: Number | None = None,
        timeout: float = 60.0,
    ) -> None:
        if path is None:
            raise TypeError(
                "a ledger needs a path: a file name, or ':memory:' for a throwaway in-memory ledger."
            )
        if not isinstance(path, (str, os.PathLike)):
            raise TypeError(f"path must be a string or path-like object, got {type(path).__name__}.")
        path_text = os.fspath(path)
        if not isinstance(path_text, str) or not path_text:
            raise TypeError("path must be a non-empty text path.")
        if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or not math.isfinite(timeout):
            raise TypeError("timeout must be a finite number of seconds.")
        if timeout <= 0:
            raise ValueError(f"timeout must be positive, got {timeout}.")
        budget_loss = None if budget is None else _canonical_loss(budget, "budget")
        if composition is None and delta_slack is not None:
            raise ValueError('delta_slack only applies together with composition="advanced".')
        policy = None if composition is None else resolve_policy(composition, delta_slack)
        if budget_loss is not None:
            kind_name(type(budget_loss))
            (policy or resolve_policy("sequential")).check_budget(budget_loss)
        postgres = is_postgres_url(path_text)
        if budget_loss is None:
            if path_text == ":memory:":
                raise ValueError("a new in-memory ledger needs a budget.")
            if not postgres and not os.path.exists(path_text):
                raise FileNotFoundError(f"there is no ledger at {path_text}; {_CREATE_HINT}")

        try:
            self._store = open_store(path_text, timeout=float(timeout), owner="ledger")
        except StoreError as exc:
            raise ValueError(f"{redact(path_text)} is not a usable kakeibo ledger ({exc}).") from exc
        self.path = self._store.describe()
        self._pid = os.getpid()
        self._cache: list[tuple[LedgerEntry, _Item]] = []
        self._tally: _Tally | None = None  # built on first sync, once the policy is known
        try:
            self._open(budget_loss, policy)
        except self._store.database_errors as exc:
            self._store.close()
            raise ValueError(f"{self.path} is not a usable kakeibo ledger ({exc}).") from exc
        except BaseException:
            self._store.close()
            raise

    # -- setup ---------------------------------------------------------------------------------

    def _is_initialised(self, conn: Connection) -> bool:
        if not self._store.has_table(conn, "meta"):
            return False
        return conn.execute("SELECT 1 FROM meta WHERE key = 'header'").fetchone() is not None

    def _open(self, budget: PrivacyLoss | None, policy: CompositionPolicy | None) -> None:
        with self._transaction(immediate=False) as conn:
            initialised = self._is_initialised(conn)
            has_releases = initialised and self._store.has_table(conn, "releases")
        if not initialised:
            if budget is None:
                if self._store.kind == "postgres":
                    raise FileNotFoundError(f"there is no ledger at {self.path}; {_CREATE_HINT}")
                raise ValueError(f"{self.path} is not a kakeibo ledger; {_CREATE_HINT}")
            with self._transaction(immediate=True) as conn:
                if not self._is_initialised(conn):  # another process may have created it meanwhile
                    self._create(conn, budget, policy or resolve_policy("sequential"))
        elif not has_releases:
            with self._transaction(immediate=True) as conn:
                for statement in self._store.ddl(_RELEASES_TABLE):
                    conn.execute(statement)
        header = self._header()
        if header.get("format") != _FORMAT:
            raise ValueError(f"{self.path} has ledger format {header.get('format')!r}, expected {_FORMAT!r}.")
        try:
            self._kind = _KINDS[header["budget_kind"]]
            self._policy = resolve_policy(header["composition"])
        except (KeyError, TypeError, ValueError) as exc:
            raise ValueError(f"{self.path} has a damaged ledger header ({exc!r}).") from None
        if policy is not None and policy.config() != self._policy.config():
            raise ValueError(
                f"this ledger uses composition {self._policy.config()}, not {policy.config()}; "
                "pass composition=None to use the stored policy."
            )
        if budget is not None:
            stored = self.budgets().get(Scope())
            if stored != budget:
                shown = "none" if stored is None else str(stored)
                raise ValueError(
                    f"this ledger's global budget is {shown}, not {budget!s}; "
                    "pass budget=None to use the stored budget, or change it with set_budget()."
                )

    def _create(self, conn: Connection, budget: PrivacyLoss, policy: CompositionPolicy) -> None:
        for statement in self._store.ddl(_SCHEMA + ";" + _RELEASES_TABLE):
            conn.execute(statement)
        header_text = _canonical_json(
            {
                "format": _FORMAT,
                "ledger_id": uuid.uuid4().hex,
                "created_at": _now(),
                "budget_kind": kind_name(type(budget)),
                "composition": policy.config(),
            }
        )
        genesis = _genesis(header_text)
        conn.executemany(
            "INSERT INTO meta (key, value) VALUES (?, ?)",
            [
                ("header", header_text),
                ("genesis", genesis),
                ("entries_head", genesis),
                ("entries_count", "0"),
                ("budgets_head", genesis),
                ("budgets_count", "0"),
            ],
        )
        self._append_budget(conn, budget, Scope())

    def _header(self) -> dict[str, Any]:
        with self._transaction(immediate=False) as conn:
            row = conn.execute("SELECT value FROM meta WHERE key = 'header'").fetchone()
        try:
            header = json.loads(row[0])
        except ValueError:
            header = None
        if not isinstance(header, dict):
            raise ValueError(f"{self.path} has a damaged ledger header.")
        return header

    # -- plumbing ------------------------------------------------------------------------------

    def _check_process(self) -> None:
        if os.getpid() != self._pid:
            raise RuntimeError(
                "a Ledger cannot be shared across fork(); open a new Ledger in the child process."
            )

    @contextmanager
    def _transaction(self, *, immediate: bool) -> Iterator[Connection]:
        """One transaction of the store; ``immediate`` takes the write lock up front (see :mod:`.storage`)."""
        self._check_process()
        with self._store.transaction(write=immediate) as conn:
            yield conn

    def _meta(self, conn: Connection) -> dict[str, str]:
        return {str(k): str(v) for k, v in conn.execute("SELECT key, value FROM meta")}

    def _budget_rows(self, conn: Connection) -> list[tuple[Any, ...]]:
        return list(conn.execute(f"SELECT {_BUDGET_COLUMNS} FROM budgets ORDER BY seq"))

    def _load_budgets(self, conn: Connection, *, check: bool) -> dict[Scope, PrivacyLoss]:
        """The budget in force per scope (latest row wins); with ``check``, re-verify the budget chain."""
        meta = self._meta(conn)
        rows = self._budget_rows(conn)
        if check:
            if _genesis(meta.get("header", "")) != meta.get("genesis"):
                raise LedgerIntegrityError("the ledger header was altered; run verify().")
            previous = meta.get("genesis", "")
            for row in rows:
                if _chain(previous, _budget_record(row)) != row[8]:
                    raise LedgerIntegrityError(
                        f"budget row {row[0]} does not match its hash; the ledger was altered (run verify())."
                    )
                previous = row[8]
            if previous != meta.get("budgets_head") or str(len(rows)) != meta.get("budgets_count"):
                raise LedgerIntegrityError(
                    "the budget history does not match its recorded head; run verify()."
                )
        budgets: dict[Scope, PrivacyLoss] = {}
        for row in rows:
            budgets[Scope(row[1], row[2])] = _loss_from_columns(row[3], row[4], row[5], row[6])
        return budgets

    def _append_budget(self, conn: Connection, budget: PrivacyLoss, scope: Scope) -> None:
        meta = self._meta(conn)
        seq = int(meta["budgets_count"]) + 1
        row = (seq, scope.analyst, scope.dataset, *_loss_columns(budget), _now())
        digest = _chain(meta["budgets_head"], _budget_record((*row, None)))
        conn.execute(
            f"INSERT INTO budgets ({_BUDGET_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)", (*row, digest)
        )
        conn.execute("UPDATE meta SET value = ? WHERE key = 'budgets_head'", (digest,))
        conn.execute("UPDATE meta SET value = ? WHERE key = 'budgets_count'", (str(seq),))

    def _item(self, entry: LedgerEntry) -> _Item:
        return _Item(self._policy.weights(entry.loss, self._kind), entry.region, entry.analyst, entry.dataset)

    def _sync(self, conn: Connection) -> tuple[list[tuple[LedgerEntry, _Item]], _Tally]:
        """The committed entries, read incrementally (they are append-only), checked against the meta head."""
        meta = self._meta(conn)
        try:
            count, head = int(meta["entries_count"]), meta["entries_head"]
        except (KeyError, ValueError):
            raise LedgerIntegrityError("the ledger's entry count or head is damaged; run verify().") from None
        cache, tally = self._cache, self._tally or self._new_tally()
        if len(cache) > count or (len(cache) == count and cache and cache[-1][0].hash != head):
            cache, tally = [], self._new_tally()
        last = cache[-1][0].seq if cache else 0
        rows = conn.execute(f"SELECT {_ENTRY_COLUMNS} FROM entries WHERE seq > ? ORDER BY seq", (last,))
        fresh = []
        for row in rows:
            entry = _entry_from_row(row)
            fresh.append((entry, self._item(entry)))
        cache = cache + fresh
        if len(cache) != count or (cache[-1][0].hash if cache else meta["genesis"]) != head:
            self._cache, self._tally = [], self._new_tally()
            raise LedgerIntegrityError(
                f"the ledger records {count} entries ending in {head[:12]}..., "
                "but its rows disagree; run verify()."
            )
        for _, item in fresh:
            tally.add(item)
        self._cache, self._tally = cache, tally
        return cache, tally

    def _new_tally(self) -> _Tally:
        return _Tally(len(self._policy.weights(kind_zero(self._kind), self._kind)))

    def _spent(self, tally: _Tally, scope: Scope) -> PrivacyLoss:
        sums, any_charge = tally.sums(scope)
        return self._policy.total(sums, self._kind, any_charge=any_charge)

    # -- public API ----------------------------------------------------------------------------

    def charge(
        self,
        loss: PrivacyLoss | Number,
        *,
        label: str,
        analyst: str | None = None,
        dataset: str | None = None,
        request_id: str | None = None,
        region: Box | None = None,
        replay: bool = True,
        release: bytes | None = None,
    ) -> LedgerEntry:
        """Record a charge of ``loss`` in one transaction, or raise :class:`BudgetExceeded` recording nothing.

        A plain number means pure epsilon. The charge is converted to the budget's kind (pure -> (eps, 0);
        pure -> eps^2/2 zCDP, Bun and Steinke 2016, Prop. 1.4; anything else is a TypeError). It must fit,
        together with what was spent, in every budget whose scope covers it, composed by the ledger's
        policy. A repeated ``request_id`` returns the original entry without charging again (a different
        charge under the same id is a ValueError); with ``replay=False`` a repeated id raises
        :class:`DuplicateRequest` instead -- for callers that would otherwise hand out a second noisy draw.

        ``release`` (needs ``request_id``) stores the released payload in the same transaction, so a charge
        and the answer it paid for are kept together or not at all; :meth:`release` reads it back, so a
        repeated request can be answered again without a new draw. A replayed request keeps its first
        payload.

        >>> ledger = Ledger(":memory:", budget=ApproxDP(1, "1e-6"))
        >>> ledger.charge(0.5, label="mean age").seq
        1
        >>> ledger.charge(PureDP(0.75), label="histogram")
        Traceback (most recent call last):
        ...
        kakeibo.accounting.ledger.BudgetExceeded: Charging (epsilon=0.75, delta=0) would exceed the global \
budget of (epsilon=1, delta=1e-06); only (epsilon=0.5, delta=1e-06) remains.
        """
        value = _canonical_loss(loss, "loss")
        label_text = _text(label, "label", required=True)
        assert label_text is not None
        analyst = _text(analyst, "analyst")
        dataset = _text(dataset, "dataset")
        request_id = _text(request_id, "request_id")
        if release is not None and (request_id is None or not isinstance(release, bytes)):
            raise ValueError("a stored release needs a request_id and a bytes payload.")
        box = _region(region, dataset)
        weights = self._policy.weights(value, self._kind)  # TypeError if the kinds do not convert
        created_at = _now()
        kind, eps, dlt, rho = _loss_columns(value)
        region_text = None if box is None else _canonical_json(box.to_json())

        with self._transaction(immediate=True) as conn:
            if request_id is not None:
                row = conn.execute(
                    f"SELECT {_ENTRY_COLUMNS} FROM entries WHERE request_id = ?", (request_id,)
                )
                found = row.fetchone()
                if found is not None:
                    original = _entry_from_row(found)
                    if (
                        original.loss,
                        original.label,
                        original.analyst,
                        original.dataset,
                        original.region,
                    ) != (
                        value,
                        label_text,
                        analyst,
                        dataset,
                        box,
                    ):
                        raise ValueError(
                            f"request_id {request_id!r} was already used for a different charge "
                            f"({original.loss!s}, label {original.label!r})."
                        )
                    if not replay:
                        raise DuplicateRequest(
                            f"request_id {request_id!r} was already charged (entry {original.seq}); "
                            "a second release under it would cost privacy without being charged."
                        )
                    return original
            self._check_fits(conn, value, _Item(weights, box, analyst, dataset))
            meta = self._meta(conn)
            seq = int(meta["entries_count"]) + 1
            row_values = (
                seq,
                kind,
                eps,
                dlt,
                rho,
                label_text,
                analyst,
                dataset,
                request_id,
                region_text,
                created_at,
            )
            digest = _chain(meta["entries_head"], _entry_record(row_values))
            conn.execute(
                f"INSERT INTO entries ({_ENTRY_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (*row_values, digest),
            )
            conn.execute("UPDATE meta SET value = ? WHERE key = 'entries_head'", (digest,))
            conn.execute("UPDATE meta SET value = ? WHERE key = 'entries_count'", (str(seq),))
            if release is not None:
                conn.execute(
                    "INSERT INTO releases (request_id, seq, payload, sha256) VALUES (?, ?, ?, ?)",
                    (request_id, seq, release, hashlib.sha256(release).hexdigest()),
                )
        entry = LedgerEntry(
            seq=seq,
            loss=value,
            label=label_text,
            analyst=analyst,
            dataset=dataset,
            request_id=request_id,
            created_at=datetime.fromisoformat(created_at),
            hash=digest,
            region=box,
        )
        return entry

    def check(
        self,
        loss: PrivacyLoss | Number,
        *,
        analyst: str | None = None,
        dataset: str | None = None,
        region: Box | None = None,
    ) -> None:
        """Raise :class:`BudgetExceeded` if a :meth:`charge` of ``loss`` would be refused now; write nothing.

        A read-only look-ahead, so that a caller can refuse before doing expensive work; the charge itself
        checks again in its own transaction (another charge may land in between).

        >>> ledger = Ledger(":memory:", budget=1)
        >>> ledger.check(0.75)
        >>> ledger.check(1.5)
        Traceback (most recent call last):
        ...
        kakeibo.accounting.ledger.BudgetExceeded: Charging epsilon=1.5 would exceed the global budget of \
epsilon=1; only epsilon=1 remains.
        """
        value = _canonical_loss(loss, "loss")
        analyst = _text(analyst, "analyst")
        dataset = _text(dataset, "dataset")
        item = _Item(self._policy.weights(value, self._kind), _region(region, dataset), analyst, dataset)
        with self._transaction(immediate=False) as conn:
            self._check_fits(conn, value, item)

    def _check_fits(self, conn: Connection, value: PrivacyLoss, new: _Item) -> None:
        """:class:`BudgetExceeded` unless ``new`` fits, with what was spent, in every budget covering it."""
        _, tally = self._sync(conn)
        budgets = self._load_budgets(conn, check=True)
        for scope, budget in budgets.items():
            if not scope.covers(new.analyst, new.dataset):
                continue
            with_new, _ = tally.sums(scope, new)
            if not self._policy.within(with_new, self._kind, budget, any_charge=True):
                remaining = _subtract(budget, self._spent(tally, scope))
                shown = convert(value, self._kind)
                raise BudgetExceeded(
                    f"Charging {shown!s} would exceed {scope.describe()} of "
                    f"{budget!s}; only {remaining!s} remains.",
                    requested=shown,
                    remaining=remaining,
                    scope=scope,
                )

    def set_budget(
        self,
        budget: PrivacyLoss | Number | tuple[Number, Number],
        *,
        analyst: str | None = None,
        dataset: str | None = None,
    ) -> None:
        """Set (or change) the budget of a scope; recorded in the hash-chained budget history.

        All budgets have the kind of the global one. A budget below what the scope has already spent is
        refused (ValueError), so ``remaining`` never goes negative.

        >>> ledger = Ledger(":memory:", budget=2)
        >>> ledger.set_budget(0.5, analyst="alice")
        >>> ledger.remaining(analyst="alice")
        PureDP(epsilon=Fraction(1, 2))
        """
        value = _canonical_loss(budget, "budget")
        scope = Scope(_text(analyst, "analyst"), _text(dataset, "dataset"))
        if type(value) is not self._kind:
            raise TypeError(
                f"every budget of this ledger is a {self._kind.__name__} like the global one, "
                f"not a {type(value).__name__}."
            )
        self._policy.check_budget(value)
        with self._transaction(immediate=True) as conn:
            _, tally = self._sync(conn)
            self._load_budgets(conn, check=True)
            spent = self._spent(tally, scope)
            if not loss_leq(spent, value):
                raise ValueError(
                    f"{scope.describe()} cannot be set to {value!s}: {spent!s} has already been spent."
                )
            self._append_budget(conn, value, scope)

    @property
    def budget_kind(self) -> type[PrivacyLoss]:
        """The kind of loss the budgets are kept in (``PureDP``, ``ApproxDP`` or ``ZCDP``)."""
        return self._kind

    def budgets(self) -> dict[Scope, PrivacyLoss]:
        """The budget in force for each scope that has one (the global one is ``Scope()``)."""
        with self._transaction(immediate=False) as conn:
            return self._load_budgets(conn, check=False)

    def spent(self, analyst: str | None = None, dataset: str | None = None) -> PrivacyLoss:
        """What the charges counting against scope ``(analyst, dataset)`` have spent, under the policy.

        >>> ledger = Ledger(":memory:", budget=1)
        >>> _ = ledger.charge(0.25, label="q", dataset="census")
        >>> ledger.spent(dataset="census"), ledger.spent(dataset="sales")
        (PureDP(epsilon=Fraction(1, 4)), PureDP(epsilon=Fraction(0, 1)))
        """
        scope = Scope(_text(analyst, "analyst"), _text(dataset, "dataset"))
        with self._transaction(immediate=False) as conn:
            _, tally = self._sync(conn)
        return self._spent(tally, scope)

    def remaining(self, analyst: str | None = None, dataset: str | None = None) -> PrivacyLoss:
        """Budget minus spent for a scope that has a budget, coordinate-wise and exact.

        For (epsilon, delta) budgets both coordinates are reduced. Under parallel composition a charge
        larger than ``remaining`` may still fit, if its region avoids the regions already charged.
        """
        scope = Scope(_text(analyst, "analyst"), _text(dataset, "dataset"))
        with self._transaction(immediate=False) as conn:
            _, tally = self._sync(conn)
            budgets = self._load_budgets(conn, check=False)
        if scope not in budgets:
            raise ValueError(
                f"no budget is set for {scope.describe()[len('the budget of ') :]}; use set_budget()."
            )
        return _subtract(budgets[scope], self._spent(tally, scope))

    def spending(
        self, analyst: str | None = None, dataset: str | None = None
    ) -> list[tuple[LedgerEntry, PrivacyLoss]]:
        """Each entry that counts against scope ``(analyst, dataset)``, in order, with what the scope had
        spent once it was charged, under the ledger's policy (a curve of spending over time; with parallel
        composition a step can be smaller than its entry's loss).

        >>> from kakeibo.accounting import Box
        >>> ledger = Ledger(":memory:", budget=1)
        >>> for low, high in ((0, 9), (10, 19)):  # disjoint WHERE regions compose in parallel
        ...     _ = ledger.charge(0.5, label="q", dataset="d", region=Box({"x": (low, high)}, unit="record"))
        >>> [str(spent) for _, spent in ledger.spending(dataset="d")]
        ['epsilon=0.5', 'epsilon=0.5']
        """
        scope = Scope(_text(analyst, "analyst"), _text(dataset, "dataset"))
        with self._transaction(immediate=False) as conn:
            cached, _ = self._sync(conn)
        tally, curve = self._new_tally(), []
        for entry, item in cached:
            if scope.covers(entry.analyst, entry.dataset):
                tally.add(item)
                curve.append((entry, self._spent(tally, scope)))
        return curve

    def entries(self, analyst: str | None = None, dataset: str | None = None) -> list[LedgerEntry]:
        """The committed entries in order, optionally only those with exactly this analyst / dataset."""
        analyst = _text(analyst, "analyst")
        dataset = _text(dataset, "dataset")
        with self._transaction(immediate=False) as conn:
            cached, _ = self._sync(conn)
        return [
            entry
            for entry, _ in cached
            if (analyst is None or entry.analyst == analyst) and (dataset is None or entry.dataset == dataset)
        ]

    def lookup(self, request_id: str) -> LedgerEntry | None:
        """The entry charged under ``request_id``, if any (tells a retry from a first request)."""
        key = _text(request_id, "request_id", required=True)
        with self._transaction(immediate=False) as conn:
            row = conn.execute(
                f"SELECT {_ENTRY_COLUMNS} FROM entries WHERE request_id = ?", (key,)
            ).fetchone()
        return None if row is None else _entry_from_row(row)

    def release(self, request_id: str) -> bytes | None:
        """The payload stored with the charge of ``request_id`` (``None`` if none was stored).

        Payloads are not part of the hash chain (they can be large); each carries its SHA-256, checked here
        and by :meth:`verify`, so a damaged payload is refused rather than served.

        >>> ledger = Ledger(":memory:", budget=1)
        >>> _ = ledger.charge(0.5, label="q", request_id="r1", release=b"answer")
        >>> ledger.release("r1"), ledger.release("r2")
        (b'answer', None)
        """
        key = _text(request_id, "request_id", required=True)
        with self._transaction(immediate=False) as conn:
            row = conn.execute("SELECT payload, sha256 FROM releases WHERE request_id = ?", (key,)).fetchone()
        if row is None:
            return None
        payload = bytes(row[0])
        if hashlib.sha256(payload).hexdigest() != row[1]:
            raise ValueError(f"the release stored for request_id {key!r} was altered; it will not be served.")
        return payload

    @property
    def composition(self) -> CompositionPolicy:
        """The composition policy stored in the ledger header."""
        return self._policy

    @property
    def head_hash(self) -> str:
        """The hash of the last entry (the genesis hash if there is none): publish it to anchor the chain."""
        with self._transaction(immediate=False) as conn:
            return self._meta(conn)["entries_head"]

    def verify(self) -> Verification:
        """Re-check both hash chains, their recorded heads and lengths, and that no budget is overspent.

        Each problem is one sentence naming the row. Returns a :class:`Verification`, truthy when ok.

        >>> ledger = Ledger(":memory:", budget=1)
        >>> _ = ledger.charge(0.5, label="q")
        >>> v = ledger.verify(); v.ok, v.entries
        (True, 1)
        """
        problems: list[str] = []
        with self._transaction(immediate=False) as conn:
            meta = self._meta(conn)
            entry_rows = list(conn.execute(f"SELECT {_ENTRY_COLUMNS} FROM entries ORDER BY seq"))
            budget_rows = self._budget_rows(conn)
            release_rows = list(conn.execute("SELECT request_id, seq, payload, sha256 FROM releases"))
        header = meta.get("header")
        if header is None:
            return Verification(False, ("the ledger header is missing.",), len(entry_rows))
        genesis = _genesis(header)
        if meta.get("genesis") != genesis:
            problems.append("the ledger header (id, budget kind or composition policy) was edited.")

        parsed: list[LedgerEntry] = []
        for name, rows, record, width in (
            ("entry", entry_rows, _entry_record, 11),
            ("budget row", budget_rows, _budget_record, 8),
        ):
            previous, expected = genesis, 1
            for row in rows:
                seq = row[0]
                if seq != expected:
                    problems.append(
                        f"{name} {seq} stands where {name} {expected} should be: rows were deleted, inserted "
                        "or renumbered."
                    )
                if _chain(previous, record(row)) != row[width]:
                    problems.append(
                        f"{name} {seq} does not match its hash: it was edited, or the row before it was "
                        "replaced or reordered."
                    )
                try:
                    if name == "entry":
                        parsed.append(_entry_from_row(row))
                    else:
                        _loss_from_columns(row[3], row[4], row[5], row[6])
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
            problems.extend(self._overspending(parsed, budget_rows))
        return Verification(not problems, tuple(problems), len(entry_rows))

    def _overspending(self, entries: list[LedgerEntry], budget_rows: list[tuple[Any, ...]]) -> list[str]:
        budgets = {Scope(r[1], r[2]): _loss_from_columns(r[3], r[4], r[5], r[6]) for r in budget_rows}
        tally = self._new_tally()  # rebuilt from the rows just read, independent of the cache
        for entry in entries:
            tally.add(self._item(entry))
        out = []
        for scope, budget in budgets.items():
            spent = self._spent(tally, scope)
            if not loss_leq(spent, budget):
                out.append(f"{scope.describe()} of {budget!s} is overspent: {spent!s}.")
        return out

    def close(self) -> None:
        """Close the database connection."""
        self._store.close()

    def __enter__(self) -> Ledger:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"Ledger({self.path!r}, composition={self._policy.name!r})"


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="microseconds")


def _subtract(budget: PrivacyLoss, spent: PrivacyLoss) -> PrivacyLoss:
    """``budget - spent`` coordinate-wise; LedgerIntegrityError if negative (a budget was overspent)."""
    try:
        if isinstance(budget, PureDP) and isinstance(spent, PureDP):
            return PureDP(budget.epsilon - spent.epsilon)
        if isinstance(budget, ApproxDP) and isinstance(spent, ApproxDP):
            return ApproxDP(budget.epsilon - spent.epsilon, budget.delta - spent.delta)
        if isinstance(budget, ZCDP) and isinstance(spent, ZCDP):
            return ZCDP(budget.rho - spent.rho)
    except ValueError:
        raise LedgerIntegrityError(
            f"{spent!s} was spent against a budget of {budget!s}; run verify()."
        ) from None
    raise TypeError(f"cannot subtract a {type(spent).__name__} from a {type(budget).__name__}.")
