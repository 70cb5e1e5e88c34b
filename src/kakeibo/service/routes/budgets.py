"""The budgets resource: ``GET /v1/budget`` shows the calling analyst what they and the whole dataset have
spent and have left on each granted dataset; ``POST /v1/admin/budgets`` lets the administrator set a
dataset's budget or an analyst's budget on it (each change a row of the ledger's budget chain). A grant sets
the analyst's budget too (:mod:`.admin`), through :func:`requested_budget`."""

from typing import Annotated, Any

from fastapi import APIRouter, Depends, HTTPException
from pydantic import Field

from ...privacy import ApproxDP
from ..context import Dataset, ServiceContext
from ..dashboard import loss_json
from ..http_errors import BELOW_SPENT, KEYED, mapped, responses
from ..models import Budget, Delta, Name, StrictRequest

__all__ = ["BudgetRequest", "requested_budget", "router"]


class BudgetRequest(StrictRequest):
    dataset: Name
    analyst: Name | None = None
    budget: Budget
    delta: Delta | None = Field(default=None, description="default: the dataset's delta_budget")


def requested_budget(epsilon: float, delta: float | None, dataset: Dataset) -> ApproxDP:
    """A budget from an admin request; its delta defaults to the dataset's configured delta_budget."""
    with mapped():
        return ApproxDP(epsilon, dataset.config.delta_budget if delta is None else delta)


def router(context: ServiceContext) -> APIRouter:
    """The budgets resource's routes, on ``context``'s ledger and registry."""
    routes = APIRouter()

    @routes.get("/v1/budget", responses=responses(*KEYED))
    def budget(name: Annotated[str, Depends(context.analyst)]) -> list[dict[str, Any]]:
        ledger = context.ledger
        return [
            {
                "dataset": ds,
                "spent": loss_json(ledger.spent(analyst=name, dataset=ds)),
                "remaining": loss_json(ledger.remaining(analyst=name, dataset=ds)),
                "dataset_remaining": loss_json(ledger.remaining(dataset=ds)),
            }
            for ds in context.registry.datasets(name)
            if ds in context.datasets
        ]

    @routes.post(
        "/v1/admin/budgets",
        dependencies=[Depends(context.admin)],
        responses=responses(*KEYED, 400, 404, 422, s400=BELOW_SPENT),
    )
    def set_budget(body: BudgetRequest) -> dict[str, Any]:
        dataset = context.known(body.dataset)
        if body.analyst is not None and not context.registry.exists(body.analyst):
            raise HTTPException(404, "no such analyst.")  # a budget row for nobody would stay in the chain
        cap = requested_budget(body.budget, body.delta, dataset)
        with mapped():
            context.ledger.set_budget(cap, analyst=body.analyst, dataset=body.dataset)
        return {"dataset": body.dataset, "analyst": body.analyst, **loss_json(cap)}

    return routes
