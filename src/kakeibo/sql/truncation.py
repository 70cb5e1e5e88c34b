"""Automatic truncation: the R2T race over geometrically spaced thresholds (Dong, Fang, Yi, Tao and
Machanavajjhala, "R2T: Instance-optimal Truncation for Differentially Private Query Evaluation with Foreign
Keys", SIGMOD 2022; seed 002, slides 60-62).

A fixed contribution limit biases the answer when it is too low and drowns it in noise when it is too
high, and the right limit depends on data nobody may look at. R2T does not choose: for a statistic whose
per-person contributions are never negative (a count, or a sum of values bounded below by 0), it computes
the answer with every person's total in the group *truncated* at each of the thresholds

    tau_j = M * GS / b^(K - j),  j = 0, 1, ..., K,  with K = floor(log_b GS),

where ``M`` is the most one row adds (1 for a count, the value's upper bound for a sum), ``GS`` the
declared largest number of rows of one person the race need consider (``max_rows_bound``) and ``b`` the
base of the grid (``truncation_base``); a count's thresholds are rounded to whole numbers. The grid hangs
from its top, ``M * GS``, where truncation removes nothing, down to its smallest, in ``[M, M * b)``: that
is one candidate fewer than a grid ``M * b^j`` climbing from ``M`` to the first ``b^K >= GS`` whenever
``GS`` is not a power of ``b`` (its top would lie above ``M * GS``, where it adds noise and no value;
the two grids agree when ``GS`` is a power of ``b``). With ``k = K + 1`` candidates, each gets
``epsilon / k`` and
Laplace noise calibrated to its own sensitivity ``L0 tau_j`` (a person changes at most ``L0`` groups, by at
most ``tau_j`` each), and is shifted down by the noise's error bound at ``beta / k``:

    Q~_j = Q(I, tau_j) + Lap_j - shift_j,   released: max(0, max_j Q~_j)      (R2T, Algorithm 1)

Privacy: each candidate is (epsilon / k)-DP, so the k of them are epsilon-DP by sequential composition;
taking the largest is post-processing, so no candidate's choice costs anything more. Whatever the data,
the race cannot fail or be out of range: every candidate is a bounded sum (each person truncated).

Utility: with probability at least ``1 - beta`` every ``|Lap_j| <= shift_j`` (a union bound over the k
candidates), and then every ``Q~_j <= Q(I, tau_j) <= Q(I)``: the released value *under*-estimates the true,
untruncated answer ``Q(I)``. Since ``Q(I, tau) = Q(I)`` once ``tau`` reaches the largest contribution of
one person, the winning candidate sits near it, and R2T's error is within a factor ``O(log GS
log(log GS / beta))`` of the best any threshold chosen in hindsight could give (the paper's Theorem 5.1).
The released interval is ``[max(0, max_j (Q~_j + shift_j - t_j)), Q~_K + shift_K + t_K]`` with ``t_j`` the
error bound of candidate j at the interval's level: the lower end holds always; the upper end holds when no
person has more than ``GS`` rows in a group, which is what ``max_rows_bound`` declares (truncation at
``tau_K`` then removes nothing).

The paper writes ``b = 2``; its authors' code races ``b = 5.5``. A coarser grid has fewer candidates, so each
gets a larger share of epsilon, but the best one may sit further above the largest contribution (up to a
factor b). :data:`DEFAULT_BASE` = 10 was chosen by measurement (``benchmarks/bench_tpch.py``, TPC-H at scale
factor 1, epsilon 0.8, 11 queries, median relative error over 10 runs each, two runs of the whole
benchmark): its geometric mean error was the lowest of the bases 2, e, 5.5, 10 and 16 at both bounds GS =
10^6 and 10^4 rows, and about 2.1 times lower than the paper's 2 (``benchmarks/RESULTS.md``).

For queries whose join results each belong to one person (every query kakeibo accepts today), the
truncated answer ``Q(I, tau)`` is the sum of per-person totals clipped at ``tau``, computed by the engine in
the same statement as everything else; R2T's linear program, needed when a join result references several
people (self-joins), would replace those truncated sums (``truncated`` of
:class:`~kakeibo.sql.aggregates.StatisticKind`) and nothing else.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

import numpy as np

from ..mechanisms import Geometric, Laplace, Mechanism
from ..noise import RandomSource
from ..privacy import Number

__all__ = ["DEFAULT_BASE", "DEFAULT_BOUND", "Drop", "Ladder", "Race", "make_race"]

#: the base of the geometric grid of thresholds, chosen by measurement (see the module docstring)
DEFAULT_BASE = 10.0
#: the largest number of rows of one person in one group the race considers, unless the catalog says
DEFAULT_BOUND = 1_000_000
#: the least a :class:`Ladder`'s stop may be, in noise scales (see :attr:`Ladder.stop`)
GUARD = 3


@dataclass(frozen=True)
class Race:
    """The R2T race of one statistic: its thresholds, one mechanism per candidate, and ``beta``."""

    taus: tuple[float, ...]
    mechanisms: tuple[Mechanism, ...]
    beta: float

    @property
    def candidates(self) -> int:
        return len(self.taus)

    def shifts(self, beta: float) -> np.ndarray:
        """Each candidate's noise bound at ``beta / k``: all hold together with probability ``1 - beta``."""
        return np.array([m.error_bound(beta / self.candidates) for m in self.mechanisms])

    def release(self, truncated: np.ndarray, source: RandomSource) -> tuple[np.ndarray, np.ndarray]:
        """The released values per group (``truncated`` has one column per candidate, one row per group) and
        the shifted noisy candidates they are the largest of (kept for intervals at other levels)."""
        shifted = np.empty(truncated.shape, dtype=np.float64)
        shifts = self.shifts(self.beta)
        for j, mechanism in enumerate(self.mechanisms):
            column = truncated[:, j]
            if isinstance(mechanism, Laplace):
                bound = mechanism.max_magnitude
                column = np.clip(np.nan_to_num(column.astype(np.float64), nan=0.0), -bound, bound)
            else:
                column = np.asarray(np.rint(np.nan_to_num(column, nan=0.0)), dtype=np.int64)
            noisy = np.asarray(mechanism.release(column, rng=source), dtype=np.float64)
            shifted[:, j] = noisy - shifts[j]
        released = shifted.max(axis=1, initial=0.0)
        if not any(isinstance(m, Laplace) for m in self.mechanisms):  # counts: whole numbers, so is the max
            released = released.astype(np.int64)
        return released, shifted

    def interval(self, shifted: np.ndarray, beta: float) -> tuple[np.ndarray, np.ndarray]:
        """A ``1 - beta`` interval for the untruncated answer per group (see the module docstring)."""
        wide = self.shifts(beta)
        centre = shifted + self.shifts(self.beta)  # each candidate's noisy truncated value
        low = np.maximum((centre - wide).max(axis=1, initial=0.0), 0.0)
        high = centre[:, -1] + wide[-1]
        return low, np.maximum(high, low)

    def describe(self) -> str:
        """The thresholds, noise scales and shifts, for ``explain``."""
        taus = ", ".join(f"{t:.4g}" for t in self.taus)
        scales = ", ".join(f"{getattr(m, 'scale', 0):.4g}" for m in self.mechanisms)
        shifts = ", ".join(f"{s:.4g}" for s in self.shifts(self.beta))
        return (
            f"R2T race over {self.candidates} thresholds tau = {taus}; Laplace scales {scales}; "
            f"shifts {shifts}; "
            f"the released value is at most the untruncated answer with probability >= {1 - self.beta:g}"
        )


def make_race(
    *,
    row_bound: float,
    integer: bool,
    max_rows: int,
    base: float,
    epsilon: Any,
    max_partitions: int,
    beta: float,
    factor: float = 1.0,
) -> Race:
    """The race of a statistic one row adds at most ``row_bound`` to (``integer``: a count), over
    thresholds ``row_bound * max_rows / base^(K - j)`` up to ``row_bound * max_rows`` (see the module
    docstring), at
    ``epsilon`` in all and ``max_partitions`` groups per person; ``factor`` widens each candidate's
    sensitivity (R2T's program releases certified values within a share of ``tau`` of its optimum,
    :data:`~kakeibo.sql.truncation_lp.SENSITIVITY_FACTOR`; a count's candidates then take Laplace noise).

    >>> race = make_race(row_bound=1, integer=True, max_rows=1000, base=10, epsilon=1, max_partitions=1,
    ...                  beta=0.05)
    >>> race.taus, [m.scale for m in race.mechanisms]
    ((1.0, 10.0, 100.0, 1000.0), [4.0, 40.0, 400.0, 4000.0])
    >>> make_race(row_bound=1, integer=True, max_rows=1024, base=10, epsilon=1, max_partitions=1,
    ...           beta=0.05).taus
    (1.0, 10.0, 102.0, 1024.0)
    """
    top = math.floor(math.log(max_rows) / math.log(base) + 1e-12) if max_rows > 1 else 0
    steps = [base ** (top - j) for j in range(top + 1)]
    if integer:
        taus = tuple(dict.fromkeys(float(max(1, round(max_rows / step))) for step in steps))
    else:
        taus = tuple(row_bound * max_rows / step for step in steps)
    share = epsilon / len(taus)
    mechanisms: list[Mechanism] = []
    for tau in taus:
        if integer and factor == 1:
            mechanisms.append(Geometric(sensitivity=int(tau) * max_partitions, epsilon=share))
        else:
            mechanisms.append(
                Laplace(sensitivity=tau * max_partitions * factor, epsilon=share, coordinates=max_partitions)
            )
    return Race(taus, tuple(mechanisms), beta)


@dataclass(frozen=True)
class Ladder:
    """A private choice of one threshold ``tau`` at which each person's total in a group is truncated, near
    the bias-variance optimum of Amin, Kulesza, Munoz Medina and Vassilvitskii ("Bounding User Contributions:
    A Bias-Variance Trade-off in Differential Privacy", ICML 2019).

    For a statistic released over ``G`` groups with Laplace noise of scale ``L0 tau / epsilon_a`` each, the
    expected total error at ``tau`` is ``E(tau) = sum_pairs (t - tau)+ + G L0 tau / epsilon_a`` (the mass
    truncation drops, plus the noise), over the (person, group) pairs with totals ``t``. Its slope is
    ``-N(tau) + G L0 / epsilon_a``, where ``N(tau)`` counts the pairs above ``tau``: the optimum lies where
    ``N`` falls to ``c = G L0 / epsilon_a`` (Amin et al.'s "the contribution of about the (1/epsilon)-th
    heaviest person", summed over the groups). Between consecutive thresholds ``tau_j < tau_{j+1}`` of the
    grid ``taus``, the *soft count* ``d_j = (Q(tau_{j+1}) - Q(tau_j)) / (tau_{j+1} - tau_j)`` (``Q(tau)``:
    the sum of the pairs' totals truncated at ``tau``, computed by the engine) is the average of ``N`` over
    the step, so the choice scans upward and stops at the first step whose soft count falls below ``c``.

    Privacy: the scan is AboveThreshold (Dwork and Roth, "The Algorithmic Foundations of Differential
    Privacy", 2014, Algorithm 1) on the queries ``-d_j`` against the threshold ``-c``, and it releases only
    the index where it stops. Neighbour relation: add or remove one person; they have at most ``L0`` kept
    pairs, each moving every ``d_j`` by at most 1 in the same direction, so the queries have sensitivity
    ``L0`` and are monotonic: the threshold's noise has scale ``L0 / epsilon_1`` and each query's
    ``L0 / epsilon_2`` (Lyu, Su and Li, "Understanding the Sparse Vector Technique for Differential
    Privacy", VLDB 2017, Section 4: monotonic queries need half the general noise), with ``epsilon_1 =
    epsilon_2 = epsilon / 2``; the whole scan is ``epsilon``-DP however many steps it reads. The noise is
    kakeibo's exact Laplace on a grid (:class:`~kakeibo.mechanisms.Laplace`), whose calibration covers the
    rounding of the shifted values, so the proof's change of variables holds step for step.

    Failure mode: the scan stops early (``tau`` too low: more mass dropped, which :class:`Drop` measures)
    when a query's noise is low, and late (``tau`` too high: more noise, which the answer's interval shows)
    when it is high; neither hides anything the release does not report.
    """

    taus: tuple[float, ...]
    threshold: float  # c = G L0 / epsilon_a
    epsilon: Number
    max_partitions: int

    def _mechanism(self) -> Laplace:
        return Laplace(sensitivity=self.max_partitions, epsilon=Fraction(self.epsilon) / 2)

    def soft_counts(self, masses: np.ndarray) -> np.ndarray:
        """The soft counts ``d_j`` of the steps of the grid from the engine's masses between consecutive
        thresholds (``masses[0]`` below the first; :func:`~kakeibo.sql.rewrite.ladder_sql`). Each pair's
        share of a step's mass is summed in the engine before the division, so rounding cannot move a count
        by more than the sum's own rounding: no large total below the step enters it."""
        return masses[1:] / np.diff(np.asarray(self.taus))

    @property
    def stop(self) -> float:
        """The soft count the scan stops below: :attr:`threshold`, but at least :data:`GUARD` noise scales.
        A junk step above the heaviest person (true soft count 0) is passed when the query's noise falls
        below the threshold's noise less the stop, about ``e^-(stop / scale) / 2`` for a typical threshold
        draw; with a stop under one scale (a query over few groups: the threshold is ``G L0 / epsilon_s``,
        the scale ``2 L0 / epsilon_choice``) the scan ran on past five whales, 2 of 8 releases at epsilon 10
        by 2^11 steps, to thresholds whose noise is many times the answer. The guard costs a threshold a
        little lower where it binds, whose drop the :class:`Drop` reports."""
        return max(self.threshold, GUARD * float(self._mechanism().scale))

    def choose(self, masses: np.ndarray, source: RandomSource) -> int:
        """The index into :attr:`taus` of the chosen threshold (see the class docstring): the lower end of
        the first step whose noisy soft count falls below the noisy :attr:`stop`, else the last."""
        mechanism = self._mechanism()
        bound = mechanism.max_magnitude
        noisy_threshold = float(mechanism.release(float(np.clip(-self.stop, -bound, bound)), rng=source))
        for j, count in enumerate(self.soft_counts(masses)):
            query = float(np.clip(-count, -bound, bound))
            if float(mechanism.release(query, rng=source)) >= noisy_threshold:
                return j
        return len(self.taus) - 1

    def describe(self) -> str:
        return (
            f"tau chosen by a sparse-vector scan over {len(self.taus)} thresholds "
            f"({self.taus[0]:.4g} .. {self.taus[-1]:.4g}) for the first step whose count of heavier "
            f"(person, group) pairs falls below {self.stop:.4g}, at epsilon {float(self.epsilon):.4g}"
        )


@dataclass(frozen=True)
class Drop:
    """The mass a truncation at ``taus[0]`` drops, measured in layers: layer ``i`` is ``Q(taus[i + 1]) -
    Q(taus[i])``, the mass of the pairs' totals between the two thresholds (``Q`` as in :class:`Ladder`). A
    pair adds at most the layer's width ``w_i`` to layer ``i``, and at most its share ``1`` of each of the
    ``m`` layers, so Laplace noise of scale ``m L0 w_i / epsilon`` on layer ``i`` makes the layers
    ``epsilon``-DP together (neighbour relation: add or remove one person, at most ``L0`` pairs).

    With every layer's noise within its error bound at ``beta / m`` (probability ``1 - beta``), every prefix
    of layers is within the sum of their bounds: the dropped mass is at least the best prefix's lower end
    (always: the layers below the top only undercount it) and at most the sum of all layers' upper ends
    *when no pair's total exceeds the top threshold*, the largest contribution the catalog declares or the
    grid's top; past it the upper end is unknown (infinite)."""

    taus: tuple[float, ...]
    epsilon: Number
    max_partitions: int

    def mechanisms(self) -> list[Laplace]:
        m = len(self.taus) - 1
        return [
            Laplace(sensitivity=m * self.max_partitions * (high - low), epsilon=self.epsilon)
            for low, high in zip(self.taus, self.taus[1:], strict=False)
        ]

    def release(self, layers: np.ndarray, source: RandomSource) -> np.ndarray:
        """The noisy layers from their masses (layer 0: the kept mass, ``Q(taus[1])``)."""
        out = np.empty(len(layers))
        for i, mechanism in enumerate(self.mechanisms()):
            bound = mechanism.max_magnitude
            out[i] = float(mechanism.release(float(np.clip(layers[i], -bound, bound)), rng=source))
        return out

    def shares(self, noisy: np.ndarray, beta: float) -> tuple[float, float, float, float]:
        """From the noisy layers of thresholds ``(0, tau, ...)`` (layer 0: the kept mass ``Q(tau)``; the
        rest: the dropped mass in layers): the ``1 - beta`` interval of the share of the mass the truncation
        at ``tau`` drops (see the class docstring; the share ``D / (K + D)`` grows with the dropped mass
        ``D`` and falls with the kept ``K``, so its ends come from theirs), and the least and the most
        dropped mass the interval allows (the most: when no pair's total exceeds the top threshold). At the
        threshold a :class:`Ladder` chooses, the dropped mass is about the answer's noise (the optimum
        balances them), which a measurement at a small share of epsilon cannot resolve: its interval is then
        wide, and only a drop well above the noise moves its lower end."""
        bounds = np.array([m.error_bound(beta / len(noisy)) for m in self.mechanisms()])
        kept, kept_bound = float(noisy[0]), float(bounds[0])
        layers, errors = noisy[1:], bounds[1:]
        low = max(0.0, float(np.cumsum(layers - errors).max(initial=0.0)))
        high = max(low, float(np.sum(layers + errors)))
        kept_low, kept_high = max(kept - kept_bound, 0.0), max(kept + kept_bound, 0.0)
        share_low = low / (kept_high + low) if kept_high + low > 0 else 0.0
        share_high = high / (kept_low + high) if kept_low + high > 0 else 1.0
        return share_low, share_high, low, high
