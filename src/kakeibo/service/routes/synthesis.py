"""The synthesis resource: ``POST /v1/synthesize`` fits a synthesis of a granted dataset's table
(``Session.synthesize``, :mod:`kakeibo.sql.synthesis`), charged once at ``(epsilon, delta)`` as a query is
(the analyst's grant covers it), and answers with synthetic rows. The same request again is a free replay of
the stored model, with fresh rows for another ``random_state``; ``estimated_rows`` says how many rows the
model stands for, however many were asked.

``POST /v1/fidelity`` reports how far a synthesis' rows lie from the real rows in their 1-, 2- and 3-way
marginals (``Session.fidelity``): charged at ``epsilon`` from the grant (one pure-DP entry), or free against
``holdout``, a table the catalog declares public. The synthesis is named by the ledger entry its answer gave;
only the analyst's own syntheses of the dataset are found."""

from typing import Annotated, Any, Literal

from fastapi import APIRouter, Depends
from pydantic import Field, StrictInt

from ...sql.synthesis import METHODS
from ..context import ServiceContext
from ..dashboard import loss_json
from ..http_errors import KEYED, mapped, responses
from ..models import Bins, Epsilon, RowsPerPerson, StrictRequest

__all__ = ["MAX_ROWS", "FidelityRequest", "SynthesisRequest", "router"]

#: the most synthetic rows one response holds (ask again, free, for more)
MAX_ROWS = 100_000


class SynthesisRequest(StrictRequest):
    """A synthesis to fit: ``sql`` is ``SELECT col, ... FROM table``, charged ``(epsilon, delta)`` once."""

    dataset: str = Field(max_length=64)
    sql: str = Field(max_length=20_000)
    epsilon: Epsilon
    delta: Annotated[float, Field(ge=0, lt=1, strict=True, description="0 for privbayes (pure epsilon-DP)")]
    method: Literal[METHODS] = "mst"  # type: ignore[valid-type]
    rows_per_person: RowsPerPerson = 1
    bins: Bins | None = Field(
        default=None, max_length=64, description="bins of numeric columns the catalog gives none"
    )
    rows: StrictInt = Field(default=10_000, ge=0, le=MAX_ROWS, description="synthetic rows to return")
    random_state: StrictInt | None = Field(
        default=None, ge=0, le=2**63 - 1, description="the seed of the rows drawn from the model"
    )


class FidelityRequest(StrictRequest):
    """A fidelity report of the analyst's synthesis at ledger entry ``synthesis``: charged at ``epsilon``, or
    free against ``holdout`` (exactly one of the two)."""

    dataset: str = Field(max_length=64)
    synthesis: StrictInt = Field(ge=1, le=2**63 - 1, description="the ledger entry of the synthesis")
    epsilon: Epsilon | None = None
    holdout: str | None = Field(
        default=None, max_length=64, description="a table the catalog declares public"
    )
    rows: StrictInt | None = Field(
        default=None, ge=1, le=MAX_ROWS, description="synthetic rows compared (default: the model's estimate)"
    )
    random_state: StrictInt | None = Field(
        default=None, ge=0, le=2**63 - 1, description="the seed of the synthetic rows compared"
    )


def router(context: ServiceContext) -> APIRouter:
    """The synthesis resource's routes, on ``context``'s datasets."""
    routes = APIRouter()
    analyst = Depends(context.analyst)

    @routes.post("/v1/synthesize", responses=responses(*KEYED, 400, 403, 409, 422, 500, 503))
    def synthesize(body: SynthesisRequest, name: Annotated[str, analyst]) -> dict[str, Any]:
        dataset = context.granted(name, body.dataset)
        with mapped(dataset.engine_errors):
            out = context.session(name, dataset).synthesize(
                body.sql,
                epsilon=body.epsilon,
                delta=body.delta,
                method=body.method,
                rows_per_person=body.rows_per_person,
                bins=body.bins,
                rows=body.rows,
                random_state=body.random_state,
            )
        assert out.ledger_entry is not None  # the session charged its ledger (or replayed the entry)
        return {
            "columns": out.table.column_names,
            "rows": [list(row.values()) for row in out.table.to_pylist()],
            "estimated_rows": out.model.rows,
            "note": out.note,
            "privacy_loss": loss_json(out.privacy_loss),
            "ledger_entry": out.ledger_entry.seq,
            "replayed": out.replayed,
        }

    @routes.post("/v1/fidelity", responses=responses(*KEYED, 400, 403, 409, 422, 500, 503))
    def fidelity(body: FidelityRequest, name: Annotated[str, analyst]) -> dict[str, Any]:
        dataset = context.granted(name, body.dataset)
        session = context.session(name, dataset)
        with mapped(dataset.engine_errors):
            report = session.fidelity(
                session.stored_synthesis(body.synthesis),
                epsilon=body.epsilon,
                holdout=body.holdout,
                rows=body.rows,
                random_state=body.random_state,
            )
        return {
            "orders": list(report.orders),
            "distances": list(report.distances),
            "deviations": list(report.deviations),
            "marginals": list(report.marginals),
            "rows": report.rows,
            "against": report.against,
            "privacy_loss": None if report.privacy_loss is None else loss_json(report.privacy_loss),
            "ledger_entry": None if report.ledger_entry is None else report.ledger_entry.seq,
        }

    return routes
