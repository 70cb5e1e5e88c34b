"""MST: marginal-based synthetic data on a maximum spanning tree (McKenna, Miklau and Sheldon, "Winning the
NIST Contest: A scalable and general approach to differentially private synthetic data", JPC 2021, Alg. 1),
charged to a ledger once per fit.

**Data.** ``codes``: one row per record, one column per attribute, each value a whole number in ``[0,
sizes[j])`` (bin or category codes; the caller discretises, with public bins).

**The algorithm** at ``rho``-zCDP (``rho`` the least that reaches the requested ``(epsilon, delta)``,
:func:`rho_for`), split in thirds (all of it on the first step when there is one attribute):

1. every 1-way marginal (the counts of each attribute's values) with discrete Gaussian noise, ``rho / (3
   d)`` each;
2. ``d - 1`` times, the exponential mechanism (kakeibo's permute-and-flip, :class:`~kakeibo.mechanisms.
   Exponential`) picks an attribute pair joining two parts of the tree built so far (Kruskal's order), with
   utility the L1 distance between the pair's true 2-way marginal and what the noisy 1-way marginals
   predict under independence: the pairs independence explains worst. Each pick is ``e``-DP with ``e^2 / 2
   = rho / (3 (d - 1))`` (pure ``e``-DP implies ``e^2 / 2``-zCDP, Bun and Steinke 2016, Prop. 1.4; the
   bounded-range bound ``e^2 / 8`` holds for the Gumbel-max exponential mechanism, not shown for
   permute-and-flip, so it is not used);
3. the 2-way marginal of each chosen pair with discrete Gaussian noise, ``rho / (3 (d - 1))`` each.

**Neighbour relation**: add or remove one record. **Sensitivities**: a record adds 1 to one cell of every
marginal (L2 sensitivity 1) and moves each utility of step 2 by at most 1 (the prediction it is compared
with is fixed by step 1's output). The measurements compose to ``rho``-zCDP; the charge states the zCDP
curve (rdp books) and ``(epsilon', delta)`` with ``epsilon' <= epsilon`` from it (sequential books).

**The model** (post-processing, own inference for a tree; the paper uses Private-PGM): each attribute's
distribution is the inverse-variance average of its noisy 1-way marginal and the margins of its noisy
2-way marginals, clipped at 0 and normalised; each edge's table is its noisy 2-way marginal clipped at 0
and fitted to those two distributions by iterative proportional fitting. A tree's joint distribution is
determined by its edge tables, so sampling walks the tree from attribute 0: each attribute is drawn given
its parent's value.

**Timing.** A fit's time grows with the number of records, treated as public as for DP-SGD; the
permute-and-flip picks draw a data-dependent number of exact coins (:class:`~kakeibo.mechanisms.
Exponential`); sampling's time depends on the released model only.

Not yet: MST's domain compression (merging values whose noisy count is small) and Private-PGM's
least-squares inference; a session entry point with per-person bounds (issue 35).

>>> import numpy as np
>>> rng = np.random.default_rng(0)
>>> a = rng.integers(0, 3, 2000)
>>> codes = np.column_stack([a, (a + (rng.random(2000) < 0.1)) % 3, rng.integers(0, 2, 2000)])
>>> model = MST(8.0, 1e-6, ledger=False, random_state=0).fit(codes, sizes=(3, 3, 2))
>>> model.edges_[0], model.sample(5, random_state=1).shape
((0, 1), (5, 3))
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from fractions import Fraction
from typing import Any, Literal

import numpy as np
from numpy.typing import ArrayLike, NDArray
from sklearn.base import BaseEstimator

from ..accounting import Ledger
from ..accounting.curves import Concentrated, MechanismLoss
from ..errors import ArgumentError, ArgumentTypeError
from ..mechanisms import DiscreteGaussian, Exponential
from ..mechanisms.base import check_positive
from ..ml import RandomState, charged_run, check_count, check_fitted, check_ledger
from ..noise import RandomSource
from ..privacy import ApproxDP, Number, as_fraction, zcdp_epsilon

__all__ = ["MST", "rho_for"]

IntMatrix = NDArray[np.int64]
FloatArray = NDArray[np.float64]
#: rounds of iterative proportional fitting per edge table
_IPF_ROUNDS = 50


@functools.lru_cache(maxsize=64)
def rho_for(epsilon: Number, delta: Number) -> Fraction:
    """The largest ``rho`` (to 6 significant digits, rounded down) whose zCDP converts to at most
    ``(epsilon, delta)`` (Canonne, Kamath and Steinke 2020, Cor. 13: :func:`~kakeibo.privacy.zcdp_epsilon`).
    Cached: the parameters are public and the nested bisection takes about half a second.

    >>> rho = rho_for(1.0, 1e-6)
    >>> float(rho), zcdp_epsilon(float(rho), 1e-6) <= 1.0
    (0.0243559, True)
    """
    eps, dlt = float(as_fraction(epsilon, "epsilon")), float(as_fraction(delta, "delta"))
    if not eps > 0 or not 0 < dlt < 1:
        raise ArgumentError(f"MST needs epsilon > 0 and delta in (0, 1), got ({eps:g}, {dlt:g}).")
    lo, hi = 0.0, eps
    while zcdp_epsilon(hi, dlt) <= eps:
        lo, hi = hi, 2 * hi
    for _ in range(60):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if zcdp_epsilon(mid, dlt) <= eps else (lo, mid)
    digits = 6 - math.floor(math.log10(lo)) - 1
    return Fraction(math.floor(lo * 10**digits), 10**digits)


class MST(BaseEstimator):  # type: ignore[misc]
    """MST synthetic data (module docstring): ``fit(codes, sizes=)`` charges the ledger once, ``sample(n)``
    is free. ``ledger``, ``dataset``, ``label`` and ``random_state`` as in :mod:`kakeibo.ml`."""

    def __init__(
        self,
        epsilon: float = 1.0,
        delta: float = 1e-6,
        *,
        ledger: Ledger | Literal[False] | None = None,
        dataset: str | None = None,
        label: str | None = None,
        random_state: RandomState = None,
    ) -> None:
        self.epsilon = epsilon
        self.delta = delta
        self.ledger = ledger
        self.dataset = dataset
        self.label = label
        self.random_state = random_state

    def fit(self, codes: ArrayLike, sizes: Sequence[int]) -> MST:
        """Measure, select and fit (module docstring) as one :func:`kakeibo.release.run`: checks first
        (free), then the budget check, the measurements, the charge."""
        data, domain = _check_codes(codes, sizes)
        check_positive(self.epsilon, "epsilon")
        check_ledger(self.ledger)
        rho = rho_for(self.epsilon, self.delta)
        reached = zcdp_epsilon(float(rho), float(self.delta))
        loss = MechanismLoss(ApproxDP(reached, self.delta), Concentrated(rho))
        released = charged_run(self, loss, "MST", lambda source: _measure(data, domain, rho, source))
        ones, edges, pairs = released.value
        self.sizes_ = domain
        self.rho_ = rho
        self.privacy_loss_ = loss
        self.ledger_entry_ = released.ledger_entry
        self.edges_ = edges
        self.marginals_, self.tables_ = _fit_tree(domain, ones, edges, pairs, rho)
        return self

    def sample(self, n: int, random_state: int | np.random.Generator | None = None) -> IntMatrix:
        """``n`` synthetic records drawn from the fitted model (post-processing: no charge)."""
        check_fitted(self)
        check_count(n, "n")
        rng = np.random.default_rng(random_state)
        out = np.empty((n, len(self.sizes_)), dtype=np.int64)
        out[:, 0] = _draw(np.broadcast_to(self.marginals_[0], (n, self.sizes_[0])), rng)
        for parent, child in _walk(len(self.sizes_), self.edges_):
            table = self.tables_[(parent, child)]
            rows = table / np.maximum(table.sum(axis=1, keepdims=True), 1e-300)
            out[:, child] = _draw(rows[out[:, parent]], rng)
        return out


def _check_codes(codes: ArrayLike, sizes: Sequence[int]) -> tuple[IntMatrix, tuple[int, ...]]:
    domain = tuple(check_count(size, "each size") for size in sizes)
    data = np.asarray(codes)
    if data.dtype.kind not in "iub":
        raise ArgumentTypeError(f"codes must hold whole numbers, got dtype {data.dtype}.")
    if data.ndim != 2 or data.shape[1] != len(domain) or data.shape[1] == 0:
        raise ArgumentError(
            f"codes must be a 2-d array with one column per size ({len(domain)}), got shape {data.shape}."
        )
    data = data.astype(np.int64)
    if data.size and (np.any(data < 0) or np.any(data >= np.asarray(domain))):
        raise ArgumentError("every code must lie in [0, size) of its column.")
    return data, domain


def _counts(data: IntMatrix, domain: tuple[int, ...], attributes: tuple[int, ...]) -> IntMatrix:
    """The exact marginal of ``attributes`` (counts, shaped by their sizes)."""
    shape = tuple(domain[a] for a in attributes)
    flat = np.ravel_multi_index(tuple(data[:, a] for a in attributes), shape)
    return np.bincount(flat, minlength=math.prod(shape)).reshape(shape).astype(np.int64)


def _split(rho: Fraction, d: int) -> tuple[Fraction, Fraction]:
    """``(rho of each 1-way marginal, rho of each pick and of each 2-way marginal)``: a third of ``rho`` per
    step (all of it on the 1-way marginals when ``d == 1``)."""
    if d == 1:
        return rho, Fraction(0)
    return rho / (3 * d), rho / (3 * (d - 1))


def _measure(
    data: IntMatrix, domain: tuple[int, ...], rho: Fraction, source: RandomSource
) -> tuple[list[FloatArray], list[tuple[int, int]], dict[tuple[int, int], FloatArray]]:
    """Steps 1-3 of the module docstring: the noisy 1-way marginals, the chosen edges, their noisy 2-way
    marginals. Everything released is here; nothing after it reads ``data``."""
    d = len(domain)
    one_rho, edge_rho = _split(rho, d)
    one_way = DiscreteGaussian(sensitivity=1, rho=one_rho)
    ones = [np.asarray(one_way.release(_counts(data, domain, (a,)), rng=source), float) for a in range(d)]
    if d == 1:
        return ones, [], {}
    pick = Exponential(utility_sensitivity=1, epsilon=math.sqrt(2 * float(edge_rho)) * (1 - 1e-12))
    two_way = DiscreteGaussian(sensitivity=1, rho=edge_rho)
    shares = [np.clip(y, 0, None) / max(np.clip(y, 0, None).sum(), 1.0) for y in ones]
    total = max(float(np.mean([y.sum() for y in ones])), 0.0)
    exact = {(a, b): _counts(data, domain, (a, b)) for a in range(d) for b in range(a + 1, d)}
    utility = {
        (a, b): float(np.abs(counts - total * np.outer(shares[a], shares[b])).sum())
        for (a, b), counts in exact.items()
    }
    part = list(range(d))  # Kruskal's components: part[a] is a's representative
    edges: list[tuple[int, int]] = []
    for _ in range(d - 1):
        joining = [(a, b) for a, b in exact if part[a] != part[b]]
        a, b = joining[pick.release([utility[pair] for pair in joining], rng=source)]
        edges.append((a, b))
        old, new = part[b], part[a]
        part = [new if p == old else p for p in part]
    pairs = {edge: np.asarray(two_way.release(exact[edge], rng=source), float) for edge in edges}
    return ones, edges, pairs


def _fit_tree(
    domain: tuple[int, ...],
    ones: list[FloatArray],
    edges: list[tuple[int, int]],
    pairs: dict[tuple[int, int], FloatArray],
    rho: Fraction,
) -> tuple[list[FloatArray], dict[tuple[int, int], FloatArray]]:
    """Post-processing (module docstring): each attribute's distribution and each edge's table, oriented
    both ways (``tables[(a, b)][i, j]`` = P(a = i, b = j))."""
    d = len(domain)
    one_rho, edge_rho = _split(rho, d)
    one_var = 1 / (2 * float(one_rho))  # sigma^2 of each 1-way cell
    two_var = 1 / (2 * float(edge_rho)) if d > 1 else math.inf
    sums = [ones[a] / one_var for a in range(d)]
    weights = [np.full(domain[a], 1 / one_var) for a in range(d)]
    for (a, b), table in pairs.items():
        margins = ((a, table.sum(axis=1), domain[b]), (b, table.sum(axis=0), domain[a]))
        for attribute, margin, width in margins:  # a margin sums width cells of the 2-way table
            sums[attribute] = sums[attribute] + margin / (width * two_var)
            weights[attribute] = weights[attribute] + 1 / (width * two_var)
    marginals = [_normalised(sums[a] / weights[a]) for a in range(d)]
    tables: dict[tuple[int, int], FloatArray] = {}
    for (a, b), table in pairs.items():
        fitted = _proportional_fit(np.clip(table, 0, None) + 1e-9, marginals[a], marginals[b])
        tables[(a, b)], tables[(b, a)] = fitted, fitted.T
    return marginals, tables


def _normalised(values: FloatArray) -> FloatArray:
    clipped = np.clip(values, 0, None)
    total = clipped.sum()
    return clipped / total if total > 0 else np.full(values.size, 1 / values.size)


def _proportional_fit(table: FloatArray, rows: FloatArray, columns: FloatArray) -> FloatArray:
    """``table`` scaled row- and column-wise towards the margins ``rows`` and ``columns``."""
    fitted = table / table.sum()
    for _ in range(_IPF_ROUNDS):
        fitted = fitted * (rows / np.maximum(fitted.sum(axis=1), 1e-300))[:, None]
        fitted = fitted * (columns / np.maximum(fitted.sum(axis=0), 1e-300))[None, :]
    return np.asarray(fitted, dtype=np.float64)


def _walk(d: int, edges: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """The tree's edges as (parent, child) in breadth-first order from attribute 0."""
    neighbours: dict[int, list[int]] = {a: [] for a in range(d)}
    for a, b in edges:
        neighbours[a].append(b)
        neighbours[b].append(a)
    order, seen, queue = [], {0}, [0]
    while queue:
        parent = queue.pop(0)
        for child in sorted(neighbours[parent]):
            if child not in seen:
                seen.add(child)
                order.append((parent, child))
                queue.append(child)
    return order


def _draw(probabilities: Any, rng: np.random.Generator) -> NDArray[np.int64]:
    """One index per row of ``probabilities`` (rows summing to 1), by inverse CDF."""
    cdf = np.cumsum(probabilities, axis=1)
    u = rng.random(cdf.shape[0]) * cdf[:, -1]
    return np.asarray(np.minimum((u[:, None] >= cdf).sum(axis=1), cdf.shape[1] - 1), dtype=np.int64)
