"""Black-box privacy audit: a confidence lower bound on epsilon from samples of M(D) and M(D')."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

import numpy as np
from numpy.typing import ArrayLike, NDArray

from ..errors import ArgumentError, ArgumentTypeError
from ..privacy import ApproxDP
from ._bounds import clopper_pearson_lower, clopper_pearson_upper, epsilon_terms
from ._events import Event, default_events

__all__ = ["AuditResult", "EventBound", "Releasable", "Sampler", "audit"]

#: ``sampler(value, n, rng)`` returns ``n`` independent outputs of one release of ``value``.
Sampler = Callable[[Any, int, Any], ArrayLike]


@runtime_checkable
class Releasable(Protocol):
    """Anything with ``release(value, rng=...)``: every kakeibo mechanism, or a test double."""

    def release(self, value: Any, rng: Any = None) -> Any: ...


@dataclass(frozen=True)
class EventBound:
    """What one event (and its complement) says about epsilon.

    ``p_d = Pr[M(D) in S]`` is the test's false-positive rate and ``1 - p_d_prime`` its false-negative rate;
    the ``*_lower``/``*_upper`` fields are the Bonferroni-corrected Clopper-Pearson bounds the audit used.
    ``epsilon_estimate`` plugs the point estimates into the empirical-epsilon formula (optimistic: *not* a
    bound); ``epsilon_lower_bound`` plugs in the confidence bounds.
    """

    event: str
    count_d: int
    count_d_prime: int
    p_d: float
    p_d_lower: float
    p_d_upper: float
    p_d_prime: float
    p_d_prime_lower: float
    p_d_prime_upper: float
    epsilon_estimate: float
    epsilon_lower_bound: float


@dataclass(frozen=True)
class AuditResult:
    """Outcome of :func:`audit`.

    With probability at least ``1 - alpha`` over the audit's randomness, the mechanism is *not*
    (epsilon, delta)-DP for any ``epsilon < epsilon_lower_bound`` (at the stated ``delta``), on the audited
    pair of inputs. A bound above the claimed epsilon therefore refutes the claim at confidence
    ``1 - alpha``; a bound below it proves nothing (an audit can only find leaks, never rule them out).

    ``batch`` is the array size of each release (``None`` when a sampler was audited); ``seeded`` says the
    randomness was a seeded generator (reproducible, as statistical tests need).
    """

    epsilon_lower_bound: float
    best_event: str
    trials: int
    alpha: float
    delta: float
    batch: int | None
    seeded: bool
    events: tuple[EventBound, ...]

    def refutes(self, epsilon: float) -> bool:
        """``True`` when the audit rejects the claim "(epsilon, delta)-DP" at confidence ``1 - alpha``."""
        return self.epsilon_lower_bound > epsilon

    def __str__(self) -> str:
        head = (
            f"epsilon >= {self.epsilon_lower_bound:.4f} at confidence {1 - self.alpha:.3g} "
            f"(delta={self.delta:.3g}, {self.trials} trials per input, {len(self.events)} events); "
            f"best event: {self.best_event}"
        )
        top = sorted(self.events, key=lambda e: e.epsilon_lower_bound, reverse=True)[:5]
        rows = [
            f"  {e.epsilon_lower_bound:8.4f}  (estimate {e.epsilon_estimate:8.4f})  "
            f"Pr[M(D) in S]={e.p_d:.6f}  Pr[M(D') in S]={e.p_d_prime:.6f}  {e.event}"
            for e in top
        ]
        return "\n".join([head, *rows])


def _check_count(value: int, name: str) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
        raise ArgumentError(f"{name} must be a positive integer, got {value!r}.")
    return int(value)


def _draw(mechanism: Releasable | Sampler, value: Any, n: int, rng: Any, batch: int) -> NDArray[Any]:
    """``n`` independent outputs of one release of ``value``, as a 1-d array."""
    if not isinstance(mechanism, Releasable):
        out = np.asarray(mechanism(value, n, rng))
        if out.shape != (n,):
            raise ArgumentError(f"the sampler must return {n} outputs as a 1-d array, got shape {out.shape}.")
        return out
    if np.ndim(value) == 0:
        copies = np.full(batch, value)
        chunks: list[NDArray[Any]] = []
        remaining = n
        while remaining > 0:
            out = np.asarray(mechanism.release(copies, rng=rng)).reshape(-1)
            if out.size != batch:
                raise ArgumentError("the mechanism must return one output per input coordinate.")
            chunks.append(out[:remaining])
            remaining -= batch
        return np.concatenate(chunks)
    outs = [np.asarray(mechanism.release(value, rng=rng)) for _ in range(n)]
    if any(o.ndim != 0 for o in outs):
        raise ArgumentError(
            "auditing a vector input needs a mechanism with one scalar output; pass a sampler."
        )
    return np.asarray([o.item() for o in outs])


def _checked_arguments(
    mechanism: Any, trials: Any, batch: Any, alpha: Any, delta: Any
) -> tuple[int, int, float]:
    """:func:`audit`'s ``trials``, ``batch`` and delta after checking them, ``alpha`` and ``mechanism``.
    The delta is ``delta`` if given, else that of the mechanism's declared ``ApproxDP`` loss (0 for any
    other loss)."""
    n = _check_count(trials, "trials")
    chunk = _check_count(batch, "batch")
    if isinstance(alpha, bool) or not isinstance(alpha, (int, float)) or not 0 < alpha < 1:
        raise ArgumentError(f"alpha must be a probability strictly between 0 and 1, got {alpha!r}.")
    if delta is None:
        loss = getattr(mechanism, "privacy_loss", None)
        dlt = float(loss.delta) if isinstance(loss, ApproxDP) else 0.0
    else:
        try:
            dlt = float(delta)
        except TypeError:
            raise ArgumentTypeError(f"delta must lie in [0, 1), got {delta!r}.") from None
        except ValueError:
            raise ArgumentError(f"delta must lie in [0, 1), got {delta!r}.") from None
    if not 0.0 <= dlt < 1.0:
        raise ArgumentError(f"delta must lie in [0, 1), got {delta!r}.")
    if not (isinstance(mechanism, Releasable) or callable(mechanism)):
        raise ArgumentTypeError(
            "mechanism must have a release(value, rng=) method or be a sampler(value, n, rng)."
        )
    return n, chunk, dlt


def _pilot_events(
    mechanism: Releasable | Sampler, inputs: tuple[Any, Any], n: int, rng: Any, batch: int
) -> list[Event]:
    """The default events, chosen from a pilot sample of ``n`` releases of each of the two ``inputs``
    (discarded afterwards, so the choice does not bias the audit's bounds)."""
    pilot = np.concatenate([_draw(mechanism, value, n, rng, batch) for value in inputs])
    return default_events(pilot)


def _bound_events(
    events: Sequence[Event], y_d: NDArray[Any], y_d_prime: NDArray[Any], alpha: float, delta: float
) -> tuple[EventBound, ...]:
    n = y_d.size
    k_d = np.array([int(np.count_nonzero(e(y_d))) for e in events], dtype=np.int64)
    k_dp = np.array([int(np.count_nonzero(e(y_d_prime))) for e in events], dtype=np.int64)
    # Four one-sided bounds per event (upper and lower, for each input): Bonferroni over all of them.
    level = alpha / (4 * len(events))
    p_hi = clopper_pearson_upper(k_d, n, level)
    p_lo = clopper_pearson_lower(k_d, n, level)
    q_hi = clopper_pearson_upper(k_dp, n, level)
    q_lo = clopper_pearson_lower(k_dp, n, level)
    p_hat, q_hat = k_d / n, k_dp / n
    # Region S: FP = p, FN = 1 - q. Its complement: FP = 1 - p, FN = q. Upper bounds on FP and FN make
    # every log-ratio smaller, so the result is a lower bound whenever all the bounds hold.
    lower = np.maximum(epsilon_terms(p_hi, 1.0 - q_lo, delta), epsilon_terms(1.0 - p_lo, q_hi, delta))
    estimate = np.maximum(epsilon_terms(p_hat, 1.0 - q_hat, delta), epsilon_terms(1.0 - p_hat, q_hat, delta))
    return tuple(
        EventBound(
            event=e.description,
            count_d=int(k_d[i]),
            count_d_prime=int(k_dp[i]),
            p_d=float(p_hat[i]),
            p_d_lower=float(p_lo[i]),
            p_d_upper=float(p_hi[i]),
            p_d_prime=float(q_hat[i]),
            p_d_prime_lower=float(q_lo[i]),
            p_d_prime_upper=float(q_hi[i]),
            epsilon_estimate=max(0.0, float(estimate[i])),
            epsilon_lower_bound=max(0.0, float(lower[i])),
        )
        for i, e in enumerate(events)
    )


def audit(
    mechanism: Releasable | Sampler,
    d: Any,
    d_prime: Any,
    *,
    trials: int = 1_000_000,
    alpha: float = 0.05,
    events: Sequence[Event] | None = None,
    rng: Any = None,
    delta: float | None = None,
    batch: int = 2**16,
    selection_trials: int | None = None,
) -> AuditResult:
    """A lower confidence bound on the epsilon of ``mechanism`` from releases of ``d`` and ``d_prime``.

    Each event ``S`` (and its complement) is a hypothesis test "the input was ``d_prime``". Its
    false-positive rate ``FP = Pr[M(d) in S]`` and false-negative rate ``FN = Pr[M(d') not in S]`` obey
    ``FP + e^eps FN >= 1 - delta`` and ``e^eps FP + FN >= 1 - delta`` for every (eps, delta)-DP mechanism
    (Kairouz, Oh and Viswanath 2015; seed 002, slides 32-34). The audit counts how often each event occurs,
    bounds FP and FN from above with one-sided Clopper-Pearson intervals, and returns
    ``max over events of max(log((1 - delta - FP_up)/FN_up), log((1 - delta - FN_up)/FP_up))``. This is
    the statistical auditing of Jagielski, Ullman and Oprea 2020 ("Auditing Differentially Private Machine
    Learning: How Private is Private SGD?") and Nasr et al. 2021 ("Adversary Instantiation: Lower Bounds for
    Differentially Private Machine Learning"), applied to a single release.

    Validity: the four one-sided bounds of every event (upper and lower, for each input) are taken at level
    ``alpha / (4 * len(events))``; by the union bound all of them hold simultaneously with probability at
    least ``1 - alpha``, and when they hold the returned value cannot exceed the true epsilon. The default
    events are chosen from a separate *pilot* sample (``selection_trials`` releases per input, discarded
    afterwards), so choosing them does not bias the bounds.

    ``mechanism`` is either an object with ``release(value, rng=)`` or a sampler
    ``sampler(value, n, rng) -> n outputs``. For a scalar ``d`` the mechanism is called on arrays of
    ``batch`` copies and *each coordinate is counted as one scalar release*. That is exact for mechanisms
    whose noise does not depend on the array size (geometric, discrete Gaussian). kakeibo's Laplace and
    Gaussian choose a finer grid for a larger array: per coordinate that distribution is at least as private
    as a scalar release (the rounding error the grid's slack must cover shrinks), so the audit is still a
    valid test of the claim but not of the exact size-1 distribution; pass a sampler built on
    ``mechanism.grid(1)`` to audit that. Every chunk has the same size, so all outputs share one
    distribution. A non-scalar ``d`` is released one at a time (slow; prefer a sampler).

    ``delta`` defaults to the delta of the mechanism's declared ``ApproxDP`` loss (0 otherwise; convert a
    zCDP loss with ``ZCDP(rho).to_approx(delta)`` and pass that delta). ``rng=None`` uses the secure
    source; pass a seeded :class:`numpy.random.Generator` for a reproducible audit.

    >>> import numpy as np
    >>> from kakeibo.mechanisms import Geometric
    >>> result = audit(Geometric(sensitivity=1, epsilon=1), 0, 1, trials=20_000, rng=np.random.default_rng(1))
    >>> 0.5 < result.epsilon_lower_bound <= 1.0, result.refutes(1.0)
    (True, False)
    """
    n, chunk, dlt = _checked_arguments(mechanism, trials, batch, alpha, delta)
    if events is None:
        pilot_n = _check_count(selection_trials or max(10_000, n // 10), "selection_trials")
        chosen = _pilot_events(mechanism, (d, d_prime), pilot_n, rng, chunk)
    else:
        chosen = list(events)
        if not all(isinstance(e, Event) for e in chosen):
            raise ArgumentTypeError("events must be kakeibo.audit.Event instances.")
    y_d = _draw(mechanism, d, n, rng, chunk)
    y_d_prime = _draw(mechanism, d_prime, n, rng, chunk)
    bounds = _bound_events(chosen, y_d, y_d_prime, float(alpha), dlt) if chosen else ()
    best = max(bounds, key=lambda b: b.epsilon_lower_bound, default=None)
    used_batch: int | None = None
    if isinstance(mechanism, Releasable):
        used_batch = chunk if np.ndim(d) == 0 else 1
    return AuditResult(
        epsilon_lower_bound=best.epsilon_lower_bound if best else 0.0,
        best_event=best.event if best else "no informative event",
        trials=n,
        alpha=float(alpha),
        delta=dlt,
        batch=used_batch,
        seeded=rng is not None,
        events=bounds,
    )
