"""The ledger's stored rows: what an entry and a budget row hold, how a loss is written, how rows are chained.

The :class:`~kakeibo.accounting.Ledger` appends these rows and :mod:`.verify` re-checks them; the format is
``kakeibo-ledger/1``, and a row written under it must read back, and hash, the same forever.

* **Exact amounts.** Losses are stored as ``"num/den"`` text with a kind tag and added as Fractions, so
  100 charges of ``Fraction(1, 100)`` spend exactly 1. (A *float* 0.01 is slightly more than 1/100 and
  is charged as the exact binary value it denotes: 100 of them do not fit in 1, which is the sound way
  round.)
* **Hash chains.** Each entry stores ``sha256(previous hash || canonical serialisation of the entry)``;
  budget changes form a second chain; both start from the hash of the ledger header (id, composition
  policy, budget kind). A meta table keeps each chain's head hash and length, updated in the same
  transaction as the row.
* **Validation.** A value is checked (:func:`canonical_loss`, :func:`checked_text`,
  :func:`checked_region`) before it can become part of a row, so every stored row reads back.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from fractions import Fraction
from typing import Any

from ..errors import ArgumentError, ArgumentTypeError
from ..privacy import ZCDP, ApproxDP, PrivacyLoss, PureDP, fraction_text
from .curves import MechanismLoss, curve_from_json
from .overlap import Box

__all__ = [
    "BUDGET_COLUMNS",
    "ENTRY_COLUMNS",
    "FORMAT",
    "MECHANISM_COLUMN",
    "RELEASES_TABLE",
    "SCHEMA",
    "LedgerEntry",
    "Scope",
    "budget_record",
    "canonical_json",
    "canonical_loss",
    "chain_hash",
    "checked_region",
    "checked_text",
    "entry_from_row",
    "entry_record",
    "genesis_hash",
    "loss_columns",
    "loss_from_columns",
    "mechanism_column",
]

#: The ledger format, stored in every ledger header and hashed into the start of both chains.
FORMAT = "kakeibo-ledger/1"
_FRACTION_TEXT = re.compile(r"^(0|[1-9][0-9]*)/([1-9][0-9]*)$")
_MAX_TEXT = 10_000


@dataclass(frozen=True)
class LedgerEntry:
    """One committed charge. ``hash`` chains it to every entry before it.

    ``loss`` is the loss as charged (before any conversion to the budget's kind; a
    :class:`~kakeibo.accounting.curves.MechanismLoss` keeps its mechanism); ``region`` is the box it was
    declared over, if any.
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


def canonical_loss(loss: object, what: str) -> PrivacyLoss:
    """Re-validate a loss (or a plain number, meaning pure epsilon) through its constructor."""
    if isinstance(loss, bool):
        raise ArgumentTypeError(f"{what} must be a privacy loss or a number, not a bool.")
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
    if isinstance(loss, MechanismLoss):  # through its stored form, so that it reads back as it is charged
        return MechanismLoss(
            canonical_loss(loss.declared, what),
            curve_from_json(json.loads(canonical_json(loss.curve.to_json()))),
        )
    if isinstance(loss, PrivacyLoss):
        raise ArgumentTypeError(
            "the ledger accounts PureDP, ApproxDP, ZCDP and MechanismLoss losses, "
            f"not {type(loss).__name__}; "
            "convert it first (for an RDP curve: .to_approx(delta))."
        )
    raise ArgumentTypeError(
        f"{what} must be a PureDP, ApproxDP, ZCDP or MechanismLoss loss, an (epsilon, delta) pair or a "
        f"number, got {type(loss).__name__}."
    )


def checked_text(value: object, name: str, *, required: bool = False) -> str | None:
    """``value`` if it is storable text (non-blank, bounded, no NUL, encodable), else a TypeError or
    ValueError naming ``name``; ``None`` passes unless ``required``."""
    if value is None and not required:
        return None
    if not isinstance(value, str):
        raise ArgumentTypeError(f"{name} must be a string, got {type(value).__name__}.")
    if not value.strip():
        raise ArgumentError(f"{name} must not be empty.")
    if len(value) > _MAX_TEXT or "\x00" in value:
        raise ArgumentError(f"{name} must be at most {_MAX_TEXT} characters without NUL bytes.")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise ArgumentError(f"{name} must be valid Unicode text (it contains a lone surrogate).") from None
    return value


def checked_region(region: object, dataset: str | None) -> Box | None:
    """``region`` if it may be charged over ``dataset``: a :class:`Box` that declares its privacy unit,
    on a named dataset (see the soundness condition in :mod:`.overlap`)."""
    if region is None:
        return None
    if not isinstance(region, Box):
        raise ArgumentTypeError(f"region must be a kakeibo.accounting.Box, got {type(region).__name__}.")
    if region.unit is None:
        raise ArgumentError(
            'a region must declare unit="record" (record-level DP) or unit="user" (columns constant per '
            "user), because parallel composition is unsound otherwise."
        )
    if dataset is None:
        raise ArgumentError(
            "a charge with a region must name its dataset=, since regions of different datasets overlap."
        )
    return region


# -- storage encoding -----------------------------------------------------------------------------


def _parse_frac(text: object) -> Fraction:
    if not isinstance(text, str):
        raise ArgumentError(f"expected 'num/den' text, found {text!r}")
    match = _FRACTION_TEXT.match(text)
    if match is None:
        raise ArgumentError(f"expected 'num/den' text, found {text!r}")
    return Fraction(int(match.group(1)), int(match.group(2)))


def loss_columns(loss: PrivacyLoss) -> tuple[str, str | None, str | None, str | None]:
    """The ``kind, epsilon, delta, rho`` columns that store ``loss`` (a mechanism's: its declared loss)."""
    if isinstance(loss, MechanismLoss):
        return loss_columns(loss.declared)
    if isinstance(loss, PureDP):
        return "pure", fraction_text(loss.epsilon), None, None
    if isinstance(loss, ApproxDP):
        return "approx", fraction_text(loss.epsilon), fraction_text(loss.delta), None
    if isinstance(loss, ZCDP):
        return "zcdp", None, None, fraction_text(loss.rho)
    raise ArgumentTypeError(f"cannot store a {type(loss).__name__} loss.")


def loss_from_columns(kind: object, epsilon: object, delta: object, rho: object) -> PrivacyLoss:
    """The loss stored in ``kind, epsilon, delta, rho`` columns; ValueError if they are inconsistent."""
    if kind == "pure" and delta is None and rho is None:
        return PureDP(_parse_frac(epsilon))
    if kind == "approx" and rho is None:
        return ApproxDP(_parse_frac(epsilon), _parse_frac(delta))
    if kind == "zcdp" and epsilon is None and delta is None:
        return ZCDP(_parse_frac(rho))
    raise ArgumentError(f"inconsistent loss columns (kind {kind!r})")


def mechanism_column(loss: PrivacyLoss) -> str | None:
    """The ``mechanism`` column of an entry: a :class:`~kakeibo.accounting.curves.MechanismLoss`'s curve as
    canonical JSON, else NULL."""
    return canonical_json(loss.curve.to_json()) if isinstance(loss, MechanismLoss) else None


def canonical_json(value: Any) -> str:
    """The one serialisation that is hashed and stored: sorted keys, no spaces, UTF-8 as is."""
    return json.dumps(value, ensure_ascii=False, sort_keys=True, separators=(",", ":"))


def chain_hash(previous: str, record: Sequence[Any]) -> str:
    """``sha256(previous_hash || canonical serialisation of the record)``, hex."""
    return hashlib.sha256(
        previous.encode("ascii", "replace") + canonical_json(list(record)).encode()
    ).hexdigest()


def genesis_hash(header_text: str) -> str:
    """Where both chains start: the hash of the format and the ledger header."""
    return hashlib.sha256(f"{FORMAT}\n".encode() + header_text.encode()).hexdigest()


ENTRY_COLUMNS = (
    "seq, kind, epsilon, delta, rho, label, analyst, dataset, request_id, region, created_at, hash, mechanism"
)
BUDGET_COLUMNS = "seq, analyst, dataset, kind, epsilon, delta, rho, created_at, hash"

# Column types in braces differ between SQLite and PostgreSQL (``Store.ddl`` fills them in).
SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL){strict};
CREATE TABLE IF NOT EXISTS entries (
    seq {int} PRIMARY KEY, kind TEXT NOT NULL, epsilon TEXT, delta TEXT, rho TEXT,
    label TEXT NOT NULL, analyst TEXT, dataset TEXT, request_id TEXT UNIQUE, region TEXT,
    created_at TEXT NOT NULL, hash TEXT NOT NULL, mechanism TEXT
){strict};
CREATE TABLE IF NOT EXISTS budgets (
    seq {int} PRIMARY KEY, analyst TEXT, dataset TEXT, kind TEXT NOT NULL, epsilon TEXT, delta TEXT,
    rho TEXT, created_at TEXT NOT NULL, hash TEXT NOT NULL
){strict}
"""
#: Stored releases (see :meth:`kakeibo.accounting.Ledger.stored_release`); added after the first ledger files
#: were written, so it is also created when an older ledger is opened.
#: The mechanism column, added when the tight books came; also added when an older ledger is opened.
MECHANISM_COLUMN = "ALTER TABLE entries ADD COLUMN mechanism TEXT"
RELEASES_TABLE = """
CREATE TABLE IF NOT EXISTS releases (
    request_id TEXT PRIMARY KEY, seq {int} NOT NULL, payload {blob} NOT NULL, sha256 TEXT NOT NULL
){strict}
"""


def entry_record(row: Sequence[Any]) -> list[Any]:
    """What an entry row's hash covers: its ``ENTRY_COLUMNS`` up to (not including) the hash, and the
    mechanism when there is one (so an entry without one hashes as it did before the column existed)."""
    mechanism = row[12] if len(row) > 12 else None
    return ["entry", *row[:11], *(() if mechanism is None else (mechanism,))]


def budget_record(row: Sequence[Any]) -> list[Any]:
    """What a budget row's hash covers: its ``BUDGET_COLUMNS`` up to (not including) the hash."""
    return ["budget", *row[:8]]


def entry_from_row(row: Sequence[Any]) -> LedgerEntry:
    """The entry stored in a row of ``ENTRY_COLUMNS``; ValueError (or another error) if it is damaged."""
    seq, kind, eps, dlt, rho, label, analyst, dataset, request_id, region, created_at, digest, mechanism = row
    declared = loss_from_columns(kind, eps, dlt, rho)
    return LedgerEntry(
        seq=int(seq),
        loss=declared
        if mechanism is None
        else MechanismLoss(declared, curve_from_json(json.loads(mechanism))),
        label=str(label),
        analyst=analyst,
        dataset=dataset,
        request_id=request_id,
        created_at=datetime.fromisoformat(str(created_at)),
        hash=str(digest),
        region=None if region is None else Box.from_json(json.loads(region)),
    )
