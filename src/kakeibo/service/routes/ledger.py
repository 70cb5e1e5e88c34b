"""The ledger resource, as an analyst sees it: ``GET /v1/history`` lists the caller's own ledger entries;
``GET /v1/ledger/verify`` checks the whole ledger's hash chain and says only whether it holds and how many
problems it found (no entry count: it would tell how busy the other analysts are)."""

from typing import Annotated, Any

from fastapi import APIRouter, Depends

from ..context import ServiceContext
from ..dashboard import loss_json
from ..http_errors import KEYED, responses

__all__ = ["router"]


def router(context: ServiceContext) -> APIRouter:
    """The ledger resource's routes, on ``context``'s ledger."""
    routes = APIRouter()
    analyst = Depends(context.analyst)

    @routes.get("/v1/history", responses=responses(*KEYED))
    def history(name: Annotated[str, analyst]) -> list[dict[str, Any]]:
        return [
            {
                "ledger_entry": e.seq,
                "dataset": e.dataset,
                "sql": e.label,
                "privacy_loss": loss_json(e.loss),
                "created_at": e.created_at.isoformat(),
            }
            for e in context.ledger.entries(analyst=name)
        ]

    @routes.get("/v1/ledger/verify", responses=responses(*KEYED))
    def verify(name: Annotated[str, analyst]) -> dict[str, Any]:
        result = context.ledger.verify()
        return {"ok": result.ok, "problems": len(result.problems)}

    return routes
