"""Parallel composition over the query-overlap graph.

Reproduces seed 002 (DEIM 2023 tutorial, Takahashi and Hasegawa), slides 54-58: four COUNT queries with
range predicates on age and height, each epsilon-DP. Q1-Q3 cost 2 epsilon in total (Q1 and Q2 overlap,
Q3 overlaps neither); adding Q4 costs 3 epsilon (Q1, Q2, Q4 share a point). Slide 59 computes this as the
maximum clique of the query graph; for boxes it equals the maximum weighted depth (Helly property).
"""

from __future__ import annotations

import itertools
import random
from fractions import Fraction

import pytest

from kakeibo.accounting import (
    Box,
    BudgetExceeded,
    Interval,
    Ledger,
    boxes_overlap,
    max_weight_clique,
    max_weighted_depth,
    overlap_graph,
    parallel_composition,
)
from kakeibo.privacy import ZCDP, ApproxDP, PureDP

# Seed 002, slide 54: SELECT COUNT(age) FROM T WHERE ... (closed ranges)
Q1 = Box({"age": (10, 20), "height": (100, 120)}, unit="record")
Q2 = Box({"age": (5, 25), "height": (80, 105)}, unit="record")
Q3 = Box({"age": (30, 40), "height": (150, 180)}, unit="record")
Q4 = Box({"age": (17, 32), "height": (90, 160)}, unit="record")
EPS = Fraction(1, 2)


def test_seed_query_graph_edges() -> None:
    assert overlap_graph([Q1, Q2, Q3]) == [(0, 1)]  # slide 55: Q1-Q2 overlap, Q3 alone
    assert overlap_graph([Q1, Q2, Q3, Q4]) == [(0, 1), (0, 3), (1, 3), (2, 3)]  # slide 57


def test_seed_example_1_three_queries_cost_two_epsilon() -> None:
    # slide 56: eps_total = max(eps + eps, eps) = 2 eps
    assert max_weighted_depth([Q1, Q2, Q3], [EPS] * 3) == 2 * EPS
    weight, clique = max_weight_clique(3, overlap_graph([Q1, Q2, Q3]), [EPS] * 3)
    assert (weight, clique) == (2 * EPS, (0, 1))
    assert parallel_composition([PureDP(EPS)] * 3, [Q1, Q2, Q3]) == PureDP(2 * EPS)
    assert parallel_composition([PureDP(EPS)] * 3, [Q1, Q2, Q3], method="graph") == PureDP(2 * EPS)


def test_seed_example_2_adding_q4_costs_three_epsilon() -> None:
    # slide 58: eps_total = max(eps + eps + eps, eps + eps) = 3 eps
    boxes = [Q1, Q2, Q3, Q4]
    assert max_weighted_depth(boxes, [EPS] * 4) == 3 * EPS
    weight, clique = max_weight_clique(4, overlap_graph(boxes), [EPS] * 4)
    assert (weight, clique) == (3 * EPS, (0, 1, 3))
    assert parallel_composition([PureDP(EPS)] * 4, boxes, method="graph") == PureDP(3 * EPS)


def test_seed_examples_through_the_ledger(tmp_path: object) -> None:
    # The accountant itself: with a budget of 2 eps, Q1-Q3 fit (sequential composition would need 3 eps),
    # Q4 does not (it would make 3 eps), and after raising the budget to 3 eps it does.
    ledger = Ledger(":memory:", budget=PureDP(2 * EPS))
    for name, box in (("Q1", Q1), ("Q2", Q2), ("Q3", Q3)):
        ledger.charge(PureDP(EPS), label=name, dataset="T", region=box)
    assert ledger.spent() == PureDP(2 * EPS)
    assert ledger.remaining() == PureDP(0)
    with pytest.raises(BudgetExceeded):
        ledger.charge(PureDP(EPS), label="Q4", dataset="T", region=Q4)
    ledger.set_budget(PureDP(3 * EPS))
    ledger.charge(PureDP(EPS), label="Q4", dataset="T", region=Q4)
    assert ledger.spent() == PureDP(3 * EPS)
    # A query over all of T overlaps everything and adds fully.
    ledger.set_budget(PureDP(4 * EPS))
    ledger.charge(PureDP(EPS), label="total count", dataset="T")
    assert ledger.spent() == PureDP(4 * EPS)
    assert ledger.verify()


def test_slide_52_mixed_sequential_and_parallel() -> None:
    # Q1 disjoint from {Q2, Q3}, which overlap: eps_total = max(eps1, eps2 + eps3).
    a = Box({"x": (0, 10)})
    b = Box({"x": (20, 30)})
    c = Box({"x": (25, 40)})
    weights = [Fraction(3, 10), Fraction(1, 10), Fraction(1, 7)]
    assert max_weighted_depth([a, b, c], weights) == max(weights[0], weights[1] + weights[2])
    weights = [Fraction(1, 2), Fraction(1, 10), Fraction(1, 7)]
    assert max_weighted_depth([a, b, c], weights) == Fraction(1, 2)
    assert max_weight_clique(3, overlap_graph([a, b, c]), weights)[0] == Fraction(1, 2)


def test_interval_endpoints() -> None:
    assert Interval(0, 1).overlaps(Interval(1, 2))
    assert not Interval(0, 1, hi_closed=False).overlaps(Interval(1, 2))
    assert not Interval(0, 1).overlaps(Interval(1, 2, lo_closed=False))
    assert Interval(None, 0).overlaps(Interval(-(10**100), -(10**100)))
    assert Interval(0, None).contains(10**100)
    assert Interval("1/3", "1/2").contains(Fraction(1, 3)) and not Interval("1/3", "1/2").contains(0.5000001)
    with pytest.raises(ValueError, match="empty"):
        Interval(2, 1)
    with pytest.raises(ValueError, match="empty"):
        Interval(1, 1, hi_closed=False)
    with pytest.raises(ValueError, match="finite"):
        Interval(float("nan"), 1)


def test_half_open_partition_composes_in_parallel() -> None:
    # [0,10), [10,20), [20,30): a histogram's bins. Disjoint, so the cost is one bin's epsilon.
    bins = [Box({"age": Interval(lo, lo + 10, hi_closed=False)}) for lo in range(0, 30, 10)]
    assert max_weighted_depth(bins, [1, 1, 1]) == 1
    closed = [Box({"age": (lo, lo + 10)}) for lo in range(0, 30, 10)]  # shared endpoints overlap
    assert max_weighted_depth(closed, [1, 1, 1]) == 2


def test_unconstrained_box_overlaps_everything() -> None:
    everything = Box({})
    assert boxes_overlap(everything, Q3) and boxes_overlap(Q1, Box({"weight": (50, 60)}))
    assert max_weighted_depth([Q1, Q3, everything], [1, 1, 5]) == 6
    assert parallel_composition([PureDP(1), PureDP(1), PureDP(1)], [Q1, Q3, None]) == PureDP(2)


def test_approx_and_zcdp_coordinates_are_maximised_separately() -> None:
    losses = [ApproxDP(1, "1e-6"), ApproxDP(2, 0), PureDP(1)]
    regions = [Box({"x": (0, 1)}), Box({"x": (2, 3)}), Box({"x": (0, 1)})]
    # eps: max(1 + 1, 2) = 2 ; delta: max(1e-6 + 0, 0) = 1e-6
    assert parallel_composition(losses, regions) == ApproxDP(2, "1e-6")
    assert parallel_composition([ZCDP("0.5"), PureDP(1)], [Box({"x": (0, 1)}), None]) == ZCDP(1)


def _brute_depth(boxes: list[Box], weights: list[Fraction], columns: list[str]) -> Fraction:
    """Depth at every point of a grid fine enough to hit every cell of the arrangement."""
    axes = []
    for column in columns:
        ends = sorted(
            {v for b in boxes for v in (b.interval(column).lo, b.interval(column).hi) if v is not None}
        )
        if not ends:
            axes.append([Fraction(0)])  # no box constrains this column
            continue
        mids = [(a + b) / 2 for a, b in itertools.pairwise(ends)]
        axes.append(sorted({*ends, *mids, ends[0] - 1, ends[-1] + 1}))
    best = Fraction(0)
    for point in itertools.product(*axes):
        p = dict(zip(columns, point, strict=True))
        best = max(best, sum((w for b, w in zip(boxes, weights, strict=True) if b.contains(p)), Fraction(0)))
    return best


@pytest.mark.parametrize("seed", range(40))
def test_depth_equals_clique_equals_brute_force(seed: int) -> None:
    rng = random.Random(seed)
    columns = ["a", "b", "c"][: rng.randint(1, 3)]
    boxes, weights = [], []
    for _ in range(rng.randint(1, 9)):
        spec: dict[str, Interval] = {}
        for column in columns:
            if rng.random() < 0.2:
                continue  # unconstrained on this column
            lo = rng.randint(0, 8)
            hi = lo + rng.randint(0, 4)
            lo_closed, hi_closed = rng.random() < 0.7, rng.random() < 0.7
            if lo == hi:
                lo_closed = hi_closed = True
            spec[column] = Interval(lo, hi, lo_closed=lo_closed, hi_closed=hi_closed)
        boxes.append(Box(spec))
        weights.append(Fraction(rng.randint(0, 12), rng.randint(1, 6)))
    depth = max_weighted_depth(boxes, weights)
    clique, members = max_weight_clique(len(boxes), overlap_graph(boxes), weights)
    assert depth == clique == _brute_depth(boxes, weights, columns)
    assert sum((weights[i] for i in members), Fraction(0)) == clique


def test_max_weight_clique_is_exact_with_rational_weights() -> None:
    # A 4-cycle plus a chord; weights with different denominators.
    weights = [Fraction(1, 3), Fraction(1, 2), Fraction(2, 7), Fraction(1, 5)]
    edges = [(0, 1), (1, 2), (2, 3), (3, 0), (0, 2)]
    weight, members = max_weight_clique(4, edges, weights)
    assert weight == Fraction(1, 3) + Fraction(1, 2) + Fraction(2, 7)
    assert members == (0, 1, 2)
    assert max_weight_clique(0, [], []) == (Fraction(0), ())
    with pytest.raises(ValueError, match="outside"):
        max_weight_clique(2, [(0, 2)], [1, 1])
    with pytest.raises(ValueError, match="non-negative"):
        max_weight_clique(1, [], [-1])


def test_box_validation_and_json_round_trip() -> None:
    box = Box({"age": Interval(None, 30, hi_closed=False), "h": ("1/3", 2)}, unit="user")
    assert Box.from_json(box.to_json()) == box
    assert str(box) == "age in (-inf, 30) AND h in [0.3333333333333333, 2] [user-level]"
    with pytest.raises(TypeError, match="mapping"):
        Box([("age", (1, 2))])  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="unit"):
        Box({}, unit="row")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="Interval or a \\(lo, hi\\) pair"):
        Box({"age": [1, 2]})  # type: ignore[dict-item]


def test_ledger_requires_a_declared_unit_and_a_dataset() -> None:
    ledger = Ledger(":memory:", budget=10)
    with pytest.raises(ValueError, match='unit="record"'):
        ledger.charge(1, label="q", dataset="T", region=Box({"age": (0, 1)}))
    with pytest.raises(ValueError, match="dataset="):
        ledger.charge(1, label="q", region=Q1)
    with pytest.raises(TypeError, match="Box"):
        ledger.charge(1, label="q", dataset="T", region={"age": (0, 1)})  # type: ignore[arg-type]
    assert ledger.entries() == []


def test_regions_of_different_datasets_add_up() -> None:
    # The same person may be in both tables, so disjoint boxes over different datasets do not help.
    ledger = Ledger(":memory:", budget=10)
    ledger.charge(1, label="a", dataset="T", region=Q1)
    ledger.charge(1, label="b", dataset="T", region=Q3)
    ledger.charge(1, label="c", dataset="U", region=Q3)
    assert ledger.spent() == PureDP(2)  # max over T (1) + max over U (1)
    assert ledger.spent(dataset="T") == PureDP(1)
    ledger.charge(1, label="d", dataset="U", region=Q1)
    assert ledger.spent() == PureDP(2)
