"""Queries whose join results reference several persons, answered by R2T's linear program.

Dong, Fang, Yi, Tao and Machanavajjhala, "R2T: Instance-optimal Truncation for Differentially Private Query
Evaluation with Foreign Keys", SIGMOD 2022 (seed 002, slides 91-93). A transfer between two customers, a
friendship edge, a triangle of friends, a line item whose order's customer and whose supplier are both
protected: one join result belongs to several persons, and clipping one person's total changes another's,
so the per-person truncation of :mod:`kakeibo.sql.truncation` does not bound it. The one-person analysis
(:mod:`kakeibo.sql.tables`) refuses such a FROM clause with
:class:`~kakeibo.sql.catalog.SeveralPersons`, and the session answers it here.

**Neighbour relation.** Add or remove one person -- one privacy-unit value of one table of persons (TPC-H's
customer or supplier) -- with every row that reaches them along references, and so with every join result
that references them. A join result whose person key is NULL belongs to nobody and is dropped, as the
one-person statement drops a row whose person is NULL.

**What is answered.** One ``COUNT(*)``, ``COUNT(expression)`` or ``SUM(expression)`` (an expression over
bounded columns as :mod:`kakeibo.sql.values` reads it, bounded below by 0), without HAVING, ORDER BY,
LIMIT or DISTINCT, optionally grouped by columns whose ``public_values`` the catalog declares (every key of
their product is released, empty ones too, so no partition selection is needed; at most
:data:`MAX_GROUPS`), over tables joined by the equalities the query states
(:meth:`~kakeibo.sql.tables.Tables`, ``several=True``: no cross join; public tables on a unique key), with a
WHERE clause checked total as everywhere (:mod:`kakeibo.sql.predicates`).

**The statement.** The engine only joins: one statement returns, per join result, each of its persons' keys
(:attr:`~kakeibo.sql.tables.Tables.person_keys`) and its weight ``psi``: 1 for ``COUNT(*)``, 0 or 1 for
``COUNT(x)``, and for ``SUM(x)`` the value clamped into the expression's bounds ``[lower, upper]`` (NULL
counts 0) by :func:`~kakeibo.sql.values.clamped_sql`, the clamp every aggregate's value goes through. The
statement aggregates nothing, so nothing can overflow; its conditions, casts and expressions are those of
every other statement, total by construction.

**Mechanism.** In Python, the results become an :class:`~kakeibo.sql.truncation_lp.Incidence` (a person is
a key of one table of persons: equal keys of two tables are two persons) and R2T's race runs over the
program's certified values (:func:`~kakeibo.sql.truncation_lp.race_release`): thresholds ``tau_j = GS /
b^(K - j)``, ``j = 0 .. K = floor(log_b N)``, up to ``GS = M N`` (``M``: the most one result adds, 1 or the
expression's upper bound; ``N``: the most join results one person reaches, ``bounds={"max_rows_bound": N}``,
else the largest ``max_rows_bound`` the query's sensitive tables declare, else 10^6; ``b``: the first
sensitive table's ``truncation_base``; whole numbers for a count), each
candidate ``(epsilon / k)``-DP with Laplace noise of sensitivity ``(1 + 2e-6) tau_j``; ``epsilon``-DP in
all. ``N`` is public and sets only the grid: privacy holds whatever the data, and ``N`` too low costs
accuracy only (the interval's upper end then fails to hold, see below). Grouped by ``G`` public keys, each
group's results are raced at ``epsilon / G``: a person's results may fall in every group, and sequential
composition over the groups makes the release ``epsilon``-DP whatever they do (no parallel composition is
claimed, so no bound on a person's groups is needed).

**Accuracy.** The released value is R2T's: with probability at least 95% (``beta = 0.05``) it is at most the
true answer (every candidate's noise within its shift), and R2T's Theorem 5.1 bounds how far below. The
result's interval is ``[value, Q~_K + 2 shift_K]``: its lower end is the value itself (the one-sided
guarantee), its upper end holds when no person reaches more than ``GS`` of weight.

**What this does not hide.** The join's and the programs' time grow with the number of join results (as
every statement's time does, ``docs/architecture.md``, threat table).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from fractions import Fraction
from typing import cast

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from sqlglot import exp

from ..errors import ArgumentError
from ..noise import RandomSource
from ..privacy import Number, PureDP, as_fraction
from .aggregate_calls import AggregateReader, is_aggregate
from .aggregates import CONFIDENCE
from .analyze import plain_strings
from .catalog import Catalog, QueryRefused, TableSpec, person_columns
from .condition_types import where_condition
from .predicates import strip
from .shape import ValueColumn, parse_select
from .tables import Tables
from .truncation import DEFAULT_BOUND, Race
from .truncation_lp import Incidence, program_race, race_release
from .values import clamped_sql

__all__ = ["ProgramQuery", "analyze_program", "draw"]

#: the clauses R2T's program does not answer yet, by the name a refusal gives them
_CLAUSES = {
    "having": "HAVING",
    "order": "ORDER BY",
    "limit": "LIMIT",
    "offset": "OFFSET",
    "distinct": "SELECT DISTINCT",
}


@dataclass(frozen=True)
class ProgramQuery:
    """A query answered by R2T's program (module docstring): the engine ``statement`` (DuckDB's dialect)
    that returns ``__p0 .. __p{k-1}`` (the persons' keys, of the tables of persons ``person_tables``) and,
    unless every weight is 1, ``__psi``; the race; the output ``alias``; and what the session checks against
    the engine before the draw: the ``tables`` read, the columns ``read``, and the keys each join needs
    ``unique``."""

    sql: str
    dialect: str
    alias: str
    statement: str
    person_tables: tuple[str, ...]
    weighted: bool
    race: Race
    row_bound: float
    max_rows: int
    epsilon: Fraction
    tables: tuple[TableSpec, ...]
    read: frozenset[str]
    unique: tuple[tuple[TableSpec, str], ...]
    group_names: tuple[str, ...] = ()
    keys: tuple[tuple[object, ...], ...] = ((),)

    @property
    def privacy_loss(self) -> PureDP:
        return PureDP(self.epsilon)

    @property
    def dataset(self) -> str | None:
        """The ledger's dataset of the charge: the one table of persons, else none (a charge that names no
        dataset counts against every dataset's budget, since it read several)."""
        persons = set(self.person_tables)
        return persons.pop() if len(persons) == 1 else None

    def describe(self) -> list[str]:
        """What :meth:`~kakeibo.sql.session.Session.explain` says: the statement, the program's shape, the
        race. The program's size (its join results and persons) depends on the data, so it is not shown."""
        persons = ", ".join(dict.fromkeys(self.person_tables))
        weight = "the clamped value" if self.weighted else "1"
        return [
            f"engine statement (joins only; no aggregate): {self.statement}",
            f"R2T's linear program per threshold tau: one variable u_q in [0, psi_q] per join result (psi = "
            f"{weight}), maximise sum u_q subject to sum of u_q over the results of each person <= tau; "
            f"{len(self.person_tables)} person keys per result, persons of table(s) {persons}",
            f"GS = {self.row_bound:g} x {self.max_rows:,} join results per person; {self.race.describe()}"
            + (
                f"; one race per key of {', '.join(self.group_names)} ({len(self.keys):,} public keys, each "
                f"at epsilon {float(self.epsilon) / len(self.keys):.4g})"
                if self.group_names
                else ""
            ),
            f"epsilon {float(self.epsilon):g} (pure), charged once; interval: [released value, top candidate "
            f"+ 2 shifts] at {CONFIDENCE:.0%}",
        ]


def analyze_program(
    sql: str,
    catalog: Catalog,
    *,
    why: str,
    dialect: str,
    database: str | None,
    epsilon: Number,
    bounds: Mapping[str, object] | None = None,
) -> ProgramQuery:
    """``sql`` read for R2T's program (module docstring), or :class:`QueryRefused` naming what is not
    answered (``why``: what made the query one of several persons). Reads no data."""
    select = plain_strings(parse_select(sql, dialect, person_columns(catalog)))
    for key, name in _CLAUSES.items():
        if select.args.get(key):
            raise QueryRefused(
                f"{name} is not supported yet where a join result can belong to several persons ({why}); "
                "R2T's linear program answers one COUNT or SUM there, grouped by columns with public values."
            )
    tables = Tables(select, catalog, dialect, database, several=True)
    correlated = [key[0] for key in tables.person_keys if catalog.tables[key[0]].correlation is not None]
    if correlated:
        raise QueryRefused(
            f"the persons of table {correlated[0]} are correlated, and R2T's program calibrates for "
            "independent persons; query that table alone."
        )
    groups = _groups(select, tables, why)
    aggregates = [e for e in select.expressions if is_aggregate(strip(e.unalias()))]
    if len(aggregates) != 1 or len(select.expressions) != 1 + len(groups):
        raise QueryRefused(
            f"a query whose join results can belong to several persons ({why}) selects one COUNT or SUM, "
            "and no column but the ones it groups by."
        )
    node = aggregates[0]
    reader = AggregateReader(tables, sql)
    call = reader.read(strip(node.unalias()))
    if call.function not in ("count", "sum"):
        raise QueryRefused(
            f"{call.function.upper()} is not supported yet where a join result can belong to several "
            f"persons ({why}); R2T's linear program answers one COUNT or SUM there."
        )
    value = None if call.column is None else reader.values[call.column]
    weight, row_bound = _weight(call.function, value)
    persons = tables.person_keys
    selected = [f"{_column(q, c)} AS __p{i}" for i, (_, q, c) in enumerate(persons)]
    if weight is not None:
        selected.append(f"{weight} AS __psi")
    selected += [f"{g.column} AS __g{i}" for i, g in enumerate(groups)]
    conditions = [f"{_column(q, c)} IS NOT NULL" for _, q, c in persons]
    conditions += [g.member for g in groups]
    where = where_condition(select, tables)
    if where is not None:
        conditions.insert(0, f"({where.sql('duckdb')})")
    statement = f"SELECT {', '.join(selected)} FROM {_sources(tables)} WHERE {' AND '.join(conditions)}"
    sensitive = [s.spec for s in tables.sources if not s.spec.public]
    max_rows = _max_rows(bounds, sensitive)
    share = as_fraction(epsilon, "epsilon")
    keys = _keys(groups)
    race = program_race(
        row_bound,
        max_rows,
        sensitive[0].truncation_base,
        share / len(keys),
        1 - CONFIDENCE,
        integer=weight is None,
    )
    specs = tuple(dict.fromkeys([*(s.spec for s in tables.sources), *(j.table for j in tables.joins)]))
    return ProgramQuery(
        sql=sql,
        dialect=dialect,
        alias=node.alias.lower() if isinstance(node, exp.Alias) else call.base_name,
        statement=statement,
        person_tables=tuple(table for table, _, _ in persons),
        weighted=weight is not None,
        race=race,
        row_bound=row_bound,
        max_rows=max_rows,
        epsilon=share,
        tables=specs,
        read=frozenset(tables.resolve(c).column.name for c in select.find_all(exp.Column)),
        unique=_unique_keys(tables, catalog),
        group_names=tuple(g.name for g in groups),
        keys=keys,
    )


def draw(query: ProgramQuery, execute: Callable[[str], pa.Table], source: RandomSource) -> pa.Table:
    """Run the statement, race each group's program values (module docstring; the groups in the order of
    :attr:`ProgramQuery.keys`, each at ``epsilon / G``) and return the released table: the group columns,
    the value and its 95% interval, one row per public key."""
    raw = execute(query.statement)
    found = incidence(raw, query.person_tables, query.weighted)
    group = np.zeros(raw.num_rows, dtype=np.int64)
    for i, values in enumerate(zip(*query.keys, strict=True) if query.group_names else ()):
        public = list(dict.fromkeys(values))
        column = raw.column(f"__g{i}")
        index = pc.index_in(column, value_set=pa.array(public, type=column.type))
        group = group * len(public) + np.asarray(index.to_numpy(zero_copy_only=False), dtype=np.int64)
    released = [race_release(query.race, part, source) for part in found.split(group, len(query.keys))]
    columns: dict[str, pa.Array] = {
        name: pa.array([key[i] for key in query.keys]) for i, name in enumerate(query.group_names)
    }
    columns[query.alias] = pa.array([value for value, _ in released], pa.float64())
    columns[f"{query.alias}_ci_low"] = pa.array([value for value, _ in released], pa.float64())
    columns[f"{query.alias}_ci_high"] = pa.array([high for _, high in released], pa.float64())
    return pa.table(columns)


@dataclass(frozen=True)
class _Group:
    """A GROUP BY column: its output ``name``, the statement's ``column``, its public ``values`` and the
    statement's condition that a row holds one of them (``member``)."""

    name: str
    column: str
    values: tuple[object, ...]
    member: str


#: the most groups (the product of the grouping columns' public value counts) one query releases
MAX_GROUPS = 10_000


def _groups(select: exp.Select, tables: Tables, why: str) -> list[_Group]:
    """The query's GROUP BY columns, each a column the SELECT list names too and whose public values the
    catalog declares (text, integers or booleans): every one of their keys is released, with no partition
    selection, so the keys say nothing of the data."""
    group = select.args.get("group")
    if group is None:
        return []
    found = []
    outputs = {
        strip(e.unalias()).sql(): e for e in select.expressions if not is_aggregate(strip(e.unalias()))
    }
    for node in group.expressions:
        node = strip(node)
        ref = tables.resolve(node) if isinstance(node, exp.Column) else None
        values = None if ref is None else ref.column.public_values
        if ref is None or values is None or ref.column.type not in ("str", "int", "bool"):
            raise QueryRefused(
                f"where a join result can belong to several persons ({why}), GROUP BY takes text, integer or "
                "boolean columns whose public_values the catalog declares, not "
                f"{node.sql(dialect=tables.dialect)}."
            )
        output = outputs.get(node.sql())
        if output is None:
            raise QueryRefused(f"the GROUP BY column {node.sql(dialect=tables.dialect)} is selected too.")
        column = tables.engine_column(cast(exp.Column, node))
        member = column.isin(*(exp.convert(v) for v in values)).sql("duckdb")
        name = output.alias.lower() if isinstance(output, exp.Alias) else ref.column.name
        found.append(_Group(name, column.sql("duckdb"), tuple(values), member))
    return found


def _keys(groups: list[_Group]) -> tuple[tuple[object, ...], ...]:
    """Every key of ``groups`` (their public values' product, in declared order), or a refusal past
    :data:`MAX_GROUPS`."""
    keys: list[tuple[object, ...]] = [()]
    for g in groups:
        keys = [(*key, v) for key in keys for v in dict.fromkeys(g.values)]
        if len(keys) > MAX_GROUPS:
            raise QueryRefused(
                f"the GROUP BY columns have more than {MAX_GROUPS:,} keys together; each key is released."
            )
    return tuple(keys)


def incidence(raw: pa.Table, person_tables: tuple[str, ...], weighted: bool) -> Incidence:
    """The join results of the statement's output ``raw`` as an incidence: each table of persons' keys
    numbered together (one table's equal keys are one person, two tables' are two), the weights ``__psi``
    (NULL: 0) or 1. Columnar throughout: Arrow's dictionary encoding, no Python loop over rows."""
    m = raw.num_rows
    codes: list[np.ndarray] = [np.zeros(0, dtype=np.int64)] * len(person_tables)
    offset = 0
    for table in dict.fromkeys(person_tables):
        positions = [i for i, t in enumerate(person_tables) if t == table]
        arrays = [raw.column(f"__p{i}").combine_chunks() for i in positions]
        keys = pc.dictionary_encode(pa.concat_arrays(_common(arrays)))
        numbers = np.asarray(keys.indices.to_numpy(zero_copy_only=False), dtype=np.int64) + offset
        for j, i in enumerate(positions):
            codes[i] = numbers[j * m : (j + 1) * m]
        offset += len(keys.dictionary)
    weights = None
    if weighted:
        psi = raw.column("__psi").combine_chunks().fill_null(0.0).cast(pa.float64())
        weights = np.asarray(psi.to_numpy(zero_copy_only=False), dtype=np.float64)
    return Incidence.from_codes(codes, offset, weights)


def _common(arrays: list[pa.Array]) -> list[pa.Array]:
    """``arrays`` (one table of persons' keys, read through different columns) in one type in which equal
    keys are equal: as they are when their types agree; integers of different widths or signs as
    ``decimal128(20, 0)``, which holds every 64-bit integer exactly; anything else as text."""
    kinds = {a.type for a in arrays}
    if len(kinds) == 1:
        return arrays
    if all(pa.types.is_integer(kind) for kind in kinds):
        return [a.cast(pa.decimal128(20, 0)) for a in arrays]
    return [a.cast(pa.large_string()) for a in arrays]


def _weight(function: str, value: ValueColumn | None) -> tuple[str | None, float]:
    """The engine expression of ``psi`` (``None``: always 1) and the most one result adds."""
    if value is None:
        return None, 1.0
    computed = value.sql.sql("duckdb")
    if function == "count":
        return f"CASE WHEN {computed} IS NULL THEN CAST(0 AS DOUBLE) ELSE CAST(1 AS DOUBLE) END", 1.0
    spec = value.spec
    shown = value.text or spec.name
    if spec.auto_bounds or spec.lower is None or spec.upper is None:
        raise QueryRefused(
            f"SUM({shown}) over join results of several persons needs declared bounds of {shown}; bounds "
            "chosen from the data are not supported there yet."
        )
    if spec.lower < 0 or spec.upper <= 0:
        raise QueryRefused(
            f"SUM({shown}) over join results of several persons needs values bounded below by 0 and above by "
            f"a positive bound (R2T's weights are never negative); {shown} is bounded by [{spec.lower:g}, "
            f"{spec.upper:g}]."
        )
    return clamped_sql(computed, spec.lower, spec.upper, flush=not value.text), float(spec.upper)


def _max_rows(bounds: Mapping[str, object] | None, sensitive: list[TableSpec]) -> int:
    """The most join results one person reaches: ``bounds["max_rows_bound"]``, else the largest
    ``max_rows_bound`` the query's sensitive tables declare, else
    :data:`~kakeibo.sql.truncation.DEFAULT_BOUND` (the one-person race's default)."""
    given = dict(bounds or {})
    unknown = sorted(set(given) - {"max_rows_bound"})
    if unknown:
        raise ArgumentError(
            f"a query whose join results can belong to several persons takes bounds={{'max_rows_bound': N}} "
            f"only (the most join results one person reaches), not {', '.join(unknown)}."
        )
    declared = [t.max_rows_bound for t in sensitive if t.max_rows_bound != DEFAULT_BOUND]
    value = given.get("max_rows_bound", max(declared, default=DEFAULT_BOUND))
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
        raise ArgumentError(f"max_rows_bound must be a positive integer, got {value!r}.")
    return int(value)


def _column(qualifier: str, column: str) -> str:
    return exp.column(column, table=qualifier, quoted=True).sql("duckdb")


def _quoted(node: exp.Expression) -> str:
    """An equality of :attr:`Tables.links` with its columns quoted, for the statement."""

    def quote(child: exp.Expr) -> exp.Expr:
        if isinstance(child, exp.Column):
            return exp.column(child.name.lower(), table=child.table.lower(), quoted=True)
        return child

    return node.transform(quote).sql("duckdb")


def _sources(tables: Tables) -> str:
    """The FROM clause: the first table, each next one joined ON every equality the query states between it
    and the ones before, then the tables that lead to persons."""
    first = tables.sources[0]
    parts = [f"{first.spec.engine_name()} AS {_name(first.qualifier)}"]
    for source, equalities in tables.links:
        condition = " AND ".join(_quoted(e) for e in equalities)
        parts.append(f"JOIN {source.spec.engine_name()} AS {_name(source.qualifier)} ON {condition}")
    for join in tables.joins:
        parts.append(
            f"JOIN {join.table.engine_name()} AS {_name(join.qualifier)} "
            f"ON {_column(join.qualifier, join.column)} = {_column(join.left_qualifier, join.left_column)}"
        )
    return " ".join(parts)


def _name(qualifier: str) -> str:
    return exp.to_identifier(qualifier, quoted=True).sql("duckdb")


def _unique_keys(tables: Tables, catalog: Catalog) -> tuple[tuple[TableSpec, str], ...]:
    """The keys the session checks unique before the draw: each public table's join key, and every key a
    reference of a table read leads to that is not a privacy unit (a hidden join, or the query's own)."""
    found: list[tuple[TableSpec, str]] = []
    for source, equalities in tables.links:
        if source.spec.public:
            ends = [c for e in equalities for c in e.find_all(exp.Column) if c.table == source.qualifier]
            columns = {c.name.lower() for c in ends}
            found.extend((source.spec, c) for c in sorted(columns) if source.spec.column(c).unique)
    read = [s.spec for s in tables.sources] + [j.table for j in tables.joins]
    for spec in read:
        for reference in spec.references:
            target = catalog.tables[reference.table]
            if reference.key != target.privacy_unit:
                found.append((target, reference.key))
    return tuple(dict.fromkeys(found))
