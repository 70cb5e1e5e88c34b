"""Personalized LDP for spatial data (seed 003; Chen, Li, Qin, Kasiviswanathan and Jin, ICDE 2016): the
location hierarchy, PCEP's calibration, its (tau, eps)-PLDP audit, its estimator and error bound, PSDA's
clustering and beta split, and the refusals.

Statistical tests are seeded; each states the false-failure rate of its check.
"""

from __future__ import annotations

import math
from fractions import Fraction
from typing import Any

import numpy as np
import pytest
from scipy.stats import binom

from kakeibo.audit import audit
from kakeibo.audit._events import value_event
from kakeibo.ldp import Reports
from kakeibo.ldp._coins import flip_probability, ln_upper, precision_bits
from kakeibo.ldp.spatial import PCEP, PSDA, LocationHierarchy, hoeffding_bound

TREE = LocationHierarchy.grid(levels=4)  # the quadtree of a 16 x 16 grid: 256 locations, 341 nodes
TRIALS = 1_000_000
ALPHA = 1e-6  # false-failure rate of each "not refuted" assertion
Z_BONFERRONI = 5.0  # two-sided normal tail 5.7e-7 per check


def cell(row: Any, col: Any) -> Any:
    """The location of a grid cell (row-major, as LocationHierarchy.grid numbers them)."""
    return np.asarray(row) * 16 + np.asarray(col)


def mixed_population(n: int, seed: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``n`` users clustered around two centres of the 16 x 16 grid, with mixed specs: 40% (root, eps 1),
    30% (their depth-2 block of 16 cells, eps 2), 20% (their depth-1 quadrant, eps 1) and 10% (their depth-3
    block of 4 cells, eps 4). Returns locations, safe regions and epsilons."""
    rng = np.random.default_rng(seed)
    centre = np.where(rng.random(n) < 0.7, 5.0, 11.0)[:, None]
    xy = np.clip(np.rint(rng.normal(centre, 2.5, size=(n, 2))), 0, 15).astype(np.int64)
    locations = cell(xy[:, 0], xy[:, 1])
    kind = rng.choice(4, size=n, p=[0.4, 0.3, 0.2, 0.1])
    depth_of_kind = np.array([0, 2, 1, 3])
    regions = np.array(
        [TREE.ancestors(locations, d) for d in range(4)]  # each user's ancestor at every depth
    )[depth_of_kind[kind], np.arange(n)]
    epsilons = np.array([1.0, 2.0, 1.0, 4.0])[kind]
    return locations, regions, epsilons


# --- the location hierarchy ------------------------------------------------------------------------------


def test_quadtree_nodes_are_nested_square_blocks() -> None:
    assert (TREE.n_nodes, TREE.n_locations, TREE.root) == (341, 256, 0)
    assert np.bincount(TREE.depths).tolist() == [1, 4, 16, 64, 256]
    for node in range(TREE.n_nodes):
        rows, cols = np.divmod(TREE.leaves(node), 16)
        side = 16 >> int(TREE.depths[node])
        # a side x side block aligned to its size
        assert rows.size == side * side and rows.max() - rows.min() == side - 1 == cols.max() - cols.min()
        assert rows.min() % side == 0 and cols.min() % side == 0
        children = np.flatnonzero(TREE.parents == node)
        if children.size:  # the children's blocks partition the parent's
            together = np.concatenate([TREE.leaves(int(c)) for c in children])
            assert np.array_equal(np.sort(together), TREE.leaves(node))
    assert TREE.leaves(1).tolist() == cell(np.repeat(np.arange(8), 8), np.tile(np.arange(8), 8)).tolist()


def test_grid_with_a_larger_split_and_an_explicit_parent_array() -> None:
    nine = LocationHierarchy.grid(levels=2, split=3)
    assert (nine.n_nodes, nine.n_locations) == (1 + 9 + 81, 81)
    assert nine.leaves(5).tolist() == [30, 31, 32, 39, 40, 41, 48, 49, 50]  # depth-1 block (row 1, col 1)

    # Unequal depths: root 0 -> {1, 2}; 1 -> {3, 4, 5}; 2 -> {6, 7}; 6 -> {8, 9}. Locations: 3 4 5 7 8 9.
    tree = LocationHierarchy([-1, 0, 0, 1, 1, 1, 2, 2, 6, 6])
    assert tree.n_locations == 6 and tree.depths.tolist() == [0, 1, 1, 2, 2, 2, 2, 2, 3, 3]
    assert tree.leaves(2).tolist() == [3, 4, 5] and tree.leaves(6).tolist() == [4, 5]
    assert tree.contains([1, 1, 6, 6], [0, 3, 4, 3]).tolist() == [True, False, True, False]
    assert tree.ancestors([0, 4], depth=1).tolist() == [1, 2]
    assert tree.outermost([6, 8, 1, 2]) == (1, 2)
    assert tree.fingerprint != LocationHierarchy([-1, 0, 0, 1, 1, 1, 2, 2, 7, 7]).fingerprint


# --- PCEP: calibration -----------------------------------------------------------------------------------


@pytest.mark.parametrize("epsilon", [0.25, 1, 2, 4, 10, 64])
def test_coins_are_dyadic_rounded_the_safe_way_and_checked_exactly(epsilon: float) -> None:
    pcep = PCEP(epsilon=epsilon, hierarchy=TREE, region=TREE.root)
    p = Fraction(pcep.params["p"])  # type: ignore[arg-type]
    q = 1 - p  # the flip probability
    target = 1 / (math.exp(epsilon) + 1)
    bits = precision_bits(target)
    assert (1 << bits) % q.denominator == 0  # dyadic, on the grid of 2^-K
    assert Fraction(target) <= q <= Fraction(target) + Fraction(1, 1 << bits)  # rounded up: less loss
    assert ln_upper(p / q) <= Fraction(epsilon)  # the coins' loss is at most epsilon, in exact arithmetic
    assert pcep.p_star == float(p) and pcep.q_star == 0.5
    assert pcep.scale == pytest.approx(float(1 / (2 * p - 1)))
    assert pcep.params == {
        "epsilon": str(Fraction(epsilon)),
        "domain_size": 256,
        "p": str(p),
        "rows": 256,
        "region": "0",
        "hierarchy": TREE.fingerprint,
    }


def test_projection_columns_are_orthogonal_and_the_variance_is_n_c_squared_minus_s() -> None:
    """Hadamard columns: two locations of a region share their sign on exactly half of the K rows, which is
    why q* = 1/2 and the estimator has no projection error. Checked on a 6-location region (K = 8)."""
    tree = LocationHierarchy([-1, 0, 0, 1, 1, 1, 2, 2, 2, 2, 2])  # locations: 3 under node 1, 5 under node 2
    pcep = PCEP(epsilon=1, hierarchy=tree, region=[2, 1])
    assert pcep.region == (1, 2) and pcep.domain_size == 8 and pcep.rows == 8
    every_row = Reports(
        "PCEP", pcep.params, {"row": np.arange(8, dtype=np.uint8), "bit": np.zeros(8, np.uint8)}
    )
    signs = np.array([pcep.supports(every_row, np.full(8, pos)) for pos in range(8)], dtype=np.int64)
    agree = signs @ signs.T + (1 - signs) @ (1 - signs).T
    assert np.array_equal(agree, np.where(np.eye(8, dtype=bool), 8, 4))
    n, counts = 1000, np.array([0, 3, 500])
    np.testing.assert_allclose(pcep.count_variance(n, counts), n * pcep.scale**2 - counts, rtol=1e-12)
    assert pcep.error_bound(n, 0.05) == pytest.approx(pcep.scale * math.sqrt(2 * n * math.log(2 * 8 / 0.05)))


# --- PCEP: (tau, eps)-PLDP audit ---------------------------------------------------------------------------


def support_pair_sampler(pcep: PCEP, x: int, x_prime: int) -> Any:
    """A sampler for :func:`kakeibo.audit.audit`: ``n`` reports from one location, each reduced to
    ``2 [supports x] + [supports x']`` (a post-processing of the report)."""
    pos_x, pos_x_prime = pcep.positions([x, x_prime]).tolist()

    def sample(location: int, n: int, rng: np.random.Generator) -> np.ndarray:
        reports = pcep.randomize_locations(np.full(n, location), rng=rng)
        holds_x = pcep.supports(reports, np.full(n, pos_x)).astype(np.int64)
        return 2 * holds_x + pcep.supports(reports, np.full(n, pos_x_prime))

    return sample


def audit_two_cells(pcep: PCEP, x: int, x_prime: int, seed: int) -> Any:
    sampler = support_pair_sampler(pcep, x, x_prime)
    events = [value_event(code) for code in range(4)]
    return audit(
        sampler, x, x_prime, trials=TRIALS, alpha=ALPHA, events=events, rng=np.random.default_rng(seed)
    )


@pytest.mark.statistical
@pytest.mark.parametrize("epsilon", [1.0, 4.0])
def test_pcep_report_is_tau_eps_pldp_and_tight(epsilon: float) -> None:
    """A user whose safe region is the top-left quadrant (node 1, 64 cells), at its two opposite corners.

    Every pair of locations of a region is a worst case: they disagree on half of the rows, and there the
    report "bit matches x, not x'" has likelihood ratio exactly p / (1 - p) = e^eps' (eps' <= eps, the
    rounded coins). So the audit (10^6 reports per location, confidence 1 - 1e-6) must not refute eps,
    and its point estimate must come within 0.1 of it."""
    pcep = PCEP(epsilon=epsilon, hierarchy=TREE, region=1)
    result = audit_two_cells(pcep, int(cell(0, 0)), int(cell(7, 7)), seed=20261123)
    assert not result.refutes(epsilon), str(result)
    best = max(e.epsilon_estimate for e in result.events)
    assert best > epsilon - 0.1, f"PCEP spends much less than it claims: {result}"


class LeakyPCEP(PCEP):
    """A broken PCEP: its coins are calibrated for twice the epsilon it claims."""

    def __init__(self, *, epsilon: float, hierarchy: LocationHierarchy, region: int) -> None:
        super().__init__(epsilon=epsilon, hierarchy=hierarchy, region=region)
        self._flip = flip_probability(Fraction(2 * epsilon), "PCEP randomizer")


def test_audit_refutes_a_miscalibrated_pcep() -> None:
    leaky = LeakyPCEP(epsilon=1.0, hierarchy=TREE, region=1)
    result = audit_two_cells(leaky, int(cell(0, 0)), int(cell(7, 7)), seed=7)
    assert result.refutes(1.0), str(result)


# --- PCEP: estimator and bound ---------------------------------------------------------------------------


@pytest.mark.statistical
@pytest.mark.parametrize("epsilon", [1.0, 3.0])
def test_estimator_is_unbiased_with_variance_n_c_squared_minus_s(epsilon: float) -> None:
    """2000 runs of one population of 1500 users in a depth-2 block (16 cells, skewed counts)."""
    pcep = PCEP(epsilon=epsilon, hierarchy=TREE, region=5)
    cells = TREE.leaves(5)
    weights = 1.0 / np.arange(1, 17)
    counts = np.floor(weights / weights.sum() * 1500).astype(np.int64)
    counts[0] += 1500 - counts.sum()
    locations = np.repeat(cells, counts)
    n, runs = locations.size, 2000
    batch = pcep.randomize_locations(np.tile(locations, runs), rng=np.random.default_rng(11))
    estimates = np.array(
        [
            pcep.estimate(
                Reports("PCEP", batch.params, {k: a[r * n : (r + 1) * n] for k, a in batch.arrays.items()})
            ).counts
            for r in range(runs)
        ]
    )
    formula = n * pcep.scale**2 - counts
    # Unbiased: each cell's mean over the runs is within 5 standard errors of its count (16 checks).
    z = (estimates.mean(axis=0) - counts) / np.sqrt(formula / runs)
    assert np.all(np.abs(z) < Z_BONFERRONI), z
    # Variance: pooled over the 16 cells, whose estimates are uncorrelated, the empirical variance is within
    # 5% of the formula: the pooled ratio's standard deviation is about sqrt(2 / (runs * 16)) = 0.8%, so 5%
    # is over 6 of them.
    ratio = estimates.var(axis=0, ddof=1).sum() / formula.sum()
    assert abs(ratio - 1) < 0.05, ratio


def test_location_estimate_spans_the_hierarchy_and_survives_the_wire() -> None:
    pcep = PCEP(epsilon=2, hierarchy=TREE, region=[5, 6])
    locations = np.concatenate([TREE.leaves(5), TREE.leaves(6)]).repeat(30)
    reports = pcep.randomize_locations(locations, rng=np.random.default_rng(3))
    decoded = Reports.from_bytes(reports.to_bytes())
    est = pcep.estimate_locations(decoded, beta=0.01)
    inside = pcep.locations
    outside = np.setdiff1d(np.arange(256), inside)
    np.testing.assert_array_equal(est.counts[inside], pcep.estimate(reports).counts)
    assert (
        np.all(est.counts[outside] == 0)
        and np.all(est.variance[outside] == 0)
        and np.all(est.bound[outside] == 0)
    )
    np.testing.assert_allclose(
        est.variance[inside], pcep.count_variance(reports.n, np.clip(est.counts[inside], 0, reports.n))
    )
    assert np.all(est.bound[inside] == pcep.error_bound(reports.n, 0.01)) and est.beta == 0.01
    low, high = est.simultaneous_interval()
    true = np.bincount(locations, minlength=256)
    assert np.all((low <= true) & (true <= high))  # fails with probability at most 0.01 (seeded)


# --- PSDA: clustering, beta split and the bound ---------------------------------------------------------


def test_clustering_merges_only_when_the_max_bound_drops() -> None:
    """Two hand-computed cases of Chen et al.'s objective, with E = c sqrt(2 n ln(2 |tau| |C| / beta))."""
    beta = 0.05
    c1 = PCEP(epsilon=1, hierarchy=TREE, region=0).scale
    c2 = PCEP(epsilon=2, hierarchy=TREE, region=0).scale
    # Nested: 3000 users (root, eps 1) and 3000 (node 5, eps 2). Apart, node 5's cells carry both bounds.
    nested = PSDA(TREE, [0] * 3000 + [5] * 3000, [1] * 3000 + [2] * 3000, beta=beta)
    apart = hoeffding_bound(3000, c1, 256, beta / 2) + hoeffding_bound(3000, c2, 16, beta / 2)
    together = float(hoeffding_bound(6000, c1, 256, beta))
    assert together < apart
    assert [(c.region, c.epsilon) for c in nested.clusters] == [((0,), 1.0)]
    assert nested.max_error_bound == pytest.approx(together)
    # Disjoint quadrants with many users each: a merge would put 6000 users' noise on every cell of both.
    disjoint = PSDA(TREE, [1] * 3000 + [2] * 3000, [1] * 6000, beta=beta)
    assert len(disjoint.clusters) == 2
    assert disjoint.max_error_bound == pytest.approx(hoeffding_bound(3000, c1, 64, beta / 2))
    assert disjoint.max_error_bound < hoeffding_bound(6000, c1, 128, beta)


def test_clustering_lowers_the_max_error_bound_and_keeps_every_users_guarantee() -> None:
    _, regions, epsilons = mixed_population(100_000, seed=1)
    clustered = PSDA(TREE, regions, epsilons, beta=0.1)
    separate = PSDA(TREE, regions, epsilons, beta=0.1, merge=False)
    distinct_specs = np.unique(np.stack([regions, epsilons]), axis=1).shape[1]
    assert len(separate.clusters) == distinct_specs > len(clustered.clusters)
    assert clustered.max_error_bound < separate.max_error_bound
    assert clustered.cluster_beta == 0.1 / len(clustered.clusters)
    for psda in (clustered, separate):  # each user's cluster covers their safe region, at most their epsilon
        for c, pcep in enumerate(psda.clusters):
            users = np.flatnonzero(psda.assignment == c)
            assert pcep.epsilon <= epsilons[users].min()
            covered = np.zeros(256, dtype=bool)
            covered[pcep.locations] = True
            for node in np.unique(regions[users]).tolist():
                assert covered[TREE.leaves(node)].all()


@pytest.mark.statistical
def test_every_cell_lies_within_its_bound_with_probability_at_least_1_minus_beta() -> None:
    """10^5 users with mixed specs on the 256-cell quadtree, beta = 0.1, 20 independent runs.

    A run fails when any cell's estimate leaves its bound; that happens with probability at most beta, so
    the number of failed runs is at most Binomial(20, 0.1), and exceeding its 1 - 1e-6 quantile has
    probability below 1e-6. The means over the runs are also within 5 standard errors of the counts
    (256 cells; the plug-in variance is within a few percent of the exact one at these counts)."""
    beta, runs = 0.1, 20
    locations, regions, epsilons = mixed_population(100_000, seed=2)
    psda = PSDA(TREE, regions, epsilons, beta=beta)
    true = np.bincount(locations, minlength=256)
    failures, total, variance = 0, np.zeros(256), np.zeros(256)
    for run in range(runs):
        est = psda.estimate(psda.randomize(locations, rng=np.random.default_rng(100 + run)))
        assert est.n == 100_000 and est.beta == pytest.approx(beta)
        np.testing.assert_allclose(est.bound, psda.error_bound)
        low, high = est.simultaneous_interval()
        failures += int(np.any((true < low) | (true > high)))
        total += est.counts
        variance += est.variance
    assert failures <= binom.isf(1e-6, runs, beta), failures
    z = (total / runs - true) / np.sqrt(variance / runs**2)
    assert np.all(np.abs(z) < Z_BONFERRONI), z


# --- refusals ------------------------------------------------------------------------------------------


def test_bad_hierarchies_are_refused() -> None:
    with pytest.raises(ValueError, match="exactly one -1"):
        LocationHierarchy([-1, -1, 0, 0])
    with pytest.raises(ValueError, match="has a cycle"):
        LocationHierarchy([-1, 0, 3, 2, 0])
    with pytest.raises(ValueError, match="node 1 has parent 1"):
        LocationHierarchy([-1, 1, 0])
    with pytest.raises(ValueError, match="at least 3 nodes"):
        LocationHierarchy([-1, 0])
    with pytest.raises(TypeError, match="parents must be integer"):
        LocationHierarchy([-1.0, 0.0, 0.0])
    with pytest.raises(ValueError, match="levels must be at least 1"):
        LocationHierarchy.grid(levels=0)
    with pytest.raises(ValueError, match="too large"):
        LocationHierarchy.grid(levels=13)
    with pytest.raises(ValueError, match=r"depth must be an integer in 0\.\.4"):
        TREE.ancestors([0], depth=5)


def test_bad_pcep_inputs_are_refused() -> None:
    with pytest.raises(ValueError, match="unknown node 341"):
        PCEP(epsilon=1, hierarchy=TREE, region=341)
    with pytest.raises(ValueError, match="fewer than two locations"):
        PCEP(epsilon=1, hierarchy=TREE, region=340)  # a leaf: nothing to hide among
    with pytest.raises(ValueError, match="epsilon must lie in"):
        PCEP(epsilon=0, hierarchy=TREE, region=0)
    with pytest.raises(TypeError, match="hierarchy must be a LocationHierarchy"):
        PCEP(epsilon=1, hierarchy="quadtree", region=0)  # type: ignore[arg-type]
    pcep = PCEP(epsilon=1, hierarchy=TREE, region=1)
    with pytest.raises(ValueError, match="location 8 lies outside this cluster's region"):
        pcep.randomize_locations([0, 8])
    reports = pcep.randomize_locations([0, 1, 2], rng=np.random.default_rng(0))
    with pytest.raises(ValueError, match="other parameters"):
        PCEP(epsilon=2, hierarchy=TREE, region=1).estimate(reports)
    flat = LocationHierarchy([-1, 0, 0, 0, 0, *np.repeat([1, 2, 3, 4], 64).tolist()])  # 4 regions of 64
    with pytest.raises(
        ValueError, match=r"hierarchy: reports '[0-9a-f]+' vs server"
    ):  # only the tree differs
        PCEP(epsilon=1, hierarchy=flat, region=1).estimate(reports)
    forged = Reports("PCEP", reports.params, {"row": np.array([64, 0, 0]), "bit": reports["bit"]})
    with pytest.raises(ValueError, match=r"holds values outside 0\.\.63"):
        pcep.estimate(forged)
    with pytest.raises(ValueError, match="beta must be a probability"):
        pcep.estimate_locations(reports, beta=1.0)


def test_bad_psda_inputs_are_refused() -> None:
    with pytest.raises(ValueError, match="regions: unknown node 400"):
        PSDA(TREE, [0, 400], [1, 1])
    with pytest.raises(ValueError, match="epsilon must lie in"):
        PSDA(TREE, [0, 1], [1, -1])
    with pytest.raises(ValueError, match="one epsilon per user"):
        PSDA(TREE, [0, 1], [1])
    with pytest.raises(ValueError, match="fewer than two locations"):
        PSDA(TREE, [0, 340], [1, 1])
    psda = PSDA(TREE, [1, 1, 0], [1, 2, 1])
    with pytest.raises(ValueError, match=r"user 1's location 8 lies outside their safe region \(node 1\)"):
        psda.randomize([0, 8, 8])  # cell (0, 8) is in the top-right quadrant, not in node 1
    with pytest.raises(ValueError, match="one location per user"):
        psda.randomize([0, 1])
    with pytest.raises(ValueError, match="one report batch per cluster"):
        psda.estimate([])


def test_counts_carry_the_per_report_loss_and_a_sum_the_largest() -> None:
    """A cluster's counts carry its PCEP's loss; PSDA's sum of clusters the largest of them, which bounds
    every user's report (issue 16)."""
    psda = PSDA(TREE, [1] * 300 + [2] * 300, [1] * 300 + [2] * 300, merge=False)
    assert len({pcep.privacy_loss for pcep in psda.clusters}) == 2
    locations = np.concatenate([TREE.leaves(1)[:1].repeat(300), TREE.leaves(2)[:1].repeat(300)])
    batches = psda.randomize(locations, rng=np.random.default_rng(21))
    for pcep, batch in zip(psda.clusters, batches, strict=True):
        assert pcep.estimate_locations(batch).privacy_loss == pcep.privacy_loss
    largest = max(psda.clusters, key=lambda pcep: pcep.epsilon).privacy_loss
    assert psda.estimate(batches).privacy_loss == largest
