"""Compile a planned query into ONE SQL statement that bounds every user's contribution inside the engine.

The statement (DuckDB dialect, translated by sqlglot for the other engines) has these steps:

1. ``filtered``: the analyst's WHERE, the public-key filter, and each value column clamped to its catalog
   bounds (``LEAST(GREATEST(x, lower), upper)``; NULL stays NULL, so COUNT(x) and AVG(x) skip it) and
   flushed to 0 below ``TINY`` (:func:`kakeibo.sql.values.clamped_sql`: the magnitudes that keep every
   later product, square and per-person sum total, :mod:`kakeibo.sql.values`). A column that is only
   counted (text, dates, bools, numbers without bounds) becomes 1 or NULL: casting text to a number would
   fail on some values, summing unbounded doubles can overflow, and an engine error is a free answer about
   the rows.
2. ``per_key``: pre-aggregation per (user, group): rows, non-null counts and sums of clamped values, and
   a random number ``r``; ``ranked`` numbers each user's groups in that random order
   (``ROW_NUMBER() OVER (PARTITION BY user ORDER BY r)``: engines refuse a volatile window order).
3. the result: per group, over the user's first ``L0`` groups only, the sums of the *bounded* partial
   aggregates: ``min(rows, kappa)``, ``min(n, kappa)``, and the partial sum scaled by
   ``min(n, kappa) / n`` (as if the user had ``min(n, kappa)`` rows at their mean: every contribution lies
   within ``kappa`` times the column bounds, which is what the sensitivities in :mod:`.plan` assume), plus
   the number of distinct users.

A join to a declared public table happens in ``filtered``, before any bounding. Rows without a privacy
unit (NULL) belong to no known person and are dropped: kept together they would form one pseudo-user whose
choice of groups could change wholesale with one person's rows. Which groups and rows are kept depends
only on the user's own rows and on randomness independent of the data, so the bounds hold whatever the
engine's ``random()`` is: it needs no cryptographic strength.

Quantiles need, per group, the bounded mass of every bucket of the column (:mod:`.quantiles`). Then the
statement joins each filtered row to its user's kept groups and weighs it ``min(n, kappa) / n`` (COUNT(*)
and distinct users weigh ``min(rows, kappa) / rows`` and ``1 / rows``), and the result has one row per
(group, histogram ``__qi``, bucket); summed over the buckets of ``__qi = 0`` the weighted statistics are
exactly the ones above. ``ranked`` is read once, so its random order is drawn once: the statistics and the
histograms see the same ``L0`` groups of each user. A bucket's mass weighs a row ``min(n, kappa_q) / n`` in
the first ``L0_q <= L0`` of its person's kept groups (0 in the others), where the quantiles' own limits
(chosen privately, :mod:`.bounds`) may differ from the statistics'; each person then adds at most
``kappa_q`` to the histograms of at most ``L0_q`` groups, what the quantiles are calibrated for.

Pre-aggregating per (user, group) and clamping the partial aggregates is the cheap way to bound
(Wilson et al. 2020 bound rows by sampling; this keeps every row's information and needs one grouping
pass). Row-level tables skip step 2: each row is a person (kappa = L0 = 1).
"""

from __future__ import annotations

import functools
from collections.abc import Sequence

import sqlglot
from sqlglot import exp

from .aggregates import Operands, StatisticKind, Weights
from .catalog import TableSpec
from .dialects import double_text, engine
from .dialects.semantics import LikeMatching
from .plan import NoisePlan
from .predicates import linear_like
from .values import clamped_sql

__all__ = [
    "bound_histograms_sql",
    "bounded_sql",
    "bucket_name",
    "engine_sql",
    "group_name",
    "ladder_name",
    "ladder_sql",
    "per_person_sql",
    "public_values_sql",
    "race_name",
]


@functools.lru_cache(maxsize=256)
def engine_sql(statement: str, dialect: str) -> str:
    r"""``statement``, written in DuckDB's dialect like every statement here, as the engine whose backends
    have ``dialect`` runs it: translated by sqlglot and, on an engine whose LIKE backtracks
    (``like_matching``), with each LIKE it would match in more than linear time as
    :func:`~kakeibo.sql.predicates.linear_like` writes it.

    Cached per (statement, dialect): a pure function, and the parse and the generation cost tens of
    milliseconds for a bounded statement (most of a small query's time on DuckDB). Whether a translation is
    cached shows only in latency, and a statement is a function of public inputs and of values already
    released (privately chosen bounds), never of the rows themselves.

    >>> statement = "SELECT COUNT(*) FROM t WHERE s LIKE '%a%' ESCAPE '!' AND s NOT LIKE '%a%b' ESCAPE '!'"
    >>> print(engine_sql(statement, "postgres"))
    SELECT COUNT(*) FROM t WHERE s LIKE '%a%' ESCAPE '!' AND s NOT LIKE '%a%b' ESCAPE '!'
    >>> print(engine_sql(statement, "spark"))
    SELECT COUNT(*) FROM t WHERE s LIKE '%a%' ESCAPE '!' AND NOT s RLIKE '(?s)^(?>.*?\\Qa\\E).*?\\Qb\\E\\z'
    """
    tree = sqlglot.parse_one(statement, read="duckdb")
    if engine(dialect).like_matching is LikeMatching.BACKTRACKING_REGEX:
        tree = tree.transform(linear_like)
    return tree.sql(dialect=dialect)


def _q(name: str) -> str:
    return exp.to_identifier(name, quoted=True).sql("duckdb")


def _literal(value: object) -> str:
    if isinstance(value, bool):
        return "TRUE" if value else "FALSE"
    if isinstance(value, (int, float)):
        return repr(value)
    return exp.Literal.string(str(value)).sql("duckdb")


def race_name(statistic: str, j: int) -> str:
    """Name of the j-th candidate of a statistic's R2T race in the engine's result."""
    return f"{statistic}__r{j}"


def ladder_name(i: int, j: int) -> str:
    """Name of the j-th threshold of the i-th ladder in the result of :func:`ladder_sql`."""
    return f"__l{i}_{j}"


def ladder_sql(plan: NoisePlan, ladders: Sequence[tuple[StatisticKind, str | None, Sequence[float]]]) -> str:
    """The statement of the truncated totals that choose thresholds privately
    (:class:`~kakeibo.sql.truncation.Ladder`): one row, with column :func:`ladder_name` ``(i, j)`` the mass,
    over every kept (user, group) pair (a user's first ``L0`` groups, as the answer keeps them), of the i-th
    statistic's (a kind and its column) per-pair totals between its thresholds ``j - 1`` and ``j`` (from 0
    for ``j = 0``; :meth:`~kakeibo.sql.aggregates.StatisticKind.step_mass`). A summed column is clamped to
    the plan's bounds first (``[0, top]`` or ``[-top, top]``, the top threshold), so each truncated total
    is exact and every sum stays finite."""
    filtered, gcols, value_columns = _filtered(plan)
    outputs = [
        _cast(kind.step_mass(_operands(plan, column), low, high), False) + f" AS {_q(ladder_name(i, j))}"
        for i, (kind, column, taus) in enumerate(ladders)
        for j, (low, high) in enumerate(zip((0.0, *taus[:-1]), taus, strict=True))
    ]
    return (
        f"WITH {_ranked(plan, filtered, gcols, value_columns)} "
        f"SELECT {', '.join(outputs)} FROM ranked WHERE __rank <= {plan.max_partitions}"
    )


def public_values_sql(table: TableSpec, column: str, limit: int) -> str:
    """The distinct non-NULL values of a public table's column, at most ``limit`` of them (DuckDB's
    dialect): the keys a grouping column of a public table releases (``Session._public_table_keys``)."""
    value = _q(column)
    source = table.engine_name()
    return f"SELECT DISTINCT {value} AS v FROM {source} WHERE {value} IS NOT NULL LIMIT {int(limit)}"


def group_name(i: int) -> str:
    """Name of the i-th group column in the engine's result."""
    return f"__g{i}"


def bucket_name(column: str) -> str:
    """Name of a column's bucket index in ``filtered``."""
    return "__b_" + column


def bounded_sql(plan: NoisePlan) -> str:
    """The engine statement for ``plan`` in DuckDB's dialect (see the module docstring)."""
    filtered, gcols, value_columns = _filtered(plan)
    if plan.quantiles:
        return _histograms(plan, filtered, gcols, value_columns)
    if plan.query.user_level:
        return _user_level(plan, filtered, gcols, value_columns)
    return _row_level(plan, filtered, gcols)


def per_person_sql(plan: NoisePlan) -> str:
    """The rows of ``plan`` aggregated per (person, group) without bounds or noise: what any person-level DP
    engine must compute at least, the floor the benchmarks compare kakeibo's statement with."""
    filtered, gcols, value_columns = _filtered(plan)
    keys = ", ".join(["__unit", *gcols] if plan.query.user_level else ["1", *gcols])
    sums = "".join(f", SUM({_q('__v_' + c)})" for c in value_columns)
    return f"WITH filtered AS ({filtered}) SELECT {keys}, COUNT(*){sums} FROM filtered GROUP BY {keys}"


def bound_histograms_sql(
    plan: NoisePlan, rows: int, groups: int, values: tuple[str, ...], powers: range
) -> str:
    """The statement of the histograms that choose a query's ``"auto"`` bounds (:mod:`kakeibo.sql.bounds`):
    rows ``(__h, __a, __b, __c)``. ``__h = 0``: for each of a person's ``g`` groups with ``2^a <= rows <
    2^(a+1)`` and ``2^b <= g < 2^(b+1)``, a weight ``1 / g``, summed over persons (the last bins open above:
    ``rows`` and ``groups`` bins in all). ``__h = i`` (1-based): for the i-th column of ``values``, each
    person's share of their non-NULL values in bin ``__a`` of :func:`value_bin_sql` over ``powers``,
    summed over persons (on a row-level table, where the limits are 1, each row weighs 1 and there is no
    ``__h = 0``). Each person's weights sum to 1 in every histogram: L1 sensitivity 1. The bins are
    comparisons with integers or exact powers of two, total on every engine and for every value (NaN and
    the infinities land in the last bins)."""
    filtered, gcols, _ = _filtered(plan, clamp=False)
    ctes = [f"filtered AS ({filtered})"]
    parts = []
    if plan.query.user_level:
        keys = ", ".join(["__unit", *gcols])
        ctes += [
            f"per_key AS (SELECT {keys}, COUNT(*) AS __rows FROM filtered GROUP BY {keys})",
            "pairs AS (SELECT __rows, COUNT(*) OVER (PARTITION BY __unit) AS __g FROM per_key)",
        ]
        parts.append(
            f"SELECT 0 AS __h, __a, __b, SUM(__w) AS __c FROM (SELECT {_power_bin('__rows', rows)} AS __a, "
            f"{_power_bin('__g', groups)} AS __b, CAST(1 AS DOUBLE) / __g AS __w FROM pairs) AS __p "
            "GROUP BY __a, __b"
        )
    for i, column in enumerate(values, start=1):
        value = _q("__v_" + column)
        binned = value_bin_sql(value, powers)
        if not plan.query.user_level:  # each row is a person: weight 1
            parts.append(
                f"SELECT {i} AS __h, __a, 0 AS __b, CAST(COUNT(*) AS DOUBLE) AS __c FROM (SELECT {binned} "
                f"AS __a FROM filtered WHERE {value} IS NOT NULL) AS __p GROUP BY __a"
            )
            continue
        ctes.append(
            f"values_{i} AS (SELECT __unit, {binned} AS __a, COUNT(*) AS __c "
            f"FROM filtered WHERE {value} IS NOT NULL GROUP BY __unit, {binned})"
        )
        parts.append(
            f"SELECT {i} AS __h, __a, 0 AS __b, SUM(__w) AS __c FROM (SELECT __a, CAST(__c AS DOUBLE) / "
            f"SUM(__c) OVER (PARTITION BY __unit) AS __w FROM values_{i}) AS __p GROUP BY __a"
        )
    return f"WITH {', '.join(ctes)} " + " UNION ALL ".join(parts)


def _power_bin(count: str, bins: int) -> str:
    """``floor(log2(count))`` of a positive integer, capped at ``bins - 1``, by integer comparisons."""
    whens = " ".join(f"WHEN {count} < {2 ** (a + 1)} THEN {a}" for a in range(bins - 1))
    return f"CASE {whens} ELSE {bins - 1} END"


def value_bin_sql(value: str, powers: range) -> str:
    """The signed bin of a double: 0 for 0; ``j`` (``-j``) for a positive (negative) value whose magnitude
    is at most ``2^powers[j - 1]`` and above the power before; ``len(powers) + 1`` (negated for
    negatives) beyond the last power, for NaN and for the infinities."""
    top = len(powers) + 1
    positive = " ".join(
        f"WHEN {value} > 0 AND {value} <= {double_text(2.0**k)} THEN {j}" for j, k in enumerate(powers, 1)
    )
    negative = " ".join(
        f"WHEN {value} < 0 AND {value} >= {double_text(-(2.0**k))} THEN {-j}" for j, k in enumerate(powers, 1)
    )
    return f"CASE WHEN {value} = 0 THEN 0 {positive} {negative} WHEN {value} < 0 THEN {-top} ELSE {top} END"


def _filtered(plan: NoisePlan, clamp: bool = True) -> tuple[str, list[str], list[str]]:
    """The statement's first step ``filtered`` (see the module docstring), the group columns and the value
    columns it computes; with ``clamp`` false, a column whose bounds are still to be chosen is not clamped."""
    query = plan.query
    source, qualify = _sources(plan)

    def column(name: str, owner: str) -> str:
        return f"{qualify[owner]}.{_q(name)}" if query.joins else _q(name)

    keys = [
        column(col, owner) if expression is None else expression.sql.sql("duckdb")
        for col, owner, expression in zip(
            query.group_by, query.group_tables, query.group_expressions, strict=True
        )
    ]
    groups = [f"{key} AS {group_name(i)}" for i, key in enumerate(keys)]
    value_columns = sorted(  # a column COUNT(DISTINCT col) alone reads is read as stored, not clamped
        {s.column for s in plan.statistics if s.column is not None and not s.kind.raw}.union(
            plan.histogram_columns
        )
    )
    clamped = [
        f"{query.value(col).sql.sql('duckdb')} AS {_q('__d_' + col)}"
        for col in sorted({s.column for s in plan.statistics if s.column is not None and s.kind.raw})
    ]
    for col in value_columns:
        read = query.value(col)
        spec, computed = read.spec, read.sql.sql("duckdb")
        numeric = spec.type in ("int", "float", "decimal")
        if numeric and spec.auto_bounds and not clamp:  # binned by comparisons only (bound_histograms_sql)
            value = f"CAST({computed} AS DOUBLE)"
        elif numeric and spec.lower is not None and spec.upper is not None:
            # an expression is flushed already (kakeibo.sql.values), and so stays within bounds that are
            # 0 or at least TINY in magnitude
            value = clamped_sql(computed, spec.lower, spec.upper, flush=not read.text)
        else:  # only counted (COUNT(col) of text, dates, bools, unbounded numbers): never cast or summed
            value = f"CASE WHEN {computed} IS NULL THEN NULL ELSE CAST(1 AS DOUBLE) END"
        clamped.append(f"{value} AS {_q('__v_' + col)}")
        if col in plan.histogram_columns:
            clamped.append(f"{plan.buckets(col).sql(value)} AS {_q(bucket_name(col))}")
    conditions = []
    if query.where is not None:
        conditions.append(f"({query.where.sql('duckdb')})")
    if plan.public_keys is not None and query.group_by:
        for i, key in enumerate(keys):
            expression = query.group_expressions[i]
            if expression is not None:  # it takes its public values only, or NULL
                if expression.not_null is not None:
                    conditions.append(expression.not_null.sql("duckdb"))
                continue
            values = sorted({k[i] for k in plan.public_keys}, key=repr)
            conditions.append(f"{key} IN ({', '.join(_literal(v) for v in values)})")
    unit = []
    if query.unit is not None:
        holder, name = query.unit
        unit_column = f"{_q(holder)}.{_q(name)}" if query.joins else _q(name)
        conditions.append(f"{unit_column} IS NOT NULL")
        unit = [f"{unit_column} AS __unit"]
    where = f" WHERE {' AND '.join(conditions)}" if conditions else ""
    filtered = f"SELECT {', '.join([*unit, *groups, *clamped]) or '1 AS __one'} FROM {source}{where}"
    return filtered, [group_name(i) for i in range(len(query.group_by))], value_columns


def _sources(plan: NoisePlan) -> tuple[str, dict[str, str]]:
    """The FROM clause, and the qualifier of each table by name. Joins run before bounding, so a sensitive
    row repeated by several matching rows of another table is still bounded per person."""
    query = plan.query
    root = _q(query.table_alias or query.table.name)
    if not query.joins:
        return query.table.engine_name() + (f" AS {root}" if query.table.schema else ""), {
            query.table.name: root
        }
    qualify = {query.table.name: root}
    parts = [f"{query.table.engine_name()} AS {root}"]
    for join in query.joins:
        qualifier = _q(join.qualifier)
        qualify[join.table.name] = qualifier
        parts.append(
            f"JOIN {join.table.engine_name()} AS {qualifier} "
            f"ON {qualifier}.{_q(join.column)} = {_q(join.left_qualifier)}.{_q(join.left_column)}"
        )
    return " ".join(parts), qualify


def _operands(plan: NoisePlan, column: str | None) -> Operands:
    """The names a statistic of ``column`` reads in the statement (see the module docstring)."""
    return Operands(
        kappa=plan.max_rows_per_partition,
        column=None if column is None else plan.query.value(column).spec,
        value=_q(f"__v_{column}"),
        rows="__rows",
        count=_q(f"__n_{column}"),
        total=_q(f"__s_{column}"),
        squares=_q(f"__q_{column}"),
        positive=_q(f"__p_{column}"),
        negative=_q(f"__m_{column}"),
        distinct=_q(f"__d_{column}"),
    )


def _row_level(plan: NoisePlan, filtered: str, gcols: list[str]) -> str:
    outputs = [
        _cast(stat.kind.row_level(_operands(plan, stat.column)), stat.integer) + f" AS {_q(stat.name)}"
        for stat in plan.statistics
    ]
    group_by = f" GROUP BY {', '.join(gcols)}" if gcols else ""
    return f"WITH filtered AS ({filtered}) SELECT {', '.join([*gcols, *outputs])} FROM filtered{group_by}"


def _ranked(plan: NoisePlan, filtered: str, gcols: list[str], value_columns: list[str]) -> str:
    """The CTEs ``filtered``, ``per_key`` (partial aggregates per user and group, with a random number)
    and ``ranked`` (each user's groups numbered in that random order)."""
    partials = ["COUNT(*) AS __rows"]
    for col in value_columns:
        sql = _operands(plan, col)
        partials += [f"COUNT({sql.value}) AS {sql.count}", f"SUM({sql.value}) AS {sql.total}"]
        partials += [p for s in plan.statistics if s.column == col for p in s.kind.partials(sql)]
        partials += [
            p
            for s in plan.statistics
            if s.column == col and s.truncation is not None
            for p in s.kind.truncation_partials(sql)
        ]
    keys = ", ".join(["__unit", *gcols])
    per_key = f"SELECT {keys}, {', '.join(partials)}, random() AS __r FROM filtered GROUP BY {keys}"
    ranked = "SELECT *, ROW_NUMBER() OVER (PARTITION BY __unit ORDER BY __r) AS __rank FROM per_key"
    return f"filtered AS ({filtered}), per_key AS ({per_key}), ranked AS ({ranked})"


def _user_level(plan: NoisePlan, filtered: str, gcols: list[str], value_columns: list[str]) -> str:
    outputs = []
    for stat in plan.statistics:
        sql = _operands(plan, stat.column)
        if stat.truncation is not None:  # each user's total truncated at the chosen tau
            outputs.append(_cast(stat.kind.truncated(sql, stat.truncation), False) + f" AS {_q(stat.name)}")
            continue
        if stat.race is None:
            outputs.append(_cast(stat.kind.user_level(sql), stat.integer) + f" AS {_q(stat.name)}")
            continue
        for j, tau in enumerate(stat.race.taus):  # the race's candidates: each user's total truncated at tau
            outputs.append(
                _cast(stat.kind.truncated(sql, tau), stat.integer) + f" AS {_q(race_name(stat.name, j))}"
            )
    group_by = f" GROUP BY {', '.join(gcols)}" if gcols else ""
    return (
        f"WITH {_ranked(plan, filtered, gcols, value_columns)} "
        f"SELECT {', '.join([*gcols, *outputs])} FROM ranked WHERE __rank <= {plan.max_partitions}{group_by}"
    )


def _histograms(plan: NoisePlan, filtered: str, gcols: list[str], value_columns: list[str]) -> str:
    """The statement of a query with quantiles: one row per (group, ``__qi``, ``__bucket``) with the
    weighted statistics and the bucket's bounded ``__mass`` (see the module docstring)."""
    kappa, l0 = plan.max_rows_per_partition, plan.max_partitions
    user_level = plan.query.user_level
    if user_level:
        kept = ", ".join(
            [
                "k.__rows AS __k_rows",
                "k.__rank AS __k_rank",
                *(f"k.{_q('__n_' + c)} AS {_q('__k_n_' + c)}" for c in value_columns),
            ]
        )
        on = " AND ".join(["f.__unit = k.__unit", *(f"f.{g} IS NOT DISTINCT FROM k.{g}" for g in gcols)])
        ctes = (
            f"WITH {_ranked(plan, filtered, gcols, value_columns)}, joined AS (SELECT f.*, {kept} "
            f"FROM filtered AS f JOIN ranked AS k ON {on} WHERE k.__rank <= {l0})"
        )
        row_weight = f"CAST(LEAST(__k_rows, {kappa}) AS DOUBLE) / __k_rows"
        user_weight = "CAST(1 AS DOUBLE) / __k_rows"
    else:
        ctes = f"WITH joined AS ({filtered})"
        row_weight = user_weight = "CAST(1 AS DOUBLE)"

    def weight(col: str) -> str:
        if not user_level:
            return "CAST(1 AS DOUBLE)"
        n = _q("__k_n_" + col)
        return f"CAST(LEAST({n}, {kappa}) AS DOUBLE) / NULLIF({n}, 0)"

    def mass_weight(col: str) -> str:
        if not user_level:
            return "CAST(1 AS DOUBLE)"
        n = _q("__k_n_" + col)
        kept = f"CAST(LEAST({n}, {plan.quantile_rows}) AS DOUBLE) / NULLIF({n}, 0)"
        if plan.quantile_partitions == l0:
            return kept
        return f"CASE WHEN __k_rank <= {plan.quantile_partitions} THEN {kept} ELSE 0 END"

    outputs = []
    for stat in plan.statistics:
        weights = Weights(rows=row_weight, users=user_weight, value=weight(str(stat.column)))
        expr = stat.kind.weighted(_operands(plan, stat.column), weights)
        outputs.append(f"COALESCE({expr}, 0) AS {_q(stat.name)}")
    columns = plan.histogram_columns
    if len(columns) == 1:
        source, bucket, mass = "joined", _q(bucket_name(columns[0])), mass_weight(columns[0])
        qi = "0"
    else:
        values = ", ".join(f"({i})" for i in range(len(columns)))
        source = f"joined CROSS JOIN (VALUES {values}) AS __h(__qi)"
        bucket = "CASE __qi " + " ".join(f"WHEN {i} THEN {_q(bucket_name(c))}" for i, c in enumerate(columns))
        mass = "CASE __qi " + " ".join(f"WHEN {i} THEN {mass_weight(c)}" for i, c in enumerate(columns))
        bucket, mass, qi = bucket + " END", mass + " END", "__qi"
    outputs.append(f"COALESCE(SUM(CASE WHEN {bucket} IS NOT NULL THEN {mass} END), 0) AS __mass")
    keys = [*gcols, f"{qi} AS __qi", f"{bucket} AS __bucket"]
    group_by = ", ".join([*gcols, qi, bucket]) if qi != "0" else ", ".join([*gcols, bucket])
    return f"{ctes} SELECT {', '.join([*keys, *outputs])} FROM {source} GROUP BY {group_by}"


def _cast(expr: str, integer: bool) -> str:
    return f"CAST({expr} AS {'BIGINT' if integer else 'DOUBLE'})"
