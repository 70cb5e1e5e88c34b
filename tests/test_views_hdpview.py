"""HDPView (``kakeibo.views.hdpview``): the aggregation errors its cuts are scored by, its calibration, the
partition it releases, the error bound of its answers, and an audit of its privacy claim."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest
from scipy import stats

from kakeibo.audit import audit
from kakeibo.views.hdpview import (
    AE_SENSITIVITY,
    Calibration,
    HDPViewParameters,
    View,
    aggregation_error,
    build,
    cut_errors,
)


def _dense_ae(tensor: np.ndarray) -> float:
    return float(np.abs(tensor - tensor.mean()).sum())


def _sparse(tensor: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    cells = np.argwhere(tensor > 0).astype(np.int64)
    return cells, tensor[tensor > 0].astype(np.float64)


def _correlated_rows(rows: int, size: int, seed: int) -> np.ndarray:
    """Rows over 4 attributes of ``size`` values; the second follows the first, so the tensor has structure
    for the cuts to find."""
    rng = np.random.default_rng(seed)
    data = rng.integers(0, size, size=(rows, 4))
    data[:, 1] = (data[:, 0] + rng.integers(0, 2, rows)) % size
    return data


def _tensor_of(data: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    cells, counts = np.unique(data, axis=0, return_counts=True)
    return cells.astype(np.int64), counts.astype(np.float64)


# --- the aggregation error and the cut scores -----------------------------------------------------------


@pytest.mark.parametrize("seed", range(6))
def test_cut_errors_equal_those_of_the_dense_tensor(seed: int) -> None:
    """Sparse and dense blocks alike (means below and above 1, so both branches of the formula run): every
    cut's AE(left) + AE(right) from prefix sums equals the dense computation."""
    rng = np.random.default_rng(seed)
    for rate in (0.05, 0.7, 3.0, 40.0):
        shape = (int(rng.integers(2, 9)), int(rng.integers(1, 6)), int(rng.integers(1, 4)))
        tensor = rng.poisson(rate, size=shape).astype(np.float64)
        cells, counts = _sparse(tensor)
        for axis in range(3):
            if shape[axis] < 2:
                continue
            got = cut_errors(cells[:, axis], counts, shape[axis], float(tensor.size))
            moved = np.moveaxis(tensor, axis, 0)
            want = [_dense_ae(moved[: i + 1]) + _dense_ae(moved[i + 1 :]) for i in range(shape[axis] - 1)]
            np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-9)
        assert aggregation_error(counts, float(tensor.size)) == pytest.approx(_dense_ae(tensor))


@pytest.mark.parametrize("seed", range(4))
def test_one_row_moves_every_score_by_less_than_the_declared_sensitivity(seed: int) -> None:
    """The privacy argument's sensitivity: adding a row anywhere moves a block's AE, and so every cut's
    score, by at most 2 (1 - 1/|B|) < 2."""
    rng = np.random.default_rng(seed)
    shape = (6, 5, 3)
    worst = 0.0
    for _ in range(50):
        tensor = rng.poisson(rng.choice([0.1, 1.0, 5.0]), size=shape).astype(np.float64)
        neighbour = tensor.copy()
        neighbour[tuple(rng.integers(0, s) for s in shape)] += 1
        for axis in range(3):
            scores = [
                cut_errors(c[:, axis], x, shape[axis], float(tensor.size))
                for c, x in map(_sparse, (tensor, neighbour))
            ]
            worst = max(worst, float(np.abs(scores[0] - scores[1]).max()))
        change = abs(_dense_ae(neighbour) - _dense_ae(tensor))
        assert change <= AE_SENSITIVITY * (1 - 1 / tensor.size) + 1e-9
    assert 1.0 < worst < AE_SENSITIVITY


def test_the_calibration_spends_exactly_epsilon() -> None:
    """Cuts (1 - gamma) epsilon_r over the depth limit, converge tests gamma epsilon_r through lambda, leaf
    totals epsilon_p: the three parts sum to epsilon, with the paper's constants."""
    params = HDPViewParameters()
    epsilon, volume = 1.0, 16.0**4
    calibration = Calibration.of(epsilon, volume, params)
    epsilon_r, epsilon_p = 0.9, 0.1
    assert calibration.depth_limit == math.ceil(1.2 * 16)
    assert calibration.cut.utility_sensitivity == 2
    lam = ((2 * 1.6 - 1) / (1.6 - 1) + 1) * 2 / (0.9 * epsilon_r)
    assert calibration.converge.scale == pytest.approx(lam, rel=1e-5)
    assert calibration.decay == pytest.approx(lam * math.log(1.6))
    assert calibration.theta == pytest.approx(1 / epsilon_p)
    assert calibration.perturb.sensitivity == 1 and calibration.perturb.epsilon == pytest.approx(epsilon_p)
    converge_epsilon = ((2 * 1.6 - 1) / (1.6 - 1) + 1) * 2 / lam
    spent = calibration.cut.epsilon * calibration.depth_limit + converge_epsilon + calibration.perturb.epsilon
    assert spent == pytest.approx(epsilon)


@pytest.mark.parametrize(
    ("change", "fragment"),
    [
        ({"ratio": 1.0}, "ratio must lie strictly between 0 and 1"),
        ({"gamma": 0.0}, "gamma must lie strictly between 0 and 1"),
        ({"alpha": 1.0}, "alpha must exceed 1"),
        ({"beta": -1.0}, "beta must be positive"),
        ({"theta": math.nan}, "theta must be a finite number"),
    ],
)
def test_bad_parameters_are_refused(change: dict[str, float], fragment: str) -> None:
    with pytest.raises(ValueError, match=fragment):
        HDPViewParameters(**change)


@pytest.mark.parametrize(
    ("cells", "counts", "fragment"),
    [
        ([[0, 9]], [1], "inside the domain"),
        ([[0, 1], [0, 1]], [1, 2], "distinct"),
        ([[0, 1]], [0.5], "whole numbers of at least 1"),
        ([[0, 1]], [1, 1], "one row per non-zero cell"),
    ],
)
def test_bad_tensors_are_refused(cells: Any, counts: Any, fragment: str) -> None:
    with pytest.raises(ValueError, match=fragment):
        build(cells, counts, (4, 4), epsilon=1.0)


# --- the view --------------------------------------------------------------------------------------------


def test_the_blocks_partition_the_domain_and_answers_sum_their_totals() -> None:
    data = _correlated_rows(3_000, 8, seed=1)
    view = build(*_tensor_of(data), (8,) * 4, epsilon=1.0, rng=np.random.default_rng(2))
    cover = np.zeros((8,) * 4, dtype=np.int64)
    for low, high in zip(view.lows, view.highs, strict=True):
        cover[tuple(slice(a, b + 1) for a, b in zip(low, high, strict=True))] += 1
    assert (cover == 1).all()
    everything = view.range_counts(np.zeros((1, 4)), np.full((1, 4), 7))
    assert everything[0] == pytest.approx(view.totals.sum())
    one_cell = view.range_counts(np.full((1, 4), 3), np.full((1, 4), 3))
    holder = np.flatnonzero(((view.lows <= 3) & (view.highs >= 3)).all(axis=1))
    assert holder.size == 1
    volume = np.prod(view.highs[holder[0]] - view.lows[holder[0]] + 1)
    assert one_cell[0] == pytest.approx(view.totals[holder[0]] / volume)


def test_range_counts_by_dense_marginals_equal_the_sum_over_blocks(monkeypatch: pytest.MonkeyPatch) -> None:
    """Queries constraining 0 to 4 attributes: the prefix-sum answers of the dense marginals equal the
    direct sums over the blocks (and so does a marginal too large to make dense)."""
    view = build(
        *_tensor_of(_correlated_rows(3_000, 8, seed=11)), (8,) * 4, epsilon=1.0, rng=np.random.default_rng(12)
    )
    rng = np.random.default_rng(13)
    lows, highs = np.zeros((400, 4), np.int64), np.full((400, 4), 7)
    for q in range(400):
        dims = rng.choice(4, int(rng.integers(0, 5)), replace=False)
        ends = np.sort(rng.integers(0, 8, size=(2, dims.size)), axis=0)
        lows[q, dims], highs[q, dims] = ends
    direct = view.weights(lows, highs + 1) @ view.totals
    np.testing.assert_allclose(view.range_counts(lows, highs), direct, rtol=1e-9, atol=1e-6)
    monkeypatch.setattr("kakeibo.views.hdpview.DENSE_MARGINAL", 1)
    fresh = build(
        *_tensor_of(_correlated_rows(3_000, 8, seed=11)), (8,) * 4, epsilon=1.0, rng=np.random.default_rng(12)
    )
    np.testing.assert_allclose(fresh.range_counts(lows, highs), direct, rtol=1e-9, atol=1e-6)


def test_a_domain_of_one_cell_is_one_block() -> None:
    view = build([[0, 0]], [5], (1, 1), epsilon=1.0, rng=np.random.default_rng(0))
    assert view.blocks == 1 and view.lows.tolist() == [[0, 0]] and view.highs.tolist() == [[0, 0]]


def test_cuts_follow_the_data() -> None:
    """All 4,000 rows in a 3^3 corner of a 16^3 domain: at epsilon 1 the view needs under 100 blocks (of 4,096
    cells) to answer both the corner and the empty rest within 2.5% of the rows."""
    rng = np.random.default_rng(3)
    data = rng.integers(0, 3, size=(4_000, 3))
    view = build(*_tensor_of(data), (16,) * 3, epsilon=1.0, rng=np.random.default_rng(4))
    corner = view.range_counts(np.zeros((1, 3)), np.full((1, 3), 2))[0]
    rest = view.range_counts(np.full((1, 3), 3), np.full((1, 3), 15))[0]
    assert abs(corner - 4_000) < 100 and abs(rest) < 100
    assert view.blocks < 100


def test_a_large_epsilon_splits_down_to_cells() -> None:
    """HDPView's converge floor is theta + 2 - delta: once delta = lambda ln alpha falls below 2 (epsilon
    above about 2.7 here), a block converges only by its noise, so the view tends to the cells themselves."""
    rng = np.random.default_rng(3)
    data = rng.integers(0, 3, size=(1_000, 3))
    view = build(*_tensor_of(data), (8,) * 3, epsilon=50.0, rng=np.random.default_rng(4))
    assert view.blocks > 0.9 * 8**3


def _noise_free(view: View, cells: np.ndarray, counts: np.ndarray) -> np.ndarray:
    """The true total of each block of ``view``."""
    inside = ((cells[None] >= view.lows[:, None]) & (cells[None] <= view.highs[:, None])).all(axis=2)
    totals: np.ndarray = inside.astype(np.float64) @ counts
    return totals


@pytest.mark.statistical
def test_the_error_bound_holds_at_its_confidence() -> None:
    """100 seeded builds, 24 range counts each: the answer misses the noise-free answer (the same blocks,
    their true totals spread uniformly) by more than the bound at beta = 0.1 in at most 10% of the 2,400
    cases, up to the binomial test's slack at level 1e-4; the bound is not vacuous either (the misses'
    90% quantile is at least a third of it)."""
    data = _correlated_rows(2_000, 8, seed=5)
    cells, counts = _tensor_of(data)
    rng = np.random.default_rng(6)
    lows = rng.integers(0, 4, size=(24, 4))
    highs = lows + rng.integers(0, 5, size=(24, 4))
    misses, ratios = 0, []
    for seed in range(100):
        view = build(cells, counts, (8,) * 4, epsilon=1.0, rng=np.random.default_rng(1_000 + seed))
        weights = view.weights(lows, highs + 1)
        error = np.abs(view.range_counts(lows, highs) - weights @ _noise_free(view, cells, counts))
        bound = view.error_bounds(lows, highs, 0.1)
        misses += int((error > bound).sum())
        ratios.extend(error / bound)
    trials = 100 * 24
    assert stats.binomtest(misses, trials, 0.1, alternative="greater").pvalue > 1e-4
    assert np.quantile(ratios, 0.9) > 1 / 3


def test_the_error_bound_of_one_block_is_its_laplace_bound() -> None:
    """A query covering exactly one block has one noise term: its bound is the Laplace mechanism's own."""
    view = build(
        *_tensor_of(_correlated_rows(500, 4, seed=7)), (4,) * 4, epsilon=1.0, rng=np.random.default_rng(8)
    )
    bound = view.error_bounds(view.lows[:1], view.highs[:1], 0.05)[0]
    assert bound == view.noise.error_bound(0.05)


# --- privacy ---------------------------------------------------------------------------------------------


def _neighbours() -> tuple[tuple[np.ndarray, np.ndarray], tuple[np.ndarray, np.ndarray]]:
    """120 rows over a 4 x 4 x 2 domain, and the same plus one row in the densest cell."""
    data = _correlated_rows(120, 4, seed=9)[:, :3] % np.array([4, 4, 2])
    tensor = _tensor_of(data)
    target = tensor[0][np.argmax(tensor[1])]
    return tensor, _tensor_of(np.vstack([data, target]))


def _sampler(epsilon: float) -> Any:
    """Builds released as the view's answer for the target's cell (its block's noisy total over its volume:
    the partition and the noise at once)."""
    worlds = _neighbours()
    target = worlds[0][0][np.argmax(worlds[0][1])][None]

    def sample(index: int, n: int, rng: Any) -> np.ndarray:
        cells, counts = worlds[index]
        return np.array(
            [
                build(cells, counts, (4, 4, 2), epsilon=epsilon, rng=rng).range_counts(target, target)[0]
                for _ in range(n)
            ]
        )

    return sample


@pytest.mark.statistical
def test_an_audit_of_the_build_does_not_refute_its_epsilon() -> None:
    """1,000 builds per neighbour at epsilon 1 (after 200 to choose the events): the audit's 95% lower bound
    on epsilon stays below 1. An audit of 400 builds at epsilon 30 refutes epsilon 1, so the audit has the
    power to see a build that spends more than it says."""
    honest = audit(
        _sampler(1.0), 0, 1, trials=1_000, batch=500, selection_trials=200, rng=np.random.default_rng(10)
    )
    assert not honest.refutes(1.0), honest
    leaky = audit(
        _sampler(30.0), 0, 1, trials=400, batch=400, selection_trials=100, rng=np.random.default_rng(10)
    )
    assert leaky.refutes(1.0), leaky
