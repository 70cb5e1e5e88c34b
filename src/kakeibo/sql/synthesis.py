"""Synthetic tables from a session (seed 002, p. 82-85; issue 35): ``Session.synthesize("SELECT a, b FROM t",
epsilon=1, delta=1e-6, rows_per_person=2)``.

**What is measured.** The columns are read as a view reads them (:func:`.views.read_columns`: the same
refusals, and the same bins from the catalog: public values, or equal-width bins of a bounded numeric
column, one more bin for NULL), and the engine counts the rows per cell of that grid after each person is
bounded to ``rows_per_person`` rows: the view's statement (:func:`.views.cell_counts_sql`), but with each
person's kept rows a uniform choice of theirs (``ROW_NUMBER()`` over the person's rows in the engine's
``random()`` order; a view keeps the first in cell order, which would favour low bins here). The method
is fitted on that count tensor with every mechanism calibrated to ``k = rows_per_person``:

* ``"mst"`` (:func:`kakeibo.synth.mst.fit_tree`): a person's at most ``k`` bounded rows change each marginal
  by at most ``k`` in L2 and each selection utility by at most ``k``, so the fit is ``rho``-zCDP for the
  person, ``rho`` the largest that converts to the requested ``(epsilon, delta)``;
* ``"aim"`` (:func:`kakeibo.synth.aim.fit_aim`, its defaults: every 2-way marginal as the workload): a
  person's rows change each marginal by at most ``k`` and each pick's utility by at most ``k max w_r``, every
  mechanism calibrated to that; the rounds compose to exactly ``rho``-zCDP as MST's do;
* ``"pearl"`` (:class:`kakeibo.synth.PEARL`, :meth:`~kakeibo.synth.PEARL.fit_cells`, its default settings
  but the training steps, :data:`PEARL_STEPS`): the characteristic-function embedding, in which ``k`` rows
  move the released sums by at most ``k sqrt(2)``, released once by the Gaussian mechanism calibrated to
  that; a binned numeric column is an ordinal attribute (its NULL bin the last), a column of public values
  a categorical one; no class column.

**Neighbour relation**: add or remove one person. The fit is one release through
:func:`kakeibo.release.run`: one ledger entry, charged the method's loss (MST: the zCDP curve and the
``(epsilon', delta)`` it converts to, and so AIM; PEARL: the Gaussian mechanism's), with the fitted model
stored beside it (:class:`SynthesisCodec`), so the model outlives the session and a repeated request is a
free replay.

**Why no ``rows_per_person="auto"``** (as views have): a private choice by the views' rule (the rows a
bound drops, from a noisy histogram of persons by rows, against the rows the marginals' noise misplaces) was
built and measured (``benchmarks/RESULTS.md``, issue 35): on the heavy-tailed ``sales`` and ``pareto``
tables it chose 128-256 rows per person where the best bound, chosen knowing the data, was 2, with three
times its error in total-variation distance. Dropping a heavy person's rows moves a distribution far less
than the noise of a larger bound does, so rows dropped are the wrong price; ``rows_per_person=1`` (the
default) came within 3% of the best bound on all three heavy-tailed tables.

**A synthetic table** is post-processing of the model, never charged: :meth:`SynthesisModel.sample` draws
``n`` rows and turns each bin into a value:

* a column with public values: the bin's value; the last bin (NULL, or a value outside the public values)
  becomes NULL;
* an int column: an integer drawn uniformly from the bin's integers; a float column: a number drawn
  uniformly from the bin's span; the NULL bin becomes NULL. Values beyond the catalog's bounds were
  counted in the end bins, so every synthetic value lies within the bounds.

The default row count is the model's estimate of the bounded rows (the mean total of its noisy 1-way
marginals, rounded), itself post-processing.

Methods: ``"mst"`` (:mod:`kakeibo.synth.mst`), ``"aim"`` (:mod:`kakeibo.synth.aim`), ``"pearl"``
(:mod:`kakeibo.synth.pearl`).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import numpy as np
import pyarrow as pa

from ..accounting import LedgerEntry
from ..accounting.curves import MechanismLoss
from ..errors import ArgumentError
from ..noise import RandomSource
from ..privacy import Number, PrivacyLoss, as_fraction
from ..synth import aim
from ..synth.base import Model
from ..synth.mst import TreeModel, check_domain, fit_tree, mst_loss
from ..synth.pearl import PEARL, Generator
from ..synth.pgm import GraphicalModel
from .catalog import ColumnSpec, QueryRefused, TableSpec
from .plan import check_epsilon
from .view_bounds import ordinal
from .views import NOTE_KEY, Axis, check_rows_per_person

__all__ = [
    "METHODS",
    "PEARL_STEPS",
    "Synthesis",
    "SynthesisCodec",
    "SynthesisModel",
    "check_method",
    "numeric_bounds",
    "plan_synthesis",
    "synthesis_request_id",
]

#: the synthesis methods ``Session.synthesize`` takes
METHODS = ("mst", "aim", "pearl")
#: the generator's training steps of a session's PEARL fit
PEARL_STEPS = 2000
#: the arrow type of each catalog type a synthesis holds
_ARROW = {"int": pa.int64(), "float": pa.float64(), "str": pa.string()}


def check_method(method: object, axes: tuple[Axis, ...]) -> tuple[int, ...]:
    """Refuse (free) a method kakeibo does not have, and a grid MST cannot count
    (:func:`~kakeibo.synth.mst.check_domain`); the grid's sizes otherwise."""
    if method not in METHODS:
        raise QueryRefused(f"method must be one of {', '.join(map(repr, METHODS))}, got {method!r}.")
    try:
        return check_domain([axis.size for axis in axes])
    except ArgumentError as refused:
        raise QueryRefused(str(refused)) from None


def numeric_bounds(spec: ColumnSpec) -> tuple[float, float]:
    """A binned numeric column's catalog ``[lower, upper]`` (an :class:`~.views.Axis` without public values
    is made only of a bounded column)."""
    assert spec.lower is not None and spec.upper is not None
    return float(spec.lower), float(spec.upper)


class StoredModel(Model, Protocol):
    """What a fitted method's model offers a :class:`SynthesisModel`: coded rows (:class:`~kakeibo.synth.base.
    Model`), the row count it estimates, and its bytes."""

    @property
    def total(self) -> float: ...

    def to_bytes(self) -> bytes: ...


#: a method's fit of weighted cells, part of the release's draw: ``(cells, counts, source) -> model``
Fit = Callable[[np.ndarray, np.ndarray, RandomSource], StoredModel]


def plan_synthesis(
    table: TableSpec,
    axes: tuple[Axis, ...],
    method: str,
    epsilon: Number,
    delta: Number,
    rows_per_person: object,
) -> tuple[MechanismLoss, Fit]:
    """``(the charge, the method's fit)``, every refusal before the charge: the bound on each person's rows,
    epsilon in the planner's range, and a fit whose accounting or mechanisms would leave their range."""
    sizes = check_method(method, axes)
    check_rows_per_person(table, rows_per_person, auto=False)
    assert isinstance(rows_per_person, int)
    k = rows_per_person
    total = check_epsilon(as_fraction(epsilon, "epsilon"), "a synthesis' epsilon")
    try:
        if method == "mst":
            rho, loss = mst_loss(total, delta, sizes, k)
            return loss, lambda cells, counts, source: fit_tree(cells, counts, sizes, rho, k, source)
        if method == "aim":
            plan = aim.workload(sizes, None, aim.DEGREE, aim.MAX_CELLS)
            rho, loss = aim.aim_loss(total, delta, len(sizes), plan, k)
            settings = {
                "max_cells": aim.MAX_CELLS,
                "iterations": aim.ITERATIONS,
                "final_iterations": aim.FINAL_ITERATIONS,
            }
            return loss, lambda cells, counts, source: aim.fit_aim(
                cells, counts, sizes, rho, k, plan, source, **settings
            )
        flags = tuple(axis.values is None for axis in axes)
        estimator = PEARL(float(total), float(as_fraction(delta, "delta")), ordinal=flags, steps=PEARL_STEPS)
        encoding = estimator.encoding(sizes)
        estimator.check()
        mechanism = estimator.mechanism(encoding, k)
    except ArgumentError as refused:
        raise QueryRefused(str(refused)) from None
    except (ValueError, OverflowError, ZeroDivisionError):
        raise QueryRefused(
            f"a synthesis at epsilon {float(total):g}, delta {float(delta):g} needs noise beyond the range "
            "of kakeibo's exact samplers; choose epsilon and delta nearer 1."
        ) from None

    def fit(cells: np.ndarray, counts: np.ndarray, source: RandomSource) -> StoredModel:
        return estimator.fit_cells(cells, counts, encoding, mechanism, source)[1]

    assert isinstance(mechanism.ledger_loss, MechanismLoss)
    return mechanism.ledger_loss, fit


def synthesis_request_id(
    table: TableSpec, axes: tuple[Axis, ...], identity: tuple[object, ...], settings: tuple[object, ...]
) -> str:
    """The ledger request id of a synthesis: a digest of who fitted it from which data (``identity``:
    analyst, dataset, source), its table, axes and fit ``settings`` (method, epsilon, delta, rows per
    person)."""
    text = repr((identity, table, axes, settings))
    return "synth:" + hashlib.sha256(text.encode()).hexdigest()


@dataclass(frozen=True, eq=False)
class SynthesisModel:
    """A fitted synthesis with what it means: the method, the table and columns it models (their axes, and
    each numeric column's catalog bounds), the loss it was charged and the per-person bound it was fitted
    with. Sampling from it is free (module docstring)."""

    method: str
    table: str
    sql: str
    axes: tuple[Axis, ...]
    bounds: tuple[tuple[float, float] | None, ...]  # each numeric column's catalog [lower, upper]
    epsilon: float
    delta: float
    rows_per_person: int
    bounded: bool  # whether the table has a privacy unit (rows past a person's bound were dropped)
    model: StoredModel

    @property
    def rows(self) -> int:
        """The model's estimate of the bounded table's row count (free)."""
        return round(self.model.total)

    def note(self) -> str:
        """What a synthetic table stands for."""
        text = (
            f"synthetic rows of {self.table}, drawn from a model fitted by {self.method.upper()} at epsilon "
            f"{self.epsilon:g}, delta {self.delta:g}"
        )
        if self.bounded:
            k = self.rows_per_person
            text += (
                f", with each person bounded to {k} row{'s' if k != 1 else ''} (rows past a person's "
                f"{ordinal(k)} are not modelled)"
            )
        return text

    def sample(self, n: int | None = None, random_state: int | np.random.Generator | None = None) -> pa.Table:
        """``n`` synthetic rows (by default :attr:`rows`) as a table with the columns' names and types, its
        schema metadata holding :meth:`note` (post-processing: no charge)."""
        if n is None:
            n = self.rows
        if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 0:
            raise ArgumentError(f"n must be a whole number of at least 0, got {n!r}.")
        rng = np.random.default_rng(random_state)
        codes = self.model.sample(int(n), rng)
        pairs = enumerate(zip(self.axes, self.bounds, strict=True))
        columns = [_values(axis, bounds, codes[:, j], rng) for j, (axis, bounds) in pairs]
        names = [axis.name for axis in self.axes]
        return pa.table(columns, names=names).replace_schema_metadata({NOTE_KEY: self.note().encode()})

    def save(self, path: str | Path) -> None:
        """Write the model to ``path`` (:class:`SynthesisCodec`); :meth:`load` reads it back."""
        Path(path).write_bytes(SynthesisCodec().encode(self, False))

    @classmethod
    def load(cls, path: str | Path) -> SynthesisModel:
        return SynthesisCodec().decode(Path(path).read_bytes())[0]


def _values(
    axis: Axis, bounds: tuple[float, float] | None, codes: np.ndarray, rng: np.random.Generator
) -> pa.Array:
    """The values of one column's bin ``codes`` (module docstring): NULL for the last bin."""
    null = codes == axis.bins
    kind = _ARROW[axis.type]
    if axis.values is not None:
        table = pa.array([*axis.values, None], type=kind)
        return table.take(pa.array(codes))
    assert bounds is not None
    lower, upper = bounds
    low = axis.origin + codes * axis.width
    if axis.type == "int":
        first = np.maximum(np.ceil(low), lower)  # the bin's least and greatest integers within the bounds
        last = np.maximum(np.minimum(np.ceil(low + axis.width) - 1, upper), first)
        drawn = np.minimum(first + np.floor(rng.random(len(codes)) * (last - first + 1)), last)
        return pa.array(drawn.astype(np.int64), mask=null, type=kind)
    drawn = np.clip(low + rng.random(len(codes)) * axis.width, lower, upper)
    return pa.array(drawn, mask=null, type=kind)


@dataclass(frozen=True)
class Synthesis:
    """What ``Session.synthesize`` returns: the synthetic ``table``, the fitted ``model`` (sample more rows
    from it for free, save it, load it) and the release's ``privacy_loss`` and ``ledger_entry``."""

    table: pa.Table
    model: SynthesisModel
    privacy_loss: PrivacyLoss
    ledger_entry: LedgerEntry | None
    seeded: bool = False
    replayed: bool = False

    @property
    def note(self) -> str:
        return self.model.note()


#: each method's model class (its ``from_bytes``)
_MODELS: Mapping[str, Any] = {"mst": TreeModel, "aim": GraphicalModel, "pearl": Generator}


class SynthesisCodec:
    """A fitted synthesis as bytes: a JSON header line, then the model's own bytes
    (:class:`~kakeibo.synth.mst.TreeModel`, :class:`~kakeibo.synth.pgm.GraphicalModel`,
    :class:`~kakeibo.synth.pearl.Generator`)."""

    def encode(self, value: SynthesisModel, seeded: bool) -> bytes:
        header = {
            "method": value.method,
            "table": value.table,
            "sql": value.sql,
            "axes": [a.to_dict() for a in value.axes],
            "bounds": [None if b is None else list(b) for b in value.bounds],
            "epsilon": value.epsilon,
            "delta": value.delta,
            "rows_per_person": value.rows_per_person,
            "bounded": value.bounded,
            "seeded": seeded,
        }
        return json.dumps(header).encode() + b"\n" + value.model.to_bytes()

    def decode(self, payload: bytes) -> tuple[SynthesisModel, bool]:
        head, _, body = payload.partition(b"\n")
        header: Mapping[str, Any] = json.loads(head)
        stored = SynthesisModel(
            header["method"],
            header["table"],
            header["sql"],
            tuple(Axis.from_dict(a) for a in header["axes"]),
            tuple(None if b is None else (float(b[0]), float(b[1])) for b in header["bounds"]),
            float(header["epsilon"]),
            float(header["delta"]),
            int(header["rows_per_person"]),
            bool(header["bounded"]),
            _MODELS[header["method"]].from_bytes(body),
        )
        return stored, bool(header["seeded"])
