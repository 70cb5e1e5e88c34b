"""The privacy audit (kakeibo.audit): the empirical-epsilon formula, the validity of its confidence bound,
and -- the point of an audit -- that it *fails* mechanisms that break their claim.

Seed 002 (slides 32-34) defines the empirical epsilon of a test with rejection region S by
``max(log((1 - FP)/FN), log((1 - FN)/FP))`` (Kairouz et al. 2015). ``audit`` turns it into a lower
confidence bound; a bound above the claimed epsilon refutes the claim at confidence 1 - alpha.

Every statistical test here is seeded (reproducible); the statement "false-failure rate <= x" says how
often the assertion would fail over the choice of seed if the code were correct.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest
from scipy import stats

from kakeibo.audit import (
    AuditResult,
    Event,
    audit,
    clopper_pearson_lower,
    clopper_pearson_upper,
    default_events,
    empirical_epsilon,
    grid_parity,
    mantissa_bit,
    mantissa_trailing_zeros,
    on_grid,
    threshold,
    value_event,
)
from kakeibo.mechanisms import Geometric, Laplace
from kakeibo.privacy import ApproxDP, PureDP

TRIALS = 1_000_000

# --- the formula --------------------------------------------------------------------------------------


def test_empirical_epsilon_is_the_seed_formula() -> None:
    for fp, fn in [(0.1, 0.2), (0.3, 0.05), (0.01, 0.9), (0.25, 0.25)]:
        expected = max(math.log((1 - fp) / fn), math.log((1 - fn) / fp))
        assert empirical_epsilon(fp, fn) == pytest.approx(max(0.0, expected), rel=1e-15)
    # Symmetric in the two error rates, as the pair of inequalities is.
    assert empirical_epsilon(0.1, 0.3) == empirical_epsilon(0.3, 0.1)


def test_empirical_epsilon_of_randomized_response_is_its_epsilon() -> None:
    """Binary randomized response at epsilon reports the truth with probability e^eps / (1 + e^eps); the
    test "reject when the report is 1" has FP = FN = 1 / (1 + e^eps), and its empirical epsilon is exactly
    epsilon: the bound of Kairouz et al. is tight."""
    for eps in (0.1, 1.0, 3.0):
        err = 1 / (1 + math.exp(eps))
        assert empirical_epsilon(err, err) == pytest.approx(eps, rel=1e-12)


def test_empirical_epsilon_edge_cases() -> None:
    assert empirical_epsilon(0.3, 0.0) == math.inf  # a perfect no-miss test with some power: no epsilon
    assert empirical_epsilon(0.0, 0.3) == math.inf
    assert empirical_epsilon(0.0, 0.0) == math.inf  # a perfect test
    assert empirical_epsilon(1.0, 0.0) == 0.0  # "always reject": FP = 1 satisfies both inequalities
    assert empirical_epsilon(0.0, 1.0) == 0.0
    assert empirical_epsilon(0.5, 0.5) == 0.0  # a coin
    assert empirical_epsilon(0.7, 0.6) == 0.0  # worse than a coin: clipped at 0, epsilon is non-negative


def test_empirical_epsilon_with_delta() -> None:
    """(eps, delta)-DP: FP + e^eps FN >= 1 - delta gives log((1 - delta - FP) / FN)."""
    fp, fn, delta = 0.01, 0.2, 1e-3
    expected = max(math.log((1 - delta - fp) / fn), math.log((1 - delta - fn) / fp))
    assert empirical_epsilon(fp, fn, delta=delta) == pytest.approx(expected)
    assert empirical_epsilon(fp, fn, delta=delta) < empirical_epsilon(fp, fn)
    # With FN = 0, delta absorbs a false-positive budget of up to 1 - delta - FP ... only if it is positive.
    assert empirical_epsilon(0.995, 0.0, delta=0.01) == 0.0
    assert empirical_epsilon(0.5, 0.0, delta=0.01) == math.inf


@pytest.mark.parametrize(
    ("fp", "fn", "delta"), [(-0.1, 0.5, 0.0), (0.5, 1.5, 0.0), (math.nan, 0.5, 0.0), (0.5, 0.5, 1.0)]
)
def test_empirical_epsilon_rejects_non_probabilities(fp: float, fn: float, delta: float) -> None:
    with pytest.raises(ValueError, match="must"):
        empirical_epsilon(fp, fn, delta=delta)


def test_empirical_epsilon_rejects_non_numbers() -> None:
    with pytest.raises(TypeError):
        empirical_epsilon("0.1", 0.2)  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        empirical_epsilon(True, 0.2)


# --- the confidence bounds ----------------------------------------------------------------------------


def test_clopper_pearson_matches_the_beta_quantiles() -> None:
    k, n, a = np.array([0, 3, 50, 100]), 100, 0.01
    upper = clopper_pearson_upper(k, n, a)
    lower = clopper_pearson_lower(k, n, a)
    assert upper[0] == pytest.approx(1 - a ** (1 / n))  # k = 0: 1 - a^(1/n) exactly
    assert upper[3] == 1.0 and lower[0] == 0.0
    assert lower[3] == pytest.approx(a ** (1 / n))
    assert upper[1] == pytest.approx(stats.beta.ppf(1 - a, 4, 97))
    assert lower[2] == pytest.approx(stats.beta.ppf(a, 50, 51))
    assert np.all(lower <= k / n) and np.all(k / n <= upper)


@pytest.mark.statistical
def test_clopper_pearson_one_sided_coverage() -> None:
    """Each one-sided bound fails with probability at most its level (exact, conservative).

    200,000 binomial counts per case (seed 11); a failure rate above the level plus 4 binomial standard
    errors has probability < 1e-4 per check if the bound is valid (false-failure rate < 1e-3 overall)."""
    rng = np.random.default_rng(11)
    reps = 200_000
    for n, p, level in [(50, 0.1, 0.05), (1000, 0.003, 0.01), (400, 0.5, 0.05), (10_000, 0.9999, 0.05)]:
        k = rng.binomial(n, p, size=reps)
        slack = 4 * math.sqrt(level * (1 - level) / reps)
        assert np.mean(clopper_pearson_upper(k, n, level) < p) <= level + slack
        assert np.mean(clopper_pearson_lower(k, n, level) > p) <= level + slack


def test_clopper_pearson_validates() -> None:
    with pytest.raises(ValueError, match="successes"):
        clopper_pearson_upper(11, 10, 0.05)
    with pytest.raises(ValueError, match="level"):
        clopper_pearson_lower(1, 10, 1.5)


# --- events -------------------------------------------------------------------------------------------


def test_low_bit_events_read_the_float_representation() -> None:
    y = np.array([0.75, 1.0, 1.0 + 2.0**-52, -0.5, 6.0, 0.1])
    assert on_grid(2)(y).tolist() == [True, True, False, True, True, False]
    assert on_grid(-1)(y).tolist() == [False, False, False, False, True, False]
    assert grid_parity(0)(y).tolist() == [False, True, True, True, False, False]  # floor(-0.5) = -1 is odd
    assert grid_parity(2)(y).tolist() == [True, False, False, False, False, False]  # floor(4y) odd
    assert mantissa_trailing_zeros(52)(y).tolist() == [False, True, False, True, False, False]
    assert mantissa_bit(0)(np.array([1.0 + 2.0**-52, 1.0])).tolist() == [True, False]
    ints = np.array([0, 1, 2, 3, 4, -3])
    assert on_grid(-1)(ints).tolist() == [True, False, True, False, True, False]
    assert grid_parity(-1)(ints).tolist() == [False, False, True, True, False, False]  # -3 >> 1 = -2
    assert threshold(1.5)(ints).tolist() == [False, False, True, True, True, False]
    assert value_event(3)(ints).tolist() == [False, False, False, True, False, False]


def test_event_must_return_one_boolean_per_output() -> None:
    with pytest.raises(ValueError, match="one boolean per output"):
        Event("broken", lambda y: y[:1] > 0)(np.zeros(3))


def test_default_events_drop_constant_and_duplicate_events() -> None:
    pilot = np.array([0, 1, 1, 2, 5, 5, 7, -1] * 10)
    events = default_events(pilot)
    indicators = [e(pilot) for e in events]
    assert all(0 < ind.sum() < pilot.size for ind in indicators)  # no constant event
    keys = {np.packbits(ind ^ ind[0]).tobytes() for ind in indicators}
    assert len(keys) == len(events)  # no event equal to another or to another's complement
    assert any(e.description.startswith("y == ") for e in events)
    assert any(e.description.startswith("y > ") for e in events)


# --- the audit is a valid lower bound, and it has power -----------------------------------------------


def _binary_rr_sampler(epsilon: float) -> Any:
    """Binary randomized response as a sampler: report 1 w.p. e^eps/(1+e^eps) if the input is 1."""
    keep = math.exp(epsilon) / (1 + math.exp(epsilon))

    def sample(value: Any, n: int, rng: Any) -> np.ndarray[Any, Any]:
        truth = rng.random(n) < keep
        return np.where(truth, int(value), 1 - int(value))

    return sample


@pytest.mark.statistical
def test_audit_lower_bound_is_valid_for_a_tight_mechanism() -> None:
    """Binary randomized response attains its epsilon exactly, the hardest case for a lower bound. Over
    400 independent audits at alpha = 0.2 (seed 5), the bound exceeds the true epsilon in at most
    20% of them if it is valid; we allow the 0.999-quantile of Binomial(400, 0.2) (false-failure rate
    < 1e-3). A bound computed with the wrong direction (lower instead of upper bounds on FP and FN)
    would exceed epsilon about half the time."""
    eps, reps, alpha = 1.0, 400, 0.2
    sampler = _binary_rr_sampler(eps)
    rng = np.random.default_rng(5)
    exceed = 0
    for _ in range(reps):
        result = audit(sampler, 0, 1, trials=2_000, alpha=alpha, events=[value_event(1)], rng=rng)
        exceed += result.refutes(eps)
    assert exceed <= stats.binom.ppf(0.999, reps, alpha)
    # ... and the bound is informative: the last audit's bound is close to epsilon.
    assert 0.6 < result.epsilon_lower_bound <= eps


@pytest.mark.statistical
def test_audit_a_half_scale_laplace_is_caught() -> None:
    """(a) A mechanism that claims epsilon = 1 but adds Laplace noise of scale sensitivity / (2 epsilon)
    (kakeibo's exact grid Laplace at epsilon = 2, so only the scale is wrong) is really 2-DP. On the
    worst-case neighbours d = 0, d' = 1 the events {y > c} with c >= 1 have likelihood ratio e^2, and
    10^6 trials per side bound epsilon from below by 1.988 > 1 (measured).

    False-failure rate: the assertions fail only if the estimated likelihood ratio is off by a factor
    e^0.1 with 10^6 trials (probability far below 1e-6), or if the valid 95% bound exceeds the true
    epsilon 2 (<= 5%); seed 1.
    """
    claimed = 1.0

    class HalfScaleLaplace:
        privacy_loss = PureDP(claimed)

        def __init__(self) -> None:
            self._inner = Laplace(sensitivity=1, epsilon=2 * claimed)

        def release(self, value: Any, rng: Any = None) -> Any:
            return self._inner.release(value, rng=rng)

    result = audit(HalfScaleLaplace(), 0.0, 1.0, trials=TRIALS, rng=np.random.default_rng(1))
    assert result.refutes(claimed)
    assert result.epsilon_lower_bound > 1.9
    assert result.epsilon_lower_bound <= 2.0  # still a valid bound on the true epsilon


class TextbookFloatLaplace:
    """The textbook Laplace mechanism, y = x + numpy.random.laplace(0, sensitivity / epsilon): what kakeibo
    refuses to do (DESIGN.md, "Floating point is an attack surface")."""

    def __init__(self, *, sensitivity: float, epsilon: float) -> None:
        self.scale = sensitivity / epsilon
        self.privacy_loss = PureDP(epsilon)

    def release(self, value: Any, rng: Any = None) -> Any:
        generator = rng if isinstance(rng, np.random.Generator) else np.random.default_rng()
        x = np.asarray(value, dtype=np.float64)
        return x + generator.laplace(0.0, self.scale, size=x.shape)


@pytest.mark.statistical
def test_audit_catches_the_textbook_float_laplace() -> None:
    """(b) Mironov's attack (2012, "On Significance of the Least Significant Bits for Differential
    Privacy") found by the audit's low-bit events.

    Claim: epsilon = 1, sensitivity 1, inputs d = 0 and d' = 1. For d' = 1 the output is the double
    fl(1 + n). It is *always* a multiple of 2**-53: if |n| < 1/2 the sum lies in (1/2, 3/2) where doubles
    are spaced 2**-53 or 2**-52 apart; if |n| >= 1/2, n itself is a multiple of 2**-53, so is 1 + n, and
    rounding it to a double (spacing >= 2**-53 above 1/2; exact below 1/2 by Sterbenz's lemma) keeps it
    one. For d = 0 the output is n itself, and a Laplace draw below 1/2 in magnitude is a double with
    finer spacing -- not a multiple of 2**-53 in about 27% of the trials. The event "y is a multiple of
    2**-53" thus has Pr[M(d') in S] = 1 and Pr[M(d) in S] ~ 0.73: infinite privacy loss. With 10^6 trials
    the Clopper-Pearson bounds (Bonferroni over all events) prove epsilon > 10 (measured: 10.26).

    The same data through threshold events alone stays below the claim: the leak is invisible to a test
    that looks only at the value's size (measured: 0.990). A false failure needs the threshold-only bound
    to exceed 1 (<= 5% if the continuous Laplace were exactly 1-DP); seeds 2 and 3."""
    claimed = 1.0
    naive = TextbookFloatLaplace(sensitivity=1.0, epsilon=claimed)
    result = audit(naive, 0.0, 1.0, trials=TRIALS, rng=np.random.default_rng(2))
    assert result.refutes(claimed)
    assert result.epsilon_lower_bound > 10
    assert "multiple of 2**" in result.best_event or "odd" in result.best_event
    best = max(result.events, key=lambda e: e.epsilon_lower_bound)
    assert 0 in (best.count_d, best.count_d_prime, TRIALS - best.count_d, TRIALS - best.count_d_prime)

    thresholds_only = [threshold(c) for c in np.linspace(-3.0, 4.0, 29)]
    by_size = audit(naive, 0.0, 1.0, trials=TRIALS, events=thresholds_only, rng=np.random.default_rng(3))
    assert not by_size.refutes(claimed)


@pytest.mark.statistical
def test_audit_passes_kakeibo_laplace() -> None:
    """(c) The same audit (same inputs, events, trials) on kakeibo's Laplace stays below the claim. On the
    events {y > c}, c >= 1, its likelihood ratio is e^epsilon up to a factor 1 - 2**-20 (the grid slack),
    so the bound comes close to 1 (measured 0.9898) without exceeding it. False-failure rate <= 5% (a valid
    95% lower bound); seed 1."""
    claimed = 1.0
    result = audit(
        Laplace(sensitivity=1, epsilon=claimed), 0.0, 1.0, trials=TRIALS, rng=np.random.default_rng(1)
    )
    assert not result.refutes(claimed)
    assert result.epsilon_lower_bound > 0.95  # and the audit is sharp enough to matter
    assert result.batch == 2**16 and result.seeded and result.delta == 0.0


# --- the result and the arguments ---------------------------------------------------------------------


def test_audit_result_table_and_fields() -> None:
    result = audit(
        Geometric(sensitivity=1, epsilon=0.5),
        0,
        1,
        trials=5_000,
        events=[threshold(0.5), value_event(0)],
        rng=np.random.default_rng(0),
    )
    assert isinstance(result, AuditResult)
    assert result.trials == 5_000 and result.alpha == 0.05 and len(result.events) == 2
    row = result.events[0]
    assert row.event == "y > 0.5"
    assert row.p_d == row.count_d / 5_000 and row.p_d_lower <= row.p_d <= row.p_d_upper
    assert row.p_d_prime_lower <= row.p_d_prime <= row.p_d_prime_upper
    assert row.epsilon_lower_bound <= row.epsilon_estimate
    assert result.epsilon_lower_bound == max(e.epsilon_lower_bound for e in result.events)
    assert "epsilon >=" in str(result) and result.best_event in str(result)


def test_audit_reads_delta_from_the_declared_loss() -> None:
    class Declared:
        privacy_loss = ApproxDP(1, 1e-3)

        def release(self, value: Any, rng: Any = None) -> Any:
            return np.asarray(value) + np.zeros(np.shape(value))

    result = audit(Declared(), 0.0, 1.0, trials=100, events=[threshold(0.5)])
    assert result.delta == 1e-3
    # A deterministic release leaks everything: infinite point estimate, a bound limited only by the trials.
    assert result.events[0].epsilon_estimate == math.inf
    assert result.refutes(3.0)
    assert not result.seeded


def test_audit_vector_input_is_released_one_at_a_time() -> None:
    def first_plus_coin(value: Any, rng: Any = None) -> Any:
        return float(np.asarray(value)[0] + rng.integers(0, 2))

    class Vector:
        release = staticmethod(first_plus_coin)

    result = audit(
        Vector(), [0.0, 5.0], [1.0, 5.0], trials=200, events=[threshold(0.5)], rng=np.random.default_rng(0)
    )
    assert result.batch == 1 and result.trials == 200


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"trials": 0}, "trials"),
        ({"alpha": 1.0}, "alpha"),
        ({"delta": 1.0}, "delta"),
        ({"batch": 0}, "batch"),
    ],
)
def test_audit_validates_arguments(kwargs: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        audit(Geometric(sensitivity=1, epsilon=1), 0, 1, events=[threshold(0.5)], **kwargs)


def test_audit_rejects_bad_events_and_samplers() -> None:
    with pytest.raises(TypeError, match="Event"):
        audit(Geometric(sensitivity=1, epsilon=1), 0, 1, trials=10, events=[lambda y: y > 0])  # type: ignore[list-item]
    with pytest.raises(ValueError, match="sampler"):
        audit(lambda v, n, rng: np.zeros(n + 1), 0, 1, trials=10, events=[threshold(0.5)])
    with pytest.raises(TypeError, match="release"):
        audit(42, 0, 1, trials=10, events=[threshold(0.5)])  # type: ignore[arg-type]
