"""Contribution limits and clamping bounds chosen privately: the catalog's ``"auto"`` (seed 002, slides 60-62
and 71-77: the bounds decide the answer's quality, and looking at the data to set them is a leak).

A table with ``max_rows_per_partition = "auto"`` (kappa), ``max_partitions = "auto"`` (L0) or a column with
``lower = upper = "auto"`` (``bound_selection = "histogram"``, or the default ``"ladder"``: step 3) answers a
query in two steps (three), all inside the one release the ledger charges ``epsilon`` for (sequential
composition of the steps; each is chosen from the output before it, which adaptive composition allows):

1. **Histograms**, at ``epsilon_h = bounds_share * epsilon`` split evenly over the histograms the query
   needs (:func:`~kakeibo.sql.rewrite.bound_histograms_sql` computes them in the engine, over the rows the
   answer reads):

   * when kappa or L0 is ``"auto"``: each (person, group) pair binned by ``(floor(log2 rows in the group),
     floor(log2 groups of the person))``, weighing ``1/g`` for a person in ``g`` groups. Neighbour
     relation: add or remove one person; their weights sum to 1, so the histogram has L1 sensitivity 1
     and every one of its (fixed, data-independent) cells gets Laplace noise of scale ``1 / epsilon_h'``;
   * per ``"auto"`` column an aggregate reads: each person's values binned by sign and power of two
     (``(2^(k-1), 2^k]``, ``k`` in :data:`POWERS`), each person weighing ``1/m`` per value for their ``m``
     non-NULL values, so a person adds at most 1 in all: L1 sensitivity 1, Laplace noise of scale
     ``1 / epsilon_h'`` on every bin.

   Cells below the noise's error bound at ``FALSE_CELLS / cells`` are set to 0 (with probability
   ``1 - FALSE_CELLS`` no empty cell survives: one spurious person with 2^40 rows would swamp every
   estimate), which is post-processing.

2. **The choice and the answer** (post-processing of the noisy histograms, then the ordinary plan at
   ``epsilon - epsilon_h``). Each candidate is scored by the expected total absolute error over the
   released groups: the rows the limits drop, estimated from the histogram (weight ``w`` in the cell of
   ``c`` rows and ``g`` groups stands for ``w g`` pairs of a person, of whom the random ``min(g, L0) / g``
   are kept, each at ``min(c, kappa)`` rows: ``w (g c - min(g, L0) min(c, kappa))`` dropped), plus the
   groups' noise ``G kappa L0 k / epsilon_a`` (``k`` statistics at ``epsilon_a / k`` each). This is the
   score PipelineDP's private L0 selection gives its exponential mechanism, here evaluated on a noisy
   histogram so that one histogram serves every candidate pair, the value bounds and the estimate of what
   the bounds drop. Within a bin, counts and values are taken log-uniform (:func:`_mean_min`).
   Candidates: whole numbers near ``2^(i/2)`` up to ``max_rows_bound`` for kappa, powers of two up to 2^20
   (and the number of public keys) for L0. A column's upper bound ``U`` (candidates ``2^(q/4)``) then
   minimises the clipped mass above ``U`` (the kept rows times the histogram's mass beyond ``U``) plus the
   sum's noise ``G kappa L0 U k / epsilon_a``; the lower bound likewise on the negative side (0 when no
   negative bin survives). Quantiles get limits of their own (``kappa_q``, ``L0_q <= L0``): dropping rows
   moves a quantile's rank by at most the rows dropped, so they are scored the same way with the
   quantiles' rank error in place of the statistics' noise; their rank error per unit of ``kappa L0`` is
   much larger than a count's, so they come out smaller (on the visits benchmark 6 rows per group against
   the counts' 23-32, which halved the median's error). The cells under the noise floor are invisible to
   these estimates, so the share of rows the chosen bounds drop is a lower estimate: a few heavy persons
   spread over many cells can hide below it (``benchmarks/RESULTS.md`` measures how far). A histogram with
   no cell above the floor (too few persons for its epsilon) estimates nothing: its choices take the widest
   candidates, whose intervals cover the unbounded answer, and what they drop is reported as unknown.

3. **Ladders** (``bound_selection = "ladder"``, the default; issue 31). The floor of step 1 hides the heavy
   persons of a heavy-tailed table (2% of the customers holding half the orders sit in cells of 1 to 88
   persons, under a floor of about 170 at epsilon 0.08), so its kappa sits at the edge of the visible
   cells and its estimated drop reads 0. For a query of COUNTs and SUMs (:func:`_ladders`), the rows
   (kappa) and each summed ``"auto"`` column are instead truncated
   per person: each person's *total* in a group (of a column not declared ``lower = 0``, its positive and
   negative parts apart) at a threshold chosen by a
   :class:`~kakeibo.sql.truncation.Ladder` (a sparse-vector scan for where the count of heavier (person,
   group) pairs meets the answer's noise, the bias-variance optimum of Amin et al. 2019), from one more
   statement of truncated totals (:func:`~kakeibo.sql.rewrite.ladder_sql`) at the L0 of step 2; what the
   threshold drops is measured by a :class:`~kakeibo.sql.truncation.Drop` as a 95% interval of the share
   dropped, whose lower end always holds. Each laddered statistic gives :data:`LADDER_SHARE` of its share
   of epsilon to its ladder (:data:`CHOICE_PART` to the choice, the rest to the measurement). An AVG keeps
   its column's clamping bounds (a ratio of a truncated total to a count truncated otherwise is biased).
   ``check_bounds=True`` runs the measurement alone on declared limits (:func:`bound_check`).

The answer's intervals are those of its plan at the chosen bounds: they cover the *bounded* answer.
Bounding can only drop rows and pull values toward the bounds, so for counts and for sums of values that
are never negative the bias is toward zero; :class:`ChosenBounds` carries the histogram's estimate of the
fraction of rows and of value mass the bounds removed, or the ladders' measured interval of it. The session
warns (:class:`~kakeibo.mechanisms.AccuracyWarning`) when that bias is measured above the noise, and
(:class:`~kakeibo.mechanisms.UnresolvedBiasWarning`) when it is not ruled out: when the most bias the
measurement allows (:attr:`ChosenBounds.bias_ceiling`) exceeds the noise, or nothing bounds it. The second
fires on most releases by necessity: a warning that fires whenever the true bias exceeds the noise must
fire, with probability at least ``0.95 e^-epsilon``, on every table one heavy person away from such a table,
which is every table unless a declared largest contribution near the chosen threshold bounds the drop.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from fractions import Fraction
from typing import Any

import numpy as np
import pyarrow as pa

from ..errors import ArgumentError, ArgumentTypeError
from ..mechanisms import AccuracyWarning, Laplace, UnresolvedBiasWarning
from ..noise import RandomSource
from .aggregates import ROWS, SUM
from .analyze import AnalyzedQuery, spans_groups
from .catalog import HUGE, Catalog, ColumnSpec, QueryRefused, TableSpec
from .plan import CONFIDENCE, NoisePlan, check_epsilon, plan_query, refused_when_out_of_range
from .rewrite import bound_histograms_sql, ladder_name, ladder_sql
from .truncation import DEFAULT_BOUND, Drop, Ladder

__all__ = [
    "POWERS",
    "BoundChoice",
    "ChosenBounds",
    "attach",
    "attached",
    "bound_choice",
    "column_of",
    "provisional",
    "with_bounds",
]

#: the limits of a query's grain table that :func:`with_bounds` overrides
LIMITS = ("max_rows_per_partition", "max_partitions", "bounds_share", "bound_selection")

#: the powers of two a value bound may be: 2^-20 .. 2^40 (an integer column's: 2^0 .. 2^40)
POWERS = range(-20, 41)
#: bins of rows per person (the last one open above: 2^40 rows and more)
ROW_BINS = 41
#: bins of groups per person (the last one open above: 2^20 groups and more), and the largest L0 candidate
GROUP_BINS = 21
#: the probability that some empty cell of a histogram survives its noise threshold
FALSE_CELLS = 1e-3
#: the share of its statistic's epsilon a ladder takes to choose a threshold and measure what it drops
LADDER_SHARE = Fraction(3, 10)
#: the part of a ladder's epsilon its choice takes (the rest measures the drop)
CHOICE_PART = Fraction(2, 3)
#: how far above the optimum's count of heavier pairs a ladder stops (a threshold too low drops a little more
#: mass; one too high, which the noise of the scan's shared threshold can cause, multiplies the noise)
STOP_FACTOR = 3
#: the layers a drop is measured in below the top one (each about 4 times as wide as the last)
DROP_LAYERS = 3
#: the bound a column takes when its histogram saw nothing (the largest candidate)
WIDEST = 2.0 ** POWERS[-1]


def provisional(catalog: Catalog) -> Catalog:
    """``catalog`` with every ``"auto"`` limit set to 1 and every ``"auto"`` column bounded by [0, 1] (still
    marked ``auto_bounds``): what queries are analysed and refused against before their bounds are chosen.
    No refusal depends on those values but the ones that concern every value alike."""
    tables = []
    for table in catalog.tables.values():
        if not table.chooses_bounds:
            tables.append(table)
            continue
        columns = {
            name: replace(c, lower=0, upper=1) if c.auto_bounds else c for name, c in table.columns.items()
        }
        tables.append(
            replace(
                table,
                columns=columns,
                max_rows_per_partition=1
                if table.max_rows_per_partition == "auto"
                else table.max_rows_per_partition,
                max_partitions=1 if table.max_partitions == "auto" else table.max_partitions,
                max_rows_bound=DEFAULT_BOUND,
                bound_selection="histogram",
            )
        )
    return Catalog(tables, dialect=catalog.dialect)


def with_bounds(catalog: Catalog, query: AnalyzedQuery, bounds: Mapping[str, object]) -> Catalog:
    """``catalog`` with one query's own limits and column bounds: ``max_rows_per_partition``,
    ``max_partitions``, ``bounds_share`` and ``bound_selection`` (``"histogram"`` or ``"ladder"``) of its
    grain table, and per column (``"amount"``, or
    ``"table.amount"`` when two of its tables have one) a pair ``(lower, upper)`` or ``"auto"``; each checked
    as the catalog checks it (``query`` is analysed against :func:`provisional` of ``catalog``).

    The overrides are public inputs of the query, like its text: they join its request id, and a query
    that overrides nothing is planned as before."""
    if not isinstance(bounds, Mapping):
        raise ArgumentTypeError(f"bounds must be a mapping such as {{'max_partitions': 3}}, got {bounds!r}.")
    tables = {name: catalog.table(name) for name in catalog.tables}
    limits: dict[str, object] = {}
    for key, value in bounds.items():
        if key in LIMITS:
            limits[key] = value
            continue
        table, column = column_of(query, str(key))
        spec = tables[table].columns[column]
        low: Any
        high: Any
        if value == "auto":
            low, high = "auto", "auto"  # ColumnSpec reads both "auto" as auto_bounds
        elif isinstance(value, (tuple, list)) and len(value) == 2:
            low, high = value
        else:
            raise ArgumentError(
                f'the bounds of column {column} are a pair (lower, upper) or "auto", got {value!r}.'
            )
        columns = dict(tables[table].columns)
        columns[column] = replace(spec, lower=low, upper=high, auto_bounds=False)
        tables[table] = replace(tables[table], columns=columns)
    if limits:
        if query.grain is None or not query.user_level:
            raise ArgumentError(
                f"{', '.join(limits)} bound a person's rows, but each row of this query is a person."
            )
        grain = tables[query.grain.name]
        if grain.bound_selection == "race":
            raise ArgumentError(
                f'table {grain.name} races its limits (bound_selection = "race"); they stay as declared.'
            )
        if limits.get("bound_selection", "ladder") not in ("histogram", "ladder"):
            raise ArgumentError(
                f'a query chooses its bounds by "histogram" or "ladder", got {limits["bound_selection"]!r}; '
                'the race is declared in the catalog (bound_selection = "race").'
            )
        if limits.get("max_rows_per_partition", grain.max_rows_per_partition) != "auto":
            limits["max_rows_bound"] = DEFAULT_BOUND
        tables[grain.name] = replace(grain, **limits)  # type: ignore[arg-type]
    return Catalog(tables.values(), dialect=catalog.dialect)


def _declared(catalog: Catalog, query: AnalyzedQuery, key: str) -> ColumnSpec:
    """The catalog's spec of a column the query reads (the query holds the provisional one)."""
    table, column = column_of(query, key)
    return catalog.table(table).columns[column]


def column_of(query: AnalyzedQuery, key: str) -> tuple[str, str]:
    """The (table, column) a bounds key names among the query's tables."""
    table, _, column = key.lower().rpartition(".")
    found = [t.name for t in query.tables if t.has_column(column) and table in ("", t.name)]
    if len(found) != 1:
        where = "none" if not found else "several"
        raise ArgumentError(
            f"bounds key {key!r} names a column of {where} of the query's tables "
            f"({', '.join(t.name for t in query.tables)}); the keys are {', '.join(LIMITS)} and column names."
        )
    return found[0], column


@dataclass(frozen=True)
class ChosenBounds:
    """The bounds a query chose privately and what the histogram says they dropped (released with the
    answer, and stored with it in the ledger)."""

    max_rows_per_partition: int | None
    max_partitions: int | None
    columns: dict[str, tuple[float, float]]
    # estimated fraction of the rows the limits dropped (a lower estimate); None: the histogram saw nothing
    dropped_rows: float | None
    # per column: estimated fraction of its absolute value mass clamped away (None: unknown)
    clipped_values: dict[str, float | None]
    histogram_epsilon: Fraction
    # estimated: rows dropped ("rows"), per column the value mass clamped (None: unknown)
    bias_per_group: dict[str, float | None]
    quantile_limits: tuple[int, int] | None = None  # the quantiles' own (kappa, L0), when chosen
    # per summed column whose persons' group totals are truncated: the threshold tau
    totals: dict[str, float] = field(default_factory=dict)
    # per truncated statistic ("rows", or a column): the measured share dropped, (low, high) at 95%, and the
    # top of the measurement (the upper end holds when no person's group total exceeds it)
    dropped_intervals: dict[str, tuple[float, float, float]] = field(default_factory=dict)
    # the share of the rows in a person's groups past max_partitions, the histograms' estimate (a lower
    # one: their floor hides heavy persons); a ladder's interval measures only the kept groups
    partitions_dropped: float | None = None
    partition_bias: float | None = None  # those rows per released group
    # per key of bias_per_group: the most bias per group the measurement allows at 95% (the drop's upper end;
    # None or absent: nothing bounds it, as when a histogram's floor or unmeasured groups can hide a person)
    bias_ceiling: dict[str, float | None] = field(default_factory=dict)

    def to_json(self) -> str:
        data = {**self.__dict__, "histogram_epsilon": str(self.histogram_epsilon)}
        return json.dumps(data, sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> ChosenBounds:
        data = json.loads(text)
        data["columns"] = {k: (float(v[0]), float(v[1])) for k, v in data["columns"].items()}
        data["histogram_epsilon"] = Fraction(data["histogram_epsilon"])
        if data.get("quantile_limits") is not None:
            data["quantile_limits"] = tuple(data["quantile_limits"])
        data["dropped_intervals"] = {k: tuple(v) for k, v in data.get("dropped_intervals", {}).items()}
        return cls(**data)

    def describe(self) -> str:
        parts = []
        if self.max_rows_per_partition is not None:
            parts.append(f"max_rows_per_partition = {self.max_rows_per_partition}")
        if self.max_partitions is not None:
            parts.append(f"max_partitions = {self.max_partitions}")
        if self.quantile_limits is not None:
            kappa_q, l0_q = self.quantile_limits
            parts.append(f"for the quantiles {kappa_q} and {l0_q}")
        parts += [
            f"each person's {'positive and negative totals' if lo < 0 else 'total'} of {c} in a group "
            f"truncated at {self.totals[c]:.4g}"
            if c in self.totals
            else f"{c} in [{lo:g}, {hi:g}]"
            for c, (lo, hi) in self.columns.items()
        ]
        dropped = [_share(self.dropped_rows, "the rows", self.dropped_intervals.get("rows"))]
        if "rows" in self.dropped_intervals and self.partitions_dropped:  # the ladder's: in kept groups only
            dropped[0] += (
                " in the groups kept, and the groups past max_partitions about "
                f"{self.partitions_dropped:.1%} of the rows (the histograms' estimate, a lower one)"
            )
        dropped += [
            _share(share, f"the mass of {c}", self.dropped_intervals.get(c))
            for c, share in self.clipped_values.items()
        ]
        if not parts:  # declared limits, measured (check_bounds)
            epsilon = float(self.histogram_epsilon)
            return f"measured at epsilon {epsilon:g}: the declared limits drop {', '.join(dropped)}"
        return (
            f"chosen at epsilon {float(self.histogram_epsilon):g}: {', '.join(parts)}; "
            f"they drop {', '.join(dropped)}"
        )


@dataclass(frozen=True)
class BoundChoice:
    """What one query chooses privately, and how: decided from public inputs only (the provisional plan)."""

    plan: NoisePlan  # the provisional plan: its privacy loss is the query's whole charge
    limits: tuple[bool, bool]  # (kappa, L0) chosen
    columns: tuple[str, ...]  # the value columns whose bounds are chosen
    integer: tuple[bool, ...]  # per column: an int column (bounds are whole numbers)
    share: Fraction
    rows_bound: int
    # per column: its lower bound is chosen too (it may be negative), not declared 0
    signed: tuple[bool, ...] = ()
    # the statistics whose persons' group totals are truncated at a threshold chosen by a Ladder: None for
    # the rows (kappa), else a summed column (empty: the histograms choose everything)
    ladders: tuple[str | None, ...] = ()
    # the limits and bounds are declared (check_bounds): the ladders measure what they drop, choose nothing
    measured: bool = False

    @property
    def histogram_epsilon(self) -> Fraction:
        return self.plan.epsilon * self.share

    @property
    def answer_epsilon(self) -> Fraction:
        if self.measured:
            return self.plan.epsilon - self.histogram_epsilon
        return self.plan.epsilon - self.histogram_epsilon - self.ladder_epsilon * len(self.ladders)

    @property
    def ladder_epsilon(self) -> Fraction:
        """Each ladder's epsilon, its choice and its drop measurement together: :data:`LADDER_SHARE` of the
        share its statistic would have in the answer without ladders (the statistics split the rest of
        epsilon evenly, :func:`~kakeibo.sql.plan.plan_query`)."""
        if not self.ladders:
            return Fraction(0)
        if self.measured:  # the whole share measures, split over the statistics
            return self.histogram_epsilon / len(self.ladders)
        return (self.plan.epsilon - self.histogram_epsilon) / _releases(self.plan) * LADDER_SHARE

    @property
    def histograms(self) -> int:
        """The rows histogram (on a table of persons) and one per chosen column; none when the bounds are
        declared and only measured."""
        return 0 if self.measured else int(self.plan.query.user_level) + len(self.columns)

    def _mechanisms(self) -> tuple[Laplace, Laplace]:
        each = self.histogram_epsilon / self.histograms
        return Laplace(sensitivity=1, epsilon=each, coordinates=ROW_BINS * GROUP_BINS), Laplace(
            sensitivity=1, epsilon=each, coordinates=2 * len(POWERS) + 3
        )

    def histograms_sql(self) -> str:
        """The engine statement of the histograms (DuckDB's dialect)."""
        return bound_histograms_sql(self.plan, ROW_BINS, GROUP_BINS, self.columns, POWERS)

    def describe(self) -> list[str]:
        """For ``explain``: the histograms, their noise and the candidates (or, for declared bounds, the
        measurement of what they drop)."""
        if self.measured:
            return [
                f"what the declared limits drop measured at epsilon {float(self.histogram_epsilon):g} "
                f"(check_bounds, {float(self.share):.0%} of the query's), the answer at "
                f"{float(self.answer_epsilon):g}: each person's "
                + ", ".join("rows" if k is None else f"total of {k}" for k in self.ladders)
                + " in a group, in layers above the most the limits keep"
            ]
        rows, values = self._mechanisms()
        chosen = [
            name
            for name, flag in zip(("max_rows_per_partition", "max_partitions"), self.limits, strict=True)
            if flag
        ]
        chosen += [f"the bounds of {c}" for c in self.columns]
        lines = [
            f"bounds chosen privately ({', '.join(chosen)}) at epsilon {float(self.histogram_epsilon):g} "
            f"({float(self.share):.0%} of the query's), the answer at {float(self.answer_epsilon):g}:"
        ]
        if self.plan.query.user_level:
            lines.append(
                "  each person's groups by log2 rows x log2 groups, Laplace noise of scale "
                f"{rows.scale:.4g}; candidates near powers of sqrt 2 (max_rows_per_partition up to "
                f"{self.rows_bound}), scored by estimated dropped rows plus the groups' noise"
            )
        for c in self.columns:
            lines.append(
                f"  {c}: each person's values by sign and power of two (2^{POWERS[0]} .. 2^{POWERS[-1]}), "
                f"Laplace noise of scale {values.scale:.4g}; bounds scored by estimated clipped mass plus "
                "noise"
            )
        for key in self.ladders:
            what = "rows" if key is None else f"total of {key}"
            taus = self._ladder_taus(key)
            lines.append(
                f"  then each person's {what} in a group truncated at a threshold (of {len(taus)}, "
                f"{taus[0]:.4g} .. {taus[-1]:.4g}) chosen by a sparse-vector scan at epsilon "
                f"{float(self.ladder_epsilon * CHOICE_PART):.4g} for where the count of heavier (person, "
                "group) pairs meets the answer's noise, and the share it drops measured in layers at "
                f"epsilon {float(self.ladder_epsilon * (1 - CHOICE_PART)):.4g} (one more engine statement)"
            )
        return lines

    def choose(
        self, execute: Callable[[str], pa.Table], source: RandomSource
    ) -> tuple[NoisePlan, ChosenBounds]:
        """Noise the engine's histograms (rows of :func:`~kakeibo.sql.rewrite.bound_histograms_sql`),
        choose the bounds, truncate the laddered statistics (:meth:`truncate`) and plan the answer at them
        (see the module docstring). ``execute`` runs one statement in DuckDB's dialect."""
        if self.measured:
            declared = replace(self.decide(*self._nothing_seen()), dropped_rows=0.0)
            groups = float(len(self.plan.public_keys or ((),)))  # under selection: 1, the most per group
            chosen = self.truncate(declared, groups, execute, source)
            return self.answer_plan(chosen), chosen
        pairs, shares = self.noisy(*self.exact(execute(self.histograms_sql())), source)
        chosen = self.decide(pairs, shares)
        if self.ladders and chosen.dropped_rows is not None:
            groups = self._groups(float((pairs * _representatives(GROUP_BINS)).sum()))
            chosen = self.truncate(chosen, groups, execute, source)
        return self.answer_plan(chosen), chosen

    def truncate(
        self,
        chosen: ChosenBounds,
        groups: float,
        execute: Callable[[str], pa.Table],
        source: RandomSource,
    ) -> ChosenBounds:
        """Each laddered statistic's threshold chosen by its :class:`~kakeibo.sql.truncation.Ladder` and
        what it drops measured by its :class:`~kakeibo.sql.truncation.Drop`, both from one statement of
        truncated totals (:func:`~kakeibo.sql.rewrite.ladder_sql`) at the limits ``chosen`` from the
        histograms. A column not declared never negative (``lower = 0, upper = "auto"``) has its positive and
        negative parts truncated apart (each person adds between ``-tau`` and ``tau``; a ladder's counts and
        a drop's layers then move by up to 2 per pair); a measured column is declared bounded below by 0."""
        keys = list(self.ladders)
        if not keys:
            return chosen
        # a column not declared never negative has its positive and negative parts truncated apart: the
        # histogram's floor can hide its negative values (a fifth of the amounts negative went unseen at
        # epsilon 0.05 on 3,000 persons), and clamping them to 0 would bias the sum upward unreported
        signed = frozenset(
            key
            for key in keys
            if key is not None and not self.measured and self.signed[self.columns.index(key)]
        )
        tops = {key: self._ladder_taus(key)[-1] for key in keys if key is not None}
        grid = self._grid_plan(chosen, tops, signed)
        ladders = [
            (ROWS, None, self._ladder_taus(None)) if key is None else (SUM, key, self._ladder_taus(key))
            for key in keys
        ]
        table = execute(ladder_sql(grid, ladders)).to_pydict()
        per_statistic = float(self.answer_epsilon) / _releases(self.plan)
        choice_epsilon = self.ladder_epsilon * CHOICE_PART
        totals, intervals, biases, ceilings = (
            dict(chosen.totals),
            dict(chosen.dropped_intervals),
            dict(chosen.bias_per_group),
            dict(chosen.bias_ceiling),
        )
        unmeasured = self._groups_unmeasured(chosen)
        kappa, columns, clipped = (
            chosen.max_rows_per_partition,
            dict(chosen.columns),
            dict(chosen.clipped_values),
        )
        dropped_rows = chosen.dropped_rows
        for i, (key, (_, _, taus)) in enumerate(zip(keys, ladders, strict=True)):
            masses = np.array([float(table[ladder_name(i, j)][0] or 0.0) for j in range(len(taus))])
            weight = grid.max_partitions * (2 if key in signed else 1)  # the most one person moves a count
            at, step = 0, 1  # measured: the declared threshold, then thresholds 4 times apart
            if not self.measured:
                ladder = Ladder(
                    taus, STOP_FACTOR * groups * grid.max_partitions / per_statistic, choice_epsilon, weight
                )
                at, step = ladder.choose(masses, source), 4 if key is None else 2
            marks = sorted({*range(at, len(taus), step)[:DROP_LAYERS], len(taus) - 1})
            drop = Drop((0.0, *(taus[j] for j in marks)), self._drop_epsilon, weight)
            layers = np.array([mass.sum() for mass in np.split(masses, np.add(marks, 1))[:-1]])
            share, high, mass, most = drop.shares(drop.release(layers, source), 1 - CONFIDENCE)
            name = "rows" if key is None else key
            intervals[name] = (share, high, taus[-1])
            # at least this much, with 95% confidence, and for the rows the histograms' estimate past L0
            past = (chosen.partition_bias or 0.0) if key is None else 0.0
            biases[name] = mass / groups + past
            # at most this much, when every group a person's rows fall in is measured, and for a measured
            # column when no value is clamped within a kept total (which its layers do not see)
            bounded = not unmeasured and (key is None or not self.measured)
            ceilings[name] = most / groups if bounded else None
            if key is None:
                kappa, dropped_rows = kappa if self.measured else int(taus[at]), share
            elif self.measured:
                clipped[key] = share
            else:
                tau = float(taus[at])
                totals[key], columns[key], clipped[key] = tau, (-tau if key in signed else 0.0, tau), share
        return replace(
            chosen,
            max_rows_per_partition=kappa,
            columns=columns,
            dropped_rows=dropped_rows,
            clipped_values=clipped,
            bias_per_group=biases,
            totals=totals,
            dropped_intervals=intervals,
            bias_ceiling=ceilings,
        )

    def _groups_unmeasured(self, chosen: ChosenBounds) -> bool:
        """Whether a person's rows can fall in groups past ``max_partitions``, which the ladders' statement
        leaves out (it measures the kept groups only), so that nothing bounds what those groups drop."""
        query = self.plan.query
        l0 = chosen.max_partitions if chosen.max_partitions is not None else query.max_partitions
        keys = self.plan.public_keys
        return spans_groups(query) and (keys is None or l0 < len(keys))

    def _grid_plan(
        self, chosen: ChosenBounds, tops: dict[str, float], signed: frozenset[str] = frozenset()
    ) -> NoisePlan:
        """The plan the ladders' statement is compiled from: the chosen limits, each laddered column
        clamped to ``[0, top]`` (``[-top, top]`` when ``signed``)."""
        bounds = {
            **chosen.columns,
            **{c: (-top if c in (signed or ()) else 0.0, top) for c, top in tops.items()},
        }
        resolved = _resolve(self.plan.query, chosen.max_rows_per_partition, chosen.max_partitions, bounds)
        return plan_query(resolved, epsilon=self.answer_epsilon, delta=self.plan.delta, totals=tops)

    def _ladder_taus(self, key: str | None) -> tuple[float, ...]:
        """A ladder's thresholds: the candidates of ``max_rows_per_partition`` for the rows, powers of two
        over :data:`POWERS` and up to ``max_rows_bound`` times the last for a column (from 1 for an int
        column)."""
        if self.measured:
            return self._measured_taus(key)
        if key is None:
            return tuple(float(k) for k in self._kappa_candidates())
        first = 0 if self.integer[self.columns.index(key)] else POWERS[0]
        return tuple(2.0**q for q in range(first, POWERS[-1] + _log2_ceil(self.rows_bound) + 1))

    def _measured_taus(self, key: str | None) -> tuple[float, ...]:
        """A measured statistic's thresholds: the most one person adds to a group under the declared limits
        (``kappa`` rows; ``kappa`` times a column's upper bound, beyond which a total always loses mass),
        4 and 16 times that, and the top of the grid. A total within the first is kept whole, so what lies
        above it is at most what the limits drop: the measurement is a lower bound of the drop (it leaves
        out the groups past ``L0`` and, for a sum, values clamped within a kept total)."""
        query = self.plan.query
        kappa = query.max_rows_per_partition
        if key is None:
            base, top = float(kappa), float(max(self.rows_bound, 64 * kappa))
        else:  # a column is clamped to [0, top] in the engine, so top stays within the magnitudes it may take
            base = kappa * float(query.value(key).spec.upper or 0)
            top = min(max(2.0 ** (POWERS[-1] + _log2_ceil(self.rows_bound)), 64 * base), HUGE)
        return base, 4 * base, 16 * base, top

    def exact(self, histograms: pa.Table) -> tuple[np.ndarray, np.ndarray]:
        """The engine's histograms as arrays: weighted pairs by (rows bin, groups bin), and per chosen column
        the value shares by bin (index ``bin + len(POWERS) + 1``)."""
        data = histograms.to_pydict()
        cells = np.zeros((ROW_BINS, GROUP_BINS))
        values = np.zeros((len(self.columns), 2 * len(POWERS) + 3))
        for h, a, b, c in zip(data["__h"], data["__a"], data["__b"], data["__c"], strict=True):
            if h == 0:
                cells[a, b] = c
            else:
                values[h - 1, a + len(POWERS) + 1] = c
        return cells, values

    def noisy(
        self, cells: np.ndarray, values: np.ndarray, source: RandomSource
    ) -> tuple[np.ndarray, np.ndarray]:
        """The histograms' release: every cell noised, then cells below the noise's error bound at
        ``FALSE_CELLS / cells`` set to 0 (module docstring). The only step that reads the data."""
        rows_mechanism, values_mechanism = self._mechanisms()
        pairs = np.zeros_like(cells)
        bound = rows_mechanism.max_magnitude
        if self.plan.query.user_level:
            noisy = np.asarray(rows_mechanism.release(np.clip(cells, -bound, bound).ravel(), rng=source))
            floor = rows_mechanism.error_bound(FALSE_CELLS / cells.size)
            pairs = np.where(noisy > floor, noisy, 0).reshape(cells.shape)
        shares = np.zeros_like(values)
        bound = values_mechanism.max_magnitude
        for i in range(len(self.columns)):
            noisy = np.asarray(values_mechanism.release(np.clip(values[i], -bound, bound), rng=source))
            floor = values_mechanism.error_bound(FALSE_CELLS / values.shape[1])
            shares[i] = np.where(noisy > floor, noisy, 0)
        return pairs, shares

    def decide(self, pairs: np.ndarray, shares: np.ndarray) -> ChosenBounds:
        """The bounds that minimise the estimated error, from the noisy histograms (post-processing). The
        rows histogram also serves a query that chooses column bounds only: it estimates the rows the
        declared limits keep (on a row-level table, the column's histogram counts the rows).

        A histogram with no cell above its noise floor (too few persons for its epsilon) estimates nothing:
        what it would choose takes the widest candidate (noise that covers every value, never a bias hidden
        behind a narrow interval), and the share it drops is unknown (``None``, which the warning names)."""
        query = self.plan.query
        per_unit = float(len(self.plan.statistics) + len(self.plan.quantiles)) / float(self.answer_epsilon)
        g = _representatives(GROUP_BINS)[None, :]
        lows = 2.0 ** np.arange(ROW_BINS)[:, None]  # rows bin a holds 2^a .. 2^(a+1) - 1 rows
        c = _mean_min(lows, np.inf)
        seen = bool(pairs.any()) if query.user_level else True
        if query.user_level:
            total, pairs_count = float((pairs * g * c).sum()), float((pairs * g).sum())
        else:
            total = pairs_count = max(float(shares[0].sum()), 0.0) if self.columns else 0.0
        groups = self._groups(pairs_count)
        kappa, l0, dropped = query.max_rows_per_partition, query.max_partitions, 0.0
        kappas = np.array(self._kappa_candidates() if self.limits[0] else [kappa], float)
        l0s = np.array(self._l0_candidates() if self.limits[1] else [l0], float)
        if query.user_level and not seen:
            kappa, l0 = int(kappas[-1]), int(l0s[-1])
        elif query.user_level:
            lost = self._lost(pairs, kappas, l0s)
            score = lost + groups * per_unit * kappas[:, None] * l0s[None, :]
            best = np.unravel_index(int(np.argmin(score)), score.shape)  # the first minimum: smaller limits
            kappa, l0, dropped = int(kappas[best[0]]), int(l0s[best[1]]), float(lost[best])
        quantile_limits = None
        if query.user_level and any(self.limits) and self.plan.quantiles:
            l0s = l0s[l0s <= l0]
            if seen:
                lost_q = self._lost(pairs, kappas, l0s)
                score_q = lost_q + groups * self._rank_noise_per_unit() * kappas[:, None] * l0s[None, :]
                at = np.unravel_index(int(np.argmin(score_q)), score_q.shape)
                quantile_limits = (int(kappas[at[0]]), int(l0s[at[1]]))
            else:
                quantile_limits = (int(kappas[-1]), int(l0s[-1]))
        noise_per_value = groups * kappa * l0 * per_unit
        columns: dict[str, tuple[float, float]] = {}
        clipped: dict[str, float | None] = {}
        biases: dict[str, float | None] = {}
        for i, column in enumerate(self.columns):
            if not seen or not shares[i].any():
                columns[column], clipped[column], biases[column] = (-WIDEST, WIDEST), None, None
                continue
            bounds, share, mass = _value_bounds(
                shares[i], max(total - dropped, 0.0), noise_per_value, self.integer[i]
            )
            if not self.signed[i]:  # declared never negative (lower = 0, upper = "auto")
                bounds = (0.0, bounds[1])
            columns[column], clipped[column], biases[column] = bounds, share, mass / groups
        past = None  # the rows in groups past L0 alone (kappa unbounded)
        if query.user_level and seen:
            past = float(self._lost(pairs, np.array([2.0**ROW_BINS]), np.array([float(l0)]))[0, 0])
        return ChosenBounds(
            max_rows_per_partition=kappa if self.limits[0] else None,
            max_partitions=l0 if self.limits[1] else None,
            columns=columns,
            dropped_rows=(dropped / total if total > 0 else 0.0) if seen else None,
            clipped_values=clipped,
            histogram_epsilon=self.histogram_epsilon,
            bias_per_group={"rows": dropped / groups if seen else None, **biases},
            quantile_limits=quantile_limits,
            partitions_dropped=None if past is None else (past / total if total > 0 else 0.0),
            partition_bias=None if past is None else past / groups,
        )

    @staticmethod
    def _lost(pairs: np.ndarray, kappas: np.ndarray, l0s: np.ndarray) -> np.ndarray:
        """The rows each (kappa, L0) candidate drops, estimated from the noisy pairs histogram (module
        docstring): ``w (g c - min(g, L0) E[min(c, kappa)])`` summed over the cells."""
        g = _representatives(GROUP_BINS)[None, :]
        lows = 2.0 ** np.arange(ROW_BINS)[:, None]
        k, ell = kappas[:, None, None, None], l0s[None, :, None, None]
        lost: np.ndarray = (
            pairs * (g * _mean_min(lows, np.inf) - np.minimum(g, ell) * _mean_min(lows, k))
        ).sum(axis=(2, 3))
        return lost

    def _rank_noise_per_unit(self) -> float:
        """The quantiles' median rank error per group (in rows) at kappa = L0 = 1: each grows linearly with
        kappa L0. Dropping rows moves a quantile's rank by at most the rows dropped, so the quantiles'
        kappa is scored like the counts' (dropped rows plus noise) with this noise instead."""
        answer = self.provisional_answer()
        query = answer.query
        return sum(q.rank_error(0.5) for q in answer.quantiles) / (
            query.max_rows_per_partition * query.max_partitions
        )

    def warning(self, chosen: ChosenBounds) -> tuple[str, type[AccuracyWarning]] | None:
        """The accuracy warning of bounds chosen privately or measured (:func:`_warning`), else ``None``."""
        return _warning(self.answer_plan(chosen), chosen)

    def check(self) -> None:
        """Refuse, before the draw, what would fail inside it (issue 29, R9: ``bounds_share=1e-300`` used to
        fail there, charged): each histogram's and the answer's epsilon by the planner's rule, the
        histograms' mechanisms, and the answer's plan at the widest candidates, which :meth:`decide` takes
        when the histograms see nothing (every other choice has smaller limits, so smaller noise grids and
        scales, which the samplers cover when they cover the widest)."""
        if self.histograms:
            check_epsilon(
                self.histogram_epsilon / self.histograms,
                "each bounds histogram's epsilon (bounds_share times epsilon, split over the histograms)",
            )
            with refused_when_out_of_range():
                self._mechanisms()
        check_epsilon(self.answer_epsilon, "the answer's epsilon (epsilon less its bounds_share)")
        if self.ladders:
            check_epsilon(self._drop_epsilon, "each measurement of what the bounds drop")
            self._check_ladders()
        if self.ladders and not self.measured:
            check_epsilon(self.ladder_epsilon * CHOICE_PART / 2, "each threshold's choice (half its noise)")
        self.widest_answer()

    def _check_ladders(self) -> None:
        """Build, before the draw, what :meth:`truncate` builds inside it at the widest: the plan of the
        ladders' statement (every laddered column clamped to the top of its grid), the choices' and the
        drop measurements' mechanisms at the top layers, and the answer with every total truncated at the
        top of its grid."""
        chosen = self.decide(*self._nothing_seen())
        tops = {key: self._ladder_taus(key)[-1] for key in self.ladders if key is not None}
        l0 = self._grid_plan(chosen, tops).max_partitions
        with refused_when_out_of_range():
            for key in self.ladders:
                taus = self._ladder_taus(key)
                Drop((0.0, *taus[-2:]), self._drop_epsilon, l0).mechanisms()
            if not self.measured:
                self.answer_plan(
                    replace(
                        chosen,
                        totals=tops,
                        columns={**chosen.columns, **{key: (0.0, top) for key, top in tops.items()}},
                    )
                )

    @property
    def _drop_epsilon(self) -> Fraction:
        """The epsilon of each ladder's measurement of what its threshold drops."""
        return self.ladder_epsilon * (1 if self.measured else 1 - CHOICE_PART)

    def widest_answer(self) -> NoisePlan:
        """The plan of the answer at the widest candidates, which :meth:`decide` takes when the histograms
        see nothing: the most noise the choice can lead to (a ladder's thresholds stay below the top of
        its grid, whose noise it never exceeds on a table whose histograms see anything)."""
        return self.answer_plan(self.decide(*self._nothing_seen()))

    def _nothing_seen(self) -> tuple[np.ndarray, np.ndarray]:
        """Histograms in which no cell rose above the noise: what :meth:`decide` turns into the widest
        candidates, or, for bounds only measured, into the declared ones."""
        return np.zeros((ROW_BINS, GROUP_BINS)), np.zeros((len(self.columns), 2 * len(POWERS) + 3))

    def provisional_answer(self) -> NoisePlan:
        """The plan of the answer at the provisional bounds (for ``explain``: its noise scales with the
        chosen ones)."""
        return plan_query(self.plan.query, epsilon=self.answer_epsilon, delta=self.plan.delta)

    def answer_plan(self, chosen: ChosenBounds) -> NoisePlan:
        """The plan of the answer at the chosen bounds, at the rest of the query's epsilon."""
        resolved = _resolve(
            self.plan.query, chosen.max_rows_per_partition, chosen.max_partitions, chosen.columns
        )
        return plan_query(
            resolved,
            epsilon=self.answer_epsilon,
            delta=self.plan.delta,
            quantile_limits=chosen.quantile_limits,
            totals=chosen.totals,
        )

    def _kappa_candidates(self) -> list[int]:
        """Whole numbers near ``2^(i/2)`` up to ``max_rows_bound``."""
        top = 2 * _log2_ceil(self.rows_bound)
        return sorted({min(round(2 ** (i / 2)), self.rows_bound) for i in range(top + 1)})

    def _l0_candidates(self) -> list[int]:
        keys = self.plan.public_keys
        cap = len(keys) if keys is not None else 2 ** (GROUP_BINS - 1)
        return sorted({*(2**i for i in range(GROUP_BINS) if 2**i < cap), cap})

    def _groups(self, pairs: float) -> float:
        """How many groups the answer releases, as the score counts their noise: the public keys, or under
        private selection the person-group ``pairs`` over the users a released group needs (at least 1)."""
        if self.plan.public_keys is not None:
            return float(len(self.plan.public_keys))
        assert self.plan.selection is not None
        return max(1.0, pairs / self.plan.selection.users_for(0.5))


def _releases(plan: NoisePlan) -> int:
    """The releases ``plan_query`` splits a query's epsilon over evenly: the noised statistics, the
    quantiles and the partition selection."""
    return sum(s.released for s in plan.statistics) + len(plan.quantiles) + bool(plan.selection)


def _log2_ceil(value: int) -> int:
    return max(0, math.ceil(math.log2(value) - 1e-12))


def _mean_min(lows: np.ndarray, cap: Any) -> np.ndarray:
    """``E[min(v, cap)]`` for ``v`` log-uniform on ``[low, 2 low]``, the model of a value inside its
    power-of-two bin (density ``1 / (v ln 2)``): ``low / ln 2`` when ``cap >= 2 low``, ``cap`` when ``cap <=
    low``, else ``(cap - low) / ln 2 + cap log2(2 low / cap)``. A bin of whole numbers starting at 1 holds
    only 1."""
    with np.errstate(divide="ignore", invalid="ignore"):
        inside = (cap - lows) / math.log(2) + cap * np.log2(2 * lows / cap)
        mean = np.where(cap >= 2 * lows, lows / math.log(2), np.where(cap <= lows, cap, inside))
    return np.where(lows == 1, np.minimum(cap, 1.0), mean) if np.ndim(lows) else mean


def _representatives(bins: int) -> np.ndarray:
    """A bin's typical count: the geometric mean of its ends ``2^a`` and ``2^(a+1) - 1`` (the last bin: its
    lower end)."""
    a = np.arange(bins, dtype=np.float64)
    reps = np.sqrt(2.0**a * (2.0 ** (a + 1) - 1))
    reps[-1] = 2.0 ** (bins - 1)
    return reps


def _warning(plan: NoisePlan, chosen: ChosenBounds) -> tuple[str, type[AccuracyWarning]] | None:
    """The sentences, and their category, when the bias ``chosen`` states per group (rows dropped, value
    mass clamped or truncated away) exceeds the 95% noise of a statistic it biases (:class:`AccuracyWarning`),
    when a histogram saw too few persons to estimate it (the same), or, failing both, when the most bias the
    measurement allows exceeds the noise (:class:`UnresolvedBiasWarning`, whose docstring says why a warning
    that fires whenever the true bias exceeds the noise must fire that often); else ``None``."""
    found, unseen, unresolved = [], [], []
    for stat in plan.statistics:
        if stat.name == "rows":
            key = "rows"
        elif stat.name in (f"s_{stat.column}", f"sc_{stat.column}"):
            key = str(stat.column)
        else:
            continue
        if key not in chosen.bias_per_group:  # nothing chosen or measured biases it
            continue
        bias = chosen.bias_per_group[key]
        ceiling = chosen.bias_ceiling.get(key)
        noise = stat.mechanism.error_bound(1 - CONFIDENCE)
        if bias is None:
            unseen.append(key)
        elif bias > noise:
            found.append(f"{stat.name} (about {bias:.4g} per group against noise of {noise:.4g})")
        elif ceiling is None:
            unresolved.append(f"{stat.name} (unbounded, against noise of {noise:.4g})")
        elif ceiling > noise:
            unresolved.append(f"{stat.name} (up to {ceiling:.4g} per group against noise of {noise:.4g})")
    sentences = []
    if found:
        sentences.append(
            "the limits and bounds bias these statistics toward zero by more than their noise, as the "
            f"histogram estimates or the measurement shows: {', '.join(found)}; the intervals cover the "
            "bounded answer only."
        )
    if unseen:
        sentences.append(
            f"no cell of the histogram of {', '.join(dict.fromkeys(unseen))} rose above its noise (too few "
            "persons for its share of epsilon), so the widest bounds were taken: declare the bounds, or give "
            "the query more epsilon."
        )
    if unresolved:
        sentences.append(
            "the bias of these statistics may exceed their noise, and the measurement of what the limits "
            f"and bounds drop cannot rule it out (95%): {', '.join(unresolved)}; the intervals cover the "
            "bounded answer only. Nothing rules out a person heavier than the measurement sees unless the "
            "catalog declares the largest contribution (max_rows_bound, the columns' upper bounds) near the "
            "chosen limits; result.bounds.describe() has the measured drop."
        )
    if not sentences:
        return None
    return " ".join(sentences), AccuracyWarning if found or unseen else UnresolvedBiasWarning


def _share(share: float | None, of: str, interval: tuple[float, float, float] | None = None) -> str:
    """``"about 7.4% of the rows"``, with its measured 95% interval when there is one, or that the share is
    unknown."""
    if share is None:
        return f"an unknown share of {of}"
    if interval is None:
        return f"about {share:.1%} of {of}"
    low, high, top = interval
    if high >= 0.9995 and low <= 0:
        return f"an unknown share of {of} (measured, 95%: between 0% and 100%, the noise at its epsilon)"
    if high >= 0.9995:  # the top layer's noise: the measurement cannot bound the drop above
        return f"at least {low:.1%} of {of} (measured, 95%)"
    return (
        f"between {low:.1%} and {high:.1%} of {of} (measured, 95%; the upper end holds if no person's total "
        f"in a group exceeds {top:.4g})"
    )


def _value_bounds(
    shares: np.ndarray, kept: float, noise_per_value: float, integer: bool
) -> tuple[tuple[float, float], float, float]:
    """The clamping bounds minimising the estimated clipped mass plus the noise (module docstring), the
    estimated fraction of absolute value mass clamped away, and that mass. ``shares`` has the bins of
    :func:`~kakeibo.sql.rewrite.value_bin_sql` from ``-(len(POWERS) + 1)`` to ``len(POWERS) + 1``; a bin's
    values are taken log-uniform (:func:`_mean_min`), the candidates are ``2^(k/4)`` (whole numbers for an
    int column)."""
    middle = len(POWERS) + 1
    lows = np.array([2.0 ** (k - 1) for k in POWERS] + [2.0 ** POWERS[-1]])  # bin j: (2^(k-1), 2^k]
    magnitude = lows / math.log(2)
    total = float(shares.sum())
    sides = (shares[middle + 1 :] / total, shares[:middle][::-1] / total)  # positive, negative magnitudes
    candidates = np.unique(
        [
            math.ceil(2 ** (q / 4)) if integer else 2 ** (q / 4)
            for q in range(4 * POWERS[0], 4 * POWERS[-1] + 1)
        ]
    )
    if integer:
        candidates = candidates[candidates >= 1]
    ends, clipped_mass = [], 0.0
    for side in sides:
        if side.sum() <= 0:
            ends.append(0.0)
            continue
        excess = kept * (side[None, :] * (magnitude - _mean_min(lows[None, :], candidates[:, None]))).sum(
            axis=1
        )
        best = int(np.argmin(excess + noise_per_value * candidates))
        ends.append(float(candidates[best]))
        clipped_mass += float(excess[best])
    mass = kept * float((sides[0] * magnitude).sum() + (sides[1] * magnitude).sum())
    low = -ends[1] if ends[1] > 0 else 0.0
    # only zeros seen: [0, 0] would give the sums no sensitivity, which no noise is calibrated to (the plan
    # would fail inside the draw); the least candidate above 0 clamps the unseen values as little as any
    high = ends[0] if ends[0] > 0 or low < 0 else float(candidates[0])
    return (low, high), clipped_mass / mass if mass > 0 else 0.0, clipped_mass


def _resolve(
    query: AnalyzedQuery, kappa: int | None, l0: int | None, columns: dict[str, tuple[float, float]]
) -> AnalyzedQuery:
    """``query`` with its chosen limits and bounds in place of the provisional ones."""
    grain = query.grain
    assert grain is not None
    if kappa is not None or l0 is not None:
        grain = replace(
            grain,
            max_rows_per_partition=grain.max_rows_per_partition if kappa is None else kappa,
            max_partitions=grain.max_partitions if l0 is None else l0,
            max_rows_bound=DEFAULT_BOUND,
        )
    values = tuple(
        replace(v, spec=_bounded(v.spec, *columns[v.spec.name])) if v.spec.name in columns else v
        for v in query.values
    )
    return replace(query, grain=grain, values=values)


def _bounded(spec: ColumnSpec, low: float, high: float) -> ColumnSpec:
    return replace(spec, lower=low, upper=high, auto_bounds=False)


def bound_choice(
    query: AnalyzedQuery, plan: NoisePlan, catalog: Catalog, check_bounds: bool = False
) -> BoundChoice | None:
    """What ``query`` (analysed against :func:`provisional` of ``catalog``, planned as ``plan``) chooses
    privately, or ``None`` when it reads no ``"auto"`` setting; with ``check_bounds``, a query whose limits
    and bounds are all declared measures what they drop instead (:func:`bound_check`)."""
    grain = query.grain
    declared: TableSpec | None = None if grain is None else catalog.table(grain.name)
    limits = (False, False)
    if declared is not None and query.user_level and declared.bound_selection != "race":
        limits = (
            declared.max_rows_per_partition == "auto",
            declared.max_partitions == "auto" and bool(query.group_by),
        )
    used = {s.column for s in plan.statistics if s.column is not None and not s.kind.raw}  # not bounded:
    used |= set(plan.histogram_columns)  # COUNT(DISTINCT c) reads c as stored
    columns = tuple(sorted(c for c in used if query.value(c).spec.auto_bounds))
    if not any(limits) and not columns:
        return bound_check(query, plan) if check_bounds else None
    if plan.correlation is not None:
        raise QueryRefused(
            "the users of this table are correlated, and bounds chosen privately are not calibrated for "
            'correlated users; declare the limits and bounds instead of "auto".'
        )
    choosing = [catalog.table(t.name) for t in query.tables if catalog.table(t.name).chooses_bounds]
    owner = declared if declared is not None and declared.chooses_bounds else choosing[0]  # the grain's share
    return BoundChoice(
        plan=plan,
        limits=limits,
        columns=columns,
        integer=tuple(query.value(c).spec.type == "int" for c in columns),
        signed=tuple(_declared(catalog, query, c).auto_lower for c in columns),
        share=Fraction(str(owner.bounds_share)),
        rows_bound=declared.max_rows_bound if declared is not None else 1,
        ladders=_ladders(query, plan, limits[0], columns)
        if declared is not None and declared.bound_selection == "ladder"
        else (),
    )


#: the share of a query's epsilon ``check_bounds`` spends to measure what its declared bounds drop
CHECK_SHARE = Fraction(1, 10)


def bound_check(query: AnalyzedQuery, plan: NoisePlan) -> BoundChoice:
    """The measurement ``check_bounds=True`` asks of a query whose limits and bounds are all declared: at
    :data:`CHECK_SHARE` of its epsilon, the share of its rows (COUNT, SUM and AVG on a table of persons)
    and of each summed column's mass (a column bounded below by 0) that the declared limits drop, as a
    95% interval whose lower end holds always (:meth:`BoundChoice._measured_taus`), and the warning when
    that drop exceeds the answer's noise. The answer is released at the rest of epsilon."""
    if not query.user_level or query.grain is None:
        raise QueryRefused(
            "check_bounds measures what a person's limits drop, but each row of this query is a person."
        )
    if (
        plan.correlation is not None
        or plan.quantiles
        or any(a.function not in TOTALS for a in query.aggregates)
    ):
        raise QueryRefused(
            "check_bounds measures sums of per-person totals (COUNT, SUM and AVG of a table whose persons "
            "are independent); this query has another aggregate or correlated persons."
        )
    kappa = query.max_rows_per_partition
    summed = tuple(
        sorted(
            {
                a.column
                for a in query.aggregates
                if a.function in ("sum", "avg")
                and a.column is not None
                and (query.value(a.column).spec.lower or 0) >= 0
                and 16 * kappa * float(query.value(a.column).spec.upper or 0) < HUGE  # layers above it fit
            }
        )
    )
    return BoundChoice(
        plan=plan,
        limits=(False, False),
        columns=(),
        integer=(),
        share=CHECK_SHARE,
        rows_bound=query.grain.max_rows_bound,
        ladders=(None, *summed),
        measured=True,
    )


#: the aggregates whose statistics are sums of per-person group totals, which a ladder can truncate
TOTALS = frozenset({"count", "count_distinct_unit", "sum", "avg"})


def _ladders(
    query: AnalyzedQuery, plan: NoisePlan, kappa: bool, columns: tuple[str, ...]
) -> tuple[str | None, ...]:
    """What a user-level query truncates at thresholds chosen by ladders (:meth:`BoundChoice.truncate`):
    its rows when kappa is chosen, and each chosen column a SUM reads, when every aggregate is a count, a
    sum or an average (a variance or a quantile keeps the histograms' limits and bounds)."""
    if not query.user_level or plan.quantiles or any(a.function not in TOTALS for a in query.aggregates):
        return ()
    # an AVG keeps its column's clamping bounds (a ratio of a truncated total to a count truncated
    # differently is biased: on the visits benchmark it doubled AVG's error), and with it the query's sums
    averaged = any(a.function == "avg" for a in query.aggregates)
    summed = set() if averaged else {a.column for a in query.aggregates if a.function == "sum"}
    counted = kappa and any(a.function in ("count", "avg") for a in query.aggregates)  # what kappa bounds
    return ((None,) if counted else ()) + tuple(c for c in columns if c in summed)


def attach(table: pa.Table, chosen: ChosenBounds) -> pa.Table:
    """``table`` with the chosen bounds in its schema metadata (stored with the release)."""
    metadata = dict(table.schema.metadata or {})
    metadata[b"kakeibo.bounds"] = chosen.to_json().encode()
    return table.replace_schema_metadata(metadata)


def attached(table: pa.Table) -> ChosenBounds | None:
    """The chosen bounds :func:`attach` stored in ``table``'s metadata, if any."""
    text = (table.schema.metadata or {}).get(b"kakeibo.bounds")
    return None if text is None else ChosenBounds.from_json(text.decode())
