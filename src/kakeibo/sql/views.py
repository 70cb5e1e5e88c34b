"""Views: a table's columns discretised, released once as an HDPView (:mod:`kakeibo.views.hdpview`) and then
queried without further charge (seed 002, slides 54-59: "unlimited queries" from a DP intermediate).

``Session.create_view("v", "SELECT age, region FROM people", epsilon=1)`` reads the catalog to cut each
column into bins (an :class:`Axis`):

* a column with ``public_values``: one bin per value, and one more for every other value and NULL;
* a bounded int or float column: ``bins`` equal-width bins over ``[lower, upper]`` (the catalog's
  ``bins``, else ``create_view(bins=...)``, else :data:`DEFAULT_BINS`; an int column never gets more bins
  than values), values beyond the bounds clamped into the end bins (NaN, ordered above every number by
  the engines, into the top one), and one more bin for NULL.

The engine counts the rows per cell of that grid (:func:`cell_counts_sql`) after bounding each person to
``rows_per_person`` rows (``ROW_NUMBER()`` over the person's rows in cell order: a function of that person's
rows only). Neighbour relation: add or remove one person; the person changes at most ``rows_per_person``
counts by 1 each, so the view is built at ``epsilon / rows_per_person`` (group privacy over the row-level
guarantee of :func:`~kakeibo.views.hdpview.build`) and is ``epsilon``-DP for the person. The release goes
through :func:`kakeibo.release.run` like every other: one ledger entry, with the view stored beside it
(:class:`ViewCodec`), so the view outlives the session and a repeated ``create_view`` is a free replay.

Refused before any read (issue 29): a table whose persons are correlated (the build's noise is calibrated
for independent persons, where seed 001's eq. 26 needs ``1 + l*`` times more; ask COUNT, SUM or AVG of the
table instead), ``date`` and ``bool`` columns (the bins and the stored axes hold numbers and text), and an
epsilon the build's mechanisms cannot be drawn at (:func:`check_view_epsilon`).

A query over a view (:func:`answer`) is post-processing of that release, so it is never charged:
``SELECT [g, ...] COUNT(*) FROM v [WHERE ...] [GROUP BY g, ...]`` with conditions joined by AND, each a
comparison of a view column with a literal (``=``, ``<``, ``<=``, ``>``, ``>=``, ``BETWEEN``, ``IN``;
``=`` and ``IN`` on a column with public values, never ``=`` on a float). Each condition becomes an
interval of the column's bin coordinates (bin ``i`` spans ``[i, i + 1)``; an int column's values are
taken to fill ``[v - 1/2, v + 1/2)``), and the answer is the view's count over the product of the
intervals (a block's count spread evenly over it). Every count carries a 95% interval for the noise of
the view (:meth:`~kakeibo.views.hdpview.View.error_bounds`): it covers the count the same blocks hold
without noise; spreading a block's count evenly has an error the view cannot know.

A free answer's work is bounded before it starts (issue 29, R4): a query asks for at most
:data:`MAX_GROUPS` groups, and the work of its answer, counted from the query text and the view's public
structure (axes and blocks, never a timing) by :func:`answer_work`, is at most :data:`WORK_BUDGET`; beyond
either it is refused, free. A build is bounded like a statement, by the backend's ``statement_timeout``
(:func:`build_view`).
"""

from __future__ import annotations

import hashlib
import io
import json
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from fractions import Fraction
from itertools import product
from time import monotonic
from typing import Any

import numpy as np
import pyarrow as pa
import sqlglot
from numpy.typing import NDArray
from sqlglot import exp

from ..accounting import Ledger, LedgerEntry
from ..errors import ArgumentTypeError, StatementTimeout
from ..mechanisms import Laplace
from ..privacy import PrivacyLoss
from ..views.hdpview import CHERNOFF_POINTS, Calibration, HDPViewParameters, View, build
from .catalog import Catalog, ColumnSpec, QueryRefused, TableSpec
from .plan import check_epsilon, refused_when_out_of_range
from .view_bounds import (
    CHOICE_SHARE,
    RowsChoice,
    candidates,
    choose,
    dropped_interval,
    estimate_deviation,
    histogram_counts,
    histogram_sql,
    ordinal,
)

__all__ = [
    "DEFAULT_BINS",
    "NOTE_KEY",
    "Axis",
    "RowsBound",
    "StoredView",
    "ViewCodec",
    "ViewQuery",
    "ViewRelease",
    "answer",
    "answer_work",
    "build_view",
    "cell_counts",
    "cell_counts_sql",
    "check_rows_per_person",
    "check_view_epsilon",
    "over_table",
    "parse_view_definition",
    "read_columns",
    "read_view_query",
    "rows_bound",
    "stored_views",
    "view_name",
    "view_request_id",
]

#: bins of a bounded numeric column when neither the catalog nor ``create_view`` says
DEFAULT_BINS = 32
#: the confidence of the intervals a view's answers carry
VIEW_CONFIDENCE = 0.95
#: the most groups one query over a view may ask for (its answer has a row per group)
MAX_GROUPS = 4096
#: the most work one free answer may take, in evaluations of (an interval, a block) or (a point of the noise
#: bound's Chernoff search, a block) (:func:`answer_work`); each takes 20 to 100 ns, so an answer within the
#: budget takes a core for about a second at most (issue 29, R4: 15-36 s at 8,192 boxes before)
WORK_BUDGET = 2**23
#: the most (interval, block) overlaps held in memory at once
OVERLAPS_AT_ONCE = 2**22
#: the schema metadata key of an answer's note: what it counts beyond its table (:meth:`StoredView.note`)
NOTE_KEY = b"kakeibo.note"


@dataclass(frozen=True)
class Axis:
    """One view column: its bins (the last one for NULL and, with public values, every other value)."""

    name: str
    type: str
    values: tuple[Any, ...] | None = None  # public values: bin i holds values[i]
    origin: float = 0.0  # numeric: bin i spans [origin + i width, origin + (i + 1) width)
    width: float = 1.0
    bins: int = 1  # numeric: bins of values (public values: len(values))

    @property
    def size(self) -> int:
        """Bins of the view's domain along this column, the NULL / other bin included."""
        return self.bins + 1

    @classmethod
    def of(cls, spec: ColumnSpec, bins: int | None, noun: str = "a view") -> Axis:
        if spec.type not in ("int", "float", "str"):  # bin_sql and the stored axes hold numbers and text
            raise QueryRefused(
                f"{noun} holds int, float and str columns; {spec.name!r} is a {spec.type} column."
            )
        if spec.public_values is not None:
            return cls(spec.name, spec.type, values=spec.public_values, bins=len(spec.public_values))
        if not spec.bounded or spec.type not in ("int", "float"):
            raise QueryRefused(
                f"{noun} needs the bins of column {spec.name!r}: declare its public_values, or numeric lower "
                "and upper bounds."
            )
        assert spec.lower is not None and spec.upper is not None
        wanted = spec.bins or bins or DEFAULT_BINS
        if spec.type == "int":
            span, origin = spec.upper - spec.lower + 1, spec.lower - 0.5
            count = min(wanted, int(span))
        else:
            span, origin = spec.upper - spec.lower, spec.lower
            count = wanted if span > 0 else 1
        return cls(spec.name, spec.type, origin=origin, width=(span / count) if span > 0 else 1.0, bins=count)

    def bin_sql(self, column: str) -> str:
        """The engine expression of a row's bin: total (every value, NULL and NaN too, lands in a bin)."""
        if self.values is not None:
            cases = " ".join(f"WHEN {column} = {_literal(v)} THEN {i}" for i, v in enumerate(self.values))
            return f"CASE {cases} ELSE {self.bins} END"
        top = self.bins - 1
        if top == 0:
            return f"CASE WHEN {column} IS NULL THEN 1 ELSE 0 END"
        first, last = _double(self.origin + self.width), _double(self.origin + top * self.width)
        scaled = f"FLOOR((CAST({column} AS DOUBLE) - {_double(self.origin)}) / {_double(self.width)})"
        inner = f"LEAST({top}, GREATEST(0, CAST({scaled} AS BIGINT)))"
        return (
            f"CASE WHEN {column} IS NULL THEN {self.bins} WHEN {column} < {first} THEN 0 "
            f"WHEN {column} >= {last} THEN {top} ELSE {inner} END"
        )

    def position(self, value: float) -> float:
        """A real value's place in bin coordinates, clamped to the value bins ``[0, bins]``."""
        return min(max((value - self.origin) / self.width, 0.0), float(self.bins))

    def key(self, index: int) -> Any:
        """The group key of bin ``index``: the public value, or the bin's least value."""
        if self.values is not None:
            return self.values[index]
        low = self.origin + index * self.width
        return math.ceil(low) if self.type == "int" else low

    def to_dict(self) -> dict[str, Any]:
        return {**self.__dict__, "values": None if self.values is None else list(self.values)}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Axis:
        values = data.get("values")
        return cls(**{**data, "values": None if values is None else tuple(values)})


def _double(value: float) -> str:
    return f"CAST('{float(value)!r}' AS DOUBLE)"


def _literal(value: Any) -> str:
    if isinstance(value, str):
        return exp.Literal.string(value).sql(dialect="duckdb")
    return repr(int(value)) if isinstance(value, (int, np.integer)) else _double(value)


@dataclass(frozen=True)
class ViewDefinition:
    """``SELECT a, b, ... FROM t``, read against the catalog."""

    name: str
    table: TableSpec
    axes: tuple[Axis, ...]
    sql: str  # normalised

    @property
    def label(self) -> str:
        return f"CREATE VIEW {self.name} AS {self.sql}"


def parse_view_definition(
    name: str, query: str, catalog: Catalog, bins: Mapping[str, int] | None = None
) -> ViewDefinition:
    """Read ``query`` (``SELECT col, ... FROM table``) into the view's axes; refuse anything else."""
    if not isinstance(name, str) or not name.isidentifier():
        raise QueryRefused(f"a view's name must be an identifier, got {name!r}.")
    if name.lower() in {t.lower() for t in catalog.tables}:
        raise QueryRefused(f"a view cannot take the name of the catalog's table {name!r}.")
    table, axes, sql = read_columns(query, catalog, bins, "a view")
    return ViewDefinition(name, table, axes, sql)


def read_columns(
    query: str, catalog: Catalog, bins: Mapping[str, int] | None, noun: str
) -> tuple[TableSpec, tuple[Axis, ...], str]:
    """``SELECT col, ... FROM table`` read against the catalog: the table, an :class:`Axis` per column and
    the normalised statement; anything else is refused with a sentence about ``noun`` (what is being built
    from the columns: ``"a view"``, ``"a synthesis"``)."""
    shape = f"{noun} is defined by SELECT col, ... FROM table"
    try:
        tree = sqlglot.parse_one(query, read="duckdb")
    except (sqlglot.errors.SqlglotError, ValueError, IndexError):  # sqlglot's tokenizer raises them all
        raise QueryRefused(f"{shape}; this is not SQL kakeibo reads.") from None
    tables = list(tree.find_all(exp.Table)) if isinstance(tree, exp.Select) else []
    plain = isinstance(tree, exp.Select) and all(isinstance(e, exp.Column) for e in tree.expressions)
    extras = [
        key
        for key in ("where", "group", "having", "order", "limit", "joins", "distinct")
        if tree.args.get(key)
    ]
    if not plain or len(tables) != 1 or extras:
        raise QueryRefused(f"{shape}: plain columns of one table, no other clause.")
    table = catalog.table(tables[0].name)
    if table.public or table.references:
        raise QueryRefused(
            f"{noun} reads one sensitive table without references; {table.name!r} is "
            f"{'public' if table.public else 'joined to its persons through references'}."
        )
    if table.correlation is not None:
        raise QueryRefused(
            f"the persons of table {table.name} are correlated and the noise of {noun} is calibrated for "
            "independent persons, so it is not built on that table; ask COUNT, SUM or AVG of the table with "
            "sql() instead, which are calibrated to the correlation."
        )
    names = [column.name.lower() for column in tree.expressions]
    if len(set(names)) != len(names):
        raise QueryRefused(f"{noun} lists each column once.")
    wanted = {k.lower(): v for k, v in (bins or {}).items()}
    unknown = sorted(set(wanted) - set(names))
    if unknown:
        raise QueryRefused(f"bins= names columns {noun} does not have: {', '.join(unknown)}.")
    axes = []
    for column in names:
        spec = table.columns.get(column)
        if spec is None or column == table.privacy_unit:
            raise QueryRefused(f"{table.name}.{column} is not a column {noun} can hold.")
        axes.append(Axis.of(spec, wanted.get(column), noun))
    return table, tuple(axes), f"SELECT {', '.join(names)} FROM {table.name}"


def view_request_id(
    definition: ViewDefinition, identity: tuple[object, ...], settings: tuple[object, ...]
) -> str:
    """The ledger request id of a view: a digest of who built it from which data (``identity``: analyst,
    dataset, source), its name, definition, axes and build ``settings``."""
    text = repr((identity, definition.name, definition.sql, definition.axes, definition.table, settings))
    return "view:" + hashlib.sha256(text.encode()).hexdigest()


def stored_views(
    ledger: Ledger, analyst: str | None, source: str
) -> dict[str, tuple[StoredView, LedgerEntry]]:
    """The views the ledger stores for ``analyst`` over ``source``, by name (the latest of a name wins; a
    session refuses to create a second)."""
    found: dict[str, tuple[StoredView, LedgerEntry]] = {}
    codec = ViewCodec()
    for entry in ledger.entries(analyst=analyst):
        if not (entry.request_id or "").startswith("view:"):
            continue
        payload = ledger.stored_release(entry.request_id or "")
        if payload is None:
            continue
        stored, _ = codec.decode(payload)
        if stored.source == source:
            found[stored.name] = (stored, entry)
    return found


def cell_counts_sql(
    table: TableSpec, axes: tuple[Axis, ...], rows_per_person: int, *, random_order: bool = False
) -> str:
    """The engine statement (DuckDB's dialect) of the count tensor of ``table``'s columns binned by ``axes``:
    the non-zero cells and their counts, after each person is bounded to ``rows_per_person`` rows: the
    person's first rows in cell order (a view: the same counts on every engine), or with ``random_order``
    in the engine's ``random()`` order (a synthesis: the kept rows are a uniform choice of the person's, so
    the bound does not favour low bins). Either order is a function of the person's rows and of randomness
    independent of the data, so each person adds at most ``rows_per_person`` to the counts."""
    name = table.engine_name()
    bins = [axis.bin_sql(exp.to_identifier(axis.name, quoted=True).sql("duckdb")) for axis in axes]
    cells = ", ".join(f"{b} AS __c{i}" for i, b in enumerate(bins))
    keys = ", ".join(f"__c{i}" for i in range(len(bins)))
    unit = table.privacy_unit
    if unit is None:
        return f"SELECT {keys}, COUNT(*) AS __n FROM (SELECT {cells} FROM {name}) AS __b GROUP BY {keys}"
    person = exp.to_identifier(unit, quoted=True).sql("duckdb")
    order, drawn = ("__o", ", random() AS __o") if random_order else (keys, "")
    return (
        f"SELECT {keys}, COUNT(*) AS __n FROM (SELECT {keys}, ROW_NUMBER() OVER (PARTITION BY __u ORDER BY "
        f"{order}) AS __r FROM (SELECT {person} AS __u, {cells}{drawn} FROM {name} WHERE {person} IS NOT "
        f"NULL) AS __b) AS __k WHERE __r <= {int(rows_per_person)} GROUP BY {keys}"
    )


def cell_counts(counts: pa.Table, width: int) -> tuple[NDArray[np.int64], NDArray[np.int64]]:
    """The rows of :func:`cell_counts_sql` as ``(cells, counts)``: one row of ``width`` bin codes per
    non-zero cell, and its count."""
    cells = np.zeros((counts.num_rows, width), np.int64)
    for i in range(width):
        cells[:, i] = counts.column(f"__c{i}").to_numpy(zero_copy_only=False)
    return cells, np.asarray(counts.column("__n").to_numpy(zero_copy_only=False), np.int64)


def check_view_epsilon(
    definition: ViewDefinition,
    epsilon: Fraction,
    rows_per_person: int,
    parameters: HDPViewParameters | None,
) -> None:
    """Refuse, before the draw, a view whose build would fail: the charged ``epsilon`` must satisfy the
    planner's rule (:func:`~kakeibo.sql.plan.check_epsilon`), and every mechanism of the build at ``epsilon /
    rows_per_person`` over the view's domain (:class:`~kakeibo.views.hdpview.Calibration`, which depends on
    the axes only) must be within the exact samplers' range (issue 29, R9: ``epsilon=1e-30`` used to pass
    these checks and fail inside the draw, charged)."""
    check_epsilon(epsilon, "a view's epsilon")
    volume = float(np.prod(np.array([axis.size for axis in definition.axes], np.float64)))
    with refused_when_out_of_range():
        Calibration.of(
            _build_epsilon(float(epsilon), rows_per_person), volume, parameters or HDPViewParameters()
        )


def _build_epsilon(epsilon: float, rows_per_person: int) -> float:
    """The epsilon the view is built at: group privacy over ``rows_per_person`` rows (module docstring)."""
    return epsilon / rows_per_person


@dataclass(frozen=True)
class RowsBound:
    """How a view bounds each person's rows: the whole number given (``histogram`` is ``None``), or
    ``"auto"`` (:mod:`.view_bounds`): the histogram's mechanism, the candidates ``ks`` and the noise cost
    of each. ``epsilon`` is the view's own: the charge less the choice's."""

    given: int | None
    epsilon: Fraction
    top: int = 0
    histogram: Laplace | None = None
    ks: tuple[int, ...] = ()
    costs: tuple[float, ...] = ()

    @property
    def setting(self) -> object:
        """What the request id holds of it: the number, or ``"auto"`` with its share and top."""
        return self.given if self.given is not None else ("auto", str(CHOICE_SHARE), self.top)

    def choose(
        self, table: TableSpec, execute: Callable[[str], pa.Table], rng: Any
    ) -> tuple[int, RowsChoice | None]:
        """The rows per person of the view, and how it was chosen when it was (part of the release's draw:
        the histogram is read and its noise drawn here)."""
        if self.histogram is None:
            assert self.given is not None
            return self.given, None
        counts = histogram_counts(execute(histogram_sql(table, self.top)), self.top)
        noisy = np.asarray(self.histogram.release(counts, rng=rng), np.float64)
        k = self.ks[int(choose(noisy, self.ks, self.costs, self.top))]
        low, estimate, high = dropped_interval(noisy, k, self.top, self.histogram)
        deviation = estimate_deviation(k, self.top, self.histogram)
        return k, RowsChoice(k, self.histogram.epsilon, self.top, estimate, low, high, deviation=deviation)


def rows_bound(
    definition: ViewDefinition,
    epsilon: Fraction,
    rows_per_person: object,
    parameters: HDPViewParameters | None,
) -> RowsBound:
    """``rows_per_person`` checked against the view's table (a whole number of at least 1, or ``"auto"``
    where the table has a privacy unit; a person table's is 1) and the charged ``epsilon`` with it, all
    before any read (:func:`check_view_epsilon`). ``"auto"`` keeps the candidates the view can be built at
    (a test of public inputs only) and costs each by the noise of the view's total count when every cell
    is a block (:mod:`.view_bounds`)."""
    table = definition.table
    check_rows_per_person(table, rows_per_person, auto=True)
    if isinstance(rows_per_person, int):
        check_view_epsilon(definition, epsilon, rows_per_person, parameters)
        return RowsBound(rows_per_person, epsilon)
    check_epsilon(epsilon, "a view's epsilon")
    share = check_epsilon(epsilon * CHOICE_SHARE, "the epsilon of the choice of rows_per_person")
    with refused_when_out_of_range():
        histogram = Laplace(sensitivity=1, epsilon=share, coordinates=1)
    own = epsilon - share
    ks = [k for k in candidates(table.max_rows_bound) if _buildable(definition, own, k, parameters)]
    if not ks:
        check_view_epsilon(definition, own, 1, parameters)  # refuses, saying why
    volume = float(np.prod(np.array([axis.size for axis in definition.axes], np.float64)))
    scale = Calibration.of(float(own), volume, parameters or HDPViewParameters()).perturb.scale
    costs = tuple(math.sqrt(2 * volume) * scale * k for k in ks)
    return RowsBound(None, own, table.max_rows_bound, histogram, tuple(ks), costs)


def check_rows_per_person(table: TableSpec, rows_per_person: object, *, auto: bool) -> None:
    """Refuse (free) a ``rows_per_person`` that is not a whole number of at least 1 (or ``"auto"``, where
    ``auto`` allows it), and any but 1 for a table without a privacy unit (each row is a person)."""
    wanted = 'a whole number of at least 1 or "auto"' if auto else "a whole number of at least 1"
    if isinstance(rows_per_person, bool) or not isinstance(rows_per_person, (int, str)):
        raise ArgumentTypeError(f"rows_per_person is {wanted}, got {rows_per_person!r}.")
    if not (auto and rows_per_person == "auto") and not (
        isinstance(rows_per_person, int) and rows_per_person >= 1
    ):
        raise QueryRefused(f"rows_per_person must be {wanted}, got {rows_per_person!r}.")
    if table.privacy_unit is None and rows_per_person != 1:
        raise QueryRefused(f"each row of {table.name} is a person: rows_per_person must be 1.")


def _buildable(
    definition: ViewDefinition, epsilon: Fraction, k: int, parameters: HDPViewParameters | None
) -> bool:
    """Whether the view can be built at ``epsilon / k`` (:func:`check_view_epsilon` does not refuse it)."""
    try:
        check_view_epsilon(definition, epsilon, k, parameters)
    except QueryRefused:
        return False
    return True


def build_view(
    definition: ViewDefinition,
    counts: pa.Table,
    *,
    epsilon: float,
    rows_per_person: int,
    source: str,
    parameters: HDPViewParameters | None,
    rng: Any,
    timeout: float | None = None,
    choice: RowsChoice | None = None,
) -> StoredView:
    """The view of the engine's count tensor (rows of :func:`cell_counts_sql`), built at ``epsilon /
    rows_per_person`` (module docstring); with ``choice`` (``rows_per_person`` chosen privately,
    :mod:`.view_bounds`), at ``(epsilon - choice.epsilon) / rows_per_person``.

    ``timeout`` (seconds; ``None``: no limit) bounds the build as a backend's ``statement_timeout`` bounds a
    statement: past it, :class:`~kakeibo.errors.StatementTimeout` stops the build (issue 29, R4: builds ran
    for more than five minutes, since how many blocks HDPView cuts depends on the data). The build is part of
    the release's draw, so a build stopped there is charged like any answer (:mod:`kakeibo.release`)."""
    cells, totals = cell_counts(counts, len(definition.axes))
    view = build(
        cells,
        totals,
        tuple(axis.size for axis in definition.axes),
        epsilon=_build_epsilon(epsilon - (0.0 if choice is None else choice.epsilon), rows_per_person),
        parameters=parameters,
        rng=rng,
        check=None if timeout is None else _deadline(timeout),
    )
    return StoredView(
        definition.name,
        definition.table.name,
        definition.sql,
        definition.axes,
        float(epsilon),
        rows_per_person,
        source,
        view,
        bounded=definition.table.privacy_unit is not None,
        choice=choice,
    )


def _deadline(timeout: float) -> Callable[[], None]:
    """A check that raises :class:`~kakeibo.errors.StatementTimeout` once ``timeout`` seconds have passed."""
    deadline = monotonic() + timeout

    def check() -> None:
        if monotonic() > deadline:
            raise StatementTimeout(timeout)

    return check


@dataclass(frozen=True)
class StoredView:
    """A built view with what it means: its definition's axes, the table and the loss it was charged."""

    name: str
    table: str
    sql: str
    axes: tuple[Axis, ...]
    epsilon: float
    rows_per_person: int
    source: str  # the data it was built from (a session answers from views of its own source only)
    view: View
    # whether the table has a privacy unit, so that rows past a person's rows_per_person are dropped (a view
    # stored before this was recorded reads True: for a person table, whose persons have one row each, the
    # sentence it adds is still true)
    bounded: bool = True
    choice: RowsChoice | None = None  # how rows_per_person was chosen, when "auto" chose it

    def describe(self) -> str:
        columns = ", ".join(f"{a.name} ({a.bins} bins)" for a in self.axes)
        text = f"view {self.name} over {self.table}: {columns}; {self.view.blocks} blocks, built at epsilon "
        text += f"{self.epsilon:g}"
        note = self.note()
        return text if note is None else f"{text}; {note}"

    def note(self) -> str | None:
        """What every answer from the view counts, when it is not the whole table: the rows of each person
        up to ``rows_per_person`` (and how that bound was chosen, with what it drops). ``None`` for a table
        without a privacy unit, each of whose rows is a person."""
        if not self.bounded:
            return None
        k = self.rows_per_person
        text = (
            f"counts of the view {self.name}, built from table {self.table} with each person bounded to {k} "
            f"row{'s' if k != 1 else ''}: rows past a person's {ordinal(k)} are not counted (the intervals "
            "cover the bounded counts only)"
        )
        return text if self.choice is None else f"{text}; {self.choice.describe()}"

    def axis(self, column: str) -> Axis | None:
        found = [a for a in self.axes if a.name == column.lower()]
        return found[0] if found else None


@dataclass(frozen=True)
class ViewRelease:
    """What ``Session.create_view`` returns: the view, read like every release (``privacy_loss``,
    ``ledger_entry``, ``confidence`` of the intervals its answers carry)."""

    view: StoredView
    privacy_loss: PrivacyLoss
    ledger_entry: LedgerEntry | None
    seeded: bool = False
    confidence: float = VIEW_CONFIDENCE


class ViewCodec:
    """A stored view as bytes: a JSON header line, then the blocks and totals as a NumPy archive."""

    def encode(self, value: StoredView, seeded: bool) -> bytes:
        noise = value.view.noise
        header = {
            "name": value.name,
            "table": value.table,
            "sql": value.sql,
            "axes": [a.to_dict() for a in value.axes],
            "epsilon": value.epsilon,
            "rows_per_person": value.rows_per_person,
            "source": value.source,
            "bounded": value.bounded,
            "choice": None if value.choice is None else value.choice.to_dict(),
            "view_epsilon": value.view.epsilon,
            "noise": [str(noise.sensitivity), repr(noise.epsilon)],
            "seeded": seeded,
        }
        arrays = io.BytesIO()
        np.savez(arrays, lows=value.view.lows, highs=value.view.highs, totals=value.view.totals)
        return json.dumps(header).encode() + b"\n" + arrays.getvalue()

    def decode(self, payload: bytes) -> tuple[StoredView, bool]:
        head, _, body = payload.partition(b"\n")
        header = json.loads(head)
        arrays = np.load(io.BytesIO(body))
        axes = tuple(Axis.from_dict(a) for a in header["axes"])
        view = View(
            sizes=tuple(a.size for a in axes),
            lows=arrays["lows"],
            highs=arrays["highs"],
            totals=arrays["totals"],
            noise=Laplace(
                sensitivity=float(header["noise"][0]), epsilon=float(header["noise"][1]), coordinates=1
            ),
            epsilon=float(header["view_epsilon"]),
        )
        stored = StoredView(
            header["name"],
            header["table"],
            header["sql"],
            axes,
            header["epsilon"],
            header["rows_per_person"],
            header["source"],
            view,
            bounded=bool(header.get("bounded", True)),  # a view stored before it was recorded: True
            choice=None if header.get("choice") is None else RowsChoice.from_dict(header["choice"]),
        )
        return stored, bool(header["seeded"])


# --- queries over a view ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class ViewQuery:
    """``SELECT [g, ...] COUNT(*) [AS alias] FROM v [WHERE ...] [GROUP BY g, ...]`` read against a view:
    per column, the intervals (of bin coordinates) its conditions allow."""

    view: StoredView
    groups: tuple[str, ...]
    alias: str
    intervals: dict[str, list[tuple[float, float]]]


def over_table(query: str, view: StoredView) -> str:
    """``query`` with the view's table in place of the view (what ``outside_view="charge"`` runs)."""
    tree = sqlglot.parse_one(query, read="duckdb")
    for table in tree.find_all(exp.Table):
        table.set("this", exp.to_identifier(view.table))
    return tree.sql(dialect="duckdb")


def view_name(query: str) -> str | None:
    """The single table a query reads, when it parses (the session checks whether it names a view)."""
    if not isinstance(query, str):
        raise ArgumentTypeError(f"a query is SQL text (str), got {type(query).__name__}.")
    try:
        tree = sqlglot.parse_one(query, read="duckdb")
    except (sqlglot.errors.SqlglotError, ValueError, IndexError):  # the analyser says what is wrong with it
        return None
    tables = list(tree.find_all(exp.Table)) if isinstance(tree, exp.Select) else []
    return tables[0].name.lower() if len(tables) == 1 else None


def read_view_query(query: str, view: StoredView) -> ViewQuery:
    """Read ``query`` against ``view``; :class:`QueryRefused` says what a view cannot answer."""
    tree = sqlglot.parse_one(query, read="duckdb")
    assert isinstance(tree, exp.Select)
    extras = [k for k in ("having", "order", "limit", "joins", "distinct", "qualify") if tree.args.get(k)]
    if extras:
        raise QueryRefused(f"a view answers COUNT(*) with WHERE and GROUP BY only, not {extras[0].upper()}.")
    group_by = tree.args.get("group")
    groups = tuple(dict.fromkeys(_view_column(view, e) for e in (group_by.expressions if group_by else [])))
    counts, keys = [], []
    for item in tree.expressions:
        inner = item.this if isinstance(item, exp.Alias) else item
        if (
            isinstance(inner, exp.Count)
            and isinstance(inner.this, exp.Star | exp.Literal)
            and not inner.args.get("distinct")
        ):
            counts.append(item.alias_or_name if isinstance(item, exp.Alias) else "count")
        elif isinstance(inner, exp.Column):
            keys.append(_view_column(view, inner))
        else:
            raise QueryRefused(f"a view answers COUNT(*) and its own columns, not {inner.sql()}.")
    if len(counts) != 1 or sorted(keys) != sorted(groups):
        raise QueryRefused(
            "a view answers one COUNT(*) per query, with the GROUP BY columns selected beside it."
        )
    intervals: dict[str, list[tuple[float, float]]] = {}
    where = tree.args.get("where")
    for condition in _conjuncts(where.this) if where else []:
        column, allowed = _condition(view, condition)
        previous = intervals.get(column, [(0.0, float(view.axis(column).bins))])  # type: ignore[union-attr]
        intervals[column] = _intersect(previous, allowed)
    groups_count = math.prod([a.bins for a in view.axes if a.name in groups])
    if groups_count > MAX_GROUPS:
        raise QueryRefused(
            f"a view answers at most {MAX_GROUPS} groups per query and this one asks for {groups_count}: "
            "group by fewer columns."
        )
    read = ViewQuery(view, groups, counts[0], intervals)
    if answer_work(read) > WORK_BUDGET:
        raise QueryRefused(
            f"answering this query from view {view.name} would take more than the {WORK_BUDGET} block "
            "evaluations one free answer may take: group by fewer columns or list fewer values."
        )
    return read


def _view_column(view: StoredView, node: exp.Expression) -> str:
    if not isinstance(node, exp.Column) or view.axis(node.name) is None:
        raise QueryRefused(
            f"view {view.name} has no column {node.sql()}; its columns are "
            f"{', '.join(a.name for a in view.axes)}."
        )
    return node.name.lower()


def _conjuncts(node: Any) -> list[exp.Expression]:
    if isinstance(node, exp.Paren):
        return _conjuncts(node.this)
    if isinstance(node, exp.And):
        return _conjuncts(node.left) + _conjuncts(node.right)
    return [node]


def _number(node: exp.Expression) -> float:
    negative = isinstance(node, exp.Neg)
    literal = node.this if negative else node
    if not isinstance(literal, exp.Literal) or literal.is_string:
        raise QueryRefused(f"a view compares its columns with literals only, not {node.sql()}.")
    value = float(literal.this)
    if not math.isfinite(value):
        raise QueryRefused(f"{node.sql()} is not a finite number.")
    return -value if negative else value


_FLIPPED: dict[type[exp.Binary], type[exp.Binary]] = {
    exp.LT: exp.GT,
    exp.LTE: exp.GTE,
    exp.GT: exp.LT,
    exp.GTE: exp.LTE,
    exp.EQ: exp.EQ,
}


def _condition(view: StoredView, node: exp.Expression) -> tuple[str, list[tuple[float, float]]]:
    """The column a condition constrains and the intervals of bin coordinates it keeps."""
    if isinstance(node, exp.Between):
        column = _view_column(view, node.this)
        low = _side(view, column, exp.GTE, node.args["low"])
        high = _side(view, column, exp.LTE, node.args["high"])
        return column, _intersect(low, high)
    if isinstance(node, exp.In) and not node.args.get("query"):
        column = _view_column(view, node.this)
        return column, _union([i for value in node.expressions for i in _side(view, column, exp.EQ, value)])
    if isinstance(node, exp.Binary) and type(node) in _FLIPPED:
        kind, left, right = type(node), node.left, node.right
        if isinstance(left, exp.Column):
            return left.name.lower(), _side(view, _view_column(view, left), kind, right)
        if isinstance(right, exp.Column):
            return right.name.lower(), _side(view, _view_column(view, right), _FLIPPED[kind], left)
    raise QueryRefused(
        "a view's WHERE joins comparisons of its columns with literals by AND (=, <, <=, >, >=, BETWEEN, "
        f"IN); {node.sql()} is not one."
    )


def _side(view: StoredView, column: str, kind: type[exp.Binary], literal: Any) -> list[tuple[float, float]]:
    """The bin-coordinate intervals of ``column <kind> literal``."""
    axis = view.axis(column)
    assert axis is not None
    if axis.values is not None:
        if kind is not exp.EQ:
            raise QueryRefused(
                f"column {column} of view {view.name} has public values: compare it with = or IN."
            )
        value: Any = (
            literal.this if isinstance(literal, exp.Literal) and literal.is_string else _number(literal)
        )
        matches = [i for i, v in enumerate(axis.values) if v == value]
        if not matches:
            raise QueryRefused(f"{literal.sql()} is not among the public values of {view.name}.{column}.")
        return [(float(matches[0]), float(matches[0] + 1))]
    value = _number(literal)
    if axis.type == "int":
        edges: dict[type[exp.Binary], tuple[float | None, float | None]] = {
            exp.LT: (None, math.ceil(value) - 0.5),
            exp.LTE: (None, math.floor(value) + 0.5),
            exp.GT: (math.floor(value) + 0.5, None),
            exp.GTE: (math.ceil(value) - 0.5, None),
            exp.EQ: (value - 0.5, value + 0.5) if float(value).is_integer() else (value, value),
        }
    else:
        if kind is exp.EQ:
            raise QueryRefused(f"{view.name}.{column} is a float column: ask for a range (BETWEEN), not =.")
        edges = {exp.LT: (None, value), exp.LTE: (None, value), exp.GT: (value, None), exp.GTE: (value, None)}
    low, high = edges[kind]
    start = 0.0 if low is None else axis.position(low)
    stop = float(axis.bins) if high is None else axis.position(high)
    return [(start, stop)] if stop > start else []


Intervals = list[tuple[float, float]]


def _intersect(a: Intervals, b: Intervals) -> Intervals:
    """The intersection of two lists of disjoint intervals in increasing order (every list :func:`_side`,
    :func:`_union` and this function make is one), in one linear sweep: a product of the lists would let two
    long IN lists cost their product before any work is counted."""
    out: Intervals = []
    i = j = 0
    while i < len(a) and j < len(b):
        low, high = max(a[i][0], b[j][0]), min(a[i][1], b[j][1])
        if high > low:
            out.append((low, high))
        if a[i][1] < b[j][1]:
            i += 1
        else:
            j += 1
    return out


def _union(intervals: Intervals) -> Intervals:
    """The union of ``intervals`` as disjoint intervals in increasing order, touching ones merged (``IN``
    over neighbouring values is one interval); one sort, however long the IN list."""
    merged: Intervals = []
    for low, high in sorted(intervals):
        if merged and low <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(merged[-1][1], high))
        else:
            merged.append((low, high))
    return merged


def _allowed(query: ViewQuery, axis: Axis) -> Intervals:
    """The intervals of ``axis`` the query's conditions keep (the whole axis, NULL bin included, if none)."""
    return query.intervals.get(axis.name, [(0.0, float(axis.size))])


def _per_bin(allowed: Intervals, bins: int) -> list[Intervals]:
    """``allowed`` cut at the bin edges: the pieces inside each bin ``[i, i + 1)`` of a GROUP BY column (at
    most ``len(allowed) + bins`` pieces in all, since the intervals are disjoint)."""
    pieces: list[Intervals] = [[] for _ in range(bins)]
    for low, high in allowed:
        for i in range(math.floor(low), min(bins, math.ceil(high))):
            piece = (max(low, float(i)), min(high, float(i + 1)))
            if piece[1] > piece[0]:
                pieces[i].append(piece)
    return pieces


def _covering(view: View, dimension: int, bins: int) -> np.ndarray:
    """How many blocks meet each bin of ``dimension``: a bound on the blocks a group of that bin weighs."""
    ends = np.bincount(view.lows[:, dimension], minlength=bins + 2)
    ends -= np.bincount(view.highs[:, dimension] + 1, minlength=bins + 2)
    covering: np.ndarray = np.cumsum(ends)[:bins]
    return covering


def _share(view: View, dimension: int, pieces: Intervals) -> np.ndarray:
    """Per block, the share of its extent along ``dimension`` inside the (disjoint) ``pieces``."""
    lows = view.lows[:, dimension].astype(np.float64)
    ends = view.highs[:, dimension] + 1.0
    inside = np.zeros(view.blocks)
    span = np.array(pieces, np.float64).reshape(-1, 2)
    step = max(1, OVERLAPS_AT_ONCE // max(1, view.blocks))  # pieces at once: memory stays bounded
    for start in range(0, len(span), step):
        chunk = span[start : start + step]
        overlap = np.minimum(chunk[:, 1:2], ends[None]) - np.maximum(chunk[:, 0:1], lows[None])
        inside += np.clip(overlap, 0, None).sum(axis=0)
    share: np.ndarray = inside / (ends - lows)
    return share


@dataclass(frozen=True)
class _Plan:
    """How :func:`answer` computes a query's weights: the GROUP BY axes (with their dimension in the view and
    their pieces per bin) and the other axes the conditions constrain (dimension, intervals)."""

    grouped: tuple[tuple[int, list[Intervals]], ...]
    constrained: tuple[tuple[int, Intervals], ...]
    groups: tuple[tuple[int, ...], ...]  # every combination of the GROUP BY axes' bins, in output order

    @classmethod
    def of(cls, query: ViewQuery) -> _Plan:
        axes = {axis.name: (d, axis) for d, axis in enumerate(query.view.axes)}
        grouped = tuple(
            (axes[g][0], _per_bin(_allowed(query, axes[g][1]), axes[g][1].bins)) for g in query.groups
        )
        constrained = tuple(
            (d, query.intervals[name])
            for name, (d, _) in axes.items()
            if name in query.intervals and name not in query.groups
        )
        groups = tuple(product(*(range(len(bins)) for _, bins in grouped)))
        return cls(grouped, constrained, groups)

    def pieces(self, group: tuple[int, ...]) -> list[Intervals]:
        return [bins[i] for (_, bins), i in zip(self.grouped, group, strict=True)]


def answer_work(query: ViewQuery) -> int:
    """The work :func:`answer` does for ``query``, counted from the query and the view's public structure
    alone (its axes and blocks), before anything is computed: (interval, block) overlaps, once for the
    constrained columns and per group for its GROUP BY bins, plus ``CHERNOFF_POINTS`` evaluations of the
    noise bound (:func:`~kakeibo.views.hdpview.noise_bound`) per block a group can weigh (at most the fewest
    blocks that meet one of its bins). A group some condition empties costs nothing. The count depends on
    public inputs only, never on timing, so a refusal over :data:`WORK_BUDGET` says nothing of the data."""
    plan, view = _Plan.of(query), query.view.view
    work = view.blocks * sum(len(intervals) for _, intervals in plan.constrained)
    covering = [_covering(view, d, len(bins)) for d, bins in plan.grouped]
    for group in plan.groups:
        pieces = plan.pieces(group)
        if all(pieces):
            weighed = min((int(c[i]) for c, i in zip(covering, group, strict=True)), default=view.blocks)
            work += view.blocks * sum(len(p) for p in pieces) + CHERNOFF_POINTS * weighed
    return work


def answer(query: ViewQuery) -> pa.Table:
    """The view's counts for ``query``, each with its interval (module docstring).

    A group's answer is ``sum over blocks b of w_b t_b``, with ``w_b`` the share of block ``b`` inside the
    group's region, the product over columns of one list of intervals each. The share of a block inside a
    box is the product over columns of its share along each, so its share inside the whole product of lists
    is the product over columns of the sums over each list: ``blocks x (sum of the lists' lengths)``
    overlaps per group instead of ``blocks x columns x (product of the lengths)`` (issue 29, R4). The columns
    no GROUP BY names are weighed once. The weights are computed, not read off the view's cached marginals,
    because the interval needs each block's weight (:func:`~kakeibo.views.hdpview.noise_bound`)."""
    plan, stored = _Plan.of(query), query.view
    view = stored.view
    base = np.ones(view.blocks)
    for dimension, intervals in plan.constrained:
        base *= _share(view, dimension, intervals)
    counts = np.zeros(len(plan.groups))
    bounds = np.zeros(len(plan.groups))
    for n, group in enumerate(plan.groups):
        pieces = plan.pieces(group)
        if not all(pieces):
            continue  # a condition leaves nothing of this group: 0, exactly
        weights = base.copy()
        for (dimension, _), kept in zip(plan.grouped, pieces, strict=True):
            weights *= _share(view, dimension, kept)
        counts[n] = weights @ view.totals
        bounds[n] = view.bound_of(weights, 1 - VIEW_CONFIDENCE)
    columns: dict[str, Any] = {
        g: [stored.axis(g).key(c[i]) for c in plan.groups]  # type: ignore[union-attr]
        for i, g in enumerate(query.groups)
    }
    columns[query.alias] = counts
    columns[f"{query.alias}_ci_low"] = counts - bounds
    columns[f"{query.alias}_ci_high"] = counts + bounds
    note = stored.note()
    return pa.table(columns, metadata=None if note is None else {NOTE_KEY: note.encode()})
