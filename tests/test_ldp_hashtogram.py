"""Hashtogram (Bun, Nelson and Stemmer 2018) and Bitstogram (Bassily, Nissim, Stemmer and Thakurta 2017):
eps-LDP audits of both clients (the group or repetition sent in the clear, plus the Hadamard column),
the bucket estimator (unbiased, within its variance bound), the stated error bound of the median over many
seeded runs, the hash family's collision rate the bound assumes, heavy-hitter recovery above the stated
threshold, the wire format and bad inputs.

Statistical tests are seeded; each states the false-failure rate of its bound.
"""

from __future__ import annotations

import math
from fractions import Fraction
from typing import Any

import numpy as np
import pytest
from scipy.stats import binom

from kakeibo import ldp
from kakeibo.audit import audit, value_event
from kakeibo.ldp._hash import HashFamily
from kakeibo.ldp.bitstogram import Bitstogram
from kakeibo.ldp.counted import CountedHeavyHitters
from kakeibo.ldp.hashtogram import Hashtogram

TRIALS = 1_000_000
AUDIT_ALPHA = 1e-6  # false-failure rate of each "not refuted" assertion
Z = 5.0  # two-sided normal tail 5.7e-7 per check


def distinct_buckets(family: HashFamily, functions: range, start: int = 0) -> tuple[int, int]:
    """Two keys whose buckets differ under every listed function."""
    for first in range(start, start + 1000):
        for other in range(first + 1, first + 1000):
            if all(family.hash_one(j, first) != family.hash_one(j, other) for j in functions):
                return first, other
    raise AssertionError("no pair of keys with distinct buckets")


def hashtogram_view(oracle: Hashtogram) -> Any:
    """``n`` reports of one key, each reduced to ``repetition * columns + column``."""

    def sample(value: int, n: int, rng: np.random.Generator) -> np.ndarray:
        reports = oracle.randomize(np.full(n, value), rng=rng)
        repetition = reports["repetition"].astype(np.int64)
        return np.asarray(repetition * oracle.oracle.columns + reports["column"], dtype=np.int64)

    return sample


def grouped_view(protocol: CountedHeavyHitters, columns: int) -> Any:
    """``n`` reports of one key from a protocol whose finding groups each send one Hadamard ``column`` (of
    ``columns``), reduced to one integer each: the group and the payload (the order of the clients is lost,
    which the audit's event counts do not need)."""
    count_columns = protocol.count_oracle.oracle.columns

    def sample(value: int, n: int, rng: np.random.Generator) -> np.ndarray:
        batches = protocol.randomize(np.full(n, value), rng=rng)
        codes = [g * columns + b["column"].astype(np.int64) for g, b in enumerate(batches[:-1])]
        last = batches[-1]
        offset = (protocol.groups - 1) * columns
        codes.append(offset + last["repetition"].astype(np.int64) * count_columns + last["column"])
        return np.concatenate(codes)

    return sample


def grouped_outcomes(protocol: CountedHeavyHitters, columns: int) -> int:
    """How many values :func:`grouped_view` can take (a one-repetition Hashtogram group last)."""
    return (protocol.groups - 1) * columns + protocol.count_oracle.oracle.columns


# --- privacy audits -----------------------------------------------------------------------------------------


@pytest.mark.statistical
def test_hashtogram_report_is_epsilon_ldp_and_tight() -> None:
    """Two repetitions, four buckets (eight Hadamard columns), two keys in different buckets under both
    hash functions: every (repetition, column) outcome is an event. Not refuted at epsilon = 1 (false failure
    <= 1e-6); the tight outcomes have likelihood ratio ``e`` with probabilities near 0.09 and 0.03, so the
    estimate is within 0.15 of 1."""
    oracle = Hashtogram(epsilon=1, bits=12, buckets=4, repetitions=2)
    first, other = distinct_buckets(HashFamily(seed=0, count=2, buckets=4), range(2))
    result = audit(
        hashtogram_view(oracle),
        first,
        other,
        trials=TRIALS,
        alpha=AUDIT_ALPHA,
        events=[value_event(code) for code in range(2 * oracle.oracle.columns)],
        rng=np.random.default_rng(41),
    )
    assert not result.refutes(1.0), str(result)
    assert max(e.epsilon_estimate for e in result.events) > 0.85, str(result)


def test_the_audit_refutes_a_hashtogram_with_a_revealing_coin() -> None:
    """Broken: the Hadamard response keeps the client's side with probability 15/16 (ln 15 = 2.7, not 1)."""
    oracle = Hashtogram(epsilon=1, bits=12, buckets=4, repetitions=2)
    oracle.oracle._p = Fraction(15, 16)
    first, other = distinct_buckets(HashFamily(seed=0, count=2, buckets=4), range(2))
    result = audit(
        hashtogram_view(oracle),
        first,
        other,
        trials=200_000,
        alpha=AUDIT_ALPHA,
        events=[value_event(code) for code in range(2 * oracle.oracle.columns)],
        rng=np.random.default_rng(43),
    )
    assert result.refutes(1.0), str(result)


@pytest.mark.statistical
def test_bitstogram_report_is_epsilon_ldp_and_tight() -> None:
    """Two bits, two buckets: a client lands in bit group 0 or 1 (one in four each) or the Hashtogram half,
    and sends one column there; keys 1 and 2 differ in both bits. Every (group, payload) outcome is an
    event. Not refuted at epsilon = 1 (false failure <= 1e-6); an outcome of ratio ``e`` in a bit group has
    probabilities near 0.04 and 0.015, so the estimate comes within 0.2 of 1."""
    protocol = Bitstogram(epsilon=1, bits=2, k=1, buckets=2, count_buckets=2, repetitions=1)
    outcomes = grouped_outcomes(protocol, 4 * protocol.buckets)
    result = audit(
        grouped_view(protocol, 4 * protocol.buckets),
        1,
        2,
        trials=TRIALS,
        alpha=AUDIT_ALPHA,
        events=[value_event(code) for code in range(outcomes)],
        rng=np.random.default_rng(47),
    )
    assert not result.refutes(1.0), str(result)
    assert max(e.epsilon_estimate for e in result.events) > 0.8, str(result)


# --- the estimators -----------------------------------------------------------------------------------------


def population(n: int, seed: int) -> np.ndarray:
    """``n`` clients: key 7 held by 20%, key 1234 by 10%, the rest uniform over 2^20 keys."""
    rng = np.random.default_rng(seed)
    values = rng.integers(0, 1 << 20, n)
    values[: n // 5] = 7
    values[n // 5 : n // 5 + n // 10] = 1234
    return rng.permutation(values)


@pytest.mark.statistical
def test_bucket_counts_are_unbiased_and_within_the_variance_bound() -> None:
    """300 runs over one population of 20,000 clients (R = 4, T = 32). Each of the 128 bucket counts'
    mean is within 5 standard errors (the empirical ones) of the true population count of its bucket
    (Bonferroni: false failure 7e-5), and each empirical variance is below ``noise_sd^2`` times 1.3: the
    bound is the worst case over the buckets' contents, and a variance estimate from 300 runs exceeds its
    mean by 30% with probability below 1e-6."""
    oracle, runs = Hashtogram(epsilon=1, bits=20, buckets=32, repetitions=4), 300
    values = population(20_000, seed=3)
    buckets = HashFamily(seed=0, count=4, buckets=32).hash_all(values.astype(np.uint64))
    truth = np.stack([np.bincount(buckets[:, r], minlength=32) for r in range(4)]).astype(np.float64)
    rng = np.random.default_rng(5)
    rows = np.stack([oracle.bucket_counts(oracle.randomize(values, rng=rng)) for _ in range(runs)])
    standard_error = rows.std(axis=0, ddof=1) / math.sqrt(runs)
    assert np.all(np.abs(rows.mean(axis=0) - truth) < Z * standard_error)
    bound = oracle.noise_sd(20_000, 20_000 // 4) ** 2
    assert np.all(rows.var(axis=0, ddof=1) < 1.3 * bound), (rows.var(axis=0, ddof=1).max(), bound)


@pytest.mark.statistical
def test_the_median_stays_within_its_stated_bound() -> None:
    """200 runs, 10,000 clients, R = 8, T = 64, beta = 0.05, four candidates fixed in advance (the two heavy
    keys, a rare key and an absent one): per candidate, the number of runs outside the bound is at most the
    binomial(200, 0.05) quantile at 1 - 1e-6 (false failure <= 4e-6)."""
    oracle, runs, beta = Hashtogram(epsilon=2, bits=20, buckets=64, repetitions=8), 200, 0.05
    values = population(10_000, seed=9)
    candidates = np.array([7, 1234, int(values[-1]), (1 << 20) - 1])
    truth = np.array([(values == c).sum() for c in candidates])
    rng = np.random.default_rng(11)
    misses = np.zeros(4, dtype=np.int64)
    for _ in range(runs):
        estimate = oracle.estimate(oracle.randomize(values, rng=rng), candidates, beta)
        misses += np.abs(estimate.counts - truth) > estimate.bound
        low, high = estimate.confidence_interval()
        assert np.all(low < estimate.counts) and np.all(high > estimate.counts)
        assert estimate.confidence == 1 - beta and estimate.n == values.size
    assert np.all(misses <= binom.ppf(1 - 1e-6, runs, beta)), misses


def test_error_bound_is_the_binomial_tail_of_chebyshev_and_markov() -> None:
    """The bound's definition, recomputed: with q the largest per-repetition failure probability whose
    binomial tail at ceil(R/2) is beta, no split q1 + q2 = q gives a smaller ``sigma / sqrt(q1) + 2 n / (T
    q2)`` (checked on a grid), and the tail at q equals beta."""
    oracle = Hashtogram(epsilon=1, bits=20, buckets=128, repetitions=9)
    n, size, beta = 50_000, 5_000, 0.01
    bound = oracle.error_bound(n, size, beta)
    sigma, collisions = oracle.noise_sd(n, size), 2 * n / 128
    qs = np.linspace(1e-6, 0.5, 500_001)
    q = float(qs[binom.sf(4, 9, qs) <= beta].max())
    assert abs(binom.sf(4, 9, q) - beta) < 1e-4
    grid = np.linspace(1e-4, 1 - 1e-4, 10_001) * q
    assert bound <= float(np.min(sigma / np.sqrt(grid) + collisions / (q - grid))) * (1 + 1e-6)
    assert bound >= float(np.min(sigma / np.sqrt(grid) + collisions / (q - grid))) * (1 - 1e-3)
    assert oracle.error_bound(n, size, 0.5) < bound
    assert Hashtogram(epsilon=1, bits=20, repetitions=1).error_bound(n, size, 1e-9) > bound


def test_the_median_survives_a_collision_that_breaks_one_repetition() -> None:
    """A light key that shares its repetition-0 bucket with a key held by half the clients: repetition 0's
    estimate is off by about that half, the median is not."""
    family = HashFamily(seed=0, count=5, buckets=64)
    heavy = 3
    light = next(
        k
        for k in range(4, 100_000)
        if family.hash_one(0, k) == family.hash_one(0, heavy)
        and all(family.hash_one(j, k) != family.hash_one(j, heavy) for j in range(1, 5))
    )
    values = np.concatenate([np.full(20_000, heavy), np.full(2_000, light), np.arange(1000, 19_000)])
    oracle = Hashtogram(epsilon=4, bits=20, buckets=64, repetitions=5)
    reports = oracle.randomize(values, rng=np.random.default_rng(13))
    rows = oracle.bucket_counts(reports)
    assert rows[0, family.hash_one(0, light)] > 15_000
    estimate = oracle.estimate(reports, [light])
    assert abs(estimate.counts[0] - 2_000) < 2_500


@pytest.mark.statistical
def test_the_hash_family_collides_at_most_at_rate_two_over_t() -> None:
    """The assumption behind the collision term: over 10^6 random pairs of distinct keys and each of 4
    functions into T = 64 buckets, the collision rate is below 2/T (it is near 1/T; the binomial quantile
    at 1 - 1e-6 of the observed count must stay below 2/T)."""
    rng = np.random.default_rng(17)
    family = HashFamily(seed=0, count=4, buckets=64)
    a = rng.integers(0, 1 << 40, 1_000_000).astype(np.uint64)
    b = a ^ rng.integers(1, 1 << 40, 1_000_000).astype(np.uint64)
    for j in range(4):
        collisions = int((family.hash(j, a) == family.hash(j, b)).sum())
        high = binom.ppf(1 - 1e-6, 1_000_000, collisions / 1_000_000) / 1_000_000
        assert high < 2 / 64, (j, collisions)


# --- heavy hitters ------------------------------------------------------------------------------------------


def test_bitstogram_finds_the_keys_above_its_threshold() -> None:
    """2 x 10^5 clients over 2^24 keys, epsilon 4: every key whose count exceeds the bit threshold plus
    twice the average colliding mass is found, and its count is within the Hashtogram bound."""
    rng = np.random.default_rng(19)
    n = 200_000
    heavy = np.array([11, 5_000_000, 16_000_000, 777])
    shares = np.array([0.2, 0.1, 0.07, 0.002])
    counts = (shares * n).astype(np.int64)
    values = np.concatenate([np.repeat(heavy, counts), rng.integers(0, 1 << 24, n - counts.sum())])
    protocol = Bitstogram(epsilon=4, bits=24, k=4, buckets=1024)
    found = protocol.estimate(protocol.randomize(rng.permutation(values), rng=rng))
    needed = protocol.bit_threshold(n, 0.01) + 2 * 2 * n / protocol.buckets
    strong = heavy[counts > needed]
    assert strong.size == 3, (counts, needed)
    assert set(strong.tolist()) <= set(found.values.tolist())
    for key, count in zip(heavy, counts, strict=True):
        if key in strong:
            estimate = found.counts[found.values.tolist().index(key)]
            assert abs(estimate - count) < found.bound
    assert found.values.size <= 4 and found.privacy_loss == protocol.privacy_loss


def test_strings_are_found_as_keys() -> None:
    protocol = Bitstogram(epsilon=4, bits=24, k=2, buckets=256)
    values = ["apple"] * 30_000 + ["pear"] * 20_000 + [f"rare-{i}" for i in range(10_000)]
    found = protocol.estimate(protocol.randomize(values, rng=np.random.default_rng(23)))
    assert sorted(found.values.tolist()) == sorted(protocol.encode(["apple", "pear"]).tolist())


# --- wire format and bad inputs -----------------------------------------------------------------------------


def test_reports_round_trip_and_the_server_refuses_what_no_client_sends() -> None:
    oracle = Hashtogram(epsilon=1, bits=16, buckets=8, repetitions=3)
    reports = oracle.randomize(np.arange(50), rng=np.random.default_rng(0))
    assert ldp.Reports.from_bytes(reports.to_bytes()) == reports
    assert oracle.report_bits == 2 + 4 and "repetitions=3" in repr(oracle)
    for arrays, message in (
        ({"repetition": reports["repetition"] + 3, "column": reports["column"]}, r"outside 0\.\.2"),
        ({"repetition": reports["repetition"], "column": reports["column"] + 16}, r"outside 0\.\.15"),
    ):
        with pytest.raises(ValueError, match=message):
            oracle.bucket_counts(ldp.Reports("Hashtogram", oracle.params, arrays))
    with pytest.raises(ValueError, match="other parameters"):
        Hashtogram(epsilon=2, bits=16, buckets=8, repetitions=3).bucket_counts(reports)
    few = oracle.randomize(np.arange(2), rng=np.random.default_rng(1))
    with pytest.raises(ValueError, match="every repetition needs reports"):
        oracle.estimate(few, [1])
    protocol = Bitstogram(epsilon=1, bits=4, k=1, buckets=4)
    batches = protocol.randomize(np.arange(200) % 16, rng=np.random.default_rng(2))
    with pytest.raises(ValueError, match=r"groups \[4\] have no reports"):
        protocol.estimate(batches[:-1])
    with pytest.raises(TypeError, match="not a single batch"):
        protocol.estimate(batches[0])  # type: ignore[arg-type]
    forged = ldp.Reports("Bitstogram", {**batches[0].params, "group": 9}, batches[0].arrays)
    with pytest.raises(ValueError, match=r"not one of 0\.\.4"):
        protocol.estimate([*batches, forged])


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda: Hashtogram(epsilon=1, bits=16, buckets=100), "power of two"),
        (lambda: Hashtogram(epsilon=1, bits=41), r"bits must lie in 1\.\.40"),
        (lambda: Hashtogram(epsilon=1, bits=16, repetitions=0), "repetitions must lie"),
        (lambda: Bitstogram(epsilon=1, bits=16, k=0), "k must lie"),
        (lambda: Bitstogram(epsilon=1, bits=16, k=1, buckets=3), "power of two"),
    ],
)
def test_bad_parameters_are_refused(make: Any, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        make()


# --- calibration of the public-coin protocols ---------------------------------------------------------------


@pytest.mark.parametrize("epsilon", [0.5, 1.0, 4.0])
def test_every_public_coin_report_is_calibrated_to_epsilon(epsilon: float) -> None:
    """Hashtogram, Bitstogram, the succinct histogram and PrivateExpanderSketch each send one report through
    a binary randomized response with keep probability ``p``: dyadic, ``ln(p / (1 - p)) <= epsilon`` checked
    exactly, within 1e-4 of ``e^eps / (e^eps + 1)``; each protocol's stated loss is ``PureDP(epsilon)``."""
    from kakeibo.ldp import PrivateExpanderSketch, SuccinctHistogram
    from kakeibo.privacy import PureDP

    ideal = math.exp(epsilon) / (math.exp(epsilon) + 1)
    protocols = [
        Hashtogram(epsilon=epsilon, bits=16),
        Bitstogram(epsilon=epsilon, bits=16, k=1),
        SuccinctHistogram(epsilon=epsilon, bits=16, k=1),
        PrivateExpanderSketch(epsilon=epsilon, bits=16, k=1, buckets=4),
    ]
    for protocol in protocols:
        assert protocol.privacy_loss == PureDP(epsilon)
        coin = protocol.oracle if isinstance(protocol, Hashtogram) else getattr(protocol, "_oracle", None)
        p = Fraction(coin.p_star) if coin is not None else Fraction(protocol.p)  # type: ignore[attr-defined]
        assert p.denominator & (p.denominator - 1) == 0
        assert math.log(p / (1 - p)) <= epsilon + 1e-12 and float(p) > ideal - 1e-4, type(protocol).__name__
