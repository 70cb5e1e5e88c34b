"""What :meth:`Session.explain <kakeibo.sql.session.Session.explain>` says of a query before it spends: its
privacy loss, how one person's contribution is bounded, how the released groups are chosen, each noisy
statistic's mechanism, scale and expected error, and the engine statement(s) -- all read from the noise
plan (public inputs only), so explaining a query reads no data and costs nothing.
"""

from __future__ import annotations

from .bounds import BoundChoice
from .execute import never_negative
from .plan import NoisePlan
from .rewrite import bounded_sql

__all__ = ["explanation"]


def explanation(charged: NoisePlan, choice: BoundChoice | None, nonnegative: bool) -> list[str]:
    """The lines of ``explain``'s text for the plan ``charged`` (its privacy loss is the query's charge) and
    its private choice of bounds, if any (then the statistics are shown at the provisional bounds); with
    ``nonnegative``, which outputs the answer clamps at 0."""
    plan = charged if choice is None else choice.provisional_answer()
    widest = None if choice is None or choice.measured else choice.widest_answer()
    lines = [
        f"privacy loss: {charged.privacy_loss}",
        *(choice.describe() if choice is not None else []),
        *_bounding(plan, (False, False) if choice is None else choice.limits),
        *([f"correlated users: {plan.correlation}"] if plan.correlation is not None else []),
        *_groups(plan),
        *_statistics(plan, widest),
        *_outputs(plan),
    ]
    if nonnegative:
        clamped = ", ".join(never_negative(plan)) or "none"
        lines.append(f"clamped at 0 with their intervals (nonnegative=True, no cost): {clamped}")
    if choice is not None and choice.measured:
        lines.append(
            "engine statement of the answer (a statement of truncated totals measures the drop first):"
        )
    elif choice is not None:
        lines.append("engine statement of the histograms:")
        lines.append(choice.histograms_sql())
        lines.append(
            "engine statement of the answer, at the provisional bounds (the chosen ones replace them, "
            "and the noise above scales with them):"
        )
    else:
        lines.append("engine statement:")
    lines.append(bounded_sql(plan))
    return lines


def _statistics(plan: NoisePlan, widest: NoisePlan | None = None) -> list[str]:
    """Each noisy statistic's mechanism, scale and 95% error (or its R2T race), and each quantile's
    permute-and-flip draw. With bounds still to be chosen, ``plan`` holds the smallest candidates and
    ``widest`` the widest: each statistic's error is shown as the range between them, never as the
    provisional plan's alone."""
    if widest is not None:
        return [
            f"  {stat.name:<16} {type(stat.mechanism).__name__}; 95% error between "
            f"+-{stat.mechanism.error_bound(0.05):.4g} (at the smallest limits and bounds) and "
            f"+-{wide.mechanism.error_bound(0.05):.4g} (at the widest), set by the bounds chosen privately; "
            "the answer reports the chosen bounds and what they drop"
            for stat, wide in zip(plan.statistics, widest.statistics, strict=True)
            if stat.released
        ] + [
            f"  {q.alias:<16} quantile {q.quantile:g} of {q.column}: permute-and-flip; its buckets and "
            "limits follow the bounds chosen privately"
            for q in plan.quantiles
        ]
    lines: list[str] = []
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
    return lines


def _outputs(plan: NoisePlan) -> list[str]:
    """The aggregates noised but not shown, the outputs computed from released aggregates, and the terms
    HAVING and ORDER BY compute from released values."""
    lines: list[str] = []
    hidden = [a.alias for a in plan.query.aggregates if a.alias not in plan.query.output]
    if hidden:
        lines.append(
            "not shown, read by expressions, HAVING or ORDER BY (noised and charged): " + ", ".join(hidden)
        )
    for d in plan.query.derived:
        lines.append(
            f"  {d.alias:<16} = {d.expression.sql('duckdb')}, computed from the released "
            f"{', '.join(d.inputs)} (no further cost); 95% interval from each input's at "
            f"1 - 0.05/{len(d.inputs)}, where interval arithmetic gives one"
        )
    for t in plan.query.terms:
        lines.append(
            f"  {t.alias:<16} = {t.expression.sql('duckdb')}, computed by kakeibo from the released "
            f"{', '.join(t.inputs)} for HAVING or ORDER BY (no further cost; NULL where it has no value)"
        )
    return lines


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
