"""R2T's linear program and its race (issue 33; :mod:`kakeibo.sql.truncation_lp`, :mod:`kakeibo.graphs`).

Neighbour relation: person-level (node-level for graphs): one instance is the other with one person added
together with every join result that references them. Sensitivity: the program's value ``Q(I, tau)`` moves
by at most ``tau`` between neighbours; a certified value lies within ``1e-6 tau`` below the optimum, so
the race's candidate ``j`` is calibrated to ``(1 + 2e-6) tau_j`` at ``epsilon / k``. Privacy claim: the
release is ``epsilon``-DP (sequential composition over the ``k`` candidates; the maximum is
post-processing).
"""

from __future__ import annotations

import itertools
import math
from fractions import Fraction

import networkx as nx
import numpy as np
import pyarrow as pa
import pytest
from scipy.optimize import linprog
from scipy.sparse import csr_matrix
from scipy.stats import binom

from kakeibo import graphs
from kakeibo.accounting import Ledger
from kakeibo.audit import audit
from kakeibo.errors import ArgumentError, ArgumentTypeError
from kakeibo.mechanisms import Laplace
from kakeibo.noise import resolve_source
from kakeibo.sql import truncation_lp
from kakeibo.sql.truncation_lp import SENSITIVITY_FACTOR, Incidence, truncated_values

TAUS = (0.5, 1.0, 2.0, 3.0, 5.0, 8.0)


def _optimum(incidence: Incidence, tau: float) -> float:
    """The program's optimum by scipy's HiGHS wrapper (an independent build of the matrix)."""
    m = incidence.size
    a = csr_matrix(
        (np.ones(len(incidence.results)), (incidence.persons, incidence.results)), (incidence.n_persons, m)
    )
    found = linprog(
        -np.ones(m),
        A_ub=a,
        b_ub=np.full(incidence.n_persons, tau),
        bounds=np.stack([np.zeros(m), incidence.weights], axis=1),
        method="highs",
    )
    assert found.status == 0
    return float(-found.fun)


def _random_instance(rng: np.random.Generator, persons: int, results: int, width: int) -> Incidence:
    columns = [rng.integers(0, persons, results) for _ in range(width)]
    return Incidence.from_columns(columns, rng.choice([0.0, 0.5, 1.0, 2.5], results))


def test_certified_values_lie_within_the_tolerance_below_the_optimum() -> None:
    """Against an independent solve, on 40 random instances (2 or 3 persons per result, some named twice,
    weights 0 to 2.5); seed 11."""
    rng = np.random.default_rng(11)
    for trial in range(40):
        incidence = _random_instance(rng, int(rng.integers(2, 15)), int(rng.integers(1, 40)), 2 + trial % 2)
        for tau, value in zip(TAUS, truncated_values(incidence, TAUS), strict=True):
            optimum = _optimum(incidence, tau)
            assert optimum - 1e-6 * tau - 1e-9 <= value <= optimum + 1e-9, (trial, tau, value, optimum)


def test_a_certificates_duals_bound_every_smaller_thresholds_program() -> None:
    """On 30 random instances (2 or 3 persons per result, and one person per result), seed 16: each
    certificate's bound lies within the tolerance above its value, and its cap at every smaller threshold
    is at least that threshold's optimum (weak duality: the duals stay feasible whatever tau)."""
    rng = np.random.default_rng(16)
    for trial in range(30):
        width = (1, 2, 3)[trial % 3]
        incidence = _random_instance(rng, int(rng.integers(2, 12)), int(rng.integers(1, 40)), width)
        found = truncation_lp.certificates(incidence, TAUS)
        optima = [_optimum(incidence, tau) for tau in TAUS]
        for i, certificate in enumerate(found):
            assert certificate.value <= certificate.bound <= certificate.value + 1e-6 * certificate.tau + 1e-9
            for smaller, optimum in zip(TAUS[: i + 1], optima[: i + 1], strict=True):
                assert certificate.cap(smaller) >= optimum - 1e-7, (trial, certificate, smaller, optimum)


def test_results_of_two_persons_with_whole_weights_are_solved_exactly_as_maximum_flows() -> None:
    """200 random instances of at most two persons per result (some named twice, so one), whole weights
    0 to 5 and whole thresholds (seed 17) take the maximum-flow path, and its values are the independent
    solver's optima exactly (to 1e-9), with their certificates' bounds equal to them."""
    rng = np.random.default_rng(17)
    taus = [1.0, 2.0, 3.0, 5.0, 8.0]
    for trial in range(200):
        persons, results = int(rng.integers(2, 12)), int(rng.integers(1, 50))
        columns = [rng.integers(0, persons, results) for _ in range(2)]
        incidence = Incidence.from_columns(columns, rng.choice([0.0, 1.0, 2.0, 5.0], results))
        assert truncation_lp._flows(incidence, taus)
        for certificate in truncation_lp.certificates(incidence, taus):
            optimum = _optimum(incidence, certificate.tau)
            assert abs(certificate.value - optimum) <= 1e-9, (trial, certificate, optimum)
            assert abs(certificate.bound - optimum) <= 1e-9, (trial, certificate, optimum)
    three = _random_instance(rng, 6, 20, 3)
    assert not truncation_lp._flows(three, taus)  # three persons per result: the program
    halves = Incidence.from_columns([[0, 1], [1, 2]], [0.5, 1.0])
    assert not truncation_lp._flows(halves, taus) and not truncation_lp._flows(
        Incidence.from_columns([[0, 1], [1, 2]]), [1.5]
    )


def test_interior_point_solves_are_certified_like_vertices(monkeypatch: pytest.MonkeyPatch) -> None:
    """With every active set sent to the interior point method (the path of programs above
    ``_INTERIOR`` columns), 20 random instances of three persons per result (seed 18) still release
    values within the tolerance below the independent solver's optima."""
    monkeypatch.setattr(truncation_lp, "_INTERIOR", 0)
    rng = np.random.default_rng(18)
    for trial in range(20):
        incidence = _random_instance(rng, int(rng.integers(3, 15)), int(rng.integers(5, 60)), 3)
        for tau, value in zip(TAUS, truncated_values(incidence, TAUS), strict=True):
            optimum = _optimum(incidence, tau)
            assert optimum - 1e-6 * tau - 1e-9 <= value <= optimum + 1e-9, (trial, tau, value, optimum)


def test_the_program_is_the_plain_answer_from_the_largest_total_on_and_never_above_it() -> None:
    rng = np.random.default_rng(12)
    incidence = _random_instance(rng, 10, 60, 3)
    largest = float(incidence.totals().max())
    plain = float(incidence.weights.sum())
    values = truncated_values(incidence, [largest / 4, largest / 2, largest, 2 * largest])
    assert values[2] == values[3] == plain
    assert 0 <= values[0] <= values[1] <= plain and values[1] < plain


def test_one_person_moves_the_value_by_at_most_tau() -> None:
    """The sensitivity the race is calibrated to: 300 random neighbour pairs (a person added with 1 to 12
    results that also reference persons already there); seed 13."""
    rng = np.random.default_rng(13)
    worst = 0.0
    for _ in range(300):
        persons, results = int(rng.integers(2, 10)), int(rng.integers(1, 25))
        columns = [rng.integers(0, persons, results) for _ in range(3)]
        weights = rng.choice([0.5, 1.0, 2.0], results)
        added = int(rng.integers(1, 13))
        new = [np.full(added, persons), rng.integers(0, persons, added), rng.integers(0, persons, added)]
        smaller = Incidence.from_columns(columns, weights)
        larger = Incidence.from_columns(
            [np.concatenate([c, n]) for c, n in zip(columns, new, strict=True)],
            np.concatenate([weights, rng.choice([0.5, 1.0, 2.0], added)]),
        )
        for tau, low, high in zip(
            TAUS, truncated_values(smaller, TAUS), truncated_values(larger, TAUS), strict=True
        ):
            assert -1e-6 * tau <= high - low <= tau * SENSITIVITY_FACTOR, (tau, low, high)
            worst = max(worst, (high - low) / tau)
    assert worst > 0.99  # the bound is reached: the pairs test it


def test_the_race_is_calibrated_to_each_thresholds_sensitivity() -> None:
    race = graphs._race("triangle", Fraction(4, 5), 100, 0.05, 10.0)
    assert race.taus == (1.0, 10.0, 100.0, 1000.0, 10000.0)  # GS = 100^2
    assert all(isinstance(m, Laplace) for m in race.mechanisms)
    assert [m.sensitivity for m in race.mechanisms] == [t * SENSITIVITY_FACTOR for t in race.taus]
    assert sum(m.privacy_loss.epsilon for m in race.mechanisms) == Fraction(4, 5)
    assert graphs._race("edge", 1, 1, 0.05, 10.0).taus == (1.0,)
    assert graphs._race("rectangle", 1, 10, 0.05, 10.0).taus == (1.0, 10.0, 100.0, 1000.0)


def _star_pair() -> tuple[np.ndarray, np.ndarray]:
    """A graph (a path of 30 nodes) and its neighbour: one more node joined to 40 nodes of which 30 are
    new to the edge list, so the edge count's program moves by the full threshold at every tau <= 10."""
    path = np.array([(i, i + 1) for i in range(30)])
    star = np.array([(100, i) for i in range(0, 80, 2)])
    return path, np.concatenate([path, star])


@pytest.mark.statistical
def test_the_race_is_epsilon_dp_under_node_neighbours() -> None:
    """The race over the programs' values of a graph and its node neighbour (``_star_pair``), each released
    200,000 times through the race's mechanisms; :func:`kakeibo.audit.audit` bounds epsilon from below at
    95% confidence over its default events, and the bound must not exceed the claim (epsilon 1, edges,
    max_degree 10: thresholds 1 and 10). Seed 14. Measured: lower bound 0.50 (claim 1): the maximum over
    shifted candidates spends less than its budget on this pair."""
    race = graphs._race("edge", 1, 10, 0.05, 10.0)
    values = [truncated_values(graphs.occurrences(g, "edge")[0], race.taus) for g in _star_pair()]
    assert values[1][0] - values[0][0] >= 0.99 and values[1][1] - values[0][1] >= 9.99

    def sampler(row: np.ndarray, n: int, rng: np.random.Generator) -> np.ndarray:
        return race.release(np.tile(row, (n, 1)), resolve_source(rng))[0]

    result = audit(sampler, values[0], values[1], trials=200_000, rng=np.random.default_rng(14))
    assert not result.refutes(1.0), str(result)
    assert result.epsilon_lower_bound > 0.3, str(result)  # the audit has power on this pair


def test_the_released_count_is_below_the_truth_with_probability_at_least_one_minus_beta() -> None:
    """400 releases of the triangles of a random graph with a few hubs (seed 15) at epsilon 2, beta 0.1:
    the number above the truth is consistent with a rate of at most beta (one-sided binomial test at
    1e-6), and the 0.9 interval holds the truth at least as often."""
    graph = nx.barabasi_albert_graph(120, 4, seed=15)
    edges = np.array(graph.edges(), dtype=np.int64)
    truth = sum(nx.triangles(graph).values()) // 3
    ledger = Ledger(":memory:", budget=10_000)
    rng = np.random.default_rng(15)
    above = missed = 0
    for _ in range(400):
        out = graphs.count(edges, "triangle", epsilon=2, max_degree=40, ledger=ledger, beta=0.1, rng=rng)
        above += out.value > truth
        missed += not out.low <= truth <= out.high
    assert binom.sf(above - 1, 400, 0.1) > 1e-6 and binom.sf(missed - 1, 400, 0.1) > 1e-6
    assert float(ledger.spent().epsilon) == 800


def test_occurrences_are_the_patterns_of_the_graph() -> None:
    """Each pattern's occurrences against networkx on a random graph with repeated edges, both directions
    and self-loops (seed 16), and on K4 (6 edges, 12 length-2 paths, 4 triangles, 3 rectangles)."""
    rng = np.random.default_rng(16)
    raw = rng.integers(0, 25, (140, 2)) * 7 - 50  # ids neither dense nor positive
    graph = nx.Graph([(int(a), int(b)) for a, b in raw if a != b])
    expected = {
        "edge": graph.number_of_edges(),
        "path2": sum(math.comb(d, 2) for _, d in graph.degree()),
        "triangle": sum(nx.triangles(graph).values()) // 3,
        "rectangle": sum(  # 4-cycles: pairs of distinct common neighbours of each pair of nodes, halved
            math.comb(len(set(graph[u]) & set(graph[v])), 2) for u, v in itertools.combinations(graph, 2)
        )
        // 2,
    }
    for pattern, size in expected.items():
        incidence, nodes = graphs.occurrences(raw, pattern)
        assert (incidence.size, nodes) == (size, graph.number_of_nodes()), pattern
        assert len(incidence.persons) == size * len(graphs.PATTERNS[pattern][0])
    k4 = np.array(list(itertools.combinations(range(4), 2)))
    sizes = {
        p: graphs.occurrences(pa.table({"u": k4[:, 0], "v": k4[:, 1]}), p)[0].size for p in graphs.PATTERNS
    }
    assert sizes == {"edge": 6, "path2": 12, "triangle": 4, "rectangle": 3}


def test_a_release_is_charged_once_and_refusals_are_free() -> None:
    ledger = Ledger(":memory:", budget=5)
    edges = np.array([(0, 1), (1, 2), (2, 0), (2, 3)])
    out = graphs.count(edges, "edge", epsilon=0.5, max_degree=3, ledger=ledger, rng=np.random.default_rng(17))
    assert out.ledger_entry is not None and float(ledger.spent().epsilon) == 0.5
    assert out.low <= out.high and out.taus == (3.0,)  # GS = 3 is below the base: its one threshold
    bad: list[tuple[dict[str, object], type[Exception], str]] = [
        ({"pattern": "clique"}, ArgumentError, "pattern must be one of edge, path2, triangle, rectangle"),
        ({"max_degree": 0}, ArgumentError, "max_degree must be a positive integer"),
        ({"max_degree": 2.5}, ArgumentError, "max_degree must be a positive integer"),
        ({"beta": 1}, ArgumentError, "beta must be in (0, 1)"),
        ({"epsilon": -1}, ArgumentError, "epsilon"),
        ({"edges": edges.astype(np.uint64)}, ArgumentTypeError, "not unsigned 64-bit"),
        ({"edges": edges.astype(float)}, ArgumentTypeError, "integer array of shape (m, 2)"),
        ({"edges": edges[:, :1]}, ArgumentTypeError, "integer array of shape (m, 2)"),
        ({"edges": pa.table({"a": [1], "b": ["x"]})}, ArgumentTypeError, "two integer columns"),
    ]
    for change, error, fragment in bad:
        arguments: dict[str, object] = {"edges": edges, "pattern": "edge", "epsilon": 0.5, "max_degree": 3}
        arguments.update(change)
        with pytest.raises(error) as refused:
            graphs.count(ledger=ledger, **arguments)  # type: ignore[arg-type]
        assert fragment in str(refused.value), str(refused.value)
    assert float(ledger.spent().epsilon) == 0.5


def test_deferred_noise_releases_what_release_does() -> None:
    """Same source words, same values, whatever the input (seed 18)."""
    laplace = Laplace(sensitivity=3, epsilon=0.7, coordinates=1)
    for value in (0.0, -2.5, 1e6, 123.456):
        deferred = laplace.deferred(1, np.random.default_rng(18))
        assert deferred([value])[0] == laplace.release(np.array([value]), rng=np.random.default_rng(18))[0]
        assert deferred([value + 10])[0] >= deferred([value])[0]  # non-decreasing with the noise fixed


def test_the_early_stop_releases_exactly_what_the_whole_race_does(monkeypatch: pytest.MonkeyPatch) -> None:
    """On 30 random graphs and seeds, :func:`truncation_lp.race_release` returns the value and interval end
    that solving every program and :meth:`Race.release` give, and it skips programs (seed 19)."""
    rng = np.random.default_rng(19)
    solved: list[float] = []
    original = truncation_lp.certificates

    def counting(incidence: Incidence, taus: list[float]) -> list[truncation_lp.Certificate]:
        solved.extend(taus)
        return original(incidence, taus)

    monkeypatch.setattr(truncation_lp, "certificates", counting)
    skipped = 0
    for trial in range(30):
        graph = nx.barabasi_albert_graph(60, int(rng.integers(1, 6)), seed=trial)
        incidence, _ = graphs.occurrences(np.array(graph.edges()), "triangle")
        race = graphs._race("triangle", float(rng.choice([0.1, 1, 10])), 30, 0.1, 10.0)
        seed = int(rng.integers(2**32))
        solved.clear()
        value, high = truncation_lp.race_release(race, incidence, resolve_source(np.random.default_rng(seed)))
        skipped += race.candidates - len(solved)
        whole = truncated_values(incidence, race.taus)[np.newaxis, :]
        released, shifted = race.release(whole, resolve_source(np.random.default_rng(seed)))
        low, top = race.interval(shifted, 0.1)
        assert (value, high) == (float(released[0]), float(top[0])) and low[0] == max(value, 0.0)
    assert skipped > 0


def _naive(incidence: Incidence, tau: float) -> float:
    """Naive truncation (seed 002 p.91): every person whose total exceeds tau is deleted, and with them every
    result that references them."""
    over = incidence.totals() > tau
    dropped = np.zeros(incidence.size, dtype=bool)
    dropped[incidence.results[over[incidence.persons]]] = True
    return float(incidence.weights[~dropped].sum())


def test_the_seeds_transfers_one_neighbour_moves_naive_truncation_by_half_of_everything() -> None:
    """Seed 002 p.92: N persons in pairs, one transfer of 1,000 per pair; the neighbour adds a person who
    sends alpha = 1 to everyone. At tau = 1,000 naive truncation answers 1,000 N / 2 and then 0; the
    program answers 1,000 N / 2 both times (within its tolerance), so its sensitivity tau holds."""
    n = 1_000
    pairs = [np.arange(0, n, 2), np.arange(1, n, 2)]
    smaller = Incidence.from_columns(pairs, np.full(n // 2, 1_000.0))
    larger = Incidence.from_columns(
        [np.concatenate([pairs[0], np.full(n, n)]), np.concatenate([pairs[1], np.arange(n)])],
        np.concatenate([np.full(n // 2, 1_000.0), np.ones(n)]),
    )
    assert (_naive(smaller, 1_000), _naive(larger, 1_000)) == (500_000.0, 0.0)
    low, high = truncated_values(smaller, [1_000])[0], truncated_values(larger, [1_000])[0]
    assert low == 500_000.0 and 0 <= high - low <= 1_000 * SENSITIVITY_FACTOR


def test_node_ids_at_the_ends_of_int64_are_nodes_like_any_other() -> None:
    """The occurrences' statement is total over 64-bit ids: the smallest and largest ids, 0 and -1 form a
    triangle and an edge like any four ids."""
    ends = np.array([np.iinfo(np.int64).min, np.iinfo(np.int64).max, 0, -1], dtype=np.int64)
    edges = np.array([(ends[0], ends[1]), (ends[1], ends[2]), (ends[2], ends[0]), (ends[3], ends[0])])
    assert {p: graphs.occurrences(edges, p)[0].size for p in ("edge", "triangle", "path2")} == {
        "edge": 4,
        "triangle": 1,
        "path2": 5,
    }
