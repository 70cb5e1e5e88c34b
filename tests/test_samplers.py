"""Goodness of fit of kakeibo's exact samplers (Canonne, Kamath and Steinke 2020, Algorithms 1-3) and of the
grid noise the Laplace and Gaussian mechanisms add.

Each test draws >= 10^6 samples from a seeded generator, bins them, and runs Pearson's chi-square test
against the exact distribution computed here (scipy.stats for the discrete Laplace and the Bernoulli, a
normalised sum for the discrete Gaussian, which scipy lacks). Bins are cut at quantiles of the true law and
merged until each expects >= 20 samples; no parameter is estimated, so the test has (bins - 1) degrees of
freedom.

* Significance: each fit test rejects at ALPHA = 1e-3, so a correct sampler fails a given test with
  probability 1e-3 over the choice of seed (about 2.5% for the whole file); the seeds are fixed, so a run
  is reproducible.
* Power: every test also computes the *same* statistic against the law with the scale 30% too large and
  30% too small (standard deviation for the discrete Gaussian, gamma for Bernoulli(exp(-gamma))) and
  asserts that it rejects -- a test that cannot tell those apart would prove nothing.
* The secure path (``rng=None``: ChaCha20 keyed from the OS) is checked with 2 * 10^5 samples at
  ALPHA_SECURE = 1e-4; it is not reproducible, so that is its real false-failure rate per test.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from fractions import Fraction

import numpy as np
import pytest
from numpy.typing import NDArray
from scipy import stats

from kakeibo.mechanisms import Gaussian, Laplace
from kakeibo.noise import bernoulli_exp, discrete_gaussian, discrete_laplace

pytestmark = pytest.mark.statistical

N = 1_000_000
N_SECURE = 200_000
ALPHA = 1e-3
ALPHA_SECURE = 1e-4
MIN_EXPECTED = 20

IntArray = NDArray[np.int64]
Cdf = Callable[[IntArray], NDArray[np.float64]]


# --- exact laws -----------------------------------------------------------------------------------------


def laplace_cdf(scale: float) -> Cdf:
    """``P(X <= x)`` of the discrete Laplace ``P(X = x) = tanh(1/(2 scale)) exp(-|x|/scale)`` (scipy's
    ``dlaplace(a = 1/scale)``), written with ``q = exp(-1/scale)`` so that it stays exact for scales of
    2**40 grid steps: ``P(X >= j) = q^j / (1 + q)`` for ``j >= 1``."""
    a = 1.0 / scale
    one_plus_q = 1.0 + math.exp(-a)

    def cdf(x: IntArray) -> NDArray[np.float64]:
        xf = np.asarray(x, dtype=np.float64)
        upper = -np.expm1(-a * (np.maximum(xf, 0) + 1)) / one_plus_q + (1 - 1 / one_plus_q)
        lower = np.exp(-a * np.abs(np.minimum(xf, -1))) / one_plus_q
        out: NDArray[np.float64] = np.where(xf >= 0, upper, lower)
        return out

    return cdf


def gaussian_cdf(sigma2: float) -> Cdf:
    """``P(X <= x)`` of the discrete Gaussian ``P(X = x) ∝ exp(-x^2 / (2 sigma2))``, by summing the pmf over
    ``|x| <= 12 sigma + 2`` in chunks (the mass beyond is below e^-72)."""
    sigma = math.sqrt(sigma2)
    half = math.ceil(12 * sigma) + 2

    def cdf(x: IntArray) -> NDArray[np.float64]:
        points = np.asarray(x, dtype=np.int64)
        order = np.argsort(points)
        below = np.zeros(points.size)
        running, pos, total = 0.0, 0, 0.0
        for start in range(-half, half + 1, 2**20):
            ks = np.arange(start, min(start + 2**20, half + 1), dtype=np.float64)
            w = np.exp(-(ks * ks) / (2.0 * sigma2))
            cum = np.cumsum(w)
            while pos < points.size and points[order[pos]] <= ks[-1]:
                p = points[order[pos]]
                below[order[pos]] = running + (cum[int(p - start)] if p >= start else 0.0)
                pos += 1
            running += float(cum[-1])
            total = running
        below[order[pos:]] = total
        return below / total

    return cdf


# --- chi-square machinery -------------------------------------------------------------------------------


class Bins:
    """Bins ``(-inf, e0], (e0, e1], ..., (e_last, inf)`` with integer edges near quantiles of the law (any
    edges give a valid test; quantiles give power), merged until every bin expects at least MIN_EXPECTED
    of ``n`` samples under the true law."""

    def __init__(self, cdf: Cdf, approx_quantiles: NDArray[np.float64], n: int) -> None:
        edges = np.unique(np.floor(approx_quantiles).astype(np.int64))
        probs = self._probs(cdf, edges)
        keep = np.ones(edges.size, dtype=np.bool_)
        # Merge greedily from the left: drop an edge while the bin it closes expects too few samples.
        mass = 0.0
        for i in range(edges.size):
            mass += probs[i]
            if mass * n < MIN_EXPECTED:
                keep[i] = False
            else:
                mass = 0.0
        if mass * n < MIN_EXPECTED and keep.any():  # the last bin is too small: merge it to the left
            keep[np.flatnonzero(keep)[-1]] = False
        self.edges = edges[keep]
        self.probs = self._probs(cdf, self.edges)

    @staticmethod
    def _probs(cdf: Cdf, edges: IntArray) -> NDArray[np.float64]:
        return np.diff(np.concatenate([[0.0], cdf(edges), [1.0]]))

    def counts(self, samples: IntArray) -> IntArray:
        return np.bincount(np.searchsorted(self.edges, samples, side="left"), minlength=self.edges.size + 1)

    def pvalue(self, samples: IntArray, cdf: Cdf | None = None) -> float:
        """Pearson chi-square p-value of ``samples`` against ``cdf`` (default: the law the bins came from)."""
        probs = self.probs if cdf is None else self._probs(cdf, self.edges)
        observed = self.counts(samples)
        expected = probs * samples.size
        statistic = float(np.sum((observed - expected) ** 2 / np.maximum(expected, 1e-300)))
        return float(stats.chi2.sf(statistic, df=observed.size - 1))


#: Percentiles, plus tail levels so that the tails are tested in detail too.
LEVELS = np.concatenate(
    [[1e-6, 1e-5, 1e-4, 1e-3], np.arange(1, 100) / 100, [1 - 1e-3, 1 - 1e-4, 1 - 1e-5, 1 - 1e-6]]
)


def _edges(quantiles: NDArray[np.float64]) -> NDArray[np.float64]:
    """Bin edges from approximate quantiles; a narrow law gets one bin per integer of its range."""
    lo, hi = math.floor(quantiles[0]), math.ceil(quantiles[-1])
    if hi - lo <= 400:
        return np.arange(lo, hi + 1, dtype=np.float64)
    return quantiles


def laplace_quantiles(scale: float) -> NDArray[np.float64]:
    return _edges(np.asarray(stats.laplace.ppf(LEVELS, scale=scale), dtype=np.float64))


def gaussian_quantiles(sigma: float) -> NDArray[np.float64]:
    return _edges(np.asarray(stats.norm.ppf(LEVELS, scale=sigma), dtype=np.float64))


def gaussian_law(sigma: float) -> Cdf:
    return gaussian_cdf(sigma * sigma)


def assert_fits_and_has_power(samples: IntArray, family: str, scale: float, alpha: float = ALPHA) -> None:
    """``samples`` pass the chi-square test against the ``family`` law at ``scale`` (level ``alpha``), and
    the same statistic rejects the law at ``1.3 * scale`` and at ``0.7 * scale``."""
    law, quantiles = (
        (laplace_cdf, laplace_quantiles) if family == "laplace" else (gaussian_law, gaussian_quantiles)
    )
    bins = Bins(law(scale), quantiles(scale), samples.size)
    assert bins.edges.size >= 1, "too few bins for a meaningful test"
    assert bins.pvalue(samples) > alpha
    for wrong in (1.3 * scale, 0.7 * scale):
        assert bins.pvalue(samples, law(wrong)) < alpha, f"cannot tell scale {scale} from {wrong}"


# --- the exact samplers ---------------------------------------------------------------------------------


def test_laplace_cdf_is_scipys_dlaplace() -> None:
    for scale in (0.5, 7 / 3, 40.0):
        x = np.arange(-30, 31)
        assert np.allclose(laplace_cdf(scale)(x), stats.dlaplace(1 / scale).cdf(x), rtol=1e-10, atol=1e-15)


def test_gaussian_cdf_sums_to_one_and_is_symmetric() -> None:
    cdf = gaussian_cdf(7 / 3)
    x = np.arange(-20, 21)
    assert np.allclose(cdf(x) + cdf(-x - 1), 1.0, atol=1e-15)
    normaliser = math.fsum(math.exp(-(x * x) / (2 * 7 / 3)) for x in range(-60, 61))
    assert float(np.diff(cdf(np.array([-1, 0])))[0]) == pytest.approx(1 / normaliser, rel=1e-13)


@pytest.mark.parametrize(("scale", "seed"), [("1/2", 1), ("1", 2), ("7/3", 3), ("10", 4), ("1000", 5)])
def test_discrete_laplace_fits(scale: str, seed: int) -> None:
    """discrete_laplace(scale) against dlaplace(1/scale), 10^6 samples, alpha = 1e-3, seed as given."""
    samples = np.asarray(discrete_laplace(scale, size=N, rng=np.random.default_rng(seed)))
    value = float(Fraction(scale))
    assert_fits_and_has_power(samples, "laplace", value)


@pytest.mark.parametrize(("sigma2", "seed"), [("1/4", 6), ("1", 7), ("7/3", 8), ("50", 9), ("919245", 10)])
def test_discrete_gaussian_fits(sigma2: str, seed: int) -> None:
    """discrete_gaussian(sigma2) against the normalised exp(-x^2 / (2 sigma2)), 10^6 samples, alpha = 1e-3."""
    samples = np.asarray(discrete_gaussian(sigma2, size=N, rng=np.random.default_rng(seed)))
    sigma = math.sqrt(float(Fraction(sigma2)))
    assert_fits_and_has_power(samples, "gaussian", sigma)


@pytest.mark.parametrize(("gamma", "seed"), [("1/10", 11), ("1/3", 12), ("1", 13), ("7/3", 14), ("21/2", 15)])
def test_bernoulli_exp_fits(gamma: str, seed: int) -> None:
    """bernoulli_exp(gamma) is Bernoulli(exp(-gamma)): chi-square on the two cells (the square of the
    binomial z-test), 10^6 draws, alpha = 1e-3; it rejects exp(-1.3 gamma) and exp(-0.7 gamma)."""
    draws = np.asarray(bernoulli_exp(gamma, size=N, rng=np.random.default_rng(seed)))
    hits = int(np.count_nonzero(draws))
    g = float(Fraction(gamma))

    def pvalue(p: float) -> float:
        observed = np.array([N - hits, hits])
        return float(stats.chisquare(observed, np.array([1 - p, p]) * N).pvalue)

    assert pvalue(math.exp(-g)) > ALPHA
    assert pvalue(math.exp(-1.3 * g)) < ALPHA
    assert pvalue(math.exp(-0.7 * g)) < ALPHA


def test_bernoulli_exp_of_zero_is_always_one() -> None:
    assert bool(np.all(bernoulli_exp(0, size=1000, rng=np.random.default_rng(0))))


# --- the mechanisms' grid noise -------------------------------------------------------------------------


def _grid_noise(released: NDArray[np.float64], values: NDArray[np.float64], k: int) -> IntArray:
    """The integer noise a grid mechanism added: ``y / 2**k - rint(x / 2**k)``, checking y is on the grid."""
    steps = np.ldexp(released, -k)
    assert np.all(steps == np.rint(steps)), "released values must lie on the grid 2**k"
    return (steps - np.rint(np.ldexp(values, -k))).astype(np.int64)


@pytest.mark.parametrize(("sensitivity", "epsilon", "value", "seed"), [(1, 1, 0.0, 21), (3, "1/2", 10.3, 22)])
def test_laplace_mechanism_grid_noise_fits(
    sensitivity: int, epsilon: str | int, value: float, seed: int
) -> None:
    """Laplace.release on an array of 10^6 values: the output is on the grid of ``grid(10**6)`` and the
    integer noise is discrete Laplace of scale ``t`` grid steps (alpha = 1e-3)."""
    m = Laplace(sensitivity=sensitivity, epsilon=epsilon)
    x = np.full(N, value)
    k, t = m.grid(N)
    noise = _grid_noise(np.asarray(m.release(x, rng=np.random.default_rng(seed))), x, k)
    assert_fits_and_has_power(noise, "laplace", float(t))


def test_gaussian_mechanism_grid_noise_fits() -> None:
    """Gaussian.release on an array of 10^6 values: discrete Gaussian of variance ``grid(10**6)[1]`` grid
    steps (alpha = 1e-3; sigma is about 10^6 grid steps: the exact law is summed over 2.4 * 10^7 points)."""
    m = Gaussian(sensitivity=1, epsilon=1, delta=1e-5)
    x = np.zeros(N)
    k, sigma2 = m.grid(N)[:2]
    noise = _grid_noise(np.asarray(m.release(x, rng=np.random.default_rng(23))), x, k)
    sigma = math.sqrt(sigma2)
    assert sigma >= m.sigma * 2.0**-k  # the integer variance never understates the calibrated sigma
    assert_fits_and_has_power(noise, "gaussian", sigma)


def test_scalar_releases_use_the_single_value_grid() -> None:
    """A scalar release uses ``grid(1)`` (the coarsest grid, the one error_bound describes). 3000 scalar
    releases each (scalar calls are slow), chi-square at alpha = 1e-3, with power against +-30%."""
    rng = np.random.default_rng(24)
    laplace = Laplace(sensitivity=1, epsilon=1)
    k, t = laplace.grid(1)
    y = np.array([laplace.release(0.25, rng=rng) for _ in range(3000)])
    assert_fits_and_has_power(_grid_noise(y, np.full(y.size, 0.25), k), "laplace", float(t))
    gaussian = Gaussian(sensitivity=1, epsilon=1, delta=1e-5)
    k, sigma2 = gaussian.grid(1)[:2]
    y = np.array([gaussian.release(0.25, rng=rng) for _ in range(3000)])
    sigma = math.sqrt(sigma2)
    assert_fits_and_has_power(_grid_noise(y, np.full(y.size, 0.25), k), "gaussian", sigma)


# --- the secure path ------------------------------------------------------------------------------------


def _secure_cases() -> list[tuple[Callable[[], IntArray], str, float]]:
    laplace = Laplace(sensitivity=1, epsilon=1)
    lk, lt = laplace.grid(N_SECURE)
    gaussian = Gaussian(sensitivity=1, epsilon=1, delta=1e-5)
    gk, g2 = gaussian.grid(N_SECURE)[:2]
    zeros = np.zeros(N_SECURE)
    return [
        (lambda: np.asarray(discrete_laplace("7/3", size=N_SECURE)), "laplace", 7 / 3),
        (lambda: np.asarray(discrete_gaussian("7/3", size=N_SECURE)), "gaussian", math.sqrt(7 / 3)),
        (lambda: _grid_noise(np.asarray(laplace.release(zeros)), zeros, lk), "laplace", float(lt)),
        (lambda: _grid_noise(np.asarray(gaussian.release(zeros)), zeros, gk), "gaussian", math.sqrt(g2)),
    ]


@pytest.mark.parametrize("case", range(4))
def test_secure_path_has_the_same_law(case: int) -> None:
    """rng=None (OS-keyed ChaCha20): 2 * 10^5 samples each of discrete_laplace(7/3), discrete_gaussian(7/3),
    Laplace.release and Gaussian.release; chi-square at alpha = 1e-4 (not seeded, so that is the real
    false-failure rate of this test), with power against +-30%."""
    draw, family, scale = _secure_cases()[case]
    assert_fits_and_has_power(draw(), family, scale, alpha=ALPHA_SECURE)


def test_secure_bernoulli_exp() -> None:
    """rng=None: 2 * 10^5 Bernoulli(exp(-7/3)) draws, two-cell chi-square at alpha = 1e-4 (real
    false-failure rate), rejecting exp(-1.3 * 7/3) and exp(-0.7 * 7/3)."""
    hits = int(np.count_nonzero(bernoulli_exp("7/3", size=N_SECURE)))
    observed = np.array([N_SECURE - hits, hits])

    def pvalue(p: float) -> float:
        return float(stats.chisquare(observed, np.array([1 - p, p]) * N_SECURE).pvalue)

    g = 7 / 3
    assert pvalue(math.exp(-g)) > ALPHA_SECURE
    assert pvalue(math.exp(-1.3 * g)) < ALPHA_SECURE and pvalue(math.exp(-0.7 * g)) < ALPHA_SECURE
