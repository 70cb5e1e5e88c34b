"""LDPMiner and sampling RAPPOR (Qin et al. 2016), the baselines SVIM is measured against: eps-LDP audits
of each client (LDPMiner's two reports together), negative controls, the calibration of sampling RAPPOR's
coins, LDPMiner's phase-2 estimator (unbiased, with PSFO's variance), the top-k on a clear population, and
bad inputs.

Statistical tests are seeded; each states the false-failure rate of its bound.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest

from kakeibo.audit import audit, value_event
from kakeibo.ldp import LDPMiner, SamplingRAPPOR
from kakeibo.ldp.padding import PaddingSamplingOracle, UserSets
from kakeibo.privacy import PureDP
from test_ldp_itemsets import split_runs, tiled, weighted_sets

TRIALS = 1_000_000
ALPHA = 1e-6
Z = 5.0


def singletons(item: int, n: int) -> UserSets:
    return UserSets(np.arange(n + 1), np.full(n, item))


# --- privacy audits -----------------------------------------------------------------------------------------


def ldpminer_view(miner: LDPMiner) -> Any:
    """Both reports of ``n`` users holding ``{item}``, with the candidates fixed to ``[0, 1]``: ``phase-1
    value * 4 + phase-2 value`` (GRR reports, over the 5 and 4 padded values)."""

    def sample(item: int, n: int, rng: np.random.Generator) -> np.ndarray:
        sets = singletons(item, n)
        first = miner.report_items(sets, rng=rng)["value"].astype(np.int64)
        second = miner.report_candidates(sets, [0, 1], rng=rng)["value"].astype(np.int64)
        return first * 4 + second

    return sample


def audit_ldpminer(miner: LDPMiner, trials: int, seed: int) -> Any:
    return audit(
        ldpminer_view(miner),
        0,
        1,
        trials=trials,
        alpha=ALPHA,
        events=[value_event(code) for code in range(20)],
        rng=np.random.default_rng(seed),
    )


@pytest.mark.statistical
def test_ldpminer_is_epsilon_ldp_over_both_phases_and_tight() -> None:
    """Items 0..3, L = 1, k = 1 (candidates {0, 1}), GRR, epsilon 2: the two reports of ``{0}`` and ``{1}``
    together are not refuted at 2 (false failure <= 1e-6). Phase 1 is GRR at 1; phase 2 is GRR at the
    amplified ``ln(2 (e - 1) + 1)`` over the two candidates and two dummies, whose ratio for a held candidate
    is ``e``: the joint outcome (0, 0) has ratio ``e^2``, probabilities near 0.15 and 0.02, so the
    estimate comes within 0.2 of 2."""
    miner = LDPMiner(epsilon=2, domain_size=4, k=1, length=1, oracle="GRR")
    result = audit_ldpminer(miner, TRIALS, 73)
    assert not result.refutes(2.0), str(result)
    assert max(e.epsilon_estimate for e in result.events) > 1.8, str(result)


def test_the_audit_refutes_an_ldpminer_that_spends_epsilon_in_each_phase() -> None:
    miner = LDPMiner(epsilon=2, domain_size=4, k=1, length=1, oracle="GRR")
    miner._discovery = PaddingSamplingOracle(epsilon=2, domain_size=4, length=1, oracle="GRR")
    miner._counting = PaddingSamplingOracle(epsilon=2, domain_size=2, length=2, oracle="GRR")
    assert audit_ldpminer(miner, 200_000, 79).refutes(2.0)


def sampling_rappor_view(protocol: SamplingRAPPOR, positions: np.ndarray) -> Any:
    """``n`` reports of ``{item}`` reduced to the two Bloom bits of items 0 and 1 (one cohort, one hash)."""

    def sample(item: int, n: int, rng: np.random.Generator) -> np.ndarray:
        bits = np.unpackbits(
            protocol.randomize(singletons(item, n), rng=rng)["bits"], axis=1, bitorder="little"
        )
        return np.asarray(bits[:, positions[0]] * 2 + bits[:, positions[1]], dtype=np.int64)

    return sample


def bloom_bit(protocol: SamplingRAPPOR, item: int) -> int:
    packed = protocol.rappor.bloom_filters([item], [0])
    return int(np.flatnonzero(np.unpackbits(packed[0], bitorder="little"))[0])


@pytest.mark.statistical
def test_sampling_rappor_is_epsilon_ldp_and_tight() -> None:
    """Items 0..7, L = 1, one hash, one cohort, epsilon 2: items 0 and 1 set different Bloom bits, and the
    reports of ``{0}`` and ``{1}`` reduced to those two bits are not refuted at 2 (false failure <= 1e-6);
    the outcome (1, 0) has ratio ``((1 - f/2)/(f/2))^2 = e^2`` (probabilities 0.53 and 0.07), so the
    estimate comes within 0.1 of 2."""
    protocol = SamplingRAPPOR(epsilon=2, domain_size=8, k=1, length=1, bloom_bits=16, hashes=1, cohorts=1)
    positions = np.array([bloom_bit(protocol, 0), bloom_bit(protocol, 1)])
    assert positions[0] != positions[1]
    result = audit(
        sampling_rappor_view(protocol, positions),
        0,
        1,
        trials=TRIALS,
        alpha=ALPHA,
        events=[value_event(code) for code in range(4)],
        rng=np.random.default_rng(83),
    )
    assert not result.refutes(2.0), str(result)
    assert max(e.epsilon_estimate for e in result.events) > 1.9, str(result)


@pytest.mark.parametrize(("epsilon", "hashes"), [(0.5, 1), (2.0, 2), (6.0, 4)])
def test_sampling_rappor_calibrates_one_time_rappor_to_epsilon(epsilon: float, hashes: int) -> None:
    """``f/2 = 1 / (1 + e^(eps / 2h))`` rounded up to the 2^-32 grid: the loss ``2h ln((1 - f/2)/(f/2))`` is
    at most epsilon and within 1e-6 of it."""
    protocol = SamplingRAPPOR(epsilon=epsilon, domain_size=16, k=2, length=3, hashes=hashes)
    loss = float(protocol.rappor.privacy_loss.epsilon)
    assert epsilon - 1e-6 < loss <= epsilon
    half_f = protocol.rappor.f / 2
    assert abs(2 * hashes * math.log((1 - half_f) / half_f) - loss) < 1e-9
    assert protocol.privacy_loss.epsilon == epsilon


# --- estimators ---------------------------------------------------------------------------------------------


@pytest.mark.statistical
def test_ldpminer_phase_two_is_unbiased_with_psfo_variance() -> None:
    """300 runs of 2,000 users with sets of 1-4 of 12 items, candidates fixed to the 4 most weighted items
    (k = 2): each candidate's mean estimate is within 5 standard errors of its number of holders (Bonferroni
    over 4), and the pooled empirical variance matches ``counting.count_variance`` within 5 standard
    deviations of the pooled ratio."""
    miner, runs = LDPMiner(epsilon=2, domain_size=12, k=2, length=4), 300
    sizes = np.random.default_rng(89).integers(1, 5, 2000)
    sets = weighted_sets(sizes, 12, 1.0, seed=97)
    candidates = np.array([0, 1, 2, 3])
    held = sets.positions_in(candidates, 12)
    truth = np.bincount(held.items, minlength=4).astype(np.float64)
    reports = miner.report_candidates(tiled(sets, runs), candidates, rng=np.random.default_rng(101))
    estimates = np.stack(
        [miner.estimate(r, candidates).candidate_estimate.counts for r in split_runs(reports, runs)]
    )
    formula = miner.counting.count_variance(2000, truth)
    z = (estimates.mean(axis=0) - truth) / np.sqrt(formula / runs)
    assert np.all(np.abs(z) < Z), z
    ratio = estimates.var(axis=0, ddof=1).sum() / formula.sum()
    ratio_sd = math.sqrt(2 * (formula**2).sum() / (runs - 1)) / formula.sum()
    assert abs(ratio - 1) < Z * ratio_sd, (ratio, ratio_sd)


def clear_population() -> UserSets:
    """40,000 users with sets of 1-3 of 30 items, Zipf(1.5) weights: items 0 and 1 lead (26,892 and 13,958
    holders against 8,058 for the third)."""
    sizes = np.random.default_rng(103).integers(1, 4, 40_000)
    return weighted_sets(sizes, 30, 1.5, seed=107)


def test_both_baselines_find_the_clear_top_items() -> None:
    sets = clear_population()
    truth = np.bincount(sets.items, minlength=30)
    assert truth[0] > truth[1] > 1.5 * truth[2]
    mined = LDPMiner(epsilon=4, domain_size=30, k=2, length=3).run(sets, rng=np.random.default_rng(109))
    assert sorted(mined.items.tolist()) == [0, 1] and mined.candidates.size == 4
    sampled = SamplingRAPPOR(epsilon=4, domain_size=30, k=2, length=3).run(
        sets, rng=np.random.default_rng(113)
    )
    assert sorted(sampled.items.tolist()) == [0, 1]
    for found in (mined, sampled):
        error = (found.estimate.counts - truth[found.items]) / np.sqrt(found.estimate.variance)
        assert np.all(np.abs(error) < Z), error
        assert found.privacy_loss == PureDP(4)


# --- bad inputs ---------------------------------------------------------------------------------------------


def test_bad_inputs_are_refused() -> None:
    miner = LDPMiner(epsilon=1, domain_size=10, k=2, length=3)
    with pytest.raises(ValueError, match="phase 2 takes the 4 candidates of phase 1, got 3"):
        miner.report_candidates([[1, 2]], [1, 2, 3])
    with pytest.raises(ValueError, match="distinct items"):
        miner.report_candidates([[1, 2]], [1, 1, 2, 3])
    with pytest.raises(ValueError, match="oracle must be one of"):
        LDPMiner(epsilon=1, domain_size=10, k=2, length=3, oracle="RAPPOR")
    with pytest.raises(ValueError, match=r"k must lie in 1\.\.10"):
        LDPMiner(epsilon=1, domain_size=10, k=11, length=3)
    with pytest.raises(ValueError, match=r"length must lie in 1\.\."):
        SamplingRAPPOR(epsilon=1, domain_size=10, k=2, length=0)
    with pytest.raises(ValueError, match="other parameters"):
        SamplingRAPPOR(epsilon=2, domain_size=10, k=2, length=2).estimate(
            SamplingRAPPOR(epsilon=1, domain_size=10, k=2, length=2).randomize(
                [[1]], rng=np.random.default_rng(0)
            )
        )
    assert "length=3" in repr(miner) and "OneTimeRAPPOR" in repr(
        SamplingRAPPOR(epsilon=1, domain_size=10, k=2, length=2)
    )


@pytest.mark.statistical
def test_sampling_rappor_counts_are_unbiased_with_the_stated_variance() -> None:
    """200 runs over one population of 20,000 users with sets of 1-2 of 10 items (Zipf(1) weights), L = 2,
    epsilon 4: the three most held items are selected in every run; each one's mean estimate is within 5
    standard errors of its number of holders (Bonferroni over 3), and the empirical variance of its
    estimates lies within [0.65, 1.5] times the mean stated variance (``L^2`` times RAPPOR's sandwich
    variance plus the sampling's ``c (L - 1)``): for normal estimates the chi-square(199) probability of
    leaving that band is 4e-5 per item."""
    protocol, runs = SamplingRAPPOR(epsilon=4, domain_size=10, k=3, length=2), 200
    sizes = np.random.default_rng(163).integers(1, 3, 20_000)
    sets = weighted_sets(sizes, 10, 1.0, seed=167)
    truth = np.bincount(sets.items, minlength=10)[:3].astype(np.float64)
    rng = np.random.default_rng(173)
    estimates, variances = [], []
    for _ in range(runs):
        every = protocol.estimate(protocol.randomize(sets, rng=rng))
        estimates.append(every.counts[:3])
        variances.append(every.variance[:3])
    counts, stated = np.array(estimates), np.array(variances)
    assert np.all(stated > 0)  # selected in every run
    z = (counts.mean(axis=0) - truth) / np.sqrt(counts.var(axis=0, ddof=1) / runs)
    assert np.all(np.abs(z) < Z), z
    ratio = counts.var(axis=0, ddof=1) / stated.mean(axis=0)
    assert np.all((ratio > 0.65) & (ratio < 1.5)), ratio
