"""Accuracy planning and the accuracy warning (seed 000, ch. 8), and the mechanisms' failure_probability.

Reproduces seed 000 ch. 8's example: the mean of n = 1000 records (L1 sensitivity 1/n) released by the
Laplace mechanism at epsilon = 0.001 misses by more than 1 with probability exp(-1) ~ 0.368, which the seed
reads off its graph as "about 0.38", and kakeibo warns when that is more than the analyst accepts.
Statistical tests are seeded; each states its false-failure rate.
"""

from __future__ import annotations

import itertools
import math
import warnings

import numpy as np
import pytest
from scipy import stats

from kakeibo.mechanisms import DiscreteGaussian, Gaussian, Geometric, Laplace, analytic_gaussian_sigma
from kakeibo.mechanisms.accuracy import (
    AccuracyWarning,
    check_accuracy,
    gaussian_epsilon_for,
    gaussian_error,
    gaussian_failure_probability,
    geometric_epsilon_for,
    geometric_error,
    geometric_failure_probability,
    laplace_epsilon_for,
    laplace_error,
    laplace_failure_probability,
)
from kakeibo.mechanisms.base import Mechanism
from kakeibo.mechanisms.exponential import Exponential
from kakeibo.mechanisms.randomized_response import RandomizedResponse

Z_999 = float(stats.norm.ppf(1 - 0.001 / 2))  # two-sided 99.9% normal quantile, 3.29


# --- seed 000, ch. 8 -------------------------------------------------------------------------------------


def test_seed_000_mean_example_failure_probability() -> None:
    """n = 1000, sensitivity 1/n, epsilon = 0.001, tolerance 1: Pr(|error| > 1) = exp(-1)."""
    p = laplace_failure_probability(sensitivity=1 / 1000, epsilon=0.001, tolerance=1)
    assert p == math.exp(-1)
    assert abs(p - 0.38) <= 0.02  # the seed's "about 0.38", read off a graph
    assert 1 - p == pytest.approx(0.632, abs=0.001)  # "the error stays within 1 with probability ~0.62"
    # ... and the theorem read the other way: the error bound at beta = e^-1 is exactly 1.
    assert laplace_error(sensitivity=1 / 1000, epsilon=0.001, beta=math.exp(-1)) == pytest.approx(
        1.0, rel=1e-15
    )


def test_seed_000_warning_when_the_failure_probability_is_large() -> None:
    mean_query = Laplace(sensitivity=1 / 1000, epsilon=0.001)
    with pytest.warns(AccuracyWarning) as caught:
        p = check_accuracy(mean_query, tolerance=1.0, max_failure_probability=0.05)
    assert len(caught) == 1
    message = str(caught[0].message)
    assert "0.368" in message and "exceeds 1 " in message and "0.05" in message
    assert message.endswith(".") and message.count(". ") == 0  # one sentence
    assert caught[0].filename == __file__  # stacklevel: the warning points at the caller's line
    # The mechanism's own bound includes kakeibo's grid and 2**-20 slack: a hair above exp(-1).
    assert math.exp(-1) <= p <= math.exp(-1) * (1 + 1e-5)
    assert p == mean_query.failure_probability(1.0)


def test_seed_000_no_warning_when_the_failure_probability_is_acceptable() -> None:
    mean_query = Laplace(sensitivity=1 / 1000, epsilon=0.001)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        p = check_accuracy(mean_query, 1.0, 0.5)
    assert p == pytest.approx(math.exp(-1), rel=1e-5)


@pytest.mark.statistical
def test_seed_000_empirical_failure_rate_of_the_laplace_mechanism() -> None:
    """250,000 seeded releases of the mean (true value 0.5) through kakeibo's Laplace mechanism
    (sensitivity 1/1000, epsilon 0.001), in five batches of 50,000 coordinates. The observed share of
    errors above 1 lies within the 99.9% binomial interval around the claimed bound (false-failure rate
    1e-3): it is not above the bound, and the bound is tight (not far above the observation)."""
    m = Laplace(sensitivity=1 / 1000, epsilon=0.001)
    rng = np.random.default_rng(20260000)
    errors = np.concatenate([m.release(np.full(50_000, 0.5), rng=rng) - 0.5 for _ in range(5)])
    observed = float(np.mean(np.abs(errors) > 1))
    bound = m.failure_probability(1.0)
    half_width = Z_999 * math.sqrt(bound * (1 - bound) / errors.size)
    assert observed <= bound + half_width
    assert observed >= bound - half_width


# --- the planning trios ---------------------------------------------------------------------------------


@pytest.mark.parametrize("sensitivity, epsilon", [(1, 1), (0.001, 0.001), (3, 0.25)])
@pytest.mark.parametrize("beta", [0.5, 0.05, 1e-9])
def test_laplace_trio_are_inverses(sensitivity: float, epsilon: float, beta: float) -> None:
    a = laplace_error(sensitivity=sensitivity, epsilon=epsilon, beta=beta)
    assert a == pytest.approx(sensitivity / epsilon * math.log(1 / beta), rel=1e-14)
    assert laplace_failure_probability(
        sensitivity=sensitivity, epsilon=epsilon, tolerance=a
    ) == pytest.approx(beta, rel=1e-12)
    eps = laplace_epsilon_for(sensitivity=sensitivity, tolerance=a, beta=beta)
    assert eps == pytest.approx(epsilon, rel=1e-11)
    assert laplace_failure_probability(sensitivity=sensitivity, epsilon=eps, tolerance=a) <= beta


def geometric_tail_by_summation(scale: float, m: int) -> float:
    """Pr(|Z| > m) for P(Z = z) = (1 - q)/(1 + q) q^|z|, summed term by term."""
    q = math.exp(-1 / scale)
    z = np.arange(m + 1, m + 1 + int(60 * scale) + 200)
    return float(2 * np.sum((1 - q) / (1 + q) * q**z))


@pytest.mark.parametrize("sensitivity, epsilon", [(1, 1), (1, 0.1), (5, 2.0), (2, 0.01)])
@pytest.mark.parametrize("beta", [0.3, 0.05, 1e-6])
def test_geometric_trio_use_the_exact_discrete_tail(sensitivity: int, epsilon: float, beta: float) -> None:
    scale = sensitivity / epsilon
    for tol in (0, 1, 2.5, 7):
        assert geometric_failure_probability(sensitivity=sensitivity, epsilon=epsilon, tolerance=tol) == (
            pytest.approx(geometric_tail_by_summation(scale, math.floor(tol)), rel=1e-9)
        )
    m = geometric_error(sensitivity=sensitivity, epsilon=epsilon, beta=beta)
    assert m == int(m) >= 0
    assert geometric_tail_by_summation(scale, int(m)) <= beta * (1 + 1e-9)
    if m > 0:  # the least such integer
        assert geometric_tail_by_summation(scale, int(m) - 1) > beta
    # Same figure as the mechanism's own error bound when its scale is exact.
    assert m == Geometric(sensitivity=sensitivity, epsilon=epsilon).error_bound(beta)
    eps = geometric_epsilon_for(sensitivity=sensitivity, tolerance=m, beta=beta)
    assert eps <= epsilon * (1 + 1e-9)
    assert geometric_failure_probability(sensitivity=sensitivity, epsilon=eps, tolerance=m) <= beta
    assert geometric_failure_probability(sensitivity=sensitivity, epsilon=eps * 0.999, tolerance=m) > beta


@pytest.mark.parametrize("epsilon, delta", [(1, 1e-5), (0.1, 1e-8), (4, 1e-3)])
@pytest.mark.parametrize("beta", [0.2, 0.05, 1e-6])
def test_gaussian_trio_use_the_normal_quantile(epsilon: float, delta: float, beta: float) -> None:
    sigma = analytic_gaussian_sigma(epsilon, delta, 2.0)
    a = gaussian_error(sensitivity=2, epsilon=epsilon, delta=delta, beta=beta)
    assert a == pytest.approx(sigma * stats.norm.isf(beta / 2), rel=1e-12)
    p = gaussian_failure_probability(sensitivity=2, epsilon=epsilon, delta=delta, tolerance=a)
    assert p == pytest.approx(beta, rel=1e-9)
    eps = gaussian_epsilon_for(sensitivity=2, delta=delta, tolerance=a, beta=beta)
    assert eps == pytest.approx(epsilon, rel=1e-6)
    assert gaussian_error(sensitivity=2, epsilon=eps, delta=delta, beta=beta) <= a
    assert gaussian_error(sensitivity=2, epsilon=eps * (1 - 1e-6), delta=delta, beta=beta) > a


def test_gaussian_epsilon_for_a_loose_tolerance_is_zero() -> None:
    """sigma(epsilon -> 0) is finite when delta > 0; a tolerance even that sigma meets needs no epsilon."""
    sigma0 = analytic_gaussian_sigma(0.0, 0.1, 1.0)
    tol = float(sigma0 * stats.norm.isf(0.05 / 2) * 1.01)
    assert gaussian_epsilon_for(sensitivity=1, delta=0.1, tolerance=tol, beta=0.05) == 0.0


# --- failure_probability of the four existing mechanisms --------------------------------------------------

MECHANISMS: list[Mechanism] = [
    Laplace(sensitivity=1, epsilon=0.5),
    Laplace(sensitivity=1 / 1000, epsilon=0.001),
    Geometric(sensitivity=1, epsilon=0.3),
    Geometric(sensitivity=3, epsilon=2),
    Gaussian(sensitivity=1, epsilon=1, delta=1e-5),
    Gaussian(sensitivity=0.01, epsilon=0.2, delta=1e-8),
    DiscreteGaussian(sensitivity=1, rho=0.5),
    DiscreteGaussian(sensitivity=4, rho=0.01),
]


@pytest.mark.parametrize("mechanism", MECHANISMS, ids=lambda m: type(m).__name__)
def test_failure_probability_inverts_error_bound(mechanism: Mechanism) -> None:
    """failure_probability(error_bound(beta)) <= beta (the relative 1e-12 covers float rounding); it is 1 for
    a negative tolerance, 0 at infinity, and decreases in the tolerance."""
    for beta in (0.9, 0.5, 0.05, 1e-3, 1e-9):
        assert mechanism.failure_probability(mechanism.error_bound(beta)) <= beta * (1 + 1e-12)
    assert mechanism.failure_probability(-1.0) == 1.0
    assert mechanism.failure_probability(math.inf) == 0.0
    values = [mechanism.failure_probability(t) for t in np.linspace(0, 5 * mechanism.error_bound(0.5), 50)]
    assert all(a >= b for a, b in itertools.pairwise(values))
    assert all(0 <= v <= 1 for v in values)


def test_failure_probability_is_close_to_the_ideal_noise() -> None:
    lap = Laplace(sensitivity=2, epsilon=0.5)
    ideal = laplace_failure_probability(sensitivity=2, epsilon=0.5, tolerance=10)
    assert ideal <= lap.failure_probability(10.0) <= ideal * (1 + 1e-4)
    geo = Geometric(sensitivity=2, epsilon=0.5)
    assert geo.failure_probability(7) == pytest.approx(
        geometric_failure_probability(sensitivity=2, epsilon=0.5, tolerance=7), rel=1e-12
    )
    gauss = Gaussian(sensitivity=1, epsilon=1, delta=1e-5)
    # The sub-Gaussian bound is above the exact normal tail but of the same order.
    exact = gaussian_failure_probability(sensitivity=1, epsilon=1, delta=1e-5, tolerance=3 * gauss.sigma)
    assert exact < gauss.failure_probability(3 * gauss.sigma) < 10 * exact


@pytest.mark.statistical
@pytest.mark.parametrize(
    "mechanism, tolerance, exact",
    [
        (Geometric(sensitivity=1, epsilon=0.5), 3, True),
        (DiscreteGaussian(sensitivity=1, rho=0.5), 2, False),
        (Gaussian(sensitivity=1, epsilon=1, delta=1e-5), 5.0, False),
    ],
    ids=["Geometric", "DiscreteGaussian", "Gaussian"],
)
def test_failure_probability_holds_empirically(mechanism: Mechanism, tolerance: float, exact: bool) -> None:
    """200,000 seeded releases of 0: the observed share of errors above the tolerance is at most the claimed
    probability + the 99.9% binomial half-width (false-failure 5e-4); for the geometric mechanism, whose
    figure is the exact tail, it is also at least the claim - the half-width (false-failure 1e-3)."""
    n = 200_000
    zeros = np.zeros(n, dtype=np.int64)
    released = np.asarray(mechanism.release(zeros, rng=np.random.default_rng(77)), dtype=np.float64)
    observed = float(np.mean(np.abs(released) > tolerance))
    claim = mechanism.failure_probability(float(tolerance))
    half_width = Z_999 * math.sqrt(claim * (1 - claim) / n)
    assert observed <= claim + half_width
    if exact:
        assert observed >= claim - half_width


# --- bad input --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("tolerance", [math.nan, "1", True, None])
@pytest.mark.parametrize("mechanism", MECHANISMS[::2], ids=lambda m: type(m).__name__)
def test_failure_probability_refuses_non_numbers(mechanism: Mechanism, tolerance: object) -> None:
    with pytest.raises(ValueError, match="tolerance"):
        mechanism.failure_probability(tolerance)  # type: ignore[arg-type]


def test_check_accuracy_refuses_bad_arguments() -> None:
    m = Laplace(sensitivity=1, epsilon=1)
    for tol in (0, -1, math.nan, math.inf, True, "1"):
        with pytest.raises(ValueError, match="tolerance"):
            check_accuracy(m, tolerance=tol, max_failure_probability=0.05)  # type: ignore[arg-type]
    for limit in (0, 1, 1.5, -0.1, math.nan):
        with pytest.raises(ValueError, match="max_failure_probability"):
            check_accuracy(m, tolerance=1.0, max_failure_probability=limit)
    with pytest.raises(ValueError, match="max_failure_probability"):
        check_accuracy(m, 0.05, 100.0)  # swapped positional arguments are caught by the ranges
    with pytest.raises(TypeError, match="utility_failure_probability"):
        check_accuracy(
            Exponential(utility_sensitivity=1, epsilon=1), tolerance=1.0, max_failure_probability=0.1
        )
    with pytest.raises(TypeError, match="no additive noise"):
        check_accuracy(RandomizedResponse(epsilon=1), tolerance=0.1, max_failure_probability=0.1)


@pytest.mark.parametrize(
    "call",
    [
        lambda: laplace_error(sensitivity=0, epsilon=1, beta=0.05),
        lambda: laplace_error(sensitivity=1, epsilon=-1, beta=0.05),
        lambda: laplace_error(sensitivity=1, epsilon=math.nan, beta=0.05),
        lambda: laplace_error(sensitivity=1, epsilon=1, beta=0),
        lambda: laplace_error(sensitivity=1, epsilon=1, beta=1),
        lambda: laplace_failure_probability(sensitivity=1, epsilon=1, tolerance=0),
        lambda: laplace_epsilon_for(sensitivity=1, tolerance=-2, beta=0.05),
        lambda: geometric_failure_probability(sensitivity=1, epsilon=1, tolerance=-1),
        lambda: geometric_error(sensitivity=1, epsilon=math.inf, beta=0.05),
        lambda: geometric_epsilon_for(sensitivity=1, tolerance=-1, beta=0.05),
        lambda: gaussian_error(sensitivity=1, epsilon=1, delta=0, beta=0.05),
        lambda: gaussian_error(sensitivity=1, epsilon=1, delta=1, beta=0.05),
        lambda: gaussian_failure_probability(sensitivity=1, epsilon=1, delta=1e-5, tolerance=0),
        lambda: gaussian_epsilon_for(sensitivity=1, delta=1e-5, tolerance=1, beta=2),
    ],
)
def test_planning_functions_refuse_bad_parameters(call) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(ValueError) as info:
        call()
    message = str(info.value)
    assert message.endswith(".") and ". " not in message


def test_planning_functions_are_keyword_only() -> None:
    with pytest.raises(TypeError):
        laplace_error(1, 1, 0.05)  # type: ignore[call-arg]
