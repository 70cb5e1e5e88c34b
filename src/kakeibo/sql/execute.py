"""The noise plan's draw and answer: what :meth:`Session.sql <kakeibo.sql.session.Session.sql>` hands to
:func:`kakeibo.release.run`.

:func:`draw` is the release's draw (step 2 of :mod:`.session`): the engine statement(s) of the plan, run by
the ``execute`` callable the session hands in, then every noise draw in memory -- partition selection first,
then noise for the kept groups only, each value clamped into its noise grid's range -- and the aggregates'
values and intervals recombined from the noisy statistics. :func:`finish` is the answer (step 4): the
stored table post-processed (``nonnegative`` clamps, HAVING, ORDER BY, LIMIT), for a fresh release and a
replayed one alike. :class:`TableCodec` stores the drawn table with its charge.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import duckdb
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ..mechanisms import Geometric, Laplace, Mechanism
from ..noise import RandomSource
from .aggregates import AGGREGATES, NoisyStatistics, aggregate_spec
from .analyze import Aggregate, AnalyzedQuery
from .bounds import BoundChoice, ChosenBounds, attach, attached
from .derived import Derived, derived_bounds, derived_values
from .plan import CONFIDENCE, NoisePlan, direct_statistic
from .rewrite import bounded_sql, group_name, race_name

__all__ = ["TableCodec", "draw", "finish", "never_negative", "read_release"]


def draw(
    plan: NoisePlan, choice: BoundChoice | None, execute: Callable[[str], pa.Table], source: RandomSource
) -> pa.Table:
    """The release's draw: the engine statement(s) and all noise. ``execute`` runs one statement written in
    DuckDB's dialect on the engine. With bounds to choose (``choice``), the histograms' statement runs
    first and the answer's statement is compiled at the bounds chosen from them, which ride along in the
    table's metadata (:func:`~kakeibo.sql.bounds.attach`)."""
    chosen = None
    if choice is not None:
        plan, chosen = choice.choose(execute, source)
    table = _release(plan, execute(bounded_sql(plan)), source)
    return table if chosen is None else attach(table, chosen)


def finish(plan: NoisePlan, table: pa.Table, nonnegative: bool) -> tuple[ChosenBounds | None, pa.Table]:
    """The answer from a drawn or stored table (post-processing, no privacy cost): the bounds chosen
    privately, if any, and the table with ``nonnegative``'s clamps, HAVING, ORDER BY and LIMIT applied."""
    chosen, table = attached(table), table.replace_schema_metadata(None)
    return chosen, _post_process(plan.query, _clamped(plan, table) if nonnegative else table)


class TableCodec:
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


def read_release(payload: bytes) -> pa.Table:
    """The released table of a payload stored with its charge (:meth:`Ledger.stored_release`), for readers
    of the ledger such as the service's dashboard."""
    return TableCodec().decode(payload)[0]


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
    released = NoisyStatistics(plan, noisy, quantiles)
    for agg in query.aggregates:
        value, low, high = _aggregate(plan, agg, released, beta)
        columns[agg.alias] = value
        columns[f"{agg.alias}_ci_low"] = low
        columns[f"{agg.alias}_ci_high"] = high
    for derived in query.derived:
        columns.update(_derived(plan, derived, columns, released, beta, len(kept)))
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


#: the Arrow type of a group column of each catalog type (the released table's schema)
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
    plan: NoisePlan,
    derived: Derived,
    columns: dict[str, Any],
    released: NoisyStatistics,
    beta: float,
    rows: int,
) -> dict[str, Any]:
    """An output computed from released aggregates (:mod:`.derived`): its values, and its ``1 - beta``
    interval from each input's interval at ``1 - beta / k`` (a quantile's interval is released at the
    query's level, so with other inputs beside it there is none)."""
    values = {name: np.asarray(columns[name], dtype=np.float64) for name in derived.inputs}
    lows, highs = {}, {}
    k = len(derived.inputs)
    for name in derived.inputs:
        _, low, high = _aggregate(plan, plan.query.aggregate(name), released, beta / k)
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
    plan: NoisePlan, agg: Aggregate, released: NoisyStatistics, beta: float
) -> tuple[Any, Any, Any]:
    """An aggregate's value and ``1 - beta`` interval per released group, from the noisy statistics or its
    selections as its :class:`~kakeibo.sql.aggregates.AggregateSpec` says."""
    return aggregate_spec(agg.function, plan.raced_form).estimate(released, agg, beta)


def never_negative(plan: NoisePlan) -> list[str]:
    """The aggregates whose true value cannot be negative: counts, variances and standard deviations, and
    sums, averages and quantiles of a column bounded below by 0."""
    query = plan.query
    found = []
    for agg in query.aggregates:
        lower = None if agg.column is None else query.value(agg.column).spec.lower
        if AGGREGATES[agg.function].never_negative(lower):
            found.append(agg.alias)
    return found


def _clamped(plan: NoisePlan, table: pa.Table) -> pa.Table:
    """Each never-negative aggregate and its interval's ends clamped at 0 (its true value lies in the
    clamped interval whenever it lay in the released one)."""
    for alias in never_negative(plan):
        for name in (f"{alias}{end}" for end in _ENDS):
            column = table.column(name)
            clamped = pc.max_element_wise(column, pa.scalar(0, type=column.type))
            table = table.set_column(table.column_names.index(name), name, clamped)
    return table


def _with_terms(query: AnalyzedQuery, table: pa.Table) -> pa.Table:
    """``table`` with each term of HAVING and ORDER BY as a column, computed from the released columns by
    :func:`~kakeibo.sql.derived.derived_values` (total: NULL where it cannot be computed). A text column
    is read as its texts, any other as doubles."""
    for term in query.terms:
        columns = {
            name: table.column(name).to_pylist()
            if pa.types.is_string(table.column(name).type)
            else np.asarray(table.column(name).cast(pa.float64()).fill_null(np.nan), dtype=np.float64)
            for name in term.inputs
        }
        values = derived_values(term, columns, table.num_rows)
        typed = pa.array(values, pa.string()) if term.text else pa.array(_nulls(values), pa.float64())
        table = table.append_column(term.alias, typed)
    return table


#: the columns of an aggregate: its value and its interval's ends
_ENDS = ("", "_ci_low", "_ci_high")


def _post_process(query: AnalyzedQuery, table: pa.Table) -> pa.Table:
    """HAVING, ORDER BY and LIMIT on released values (post-processing: no privacy cost), after the terms
    they name are computed by kakeibo (:func:`_with_terms`), then the hidden aggregates (read by
    expressions, HAVING or ORDER BY only) and the terms dropped. NULLs sort last either way."""
    hidden = {f"{a.alias}{end}" for a in query.aggregates if a.alias not in query.output for end in _ENDS}
    shown = [name for name in table.column_names if name not in hidden]
    if query.having is None and not query.order_by and query.limit is None:
        return table.select(shown)
    con = duckdb.connect()
    con.register("released", _with_terms(query, table))
    sql = "SELECT * FROM released"
    if query.having is not None:
        sql += f" WHERE {query.having.sql('duckdb')}"
    if query.order_by:
        sql += " ORDER BY " + ", ".join(
            f'"{c}" {"DESC" if d else "ASC"} NULLS LAST' for c, d in query.order_by
        )
    if query.limit is not None:
        sql += f" LIMIT {int(query.limit)}"
    return con.sql(sql).to_arrow_table().select(shown)
