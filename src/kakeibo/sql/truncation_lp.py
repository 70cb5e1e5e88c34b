"""R2T's linear program: the truncated answer when one join result references several persons.

Dong, Fang, Yi, Tao and Machanavajjhala, "R2T: Instance-optimal Truncation for Differentially Private Query
Evaluation with Foreign Keys", SIGMOD 2022, Section 5 (seed 002, slides 91-93). When every join result
belongs to one person, truncating each person's total at ``tau`` is a stable answer
(:mod:`kakeibo.sql.truncation`). A result of a self-join (a transfer between two customers, a triangle of
friends) references several persons, and clipping one person's total changes another's: a fixed ``tau``
has unbounded bias on one neighbour. R2T's truncated answer is instead the value of the linear program

    Q(I, tau) = max sum_q u_q   subject to   0 <= u_q <= psi(q)            for each join result q,
                                             sum_{q references t} u_q <= tau  for each person t,

with ``psi(q) >= 0`` the result's weight (1 for a count). Under person-level neighbours (a person and every
join result that references them), its sensitivity is ``tau``: the optimum for the larger instance,
restricted to the smaller one's results, loses at most the new person's constraint ``tau``, and the smaller
one's optimum stays feasible for the larger one. ``Q(I, tau) <= Q(I)``, with equality once ``tau`` reaches
the largest per-person total ``max_t sum_{q references t} psi(q)``.

**Exactness.** A solver returns a floating-point point, not the optimum. kakeibo releases a *certified*
value: the solver's point repaired into the feasible region (clipped into the boxes, each over-full person's
results scaled down), whose value ``L`` is a lower bound, and the dual bound ``U`` from the solver's row
duals ``y >= 0`` with ``z_q = max(0, 1 - sum_{t in q} y_t)`` (always dual feasible, so ``U >= Q(I, tau)``).
When ``U - L <= TOLERANCE * tau``, ``L`` lies within ``TOLERANCE * tau`` below the optimum, so the released
function's sensitivity is at most ``(1 + 2 TOLERANCE) tau`` (:data:`SENSITIVITY_FACTOR`), which is what
the race's noise is calibrated to. A point not certified is solved again with tighter tolerances; still not
certified, it is an error inside the draw (charged, a fixed sentence), never a value with a broken bound.
The released function moves by at most ``tau + TOLERANCE * tau`` between neighbours, so the factor's second
``TOLERANCE`` is slack, which covers the rounding of the float sums ``L`` and ``U``: NumPy's pairwise sums of
``m`` terms are off by at most about ``log2(m) 2^-53 sum psi``, and ``sum psi <= m tau`` (every weight is at
most the row bound, the least threshold), which stays below ``TOLERANCE * tau`` up to ``m = 10^8`` results.

**Two persons per result.** When no result references three persons and the weights and ``tau`` are whole
(counts: an edge, a transfer, a line item of a customer and a supplier), the program is a fractional
b-matching, solved exactly as a maximum flow in integers (:func:`_flow`): no tolerance, no solver point.

**One person per result.** When no result references two persons, the optimum clips each person's total
at ``tau`` and keeps every result of no person (the self-join-free case, R2T Section 4); no program is
solved.

**Size.** A person whose total is at most ``tau`` cannot bind, and a result all of whose persons are such
persons takes ``u_q = psi(q)`` in an optimum; so the program is solved over the results that reference a
person above ``tau`` and the rows of those persons only, and not at all once ``tau`` reaches the largest
total. One program serves every threshold solved: its rows are the persons above the least of them, and
the columns one threshold's column generation activated start the next one's. (A persistent HiGHS model
warm-started across solves was measured slower, ``benchmarks/RESULTS.md``.)
"""

from __future__ import annotations

import math
import os
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from typing import cast

import highspy
import numpy as np
from numpy.typing import ArrayLike, NDArray
from scipy.sparse import csr_array
from scipy.sparse.csgraph import breadth_first_order, maximum_flow

from ..errors import ArgumentError, Error
from ..mechanisms import Laplace
from ..noise import RandomSource
from ..privacy import Number
from .truncation import Race, make_race

__all__ = [
    "SENSITIVITY_FACTOR",
    "TOLERANCE",
    "Certificate",
    "Incidence",
    "NotCertified",
    "certificates",
    "program_race",
    "race_release",
    "truncated_values",
    "upper_bounds",
]

FloatArray = NDArray[np.float64]
IntArray = NDArray[np.int64]

#: the largest gap, relative to tau, between a released value and the program's optimum
TOLERANCE = 1e-6
#: the sensitivity of a certified value, relative to tau (see the module docstring)
SENSITIVITY_FACTOR = 1 + 2 * TOLERANCE
#: repair margin: an over-full person's results are scaled to this share of tau, so that rounding in the
#: sums cannot leave them above it
_MARGIN = 1 - 1e-12
#: column generation: the most rounds, the least columns a round adds, and the reduced cost that prices
#: a column in
_ROUNDS = 60
_BATCH = 20_000
_PRICING = 1e-9
#: an active set of more columns is solved by HiGHS's interior point method without crossover, whose point
#: and duals the certificate reads as it reads a vertex's: on ego-Facebook's triangles at tau = 1,000
#: (1,523,845 columns, 910 rows) dual simplex left a gap of 16,500 after 600 s, the interior point method
#: certified a gap of 1.3e-5 in 159 s (benchmarks/RESULTS.md)
_INTERIOR = 200_000


class NotCertified(Error):  # noqa: N818 -- the name reads as the event it reports
    """The solver's point could not be certified within :data:`TOLERANCE` (raised inside a draw only)."""


@dataclass(frozen=True)
class Incidence:
    """Join results and the persons each references: ``weights[q] = psi(q)`` per result, and one
    ``(results[i], persons[i])`` pair per reference (each pair once; persons numbered ``0 .. n_persons -
    1``)."""

    weights: FloatArray
    results: IntArray
    persons: IntArray
    n_persons: int

    @classmethod
    def from_columns(cls, person_columns: Sequence[ArrayLike], weights: ArrayLike | None = None) -> Incidence:
        """The incidence of results whose persons are ``person_columns[c][q]`` (one column per reference;
        any comparable values), weighted ``weights`` (default 1)."""
        columns = [np.asarray(c) for c in person_columns]
        if not columns:
            raise ArgumentError("a join result references at least one person")
        m = len(columns[0])
        if any(len(c) != m for c in columns):
            raise ArgumentError("every person column has one entry per join result")
        names, persons = np.unique(np.concatenate(columns), return_inverse=True)
        codes = [np.asarray(c, dtype=np.int64) for c in np.split(persons.reshape(-1), len(columns))]
        return cls.from_codes(codes, len(names), weights)

    @classmethod
    def from_codes(
        cls, person_codes: Sequence[IntArray], n_persons: int, weights: ArrayLike | None = None
    ) -> Incidence:
        """The incidence of results whose persons are numbered ``person_codes[c][q]`` in ``0 .. n_persons -
        1`` (one column per reference; a person named twice by one result is one reference), weighted
        ``weights`` (default 1)."""
        m = len(person_codes[0]) if person_codes else 0
        psi = np.ones(m) if weights is None else np.asarray(weights, dtype=np.float64)
        if psi.shape != (m,) or not bool(np.all(np.isfinite(psi) & (psi >= 0))):
            raise ArgumentError("weights are finite, at least 0, one per join result")
        codes = [np.asarray(c, dtype=np.int64) for c in person_codes]
        keep = [np.ones(m, dtype=bool)]
        for i in range(1, len(codes)):  # a person an earlier column of the same result names already
            keep.append(np.all([codes[i] != codes[k] for k in range(i)], axis=0))
        results = np.tile(np.arange(m, dtype=np.int64), len(codes))
        repeat = np.concatenate(keep) if codes else np.zeros(0, dtype=bool)
        persons = np.concatenate(codes) if codes else np.zeros(0, dtype=np.int64)
        return cls(psi, results[repeat], persons[repeat], n_persons)

    def restricted(self, keep: NDArray[np.bool_]) -> Incidence:
        """The incidence of the results ``keep`` marks (renumbered in order), over the same persons."""
        number = np.cumsum(keep) - 1
        pairs = keep[self.results]
        return Incidence(self.weights[keep], number[self.results[pairs]], self.persons[pairs], self.n_persons)

    def split(self, labels: IntArray, n: int) -> list[Incidence]:
        """``[restricted(labels == g) for g in range(n)]`` (``labels`` in ``0 .. n - 1``, one per result), in
        one pass over the results instead of ``n``."""
        counts = np.bincount(labels, minlength=n)
        order = np.argsort(labels, kind="stable")
        number = np.empty(self.size, dtype=np.int64)
        number[order] = np.arange(self.size) - np.repeat(np.cumsum(counts) - counts, counts)
        pair_labels = labels[self.results]
        pairs = np.argsort(pair_labels, kind="stable")
        cuts, pair_cuts = np.cumsum(counts)[:-1], np.cumsum(np.bincount(pair_labels, minlength=n))[:-1]
        weights = np.split(self.weights[order], cuts)
        results = np.split(number[self.results[pairs]], pair_cuts)
        persons = np.split(self.persons[pairs], pair_cuts)
        return [Incidence(w, r, p, self.n_persons) for w, r, p in zip(weights, results, persons, strict=True)]

    @property
    def size(self) -> int:
        """The number of join results."""
        return len(self.weights)

    def totals(self) -> FloatArray:
        """Each person's total ``sum_{q references t} psi(q)``."""
        return np.asarray(
            np.bincount(self.persons, weights=self.weights[self.results], minlength=self.n_persons),
            dtype=np.float64,
        )


@dataclass(frozen=True)
class Certificate:
    """A certified solve of ``Q(I, tau)``: the released ``value`` (feasible, within ``TOLERANCE * tau`` below
    the optimum), the dual ``bound`` ``U = tau sum_t y_t + sum_q psi_q (1 - sum_{t in q} y_t)^+ >= Q(I,
    tau)``, and its ``slope`` ``sum_t y_t``. The same ``y`` is dual feasible at every threshold, so ``Q(I, t)
    <= U - (tau - t) * slope`` for every ``t <= tau`` (:meth:`cap`): a bound on the smaller thresholds'
    programs at no cost, which R2T's early stop reads (:func:`race_release`)."""

    tau: float
    value: float
    bound: float
    slope: float

    def cap(self, tau: float) -> float:
        """The bound this certificate's duals give on ``Q(I, tau)``, for ``tau`` up to its own."""
        return self.bound - (self.tau - tau) * self.slope


def truncated_values(incidence: Incidence, taus: Sequence[float]) -> FloatArray:
    """Certified values of ``Q(I, tau)`` for each threshold (module docstring), each within
    ``TOLERANCE * tau`` below the optimum and feasible.

    >>> triangle = Incidence.from_columns([[0, 0, 1], [1, 2, 2]])  # three edges of a triangle
    >>> [round(float(v), 6) for v in truncated_values(triangle, [0.5, 1, 2])]
    [0.75, 1.5, 3.0]
    """
    return np.array([c.value for c in certificates(incidence, taus)], dtype=np.float64)


def certificates(incidence: Incidence, taus: Sequence[float]) -> list[Certificate]:
    """The :class:`Certificate` of each threshold's program."""
    totals = incidence.totals()
    largest = float(totals.max(initial=0.0))
    plain = float(incidence.weights.sum())
    if np.bincount(incidence.results, minlength=incidence.size).max(initial=0) <= 1:
        # one person per result at most: the optimum clips each person's total (R2T, Section 4); the duals
        # are 1 on the persons above tau
        alone = np.ones(incidence.size, dtype=bool)
        alone[incidence.results] = False
        rest = float(incidence.weights[alone].sum())  # the results of no person
        clipped = [rest + float(np.minimum(totals, tau).sum()) for tau in taus]
        return [
            Certificate(float(tau), value, value, float(np.sum(totals > tau)))
            for tau, value in zip(taus, clipped, strict=True)
        ]
    needed = [tau for tau in taus if tau < largest]
    if needed and _flows(incidence, needed):
        return [
            Certificate(float(tau), plain, plain, 0.0) if tau >= largest else _flow(incidence, totals, tau)
            for tau in taus
        ]
    program = _Program(incidence, totals, min(needed)) if needed else None
    return [
        Certificate(float(tau), plain, plain, 0.0)
        if program is None or tau >= largest
        else program.certificate(float(tau))
        for tau in taus
    ]


def _flows(incidence: Incidence, taus: Sequence[float]) -> bool:
    """Whether the programs at ``taus`` are maximum flows (:func:`_flow`): at most two persons per result,
    whole weights and thresholds, and every capacity and the flow's value within 32-bit integers (what
    SciPy's maximum flow takes)."""
    weights = incidence.weights
    return bool(
        np.bincount(incidence.results, minlength=incidence.size).max(initial=0) <= 2
        and np.all(weights == np.floor(weights))
        and all(float(tau) == math.floor(tau) for tau in taus)
        and 2 * float(weights.sum()) < 2**31 - 1
    )


def _flow(incidence: Incidence, totals: FloatArray, tau: float) -> Certificate:
    """``Q(I, tau)`` exactly, when each result references at most two persons and the weights and ``tau``
    are whole (:func:`_flows`): the program is then a fractional b-matching, and its optimum is half the
    maximum flow of its bipartite double cover (each person ``t`` a left node ``L_t`` fed by the source at
    capacity ``tau`` and a right node ``R_t`` draining to the sink at ``tau``; a result of persons ``a, b``
    the arcs ``L_a -> R_b`` and ``L_b -> R_a`` at ``psi``; a result of one person ``a`` the arcs ``L_a ->
    sink`` and ``source -> R_a``). A program point ``u`` gives the flow ``u`` on both arcs of each result, of
    value ``2 sum u``; a flow gives ``u_q`` = the mean of its two arcs, feasible, of value half the flow's.
    With whole capacities the maximum flow is computed exactly in integers (SciPy's Dinic), so the value is
    the optimum itself, no tolerance. As in :class:`_Program`, only the persons above ``tau`` have rows;
    the rest of the results keep ``psi``. The duals ``y_t`` (half for each side of ``t`` the minimum cut
    separates from the source) give the certificate's bound and slope, computed by the same formula as a
    program's."""
    heavy = totals > tau
    reaches = np.zeros(incidence.size, dtype=bool)
    reaches[incidence.results[heavy[incidence.persons]]] = True
    fixed = float(incidence.weights[~reaches].sum())
    rows = np.flatnonzero(heavy)
    row_of = np.full(incidence.n_persons, -1, dtype=np.int64)
    row_of[rows] = np.arange(len(rows))
    keep = reaches[incidence.results] & heavy[incidence.persons]
    result, row = incidence.results[keep], row_of[incidence.persons[keep]]
    order = np.argsort(result, kind="stable")
    result, row = result[order], row[order]
    first = np.r_[True, result[1:] != result[:-1]] if len(result) else np.zeros(0, dtype=bool)
    paired = np.r_[~first[1:], False] if len(result) else first  # the first of a result's two rows
    n = len(rows)
    source, sink = 2 * n, 2 * n + 1
    a, b = row[paired], row[np.flatnonzero(paired) + 1]
    single = first & ~paired
    alone = row[single]
    psi_pair = incidence.weights[result[paired]]
    psi_one = incidence.weights[result[single]]
    tails = np.concatenate([a, b, alone, np.full(len(alone), source), np.full(n, source), n + np.arange(n)])
    heads = np.concatenate(
        [n + b, n + a, np.full(len(alone), sink), n + alone, np.arange(n), np.full(n, sink)]
    )
    caps = np.concatenate([psi_pair, psi_pair, psi_one, psi_one, np.full(2 * n, tau)])
    graph = csr_array((caps.astype(np.int32), (tails, heads)), shape=(2 * n + 2, 2 * n + 2))
    graph.sum_duplicates()
    found = maximum_flow(graph, source, sink, method="dinic")
    value = fixed + found.flow_value / 2
    residual = (graph - found.flow).tocsr()
    residual.data = (residual.data > 0).astype(np.int8)
    residual.eliminate_zeros()
    reached = np.zeros(2 * n + 2, dtype=bool)
    reached[breadth_first_order(residual, source, directed=True, return_predecessors=False)] = True
    y = np.zeros(incidence.n_persons)
    y[rows] = ((~reached[:n]).astype(np.float64) + reached[n : 2 * n]) / 2
    covered = np.bincount(incidence.results, weights=y[incidence.persons], minlength=incidence.size)
    bound = tau * float(y.sum()) + float((incidence.weights * np.maximum(0.0, 1.0 - covered)).sum())
    return Certificate(float(tau), value, max(bound, value), float(y.sum()))


def upper_bounds(incidence: Incidence, taus: Sequence[float]) -> FloatArray:
    """Bounds ``Q(I, tau) <= min(sum psi, sum_t min(T_t, tau) / c)`` with ``T_t`` each person's total and
    ``c`` the fewest persons one result references: each result's ``u_q`` counts in the load of each of its
    ``c_q >= c`` persons, and a load is at most ``min(T_t, tau)``. Cheap: no program is solved."""
    totals = incidence.totals()
    if incidence.size == 0:
        return np.zeros(len(taus))
    fewest = int(np.bincount(incidence.results, minlength=incidence.size).min())
    plain = float(incidence.weights.sum())
    return np.array([min(plain, float(np.minimum(totals, tau).sum()) / max(fewest, 1)) for tau in taus])


def program_race(
    row_bound: float, max_rows: int, base: float, epsilon: Number, beta: float, *, integer: bool
) -> Race:
    """R2T's race over the program's values: thresholds ``GS / base^(K - j)`` up to ``GS = row_bound *
    max_rows`` (:func:`~kakeibo.sql.truncation.make_race`; whole numbers when ``integer``, the weights of a
    count, so that its programs are maximum flows, :func:`certificates`), each candidate ``(epsilon /
    k)``-DP with Laplace noise of sensitivity ``SENSITIVITY_FACTOR * tau_j`` (the certified value's, module
    docstring)."""
    return make_race(
        row_bound=row_bound,
        integer=integer,
        max_rows=max_rows,
        base=base,
        epsilon=epsilon,
        max_partitions=1,
        beta=beta,
        factor=SENSITIVITY_FACTOR,
    )


def race_release(race: Race, incidence: Incidence, source: RandomSource) -> tuple[float, float]:
    """The race's release over the programs of ``incidence`` and the upper end of its ``1 - beta``
    interval, solving only the programs that can matter (R2T's early stop).

    Every candidate's noise is drawn first, in the order :meth:`Race.release` draws it
    (:meth:`~kakeibo.mechanisms.Laplace.deferred`). From the largest threshold down, a candidate is released
    at an upper bound of its program: the least of :func:`upper_bounds` and of the caps of the certificates
    of the larger thresholds solved (:meth:`Certificate.cap`, their duals' bound, which also bounds the
    value at a larger threshold since ``Q(I, tau)`` grows with ``tau``); if that cannot beat the best so
    far, its program is not solved, since its release at the true value is no larger. The value returned
    is therefore exactly ``max(0, max_j Q~_j)`` of :meth:`Race.release` with the same source, and so is
    its privacy. The interval at the race's own ``beta`` is ``[value, Q~_K + 2 shift_K]``
    (:meth:`Race.interval`: its lower end is then the released value itself), which needs the top
    candidate only, always solved. What is skipped shows in the time only (module docstring)."""
    laplaces = [cast(Laplace, mechanism) for mechanism in race.mechanisms]  # what _race builds
    noisy = [laplace.deferred(1, source) for laplace in laplaces]

    def releases_at(j: int, value: float) -> float:  # clamped as Race.release clamps (monotone)
        return float(noisy[j]([min(value, laplaces[j].max_magnitude)])[0])

    shifts = race.shifts(race.beta)
    bounds = upper_bounds(incidence, race.taus)
    best, high = 0.0, math.nan
    solved: list[Certificate] = []
    for j in reversed(range(race.candidates)):
        tau = race.taus[j]
        bound = min([float(bounds[j]), *(c.cap(tau) for c in solved)])
        if j < race.candidates - 1 and releases_at(j, bound) - shifts[j] <= best:
            continue
        solved.append(certificates(incidence, [tau])[0])
        candidate = releases_at(j, solved[-1].value) - shifts[j]
        best = max(best, candidate)
        if j == race.candidates - 1:
            high = candidate + 2 * shifts[j]
    return best, max(high, best)


_started = False


def _highs() -> highspy.Highs:
    """A silent HiGHS model. HiGHS prints its banner to the process's standard output (file descriptor 1,
    below Python's ``sys.stdout``) the first time a model is made, whatever its options; that once, the
    descriptor points at the null device."""
    global _started
    if _started:
        highs = highspy.Highs()
    else:
        sys.stdout.flush()
        saved = os.dup(1)
        try:
            with open(os.devnull, "w") as null:
                os.dup2(null.fileno(), 1)
                highs = highspy.Highs()
        finally:
            os.dup2(saved, 1)
            os.close(saved)
        _started = True
    highs.setOptionValue("output_flag", False)
    return highs


class _Program:
    """The program over the results that reference a person whose total exceeds ``floor`` (the smallest
    threshold solved), one row per such person; the other results are fixed at ``psi``.

    Solved by column generation: the program has few rows (persons) and many columns (results), so HiGHS
    solves it over an active set of columns, and every result's reduced cost ``1 - sum_{t in q} y_t`` under
    the duals ``y`` is priced in numpy; the violated ones join the active set until the certificate (module
    docstring, over *all* columns) closes. A result outside the active set is at 0, so the point stays
    feasible for the whole program."""

    def __init__(self, incidence: Incidence, totals: FloatArray, floor: float) -> None:
        heavy = totals > floor
        reaches = np.zeros(incidence.size, dtype=bool)
        reaches[incidence.results[heavy[incidence.persons]]] = True
        self.fixed = float(incidence.weights[~reaches].sum())
        columns = np.flatnonzero(reaches)
        column_of = np.full(incidence.size, -1, dtype=np.int64)
        column_of[columns] = np.arange(len(columns))
        rows = np.flatnonzero(heavy)
        row_of = np.full(incidence.n_persons, -1, dtype=np.int64)
        row_of[rows] = np.arange(len(rows))
        keep = reaches[incidence.results] & heavy[incidence.persons]
        order = np.argsort(column_of[incidence.results[keep]], kind="stable")
        self.col = column_of[incidence.results[keep]][order]  # sorted: each column's rows are contiguous
        self.row = row_of[incidence.persons[keep]][order]
        self.start = np.concatenate([[0], np.cumsum(np.bincount(self.col, minlength=len(columns)))])
        self.psi = incidence.weights[columns]
        self.n_rows = len(rows)
        self.active = self._seed(floor)

    def _seed(self, tau: float) -> NDArray[np.bool_]:
        """A first active set: for each row, its first ``2 tau + 2`` columns (enough to fill it)."""
        by_row = np.argsort(self.row, kind="stable")
        first = np.concatenate([[0], np.cumsum(np.bincount(self.row, minlength=self.n_rows))])[:-1]
        rank = np.arange(len(by_row)) - np.repeat(first, np.bincount(self.row, minlength=self.n_rows))
        active = np.zeros(len(self.psi), dtype=bool)
        active[self.col[by_row[rank < 2 * tau + 2]]] = True
        return active

    def certificate(self, tau: float) -> Certificate:
        """The certified solve at ``tau`` (at least the floor this program was built for)."""
        tight = False
        for _ in range(_ROUNDS):
            point, duals = self._solve(np.flatnonzero(self.active), tau, tight)
            low, high, reduced, slope = self._bounds(point, duals, tau)
            if high - low <= TOLERANCE * tau:
                return Certificate(tau, self.fixed + low, self.fixed + high, slope)
            violated = np.flatnonzero(~self.active & (reduced > _PRICING))
            if len(violated) == 0:
                if tight:
                    break
                tight = True  # the active program is solved: only its tolerances keep the gap open
                continue
            most = violated[np.argsort(-reduced[violated] * self.psi[violated], kind="stable")]
            self.active[most[: max(_BATCH, int(self.active.sum()))]] = True
        raise NotCertified("the truncation program's solution could not be certified")

    def _solve(self, active: IntArray, tau: float, tight: bool) -> tuple[FloatArray, FloatArray]:
        """HiGHS's point over all columns (0 outside ``active``) and its row duals."""
        highs = _highs()
        if tight:
            for option in ("primal_feasibility_tolerance", "dual_feasibility_tolerance"):
                highs.setOptionValue(option, 1e-10)
        if len(active) > _INTERIOR:
            highs.setOptionValue("solver", "ipm")
            highs.setOptionValue("run_crossover", "off")
            highs.setOptionValue("ipm_optimality_tolerance", 1e-10)
        counts = self.start[active + 1] - self.start[active]
        entries = np.repeat(self.start[active], counts) + (
            np.arange(counts.sum()) - np.repeat(np.cumsum(counts) - counts, counts)
        )
        lp = highspy.HighsLp()
        lp.num_col_, lp.num_row_ = len(active), self.n_rows
        lp.sense_ = highspy.ObjSense.kMaximize
        lp.col_cost_ = np.ones(len(active))
        lp.col_lower_ = np.zeros(len(active))
        lp.col_upper_ = self.psi[active]
        lp.row_lower_ = np.full(self.n_rows, -highspy.kHighsInf)
        lp.row_upper_ = np.full(self.n_rows, tau)
        lp.a_matrix_.format_ = highspy.MatrixFormat.kColwise
        lp.a_matrix_.start_ = np.concatenate([[0], np.cumsum(counts)]).astype(np.int32)
        lp.a_matrix_.index_ = self.row[entries].astype(np.int32)
        lp.a_matrix_.value_ = np.ones(len(entries))
        highs.passModel(lp)
        highs.run()
        solution = highs.getSolution()
        point = np.zeros(len(self.psi))
        values, duals = np.asarray(solution.col_value), np.asarray(solution.row_dual)
        if len(values) != len(active) or len(duals) != self.n_rows:
            return point, np.full(self.n_rows, np.inf)
        point[active] = values
        return point, duals

    def _bounds(
        self, point: FloatArray, duals: FloatArray, tau: float
    ) -> tuple[float, float, FloatArray, float]:
        """The value of ``point`` repaired into the feasible region, the dual bound of ``duals``, each
        column's reduced cost under them, and the bound's slope in ``tau`` (the sum of the duals)."""
        u = np.clip(np.nan_to_num(point, nan=0.0), 0.0, self.psi)
        load = np.bincount(self.row, weights=u[self.col], minlength=self.n_rows)
        scale = np.where(load > tau * _MARGIN, tau * _MARGIN / np.maximum(load, 1e-300), 1.0)
        shrink = np.minimum.reduceat(scale[self.row], self.start[:-1]) if len(self.row) else scale[:0]
        u *= shrink
        y = np.abs(np.nan_to_num(duals, nan=np.inf))
        reduced = 1.0 - np.add.reduceat(y[self.row], self.start[:-1]) if len(self.row) else y[:0]
        high = tau * float(y.sum()) + float((self.psi * np.maximum(0.0, reduced)).sum())
        return float(u.sum()), high, reduced, float(y.sum())
