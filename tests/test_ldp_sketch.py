"""Apple's count-mean sketches (kakeibo.ldp.sketch; Apple Differential Privacy Team 2017, "Learning with
Privacy at Scale"; seed 003): eps-LDP audits, calibration of the exact coins, the sketch against the
paper's per-client server algorithm, the fixed-hash expectation and variance of the frequency estimate,
unbiasedness over hash seeds, heavy hitters of a Zipf population, the wire format and bad inputs.

Statistical tests are seeded; each states the false-failure rate of its bound.
"""

from __future__ import annotations

import math
from fractions import Fraction
from typing import Any

import numpy as np
import pytest
from scipy.linalg import hadamard
from scipy.stats import norm

from kakeibo.audit import audit, value_event
from kakeibo.ldp import Reports
from kakeibo.ldp._coins import ln_upper
from kakeibo.ldp._hash import HashFamily
from kakeibo.ldp.sketch import CountMeanSketch, HadamardCountMeanSketch
from kakeibo.privacy import PureDP

Sketch = CountMeanSketch | HadamardCountMeanSketch
SKETCHES = [CountMeanSketch, HadamardCountMeanSketch]
TRIALS = 1_000_000
ALPHA = 1e-6  # false-failure rate of each "not refuted" assertion
EVENTS = [value_event(code) for code in range(4)]
Z_BONFERRONI = 5.0  # two-sided normal tail 5.7e-7 per check; at most 20 checks per test


def zipf_population(n: int, d: int, exponent: float, seed: int) -> np.ndarray:
    """``n`` clients over the integers ``0 .. d-1`` with Zipf(``exponent``) shares, every value present."""
    shares = np.arange(1, d + 1, dtype=np.float64) ** -exponent
    counts = np.floor(shares / shares.sum() * (n - d)).astype(np.int64) + 1
    counts[0] += n - counts.sum()
    return np.random.default_rng(seed).permutation(np.repeat(np.arange(d), counts))


def hash_family(mech: Sketch) -> HashFamily:
    """The public hash functions of ``mech``, rebuilt from its published parameters."""
    return HashFamily(seed=mech.seed, count=mech.hashes, buckets=mech.buckets)


def separated_pair(mech: Sketch) -> tuple[int, int]:
    """``(0, x)`` with the least ``x`` whose bucket differs from 0's under every hash function (the worst
    case: the two values' encodings differ given every public coin)."""
    family = hash_family(mech)
    functions = np.arange(mech.hashes)
    zero = family.hash(functions, np.uint64(0))
    x = next(x for x in range(1, 10_000) if np.all(family.hash(functions, np.uint64(x)) != zero))
    return 0, x


def bucket_view(mech: Sketch, reports: Reports, value: int) -> np.ndarray:
    """Per report: does it agree with ``value``'s encoding at the report's own coordinate? CMS: is the bit
    at ``h_j(value)`` set (+1); HCMS: is the sent sign ``H[h_j(value), l]``."""
    functions = reports["function"].astype(np.int64)
    bucket = hash_family(mech).hash(functions, np.full(reports.n, value, dtype=np.uint64))
    if isinstance(mech, CountMeanSketch):
        byte = reports["bits"][np.arange(reports.n), bucket >> 3]
        return np.asarray((byte >> (bucket & 7).astype(np.uint8)) & 1, dtype=np.int64)
    plus = np.bitwise_count(bucket & reports["column"].astype(np.int64)) % 2 == 0
    return np.asarray(reports["bit"].astype(np.bool_) == plus, dtype=np.int64)


def pair_sampler(mech: Sketch, d: int, d_prime: int) -> Any:
    """A sampler for :func:`kakeibo.audit.audit`: ``n`` reports of one value, each reduced to
    ``2 [agrees with d] + [agrees with d']`` (a post-processing of the report)."""

    def sample(value: int, n: int, rng: np.random.Generator) -> np.ndarray:
        reports = mech.randomize(np.full(n, value), rng=rng)
        return 2 * bucket_view(mech, reports, d) + bucket_view(mech, reports, d_prime)

    return sample


def audit_pair(mech: Sketch, seed: int) -> Any:
    d, d_prime = separated_pair(mech)
    sampler = pair_sampler(mech, d, d_prime)
    return audit(
        sampler, d, d_prime, trials=TRIALS, alpha=ALPHA, events=EVENTS, rng=np.random.default_rng(seed)
    )


def batch(reports: Reports, start: int, stop: int) -> Reports:
    """Reports ``start .. stop - 1`` of a batch, as a batch of their own."""
    return Reports(reports.protocol, reports.params, {k: a[start:stop] for k, a in reports.arrays.items()})


# --- privacy -----------------------------------------------------------------------------------------------


@pytest.mark.statistical
@pytest.mark.parametrize("epsilon", [1.0, 4.0])
@pytest.mark.parametrize("cls", SKETCHES, ids=lambda c: c.__name__)
def test_randomizer_is_epsilon_ldp_and_tight(cls: type[Sketch], epsilon: float) -> None:
    """10^6 reports of each of two values whose buckets differ under every function. The event "agrees
    with d, not with d'" has likelihood ratio ``((1 - f)/f)^2`` (CMS) or ``(1 - f)/f`` (HCMS), i.e.
    ``e^eps`` up to the coins' rounding: the audit (confidence 1 - 1e-6) must not refute epsilon, and its
    point estimate must come within 0.1 of it (at 10^6 trials its standard error is below 0.02)."""
    mech = cls(epsilon=epsilon, hashes=4, buckets=16, seed=3)
    result = audit_pair(mech, seed=20261123)
    assert not result.refutes(epsilon), str(result)
    assert max(e.epsilon_estimate for e in result.events) > epsilon - 0.1, str(result)


class HalfFlipCMS(CountMeanSketch):
    """A broken CMS: the flip probability is half the calibrated one, so the real loss exceeds epsilon."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._flip /= 2


class HalfFlipHCMS(HadamardCountMeanSketch):
    """A broken HCMS: the flip probability is half the calibrated one."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._flip /= 2


@pytest.mark.statistical
@pytest.mark.parametrize("cls", [HalfFlipCMS, HalfFlipHCMS], ids=lambda c: c.__name__)
def test_audit_refutes_a_halved_flip_probability(cls: type[Sketch]) -> None:
    """Negative control: at epsilon = 1 the halved flip costs 2.9 (CMS) or 1.9 (HCMS); the audit must see
    it (it fails to only with a probability far below 1e-6 at this gap)."""
    result = audit_pair(cls(epsilon=1.0, hashes=4, buckets=16, seed=3), seed=7)
    assert result.refutes(1.0), str(result)


# --- calibration -------------------------------------------------------------------------------------------


@pytest.mark.parametrize("epsilon", [0.1, 0.5, 1.0, 4.0, 10.0])
@pytest.mark.parametrize("cls", SKETCHES, ids=lambda c: c.__name__)
def test_flip_probability_and_c_eps_follow_the_paper_rounded_toward_privacy(
    cls: type[Sketch], epsilon: float
) -> None:
    """CMS: ``f = 1/(1 + e^(eps/2))``, ``c = (e^(eps/2) + 1)/(e^(eps/2) - 1)``; HCMS: the same with ``eps``
    for ``eps/2`` (Apple 2017). ``f`` is rounded up by less than ``2^-12 f`` (so ``c`` grows by at most the
    matching factor), the rounded ``f`` passes the exact privacy check, and ``c = 1/(1 - 2f)`` exactly."""
    mech = cls(epsilon=epsilon, hashes=8, buckets=32)
    t = 2 if cls is CountMeanSketch else 1
    e = math.exp(epsilon / t)
    target, paper_c = 1 / (1 + e), (e + 1) / (e - 1)
    flip = Fraction(mech.params["flip"])
    assert flip.denominator & (flip.denominator - 1) == 0  # dyadic
    assert mech.flip_probability == float(flip)
    assert target <= flip <= target * (1 + 2**-12)
    assert ln_upper(((1 - flip) / flip) ** t) <= Fraction(mech.params["epsilon"])
    assert mech.c_eps == float(1 / (1 - 2 * flip))
    assert paper_c <= mech.c_eps <= 1 / (1 - 2 * target * (1 + 2**-12))
    assert mech.privacy_loss == PureDP(Fraction(mech.params["epsilon"])) and mech.epsilon == epsilon


def test_too_small_an_epsilon_is_refused() -> None:
    with pytest.raises(ValueError, match="too small for an exact CMS"):
        CountMeanSketch(epsilon=1e-6, hashes=2, buckets=8)
    with pytest.raises(ValueError, match="too small for an exact HCMS"):
        HadamardCountMeanSketch(epsilon=1e-6, hashes=2, buckets=8)


def test_description_params_and_report_sizes() -> None:
    cms = CountMeanSketch(epsilon=2, hashes=16, buckets=1024, seed=9)
    assert (cms.hashes, cms.buckets, cms.seed, cms.report_bits) == (16, 1024, 9, 1024 + 4)
    assert cms.params == {
        "epsilon": "2",
        "hashes": 16,
        "buckets": 1024,
        "seed": 9,
        "flip": str(Fraction(cms.flip_probability)),
    }
    assert repr(cms) == "CountMeanSketch(epsilon=2.0, hashes=16, buckets=1024, seed=9)"
    hcms = HadamardCountMeanSketch(epsilon=2, hashes=16, buckets=1024)
    assert hcms.report_bits == 1 + 4 + 10 and hcms.seed == 0


# --- the sketch is the paper's server algorithm ------------------------------------------------------------


@pytest.mark.parametrize(("hashes", "buckets", "n"), [(5, 12, 200), (5, 16, 200), (2, 1 << 16, 1000)])
def test_cms_sketch_is_the_per_client_server_algorithm(hashes: int, buckets: int, n: int) -> None:
    """A_server-CMS, one client at a time: ``x = k (c/2 v~ + 1/2)``, ``M[j, :] += x``. ``buckets = 12``
    exercises the padding of the packed rows; 2 functions into 2^16 buckets put over 255 reports in one
    function's run (several byte-lane segments) and spread the reports over several memory chunks."""
    cms = CountMeanSketch(epsilon=1, hashes=hashes, buckets=buckets, seed=2)
    reports = cms.randomize((["x", "y", "z", "x"] * n)[:n], rng=np.random.default_rng(4))
    k, c = cms.hashes, cms.c_eps
    expected = np.zeros((k, buckets))
    for row, j in zip(reports["bits"], reports["function"], strict=True):
        v = 2.0 * np.unpackbits(row, count=buckets, bitorder="little") - 1
        expected[j] += k * (c / 2 * v + 1 / 2)
    np.testing.assert_allclose(cms.sketch(reports), expected, rtol=1e-12)


def test_hcms_sketch_is_the_per_client_server_algorithm() -> None:
    """A_server-HCMS, one client at a time: ``M[j, l] += k c w~``, then ``M <- M H_m^T``."""
    hcms = HadamardCountMeanSketch(epsilon=1, hashes=5, buckets=256, seed=2)
    reports = hcms.randomize(np.arange(300) % 7, rng=np.random.default_rng(4))
    k, c = hcms.hashes, hcms.c_eps
    expected = np.zeros((k, 256))
    for bit, j, column in zip(reports["bit"], reports["function"], reports["column"], strict=True):
        expected[j, column] += k * c * (2.0 * bit - 1)
    np.testing.assert_allclose(hcms.sketch(reports), expected @ hadamard(256).T, rtol=1e-12, atol=1e-9)


@pytest.mark.parametrize("cls", SKETCHES, ids=lambda c: c.__name__)
def test_estimate_is_the_frequency_formula_on_the_sketch(cls: type[Sketch]) -> None:
    """``f(d) = m/(m-1) ((1/k) sum_l M[l, h_l(d)] - n/m)``, and the integer domain is the candidates
    ``0 .. d-1``."""
    mech = cls(epsilon=2, hashes=6, buckets=32, seed=8)
    reports = mech.randomize(np.arange(500) % 11, rng=np.random.default_rng(5))
    matrix, k, m = mech.sketch(reports), mech.hashes, mech.buckets
    rows = hash_family(mech).hash_all(np.arange(15, dtype=np.uint64))
    formula = m / (m - 1) * (matrix[np.arange(k), rows].mean(axis=1) - 500 / m)
    domain = mech.estimate(reports, domain_size=15)
    np.testing.assert_allclose(domain.counts, formula, rtol=1e-12, atol=1e-9)
    np.testing.assert_allclose(mech.estimate(reports, [3, 14, 3]).counts, formula[[3, 14, 3]])
    assert domain.n == 500 and domain.counts.shape == domain.variance.shape == (15,)


# --- the estimator: fixed-hash expectation and variance; unbiased over hash seeds --------------------------


@pytest.mark.statistical
@pytest.mark.parametrize("epsilon", [1.0, 4.0])
@pytest.mark.parametrize("cls", SKETCHES, ids=lambda c: c.__name__)
def test_estimate_has_the_fixed_hash_expectation_and_variance(cls: type[Sketch], epsilon: float) -> None:
    """5000 independent runs of 989 clients over 20 values, with only 4 hash functions into 8 buckets, so
    collisions bias the estimates for these fixed hashes.

    * The mean over the runs is within 5 standard errors of :meth:`expected_counts` for every value
      (Bonferroni over 20 values: false-failure rate 1.1e-5), and for at least one value the collision bias
      is more than 10 standard errors away from the true count (so the check tells the two apart).
    * The pooled empirical variance is within 10% of :meth:`count_variance`. Each value's sample variance
      over 5000 runs has relative standard deviation ``sqrt(2/4999) = 2.0%``, and so has the pooled one
      even if all values were perfectly correlated: 10% is 5 of them (false-failure rate below 1e-6).
    """
    runs, candidates = 5000, np.arange(20)
    mech = cls(epsilon=epsilon, hashes=4, buckets=8, seed=5)
    population = zipf_population(989, 20, 1.1, seed=3)
    n = population.size
    reports = mech.randomize(np.tile(population, runs), rng=np.random.default_rng(11))
    estimates = np.array(
        [mech.estimate(batch(reports, r * n, (r + 1) * n), candidates).counts for r in range(runs)]
    )
    mean, variance = mech.expected_counts(population, candidates), mech.count_variance(population, candidates)
    standard_error = np.sqrt(variance / runs)
    z = (estimates.mean(axis=0) - mean) / standard_error
    assert np.all(np.abs(z) < Z_BONFERRONI), z
    truth = np.bincount(population, minlength=20)
    assert np.max(np.abs(mean - truth) / standard_error) > 10
    ratio = estimates.var(axis=0, ddof=1).sum() / variance.sum()
    assert abs(ratio - 1) < 0.10, ratio


@pytest.mark.statistical
@pytest.mark.parametrize("cls", SKETCHES, ids=lambda c: c.__name__)
def test_estimate_is_unbiased_over_hash_seeds(cls: type[Sketch]) -> None:
    """One run under each of 1000 hash seeds (4 functions into 8 buckets, 989 clients over 20 strings):
    the mean estimate is within 5 standard errors (from the spread over the seeds, which includes the
    collision bias of each seed) of the true count, for every value (false-failure rate 1.1e-5)."""
    seeds = 1000
    population = zipf_population(989, 20, 1.1, seed=3)
    words = np.array([f"word-{i}" for i in range(20)])
    rng = np.random.default_rng(12)
    estimates = []
    for seed in range(seeds):
        mech = cls(epsilon=2, hashes=4, buckets=8, seed=seed)
        estimates.append(mech.estimate(mech.randomize(words[population], rng=rng), words).counts)
    truth = np.bincount(population, minlength=20)
    z = (np.mean(estimates, axis=0) - truth) / (np.std(estimates, axis=0, ddof=1) / math.sqrt(seeds))
    assert np.all(np.abs(z) < Z_BONFERRONI), z


@pytest.mark.parametrize("cls", SKETCHES, ids=lambda c: c.__name__)
def test_released_variance_is_the_plug_in_formula(cls: type[Sketch]) -> None:
    """The variance released with an estimate: the clipped estimate holds the value (``a = 1``), the other
    clients have the ideal-hash moments ``E a = 1/m``, ``E a^2 = 1/m^2 + (1 - 1/m)/(m k)``."""
    mech = cls(epsilon=3, hashes=16, buckets=64, seed=1)
    reports = mech.randomize(np.arange(2000) % 5, rng=np.random.default_rng(6))
    est = mech.estimate(reports, domain_size=8)
    k, m, c, n = 16, 64, mech.c_eps, 2000
    held = np.clip(est.counts, 0, n)
    e_a, e_a2 = 1 / m, 1 / m**2 + (1 - 1 / m) / (m * k)
    if cls is CountMeanSketch:
        noise = (c**2 - 1) / 4
        per_client = held * noise + (n - held) * (noise + e_a - e_a2)
    else:
        per_client = held * (c**2 - 1) + (n - held) * (c**2 - e_a2)
    np.testing.assert_allclose(est.variance, (m / (m - 1)) ** 2 * per_client, rtol=1e-12)
    low, high = est.confidence_interval(1e-6)
    assert np.all(low <= high)


# --- heavy hitters -----------------------------------------------------------------------------------------


def resolvable_ranks(mean: np.ndarray, variance: np.ndarray, order: np.ndarray, bound: float) -> list[int]:
    """The ranks ``r <= 10`` at which the top-``r`` set is recovered except with probability below
    ``bound``: by the union bound over pairs ``(i in top r, j outside)`` of the normal tails
    ``P(est_j >= est_i) <= Phi(-(E_i - E_j) / (sd_i + sd_j))`` (``sd_i + sd_j`` bounds the standard
    deviation of the difference whatever the correlation)."""
    sd = np.sqrt(variance)
    ranks = []
    for r in range(1, 11):
        top, rest = order[:r], order[r:]
        gap = mean[top][:, None] - mean[rest][None, :]
        if norm.sf(gap / (sd[top][:, None] + sd[rest][None, :])).sum() < bound:
            ranks.append(r)
    return ranks


@pytest.mark.statistical
@pytest.mark.parametrize("cls", SKETCHES, ids=lambda c: c.__name__)
def test_zipf_heavy_hitters_are_found_as_far_as_the_variance_allows(cls: type[Sketch]) -> None:
    """10^6 clients over 1000 strings with Zipf(1.1) shares, epsilon = 4, 64 functions into 1024 buckets.

    The 10th and 11th counts differ by 1417 clients, while each estimate's standard deviation is about 430
    (CMS) or 1030 (HCMS), so the top 10 cannot be promised. Instead the exact fixed-hash mean and variance
    (:meth:`expected_counts`, :meth:`count_variance`) say at which ranks ``r <= 10`` the top-``r`` set is
    recovered except with probability 1e-7 (normal approximation, union bound); at each of them the
    estimated top-``r`` set must equal the true one (false-failure rate below 1e-6 over the ten ranks).
    Those ranks must include the top 5 (CMS) or top 3 (HCMS), which the formulas give for this population
    and seed, so the test is not vacuous.
    """
    d, n = 1000, 1_000_000
    mech = cls(epsilon=4, hashes=64, buckets=1024, seed=17)
    words = np.array([f"item-{i:04d}" for i in range(d)])
    codes = zipf_population(n, d, 1.1, seed=21)
    population = words[codes]
    estimate = mech.estimate(mech.randomize(population, rng=np.random.default_rng(22)), words)
    order = np.argsort(-np.bincount(codes, minlength=d), kind="stable")
    mean, variance = mech.expected_counts(population, words), mech.count_variance(population, words)
    ranks = resolvable_ranks(mean, variance, order, bound=1e-7)
    assert set(range(1, 6 if cls is CountMeanSketch else 4)) <= set(ranks), ranks
    found = np.argsort(-estimate.counts, kind="stable")
    for r in ranks:
        assert set(found[:r]) == set(order[:r]), (r, found[:10], order[:10])


# --- wire format and bad inputs ----------------------------------------------------------------------------


@pytest.mark.parametrize("cls", SKETCHES, ids=lambda c: c.__name__)
def test_reports_survive_the_wire_and_other_parameters_are_refused(cls: type[Sketch]) -> None:
    mech = cls(epsilon=2, hashes=8, buckets=64, seed=4)
    reports = mech.randomize([b"a", b"b", b"a"], rng=np.random.default_rng(1))
    decoded = Reports.from_bytes(reports.to_bytes())
    np.testing.assert_array_equal(mech.sketch(decoded), mech.sketch(reports))
    for other in (
        cls(epsilon=3, hashes=8, buckets=64, seed=4),
        cls(epsilon=2, hashes=8, buckets=64, seed=5),
        cls(epsilon=2, hashes=4, buckets=64, seed=4),
    ):
        with pytest.raises(ValueError, match="made with other parameters"):
            other.estimate(reports, [b"a"])
    stranger = (HadamardCountMeanSketch if cls is CountMeanSketch else CountMeanSketch)(
        epsilon=2, hashes=8, buckets=64, seed=4
    )
    with pytest.raises(ValueError, match=f"made by {cls.protocol}, not"):
        stranger.sketch(reports)


def tampered(reports: Reports, name: str, array: np.ndarray) -> Reports:
    return Reports(reports.protocol, reports.params, {**reports.arrays, name: array})


def test_malformed_payloads_are_refused() -> None:
    cms = CountMeanSketch(epsilon=2, hashes=4, buckets=12)
    reports = cms.randomize([1, 2, 3], rng=np.random.default_rng(0))
    with pytest.raises(ValueError, match=r"'function' holds values outside 0\.\.3"):
        cms.sketch(tampered(reports, "function", np.array([0, 4, 1], dtype=np.uint8)))
    with pytest.raises(ValueError, match="'bits' has shape"):
        cms.sketch(tampered(reports, "bits", np.zeros((3, 3), dtype=np.uint8)))
    padded = reports["bits"].copy()
    padded[0, -1] |= 0x80
    with pytest.raises(ValueError, match="bits beyond the 12 buckets"):
        cms.sketch(tampered(reports, "bits", padded))
    with pytest.raises(ValueError, match="at least one report"):
        cms.sketch(batch(reports, 0, 0))
    hcms = HadamardCountMeanSketch(epsilon=2, hashes=4, buckets=16)
    reports = hcms.randomize([1, 2, 3], rng=np.random.default_rng(0))
    with pytest.raises(ValueError, match=r"'bit' holds values outside 0\.\.1"):
        hcms.sketch(tampered(reports, "bit", np.array([0, 2, 1], dtype=np.uint8)))
    with pytest.raises(ValueError, match=r"'column' holds values outside 0\.\.15"):
        hcms.sketch(tampered(reports, "column", np.array([0, 16, 1], dtype=np.uint8)))
    with pytest.raises(ValueError, match="need an integer array 'column'"):
        hcms.sketch(tampered(reports, "column", np.zeros(3)))


@pytest.mark.parametrize(
    ("kwargs", "error", "message"),
    [
        ({"epsilon": 0}, ValueError, "epsilon must lie in"),
        ({"hashes": 0}, ValueError, "hashes must lie in 1..1048576"),
        ({"hashes": 2.0}, TypeError, "hashes must be an integer"),
        ({"buckets": 1}, ValueError, "buckets must lie in"),
        ({"buckets": "8"}, TypeError, "buckets must be an integer"),
        ({"seed": -1}, ValueError, "seed must lie in"),
        ({"hashes": 1 << 16, "buckets": 1 << 11}, ValueError, "must be at most 2\\*\\*26"),
    ],
)
@pytest.mark.parametrize("cls", SKETCHES, ids=lambda c: c.__name__)
def test_bad_parameters_are_refused(
    cls: type[Sketch], kwargs: dict[str, Any], error: type[Exception], message: str
) -> None:
    with pytest.raises(error, match=message):
        cls(**{"epsilon": 1, "hashes": 4, "buckets": 8, **kwargs})


def test_hcms_needs_a_power_of_two_number_of_buckets() -> None:
    with pytest.raises(ValueError, match="power-of-two number of buckets, got 12"):
        HadamardCountMeanSketch(epsilon=1, hashes=4, buckets=12)


@pytest.mark.parametrize("cls", SKETCHES, ids=lambda c: c.__name__)
def test_bad_values_candidates_and_domains_are_refused(cls: type[Sketch]) -> None:
    mech = cls(epsilon=1, hashes=4, buckets=8)
    reports = mech.randomize([0, 1], rng=np.random.default_rng(0))
    with pytest.raises(ValueError, match=r"^values must be non-negative when they are integers"):
        mech.randomize([3, -1])
    with pytest.raises(ValueError, match=r"^values must be a 1-d array"):
        mech.randomize(np.zeros((2, 2), dtype=np.int64))
    with pytest.raises(TypeError, match=r"^values must be non-negative integers, strings or bytes"):
        mech.randomize([0.5])
    with pytest.raises(ValueError, match=r"^candidates must be non-negative when they are integers"):
        mech.estimate(reports, [-2])
    with pytest.raises(ValueError, match=r"^population must be non-negative when they are integers"):
        mech.count_variance([-1], [0])
    with pytest.raises(ValueError, match="domain_size must lie in 2"):
        mech.estimate(reports, domain_size=1)
    with pytest.raises(TypeError, match="domain_size must be an integer"):
        mech.estimate(reports, domain_size=2.5)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="at most 2\\*\\*26 values"):
        mech.estimate(reports, domain_size=2**27)


@pytest.mark.parametrize("cls", SKETCHES, ids=lambda c: c.__name__)
def test_estimates_carry_the_sketchs_per_report_loss(cls: type[Sketch]) -> None:
    """Both server paths state the loss each client's report was randomized with (issue 16)."""
    mech = cls(epsilon=2, hashes=4, buckets=16, seed=3)
    reports = mech.randomize(np.arange(300) % 7, rng=np.random.default_rng(2))
    for estimate in (mech.estimate(reports, domain_size=7), mech.estimate(reports, ["a", 3])):
        assert estimate.privacy_loss == mech.privacy_loss
