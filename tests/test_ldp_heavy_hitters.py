"""Heavy hitters over huge domains (seed 003): the Prefix Extending Method (Wang, Li and Jha 2019) and
TreeHist (Bassily, Nissim, Stemmer and Thakurta 2017).

Covered: the prefix and candidate bookkeeping, the wire format, calibration, the population-count
estimator (unbiased, with the stated variance), an eps-LDP audit of the client (group choice plus prefix
report), the acceptance run (10^6 clients, Zipf(1.1) over 2^32 values) and bad inputs.

Statistical tests are seeded; each states the false-failure rate of its bound.
"""

from __future__ import annotations

import math
from fractions import Fraction
from typing import Any

import numpy as np
import pytest
from scipy.special import ndtri
from scipy.stats import chi2, norm

from kakeibo import ldp
from kakeibo.audit import Event, audit, value_event
from kakeibo.ldp._hash import value_keys
from kakeibo.ldp.framework import CountEstimate
from kakeibo.ldp.heavy_hitters import (
    PEM,
    HeavyHitters,
    PrefixExtendingMethod,
    TreeHist,
    extend_prefixes,
    population_count_variance,
    prefixes,
)
from kakeibo.noise.source import RandomSource

PrefixProtocol = PrefixExtendingMethod | TreeHist


def zipf_keys(n: int, ranks: int, seed: int) -> np.ndarray:
    """``n`` clients whose ranks follow Zipf(1.1) truncated at ``ranks``, each rank mapped to its own random
    32-bit key."""
    rng = np.random.default_rng(seed)
    shares = np.arange(1, ranks + 1, dtype=np.float64) ** -1.1
    rank = rng.choice(ranks, size=n, p=shares / shares.sum())
    keys = rng.choice(2**32, size=ranks, replace=False)
    return keys[rank]


def true_top(keys: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """The ``k`` most frequent keys and their counts (ties: the smaller key)."""
    distinct, counts = np.unique(keys, return_counts=True)
    order = np.argsort(-counts, kind="stable")[:k]
    return distinct[order], counts[order]


# --- prefix and candidate bookkeeping -----------------------------------------------------------------


def test_prefixes_and_their_extensions() -> None:
    keys = np.array([0b101101, 0b000001, 0b111111])
    assert prefixes(keys, 6, 6).tolist() == keys.tolist()
    assert prefixes(keys, 6, 3).tolist() == [0b101, 0b000, 0b111]
    assert prefixes(keys, 6, 1).tolist() == [1, 0, 1]
    assert extend_prefixes(np.array([0b10, 0b01]), 2).tolist() == [8, 9, 10, 11, 4, 5, 6, 7]
    assert extend_prefixes(np.array([5, 3]), 0).tolist() == [5, 3]
    assert extend_prefixes(np.zeros(0, dtype=np.int64), 3).size == 0
    # Extending the prefix of a key by the key's next bits lands on the longer prefix.
    extended = extend_prefixes(prefixes(keys, 6, 2), 3).reshape(3, 8)
    assert all(prefixes(keys, 6, 5)[i] in extended[i] for i in range(3))


@pytest.mark.parametrize(
    ("bits", "k", "step", "start", "lengths"),
    [
        (32, 10, 4, None, (8, 12, 16, 20, 24, 28, 32)),  # gamma = ceil(log2 10) = 4
        (32, 10, 5, None, (9, 14, 19, 24, 29, 32)),  # the last step is shorter
        (10, 1, 3, None, (3, 6, 9, 10)),  # gamma = 0
        (10, 4, 4, 0, (4, 8, 10)),
        (3, 8, 4, None, (3,)),  # gamma capped at bits - 1; one group reports whole keys
    ],
)
def test_pem_prefix_lengths_follow_gamma_plus_t_eta(
    bits: int, k: int, step: int, start: int | None, lengths: tuple[int, ...]
) -> None:
    pem = PEM(epsilon=1, bits=bits, k=k, step=step, start=start)
    gamma = min(math.ceil(math.log2(k)), bits - 1) if start is None else start
    assert pem.start == gamma
    assert pem.prefix_lengths == lengths
    assert pem.groups == math.ceil((bits - gamma) / step)
    assert [o.domain_size for o in pem.oracles] == [2**s for s in lengths]


def test_treehist_has_one_group_per_level_and_a_final_group() -> None:
    tree = TreeHist(epsilon=1, bits=6, k=3)
    assert tree.prefix_lengths == (1, 2, 3, 4, 5, 6, 6)
    assert tree.groups == 7
    assert tree.cap == 12


def test_pem_prunes_to_the_largest_and_treehist_to_the_significant() -> None:
    counts = np.array([5.0, 50.0, 20.0, 40.0, 30.0, 10.0])
    pem = PEM(epsilon=1, bits=8, k=2, keep=3)
    estimate = CountEstimate(counts=counts, variance=np.ones(6), n=100, privacy_loss=pem.privacy_loss)
    assert pem._prune(estimate, 1.0).tolist() == [1, 3, 4]
    tree = TreeHist(epsilon=1, bits=8, k=1, cap=2)
    sd = 15.0 / tree.threshold_z  # the threshold is 15: nodes 1, 3, 4 and 2 pass, the cap keeps two
    assert tree._prune(estimate, sd).tolist() == [1, 3]
    assert tree._prune(estimate, 45.0 / tree.threshold_z).tolist() == [1]
    assert tree._prune(estimate, 60.0 / tree.threshold_z).tolist() == []


def test_reports_travel_per_group_with_the_protocol_parameters() -> None:
    pem = PEM(epsilon=Fraction(3, 2), bits=12, k=4, step=5)
    values = np.random.default_rng(0).integers(0, 2**12, 3000)
    batches = pem.randomize(values, rng=np.random.default_rng(1))
    assert len(batches) == pem.groups == 2
    assert sum(b.n for b in batches) == values.size
    for t, batch in enumerate(batches):
        assert batch.protocol == "PEM"
        params = dict(batch.params)
        assert params == pem.group_params(t)
        assert {k: params[k] for k in ("epsilon", "bits", "groups", "group", "prefix_bits", "oracle")} == {
            "epsilon": "3/2",
            "bits": 12,
            "groups": 2,
            "group": t,
            "prefix_bits": pem.prefix_lengths[t],
            "oracle": "OLH",
        }
        assert params["oracle_domain_size"] == 2 ** pem.prefix_lengths[t]
    # Through bytes and back, the server's answer is the same.
    decoded = [ldp.Reports.from_bytes(b.to_bytes()) for b in batches]
    first, again = pem.estimate(batches), pem.estimate(decoded)
    assert first.values.tolist() == again.values.tolist()
    assert np.array_equal(first.counts, again.counts)


def test_batches_from_many_clients_are_joined_by_group() -> None:
    tree = TreeHist(epsilon=2, bits=5, k=2)
    values = np.random.default_rng(2).integers(0, 32, 1500)
    rng = np.random.default_rng(3)
    parts = [tree.randomize(chunk, rng=rng) for chunk in np.array_split(values, 3)]
    flat = [batch for part in parts for batch in part]
    joined = [ldp.Reports.concatenate([part[t] for part in parts]) for t in range(tree.groups)]
    from_parts, from_joined = tree.estimate(flat), tree.estimate(joined)
    assert from_parts.values.tolist() == from_joined.values.tolist()
    assert np.array_equal(from_parts.counts, from_joined.counts)
    assert from_parts.n == values.size


def test_identify_reports_the_final_groups_estimates_of_the_keys_it_returns() -> None:
    for proto in (PEM(epsilon=2, bits=10, k=3), TreeHist(epsilon=2, bits=6, k=3)):
        values = np.repeat(np.arange(5) * 11, [900, 700, 500, 80, 60])
        batches = proto.randomize(values, rng=np.random.default_rng(4))
        found = proto.estimate(batches)
        assert isinstance(found, HeavyHitters) and found.n == values.size
        again = proto.estimate(batches, found.values)
        assert np.array_equal(found.counts, again.counts)
        assert np.array_equal(found.variance, again.variance)
        assert np.all(np.diff(found.counts) <= 0)


@pytest.mark.statistical
def test_string_heavy_hitters_come_back_as_their_keys() -> None:
    """3000 clients hold "apple", 2000 "pear", 500 distinct rare words. The two heavy keys' margins over
    any other prefix exceed 15 standard deviations at every group (false failure below 1e-40)."""
    words = ["apple"] * 3000 + ["pear"] * 2000 + [f"word{i}" for i in range(500)]
    pem = PEM(epsilon=4, bits=20, k=2)
    keys = pem.encode(words)
    assert keys[0] == int(value_keys(["apple"])[0] >> np.uint64(44))
    found = pem.estimate(pem.randomize(np.array(words), rng=np.random.default_rng(5)))
    assert sorted(found.values.tolist()) == sorted(pem.encode(["apple", "pear"]).tolist())


# --- calibration --------------------------------------------------------------------------------------


@pytest.mark.parametrize("cls", [PEM, TreeHist])
def test_every_group_reports_with_the_full_epsilon(cls: type[PrefixProtocol]) -> None:
    """Parallel composition: each client reports once, so every group's oracle spends all of epsilon."""
    proto = cls(epsilon=Fraction(7, 4), bits=9, k=2)
    assert proto.privacy_loss == ldp.OLH(epsilon=Fraction(7, 4), domain_size=2).privacy_loss
    assert proto.privacy_loss.epsilon == Fraction(7, 4)
    for oracle in proto.oracles:
        assert isinstance(oracle, ldp.OLH)
        assert oracle.params["epsilon"] == "7/4"


def test_treehist_threshold_is_the_bonferroni_normal_quantile() -> None:
    tree = TreeHist(epsilon=1, bits=16, k=5, cap=7, false_positive_rate=0.01)
    tests = 2 + 2 * 7 * 15
    assert tree.threshold_z == pytest.approx(float(-ndtri(0.01 / tests)), rel=1e-12)
    assert norm.sf(tree.threshold_z) * tests == pytest.approx(0.01, rel=1e-9)


def test_population_variance_is_the_scaled_oracle_variance_plus_sampling() -> None:
    oracle = ldp.GRR(epsilon=1, domain_size=16)
    n, n_t, c = 10_000, 2_500, np.array([0.0, 100.0, 4000.0])
    expected = (n / n_t) ** 2 * oracle.count_variance(n_t, c * n_t / n) + c * (1 - c / n) * n * (n - n_t) / (
        n_t * (n - 1)
    )
    assert np.allclose(population_count_variance(oracle, n, n_t, c), expected, rtol=1e-12)
    # A group of everybody: no sampling, the oracle's own variance.
    assert np.allclose(population_count_variance(oracle, n, n, c), oracle.count_variance(n, c), rtol=1e-12)


@pytest.mark.statistical
def test_groups_are_uniform() -> None:
    """Group sizes of 2 * 10^5 clients against the uniform multinomial: Pearson's chi-square below its
    1 - 1e-6 quantile (false failure 1e-6)."""
    tree = TreeHist(epsilon=1, bits=7, k=1, oracle=ldp.GRR)
    sizes = np.array(
        [b.n for b in tree.randomize(np.zeros(200_000, dtype=np.int64), rng=np.random.default_rng(6))]
    )
    expected = 200_000 / tree.groups
    statistic = float(((sizes - expected) ** 2 / expected).sum())
    assert statistic < chi2.isf(1e-6, tree.groups - 1), sizes


# --- the population-count estimator: unbiased, with the stated variance ---------------------------------


@pytest.mark.statistical
@pytest.mark.parametrize(
    ("proto", "runs"),
    [
        (PEM(epsilon=1, bits=6, k=2, start=1, step=3), 300),
        (TreeHist(epsilon=2, bits=5, k=2, oracle=ldp.GRR), 300),
    ],
    ids=["PEM-OLH", "TreeHist-GRR"],
)
def test_final_counts_are_unbiased_with_the_stated_variance(proto: PrefixProtocol, runs: int) -> None:
    """``runs`` independent populations' worth of reports (fresh groups each run); every key of the domain
    estimated each run.

    Unbiased: each key's mean within 5 standard errors (false failure 5.7e-7 per key, 4e-5 in all).
    Variance: the empirical variances summed over the keys, over the formula summed likewise (averaged over
    the runs' last-group sizes), within 5 standard errors of 1 (false failure 5.7e-7). The ratio's standard
    error is measured from the runs (the per-run sum of squared deviations is an average of i.i.d. terms,
    whatever the correlation between keys) and must be below 2%, so the check is at least as tight as 10%
    (about sqrt(2 / (runs * keys)): 1.0% and 1.4% here).
    """
    d, n = 2**proto.bits, 3000
    shares = np.arange(1, d + 1) ** -1.1
    values = np.random.default_rng(7).choice(d, size=n, p=shares / shares.sum())
    true = np.bincount(values, minlength=d).astype(np.float64)
    rng = np.random.default_rng(8)
    estimates, formula = np.empty((runs, d)), np.empty((runs, d))
    for r in range(runs):
        batches = proto.randomize(values, rng=rng)
        estimates[r] = proto.estimate(batches, np.arange(d)).counts
        formula[r] = proto.count_variance(n, batches[-1].n, true)
    z = (estimates.mean(axis=0) - true) / np.sqrt(formula.mean(axis=0) / runs)
    assert np.all(np.abs(z) < 5), z
    squared = ((estimates - estimates.mean(axis=0)) ** 2).sum(axis=1)
    expected = formula.mean(axis=0).sum()
    ratio = squared.sum() / (runs - 1) / expected
    standard_error = squared.std(ddof=1) / math.sqrt(runs) / expected
    print(f"{proto!r}: variance ratio {ratio:.4f}, standard error {standard_error:.4f}")
    assert standard_error < 0.02, standard_error
    assert abs(ratio - 1) < 5 * standard_error, (ratio, standard_error)


# --- privacy: the client randomizer (group choice + prefix report) --------------------------------------

AUDIT_TRIALS = 1_000_000
AUDIT_ALPHA = 1e-6


def view_sampler(proto: PrefixProtocol, x: int, x_prime: int) -> Any:
    """Each client's report reduced to ``4 group + 2 [supports prefix(x)] + [supports prefix(x')]``, where
    the prefixes are of that group's length: a post-processing of (group, report)."""

    def sample(value: int, n: int, rng: np.random.Generator) -> np.ndarray:
        views = []
        for t, batch in enumerate(proto.randomize(np.full(n, value), rng=rng)):
            oracle, length = proto.oracles[t], proto.prefix_lengths[t]
            inner = ldp.Reports(oracle.protocol, oracle.params, batch.arrays)
            x_t, x_prime_t = prefixes(np.array([x, x_prime]), proto.bits, length)
            holds_x = oracle.supports(inner, np.full(batch.n, x_t)).astype(np.int64)
            holds_x_prime = oracle.supports(inner, np.full(batch.n, x_prime_t)).astype(np.int64)
            views.append(4 * t + 2 * holds_x + holds_x_prime)
        return np.concatenate(views)

    return sample


def pattern_event(pattern: int) -> Event:
    """``{the view's support pattern is pattern}``, whatever the group."""

    def predicate(views: np.ndarray) -> np.ndarray:
        return np.asarray(views % 4 == pattern)

    return Event(f"pattern {pattern} in any group", predicate)


def audit_extremes(proto: PrefixProtocol, seed: int) -> Any:
    """Audit keys 0 and 2^bits - 1, whose prefixes differ at every length. Events: every view, and each
    support pattern in any group (the pattern "supports x, not x'" has likelihood ratio e^eps in every
    group, so its union over groups is the most powerful event)."""
    events = [value_event(v) for v in range(4 * proto.groups)] + [pattern_event(c) for c in range(4)]
    x, x_prime = 0, 2**proto.bits - 1
    return audit(
        view_sampler(proto, x, x_prime),
        x,
        x_prime,
        trials=AUDIT_TRIALS,
        alpha=AUDIT_ALPHA,
        events=events,
        rng=np.random.default_rng(seed),
    )


@pytest.mark.statistical
@pytest.mark.parametrize(
    "proto",
    [
        PEM(epsilon=1, bits=8, k=2, start=2, step=3),
        PEM(epsilon=4, bits=8, k=2, start=2, step=3),
        TreeHist(epsilon=2, bits=3, k=1),
    ],
    ids=["PEM-eps1", "PEM-eps4", "TreeHist-eps2"],
)
def test_client_is_epsilon_ldp_and_tight(proto: PrefixProtocol) -> None:
    """10^6 clients per key; the Clopper-Pearson bound (confidence 1 - 1e-6, Bonferroni over the events)
    must not refute epsilon (false failure 1e-6), and the best point estimate must come within 0.1 of it:
    its standard error is below 0.02 here, and the pattern's exact ratio is e^eps' with eps' the
    randomized response's rational epsilon (within 1e-3 of eps)."""
    result = audit_extremes(proto, seed=20261123)
    assert not result.refutes(proto.epsilon), str(result)
    assert max(e.epsilon_estimate for e in result.events) > proto.epsilon - 0.1, str(result)


class GroupByValuePEM(PEM):
    """A broken client: its group is its key modulo the number of groups, so the group leaks the value."""

    def _assign_groups(self, keys: np.ndarray, source: RandomSource) -> np.ndarray:
        return np.asarray(keys % self.groups, dtype=np.int64)


@pytest.mark.statistical
def test_audit_refutes_a_value_dependent_group_choice() -> None:
    broken = GroupByValuePEM(epsilon=1, bits=8, k=2, start=2, step=3)
    result = audit_extremes(broken, seed=9)
    assert result.refutes(1.0), str(result)


# --- acceptance: 10^6 clients, Zipf(1.1) over 2^32 ------------------------------------------------------

ACCEPT_N, ACCEPT_K, ACCEPT_ALPHA = 1_000_000, 10, 1e-3


@pytest.fixture(scope="module")
def zipf_population() -> np.ndarray:
    return zipf_keys(ACCEPT_N, 1_000_000, seed=2017)


def prefix_counts(
    distinct: np.ndarray, counts: np.ndarray, bits: int, length: int
) -> tuple[np.ndarray, np.ndarray]:
    """Every occupied ``length``-bit prefix of the sorted ``distinct`` keys and its number of holders."""
    heads = prefixes(distinct, bits, length)
    starts = np.flatnonzero(np.r_[True, heads[1:] != heads[:-1]])
    return heads[starts], np.add.reduceat(counts, starts)


def miss_bounds(proto: PrefixProtocol, keys: np.ndarray) -> np.ndarray:
    """Upper bounds on the probability that each true top-k key is not returned (normal approximation).

    A top-k key is lost at a group only if ``r`` candidates that are not prefixes of top-k keys
    (*outsiders*) out-score its prefix -- ``r = kept - (k - 1)`` for PEM's top-``keep`` and TreeHist's
    ``cap`` pruning, ``r = 1`` for the final top-k -- or, at TreeHist's tree levels, if its estimate falls
    below the threshold. A group estimates at most ``M`` candidates (``2^s_1`` at the first group, else the
    number kept times ``2^(s_t - s_(t-1))``) and the chance of being out-scored grows with the outsider's
    count, so the expected number of outsiders that out-score it is at most the sum ``S`` over the ``M``
    largest outsiders, and by Markov's inequality the chance that ``r`` of them do is at most ``S / r``.
    The difference of two estimates from one group has variance
    ``V_i + V_j + 2 C_i C_j (n - n_t) / (n_t (n - 1))``: OLH's support indicators of two distinct values
    are uncorrelated (its hash family is pairwise independent), and the last term is the (negative)
    covariance of the hypergeometric group counts. Group sizes are taken at ``n // groups``.
    """
    n, bits = keys.size, proto.bits
    distinct, counts = np.unique(keys, return_counts=True)
    top, _ = true_top(keys, proto.k)
    kept = proto.keep if isinstance(proto, PEM) else proto.cap
    size = n // proto.groups
    bounds = np.zeros(proto.k)
    for t, (length, oracle) in enumerate(zip(proto.prefix_lengths, proto.oracles, strict=True)):
        heads, totals = prefix_counts(distinct, counts, bits, length)
        mine = totals[np.searchsorted(heads, prefixes(top, bits, length))].astype(np.float64)
        outsider = np.sort(totals[~np.isin(heads, prefixes(top, bits, length))])[::-1].astype(np.float64)
        fan_out = 2**length if t == 0 else kept * 2 ** (length - proto.prefix_lengths[t - 1])
        rivals = np.zeros(fan_out)
        rivals[: min(fan_out, outsider.size)] = outsider[:fan_out]
        v_mine = population_count_variance(oracle, n, size, mine)
        v_rival = population_count_variance(oracle, n, size, rivals)
        covariance = np.outer(mine, rivals) * (n - size) / (size * (n - 1))
        spread = np.sqrt(v_mine[:, None] + v_rival[None, :] + 2 * covariance)
        needed = 1 if t == proto.groups - 1 else kept - (proto.k - 1)
        bounds += norm.sf((mine[:, None] - rivals[None, :]) / spread).sum(axis=1) / needed
        if isinstance(proto, TreeHist) and t < proto.groups - 1:
            empty_sd = math.sqrt(population_count_variance(oracle, n, size, 0.0).item())
            bounds += norm.sf((mine - proto.threshold_z * empty_sd) / np.sqrt(v_mine))
    return bounds


def check_acceptance(proto: PrefixProtocol, keys: np.ndarray, seed: int) -> tuple[HeavyHitters, float, int]:
    """Run ``proto`` on the population; assert that every key of G is found, G being the top-k keys whose
    miss bound is at most ``ACCEPT_ALPHA / k`` (all of G is found with probability >= 1 - ACCEPT_ALPHA).
    Returns what was found, the recall and |G|."""
    top, _ = true_top(keys, ACCEPT_K)
    bounds = miss_bounds(proto, keys)
    guaranteed = top[bounds <= ACCEPT_ALPHA / ACCEPT_K]
    found = proto.estimate(proto.randomize(keys, rng=np.random.default_rng(seed)))
    recall = float(np.isin(top, found.values).mean())
    assert found.values.size <= ACCEPT_K
    assert np.isin(guaranteed, found.values).all(), (recall, guaranteed, found.values, bounds)
    print(f"{type(proto).__name__}: recall {recall:.2f} at k = {ACCEPT_K}, certified {guaranteed.size}")
    return found, recall, guaranteed.size


@pytest.mark.statistical
def test_pem_finds_the_zipf_top_10_over_2_to_32(zipf_population: np.ndarray) -> None:
    """PEM (OLH, eta = 4, gamma = 4: 7 groups of about 143,000 clients). Every top-10 key whose
    union-bound miss probability is at most 1e-4 must be found (false failure <= 1e-3); for this
    population the bound certifies the top 7 and implies an expected recall of at least 0.87 (the 10th key
    is only about one standard deviation of a difference above the 11th, which no split into groups can
    resolve reliably). PEM returns exactly k keys, so its precision equals its recall."""
    pem = PEM(epsilon=4, bits=32, k=ACCEPT_K)
    found, recall, certified = check_acceptance(pem, zipf_population, seed=31)
    assert found.values.size == ACCEPT_K
    assert certified >= ACCEPT_K // 2  # the bound is not vacuous
    assert recall >= certified / ACCEPT_K


@pytest.mark.statistical
def test_treehist_finds_the_zipf_top_10_over_2_to_32(zipf_population: np.ndarray) -> None:
    """TreeHist (OLH, 33 groups of about 30,000 clients, the default false-positive rate 0.05). Every top-10
    key whose union-bound miss probability is at most 1e-4 must be found (false failure <= 1e-3); the bound
    certifies the top 4 and implies an expected recall of at least 0.74. TreeHist returns at most k keys, so
    its precision is at least its recall."""
    tree = TreeHist(epsilon=4, bits=32, k=ACCEPT_K)
    _, recall, certified = check_acceptance(tree, zipf_population, seed=32)
    assert certified >= 3  # the bound is not vacuous
    assert recall >= certified / ACCEPT_K


@pytest.mark.statistical
def test_treehist_returns_only_keys_that_someone_holds() -> None:
    """The threshold's guarantee: at false-positive rate 1e-3 no node that nobody holds survives the tree
    (false failure <= 1e-3, normal approximation). 20,000 clients: three heavy keys and 2,000 light ones."""
    rng = np.random.default_rng(12)
    keys = np.concatenate([np.repeat([5, 60_000, 31_337], 5000), rng.integers(0, 2**16, 5000)])
    tree = TreeHist(epsilon=2, bits=16, k=10, false_positive_rate=1e-3)
    found = tree.estimate(tree.randomize(keys, rng=np.random.default_rng(13)))
    assert np.isin([5, 60_000, 31_337], found.values).all()
    assert np.isin(found.values, keys).all(), found.values


# --- bad inputs -----------------------------------------------------------------------------------------


@pytest.mark.parametrize("cls", [PEM, TreeHist])
def test_bad_parameters_are_refused(cls: type[PrefixProtocol]) -> None:
    with pytest.raises(ValueError, match="epsilon"):
        cls(epsilon=0, bits=8, k=2)
    with pytest.raises(ValueError, match=r"bits must lie in 1\.\.40, got 41"):
        cls(epsilon=1, bits=41, k=2)
    with pytest.raises(TypeError, match="bits must be an integer, not float"):
        cls(epsilon=1, bits=8.0, k=2)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"k must lie in 1\.\."):
        cls(epsilon=1, bits=8, k=0)
    with pytest.raises(TypeError, match="oracle must be a FrequencyOracle class such as OLH"):
        cls(epsilon=1, bits=8, k=2, oracle=ldp.OLH(epsilon=1, domain_size=4))  # type: ignore[arg-type]
    with pytest.raises(
        TypeError, match=r"oracle LocalHashing must be constructible as LocalHashing\(epsilon="
    ):
        cls(epsilon=1, bits=8, k=2, oracle=ldp.LocalHashing)
    with pytest.raises(
        ValueError, match=r"OUE sends \d+ bits per report over 2\*\*\d+ prefixes; use a local hashing"
    ):
        cls(epsilon=1, bits=32, k=2, oracle=ldp.OUE)


def test_bad_pem_and_treehist_settings_are_refused() -> None:
    with pytest.raises(ValueError, match=r"start must lie in 0\.\.7, got 8"):
        PEM(epsilon=1, bits=8, k=2, start=8)
    with pytest.raises(ValueError, match=r"step must lie in 1\.\.40, got 0"):
        PEM(epsilon=1, bits=8, k=2, step=0)
    with pytest.raises(ValueError, match=r"keep must lie in 4\.\."):
        PEM(epsilon=1, bits=8, k=4, keep=3)
    with pytest.raises(
        ValueError, match="exceed the limit of 65536 candidates per group; use a smaller step"
    ):
        PEM(epsilon=1, bits=32, k=2, step=17)
    with pytest.raises(ValueError, match=r"cap must lie in 5\.\."):
        TreeHist(epsilon=1, bits=8, k=5, cap=4)
    with pytest.raises(
        ValueError, match="false_positive_rate must be a probability strictly between 0 and 1"
    ):
        TreeHist(epsilon=1, bits=8, k=2, false_positive_rate=1.0)


def test_bad_values_are_refused() -> None:
    pem = PEM(epsilon=1, bits=8, k=2)
    with pytest.raises(ValueError, match=r"values must be indices in 0\.\.255; got 256"):
        pem.randomize([1, 256])
    with pytest.raises(ValueError, match=r"values must be indices in 0\.\.255; got -1"):
        pem.randomize([-1, 3])
    with pytest.raises(ValueError, match="1-d array"):
        pem.randomize(np.zeros((2, 2), dtype=np.int64))
    with pytest.raises(ValueError, match=r"whole indices"):
        pem.randomize([0.5])
    with pytest.raises(TypeError, match="values must be non-negative integers, or all strings or all bytes"):
        pem.encode(np.array(["a", 3], dtype=object))
    with pytest.raises(TypeError, match="rng must be None"):
        pem.randomize([1, 2], rng=3)  # type: ignore[arg-type]


def test_bad_report_batches_are_refused() -> None:
    pem = PEM(epsilon=1, bits=8, k=2, start=2, step=3)
    batches = pem.randomize(np.arange(200) % 256, rng=np.random.default_rng(10))
    with pytest.raises(TypeError, match="pass the list of report batches that randomize returns"):
        pem.estimate(batches[0])  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="every batch must be a Reports object, got str"):
        pem.estimate([*batches, "report"])  # type: ignore[list-item]
    with pytest.raises(ValueError, match=r"groups \[1\] have no reports"):
        pem.estimate(batches[:1])
    other = PEM(epsilon=2, bits=8, k=2, start=2, step=3)
    with pytest.raises(ValueError, match=r"other parameters .*epsilon: reports '1' vs server '2'"):
        other.estimate(batches)
    tree = TreeHist(epsilon=1, bits=8, k=2)
    with pytest.raises(ValueError, match="made by PEM, not TreeHist"):
        tree.estimate([ldp.Reports("PEM", {**b.params, "group": 0}, b.arrays) for b in batches])
    for group in (5, "x" * 10_000):  # what a client wrote is not echoed back
        wrong_group = ldp.Reports("P" * 1000, {**batches[0].params, "group": group}, batches[0].arrays)
        with pytest.raises(ValueError, match=r"^a batch names a group that is not one of 0\.\.1\.$"):
            pem.estimate([wrong_group, *batches])
    bad_values = {**batches[1].arrays, "value": np.full(batches[1].n, 10_000, dtype=np.uint16)}
    with pytest.raises(ValueError, match="holds values outside"):
        pem.estimate([batches[0], ldp.Reports("PEM", batches[1].params, bad_values)])
    with pytest.raises(ValueError, match=r"candidates must be indices in 0\.\.255"):
        pem.estimate(batches, [256])


def test_heavy_hitters_and_candidate_counts_carry_the_per_client_loss() -> None:
    """One report per client through its group's oracle: the protocol's loss, which is every oracle's
    (issue 16)."""
    for proto in (PEM(epsilon=2, bits=8, k=2), TreeHist(epsilon=2, bits=5, k=2)):
        batches = proto.randomize(np.repeat([3, 17, 30], [400, 300, 50]), rng=np.random.default_rng(6))
        found, counted = proto.estimate(batches), proto.estimate(batches, [3, 30])
        assert {oracle.privacy_loss for oracle in proto.oracles} == {proto.privacy_loss}
        assert found.privacy_loss == counted.privacy_loss == proto.privacy_loss
