"""The options of one query: the keywords :meth:`Session.plan <kakeibo.sql.session.Session.plan>`,
:meth:`~kakeibo.sql.session.Session.explain` and :meth:`~kakeibo.sql.session.Session.sql` share, gathered
once and checked once, so that planning, explaining and answering read the same object."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ..errors import ArgumentTypeError
from ..privacy import Number
from .catalog import QueryRefused

if TYPE_CHECKING:
    from .dp_clause import DPClause

__all__ = ["QueryOptions"]

_ONE_BUDGET = "give exactly one of epsilon= and accuracy=(alpha, beta)."


@dataclass(frozen=True)
class QueryOptions:
    """How one query is planned and answered.

    ``epsilon``, or ``accuracy=(alpha, beta)`` for the least epsilon that meets it; ``delta`` (``None``:
    the session's default); ``dialect`` the query is written in (``None``: the session's); ``nonnegative``
    to clamp never-negative aggregates at 0; ``bounds`` overriding the catalog's limits and column bounds
    for this query; ``outside_view``, what a query a view cannot answer does; ``check_bounds`` to measure,
    at a tenth of epsilon, what declared limits drop (:func:`~kakeibo.sql.bounds.bound_check`); ``clause``,
    what the query's own ``WITH DIFFERENTIAL_PRIVACY`` clause says (:mod:`kakeibo.sql.dp_clause`). The fields
    are in the order of :meth:`~kakeibo.sql.session.Session.explain`'s keywords, which the session passes
    by position.

    Construction refuses what the keywords alone show wrong (both ``epsilon`` and ``accuracy``, an
    ``accuracy`` that is not a pair, an unknown ``outside_view``); that a query names its budget at all is
    checked when it is planned (:meth:`require_budget`), since a query a view answers needs none.
    """

    epsilon: Number | None = None
    accuracy: tuple[float, float] | None = None
    delta: Number | None = None
    dialect: str | None = None
    nonnegative: bool = False
    bounds: Mapping[str, object] | None = None
    outside_view: str = "refuse"
    check_bounds: bool = False
    clause: DPClause | None = None

    def __post_init__(self) -> None:
        if self.epsilon is not None and self.accuracy is not None:
            raise ArgumentTypeError(_ONE_BUDGET)
        accuracy: object = self.accuracy
        if accuracy is not None and (not isinstance(accuracy, tuple) or len(accuracy) != 2):
            raise ArgumentTypeError(f"accuracy must be a pair (alpha, beta), got {accuracy!r}.")
        if not isinstance(self.check_bounds, bool):
            raise ArgumentTypeError(f"check_bounds is True or False, got {self.check_bounds!r}.")
        if self.outside_view not in ("refuse", "charge"):
            raise QueryRefused(f'outside_view is "refuse" or "charge", got {self.outside_view!r}.')

    def require_budget(self) -> None:
        """Refuse a query to be planned that names neither ``epsilon`` nor ``accuracy``."""
        if self.epsilon is None and self.accuracy is None:
            raise ArgumentTypeError(_ONE_BUDGET)
