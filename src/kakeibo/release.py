"""The one sequence every central-DP release follows (DESIGN: one choke point, issue 16).

``@private`` (:mod:`kakeibo.decorator`), ``Session.sql`` (:mod:`kakeibo.sql.session`) and the DP-ERM
estimators' ``fit`` (:mod:`kakeibo.ml.erm`) call :func:`run`; no other module draws central-DP noise and
returns it (``tests/test_release_path.py``). The steps, in this order::

    validate   the rng and the charge's names                                  refused: free
    replay     a request id with a stored release: answered from the ledger    free, no draw
    check      the budget (read-only) and the caller's public checks           refused: free
    draw       draw(source): reads the data and draws the noise                from here on, charged
    charge     Ledger.charge with the encoded release, one transaction         value still unseen
    finish     total post-processing of public form (HAVING, ORDER BY, ...)    failure: charged
    return     Released(value, ledger entry, seeded)

**Why this order.** Everything before the draw depends only on public inputs (the arguments, the ledger,
the catalog), so refusing there costs nothing and says nothing about anyone. The draw is the first step
that touches the data; from then on every outcome is charged: an exception inside it is charged and
raised as :class:`~kakeibo.errors.ReleaseFailed`, a fixed sentence (or :class:`StatementTimeout`, whose
sentence names only the public limit; an interrupt such as ``KeyboardInterrupt`` is charged and
propagates), because an error in one world and a value in the other would tell the worlds apart however
little the error says. The charge stores the encoded release in the same transaction as the cost, so a
value and its payment are kept together or not at all, and a process killed before the commit leaves
nothing released. Nothing returns a drawn value before the charge is committed.

The source handed to ``draw`` answers only during the draw step: a value cannot be drawn later, outside
the charge, with the same source (:class:`DrawSource`).

**What a refusal after the draw means.** If the charge itself is refused (another session spent the
budget between the check and the charge) the drawn value is dropped unseen: nothing is released. The
latency of the draw is then seen without a charge; the check before the draw makes that need a concurrent
spender at the very end of a budget.
"""

from __future__ import annotations

import contextlib
import contextvars
import logging
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, Generic, Protocol, TypeVar, overload

import numpy as np
from numpy.typing import NDArray

from .accounting import Box, DuplicateRequest, Ledger, LedgerEntry
from .errors import ReleaseFailed, StatementTimeout
from .noise import RandomSource, resolve_source
from .privacy import PrivacyLoss

__all__ = ["Charge", "Codec", "DrawSource", "ReleaseShape", "Released", "drawing", "run"]

T = TypeVar("T")
U = TypeVar("U")

#: The operator's log (INFO, not shown unless configured) keeps the cause of a failed release, which may
#: quote data; the caller sees one fixed sentence.
_LOG = logging.getLogger(__name__)
_DRAWING: contextvars.ContextVar[bool] = contextvars.ContextVar("kakeibo_release_drawing", default=False)


def drawing() -> bool:
    """True while a release's draw step runs in this context (the audit of the release path reads it)."""
    return _DRAWING.get()


@dataclass(frozen=True)
class Charge:
    """What a release costs and the names it is charged under (the ledger validates each one)."""

    loss: PrivacyLoss
    label: str
    analyst: str | None = None
    dataset: str | None = None
    region: Box | None = None
    request_id: str | None = None


class Codec(Protocol[T]):
    """How a release is stored with its charge, so that a repeated request is answered without a draw."""

    def encode(self, value: T, seeded: bool) -> bytes: ...

    def decode(self, payload: bytes) -> tuple[T, bool]: ...


@dataclass(frozen=True)
class Released(Generic[T]):
    """A charged release: the value, the ledger entry that paid for it (``None`` only for a release made
    without a ledger on purpose), whether the noise was seeded (reproducible, hence not private against
    whoever knows the seed) and whether it was answered from the ledger's stored release."""

    value: T
    ledger_entry: LedgerEntry | None
    seeded: bool
    replayed: bool = False


class ReleaseShape(Protocol):
    """What every release result reads alike by: the SQL ``Result``, the decorator's ``Release``, a fitted
    DP-ERM model (with scikit-learn's trailing underscore: ``privacy_loss_``, ``ledger_entry_``) and an LDP
    estimate (``privacy_loss``: the per-report loss; it has no ledger entry, the device's ledger holds it).
    The error bounds are stated at ``confidence``."""

    @property
    def privacy_loss(self) -> PrivacyLoss: ...

    @property
    def ledger_entry(self) -> LedgerEntry | None: ...

    @property
    def confidence(self) -> float: ...


class DrawSource:
    """A :class:`~kakeibo.noise.RandomSource` that answers only while its release's draw step runs.

    Closed when the draw returns or raises; a read after that raises ``RuntimeError``, so noise drawn with
    it can only have been drawn before the charge that pays for it."""

    def __init__(self, inner: RandomSource) -> None:
        self._inner = inner
        self.secure = inner.secure
        self._open = True

    def words(self, n: int) -> NDArray[np.uint64]:
        if not self._open:
            raise RuntimeError("this random source belongs to a finished release's draw step.")
        return self._inner.words(n)

    def close(self) -> None:
        self._open = False


@contextlib.contextmanager
def _draw_step(source: DrawSource) -> Iterator[None]:
    token = _DRAWING.set(True)
    try:
        yield
    finally:
        _DRAWING.reset(token)
        source.close()


@overload
def run(
    ledger: Ledger | None,
    charge: Charge,
    draw: Callable[[RandomSource], T],
    *,
    rng: np.random.Generator | RandomSource | None = None,
    check: Callable[[], None] | None = None,
    codec: Codec[T] | None = None,
    finish: None = None,
) -> Released[T]: ...


@overload
def run(
    ledger: Ledger | None,
    charge: Charge,
    draw: Callable[[RandomSource], T],
    *,
    rng: np.random.Generator | RandomSource | None = None,
    check: Callable[[], None] | None = None,
    codec: Codec[T] | None = None,
    finish: Callable[[T], U],
) -> Released[U]: ...


def run(
    ledger: Ledger | None,
    charge: Charge,
    draw: Callable[[RandomSource], T],
    *,
    rng: np.random.Generator | RandomSource | None = None,
    check: Callable[[], None] | None = None,
    codec: Codec[T] | None = None,
    finish: Callable[[T], Any] | None = None,
) -> Released[Any]:
    """Release ``draw(source)`` through ``ledger`` in the module's order; see the module docstring.

    ``check`` runs the caller's public refusals (free) after the budget check; ``codec`` stores the release
    with its charge (needs ``charge.request_id``) and answers a repeated request from the ledger; ``finish``
    post-processes the value (also a replayed one) with total code of public form, after the charge.
    ``ledger=None`` releases without charging: only for callers that were told so explicitly (DP-ERM's
    ``ledger=False``), never as a default.

    A request id charged before raises :class:`~kakeibo.accounting.DuplicateRequest` (no codec: a second
    draw would cost privacy uncharged) or :class:`~kakeibo.errors.ReleaseFailed` (with a codec: it was
    charged and failed, so nothing is stored to answer it with); both before anything is drawn.

    >>> from kakeibo.mechanisms import Laplace
    >>> ledger = Ledger(":memory:", budget=1)
    >>> laplace = Laplace(sensitivity=1, epsilon=0.25)
    >>> out = run(ledger, Charge(laplace.privacy_loss, "count"), lambda s: laplace.release(10.0, rng=s),
    ...           rng=np.random.default_rng(0))
    >>> out.ledger_entry.seq, out.seeded, float(ledger.remaining().epsilon)
    (1, True, 0.75)
    """
    source = DrawSource(resolve_source(rng))  # 1. validate (a TypeError for a bad rng is free)
    charged = None if ledger is None or charge.request_id is None else ledger.lookup(charge.request_id)
    if charged is not None:  # 2. replay
        assert ledger is not None
        if codec is None:  # a second draw under a charged id would be uncharged
            raise DuplicateRequest.of(charged)
        payload = ledger.stored_release(charged.request_id or "")
        if payload is None:  # charged, and failed after its draw: nothing stored to answer with
            raise ReleaseFailed() from None
        return _replay(charged, payload, codec, finish)
    if ledger is not None:  # 3. check: read-only, the charge checks again in its own transaction
        ledger.check(charge.loss, analyst=charge.analyst, dataset=charge.dataset, region=charge.region)
    if check is not None:
        check()
    try:  # 4. draw: from the first read of the data on, every outcome is charged
        with _draw_step(source):
            value = draw(source)
        payload = None if codec is None else codec.encode(value, not source.secure)
    except BaseException as error:  # an interrupt too: the data was read, so it is charged, then propagates
        _LOG.info("the release %r failed after its draw; charged", charge.label, exc_info=True)
        _charge_failure(ledger, charge)
        if isinstance(error, StatementTimeout) or not isinstance(error, Exception):
            raise
        raise ReleaseFailed() from None
    entry = None
    if ledger is not None:
        try:  # 5. charge, with the stored release in the same transaction
            entry = _charge(ledger, charge, payload)
        except DuplicateRequest:
            if codec is None or charge.request_id is None:
                raise
            theirs = ledger.lookup(charge.request_id)  # another session answered it first: serve theirs
            stored = ledger.stored_release(charge.request_id)
            if theirs is None or stored is None:  # theirs failed after its draw: charged without a value
                raise ReleaseFailed() from None
            return _replay(theirs, stored, codec, finish)
    return Released(_finish(finish, value), entry, seeded=not source.secure)  # 6., 7.


def _charge(ledger: Ledger, charge: Charge, payload: bytes | None) -> LedgerEntry:
    return ledger.charge(
        charge.loss,
        label=charge.label,
        analyst=charge.analyst,
        dataset=charge.dataset,
        region=charge.region,
        request_id=charge.request_id,
        replay=False,
        release=payload,
    )


def _charge_failure(ledger: Ledger | None, charge: Charge) -> None:
    """Charge a release that failed after its draw (a retry of one already charged is not charged twice)."""
    if ledger is not None:
        with contextlib.suppress(DuplicateRequest):
            _charge(ledger, charge, None)


def _finish(finish: Callable[[T], Any] | None, value: T) -> Any:
    """Post-process a charged value; a failure here is charged already and says nothing of the value."""
    if finish is None:
        return value
    try:
        return finish(value)
    except Exception:
        _LOG.info("post-processing a charged release failed", exc_info=True)
        raise ReleaseFailed() from None


def _replay(
    entry: LedgerEntry, payload: bytes, codec: Codec[T], finish: Callable[[T], Any] | None
) -> Released[Any]:
    value, seeded = codec.decode(payload)
    return Released(_finish(finish, value), entry, seeded=seeded, replayed=True)
