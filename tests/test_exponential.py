"""The exponential mechanism as permute-and-flip (McKenna and Sheldon 2020) with exact coins.

Statistical tests are seeded; each states its false-failure rate. The privacy argument for the rounded coins
is checked *exactly* (no sampling): output probabilities are computed from the mechanism's own exponents.
"""

from __future__ import annotations

import itertools
import math
from fractions import Fraction

import numpy as np
import pytest
from scipy import stats

from kakeibo.mechanisms.exponential import EPSILON_SLACK, Exponential
from kakeibo.noise import resolve_source
from kakeibo.privacy import PureDP, as_fraction


def coin_probabilities(m: Exponential, utilities: list[float] | np.ndarray) -> np.ndarray:
    """exp(-gamma_r) for the mechanism's exact exponents gamma_r = whole + frac / 2**m."""
    whole, frac = m._exponents(utilities)
    gamma = whole + frac * float(m.gamma_grid)
    return np.exp(-gamma)


def pf_by_permutations(p: np.ndarray) -> np.ndarray:
    """Permute-and-flip as defined: average over all visiting orders of p_r * prod_{s before r} (1 - p_s)."""
    n = p.size
    out = np.zeros(n)
    orders = list(itertools.permutations(range(n)))
    for order in orders:
        survive = 1.0
        for r in order:
            out[r] += survive * p[r]
            survive *= 1 - p[r]
    return out / len(orders)


def pf_by_subsets(p: np.ndarray) -> np.ndarray:
    """The same law written as 'uniform among the candidates whose coins pass' (independent of ordering)."""
    n = p.size
    out = np.zeros(n)
    for mask in range(1, 2**n):
        members = [r for r in range(n) if mask >> r & 1]
        weight = math.prod(p[r] if mask >> r & 1 else 1 - p[r] for r in range(n))
        for r in members:
            out[r] += weight / len(members)
    return out


# --- calibration ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("epsilon", [1e-9, 1e-4, 0.01, 0.1, 1, 3.7, 50, 1e7])
def test_calibration_reserves_the_rounding_slack(epsilon: float) -> None:
    m = Exponential(utility_sensitivity=1, epsilon=epsilon)
    eps = as_fraction(epsilon, "epsilon")  # the rational kakeibo charges for this float
    assert m.calibrated_epsilon == eps * (1 - EPSILON_SLACK)
    assert m.gamma_grid <= eps / 2**22
    assert m.gamma_grid > eps / 2**23 or m.gamma_grid == 1  # the coarsest allowed grid (m >= 0)
    # The docstring's privacy argument: eps' + 2 * 2**-m <= epsilon, exactly.
    assert m.calibrated_epsilon + 2 * m.gamma_grid <= eps
    assert m.privacy_loss == PureDP(epsilon)


@pytest.mark.parametrize(
    "utilities",
    [
        [0.1, 0.2, 0.30000000000000004, -3.7],
        [1e-300, -2.5e-310, 0.0, 1e-5],
        [1e10, -1e10, 3.0, 12345.678],
        [2**60, 2**60 + 1, 2**60 - 7, 0],  # integers beyond 2**53 stay exact
        [True, False, True],
        [5.0],
    ],
)
@pytest.mark.parametrize("sensitivity, epsilon", [(1, 1), (0.3, 0.01), (7, 2.5)])
def test_exponents_are_the_exact_upward_roundings(
    utilities: list[float], sensitivity: float, epsilon: float
) -> None:
    """gamma_r = ceil(eps' (u* - u_r) / (2 Delta) * 2**m) / 2**m, recomputed here with Fractions."""
    m = Exponential(utility_sensitivity=sensitivity, epsilon=epsilon)
    whole, frac = m._exponents(np.asarray(utilities))
    exact_u = [Fraction(int(u)) if isinstance(u, (bool, int)) else Fraction(u) for u in utilities]
    best = max(exact_u)
    grid = m.gamma_grid
    for r, u in enumerate(exact_u):
        gamma = m.calibrated_epsilon * (best - u) / (2 * as_fraction(sensitivity, "sensitivity"))
        rounded = math.ceil(gamma / grid) * grid
        assert Fraction(int(whole[r])) + int(frac[r]) * grid == rounded
        assert 0 <= frac[r] < 1 / grid


def test_the_two_descriptions_of_permute_and_flip_agree() -> None:
    """Visiting in random order and stopping at the first pass == uniform among the passing candidates."""
    p = np.array([1.0, 0.3, 0.05, 0.7, 0.5])
    np.testing.assert_allclose(pf_by_permutations(p), pf_by_subsets(p), rtol=1e-12)


@pytest.mark.statistical
def test_selection_frequencies_match_permute_and_flip() -> None:
    """10**6 seeded selections among utilities (0, 1, 3) with Delta = 1, epsilon = 1 against the exact PF law
    (closed form over all 3! visiting orders). Chi-square at alpha = 1e-4: false-failure rate 1e-4."""
    m = Exponential(utility_sensitivity=1, epsilon=1)
    utilities = [0.0, 1.0, 3.0]
    expected = pf_by_permutations(coin_probabilities(m, utilities))
    np.testing.assert_allclose(expected.sum(), 1.0, rtol=1e-12)
    whole, frac = m._exponents(utilities)
    draws = m._select(whole, frac, 10**6, resolve_source(np.random.default_rng(20240601)))
    counts = np.bincount(draws, minlength=3)
    assert stats.chisquare(counts, expected * counts.sum()).pvalue > 1e-4


@pytest.mark.statistical
def test_release_draws_from_the_same_law() -> None:
    """The public one-at-a-time path: 2000 seeded releases; chi-square, alpha = 1e-4 (false-failure 1e-4)."""
    m = Exponential(utility_sensitivity=2, epsilon=1.5)
    utilities = np.array([4.0, 2.0, 3.0, 0.0])
    expected = pf_by_permutations(coin_probabilities(m, utilities))
    rng = np.random.default_rng(7)
    picks = [m.release(utilities, rng=rng) for _ in range(2000)]
    assert all(isinstance(i, int) for i in picks)
    counts = np.bincount(picks, minlength=4)
    assert stats.chisquare(counts, expected * 2000).pvalue > 1e-4


@pytest.mark.statistical
def test_ties_at_the_top_are_broken_uniformly() -> None:
    """Three best candidates pass their coins surely; one bad candidate almost never. 3 * 10**5 draws,
    chi-square at alpha = 1e-4 (false-failure rate 1e-4)."""
    m = Exponential(utility_sensitivity=1, epsilon=2)
    utilities = [5.0, 5.0, -50.0, 5.0]
    whole, frac = m._exponents(utilities)
    draws = m._select(whole, frac, 3 * 10**5, resolve_source(np.random.default_rng(11)))
    expected = pf_by_subsets(coin_probabilities(m, utilities))
    counts = np.bincount(draws, minlength=4)
    assert counts[2] <= 1  # probability about e^-55 per draw
    assert (
        stats.chisquare(counts[[0, 1, 3]], expected[[0, 1, 3]] / expected[[0, 1, 3]].sum() * counts.sum())[1]
        > 1e-4
    )


def test_single_candidate_and_reproducibility() -> None:
    m = Exponential(utility_sensitivity=1, epsilon=1)
    assert m.release([42.0]) == 0
    assert m.utility_error_bound(0.01, n_candidates=1) == 0.0
    utilities = np.linspace(0, 5, 30)
    a = [m.release(utilities, rng=np.random.default_rng(5)) for _ in range(3)]
    assert a[0] == a[1] == a[2]
    assert m.release(utilities) in range(30)  # the secure default source


# --- privacy, exactly ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("epsilon", [0.3, 1.0, 5.0])
def test_exact_output_probabilities_respect_epsilon_on_neighbours(epsilon: float) -> None:
    """For utility vectors u, w with max |u_r - w_r| <= Delta, every output probability ratio is at most
    e^epsilon. Probabilities are computed exactly (up to float rounding, far below the 2**-21 epsilon
    slack) from the mechanism's own rounded exponents. Utilities are multiples of 1/64 so that u + d is
    exact in floating point; the pairs include the extreme shifts d in {-Delta, +Delta}^n."""
    delta = 1.0
    m = Exponential(utility_sensitivity=delta, epsilon=epsilon)
    rng = np.random.default_rng(99)
    worst = 0.0
    pairs = [(np.array([0.0, 0.0]), np.array([1.0, -1.0]))]
    for _ in range(300):
        u = rng.integers(-256, 256, size=4) / 64
        d = rng.choice([-1.0, 1.0], size=4) if rng.random() < 0.5 else rng.integers(-64, 65, size=4) / 64
        pairs.append((u, u + d * delta))
    for u, w in pairs:
        assert np.max(np.abs(u - w)) <= delta
        pu = pf_by_subsets(coin_probabilities(m, u))
        pw = pf_by_subsets(coin_probabilities(m, w))
        ratio = np.max(np.abs(np.log(pu) - np.log(pw)))
        worst = max(worst, float(ratio))
    assert worst <= epsilon * (1 + 1e-12)
    # Tight: u = (0, 0) vs w = (1, -1) reaches eps' = epsilon (1 - 2**-20) up to the 2**-m grid.
    assert worst >= epsilon * (1 - 2**-19)


# --- accuracy -----------------------------------------------------------------------------------------------


def test_utility_error_bound_formula_and_inverse() -> None:
    m = Exponential(utility_sensitivity=2, epsilon=0.5)
    eps_cal = 0.5 * (1 - 2**-20)
    for n, beta in [(2, 0.5), (10, 0.05), (1000, 1e-6)]:
        bound = m.utility_error_bound(beta, n_candidates=n)
        assert bound == pytest.approx(2 * 2 * math.log((n - 1) / beta) / eps_cal, rel=1e-12)
        assert m.utility_failure_probability(bound, n_candidates=n) <= beta * (1 + 1e-12)
        assert m.utility_failure_probability(bound * 0.9, n_candidates=n) > beta
    assert m.utility_error_bound(0.9, n_candidates=2) == pytest.approx(2 * 2 * math.log(1 / 0.9) / eps_cal)
    assert m.utility_error_bound(0.5, n_candidates=1) == 0.0
    assert m.utility_failure_probability(0.0, n_candidates=5) == 1.0
    assert m.utility_failure_probability(math.inf, n_candidates=5) == 0.0


@pytest.mark.statistical
def test_utility_bound_holds_and_permute_and_flip_beats_the_exponential_mechanism() -> None:
    """20 candidates with utilities 0..19, Delta = 1, epsilon = 1, 2 * 10**5 seeded selections.

    * the fraction with gap >= utility_error_bound(0.1) is at most 0.1 (+ 5 binomial standard errors);
    * the mean gap is at most the exponential mechanism's exact expected gap (McKenna-Sheldon: PF is never
      worse in expectation) + 5 standard errors. Each check fails falsely with probability < 3e-7.
    """
    m = Exponential(utility_sensitivity=1, epsilon=1)
    utilities = np.arange(20, dtype=np.float64)
    gaps = utilities.max() - utilities
    whole, frac = m._exponents(utilities)
    draws = m._select(whole, frac, 2 * 10**5, resolve_source(np.random.default_rng(3)))
    chosen_gaps = gaps[draws]
    bound = m.utility_error_bound(0.1, n_candidates=20)
    miss = np.mean(chosen_gaps >= bound)
    assert miss <= 0.1 + 5 * math.sqrt(0.1 * 0.9 / draws.size)
    weights = np.exp(-gaps / 2)  # exponential mechanism: P(r) ~ exp(eps u_r / (2 Delta))
    em_mean_gap = float(np.sum(weights * gaps) / np.sum(weights))
    se = float(np.std(chosen_gaps)) / math.sqrt(draws.size)
    assert chosen_gaps.mean() <= em_mean_gap + 5 * se
    assert chosen_gaps.mean() < 0.9 * em_mean_gap  # and strictly better here (about 0.6 of the EM's gap)


def test_error_bound_and_failure_probability_point_to_the_utility_versions() -> None:
    m = Exponential(utility_sensitivity=1, epsilon=1)
    with pytest.raises(TypeError, match="utility_error_bound"):
        m.error_bound(0.05)
    with pytest.raises(TypeError, match="utility_failure_probability"):
        m.failure_probability(1.0)
    with pytest.raises(TypeError, match="utility_error_bound"):
        m.confidence_interval(3)


# --- bad input ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("bad", [-1, 0, math.nan, math.inf, -math.inf, "abc"])
@pytest.mark.parametrize("name", ["epsilon", "utility_sensitivity"])
def test_bad_parameters_are_refused(name: str, bad: object) -> None:
    kwargs: dict[str, object] = {"epsilon": 1, "utility_sensitivity": 1, name: bad}
    with pytest.raises(ValueError, match=name):
        Exponential(**kwargs)  # type: ignore[arg-type]


def test_bad_parameter_types_and_limits() -> None:
    with pytest.raises(TypeError, match="bool"):
        Exponential(utility_sensitivity=1, epsilon=True)
    with pytest.raises(TypeError):
        Exponential(1, 1)  # type: ignore[call-arg]  # keyword-only: a swapped epsilon would be a privacy bug
    with pytest.raises(ValueError, match="too small"):
        Exponential(utility_sensitivity=1, epsilon=1e-13)


@pytest.mark.parametrize(
    "utilities, error",
    [
        ([], ValueError),
        ([[1.0, 2.0], [3.0, 4.0]], ValueError),
        (3.0, ValueError),
        ([1.0, math.nan], ValueError),
        ([1.0, math.inf], ValueError),
        (["a", "b"], TypeError),
        ([1 + 2j, 0], TypeError),
    ],
)
def test_bad_utilities_are_refused(utilities: object, error: type[Exception]) -> None:
    m = Exponential(utility_sensitivity=1, epsilon=1)
    with pytest.raises(error, match="utilit"):
        m.release(utilities)  # type: ignore[arg-type]


def test_bad_accuracy_arguments() -> None:
    m = Exponential(utility_sensitivity=1, epsilon=1)
    with pytest.raises(ValueError, match="n_candidates"):
        m.utility_error_bound(0.05, n_candidates=0)
    with pytest.raises(TypeError, match="n_candidates"):
        m.utility_error_bound(0.05, n_candidates=2.5)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="n_candidates"):
        m.utility_error_bound(0.05, n_candidates=True)
    for beta in (0, 1, -0.1, math.nan):
        with pytest.raises(ValueError, match="beta"):
            m.utility_error_bound(beta, n_candidates=3)
    with pytest.raises(ValueError, match="tolerance"):
        m.utility_failure_probability(math.nan, n_candidates=3)
