"""kakeibo.synth.pgm (Private-PGM inference, post-processing of released marginals): the junction tree covers
every measured clique and has the running-intersection property; a marginal on attributes no clique holds
equals the brute-force sum of the model's full joint; estimation from exact, consistent marginals recovers
them; sampling follows the model; the model's bytes round-trip."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest

from kakeibo.synth.mst import marginal_counts
from kakeibo.synth.pgm import GraphicalModel, Measurement, estimate, junction_tree, model_cells

SIZES = (3, 4, 2, 5, 3)
#: a cycle 0-1-2-3-0 and a triangle 0-3-4: the triangulation must add a chord
CLIQUES = [(0, 1), (1, 2), (2, 3), (0, 3), (3, 4), (0, 4)]


def _table(n: int, seed: int) -> np.ndarray:
    """A joint that is a field over ``CLIQUES``: b from a, c from b, d from c, e from a and d."""
    rng = np.random.default_rng(seed)
    a = rng.integers(0, 3, n)
    b = (a + rng.integers(0, 2, n)) % 4
    c = (b > 1).astype(int) ^ (rng.random(n) < 0.1)
    d = (2 * c + rng.integers(0, 3, n)) % 5
    e = (d + a) % 3
    return np.column_stack([a, b, c, d, e])


def _exact(data: np.ndarray, clique: tuple[int, ...]) -> np.ndarray:
    return marginal_counts(data, np.ones(len(data), dtype=np.int64), SIZES, clique).astype(float)


def _joint(model: GraphicalModel) -> np.ndarray:
    """The model's full joint, cell by cell: prod of clique marginals over prod of separator marginals."""
    tree = model.tree
    full = np.zeros(SIZES)
    for cell in itertools.product(*(range(s) for s in SIZES)):
        value = 1.0
        for clique, table in zip(tree.cliques, model.marginals, strict=True):
            value *= table[tuple(cell[a] for a in clique)]
        for parent, child in tree.order:
            sep = tuple(a for a in tree.cliques[child] if a in tree.cliques[parent])
            value /= model.project(sep)[tuple(cell[a] for a in sep)]
        full[cell] = value
    return full


def test_the_tree_covers_every_clique_with_the_running_intersection_property() -> None:
    tree = junction_tree(SIZES, CLIQUES)
    for clique in CLIQUES:
        assert tree.holding(clique) is not None, clique
    parent_of = {child: parent for parent, child in tree.order}
    assert len(tree.order) == len(tree.cliques) - len(tree.roots)
    for attribute in range(len(SIZES)):  # the cliques holding an attribute form a connected subtree
        holding = {i for i, c in enumerate(tree.cliques) if attribute in c}
        tops = [i for i in holding if parent_of.get(i) not in holding]
        assert len(tops) == 1, (attribute, tree)
    assert model_cells(SIZES, CLIQUES) == sum(math.prod(SIZES[a] for a in c) for c in tree.cliques)


def test_separate_attributes_make_a_forest_of_independent_trees() -> None:
    tree = junction_tree(SIZES, [(0, 1), (3, 4)])
    assert len(tree.roots) == 2 + 1  # {0, 1}, {3, 4} and {2} alone
    data = _table(4_000, 1)
    measured = [Measurement(c, _exact(data, c), 1.0) for c in [(0, 1), (2,), (3, 4)]]
    model = estimate(SIZES, measured, 300)
    expected = np.einsum("ab,d->abd", model.project((0, 1)), model.project((3,)))
    assert np.allclose(model.project((0, 1, 3)), expected, atol=1e-12)


def test_a_marginal_no_clique_holds_is_the_sum_of_the_full_joint() -> None:
    data = _table(5_000, 2)
    measured = [Measurement(c, _exact(data, c), 1.0) for c in CLIQUES]
    model = estimate(SIZES, measured, 50)
    full = _joint(model)
    assert full.sum() == pytest.approx(1.0, abs=1e-9)
    for attributes in [(1, 3), (2, 4), (1, 4), (0, 2, 4), (1, 2, 3, 4), (0, 1, 2, 3, 4)]:
        others = tuple(a for a in range(len(SIZES)) if a not in attributes)
        assert np.allclose(model.project(attributes), full.sum(axis=others), atol=1e-12), attributes


def test_estimation_from_exact_marginals_recovers_them() -> None:
    """Exact marginals of a joint that is a field over the measured cliques: mirror descent converges to
    them (Private-PGM's loss has its minimum, zero, there); 30 steps are far from it (a control)."""
    data = _table(20_000, 3)
    measured = [Measurement(c, _exact(data, c), 1.0) for c in CLIQUES]
    short, long = estimate(SIZES, measured, 30), estimate(SIZES, measured, 3_000)
    gaps = {
        steps: max(np.abs(m.project(c) - _exact(data, c) / len(data)).sum() for c in CLIQUES)
        for steps, m in ((30, short), (3_000, long))
    }
    assert gaps[3_000] < 0.002 < 0.02 < gaps[30], gaps
    assert long.total == pytest.approx(len(data))


def test_warm_starting_keeps_the_distribution() -> None:
    """Warm-started from a model, zero further steps give that model's marginals back, even when a new
    measurement changes the tree."""
    data = _table(5_000, 4)
    first = estimate(SIZES, [Measurement(c, _exact(data, c), 1.0) for c in CLIQUES[:3]], 200)
    grown = [Measurement(c, _exact(data, c), 1.0) for c in CLIQUES[:4]]
    again = estimate(SIZES, grown, 0, warm=first)
    for clique in CLIQUES[:3]:
        assert np.allclose(again.project(clique), first.project(clique), atol=1e-9)
    cold = estimate(SIZES, grown, 0)
    assert not np.allclose(cold.project((0, 1)), first.project((0, 1)), atol=1e-3)


def test_samples_follow_the_model_and_the_bytes_round_trip() -> None:
    data = _table(5_000, 5)
    model = estimate(SIZES, [Measurement(c, _exact(data, c), 2.0) for c in CLIQUES], 500)
    n = 40_000
    synthetic = model.sample(n, np.random.default_rng(6))
    for clique in [(0, 1), (2, 3), (1, 3), (0, 2, 4)]:
        counts = marginal_counts(synthetic, np.ones(n, dtype=np.int64), SIZES, clique) / n
        assert np.abs(counts - model.project(clique)).sum() < 0.02, clique
    loaded = GraphicalModel.from_bytes(model.to_bytes())
    assert loaded.total == model.total and loaded.tree == model.tree
    assert np.array_equal(
        loaded.sample(100, np.random.default_rng(7)), model.sample(100, np.random.default_rng(7))
    )
