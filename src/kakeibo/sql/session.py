"""``kakeibo.connect(...)``: a DP SQL session over a real engine, charged to a persisted ledger.

A query is one run of :func:`kakeibo.release.run`, the choke point ``@private`` goes through too. The
session is the front door: it gathers the query's keywords once (:class:`~kakeibo.sql.options.QueryOptions`),
answers a query over a view from the view, plans, and hands the draw and the answer to :mod:`.execute`:

1. analyse (refusals cost nothing and read nothing) and plan (sensitivities, mechanisms, selection, the
   noise grid): everything decided from public inputs only, and every condition the engine will evaluate
   proven total (:mod:`.predicates`), so that no row can make the engine fail; then the budget and the
   engine's public facts (catalog types, declared-unique join keys) are checked, still free;
2. draw (:func:`.execute.draw`): run ONE bounded statement in the engine (:mod:`.rewrite`) and draw all
   noise in memory: partition selection first, then noise for the kept groups only, every value clamped
   into the noise grid's range (so no data value can make the draw fail, and dropped groups leave no trace
   in the release); any failure from the statement on (a timeout included) is charged and says nothing of
   the data;
3. charge the ledger with the noisy table stored in the same transaction (the WHERE box as region when
   parallel composition is valid);
4. post-process the stored table (:func:`.execute.finish`: HAVING, ORDER BY, LIMIT, total by the
   analyser's rules) and return it, every aggregate with a 95% confidence interval.

:meth:`Session.explain` says what steps 1-4 would do, from the plan alone (:mod:`.explain`).

A repeated query -- same analyst, query text, (epsilon, delta) and catalog entry of its tables -- is
answered with the release stored in the ledger with its charge, at no cost and from any later session:
drawing new noise would only spend budget to leak more. (A changed database is not detected: the stored
answer is what was paid for.)
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import warnings
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from fractions import Fraction
from typing import Any, Literal

import duckdb
import numpy as np
import pyarrow as pa
from sqlglot import exp

from .. import release
from ..accounting import Box, Ledger, LedgerEntry, Scope
from ..backends import Backend, DuckDBBackend, database_name, table_schema
from ..errors import ArgumentTypeError, ConfigurationError
from ..mechanisms.base import Rng
from ..noise import RandomSource
from ..privacy import ApproxDP, Number, PrivacyLoss, PureDP, as_fraction
from ..views.hdpview import HDPViewParameters
from . import execute, program
from .analyze import QueryRefused, analyze
from .bounds import BoundChoice, ChosenBounds, bound_choice, provisional, with_bounds
from .catalog import PUBLIC_TABLE_KEYS, Catalog, ColumnSpec, SeveralPersons, TableSpec, with_public_values
from .dp_clause import read_clause
from .execute import read_release
from .explain import explanation
from .options import QueryOptions
from .plan import CONFIDENCE, NoisePlan, epsilon_for_accuracy, plan_query
from .program import ProgramQuery, analyze_program
from .region import constant_check_sql, declared_constants
from .rewrite import engine_sql, public_values_sql
from .shape import AnalyzedQuery, check_dialect, named_columns
from .synthesis import (
    Fidelity,
    Synthesis,
    SynthesisCodec,
    SynthesisModel,
    fidelity_gaps,
    fidelity_mechanism,
    fidelity_orders,
    numeric_bounds,
    plan_synthesis,
    synthesis_request_id,
)
from .views import (
    NOTE_KEY,
    VIEW_CONFIDENCE,
    StoredView,
    ViewCodec,
    ViewRelease,
    answer,
    build_view,
    cell_counts,
    cell_counts_sql,
    over_table,
    parse_view_definition,
    read_columns,
    read_view_query,
    rows_bound,
    stored_views,
    view_name,
    view_request_id,
)

__all__ = ["CatalogMismatch", "Result", "Session", "connect", "read_release"]


class CatalogMismatch(ConfigurationError):  # noqa: N818 -- the name reads as the event it reports
    """A catalog column whose type differs from the engine's column: the engine would convert it row by row
    when it compares it with a literal of the catalog's type, which can fail on some values only (a free
    membership oracle) or select other rows than the ones kakeibo reasons about."""


@dataclass(frozen=True)
class Result:
    """A released table: group columns, one column per aggregate (its SQL alias) and, for each aggregate,
    ``<alias>_ci_low`` / ``<alias>_ci_high``: a ``confidence`` (95%) interval for the bounded true value
    (for a quantile: for the bounded data's quantile, at the resolution of its buckets). It reads like every
    release (:class:`kakeibo.release.ReleaseShape`): ``privacy_loss``, ``ledger_entry``, ``confidence``."""

    table: pa.Table
    privacy_loss: PrivacyLoss
    sql: str
    ledger_entry: LedgerEntry | None
    seeded: bool = False
    confidence: float = CONFIDENCE
    bounds: ChosenBounds | None = None  # the bounds chosen privately ("auto"), and what they drop
    # the accuracy warning the release raised, as (its category's name, its message), for callers that
    # cannot catch Python warnings (the service: warning filters are process-wide, not per request)
    warning: tuple[str, str] | None = None

    @property
    def note(self) -> str | None:
        """What the answer counts beyond what its query says, when it says (an answer from a view: each
        person's rows past the view's bound are not counted, :meth:`~kakeibo.sql.views.StoredView.note`)."""
        text = (self.table.schema.metadata or {}).get(NOTE_KEY)
        return None if text is None else text.decode()

    @property
    def request_id(self) -> str:
        """The ledger request id the release was charged (and is stored) under."""
        return "" if self.ledger_entry is None else self.ledger_entry.request_id or ""

    def to_arrow(self) -> pa.Table:
        return self.table

    def to_pandas(self) -> Any:
        if importlib.util.find_spec("pandas") is None:  # pyarrow needs it and says so less clearly
            raise ImportError("to_pandas() needs pandas: pip install pandas (or use to_arrow()).")
        return self.table.to_pandas()

    df = to_pandas  # DuckDB's name for it

    def to_polars(self) -> Any:
        try:
            import polars as pl
        except ImportError:
            raise ImportError("to_polars() needs polars: pip install polars (or use to_arrow()).") from None
        return pl.from_arrow(self.table)

    def __arrow_c_stream__(self, requested_schema: object = None) -> object:
        """The Arrow PyCapsule stream of the released table, so ``polars.DataFrame(result)``,
        ``pyarrow.table(result)`` and ``duckdb.sql("FROM result")`` read it directly."""
        return self.table.__arrow_c_stream__(requested_schema)

    def __len__(self) -> int:
        return int(self.table.num_rows)


class Session:
    """A DP SQL session: one engine, one catalog, one ledger. Create it with :func:`connect`.

    Charges name the queried table as their ledger dataset, unless ``dataset`` names the whole catalog
    (as the query service does, so that one budget covers all its tables); then a WHERE region is kept
    only when the catalog has a single sensitive table, since boxes over different tables' columns must
    never be taken for disjoint regions of one table."""

    def __init__(
        self,
        backend: Backend,
        catalog: Catalog,
        ledger: Ledger,
        *,
        analyst: str | None,
        delta: Number | None = None,
        dataset: str | None = None,
        source: str | None = None,
        dialect: str | None = None,
    ) -> None:
        self.backend = backend
        self.dialect = _session_dialect(dialect, catalog)
        self.catalog = catalog
        self._analysed_against = provisional(catalog)  # "auto" bounds are chosen when a query runs
        self.ledger = ledger
        self.analyst = analyst
        self.delta = delta
        self.dataset = dataset
        # which data the releases are about: stored releases are keyed by it, so two databases sharing a
        # catalog (monthly snapshots, regions) never answer with each other's release
        self.source = source if source is not None else f"{backend.dialect}:{id(backend)}"
        self._schemas: dict[str, dict[str, pa.DataType]] = {}
        self._checked_columns: set[tuple[str, str]] = set()
        self._default_delta: Fraction | None = None
        self._checked_unique: set[tuple[str, str]] = set()
        self._checked_constant: set[tuple[str, str]] = set()
        self._views: dict[str, StoredView] | None = None
        self._view_ids: dict[str, str] = {}

    def plan(
        self,
        query: str,
        *,
        epsilon: Number | None = None,
        accuracy: tuple[float, float] | None = None,
        delta: Number | None = None,
        dialect: str | None = None,
        bounds: Mapping[str, object] | None = None,
        check_bounds: bool = False,
    ) -> NoisePlan:
        """Analyse and plan ``query`` without touching data or budget, at ``epsilon`` or at the least
        epsilon that meets ``accuracy=(alpha, beta)`` (see :func:`~kakeibo.sql.plan.epsilon_for_accuracy`).
        A query whose bounds are chosen privately (``"auto"``) is planned at the provisional bounds
        (:func:`~kakeibo.sql.bounds.provisional`); its plan's privacy loss is the query's whole charge."""
        options = QueryOptions(
            epsilon=epsilon,
            accuracy=accuracy,
            delta=delta,
            dialect=dialect,
            bounds=bounds,
            check_bounds=check_bounds,
        )
        try:
            return self._planned(*read_clause(query, options))[0]
        except SeveralPersons as several:
            raise QueryRefused(
                f"{several.reason} Such a query is answered by R2T's linear program (Session.sql and "
                "Session.explain), which has no noise plan."
            ) from None

    def _planned(self, query: str, options: QueryOptions) -> tuple[NoisePlan, BoundChoice | None, Catalog]:
        """The plan of ``query``, what it chooses privately before its answer (:mod:`.bounds`), and the
        catalog it is planned under: the session's, with ``options.bounds`` overriding the limits of the
        query's grain table and the bounds of its columns (:func:`~kakeibo.sql.bounds.with_bounds`)."""
        dialect = self.dialect if options.dialect is None else options.dialect
        database = database_name(self.backend)  # the backend's, which a three-part table name may name
        catalog, against = self.catalog, self._analysed_against
        totals: dict[str, float] = {}
        if options.bounds is not None or options.clause is not None:
            named = analyze(query, against, dialect=dialect, database=database, require_limits=False)
            if options.clause is not None:
                catalog, totals = options.clause.applied(self.catalog, named, options.bounds)
            elif options.bounds is not None:
                catalog = with_bounds(self.catalog, named, options.bounds)  # may declare a missing limit
            against = provisional(catalog)
        analysed = analyze(query, against, dialect=dialect, database=database)
        keyed = self._public_table_keys(analysed, catalog, against)
        if keyed is not None:
            catalog, against = keyed
            analysed = analyze(query, against, dialect=dialect, database=database)
        options.require_budget()
        delta = self._delta(options.delta)
        epsilon = options.epsilon
        if options.accuracy is not None:
            alpha, beta = options.accuracy
            epsilon = epsilon_for_accuracy(analysed, alpha=alpha, beta=beta, delta=delta)
        assert epsilon is not None
        plan = plan_query(analysed, epsilon=epsilon, delta=delta, totals=totals)
        choice = bound_choice(analysed, plan, catalog, options.check_bounds)
        if choice is not None and totals:
            raise QueryRefused(
                'the query\'s SUM gives its per-group bounds while others are chosen privately ("auto" in '
                "the catalog); give contribution bounds to every aggregate of the query, or to none."
            )
        if choice is not None:
            choice.check()  # every share of epsilon by the planner's rules, before any read
        if choice is not None and options.accuracy is not None:
            raise QueryRefused(
                "accuracy= needs an error that does not depend on the data, but this query chooses its "
                'bounds ("auto") from the data; give epsilon=.'
            )
        return plan, choice, catalog

    def _public_table_keys(
        self, analysed: AnalyzedQuery, catalog: Catalog, against: Catalog
    ) -> tuple[Catalog, Catalog] | None:
        """``catalog`` and ``against`` with every grouping column of a public table that lists no
        public_values given the table's values as its public values (issue 32), or ``None`` when there is
        none: its keys are public by construction, so the query releases every one of them (empty groups
        included) with noise and no partition selection, and needs no delta for them. Read from the engine
        before the release and uncharged: a public table holds no person's data. A text or int column only,
        of at most :data:`PUBLIC_TABLE_KEYS` values (more: selection, as before)."""
        found: dict[tuple[str, str], tuple[object, ...]] = {}
        for table, column, expression in zip(
            analysed.group_tables, analysed.group_by, analysed.group_expressions, strict=True
        ):
            spec = catalog.table(table)
            if expression is not None or not spec.public or (table, column) in found:
                continue
            declared = spec.column(column)
            if declared.public_values is not None or declared.type not in ("str", "int"):
                continue
            values = self._execute(public_values_sql(spec, column, PUBLIC_TABLE_KEYS + 1))["v"].to_pylist()
            if 0 < len(values) <= PUBLIC_TABLE_KEYS:
                found[(table, column)] = tuple(sorted(values))
        if not found:
            return None
        return with_public_values(catalog, found), with_public_values(against, found)

    def explain(
        self,
        query: str,
        *,
        epsilon: Number | None = None,
        accuracy: tuple[float, float] | None = None,
        delta: Number | None = None,
        dialect: str | None = None,
        nonnegative: bool = False,
        bounds: Mapping[str, object] | None = None,
        outside_view: str = "refuse",
        check_bounds: bool = False,
    ) -> str:
        """The bounded statement, sensitivities, noise scales and expected errors -- before spending
        (at epsilon 1 when neither ``epsilon`` nor ``accuracy`` is given); with ``nonnegative``, which
        outputs :meth:`sql` would clamp at 0. A query over a view says that the view answers it, at no
        charge, or what :meth:`sql` would do with ``outside_view``."""
        options = QueryOptions(
            epsilon, accuracy, delta, dialect, nonnegative, bounds, outside_view, check_bounds
        )
        query, options = read_clause(query, options)
        stored = self.view_of(query)
        prefix: list[str] = []
        if stored is not None:
            try:
                read_view_query(query, stored)
            except QueryRefused as refused:
                if options.outside_view != "charge":
                    raise
                prefix = [
                    f"view {stored.name} cannot answer this ({refused}); charged on table {stored.table}:"
                ]
                query = over_table(query, stored)
            else:
                return f"from view {stored.name}, no charge\n{stored.describe()}"
        if options.epsilon is None and options.accuracy is None:
            options = replace(options, epsilon=1)
        try:
            charged, choice, _ = self._planned(query, options)
        except SeveralPersons as several:
            return "\n".join(prefix + self._program(query, options, several).describe())
        return "\n".join(prefix + explanation(charged, choice, options.nonnegative))

    # --- views ------------------------------------------------------------------------------------------

    def create_view(
        self,
        name: str,
        query: str,
        *,
        epsilon: Number,
        rows_per_person: int | Literal["auto"] = 1,
        bins: Mapping[str, int] | None = None,
        parameters: HDPViewParameters | None = None,
        rng: Rng = None,
    ) -> ViewRelease:
        """Release the view ``name`` of ``query`` (``SELECT col, ... FROM table``) as an HDPView at
        ``epsilon``, charged once; afterwards :meth:`sql` answers counts over it at no cost
        (:mod:`.views`). Each person is bounded to ``rows_per_person`` rows and the view built at ``epsilon
        / rows_per_person``; ``"auto"`` chooses the bound privately in the same release, at a share of
        ``epsilon`` (:mod:`.view_bounds`). Every answer from the view says what it counts
        (:attr:`Result.note`). ``bins`` sets a numeric column's bin count where the catalog does not. The
        view is stored with its ledger entry: it outlives the session, and creating it again is free."""
        definition = parse_view_definition(name, query, self.catalog, bins)
        loss = PureDP(epsilon)
        if not loss.epsilon > 0:
            raise QueryRefused("a view needs a positive epsilon.")
        bound = rows_bound(definition, loss.epsilon, rows_per_person, parameters)
        settings = (loss.epsilon, bound.setting, parameters)
        request_id = view_request_id(definition, (self.analyst, self.dataset, self.source), settings)
        existing = self.views().get(definition.name)
        if existing is not None and self._view_ids.get(definition.name) != request_id:
            raise QueryRefused(f"a view named {definition.name} exists already, with another definition.")
        charge = release.Charge(
            loss,
            label=definition.label,
            analyst=self.analyst,
            dataset=self.dataset or definition.table.name,
            request_id=request_id,
        )

        def draw(source: RandomSource) -> StoredView:
            rows, choice = bound.choose(definition.table, self._execute, source)
            counts = self._execute(cell_counts_sql(definition.table, definition.axes, rows))
            return build_view(
                definition,
                counts,
                epsilon=float(loss.epsilon),
                rows_per_person=rows,
                source=self.source,
                parameters=parameters,
                rng=source,
                timeout=self.backend.statement_timeout,  # the build is bounded like a statement
                choice=choice,
            )

        out = release.run(
            self.ledger,
            charge,
            draw,
            rng=rng,
            check=lambda: self._check_types(definition.table),
            codec=ViewCodec(),
        )
        self._views = None  # read again, with this one
        return ViewRelease(out.value, loss, out.ledger_entry, seeded=out.seeded)

    # --- synthesis --------------------------------------------------------------------------------------

    def synthesize(
        self,
        query: str,
        *,
        epsilon: Number,
        delta: Number,
        method: str = "mst",
        rows_per_person: int = 1,
        bins: Mapping[str, int] | None = None,
        rows: int | None = None,
        random_state: int | np.random.Generator | None = None,
        rng: Rng = None,
    ) -> Synthesis:
        """Fit a synthesis ``method`` of ``query`` (``SELECT col, ... FROM table``, read as a view reads it)
        at ``(epsilon, delta)`` for the person, each person bounded to ``rows_per_person`` rows, charged once
        (:mod:`.synthesis`); return ``rows`` synthetic rows (by default the model's estimate of the bounded
        row count) drawn with ``random_state``, and the model, from which more rows are free. ``rng`` is the
        release's noise (seeded: reproducible, hence not private against whoever knows the seed). The model
        is stored with its ledger entry: fitting it again with the same settings is a free replay."""
        table, axes, sql = read_columns(query, self.catalog, bins, "a synthesis")
        loss, fit = plan_synthesis(table, axes, method, epsilon, delta, rows_per_person)
        fraction = str(as_fraction(epsilon, "epsilon")), str(as_fraction(delta, "delta"))
        settings = (method, *fraction, rows_per_person)
        bounds = tuple(None if a.values is not None else numeric_bounds(table.column(a.name)) for a in axes)
        charge = release.Charge(
            loss,
            label=f"SYNTHESIZE {method.upper()} FROM ({sql}) WITH {rows_per_person} ROWS PER PERSON",
            analyst=self.analyst,
            dataset=self.dataset or table.name,
            request_id=synthesis_request_id(table, axes, (self.analyst, self.dataset, self.source), settings),
        )

        def draw(source: RandomSource) -> SynthesisModel:
            engine = self._execute(cell_counts_sql(table, axes, rows_per_person, random_order=True))
            cells, counts = cell_counts(engine, len(axes))
            return SynthesisModel(
                method,
                table.name,
                sql,
                axes,
                bounds,
                float(epsilon),
                float(delta),
                rows_per_person,
                bounded=table.privacy_unit is not None,
                model=fit(cells, counts, source),
            )

        out = release.run(
            self.ledger,
            charge,
            draw,
            rng=rng,
            check=lambda: self._check_types(table, frozenset(axis.name for axis in axes)),
            codec=SynthesisCodec(),
        )
        return Synthesis(
            out.value.sample(rows, random_state),
            out.value,
            loss,
            out.ledger_entry,
            seeded=out.seeded,
            replayed=out.replayed,
        )

    def fidelity(
        self,
        synthesis: Synthesis | SynthesisModel,
        *,
        epsilon: Number | None = None,
        holdout: str | None = None,
        rows: int | None = None,
        random_state: int | np.random.Generator | None = None,
        rng: Rng = None,
    ) -> Fidelity:
        """How far ``rows`` synthetic rows of ``synthesis`` (drawn with ``random_state``; by default the
        model's row estimate) lie from the real rows in their 1-, 2- and 3-way marginals (:mod:`.synthesis`,
        Fidelity): charged at ``epsilon`` against the table it models (one ledger entry, pure DP; ``rng`` is
        the noise), or free against ``holdout``, a catalog table the owner declared ``public`` with the same
        columns. Exactly one of the two; every refusal before any charge or statement."""
        model = synthesis.model if isinstance(synthesis, Synthesis) else synthesis
        if not isinstance(model, SynthesisModel):
            raise ArgumentTypeError(
                f"fidelity needs a Synthesis or a SynthesisModel, got {type(synthesis)!r}."
            )
        if (epsilon is None) == (holdout is None):
            raise QueryRefused(
                "a fidelity report is charged at an epsilon or made on a public holdout: give one."
            )
        codes = model.sample_codes(rows, random_state)
        sizes = tuple(axis.size for axis in model.axes)
        orders = fidelity_orders(len(sizes))
        names = frozenset(axis.name for axis in model.axes)
        if holdout is not None:
            table = self.catalog.table(holdout)
            if not table.public or not names <= set(table.columns):
                raise QueryRefused(
                    f"the holdout {holdout!r} must be a table the catalog declares public, with the columns "
                    f"{', '.join(sorted(names))}."
                )
            self._check_types(table, names)
            cells, counts = cell_counts(self._execute(cell_counts_sql(table, model.axes, 1)), len(sizes))
            means, numbers = fidelity_gaps(cells, counts, codes, sizes, None)
            zeros = (0.0,) * len(orders)
            return Fidelity(
                orders, tuple(means), zeros, tuple(numbers), len(codes), f"public holdout {holdout}"
            )
        assert epsilon is not None
        source = self.catalog.table(model.table)
        mechanism = fidelity_mechanism(epsilon, model.rows_per_person, len(orders))
        scale = float(model.rows)
        charge = release.Charge(
            mechanism.privacy_loss,
            label=f"FIDELITY OF SYNTHESIZE {model.method.upper()} FROM ({model.sql})",
            analyst=self.analyst,
            dataset=self.dataset or source.name,
        )

        def draw(noise: RandomSource) -> tuple[list[float], list[int]]:
            statement = cell_counts_sql(source, model.axes, model.rows_per_person, random_order=True)
            cells, counts = cell_counts(self._execute(statement), len(sizes))
            gaps, numbers = fidelity_gaps(cells, counts, codes, sizes, scale)
            return list(np.asarray(mechanism.release(np.array(gaps), rng=noise), float)), numbers

        out = release.run(self.ledger, charge, draw, rng=rng, check=lambda: self._check_types(source, names))
        released, numbers = out.value
        half = 2 * max(scale, 1.0)
        deviation = float(np.sqrt(2)) * mechanism.scale / half
        return Fidelity(
            orders,
            tuple(value / half for value in released),
            (deviation,) * len(orders),
            tuple(numbers),
            len(codes),
            f"the bounded rows of {model.table}, charged epsilon {float(epsilon):g}",
            mechanism.privacy_loss,
            out.ledger_entry,
        )

    def stored_synthesis(self, entry: int) -> SynthesisModel:
        """The model of the synthesis this session's analyst fitted at ledger entry ``entry`` (read from the
        ledger, free): how the service names a synthesis for :meth:`fidelity`. Refused alike whether the entry
        does not exist, is another analyst's or dataset's, or is not a synthesis."""
        entries = self.ledger.entries(analyst=self.analyst, dataset=self.dataset)
        found = next((e for e in entries if e.seq == entry and e.label.startswith("SYNTHESIZE ")), None)
        payload = None
        if found is not None and (found.request_id or "").startswith("synth:"):
            payload = self.ledger.stored_release(found.request_id or "")
        if payload is None:
            raise QueryRefused(f"there is no synthesis of yours at ledger entry {entry!r} of this dataset.")
        return SynthesisCodec().decode(payload)[0]

    def views(self) -> dict[str, StoredView]:
        """The views this session's analyst built over its data, by name (read from the ledger)."""
        if self._views is None:
            found = stored_views(self.ledger, self.analyst, self.source)
            self._views = {name: stored for name, (stored, _) in found.items()}
            self._view_ids = {name: entry.request_id or "" for name, (_, entry) in found.items()}
        return self._views

    def view_of(self, query: str) -> StoredView | None:
        """The view ``query`` reads, if it reads one (a catalog table of the same name cannot exist)."""
        name = view_name(query)
        if name is None or name in {t.lower() for t in self.catalog.tables}:
            return None
        stored = self.views().get(name)
        if stored is None:
            self._views = None  # another session may have built it since
            stored = self.views().get(name)
        return stored

    def _from_view(self, query: str, stored: StoredView, outside_view: str) -> Result | None:
        """The view's answer to ``query`` (no charge), or ``None`` when it cannot answer and the caller may
        charge the query on the view's table."""
        try:
            read = read_view_query(query, stored)
        except QueryRefused as refused:
            if outside_view == "charge":
                return None
            raise QueryRefused(
                f"view {stored.name} cannot answer this query ({str(refused).rstrip('.')}); "
                f'outside_view="charge" runs it on table {stored.table}, charged.'
            ) from None
        return Result(answer(read), PureDP(0), query, None, confidence=VIEW_CONFIDENCE)

    def sql(
        self,
        query: str,
        *,
        epsilon: Number | None = None,
        accuracy: tuple[float, float] | None = None,
        delta: Number | None = None,
        rng: Rng = None,
        request_id: str | None = None,
        dialect: str | None = None,
        nonnegative: bool = False,
        bounds: Mapping[str, object] | None = None,
        outside_view: str = "refuse",
        check_bounds: bool = False,
    ) -> Result:
        """Answer ``query`` with (epsilon, delta)-DP, charging the ledger first (see the module docstring).

        ``accuracy=(alpha, beta)`` instead of ``epsilon`` spends the least epsilon (two significant digits)
        at which each COUNT / SUM is within ``alpha`` of its bounded true value with probability
        ``>= 1 - beta``; ``result.privacy_loss`` tells what was spent.

        The release is stored under a digest of the query, its budget and the catalog: asking the same
        again returns it at no cost. ``request_id`` (a client's idempotency key) joins that digest, so
        a retry with the same key gets the same answer and a new key asks for a fresh release.

        ``nonnegative=True`` clamps at 0 every aggregate whose true value cannot be negative (counts,
        variances, standard deviations; sums, averages and quantiles of columns bounded below by 0) and
        the ends of its interval, before HAVING, ORDER BY and LIMIT: post-processing of the stored
        release, so it costs nothing and a replay may ask either way.

        ``bounds`` overrides, for this query, the limits of its grain table (``max_rows_per_partition``,
        ``max_partitions``, ``bounds_share``) and the bounds of its columns (``{"amount": (0, 50)}``, or
        ``"auto"``) that the catalog declares, so one catalog serves queries that want other limits; the
        release is stored under the overridden catalog.

        A query that reads a view (:meth:`create_view`) is answered from it at no cost; one the view cannot
        answer (a column it lacks, an aggregate other than COUNT(*)) is refused with the reason, or with
        ``outside_view="charge"`` runs on the view's table like any query, charged at ``epsilon``."""
        options = QueryOptions(
            epsilon, accuracy, delta, dialect, nonnegative, bounds, outside_view, check_bounds
        )
        query, options = read_clause(query, options)
        stored = self.view_of(query)
        if stored is not None:
            answered = self._from_view(query, stored, options.outside_view)
            if answered is not None:
                return answered
            query = over_table(query, stored)
        try:
            plan, choice, catalog = self._planned(query, options)
        except SeveralPersons as several:
            return self._answer_program(self._program(query, options, several), request_id, rng)
        out = release.run(
            self.ledger,
            self._charge(plan, catalog, request_id),
            lambda source: execute.draw(plan, choice, self._execute, source),
            rng=rng,
            check=lambda: self._check_tables(plan),
            codec=execute.TableCodec(),
            finish=lambda table: execute.finish(plan, table, options.nonnegative),
        )
        chosen, table = out.value
        warning = None if chosen is None or choice is None else choice.warning(chosen)
        if warning is not None:
            warnings.warn(warning[0], warning[1], stacklevel=2)
        return Result(
            table,
            plan.privacy_loss,
            plan.query.sql,
            out.ledger_entry,
            seeded=out.seeded,
            bounds=chosen,
            warning=None if warning is None else (warning[1].__name__, warning[0]),
        )

    def _program(self, query: str, options: QueryOptions, several: SeveralPersons) -> ProgramQuery:
        """``query``, which the one-person analysis refused for ``several`` persons per join result, read
        for R2T's linear program (:mod:`.program`), or refused with what that does not answer."""
        unsupported = {
            "accuracy=": options.accuracy is not None,
            "a WITH DIFFERENTIAL_PRIVACY clause": options.clause is not None,
            "check_bounds=True": options.check_bounds,
        }
        named = next((name for name, given in unsupported.items() if given), None)
        if named is not None:
            raise QueryRefused(
                f"{named} is not supported where a join result can belong to several persons "
                f"({several.reason.rstrip('.')}); give epsilon= (R2T's error depends on the data)."
            )
        options.require_budget()
        assert options.epsilon is not None
        return analyze_program(
            query,
            self.catalog,
            why=several.reason.rstrip("."),
            dialect=self.dialect if options.dialect is None else options.dialect,
            database=database_name(self.backend),
            epsilon=options.epsilon,
            bounds=options.bounds,
        )

    def _answer_program(self, query: ProgramQuery, client_key: str | None, rng: Rng) -> Result:
        """Charge and answer a query of R2T's program (:func:`.program.draw`), stored like every release."""
        declared = [(t.name, t.privacy_unit, t.columns, t.references) for t in query.tables]
        parts = (query.sql, query.epsilon, Fraction(0), query.dialect, declared, ("taus", query.race.taus))
        charge = release.Charge(
            query.privacy_loss,
            label=query.sql,
            analyst=self.analyst,
            dataset=self.dataset or query.dataset,
            request_id=self._digest(parts, client_key),
        )

        def check() -> None:
            for table in query.tables:
                self._check_types(table, query.read)
            for table, column in query.unique:
                self._check_unique(table, column)

        out = release.run(
            self.ledger,
            charge,
            lambda source: program.draw(query, self._execute, source),
            rng=rng,
            check=check,
            codec=execute.TableCodec(),
        )
        return Result(out.value, query.privacy_loss, query.sql, out.ledger_entry, seeded=out.seeded)

    def _charge(self, plan: NoisePlan, catalog: Catalog, client_key: str | None) -> release.Charge:
        """The ledger charge of ``plan`` (planned under ``catalog``; ``client_key``: the caller's request
        id), refused when it needs a delta the ledger's pure-epsilon budgets cannot pay."""
        if plan.delta > 0 and self.ledger.budget_kind is PureDP:
            raise QueryRefused(
                "this query needs delta > 0 for private partition selection (GROUP BY without public keys), "
                "but the ledger keeps pure-epsilon budgets; create the ledger with an (epsilon, delta) "
                "budget such as budget=(1.0, 1e-5), or declare public_values for the GROUP BY columns."
            )
        return release.Charge(
            plan.privacy_loss,
            label=plan.query.sql,
            analyst=self.analyst,
            dataset=self.dataset or plan.query.dataset,
            region=self._region(plan),
            request_id=self._request_id(plan, catalog, client_key),
        )

    def _execute(self, statement: str) -> pa.Table:
        """Run a statement written in DuckDB's dialect on the session's engine, as :func:`.rewrite.engine_sql`
        writes it there."""
        return self.backend.execute(engine_sql(statement, self.backend.dialect))

    def _check_tables(self, plan: NoisePlan) -> None:
        """The engine's public facts the plan relies on: catalog types, declared-unique join keys (of public
        tables, and the keys references lead to), the columns declared constant per person that the charge's
        region relies on."""
        query = plan.query
        read = named_columns(query)
        for table in query.tables:
            self._check_types(table, read)
        names = {table.name for table in query.tables}
        for join in query.joins:
            if join.kind == "public":  # every public join is on a declared-unique key (tables.py)
                self._check_unique(join.table, join.column)
        for table in query.tables:
            for reference in table.references:
                target = self.catalog.table(reference.table)
                if reference.table in names and reference.key != target.privacy_unit:
                    self._check_unique(target, reference.key)
        region = self._region(plan)
        for table, column in () if region is None else declared_constants(region, query):
            self._check_constant(table, column)

    def _check_types(self, table: TableSpec, read: frozenset[str] | None = None) -> None:
        """Refuse a table whose engine column types differ from the catalog's, for the columns ``read``
        names (``None``: every column) and the columns that find its persons (privacy unit, references),
        read from an empty result: the schema only, no row. A column no query reads may be of a type the
        catalog does not take (issue 32)."""
        columns = [
            column
            for column in table.columns.values()
            if (read is None or column.name in read or column.name == table.privacy_unit)
            and (table.name, column.name) not in self._checked_columns
        ]
        columns += [
            table.column(reference.column)
            for reference in table.references
            if (table.name, reference.column) not in self._checked_columns
            and table.column(reference.column) not in columns
        ]
        engine = self._schemas.get(table.name)
        if engine is None:  # read once per table, whatever the query reads: a missing table fails here, free
            quoted = table.engine_name(self.backend.dialect)
            engine = {field.name.lower(): field.type for field in table_schema(self.backend, quoted)}
            self._schemas[table.name] = engine
        for column in columns:
            found = engine.get(column.name)
            if found is None:
                raise CatalogMismatch(
                    f"the catalog's column {table.name}.{column.name} is not in the engine."
                )
            if not _engine_holds(column, found):
                declared = column.type if column.digits is None else "decimal({}, {})".format(*column.digits)
                raise CatalogMismatch(
                    f"column {table.name}.{column.name} is {found} in the engine but {declared} in the "
                    "catalog; declare the engine's type (or convert the column), since comparisons would "
                    "convert it row by row."
                )
            self._checked_columns.add((table.name, column.name))

    def _check_unique(self, table: TableSpec, column: str) -> None:
        """Refuse a join on a column declared unique that is not. Reading a public table is free; the key a
        reference leads to is part of the schema the neighbour relation ranges over (databases that keep the
        catalog's declarations), so whether it holds says nothing about a person either."""
        if (table.name, column) in self._checked_unique:
            return
        dialect = self.backend.dialect
        name, col = table.engine_name(dialect), exp.to_identifier(column, quoted=True).sql(dialect)
        repeated = self.backend.execute(f"SELECT COUNT({col}) - COUNT(DISTINCT {col}) AS r FROM {name}")
        if repeated.column(0)[0].as_py() != 0:
            raise CatalogMismatch(
                f"the catalog declares {table.name}.{column} unique, but the engine's table repeats "
                "values of it; a join on it would repeat sensitive rows."
            )
        self._checked_unique.add((table.name, column))

    def _check_constant(self, table: TableSpec, column: str) -> None:
        """Refuse a WHERE region over a column declared ``user_constant`` that some person holds two values of
        (:func:`~kakeibo.sql.region.constant_check_sql`): parallel composition would charge that person once
        for queries they are in twice. As for :meth:`_check_unique`, the declaration is part of the schema the
        neighbour relation ranges over, so whether it holds says nothing about one person."""
        if (table.name, column) in self._checked_constant:
            return
        if self._execute(constant_check_sql(self.catalog, table, column)).num_rows:
            raise CatalogMismatch(
                f"the catalog declares {table.name}.{column} constant per person (user_constant), but a "
                "person holds several values of it in the engine's table; a WHERE region over it would "
                "charge that person once for queries that read them twice."
            )
        self._checked_constant.add((table.name, column))

    def _region(self, plan: NoisePlan) -> Box | None:
        if self.dataset is None:
            return plan.region
        sensitive = [t for t in self.catalog.tables.values() if not t.public]
        return plan.region if len(sensitive) == 1 else None

    def _request_id(self, plan: NoisePlan, catalog: Catalog, client_key: str | None = None) -> str:
        """The ledger request id of a release: a digest of everything that determines what it means (the
        tables as ``catalog`` declares them, the session's or one with a query's own bounds)."""
        declared = [catalog.table(t.name) for t in plan.query.tables]
        tables: list[tuple[object, ...]] = [
            (t.name, t.privacy_unit, t.max_partitions, t.max_rows_per_partition, t.columns)
            + ((t.references,) if t.references else ())
            + ((t.max_rows_bound, t.truncation_base) if t.auto_truncation else ())
            + ((t.max_rows_bound, t.bounds_share) if t.chooses_bounds else ())
            + (tuple((c.name, c.digits) for c in t.columns.values() if c.digits is not None) or ())
            for t in declared
        ]
        if plan.correlation is not None:  # the graph itself, not only where it was declared
            tables.append((plan.correlation.digest, plan.correlation.tau))
        parts = (plan.query.sql, plan.epsilon, plan.delta, plan.query.dialect, tables)
        return self._digest(parts, client_key)

    def _digest(self, parts: tuple[object, ...], client_key: str | None) -> str:
        """The request id of a release whose meaning ``parts`` hold (query text, epsilon, delta, dialect,
        tables as declared, ...), for this analyst, dataset and data source, and the client's key."""
        sql, epsilon, delta, dialect, *rest = parts
        text = repr((self.analyst, self.dataset, self.source, sql, epsilon, delta, *rest))
        if dialect != "duckdb":
            text += repr(("dialect", dialect))
        if client_key is not None:
            text += repr(("client request id", client_key))
        return "sql:" + hashlib.sha256(text.encode()).hexdigest()

    def _delta(self, delta: Number | None) -> Fraction:
        """The query's delta: as given, else the session's, else 1/100 of the ledger's global delta budget
        (so that the first query needing delta leaves room for 99 more), else 1e-6."""
        chosen = delta if delta is not None else self.delta
        if chosen is not None:
            return as_fraction(chosen, "delta")
        if self._default_delta is None:  # read once: request ids must not move with later budget changes
            budget = self.ledger.budgets().get(Scope())
            share = Fraction(budget.delta) / 100 if isinstance(budget, ApproxDP) else Fraction(0)
            self._default_delta = share if share > 0 else Fraction(1, 10**6)
        return self._default_delta

    def close(self) -> None:
        self.backend.close()
        self.ledger.close()

    def __enter__(self) -> Session:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


#: which engine (Arrow) types hold each catalog type but decimal (:func:`_engine_holds`)
_ARROW_KINDS: dict[str, Callable[[pa.DataType], bool]] = {
    "int": pa.types.is_integer,
    "float": pa.types.is_floating,
    "str": lambda t: pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_string_view(t),
    "bool": pa.types.is_boolean,
    "date": pa.types.is_date,
}


def _engine_holds(column: ColumnSpec, found: pa.DataType) -> bool:
    """Whether the engine's type ``found`` is the catalog's type of ``column``: a decimal column's
    DECIMAL has its declared precision and scale exactly (the scale is what its literals are written in)."""
    if column.digits is None:
        return _ARROW_KINDS[column.type](found)
    return isinstance(found, pa.Decimal128Type) and (found.precision, found.scale) == column.digits


def _session_dialect(dialect: object, catalog: Catalog) -> str:
    """The SQL dialect a session reads queries in: ``dialect`` when given (checked, so ``""`` is refused),
    else the catalog's, else DuckDB's."""
    return check_dialect((catalog.dialect or "duckdb") if dialect is None else dialect)


def _open_duckdb(path: str, catalog: Catalog) -> DuckDBBackend:
    """A DuckDB file for a session: read-only (a session only reads, and other processes -- the CLI, another
    analyst's notebook -- may open the file too), unless the catalog's source files need views created in
    it; a file that cannot be opened is one sentence, not DuckDB's traceback."""
    if path != ":memory:" and not os.path.exists(path):
        raise ConfigurationError(f"there is no DuckDB database at {path}.")
    read_only = path != ":memory:" and all(t.source is None for t in catalog.tables.values())
    try:
        return DuckDBBackend(path, read_only=read_only)
    except duckdb.Error as exc:
        first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise ConfigurationError(f"the DuckDB database {path} could not be opened: {first}") from None


def connect(
    database: str | os.PathLike[str] | Backend = ":memory:",
    *,
    catalog: Catalog | str | os.PathLike[str],
    ledger: Ledger | str | os.PathLike[str],
    budget: PrivacyLoss | Number | tuple[Number, Number] | None = None,
    analyst: str | None = None,
    delta: Number | None = None,
    source: str | None = None,
    dialect: str | None = None,
) -> Session:
    """Open a DP SQL session.

    ``database``: a DuckDB file (or ``":memory:"``), or a :class:`~kakeibo.backends.Backend` (PostgreSQL,
    Spark). ``catalog``: a :class:`Catalog` or a TOML path. ``ledger``: a :class:`Ledger` or a path
    (created with ``budget`` if new: a number is pure epsilon, a pair ``(epsilon, delta)`` pays for private
    partition selection too). ``delta`` is the default delta of queries that need private partition
    selection; by default 1/100 of the ledger's global delta budget (``explain`` shows the loss).
    ``source`` names the data for the ledger's stored releases (a repeated query on
    the same source is answered from the ledger): by default a DuckDB file's absolute path, and for an
    in-memory database or a backend object this session's engine only (name a backend's database, such as
    ``"postgres:db.example/sales"``, to reuse releases across sessions). ``dialect`` is the SQL dialect
    queries are written in (``"duckdb"``, ``"postgres"``, ``"tsql"``, ...: see
    :data:`kakeibo.sql.catalog.DIALECTS`), whatever the engine: by default the catalog's ``dialect``, else
    DuckDB's; ``sql``, ``plan`` and ``explain`` take ``dialect=`` for one query.
    """
    if not isinstance(database, (str, os.PathLike, Backend)):
        raise ArgumentTypeError(
            f"database is a DuckDB path, ':memory:' or a Backend, got {type(database).__name__}."
        )
    cat = catalog if isinstance(catalog, Catalog) else Catalog.from_toml(catalog)
    dialect = _session_dialect(dialect, cat)  # refused before the database is opened
    backend = database if isinstance(database, Backend) else _open_duckdb(os.fspath(database), cat)
    if source is None and not isinstance(database, Backend) and os.fspath(database) != ":memory:":
        source = f"duckdb:{os.path.abspath(database)}"
    if isinstance(backend, DuckDBBackend):
        for table in cat.tables.values():
            if table.source is not None:
                backend.register_source(table.name, table.source)
    led = ledger if isinstance(ledger, Ledger) else Ledger(ledger, budget=budget)
    return Session(backend, cat, led, analyst=analyst, delta=delta, source=source, dialect=dialect)
