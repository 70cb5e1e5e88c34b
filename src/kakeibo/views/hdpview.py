"""HDPView: a differentially private materialised view of a count tensor (Kato, Takahashi, Takagi, Cao, Liew
and Yoshikawa, "HDPView: Differentially Private Materialized View for Exploring High Dimensional Relational
Data", PVLDB 15(9), 2022; seed 002, slides 54-59).

The data is the count tensor ``x`` over the product of the attributes' discrete domains (``sizes``), held
sparsely: the non-zero cells and their counts. The view is a partition of the whole domain into
hyper-rectangular *blocks*, each with one noisy total; a range count is answered by summing, over the
blocks it overlaps, the overlapped share of the block's volume times the block's noisy total (the counts
are taken uniform inside a block). Building it:

1. **Partitioning** at ``epsilon_r = ratio * epsilon``, by recursive bisection from the whole domain:

   * **random cut** of a block at depth ``<= depth_limit = ceil(beta * log2 |domain|)``: the exponential
     mechanism over every (attribute, cut point) pair, scored by ``-(AE(left) + AE(right))``, where the
     aggregation error ``AE(B) = sum_{c in B} |x_c - mean_B(x)|`` is the L1 error of replacing the block's
     cells by their mean. At ``epsilon_cut = (1 - gamma) epsilon_r / depth_limit`` per depth. Deeper blocks
     are cut at a uniformly random attribute and point (no data read, no budget);
   * **random converge** of each child (PrivTree's biased stopping, Zhang, Xiao and Xie, SIGMOD 2016, with
     HDPView's constants): ``b = max(AE(child) - delta depth, theta + 2 - delta)``; the child becomes a
     leaf when ``b + Lap(lambda) <= theta``, with ``lambda = ((2 alpha - 1)/(alpha - 1) + 1) 2 / (gamma
     epsilon_r)`` and ``delta = lambda ln alpha``. A child of one cell is always a leaf.

2. **Perturbation** at ``epsilon_p = (1 - ratio) epsilon``: each leaf's total gets Laplace noise of scale
   ``1 / epsilon_p``. The leaves are disjoint, so one row changes one total by 1: parallel composition.

Neighbour relation: add or remove one row (one cell's count changes by 1). Sensitivities: a block's AE
changes by at most ``2 (1 - 1/|B|) < 2`` (the changed cell by ``1 - 1/|B|``, each of the other ``|B| - 1``
by ``1/|B|`` through the mean), so the cut scores have sensitivity 2; within one depth the blocks are
disjoint (parallel composition), over the ``depth_limit`` depths the cuts compose to ``(1 - gamma)
epsilon_r``; the converge tests over the whole tree cost ``gamma epsilon_r`` (the paper's theorem, after
PrivTree's); leaf totals have sensitivity 1. In all ``epsilon``-DP. A person who may hold ``k`` rows is
covered by building at ``epsilon / k`` (group privacy; :mod:`kakeibo.views` does that).

Parameters default to the authors' experiments: ``ratio = 0.9``, ``alpha = 1.6``, ``beta = 1.2``, ``gamma =
0.9``, ``theta = 1 / epsilon_p``. Every draw comes from kakeibo's exact samplers (permute-and-flip for the
cuts, grid Laplace for the tests and totals); no Python loop runs over cells: each block's scores for all
its cut points come from prefix sums over its non-zero cells (:func:`cut_errors`).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from numpy.typing import ArrayLike, NDArray

from ..errors import ArgumentError
from ..mechanisms import Exponential, Laplace
from ..mechanisms.accuracy import CHERNOFF_POINTS, geometric_sum_error
from ..noise import exact, resolve_source
from ..noise.source import RandomSource

__all__ = [
    "CHERNOFF_POINTS",
    "Calibration",
    "HDPViewParameters",
    "View",
    "aggregation_error",
    "build",
    "cut_errors",
    "noise_bound",
]

IntArray = NDArray[np.int64]
FloatArray = NDArray[np.float64]

#: the most cells of a marginal :meth:`View.range_counts` makes dense to answer its queries by prefix sums
DENSE_MARGINAL = 2**22
#: the most cells of dense marginals a view keeps between calls (2^24 doubles: 128 MiB)
CACHED_CELLS = 2**24
#: the sensitivity of a block's aggregation error (and so of a cut's score) to one row (module docstring)
AE_SENSITIVITY = 2


@dataclass(frozen=True)
class HDPViewParameters:
    """The budget split and the converge test's constants (defaults: the authors' experiments)."""

    ratio: float = 0.9  # share of epsilon spent on partitioning
    alpha: float = 1.6  # PrivTree's decay base: the bias drops by lambda ln alpha per depth
    beta: float = 1.2  # depth_limit = ceil(beta log2 |domain|): deeper cuts are data-independent
    gamma: float = 0.9  # share of the partitioning budget spent on converge tests (the rest on cuts)
    theta: float | None = None  # the converge threshold; None: 1 / epsilon_p

    def __post_init__(self) -> None:
        for name in ("ratio", "gamma"):
            value = getattr(self, name)
            if not 0 < value < 1:
                raise ArgumentError(f"{name} must lie strictly between 0 and 1, got {value!r}.")
        if not self.alpha > 1:
            raise ArgumentError(f"alpha must exceed 1, got {self.alpha!r}.")
        if not self.beta > 0:
            raise ArgumentError(f"beta must be positive, got {self.beta!r}.")
        if self.theta is not None and not math.isfinite(self.theta):
            raise ArgumentError(f"theta must be a finite number, got {self.theta!r}.")


@dataclass(frozen=True)
class View:
    """A built view: blocks ``[lows[b], highs[b]]`` (inclusive, per attribute) partitioning the domain, each
    with a noisy total. ``noise`` is the Laplace mechanism of the totals (its scale gives every answer's
    error bound)."""

    sizes: tuple[int, ...]
    lows: IntArray  # (blocks, attributes)
    highs: IntArray
    totals: FloatArray  # noisy, one per block
    noise: Laplace
    epsilon: float
    _marginals: dict[tuple[int, ...], FloatArray] = field(default_factory=dict, repr=False, compare=False)

    @property
    def blocks(self) -> int:
        return int(self.totals.size)

    def weights(self, starts: ArrayLike, stops: ArrayLike) -> FloatArray:
        """``(queries, blocks)``: the share of each block inside each query box ``[starts, stops)`` of cell
        coordinates (cell ``i`` of an attribute spans ``[i, i + 1)``, so a box may cut cells: a block's
        count is taken to spread evenly over it)."""
        q_start, q_stop = (
            np.atleast_2d(np.asarray(starts, np.float64)),
            np.atleast_2d(np.asarray(stops, np.float64)),
        )
        if q_start.shape != q_stop.shape or q_start.shape[1] != len(self.sizes):
            raise ArgumentError(f"query boxes must have shape (queries, {len(self.sizes)}).")
        span = (self.highs - self.lows + 1).astype(np.float64)
        inside = np.minimum(q_stop[:, None, :], self.highs[None] + 1.0) - np.maximum(
            q_start[:, None, :], self.lows[None]
        )
        weights: FloatArray = np.prod(np.clip(inside, 0, None) / span[None], axis=2)
        return weights

    def range_counts(self, lows: IntArray, highs: IntArray) -> FloatArray:
        """The view's answer to each range count ``lows[q] <= x <= highs[q]`` (inclusive, per attribute).

        Queries are grouped by the attributes they constrain. A group answers from the view's dense
        marginal on those attributes (each block's total spread evenly over its projection, with prefix
        sums: each query is then the inclusion-exclusion of its 2^k corners) when that marginal has at most
        :data:`DENSE_MARGINAL` cells and costs less to make than summing the group's queries over the
        blocks (:meth:`weights`), which the other groups do. Both give the same numbers: the answer is
        linear in the blocks and the marginal is exact. At most :data:`CACHED_CELLS` cells of marginals are
        kept, the least recently used dropped first."""
        q_lo, q_hi = _queries(lows, highs, self.sizes)
        top = np.asarray(self.sizes, np.int64) - 1
        patterns, which = np.unique((q_lo > 0) | (q_hi < top), axis=0, return_inverse=True)
        out = np.empty(q_lo.shape[0])
        for i, pattern in enumerate(patterns):
            rows = np.flatnonzero(which.ravel() == i)
            dims = tuple(int(d) for d in np.flatnonzero(pattern))
            cells = math.prod(self.sizes[d] + 1 for d in dims)
            direct = rows.size * self.blocks * max(len(dims), 1)
            if not dims:
                out[rows] = self.totals.sum()
            elif cells <= DENSE_MARGINAL and (
                dims in self._marginals or cells + self.blocks * 2 ** len(dims) < direct
            ):
                out[rows] = _corners(
                    self._marginal_prefix(dims), q_lo[rows][:, dims], q_hi[rows][:, dims] + 1
                )
            else:
                for start in range(0, rows.size, 256):
                    chunk = rows[start : start + 256]
                    out[chunk] = self.weights(q_lo[chunk], q_hi[chunk] + 1) @ self.totals
        return out

    def _marginal_prefix(self, dims: tuple[int, ...]) -> FloatArray:
        """Prefix sums (with a leading 0 on every axis) of the view's dense marginal on ``dims``."""
        cached = self._marginals.pop(dims, None)
        if cached is not None:
            self._marginals[dims] = cached  # the most recently used last
            return cached
        shape = tuple(self.sizes[d] + 1 for d in dims)
        lows, ends = self.lows[:, dims], self.highs[:, dims] + 1
        density = self.totals / np.prod((ends - lows).astype(np.float64), axis=1)
        flat = np.zeros(math.prod(shape))  # a difference array: each block adds its density on its box
        for corner in np.ndindex(*(2,) * len(dims)):
            at = np.ravel_multi_index(tuple(np.where(np.array(corner, bool)[None, :], ends, lows).T), shape)
            flat += np.bincount(at, weights=density * (-1) ** sum(corner), minlength=flat.size)
        step: FloatArray = flat.reshape(shape)
        for axis in range(len(dims)):
            step = np.cumsum(step, axis=axis)
        prefix = np.zeros(shape)
        prefix[tuple(slice(1, None) for _ in dims)] = step[tuple(slice(None, -1) for _ in dims)]
        for axis in range(len(dims)):
            prefix = np.cumsum(prefix, axis=axis)
        self._marginals[dims] = prefix
        while sum(m.size for m in self._marginals.values()) > CACHED_CELLS and len(self._marginals) > 1:
            del self._marginals[next(iter(self._marginals))]
        return prefix

    def error_bounds(self, lows: IntArray, highs: IntArray, beta: float) -> FloatArray:
        """Per range count, ``a`` with ``Pr(|answer - noise-free answer| > a) <= beta``, where the noise-free
        answer spreads each block's true total evenly over it (the paper's analytical reliability: the
        noise of any counting query is known; the error of spreading evenly is not, since it depends on the
        data). See :func:`noise_bound`."""
        q_lo, q_hi = _queries(lows, highs, self.sizes)
        return np.array([self.bound_of(w, beta) for w in self.weights(q_lo, q_hi + 1)])

    def bound_of(self, weights: FloatArray, beta: float) -> float:
        """The error bound of the answer ``weights @ totals`` (:func:`noise_bound`)."""
        return noise_bound(self.noise, weights, beta)


def _corners(prefix: FloatArray, starts: IntArray, stops: IntArray) -> FloatArray:
    """``sum over x in [starts, stops)`` from prefix sums with a leading 0: inclusion-exclusion over the
    box's 2^k corners."""
    total = np.zeros(starts.shape[0])
    for corner in np.ndindex(*(2,) * starts.shape[1]):
        pick = np.array(corner, bool)[None, :]
        at = tuple(np.where(pick, stops, starts).T)
        total += prefix[at] * (-1) ** (starts.shape[1] - sum(corner))
    return total


def noise_bound(noise: Laplace, weights: FloatArray, beta: float) -> float:
    """``a`` with ``Pr(|sum_b w_b Z_b| > a) <= beta`` for independent noises ``Z_b`` of ``noise`` (integer
    totals lie on its grid, so each ``Z_b`` is ``2^k`` times a discrete Laplace of ``t`` steps): the smaller
    of two valid bounds, Chernoff for many blocks (:func:`~kakeibo.mechanisms.accuracy.geometric_sum_error`)
    and, for few, the union bound: every ``|Z_b|`` within the mechanism's bound at ``beta / n`` for the
    ``n`` blocks the query overlaps, so ``a = sum_b w_b error_bound(beta / n)`` (for one block, the
    mechanism's own bound)."""
    w = weights[weights > 0]
    if w.size == 0:
        return 0.0
    k, t = noise.grid(1)
    chernoff = geometric_sum_error(scale=t, weights=w, beta=beta, step=math.ldexp(1.0, k))
    return min(chernoff, float(w.sum()) * noise.error_bound(beta / w.size))


def _queries(lows: Any, highs: Any, sizes: tuple[int, ...]) -> tuple[IntArray, IntArray]:
    q_lo, q_hi = np.atleast_2d(np.asarray(lows, np.int64)), np.atleast_2d(np.asarray(highs, np.int64))
    if q_lo.shape != q_hi.shape or q_lo.shape[1] != len(sizes):
        raise ArgumentError(f"lows and highs must both have shape (queries, {len(sizes)}).")
    top = np.asarray(sizes, np.int64) - 1
    return np.clip(q_lo, 0, top), np.clip(q_hi, 0, top)


def aggregation_error(counts: FloatArray, volume: float) -> float:
    """``AE = sum over the block's cells of |x - mean|``: the non-zero cells' deviations plus ``(volume -
    nonzero) mean`` for the empty ones."""
    if volume <= 0:
        return 0.0
    mean = float(counts.sum()) / volume
    return float(np.abs(counts - mean).sum() + (volume - counts.size) * mean)


def cut_errors(positions: IntArray, counts: FloatArray, width: int, volume: float) -> FloatArray:
    """``AE(left) + AE(right)`` for every cut of one attribute of a block: cut ``i`` (``0 <= i < width - 1``)
    puts the cells at ``positions <= i`` (offsets along the attribute) on the left.

    With ``S``, ``N`` the sum and number of a side's non-zero cells, ``V`` its volume and ``m = S / V``:
    ``AE = S - N m + 2 sum_{x < m} (m - x) + (V - N) m``. The last sum needs, per cut, the count and sum of
    the side's cells below its mean: a table of (position, distinct value) with prefix sums over both
    answers every cut at once (only values below the largest mean enter it; counts are at least 1, so a
    sparse block, whose means are below 1, needs none)."""
    volumes_left = volume / width * np.arange(1, width, dtype=np.float64)
    volumes_right = volume - volumes_left
    sums = np.bincount(positions, weights=counts, minlength=width)
    cells = np.bincount(positions, minlength=width).astype(np.float64)
    s_left, n_left = np.cumsum(sums)[:-1], np.cumsum(cells)[:-1]
    s_right, n_right = sums.sum() - s_left, cells.sum() - n_left
    m_left, m_right = s_left / volumes_left, s_right / volumes_right
    low = counts < max(float(m_left.max()), float(m_right.max()))
    below_left, below_right = np.zeros(width - 1), np.zeros(width - 1)
    if low.any():
        values, which = np.unique(counts[low], return_inverse=True)
        count_table = np.zeros((width, values.size))
        sum_table = np.zeros((width, values.size))
        np.add.at(count_table, (positions[low], which), 1.0)
        np.add.at(sum_table, (positions[low], which), counts[low])
        count_prefix = np.cumsum(np.cumsum(count_table, axis=0), axis=1)
        sum_prefix = np.cumsum(np.cumsum(sum_table, axis=0), axis=1)
        cut = np.arange(width - 1)
        for mean, below, side in ((m_left, below_left, "left"), (m_right, below_right, "right")):
            k = np.searchsorted(values, mean, side="left")  # distinct values below the mean
            j = np.maximum(k - 1, 0)
            if side == "left":
                n_below, s_below = count_prefix[cut, j], sum_prefix[cut, j]
            else:
                n_below = count_prefix[-1, j] - count_prefix[cut, j]
                s_below = sum_prefix[-1, j] - sum_prefix[cut, j]
            below[:] = np.where(k > 0, mean * n_below - s_below, 0.0)
    ae_left = s_left - n_left * m_left + 2 * below_left + (volumes_left - n_left) * m_left
    ae_right = s_right - n_right * m_right + 2 * below_right + (volumes_right - n_right) * m_right
    errors: FloatArray = ae_left + ae_right
    return errors


@dataclass
class _Block:
    low: IntArray
    high: IntArray
    depth: int
    rows: IntArray  # indices of the block's non-zero cells
    volume: float = field(init=False)  # cells in the box, read by every test and cut

    def __post_init__(self) -> None:
        self.volume = float(np.prod((self.high - self.low + 1).astype(np.float64)))


@dataclass(frozen=True)
class Calibration:
    """The mechanisms of one build at ``epsilon`` over a domain of ``volume`` cells (module docstring)."""

    depth_limit: int  # cuts at depth <= depth_limit use the exponential mechanism
    cut: Exponential  # per depth, sensitivity 2
    converge: Laplace  # scale lambda (the test's noise; its "sensitivity 1" makes scale = 1 / epsilon)
    decay: float  # delta = lambda ln alpha
    theta: float
    perturb: Laplace  # the leaf totals: sensitivity 1, epsilon_p

    @classmethod
    def of(cls, epsilon: float, volume: float, params: HDPViewParameters) -> Calibration:
        epsilon_r, epsilon_p = epsilon * params.ratio, epsilon * (1 - params.ratio)
        depth_limit = max(1, math.ceil(params.beta * math.log2(volume))) if volume > 1 else 1
        lam = ((2 * params.alpha - 1) / (params.alpha - 1) + 1) * AE_SENSITIVITY / (params.gamma * epsilon_r)
        return cls(
            depth_limit=depth_limit,
            cut=Exponential(
                utility_sensitivity=AE_SENSITIVITY, epsilon=(1 - params.gamma) * epsilon_r / depth_limit
            ),
            converge=Laplace(sensitivity=1, epsilon=1 / lam, coordinates=1),
            decay=lam * math.log(params.alpha),
            theta=1 / epsilon_p if params.theta is None else params.theta,
            perturb=Laplace(sensitivity=1, epsilon=epsilon_p, coordinates=1),
        )

    def stops(self, blocks: list[_Block], counts: FloatArray, source: RandomSource) -> NDArray[np.bool_]:
        """The random converge test of each block: ``max(AE - delta depth, theta + 2 - delta) + Lap(lambda)
        <= theta``."""
        floor = self.theta + AE_SENSITIVITY - self.decay
        biased = [
            max(aggregation_error(counts[b.rows], b.volume) - self.decay * b.depth, floor) for b in blocks
        ]
        stop: NDArray[np.bool_] = (
            np.asarray(self.converge.release(np.array(biased), rng=source)) <= self.theta
        )
        return stop


def build(
    cells: Any,
    counts: Any,
    sizes: tuple[int, ...] | list[int],
    *,
    epsilon: float,
    parameters: HDPViewParameters | None = None,
    rng: Any = None,
    check: Callable[[], None] | None = None,
) -> View:
    """An ``epsilon``-DP view of the count tensor with non-zero ``cells`` (rows of attribute values, each in
    ``[0, size)``, no row twice) holding ``counts`` (module docstring). Neighbour relation: add or remove one
    row.

    ``check`` is called before each block is cut and before each depth's converge tests; what it raises
    stops the build. How many blocks the build cuts depends on the data and the noise, so a caller bounds
    its time this way (:func:`kakeibo.sql.views.build_view`: a deadline)."""
    coords, cell_counts, domain = _validated(cells, counts, sizes, epsilon)
    source = resolve_source(rng)
    root = _Block(
        np.zeros(len(domain), np.int64), np.asarray(domain, np.int64) - 1, 0, np.arange(len(cell_counts))
    )
    calibration = Calibration.of(epsilon, root.volume, parameters or HDPViewParameters())
    leaves: list[_Block] = []
    active = [root] if root.volume > 1 else []
    if root.volume <= 1:
        leaves.append(root)
    while active:
        children: list[_Block] = []
        for block in active:
            if check is not None:
                check()
            children.extend(_split(block, coords, cell_counts, calibration, source))
        leaves.extend(c for c in children if c.volume <= 1)
        tested = [c for c in children if c.volume > 1]
        if check is not None:
            check()
        stops = calibration.stops(tested, cell_counts, source) if tested else np.zeros(0, np.bool_)
        leaves.extend(c for c, stop in zip(tested, stops, strict=True) if stop)
        active = [c for c, stop in zip(tested, stops, strict=True) if not stop]
    totals = np.array([cell_counts[leaf.rows].sum() for leaf in leaves], dtype=np.float64)
    return View(
        sizes=domain,
        lows=np.array([leaf.low for leaf in leaves], np.int64).reshape(-1, len(domain)),
        highs=np.array([leaf.high for leaf in leaves], np.int64).reshape(-1, len(domain)),
        totals=np.asarray(calibration.perturb.release(totals, rng=source), dtype=np.float64),
        noise=calibration.perturb,
        epsilon=float(epsilon),
    )


def _split(
    block: _Block, coords: IntArray, counts: FloatArray, calibration: Calibration, source: RandomSource
) -> tuple[_Block, _Block]:
    """The block's two halves: cut by the exponential mechanism up to the depth limit, at random below it."""
    widths = block.high - block.low + 1
    attributes = np.flatnonzero(widths > 1)
    if block.depth > calibration.depth_limit:  # a uniform attribute, then a uniform point (no data read)
        attribute = int(attributes[int(exact.uniform_below(attributes.size, 1, source)[0])])
        point = int(exact.uniform_below(int(widths[attribute]) - 1, 1, source)[0])
    else:
        volume = block.volume
        scores: list[FloatArray] = []
        targets: list[tuple[int, int]] = []
        for a in attributes:
            positions = coords[block.rows, a] - block.low[a]
            scores.append(-cut_errors(positions, counts[block.rows], int(widths[a]), volume))
            targets.extend((int(a), i) for i in range(int(widths[a]) - 1))
        attribute, point = targets[calibration.cut.release(np.concatenate(scores), rng=source)]
    left_high, right_low = block.high.copy(), block.low.copy()
    left_high[attribute] = block.low[attribute] + point
    right_low[attribute] = left_high[attribute] + 1
    on_left = coords[block.rows, attribute] <= left_high[attribute]
    return (
        _Block(block.low, left_high, block.depth + 1, block.rows[on_left]),
        _Block(right_low, block.high, block.depth + 1, block.rows[~on_left]),
    )


def _validated(
    cells: Any, counts: Any, sizes: tuple[int, ...] | list[int], epsilon: float
) -> tuple[IntArray, FloatArray, tuple[int, ...]]:
    domain = tuple(int(s) for s in sizes)
    if not domain or any(s < 1 for s in domain):
        raise ArgumentError("sizes must name at least one attribute, each with at least one value.")
    coords = np.asarray(cells, dtype=np.int64).reshape(-1, len(domain))
    weights = np.asarray(counts, dtype=np.float64).ravel()
    if weights.size != coords.shape[0]:
        raise ArgumentError("cells and counts must have one row per non-zero cell.")
    if coords.size and ((coords < 0).any() or (coords >= np.asarray(domain)).any()):
        raise ArgumentError("every cell must lie inside the domain: 0 <= value < size per attribute.")
    if weights.size and (not np.isfinite(weights).all() or (weights < 1).any() or (weights % 1 != 0).any()):
        raise ArgumentError(
            "counts must be whole numbers of at least 1 (the non-zero cells of a count tensor)."
        )
    if np.unique(coords, axis=0).shape[0] != coords.shape[0]:
        raise ArgumentError("cells must be distinct: give each non-zero cell once, with its count.")
    if not (isinstance(epsilon, (int, float)) and 0 < epsilon < math.inf):
        raise ArgumentError(f"epsilon must be a positive finite number, got {epsilon!r}.")
    return coords, weights, domain
