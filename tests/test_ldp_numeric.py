"""Numeric LDP randomizers (Wang et al. ICDE 2019; seed 004 Algorithm 1): eps-LDP audits, unbiasedness,
exact variances, and the discretised Piecewise mechanism against the continuous one.

Statistical tests are seeded; each states the false-failure rate of its bound.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy.special import ndtr

from kakeibo import ldp
from kakeibo.audit import audit

RANDOMIZERS = [ldp.DuchiMechanism, ldp.PiecewiseMechanism, ldp.HybridMechanism]


@pytest.mark.statistical
@pytest.mark.parametrize("epsilon", [1.0, 4.0])
@pytest.mark.parametrize("cls", RANDOMIZERS, ids=lambda c: c.__name__)
def test_numeric_randomizer_is_epsilon_ldp(cls: type[ldp.numeric.NumericRandomizer], epsilon: float) -> None:
    """x = -1 against x = 1 (the farthest pair), 10^6 reports each; threshold and value events chosen on a
    pilot sample. The Clopper-Pearson lower bound (confidence 1 - 1e-6) must not refute epsilon."""
    randomizer = cls(epsilon=epsilon)

    def sample(value: float, n: int, rng: np.random.Generator) -> np.ndarray:
        return randomizer.randomize(np.full(n, value), rng=rng)

    result = audit(sample, -1.0, 1.0, trials=1_000_000, alpha=1e-6, rng=np.random.default_rng(99))
    assert not result.refutes(epsilon), str(result)
    if cls is not ldp.HybridMechanism:  # a single mechanism is tight at its extreme inputs
        assert max(e.epsilon_estimate for e in result.events) > epsilon - 0.15, str(result)


@pytest.mark.statistical
@pytest.mark.parametrize("epsilon", [0.5, 1.0, 4.0])
@pytest.mark.parametrize("cls", RANDOMIZERS, ids=lambda c: c.__name__)
def test_reports_are_unbiased_with_the_stated_variance(
    cls: type[ldp.numeric.NumericRandomizer], epsilon: float
) -> None:
    randomizer = cls(epsilon=epsilon)
    rng = np.random.default_rng(5)
    n = 400_000
    for x in (-1.0, -0.2, 0.0, 0.7, 1.0):
        y = randomizer.randomize(np.full(n, x), rng=rng)
        variance = (
            float(randomizer.variance(x)[0])
            if np.ndim(randomizer.variance(x))
            else float(randomizer.variance(x))
        )
        # Mean within 5 standard errors (false failure 5.7e-7 per check). The sample variance's relative
        # standard deviation is sqrt((kurtosis - 1) / n) (kurtosis from the sample: up to 1.2% for Duchi's
        # lopsided two-point reports at eps = 4, 0 for its +-B reports at x = 0); the variance must be
        # within 5 of them (plus 1e-4 for the mean's own estimation error at kurtosis 1).
        assert abs(y.mean() - x) < 5 * math.sqrt(variance / n)
        centred = y - y.mean()
        kurtosis = float(np.mean(centred**4) / np.mean(centred**2) ** 2)
        assert abs(y.var() / variance - 1) < 5 * math.sqrt((kurtosis - 1) / n) + 1e-4


@pytest.mark.parametrize("epsilon", [0.25, 1.0, 4.0, 8.0])
def test_discretised_piecewise_matches_the_continuous_variance(epsilon: float) -> None:
    """Seed 004: Var[y | x] = x^2 / (e^(eps/2) - 1) + (e^(eps/2) + 3) / (3 (e^(eps/2) - 1)^2)."""
    pm = ldp.PiecewiseMechanism(epsilon=epsilon)
    h = math.exp(epsilon / 2)
    xs = np.linspace(-1, 1, 21)
    continuous = xs**2 / (h - 1) + (h + 3) / (3 * (h - 1) ** 2)
    np.testing.assert_allclose(pm.variance(xs), continuous, rtol=1e-3)
    assert pm.output_bound == pytest.approx((h + 1) / (h - 1))


def test_duchi_bound_and_variance() -> None:
    duchi = ldp.DuchiMechanism(epsilon=1.0)
    assert duchi.output_bound == pytest.approx((math.e + 1) / (math.e - 1), rel=1e-3)
    assert duchi.output_bound >= (math.e + 1) / (math.e - 1)  # p0 rounded up: never a smaller bound
    np.testing.assert_allclose(duchi.variance([0.0, 1.0]), [duchi.output_bound**2, duchi.output_bound**2 - 1])


def test_hybrid_uses_duchi_alone_for_small_epsilon_and_beats_both_otherwise() -> None:
    assert ldp.HybridMechanism(epsilon=0.5).piecewise_share == 0
    hm = ldp.HybridMechanism(epsilon=2.0)
    assert hm.piecewise_share == pytest.approx(1 - math.exp(-1))
    worst = lambda m: float(np.max(m.variance(np.linspace(-1, 1, 41))))  # noqa: E731
    assert worst(hm) <= min(
        worst(ldp.DuchiMechanism(epsilon=2.0)), worst(ldp.PiecewiseMechanism(epsilon=2.0))
    )


@pytest.mark.statistical
def test_mean_estimate_covers_the_true_mean() -> None:
    rng = np.random.default_rng(8)
    values = np.clip(rng.normal(0.3, 0.4, size=200_000), -1, 1)
    pm = ldp.PiecewiseMechanism(epsilon=2.0)
    est = pm.estimate(pm.randomize(values, rng=rng))
    low, high = est.confidence_interval(beta=float(2 * ndtr(-5.0)))  # worst-case variance: miss <= 5.7e-7
    assert low <= values.mean() <= high


def test_numeric_randomizers_refuse_values_outside_the_unit_interval() -> None:
    pm = ldp.PiecewiseMechanism(epsilon=1.0)
    for bad in ([1.5], [np.nan], [[0.1, 0.2]]):
        with pytest.raises(ValueError):
            pm.randomize(np.array(bad))
    with pytest.raises(ValueError, match="epsilon"):
        ldp.PiecewiseMechanism(epsilon=-1)


@pytest.mark.parametrize("cls", [ldp.DuchiMechanism, ldp.PiecewiseMechanism, ldp.HybridMechanism])
def test_mean_estimate_carries_the_randomizers_per_report_loss(
    cls: type[ldp.DuchiMechanism] | type[ldp.PiecewiseMechanism] | type[ldp.HybridMechanism],
) -> None:
    """The server's estimate states the loss each client's report was randomized with (issue 16)."""
    mech = cls(epsilon=1.5)
    reports = mech.randomize(np.linspace(-1, 1, 50), rng=np.random.default_rng(3))
    assert mech.estimate(reports).privacy_loss == mech.privacy_loss
