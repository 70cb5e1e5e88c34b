"""The Gaussian correlation model (seed 001, section 5): precision, conditionals, proposition 5.1, theorem 5.1
and 5.2, Algorithm 1, the fast and the certified leakage, eq. 26, and the refusals.

Every expected value is computed independently of :mod:`kakeibo.correlated.gaussian`: the precision matrix
is assembled by hand from the edge list, covariances come from ``np.linalg.inv``, conditional laws from
the covariance form ``E[x_U | x_C] = S_UC S_CC^-1 x_C``, and the BDPL of theorem 5.1 from definition 4.1
(eq. 6) with the closed-form Gaussian-Laplace convolution. One test is statistical: the audit of the
eq. 26 mechanism on sums drawn from the model.
"""

from __future__ import annotations

import itertools
from typing import Any

import networkx as nx
import numpy as np
import pytest
import scipy.sparse as sp
from scipy import integrate
from scipy.special import log_ndtr
from scipy.stats import norm

from correlated_fixtures import STAR, star_centre_conditional
from kakeibo.audit import audit
from kakeibo.correlated.gaussian import (
    GaussianCorrelationModel,
    _covariance_diagonal_lower_bounds,
    _inverse_diagonal_enclosure,
    _ones_solution_enclosure,
    _structural_bounds,
    calc_leakage_coefficient,
    combine,
)
from kakeibo.correlated.repro import facebook_edges
from kakeibo.mechanisms import Laplace

RTOL = 1e-9  # the agreement tolerance between the methods and brute force

Edges = list[tuple[int, int]]


# --- independent references -------------------------------------------------------------------------------


def dense_precision(n: int, edges: Edges, weights: Any, prior: Any) -> np.ndarray:
    """``Q = D - W + diag(prior)`` assembled entry by entry (eq. 10 plus the prior of section 5.5)."""
    q = np.diag(np.broadcast_to(np.asarray(prior, dtype=float), (n,))).copy()
    for (u, v), w in zip(edges, weights, strict=True):
        q[u, v] -= w
        q[v, u] -= w
        q[u, u] += w
        q[v, v] += w
    return q


def unknown_of(n: int, target: int, known: tuple[int, ...]) -> list[int]:
    return [u for u in range(n) if u != target and u not in known]


def brute_coefficient(q: np.ndarray, target: int, known: tuple[int, ...] = ()) -> float:
    """Coefficient of ``x_target`` in ``E[s_U | x_target, x_K]``, from the covariance."""
    s = np.linalg.inv(q)
    c = [target, *known]
    u = unknown_of(len(q), target, known)
    if not u:
        return 0.0
    regression = s[np.ix_(u, c)] @ np.linalg.inv(s[np.ix_(c, c)])
    return float(regression[:, 0].sum())


def brute_weak(q: np.ndarray) -> np.ndarray:
    return np.array([brute_coefficient(q, i) for i in range(len(q))])


def brute_adversary_matrix(q: np.ndarray, target: int, known: tuple[int, ...]) -> np.ndarray:
    """The precision of ``(mean of x_U, x_target, x_K)``: invert the covariance of that linear map."""
    n = len(q)
    u = unknown_of(n, target, known)
    t = np.zeros((len(known) + 2, n))
    t[0, u] = 1.0 / len(u)
    for row, tuple_id in enumerate([target, *known], start=1):
        t[row, tuple_id] = 1.0
    return np.asarray(np.linalg.inv(t @ np.linalg.inv(q) @ t.T))


def random_edges(rng: np.random.Generator, n: int, p: float) -> Edges:
    return [(u, v) for u in range(n) for v in range(u + 1, n) if rng.random() < p]


def connected_edges(rng: np.random.Generator, n: int, p: float) -> Edges:
    """A random graph plus a random spanning path, so it is connected."""
    order = rng.permutation(n)
    path = {tuple(sorted((int(a), int(b)))) for a, b in itertools.pairwise(order)}
    return sorted(path | set(random_edges(rng, n, p)))


def random_case(rng: np.random.Generator, n: int) -> tuple[int, Edges, np.ndarray, Any]:
    """``n``, a random graph, weights in [0.1, 3] or all 1, and ``tau I`` or a general diagonal prior."""
    edges = random_edges(rng, n, float(rng.uniform(0.15, 0.9)))
    weights = rng.uniform(0.1, 3.0, len(edges)) if rng.random() < 0.5 else np.ones(len(edges))
    prior: Any = rng.uniform(0.05, 2.0, n) if rng.random() < 0.5 else float(10 ** rng.uniform(-2, 1))
    return n, edges, weights, prior


def model_of(n: int, edges: Edges, weights: Any, prior: Any) -> GaussianCorrelationModel:
    return GaussianCorrelationModel.from_edges(
        np.array(edges, dtype=np.int64), n=n, weights=weights, tau=prior
    )


#: 44 random cases with 2 <= n <= 12 (some with isolated tuples or no edges at all).
CASES = [random_case(np.random.default_rng(seed), n) for seed, n in enumerate(list(range(2, 13)) * 4)]


# --- the model --------------------------------------------------------------------------------------------


def test_precision_is_laplacian_plus_prior() -> None:
    for n, edges, weights, prior in CASES[:12]:
        model = model_of(n, edges, weights, prior)
        np.testing.assert_allclose(
            model.precision.toarray(), dense_precision(n, edges, weights, prior), rtol=1e-15
        )
        assert model.n == n
        np.testing.assert_array_equal(model.prior, np.broadcast_to(prior, (n,)))


def test_constructors_agree() -> None:
    edges = [(0, 1), (1, 2), (2, 3), (0, 3), (1, 3)]
    weights = [0.5, 1.0, 2.0, 1.5, 0.25]
    from_edges = GaussianCorrelationModel.from_edges(edges, weights=weights, tau=0.3)
    adjacency = sp.coo_array((weights, tuple(np.array(edges).T)), shape=(4, 4))
    from_sparse = GaussianCorrelationModel.from_sparse((adjacency + adjacency.T).tocsc(), tau=0.3)
    graph = nx.Graph()
    graph.add_weighted_edges_from((u, v, w) for (u, v), w in zip(edges, weights, strict=True))
    from_graph = GaussianCorrelationModel.from_networkx(graph, tau=0.3)
    expected = dense_precision(4, edges, weights, 0.3)
    for model in (from_edges, from_sparse, from_graph):
        np.testing.assert_allclose(model.precision.toarray(), expected, rtol=1e-15)


def test_conditional_matches_the_covariance_form() -> None:
    rng = np.random.default_rng(7)
    for n, edges, weights, prior in CASES[20:30]:
        model = model_of(n, edges, weights, prior)
        known = sorted(rng.choice(n, size=int(rng.integers(1, n)), replace=False).tolist())
        values = rng.normal(size=len(known))
        cond = model.conditional(known, values)
        s = np.linalg.inv(model.precision.toarray())
        u = [i for i in range(n) if i not in known]
        gain = s[np.ix_(u, known)] @ np.linalg.inv(s[np.ix_(known, known)])
        covariance = s[np.ix_(u, u)] - gain @ s[np.ix_(known, u)]
        assert cond.unknown.tolist() == u
        np.testing.assert_allclose(cond.mean, gain @ values, rtol=RTOL, atol=1e-12)
        np.testing.assert_allclose(np.linalg.inv(cond.precision.toarray()), covariance, rtol=RTOL, atol=1e-12)


def test_one_unknown_tuple_is_the_weighted_neighbour_average() -> None:
    """Eq. 16 with the prior: ``x_u | x_-u`` has precision ``w_u + tau`` and mean
    ``sum_j w_uj x_j / (w_u + tau)``."""
    edges, weights, tau = [(0, 1), (0, 2), (0, 3), (2, 3)], np.array([1.0, 2.0, 0.5, 3.0]), 0.25
    model = GaussianCorrelationModel.from_edges(edges, weights=weights, tau=tau)
    x = np.array([0.7, -1.2, 2.5])
    cond = model.conditional([1, 2, 3], x)
    assert cond.precision.toarray().tolist() == [[3.5 + tau]]
    assert cond.mean[0] == pytest.approx((1.0 * 0.7 + 2.0 * -1.2 + 0.5 * 2.5) / (3.5 + tau), rel=1e-12)


# --- theorem 5.1, proposition 5.1, Algorithm 1 -------------------------------------------------------------


def adversaries(n: int, rng: np.random.Generator, count: int) -> list[tuple[int, tuple[int, ...]]]:
    picks = []
    for _ in range(count):
        target = int(rng.integers(n))
        others = [v for v in range(n) if v != target]
        size = int(rng.integers(0, n - 1))
        picks.append((target, tuple(sorted(rng.choice(others, size=size, replace=False).tolist()))))
    return picks


def test_adversary_matrix_and_theorem_5_1_coefficient() -> None:
    """Eq. 24's ``L_A`` is the precision of ``(x_0, x_i, x_K)``; ``m w_0i / w_0`` is the regression slope."""
    rng = np.random.default_rng(11)
    for n, edges, weights, prior in CASES[3:40:3]:
        model, q = model_of(n, edges, weights, prior), dense_precision(n, edges, weights, prior)
        for target, known in adversaries(n, rng, 6):
            expected = brute_coefficient(q, target, known)
            assert model.leakage_of(target, known) == pytest.approx(expected, rel=RTOL, abs=1e-12)
            assert model.leakage_of(target, known) >= expected * (1 - 1e-12) - 1e-15  # a certified upper end
            l_a = model.adversary_matrix(target, known)
            reference = brute_adversary_matrix(q, target, known)
            np.testing.assert_allclose(l_a, reference, rtol=RTOL, atol=1e-10 * np.abs(reference).max())
            m = n - 1 - len(known)
            assert m * -l_a[0, 1] / l_a[0, 0] == pytest.approx(expected, rel=RTOL, abs=1e-12)


def test_combine_is_marginalisation() -> None:
    """Proposition 5.1: merging ``x_j`` into ``x_0`` gives the ancestor ``A(i, K - {j})``'s matrix."""
    rng = np.random.default_rng(5)
    for n, edges, weights, prior in CASES[4:44:4]:
        q = dense_precision(n, edges, weights, prior)
        for target, known in adversaries(n, rng, 5):
            if not known:
                continue
            j = known[int(rng.integers(len(known)))]
            merged = combine(brute_adversary_matrix(q, target, known), 2 + known.index(j), n - 1 - len(known))
            reference = brute_adversary_matrix(q, target, tuple(k for k in known if k != j))
            np.testing.assert_allclose(merged, reference, rtol=RTOL, atol=1e-10 * np.abs(reference).max())


def test_all_methods_agree_with_brute_force() -> None:
    """Fast (selected inversion), Algorithm 1, leakage_of and the certified maximum on 44 graphs, n <= 12."""
    for n, edges, weights, prior in CASES:
        model = model_of(n, edges, weights, prior)
        expected = brute_weak(dense_precision(n, edges, weights, prior))
        for values in (model.leakage(), model.algorithm1_leakage(), [model.leakage_of(i) for i in range(n)]):
            np.testing.assert_allclose(values, expected, rtol=RTOL, atol=1e-12)
        best = model.certify_max_leakage()
        assert expected.max() * (1 - 1e-14) <= best.upper <= expected.max() * (1 + RTOL) + 1e-12
        assert best.lower <= expected.max() * (1 + 1e-14) + 1e-15
        assert model.max_leakage() == best.upper


def test_algorithm1_leaves_are_the_weak_adversaries_of_c() -> None:
    """From ``Q`` (m = 1) the leaves are tuples 1..n-1; from ``L_A`` (m = |U|) they are the members of ``C``
    (the seed: ``L_A`` depends on ``C = {i} + K`` only)."""
    rng = np.random.default_rng(3)
    for n, edges, weights, prior in CASES[5:44:6]:
        q = dense_precision(n, edges, weights, prior)
        weak = brute_weak(q)
        assert calc_leakage_coefficient(q) == pytest.approx(weak[1:].max(), rel=RTOL, abs=1e-12)
        target, known = adversaries(n, rng, 1)[0]
        if n - 1 - len(known) >= 1 and known:
            l_a = brute_adversary_matrix(q, target, known)
            members = [target, *known]
            got = calc_leakage_coefficient(l_a, m=n - 1 - len(known))
            assert got == pytest.approx(weak[members].max(), rel=RTOL, abs=1e-12)


def log_convolution_density(t: np.ndarray, mean: float, sigma: float, lam: float) -> np.ndarray:
    """log density of ``N(mean, sigma^2) + Lap(lam)``; with ``z = t - mean`` and ``a = sigma / lam``, eq. 17
    integrates in closed form to
    ``e^(a^2/2) / (2 lam) [e^(-z/lam) Phi(z/sigma - a) + e^(z/lam) Phi(-z/sigma - a)]``."""
    z = t - mean
    tails = np.logaddexp(
        -z / lam + log_ndtr(z / sigma - sigma / lam), z / lam + log_ndtr(-z / sigma - sigma / lam)
    )
    return np.asarray(-np.log(2 * lam) + sigma**2 / (2 * lam**2) + tails)


def convolution_density_by_quadrature(t: float, mean: float, sigma: float, lam: float) -> float:
    """The same density by numerical integration of eq. 17."""

    def integrand(v: float) -> float:
        return float(norm.pdf(v, mean, sigma) * np.exp(-abs(t - v) / lam) / (2 * lam))

    return float(integrate.quad(integrand, -np.inf, np.inf)[0])


def conditional_sum_sd(q: np.ndarray, target: int, known: tuple[int, ...]) -> float:
    """Standard deviation of ``s_U`` (so of ``s``) given ``x_target, x_K``, from the covariance."""
    s = np.linalg.inv(q)
    c, u = [target, *known], unknown_of(len(q), target, known)
    covariance = s[np.ix_(u, u)] - s[np.ix_(u, c)] @ np.linalg.solve(s[np.ix_(c, c)], s[np.ix_(c, u)])
    return float(np.sqrt(covariance.sum()))


def test_theorem_5_1_from_definition_4_1() -> None:
    """BDPL of ``r = s + Lap(lambda)`` against ``A(i, K)``, from eq. 6 with the exact law of ``s | x_i, x_K``,
    is ``M (1 + l_A) / lambda`` (eq. 25): the log ratio stays below it and reaches it in the tail."""
    edges, weights = [(0, 1), (1, 2), (2, 3), (3, 4), (1, 4), (0, 5)], [1.0, 2.0, 0.5, 1.0, 1.5, 0.7]
    q, model = dense_precision(6, edges, weights, 0.4), model_of(6, edges, weights, 0.4)
    lam, big_m = 2.0, 1.5
    for target, known in [(1, ()), (1, (3,)), (5, (0, 2))]:
        slope = 1 + brute_coefficient(q, target, known)  # d E[s | x_i, x_K] / d x_i
        sigma = conditional_sum_sd(q, target, known)
        for t in (-1.0, 0.3, 2.0):
            closed = np.exp(log_convolution_density(np.array([t]), 0.4, sigma, lam))[0]
            assert closed == pytest.approx(convolution_density_by_quadrature(t, 0.4, sigma, lam), rel=1e-7)
        grid = np.linspace(-60 * lam - 40 * sigma, 60 * lam + 40 * sigma, 20001)
        # x_i = 0 against x_i' = M, with the same x_K: the two laws of s differ by a shift of slope * M.
        ratio = log_convolution_density(grid, 0.0, sigma, lam) - log_convolution_density(
            grid, slope * big_m, sigma, lam
        )
        bdpl = big_m * (1 + model.leakage_of(target, known)) / lam
        assert ratio.max() <= bdpl * (1 + 1e-9)
        assert ratio.max() == pytest.approx(bdpl, rel=1e-6)


def test_theorem_5_2_by_brute_force() -> None:
    """``l_A <= l_A'`` for every adversary and ancestor on small graphs, so the weak ones attain the max."""
    rng = np.random.default_rng(2)
    for n in (4, 5, 6):
        for _ in range(3):
            edges = random_edges(rng, n, 0.6)
            weights = rng.uniform(0.1, 3.0, len(edges))
            prior = rng.uniform(0.05, 1.0, n)
            q = dense_precision(n, edges, weights, prior)
            model = model_of(n, edges, weights, prior)
            overall = 0.0
            for target in range(n):
                others = [v for v in range(n) if v != target]
                for size in range(n):
                    for known in itertools.combinations(others, size):
                        value = brute_coefficient(q, target, known)
                        overall = max(overall, value)
                        for j in known:
                            ancestor = tuple(k for k in known if k != j)
                            assert value <= brute_coefficient(q, target, ancestor) + 1e-12
            assert model.max_leakage() == pytest.approx(overall, rel=RTOL, abs=1e-12)


def test_eq_29_bare_laplacian_and_the_prior_to_zero_limit() -> None:
    """Without a prior every weak adversary has ``l = n - 1`` (eq. 29); as ``tau -> 0`` ``1 + l -> n``."""
    rng = np.random.default_rng(9)
    for n in (2, 3, 5, 8, 12):
        edges = connected_edges(rng, n, 0.3)
        laplacian = dense_precision(n, edges, np.ones(len(edges)), 0.0)
        assert calc_leakage_coefficient(laplacian) == pytest.approx(n - 1, rel=1e-9)
        factors = [1 + model_of(n, edges, np.ones(len(edges)), tau).leakage() for tau in (1e-2, 1e-4, 1e-7)]
        assert np.all(factors[0] < factors[1]) and np.all(factors[1] < factors[2])
        np.testing.assert_allclose(factors[2], n, rtol=1e-5)


def test_leakage_falls_as_tau_grows() -> None:
    rng = np.random.default_rng(4)
    edges = connected_edges(rng, 30, 0.1)
    values = [
        model_of(30, edges, np.ones(len(edges)), tau).leakage() for tau in (0.01, 0.1, 1.0, 10.0, 100.0)
    ]
    for smaller, larger in itertools.pairwise(values):
        assert np.all(larger < smaller)


def test_star_centre_leaks_most() -> None:
    for leaves in (2, 5, 20):
        edges = [(0, k) for k in range(1, leaves + 1)]
        for tau in (0.01, 1.0, 10.0):
            weak = brute_weak(dense_precision(leaves + 1, edges, np.ones(leaves), tau))
            model = model_of(leaves + 1, edges, np.ones(leaves), tau)
            assert int(np.argmax(weak)) == 0 and int(np.argmax(model.leakage())) == 0
            assert model.certify_max_leakage().node == 0


def test_facebook_max_degree_node_leaks_most() -> None:
    """Section 6.2: on ego-Facebook the node of degree 1045 has the largest coefficient for every tau, and
    coefficients fall as tau grows; the certified maximum agrees with the fast method."""
    edges = facebook_edges()
    degrees = np.bincount(edges.ravel())
    assert degrees.max() == 1045
    previous = None
    for tau in (0.01, 0.1, 1.0, 10.0):
        model = GaussianCorrelationModel.from_edges(edges, tau=tau)
        values = model.leakage()
        best = model.certify_max_leakage()
        assert int(np.argmax(values)) == int(np.argmax(degrees)) == best.node
        assert best.lower <= values.max() * (1 + 1e-12) and values.max() <= best.upper * (1 + 1e-12)
        assert best.upper == pytest.approx(values.max(), rel=RTOL)
        assert best.evaluated < 50
        if previous is not None:
            assert np.all(values < previous)
        previous = values


# --- fast and certified computation -----------------------------------------------------------------------


def structured_graphs() -> list[tuple[int, Edges]]:
    rng = np.random.default_rng(8)
    grid = nx.convert_node_labels_to_integers(nx.grid_2d_graph(15, 20))
    tree = [(int(rng.integers(k)), k) for k in range(1, 300)]
    two_parts = [(u, v) for u, v in random_edges(rng, 120, 0.05)] + [
        (u + 120, v + 120) for u, v in random_edges(rng, 80, 0.1)
    ]
    return [
        (300, list(grid.edges)),
        (300, [(k, k + 1) for k in range(299)]),
        (300, tree),
        (250, random_edges(rng, 250, 0.04)),
        (205, two_parts),  # two components and 5 isolated tuples
    ]


@pytest.mark.parametrize("general_prior", [False, True])
def test_selected_inversion_on_structured_graphs(general_prior: bool) -> None:
    rng = np.random.default_rng(12)
    for n, edges in structured_graphs():
        weights = rng.uniform(0.2, 2.0, len(edges))
        prior = rng.uniform(0.01, 1.0, n) if general_prior else 0.05
        q = dense_precision(n, edges, weights, prior)
        s = np.linalg.inv(q)
        expected = s.sum(axis=1) / np.diag(s) - 1
        model = model_of(n, edges, weights, prior)
        np.testing.assert_allclose(model.leakage(), expected, rtol=RTOL, atol=1e-12)
        best = model.certify_max_leakage()
        assert expected.max() * (1 - 1e-14) <= best.upper <= expected.max() * (1 + RTOL)


def test_bounds_and_certificates_enclose_the_truth() -> None:
    rng = np.random.default_rng(13)
    for n, edges in structured_graphs()[2:]:
        for prior in (1e-3, 0.1, rng.uniform(0.01, 1.0, n)):
            model = model_of(n, edges, rng.uniform(0.2, 2.0, len(edges)), prior)
            q = model.precision
            s = np.linalg.inv(q.toarray())
            lower = _covariance_diagonal_lower_bounds(model.adjacency, q, model.prior)
            assert np.all(lower <= np.diag(s))
            nodes = rng.choice(n, size=7, replace=False)
            low, high = _inverse_diagonal_enclosure(q, nodes, float(model.prior.min()))
            assert np.all(low <= s[nodes, nodes]) and np.all(s[nodes, nodes] <= high)
            assert np.all(high - low <= 1e-10 * s[nodes, nodes])
            low, high = _ones_solution_enclosure(q)
            assert np.all(low <= s.sum(axis=1)) and np.all(s.sum(axis=1) <= high)


def test_structural_bounds_enclose_every_coefficient() -> None:
    """Step 0's exact facts on the 44 random cases: ``max_j w_ij / Q_jj <= l_i <= min(n_C - 1, d_i / min
    tau)``, with the column maximum ``S_ki <= S_ii`` and ``1 / max tau <= y <= 1 / min tau`` behind them."""
    for n, edges, weights, prior in CASES:
        q = dense_precision(n, edges, weights, prior)
        s = np.linalg.inv(q)
        y = s.sum(axis=1)
        assert np.all(s <= np.diag(s)[None, :] * (1 + 1e-12))  # each column peaks on the diagonal
        taus = np.broadcast_to(np.asarray(prior, dtype=float), (n,))
        assert np.all(y <= 1 / taus.min() * (1 + 1e-12)) and np.all(y >= 1 / taus.max() * (1 - 1e-12))
        model = model_of(n, edges, weights, prior)
        floor, ceiling = _structural_bounds(model.adjacency, model.prior)
        truth = brute_weak(q)
        assert np.all(floor <= truth * (1 + 1e-12) + 1e-15) and np.all(truth <= ceiling * (1 + 1e-12) + 1e-15)
        for (u, v), w in zip(edges, weights, strict=True):
            assert floor[u] >= w / q[v, v] * (1 - 1e-12) and floor[v] >= w / q[u, u] * (1 - 1e-12)


def test_certified_maximum_prunes_on_a_sparse_random_graph() -> None:
    """Section 6.1's kind of network (3000 nodes, average degree 10): few exact evaluations, same maximum."""
    rng = np.random.default_rng(14)
    n, wanted = 3000, 15000
    codes = np.unique(np.sort(rng.integers(0, n, size=(3 * wanted, 2)), axis=1) @ np.array([n, 1]))
    codes = rng.permutation(codes[codes // n != codes % n])[:wanted]
    edges = np.stack([codes // n, codes % n], axis=1)
    for tau in (0.01, 1.0):
        model = GaussianCorrelationModel.from_edges(edges, n=n, tau=tau)
        values = model.leakage()
        best = model.certify_max_leakage()
        assert best.evaluated <= 30
        assert best.lower <= values.max() * (1 + 1e-12) <= best.upper * (1 + 2e-12)
        assert best.upper == pytest.approx(values.max(), rel=RTOL)


def test_evaluation_budget_keeps_the_maximum_an_upper_bound() -> None:
    """On a grid the cheap bounds cannot separate the nodes; a capped run stays above the true maximum."""
    grid = nx.convert_node_labels_to_integers(nx.grid_2d_graph(12, 12))
    edges = list(grid.edges)
    s = np.linalg.inv(dense_precision(144, edges, np.ones(len(edges)), 0.1))
    exact = float((s.sum(axis=1) / np.diag(s) - 1).max())
    model = GaussianCorrelationModel.from_networkx(grid, tau=0.1)
    capped = model.certify_max_leakage(max_evaluations=5)
    full = model.certify_max_leakage()  # the default cap covers all 144 nodes
    assert capped.evaluated == 5 and full.evaluated > 5
    assert capped.lower <= exact * (1 + 1e-12) and capped.upper >= exact
    assert capped.upper > full.upper * (1 + 1e-6)  # looser, as documented
    assert full.lower <= exact * (1 + 1e-12) and exact * (1 - 1e-14) <= full.upper <= exact * (1 + RTOL)
    assert model.max_leakage(max_evaluations=5) == capped.upper


def test_independent_tuples_and_the_strong_adversary() -> None:
    """Theorem 4.1: without correlations every coefficient is 0 and eq. 26 is the DP scale ``M / eps``;
    theorem 4.2: the strong adversary ``A(i, [n] - {i})`` has coefficient 0."""
    model = GaussianCorrelationModel.from_edges([], n=4, tau=0.5)
    assert model.leakage().tolist() == [0.0] * 4 and model.algorithm1_leakage().tolist() == [0.0] * 4
    assert model.certify_max_leakage().upper == 0.0
    assert model.laplace_scale(epsilon=0.5, M=2.0) == 4.0
    single = GaussianCorrelationModel.from_edges([], n=1, tau=1.0)
    assert single.leakage().tolist() == [0.0] and single.max_leakage() == 0.0
    path = GaussianCorrelationModel.from_edges([(0, 1), (1, 2)], tau=1.0)
    assert path.leakage_of(1, known=[0, 2]) == 0.0


def test_eq_26_scale_and_the_laplace_mechanism() -> None:
    n, edges, weights, prior = CASES[30]
    model = model_of(n, edges, weights, prior)
    top = brute_weak(dense_precision(n, edges, weights, prior)).max()
    assert model.laplace_scale(epsilon=0.5, M=3.0) == pytest.approx(3.0 * (1 + top) / 0.5, rel=RTOL)
    assert model.laplace_scale(epsilon=0.5, M=3.0) >= 3.0 * (1 + top) / 0.5 * (1 - 1e-14)
    mechanism = model.laplace_mechanism(epsilon=0.5, M=3.0)
    assert isinstance(mechanism, Laplace) and mechanism.epsilon == 0.5
    assert mechanism.sensitivity == pytest.approx(3.0 * (1 + model.max_leakage()), rel=1e-15)


# --- refusals ---------------------------------------------------------------------------------------------


PATH = GaussianCorrelationModel.from_edges([(0, 1), (1, 2)], tau=1.0)


@pytest.mark.parametrize(
    ("call", "error", "match"),
    [
        (lambda: GaussianCorrelationModel.from_edges([(0, 1)], weights=[-1.0], tau=1.0), ValueError, ">= 0"),
        (
            lambda: GaussianCorrelationModel.from_edges([(0, 1)], weights=[np.nan], tau=1.0),
            ValueError,
            "finite",
        ),
        (
            lambda: GaussianCorrelationModel.from_edges([(0, 1)], weights=[1.0, 2.0], tau=1.0),
            ValueError,
            "one entry per edge",
        ),
        (lambda: GaussianCorrelationModel.from_edges([(1, 1)], tau=1.0), ValueError, "self loop"),
        (lambda: GaussianCorrelationModel.from_edges([(0, 1), (1, 0)], tau=1.0), ValueError, "listed twice"),
        (lambda: GaussianCorrelationModel.from_edges([(0, 3)], n=3, tau=1.0), ValueError, "0..2"),
        (lambda: GaussianCorrelationModel.from_edges([(-1, 0)], n=3, tau=1.0), ValueError, "0..2"),
        (lambda: GaussianCorrelationModel.from_edges([(0.0, 1.0)], tau=1.0), TypeError, "integer"),
        (lambda: GaussianCorrelationModel.from_edges([0, 1], tau=1.0), ValueError, "shape"),
        (lambda: GaussianCorrelationModel.from_edges([], tau=1.0), ValueError, "give the number"),
        (lambda: GaussianCorrelationModel.from_edges([], n=0, tau=1.0), ValueError, "at least one"),
        (lambda: GaussianCorrelationModel.from_edges([(0, 1)], tau=0.0), ValueError, "> 0"),
        (lambda: GaussianCorrelationModel.from_edges([(0, 1)], tau=-1.0), ValueError, "> 0"),
        (lambda: GaussianCorrelationModel.from_edges([(0, 1)], tau=np.inf), ValueError, "finite"),
        (lambda: GaussianCorrelationModel.from_edges([(0, 1)], tau=[1.0, 0.0]), ValueError, "tuple 1"),
        (lambda: GaussianCorrelationModel.from_edges([(0, 1)], tau=[1.0, 1.0, 1.0]), ValueError, "n = 2"),
        (lambda: GaussianCorrelationModel.from_edges([(0, 1)], tau=True), TypeError, "bool|positive number"),
        (lambda: GaussianCorrelationModel.from_edges([(0, 1)], tau="1"), TypeError, "real numbers"),
        (lambda: GaussianCorrelationModel.from_sparse(np.eye(2), tau=1.0), TypeError, "scipy.sparse"),
        (
            lambda: GaussianCorrelationModel.from_sparse(sp.csr_array([[0, 1], [0, 0]]), tau=1.0),
            ValueError,
            "symmetric",
        ),
        (
            lambda: GaussianCorrelationModel.from_sparse(sp.csr_array([[1, 1], [1, 0]]), tau=1.0),
            ValueError,
            "self loop",
        ),
        (
            lambda: GaussianCorrelationModel.from_sparse(sp.csr_array([[0, -1], [-1, 0]]), tau=1.0),
            ValueError,
            ">= 0",
        ),
        (
            lambda: GaussianCorrelationModel.from_sparse(sp.csr_array(np.ones((2, 3))), tau=1.0),
            ValueError,
            "square",
        ),
        (
            lambda: GaussianCorrelationModel.from_networkx(nx.DiGraph([(0, 1)]), tau=1.0),
            TypeError,
            "undirected",
        ),
        (
            lambda: GaussianCorrelationModel.from_networkx(nx.Graph([("a", "b")]), tau=1.0),
            ValueError,
            "0..n-1",
        ),
        (
            lambda: GaussianCorrelationModel.from_networkx(nx.Graph([(0, 0)]), tau=1.0),
            ValueError,
            "self loop",
        ),
        (lambda: PATH.leakage_of(3), ValueError, "0..2"),
        (lambda: PATH.leakage_of(1.0), TypeError, "integer"),
        (lambda: PATH.leakage_of(1, known=[1]), ValueError, "cannot be a known"),
        (lambda: PATH.leakage_of(1, known=[0, 0]), ValueError, "twice"),
        (lambda: PATH.leakage_of(1, known=0), TypeError, "collection"),
        (lambda: PATH.adversary_matrix(1, known=[0, 2]), ValueError, "strong adversary"),
        (lambda: PATH.conditional([0], [1.0, 2.0]), ValueError, "one per known"),
        (lambda: PATH.certify_max_leakage(max_evaluations=0), ValueError, ">= 1"),
        (lambda: PATH.max_leakage(max_evaluations=2.5), TypeError, "integer or None"),
        (lambda: PATH.max_leakage(max_evaluations=True), TypeError, "integer or None"),
        (lambda: PATH.laplace_scale(epsilon=0.0, M=1.0), ValueError, "epsilon"),
        (lambda: PATH.laplace_scale(epsilon=1.0, M=-1.0), ValueError, "M"),
        (lambda: PATH.laplace_mechanism(epsilon=float("nan"), M=1.0), ValueError, "epsilon"),
        (lambda: combine(np.eye(3), 0, 1), ValueError, "x_0 itself"),
        (lambda: combine(np.eye(3), 3, 1), ValueError, "0..2"),
        (lambda: combine(np.eye(3), 1, 0), ValueError, ">= 1"),
        (lambda: combine(np.eye(2), 1, 1), ValueError, "3 x 3"),
        (lambda: calc_leakage_coefficient(np.ones((2, 3))), ValueError, "square"),
        (lambda: calc_leakage_coefficient([[1.0, 0.5], [0.0, 1.0]]), ValueError, "symmetric"),
        (lambda: calc_leakage_coefficient([[0.0, 0.0], [0.0, 1.0]]), ValueError, "positive diagonal"),
        (lambda: calc_leakage_coefficient([["a", "b"], ["c", "d"]]), TypeError, "real numbers"),
        (lambda: calc_leakage_coefficient(np.eye(2), m=1.5), TypeError, "integer"),
    ],
)
def test_bad_inputs_are_refused(call: Any, error: type[Exception], match: str) -> None:
    with pytest.raises(error, match=match):
        call()


@pytest.mark.statistical
@pytest.mark.parametrize("tau", [0.5, 5.0])
def test_eq_26_mechanism_keeps_the_weak_adversary_within_epsilon(tau: float) -> None:
    """A star of 5 leaves; the weak adversary A(centre, {}) tells x_centre = 0 from x_centre = M = 1 by the
    released sum. Given x_centre = v the sum is v + s_U with s_U ~ Normal(slope v, var) (covariance form,
    ``np.linalg.inv``). Audit at 10^6 releases per value, confidence 1 - 1e-6 (false-failure rate 1e-6 per
    assertion): the eq. 26 mechanism is not refuted at eps = 1, and plain DP calibration (sensitivity M) is
    refuted, since the correlation shifts the sum by (1 + slope) M."""
    model = GaussianCorrelationModel.from_edges(STAR, tau=tau)
    slope, spread = star_centre_conditional(tau)

    def releases(mechanism: Laplace) -> Any:
        def sample(value: float, n: int, rng: np.random.Generator) -> np.ndarray:
            sums = value * (1 + slope) + rng.normal(0.0, spread, n)
            return np.asarray(mechanism.release(sums, rng=rng))

        return audit(sample, 0.0, 1.0, trials=1_000_000, alpha=1e-6, rng=np.random.default_rng(5))

    calibrated = releases(model.laplace_mechanism(epsilon=1.0, M=1.0))
    assert not calibrated.refutes(1.0), str(calibrated)
    plain = releases(Laplace(sensitivity=1.0, epsilon=1.0))
    assert plain.refutes(1.0), str(plain)
