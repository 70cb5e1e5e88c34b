"""PrivBayes: synthetic data from a private Bayesian network (Zhang, Cormode, Procopiuc, Srivastava and Xiao,
"PrivBayes: Private data release via Bayesian networks", TODS 42(4), 2017, Alg. 1, 4 and 5), pure
``epsilon``-DP, charged to a ledger once per fit.

**Data** as for :class:`~kakeibo.synth.MST`: integer codes with public sizes (or weighted cells,
:func:`fit_network`).

**The algorithm** at ``epsilon``: ``1/50`` of it for the record count, then ``beta = 3/10`` of the rest
for the structure and the remainder for the distributions (the paper's recommended ``beta``), every share an
exact rational:

0. *Usefulness* (the paper's Sec. 4.4): the record count ``n`` with discrete Laplace noise. A table of
   ``c`` cells whose cells carry noise of scale ``d / epsilon_2`` (``epsilon_2`` the distributions' share)
   is ``theta``-useful when ``n epsilon_2 / (d c) >= theta = 4``; attribute-parent sets are kept to that many
   cells (at most ``max_cells``, at least the largest column). The paper takes ``n`` as public; kakeibo
   pays for a noisy one (its own departure) and so reads ``n`` only through a release;
1. *Structure* (GreedyBayes, Alg. 4): the first attribute is drawn uniformly (public randomness); then, ``d
   - 1`` times, the exponential mechanism (kakeibo's permute-and-flip) at ``beta epsilon / (d - 1)`` picks an
   attribute ``X`` not yet in the network and a parent set ``Pi`` of ``min(degree, chosen)`` attributes
   already in it (fewer where every such set has more cells with ``X`` than step 0 allows: the largest
   size with a candidate), with utility the paper's score ``R`` (Sec. 4.3) in counts: ``||C[X, Pi] - C[X]
   (x) C[Pi] / n||_1``, the joint's distance from what independence predicts;
2. *Distributions* (Alg. 5): each attribute's marginal with its parents, ``C[X, Pi]``, with discrete
   Laplace (:class:`~kakeibo.mechanisms.Geometric`) noise at ``(1 - beta) epsilon / d`` each;
3. *Model*: each noisy table clipped at 0 and normalised per parent value (uniform where a parent value has
   no mass); sampling draws the attributes in the network's order, each given its parents' values
   (:func:`~kakeibo.synth.mst.allocate`).

**Neighbour relation**: add or remove one record (the estimator), or one person with at most ``k`` records
(``fit_network(sensitivity=k)``). **Sensitivities**: a record adds 1 to the count and to one cell of each
marginal (L1 1, ``k`` for ``k`` records). The score moves by at most 4 per record: the joint term by 1 and
the independence term ``a b^T / n`` by ``||(a + e_x)(b + e_p)^T / (n + 1) - a b^T / n||_1``, at most
``(3 n^2 + n) / (n (n + 1)) < 3`` (``a``, ``b`` the marginal counts, each summing to ``n``); so ``4 k``
for ``k`` records whatever ``n`` (the paper's ``R`` is normalised and its bound assumes a known ``n``).
The count, the picks and the marginals compose to exactly ``epsilon``-DP (pure; the charge needs no
``delta``).

**Timing.** The scores read exact counts for every candidate (the paper's cost: about ``d^(degree + 2)``
marginals), in time that grows with the number of records, treated as public as for MST.

>>> import numpy as np
>>> rng = np.random.default_rng(0)
>>> a = rng.integers(0, 3, 2000)
>>> codes = np.column_stack([a, (a + (rng.random(2000) < 0.1)) % 3, rng.integers(0, 2, 2000)])
>>> model = PrivBayes(8.0, ledger=False, random_state=0).fit(codes, sizes=(3, 3, 2))
>>> model.sample(5, random_state=1).shape
(5, 3)
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass
from fractions import Fraction
from typing import Literal

import numpy as np
from numpy.typing import ArrayLike, NDArray

from ..accounting import Ledger
from ..errors import ArgumentError
from ..mechanisms import Exponential, Geometric
from ..mechanisms.base import check_positive
from ..ml import RandomState, check_count, check_ledger
from ..noise import RandomSource
from ..noise.exact import uniform_below
from ..privacy import Number, PureDP, as_fraction
from .base import Synthesizer, pack, unpack
from .mst import allocate, check_codes, marginal_counts

__all__ = [
    "BETA",
    "BayesNetwork",
    "Mechanisms",
    "PrivBayes",
    "fit_network",
    "network_mechanisms",
    "useful_cells",
]

IntMatrix = NDArray[np.int64]
FloatArray = NDArray[np.float64]

#: the share of epsilon spent on the structure (the paper's recommendation, Sec. 6)
BETA = Fraction(3, 10)
#: the share of epsilon spent on the record count (module docstring, step 0)
COUNT_SHARE = Fraction(1, 50)
#: the ratio of signal to noise per cell a table must reach (the paper's theta, Sec. 4.4)
THETA = 4
#: the score's sensitivity per record (module docstring)
SCORE_SENSITIVITY = 4
#: the defaults of :class:`PrivBayes` (and of ``Session.synthesize(method="privbayes")``): the most parents of
#: an attribute, and the most cells of an attribute with its parents
DEGREE, MAX_CELLS = 2, 2**16


@dataclass(frozen=True, eq=False)
class BayesNetwork:
    """A fitted network: ``order`` of the attributes, each one's ``parents`` (a tuple of earlier attributes)
    and ``tables[i]`` = P(order[i] | parents[i]), one row per parent value (flattened in the parents'
    order), and ``total``, the record count the noisy marginals estimate (their mean total, at least 0)."""

    sizes: tuple[int, ...]
    order: tuple[int, ...]
    parents: tuple[tuple[int, ...], ...]
    tables: tuple[FloatArray, ...]
    total: float

    def sample(self, n: int, rng: np.random.Generator) -> IntMatrix:
        """``n`` records, each attribute in ``order`` given its parents' values."""
        out = np.zeros((n, len(self.sizes)), dtype=np.int64)
        for attribute, parents, table in zip(self.order, self.parents, self.tables, strict=True):
            shape = tuple(self.sizes[p] for p in parents)
            given = np.ravel_multi_index(tuple(out[:, p] for p in parents), shape) if parents else np.zeros(n)
            out[:, attribute] = allocate(table, np.asarray(given, np.int64), rng)
        return out

    def to_bytes(self) -> bytes:
        header = {
            "sizes": list(self.sizes),
            "order": list(self.order),
            "parents": [list(p) for p in self.parents],
            "total": self.total,
        }
        return pack(header, {f"table_{i}": t for i, t in enumerate(self.tables)})

    @classmethod
    def from_bytes(cls, payload: bytes) -> BayesNetwork:
        header, arrays = unpack(payload)
        return cls(
            tuple(int(s) for s in header["sizes"]),
            tuple(int(a) for a in header["order"]),
            tuple(tuple(int(p) for p in parents) for parents in header["parents"]),
            tuple(arrays[f"table_{i}"] for i in range(len(header["order"]))),
            float(header["total"]),
        )


@dataclass(frozen=True)
class Mechanisms:
    """The mechanisms of a fit (module docstring): the count's, each pick's (``None`` when ``d == 1``) and
    each marginal's, and the distributions' share ``epsilon_2``."""

    count: Geometric
    pick: Exponential | None
    marginal: Geometric
    distributions: Fraction


def network_mechanisms(epsilon: Number, d: int, sensitivity: int) -> Mechanisms:
    """The mechanisms of steps 0-2 (module docstring) for ``d`` attributes (one attribute: no picks).
    Refused (free) where a share leaves the exact samplers' range."""
    total = as_fraction(epsilon, "epsilon")
    check_positive(total, "epsilon")
    count = Geometric(sensitivity=sensitivity, epsilon=COUNT_SHARE * total)
    rest = (1 - COUNT_SHARE) * total
    if d == 1:
        return Mechanisms(count, None, Geometric(sensitivity=sensitivity, epsilon=rest), rest)
    structure = BETA * rest
    pick = Exponential(utility_sensitivity=SCORE_SENSITIVITY * sensitivity, epsilon=structure / (d - 1))
    distributions = rest - structure
    return Mechanisms(
        count, pick, Geometric(sensitivity=sensitivity, epsilon=distributions / d), distributions
    )


def useful_cells(sizes: tuple[int, ...], count: float, distributions: Fraction, max_cells: int) -> int:
    """The most cells of an attribute with its parents (step 0): ``n epsilon_2 / (d theta)`` for the noisy
    count ``n``, within ``[largest column, max_cells]``."""
    useful = math.floor(max(count, 0.0) * float(distributions) / (len(sizes) * THETA))
    return max(max(sizes), min(max_cells, useful))


def _score(joint: IntMatrix, n: float) -> float:
    """The score R in counts: the joint's L1 distance from the product of its margins over ``n``."""
    flat = joint.reshape(joint.shape[0], -1).astype(float)
    if n <= 0:
        return float(np.abs(flat).sum())
    product = np.outer(flat.sum(axis=1), flat.sum(axis=0)) / n
    return float(np.abs(flat - product).sum())


def _candidates(
    sizes: tuple[int, ...], chosen: list[int], degree: int, max_cells: int
) -> list[tuple[int, tuple[int, ...]]]:
    """Every (attribute not chosen, parent set of chosen attributes) of the largest parent-set size up to
    ``min(degree, len(chosen))`` for which some pair has at most ``max_cells`` cells (public)."""
    left = [a for a in range(len(sizes)) if a not in chosen]
    for size in range(min(degree, len(chosen)), -1, -1):
        found = [
            (a, parents)
            for a in left
            for parents in itertools.combinations(sorted(chosen), size)
            if sizes[a] * math.prod(sizes[p] for p in parents) <= max_cells
        ]
        if found:
            return found
    raise AssertionError("a parent set of size 0 always fits: max_cells is at least every size")


def fit_network(
    cells: IntMatrix,
    counts: NDArray[np.int64],
    sizes: tuple[int, ...],
    epsilon: Number,
    sensitivity: int,
    source: RandomSource,
    *,
    degree: int,
    max_cells: int,
) -> BayesNetwork:
    """Steps 1-3 of the module docstring on ``counts[i]`` records equal to ``cells[i]``, every mechanism
    calibrated to ``sensitivity``; the first attribute is drawn uniformly from ``source`` (independent of the
    data). Part of a release's draw."""
    d = len(sizes)
    mechanisms = network_mechanisms(epsilon, d, sensitivity)
    pick, noise = mechanisms.pick, mechanisms.marginal
    n = float(counts.sum())
    noisy_n = float(mechanisms.count.release(np.array([round(n)]), rng=source)[0])
    cap = useful_cells(sizes, noisy_n, mechanisms.distributions, max_cells)
    chosen = [int(uniform_below(d, 1, source)[0])]
    parents: list[tuple[int, ...]] = [()]
    while len(chosen) < d:
        assert pick is not None
        options = _candidates(sizes, chosen, degree, cap)
        scores = [_score(marginal_counts(cells, counts, sizes, (a, *p)), n) for a, p in options]
        attribute, parent_set = options[pick.release(scores, rng=source)]
        chosen.append(attribute)
        parents.append(parent_set)
    tables, totals = [], []
    for attribute, parent_set in zip(chosen, parents, strict=True):
        exact = marginal_counts(cells, counts, sizes, (*parent_set, attribute))
        noisy = np.asarray(noise.release(exact, rng=source), float)
        totals.append(noisy.sum())
        table = np.clip(noisy.reshape(-1, sizes[attribute]), 0, None)
        mass = table.sum(axis=1, keepdims=True)
        tables.append(np.where(mass > 0, table / np.where(mass > 0, mass, 1), 1 / sizes[attribute]))
    total = max(float(np.mean(totals)), 0.0)
    return BayesNetwork(sizes, tuple(chosen), tuple(parents), tuple(tables), total)


class PrivBayes(Synthesizer):
    """PrivBayes synthetic data (module docstring): ``fit(codes, sizes=)`` charges the ledger ``PureDP
    (epsilon)`` once and stores the fitted :class:`BayesNetwork` as ``model_``; ``sample(n)`` is free.
    ``degree``: the most parents of an attribute; ``max_cells``: the most cells of an attribute with its
    parents (fewer where the noisy count makes fewer useful, step 0). ``ledger``, ``dataset``, ``label``
    and ``random_state`` as in :mod:`kakeibo.ml`."""

    def __init__(
        self,
        epsilon: float = 1.0,
        *,
        degree: int = DEGREE,
        max_cells: int = MAX_CELLS,
        ledger: Ledger | Literal[False] | None = None,
        dataset: str | None = None,
        label: str | None = None,
        random_state: RandomState = None,
    ) -> None:
        self.epsilon = epsilon
        self.degree = degree
        self.max_cells = max_cells
        self.ledger = ledger
        self.dataset = dataset
        self.label = label
        self.random_state = random_state

    def fit(self, codes: ArrayLike, sizes: Sequence[int]) -> PrivBayes:
        """Structure, distributions and model (module docstring) as one :func:`kakeibo.release.run`: checks
        first (free), then the budget check, the draws, the charge."""
        data, domain = check_codes(codes, sizes)
        check_ledger(self.ledger)
        check_count(self.degree, "degree")
        check_count(self.max_cells, "max_cells")
        if max(domain) > self.max_cells:
            raise ArgumentError(
                f"max_cells ({self.max_cells}) must be at least the largest column's size ({max(domain)})."
            )
        epsilon = as_fraction(self.epsilon, "epsilon")
        network_mechanisms(epsilon, len(domain), 1)
        ones = np.ones(len(data), dtype=np.int64)
        settings = {"degree": self.degree, "max_cells": self.max_cells}
        self._charged_fit(
            PureDP(epsilon),
            "PrivBayes",
            lambda source: fit_network(data, ones, domain, epsilon, 1, source, **settings),
        )
        self.sizes_ = domain
        return self
