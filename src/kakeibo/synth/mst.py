"""MST: marginal-based synthetic data on a maximum spanning tree (McKenna, Miklau and Sheldon, "Winning the
NIST Contest: A scalable and general approach to differentially private synthetic data", JPC 2021, Alg. 1),
charged to a ledger once per fit.

**Data.** ``codes``: one row per record, one column per attribute, each value a whole number in ``[0,
sizes[j])`` (bin or category codes; the caller discretises, with public bins). :func:`fit_tree` also takes
the table as weighted cells (``counts[i]`` records equal to ``cells[i]``): how ``Session.synthesize`` passes
the engine's count tensor (:mod:`kakeibo.sql.synthesis`).

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

**Neighbour relation**: add or remove one record (the estimator), or one person with at most ``k`` records
(``fit_tree(sensitivity=k)``). **Sensitivities**: a record adds 1 to one cell of every marginal, so ``k``
records change each marginal by at most ``k`` in L2 (all in one cell; spread over cells, ``sqrt(k)``), and
each utility of step 2 by at most ``k`` (the prediction it is compared with is fixed by step 1's output);
every mechanism is calibrated to ``k``. The measurements compose to ``rho``-zCDP; the charge states the zCDP
curve (rdp books) and ``(epsilon', delta)`` with ``epsilon' <= epsilon`` from it (sequential books).

**The model** (:class:`TreeModel`; post-processing, own inference for a tree; the paper uses
Private-PGM): each attribute's distribution is the inverse-variance average of its noisy 1-way marginal
and the margins of its noisy 2-way marginals, clipped at 0 and normalised; each edge's table is its noisy
2-way marginal clipped at 0 and fitted to those two distributions by iterative proportional fitting. A
tree's joint distribution is determined by its edge tables, so sampling walks the tree from attribute 0:
each attribute given its parent's value, allocated to the rows of each parent value in proportion to its
conditional distribution (:func:`allocate`), as Private-PGM's sampler does.

**Timing.** A fit's time grows with the number of records (of distinct cells, given as weighted cells),
treated as public as for DP-SGD; the permute-and-flip picks draw a data-dependent number of exact coins
(:class:`~kakeibo.mechanisms.Exponential`); sampling's time depends on the released model only.

**Size.** Every attribute pair's 2-way table is counted exactly for the selection, so a domain in which
two attributes' sizes multiply past :data:`MAX_PAIR_CELLS` is refused before any charge.

Not yet: MST's domain compression (merging values whose noisy count is small) and Private-PGM's
least-squares inference (issue 35).

>>> import numpy as np
>>> rng = np.random.default_rng(0)
>>> a = rng.integers(0, 3, 2000)
>>> codes = np.column_stack([a, (a + (rng.random(2000) < 0.1)) % 3, rng.integers(0, 2, 2000)])
>>> model = MST(8.0, 1e-6, ledger=False, random_state=0).fit(codes, sizes=(3, 3, 2))
>>> model.model_.edges[0], model.sample(5, random_state=1).shape
((0, 1), (5, 3))
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from fractions import Fraction
from typing import Any, Literal

import numpy as np
from numpy.typing import ArrayLike, NDArray

from ..accounting import Ledger
from ..accounting.curves import Concentrated, MechanismLoss
from ..errors import ArgumentError, ArgumentTypeError
from ..mechanisms import DiscreteGaussian, Exponential
from ..mechanisms.base import check_positive
from ..ml import RandomState, check_count, check_ledger
from ..noise import RandomSource
from ..privacy import ApproxDP, Number, as_fraction, zcdp_epsilon
from .base import Synthesizer, pack, unpack

__all__ = [
    "MAX_PAIR_CELLS",
    "MST",
    "TreeModel",
    "allocate",
    "breadth_first",
    "check_codes",
    "check_domain",
    "concentrated_loss",
    "fit_tree",
    "marginal_counts",
    "mst_loss",
    "rho_for",
]

IntMatrix = NDArray[np.int64]
FloatArray = NDArray[np.float64]
#: rounds of iterative proportional fitting per edge table
_IPF_ROUNDS = 50
#: the most cells of one attribute pair's 2-way table (each pair is counted exactly for the selection)
MAX_PAIR_CELLS = 2**22


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
        raise ArgumentError(f"a synthesis needs epsilon > 0 and delta in (0, 1), got ({eps:g}, {dlt:g}).")
    lo, hi = 0.0, eps
    while zcdp_epsilon(hi, dlt) <= eps:
        lo, hi = hi, 2 * hi
    for _ in range(60):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if zcdp_epsilon(mid, dlt) <= eps else (lo, mid)
    digits = 6 - math.floor(math.log10(lo)) - 1
    return Fraction(math.floor(lo * 10**digits), 10**digits)


def mst_loss(
    epsilon: Number, delta: Number, sizes: tuple[int, ...], sensitivity: int
) -> tuple[Fraction, MechanismLoss]:
    """``(rho, the charge)`` of an MST fit at ``(epsilon, delta)`` over ``sizes`` at ``sensitivity``
    (:func:`concentrated_loss`)."""
    return concentrated_loss(epsilon, delta, lambda rho: _mechanisms(rho, len(sizes), sensitivity))


def concentrated_loss(
    epsilon: Number, delta: Number, build: Callable[[Fraction], object]
) -> tuple[Fraction, MechanismLoss]:
    """``(rho, the charge)`` of a fit whose measurements compose to ``rho``-zCDP at ``(epsilon, delta)``: the
    zCDP curve (rdp books) and the ``(epsilon', delta)`` it converts to, ``epsilon' <= epsilon`` (sequential
    books). Refused (free, before the charge) where the accounting's arithmetic or a mechanism of the fit
    would leave its range: ``build(rho)`` constructs, from public inputs, the mechanisms the draw will
    build (those at the extremes of their scales, where the draw's vary)."""
    check_positive(epsilon, "epsilon")
    try:
        rho = rho_for(epsilon, delta)
        build(rho)
        reached = zcdp_epsilon(float(rho), float(delta))
    except ArgumentError:
        raise
    except (ValueError, OverflowError, ZeroDivisionError):
        raise ArgumentError(
            f"a synthesis at epsilon {float(epsilon):g}, delta {float(delta):g} over these columns needs "
            "noise beyond the range of kakeibo's accounting or exact samplers; choose epsilon and delta "
            "nearer 1."
        ) from None
    return rho, MechanismLoss(ApproxDP(reached, delta), Concentrated(rho))


def check_domain(sizes: Sequence[int]) -> tuple[int, ...]:
    """``sizes`` as whole numbers of at least 1, refused (free) when two of them multiply past
    :data:`MAX_PAIR_CELLS` (module docstring, Size)."""
    domain = tuple(check_count(size, "each size") for size in sizes)
    if not domain:
        raise ArgumentError("a synthesis needs at least one column.")
    largest = sorted(domain)[-2:]
    if math.prod(largest) > MAX_PAIR_CELLS:
        raise ArgumentError(
            f"the two largest columns have {largest[0]} x {largest[1]} value pairs, more than the "
            f"{MAX_PAIR_CELLS} a synthesis counts per pair; bin them more coarsely."
        )
    return domain


@dataclass(frozen=True, eq=False)
class TreeModel:
    """A fitted MST model (module docstring, The model): each attribute's distribution, the chosen edges and
    each edge's joint table (``tables[(a, b)][i, j]`` = P(a = i, b = j) for the edge ``(a, b)`` as chosen),
    and ``total``, the record count the noisy 1-way marginals estimate (their mean total, at least 0).
    Everything in it is post-processing of the measurements."""

    sizes: tuple[int, ...]
    edges: tuple[tuple[int, int], ...]
    marginals: tuple[FloatArray, ...]
    tables: Mapping[tuple[int, int], FloatArray]
    total: float

    def sample(self, n: int, rng: np.random.Generator) -> IntMatrix:
        """``n`` records: attribute 0 from its distribution, then each attribute given its parent's value in
        the tree (breadth-first, :func:`_walk`)."""
        out = np.empty((n, len(self.sizes)), dtype=np.int64)
        out[:, 0] = allocate(self.marginals[0][None, :], np.zeros(n, dtype=np.int64), rng)
        for parent, child in _walk(len(self.sizes), list(self.edges)):
            edge = (parent, child)
            table = self.tables[edge] if edge in self.tables else self.tables[(child, parent)].T
            out[:, child] = allocate(table, out[:, parent], rng)
        return out

    def to_bytes(self) -> bytes:
        """A JSON header line (sizes, edges, total), then the distributions and tables as a NumPy archive."""
        header = {"sizes": list(self.sizes), "edges": [list(e) for e in self.edges], "total": self.total}
        arrays: dict[str, Any] = {f"marginal_{a}": m for a, m in enumerate(self.marginals)}
        arrays.update({f"table_{i}": self.tables[edge] for i, edge in enumerate(self.edges)})
        return pack(header, arrays)

    @classmethod
    def from_bytes(cls, payload: bytes) -> TreeModel:
        header, arrays = unpack(payload)
        edges = tuple((int(a), int(b)) for a, b in header["edges"])
        return cls(
            tuple(int(size) for size in header["sizes"]),
            edges,
            tuple(arrays[f"marginal_{a}"] for a in range(len(header["sizes"]))),
            {edge: arrays[f"table_{i}"] for i, edge in enumerate(edges)},
            float(header["total"]),
        )


def fit_tree(
    cells: IntMatrix,
    counts: NDArray[np.int64],
    sizes: tuple[int, ...],
    rho: Fraction,
    sensitivity: int,
    source: RandomSource,
) -> TreeModel:
    """Measure (steps 1-3) and fit the tree model of ``counts[i]`` records equal to ``cells[i]``, every
    mechanism calibrated to ``sensitivity`` (module docstring: the records of one person); part of a
    release's draw."""
    ones, edges, pairs = _measure(cells, counts, sizes, rho, sensitivity, source)
    return _fit_tree(sizes, ones, edges, pairs, rho, sensitivity)


class MST(Synthesizer):
    """MST synthetic data (module docstring): ``fit(codes, sizes=)`` charges the ledger once and stores the
    fitted :class:`TreeModel` as ``model_``; ``sample(n)`` is free. ``ledger``, ``dataset``, ``label`` and
    ``random_state`` as in :mod:`kakeibo.ml`."""

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
        data, domain = check_codes(codes, sizes)
        check_ledger(self.ledger)
        rho, loss = mst_loss(self.epsilon, self.delta, domain, 1)
        ones = np.ones(len(data), dtype=np.int64)
        self._charged_fit(loss, "MST", lambda source: fit_tree(data, ones, domain, rho, 1, source))
        self.sizes_, self.rho_ = domain, rho
        return self


def check_codes(codes: ArrayLike, sizes: Sequence[int]) -> tuple[IntMatrix, tuple[int, ...]]:
    """``codes`` as a 2-d array of whole numbers, each in ``[0, size)`` of its column, with the checked
    ``sizes`` (refusals are free: they read only the caller's own arguments' shape and range)."""
    domain = check_domain(sizes)
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


def marginal_counts(
    cells: IntMatrix, counts: NDArray[np.int64], domain: tuple[int, ...], attributes: tuple[int, ...]
) -> IntMatrix:
    """The exact marginal of ``attributes`` (counts, shaped by their sizes) of ``counts[i]`` records equal to
    ``cells[i]`` (sums of whole numbers below 2^53, so exact in doubles)."""
    shape = tuple(domain[a] for a in attributes)
    flat = np.ravel_multi_index(tuple(cells[:, a] for a in attributes), shape)
    summed = np.bincount(flat, weights=counts, minlength=math.prod(shape))
    return np.rint(summed).astype(np.int64).reshape(shape)


def _split(rho: Fraction, d: int) -> tuple[Fraction, Fraction]:
    """``(rho of each 1-way marginal, rho of each pick and of each 2-way marginal)``: a third of ``rho`` per
    step (all of it on the 1-way marginals when ``d == 1``)."""
    if d == 1:
        return rho, Fraction(0)
    return rho / (3 * d), rho / (3 * (d - 1))


def _mechanisms(
    rho: Fraction, d: int, sensitivity: int
) -> tuple[DiscreteGaussian, Exponential | None, DiscreteGaussian | None]:
    """The mechanisms of steps 1-3 (module docstring) for ``d`` attributes: each 1-way marginal's, each
    pick's and each 2-way marginal's (``None`` for the last two when ``d == 1``)."""
    one_rho, edge_rho = _split(rho, d)
    one_way = DiscreteGaussian(sensitivity=sensitivity, rho=one_rho)
    if d == 1:
        return one_way, None, None
    epsilon = math.sqrt(2 * float(edge_rho)) * (1 - 1e-12)  # e^2 / 2 < edge_rho (module docstring)
    pick = Exponential(utility_sensitivity=sensitivity, epsilon=epsilon)
    return one_way, pick, DiscreteGaussian(sensitivity=sensitivity, rho=edge_rho)


def _measure(
    cells: IntMatrix,
    counts: NDArray[np.int64],
    domain: tuple[int, ...],
    rho: Fraction,
    sensitivity: int,
    source: RandomSource,
) -> tuple[list[FloatArray], list[tuple[int, int]], dict[tuple[int, int], FloatArray]]:
    """Steps 1-3 of the module docstring: the noisy 1-way marginals, the chosen edges, their noisy 2-way
    marginals. Everything released is here; nothing after it reads the data."""
    d = len(domain)
    one_way, pick, two_way = _mechanisms(rho, d, sensitivity)
    ones = [
        np.asarray(one_way.release(marginal_counts(cells, counts, domain, (a,)), rng=source), float)
        for a in range(d)
    ]
    if pick is None or two_way is None:
        return ones, [], {}
    shares = [np.clip(y, 0, None) / max(np.clip(y, 0, None).sum(), 1.0) for y in ones]
    total = max(float(np.mean([y.sum() for y in ones])), 0.0)
    exact = {
        (a, b): marginal_counts(cells, counts, domain, (a, b)) for a in range(d) for b in range(a + 1, d)
    }
    utility = {
        (a, b): float(np.abs(table - total * np.outer(shares[a], shares[b])).sum())
        for (a, b), table in exact.items()
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
    sensitivity: int,
) -> TreeModel:
    """Post-processing (module docstring): each attribute's distribution and each edge's table."""
    d = len(domain)
    one_rho, edge_rho = _split(rho, d)
    one_var = sensitivity**2 / (2 * float(one_rho))  # sigma^2 of each 1-way cell
    two_var = sensitivity**2 / (2 * float(edge_rho)) if d > 1 else math.inf
    sums = [ones[a] / one_var for a in range(d)]
    weights = [np.full(domain[a], 1 / one_var) for a in range(d)]
    for (a, b), table in pairs.items():
        margins = ((a, table.sum(axis=1), domain[b]), (b, table.sum(axis=0), domain[a]))
        for attribute, margin, width in margins:  # a margin sums width cells of the 2-way table
            sums[attribute] = sums[attribute] + margin / (width * two_var)
            weights[attribute] = weights[attribute] + 1 / (width * two_var)
    marginals = tuple(_normalised(sums[a] / weights[a]) for a in range(d))
    tables = {
        (a, b): _proportional_fit(np.clip(table, 0, None) + 1e-9, marginals[a], marginals[b])
        for (a, b), table in pairs.items()
    }
    total = max(float(np.mean([y.sum() for y in ones])), 0.0)
    return TreeModel(domain, tuple(edges), marginals, tables, total)


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
    return breadth_first(d, edges)[0]


def breadth_first(count: int, edges: Sequence[tuple[int, int]]) -> tuple[list[tuple[int, int]], list[int]]:
    """``(order, roots)`` of the forest on nodes ``0 .. count - 1`` with ``edges``: its edges as (parent,
    child), breadth-first (children in increasing order) from each tree's least node, and those roots."""
    neighbours: dict[int, list[int]] = {a: [] for a in range(count)}
    for a, b in edges:
        neighbours[a].append(b)
        neighbours[b].append(a)
    order: list[tuple[int, int]] = []
    roots: list[int] = []
    seen: set[int] = set()
    for root in range(count):
        if root in seen:
            continue
        roots.append(root)
        seen.add(root)
        queue = [root]
        while queue:
            parent = queue.pop(0)
            for child in sorted(neighbours[parent]):
                if child not in seen:
                    seen.add(child)
                    order.append((parent, child))
                    queue.append(child)
    return order, roots


def allocate(table: FloatArray, given: NDArray[np.int64], rng: np.random.Generator) -> NDArray[np.int64]:
    """One index per entry of ``given``, from row ``given[i]`` of ``table`` (non-negative weights, each row's
    sum positive), allocated rather than drawn one by one: the ``m`` entries of a row get ``floor(m p_j)``
    of each index ``j``, the remaining few go to indices drawn without replacement in proportion to the
    fractional parts, and the row's entries are shuffled. Each index still comes ``m p_j`` times in
    expectation, but the synthetic marginals follow the model's without the multinomial noise of independent
    draws (which was most of the 1-way distance to the real rows on a few thousand rows; Private-PGM's
    sampler allocates the same way). Memory grows with ``len(given)`` only."""
    out = np.zeros(len(given), dtype=np.int64)
    if not len(given):
        return out
    order = np.argsort(given, kind="stable")
    values, starts = np.unique(given[order], return_index=True)
    for value, rows in zip(values, np.split(order, starts[1:]), strict=True):
        shares = table[value] / table[value].sum()
        wanted = shares * len(rows)
        counts = np.floor(wanted).astype(np.int64)
        left, fractions = len(rows) - int(counts.sum()), wanted - counts
        if left > 0:  # a floor of 1e-12 keeps enough indices drawable whatever the rounding
            weights = fractions + 1e-12
            counts[rng.choice(len(shares), left, replace=False, p=weights / weights.sum())] += 1
        out[rows] = rng.permutation(np.repeat(np.arange(len(shares)), counts))
    return out
