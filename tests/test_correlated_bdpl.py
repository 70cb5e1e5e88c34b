"""Exact Bayesian DP leakage on discrete joint distributions (kakeibo.correlated.bdpl; issue 5, scope 1).

Expected values come from the seed (Yang, Sato and Nakagawa, SIGMOD 2015; seed 001): the tables 3(a)-(c),
the printed leakages 0.196 and 0.004 (section 4.2.3) and their closed forms, theorems 4.1 and 4.2 and the
prior/posterior figures of section 4.4 -- or from an independent brute force of definition 4.1 (eq. 4 and
6 evaluated cell by cell on a dense grid of outputs), never from a run of the code under test.
"""

from __future__ import annotations

import itertools
import math
from collections import defaultdict
from collections.abc import Callable, Sequence
from fractions import Fraction
from typing import Any

import numpy as np
import pytest
from numpy.typing import ArrayLike, NDArray
from scipy.optimize import brentq

from kakeibo.audit import audit, threshold
from kakeibo.correlated.bdpl import (
    MAX_TUPLES,
    FiniteOutputs,
    GeometricNoise,
    JointDistribution,
    LaplaceNoise,
    adversary_leakage,
    bdp_laplace_scale,
    bdpl,
    belief_update,
    max_adversary_leakage,
    max_bdpl,
    max_odds_ratio,
)
from kakeibo.mechanisms import Geometric, Laplace, RandomizedResponse

FloatArray = NDArray[np.float64]
Cell = tuple[float, ...]

# Table 3 of the seed prints x_2 as rows and x_1 as columns; here joint[x_1, x_2].
TABLE_A = [[0.1, 0.3], [0.15, 0.45]]  # independent
TABLE_B = [[0.49, 0.01], [0.01, 0.49]]  # positive correlation
TABLE_C = [[0.01, 0.49], [0.49, 0.01]]  # negative correlation
EPS = 0.1  # section 4.2.3: Lap(1/eps) with eps = 0.1


def seed_closed_form_b(eps: float) -> float:
    """Section 4.2.3, table 3(b): ``log((0.98 + 0.02 e^-eps) / (0.02 e^-eps + 0.98 e^-2eps))``."""
    u = math.exp(-eps)
    return math.log((0.98 + 0.02 * u) / (0.02 * u + 0.98 * u * u))


def seed_closed_form_c(eps: float) -> float:
    """Section 4.2.3, table 3(c): ``log((0.02 + 0.98 e^-eps) / (0.98 e^-eps + 0.02 e^-2eps))``."""
    u = math.exp(-eps)
    return math.log((0.02 + 0.98 * u) / (0.98 * u + 0.02 * u * u))


# ---------------------------------------------------------------------------------------------------------
# An independent brute force of definition 4.1
# ---------------------------------------------------------------------------------------------------------


def as_cells(table: ArrayLike, values: Sequence[Sequence[float]] | None = None) -> dict[Cell, float]:
    """``{(x_1, ..., x_n): probability}`` from a dense table (axis indices or ``values`` as tuple values)."""
    arr = np.asarray(table, dtype=float)
    labels = values if values is not None else [list(range(d)) for d in arr.shape]
    return {
        tuple(float(labels[j][v]) for j, v in enumerate(index)): float(arr[index])
        for index in itertools.product(*(range(d) for d in arr.shape))
    }


def laplace_density(scale: float) -> Callable[[FloatArray, float], FloatArray]:
    return lambda r, q: np.exp(-np.abs(r - q) / scale) / (2 * scale)


def brute_log_ratio(
    cells: dict[Cell, float],
    density: Callable[[FloatArray, float], FloatArray],
    target: int,
    known: Sequence[int],
    outputs: FloatArray,
    query: Callable[[Cell], float] = sum,
) -> FloatArray:
    """``max over x_K and ordered pairs (x_i, x_i') of log p(r | x_i, x_K) / p(r | x_i', x_K)`` at every
    output ``r``: eq. 4 summed cell by cell, straight from the definition (probability-0 contexts skipped)."""
    contexts: dict[Cell, dict[float, list[tuple[float, float]]]] = defaultdict(lambda: defaultdict(list))
    for x, p in cells.items():
        if p > 0:
            contexts[tuple(x[k] for k in known)][x[target]].append((query(x), p))
    best = np.full(outputs.shape, -np.inf)
    for per_value in contexts.values():
        mixture = {}
        for value, parts in per_value.items():
            mass = sum(p for _, p in parts)
            mixture[value] = sum(p / mass * density(outputs, q) for q, p in parts)
        for v, w in itertools.permutations(mixture, 2):
            best = np.maximum(best, np.log(mixture[v]) - np.log(mixture[w]))
    return best


def random_table(rng: np.random.Generator, shape: tuple[int, ...], zeros: int) -> FloatArray:
    """A random joint table with ``zeros`` cells of probability 0."""
    probs = rng.dirichlet(np.full(int(np.prod(shape)), 0.7))
    probs[rng.choice(probs.size, size=zeros, replace=False)] = 0.0
    table: FloatArray = (probs / probs.sum()).reshape(shape)
    return table


# ---------------------------------------------------------------------------------------------------------
# The seed's worked examples
# ---------------------------------------------------------------------------------------------------------


def test_table_3b_weak_adversary_leaks_0196() -> None:
    """Section 4.2.3: A(1, {}) on table 3(b) with Lap(1/0.1) leaks 0.196 (printed) = the closed form."""
    value = bdpl(TABLE_B, epsilon=EPS, target=0)
    assert round(value, 3) == 0.196
    assert value == pytest.approx(seed_closed_form_b(EPS), rel=1e-12)


def test_table_3c_weak_adversary_leaks_0004() -> None:
    """Section 4.2.3: A(1, {}) on table 3(c) leaks 0.004 (printed) = the closed form."""
    value = bdpl(TABLE_C, epsilon=EPS, target=0)
    assert round(value, 3) == 0.004
    assert value == pytest.approx(seed_closed_form_c(EPS), rel=1e-12)


@pytest.mark.parametrize("table", [TABLE_A, TABLE_B, TABLE_C])
@pytest.mark.parametrize("target", [0, 1])
def test_strong_adversary_leaks_epsilon(table: list[list[float]], target: int) -> None:
    """Theorem 4.2: the strong adversary A(i, [n] \\ {i}) leaks exactly what DP allows, eps."""
    assert bdpl(table, epsilon=EPS, target=target, known=[1 - target]) == pytest.approx(EPS, rel=1e-12)


@pytest.mark.parametrize("target", [0, 1])
def test_independent_table_3a_leaks_epsilon_for_every_adversary(target: int) -> None:
    """Theorem 4.1 / section 3.3.1: on the independent table 3(a) the weak adversary leaks eps too."""
    assert bdpl(TABLE_A, epsilon=EPS, target=target) == pytest.approx(EPS, rel=1e-12)
    assert max_bdpl(TABLE_A, epsilon=EPS) == pytest.approx(EPS, rel=1e-12)


def test_worst_adversary_is_weak_for_3b_and_strong_for_3c() -> None:
    """Section 4.2.3: 'sometimes the weak, sometimes the strong adversary leaks most'."""
    assert max_bdpl(TABLE_B, epsilon=EPS) == pytest.approx(seed_closed_form_b(EPS), rel=1e-12)
    worst_c = max_adversary_leakage(TABLE_C, LaplaceNoise(1 / EPS))
    assert worst_c.value == pytest.approx(EPS, rel=1e-12)
    assert len(worst_c.known) == 1


def test_section_4_4_prior_and_posterior() -> None:
    """Section 4.4, table 3(b), r = 2: the strong adversary goes from {0.02, 0.98} to {0.018, 0.982}, the weak
    one from {0.5, 0.5} to {0.45, 0.55}."""
    noise = LaplaceNoise(1 / EPS)
    strong = belief_update(TABLE_B, noise, target=0, known=[1], known_values=[1], output=2.0)
    assert strong.prior.round(3).tolist() == [0.02, 0.98]
    assert strong.posterior.round(3).tolist() == [0.018, 0.982]
    weak = belief_update(TABLE_B, noise, target=0, output=2.0)
    assert weak.prior.round(3).tolist() == [0.5, 0.5]
    assert weak.posterior.round(2).tolist() == [0.45, 0.55]


# ---------------------------------------------------------------------------------------------------------
# Exactness of the supremum over outputs, against the brute force
# ---------------------------------------------------------------------------------------------------------

SHAPES_AND_VALUES = [
    ((2, 3, 2), [[-1.0, 2.0], [0.0, 0.5, 3.0], [1.0, 4.0]]),
    ((3, 2, 2), [[0.0, 1.0, 2.0], [-2.0, 0.25], [0.0, 1.0]]),
]


def all_adversaries(n: int) -> list[tuple[int, tuple[int, ...]]]:
    return [
        (i, ks)
        for i in range(n)
        for size in range(n)
        for ks in itertools.combinations([k for k in range(n) if k != i], size)
    ]


@pytest.mark.parametrize("seed", [1, 2, 3])
@pytest.mark.parametrize(("shape", "values"), SHAPES_AND_VALUES)
def test_laplace_supremum_is_exact_against_a_dense_grid(
    seed: int, shape: tuple[int, ...], values: list[list[float]]
) -> None:
    """Exact sup >= every grid value, and exceeds the grid max by at most ``h / b``.

    Why ``h / b``: each Laplace component has a ``1/b``-Lipschitz log-density, so every mixture does
    (``A(r + d) <= e^(|d|/b) A(r)`` term by term) and a log-ratio is ``2/b``-Lipschitz; the maximiser is
    within ``h/2`` of a grid point of spacing ``h`` when the grid spans it. The witness attains the value.
    """
    rng = np.random.default_rng(seed)
    table = random_table(rng, shape, zeros=2)
    cells = as_cells(table, values)
    scale = float(rng.uniform(0.5, 3.0))
    joint = JointDistribution(table, values=values)
    sums = [sum(x) for x, p in cells.items() if p > 0]
    grid = np.linspace(min(sums) - 3 * scale, max(sums) + 3 * scale, 40_001)
    h = grid[1] - grid[0]
    for target, known in all_adversaries(3):
        leak = adversary_leakage(joint, LaplaceNoise(scale), target=target, known=known)
        on_grid = brute_log_ratio(cells, laplace_density(scale), target, known, grid)
        assert leak.value >= on_grid.max() - 1e-12
        assert leak.value - on_grid.max() <= h / scale + 1e-12
        if leak.output is not None:
            at_witness = brute_log_ratio(
                cells, laplace_density(scale), target, known, np.array([leak.output])
            )
            assert leak.value == pytest.approx(at_witness[0], abs=1e-12)


def test_laplace_tails_are_flat_at_the_closed_form_constant() -> None:
    """Left of every breakpoint the ratio is ``sum_k a_k e^(-q_k/b) / sum_k c_k e^(-q_k/b)`` (derived in the
    module); right of them ``sum_k a_k e^(q_k/b) / sum_k c_k e^(q_k/b)``; the exact sup dominates both."""
    scale = 1.5
    # Weak adversary on table 3(b) (tuple values 0/1): x_1 = 0 gives q = 0 w.p. 0.98, q = 1 w.p. 0.02.
    a = {0.0: 0.98, 1.0: 0.02}
    c = {1.0: 0.02, 2.0: 0.98}
    left = math.log(
        sum(w * math.exp(-q / scale) for q, w in a.items())
        / sum(w * math.exp(-q / scale) for q, w in c.items())
    )
    right = math.log(
        sum(w * math.exp(q / scale) for q, w in a.items())
        / sum(w * math.exp(q / scale) for q, w in c.items())
    )
    far = np.array([-60.0, -10.0, 0.0, 2.0, 10.0, 60.0])
    cells = as_cells(TABLE_B)
    brute = brute_log_ratio(cells, laplace_density(scale), 0, (), far)
    leak = adversary_leakage(TABLE_B, LaplaceNoise(scale), target=0)
    # brute maximises over both orders of the pair: the left tail favours x_1 = 0, the right one x_1 = 1.
    assert brute[:3] == pytest.approx([left] * 3, rel=1e-9)
    assert brute[3:] == pytest.approx([-right] * 3, rel=1e-9)
    assert leak.value == pytest.approx(max(left, -right), rel=1e-12)


@pytest.mark.parametrize("seed", [4, 5])
def test_general_query_and_mapping_input(seed: int) -> None:
    """A callable query (here ``max(x) - x_2``) on a sparse mapping, against the brute force."""
    rng = np.random.default_rng(seed)
    shape, values = SHAPES_AND_VALUES[0]
    cells = as_cells(random_table(rng, shape, zeros=3), values)
    sparse = {x: p for x, p in cells.items() if p > 0}

    def query(x: Any) -> float:
        return float(max(x) - x[2])

    scale = 0.8
    qs = [query(x) for x in sparse]
    grid = np.linspace(min(qs) - 3, max(qs) + 3, 20_001)
    for target, known in all_adversaries(3):
        leak = adversary_leakage(sparse, LaplaceNoise(scale), target=target, known=known, query=query)
        on_grid = brute_log_ratio(sparse, laplace_density(scale), target, known, grid, query)
        assert on_grid.max() - 1e-12 <= leak.value <= on_grid.max() + (grid[1] - grid[0]) / scale + 1e-12


def test_precomputed_query_array_matches_callable() -> None:
    rng = np.random.default_rng(6)
    table = random_table(rng, (3, 3), zeros=1)
    weights = np.array([[2.0 * a - b for b in range(3)] for a in range(3)])
    noise = LaplaceNoise(1.0)
    by_array = adversary_leakage(table, noise, target=1, query=weights)
    by_callable = adversary_leakage(table, noise, target=1, query=lambda x: 2.0 * x[0] - x[1])
    assert by_array.value == pytest.approx(by_callable.value, rel=1e-12)


def test_geometric_supremum_against_integer_outputs() -> None:
    """Geometric noise: the brute force over every integer output in a wide range (the breakpoints are
    integers, so it contains the maximiser); kakeibo's Geometric instance gives the same value."""
    rng = np.random.default_rng(7)
    table = random_table(rng, (3, 2, 3), zeros=2)
    cells = as_cells(table)
    scale = 2.0
    norm = math.tanh(1 / (2 * scale))  # 1 / sum_z e^(-|z|/s)

    def pmf(r: FloatArray, q: float) -> FloatArray:
        return norm * np.exp(-np.abs(r - q) / scale)

    outputs = np.arange(-30.0, 36.0)
    for target, known in all_adversaries(3):
        leak = adversary_leakage(table, GeometricNoise(scale), target=target, known=known)
        assert leak.value == pytest.approx(
            brute_log_ratio(cells, pmf, target, known, outputs).max(), abs=1e-12
        )
    kakeibo = adversary_leakage(table, Geometric(sensitivity=2, epsilon=1), target=0)
    assert kakeibo.value == pytest.approx(
        adversary_leakage(table, GeometricNoise(2.0), target=0).value, rel=1e-12
    )


def test_randomized_response_on_a_correlated_tuple() -> None:
    """Randomized response of ``x_2`` attacked through ``x_1`` (table 3(b)): the mixtures are
    ``P(r = 0 | x_1 = 0) = 0.98 p + 0.02 q`` and ``P(r = 0 | x_1 = 1) = 0.02 p + 0.98 q`` (and mirrored
    for ``r = 1``), so BDPL = ``log((0.98 p + 0.02 q) / (0.02 p + 0.98 q))``; attacking ``x_2`` itself
    gives eps (RR is eps-DP and nothing is marginalised)."""
    rr = RandomizedResponse(epsilon=1.0)
    p, q = rr.p, rr.q
    expected = math.log((0.98 * p + 0.02 * q) / (0.02 * p + 0.98 * q))
    through_x1 = adversary_leakage(TABLE_B, rr, target=0, query=lambda x: x[1])
    assert through_x1.value == pytest.approx(expected, rel=1e-12)
    own = adversary_leakage(TABLE_B, FiniteOutputs.randomized_response(rr), target=1, query=lambda x: x[1])
    assert own.value == pytest.approx(1.0, rel=1e-12)


def test_finite_outputs_with_a_custom_pmf() -> None:
    """A binary-output mechanism on the sum of two bits (``Pr(r = 1 | q) = (1 + q) / 4``), by brute force."""

    def log_pmf(r: FloatArray, q: FloatArray) -> FloatArray:
        return np.log(np.where(r == 1, (1 + q) / 4, 1 - (1 + q) / 4))

    def pmf(r: FloatArray, q: float) -> FloatArray:
        return np.where(r == 1, (1 + q) / 4, 1 - (1 + q) / 4)

    model = FiniteOutputs([0, 1], log_pmf)
    for table in (TABLE_A, TABLE_B, TABLE_C):
        for target, known in all_adversaries(2):
            leak = adversary_leakage(table, model, target=target, known=known)
            brute = brute_log_ratio(as_cells(table), pmf, target, known, np.array([0.0, 1.0]))
            assert leak.value == pytest.approx(brute.max(), abs=1e-12)


# ---------------------------------------------------------------------------------------------------------
# Symmetries and other structural facts
# ---------------------------------------------------------------------------------------------------------


def test_swapping_tuples_swaps_targets() -> None:
    rng = np.random.default_rng(8)
    table = random_table(rng, (2, 3, 4), zeros=2)
    swapped = np.transpose(table, (2, 0, 1))  # new tuple 0 = old 2, new 1 = old 0, new 2 = old 1
    old_to_new = {2: 0, 0: 1, 1: 2}
    noise = LaplaceNoise(1.3)
    for target, known in all_adversaries(3):
        a = adversary_leakage(table, noise, target=target, known=known).value
        b = adversary_leakage(swapped, noise, target=old_to_new[target], known=[old_to_new[k] for k in known])
        assert a == pytest.approx(b.value, rel=1e-12)


def test_reflecting_every_value_keeps_the_sum_leakage() -> None:
    """``x -> -x`` maps the sum to its negative and Laplace noise is symmetric: same leakage."""
    rng = np.random.default_rng(9)
    table = random_table(rng, (3, 3), zeros=1)
    values = [[0.0, 1.0, 5.0], [-1.0, 0.0, 2.0]]
    reflected = [[-v for v in axis] for axis in values]
    noise = LaplaceNoise(2.0)
    for target, known in all_adversaries(2):
        a = adversary_leakage(JointDistribution(table, values), noise, target=target, known=known).value
        b = adversary_leakage(JointDistribution(table, reflected), noise, target=target, known=known).value
        assert a == pytest.approx(b, rel=1e-12)


def test_exchangeable_table_leaks_the_same_for_every_target() -> None:
    cells = {x: (0.3 if len(set(x)) == 1 else 0.4 / 6) for x in itertools.product((0, 1), repeat=3)}
    noise = LaplaceNoise(1.0)
    weak = [adversary_leakage(cells, noise, target=i).value for i in range(3)]
    assert weak == pytest.approx([weak[0]] * 3, rel=1e-12)


def test_array_and_mapping_forms_agree_and_zero_cells_do_not_matter() -> None:
    rng = np.random.default_rng(10)
    table = random_table(rng, (2, 3), zeros=1)
    cells = as_cells(table)
    positive = {x: p for x, p in cells.items() if p > 0}
    noise = LaplaceNoise(0.7)
    for target, known in all_adversaries(2):
        values = {
            adversary_leakage(form, noise, target=target, known=known).value
            for form in (table, cells, positive)
        }
        assert max(values) - min(values) <= 1e-12


def test_independent_tables_leak_dp_for_every_adversary() -> None:
    """Theorem 4.1 on random product tables: max over all adversaries = largest domain range / b."""
    rng = np.random.default_rng(11)
    marginals = [rng.dirichlet(np.ones(d)) for d in (2, 3, 2)]
    table = np.einsum("i,j,k->ijk", *marginals)
    table /= table.sum()
    values = [[0.0, 1.0], [0.0, 2.0, 3.0], [1.0, 1.5]]
    scale = 1.7
    worst = max_adversary_leakage(JointDistribution(table, values), LaplaceNoise(scale))
    assert worst.value == pytest.approx(3.0 / scale, rel=1e-9)


def test_determined_target_leaks_nothing() -> None:
    """x_1 = x_2 always: an adversary who knows x_2 knows x_1, so no pair of target values exists."""
    leak = adversary_leakage([[0.5, 0.0], [0.0, 0.5]], LaplaceNoise(1.0), target=0, known=[1])
    assert (leak.value, leak.target_values, leak.output) == (0.0, None, None)
    assert max_odds_ratio([[0.5, 0.0], [0.0, 0.5]], LaplaceNoise(1.0), target=0, known=[1]) == 1.0


def test_max_odds_ratio_is_exp_bdpl_and_bounds_every_output() -> None:
    """Section 4.4: the posterior-odds / prior-odds ratio is the likelihood ratio, so its sup is e^BDPL."""
    rng = np.random.default_rng(12)
    table = random_table(rng, (2, 2, 3), zeros=1)
    noise = LaplaceNoise(1.1)
    for target, known in [(0, ()), (1, (2,)), (2, (0, 1))]:
        ratio = max_odds_ratio(table, noise, target=target, known=known)
        leak = adversary_leakage(table, noise, target=target, known=known)
        assert math.log(ratio) == pytest.approx(leak.value, rel=1e-10)
        joint = JointDistribution(table)
        contexts = {tuple(row[list(known)]) for row in joint.cells}
        for x_k in contexts:
            for r in np.linspace(-4.0, 8.0, 13):
                update = belief_update(table, noise, target=target, known=known, known_values=x_k, output=r)
                for v, w in itertools.permutations(update.values.tolist(), 2):
                    assert update.log_odds_change(v, w) <= leak.value + 1e-12


def test_bdp_laplace_scale_solves_the_seed_closed_form() -> None:
    """Table 3(b): the weak adversary is the worst, so the BDP scale solves ``closed_form(1/lambda) = eps``
    (solved here independently); never smaller, within 1e-8 relative."""
    exact = 1 / brentq(lambda s: seed_closed_form_b(s) - EPS, 1e-6, EPS, xtol=1e-15, rtol=1e-15)
    scale = bdp_laplace_scale(TABLE_B, epsilon=EPS)
    assert exact * (1 - 1e-12) <= scale <= exact * (1 + 1e-8)
    assert max_adversary_leakage(TABLE_B, LaplaceNoise(scale)).value <= EPS


@pytest.mark.parametrize("table", [TABLE_A, TABLE_C])
def test_bdp_laplace_scale_equals_dp_scale_when_the_strong_adversary_is_worst(
    table: list[list[float]],
) -> None:
    """Tables 3(a) and 3(c): no adversary leaks more than the strong one, Delta / lambda (theorems 4.1, 4.2;
    section 4.2.3), so lambda = 1 / eps."""
    scale = bdp_laplace_scale(table, epsilon=EPS)
    assert 1 / EPS <= scale <= (1 / EPS) * (1 + 1e-8)


# ---------------------------------------------------------------------------------------------------------
# Bad inputs
# ---------------------------------------------------------------------------------------------------------

BAD_JOINTS: list[tuple[object, type[Exception], str]] = [
    ([[0.5, 0.4], [0.05, 0.0]], ValueError, "sum to 1"),
    ([[0.6, -0.1], [0.25, 0.25]], ValueError, "non-negative"),
    ([[0.5, float("nan")], [0.25, 0.25]], ValueError, "finite"),
    ([["a", "b"]], TypeError, "real numbers"),
    (0.5, ValueError, "one non-empty axis"),
    ({}, ValueError, "empty"),
    ({(0, 0): 0.5, (1,): 0.5}, ValueError, "same positive length"),
    ({0: 0.5, 1: 0.5}, TypeError, "tuples"),
    ({("a", 0): 1.0}, TypeError, "real numbers"),
    ({(Fraction(1, 3), 0): 0.5, (1 / 3, 0): 0.5}, ValueError, "same cell"),
]


@pytest.mark.parametrize(("joint", "error", "message"), BAD_JOINTS)
def test_bad_joint_distributions_are_refused(joint: object, error: type[Exception], message: str) -> None:
    with pytest.raises(error, match=message):
        bdpl(joint, epsilon=EPS, target=0)  # type: ignore[arg-type]


def test_bad_axis_values_are_refused() -> None:
    with pytest.raises(ValueError, match="one sequence of tuple values per axis"):
        JointDistribution(TABLE_B, values=[[0, 1]])
    with pytest.raises(ValueError, match="must hold 2 values"):
        JointDistribution(TABLE_B, values=[[0, 1], [0, 1, 2]])
    with pytest.raises(ValueError, match="must not repeat"):
        JointDistribution(TABLE_B, values=[[0, 1], [1, 1]])
    with pytest.raises(ValueError, match="mapping's keys are the values"):
        JointDistribution({(0,): 1.0}, values=[[0]])


@pytest.mark.parametrize(
    ("kwargs", "error", "message"),
    [
        ({"target": 0, "known": [0]}, ValueError, "cannot also be a known tuple"),
        ({"target": 2}, ValueError, "tuple index in 0..1"),
        ({"target": True}, TypeError, "integer"),
        ({"target": 0.0}, TypeError, "integer"),
        ({"target": 0, "known": [1, 1]}, ValueError, "repeat"),
        ({"target": 0, "known": 1}, TypeError, "iterable"),
        ({"target": 0, "known": [5]}, ValueError, "tuple index"),
    ],
)
def test_bad_adversaries_are_refused(kwargs: dict[str, object], error: type[Exception], message: str) -> None:
    with pytest.raises(error, match=message):
        bdpl(TABLE_B, epsilon=EPS, **kwargs)  # type: ignore[arg-type]


def test_bad_parameters_and_queries_are_refused() -> None:
    with pytest.raises(ValueError, match="epsilon must be positive"):
        bdpl(TABLE_B, epsilon=0, target=0)
    with pytest.raises(ValueError, match="sensitivity must be positive"):
        bdpl(TABLE_B, epsilon=EPS, target=0, sensitivity=-1)
    with pytest.raises(ValueError, match="sensitivity 0"):
        bdpl([[1.0]], epsilon=EPS, target=0)
    with pytest.raises(ValueError, match="scale must be positive"):
        LaplaceNoise(0.0)
    noise = LaplaceNoise(1.0)
    with pytest.raises(ValueError, match="shape"):
        adversary_leakage(TABLE_B, noise, target=0, query=np.zeros((3, 2)))
    with pytest.raises(ValueError, match="given as an array"):
        adversary_leakage(as_cells(TABLE_B), noise, target=0, query=np.zeros((2, 2)))
    with pytest.raises(TypeError, match="real number"):
        adversary_leakage(TABLE_B, noise, target=0, query=lambda x: "high")
    with pytest.raises(ValueError, match="finite"):
        adversary_leakage(TABLE_B, noise, target=0, query=lambda x: math.inf)


def test_bad_mechanisms_are_refused() -> None:
    with pytest.raises(TypeError, match="LaplaceNoise"):
        adversary_leakage(TABLE_B, Laplace(sensitivity=1, epsilon=1), target=0)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="OutputModel"):
        adversary_leakage(TABLE_B, "laplace", target=0)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="integer"):
        adversary_leakage(JointDistribution(TABLE_B, [[0, 0.5], [0, 1]]), GeometricNoise(1.0), target=0)
    with pytest.raises(ValueError, match="valid input"):  # RR of categories {0, 1} cannot release the sum 2
        adversary_leakage(TABLE_B, RandomizedResponse(epsilon=1.0), target=0)
    with pytest.raises(ValueError, match="distinct"):
        FiniteOutputs([0, 0], lambda r, q: np.zeros_like(r))
    with pytest.raises(TypeError, match="function"):
        FiniteOutputs([0, 1], 0.5)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="log probabilities"):
        adversary_leakage(
            TABLE_B,
            FiniteOutputs([0, 1], lambda r, q: np.ones(np.broadcast_shapes(r.shape, q.shape))),
            target=0,
        )


def test_too_many_tuples_and_bad_belief_inputs_are_refused() -> None:
    big = {tuple([0] * (MAX_TUPLES + 1)): 0.5, tuple([1] * (MAX_TUPLES + 1)): 0.5}
    with pytest.raises(ValueError, match="at most 12 tuples"):
        max_bdpl(big, epsilon=EPS)
    with pytest.raises(ValueError, match="at most 12 tuples"):
        bdp_laplace_scale(big, epsilon=EPS)
    noise = LaplaceNoise(1.0)
    with pytest.raises(ValueError, match="one value per known tuple"):
        belief_update(TABLE_B, noise, target=0, known=[1], output=0.0)
    with pytest.raises(ValueError, match="probability 0"):
        belief_update(TABLE_B, noise, target=0, known=[1], known_values=[7], output=0.0)
    with pytest.raises(ValueError, match="output must be finite"):
        belief_update(TABLE_B, noise, target=0, output=math.nan)
    with pytest.raises(ValueError, match="constant"):
        bdp_laplace_scale(TABLE_B, epsilon=EPS, query=lambda x: 1.0)


# ---------------------------------------------------------------------------------------------------------
# Statistical audit of the BDP calibration
# ---------------------------------------------------------------------------------------------------------

#: Three strongly positively correlated bits: all equal with probability 0.8.
CORRELATED = np.full((2, 2, 2), 0.2 / 6)
CORRELATED[0, 0, 0] = CORRELATED[1, 1, 1] = 0.4
AUDIT_EPS = 0.5
AUDIT_TRIALS = 1_000_000


def conditional_release_sampler(
    table: FloatArray, target: int, known: Sequence[int], known_values: Sequence[float], scale: float
) -> Callable[[float, int, np.random.Generator], FloatArray]:
    """``sampler(x_i, n, rng)``: ``n`` datasets with the unknown tuples drawn from the joint table
    conditioned on ``x_i`` and ``x_K``, each released as ``sum + Lap`` by kakeibo's Laplace mechanism
    (scale ``scale (1 + 2^-20)``: exact discrete Laplace on a grid holding every integer sum)."""
    cells = np.argwhere(table > 0)
    probs = table[table > 0]
    mechanism = Laplace(sensitivity=scale, epsilon=1)

    def sampler(value: float, n: int, rng: np.random.Generator) -> FloatArray:
        match = (cells[:, target] == value) & np.all(cells[:, list(known)] == list(known_values), axis=1)
        weights = probs[match] / probs[match].sum()
        drawn = cells[match][rng.choice(weights.size, size=n, p=weights)]
        return np.asarray(mechanism.release(drawn.sum(axis=1).astype(float), rng=rng))

    return sampler


@pytest.mark.statistical
def test_audit_of_bdp_calibrated_laplace_sum_stays_below_epsilon() -> None:
    """The BDP-calibrated scale, audited on the worst adversary's witness pair (unknown tuples redrawn
    from the conditional joint distribution), shows no leak above eps.

    The released mechanism is discrete Laplace of scale ``>= lambda`` on a lattice containing every query
    value; its log-pmf has the same ``-|r - q| / s`` form, so the module's breakpoint argument gives it
    the continuous leakage at scale ``s >= lambda``, at most eps. The audit's lower bound exceeds the true
    epsilon with probability at most alpha: false-failure rate <= 1e-6.
    """
    scale = bdp_laplace_scale(CORRELATED, epsilon=AUDIT_EPS)
    worst = max_adversary_leakage(CORRELATED, LaplaceNoise(scale))
    assert worst.target_values is not None and worst.known_values is not None
    sampler = conditional_release_sampler(CORRELATED, worst.target, worst.known, worst.known_values, scale)
    x, x_prime = worst.target_values
    result = audit(sampler, x, x_prime, trials=AUDIT_TRIALS, alpha=1e-6, rng=np.random.default_rng(13))
    assert not result.refutes(AUDIT_EPS), str(result)


@pytest.mark.statistical
def test_audit_of_dp_calibrated_laplace_sum_exceeds_epsilon() -> None:
    """Negative control: the plain-DP scale ``Delta / eps`` lets the weak adversary learn more than eps.

    One event, ``{r > q_min}`` with ``q_min = 0`` the smallest sum: for ``r <= 0`` the likelihood ratio of
    ``x_1 = 0`` against ``x_1 = 1`` is the constant ``e^L`` (module proof, left tail), so the event's
    complement has probability ratio exactly ``e^L``, with ``L`` (about 1.2 here) far above eps = 0.5.
    Both probabilities exceed 0.1, so with 10^6 trials each log-probability has standard error below
    0.0032; the Clopper-Pearson bounds at level 2.5e-7 shrink the ratio by about 0.04, and the bound can
    fall to eps only if the estimates deviate by over 100 standard errors: false-failure rate < 1e-12.
    """
    dp_scale = 1 / AUDIT_EPS
    leak = adversary_leakage(CORRELATED, LaplaceNoise(dp_scale), target=0)
    assert leak.value > 2 * AUDIT_EPS
    sampler = conditional_release_sampler(CORRELATED, 0, (), (), dp_scale)
    result = audit(
        sampler, 0, 1, trials=AUDIT_TRIALS, alpha=1e-6, events=[threshold(0.0)], rng=np.random.default_rng(14)
    )
    assert result.refutes(AUDIT_EPS), str(result)
    assert result.epsilon_lower_bound <= leak.value
