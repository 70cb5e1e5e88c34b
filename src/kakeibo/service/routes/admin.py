"""The administrator's resource of access: analysts (``POST /v1/admin/analysts`` returns the new key once,
``GET /v1/admin/analysts``, ``POST /v1/admin/analysts/{name}/revoke``) and their grants (``POST
/v1/admin/grants`` with the analyst's budget on the dataset, ``DELETE /v1/admin/grants/{analyst}/{dataset}``).
Every route needs the admin key; budgets without a grant are :mod:`.budgets`'."""

from typing import Annotated, Any

from fastapi import APIRouter, Depends, HTTPException, Path
from pydantic import Field

from ..context import ServiceContext
from ..dashboard import loss_json
from ..http_errors import BELOW_SPENT, KEYED, mapped, responses
from ..models import Budget, Delta, Name, StrictRequest
from ..registry import NAME_PATTERN
from .budgets import requested_budget

__all__ = ["GrantRequest", "NewAnalyst", "router"]

#: A name in the path (the body's :data:`.models.Name`, as a path parameter).
PathName = Annotated[str, Path(pattern=NAME_PATTERN, max_length=64)]


class NewAnalyst(StrictRequest):
    name: Name


class GrantRequest(StrictRequest):
    analyst: Name
    dataset: Name
    budget: Budget
    delta: Delta | None = Field(default=None, description="default: the dataset's delta_budget")


def router(context: ServiceContext) -> APIRouter:
    """The analysts' and grants' routes, on ``context``'s registry (and its ledger, for a grant's budget)."""
    routes = APIRouter(dependencies=[Depends(context.admin)])
    registry = context.registry

    @routes.post(
        "/v1/admin/analysts",
        responses=responses(*KEYED, 400, 409, 422, s409="An analyst of that name already exists."),
    )
    def create_analyst(body: NewAnalyst) -> dict[str, str]:
        with mapped():
            key = registry.create(body.name)
        return {"name": body.name, "key": key}

    @routes.get("/v1/admin/analysts", responses=responses(*KEYED))
    def list_analysts() -> list[dict[str, Any]]:
        return [{**a, "datasets": registry.datasets(str(a["name"]))} for a in registry.analysts()]

    @routes.post("/v1/admin/analysts/{analyst_name}/revoke", responses=responses(*KEYED, 404, 422))
    def revoke(analyst_name: PathName) -> dict[str, str]:
        try:
            registry.revoke(analyst_name)
        except KeyError:
            raise HTTPException(404, "no such analyst.") from None
        return {"revoked": analyst_name}

    @routes.post("/v1/admin/grants", responses=responses(*KEYED, 400, 404, 422, s400=BELOW_SPENT))
    def grant(body: GrantRequest) -> dict[str, Any]:
        """Let an analyst query a dataset, up to their own budget on it. The request is checked whole
        before anything is written; then the budget is written, and the grant only after it, so that no
        grant ever exists without its budget (a failed budget write leaves no grant; a process stopped in
        between leaves a budget that grants nothing)."""
        dataset = context.known(body.dataset)
        cap = requested_budget(body.budget, body.delta, dataset)
        if not registry.exists(body.analyst):
            raise HTTPException(404, "no such analyst.")
        with mapped():
            # refused (400, nothing written) if below what the analyst has already spent on the dataset
            context.ledger.set_budget(cap, analyst=body.analyst, dataset=body.dataset)
            try:
                registry.grant(body.analyst, body.dataset)
            except KeyError:  # cannot happen today (analysts are never deleted), but never answer 200 then
                raise HTTPException(404, "no such analyst.") from None
        return {"analyst": body.analyst, "dataset": body.dataset, **loss_json(cap)}

    @routes.delete("/v1/admin/grants/{analyst_name}/{dataset}", responses=responses(*KEYED, 422))
    def revoke_grant(analyst_name: PathName, dataset: PathName) -> dict[str, str]:
        registry.revoke_grant(analyst_name, dataset)
        return {"analyst": analyst_name, "dataset": dataset, "granted": "no"}

    return routes
