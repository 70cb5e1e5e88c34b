"""The queries resource: ``POST /v1/query`` answers a query, charged to the calling analyst; ``POST
/v1/explain`` says what it would do, its cost and its expected errors, and charges nothing."""

import json
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Depends, HTTPException
from pydantic import ConfigDict, Field, StrictBool, model_validator

from ...errors import ArgumentError
from ...sql.catalog import DIALECTS
from ..context import ServiceContext
from ..dashboard import loss_json
from ..http_errors import KEYED, mapped, responses
from ..models import Alpha, Beta, BoundValue, Delta, Epsilon, StrictRequest

__all__ = ["ExplainRequest", "QueryRequest", "router"]


class _Question(StrictRequest):
    """What a query and its explanation share: the dataset, the SQL and the options of ``Session.sql``, at
    ``epsilon`` or ``accuracy`` -- at most one of them (the validator, and the ``not`` of the schema for
    clients generated from the document)."""

    model_config = ConfigDict(
        json_schema_extra={
            "not": {
                "required": ["epsilon", "accuracy"],
                "properties": {"epsilon": {"type": "number"}, "accuracy": {"type": "array"}},
            }
        }
    )

    # no name pattern here: a dataset name that could never exist gets the 403 of one the caller may not query
    dataset: str = Field(max_length=64)
    sql: str = Field(max_length=20_000)
    epsilon: Epsilon | None = Field(
        default=None, description="the privacy loss to spend; the planner takes 2**-40 to 2**40 (else 400)"
    )
    accuracy: tuple[Alpha, Beta] | None = Field(
        default=None, description="[alpha, beta]: each COUNT and SUM within alpha with probability 1 - beta"
    )
    delta: Delta | None = Field(default=None, description="for private partition selection")
    dialect: str | None = Field(
        default=None,
        pattern=f"^({'|'.join(DIALECTS)})$",
        description="the SQL dialect of the query text (by default the dataset catalog's, else duckdb)",
    )
    nonnegative: StrictBool = Field(
        default=False, description="clamp at 0 the aggregates that cannot be negative, and their intervals"
    )
    bounds: dict[Annotated[str, Field(max_length=130)], BoundValue] | None = Field(
        default=None,
        max_length=32,
        description='this query\'s own limits ("max_rows_per_partition", "max_partitions", "bounds_share") '
        'and column bounds ([lower, upper]), each a number or "auto" (the catalog\'s otherwise)',
    )
    outside_view: Literal["refuse", "charge"] = Field(
        default="refuse",
        description="a query over a view that the view cannot answer: refused, or run on the view's table "
        "(charged at epsilon)",
    )

    @model_validator(mode="after")
    def _at_most_one(self) -> "_Question":
        if self.epsilon is not None and self.accuracy is not None:
            raise ArgumentError("give at most one of epsilon and accuracy.")
        return self

    def options(self) -> dict[str, Any]:
        """The keyword arguments ``Session.sql`` and ``Session.explain`` share."""
        return {
            "epsilon": self.epsilon,
            "accuracy": self.accuracy,
            "delta": self.delta,
            "dialect": self.dialect,
            "nonnegative": self.nonnegative,
            "bounds": self.bounds,
            "outside_view": self.outside_view,
        }


class QueryRequest(_Question):
    """A query, at ``epsilon`` or at the least epsilon that meets ``accuracy`` (at most one of them: a query
    over a view needs neither, any other needs one, else 400)."""

    request_id: str | None = Field(default=None, max_length=128, description="an idempotency key")


class ExplainRequest(_Question):
    """A query to explain, at ``epsilon`` or ``accuracy`` (at most one of them; epsilon 1 without either)."""


def router(context: ServiceContext) -> APIRouter:
    """The queries resource's routes, answering for ``context``'s datasets."""
    routes = APIRouter()
    analyst = Depends(context.analyst)

    @routes.post("/v1/query", responses=responses(*KEYED, 400, 403, 409, 422, 500, 503))
    def query(body: QueryRequest, name: Annotated[str, analyst]) -> dict[str, Any]:
        dataset = context.granted(name, body.dataset)
        answering = context.session(name, dataset)
        if body.epsilon is None and body.accuracy is None and answering.view_of(body.sql) is None:
            raise HTTPException(
                400, "give exactly one of epsilon and accuracy (a query over a view needs neither)."
            )
        with mapped(dataset.engine_errors):
            result = answering.sql(body.sql, request_id=body.request_id, **body.options())
        table = result.to_arrow()
        return {
            "columns": table.column_names,
            "rows": [list(row.values()) for row in table.to_pylist()],
            "privacy_loss": loss_json(result.privacy_loss),
            "ledger_entry": None if result.ledger_entry is None else result.ledger_entry.seq,  # None: a view
            "confidence": result.confidence,
            "bounds": None if result.bounds is None else json.loads(result.bounds.to_json()),
            "bounds_described": None if result.bounds is None else result.bounds.describe(),
            "warning": None
            if result.warning is None
            else {"category": result.warning[0], "message": result.warning[1]},
        }

    @routes.post("/v1/explain", responses=responses(*KEYED, 400, 403, 422))
    def explain(body: ExplainRequest, name: Annotated[str, analyst]) -> dict[str, Any]:
        dataset = context.granted(name, body.dataset)
        with mapped(dataset.engine_errors):
            text = context.session(name, dataset).explain(body.sql, **body.options())
        return {"plan": text}

    return routes
