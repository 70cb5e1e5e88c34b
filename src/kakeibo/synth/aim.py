"""AIM: workload-adaptive synthetic data (McKenna, Mullins, Sheldon and Miklau, "AIM: An adaptive and
iterative mechanism for differentially private synthetic data", VLDB 2022, Alg. 2), charged to a ledger once
per fit; inference by :mod:`kakeibo.synth.pgm` (kakeibo's Private-PGM).

**Data** as for :class:`~kakeibo.synth.MST`: integer codes with public sizes, or weighted cells
(:func:`fit_aim`, how ``Session.synthesize`` passes the engine's count tensor).

**Workload.** Marginal queries ``W`` with weights ``c_s`` (default: every ``degree``-way marginal, weight
1). The candidates are every non-empty subset of a workload clique, each with weight ``w_r = sum_s c_s |r
cap s|`` (the paper's Sec. 4.2).

**The algorithm** at ``rho``-zCDP (:func:`~kakeibo.synth.mst.rho_for`), all shares exact rationals, ``T = 16
d`` and ``alpha = 9/10``:

1. every 1-way marginal with discrete Gaussian noise at ``alpha rho / T`` each; fit the model;
2. while budget is left, one round: if at most twice a round's cost is left, this round spends all of it
   (``alpha`` of it on the measurement, the rest on the pick). Of the candidates whose junction tree, with the
   cliques measured so far, has at most ``(rho spent, this round included) / rho x max_cells`` cells, the
   exponential mechanism (kakeibo's permute-and-flip, pure ``e``-DP hence ``e^2 / 2``-zCDP; the paper's
   Gumbel-max bound ``e^2 / 8`` is not shown for permute-and-flip, so each pick gets ``e = sqrt(2 s)`` for
   its share ``s``) picks ``r`` with utility ``w_r (||M_r(D) - M_r(p)||_1 - sqrt(2 / pi) sigma n_r)``:
   where the model ``p`` is worst, less the error the measurement's own noise would leave (``n_r`` cells of
   noise ``sigma``). ``r``'s marginal is measured with discrete Gaussian noise and the model refitted,
   warm-started. When the refit moved ``r``'s marginal by at most ``sqrt(2 / pi) sigma n_r`` in L1, the
   measurement told little: the next rounds' shares are multiplied by 4 (``sigma`` halved, ``e`` doubled);
3. the final model is refitted with ``final_iterations`` (more than a round's ``iterations``).

**Neighbour relation**: add or remove one record (the estimator), or one person with at most ``k`` records
(``fit_aim(sensitivity=k)``). **Sensitivities**: ``k`` records change each marginal by at most ``k`` in L2
and in L1, so each utility by at most ``k w_r``; the measurements are calibrated to ``k`` and the picks to
``k max_r w_r``. Shares are spent only while they fit in ``rho`` and the last round spends exactly what is
left, so the fit composes to exactly ``rho``-zCDP whatever the data (adaptive composition of zCDP: each
round's mechanisms are chosen from earlier outputs only). The charge is
:func:`~kakeibo.synth.mst.concentrated_loss`.

**Timing.** The number of rounds, the candidates' sizes and the refits depend on released outputs only; the
exact marginals are counted once, in time that grows with the number of records (of distinct cells),
treated as public as for MST.

**Size.** Only candidates of at most ``max_cells`` cells are counted (no larger one can be picked), and the
number of candidates is capped (:data:`MAX_CANDIDATES`); larger workloads are refused before any charge.

>>> import numpy as np
>>> rng = np.random.default_rng(0)
>>> a = rng.integers(0, 3, 2000)
>>> codes = np.column_stack([a, (a + (rng.random(2000) < 0.1)) % 3, rng.integers(0, 2, 2000)])
>>> model = AIM(8.0, 1e-6, ledger=False, random_state=0).fit(codes, sizes=(3, 3, 2))
>>> model.sample(5, random_state=1).shape
(5, 3)
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from fractions import Fraction
from typing import Literal

import numpy as np
from numpy.typing import ArrayLike, NDArray

from ..accounting import Ledger
from ..accounting.curves import MechanismLoss
from ..errors import ArgumentError
from ..mechanisms import DiscreteGaussian, Exponential
from ..ml import RandomState, check_count, check_ledger
from ..noise import RandomSource
from ..privacy import Number
from .base import Synthesizer
from .mst import check_codes, concentrated_loss, marginal_counts
from .pgm import GraphicalModel, Measurement, estimate, model_cells

__all__ = [
    "AIM",
    "DEGREE",
    "FINAL_ITERATIONS",
    "ITERATIONS",
    "MAX_CANDIDATES",
    "MAX_CELLS",
    "Workload",
    "aim_loss",
    "fit_aim",
    "workload",
]

Clique = tuple[int, ...]
IntMatrix = NDArray[np.int64]

#: the share of each round's budget spent on its measurement (the rest on its pick)
ALPHA = Fraction(9, 10)
#: the most candidate marginals a fit considers
MAX_CANDIDATES = 20_000
#: the largest model (junction-tree cells) allowed for ``max_cells``
MAX_MODEL_CELLS = 2**24
#: the defaults of :class:`AIM` (and of ``Session.synthesize(method="aim")``): the workload's degree, the
#: model's most cells (2 MiB of doubles; the paper's 80 MB made magic at epsilon 10 take 227 s on 2 cores,
#: 2^18 cells 59 s at the same distances, ``benchmarks/RESULTS.md``), mirror-descent steps per round and at
#: the end
DEGREE, MAX_CELLS, ITERATIONS, FINAL_ITERATIONS = 2, 2**18, 100, 1000


@dataclass(frozen=True)
class Workload:
    """The candidates (sorted cliques of at most ``max_cells`` cells) and their weights ``w_r`` (module
    docstring, Workload)."""

    candidates: tuple[Clique, ...]
    weights: tuple[float, ...]

    @property
    def sensitivity(self) -> float:
        """The largest weight: the picks' utilities move by at most this per record."""
        return max(self.weights)


def workload(
    sizes: Sequence[int],
    queries: Sequence[Sequence[int]] | Mapping[tuple[int, ...], float] | None,
    degree: int,
    max_cells: int,
) -> Workload:
    """The checked candidates and weights of ``queries`` (cliques, or cliques to weights; ``None``: every
    ``degree``-way marginal at weight 1) over ``sizes``, keeping the candidates of at most ``max_cells``
    cells. Refusals are free (they read public arguments only)."""
    d = len(sizes)
    check_count(degree, "degree")
    check_count(max_cells, "max_cells")
    if max_cells > MAX_MODEL_CELLS:
        raise ArgumentError(f"max_cells must be at most {MAX_MODEL_CELLS}, got {max_cells}.")
    if queries is None:
        if math.comb(d, min(degree, d)) > MAX_CANDIDATES:
            raise ArgumentError(
                f"every {degree}-way marginal of {d} columns is more than the {MAX_CANDIDATES} marginals a "
                "fit considers; lower degree or pass a workload."
            )
        queries = {c: 1.0 for c in itertools.combinations(range(d), min(degree, d))}
    elif not isinstance(queries, Mapping):
        queries = {tuple(q): 1.0 for q in queries}
    weights: dict[Clique, float] = {}
    for query, weight in queries.items():
        clique = tuple(sorted({int(a) for a in query}))
        if not clique or len(clique) != len(tuple(query)) or clique[0] < 0 or clique[-1] >= d:
            raise ArgumentError(
                f"each workload marginal must name distinct columns in [0, {d}), got {tuple(query)}."
            )
        if not (isinstance(weight, int | float) and math.isfinite(weight) and weight > 0):
            raise ArgumentError(f"each workload weight must be a positive finite number, got {weight!r}.")
        weights[clique] = weights.get(clique, 0.0) + float(weight)
    subsets = {s for c in weights for k in range(1, len(c) + 1) for s in itertools.combinations(c, k)}
    if len(subsets) > MAX_CANDIDATES:
        raise ArgumentError(
            f"the workload has {len(subsets)} candidate marginals, more than the {MAX_CANDIDATES} a fit "
            "considers; pass fewer or smaller marginals."
        )
    kept = sorted(r for r in subsets if math.prod(sizes[a] for a in r) <= max_cells)
    if not kept:
        raise ArgumentError(f"no marginal of the workload has at most max_cells ({max_cells}) cells.")
    score = [sum(w * len(set(r) & set(c)) for c, w in weights.items()) for r in kept]
    return Workload(tuple(kept), tuple(score))


def aim_loss(
    epsilon: Number, delta: Number, d: int, plan: Workload, sensitivity: int
) -> tuple[Fraction, MechanismLoss]:
    """``(rho, the charge)`` of a fit over ``d`` attributes (:func:`~kakeibo.synth.mst.concentrated_loss`),
    refused where the first round's mechanisms, the smallest of the fit, leave kakeibo's range."""
    return concentrated_loss(epsilon, delta, lambda rho: _round(*_first_shares(rho, d), plan, sensitivity))


def _first_shares(rho: Fraction, d: int) -> tuple[Fraction, Fraction]:
    """``(measurement, pick)`` zCDP of a round before any annealing: ``alpha rho / T`` and ``(1 - alpha) rho
    / T`` with ``T = 16 d``."""
    rounds = 16 * d
    return ALPHA * rho / rounds, (1 - ALPHA) * rho / rounds


def _round(
    measure: Fraction, pick: Fraction, plan: Workload, sensitivity: int
) -> tuple[DiscreteGaussian, Exponential]:
    """A round's mechanisms: the measurement at ``measure``-zCDP, the pick ``e``-DP, ``e^2 / 2 < pick``."""
    epsilon = math.sqrt(2 * float(pick)) * (1 - 1e-12)
    return (
        DiscreteGaussian(sensitivity=sensitivity, rho=measure),
        Exponential(utility_sensitivity=sensitivity * plan.sensitivity, epsilon=epsilon),
    )


def fit_aim(
    cells: IntMatrix,
    counts: NDArray[np.int64],
    sizes: tuple[int, ...],
    rho: Fraction,
    sensitivity: int,
    plan: Workload,
    source: RandomSource,
    *,
    max_cells: int,
    iterations: int,
    final_iterations: int,
) -> GraphicalModel:
    """Measure and fit (module docstring, steps 1-3) the model of ``counts[i]`` records equal to ``cells[i]``,
    every mechanism calibrated to ``sensitivity``; part of a release's draw."""
    d = len(sizes)
    exact = {r: marginal_counts(cells, counts, sizes, r) for r in plan.candidates}
    for a in range(d):
        exact.setdefault((a,), marginal_counts(cells, counts, sizes, (a,)))
    measure, pick = _first_shares(rho, d)
    one_way = DiscreteGaussian(sensitivity=sensitivity, rho=measure)
    sigma = math.sqrt(one_way.sigma2)
    measured = [
        Measurement((a,), np.asarray(one_way.release(exact[(a,)], rng=source), float), sigma)
        for a in range(d)
    ]
    spent = d * measure
    model = estimate(sizes, measured, iterations)
    while spent < rho:
        if rho - spent <= 2 * (measure + pick):
            measure, pick = ALPHA * (rho - spent), (1 - ALPHA) * (rho - spent)
        spent += measure + pick
        measurement, selection = _round(measure, pick, plan, sensitivity)
        sigma = math.sqrt(measurement.sigma2)
        limit = spent / rho * max_cells
        cliques = [m.clique for m in measured]
        size = model_cells(sizes, cliques)
        options = [
            (r, w)
            for r, w in zip(plan.candidates, plan.weights, strict=True)
            if (model.tree.holding(r) is not None and size <= limit)
            or model_cells(sizes, [*cliques, r]) <= limit
        ]
        if not options:  # the measured cliques' own tree always fits, so this holds only past the cap
            options = [
                (r, w)
                for r, w in zip(plan.candidates, plan.weights, strict=True)
                if model.tree.holding(r) is not None
            ]
        bias = math.sqrt(2 / math.pi) * sigma
        utilities = [
            w * (float(np.abs(exact[r] - model.total * model.project(r)).sum()) - bias * exact[r].size)
            for r, w in options
        ]
        chosen = options[selection.release(utilities, rng=source)][0]
        before = model.total * model.project(chosen)
        measured.append(
            Measurement(chosen, np.asarray(measurement.release(exact[chosen], rng=source), float), sigma)
        )
        model = estimate(sizes, measured, iterations, warm=model)
        if float(np.abs(model.total * model.project(chosen) - before).sum()) <= bias * before.size:
            measure, pick = 4 * measure, 4 * pick
    return estimate(sizes, measured, final_iterations, warm=model)


class AIM(Synthesizer):
    """AIM synthetic data (module docstring): ``fit(codes, sizes=)`` charges the ledger once and stores the
    fitted :class:`~kakeibo.synth.pgm.GraphicalModel` as ``model_``; ``sample(n)`` is free.

    ``workload``: cliques of column indices (or cliques to weights); ``None`` is every ``degree``-way
    marginal. ``max_cells``: the model's largest size (junction-tree cells). ``iterations`` and
    ``final_iterations``: mirror-descent steps per round and for the final model. ``ledger``, ``dataset``,
    ``label`` and ``random_state`` as in :mod:`kakeibo.ml`."""

    def __init__(
        self,
        epsilon: float = 1.0,
        delta: float = 1e-6,
        *,
        workload: Sequence[Sequence[int]] | Mapping[tuple[int, ...], float] | None = None,
        degree: int = DEGREE,
        max_cells: int = MAX_CELLS,
        iterations: int = ITERATIONS,
        final_iterations: int = FINAL_ITERATIONS,
        ledger: Ledger | Literal[False] | None = None,
        dataset: str | None = None,
        label: str | None = None,
        random_state: RandomState = None,
    ) -> None:
        self.epsilon = epsilon
        self.delta = delta
        self.workload = workload
        self.degree = degree
        self.max_cells = max_cells
        self.iterations = iterations
        self.final_iterations = final_iterations
        self.ledger = ledger
        self.dataset = dataset
        self.label = label
        self.random_state = random_state

    def fit(self, codes: ArrayLike, sizes: Sequence[int]) -> AIM:
        """Measure, select and fit (module docstring) as one :func:`kakeibo.release.run`: checks first
        (free), then the budget check, the rounds, the charge."""
        data, domain = check_codes(codes, sizes)
        check_ledger(self.ledger)
        check_count(self.iterations, "iterations")
        check_count(self.final_iterations, "final_iterations")
        plan = workload(domain, self.workload, self.degree, self.max_cells)
        rho, loss = aim_loss(self.epsilon, self.delta, len(domain), plan, 1)
        ones = np.ones(len(data), dtype=np.int64)
        self._charged_fit(
            loss,
            "AIM",
            lambda source: fit_aim(
                data,
                ones,
                domain,
                rho,
                1,
                plan,
                source,
                max_cells=self.max_cells,
                iterations=self.iterations,
                final_iterations=self.final_iterations,
            ),
        )
        self.sizes_, self.rho_ = domain, rho
        return self
