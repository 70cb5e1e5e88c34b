"""Graphical-model inference from noisy marginals (Private-PGM: McKenna, Sheldon and Miklau, "Graphical-model
based estimation and inference for differential privacy", ICML 2019), kakeibo's own implementation: the
post-processing half of :class:`~kakeibo.synth.AIM`. Nothing here reads data; it reads released
measurements only.

**Problem** (the paper's Eq. 2 with the L2 loss). Given noisy marginals ``y_r = M_r(D) + N(0, sigma_r^2 I)``
on cliques ``r`` (tuples of attributes), find the distribution ``p`` (scaled to ``total`` records) that
minimises ``L(p) = sum_r ||M_r(p) - y_r||_2^2 / sigma_r^2``. Some minimiser is a Markov random field over
the measured cliques (the paper's Thm. 1), so ``p`` is searched among ``p(x) prop. exp(sum_C theta_C(x_C))``
with a potential ``theta_C`` per clique ``C`` of a junction tree that covers every measured clique.

**Junction tree** (:func:`junction_tree`): the graph joining attributes measured together is triangulated
by greedy elimination (each step eliminates the attribute whose neighbourhood has the fewest cells), the
elimination cliques that are not inside another are the tree's cliques, and a maximum spanning forest on
the sizes of their intersections links them (it has the running-intersection property because the cliques
are those of a chordal graph). The model's size is the sum of its cliques' cells (:func:`model_cells`).

**Marginals** (:func:`_calibrate`): sum-product belief propagation in log space, leaves to root and back, on
each tree of the forest; each clique's belief normalised and scaled to ``total`` is its marginal ``mu_C``.
A marginal on attributes that no single clique holds is computed exactly by eliminating the other
attributes over the smallest subtree that covers it, from ``mu_C`` and the separators' marginals
(:meth:`GraphicalModel.project`); attributes in different trees are independent.

**Estimation** (:func:`estimate`): entropic mirror descent on ``theta`` (the paper's Alg. 1): ``theta <- theta
- alpha grad_mu L(mu(theta))``, with the step ``alpha`` doubled at each iteration and halved until Armijo's
sufficient decrease ``L(mu) - L(mu') >= alpha / 2 <grad, mu - mu'>`` holds (at most 25 halvings), from
``alpha = 1 / total^2``. ``total`` is the inverse-variance average of the measurements' totals.

**Sampling** (:meth:`GraphicalModel.sample`): each tree's root clique from its marginal, then each clique's
new attributes given its separator with its parent (:func:`~kakeibo.synth.mst.allocate`, which allocates
rather than draws).
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

from .base import pack, unpack
from .mst import allocate, breadth_first

__all__ = ["GraphicalModel", "JunctionTree", "Measurement", "estimate", "junction_tree", "model_cells"]

Clique = tuple[int, ...]
FloatArray = NDArray[np.float64]

#: the most halvings of the step in one iteration of the line search
_HALVINGS = 25


@dataclass(frozen=True)
class Measurement:
    """A released marginal: ``values`` (shaped by the clique's sizes, attributes in increasing order) is the
    clique's count table plus Gaussian noise of standard deviation ``sigma``."""

    clique: Clique
    values: FloatArray
    sigma: float


@dataclass(frozen=True)
class JunctionTree:
    """Cliques (each a sorted tuple of attributes) and ``order``: the forest's edges as ``(parent, child)``
    clique indices, breadth-first from each tree's root (``roots``)."""

    sizes: tuple[int, ...]
    cliques: tuple[Clique, ...]
    order: tuple[tuple[int, int], ...]
    roots: tuple[int, ...]

    def holding(self, attributes: Clique) -> int | None:
        """The index of the smallest clique that holds every one of ``attributes``, or ``None``."""
        held = [i for i, c in enumerate(self.cliques) if set(attributes) <= set(c)]
        return min(held, key=lambda i: _cells(self.sizes, self.cliques[i])) if held else None


def _cells(sizes: Sequence[int], clique: Clique) -> int:
    return math.prod(sizes[a] for a in clique)


def model_cells(sizes: Sequence[int], cliques: Sequence[Clique]) -> int:
    """The number of cells of the junction tree :func:`junction_tree` builds over ``cliques``."""
    return sum(_cells(sizes, c) for c in _triangulate(len(sizes), sizes, cliques))


def _triangulate(d: int, sizes: Sequence[int], cliques: Sequence[Clique]) -> list[Clique]:
    """The maximal cliques of a chordal graph containing every one of ``cliques`` and every attribute (module
    docstring, Junction tree). Costs are log cells, updated for the eliminated attribute's neighbours only;
    an elimination clique can only lie inside the clique of an attribute eliminated before it."""
    neighbours: dict[int, set[int]] = {a: set() for a in range(d)}
    for given in cliques:
        for a in given:
            neighbours[a].update(b for b in given if b != a)
    logs = [math.log(s) for s in sizes]
    maximal: list[Clique] = [(a,) for a in range(d) if not neighbours[a]]
    cost = {a: logs[a] + sum(logs[b] for b in around) for a, around in neighbours.items() if around}
    queue = [(c, a) for a, c in cost.items()]
    heapq.heapify(queue)
    found: list[frozenset[int]] = []
    holding: dict[int, list[int]] = {a: [] for a in cost}  # attribute -> earlier cliques holding it
    while queue:
        value, v = heapq.heappop(queue)
        if cost.get(v) != value:
            continue  # stale: v's cost changed or v is eliminated
        around = neighbours.pop(v)
        del cost[v]
        clique = frozenset((v, *around))
        if not any(clique <= found[i] for i in holding[v]):
            maximal.append(tuple(sorted(clique)))
        for a in clique:
            holding[a].append(len(found))
        found.append(clique)
        for a in around:
            neighbours[a].update(around)
            neighbours[a].discard(a)
            neighbours[a].discard(v)
            cost[a] = logs[a] + sum(logs[b] for b in neighbours[a])
            heapq.heappush(queue, (cost[a], a))
    return maximal


def junction_tree(sizes: Sequence[int], cliques: Sequence[Clique]) -> JunctionTree:
    """The junction tree (forest) of the module docstring over ``cliques`` and every attribute."""
    sizes = tuple(sizes)
    nodes = _triangulate(len(sizes), sizes, cliques)
    pairs = sorted(
        (
            (len(set(nodes[i]) & set(nodes[j])), i, j)
            for i in range(len(nodes))
            for j in range(i + 1, len(nodes))
        ),
        key=lambda t: (-t[0], t[1], t[2]),
    )
    part = list(range(len(nodes)))
    links: list[tuple[int, int]] = []
    for shared, i, j in pairs:
        if shared == 0:
            break
        if part[i] != part[j]:
            old, new = part[j], part[i]
            part = [new if p == old else p for p in part]
            links.append((i, j))
    order, roots = breadth_first(len(nodes), links)
    return JunctionTree(sizes, tuple(nodes), tuple(order), tuple(roots))


def _shape(sizes: Sequence[int], sub: Clique, clique: Clique) -> tuple[int, ...]:
    """The shape that broadcasts a table on ``sub`` (a subset of ``clique``) against one on ``clique``."""
    return tuple(sizes[a] if a in sub else 1 for a in clique)


def _axes(clique: Clique, keep: Clique) -> tuple[int, ...]:
    return tuple(i for i, a in enumerate(clique) if a not in keep)


def _logsumexp(values: FloatArray, axes: tuple[int, ...]) -> FloatArray:
    if not axes:
        return values
    top = values.max(axis=axes, keepdims=True)
    return np.asarray(np.log(np.exp(values - top).sum(axis=axes)) + np.squeeze(top, axis=axes), np.float64)


def _calibrate(tree: JunctionTree, theta: list[FloatArray], total: float) -> list[FloatArray]:
    """Every clique's marginal ``mu_C`` (scaled to ``total``) of the field with potentials ``theta``: belief
    propagation in log space (module docstring, Marginals)."""
    sizes, cliques = tree.sizes, tree.cliques
    up: dict[int, FloatArray] = {}  # child -> its message to its parent, on their separator
    gathered = [t.copy() for t in theta]
    for parent, child in reversed(tree.order):
        sep = tuple(a for a in cliques[child] if a in cliques[parent])
        up[child] = _logsumexp(gathered[child], _axes(cliques[child], sep))
        gathered[parent] = gathered[parent] + up[child].reshape(_shape(sizes, sep, cliques[parent]))
    beliefs = gathered
    for parent, child in tree.order:
        sep = tuple(a for a in cliques[child] if a in cliques[parent])
        down = _logsumexp(beliefs[parent], _axes(cliques[parent], sep)) - up[child]
        beliefs[child] = beliefs[child] + down.reshape(_shape(sizes, sep, cliques[child]))
    out = []
    for belief in beliefs:
        weights = np.exp(belief - belief.max())
        out.append(total * weights / weights.sum())
    return out


@dataclass(frozen=True, eq=False)
class GraphicalModel:
    """A fitted model: the junction tree, each clique's marginal (probabilities) and ``total``, the record
    count the measurements estimate. Everything in it is post-processing of the measurements."""

    tree: JunctionTree
    marginals: tuple[FloatArray, ...]
    total: float
    #: the field's potentials, kept to warm-start the next estimate (not saved)
    potentials: tuple[FloatArray, ...] | None = None

    def project(self, attributes: Clique) -> FloatArray:
        """The model's marginal (probabilities) on ``attributes`` (sorted), exact (module docstring)."""
        tree = self.tree
        holder = tree.holding(attributes)
        if holder is not None:
            table = self.marginals[holder]
            return np.asarray(table.sum(axis=_axes(tree.cliques[holder], attributes)), np.float64)
        component = self._components()
        groups: dict[int, list[int]] = {}
        for a in attributes:
            groups.setdefault(component[a], []).append(a)
        out = np.ones(())
        joined: Clique = ()
        for part in groups.values():
            table = self._subtree_marginal(tuple(part))
            out = _product(tree.sizes, joined, out, tuple(part), table)
            joined = tuple(sorted((*joined, *part)))
        return out

    def _components(self) -> dict[int, int]:
        """Each attribute's tree (the index of its root)."""
        root_of = {r: r for r in self.tree.roots}
        for parent, child in self.tree.order:
            root_of[child] = root_of[parent]
        return {a: root_of[i] for i, c in enumerate(self.tree.cliques) for a in c}

    def _subtree_marginal(self, attributes: Clique) -> FloatArray:
        """The marginal on ``attributes`` (all in one tree): the smallest subtree covering them, its joint
        ``prod mu_C / prod mu_S`` summed over every attribute not asked for, leaves first."""
        tree = self.tree
        holder = tree.holding(attributes)
        if holder is not None:
            return np.asarray(self.marginals[holder].sum(axis=_axes(tree.cliques[holder], attributes)))
        parent_of = {child: parent for parent, child in tree.order}
        targets = {next(i for i, c in enumerate(tree.cliques) if a in c) for a in attributes}
        paths = [_path_to_root(t, parent_of) for t in targets]
        common = set(paths[0]).intersection(*paths[1:])
        top = next(node for node in paths[0] if node in common)
        nodes = {top} | {n for path in paths for n in path[: path.index(top)]}
        children: dict[int, list[int]] = {n: [] for n in nodes}
        for n in nodes - {top}:
            children[parent_of[n]].append(n)
        wanted = set(attributes)

        def gather(node: int) -> tuple[Clique, FloatArray]:
            clique = tree.cliques[node]
            scope, table = clique, self.marginals[node]
            for child in children[node]:
                sub_scope, sub = gather(child)
                table = _product(tree.sizes, scope, table, sub_scope, sub)
                scope = tuple(sorted(set(scope) | set(sub_scope)))
            if node == top:
                return scope, table
            sep = tuple(a for a in clique if a in tree.cliques[parent_of[node]])
            keep = tuple(a for a in scope if a in wanted or a in sep)
            summed = table.sum(axis=_axes(scope, keep))
            separator = self.marginals[node].sum(axis=_axes(clique, sep))
            return keep, summed / np.maximum(separator, 1e-300).reshape(_shape(tree.sizes, sep, keep))

        scope, table = gather(top)
        return np.asarray(table.sum(axis=_axes(scope, attributes)), np.float64)

    def sample(self, n: int, rng: np.random.Generator) -> NDArray[np.int64]:
        """``n`` records (module docstring, Sampling)."""
        tree = self.tree
        out = np.zeros((n, len(tree.sizes)), dtype=np.int64)
        for root in tree.roots:
            clique = tree.cliques[root]
            flat = allocate(self.marginals[root].reshape(1, -1), np.zeros(n, dtype=np.int64), rng)
            out[:, list(clique)] = np.column_stack(np.unravel_index(flat, self.marginals[root].shape))
        for parent, child in tree.order:
            clique = tree.cliques[child]
            sep = tuple(a for a in clique if a in tree.cliques[parent])
            rest = tuple(a for a in clique if a not in sep)
            if not rest:
                continue
            moved = np.transpose(self.marginals[child], [clique.index(a) for a in (*sep, *rest)])
            table = moved.reshape(_cells(tree.sizes, sep), _cells(tree.sizes, rest))
            table = np.where(table.sum(axis=1, keepdims=True) > 0, table, 1.0)
            given = np.ravel_multi_index(tuple(out[:, a] for a in sep), tuple(tree.sizes[a] for a in sep))
            drawn = allocate(table, np.asarray(given, np.int64), rng)
            out[:, list(rest)] = np.column_stack(np.unravel_index(drawn, tuple(tree.sizes[a] for a in rest)))
        return out

    def to_bytes(self) -> bytes:
        """A JSON header line (sizes, cliques, order, roots, total), then the marginals as a NumPy archive."""
        tree = self.tree
        header = {
            "sizes": list(tree.sizes),
            "cliques": [list(c) for c in tree.cliques],
            "order": [list(e) for e in tree.order],
            "roots": list(tree.roots),
            "total": self.total,
        }
        return pack(header, {f"marginal_{i}": m for i, m in enumerate(self.marginals)})

    @classmethod
    def from_bytes(cls, payload: bytes) -> GraphicalModel:
        header, arrays = unpack(payload)
        tree = JunctionTree(
            tuple(int(s) for s in header["sizes"]),
            tuple(tuple(int(a) for a in c) for c in header["cliques"]),
            tuple((int(p), int(c)) for p, c in header["order"]),
            tuple(int(r) for r in header["roots"]),
        )
        marginals = tuple(arrays[f"marginal_{i}"] for i in range(len(tree.cliques)))
        return cls(tree, marginals, float(header["total"]))


def _path_to_root(node: int, parent_of: dict[int, int]) -> list[int]:
    path = [node]
    while path[-1] in parent_of:
        path.append(parent_of[path[-1]])
    return path


def _product(sizes: Sequence[int], a: Clique, x: FloatArray, b: Clique, y: FloatArray) -> FloatArray:
    """The product of a table on ``a`` and one on ``b``, on their union (sorted)."""
    union = tuple(sorted(set(a) | set(b)))
    return np.asarray(x.reshape(_shape(sizes, a, union)) * y.reshape(_shape(sizes, b, union)), np.float64)


def measured_total(measurements: Sequence[Measurement]) -> float:
    """The inverse-variance average of the measurements' totals (a table of ``c`` cells sums ``c`` noises),
    at least 1."""
    weights = [1 / (m.values.size * m.sigma**2) for m in measurements]
    mean = sum(w * float(m.values.sum()) for w, m in zip(weights, measurements, strict=True)) / sum(weights)
    return max(mean, 1.0)


def estimate(
    sizes: Sequence[int],
    measurements: Sequence[Measurement],
    iterations: int,
    warm: GraphicalModel | None = None,
) -> GraphicalModel:
    """The model of the module docstring fitted to ``measurements`` by ``iterations`` steps of mirror
    descent, started from ``warm``'s potentials (each added to a clique of the new tree that holds its
    clique: the same distribution where every old clique has such a home)."""
    sizes = tuple(sizes)
    tree = junction_tree(sizes, [m.clique for m in measurements])
    total = measured_total(measurements)
    homes = [tree.holding(m.clique) for m in measurements]
    theta = [np.zeros(tuple(sizes[a] for a in c)) for c in tree.cliques]
    if warm is not None and warm.potentials is not None:
        for old, potential in zip(warm.tree.cliques, warm.potentials, strict=True):
            home = tree.holding(old)
            if home is not None:
                theta[home] = theta[home] + potential.reshape(_shape(sizes, old, tree.cliques[home]))
    cliques = tree.cliques
    # per clique of the tree: the attributes its measurements read (their union), so that the clique is
    # summed down once and each gradient is a table on the union, broadcast against the clique
    unions: dict[int, Clique] = {}
    for m, home in zip(measurements, homes, strict=True):
        assert home is not None  # every measured clique is inside a clique of its tree
        unions[home] = tuple(sorted(set(unions.get(home, ())) | set(m.clique)))

    def loss(mu: list[FloatArray]) -> tuple[float, list[FloatArray]]:
        value = 0.0
        grad = [np.zeros(()) for _ in mu]
        bases = {home: mu[home].sum(axis=_axes(cliques[home], union)) for home, union in unions.items()}
        parts = {home: np.zeros(base.shape) for home, base in bases.items()}
        for m, home in zip(measurements, homes, strict=True):
            assert home is not None
            union = unions[home]
            diff = bases[home].sum(axis=_axes(union, m.clique)) - m.values
            value += float((diff**2).sum()) / m.sigma**2
            parts[home] += (2 * diff / m.sigma**2).reshape(_shape(sizes, m.clique, union))
        for home, part in parts.items():
            grad[home] = part.reshape(_shape(sizes, unions[home], cliques[home]))
        return value, grad

    mu = _calibrate(tree, theta, total)
    current, grad = loss(mu)
    alpha = 1.0 / total**2
    for _ in range(iterations):
        alpha *= 2
        for _ in range(_HALVINGS):
            trial = [t - alpha * g for t, g in zip(theta, grad, strict=True)]
            trial_mu = _calibrate(tree, trial, total)
            value, trial_grad = loss(trial_mu)
            gain = sum(float((g * (a - b)).sum()) for g, a, b in zip(grad, mu, trial_mu, strict=True))
            if current - value >= 0.5 * alpha * gain:
                break
            alpha *= 0.5
        theta, mu, current, grad = trial, trial_mu, value, trial_grad
    return GraphicalModel(tree, tuple(m / total for m in mu), total, tuple(theta))
