"""Set-valued LDP (Wang, Li and Jha 2018; seed 003, "Itemset mining"): the padding-and-sampling oracle's
privacy (audits of the amplified GRR and of OLH), its calibration, unbiasedness and variance, the adaptive
oracle choice, SVIM and SVSM end to end, the wire format and bad inputs.

Statistical tests are seeded; each states the false-failure rate of its bound.
"""

from __future__ import annotations

import itertools
import math
from decimal import Decimal, localcontext
from fractions import Fraction
from typing import Any

import numpy as np
import pytest

from kakeibo import ldp
from kakeibo.audit import audit
from kakeibo.audit._events import value_event
from kakeibo.ldp.itemsets import (
    SVIM,
    SVSM,
    FrequentItems,
    LengthChoice,
    _held_itemsets,
)
from kakeibo.ldp.padding import PaddingSamplingOracle, UserSets, amplified_epsilon

Z_BONFERRONI = 5.0  # two-sided normal tail 5.7e-7 per check


def weighted_sets(sizes: np.ndarray, d: int, exponent: float, seed: int) -> UserSets:
    """User ``j`` holds ``sizes[j]`` distinct items of ``0 .. d-1`` drawn without replacement with weights
    ``(i + 1)^-exponent`` (Efraimidis-Spirakis: the smallest ``Exp(1) / w_i`` keys), one block per size."""
    gen = np.random.default_rng(seed)
    weights = np.arange(1, d + 1, dtype=np.float64) ** -exponent
    indptr = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
    items = np.empty(indptr[-1], dtype=np.int64)
    for size in np.unique(sizes[sizes > 0]).tolist():
        users = np.flatnonzero(sizes == size)
        keys = gen.exponential(size=(users.size, d)) / weights
        chosen = np.argpartition(keys, size - 1, axis=1)[:, :size]
        items[indptr[users][:, None] + np.arange(size)] = chosen
    return UserSets(indptr, items)


def tiled(sets: UserSets, copies: int) -> UserSets:
    """``copies`` back-to-back copies of the same users."""
    sizes = np.tile(sets.sizes, copies)
    return UserSets(np.concatenate([[0], np.cumsum(sizes)]), np.tile(sets.items, copies))


def split_runs(reports: ldp.Reports, runs: int) -> list[ldp.Reports]:
    n = reports.n // runs
    return [
        ldp.Reports(
            reports.protocol, reports.params, {k: a[r * n : (r + 1) * n] for k, a in reports.arrays.items()}
        )
        for r in range(runs)
    ]


# --- (1) privacy audits -------------------------------------------------------------------------------------

TRIALS = 1_000_000
ALPHA = 1e-6  # false-failure rate of each "not refuted" assertion
LENGTH, ITEMS = 3, 8
SET_V, SET_V_PRIME = np.arange(LENGTH), np.arange(LENGTH, 2 * LENGTH)
EVENTS = [value_event(code) for code in range(4)]


def supports_any(psfo: PaddingSamplingOracle, reports: ldp.Reports, items: np.ndarray) -> np.ndarray:
    held = [psfo.supports(reports, np.full(reports.n, item)) for item in items.tolist()]
    return np.logical_or.reduce(held).astype(np.int64)


def audit_disjoint_sets(psfo: PaddingSamplingOracle, seed: int) -> Any:
    """The audit of ``psfo`` on the worst-case pair: two disjoint full sets of ``l`` items, 10^6 reports each,
    each report reduced to ``2 [supports some item of v] + [supports some item of v']``."""

    def sample(which: int, n: int, rng: np.random.Generator) -> np.ndarray:
        reports = psfo.randomize(np.tile((SET_V, SET_V_PRIME)[which], (n, 1)), rng=rng)
        return 2 * supports_any(psfo, reports, SET_V) + supports_any(psfo, reports, SET_V_PRIME)

    return audit(sample, 0, 1, trials=TRIALS, alpha=ALPHA, events=EVENTS, rng=np.random.default_rng(seed))


@pytest.mark.statistical
@pytest.mark.parametrize("epsilon", [1.0, 4.0])
@pytest.mark.parametrize("oracle", ["GRR", "OLH"])
def test_psfo_client_is_epsilon_ldp_on_disjoint_full_sets(oracle: str, epsilon: float) -> None:
    """Not refuted at epsilon (confidence 1 - 1e-6). The amplified GRR is tight: "supports some item of v,
    none of v'" has likelihood ratio ``(p' + (l - 1) q') / (l q') = e^eps`` exactly (up to eps' rounding
    by 2^-32), so the point estimate must come within 0.1 of epsilon (its sampling error is below 0.01 at
    10^6 reports). OLH is not amplified, so it has no tightness claim here."""
    psfo = PaddingSamplingOracle(epsilon=epsilon, domain_size=ITEMS, length=LENGTH, oracle=oracle)
    result = audit_disjoint_sets(psfo, 20260517)
    assert not result.refutes(epsilon), str(result)
    if oracle == "GRR":
        assert max(e.epsilon_estimate for e in result.events) > epsilon - 0.1, str(result)


class OverAmplifiedPSFO(PaddingSamplingOracle):
    """A broken PSFO: GRR runs at the epsilon amplified from ``epsilon + 0.25``, so the loss is eps + 0.25."""

    def __init__(self, *, epsilon: float, domain_size: int, length: int) -> None:
        super().__init__(epsilon=epsilon, domain_size=domain_size, length=length, oracle="GRR")
        too_much = amplified_epsilon(Fraction(epsilon) + Fraction(1, 4), length)
        self._oracle = ldp.GRR(epsilon=too_much, domain_size=domain_size + length)


@pytest.mark.statistical
def test_audit_refutes_an_over_amplified_grr() -> None:
    """Negative control: the audit has the power to see a 0.25 over-spend (the event's likelihood ratio is
    ``e^1.25``; at 10^6 reports the lower bound sits within about 0.02 of it, so missing the refutation
    needs a many-sigma deviation)."""
    result = audit_disjoint_sets(OverAmplifiedPSFO(epsilon=1.0, domain_size=ITEMS, length=LENGTH), 11)
    assert result.refutes(1.0), str(result)


# --- (2) calibration ----------------------------------------------------------------------------------------


@pytest.mark.parametrize("length", [1, 2, 7, 100])
@pytest.mark.parametrize("epsilon", [0.25, 1.0, 4.0, 20.0])
def test_amplified_grr_epsilon_is_rounded_down_and_safe(epsilon: float, length: int) -> None:
    """``eps'`` lies within ``3 * 2^-32`` below ``ln(l (e^eps - 1) + 1)`` (Wang et al. 2018, Sec. IV) and
    ``(e^eps' + l - 1) / l <= e^eps`` holds in 80-digit arithmetic and for the GRR coins actually used."""
    psfo = PaddingSamplingOracle(epsilon=epsilon, domain_size=50, length=length, oracle="GRR")
    eps_prime = Fraction(str(psfo.params["oracle_epsilon"]))
    target = math.log(length * math.expm1(epsilon) + 1)
    assert target - 3 * 2**-32 - 1e-12 <= float(eps_prime) <= target + 1e-12
    if length == 1:
        assert eps_prime == Fraction(epsilon)
    with localcontext() as ctx:
        ctx.prec = 80
        amplified = (Decimal(eps_prime.numerator) / Decimal(eps_prime.denominator)).exp()
        assert (amplified + length - 1) / length <= Decimal(epsilon).exp()
    p, q = psfo.oracle.p_star, psfo.oracle.q_star
    ratio = (p + (length - 1) * q) / (length * q)
    assert math.exp(epsilon) * (1 - 1e-6) <= ratio <= math.exp(epsilon) * (1 + 1e-12)
    assert psfo.oracle.domain_size == 50 + length


def test_olh_inner_oracle_runs_at_epsilon_and_params_describe_it() -> None:
    psfo = PaddingSamplingOracle(epsilon=2, domain_size=40, length=5, oracle="OLH")
    assert psfo.oracle.epsilon == 2.0 and psfo.oracle.domain_size == 45
    assert psfo.params["oracle"] == "OLH" and psfo.params["oracle_buckets"] == psfo.oracle.params["buckets"]
    assert psfo.privacy_loss.epsilon == 2 and "item sets" in psfo.neighbour


# --- (2b) the estimator: unbiased with the stated variance; the truncation bias -----------------------------


@pytest.mark.statistical
@pytest.mark.parametrize("epsilon", [1.0, 4.0])
@pytest.mark.parametrize("oracle", ["GRR", "OLH"])
def test_psfo_estimate_is_unbiased_with_the_stated_variance(oracle: str, epsilon: float) -> None:
    """Sets of at most ``l`` items: over 1000 runs each item's mean estimate is within 5 standard errors of
    its count (12 checks at 5.7e-7 each), and the pooled empirical variance is within 6% of
    :meth:`count_variance`. The pooled ratio's standard deviation is about ``sqrt(2 / (runs d)) = 1.3%`` for
    independent items (at most ``sqrt(2 / runs) = 4.5%`` if they were perfectly correlated), so 6% is
    4.6 of them; false-failure rate below 1e-5 per case."""
    d, length, n, runs = 12, 3, 2000, 1000
    sets = weighted_sets(np.random.default_rng(1).integers(0, length + 1, size=n), d, 1.0, seed=2)
    psfo = PaddingSamplingOracle(epsilon=epsilon, domain_size=d, length=length, oracle=oracle)
    reports = psfo.randomize(tiled(sets, runs), rng=np.random.default_rng(3))
    estimates = np.array([psfo.estimate(part).counts for part in split_runs(reports, runs)])
    true = np.bincount(sets.items, minlength=d).astype(np.float64)
    formula = psfo.count_variance(n, true)
    z = (estimates.mean(axis=0) - true) / np.sqrt(formula / runs)
    assert np.all(np.abs(z) < Z_BONFERRONI), z
    ratio = estimates.var(axis=0, ddof=1).sum() / formula.sum()
    assert abs(ratio - 1) < 0.06, ratio


@pytest.mark.statistical
def test_truncation_biases_each_holder_by_l_over_set_size() -> None:
    """Sets of up to ``2 l`` items: the mean estimate is ``sum over holders of min(1, l / s)`` (the
    documented under-estimate), within 5 empirical standard errors per item (false-failure rate 7e-6)."""
    d, length, n, runs = 12, 3, 2000, 500
    sizes = np.random.default_rng(4).integers(1, 2 * length + 1, size=n)
    sets = weighted_sets(sizes, d, 1.0, seed=5)
    psfo = PaddingSamplingOracle(epsilon=2.0, domain_size=d, length=length)
    reports = psfo.randomize(tiled(sets, runs), rng=np.random.default_rng(6))
    estimates = np.array([psfo.estimate(part).counts for part in split_runs(reports, runs)])
    holder_sizes = np.repeat(sets.sizes, sets.sizes)
    expected = np.bincount(sets.items, weights=np.minimum(1.0, length / holder_sizes), minlength=d)
    z = (estimates.mean(axis=0) - expected) / (estimates.std(axis=0, ddof=1) / math.sqrt(runs))
    assert np.all(np.abs(z) < Z_BONFERRONI), z
    assert np.all(expected <= np.bincount(sets.items, minlength=d))


def test_estimate_candidates_matches_the_full_estimate() -> None:
    sets = weighted_sets(np.full(500, 2), 30, 1.0, seed=7)
    for oracle in ("GRR", "OLH"):
        psfo = PaddingSamplingOracle(epsilon=1.5, domain_size=30, length=2, oracle=oracle)
        reports = psfo.randomize(sets, rng=np.random.default_rng(8))
        full, some = psfo.estimate(reports), psfo.estimate(reports, [29, 0, 7])
        np.testing.assert_allclose(some.counts, full.counts[[29, 0, 7]])
        np.testing.assert_allclose(some.variance, full.variance[[29, 0, 7]])


# --- (3) the adaptive choice --------------------------------------------------------------------------------


def per_report_variance(oracle: ldp.FrequencyOracle) -> float:
    """Wang et al. 2017, Eq. (2) at frequency 0, from the oracle's own p* and q*."""
    p, q = oracle.p_star, oracle.q_star
    return q * (1 - q) / (p - q) ** 2


@pytest.mark.parametrize("epsilon", [0.5, 1.0, 2.0, 4.0])
@pytest.mark.parametrize("length", [1, 2, 4, 8])
def test_adaptive_choice_is_the_direct_variance_comparison(length: int, epsilon: float) -> None:
    """The adaptive oracle is the lower-variance one of GRR(eps') and OLH(eps) over ``d + l`` values, and away
    from the threshold (10%, more than OLH's prime-bucket and eps' rounding effects) it follows the closed
    form: GRR iff ``d < (4 l^2 - l) e^eps + 1``."""
    threshold = (4 * length**2 - length) * math.exp(epsilon) + 1
    for d in [2, 8, 30, 64, 256, 1024, 4096, 2**16, 2**20]:
        chosen = PaddingSamplingOracle(epsilon=epsilon, domain_size=d, length=length).oracle
        grr = PaddingSamplingOracle(epsilon=epsilon, domain_size=d, length=length, oracle="GRR").oracle
        olh = PaddingSamplingOracle(epsilon=epsilon, domain_size=d, length=length, oracle="OLH").oracle
        better = grr if per_report_variance(grr) <= per_report_variance(olh) else olh
        assert chosen.protocol == better.protocol, (d, length, epsilon)
        if abs(d - threshold) > 0.1 * threshold:
            assert (chosen.protocol == "GRR") == (d < threshold), (d, length, epsilon)


def test_the_seeds_inequality_is_reversed() -> None:
    """The seed says GRR when ``|J| > (4 l^2 - l) e^eps + 1``; at d = 2^16, l = 2, eps = 1 (far above the
    threshold 29.5) that would pick GRR, whose variance is over 100 times OLH's."""
    d, length = 2**16, 2
    grr = PaddingSamplingOracle(epsilon=1, domain_size=d, length=length, oracle="GRR").oracle
    olh = PaddingSamplingOracle(epsilon=1, domain_size=d, length=length, oracle="OLH").oracle
    assert per_report_variance(grr) > 100 * per_report_variance(olh)
    assert PaddingSamplingOracle(epsilon=1, domain_size=d, length=length).oracle.protocol == "OLH"


# --- SVIM step 2: the length and the update factor ----------------------------------------------------------


@pytest.mark.statistical
def test_length_is_the_size_percentile_and_the_update_factor_undoes_truncation() -> None:
    """At epsilon = 12 the size reports are almost exact (GRR over 0..2k keeps the truth with probability
    above 0.9999), so ``l`` is the true 90th percentile of the sizes >= 1 and the factor is within 5 of its
    standard errors of ``E[s] / E[min(s, l)]`` (false-failure rate 5.7e-7)."""
    svim = SVIM(epsilon=12, domain_size=16, k=4)
    sizes = np.random.default_rng(9).choice(
        np.arange(9), size=20_000, p=[0.1, 0.2, 0.2, 0.1, 0.1, 0.1, 0.1, 0.05, 0.05]
    )
    sets = weighted_sets(sizes, 16, 0.5, seed=10)
    candidates = np.arange(8)  # sizes count candidates held; the top 8 items carry most of each set
    held = np.bincount(np.repeat(np.arange(sets.n_users), sets.sizes)[sets.items < 8], minlength=sets.n_users)
    choice = svim.choose_length(
        svim.report_sizes(sets, candidates, rng=np.random.default_rng(11)), candidates
    )
    positive = np.sort(held[held > 0])
    assert choice.length == positive[math.ceil(0.9 * positive.size) - 1]
    exact = positive.sum() / np.minimum(positive, choice.length).sum()
    assert abs(choice.update_factor - exact) < Z_BONFERRONI * math.sqrt(choice.update_variance) + 1e-9
    np.testing.assert_allclose(choice.size_shares.sum(), 1.0)


# --- (4) SVIM and SVSM end to end ---------------------------------------------------------------------------


class ItemsetCounts:
    """Exact number of users holding each itemset (computed on demand, one boolean column per item)."""

    def __init__(self, sets: UserSets) -> None:
        self._sets, self._rows = sets, np.repeat(np.arange(sets.n_users), sets.sizes)
        self._columns: dict[int, np.ndarray] = {}
        self.singles = np.bincount(sets.items)

    def _column(self, item: int) -> np.ndarray:
        if item not in self._columns:
            holds = np.zeros(self._sets.n_users, dtype=bool)
            holds[self._rows[self._sets.items == item]] = True
            self._columns[item] = holds
        return self._columns[item]

    def __call__(self, itemset: tuple[int, ...]) -> int:
        if len(itemset) == 1:
            return int(self.singles[itemset[0]])
        return int(np.logical_and.reduce([self._column(i) for i in itemset]).sum())


def separated(
    truth: list[Any], count: Any, pool: list[Any], counts: np.ndarray, variance: np.ndarray
) -> set[Any]:
    """The labels of ``truth`` (the true top k) that are in ``pool`` and lead every pool member outside
    ``truth`` by more than 5 standard errors of both estimates. Such a label is returned unless one of the
    pool's estimates errs by more than 5 of its standard errors: probability below ``len(pool) * 5.7e-7``."""
    se = dict(zip(pool, np.sqrt(variance), strict=True))
    outsiders = [label for label in pool if label not in truth]
    return {
        x
        for x in truth
        if x in se and all(count(x) - count(y) > Z_BONFERRONI * (se[x] + se[y]) for y in outsiders)
    }


@pytest.fixture(scope="module")
def zipf_population() -> UserSets:
    """2*10^5 users, d = 256 items of Zipf(1.1) popularity, set sizes uniform in 1..10."""
    return weighted_sets(np.random.default_rng(12).integers(1, 11, size=200_000), 256, 1.1, seed=13)


@pytest.mark.statistical
def test_svim_finds_the_top_items_with_calibrated_errors(zipf_population: UserSets) -> None:
    """Epsilon = 4, k = 10. Every true top-10 item that reached the candidates and leads every other candidate
    by 5 standard errors of both estimates must be returned (false-failure rate 20 * 5.7e-7), so recall is at
    least their share. Power: items 1..8 lead the 11th by at least 7,276 users against 5 (SE_8 + SE_11) of
    about 6,100, item 9 by 4,281, so at least 7 of 10 must qualify (8 by design, one spare for the
    standard errors being estimates). The returned standard errors are calibrated: each returned item's
    error is within 5 of them (10 checks, 5.7e-6)."""
    sets, k = zipf_population, 10
    true_counts = np.bincount(sets.items, minlength=256)
    found = SVIM(epsilon=4, domain_size=256, k=k).run(sets, rng=np.random.default_rng(14))
    truth = np.argsort(-true_counts, kind="stable")[:k].tolist()
    estimate = found.candidate_estimate
    sure = separated(
        truth, lambda i: true_counts[i], found.candidates.tolist(), estimate.counts, estimate.variance
    )
    assert len(sure) >= 7, sure
    assert sure <= set(found.items.tolist()), (sure, found.items)
    z = (found.estimate.counts - true_counts[found.items]) / np.sqrt(found.estimate.variance)
    assert np.all(np.abs(z) < Z_BONFERRONI), z
    assert found.estimate.n == sets.n_users and 1 <= found.length_choice.length <= 2 * k
    recall = len(set(truth) & set(found.items.tolist())) / k
    print(f"SVIM eps=4 top-10 recall {recall:.2f} (guaranteed {len(sure) / k:.1f})")


PLANTED = {(2, 5): 0.3, (3, 4): 0.25}


@pytest.fixture(scope="module")
def planted_population() -> UserSets:
    """2*10^5 users: Zipf(1.1) sets of 1..4 of 256 items, plus the pairs of ``PLANTED``, each added to a
    random share of the users."""
    n, d = 200_000, 256
    base = weighted_sets(np.random.default_rng(15).integers(1, 5, size=n), d, 1.1, seed=16)
    gen = np.random.default_rng(17)
    keys = [np.repeat(np.arange(n), base.sizes) * d + base.items]
    for pair, share in PLANTED.items():
        users = np.flatnonzero(gen.random(n) < share)
        keys.extend(users * d + item for item in pair)
    unique = np.unique(np.concatenate(keys))
    sizes = np.bincount(unique // d, minlength=n)
    return UserSets(np.concatenate([[0], np.cumsum(sizes)]), unique % d)


def true_top_itemsets(count: ItemsetCounts, k: int, leaders: int) -> list[tuple[int, ...]]:
    """The true top ``k`` itemsets: every single item and every pair and triple of the ``leaders`` most
    frequent items are counted; the result is exact when no triple makes the top ``k`` (a larger itemset
    holds no more users than its triples) and the next item after the leaders is below the ``k``-th count
    (asserted)."""
    order = np.argsort(-count.singles, kind="stable")
    labels = [(int(i),) for i in order] + [
        combo for size in (2, 3) for combo in itertools.combinations(sorted(order[:leaders].tolist()), size)
    ]
    ranked = sorted(labels, key=lambda label: -count(label))[:k]
    assert all(len(label) < 3 for label in ranked) and count.singles[order[leaders]] < count(ranked[-1])
    return ranked


@pytest.mark.statistical
def test_svsm_finds_the_planted_pairs_among_the_top_itemsets(planted_population: UserSets) -> None:
    """Epsilon = 4, k = 10. As in the SVIM test, every true top-10 itemset that leads every other pool member
    (the SVIM items and the candidate itemsets) by 5 standard errors of both estimates must be returned
    (false-failure rate below 30 * 5.7e-7). Power: both planted pairs lead the 11th itemset by 23,000 users or
    more, about twice 5 (SE + SE), so they must qualify, and at least 6 of the 10 must."""
    sets, k = planted_population, 10
    count = ItemsetCounts(sets)
    truth = true_top_itemsets(count, k, 16)
    found = SVSM(epsilon=4, domain_size=256, k=k).run(sets, rng=np.random.default_rng(18))
    pool = [(int(i),) for i in found.items.items] + list(found.candidates)
    counts = np.concatenate([found.items.estimate.counts, found.candidate_estimate.counts])
    variance = np.concatenate([found.items.estimate.variance, found.candidate_estimate.variance])
    sure = separated(truth, count, pool, counts, variance)
    assert set(PLANTED) <= sure and len(sure) >= 6, sure
    assert sure <= set(found.itemsets), (sure, found.itemsets)
    hits = len(set(found.itemsets) & set(truth))
    print(
        f"SVSM eps=4 top-10 precision {hits / k:.2f} recall {hits / k:.2f} (guaranteed {len(sure) / k:.1f})"
    )


def test_candidate_itemsets_follow_the_guessed_frequencies() -> None:
    """Guesses ``0.9 c_i / c_max``: items with counts 100, 80, 50, 10 give 0.9, 0.72, 0.45, 0.09, so the
    best pairs and triples by product are (0,1) .648, (0,2) .405, (1,2) .324, (0,1,2) .29 (then (0,3))."""
    svsm = SVSM(epsilon=1, domain_size=10, k=3)
    loss = svsm.privacy_loss
    zero = ldp.CountEstimate(np.zeros(4), np.zeros(4), 1000, loss)
    estimate = ldp.CountEstimate(np.array([100.0, 80.0, 50.0, 10.0]), np.zeros(4), 1000, loss)
    choice = LengthChoice(
        length=1, update_factor=1.0, update_variance=0.0, size_shares=np.ones(1), privacy_loss=loss
    )
    items = FrequentItems(np.array([7, 3, 5, 9]), estimate, np.array([7, 3, 5, 9]), zero, choice)
    assert svsm.candidate_itemsets(items)[:4] == ((3, 7), (5, 7), (3, 5), (3, 5, 7))
    assert len(svsm.candidate_itemsets(items)) == 6


def test_user_sets_select_restrict_and_hold_itemsets() -> None:
    """The vectorised set operations against a per-user loop."""
    lists = [[5, 1, 9], [], [2, 9], [9, 5, 2, 1], [7]]
    sets = UserSets.from_lists(lists)
    picked = sets.select(np.array([3, 0, 1]))
    assert [sorted(picked.items[a:b].tolist()) for a, b in itertools.pairwise(picked.indptr)] == [
        [1, 2, 5, 9],
        [1, 5, 9],
        [],
    ]
    restricted = sets.positions_in(np.array([9, 2]), 10)
    assert [restricted.items[a:b].tolist() for a, b in itertools.pairwise(restricted.indptr)] == [
        [0],
        [],
        [1, 0],
        [0, 1],
        [],
    ]
    itemsets = ((1, 5), (2, 9), (1, 2, 9), (5, 7))
    held = _held_itemsets(sets, itemsets, 10)
    expected = [[c for c, itemset in enumerate(itemsets) if set(itemset) <= set(v)] for v in lists]
    assert [held.items[a:b].tolist() for a, b in itertools.pairwise(held.indptr)] == expected


# --- wire format --------------------------------------------------------------------------------------------


def test_reports_round_trip_and_mismatched_servers_refuse() -> None:
    sets = UserSets.from_lists([[0, 1], [2], [], [1, 3, 4]])
    psfo = PaddingSamplingOracle(epsilon=1, domain_size=5, length=2)
    reports = psfo.randomize(sets, rng=np.random.default_rng(19))
    again = ldp.Reports.from_bytes(reports.to_bytes())
    np.testing.assert_array_equal(psfo.estimate(again).counts, psfo.estimate(reports).counts)
    with pytest.raises(ValueError, match="other parameters"):
        PaddingSamplingOracle(epsilon=1, domain_size=5, length=3).estimate(reports)
    tampered = ldp.Reports(reports.protocol, reports.params, {"value": np.full(4, 200, dtype=np.uint8)})
    with pytest.raises(ValueError, match="outside"):
        psfo.estimate(tampered)


def test_svim_reports_are_bound_to_their_candidates() -> None:
    svim = SVIM(epsilon=2, domain_size=10, k=2)
    sets = [[0, 1], [1, 2], [3]]
    sizes = svim.report_sizes(sets, [0, 1, 2, 3], rng=np.random.default_rng(20))
    with pytest.raises(ValueError, match="other parameters"):
        svim.choose_length(sizes, [0, 1, 2, 4])
    counts = svim.report_items(sets, [0, 1, 2, 3], 2, rng=np.random.default_rng(21))
    choice = svim.choose_length(sizes, [0, 1, 2, 3])
    with pytest.raises(ValueError, match="other parameters"):
        svim.estimate(counts, [3, 2, 1, 0], choice, 10)


# --- (5) bad inputs -----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("make", "error", "message"),
    [
        (lambda: UserSets([0, 2], [1, 1]), ValueError, "holds item 1 twice"),
        (lambda: UserSets([0, 1], [-1]), ValueError, "non-negative"),
        (lambda: UserSets([0, 1], [0.5]), TypeError, "must hold integers"),
        (lambda: UserSets([0, 3], [1, 2]), ValueError, "indptr must start at 0"),
        (lambda: UserSets([1, 2], [1, 2]), ValueError, "indptr must start at 0"),
        (lambda: UserSets.from_lists([[1, 2], [[3]]]), ValueError, "1-d array"),
        (lambda: PaddingSamplingOracle(epsilon=1, domain_size=5, length=0), ValueError, "length must lie"),
        (lambda: PaddingSamplingOracle(epsilon=1, domain_size=5, length=True), TypeError, "length must be"),
        (
            lambda: PaddingSamplingOracle(epsilon=1, domain_size=5, length=2, oracle="OUE"),
            ValueError,
            "one of",
        ),
        (lambda: PaddingSamplingOracle(epsilon=0, domain_size=5, length=2), ValueError, "epsilon must lie"),
        (lambda: PaddingSamplingOracle(epsilon=1, domain_size=1, length=2), ValueError, "domain_size"),
        (lambda: SVIM(epsilon=1, domain_size=8, k=9), ValueError, "k must lie in 1..8"),
        (lambda: SVIM(epsilon=1, domain_size=8, k=2, split=(0.5, 0.5)), ValueError, "three positive shares"),
        (lambda: SVIM(epsilon=1, domain_size=8, k=2, percentile=0), ValueError, "percentile"),
        (lambda: SVSM(epsilon=1, domain_size=8, k=2), ValueError, "k must lie in 3..8"),
        (lambda: SVSM(epsilon=1, domain_size=100, k=65), ValueError, "k must lie in 3..64"),
    ],
)
def test_bad_constructions_are_refused(make: Any, error: type[Exception], message: str) -> None:
    with pytest.raises(error, match=message):
        make()


def test_bad_calls_are_refused() -> None:
    psfo = PaddingSamplingOracle(epsilon=1, domain_size=5, length=2)
    with pytest.raises(ValueError, match=r"items must be indices in 0..4; got 5"):
        psfo.randomize([[1, 5]])
    with pytest.raises(TypeError, match="sets must be UserSets"):
        psfo.randomize("0,1")
    with pytest.raises(ValueError, match="must be 2-d"):
        psfo.randomize(np.zeros((2, 2, 2), dtype=int))
    svim = SVIM(epsilon=1, domain_size=6, k=2)
    with pytest.raises(ValueError, match="too few"):
        svim.run([[0], [1]])
    with pytest.raises(ValueError, match="distinct items"):
        svim.report_sizes([[0]], [1, 1])
    with pytest.raises(ValueError, match=r"candidates must be indices in 0..5"):
        svim.report_items([[0]], [1, 6], 2)
    reports = svim.report_items([[0], [1]], [0, 1], 1, rng=np.random.default_rng(0))
    with pytest.raises(ValueError, match="at least two size reports"):
        svim.choose_length(svim.report_sizes([[0]], [0, 1], rng=np.random.default_rng(1)), [0, 1])
    choice = svim.choose_length(svim.report_sizes([[0], []], [0, 1], rng=np.random.default_rng(1)), [0, 1])
    with pytest.raises(ValueError, match="at least the number of reports"):
        svim.estimate(reports, [0, 1], choice, 1)
    with pytest.raises(TypeError, match="n_users must be an integer"):
        svim.estimate(reports, [0, 1], choice, 2.0)
    svsm = SVSM(epsilon=1, domain_size=6, k=3)
    with pytest.raises(ValueError, match="at least two distinct items"):
        svsm.report_sizes([[0, 1]], [(0,), (1, 2)])
    with pytest.raises(ValueError, match="at least two distinct items"):
        svsm.report_sizes([[0, 1]], [(0, 1), (1, 0)])


def test_psfo_estimates_carry_the_set_level_loss_not_the_amplified_one() -> None:
    """PSFO's reports cost ``PureDP(epsilon)`` per user, though the inner GRR runs at the larger amplified
    ``eps'`` (issue 16)."""
    sets = weighted_sets(np.full(300, 2), 12, 1.0, seed=9)
    for oracle in ("GRR", "OLH"):
        psfo = PaddingSamplingOracle(epsilon=1.5, domain_size=12, length=3, oracle=oracle)
        reports = psfo.randomize(sets, rng=np.random.default_rng(10))
        for estimate in (psfo.estimate(reports), psfo.estimate(reports, [4, 0])):
            assert estimate.privacy_loss == psfo.privacy_loss
        assert (psfo.oracle.privacy_loss == psfo.privacy_loss) == (oracle == "OLH")


def test_mined_items_and_itemsets_carry_the_per_user_loss() -> None:
    """SVIM and SVSM: each user reports once, in one group, so every estimate (and the length choice) carries
    the protocol's loss, which is each group's randomizer's (issue 16)."""
    gen = np.random.default_rng(12)
    sets = [gen.choice(6, size=gen.integers(1, 4), replace=False) for _ in range(4000)]
    svsm = SVSM(epsilon=4, domain_size=6, k=3)
    found = svsm.run(sets, rng=gen)
    svim = svsm.svim
    assert svim.discovery.privacy_loss == svim.privacy_loss == svsm.privacy_loss
    for result in (found, found.items):
        assert result.privacy_loss == svsm.privacy_loss
        assert result.estimate.privacy_loss == result.candidate_estimate.privacy_loss == svsm.privacy_loss
        assert result.length_choice.privacy_loss == svsm.privacy_loss
