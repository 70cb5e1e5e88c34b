"""RAPPOR (Erlingsson, Pihur and Korolova 2014; seed 003): privacy audits of one report and of the
memoised permanent response, calibration of the coins and losses, memoisation, the bit-count estimator,
candidate decoding, the wire format and bad inputs.

Statistical tests are seeded; each states the false-failure rate of its bound.
"""

from __future__ import annotations

import math
from fractions import Fraction
from typing import Any

import numpy as np
import pytest
import scipy.sparse as sp
from scipy import stats
from scipy.special import ndtri

from kakeibo import ldp
from kakeibo.audit import audit
from kakeibo.audit._events import value_event
from kakeibo.ldp._hash import HashFamily, value_keys
from kakeibo.ldp.rappor import RAPPOR, OneTimeRAPPOR, RapporClient, _least_squares
from kakeibo.noise import resolve_source
from kakeibo.privacy import PureDP

TRIALS = 1_000_000
AUDIT_ALPHA = 1e-6  # false-failure rate of each "not refuted" assertion
Z_BONFERRONI = 5.0  # two-sided normal tail 5.7e-7 per check
TAIL = 1e-6  # false-failure rate of each binomial / chi-square bound


def bloom_positions(rappor: RAPPOR | OneTimeRAPPOR, value: int, cohort: int) -> np.ndarray:
    """The Bloom bits ``value`` sets in ``cohort``."""
    packed = rappor.bloom_filters([value], [cohort])
    return np.flatnonzero(np.unpackbits(packed[0], bitorder="little")[: rappor.k])


def disjoint_pair(rappor: RAPPOR | OneTimeRAPPOR) -> tuple[int, int, np.ndarray]:
    """The first two integers whose ``h`` Bloom bits in cohort 0 are all distinct (the worst case: ``2h``
    differing bits), and those ``2h`` bits (first value's first)."""
    first = next(v for v in range(1000) if bloom_positions(rappor, v, 0).size == rappor.h)
    mine = bloom_positions(rappor, first, 0)
    for other in range(first + 1, 1000):
        theirs = bloom_positions(rappor, other, 0)
        if theirs.size == rappor.h and not np.intersect1d(mine, theirs).size:
            return first, other, np.concatenate([mine, theirs])
    raise AssertionError("no disjoint pair among the first 1000 integers")


def view(packed: np.ndarray, positions: np.ndarray) -> np.ndarray:
    """The bits at ``positions`` of each packed row as one integer (bit ``l`` = position ``l``): a
    post-processing of the report."""
    out = np.zeros(packed.shape[0], dtype=np.int64)
    for index, pos in enumerate(positions.tolist()):
        out |= ((packed[:, pos >> 3] >> (pos & 7)) & 1).astype(np.int64) << index
    return out


def report_sampler(rappor: RAPPOR, positions: np.ndarray) -> Any:
    """``n`` single reports (IRR of a fresh PRR) of one value in cohort 0, reduced to the relevant bits."""

    def sample(value: int, n: int, rng: np.random.Generator) -> np.ndarray:
        reports = rappor.randomize(np.full(n, value), rng=rng, cohorts=np.zeros(n, dtype=np.int64))
        return view(reports["bits"], positions)

    return sample


def permanent_sampler(rappor: RAPPOR, positions: np.ndarray) -> Any:
    """``n`` permanent responses ``B'`` of one value in cohort 0, reduced to the relevant bits."""

    def sample(value: int, n: int, rng: np.random.Generator) -> np.ndarray:
        bloom = rappor._bloom_words(np.full(n, value, dtype=np.uint64), np.zeros(n, dtype=np.int64))
        return view(rappor._pack(rappor._permanent(bloom, resolve_source(rng))), positions)

    return sample


def audit_pair(rappor: RAPPOR | OneTimeRAPPOR, make_sampler: Any, seed: int) -> Any:
    """The audit of ``rappor`` on two values with disjoint Bloom bits, every outcome of the ``2h`` relevant
    bits as an event, 10^6 samples per value, at confidence 1 - AUDIT_ALPHA."""
    first, other, positions = disjoint_pair(rappor)
    events = [value_event(code) for code in range(1 << positions.size)]
    sampler = make_sampler(rappor, positions)
    return audit(
        sampler,
        first,
        other,
        trials=TRIALS,
        alpha=AUDIT_ALPHA,
        events=events,
        rng=np.random.default_rng(seed),
    )


# --- privacy audits -----------------------------------------------------------------------------------------


@pytest.mark.statistical
def test_one_report_is_epsilon_one_ldp_and_tight() -> None:
    """Not refuted at epsilon_one (false failure <= 1e-6). The outcome "the first value's bits set, the
    other's clear" has likelihood ratio exactly ``e^epsilon_one``, with probabilities 0.09 and 0.03, so its
    point estimate has a standard error of about 0.007: the 0.1 margin is over 10 of them."""
    rappor = RAPPOR()
    result = audit_pair(rappor, report_sampler, 20261123)
    assert not result.refutes(rappor.epsilon_one), str(result)
    best = max(e.epsilon_estimate for e in result.events)
    assert best > rappor.epsilon_one - 0.1, str(result)


@pytest.mark.statistical
def test_permanent_response_is_epsilon_infinity_ldp_and_tight() -> None:
    """The memoised PRR alone (what infinitely many reports reveal) against epsilon_infinity = 4 ln 3. The
    tight outcome has probabilities 0.32 and 1/256 (about 3900 hits), so the estimate's standard error is
    about 0.02 and the 0.1 margin holds with false-failure rate far below 1e-6."""
    rappor = RAPPOR()
    result = audit_pair(rappor, permanent_sampler, 7)
    assert not result.refutes(rappor.epsilon_infinity), str(result)
    best = max(e.epsilon_estimate for e in result.events)
    assert best > rappor.epsilon_infinity - 0.1, str(result)


class RevealingIrrRAPPOR(RAPPOR):
    """Broken: the IRR reports a 1 of ``B'`` with probability 15/16 instead of the calibrated 3/4, so one
    report costs 2 ln(3.09) = 2.26, not the 1.07 it claims."""

    def __init__(self) -> None:
        super().__init__()
        self._q = Fraction(15, 16)


class ThinPrrRAPPOR(RAPPOR):
    """Broken: the PRR flips with probability 1/8 instead of f/2 = 1/4: 4 ln 7 = 7.8, not 4 ln 3."""

    def __init__(self) -> None:
        super().__init__()
        self._half_f = Fraction(1, 8)


def test_audit_refutes_a_revealing_irr() -> None:
    broken = RevealingIrrRAPPOR()
    result = audit_pair(broken, report_sampler, 11)
    assert result.refutes(broken.epsilon_one), str(result)


def test_audit_refutes_a_thin_prr() -> None:
    broken = ThinPrrRAPPOR()
    result = audit_pair(broken, permanent_sampler, 13)
    assert result.refutes(broken.epsilon_infinity), str(result)


# --- calibration --------------------------------------------------------------------------------------------


def star_probabilities(p: Fraction, q: Fraction, f: Fraction) -> tuple[Fraction, Fraction]:
    """``(p*, q*)`` of the paper's Sec. 3, computed independently of the library."""
    return f / 2 * (p + q) + (1 - f) * p, f / 2 * (p + q) + (1 - f) * q


def test_paper_parameters_give_the_papers_losses() -> None:
    """k = 128, h = 2, m = 64, p = 1/2, q = 3/4, f = 1/2: epsilon_infinity = 4 ln 3 = 4.39 and
    epsilon_one = 1.07 (paper Sec. 3)."""
    rappor = RAPPOR()
    assert (rappor.k, rappor.h, rappor.m, rappor.p, rappor.q, rappor.f) == (128, 2, 64, 0.5, 0.75, 0.5)
    p, q, f = Fraction(1, 2), Fraction(3, 4), Fraction(1, 2)
    p_star, q_star = star_probabilities(p, q, f)
    assert (rappor.p_star, rappor.q_star) == (float(p_star), float(q_star))
    infinity = 2 * 2 * math.log((1 - f / 2) / (f / 2))
    one = 2 * math.log(q_star * (1 - p_star) / (p_star * (1 - q_star)))
    assert infinity == pytest.approx(4 * math.log(3), rel=1e-15)
    # The library reports rational upper bounds on these logarithms (at most 1e-39 above), as floats.
    assert abs(rappor.epsilon_infinity - infinity) < 1e-12 and abs(rappor.epsilon_one - one) < 1e-12
    assert (round(rappor.epsilon_infinity, 2), round(rappor.epsilon_one, 2)) == (4.39, 1.07)
    assert isinstance(rappor.privacy_loss, PureDP) and isinstance(rappor.longitudinal_loss, PureDP)
    assert float(rappor.privacy_loss.epsilon) == rappor.epsilon_one == rappor.epsilon
    assert float(rappor.longitudinal_loss.epsilon) == rappor.epsilon_infinity


@pytest.mark.parametrize(("p", "q", "f"), [(0.5, 0.75, 0.5), (0.25, 0.875, 0.25), (0.125, 0.5, 0.75)])
def test_bit_estimator_constants_are_the_papers(p: float, q: float, f: float) -> None:
    """``t = (c - (p + f q/2 - f p/2) N) / ((1 - f)(q - p))``: ``p*`` and ``q* - p*`` are those constants."""
    rappor = RAPPOR(p=p, q=q, f=f)
    P, Q, F = Fraction(p), Fraction(q), Fraction(f)
    assert Fraction(rappor.p_star) == P + F * Q / 2 - F * P / 2
    assert Fraction(rappor.q_star) - Fraction(rappor.p_star) == (1 - F) * (Q - P)


def test_fine_probabilities_round_towards_less_loss() -> None:
    """Non-dyadic ``p = 0.1, q = 0.3, f = 0.3`` (and a dyadic with 40 fractional bits) are rounded to the
    2^-32 grid: ``p`` and ``f/2`` up, ``q`` down, each by less than one step; both losses shrink."""
    step = Fraction(1, 2**32)
    rappor = RAPPOR(p=0.1, q=0.3, f=0.3)
    p, q, half_f = Fraction(rappor.p), Fraction(rappor.q), Fraction(rappor.f) / 2
    for rounded, nominal in ((p, Fraction(1, 10)), (half_f, Fraction(3, 20))):
        assert 0 <= rounded - nominal < step and (rounded / step).denominator == 1
    assert 0 <= Fraction(3, 10) - q < step and (q / step).denominator == 1
    nominal_star = star_probabilities(Fraction(1, 10), Fraction(3, 10), Fraction(3, 10))
    nominal_one = 2 * math.log(
        nominal_star[1] * (1 - nominal_star[0]) / (nominal_star[0] * (1 - nominal_star[1]))
    )
    assert rappor.epsilon_one <= nominal_one + 1e-12
    assert rappor.epsilon_infinity <= 4 * math.log(Fraction(17, 20) / Fraction(3, 20)) + 1e-12
    assert (
        rappor.params["p"] == str(p)
        and rappor.params["q"] == str(q)
        and rappor.params["f"] == str(2 * half_f)
    )
    fine = RAPPOR(p=Fraction(1, 4) + Fraction(1, 2**40))
    assert Fraction(fine.p) == Fraction(1, 4) + step


def test_dyadic_probabilities_are_kept_exactly() -> None:
    rappor = RAPPOR(p=Fraction(3, 2**32), q=0.75, f=0.25)
    assert Fraction(rappor.p) == Fraction(3, 2**32) and rappor.f == 0.25
    assert rappor.params == {
        "k": 128,
        "h": 2,
        "m": 64,
        "p": "3/4294967296",
        "q": "3/4",
        "f": "1/4",
        "hash_seed": 0,
    }


# --- memoisation: the client class --------------------------------------------------------------------------


def test_client_memoises_its_permanent_response_per_value() -> None:
    rappor = RAPPOR()
    secret = bytes(range(32))
    client = RapporClient(rappor, secret)
    prr = client.permanent_response(["apple", "pear", "apple"])
    assert np.array_equal(prr[0], prr[2]) and not np.array_equal(prr[0], prr[1])
    # No state: a new object with the same secret has the same cohort and the same B'.
    again = RapporClient(rappor, secret)
    assert again.cohort == client.cohort
    assert np.array_equal(again.permanent_response(["apple"])[0], prr[0])
    # Another secret gives another B' (two equal 128-bit PRRs have probability 0.625^128 < 1e-26).
    for other in range(20):
        stranger = RapporClient(rappor, bytes([other]) * 32, cohort=client.cohort)
        assert not np.array_equal(stranger.permanent_response(["apple"])[0], prr[0])
    # The IRR is fresh: two of 50 reports agreeing on all 128 bits has probability below 1e-12.
    bits = client.report(["apple"] * 50, rng=np.random.default_rng(3))["bits"]
    assert np.unique(bits, axis=0).shape[0] == 50


def binomial_interval(trials: int, probability: float) -> tuple[int, int]:
    """Two-sided binomial acceptance interval of total tail ``TAIL``."""
    lower = int(stats.binom.ppf(TAIL / 2, trials, probability))
    upper = int(stats.binom.isf(TAIL / 2, trials, probability))
    return lower, upper


@pytest.mark.statistical
def test_client_reports_use_the_memoised_prr() -> None:
    """2000 reports of one value by one client: the bits set in ``B'`` are reported with probability ``q``
    and the others with ``p`` -- a fresh PRR per report would give ``q* = 0.6875`` and ``p* = 0.5625``
    instead. Binomial bounds, false failure 1e-6 each."""
    rappor = RAPPOR()
    client = RapporClient(rappor, b"k" * 32)
    prr = np.unpackbits(client.permanent_response(["apple"])[0], bitorder="little").astype(bool)
    reports = client.report(["apple"] * 2000, rng=np.random.default_rng(5))
    bits = np.unpackbits(reports["bits"], axis=1, bitorder="little").astype(bool)
    assert np.all(reports["cohort"] == client.cohort)
    for where, probability in ((prr, rappor.q), (~prr, rappor.p)):
        lower, upper = binomial_interval(2000 * int(where.sum()), probability)
        assert lower <= int(bits[:, where].sum()) <= upper


@pytest.mark.statistical
def test_permanent_response_flips_each_bit_with_probability_half_f() -> None:
    """Over 1000 secrets in one cohort, ``B' XOR B`` is Bernoulli(f/2) per bit (binomial bound, false
    failure 1e-6), and the cohorts derived from 1000 secrets are uniform (chi-square, 1e-6)."""
    rappor = RAPPOR()
    truth = np.unpackbits(rappor.bloom_filters(["apple"], [5])[0], bitorder="little")
    prrs = np.stack(
        [
            RapporClient(rappor, s.to_bytes(32, "little"), cohort=5).permanent_response(["apple"])[0]
            for s in range(1000)
        ]
    )
    flips = int((np.unpackbits(prrs, axis=1, bitorder="little") != truth).sum())
    lower, upper = binomial_interval(1000 * rappor.k, rappor.f / 2)
    assert lower <= flips <= upper
    cohorts = [RapporClient(rappor, s.to_bytes(32, "big")).cohort for s in range(1000)]
    observed = np.bincount(cohorts, minlength=rappor.m)
    assert stats.chisquare(observed).pvalue > TAIL


def test_client_reports_are_decoded_by_the_server() -> None:
    rappor = RAPPOR(k=16, m=4)
    batches = [
        RapporClient(rappor, bytes([s]) * 32).report(["x", "y"], rng=np.random.default_rng(s))
        for s in range(8)
    ]
    reports = ldp.Reports.concatenate(batches)
    estimate = rappor.estimate(ldp.Reports.from_bytes(reports.to_bytes()))
    assert estimate.counts.shape == (4, 16) and estimate.n == 16


# --- the bit-count estimator --------------------------------------------------------------------------------


def fixed_population(n: int, m: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """``n`` clients over five values with shares 50/25/15/7/3 %, cohorts assigned round-robin."""
    counts = (n * np.array([0.50, 0.25, 0.15, 0.07, 0.03])).astype(np.int64)
    values = np.random.default_rng(seed).permutation(np.repeat(np.arange(5), counts))
    return values, np.arange(values.size) % m


@pytest.mark.statistical
@pytest.mark.parametrize("protocol", [RAPPOR, OneTimeRAPPOR])
def test_bit_estimates_are_unbiased_with_the_stated_variance(protocol: type[RAPPOR | OneTimeRAPPOR]) -> None:
    """500 runs of one fixed population of 4000 clients (k = 32, m = 4: 128 bit counts), for both variants
    (one-time RAPPOR's variance is ``N_j (f/2)(1 - f/2) / (1 - f)^2`` whatever the counts).

    Unbiased: each bit's mean over the runs is within 5 standard errors of the true count (Bonferroni over
    128 bits: false failure 7e-5). Variance: pooled over the bits, the empirical variance matches
    ``bit_count_variance`` within 5 standard deviations of the pooled ratio, ``sqrt(2 sum v^2 / (runs - 1))
    / sum v`` (about 0.6%: the estimates are sums of 1000 independent bits, very nearly normal)."""
    rappor, runs = protocol(k=32, h=2, m=4), 500
    values, cohorts = fixed_population(4000, rappor.m, seed=1)
    truth = np.unpackbits(rappor.bloom_filters(values, cohorts), axis=1, bitorder="little")[:, : rappor.k]
    true_counts = np.stack([truth[cohorts == j].sum(axis=0) for j in range(rappor.m)])
    sizes = np.bincount(cohorts, minlength=rappor.m)
    reports = rappor.randomize(
        np.tile(values, runs), rng=np.random.default_rng(2), cohorts=np.tile(cohorts, runs)
    )
    n = values.size
    estimates = np.stack(
        [
            rappor.estimate(
                ldp.Reports(
                    reports.protocol,
                    reports.params,
                    {k: a[r * n : (r + 1) * n] for k, a in reports.arrays.items()},
                )
            ).counts
            for r in range(runs)
        ]
    )
    formula = rappor.bit_count_variance(sizes, true_counts)
    z = (estimates.mean(axis=0) - true_counts) / np.sqrt(formula / runs)
    assert np.all(np.abs(z) < Z_BONFERRONI), z
    ratio = estimates.var(axis=0, ddof=1).sum() / formula.sum()
    ratio_sd = math.sqrt(2 * (formula**2).sum() / (runs - 1)) / formula.sum()
    assert abs(ratio - 1) < Z_BONFERRONI * ratio_sd, (ratio, ratio_sd)


# --- decoding -----------------------------------------------------------------------------------------------

N_CLIENTS = 10**6
DECODE_ALPHA = 1e-3  # family-wise false-detection rate of the decoy candidates


def zipf_strings(n: int, seed: int) -> tuple[list[str], np.ndarray, np.ndarray]:
    """100 candidate strings with Zipf(1.1) shares of 90% of ``n`` clients, 20 other strings sharing the
    remaining 10% equally: (candidate names, candidate counts, every client's value)."""
    shares = np.arange(1, 101, dtype=np.float64) ** -1.1
    counts = np.floor(shares / shares.sum() * 0.9 * n).astype(np.int64)
    others = np.full(20, (n - counts.sum()) // 20)
    others[0] += n - counts.sum() - others.sum()
    names = [f"site-{i}.example" for i in range(100)] + [f"unlisted-{i}.example" for i in range(20)]
    values = np.random.default_rng(seed).permutation(
        np.repeat(np.array(names), np.concatenate([counts, others]))
    )
    return names[:100], counts, values


@pytest.mark.statistical
def test_decoding_finds_the_heavy_candidates_and_no_decoy() -> None:
    """10^6 clients, default parameters, 100 held candidates + 20 decoys nobody holds (and 10% of clients
    with values that are no candidate).

    * Power: every candidate whose count exceeds ``(z + 4)`` standard errors, ``z`` the detection quantile,
      is detected (misses each have probability below 3.2e-5).
    * Decoys: none is detected (Bonferroni: family-wise rate ``DECODE_ALPHA`` = 1e-3).
    * Accuracy: every detected candidate's count is within 5 standard errors of the truth, and so is the
      count of clients holding no candidate (5.7e-7 each)."""
    rappor = RAPPOR()
    names, counts, values = zipf_strings(N_CLIENTS, seed=4)
    decoys = [f"decoy-{i}.example" for i in range(20)]
    reports = rappor.randomize(values, rng=np.random.default_rng(6))
    result = rappor.estimate(reports, names + decoys, beta=DECODE_ALPHA)
    held = result.detected[:100]
    assert not result.detected[100:].any(), [decoys[i] for i in np.flatnonzero(result.detected[100:])]
    z = float(-ndtri(result.threshold))
    strong = counts > (z + 4) * np.nanmax(result.std_errors[:100])
    assert strong[:5].all() and held[strong].all(), (np.flatnonzero(strong), np.flatnonzero(held))
    error = (result.counts[:100] - counts)[held] / result.std_errors[:100][held]
    assert np.all(np.abs(error) < Z_BONFERRONI), error
    outside = N_CLIENTS - counts.sum()
    assert abs(result.other_count - outside) < Z_BONFERRONI * result.other_std_error
    assert result.detected_candidates[0] == names[0] and result.n == N_CLIENTS
    low, high = result.confidence_interval(0.05)
    assert np.all(low[:100][held] < result.counts[:100][held]) and np.all(high[:100][held] > low[:100][held])
    assert np.all(np.isnan(low[~result.selected]))


# --- wire format and bad inputs -----------------------------------------------------------------------------


def test_cohort_c_uses_hash_functions_c_h_to_c_h_plus_h_minus_1() -> None:
    """The Bloom filter of value ``v`` in cohort ``c`` sets bits ``H_(c h + j)(v)``, ``j < h``, of one public
    ``HashFamily(seed=hash_seed, count=m h, buckets=k)``, packed by ``np.packbits(..., bitorder="little")``.
    """
    rappor = RAPPOR(k=40, h=3, m=6, hash_seed=17)
    family = HashFamily(seed=17, count=18, buckets=40)
    values, cohorts = ["apple", "pear", "fig", "kiwi"], [0, 5, 2, 5]
    keys = value_keys(values).tolist()
    expected = np.zeros((4, 40), dtype=np.uint8)
    for row, (key, cohort) in enumerate(zip(keys, cohorts, strict=True)):
        expected[row, [family.hash_one(cohort * 3 + j, key) for j in range(3)]] = 1
    packed = np.packbits(expected, axis=1, bitorder="little")
    assert np.array_equal(rappor.bloom_filters(values, cohorts), packed)


def test_reports_round_trip_and_carry_the_parameters() -> None:
    rappor = RAPPOR(k=12, h=3, m=5, hash_seed=9)
    reports = rappor.randomize([1, 2, 3, 4], rng=np.random.default_rng(0), cohorts=[0, 1, 2, 4])
    assert reports["bits"].shape == (4, 2) and reports["bits"].dtype == np.uint8
    assert int(reports["bits"][:, 1].max()) < 16  # bits beyond k = 12 are clear
    assert reports["cohort"].tolist() == [0, 1, 2, 4]
    assert dict(reports.params) == rappor.params and reports.params["hash_seed"] == 9
    assert ldp.Reports.from_bytes(reports.to_bytes()) == reports
    assert rappor.report_bits == 12 and "k=12" in repr(rappor)


def test_server_refuses_mismatched_or_malformed_reports() -> None:
    rappor = RAPPOR(k=12, m=4)
    reports = rappor.randomize([1, 2, 3], rng=np.random.default_rng(0))
    with pytest.raises(ValueError, match=r"other parameters \(f: reports '1/2' vs server '1/4'\)"):
        RAPPOR(k=12, m=4, f=0.25).estimate(reports)
    oue = ldp.OUE(epsilon=1, domain_size=4).randomize([1, 2], rng=np.random.default_rng(0))
    with pytest.raises(ValueError, match="made by OUE, not RAPPOR"):
        rappor.estimate(oue, [1, 2])
    for arrays, message in (
        ({"bits": reports["bits"][:, :1], "cohort": reports["cohort"]}, "has shape"),
        ({"bits": reports["bits"], "cohort": np.array([0, 1, 4], dtype=np.uint16)}, "outside 0..3"),
        ({"bits": reports["bits"] | np.uint8(128), "cohort": reports["cohort"]}, "beyond the k = 12"),
    ):
        with pytest.raises(ValueError, match=message):
            rappor.estimate(ldp.Reports("RAPPOR", rappor.params, arrays))


@pytest.mark.parametrize(
    ("kwargs", "error", "message"),
    [
        ({"k": 1}, ValueError, r"k must lie in 2\.\.65536, got 1"),
        ({"k": 2.5}, TypeError, "k must be an integer, not float"),
        ({"h": 0}, ValueError, r"h must lie in 1\.\.64"),
        ({"m": 0}, ValueError, r"m must lie in 1\.\.65536"),
        ({"m": 65536, "h": 64}, ValueError, r"m \* h must be at most 2\*\*20"),
        ({"p": 0}, ValueError, "p must lie strictly between 0 and 1, got 0.0"),
        ({"q": 1.5}, ValueError, "q must lie strictly between 0 and 1"),
        ({"f": 1}, ValueError, "f must lie strictly between 0 and 1"),
        ({"f": True}, TypeError, "f must be a number, not a bool"),
        ({"p": float("nan")}, ValueError, "p must be finite"),
        ({"p": 0.75, "q": 0.5}, ValueError, "p must be smaller than q"),
        ({"p": 0.5, "q": 0.5 + 2**-40}, ValueError, "too close to each other"),
        ({"h": 64, "p": 2**-20, "q": 1 - 2**-20, "f": 2**-20}, ValueError, "above the largest supported 64"),
        ({"hash_seed": -1}, ValueError, r"seed must lie in 0\.\."),
    ],
)
def test_bad_parameters_are_refused(kwargs: dict[str, Any], error: type[Exception], message: str) -> None:
    with pytest.raises(error, match=message):
        RAPPOR(**kwargs)


def test_bad_client_inputs_are_refused() -> None:
    rappor = RAPPOR(m=8)
    with pytest.raises(ValueError, match="values must be a 1-d array"):
        rappor.randomize(np.zeros((2, 2), dtype=np.int64))
    with pytest.raises(ValueError, match="values must be non-negative when they are integers"):
        rappor.randomize([1, -1])
    with pytest.raises(TypeError, match="values must be non-negative integers, strings or bytes"):
        rappor.randomize([0.5])
    with pytest.raises(ValueError, match=r"cohorts must hold one cohort per value \(2\), got 1"):
        rappor.randomize([1, 2], cohorts=[0])
    with pytest.raises(ValueError, match=r"cohorts must be indices in 0\.\.7"):
        rappor.randomize([1, 2], cohorts=[0, 8])
    with pytest.raises(TypeError, match="rng must be None"):
        rappor.randomize([1], rng="seed")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="rappor must be a RAPPOR or a OneTimeRAPPOR, not OUE"):
        RapporClient(ldp.OUE(epsilon=1, domain_size=4), b"s" * 32)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="secret must be bytes, not str"):
        RapporClient(rappor, "s" * 32)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="secret must hold 16 to 64 bytes"):
        RapporClient(rappor, b"short")
    with pytest.raises(ValueError, match=r"cohort must lie in 0\.\.7, got 8"):
        RapporClient(rappor, b"s" * 32, cohort=8)


def test_bad_decoding_inputs_are_refused() -> None:
    rappor = RAPPOR(k=16, m=2)
    reports = rappor.randomize([1, 2, 3], rng=np.random.default_rng(0))
    with pytest.raises(ValueError, match="decode needs at least one candidate"):
        rappor.estimate(reports, [])
    with pytest.raises(ValueError, match="candidates must be distinct, but 'a' appears twice"):
        rappor.estimate(reports, ["a", "b", "a"])
    with pytest.raises(ValueError, match="beta must be a probability strictly between 0 and 1"):
        rappor.estimate(reports, [1, 2], beta=0)
    empty = rappor.randomize(np.zeros(0, dtype=np.int64), rng=np.random.default_rng(0))
    with pytest.raises(ValueError, match="decode needs at least one report"):
        rappor.estimate(empty, [1, 2])
    tiny = RAPPOR(k=8, h=1, m=1)  # 9 candidates in 8 bits: two share their only bit
    with pytest.raises(ValueError, match="cannot be told apart"):
        tiny.estimate(tiny.randomize([1], rng=np.random.default_rng(0)), list(range(9)))


def test_least_squares_refuses_a_rank_deficient_design() -> None:
    """The guard behind :meth:`RAPPOR.decode`: linearly dependent selected columns (here the third is the sum
    of the first two) leave the counts unidentifiable."""
    columns = np.array([[1.0, 0.0, 1.0], [0.0, 1.0, 1.0], [1.0, 1.0, 2.0], [0.0, 0.0, 0.0]])
    with pytest.raises(ValueError, match="linearly dependent"):
        _least_squares(sp.csr_matrix(columns), np.ones(4), np.ones(4))


def test_bit_estimates_and_decoding_carry_the_per_report_loss() -> None:
    """One report's loss, ``epsilon_one``, not the longitudinal ``epsilon_infinity`` (issue 16)."""
    rappor = RAPPOR(k=32, h=2, m=4)
    values = np.repeat(["a", "b", "c"], [300, 200, 100])
    reports = rappor.randomize(values, rng=np.random.default_rng(11))
    bits, decoded = rappor.estimate(reports), rappor.estimate(reports, ["a", "b", "c", "d"])
    assert bits.privacy_loss == decoded.privacy_loss == rappor.privacy_loss
    assert float(rappor.privacy_loss.epsilon) == rappor.epsilon_one
    assert decoded.privacy_loss != rappor.longitudinal_loss
    low, high = decoded.confidence_interval()
    assert low.shape == high.shape == (4,)
