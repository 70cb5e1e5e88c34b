"""Calibration of Laplace, Geometric, Gaussian and DiscreteGaussian: scales, grid invariants, error bounds.

The privacy claims themselves are tested statistically in ``test_privacy_statistical.py``; here every
number a mechanism derives is recomputed from its definition.
"""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest
from scipy import stats

from kakeibo.mechanisms import DiscreteGaussian, Gaussian, Geometric, Laplace, analytic_gaussian_delta
from kakeibo.mechanisms.gaussian import GRID_SLACK as GAUSS_SLACK
from kakeibo.mechanisms.laplace import GRID_SLACK as LAPLACE_SLACK
from kakeibo.privacy import ZCDP, ApproxDP, PureDP


@pytest.mark.parametrize("sensitivity", [1, 0.001, 3.7, 1e6])
@pytest.mark.parametrize("epsilon", [0.01, 0.5, 1, 8])
@pytest.mark.parametrize("size", [1, 2, 3, 1000, 65537])
def test_laplace_grid_spends_at_most_epsilon(sensitivity: float, epsilon: float, size: int) -> None:
    m = Laplace(sensitivity=sensitivity, epsilon=epsilon)
    k, t = m.grid(size)
    step = Fraction(2) ** k
    # Rounded answers differ by <= sensitivity/step + size grid steps in L1; noise scale t steps.
    assert (Fraction(sensitivity) / step + size) / t <= Fraction(epsilon)
    # The grid is the coarsest allowed by the slack, so the extra noise stays tiny.
    assert size * step * 2 > Fraction(sensitivity) * LAPLACE_SLACK
    assert float(t * step) <= m.scale * (1 + 1e-5) + float(step)


@pytest.mark.parametrize("coordinates", [1, 3, 1000])
def test_laplace_with_declared_coordinates_uses_their_grid(coordinates: int) -> None:
    """``coordinates=c``: every release, of any size, uses ``grid(c)``, whose rounding slack covers c
    differing coordinates in exact arithmetic; the values lie on that grid."""
    m = Laplace(sensitivity=3.7, epsilon=0.5, coordinates=coordinates)
    k, t = m.grid(coordinates)
    assert (Fraction(3.7) / Fraction(2) ** k + coordinates) / t <= Fraction(1, 2)
    out = m.release(np.linspace(0, 1, 5000), rng=np.random.default_rng(4))
    scaled = np.ldexp(out, -k)
    assert np.all(scaled == np.rint(scaled))
    assert m.max_magnitude == math.ldexp(1.0, k + 61)


@pytest.mark.parametrize("coordinates", [0, -1, True, 1.5, "2"])
def test_laplace_refuses_bad_coordinates(coordinates: object) -> None:
    with pytest.raises(ValueError, match="coordinates must be a positive integer"):
        Laplace(sensitivity=1, epsilon=1, coordinates=coordinates)  # type: ignore[arg-type]


def test_laplace_scale_and_loss() -> None:
    m = Laplace(sensitivity=2, epsilon=0.5)
    assert m.scale == pytest.approx(4 * (1 + 2**-20), rel=1e-15)
    assert m.privacy_loss == PureDP(0.5)


def test_laplace_outputs_lie_on_the_grid_and_keep_shape() -> None:
    m = Laplace(sensitivity=1, epsilon=1)
    rng = np.random.default_rng(3)
    scalar = m.release(0.1234567, rng=rng)
    assert isinstance(scalar, float)
    k, _ = m.grid(1)
    assert math.ldexp(scalar, -k) == int(math.ldexp(scalar, -k))
    out = m.release(np.zeros((4, 5)), rng=rng)
    assert out.shape == (4, 5)
    k20, _ = m.grid(20)
    scaled = np.ldexp(out, -k20)
    assert np.all(scaled == np.rint(scaled))


@pytest.mark.parametrize("beta", [0.5, 0.05, 1e-3])
def test_laplace_error_bound_is_the_textbook_bound_plus_a_grid_step(beta: float) -> None:
    """Seed 000 ch. 8: Pr(|y - q| > (Delta/eps) ln(1/beta)) <= beta; kakeibo's exact bound adds at most a
    few grid steps and the 2**-20 slack."""
    m = Laplace(sensitivity=1, epsilon=0.1)
    textbook = 10 * math.log(1 / beta)
    assert textbook <= m.error_bound(beta) <= textbook * (1 + 1e-5) + 1e-4


def test_laplace_error_bound_covers_empirically() -> None:
    """200k seeded releases; the fraction outside error_bound(0.05) must not exceed 0.05 by more than the
    one-sided 99.99% binomial margin (false-failure rate <= 1e-4)."""
    m = Laplace(sensitivity=1, epsilon=0.7)
    n = 200_000
    out = m.release(np.full(n, 5.0), rng=np.random.default_rng(11))
    miss = np.mean(np.abs(out - 5.0) > m.error_bound(0.05))
    margin = stats.norm.ppf(1 - 1e-4) * math.sqrt(0.05 * 0.95 / n)
    assert miss <= 0.05 + margin
    assert miss >= 0.05 - 3 * margin  # the bound is tight for Laplace, not vacuous


def test_geometric_error_bound_is_the_least_exact_quantile() -> None:
    m = Geometric(sensitivity=1, epsilon=0.3)
    s = m.scale
    for beta in (0.3, 0.05, 1e-4):
        b = int(m.error_bound(beta))

        def tail(j: int) -> float:  # Pr(|Z| > j) for discrete Laplace with scale s
            return 2 * math.exp(-(j + 1) / s) / (1 + math.exp(-1 / s))

        assert tail(b) <= beta < tail(b - 1)


def test_geometric_releases_integers_and_refuses_fractions() -> None:
    m = Geometric(sensitivity=2, epsilon=1)
    out = m.release(np.array([1, 2, 3]), rng=np.random.default_rng(0))
    assert out.dtype == np.int64
    assert isinstance(m.release(7, rng=np.random.default_rng(0)), int)
    with pytest.raises(ValueError):
        m.release(1.5)
    with pytest.raises(ValueError):
        Geometric(sensitivity=0, epsilon=1)
    with pytest.raises(ValueError):
        Geometric(sensitivity=1.5, epsilon=1)  # type: ignore[arg-type]


def test_geometric_variance_matches_samples() -> None:
    m = Geometric(sensitivity=1, epsilon=0.2)
    out = m.release(np.zeros(400_000, dtype=np.int64), rng=np.random.default_rng(5))
    # Sample variance of 400k draws: relative standard error ~ sqrt(2 + excess kurtosis 3)/sqrt(n) ~ 0.35%
    assert np.var(out) == pytest.approx(m.variance, rel=0.02)


@pytest.mark.parametrize(("epsilon", "delta"), [(0.1, 1e-6), (1.0, 1e-5), (3.0, 1e-9)])
def test_gaussian_sigma_is_the_minimal_analytic_calibration(epsilon: float, delta: float) -> None:
    m = Gaussian(sensitivity=2, epsilon=epsilon, delta=delta)
    reserved = 2 * (1 + float(GAUSS_SLACK))
    assert analytic_gaussian_delta(m.sigma, reserved, epsilon) <= delta
    assert analytic_gaussian_delta(m.sigma * (1 - 1e-6), reserved, epsilon) > delta * (1 - 1e-6)
    if epsilon < 1:  # the classical calibration is valid only for eps < 1 and is never smaller
        classical = 2 * math.sqrt(2 * math.log(1.25 / delta)) / epsilon
        assert m.sigma < classical
    assert m.privacy_loss == ApproxDP(epsilon, delta)


@pytest.mark.parametrize("size", [1, 2, 10, 1000, 10**6])
def test_gaussian_grid_invariants(size: int) -> None:
    m = Gaussian(sensitivity=1.5, epsilon=1, delta=1e-6)
    k, sigma2, t = m.grid(size)
    step2 = Fraction(4) ** k
    assert step2 * size <= (Fraction(1.5) * GAUSS_SLACK) ** 2  # sqrt(d) 2^k <= slack * sensitivity
    assert sigma2 * step2 >= Fraction(m.sigma) ** 2  # noise never below the calibrated sigma
    assert sigma2 % t == 0 and t & (t - 1) == 0  # proposal scale: power of two dividing sigma2
    assert sigma2 * step2 <= Fraction(m.sigma) ** 2 * Fraction(1001, 1000)


def test_gaussian_error_bound_covers_empirically() -> None:
    m = Gaussian(sensitivity=1, epsilon=0.5, delta=1e-6)
    n = 200_000
    out = m.release(np.zeros(n), rng=np.random.default_rng(12))
    miss = np.mean(np.abs(out) > m.error_bound(0.05))
    assert miss <= 0.05 + stats.norm.ppf(1 - 1e-4) * math.sqrt(0.05 * 0.95 / n)
    assert np.std(out) == pytest.approx(m.sigma, rel=0.01)


def test_gaussian_needs_positive_delta() -> None:
    with pytest.raises(ValueError, match="delta > 0"):
        Gaussian(sensitivity=1, epsilon=1, delta=0)


def test_discrete_gaussian_calibration() -> None:
    m = DiscreteGaussian(sensitivity=3, rho=0.5)
    assert m.sigma2 == 9.0
    assert m.privacy_loss == ZCDP(0.5)
    out = m.release(np.zeros(300_000, dtype=np.int64), rng=np.random.default_rng(4))
    assert out.dtype == np.int64
    assert np.var(out) == pytest.approx(9.0, rel=0.02)
    assert np.mean(np.abs(out) > m.error_bound(0.01)) <= 0.01


MECHANISMS = [
    lambda eps: Laplace(sensitivity=1, epsilon=eps),
    lambda eps: Geometric(sensitivity=1, epsilon=eps),
    lambda eps: Gaussian(sensitivity=1, epsilon=eps, delta=1e-6),
]


@pytest.mark.parametrize("make", MECHANISMS)
@pytest.mark.parametrize("epsilon", [-1, 0, float("nan"), float("inf"), "abc"])
def test_bad_epsilon_is_one_clear_value_error(make, epsilon) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(ValueError) as info:
        make(epsilon)
    assert str(info.value).count(".") >= 1 and "epsilon" in str(info.value)


@pytest.mark.parametrize("sensitivity", [-1, 0, float("nan"), float("inf")])
def test_bad_sensitivity_is_refused(sensitivity: float) -> None:
    with pytest.raises(ValueError, match="sensitivity"):
        Laplace(sensitivity=sensitivity, epsilon=1)
    with pytest.raises(ValueError, match="sensitivity"):
        Gaussian(sensitivity=sensitivity, epsilon=1, delta=1e-6)


@pytest.mark.parametrize("delta", [-0.1, 1, 1.5, float("nan")])
def test_bad_delta_is_refused(delta: float) -> None:
    with pytest.raises(ValueError, match="delta"):
        Gaussian(sensitivity=1, epsilon=1, delta=delta)


@pytest.mark.parametrize("value", [float("nan"), float("inf"), [1.0, float("nan")]])
def test_non_finite_answers_are_refused(value: object) -> None:
    with pytest.raises(ValueError, match="finite"):
        Laplace(sensitivity=1, epsilon=1).release(value)  # type: ignore[arg-type]


def test_huge_answers_are_refused_not_wrapped() -> None:
    with pytest.raises(ValueError, match="too large"):
        Laplace(sensitivity=1e-9, epsilon=1).release(1e300)


@pytest.mark.parametrize("beta", [0, 1, -0.5, 2, float("nan")])
def test_error_bound_needs_a_probability(beta: float) -> None:
    with pytest.raises(ValueError):
        Laplace(sensitivity=1, epsilon=1).error_bound(beta)
