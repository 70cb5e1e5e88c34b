"""Parallel composition over the query-overlap graph (seed 002, slides 51-61).

Parallel composition (McSherry 2009, Thm. 4): mechanisms that read *disjoint* parts of the data compose to
the maximum of their losses, not the sum. A query answered over a region of the data (``10 <= age <= 20
AND 100 <= height <= 120``) touches only the records inside that region, so a person is affected only by
the queries whose regions contain their record. Their loss is the sum over those queries, and the total
loss is the worst case over all persons: the maximum, over points of the data domain, of the summed loss
of the regions containing that point -- the *maximum weighted depth* of the regions.

Seed 002 (slide 59, after Smith et al. 2022, "Making the Most of Parallel Composition in Differential
Privacy", PETS) phrases this as a graph problem: queries are nodes, an edge joins two queries whose regions
overlap, and the total loss is bounded by the maximum-weight clique of this *query graph*. For regions
that are axis-aligned boxes the two agree exactly, because boxes have the Helly property: pairwise
intersecting boxes share a common point (Danzer, Grunbaum and Klee 1963; in one dimension, pairwise
intersecting intervals contain the largest left endpoint). So a clique of the box-overlap graph is exactly
a set of boxes with a common point, and

    max-weight clique of the overlap graph  ==  max weighted depth of the boxes.

This module computes the depth exactly for boxes (:func:`max_weighted_depth`) and the max-weight clique for
an arbitrary overlap graph (:func:`max_weight_clique`, via networkx, with Fractions scaled to integers).

**Regions.** A :class:`Box` maps column names to :class:`Interval` s; a column the box does not mention is
unbounded, so ``Box({})`` is the whole domain (it overlaps everything). Each side of an interval is either
closed (``<=``, the default: ``Interval(10, 20)`` is ``10 <= x <= 20``), open (``<``) or unbounded
(``None``). Values are exact rationals; the domain of every column is treated as the real line, so an
integer column with a region ``10 < age < 11`` is (conservatively) considered to contain a point.

**Soundness condition.** Parallel composition is only valid when every *privacy unit* (the thing the
neighbour relation adds or removes: a record, or a user with all their records) sits at exactly one point
of the domain. That holds for record-level DP, and for user-level DP when every column a region mentions
is constant across each user's records. Otherwise a user whose rows fall in two disjoint regions is
affected by both queries and the maximum understates their loss. A box states which case it relies on
with ``unit="record"`` or ``unit="user"``; the ledger refuses regions without that declaration.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from fractions import Fraction
from typing import Any, Literal

from ..errors import ArgumentError, ArgumentTypeError
from ..privacy import ZCDP, ApproxDP, Number, PrivacyLoss, PureDP, as_fraction

__all__ = [
    "Box",
    "Interval",
    "boxes_overlap",
    "max_weight_clique",
    "max_weighted_depth",
    "overlap_graph",
    "parallel_composition",
]

Unit = Literal["record", "user"]
Bound = Number | None

# A position on the extended line, refined so that open endpoints compare correctly:
# (v, 0) is v itself, (v, 1) is "just above v", (v, -1) is "just below v".
_Key = tuple[Fraction | float, int]
_NEG_INF: _Key = (-math.inf, 0)
_POS_INF: _Key = (math.inf, 0)


def _bound(value: Bound, name: str) -> Fraction | None:
    if value is None:
        return None
    return as_fraction(value, name)


@dataclass(frozen=True)
class Interval:
    """A non-empty interval of one column: ``lo <= x <= hi`` by default.

    ``None`` on either side means unbounded; ``lo_closed=False`` / ``hi_closed=False`` make that side
    strict (``lo < x`` / ``x < hi``). The bounds are stored as exact :class:`~fractions.Fraction` s.

    >>> Interval(10, 20).overlaps(Interval(20, 30))
    True
    >>> Interval(10, 20, hi_closed=False).overlaps(Interval(20, 30))
    False
    >>> Interval(None, 5).contains(-1e9)
    True
    """

    lo: Fraction | None
    hi: Fraction | None
    lo_closed: bool
    hi_closed: bool

    def __init__(self, lo: Bound, hi: Bound, *, lo_closed: bool = True, hi_closed: bool = True) -> None:
        if not isinstance(lo_closed, bool) or not isinstance(hi_closed, bool):
            raise ArgumentTypeError("lo_closed and hi_closed must be True or False.")
        low, high = _bound(lo, "the lower bound"), _bound(hi, "the upper bound")
        object.__setattr__(self, "lo", low)
        object.__setattr__(self, "hi", high)
        object.__setattr__(self, "lo_closed", lo_closed and low is not None)
        object.__setattr__(self, "hi_closed", hi_closed and high is not None)
        if self._low_key() > self._high_key():
            raise ArgumentError(f"the interval {self} is empty: its lower bound lies above its upper bound.")

    def _low_key(self) -> _Key:
        if self.lo is None:
            return _NEG_INF
        return (self.lo, 0 if self.lo_closed else 1)

    def _high_key(self) -> _Key:
        if self.hi is None:
            return _POS_INF
        return (self.hi, 0 if self.hi_closed else -1)

    def contains(self, value: Number) -> bool:
        """Whether the number ``value`` lies in the interval."""
        key: _Key = (as_fraction(value, "value"), 0)
        return self._low_key() <= key <= self._high_key()

    def overlaps(self, other: Interval) -> bool:
        """Whether the two intervals share a point (of the real line)."""
        return max(self._low_key(), other._low_key()) <= min(self._high_key(), other._high_key())

    def __str__(self) -> str:
        left = "(-inf" if self.lo is None else ("[" if self.lo_closed else "(") + _short(self.lo)
        right = "+inf)" if self.hi is None else _short(self.hi) + ("]" if self.hi_closed else ")")
        return f"{left}, {right}"

    def to_json(self) -> list[Any]:
        """``[lo, hi, lo_closed, hi_closed]`` with bounds as ``"num/den"`` strings or ``None``."""
        return [_frac_text(self.lo), _frac_text(self.hi), self.lo_closed, self.hi_closed]

    @classmethod
    def from_json(cls, data: Sequence[Any]) -> Interval:
        """Inverse of :meth:`to_json`."""
        lo, hi, lo_closed, hi_closed = data
        return cls(
            None if lo is None else Fraction(lo),
            None if hi is None else Fraction(hi),
            lo_closed=bool(lo_closed),
            hi_closed=bool(hi_closed),
        )


def _frac_text(value: Fraction | None) -> str | None:
    return None if value is None else f"{value.numerator}/{value.denominator}"


def _short(value: Fraction) -> str:
    return str(value.numerator) if value.denominator == 1 else str(float(value))


def _as_interval(column: str, spec: Interval | tuple[Bound, Bound]) -> Interval:
    if isinstance(spec, Interval):
        return spec
    if isinstance(spec, tuple) and len(spec) == 2:
        return Interval(spec[0], spec[1])
    raise ArgumentTypeError(
        f"the range of column {column!r} must be an Interval or a (lo, hi) pair, got {spec!r}."
    )


@dataclass(frozen=True)
class Box:
    """An axis-aligned region of the data domain: one :class:`Interval` per constrained column.

    ``Box({"age": (10, 20), "height": (100, 120)})`` is ``10 <= age <= 20 AND 100 <= height <= 120``
    (a pair means a closed interval; pass an :class:`Interval` for open or unbounded sides). Columns not
    mentioned are unbounded. ``unit`` declares why parallel composition is sound for this region (see the
    module docstring): ``"record"`` for record-level DP, ``"user"`` for user-level DP over columns that are
    constant per user. Geometry ignores ``unit``; the ledger requires it.

    >>> q1 = Box({"age": (10, 20), "height": (100, 120)})
    >>> q3 = Box({"age": (30, 40), "height": (150, 180)})
    >>> boxes_overlap(q1, q3), boxes_overlap(q1, Box({}))
    (False, True)
    """

    bounds: tuple[tuple[str, Interval], ...]
    unit: Unit | None

    def __init__(
        self, bounds: Mapping[str, Interval | tuple[Bound, Bound]], *, unit: Unit | None = None
    ) -> None:
        if not isinstance(bounds, Mapping):
            raise ArgumentTypeError(
                f"a Box needs a mapping from column name to interval, got {type(bounds).__name__}."
            )
        if unit not in (None, "record", "user"):
            raise ArgumentError(f'unit must be "record", "user" or None, got {unit!r}.')
        items: list[tuple[str, Interval]] = []
        for column, spec in bounds.items():
            if not isinstance(column, str) or not column:
                raise ArgumentTypeError(f"column names must be non-empty strings, got {column!r}.")
            items.append((column, _as_interval(column, spec)))
        object.__setattr__(self, "bounds", tuple(sorted(items)))
        object.__setattr__(self, "unit", unit)

    @property
    def columns(self) -> tuple[str, ...]:
        """The constrained columns, sorted."""
        return tuple(column for column, _ in self.bounds)

    def interval(self, column: str) -> Interval:
        """The range of ``column`` (unbounded when the box does not constrain it)."""
        for name, interval in self.bounds:
            if name == column:
                return interval
        return Interval(None, None)

    def contains(self, point: Mapping[str, Number]) -> bool:
        """Whether a record with these column values lies in the box (missing columns: unconstrained)."""
        return all(column not in point or iv.contains(point[column]) for column, iv in self.bounds)

    def __str__(self) -> str:
        inner = " AND ".join(f"{column} in {iv}" for column, iv in self.bounds) or "everything"
        return inner if self.unit is None else f"{inner} [{self.unit}-level]"

    def to_json(self) -> dict[str, Any]:
        """A JSON-ready description (exact bounds as ``"num/den"`` text)."""
        return {"bounds": {column: iv.to_json() for column, iv in self.bounds}, "unit": self.unit}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Box:
        """Inverse of :meth:`to_json`."""
        bounds = {column: Interval.from_json(spec) for column, spec in data["bounds"].items()}
        return cls(bounds, unit=data.get("unit"))


def boxes_overlap(a: Box, b: Box) -> bool:
    """Whether two boxes share a point: their intervals overlap on every column (Helly, one axis at a time).

    >>> boxes_overlap(Box({"age": (10, 20)}), Box({"age": (5, 25), "height": (80, 105)}))
    True
    """
    columns = set(a.columns) | set(b.columns)
    return all(a.interval(column).overlaps(b.interval(column)) for column in columns)


def overlap_graph(boxes: Sequence[Box]) -> list[tuple[int, int]]:
    """The query graph of seed 002 (slide 59): an edge ``(i, j)``, ``i < j``, for each overlapping pair.

    >>> overlap_graph([Box({"x": (0, 1)}), Box({"x": (1, 2)}), Box({"x": (3, 4)})])
    [(0, 1)]
    """
    return [
        (i, j)
        for i in range(len(boxes))
        for j in range(i + 1, len(boxes))
        if boxes_overlap(boxes[i], boxes[j])
    ]


def _weights(weights: Sequence[Number], n: int) -> list[Fraction]:
    if len(weights) != n:
        raise ArgumentError(f"expected {n} weights, one per query, got {len(weights)}.")
    out = [as_fraction(w, "weight") for w in weights]
    if any(w < 0 for w in out):
        raise ArgumentError("weights (privacy losses) must be non-negative.")
    return out


def max_weighted_depth(boxes: Sequence[Box], weights: Sequence[Number]) -> Fraction:
    """The largest total weight of boxes sharing one point -- exact, with rational weights.

    By the Helly property of boxes this equals the maximum-weight clique of the overlap graph, hence the
    parallel-composition bound of Smith et al. 2022 for queries over box regions (seed 002, slides 54-61).

    Algorithm: a point of maximum depth can be moved, one axis at a time, to the largest lower endpoint
    among the boxes containing it without leaving any of them. So it suffices to try, on the first axis,
    every lower endpoint; keep the boxes whose interval contains it; recurse on the remaining axes; and
    finish the last axis with a sweep. Worst case ``O(n^d log n)`` for ``n`` boxes over ``d`` columns,
    with pruning when the boxes left cannot beat the best depth found.

    >>> q = [Box({"age": (10, 20), "height": (100, 120)}), Box({"age": (5, 25), "height": (80, 105)}),
    ...      Box({"age": (30, 40), "height": (150, 180)})]
    >>> max_weighted_depth(q, [1, 1, 1])
    Fraction(2, 1)
    """
    w = _weights(weights, len(boxes))
    columns = sorted({column for box in boxes for column in box.columns})
    intervals = [[box.interval(column) for column in columns] for box in boxes]
    active = [i for i in range(len(boxes)) if w[i] > 0]
    return _depth(active, 0, intervals, w, Fraction(0))


def _depth(
    active: list[int], axis: int, intervals: list[list[Interval]], w: list[Fraction], best: Fraction
) -> Fraction:
    total = sum((w[i] for i in active), Fraction(0))
    if total <= best:
        return best  # even if all of them met at one point they could not beat the best found
    n_axes = len(intervals[active[0]])
    if axis == n_axes:
        return total  # every remaining box contains the point chosen so far
    if axis == n_axes - 1:
        return max(best, _sweep(active, axis, intervals, w))
    for key in sorted({intervals[i][axis]._low_key() for i in active}):
        inside = [i for i in active if intervals[i][axis]._low_key() <= key <= intervals[i][axis]._high_key()]
        best = _depth(inside, axis + 1, intervals, w, best)
    return best


def _sweep(active: list[int], axis: int, intervals: list[list[Interval]], w: list[Fraction]) -> Fraction:
    # Closed intervals in key space: at equal keys, starts (0) come before ends (1).
    events: list[tuple[_Key, int, Fraction]] = []
    for i in active:
        events.append((intervals[i][axis]._low_key(), 0, w[i]))
        events.append((intervals[i][axis]._high_key(), 1, w[i]))
    events.sort(key=lambda e: (e[0], e[1]))
    depth = best = Fraction(0)
    for _, kind, weight in events:
        if kind == 0:
            depth += weight
            best = max(best, depth)
        else:
            depth -= weight
    return best


def max_weight_clique(
    n: int, edges: Iterable[tuple[int, int]], weights: Sequence[Number]
) -> tuple[Fraction, tuple[int, ...]]:
    """Maximum-weight clique of a general overlap graph on nodes ``0..n-1``: ``(weight, members)``.

    This is the parallel-composition bound of Smith et al. 2022 (seed 002, slides 59-61) for regions of any
    shape, given which pairs of queries overlap. networkx's branch-and-bound
    (:func:`networkx.algorithms.clique.max_weight_clique`) needs integer weights, so the rational weights
    are multiplied by their common denominator first; the answer is exact.

    >>> max_weight_clique(4, [(0, 1), (0, 3), (1, 3), (2, 3)], [1, 1, 1, 1])
    (Fraction(3, 1), (0, 1, 3))
    """
    import networkx as nx
    from networkx.algorithms.clique import max_weight_clique as nx_max_weight_clique

    if isinstance(n, bool) or not isinstance(n, int) or n < 0:
        raise ArgumentError(f"n must be a non-negative number of queries, got {n!r}.")
    w = _weights(weights, n)
    if n == 0:
        return Fraction(0), ()
    scale = math.lcm(*(x.denominator for x in w))
    graph: nx.Graph[int] = nx.Graph()
    for node, x in enumerate(w):
        graph.add_node(node, weight=int(x * scale))
    for u, v in edges:
        if not (0 <= u < n and 0 <= v < n):
            raise ArgumentError(f"edge ({u}, {v}) names a query outside 0..{n - 1}.")
        if u != v:
            graph.add_edge(u, v)
    members, scaled = nx_max_weight_clique(graph, weight="weight")
    return Fraction(int(scaled), scale), tuple(sorted(members))


def parallel_composition(
    losses: Sequence[PrivacyLoss],
    regions: Sequence[Box | None],
    *,
    method: Literal["boxes", "graph"] = "boxes",
) -> PrivacyLoss:
    """Sequential composition inside, parallel composition across, non-overlapping regions.

    Each loss is composed with the others whose regions share a point; the result is the worst point.
    A region of ``None`` overlaps everything. For (epsilon, delta) losses the epsilon and delta
    coordinates are maximised separately, which is a sound upper bound in the product order (the two
    maxima may come from different points). Pure losses mixed with approximate ones count as (eps, 0);
    pure losses mixed with zCDP ones count as eps^2/2-zCDP (Bun and Steinke 2016, Prop. 1.4).

    ``method="boxes"`` uses :func:`max_weighted_depth`, ``"graph"`` builds the overlap graph and uses
    :func:`max_weight_clique`; for boxes they agree (Helly property).

    >>> q = [Box({"age": (10, 20), "height": (100, 120)}), Box({"age": (5, 25), "height": (80, 105)}),
    ...      Box({"age": (30, 40), "height": (150, 180)})]
    >>> parallel_composition([PureDP(1)] * 3, q)
    PureDP(epsilon=Fraction(2, 1))
    """
    from .composition import convert, result_kind

    if len(losses) != len(regions):
        raise ArgumentError(
            f"expected one region per loss, got {len(losses)} losses and {len(regions)} regions."
        )
    if method not in ("boxes", "graph"):
        raise ArgumentError(f'method must be "boxes" or "graph", got {method!r}.')
    boxes = [Box({}) if r is None else r for r in regions]
    for box in boxes:
        if not isinstance(box, Box):
            raise ArgumentTypeError(f"regions must be Box instances or None, got {type(box).__name__}.")
    kind = result_kind(losses)
    converted = [convert(loss, kind) for loss in losses]

    def worst(coordinate: list[Fraction]) -> Fraction:
        if method == "boxes":
            return max_weighted_depth(boxes, coordinate)
        return max_weight_clique(len(boxes), overlap_graph(boxes), coordinate)[0]

    if kind is PureDP:
        return PureDP(worst([c.epsilon for c in converted if isinstance(c, PureDP)]))
    if kind is ZCDP:
        return ZCDP(worst([c.rho for c in converted if isinstance(c, ZCDP)]))
    approx = [c for c in converted if isinstance(c, ApproxDP)]
    return ApproxDP(worst([c.epsilon for c in approx]), worst([c.delta for c in approx]))
