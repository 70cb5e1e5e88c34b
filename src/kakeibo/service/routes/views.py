"""The views resource: ``POST /v1/views`` releases a view of a granted dataset, charged once at its epsilon;
``GET /v1/views`` lists the views of a dataset (their definitions, bins, sizes and losses; their released
blocks stay server-side). A query over a view is answered by ``POST /v1/query`` (:mod:`.queries`)."""

from typing import Annotated, Any

from fastapi import APIRouter, Depends, Query
from pydantic import Field

from ...sql.views import StoredView
from ..context import ServiceContext
from ..http_errors import KEYED, mapped, responses
from ..models import Bins, Epsilon, RowsPerPerson, StrictRequest

__all__ = ["ViewRequest", "router", "view_json"]


class ViewRequest(StrictRequest):
    """A view to release: ``sql`` is ``SELECT col, ... FROM table``, charged ``epsilon`` once."""

    dataset: str = Field(max_length=64)
    name: Annotated[str, Field(min_length=1, max_length=64, pattern=r"^[A-Za-z_][A-Za-z0-9_]*$")]
    sql: str = Field(max_length=20_000)
    epsilon: Epsilon
    rows_per_person: RowsPerPerson = 1
    bins: Bins | None = Field(
        default=None, max_length=64, description="bins of numeric columns the catalog gives none"
    )


def view_json(stored: StoredView) -> dict[str, Any]:
    """What the service says of a view: its definition, bins, size and loss (its blocks stay server-side)."""
    return {
        "name": stored.name,
        "sql": stored.sql,
        "columns": [
            {"name": a.name, "bins": a.bins, "public_values": None if a.values is None else list(a.values)}
            for a in stored.axes
        ],
        "blocks": stored.view.blocks,
        "epsilon": stored.epsilon,
        "rows_per_person": stored.rows_per_person,
    }


def router(context: ServiceContext) -> APIRouter:
    """The views resource's routes, on ``context``'s datasets."""
    routes = APIRouter()
    analyst = Depends(context.analyst)

    @routes.post("/v1/views", responses=responses(*KEYED, 400, 403, 409, 422, 500, 503))
    def create_view(body: ViewRequest, name: Annotated[str, analyst]) -> dict[str, Any]:
        dataset = context.granted(name, body.dataset)
        with mapped(dataset.engine_errors):
            built = context.session(name, dataset).create_view(
                body.name,
                body.sql,
                epsilon=body.epsilon,
                rows_per_person=body.rows_per_person,
                bins=body.bins,
            )
        assert built.ledger_entry is not None  # the session charged its ledger (or replayed the entry)
        return {**view_json(built.view), "ledger_entry": built.ledger_entry.seq}

    @routes.get("/v1/views", responses=responses(*KEYED, 403, 422))
    def list_views(
        dataset: Annotated[str, Query(max_length=64)], name: Annotated[str, analyst]
    ) -> list[dict[str, Any]]:
        answering = context.session(name, context.granted(name, dataset))
        return [view_json(stored) for stored in answering.views().values()]

    return routes
