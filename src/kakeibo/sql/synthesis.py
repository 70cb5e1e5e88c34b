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
* ``"privbayes"`` (:func:`kakeibo.synth.privbayes.fit_network`, degree 2): pure ``epsilon``-DP, so
  ``delta`` must be 0 and a pure-epsilon budget can pay; ``k`` rows move the count and each marginal by at
  most ``k`` in L1 and each score by at most ``4 k``, every mechanism calibrated to that;
* ``"pearl"`` (:class:`kakeibo.synth.PEARL`, :meth:`~kakeibo.synth.PEARL.fit_cells`, its default settings
  but the training steps, :data:`PEARL_STEPS`): the characteristic-function embedding, in which ``k`` rows
  move the released sums by at most ``k sqrt(2)``, released once by the Gaussian mechanism calibrated to
  that; a binned numeric column is an ordinal attribute (its NULL bin the last), a column of public values
  a categorical one; no class column.

**Neighbour relation**: add or remove one person. The fit is one release through
:func:`kakeibo.release.run`: one ledger entry, charged the method's loss (MST: the zCDP curve and the
``(epsilon', delta)`` it converts to, and so AIM; PrivBayes: ``PureDP(epsilon)``; PEARL: the Gaussian
mechanism's), with the fitted model stored beside it (:class:`SynthesisCodec`), so the model outlives the
session and a repeated request is a free replay.

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

**Fidelity** (:class:`Fidelity`, ``Session.fidelity``): how far a synthetic table's 1-, 2- and 3-way
marginals lie from the real rows'. The distances read the real rows, so they are released only

* charged, at a stated epsilon: the engine counts the bounded rows again (the synthesis' statement: each
  person's ``k`` rows in random order), and for each order ``j`` the mean over the ``j``-way marginals ``r``
  of ``||c_r - N s_r||_1`` (``c_r`` the real counts, ``s_r`` the synthetic rows' shares, ``N`` the model's
  public row estimate) is released by the Laplace mechanism. A person's ``k`` rows move every ``c_r``, hence
  every term and the mean, by at most ``k`` in L1, so the vector of the orders' means has L1 sensitivity
  ``k m`` for ``m`` orders; pure ``epsilon``-DP, one ledger entry. Reported: each mean over ``2 N`` (the
  total-variation distance when ``N`` is the bounded row count) with its noise's standard deviation;
* or free, on a hold-out the owner declared public (a catalog table with ``public = true`` and the same
  columns): the exact mean total-variation distance against its rows, binned alike.

Methods: ``"mst"`` (:mod:`kakeibo.synth.mst`), ``"aim"`` (:mod:`kakeibo.synth.aim`), ``"privbayes"``
(:mod:`kakeibo.synth.privbayes`), ``"pearl"`` (:mod:`kakeibo.synth.pearl`).
"""

from __future__ import annotations

import hashlib
import itertools
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
from ..mechanisms import Laplace
from ..noise import RandomSource
from ..privacy import Number, PrivacyLoss, PureDP, as_fraction
from ..synth import aim, privbayes
from ..synth.base import Model
from ..synth.mst import TreeModel, check_domain, fit_tree, marginal_counts, mst_loss
from ..synth.pearl import PEARL, Generator
from ..synth.pgm import GraphicalModel
from .catalog import ColumnSpec, QueryRefused, TableSpec
from .plan import check_epsilon
from .view_bounds import ordinal
from .views import NOTE_KEY, Axis, check_rows_per_person

__all__ = [
    "FIDELITY_ORDERS",
    "METHODS",
    "PEARL_STEPS",
    "Fidelity",
    "Synthesis",
    "SynthesisCodec",
    "SynthesisModel",
    "check_method",
    "fidelity_gaps",
    "fidelity_mechanism",
    "fidelity_orders",
    "numeric_bounds",
    "plan_synthesis",
    "synthesis_request_id",
]

#: the synthesis methods ``Session.synthesize`` takes
METHODS = ("mst", "aim", "privbayes", "pearl")
#: the generator's training steps of a session's PEARL fit
PEARL_STEPS = 2000
#: the marginal orders a fidelity report measures
FIDELITY_ORDERS = (1, 2, 3)
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
) -> tuple[PrivacyLoss, Fit]:
    """``(the charge, the method's fit)``, every refusal before the charge: the bound on each person's rows,
    epsilon in the planner's range, and a fit whose accounting or mechanisms would leave their range."""
    sizes = check_method(method, axes)
    check_rows_per_person(table, rows_per_person, auto=False)
    assert isinstance(rows_per_person, int)
    k = rows_per_person
    total = check_epsilon(as_fraction(epsilon, "epsilon"), "a synthesis' epsilon")
    if method == "privbayes" and delta != 0:
        raise QueryRefused(f"PrivBayes is pure epsilon-DP: pass delta=0, got {delta!r}.")
    try:
        if method == "mst":
            rho, loss = mst_loss(total, delta, sizes, k)
            return loss, lambda cells, counts, source: fit_tree(cells, counts, sizes, rho, k, source)
        if method == "privbayes":
            privbayes.network_mechanisms(total, len(sizes), k)
            limits = {"degree": privbayes.DEGREE, "max_cells": privbayes.MAX_CELLS}
            return PureDP(total), lambda cells, counts, source: privbayes.fit_network(
                cells, counts, sizes, total, k, source, **limits
            )
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
        rng = np.random.default_rng(random_state)
        codes = self.sample_codes(n, rng)
        pairs = enumerate(zip(self.axes, self.bounds, strict=True))
        columns = [_values(axis, bounds, codes[:, j], rng) for j, (axis, bounds) in pairs]
        names = [axis.name for axis in self.axes]
        return pa.table(columns, names=names).replace_schema_metadata({NOTE_KEY: self.note().encode()})

    def sample_codes(self, n: int | None, random_state: int | np.random.Generator | None) -> np.ndarray:
        """``n`` synthetic rows (by default :attr:`rows`) as bin codes, one column per axis (free)."""
        if n is None:
            n = self.rows
        if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 0:
            raise ArgumentError(f"n must be a whole number of at least 0, got {n!r}.")
        return self.model.sample(int(n), np.random.default_rng(random_state))

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
_MODELS: Mapping[str, Any] = {
    "mst": TreeModel,
    "aim": GraphicalModel,
    "privbayes": privbayes.BayesNetwork,
    "pearl": Generator,
}


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


@dataclass(frozen=True)
class Fidelity:
    """A fidelity report (module docstring): for each marginal ``order``, the mean total-variation
    ``distance`` of the synthetic rows' ``order``-way marginals from the real rows' over ``marginals`` of
    them, and the ``deviation`` of its noise (0 against a public hold-out); ``against`` says what was
    compared; the loss and ledger entry of a charged report (``None`` for a hold-out)."""

    orders: tuple[int, ...]
    distances: tuple[float, ...]
    deviations: tuple[float, ...]
    marginals: tuple[int, ...]
    rows: int
    against: str
    privacy_loss: PrivacyLoss | None = None
    ledger_entry: LedgerEntry | None = None

    def __str__(self) -> str:
        parts = [
            f"{order}-way {distance:.3f}" + (f" (sd {deviation:.2g})" if deviation else "")
            for order, distance, deviation in zip(self.orders, self.distances, self.deviations, strict=True)
        ]
        return f"mean TVD of {self.rows} synthetic rows against {self.against}: " + ", ".join(parts)


def fidelity_orders(width: int) -> tuple[int, ...]:
    """The orders of :data:`FIDELITY_ORDERS` that ``width`` columns have."""
    return tuple(order for order in FIDELITY_ORDERS if order <= width)


def fidelity_mechanism(epsilon: Number, rows_per_person: int, orders: int) -> Laplace:
    """The Laplace mechanism of a charged report: the vector of ``orders`` means at L1 sensitivity
    ``rows_per_person * orders`` (module docstring). Refused (free) for an epsilon out of range."""
    total = check_epsilon(as_fraction(epsilon, "epsilon"), "a fidelity report's epsilon")
    return Laplace(sensitivity=rows_per_person * orders, epsilon=total, coordinates=orders)


def fidelity_gaps(
    cells: np.ndarray, counts: np.ndarray, codes: np.ndarray, sizes: tuple[int, ...], scale: float | None
) -> tuple[list[float], list[int]]:
    """For each order of :func:`fidelity_orders`: the mean over its marginals of ``||c_r - scale s_r||_1``
    (``scale`` given: the charged report's statistic) or of the total-variation distance ``||c_r / n -
    s_r||_1 / 2`` (``scale`` ``None``: against a hold-out of ``n`` rows), and how many marginals each covers.
    ``cells``/``counts``: the real rows' count tensor; ``codes``: the synthetic rows."""
    real_total = float(counts.sum())
    synthetic = np.ones(len(codes), dtype=np.int64)
    means, numbers = [], []
    for order in fidelity_orders(len(sizes)):
        gaps = []
        for columns in itertools.combinations(range(len(sizes)), order):
            real = marginal_counts(cells, counts, sizes, columns).ravel().astype(float)
            share = marginal_counts(codes, synthetic, sizes, columns).ravel() / max(len(codes), 1)
            if scale is None:
                gaps.append(float(np.abs(real / max(real_total, 1.0) - share).sum()) / 2)
            else:
                gaps.append(float(np.abs(real - scale * share).sum()))
        means.append(float(np.mean(gaps)))
        numbers.append(len(gaps))
    return means, numbers
