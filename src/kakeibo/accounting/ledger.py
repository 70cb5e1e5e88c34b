"""The privacy-budget ledger: a persisted, transactional, hash-chained record of every charge.

Every central-DP release in kakeibo is paid for here first (see ``DESIGN.md``: one choke point). The ledger
is a SQLite database so that several processes -- notebook kernels, web workers, batch jobs -- can share
one budget without a server, or a PostgreSQL database (a ``postgresql://`` URL as ``path``) so that
processes on several machines -- query-service replicas -- can (:mod:`.storage` gives both the same
transaction contract). The rows it stores, exact and hash-chained, are defined in :mod:`.records`; the
running sums it checks budgets against in :mod:`.tally`; :meth:`Ledger.verify` re-checks everything with
:mod:`.verify`.

* **One transaction per charge.** :meth:`Ledger.charge` opens a write transaction (SQLite's ``BEGIN
  IMMEDIATE``; PostgreSQL's advisory write lock), checks the request id, recomputes what has been spent
  *including the new charge* under the ledger's composition policy, refuses with :class:`BudgetExceeded`
  if any applicable budget would be exceeded, and otherwise appends the entry and commits. Two processes
  can therefore never both spend the last epsilon. Readers are never blocked (SQLite's WAL journal;
  PostgreSQL's snapshots), and a killed process is harmless: a charge is either committed or absent.
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
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime, timezone
from typing import Any

from ..errors import ArgumentError, ArgumentTypeError, Error
from ..privacy import ZCDP, ApproxDP, Number, PrivacyLoss, PureDP
from .composition import CompositionPolicy, kind_name, loss_leq, resolve_policy
from .overlap import Box
from .records import (
    BUDGET_COLUMNS,
    ENTRY_COLUMNS,
    FORMAT,
    MECHANISM_COLUMN,
    RELEASES_TABLE,
    SCHEMA,
    LedgerEntry,
    Scope,
    budget_record,
    canonical_json,
    canonical_loss,
    chain_hash,
    checked_region,
    checked_text,
    entry_from_row,
    entry_record,
    genesis_hash,
    loss_columns,
    loss_from_columns,
    mechanism_column,
)
from .storage import Connection, StoreError, is_postgres_url, open_store, redact
from .tally import Item, Tally
from .verify import Verification, verify_ledger

__all__ = [
    "BudgetExceeded",
    "Ledger",
    "LedgerEntry",
    "LedgerIntegrityError",
    "Scope",
    "Verification",
]

_KINDS: dict[str, type[PrivacyLoss]] = {"pure": PureDP, "approx": ApproxDP, "zcdp": ZCDP}

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

    @classmethod
    def of(cls, entry: LedgerEntry) -> DuplicateRequest:
        """The refusal of a second release under ``entry``'s request id."""
        return cls(
            f"request_id {entry.request_id!r} was already charged (entry {entry.seq}); a second release "
            "under it would cost privacy without being charged."
        )


class LedgerIntegrityError(Error, RuntimeError):
    """The ledger's stored state is inconsistent (tampering or corruption); see :meth:`Ledger.verify`."""


_CREATE_HINT = "give a budget to create one (budget= in Python, --budget on the command line)."


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
            raise ArgumentTypeError(
                "a ledger needs a path: a file name, or ':memory:' for a throwaway in-memory ledger."
            )
        if not isinstance(path, (str, os.PathLike)):
            raise ArgumentTypeError(f"path must be a string or path-like object, got {type(path).__name__}.")
        path_text = os.fspath(path)
        if not isinstance(path_text, str) or not path_text:
            raise ArgumentTypeError("path must be a non-empty text path.")
        if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or not math.isfinite(timeout):
            raise ArgumentTypeError("timeout must be a finite number of seconds.")
        if timeout <= 0:
            raise ArgumentError(f"timeout must be positive, got {timeout}.")
        budget_loss = None if budget is None else canonical_loss(budget, "budget")
        if composition is None and delta_slack is not None:
            raise ArgumentError('delta_slack only applies together with composition="advanced".')
        policy = None if composition is None else resolve_policy(composition, delta_slack)
        if budget_loss is not None:
            kind_name(type(budget_loss))
            policy = (policy or resolve_policy("sequential")).for_budget(budget_loss)
            policy.check_budget(budget_loss)
        postgres = is_postgres_url(path_text)
        if budget_loss is None:
            if path_text == ":memory:":
                raise ArgumentError("a new in-memory ledger needs a budget.")
            if not postgres and not os.path.exists(path_text):
                raise FileNotFoundError(f"there is no ledger at {path_text}; {_CREATE_HINT}")

        try:
            self._store = open_store(path_text, timeout=float(timeout), owner="ledger")
        except StoreError as exc:
            raise ArgumentError(f"{redact(path_text)} is not a usable kakeibo ledger ({exc}).") from exc
        self.path = self._store.describe()
        self._pid = os.getpid()
        self._cache: list[tuple[LedgerEntry, Item]] = []
        self._tally: Tally | None = None  # built on first sync, once the policy is known
        try:
            self._open(budget_loss, policy)
        except self._store.database_errors as exc:
            self._store.close()
            raise ArgumentError(f"{self.path} is not a usable kakeibo ledger ({exc}).") from exc
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
            has_mechanism = initialised and "mechanism" in _columns(conn, "entries")
        if not initialised:
            if budget is None:
                if self._store.kind == "postgres":
                    raise FileNotFoundError(f"there is no ledger at {self.path}; {_CREATE_HINT}")
                raise ArgumentError(f"{self.path} is not a kakeibo ledger; {_CREATE_HINT}")
            with self._transaction(immediate=True) as conn:
                if not self._is_initialised(conn):  # another process may have created it meanwhile
                    self._create(conn, budget, policy or resolve_policy("sequential"))
        elif not (has_releases and has_mechanism):  # a ledger written before these were added
            with self._transaction(immediate=True) as conn:
                for statement in self._store.ddl(RELEASES_TABLE):
                    conn.execute(statement)
                if "mechanism" not in _columns(conn, "entries"):
                    conn.execute(MECHANISM_COLUMN)
        header = self._header()
        if header.get("format") != FORMAT:
            raise ArgumentError(
                f"{self.path} has ledger format {header.get('format')!r}, expected {FORMAT!r}."
            )
        try:
            self._kind = _KINDS[header["budget_kind"]]
            self._policy = resolve_policy(header["composition"])
        except (KeyError, TypeError, ValueError) as exc:
            raise ArgumentError(f"{self.path} has a damaged ledger header ({exc!r}).") from None
        stored_budget = self.budgets().get(Scope())
        if policy is not None and stored_budget is not None:
            policy = policy.for_budget(stored_budget)
        if policy is not None and policy.config() != self._policy.config():
            raise ArgumentError(
                f"this ledger uses composition {self._policy.config()}, not {policy.config()}; "
                "pass composition=None to use the stored policy."
            )
        if budget is not None:
            stored = stored_budget
            if stored != budget:
                shown = "none" if stored is None else str(stored)
                raise ArgumentError(
                    f"this ledger's global budget is {shown}, not {budget!s}; "
                    "pass budget=None to use the stored budget, or change it with set_budget()."
                )

    def _create(self, conn: Connection, budget: PrivacyLoss, policy: CompositionPolicy) -> None:
        for statement in self._store.ddl(SCHEMA + ";" + RELEASES_TABLE):
            conn.execute(statement)
        header_text = canonical_json(
            {
                "format": FORMAT,
                "ledger_id": uuid.uuid4().hex,
                "created_at": _now(),
                "budget_kind": kind_name(type(budget)),
                "composition": policy.config(),
            }
        )
        genesis = genesis_hash(header_text)
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
            raise ArgumentError(f"{self.path} has a damaged ledger header.")
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
        return list(conn.execute(f"SELECT {BUDGET_COLUMNS} FROM budgets ORDER BY seq"))

    def _load_budgets(self, conn: Connection, *, check: bool) -> dict[Scope, PrivacyLoss]:
        """The budget in force per scope (latest row wins); with ``check``, re-verify the budget chain."""
        meta = self._meta(conn)
        rows = self._budget_rows(conn)
        if check:
            if genesis_hash(meta.get("header", "")) != meta.get("genesis"):
                raise LedgerIntegrityError("the ledger header was altered; run verify().")
            previous = meta.get("genesis", "")
            for row in rows:
                if chain_hash(previous, budget_record(row)) != row[8]:
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
            budgets[Scope(row[1], row[2])] = loss_from_columns(row[3], row[4], row[5], row[6])
        return budgets

    def _append_budget(self, conn: Connection, budget: PrivacyLoss, scope: Scope) -> None:
        meta = self._meta(conn)
        seq = int(meta["budgets_count"]) + 1
        row = (seq, scope.analyst, scope.dataset, *loss_columns(budget), _now())
        digest = chain_hash(meta["budgets_head"], budget_record((*row, None)))
        conn.execute(
            f"INSERT INTO budgets ({BUDGET_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)", (*row, digest)
        )
        conn.execute("UPDATE meta SET value = ? WHERE key = 'budgets_head'", (digest,))
        conn.execute("UPDATE meta SET value = ? WHERE key = 'budgets_count'", (str(seq),))

    def _sync(self, conn: Connection) -> tuple[list[tuple[LedgerEntry, Item]], Tally]:
        """The committed entries, read incrementally (they are append-only), checked against the meta head."""
        meta = self._meta(conn)
        try:
            count, head = int(meta["entries_count"]), meta["entries_head"]
        except (KeyError, ValueError):
            raise LedgerIntegrityError("the ledger's entry count or head is damaged; run verify().") from None
        cache, tally = self._cache, self._tally or Tally(self._policy, self._kind)
        if len(cache) > count or (len(cache) == count and cache and cache[-1][0].hash != head):
            cache, tally = [], Tally(self._policy, self._kind)
        last = cache[-1][0].seq if cache else 0
        rows = conn.execute(f"SELECT {ENTRY_COLUMNS} FROM entries WHERE seq > ? ORDER BY seq", (last,))
        fresh = []
        for row in rows:
            entry = entry_from_row(row)
            fresh.append((entry, Item.from_entry(entry, self._policy, self._kind)))
        cache = cache + fresh
        if len(cache) != count or (cache[-1][0].hash if cache else meta["genesis"]) != head:
            self._cache, self._tally = [], Tally(self._policy, self._kind)
            raise LedgerIntegrityError(
                f"the ledger records {count} entries ending in {head[:12]}..., "
                "but its rows disagree; run verify()."
            )
        for _, item in fresh:
            tally.add(item)
        self._cache, self._tally = cache, tally
        return cache, tally

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
        and the answer it paid for are kept together or not at all; :meth:`stored_release` reads it back, so a
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
        value = canonical_loss(loss, "loss")
        label_text = checked_text(label, "label", required=True)
        assert label_text is not None
        analyst = checked_text(analyst, "analyst")
        dataset = checked_text(dataset, "dataset")
        request_id = checked_text(request_id, "request_id")
        if release is not None and (request_id is None or not isinstance(release, bytes)):
            raise ArgumentError("a stored release needs a request_id and a bytes payload.")
        box = checked_region(region, dataset)
        weights = self._policy.weights(value, self._kind)  # TypeError if the kinds do not convert
        created_at = _now()
        region_text = None if box is None else canonical_json(box.to_json())
        columns = (*loss_columns(value), label_text, analyst, dataset, request_id, region_text, created_at)
        mechanism = mechanism_column(value)

        with self._transaction(immediate=True) as conn:
            if request_id is not None:
                original = _earlier_charge(conn, request_id, (value, label_text, analyst, dataset, box))
                if original is not None:
                    if not replay:
                        raise DuplicateRequest.of(original)
                    return original
            self._check_fits(conn, value, Item(weights, box, analyst, dataset))
            meta = self._meta(conn)
            seq = int(meta["entries_count"]) + 1
            digest = _append_entry(conn, meta["entries_head"], (seq, *columns), mechanism)
            if release is not None:
                conn.execute(
                    "INSERT INTO releases (request_id, seq, payload, sha256) VALUES (?, ?, ?, ?)",
                    (request_id, seq, release, hashlib.sha256(release).hexdigest()),
                )
        return LedgerEntry(
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
        value = canonical_loss(loss, "loss")
        analyst = checked_text(analyst, "analyst")
        dataset = checked_text(dataset, "dataset")
        item = Item(
            self._policy.weights(value, self._kind), checked_region(region, dataset), analyst, dataset
        )
        with self._transaction(immediate=False) as conn:
            self._check_fits(conn, value, item)

    def _check_fits(self, conn: Connection, value: PrivacyLoss, new: Item) -> None:
        """:class:`BudgetExceeded` unless ``new`` fits, with what was spent, in every budget covering it."""
        _, tally = self._sync(conn)
        budgets = self._load_budgets(conn, check=True)
        for scope, budget in budgets.items():
            if not scope.covers(new.analyst, new.dataset):
                continue
            with_new, _ = tally.sums(scope, new)
            if not self._policy.within(with_new, self._kind, budget, any_charge=True):
                remaining = _subtract(budget, tally.spent(scope))
                shown = self._policy.stated(value, self._kind)
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
        value = canonical_loss(budget, "budget")
        scope = Scope(checked_text(analyst, "analyst"), checked_text(dataset, "dataset"))
        if type(value) is not self._kind:
            raise ArgumentTypeError(
                f"every budget of this ledger is a {self._kind.__name__} like the global one, "
                f"not a {type(value).__name__}."
            )
        self._policy.check_budget(value)
        with self._transaction(immediate=True) as conn:
            _, tally = self._sync(conn)
            self._load_budgets(conn, check=True)
            spent = tally.spent(scope)
            if not loss_leq(spent, value):
                raise ArgumentError(
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
        scope = Scope(checked_text(analyst, "analyst"), checked_text(dataset, "dataset"))
        with self._transaction(immediate=False) as conn:
            _, tally = self._sync(conn)
        return tally.spent(scope)

    def remaining(self, analyst: str | None = None, dataset: str | None = None) -> PrivacyLoss:
        """Budget minus spent for a scope that has a budget, coordinate-wise and exact.

        For (epsilon, delta) budgets both coordinates are reduced. Under parallel composition a charge
        larger than ``remaining`` may still fit, if its region avoids the regions already charged.
        """
        scope = Scope(checked_text(analyst, "analyst"), checked_text(dataset, "dataset"))
        with self._transaction(immediate=False) as conn:
            _, tally = self._sync(conn)
            budgets = self._load_budgets(conn, check=False)
        if scope not in budgets:
            raise ArgumentError(
                f"no budget is set for {scope.describe()[len('the budget of ') :]}; use set_budget()."
            )
        return _subtract(budgets[scope], tally.spent(scope))

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
        scope = Scope(checked_text(analyst, "analyst"), checked_text(dataset, "dataset"))
        with self._transaction(immediate=False) as conn:
            cached, _ = self._sync(conn)
        tally, curve = Tally(self._policy, self._kind), []
        for entry, item in cached:
            if scope.covers(entry.analyst, entry.dataset):
                tally.add(item)
                curve.append((entry, tally.spent(scope)))
        return curve

    def entries(self, analyst: str | None = None, dataset: str | None = None) -> list[LedgerEntry]:
        """The committed entries in order, optionally only those with exactly this analyst / dataset."""
        analyst = checked_text(analyst, "analyst")
        dataset = checked_text(dataset, "dataset")
        with self._transaction(immediate=False) as conn:
            cached, _ = self._sync(conn)
        return [
            entry
            for entry, _ in cached
            if (analyst is None or entry.analyst == analyst) and (dataset is None or entry.dataset == dataset)
        ]

    def lookup(self, request_id: str) -> LedgerEntry | None:
        """The entry charged under ``request_id``, if any (tells a retry from a first request)."""
        key = checked_text(request_id, "request_id", required=True)
        with self._transaction(immediate=False) as conn:
            row = conn.execute(f"SELECT {ENTRY_COLUMNS} FROM entries WHERE request_id = ?", (key,)).fetchone()
        return None if row is None else entry_from_row(row)

    def stored_release(self, request_id: str) -> bytes | None:
        """The payload stored with the charge of ``request_id`` (``None`` if none was stored).

        Payloads are not part of the hash chain (they can be large); each carries its SHA-256, checked here
        and by :meth:`verify`, so a damaged payload is refused rather than served.

        >>> ledger = Ledger(":memory:", budget=1)
        >>> _ = ledger.charge(0.5, label="q", request_id="r1", release=b"answer")
        >>> ledger.stored_release("r1"), ledger.stored_release("r2")
        (b'answer', None)
        """
        key = checked_text(request_id, "request_id", required=True)
        with self._transaction(immediate=False) as conn:
            row = conn.execute("SELECT payload, sha256 FROM releases WHERE request_id = ?", (key,)).fetchone()
        if row is None:
            return None
        payload = bytes(row[0])
        if hashlib.sha256(payload).hexdigest() != row[1]:
            raise ArgumentError(
                f"the release stored for request_id {key!r} was altered; it will not be served."
            )
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
        with self._transaction(immediate=False) as conn:
            meta = self._meta(conn)
            entry_rows = list(conn.execute(f"SELECT {ENTRY_COLUMNS} FROM entries ORDER BY seq"))
            budget_rows = self._budget_rows(conn)
            release_rows = list(conn.execute("SELECT request_id, seq, payload, sha256 FROM releases"))
        return verify_ledger(
            meta, entry_rows, budget_rows, release_rows, policy=self._policy, kind=self._kind
        )

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


def _earlier_charge(conn: Connection, request_id: str, charge: tuple[object, ...]) -> LedgerEntry | None:
    """The entry already charged under ``request_id``, or None; an ArgumentError if it is not the same
    ``(loss, label, analyst, dataset, region)`` as ``charge`` (one id names one charge, so a retry
    never pays twice and never stands for a different release)."""
    query = f"SELECT {ENTRY_COLUMNS} FROM entries WHERE request_id = ?"
    found = conn.execute(query, (request_id,)).fetchone()
    if found is None:
        return None
    original = entry_from_row(found)
    if (original.loss, original.label, original.analyst, original.dataset, original.region) != charge:
        raise ArgumentError(
            f"request_id {request_id!r} was already used for a different charge "
            f"({original.loss!s}, label {original.label!r})."
        )
    return original


def _append_entry(conn: Connection, head: str, row_values: tuple[object, ...], mechanism: str | None) -> str:
    """Insert the entry ``row_values`` (``ENTRY_COLUMNS`` up to its hash) with its ``mechanism`` after the
    chain's ``head`` and move the head and count to it; returns the entry's hash, which chains it to
    ``head``."""
    digest = chain_hash(head, entry_record((*row_values, None, mechanism)))
    conn.execute(
        f"INSERT INTO entries ({ENTRY_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
        (*row_values, digest, mechanism),
    )
    conn.execute("UPDATE meta SET value = ? WHERE key = 'entries_head'", (digest,))
    conn.execute("UPDATE meta SET value = ? WHERE key = 'entries_count'", (str(row_values[0]),))
    return digest


def _columns(conn: Connection, table: str) -> list[str]:
    """The column names of ``table`` (the same statement on SQLite and PostgreSQL)."""
    cursor = conn.execute(f"SELECT * FROM {table} LIMIT 0")
    return [str(column[0]) for column in cursor.description]


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
    raise ArgumentTypeError(f"cannot subtract a {type(spent).__name__} from a {type(budget).__name__}.")
