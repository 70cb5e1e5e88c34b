"""Frequency oracles (seed 003; Wang et al. 2017): calibration, the shared unbiased estimator and its
variance, the seed's coin example, and the report wire format.

Statistical tests are seeded; each states the false-failure rate of its bound.
"""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest
from scipy.optimize import minimize

from kakeibo import ldp
from kakeibo.ldp._coins import ln_upper
from kakeibo.ldp.framework import FrequencyOracle

ORACLES = [ldp.GRR, ldp.SUE, ldp.OUE, ldp.THE, ldp.SHE, ldp.BLH, ldp.OLH, ldp.HadamardResponse]
Z_BONFERRONI = 5.0  # two-sided normal tail 5.7e-7 per check; at most 16 checks per test


def zipf_population(n: int, d: int, seed: int) -> np.ndarray:
    """A fixed population of ``n`` clients over ``d`` values, Zipf(1.1) shares, every value present."""
    shares = np.arange(1, d + 1, dtype=np.float64) ** -1.1
    counts = np.floor(shares / shares.sum() * (n - d)).astype(np.int64) + 1
    counts[0] += n - counts.sum()
    values = np.repeat(np.arange(d), counts)
    return np.random.default_rng(seed).permutation(values)


def repeated_estimates(oracle: FrequencyOracle, values: np.ndarray, runs: int, seed: int) -> np.ndarray:
    """``runs`` independent estimates (one per row) of the same population, from one batch of reports."""
    n = values.size
    reports = oracle.randomize(np.tile(values, runs), rng=np.random.default_rng(seed))
    rows = []
    for r in range(runs):
        part = ldp.Reports(
            reports.protocol, reports.params, {k: a[r * n : (r + 1) * n] for k, a in reports.arrays.items()}
        )
        rows.append(oracle.estimate(part).counts)
    return np.array(rows)


# --- the shared estimator: unbiased, with the framework's variance --------------------------------------


@pytest.mark.statistical
@pytest.mark.parametrize("epsilon", [1.0, 4.0])
@pytest.mark.parametrize("cls", ORACLES, ids=lambda c: c.__name__)
def test_estimator_is_unbiased_and_its_variance_matches_the_formula(
    cls: type[FrequencyOracle], epsilon: float
) -> None:
    d, n, runs = 16, 500, 2000
    oracle = cls(epsilon=epsilon, domain_size=d)
    values = zipf_population(n, d, seed=3)
    true = np.bincount(values, minlength=d).astype(np.float64)
    estimates = repeated_estimates(oracle, values, runs, seed=11)
    formula = oracle.count_variance(n, true)
    # Unbiased: each value's mean over the runs is within 5 standard errors of the truth.
    z = (estimates.mean(axis=0) - true) / np.sqrt(formula / runs)
    assert np.all(np.abs(z) < Z_BONFERRONI), z
    # Variance: pooled over the values, the empirical variance is within 5% of Eq. (2). The pooled ratio's
    # standard deviation is about sqrt(2 / (runs * d)) = 0.8% for independent values (at most
    # sqrt(2 / runs) = 3.2% if they were perfectly correlated), so 5% is over 6 (resp. 1.5) of them; the
    # observed ratios stay within 3% for every oracle and epsilon here.
    ratio = estimates.var(axis=0, ddof=1).sum() / formula.sum()
    assert abs(ratio - 1) < 0.05, ratio


@pytest.mark.parametrize("cls", [ldp.OUE, ldp.OLH])
@pytest.mark.parametrize("epsilon", [0.5, 1.0, 4.0])
def test_oue_and_olh_variance_is_wang_eq_13(cls: type[FrequencyOracle], epsilon: float) -> None:
    """Var at frequency 0 is ``n 4 e^eps / (e^eps - 1)^2`` (Wang et al. Eq. (13)) up to the exact rounding
    of the coins (OUE) and the prime number of buckets (OLH): within 1% (OUE) and 3% (OLH)."""
    n = 10**6
    oracle = cls(epsilon=epsilon, domain_size=1024)
    theory = n * 4 * math.exp(epsilon) / math.expm1(epsilon) ** 2
    tolerance = 0.01 if cls is ldp.OUE else 0.03
    assert float(oracle.count_variance(n, 0)) == pytest.approx(theory, rel=tolerance)


def test_estimate_with_variance_reports_intervals() -> None:
    oue = ldp.OUE(epsilon=2, domain_size=8)
    values = zipf_population(20_000, 8, seed=5)
    est = oue.estimate(oue.randomize(values, rng=np.random.default_rng(2)))
    low, high = est.confidence_interval(beta=1e-6)
    true = np.bincount(values, minlength=8)
    assert np.all((low <= true) & (true <= high))  # each fails with probability 1e-6
    np.testing.assert_allclose(est.frequencies, est.counts / 20_000)
    np.testing.assert_allclose(est.variance, oue.count_variance(20_000, np.clip(est.counts, 0, 20_000)))


# --- the seed's coin protocol --------------------------------------------------------------------------


@pytest.mark.statistical
@pytest.mark.parametrize("cls", ORACLES, ids=lambda c: c.__name__)
def test_candidate_estimates_equal_the_full_estimate_at_those_values(cls: type[FrequencyOracle]) -> None:
    """estimate_candidates is the full estimator read at the candidates (in their order, repeats kept)."""
    oracle = cls(epsilon=2, domain_size=50)
    rng = np.random.default_rng(31)
    reports = oracle.randomize(rng.integers(0, 50, 3000), rng=rng)
    candidates = np.array([7, 3, 49, 0, 3])
    estimate = oracle.estimate(reports, candidates)
    full = oracle.estimate(reports)
    np.testing.assert_allclose(estimate.counts, full.counts[candidates])
    np.testing.assert_allclose(estimate.variance, full.variance[candidates])
    with pytest.raises(ValueError, match="candidates must be indices"):
        oracle.estimate(reports, [50])


def test_candidate_estimates_work_on_a_domain_too_large_to_enumerate() -> None:
    """OLH over 2^32 values: 20,000 of 10^5 clients hold one value; its estimate is within 5 standard
    deviations, and so is a value nobody holds."""
    oracle = ldp.OLH(epsilon=4, domain_size=2**32)
    rng = np.random.default_rng(32)
    values = rng.integers(0, 2**32, 100_000)
    values[:20_000] = 123_456_789
    estimate = oracle.estimate(oracle.randomize(values, rng=rng), [123_456_789, 5])
    truth = np.array([20_000 + np.sum(values[20_000:] == 123_456_789), np.sum(values == 5)])
    assert np.all(np.abs(estimate.counts - truth) <= 5 * np.sqrt(estimate.variance))


def test_coin_example_recovers_the_yes_share_as_2_x_minus_a_quarter() -> None:
    """Seed 003: answer truthfully on heads, else toss again; the true "yes" share is 2 (X - 1/4)."""
    n, yes_share = 100_000, 0.3
    truth = np.zeros(n, dtype=np.int64)
    truth[: int(n * yes_share)] = 1
    coin = ldp.GRR.two_coin()
    reports = coin.randomize(truth, rng=np.random.default_rng(42))
    x = float(np.mean(reports["value"] == 1))
    est = coin.estimate(reports)
    assert est.frequencies[1] == pytest.approx(2 * (x - 0.25), abs=1e-12)
    low, high = est.confidence_interval(beta=1e-6)
    assert low[1] <= n * yes_share <= high[1]
    assert coin.p_star == 0.75 and coin.q_star == 0.25 and coin.epsilon > math.log(3)


# --- calibration -------------------------------------------------------------------------------------------


@pytest.mark.parametrize("epsilon", [0.1, 1.0, 4.0, 10.0])
def test_unary_coins_are_rounded_toward_privacy(epsilon: float) -> None:
    e = math.exp(epsilon)
    oue = ldp.OUE(epsilon=epsilon, domain_size=16)
    assert oue.p_star == 0.5 and oue.q_star >= 1 / (e + 1)
    assert oue.q_star == pytest.approx(1 / (e + 1), rel=2**-11)
    sue = ldp.SUE(epsilon=epsilon, domain_size=16)
    assert sue.p_star + sue.q_star == 1 and sue.q_star >= 1 / (math.sqrt(e) + 1)
    assert sue.q_star == pytest.approx(1 / (math.sqrt(e) + 1), rel=2**-11)
    for oracle in (oue, sue, ldp.THE(epsilon=epsilon, domain_size=16)):
        p, q = Fraction(oracle.params["p"]), Fraction(oracle.params["q"])
        assert ln_upper(p * (1 - q) / (q * (1 - p))) <= Fraction(epsilon)


@pytest.mark.parametrize("epsilon", [0.5, 1.0, 2.0, 4.0])
def test_the_threshold_minimises_the_variance(epsilon: float) -> None:
    the = ldp.THE(epsilon=epsilon, domain_size=4)
    assert 0.5 < the.theta < 1

    def variance(theta: float) -> float:
        p = 1 - 0.5 * math.exp(-(1 - theta) * epsilon / 2)
        q = 0.5 * math.exp(-theta * epsilon / 2)
        return q * (1 - q) / (p - q) ** 2

    grid = np.linspace(0.5, 1.0, 5001)
    assert variance(the.theta) <= min(variance(t) for t in grid) * (1 + 1e-9)
    assert the.coin_epsilon <= epsilon


def is_prime(n: int) -> bool:
    return n >= 2 and all(n % f for f in range(2, math.isqrt(n) + 1))


@pytest.mark.parametrize("epsilon", [0.5, 1.0, 2.0, 4.0, 6.0])
def test_olh_buckets_are_the_better_prime_next_to_e_eps_plus_one(epsilon: float) -> None:
    olh = ldp.OLH(epsilon=epsilon, domain_size=1 << 20)
    g, target = olh.buckets, math.exp(epsilon) + 1
    below = max(p for p in range(2, math.floor(target) + 1) if is_prime(p))
    above = min(p for p in range(math.ceil(target), 4 * math.ceil(target)) if is_prime(p))

    def variance(buckets: int) -> float:  # Wang et al. Eq. (2) at frequency 0, n = 1
        p, q = math.exp(epsilon) / (math.exp(epsilon) + buckets - 1), 1 / buckets
        return q * (1 - q) / (p - q) ** 2

    assert g in (below, above) and variance(g) == min(variance(below), variance(above))
    assert olh.q_star == 1 / g
    assert ldp.BLH(epsilon=epsilon, domain_size=8).buckets == 2


def test_local_hash_family_is_exactly_universal() -> None:
    """For v != v', exactly 1/g of the keys a in GF(g)^m give h_a(v) = h_a(v'): what q* = 1/g rests on."""
    olh = ldp.OLH(epsilon=1.0, domain_size=20)  # g = 3, m = 3: all 27 keys enumerated
    g, m = olh.buckets, 3
    keys = np.array(np.meshgrid(*[np.arange(g)] * m, indexing="ij")).reshape(m, -1).T
    for v, w in [(0, 1), (4, 13), (19, 2), (5, 14)]:
        same = olh.hash_values(keys, np.full(len(keys), v)) == olh.hash_values(keys, np.full(len(keys), w))
        assert same.sum() * g == len(keys)


def test_hadamard_response_columns_and_side_coin() -> None:
    hr = ldp.HadamardResponse(epsilon=1.0, domain_size=1024)
    assert hr.columns == 2048 and hr.report_bits == 11
    p = Fraction(hr.params["p"])
    assert ln_upper(p / (1 - p)) <= 1 and float(p) == pytest.approx(math.e / (math.e + 1), rel=2**-11)


@pytest.mark.parametrize("k", [1, 2, 16, 128, 8192])
def test_hadamard_transform_matches_the_matrix(k: int) -> None:
    """One vector and a stack of rows, for sizes below, at and above the 64-row Kronecker factor."""
    index = np.arange(k)
    h = 1.0 - 2.0 * (np.bitwise_count(index[:, None] & index[None, :]) % 2)  # (-1)^popcount(i & j)
    rows = np.random.default_rng(0).normal(size=(3, k))
    np.testing.assert_allclose(ldp.hadamard.walsh_hadamard(rows[0]), h @ rows[0], atol=1e-9)
    np.testing.assert_allclose(ldp.hadamard.walsh_hadamard(rows), rows @ h, atol=1e-9)
    with pytest.raises(ValueError, match="power-of-two"):
        ldp.hadamard.walsh_hadamard(np.zeros(12))


def test_she_noise_variance_is_the_discrete_laplace_one() -> None:
    she = ldp.SHE(epsilon=1.0, domain_size=4)
    a = 0.5
    assert she.noise_variance == pytest.approx(2 * math.exp(-a) / (1 - math.exp(-a)) ** 2)
    noisy = she.randomize(np.zeros(200_000, dtype=np.int64), rng=np.random.default_rng(1))["noisy"]
    # 800,000 draws: the sample variance has relative standard deviation ~0.3%; 2% is over 6 of them.
    assert noisy[:, 1:].var() == pytest.approx(she.noise_variance, rel=0.02)


@pytest.mark.parametrize("cls", ORACLES, ids=lambda c: c.__name__)
def test_oracles_refuse_bad_parameters_and_values(cls: type[FrequencyOracle]) -> None:
    with pytest.raises(ValueError, match="epsilon"):
        cls(epsilon=0, domain_size=8)
    with pytest.raises(ValueError, match="domain_size"):
        cls(epsilon=1, domain_size=1)
    oracle = cls(epsilon=1, domain_size=8)
    with pytest.raises(ValueError, match=r"0\.\.7"):
        oracle.randomize(np.array([0, 8]))
    with pytest.raises(ValueError, match="1-d"):
        oracle.randomize(np.zeros((2, 2), dtype=np.int64))
    with pytest.raises(TypeError):
        oracle.randomize(np.array(["a"]))


# --- reports on the wire -------------------------------------------------------------------------------


@pytest.mark.parametrize("cls", ORACLES, ids=lambda c: c.__name__)
def test_reports_round_trip_through_bytes(cls: type[FrequencyOracle]) -> None:
    oracle = cls(epsilon=2, domain_size=13)
    values = np.arange(200) % 13
    reports = oracle.randomize(values, rng=np.random.default_rng(0))
    decoded = ldp.Reports.from_bytes(reports.to_bytes())
    assert decoded == reports and len(decoded) == 200
    np.testing.assert_array_equal(oracle.estimate(decoded).counts, oracle.estimate(reports).counts)
    halves = ldp.Reports.concatenate([oracle.randomize(values[:50]), oracle.randomize(values[50:])])
    assert halves.n == 200 and oracle.estimate(halves).counts.shape == (13,)


def test_server_refuses_reports_of_other_parameters_or_protocol() -> None:
    reports = ldp.OUE(epsilon=1, domain_size=8).randomize(np.arange(8))
    with pytest.raises(ValueError, match="epsilon"):
        ldp.OUE(epsilon=2, domain_size=8).estimate(reports)
    with pytest.raises(ValueError, match="made by OUE, not SUE"):
        ldp.SUE(epsilon=1, domain_size=8).estimate(reports)
    with pytest.raises(ValueError, match="domain_size"):
        ldp.Reports.concatenate([reports, ldp.OUE(epsilon=1, domain_size=9).randomize(np.arange(9))])


def test_server_refuses_malformed_payloads() -> None:
    grr = ldp.GRR(epsilon=1, domain_size=4)
    forged = ldp.Reports("GRR", grr.params, {"value": np.array([0, 9], dtype=np.uint8)})
    with pytest.raises(ValueError, match=r"outside 0\.\.3"):
        grr.estimate(forged)
    olh = ldp.OLH(epsilon=1, domain_size=16)
    wrong_shape = ldp.Reports(
        "OLH", olh.params, {"hash": np.zeros((2, 9), np.uint8), "value": np.zeros(2, np.uint8)}
    )
    with pytest.raises(ValueError, match="shape"):
        olh.estimate(wrong_shape)
    data = grr.randomize(np.arange(4)).to_bytes()
    for broken in (b"XXXXXX" + data[6:], data[:-1], data + b"\0", data.replace(b'"format":1', b'"format":9')):
        with pytest.raises(ValueError):
            ldp.Reports.from_bytes(broken)


# --- advisor and post-processing --------------------------------------------------------------------------


@pytest.mark.parametrize("epsilon", [0.5, 1.0, 2.0, 4.0])
@pytest.mark.parametrize("d", [2, 3, 5, 8, 16, 40, 128, 1024])
def test_advisor_follows_the_seed_rule(d: int, epsilon: float) -> None:
    """Seed 003: direct encoding when d < 3 e^eps + 2, otherwise OUE or OLH (equal variance)."""
    choice = ldp.recommend_oracle(domain_size=d, epsilon=epsilon)
    if d < 3 * math.exp(epsilon) + 2 - 0.5:  # away from the boundary, where rounding decides
        assert choice.protocol == "GRR"
    elif d > 3 * math.exp(epsilon) + 2 + 0.5:
        assert choice.protocol in ("OUE", "OLH")
    assert all(choice.variance_per_client <= v * 1.005 for _, v, _ in choice.alternatives)


def test_advisor_respects_the_bandwidth() -> None:
    unlimited = ldp.recommend_oracle(domain_size=1024, epsilon=1.0)
    narrow = ldp.recommend_oracle(domain_size=1024, epsilon=1.0, bandwidth_bits=64)
    assert unlimited.protocol == "OUE" and narrow.report_bits <= 64 and narrow.protocol != "OUE"
    with pytest.raises(ValueError, match="no frequency oracle fits"):
        ldp.recommend_oracle(domain_size=1024, epsilon=1.0, bandwidth_bits=3)


def test_norm_sub_is_the_euclidean_projection_onto_the_simplex() -> None:
    rng = np.random.default_rng(0)
    for _ in range(5):
        c = rng.normal(10, 30, size=6)
        out = ldp.postprocess.norm_sub(c, 50)
        assert out.min() >= 0 and out.sum() == pytest.approx(50)
        res = minimize(
            lambda x, c=c: ((x - c) ** 2).sum(),
            np.full(6, 50 / 6),
            bounds=[(0, None)] * 6,
            constraints=[{"type": "eq", "fun": lambda x: x.sum() - 50}],
            method="SLSQP",
            options={"ftol": 1e-12},
        )
        np.testing.assert_allclose(out, res.x, atol=1e-4)


@pytest.mark.statistical
def test_post_processing_lowers_the_error_on_a_skewed_population() -> None:
    """Wang et al. 2020: on a Zipf population, Norm-Sub and clip-and-normalise beat the raw estimate."""
    oue = ldp.OUE(epsilon=1.0, domain_size=256)
    values = zipf_population(20_000, 256, seed=9)
    true = np.bincount(values, minlength=256)
    raw = oue.estimate(oue.randomize(values, rng=np.random.default_rng(4))).counts
    mse = {
        "raw": ((raw - true) ** 2).mean(),
        "norm_sub": ((ldp.postprocess.norm_sub(raw, 20_000) - true) ** 2).mean(),
        "clip": ((ldp.postprocess.clip_and_normalize(raw, 20_000) - true) ** 2).mean(),
    }
    assert mse["norm_sub"] < 0.5 * mse["raw"] and mse["clip"] < mse["raw"], mse


@pytest.mark.parametrize("cls", ORACLES, ids=lambda c: c.__name__)
def test_estimates_carry_the_oracles_per_report_loss(cls: type[FrequencyOracle]) -> None:
    """Every server estimate states the loss each client's report was randomized with (issue 16)."""
    oracle = cls(epsilon=Fraction(3, 2), domain_size=8)
    reports = oracle.randomize(np.arange(200) % 8, rng=np.random.default_rng(0))
    for estimate in (oracle.estimate(reports), oracle.estimate(reports, [5, 1])):
        assert estimate.privacy_loss == oracle.privacy_loss
