"""Randomized response: calibration of both protocols, exactness of the privacy claim, the frequency
estimator and its variance (seed 003; Wang et al. 2017).

Statistical tests are seeded; each states the false-failure rate of its bound.
"""

from __future__ import annotations

import math
from decimal import Decimal, localcontext
from fractions import Fraction

import numpy as np
import pytest
from scipy import stats

from kakeibo.mechanisms.randomized_response import LN3_UP, FrequencyEstimate, RandomizedResponse
from kakeibo.privacy import PureDP, as_fraction

SIX_SIGMA = 6.0  # two-sided normal tail 2e-9 per check


def decimal_ln(value: int) -> Decimal:
    with localcontext() as ctx:
        ctx.prec = 60
        return Decimal(value).ln()


def to_decimal(value: Fraction) -> Decimal:
    with localcontext() as ctx:
        ctx.prec = 60
        return Decimal(value.numerator) / Decimal(value.denominator)


# --- k-ary generalized randomized response -----------------------------------------------------------------


@pytest.mark.parametrize("epsilon, k", [(1.0, 4), (0.1, 50), (8.0, 1000), (1.0, 2), (0.5, 3)])
def test_keep_probability_is_the_textbook_one(epsilon: float, k: int) -> None:
    rr = RandomizedResponse(epsilon=epsilon, categories=k)
    p = math.exp(epsilon) / (math.exp(epsilon) + k - 1)
    assert rr.p == pytest.approx(p, rel=1e-12)
    assert rr.q == pytest.approx(p * math.exp(-epsilon), rel=1e-12)
    assert rr.p + (k - 1) * rr.q == pytest.approx(1.0, rel=1e-14)


@pytest.mark.statistical
@pytest.mark.parametrize("epsilon, k", [(1.0, 4), (8.0, 1000), (0.1, 50), (2.0, 2)])
def test_reports_keep_the_truth_with_probability_p(epsilon: float, k: int) -> None:
    """10**6 seeded clients with uniform true values: the kept share lies within 6 binomial standard errors
    of p (false-failure rate 2e-9)."""
    rr = RandomizedResponse(epsilon=epsilon, categories=k)
    n = 10**6
    truth = np.random.default_rng(1).integers(0, k, n)
    reports = rr.release(truth, rng=np.random.default_rng(2))
    kept = np.mean(reports == truth)
    assert abs(kept - rr.p) <= SIX_SIGMA * math.sqrt(rr.p * (1 - rr.p) / n)


@pytest.mark.statistical
def test_changed_reports_are_uniform_over_the_other_values() -> None:
    """Among 10**6 seeded reports with k = 5, those that differ from the truth are uniform over the four other
    values: the offset (report - truth) mod k is uniform on 1..4 (chi-square, alpha = 1e-4, false-failure
    rate 1e-4), and never 0 by construction."""
    k = 5
    rr = RandomizedResponse(epsilon=1.5, categories=k)
    truth = np.random.default_rng(3).integers(0, k, 10**6)
    reports = rr.release(truth, rng=np.random.default_rng(4))
    offsets = (reports - truth)[reports != truth] % k
    counts = np.bincount(offsets, minlength=k)[1:]
    assert stats.chisquare(counts).pvalue > 1e-4
    # ... and by true value: every category is reported as every other one equally often (fixed truth 2).
    fixed = rr.release(np.full(200_000, 2), rng=np.random.default_rng(5))
    others = np.bincount(fixed, minlength=k)[[0, 1, 3, 4]]
    assert stats.chisquare(others).pvalue > 1e-4


@pytest.mark.parametrize("epsilon", [0.1, 0.5, 1, 3, 10, "1/3", 0.001, 1e-20])
@pytest.mark.parametrize("k", [2, 3, 10, 1000, 2**40])
def test_effective_epsilon_never_exceeds_the_charge(epsilon: float | str, k: int) -> None:
    """p/q = (k-1) e^theta' with the sampler's rational theta'; ln(k-1) + theta' <= epsilon, checked at 60
    digits. For k = 2 theta' is epsilon itself whenever epsilon's parts are below 2**62. An epsilon below the
    sampler's resolution (2**-61) is refused."""
    if epsilon == 1e-20:
        with pytest.raises(ValueError, match="too small"):
            RandomizedResponse(epsilon=epsilon, categories=k)
        return
    rr = RandomizedResponse(epsilon=epsilon, categories=k)
    charged = rr.privacy_loss.epsilon
    assert charged == as_fraction(epsilon, "epsilon")
    theta = rr._theta
    assert theta is not None
    assert abs(theta.numerator) < 2**62 and theta.denominator < 2**62
    if k == 2:  # ln(1) = 0: compare exactly
        assert 0 < theta <= charged
        assert charged - theta < Fraction(1, 2**55) * max(Fraction(1), abs(theta))
    else:
        with localcontext() as ctx:
            ctx.prec = 60
            effective = decimal_ln(k - 1) + to_decimal(theta)
            assert effective <= to_decimal(charged)
            assert effective >= to_decimal(charged) - Decimal(2) ** -55 * max(
                Decimal(1), abs(to_decimal(theta))
            )
    if k == 2 and charged.numerator < 2**62 and charged.denominator < 2**62:
        assert theta == charged


# --- the two-coin protocol (seed 003) ----------------------------------------------------------------------


def test_two_coin_charges_ln3_rounded_up() -> None:
    rr = RandomizedResponse.two_coin()
    assert math.nextafter(math.log(3), math.inf) == LN3_UP
    assert rr.privacy_loss == PureDP(LN3_UP)
    charged = to_decimal(rr.privacy_loss.epsilon)
    assert charged > decimal_ln(3)  # P(yes|yes) / P(yes|no) = 3 = e^(ln 3)
    assert charged - decimal_ln(3) < Decimal("1e-15")
    assert (rr.p, rr.q, rr.categories, rr.protocol) == (0.75, 0.25, 2, "two_coin")
    assert repr(rr) == "RandomizedResponse.two_coin()"


@pytest.mark.statistical
def test_two_coin_answers_yes_with_probability_three_quarters_and_one_quarter() -> None:
    """10**6 seeded "yes" and 10**6 "no" clients; each share within 6 standard errors (false-failure 2e-9)."""
    rr = RandomizedResponse.two_coin()
    n = 10**6
    yes = rr.release(np.ones(n, dtype=bool), rng=np.random.default_rng(10))
    no = rr.release(np.zeros(n, dtype=bool), rng=np.random.default_rng(11))
    assert yes.dtype == np.bool_
    se = math.sqrt(0.75 * 0.25 / n)
    assert abs(yes.mean() - 0.75) <= SIX_SIGMA * se
    assert abs(no.mean() - 0.25) <= SIX_SIGMA * se


@pytest.mark.statistical
def test_two_coin_estimate_is_the_seeds_two_x_minus_a_quarter() -> None:
    """Seed 003: the true "yes" share is estimated by 2 (X - 1/4), X the share of "yes" reports. The
    estimator reproduces the formula exactly on computed reports, and recovers a 30% true share within
    6 standard errors from 10**6 seeded clients (false-failure 2e-9)."""
    rr = RandomizedResponse.two_coin()
    n = 10**6
    truth = np.random.default_rng(12).random(n) < 0.3
    reports = rr.release(truth, rng=np.random.default_rng(13))
    x = float(np.mean(reports))
    estimate = rr.estimate(reports)
    assert float(estimate.frequencies[1]) == 2 * (x - 0.25)
    assert float(estimate.frequencies[0]) == pytest.approx(1 - 2 * (x - 0.25), abs=1e-15)
    true_share = float(truth.mean())
    sd = math.sqrt(rr.estimator_variance(n=n, frequency=true_share, fixed_clients=True))
    assert abs(estimate.frequencies[1] - true_share) <= SIX_SIGMA * sd


# --- the estimator ----------------------------------------------------------------------------------------


@pytest.mark.statistical
def test_estimator_is_unbiased_with_the_stated_variance_for_fixed_clients() -> None:
    """A fixed population of n = 1000 clients (shares 0.5, 0.3, 0.2), k = 3, epsilon = 1, randomized
    R = 4000 times (seeded). Per category: the mean estimate lies within 6 standard errors of the true share
    (false-failure 2e-9), and the sample variance matches the exact fixed-client variance within 4.5
    standard errors of a sample variance, sd = sigma^2 sqrt(2/(R-1)) (normal approximation, false-failure
    7e-6). The population-model variance is 16% larger for the first category and is rejected."""
    k, n, reps = 3, 1000, 4000
    shares = np.array([0.5, 0.3, 0.2])
    rr = RandomizedResponse(epsilon=1, categories=k)
    truth = np.repeat(np.arange(k), (shares * n).astype(int))
    reports = rr.release(np.tile(truth, reps), rng=np.random.default_rng(21)).reshape(reps, n)
    observed = np.stack([np.mean(reports == c, axis=1) for c in range(k)], axis=1)
    estimates = (observed - rr.q) / (rr.p - rr.q)
    tolerance = 4.5 * math.sqrt(2 / (reps - 1))
    for c in range(k):
        var_fixed = rr.estimator_variance(n=n, frequency=shares[c], fixed_clients=True)
        assert abs(estimates[:, c].mean() - shares[c]) <= SIX_SIGMA * math.sqrt(var_fixed / reps)
        assert abs(estimates[:, c].var(ddof=1) / var_fixed - 1) <= tolerance
    var_population = rr.estimator_variance(n=n, frequency=0.5)
    assert abs(estimates[:, 0].var(ddof=1) / var_population - 1) > tolerance


@pytest.mark.statistical
def test_variance_for_sampled_clients_and_its_plug_in_estimate() -> None:
    """Clients drawn afresh from a population with shares (0.6, 0.4) each time (k = 2, epsilon = 0.5, n = 500,
    R = 4000, seeded): the sample variance of the estimate matches p'(1-p')/(n (p-q)^2) within 4.5 standard
    errors of a sample variance (false-failure 7e-6); the average plug-in variance of FrequencyEstimate
    matches it within 1% (its relative spread is about 0.1% here, so this cannot fail by chance)."""
    k, n, reps = 2, 500, 4000
    rr = RandomizedResponse(epsilon=0.5, categories=k)
    rng = np.random.default_rng(31)
    truth = (rng.random((reps, n)) < 0.4).astype(np.int64)
    reports = rr.release(truth, rng=np.random.default_rng(32))
    fits = [rr.estimate(row) for row in reports]
    estimates = np.array([f.frequencies[1] for f in fits])
    plug_in = np.array([f.variance[1] for f in fits])
    var_population = rr.estimator_variance(n=n, frequency=0.4)
    assert abs(estimates.var(ddof=1) / var_population - 1) <= 4.5 * math.sqrt(2 / (reps - 1))
    assert plug_in.mean() == pytest.approx(var_population, rel=0.01)
    assert abs(estimates.mean() - 0.4) <= SIX_SIGMA * math.sqrt(var_population / reps)


@pytest.mark.statistical
def test_confidence_intervals_cover_the_truth() -> None:
    """95% intervals over R = 4000 seeded repetitions (fixed clients, k = 4, epsilon = 2, n = 2000): per
    category the coverage is at least 0.95 - 4.5 binomial standard errors (false-failure 3.4e-6 each;
    the variance is conservative for fixed clients, so coverage is usually above 95%)."""
    k, n, reps = 4, 2000, 4000
    shares = np.array([0.4, 0.3, 0.2, 0.1])
    rr = RandomizedResponse(epsilon=2, categories=k)
    truth = np.repeat(np.arange(k), (shares * n).astype(int))
    reports = rr.release(np.tile(truth, reps), rng=np.random.default_rng(41)).reshape(reps, n)
    covered = np.zeros(k)
    for row in reports:
        low, high = rr.estimate(row).confidence_interval(0.05)
        covered += (low <= shares) & (shares <= high)
    coverage = covered / reps
    assert np.all(coverage >= 0.95 - 4.5 * math.sqrt(0.95 * 0.05 / reps))
    assert np.all(coverage <= 1.0)


def test_frequency_estimate_is_read_only_and_shaped() -> None:
    rr = RandomizedResponse(epsilon=1, categories=3)
    est = rr.estimate(np.array([0, 1, 2, 2, 2, 1]))
    assert isinstance(est, FrequencyEstimate)
    assert est.frequencies.shape == est.variance.shape == (3,)
    assert est.n == 6
    assert est.frequencies.sum() == pytest.approx(1.0)  # the estimates of all categories sum to one
    with pytest.raises(ValueError):
        est.frequencies[0] = 0.0
    low, high = est.confidence_interval()
    assert np.all(low < est.frequencies) and np.all(est.frequencies < high)


def test_estimator_variance_formulas() -> None:
    rr = RandomizedResponse(epsilon=1, categories=4)
    p, q = rr.p, rr.q
    shown = 0.3 * p + 0.7 * q
    assert rr.estimator_variance(n=50, frequency=0.3) == pytest.approx(
        shown * (1 - shown) / (50 * (p - q) ** 2)
    )
    # Wang et al. 2017: n Var = q(1-q)/(p-q)^2 + f (1-p-q)/(p-q) for fixed clients.
    fixed = rr.estimator_variance(n=50, frequency=0.3, fixed_clients=True)
    assert fixed * 50 == pytest.approx(q * (1 - q) / (p - q) ** 2 + 0.3 * (1 - p - q) / (p - q))
    assert fixed < rr.estimator_variance(n=50, frequency=0.3)


# --- shapes, types, reproducibility -------------------------------------------------------------------------


def test_release_shapes_and_types() -> None:
    rr = RandomizedResponse(epsilon=1, categories=3)
    rng = np.random.default_rng(0)
    scalar = rr.release(2, rng=rng)
    assert isinstance(scalar, int) and 0 <= scalar < 3
    grid = rr.release(np.zeros((4, 5), dtype=np.int64), rng=rng)
    assert grid.shape == (4, 5) and grid.dtype == np.int64
    assert rr.release(np.array([], dtype=np.int64), rng=rng).shape == (0,)
    assert rr.release([0.0, 2.0], rng=rng).shape == (2,)  # whole floats are category indices
    binary = RandomizedResponse(epsilon=1)
    assert isinstance(binary.release(True), bool)
    a = rr.release(np.arange(3).repeat(100), rng=np.random.default_rng(9))
    b = rr.release(np.arange(3).repeat(100), rng=np.random.default_rng(9))
    assert np.array_equal(a, b)
    assert repr(rr) == "RandomizedResponse(epsilon=1.0, categories=3)"
    assert rr.privacy_loss == PureDP(1)


def test_error_bound_points_to_the_estimator() -> None:
    rr = RandomizedResponse(epsilon=1, categories=3)
    with pytest.raises(TypeError, match="confidence_interval"):
        rr.error_bound(0.05)
    with pytest.raises(TypeError, match="estimator_variance"):
        rr.failure_probability(0.1)


# --- bad input ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("epsilon", [-1, 0, math.nan, math.inf, "abc", 2.0**41])
def test_bad_epsilon(epsilon: object) -> None:
    with pytest.raises(ValueError, match="epsilon"):
        RandomizedResponse(epsilon=epsilon, categories=3)  # type: ignore[arg-type]


def test_bad_epsilon_and_category_types() -> None:
    with pytest.raises(TypeError, match="bool"):
        RandomizedResponse(epsilon=True, categories=3)
    for k in (1, 0, -3):
        with pytest.raises(ValueError, match="categories"):
            RandomizedResponse(epsilon=1, categories=k)
    for wrong in (2.5, True, "3"):
        with pytest.raises(TypeError, match="categories"):
            RandomizedResponse(epsilon=1, categories=wrong)  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        RandomizedResponse(1, 3)  # type: ignore[call-arg]  # keyword-only


@pytest.mark.parametrize(
    "values, error, match",
    [
        ([0, 1, 3], ValueError, "0..2"),
        ([-1, 0], ValueError, "0..2"),
        ([0.5, 1.0], ValueError, "whole"),
        ([math.nan], ValueError, "whole"),
        ([True, False], ValueError, "categories=2"),
        (["a"], TypeError, "integer"),
        ([1 + 1j], TypeError, "integer"),
    ],
)
def test_bad_values(values: list[object], error: type[Exception], match: str) -> None:
    rr = RandomizedResponse(epsilon=1, categories=3)
    with pytest.raises(error, match=match):
        rr.release(values)  # type: ignore[arg-type]
    with pytest.raises(error, match=match):
        rr.estimate(values)  # type: ignore[arg-type]


def test_bad_estimator_arguments() -> None:
    rr = RandomizedResponse(epsilon=1, categories=3)
    with pytest.raises(ValueError, match="two reports"):
        rr.estimate([1])
    est = rr.estimate([0, 1, 2])
    for alpha in (0, 1, 1.5, math.nan):
        with pytest.raises(ValueError, match="alpha"):
            est.confidence_interval(alpha)
    with pytest.raises(ValueError, match="n must be"):
        rr.estimator_variance(n=0, frequency=0.5)
    with pytest.raises(TypeError, match="n must be"):
        rr.estimator_variance(n=10.0, frequency=0.5)  # type: ignore[arg-type]
    for f in (-0.1, 1.1, math.nan):
        with pytest.raises(ValueError, match="frequency"):
            rr.estimator_variance(n=10, frequency=f)


@pytest.mark.parametrize(
    "rr", [RandomizedResponse(epsilon=0.75, categories=5), RandomizedResponse.two_coin()], ids=repr
)
def test_frequency_estimate_carries_the_per_report_loss(rr: RandomizedResponse) -> None:
    """The estimate states the loss each client's report was randomized with (issue 16)."""
    reports = rr.release(np.arange(40) % rr.categories, rng=np.random.default_rng(4))
    assert rr.estimate(reports).privacy_loss == rr.privacy_loss
