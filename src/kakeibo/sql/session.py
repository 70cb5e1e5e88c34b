"""``kakeibo.connect(...)``: a DP SQL session over a real engine, charged to a persisted ledger.

A query is one run of :func:`kakeibo.release.run`, the choke point ``@private`` goes through too:

1. analyse (refusals cost nothing and read nothing) and plan (sensitivities, mechanisms, selection, the
   noise grid): everything decided from public inputs only, and every condition the engine will evaluate
   proven total (:mod:`.predicates`), so that no row can make the engine fail; then the budget and the
   engine's public facts (catalog types, declared-unique join keys) are checked, still free;
2. draw: run ONE bounded statement in the engine (:mod:`.rewrite`) and draw all noise in memory: partition
   selection first, then noise for the kept groups only, every value clamped into the noise grid's range
   (so no data value can make the draw fail, and dropped groups leave no trace in the release); any
   failure from the statement on (a timeout included) is charged and says nothing of the data;
3. charge the ledger with the noisy table stored in the same transaction (the WHERE box as region when
   parallel composition is valid);
4. post-process the stored table (HAVING, ORDER BY, LIMIT: total by the analyser's rules) and return it,
   every aggregate with a 95% confidence interval.

A repeated query -- same analyst, query text, (epsilon, delta) and catalog entry of its tables -- is
answered with the release stored in the ledger with its charge, at no cost and from any later session:
drawing new noise would only spend budget to leak more. (A changed database is not detected: the stored
answer is what was paid for.)
"""

from __future__ import annotations

import hashlib
import importlib.util
import math
import os
import warnings
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

import duckdb
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import sqlglot
from sqlglot import exp

from .. import release
from ..accounting import Box, Ledger, LedgerEntry, Scope
from ..backends import Backend, DuckDBBackend, database_name
from ..errors import ConfigurationError
from ..mechanisms import AccuracyWarning, Geometric, Laplace, Mechanism
from ..mechanisms.base import Rng
from ..noise import RandomSource
from ..privacy import ApproxDP, Number, PrivacyLoss, PureDP, as_fraction
from ..views.hdpview import HDPViewParameters
from .aggregates import NoisyStatistics, aggregate_spec
from .analyze import AnalyzedQuery, QueryRefused, analyze
from .bounds import BoundChoice, ChosenBounds, attach, attached, bound_choice, provisional, with_bounds
from .catalog import Catalog, TableSpec
from .derived import Derived, derived_bounds, derived_values
from .plan import CONFIDENCE, NoisePlan, direct_statistic, epsilon_for_accuracy, plan_query
from .region import constant_check_sql, declared_constants
from .rewrite import bounded_sql, group_name, race_name
from .shape import check_dialect
from .views import (
    VIEW_CONFIDENCE,
    StoredView,
    ViewCodec,
    ViewRelease,
    answer,
    build_view,
    check_view_epsilon,
    over_table,
    parse_view_definition,
    read_view_query,
    stored_views,
    view_counts_sql,
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
        self._checked_tables: set[str] = set()
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
    ) -> NoisePlan:
        """Analyse and plan ``query`` without touching data or budget, at ``epsilon`` or at the least
        epsilon that meets ``accuracy=(alpha, beta)`` (see :func:`~kakeibo.sql.plan.epsilon_for_accuracy`).
        A query whose bounds are chosen privately (``"auto"``) is planned at the provisional bounds
        (:func:`~kakeibo.sql.bounds.provisional`); its plan's privacy loss is the query's whole charge."""
        return self._planned(
            query, epsilon=epsilon, accuracy=accuracy, delta=delta, dialect=dialect, bounds=bounds
        )[0]

    def _planned(
        self,
        query: str,
        *,
        epsilon: Number | None,
        accuracy: tuple[float, float] | None,
        delta: Number | None,
        dialect: str | None,
        bounds: Mapping[str, object] | None = None,
    ) -> tuple[NoisePlan, BoundChoice | None, Catalog]:
        """The plan of ``query``, what it chooses privately before its answer (:mod:`.bounds`), and the
        catalog it is planned under: the session's, with ``bounds`` overriding the limits of the query's
        grain table and the bounds of its columns (:func:`~kakeibo.sql.bounds.with_bounds`)."""
        dialect = self.dialect if dialect is None else dialect
        database = database_name(self.backend)  # the backend's, which a three-part table name may name
        catalog, against = self.catalog, self._analysed_against
        if bounds is not None:
            catalog = with_bounds(
                self.catalog, analyze(query, against, dialect=dialect, database=database), bounds
            )
            against = provisional(catalog)
        analysed = analyze(query, against, dialect=dialect, database=database)
        if (epsilon is None) == (accuracy is None):
            raise TypeError("give exactly one of epsilon= and accuracy=(alpha, beta).")
        if accuracy is not None:
            alpha, beta = _accuracy(accuracy)
            epsilon = epsilon_for_accuracy(analysed, alpha=alpha, beta=beta, delta=self._delta(delta))
        assert epsilon is not None
        plan = plan_query(analysed, epsilon=epsilon, delta=self._delta(delta))
        choice = bound_choice(analysed, plan, catalog)
        if choice is not None:
            choice.check()  # every share of epsilon by the planner's rules, before any read
        if choice is not None and accuracy is not None:
            raise QueryRefused(
                "accuracy= needs an error that does not depend on the data, but this query chooses its "
                'bounds ("auto") from the data; give epsilon=.'
            )
        return plan, choice, catalog

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
    ) -> str:
        """The bounded statement, sensitivities, noise scales and expected errors -- before spending
        (at epsilon 1 when neither ``epsilon`` nor ``accuracy`` is given); with ``nonnegative``, which
        outputs :meth:`sql` would clamp at 0. A query over a view says that the view answers it, at no
        charge, or what :meth:`sql` would do with ``outside_view``."""
        stored = self._over_view(query, outside_view)
        prefix: list[str] = []
        if stored is not None:
            try:
                read_view_query(query, stored)
            except QueryRefused as refused:
                if outside_view != "charge":
                    raise
                prefix = [
                    f"view {stored.name} cannot answer this ({refused}); charged on table {stored.table}:"
                ]
                query = over_table(query, stored)
            else:
                return f"from view {stored.name}, no charge\n{stored.describe()}"
        if epsilon is None and accuracy is None:
            epsilon = 1
        charged, choice, _ = self._planned(
            query, epsilon=epsilon, accuracy=accuracy, delta=delta, dialect=dialect, bounds=bounds
        )
        plan = charged if choice is None else choice.provisional_answer()
        lines = [
            f"privacy loss: {charged.privacy_loss}",
            *(choice.describe() if choice is not None else []),
            *_bounding(plan, (False, False) if choice is None else choice.limits),
            *([f"correlated users: {plan.correlation}"] if plan.correlation is not None else []),
            *_groups(plan),
        ]
        for stat in plan.statistics:
            m = stat.mechanism
            if stat.race is not None:
                lines.append(f"  {stat.name:<16} {stat.race.describe()}")
                continue
            if not stat.released:
                lines.append(f"  {stat.name:<16} read by the selection only (not released)")
                continue
            sensitivity = (
                f"per-group sensitivity {stat.per_group_sensitivity:g}"
                if plan.correlation is None
                else f"Bayesian sensitivity {getattr(m, 'sensitivity', 0):.6g} (replace range x (1 + l*))"
            )
            lines.append(
                f"  {stat.name:<16} {sensitivity}, "
                f"{type(m).__name__} at {m.privacy_loss}, scale {getattr(m, 'scale', 0):.4g}, "
                f"95% error +-{m.error_bound(0.05):.4g}"
            )
        for q in plan.quantiles:
            lines.append(
                f"  {q.alias:<16} quantile {q.quantile:g} of {q.column}: permute-and-flip over "
                f"{q.buckets.count} buckets of width {q.buckets.step:g}, utility sensitivity "
                f"{q.utility_sensitivity:g}, per group {q.value.privacy_loss} for the value and "
                f"{q.low.privacy_loss} for each interval end; 95% rank error +-{q.rank_error(0.05):.4g} "
                "(in bounded rows)"
            )
        hidden = [a.alias for a in plan.query.aggregates if a.alias not in plan.query.output]
        if hidden:
            lines.append(
                "not shown, read by expressions, HAVING or ORDER BY (noised and charged): "
                + ", ".join(hidden)
            )
        for d in plan.query.derived:
            lines.append(
                f"  {d.alias:<16} = {d.expression.sql('duckdb')}, computed from the released "
                f"{', '.join(d.inputs)} (no further cost); 95% interval from each input's at "
                f"1 - 0.05/{len(d.inputs)}, where interval arithmetic gives one"
            )
        if nonnegative:
            clamped = ", ".join(_never_negative(plan)) or "none"
            lines.append(f"clamped at 0 with their intervals (nonnegative=True, no cost): {clamped}")
        if choice is not None:
            lines.append("engine statement of the histograms:")
            lines.append(choice.histograms_sql())
            lines.append(
                "engine statement of the answer, at the provisional bounds (the chosen ones replace them, "
                "and the noise above scales with them):"
            )
        else:
            lines.append("engine statement:")
        lines.append(bounded_sql(plan))
        return "\n".join(prefix + lines)

    # --- views ------------------------------------------------------------------------------------------

    def create_view(
        self,
        name: str,
        query: str,
        *,
        epsilon: Number,
        rows_per_person: int = 1,
        bins: Mapping[str, int] | None = None,
        parameters: HDPViewParameters | None = None,
        rng: Rng = None,
    ) -> ViewRelease:
        """Release the view ``name`` of ``query`` (``SELECT col, ... FROM table``) as an HDPView at
        ``epsilon``, charged once; afterwards :meth:`sql` answers counts over it at no cost
        (:mod:`.views`). Each person is bounded to ``rows_per_person`` rows and the view built at ``epsilon
        / rows_per_person``. ``bins`` sets a numeric column's bin count where the catalog does not. The
        view is stored with its ledger entry: it outlives the session, and creating it again is free."""
        definition = parse_view_definition(name, query, self.catalog, bins)
        if isinstance(rows_per_person, bool) or not isinstance(rows_per_person, int) or rows_per_person < 1:
            raise QueryRefused(
                f"rows_per_person must be a whole number of at least 1, got {rows_per_person!r}."
            )
        if definition.table.privacy_unit is None and rows_per_person != 1:
            raise QueryRefused(f"each row of {definition.table.name} is a person: rows_per_person must be 1.")
        loss = PureDP(epsilon)
        if not loss.epsilon > 0:
            raise QueryRefused("a view needs a positive epsilon.")
        check_view_epsilon(definition, loss.epsilon, rows_per_person, parameters)
        settings = (loss.epsilon, rows_per_person, parameters)
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
            counts = self._execute(view_counts_sql(definition, rows_per_person))
            return build_view(
                definition,
                counts,
                epsilon=float(loss.epsilon),
                rows_per_person=rows_per_person,
                source=self.source,
                parameters=parameters,
                rng=source,
                timeout=self.backend.statement_timeout,  # the build is bounded like a statement
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

    def _over_view(self, query: str, outside_view: str) -> StoredView | None:
        if outside_view not in ("refuse", "charge"):
            raise QueryRefused(f'outside_view is "refuse" or "charge", got {outside_view!r}.')
        return self.view_of(query)

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
        stored = self._over_view(query, outside_view)
        if stored is not None:
            answered = self._from_view(query, stored, outside_view)
            if answered is not None:
                return answered
            query = over_table(query, stored)
        plan, choice, catalog = self._planned(
            query, epsilon=epsilon, accuracy=accuracy, delta=delta, dialect=dialect, bounds=bounds
        )
        if plan.delta > 0 and self.ledger.budget_kind is PureDP:
            raise QueryRefused(
                "this query needs delta > 0 for private partition selection (GROUP BY without public keys), "
                "but the ledger keeps pure-epsilon budgets; create the ledger with an (epsilon, delta) "
                "budget such as budget=(1.0, 1e-5), or declare public_values for the GROUP BY columns."
            )
        charge = release.Charge(
            plan.privacy_loss,
            label=plan.query.sql,
            analyst=self.analyst,
            dataset=self.dataset or plan.query.dataset,
            region=self._region(plan),
            request_id=self._request_id(plan, catalog, request_id),
        )

        def finish(table: pa.Table) -> tuple[ChosenBounds | None, pa.Table]:
            chosen, table = attached(table), table.replace_schema_metadata(None)
            return chosen, _post_process(plan.query, _clamped(plan, table) if nonnegative else table)

        out = release.run(
            self.ledger,
            charge,
            lambda source: self._draw(plan, choice, source),
            rng=rng,
            check=lambda: self._check_tables(plan),
            codec=_TABLES,
            finish=finish,
        )
        chosen, table = out.value
        warning = None if chosen is None or choice is None else choice.warning(chosen)
        if warning is not None:
            warnings.warn(warning, AccuracyWarning, stacklevel=2)
        return Result(
            table, plan.privacy_loss, plan.query.sql, out.ledger_entry, seeded=out.seeded, bounds=chosen
        )

    def _draw(self, plan: NoisePlan, choice: BoundChoice | None, source: RandomSource) -> pa.Table:
        """The release's draw: the engine statement(s) and all noise. With bounds to choose, the histograms'
        statement runs first and the answer's statement is compiled at the bounds chosen from them."""
        chosen = None
        if choice is not None:
            plan, chosen = choice.choose(self._execute(choice.histograms_sql()), source)
        table = _release(plan, self._execute(bounded_sql(plan)), source)
        return table if chosen is None else attach(table, chosen)

    def _execute(self, statement: str) -> pa.Table:
        """Run a statement written in DuckDB's dialect on the session's engine."""
        return self.backend.execute(
            sqlglot.transpile(statement, read="duckdb", write=self.backend.dialect)[0]
        )

    def _check_tables(self, plan: NoisePlan) -> None:
        """The engine's public facts the plan relies on: catalog types, declared-unique join keys (of public
        tables, and the keys references lead to), the columns declared constant per person that the charge's
        region relies on."""
        query = plan.query
        for table in query.tables:
            self._check_types(table)
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

    def _check_types(self, table: TableSpec) -> None:
        """Refuse a table whose engine column types differ from the catalog's (read from an empty result:
        the schema only, no row)."""
        if table.name in self._checked_tables:
            return
        name = exp.to_identifier(table.name, quoted=True).sql(self.backend.dialect)
        schema = self.backend.execute(f"SELECT * FROM {name} LIMIT 0").schema
        engine = {field.name.lower(): field.type for field in schema}
        for column in table.columns.values():
            found = engine.get(column.name)
            if found is None:
                raise CatalogMismatch(
                    f"the catalog's column {table.name}.{column.name} is not in the engine."
                )
            if not _ARROW_KINDS[column.type](found):
                raise CatalogMismatch(
                    f"column {table.name}.{column.name} is {found} in the engine but {column.type} in the "
                    "catalog; declare the engine's type (or convert the column), since comparisons would "
                    "convert it row by row."
                )
        self._checked_tables.add(table.name)

    def _check_unique(self, table: TableSpec, column: str) -> None:
        """Refuse a join on a column declared unique that is not. Reading a public table is free; the key a
        reference leads to is part of the schema the neighbour relation ranges over (databases that keep the
        catalog's declarations), so whether it holds says nothing about a person either."""
        if (table.name, column) in self._checked_unique:
            return
        dialect = self.backend.dialect
        name, col = (exp.to_identifier(n, quoted=True).sql(dialect) for n in (table.name, column))
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
            for t in declared
        ]
        if plan.correlation is not None:  # the graph itself, not only where it was declared
            tables.append((plan.correlation.digest, plan.correlation.tau))
        text = repr(
            (self.analyst, self.dataset, self.source, plan.query.sql, plan.epsilon, plan.delta, tables)
        )
        if plan.query.dialect != "duckdb":
            text += repr(("dialect", plan.query.dialect))
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


class _TableCodec:
    """A released table as an Arrow IPC stream, with the ``seeded`` mark in its schema metadata."""

    def encode(self, value: pa.Table, seeded: bool) -> bytes:
        sink = pa.BufferOutputStream()
        marked = value.replace_schema_metadata(
            {**(value.schema.metadata or {}), b"kakeibo.seeded": str(seeded)}
        )
        with pa.ipc.new_stream(sink, marked.schema) as writer:
            writer.write_table(marked)
        return bytes(sink.getvalue().to_pybytes())

    def decode(self, payload: bytes) -> tuple[pa.Table, bool]:
        table = pa.ipc.open_stream(payload).read_all()
        metadata = dict(table.schema.metadata or {})
        seeded = metadata.pop(b"kakeibo.seeded", None) == b"True"
        return table.replace_schema_metadata(metadata or None), seeded


_TABLES = _TableCodec()


def read_release(payload: bytes) -> pa.Table:
    """The released table of a payload stored with its charge (:meth:`Ledger.stored_release`), for readers
    of the ledger such as the service's dashboard."""
    return _TABLES.decode(payload)[0]


def _accuracy(accuracy: object) -> tuple[float, float]:
    if not isinstance(accuracy, tuple) or len(accuracy) != 2:
        raise TypeError(f"accuracy must be a pair (alpha, beta), got {accuracy!r}.")
    return accuracy[0], accuracy[1]


def _bounding(plan: NoisePlan, chosen: tuple[bool, bool] = (False, False)) -> list[str]:
    """How one person's contribution is bounded (``chosen``: whether kappa and L0 are chosen privately), the
    join path to the person and the bounds of every expression an aggregate reads, for
    :meth:`Session.explain`."""
    query = plan.query
    if not query.user_level:
        lines = [f"table {query.table.name}: row-level (each row is a person)"]
    else:
        assert query.person is not None and query.unit is not None and query.grain is not None
        kappa = (
            "each person's group total truncated by the R2T race"
            if query.auto_truncation
            else "kappa chosen privately"
            if chosen[0]
            else f"kappa={plan.max_rows_per_partition} rows per group"
        )
        l0 = "L0 chosen privately" if chosen[1] else f"L0={plan.max_partitions} groups per user"
        lines = [
            f"table {query.table.name}: user-level on {query.person.name}.{query.person.privacy_unit}, "
            f"{kappa}, {l0}"
            + (
                ""
                if query.grain is query.table and not query.joins
                else f" (the limits of {query.grain.name})"
            )
        ]
    for join in query.joins:
        how = {"reference": "along its reference", "public": "public", "person": "to reach the person"}[
            join.kind
        ]
        lines.append(
            f"  join {join.table.name}"
            + (f" AS {join.alias}" if join.alias else "")
            + f" ON {join.qualifier}.{join.column} = {join.left_qualifier}.{join.left_column} ({how})"
        )
    if query.unit is not None and query.joins:
        lines.append(f"  privacy unit of each joined row: {query.unit[0]}.{query.unit[1]}")
    for value in query.values:
        if value.text:
            lines.append(
                f"  {value.spec.name} = {value.text}: bounds [{value.spec.lower:.6g}, "
                f"{value.spec.upper:.6g}] by "
                "interval arithmetic on the catalog's column bounds"
            )
    return lines


def _release(plan: NoisePlan, raw: pa.Table, source: RandomSource) -> pa.Table:
    """Noise every statistic, select groups, derive the aggregates and their intervals.

    Partition selection runs first, on the distinct users of the groups the engine found; the other
    statistics are noised for the kept groups only. Every parameter of the draw (grids, guards) was fixed by
    the plan, and values are clamped into the grid's range, so nothing here depends on, or fails for, the
    groups selection dropped or the size of a value. The table's schema is the plan's (:func:`_schema`)."""
    query = plan.query
    stats = _group_statistics(plan, raw) if plan.quantiles else raw
    keys, true = _true_statistics(plan, stats)
    noisy: dict[str, Any] = {}
    keep = np.ones(len(keys), dtype=bool)
    if plan.selection is not None:
        users = np.rint(np.asarray(true["users"], dtype=np.float64)).astype(np.int64)  # weighted sums: whole
        keep = np.asarray(plan.selection.release(users, rng=source), dtype=bool)
    kept = [k for k, flag in zip(keys, keep, strict=True) if flag]
    for stat in plan.statistics:
        if stat.race is not None:
            noisy[stat.name], noisy[f"{stat.name}__shifted"] = stat.race.release(
                true[stat.name][keep], source
            )
        elif stat.released:
            values = _in_range(stat.mechanism, true[stat.name][keep])
            noisy[stat.name] = np.asarray(stat.mechanism.release(values, rng=source))
    columns: dict[str, Any] = {alias: [k[i] for k in kept] for i, alias in enumerate(query.group_aliases)}
    beta = 1 - CONFIDENCE
    quantiles = _quantiles(plan, raw, kept, beta, source) if plan.quantiles else {}
    for agg in query.aggregates:
        if agg.function == "quantile":
            value, low, high = quantiles[agg.alias]
        else:
            value, low, high = _aggregate(plan, agg.function, agg.column, noisy, beta, agg.sample)
        columns[agg.alias] = value
        columns[f"{agg.alias}_ci_low"] = low
        columns[f"{agg.alias}_ci_high"] = high
    for derived in query.derived:
        columns.update(_derived(plan, derived, columns, noisy, beta, len(kept)))
    schema = _schema(plan)
    return pa.table({name: pa.array(columns[name], type=schema.field(name).type) for name in schema.names})


def _true_statistics(plan: NoisePlan, stats: pa.Table) -> tuple[list[tuple[Any, ...]], dict[str, Any]]:
    """The group keys to release from (the public keys, or the groups the engine found) and each
    statistic's true value per key (0 for a public key the engine found no rows for); a statistic truncated
    by the R2T race has one column per threshold."""
    ngroups = len(plan.query.group_by)
    rows = stats.to_pydict()
    found = [tuple(rows[group_name(i)][r] for i in range(ngroups)) for r in range(stats.num_rows)]

    def column(name: str) -> list[Any]:
        return [0 if v is None else v for v in rows[name]]  # NULL: no rows

    values: dict[str, np.ndarray] = {}
    for s in plan.statistics:
        if s.race is None:
            values[s.name] = np.asarray(column(s.name))
        else:
            candidates = [column(race_name(s.name, j)) for j in range(s.race.candidates)]
            values[s.name] = np.asarray(candidates).T.reshape(stats.num_rows, s.race.candidates)
    if plan.public_keys is None:
        return found, values
    index = {k: r for r, k in enumerate(found)}
    keys = list(plan.public_keys)
    rows_of = np.array([index.get(k, -1) for k in keys], dtype=np.int64)
    out = {}
    for name, array in values.items():
        padded = np.concatenate([array, np.zeros((1, *array.shape[1:]), dtype=array.dtype)])
        out[name] = padded[rows_of]  # -1: the row of zeros
    return keys, out


def _in_range(mechanism: Mechanism, values: Any) -> Any:
    """``values`` clamped into what ``mechanism`` can release (NaN as 0): a real-valued mechanism's grid has a
    range, and a release must not fail for a value out of it. Clamping is 1-Lipschitz per coordinate, so it
    keeps the sensitivity; the engine's clamped sums never reach the range in practice."""
    if not isinstance(mechanism, Laplace):
        return values
    bound = mechanism.max_magnitude
    return np.clip(
        np.nan_to_num(np.asarray(values, dtype=np.float64), nan=0.0, posinf=bound, neginf=-bound),
        -bound,
        bound,
    )


#: which engine (Arrow) types hold each catalog type
_ARROW_KINDS: dict[str, Callable[[pa.DataType], bool]] = {
    "int": pa.types.is_integer,
    "float": pa.types.is_floating,
    "str": lambda t: pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_string_view(t),
    "bool": pa.types.is_boolean,
    "date": pa.types.is_date,
}
_ARROW_TYPES = {
    "int": pa.int64(),
    "float": pa.float64(),
    "str": pa.string(),
    "bool": pa.bool_(),
    "date": pa.date32(),
}


def _schema(plan: NoisePlan) -> pa.Schema:
    """The released table's schema, from the query and the catalog alone: group columns typed as the
    catalog declares them, noisy counts as int64, every other value and interval end as float64 (typing
    keys from the values found would let a dropped group change the released schema)."""
    query = plan.query
    fields: dict[str, pa.DataType] = {}
    for i, alias in enumerate(query.group_aliases):
        fields[alias] = _ARROW_TYPES[query.group_spec(i).type]
    for agg in query.aggregates:  # hidden ones too: filtered, sorted or computed on, dropped after that
        direct = direct_statistic(agg.function, agg.column)
        integer = any(s.name == direct and isinstance(s.mechanism, Geometric) for s in plan.statistics)
        fields[agg.alias] = pa.int64() if integer else pa.float64()
        fields[f"{agg.alias}_ci_low"] = fields[f"{agg.alias}_ci_high"] = pa.float64()
    for derived in query.derived:
        fields[derived.alias] = pa.string() if derived.text else pa.float64()
        fields[f"{derived.alias}_ci_low"] = fields[f"{derived.alias}_ci_high"] = pa.float64()
    order = [c for c in query.output if c in fields] + [c for c in fields if c not in query.output]
    return pa.schema([(name, fields[name]) for name in order])


def _group_statistics(plan: NoisePlan, raw: pa.Table) -> pa.Table:
    """The per-group statistics of a histogram statement: its weighted statistics summed over the buckets
    of the first histogram (integer statistics rounded: their weights sum to whole numbers)."""
    groups = [group_name(i) for i in range(len(plan.query.group_by))]
    sums = [  # COALESCE: a sum over no bucket rows (an empty selection) is 0, not NULL
        f'CAST(ROUND(COALESCE(SUM("{s.name}"), 0)) AS BIGINT) AS "{s.name}"'
        if s.integer
        else f'COALESCE(SUM("{s.name}"), 0) AS "{s.name}"'
        for s in plan.statistics
    ]
    con = duckdb.connect()
    con.register("raw", raw)
    columns = ", ".join([*groups, *sums]) or "COUNT(*) AS __rows"
    group_by = f" GROUP BY {', '.join(groups)}" if groups else ""
    return con.sql(f"SELECT {columns} FROM raw WHERE __qi = 0{group_by}").to_arrow_table()


def _quantiles(
    plan: NoisePlan, raw: pa.Table, keys: list[tuple[Any, ...]], beta: float, source: RandomSource
) -> dict[str, tuple[Any, Any, Any]]:
    """Value and interval of every quantile aggregate for the released ``keys``."""
    ngroups = len(plan.query.group_by)
    index = {k: r for r, k in enumerate(keys)}
    masses = {c: np.zeros((len(keys), plan.buckets(c).count)) for c in plan.histogram_columns}
    rows = raw.to_pydict()
    for r in range(raw.num_rows):
        bucket = rows["__bucket"][r]
        row = index.get(tuple(rows[group_name(i)][r] for i in range(ngroups)))
        if bucket is None or row is None:
            continue
        masses[plan.histogram_columns[rows["__qi"][r]]][row, bucket] += rows["__mass"][r]
    if not keys:
        return {q.alias: (np.empty(0), np.empty(0), np.empty(0)) for q in plan.quantiles}
    return {q.alias: q.release(masses[q.column], beta, source) for q in plan.quantiles}


def _derived(
    plan: NoisePlan, derived: Derived, columns: dict[str, Any], noisy: dict[str, Any], beta: float, rows: int
) -> dict[str, Any]:
    """An output computed from released aggregates (:mod:`.derived`): its values, and its ``1 - beta``
    interval from each input's interval at ``1 - beta / k`` (a quantile's interval is released at the
    query's level, so with other inputs beside it there is none)."""
    values = {name: np.asarray(columns[name], dtype=np.float64) for name in derived.inputs}
    lows, highs = {}, {}
    k = len(derived.inputs)
    for name in derived.inputs:
        agg = plan.query.aggregate(name)
        if agg.function == "quantile":  # its interval ends were drawn at the query's level
            shown = (columns[f"{name}_ci_low"], columns[f"{name}_ci_high"])
            low, high = shown if k == 1 else ([np.nan] * rows, [np.nan] * rows)
        else:
            _, low, high = _aggregate(plan, agg.function, agg.column, noisy, beta / k, agg.sample)
        lows[name], highs[name] = np.asarray(low, dtype=np.float64), np.asarray(high, dtype=np.float64)
    low, high = derived_bounds(derived, lows, highs, rows)
    value = derived_values(derived, values, rows)
    return {
        derived.alias: value if derived.text else _nulls(value),
        f"{derived.alias}_ci_low": _nulls(low),
        f"{derived.alias}_ci_high": _nulls(high),
    }


def _nulls(values: Any) -> list[float | None]:
    """NaN as SQL NULL."""
    return [None if math.isnan(v) else float(v) for v in np.asarray(values, dtype=np.float64)]


def _aggregate(
    plan: NoisePlan, function: str, column: str | None, noisy: dict[str, Any], beta: float, sample: bool
) -> tuple[Any, Any, Any]:
    """An aggregate's value and ``1 - beta`` interval per released group, recombined from the noisy
    statistics as its :class:`~kakeibo.sql.aggregates.AggregateSpec` says."""
    spec = aggregate_spec(function, plan.query.auto_truncation)
    return spec.estimate(NoisyStatistics(plan, noisy), column, beta, sample)


def _never_negative(plan: NoisePlan) -> list[str]:
    """The aggregates whose true value cannot be negative: counts, variances and standard deviations, and
    sums, averages and quantiles of a column bounded below by 0."""
    query = plan.query
    found = []
    for agg in query.aggregates:
        lower = None if agg.column is None else query.value(agg.column).spec.lower
        bounded = lower is not None and lower >= 0
        if agg.function in ("count", "count_distinct_unit", "variance", "stddev") or bounded:
            found.append(agg.alias)
    return found


def _clamped(plan: NoisePlan, table: pa.Table) -> pa.Table:
    """Each never-negative aggregate and its interval's ends clamped at 0 (its true value lies in the
    clamped interval whenever it lay in the released one)."""
    for alias in _never_negative(plan):
        for name in (f"{alias}{end}" for end in _ENDS):
            column = table.column(name)
            clamped = pc.max_element_wise(column, pa.scalar(0, type=column.type))
            table = table.set_column(table.column_names.index(name), name, clamped)
    return table


#: the columns of an aggregate: its value and its interval's ends
_ENDS = ("", "_ci_low", "_ci_high")


def _groups(plan: NoisePlan) -> list[str]:
    """How the released groups are chosen, and the values of each GROUP BY expression, for
    :meth:`Session.explain`."""
    query = plan.query
    if not query.group_by:
        return ["groups: one, the whole table (no GROUP BY)"]
    if plan.public_keys is None:
        selection = plan.selection
        assert selection is not None
        lines = [
            "groups: private selection (Desfontaines et al. 2022), each key kept with the optimal "
            f"probability for its distinct users at {selection.privacy_loss} over "
            f"L0={selection.max_partitions} keys: 50% from {selection.users_for(0.5)} users, 95% from "
            f"{selection.users_for(0.95)}, always from {selection.n2 + 1}"
        ]
    else:
        lines = [
            f"groups: all {len(plan.public_keys):,} public keys (from the catalog's public_values and the "
            "results of GROUP BY expressions)"
        ]
    for alias, key in zip(query.group_aliases, query.group_expressions, strict=True):
        if key is not None:
            values = (
                "found by selection" if key.public_values is None else ", ".join(map(repr, key.public_values))
            )
            lines.append(f"  key {alias} = {key.text}: values {values}")
    return lines


def _post_process(query: AnalyzedQuery, table: pa.Table) -> pa.Table:
    """HAVING, ORDER BY and LIMIT on released values (post-processing: no privacy cost), then the hidden
    aggregates (read by expressions, HAVING or ORDER BY only) dropped."""
    hidden = {f"{a.alias}{end}" for a in query.aggregates if a.alias not in query.output for end in _ENDS}
    shown = [name for name in table.column_names if name not in hidden]
    if query.having is None and not query.order_by and query.limit is None:
        return table.select(shown)
    con = duckdb.connect()
    con.register("released", table)
    sql = "SELECT * FROM released"
    if query.having is not None:
        sql += f" WHERE {query.having.sql('duckdb')}"
    if query.order_by:
        sql += " ORDER BY " + ", ".join(f'"{c}" {"DESC" if d else "ASC"}' for c, d in query.order_by)
    if query.limit is not None:
        sql += f" LIMIT {int(query.limit)}"
    return con.sql(sql).to_arrow_table().select(shown)


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
