"""Empirical privacy: how much epsilon a mechanism *demonstrably* spends, by hypothesis testing.

An auditor who sees one output ``y`` of a mechanism ``M`` and must decide between neighbouring inputs
``D`` and ``D'`` runs a test with rejection region ``S``. If ``M`` is (epsilon, delta)-DP, every such test
has ``FP + e^eps FN >= 1 - delta`` and ``e^eps FP + FN >= 1 - delta`` (Kairouz, Oh and Viswanath 2015,
"The Composition Theorem for Differential Privacy"; seed 002, slides 32-34), hence

    eps >= eps_emp = max(log((1 - FP) / FN), log((1 - FN) / FP)).

:func:`empirical_epsilon` is that formula. :func:`audit` estimates FP and FN for many tests from
independent releases, replaces them by Clopper-Pearson upper confidence bounds (Bonferroni-corrected) and
reports a *lower confidence bound* on epsilon, in the manner of Jagielski, Ullman and Oprea 2020 and Nasr
et al. 2021. A lower bound above the claimed epsilon is statistical proof of a privacy bug; kakeibo's own
tests use it to check every mechanism (``tests/test_privacy_statistical.py``) and to show that the audit
catches a mis-scaled mechanism and Mironov's floating-point attack (``tests/test_audit.py``).

>>> round(empirical_epsilon(0.05, 0.5), 4)  # log(0.95 / 0.5) vs log(0.5 / 0.05)
2.3026
"""

from __future__ import annotations

from ._audit import AuditResult, EventBound, Releasable, Sampler, audit
from ._bounds import clopper_pearson_lower, clopper_pearson_upper, empirical_epsilon
from ._events import (
    Event,
    default_events,
    grid_parity,
    mantissa_bit,
    mantissa_trailing_zeros,
    on_grid,
    threshold,
    value_event,
)

__all__ = [
    "AuditResult",
    "Event",
    "EventBound",
    "Releasable",
    "Sampler",
    "audit",
    "clopper_pearson_lower",
    "clopper_pearson_upper",
    "default_events",
    "empirical_epsilon",
    "grid_parity",
    "mantissa_bit",
    "mantissa_trailing_zeros",
    "on_grid",
    "threshold",
    "value_event",
]
