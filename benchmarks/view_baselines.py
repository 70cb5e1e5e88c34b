"""Baselines for the materialised-view benchmark (``bench_views.py``): each one is built from a sparse count
tensor ``(cells, counts)`` over domain ``sizes`` at ``epsilon`` with a seeded ``rng``, answers range counts
through ``answer(lows, highs)`` (inclusive bounds, one row per query) and reports ``size``, the numbers it
stores.

Privacy is stated per baseline for add/remove-one-row neighbours, under which a count, and the vector of
counts of any partition of the domain, has L1 sensitivity 1.

HDMM (McKenna et al., PVLDB 11(10), 2018) is not here: no release of it is on PyPI (the reachable
registry), and its authors' code is a research repository, not a package.

Run as a script, this file is the child process of ``Synthetic``: it fits a dpmm synthesiser in the
interpreter that has dpmm installed (see ``bench_views.py`` for that environment).
"""

from __future__ import annotations

import argparse
import importlib
import itertools
import math
import queue
import subprocess
import sys
import tempfile
from pathlib import Path
from types import ModuleType, SimpleNamespace
from typing import Any, Protocol

import numpy as np
from numpy.typing import NDArray

from view_workloads import FloatVector, IntMatrix, padded_axes, sparse_counts, true_answers

IDENTITY_MAX_CELLS = 2 * 10**7


class DomainTooLargeError(ValueError):
    """The dense domain has more cells than a baseline will allocate."""


class RangeView(Protocol):
    """What the benchmark needs of a built view."""

    size: int

    def answer(self, lows: IntMatrix, highs: IntMatrix) -> FloatVector: ...


class Identity:
    """Laplace noise on every cell of the dense count tensor (Dwork et al., TCC 2006: the Laplace mechanism
    on the histogram), answered through d-dimensional prefix sums: with ``P`` the tensor's cumulative sum
    along every axis, a box ``[l, h]`` sums to ``sum over corners c of (-1)^|{j: c_j = l_j}| P[c]``, c_j in
    {l_j - 1, h_j} (inclusion-exclusion; ``P`` is zero-padded so that ``l_j = 0`` drops its terms).

    Privacy: the dense histogram has L1 sensitivity 1, so Laplace(1/epsilon) per cell is epsilon-DP; the
    prefix sums and answers are post-processing.
    """

    def __init__(
        self,
        cells: IntMatrix,
        counts: NDArray[np.int64],
        sizes: tuple[int, ...],
        epsilon: float,
        rng: np.random.Generator,
    ) -> None:
        self.size = math.prod(sizes)
        if self.size > IDENTITY_MAX_CELLS:
            raise DomainTooLargeError(f"domain too large ({self.size:.2g} cells > {IDENTITY_MAX_CELLS:.0g})")
        noisy = rng.laplace(scale=1 / epsilon, size=sizes)
        noisy[tuple(cells.T)] += counts
        self.prefix = np.zeros(tuple(s + 1 for s in sizes))
        self.prefix[(slice(1, None),) * len(sizes)] = noisy
        for axis in range(len(sizes)):
            np.cumsum(self.prefix, axis=axis, out=self.prefix)

    def answer(self, lows: IntMatrix, highs: IntMatrix) -> FloatVector:
        """Inclusion-exclusion over the corners of the attributes with a lower bound above 0."""
        axes = padded_axes(lows == 0)
        rows = np.arange(len(lows))[:, None]
        out = np.zeros(len(lows))
        for corner in itertools.product((False, True), repeat=axes.shape[1]):
            index = highs + 1
            low_axes = axes[:, list(corner)]
            index[rows, low_axes] = lows[rows, low_axes]
            out += (-1) ** sum(corner) * self.prefix[tuple(index.T)]
        return out


def box_mass(
    lows: IntMatrix,
    highs: IntMatrix,
    box_lows: IntMatrix,
    box_highs: IntMatrix,
    weights: FloatVector,
    budget: int = 1 << 22,
) -> FloatVector:
    """Per query, the sum over disjoint boxes of ``weight * |box & query| / |box|``: the answer of a
    histogram of boxes that assumes uniformity inside each box. Volumes are never formed (they overflow on
    wide domains): the overlap is a product of per-attribute fractions, over the K attributes on which a
    query cuts into the boxes' extent only (``padded_axes``), in chunks of at most ``budget`` (query,
    attribute, box) triples."""
    free = (lows <= box_lows.min(axis=0)) & (highs >= box_highs.max(axis=0))
    axes = padded_axes(free)
    rows = np.arange(len(lows))[:, None]
    q_lo, q_hi = lows[rows, axes], highs[rows, axes]
    b_lo, b_hi = box_lows.T, box_highs.T  # d x B
    lengths = (b_hi - b_lo + 1).astype(np.float64)
    out = np.empty(len(lows))
    step = max(1, budget // (axes.shape[1] * len(weights)))
    for start in range(0, len(lows), step):
        chunk = slice(start, start + step)
        a = axes[chunk]
        overlap = np.minimum(b_hi[a], q_hi[chunk, :, None])
        overlap -= np.maximum(b_lo[a], q_lo[chunk, :, None])
        overlap += 1
        np.clip(overlap, 0, None, out=overlap)
        out[chunk] = (overlap / lengths[a]).prod(axis=1) @ weights
    return out


def grouped_box_mass(
    lows: IntMatrix,
    highs: IntMatrix,
    box_lows: IntMatrix,
    box_highs: IntMatrix,
    weights: FloatVector,
    sizes: tuple[int, ...],
) -> FloatVector:
    """``box_mass``, exactly, for many boxes: the queries are grouped by the attributes they constrain (A),
    and per group the boxes with the same extent on A are merged (their weights summed) before
    ``box_mass`` runs on A alone; an attribute outside A contributes a factor 1 to every overlap. A
    hierarchy's leaves have few distinct extents on a few attributes (on a 2-attribute marginal of 32 bins,
    at most 63^2 against 10^5 leaves or more)."""
    top = np.asarray(sizes, dtype=np.int64) - 1
    cut = (lows > 0) | (highs < top)
    patterns, group = np.unique(cut, axis=0, return_inverse=True)
    group = group.ravel()
    out = np.empty(len(lows))
    for g, pattern in enumerate(patterns):
        rows, attributes = np.flatnonzero(group == g), np.flatnonzero(pattern)
        if not len(attributes):
            out[rows] = weights.sum()
            continue
        extent = np.concatenate([box_lows[:, attributes], box_highs[:, attributes]], axis=1)
        radix = np.concatenate([top[attributes] + 1] * 2)
        if float(np.prod(radix.astype(np.float64))) < 2**62:  # one integer key per extent: a 1-d unique
            key = np.ravel_multi_index(tuple(extent.T), tuple(radix.tolist()))
            key, merged = np.unique(key, return_inverse=True)
            extent = np.column_stack(np.unravel_index(key, tuple(radix.tolist())))
        else:
            extent, merged = np.unique(extent, axis=0, return_inverse=True)
        mass = np.bincount(merged.ravel(), weights=weights, minlength=len(extent))
        k, chosen = len(attributes), np.ix_(rows, attributes)
        out[rows] = box_mass(lows[chosen], highs[chosen], extent[:, :k], extent[:, k:], mass)
    return out


class PrivTree:
    """PrivTree (Zhang, Xiao, Xie, SIGMOD 2016, Algorithm 2) on the sparse tensor: the binary round-robin
    variant (the fan-out the HDPView authors ran, ``beta = 2^d``, is ``PrivTreeFanout``).

    A node v (a box of bins) at depth ``depth(v)`` is split when ``max(c(v) - depth(v) * delta, theta -
    delta) + Lap(lambda) > theta``, with ``lambda = (2 beta - 1) / ((beta - 1) epsilon_tree)`` and ``delta =
    lambda * ln(beta)`` (section 4 of the paper), ``theta = 0``. The fan-out is ``beta = 2``: a split halves
    one attribute, the next one (cyclically, after the one the parent halved) that still spans two or more
    bins (``PrivTreeFanout`` halves all d at once, ``beta = 2^d``, and cannot enumerate its children from
    d = 16 on). A node of one bin on every attribute is a leaf. The leaves get Laplace(1/epsilon_leaf)
    counts; answers assume uniformity inside a leaf. ``epsilon_tree = epsilon_leaf = epsilon / 2``.

    Privacy: the decomposition is epsilon_tree-DP (the paper's analysis of Algorithm 2, section 4; the
    split attribute depends on the node's box only); the leaves partition the domain, so their counts have
    L1 sensitivity 1 and Laplace(1/epsilon_leaf) makes them epsilon_leaf-DP; epsilon in all by sequential
    composition.
    """

    def __init__(
        self,
        cells: IntMatrix,
        counts: NDArray[np.int64],
        sizes: tuple[int, ...],
        epsilon: float,
        rng: np.random.Generator,
    ) -> None:
        beta, theta = 2, 0.0
        scale = (2 * beta - 1) / (beta - 1) / (epsilon / 2)
        bias = scale * math.log(beta)
        d = len(sizes)
        lo = np.zeros((1, d), dtype=np.int64)
        hi = np.asarray(sizes, dtype=np.int64)[None, :] - 1
        last = np.array([d - 1])  # the axis each node's parent halved: the root halves axis 0
        depth = 0
        owner = np.zeros(len(cells), dtype=np.int64)  # the node holding each still-active cell
        leaves: list[tuple[IntMatrix, IntMatrix, FloatVector]] = []
        while len(lo):
            count = np.bincount(owner, weights=counts, minlength=len(lo))
            biased = np.maximum(count - depth * bias, theta - bias) + rng.laplace(scale=scale, size=len(lo))
            split = (biased > theta) & (hi > lo).any(axis=1)
            leaves.append((lo[~split], hi[~split], count[~split]))
            # the axis to halve: the first one after ``last`` (cyclically) that spans two or more bins
            order = (last[split, None] + np.arange(1, d + 1)) % d
            wide = np.take_along_axis(hi[split] > lo[split], order, axis=1)
            axis = order[np.arange(len(order)), wide.argmax(axis=1)]
            rows = np.arange(len(axis))
            mid = (lo[split][rows, axis] + hi[split][rows, axis]) // 2
            lo, hi = np.repeat(lo[split], 2, axis=0), np.repeat(hi[split], 2, axis=0)
            hi[2 * rows, axis] = mid
            lo[2 * rows + 1, axis] = mid + 1
            last = np.repeat(axis, 2)
            rank = np.cumsum(split) - 1  # old node -> its index among the split nodes
            keep = split[owner]
            cells, counts, owner = cells[keep], counts[keep], owner[keep]
            parent = rank[owner]
            owner = 2 * parent + (cells[np.arange(len(cells)), axis[parent]] > mid[parent])
            depth += 1
        self.lows = np.concatenate([leaf[0] for leaf in leaves])
        self.highs = np.concatenate([leaf[1] for leaf in leaves])
        exact = np.concatenate([leaf[2] for leaf in leaves])
        self.counts = exact + rng.laplace(scale=1 / (epsilon / 2), size=len(exact))
        self.size = len(exact) * (2 * d + 1)

    def answer(self, lows: IntMatrix, highs: IntMatrix) -> FloatVector:
        return box_mass(lows, highs, self.lows, self.highs, self.counts)


FANOUT_MAX_CHILDREN = 2**15
FANOUT_MAX_LEAVES = 5 * 10**6


class PrivTreeFanout:
    """PrivTree as the HDPView authors ran it: fan-out ``beta = 2^d``, a split halving every attribute of
    the node at once (Zhang, Xiao, Xie, SIGMOD 2016, Algorithm 2, with the paper's split of a d-dimensional
    box into 2^d children), on the sparse tensor.

    A node v (a box of bins) at depth ``depth(v)`` (the root at 0) is split when ``max(c(v) - depth(v) *
    delta, theta - delta) + Lap(lambda) > theta`` and it spans two or more bins on some attribute, with
    ``theta = 0``, ``lambda = (2 beta - 1) / ((beta - 1) epsilon_tree)``, ``delta = lambda * ln(beta)``,
    ``beta = 2^d``. A split halves each of the node's k attributes of width 2 or more (``[lo, mid]`` and
    ``[mid + 1, hi]``, ``mid = (lo + hi) // 2``; attributes of width 1 stay whole): 2^k <= beta children.
    The leaves get Laplace(1/epsilon_leaf) counts, one draw per leaf, empty or not; answers assume
    uniformity inside a leaf. ``epsilon_tree = epsilon_leaf = epsilon / 2``.

    Empty children: an empty node below the root has bias ``-delta`` and splits with probability
    ``exp(-delta / lambda) / 2 = 1 / (2 beta)``, so its expected number of splitting children is at most
    1/2 and empty subtrees stay small; but each empty leaf is a box with a noisy count and must be stored.
    All nodes of a depth are held as arrays of boxes (empty ones included, with count 0); a split node's
    children are made at once, the non-empty ones found through each cell's child index. Enumeration is
    what makes it infeasible in high dimensions: a split of a node with k splittable attributes above
    ``max_children`` (2^15) children, or a tree whose leaves would exceed ``max_leaves`` (5e6: at least one
    leaf per node of the depth being made), raises ``DomainTooLargeError``.

    Privacy (add/remove-one-row neighbours): the count c(v) of every node has sensitivity 1, and the
    decomposition is epsilon_tree-DP by the paper's analysis of Algorithm 2 (section 4: it follows the one
    root-to-leaf path whose counts change; beta enters only through ``delta = lambda ln beta``, and a node
    with fewer than beta children, as here when k < d, is allowed; the split shape depends on the node's
    box only). The leaves partition the domain, so their count vector has L1 sensitivity 1 and
    Laplace(1/epsilon_leaf) makes it epsilon_leaf-DP. epsilon in all by sequential composition.
    """

    def __init__(
        self,
        cells: IntMatrix,
        counts: NDArray[np.int64],
        sizes: tuple[int, ...],
        epsilon: float,
        rng: np.random.Generator,
        *,
        max_children: int = FANOUT_MAX_CHILDREN,
        max_leaves: int = FANOUT_MAX_LEAVES,
    ) -> None:
        d, theta = len(sizes), 0.0
        beta = 2.0**d
        scale = (2 * beta - 1) / (beta - 1) / (epsilon / 2)
        bias = scale * d * math.log(2)  # lambda ln beta
        lo = np.zeros((1, d), dtype=np.int64)
        hi = np.asarray(sizes, dtype=np.int64)[None, :] - 1
        owner = np.zeros(len(cells), dtype=np.int64)  # the node of the current depth holding each cell
        counts = counts.astype(np.float64)
        depth, stored = 0, 0
        leaves: list[tuple[IntMatrix, IntMatrix, FloatVector]] = []
        while len(lo):
            count = np.bincount(owner, weights=counts, minlength=len(lo))
            biased = np.maximum(count - depth * bias, theta - bias) + rng.laplace(scale=scale, size=len(lo))
            wide = hi > lo
            split = (biased > theta) & wide.any(axis=1)
            leaves.append((lo[~split], hi[~split], count[~split]))
            stored += int((~split).sum())
            lo, hi, wide = lo[split], hi[split], wide[split]
            k = wide.sum(axis=1)
            if len(k) and int(k.max()) > math.log2(max_children):
                raise DomainTooLargeError(
                    f"too large: a split of {int(k.max())} attributes makes 2^{int(k.max())} children "
                    f"> {max_children}"
                )
            fan = np.left_shift(1, k)
            made = int(fan.sum())
            if stored + made > max_leaves:
                raise DomainTooLargeError(
                    f"too large: over {max_leaves:.0g} leaves ({stored} stored, {made} children at depth "
                    f"{depth + 1})"
                )
            # node n's children are rows first[n] .. first[n] + fan[n] - 1; child c takes the upper half
            # of the attribute of rank r among n's splittable ones iff bit r of c is set
            first = np.cumsum(fan) - fan
            rank = np.cumsum(wide, axis=1) - 1
            mid = (lo + hi) // 2
            parent = np.repeat(np.arange(len(fan)), fan)
            child = np.arange(made) - first[parent]
            lo, hi = lo[parent], hi[parent]
            for j in range(d):
                on = wide[parent, j]
                upper = on & ((child >> np.where(on, rank[parent, j], 0)) & 1).astype(bool)
                lo[upper, j] = mid[parent[upper], j] + 1
                lower = on & ~upper
                hi[lower, j] = mid[parent[lower], j]
            # the cells of the split nodes, moved to their children
            renumber = np.cumsum(split) - 1
            keep = split[owner]
            cells, counts = cells[keep], counts[keep]
            node = renumber[owner[keep]]
            upper_cell = wide[node] & (cells > mid[node])
            owner = first[node] + (upper_cell.astype(np.int64) << np.maximum(rank[node], 0)).sum(axis=1)
            depth += 1
        self.lows = np.concatenate([leaf[0] for leaf in leaves])
        self.highs = np.concatenate([leaf[1] for leaf in leaves])
        exact = np.concatenate([leaf[2] for leaf in leaves])
        self.counts = exact + rng.laplace(scale=1 / (epsilon / 2), size=len(exact))
        self.size = len(exact) * (2 * d + 1)
        self.leaves, self.depth, self.sizes = len(exact), depth, sizes

    def answer(self, lows: IntMatrix, highs: IntMatrix) -> FloatVector:
        return grouped_box_mass(lows, highs, self.lows, self.highs, self.counts, self.sizes)


DPMM_MODELS = {
    "privbayes": ("dpmm.models.priv_bayes", "PrivBayesGM"),
    "mst": ("dpmm.models.mst", "MSTGM"),
    "aim": ("dpmm.models.aim", "AIMGM"),
}


class AuthorsHDPView:
    """HDPView as its authors implemented it (github.com/FumiyukiKato/HDPView, ``src/hdpview.py``), run from a
    checkout of that repository (``source``: its ``src`` folder; the code is theirs and stays outside
    kakeibo) with the parameters of their experiments (``ratio`` 0.9, ``alpha`` 1.6, ``beta`` 1.2, ``gamma``
    0.9), to cross-check ``kakeibo.views.hdpview``. Answers spread each block's noisy total evenly, as their
    ``NoisedCountTable`` does (:func:`grouped_box_mass`).

    Two shims let their code run here, neither changing what it computes: ``np.float`` (removed in numpy
    1.24) is aliased to ``float``, and their ``multiprocessing`` pool is replaced by a sequential one (every
    block draws from its own generator, seeded by the block's id and the run's seed, so the order of the
    work does not matter).
    """

    def __init__(
        self,
        cells: IntMatrix,
        counts: NDArray[np.int64],
        sizes: tuple[int, ...],
        epsilon: float,
        rng: np.random.Generator,
        *,
        source: str,
    ) -> None:
        import pandas as pd

        hdpview, count_table = _authors_modules(source)
        names = [f"a{j}" for j in range(len(sizes))]
        index = pd.MultiIndex.from_arrays([cells[:, j] for j in range(len(sizes))], names=names)
        table = pd.DataFrame({"count": counts.astype(np.int64)}, index=index).sort_index()
        block = count_table.CountTable.from_pd_count_table(table, list(sizes), names)
        state = np.random.RandomState(int(rng.integers(2**31)))
        view, results = hdpview.run(block, epsilon, 0.9, state, alpha=1.6, beta=1.2, gamma=0.9)
        self.lows = np.array([[r.domain_dict[n][0] for n in names] for r in results], dtype=np.int64)
        self.highs = np.array([[r.domain_dict[n][1] for n in names] for r in results], dtype=np.int64)
        self.weights = np.array([b.size * b.value for b in view.blocks], dtype=np.float64)
        self.sizes = sizes
        self.size = len(results) * (2 * len(sizes) + 1)

    def answer(self, lows: IntMatrix, highs: IntMatrix) -> FloatVector:
        return grouped_box_mass(lows, highs, self.lows, self.highs, self.weights, self.sizes)


class _Finished:
    """What ``apply_async`` returns in the sequential pool: the result, computed already."""

    def __init__(self, value: Any) -> None:
        self.value = value

    def get(self) -> Any:
        return self.value


def _authors_modules(source: str) -> tuple[ModuleType, ModuleType]:
    """The authors' ``hdpview`` and ``count_table`` modules from ``source``, with the shims of
    :class:`AuthorsHDPView`."""
    if not (Path(source) / "hdpview.py").is_file():
        raise RuntimeError(
            f"{source} has no hdpview.py: pass the src folder of a FumiyukiKato/HDPView checkout"
        )
    if not hasattr(np, "float"):
        setattr(np, "float", float)  # noqa: B010 -- their code looks np.float up when it runs
    if source not in sys.path:
        sys.path.insert(0, source)
    hdpview, count_table = importlib.import_module("hdpview"), importlib.import_module("count_table")
    hdpview.multiprocessing = SimpleNamespace(
        Manager=lambda: SimpleNamespace(Queue=queue.Queue),
        Pool=lambda processes: SimpleNamespace(apply_async=lambda f, args: _Finished(f(*args))),
        cpu_count=lambda: 2,
    )
    return hdpview, count_table


class Synthetic:
    """A synthetic table of the input's row count from a dpmm synthesiser (dpmm 0.1.9 on PyPI), answered
    exactly: ``privbayes`` (Zhang et al., SIGMOD 2014 / TODS 2017: a degree-2 Bayesian network chosen by the
    exponential mechanism, then noisy conditionals; dpmm fits them with private-pgm's inference) or ``mst``
    (McKenna, Miklau, Sheldon, JPC 2021: the maximum spanning tree of noisy 2-way marginals). dpmm runs in
    a child process (this file as a script) under ``python``, the interpreter of dpmm's own environment.

    Privacy: (epsilon, delta)-DP as dpmm states it, not pure epsilon-DP: both models measure their
    marginals with Gaussian noise calibrated through zCDP (PrivBayes: epsilon/2 for the structure by the
    exponential mechanism, the Gaussian measurements at the zCDP of (epsilon/2, delta)). The row count is
    taken as public. The input is already discretised: dpmm's binning pipeline is not used and its
    domain compression is off (``compress=False``); inference runs ``iters`` iterations (dpmm's default:
    5000).
    """

    def __init__(
        self,
        cells: IntMatrix,
        counts: NDArray[np.int64],
        sizes: tuple[int, ...],
        epsilon: float,
        rng: np.random.Generator,
        *,
        model: str,
        python: str,
        delta: float,
        iters: int,
        timeout: float = 1800,
    ) -> None:
        with tempfile.TemporaryDirectory() as tmp:
            source, target = Path(tmp) / "table.npz", Path(tmp) / "synthetic.npz"
            np.savez(source, rows=np.repeat(cells, counts, axis=0), sizes=np.asarray(sizes))
            command = [python, __file__, str(source), str(target), model]
            command += [str(epsilon), str(delta), str(iters), str(int(rng.integers(2**32)))]
            done = subprocess.run(command, capture_output=True, text=True, timeout=timeout)
            if done.returncode:
                lines = done.stderr.strip().splitlines() or [f"exit code {done.returncode}"]
                raise RuntimeError(f"dpmm child failed: {lines[-1]}")
            with np.load(target) as result:
                self.cells, self.counts = sparse_counts(result["rows"])
        self.size = self.cells.size + self.counts.size

    def answer(self, lows: IntMatrix, highs: IntMatrix) -> FloatVector:
        return true_answers(self.cells, self.counts, lows, highs)


def _synthesise(
    source: Path, target: Path, model: str, epsilon: float, delta: float, iters: int, seed: int
) -> None:
    """The child of ``Synthetic``: fit dpmm's ``model`` on the rows of ``source`` and save as many
    synthetic rows to ``target``."""
    import importlib

    import pandas as pd
    from numpy.random import RandomState

    with np.load(source) as table:
        rows, sizes = table["rows"], table["sizes"]
    columns = [f"a{j}" for j in range(len(sizes))]
    module, name = DPMM_MODELS[model]
    generator = getattr(importlib.import_module(module), name)(
        epsilon=epsilon, delta=delta, n_iters=iters, compress=False, n_jobs=1
    )
    generator.set_domain(dict(zip(columns, sizes.tolist(), strict=True)))
    generator.set_random_state(RandomState(seed))
    generator.fit(pd.DataFrame(rows, columns=columns))
    synthetic = generator.generate(n_records=len(rows))[columns].to_numpy(dtype=np.int64)
    np.savez(target, rows=synthetic)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description="The dpmm child process of Synthetic (not for direct use).")
    parser.add_argument("source", type=Path)
    parser.add_argument("target", type=Path)
    parser.add_argument("model", choices=sorted(DPMM_MODELS))
    parser.add_argument("epsilon", type=float)
    parser.add_argument("delta", type=float)
    parser.add_argument("iters", type=int)
    parser.add_argument("seed", type=int)
    a = parser.parse_args()
    _synthesise(a.source, a.target, a.model, a.epsilon, a.delta, a.iters, a.seed)
