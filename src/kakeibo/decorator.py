"""``@private``: the mechanism as a Decorator (seed 000, appendix).

The seed describes a mechanism ``m(q, D)`` as something that wraps a query and a database and returns a
function producing the (noisy) result -- a Decorator. ``@private(mechanism=..., ledger=...)`` turns a plain
query function ``f(data) -> number | array`` into a differentially private release.

**Order of a call, and why.** A call is one run of :func:`kakeibo.release.run`; everything a refusal
could depend on is decided before the query sees the data, and once it has, every outcome is paid for and
looks the same from outside:

1. *Public checks, free:* the ``rng=`` argument, the arguments against the query's signature (a
   ``TypeError`` for a wrong call), a repeated ``request_id`` (:class:`~kakeibo.accounting.DuplicateRequest`)
   and the budget (``BudgetExceeded``). The mechanism, ledger, confidence and ``default`` were checked when
   the decorator was applied (``default`` by releasing it once, a public value, so a mechanism that cannot
   release it is refused there).
2. *Draw:* the query runs (its warnings and floating-point warnings are discarded: they depend on the
   data); if it raises ``Exception``, its answer is taken to be ``default``: the exception does not
   propagate. The mechanism then releases the answer and, always, ``default`` (broadcast to the answer's
   shape when it can be), so every outcome does the same work. If the answer cannot be released -- NaN or
   infinite, beyond the noise grid, not a whole number for an integer mechanism, a shape or dtype whose
   release differs in structure from ``default``'s -- or the query raised, the release of ``default`` is
   the value. The result never says which: a flag would itself be the leak.
3. *Charge,* committed, before the value is returned; 4. *return* the :class:`Release` with its error
   bound and ledger entry.

A free refusal after the query saw the data (the mean of a selection that is empty without one person, a
value too large for the noise grid only with them) would tell that person's presence; a charge alone would
not fix it -- an exception in one world and a number in the other tell the worlds apart whatever was paid
-- which is why step 2 maps every failure to the release of one fixed public value.

What this promises: the release is ``mechanism`` applied to ``g(D)``, where ``g`` is the query with every
failure replaced by ``default``; the mechanism's sensitivity must hold for ``g``, so choose ``default``
within the range of the query's answers (0 for counts and sums; for a mean, a value inside the clamping
range). The answer's shape is released as it is: a query's shape must not depend on the data, and an array
query should declare ``default`` with that shape (``np.zeros(k)``), so that even a failure releases it.
Not hidden: how long the query itself runs, and anything it prints (warnings are silenced with
``warnings.catch_warnings``, which is process-wide: a query running in another thread at the same time may
still print one). Test a query on the data directly (without the decorator), because under it an exception
is, by design, indistinguishable from a value.

The only way to obtain the value is after step 3.
"""

from __future__ import annotations

import functools
import inspect
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, ParamSpec

import numpy as np

from . import release
from .accounting import Ledger, LedgerEntry
from .errors import ArgumentError, ArgumentTypeError
from .mechanisms import Mechanism
from .mechanisms.base import Rng, check_beta
from .noise import RandomSource
from .privacy import PrivacyLoss

__all__ = ["Release", "private"]

P = ParamSpec("P")


@dataclass(frozen=True)
class Release:
    """A differentially private value with what it cost and how accurate it is.

    ``error_bound`` is the half-width of a ``confidence``-level interval around each coordinate:
    ``Pr(|value_i - true_i| > error_bound) <= 1 - confidence`` (``None`` for mechanisms such as
    ``Exponential`` whose output is not the answer plus noise); "true" is the query's answer, or the
    decorator's public ``default`` where the answer could not be released. ``seeded`` is True when the noise
    came from a caller-supplied generator (reproducible, hence not private against whoever knows the seed).
    """

    value: Any
    mechanism: str
    privacy_loss: PrivacyLoss
    confidence: float
    error_bound: float | None
    ledger_entry: LedgerEntry
    seeded: bool

    @property
    def confidence_interval(self) -> tuple[Any, Any]:
        """``(value - error_bound, value + error_bound)`` per coordinate."""
        if self.error_bound is None:
            raise ArgumentError(
                f"a {self.mechanism} release is not answer-plus-noise and has no error interval."
            )
        return self.value - self.error_bound, self.value + self.error_bound


def _structure(released: Any) -> tuple[type, tuple[int, ...], np.dtype[Any]]:
    """What a release shows besides its numbers: Python type, shape and dtype."""
    return type(released), np.shape(released), np.asarray(released).dtype


def _attempt(mechanism: Mechanism, value: Any, source: RandomSource) -> Any | None:
    """``mechanism.release(value)``, or ``None`` if the mechanism refuses it (whatever the exception)."""
    try:
        return mechanism.release(value, rng=source)
    except Exception:  # the refusal depends on the data; it must not escape
        return None


def _default_like(default: Any, answer: Any, failed: bool) -> Any:
    """``default`` broadcast to the answer's shape when the answer has one it broadcasts to; else as is."""
    if failed:
        return default
    try:
        shape = np.shape(answer)
        return np.array(np.broadcast_to(np.asarray(default), shape)) if shape else default
    except Exception:  # a ragged or shapeless answer: use the default as declared
        return default


def _draw(
    query: Callable[..., Any],
    mechanism: Mechanism,
    default: Any,
    source: RandomSource,
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
) -> Any:
    """The query and both releases (module docstring, step 2): nothing here can raise on data."""
    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore")
        failed = False
        answer: Any = default
        try:  # an exception is an answer that cannot be released
            answer = query(*args, **kwargs)
        except Exception:  # data-dependent; propagating it would be the oracle
            failed = True
        noisy = _attempt(mechanism, answer, source)
        fallback = _attempt(mechanism, _default_like(default, answer, failed), source)
        if fallback is None:  # the broadcast default was refused (size): the declared one
            fallback = mechanism.release(default, rng=source)
    return fallback if noisy is None or _structure(noisy) != _structure(fallback) else noisy


def private(
    *,
    mechanism: Mechanism,
    ledger: Ledger,
    label: str | None = None,
    analyst: str | None = None,
    dataset: str | None = None,
    confidence: float = 0.95,
    default: Any = 0,
) -> Callable[[Callable[P, Any]], Callable[P, Release]]:
    """Make ``query`` a DP release through ``mechanism``, charged to ``ledger`` before its value is returned.

    The decorated function takes the query's own arguments plus keyword-only ``rng=`` (default: secure)
    and ``request_id=`` (an idempotency key: a request id is charged once; presenting it again raises
    :class:`kakeibo.accounting.DuplicateRequest` before the query runs, because a second noisy draw would
    leak more without being charged). ``default`` is the public value released in place of an answer that
    cannot be released or a query that raised (module docstring): every call that passes the budget check
    is charged and returns a :class:`Release`, whatever the data.

    >>> import tempfile, os, numpy as np
    >>> from kakeibo.accounting import Ledger
    >>> from kakeibo.mechanisms import Laplace
    >>> ledger = Ledger(os.path.join(tempfile.mkdtemp(), "ledger.sqlite"), budget=1.0)
    >>> @private(mechanism=Laplace(sensitivity=1, epsilon=0.5), ledger=ledger)
    ... def count_adults(ages):
    ...     return float(np.sum(np.asarray(ages) >= 18))
    >>> r = count_adults([12, 30, 45, 17, 80], rng=np.random.default_rng(0))
    >>> float(ledger.remaining().epsilon), r.seeded
    (0.5, True)
    """
    check_beta(1 - confidence, "1 - confidence")
    if not isinstance(mechanism, Mechanism):
        raise ArgumentTypeError(f"mechanism must be a kakeibo Mechanism, got {type(mechanism).__name__}.")
    if not isinstance(ledger, Ledger):
        raise ArgumentTypeError(f"ledger must be a kakeibo Ledger, got {type(ledger).__name__}.")
    try:  # a public value, drawn with throwaway noise and dropped: refuse one the mechanism cannot release
        mechanism.release(default, rng=np.random.default_rng(0))
    except Exception as error:  # any refusal of a public value is the caller's mistake
        raise ArgumentError(
            f"default={default!r} must be a value {type(mechanism).__name__} can release ({error})"
        ) from error
    bound = mechanism.error_bound(1 - confidence) if mechanism.additive else None

    def decorate(query: Callable[P, Any]) -> Callable[P, Release]:
        name: str = label or str(getattr(query, "__qualname__", "query"))
        try:
            signature: inspect.Signature | None = inspect.signature(query)
        except (TypeError, ValueError):  # some builtins have none: no arity check then
            signature = None

        @functools.wraps(query)
        def private_query(*args: P.args, **kwargs: P.kwargs) -> Release:
            rng: Rng = kwargs.pop("rng", None)  # type: ignore[assignment]
            request_id: str | None = kwargs.pop("request_id", None)  # type: ignore[assignment]
            if signature is not None:
                try:
                    signature.bind(*args, **kwargs)
                except TypeError as error:  # a call the query cannot take: the same words, kakeibo's class
                    raise ArgumentTypeError(str(error)) from None
            charge = release.Charge(mechanism.ledger_loss, name, analyst, dataset, request_id=request_id)
            out = release.run(
                ledger, charge, lambda source: _draw(query, mechanism, default, source, args, kwargs), rng=rng
            )
            assert out.ledger_entry is not None  # a ledger was given
            return Release(
                value=out.value,
                mechanism=type(mechanism).__name__,
                privacy_loss=mechanism.privacy_loss,
                confidence=confidence,
                error_bound=bound,
                ledger_entry=out.ledger_entry,
                seeded=out.seeded,
            )

        return private_query

    return decorate
