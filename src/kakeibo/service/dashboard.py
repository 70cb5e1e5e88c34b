"""The service's budget dashboard: a web page of privacy budgets and query histories (issue 7). This module
builds its data; :mod:`.routes.dashboard` serves it and the page.

* ``GET /v1/dashboard`` (JSON) -- with an analyst's key, that analyst's view: each dataset granted to them
  with its dataset-wide budget, spent and remaining (as ``/v1/budget`` shows them), and their own budget,
  spending over time and query history on it. With the admin key, the same for every configured dataset and
  every analyst who has a grant or a charge on it.
* ``GET /dashboard`` -- a static page (HTML, and a separate script and style sheet) that asks for a key,
  fetches the JSON with it and draws one chart and one history table per (dataset, analyst). It loads
  nothing from elsewhere and is served with ``Content-Security-Policy: default-src 'self'``, so no inline
  script can run even if some text slipped through as markup (the script inserts every text as text).

A history row carries its ledger entry, time, SQL (the entry's label), loss and, per aggregate of the
released table stored with the charge, the median width of its 95% confidence intervals over the groups.
The spending curve is exact under the ledger's composition policy (a WHERE-disjoint query composed in
parallel adds less than its epsilon): it is :meth:`Ledger.spending`, the scope's spent after each charge.

The chart draws epsilon; budgets, spent and remaining carry delta too (the service's budgets are
(epsilon, delta) pairs). Numbers that are
not finite are sent as ``null`` so the JSON stays valid.
"""

import logging
import math
import statistics
from collections.abc import Collection
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

import pyarrow as pa

from ..accounting import Ledger
from ..accounting.ledger import LedgerEntry, Scope
from ..privacy import PrivacyLoss
from ..sql.session import read_release
from .registry import AnalystRegistry

__all__ = ["CONTENT_SECURITY_POLICY", "Viewer", "dashboard_data", "loss_json"]

log = logging.getLogger("kakeibo.service")

#: The dashboard page's policy: it loads nothing from elsewhere and runs no inline script.
CONTENT_SECURITY_POLICY = "default-src 'self'"


@dataclass(frozen=True)
class Viewer:
    """Who asks: one analyst, or the administrator (``analyst is None``)."""

    analyst: str | None


def dashboard_data(
    ledger: Ledger, registry: AnalystRegistry, datasets: Collection[str], who: Viewer
) -> dict[str, Any]:
    """The JSON document of ``GET /v1/dashboard`` for ``who`` (see the module docstring)."""
    budgets = ledger.budgets()
    entries = ledger.entries(analyst=who.analyst)
    revoked = {str(a["name"]): bool(a["revoked"]) for a in registry.analysts()}
    if who.analyst is None:
        shown = list(datasets)
        pairs = {(name, ds) for name in revoked for ds in registry.datasets(name)}
        pairs |= {(e.analyst, e.dataset) for e in entries if e.analyst is not None and e.dataset is not None}
    else:
        shown = [ds for ds in registry.datasets(who.analyst) if ds in datasets]
        pairs = {(who.analyst, ds) for ds in shown}
    return {
        "viewer": {"role": "admin"} if who.analyst is None else {"role": "analyst", "name": who.analyst},
        "datasets": [
            {
                "name": ds,
                **_totals(ledger, budgets, Scope(dataset=ds)),
                "analysts": [
                    _analyst(ledger, budgets, Scope(name, ds), revoked.get(name, False))
                    for name, pair_ds in sorted(pairs)
                    if pair_ds == ds
                ],
            }
            for ds in shown
        ],
    }


def _analyst(
    ledger: Ledger,
    budgets: dict[Scope, PrivacyLoss],
    scope: Scope,
    revoked: bool,
) -> dict[str, Any]:
    """One (analyst, dataset): budget, spent, remaining, the spending curve and the query history."""
    curve = ledger.spending(analyst=scope.analyst, dataset=scope.dataset)
    mine = [entry for entry, _ in curve]
    return {
        "name": scope.analyst,
        "revoked": revoked,
        **_totals(ledger, budgets, scope),
        "series": [
            {"time": e.created_at.isoformat(), "epsilon": _number(getattr(total, "epsilon", math.nan))}
            for e, total in curve
        ],
        "history": [
            {
                "entry": e.seq,
                "time": e.created_at.isoformat(),
                "sql": e.label,
                **loss_json(e.loss),
                "intervals": _interval_widths(ledger, e),
            }
            for e in mine
        ],
    }


def _totals(ledger: Ledger, budgets: dict[Scope, PrivacyLoss], scope: Scope) -> dict[str, Any]:
    """Budget, spent and remaining of a scope (budget and remaining are null when it has no budget)."""
    has_budget = scope in budgets
    return {
        "budget": loss_json(budgets[scope]) if has_budget else None,
        "spent": loss_json(ledger.spent(analyst=scope.analyst, dataset=scope.dataset)),
        "remaining": (
            loss_json(ledger.remaining(analyst=scope.analyst, dataset=scope.dataset)) if has_budget else None
        ),
    }


def _interval_widths(ledger: Ledger, entry: LedgerEntry) -> list[dict[str, Any]] | None:
    """Per aggregate ``A`` of the release stored with ``entry``: the median of ``A_ci_high - A_ci_low`` over
    its groups, and the number of groups; ``None`` when no intact released table is stored."""
    if entry.request_id is None:
        return None
    try:
        payload = ledger.stored_release(entry.request_id)
    except ValueError:  # the stored payload fails its checksum: say nothing about it
        log.warning("the release of ledger entry %d fails its checksum", entry.seq)
        return None
    if payload is None:
        return None
    try:
        table = read_release(payload)
    except pa.ArrowException:  # a payload that is not a released table (the ledger may store any bytes)
        return None
    widths = []
    for column in table.column_names:
        alias = column.removesuffix("_ci_low")
        if alias == column or f"{alias}_ci_high" not in table.column_names:
            continue
        lows, highs = table[column].to_pylist(), table[f"{alias}_ci_high"].to_pylist()
        spans = [
            float(high) - float(low)
            for low, high in zip(lows, highs, strict=True)
            if _real(low) and _real(high)
        ]
        finite = [span for span in spans if math.isfinite(span)]
        widths.append(
            {
                "aggregate": alias,
                "median_width": _number(statistics.median(finite)) if finite else None,
                "groups": table.num_rows,
            }
        )
    return widths


def _real(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _number(value: float | Fraction) -> float | None:
    """``value`` as a float, or ``None`` when it is not finite (JSON has no NaN or infinity)."""
    number = float(value)
    return number if math.isfinite(number) else None


def loss_json(loss: PrivacyLoss) -> dict[str, float | None]:
    """``{"epsilon", "delta"}`` of a loss, JSON-safe (a pure loss has delta 0; a mechanism's loss with its
    curve, such as a synthesis', is read as the ``(epsilon, delta)`` it declares)."""
    loss = getattr(loss, "declared", loss)
    return {
        "epsilon": _number(getattr(loss, "epsilon", math.nan)),
        "delta": _number(getattr(loss, "delta", 0)),
    }
