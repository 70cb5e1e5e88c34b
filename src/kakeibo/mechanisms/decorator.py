"""``@private``: the mechanism as a Decorator (seed 000, appendix).

The seed describes a mechanism ``m(q, D)`` as something that wraps a query and a database and returns a
function producing the (noisy) result -- a Decorator. ``@private(mechanism=..., ledger=...)`` turns a plain
query function ``f(data) -> number | array`` into a differentially private release:

1. the query runs, the mechanism draws its noise and its error bound is computed (in memory; nothing
   is returned yet, so a query or mechanism error costs nothing),
2. the ledger is charged the mechanism's privacy loss in one transaction (refusal raises and the noisy
   value is discarded),
3. only then is the value returned, as a :class:`Release` carrying its error bound and ledger entry.

This is kakeibo's choke point for central DP: the only way to obtain the value is through step 2.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ParamSpec

from ..noise import resolve_source
from ..privacy import PrivacyLoss
from ._base import Mechanism, Rng, check_beta

if TYPE_CHECKING:
    from ..accounting import Ledger, LedgerEntry

__all__ = ["Release", "private"]

P = ParamSpec("P")


@dataclass(frozen=True)
class Release:
    """A differentially private value with what it cost and how accurate it is.

    ``error_bound`` is the half-width of a ``confidence``-level interval around each coordinate:
    ``Pr(|value_i - true_i| > error_bound) <= 1 - confidence`` (``None`` for mechanisms such as
    ``Exponential`` whose output is not the answer plus noise). ``seeded`` is True when the noise came
    from a caller-supplied generator (reproducible, hence not private against whoever knows the seed).
    """

    value: Any
    mechanism: str
    privacy_loss: PrivacyLoss
    confidence: float
    error_bound: float | None
    entry: LedgerEntry
    seeded: bool

    @property
    def confidence_interval(self) -> tuple[Any, Any]:
        """``(value - error_bound, value + error_bound)`` per coordinate."""
        if self.error_bound is None:
            raise ValueError(
                f"a {self.mechanism} release is not answer-plus-noise and has no error interval."
            )
        return self.value - self.error_bound, self.value + self.error_bound


def private(
    *,
    mechanism: Mechanism,
    ledger: Ledger,
    label: str | None = None,
    analyst: str | None = None,
    dataset: str | None = None,
    confidence: float = 0.95,
) -> Callable[[Callable[P, Any]], Callable[P, Release]]:
    """Make ``query`` a DP release through ``mechanism``, charged to ``ledger`` before it returns.

    The decorated function takes the query's own arguments plus keyword-only ``rng=`` (default: secure)
    and ``request_id=`` (an idempotency key: a request id is charged once; presenting it again raises
    :class:`kakeibo.accounting.DuplicateRequest`, because a second noisy draw would leak more without
    being charged).

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

    def decorate(query: Callable[P, Any]) -> Callable[P, Release]:
        name: str = label or str(getattr(query, "__qualname__", "query"))

        @functools.wraps(query)
        def release(*args: P.args, **kwargs: P.kwargs) -> Release:
            rng: Rng = kwargs.pop("rng", None)  # type: ignore[assignment]
            request_id: str | None = kwargs.pop("request_id", None)  # type: ignore[assignment]
            noisy = mechanism.release(query(*args, **kwargs), rng=rng)
            bound = mechanism.error_bound(1 - confidence) if mechanism.additive else None
            entry = ledger.charge(
                mechanism.privacy_loss,
                label=name,
                analyst=analyst,
                dataset=dataset,
                request_id=request_id,
                replay=False,
            )
            return Release(
                value=noisy,
                mechanism=type(mechanism).__name__,
                privacy_loss=mechanism.privacy_loss,
                confidence=confidence,
                error_bound=bound,
                entry=entry,
                seeded=not resolve_source(rng).secure,
            )

        return release

    return decorate
