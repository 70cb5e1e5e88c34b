"""Statistical eps-LDP audit of every frequency oracle's randomizer (seed 003; Wang et al. 2017).

For each oracle, 10^6 clients hold ``x = 0`` and 10^6 hold ``x' = 1`` (the worst case: two values whose
reports differ most). Each report is reduced to the pair (supports x, supports x'), a post-processing of
the report, so any event on the pair is an event on the report. The event "supports x and not x'" has
likelihood ratio exactly ``e^eps`` for every oracle here (that is what makes these oracles tight), so:

* the audit's Clopper-Pearson lower bound on epsilon (confidence 1 - 1e-6, Bonferroni over the events) must
  not exceed the claimed epsilon -- a failure would refute the claim at that confidence, and
* the point estimate must come close to the claim (within 0.1 at 10^6 trials; for THE, to the smaller loss
  its thresholded bits really have), so the test would also
  notice an oracle that quietly spends far less than it is charged, and the audit has the power to see
  an over-spend: a unary encoding whose ``q`` is half the calibrated one is refuted.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from kakeibo import ldp
from kakeibo.audit import audit
from kakeibo.audit._events import value_event
from kakeibo.ldp._coins import dyadic_at_least
from kakeibo.ldp.framework import FrequencyOracle

pytestmark = pytest.mark.statistical

TRIALS = 1_000_000
ALPHA = 1e-6  # false-failure rate of each "not refuted" assertion
DOMAIN = 8
ORACLES = [ldp.GRR, ldp.SUE, ldp.OUE, ldp.THE, ldp.SHE, ldp.BLH, ldp.OLH, ldp.HadamardResponse]
EVENTS = [value_event(code) for code in range(4)]


def support_pair_sampler(oracle: FrequencyOracle, x: int, x_prime: int) -> Any:
    """A sampler for :func:`kakeibo.audit.audit`: ``n`` reports of one value, each reduced to
    ``2 [x in support] + [x' in support]``."""

    def sample(value: int, n: int, rng: np.random.Generator) -> np.ndarray:
        reports = oracle.randomize(np.full(n, value), rng=rng)
        holds_x = oracle.supports(reports, np.full(n, x))
        holds_x_prime = oracle.supports(reports, np.full(n, x_prime))
        return 2 * holds_x.astype(np.int64) + holds_x_prime

    return sample


def audit_zero_against_one(oracle: FrequencyOracle, seed: int) -> Any:
    """The audit of ``oracle`` on values 0 and 1, 10^6 reports each, at confidence 1 - ALPHA."""
    sampler = support_pair_sampler(oracle, 0, 1)
    return audit(sampler, 0, 1, trials=TRIALS, alpha=ALPHA, events=EVENTS, rng=np.random.default_rng(seed))


@pytest.mark.parametrize("epsilon", [1.0, 4.0])
@pytest.mark.parametrize("cls", ORACLES, ids=lambda c: c.__name__)
def test_randomizer_is_epsilon_ldp(cls: type[FrequencyOracle], epsilon: float) -> None:
    oracle = cls(epsilon=epsilon, domain_size=DOMAIN)
    result = audit_zero_against_one(oracle, 20261123)
    assert not result.refutes(epsilon), str(result)
    best = max(e.epsilon_estimate for e in result.events)
    # THE's thresholded bits lose less than the Laplace noise's epsilon; every other oracle is tight.
    actual = oracle.coin_epsilon if isinstance(oracle, ldp.THE) else epsilon
    assert best > actual - 0.1, f"{cls.__name__} spends much less than it should: {result}"


class HalfFlipOUE(ldp.OUE):
    """A broken unary encoding: ``q`` is half the calibrated value, so the real loss exceeds epsilon."""

    def __init__(self, *, epsilon: float, domain_size: int) -> None:
        super().__init__(epsilon=epsilon, domain_size=domain_size)
        self._q = dyadic_at_least(float(self._q) / 2, 32)


def test_audit_refutes_a_miscalibrated_unary_encoding() -> None:
    broken = HalfFlipOUE(epsilon=1.0, domain_size=DOMAIN)
    result = audit_zero_against_one(broken, 7)
    assert result.refutes(1.0), str(result)
