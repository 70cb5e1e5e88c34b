"""The DP SQL query service: multi-analyst access to :mod:`kakeibo.sql` over HTTP (FastAPI).

Datasets are served from DuckDB (the default), PostgreSQL or Spark, as the configuration says
(:mod:`.config`). Analysts authenticate with ``Authorization: Bearer <key>`` (:mod:`.registry`), the
administrator with the admin key. An analyst may query only the datasets granted to them; any other
name, existing or not, gets the same 403, so the answer reveals nothing about which datasets exist.
Every answer goes through one :class:`kakeibo.sql.Session` per request, so the ledger is charged before
anything is returned, and it carries its confidence intervals, its privacy loss and its ledger entry.

Budgets are (epsilon, delta) ledger budgets: one per dataset (the configuration's ``budget`` and
``delta_budget``, shared by all analysts, so colluders cannot exceed it) and one per (analyst, dataset), set
when access is granted (its delta defaults to the dataset's). Delta pays for private partition selection
(GROUP BY without public keys); a query that needs none charges (epsilon, 0). Changing either
is a row of the ledger's budget chain.

Endpoints (``/docs`` and ``/openapi.json`` describe them):

* ``POST /v1/query`` ``{dataset, sql, epsilon | accuracy: [alpha, beta], delta?, request_id?, dialect?,
  nonnegative?}``
* ``POST /v1/explain`` -- the plan, its cost and expected errors; free
* ``GET /v1/budget`` -- spent and remaining per granted dataset (the caller's and the dataset's)
* ``GET /v1/history`` -- the caller's ledger entries; ``GET /v1/ledger/verify``
* ``GET /dashboard`` -- the budget dashboard page; ``GET /v1/dashboard`` its data (:mod:`.dashboard`)
* admin: ``POST /v1/admin/analysts`` (returns the new key once), ``POST /v1/admin/analysts/{name}/revoke``,
  ``POST /v1/admin/grants`` ``{analyst, dataset, budget, delta?}``, ``DELETE
  /v1/admin/grants/{analyst}/{dataset}``, ``POST /v1/admin/budgets`` ``{dataset, analyst?, budget, delta?}``,
  ``GET /v1/admin/analysts``.

Safety: a refused query costs nothing and its message is the analyser's reason (which names columns,
never values); a malformed request gets 422 naming the field, never echoing what was sent; bodies above
``max_body_bytes`` get 413 (chunked ones are counted while read); more than ``requests_per_minute`` per key
get 429, and so does an address after ``failed_auth_per_minute`` bad keys (:mod:`.auth`). Every other
error is answered as :mod:`.http_errors` maps kakeibo's error tree (409 for a budget, 503 for a statement
past its time limit, a fixed 500 sentence for a misconfigured dataset, a bare 500 for anything unexpected).
``tests/test_service_security.py`` is the attack corpus.

The OpenAPI document is the contract: it lists every status each operation answers (with its body), and
the request models carry the rules the handlers rely on -- names start with a letter, numbers are strict
and finite (``NaN`` and ``Infinity``, which Python's ``json`` sends, are refused with 422 before anything
is read or written), ``0 < beta < 1``, exactly one of ``epsilon`` and ``accuracy`` -- so that a client
generated from it and the server agree (``tests/test_service_openapi.py``, ``tests/test_service_fuzz.py``).
A method a path does not serve (``OPTIONS`` included) gets 405 with an ``Allow`` naming every method that
path serves.
"""

import contextlib
import json
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from fractions import Fraction
from typing import Annotated, Any, Literal

import duckdb
from fastapi import Depends, FastAPI, HTTPException, Path, Query, Request
from fastapi.exception_handlers import http_exception_handler
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from pydantic import BaseModel, ConfigDict, Field, StrictBool, StrictInt, model_validator
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.routing import Match

from ..accounting import Ledger
from ..accounting.composition import loss_leq
from ..accounting.ledger import Scope
from ..accounting.storage import redact
from ..backends import Backend, DuckDBBackend
from ..errors import ConfigurationError
from ..privacy import ApproxDP
from ..sql import Catalog
from ..sql.catalog import DIALECTS
from ..sql.session import Session
from ..sql.views import StoredView
from .auth import ADMIN, Gate, RateLimiter
from .config import DatasetConfig, ServiceConfig
from .dashboard import dashboard_router, loss_json
from .http_errors import INTERNAL, mapped, responses
from .registry import NAME_PATTERN, AnalystRegistry

__all__ = ["create_app"]

log = logging.getLogger("kakeibo.service")
_NOT_GRANTED = "this key has no access to that dataset."
_BELOW_SPENT = (
    "Refused: the budget is below what the scope has spent, or the ledger cannot keep it; nothing written."
)
_BAD_KEY = "missing, invalid or revoked API key."


class _Request(BaseModel):
    """A request body. Numbers are strict (a JSON string or boolean is not read as a number: ``"epsilon":
    true`` must not spend 1) and finite: Python's ``json`` writes ``NaN``, ``Infinity`` and ``-Infinity``,
    and its parser reads them (as it reads ``1e400`` as infinity), so they are refused here, with 422, on
    every number of every request, before anything is read or written. A field the model does not know is
    refused too: a typo such as ``"detla"`` must not fall back to the default without a word."""

    model_config = ConfigDict(allow_inf_nan=False, extra="forbid")


#: A name made by the administrator (analysts, datasets); see :func:`.registry.check_name`.
Name = Annotated[str, Field(min_length=1, max_length=64, pattern=NAME_PATTERN)]
Epsilon = Annotated[float, Field(gt=0, strict=True)]
Delta = Annotated[float, Field(ge=0, lt=1, strict=True)]
Alpha = Annotated[float, Field(gt=0, strict=True, description="the error bound of each COUNT and SUM")]
Beta = Annotated[float, Field(gt=0, lt=1, strict=True, description="the probability of a larger error")]
Budget = Annotated[float, Field(gt=0, strict=True, description="an epsilon budget")]
Finite = Annotated[float, Field(strict=True)]
BoundValue = StrictInt | Finite | Literal["auto"] | tuple[Finite, Finite]
_METHODS = ("GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS")
_EITHER = [("epsilon", "number", "accuracy"), ("accuracy", "array", "epsilon")]


class _Question(_Request):
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

    model_config = ConfigDict(
        json_schema_extra={  # the validator's rule, for clients generated from the document
            "not": {
                "required": ["epsilon", "accuracy"],
                "properties": {"epsilon": {"type": "number"}, "accuracy": {"type": "array"}},
            }
        }
    )

    request_id: str | None = Field(default=None, max_length=128, description="an idempotency key")

    @model_validator(mode="after")
    def _at_most_one(self) -> "QueryRequest":
        if self.epsilon is not None and self.accuracy is not None:
            raise ValueError("give at most one of epsilon and accuracy.")
        return self


class ViewRequest(_Request):
    """A view to release: ``sql`` is ``SELECT col, ... FROM table``, charged ``epsilon`` once."""

    dataset: str = Field(max_length=64)
    name: Annotated[str, Field(min_length=1, max_length=64, pattern=r"^[A-Za-z_][A-Za-z0-9_]*$")]
    sql: str = Field(max_length=20_000)
    epsilon: Epsilon
    rows_per_person: StrictInt = Field(default=1, ge=1, le=1_000, description="rows of each person kept")
    bins: dict[Annotated[str, Field(max_length=64)], Annotated[StrictInt, Field(ge=1, le=65_536)]] | None = (
        Field(default=None, max_length=64, description="bins of numeric columns the catalog gives none")
    )


class ExplainRequest(_Question):
    """A query to explain, at ``epsilon`` or ``accuracy`` (at most one of them; epsilon 1 without either)."""

    model_config = ConfigDict(
        json_schema_extra={  # the validator's rule, for clients generated from the document
            "not": {
                "required": ["epsilon", "accuracy"],
                "properties": {"epsilon": {"type": "number"}, "accuracy": {"type": "array"}},
            }
        }
    )

    @model_validator(mode="after")
    def _at_most_one(self) -> "ExplainRequest":
        if self.epsilon is not None and self.accuracy is not None:
            raise ValueError("give at most one of epsilon and accuracy.")
        return self


class NewAnalyst(_Request):
    name: Name


class GrantRequest(_Request):
    analyst: Name
    dataset: Name
    budget: Budget
    delta: Delta | None = Field(default=None, description="default: the dataset's delta_budget")


class BudgetRequest(_Request):
    dataset: Name
    analyst: Name | None = None
    budget: Budget
    delta: Delta | None = Field(default=None, description="default: the dataset's delta_budget")


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


@dataclass
class _Dataset:
    config: DatasetConfig
    catalog: Catalog
    # thread-safe: DuckDB runs each request thread on its own cursor, a psycopg connection serialises its
    # users, a Spark session takes statements from any thread
    backend: Backend
    engine_errors: tuple[type[Exception], ...]  # what the engine raises for a statement it cannot run


def _open_backend(spec: DatasetConfig, catalog: Catalog) -> tuple[Backend, tuple[type[Exception], ...]]:
    """The dataset's engine, with the catalog's ``source`` files as views (DuckDB, Spark), and its errors."""
    sources = {t.name: t.source for t in catalog.tables.values() if t.source is not None}
    if spec.engine == "postgres":
        import psycopg

        from ..backends.postgres import PostgresBackend

        if sources:
            raise ConfigurationError(
                f"dataset {spec.name} is read from PostgreSQL, so its catalog cannot name source files."
            )
        return PostgresBackend(spec.database), (psycopg.Error,)
    if spec.engine == "spark":
        from py4j.protocol import Py4JError  # type: ignore[import-untyped]
        from pyspark.errors import PySparkException

        from ..backends.spark import SparkBackend

        spark = SparkBackend(spec.database)
        for table, source in sources.items():
            spark.register_source(table, source)
        return spark, (PySparkException, Py4JError)
    # read-only, so that no statement can change the data and replicas can open the same file
    duck = DuckDBBackend(spec.database, read_only=spec.database != ":memory:" and not sources)
    for table, source in sources.items():
        duck.register_source(table, source)
    return duck, (duckdb.Error,)


def _open_ledger(config: ServiceConfig) -> Ledger:
    """The service's ledger, created if missing. Budgets are (epsilon, delta); the global one is the sum of
    the dataset budgets, so the dataset and (analyst, dataset) budgets are the ones that bind; it is raised
    (a recorded change) when datasets are added."""
    specs = config.datasets.values()
    total = ApproxDP(
        sum((s.budget for s in specs), Fraction(0)), sum((s.delta_budget for s in specs), Fraction(0))
    )
    try:
        ledger = Ledger(config.ledger)
    except FileNotFoundError:  # several replicas may race here: the ledger is created once, under its lock
        return Ledger(config.ledger, budget=total)
    current = ledger.budgets()[Scope()]
    if not isinstance(current, ApproxDP):
        ledger.close()
        raise ConfigurationError(
            f"the ledger at {ledger.path} keeps {type(current).__name__} budgets, but the service keeps "
            "(epsilon, delta) budgets; start the service on a new ledger."
        )
    if not loss_leq(total, current):
        ledger.set_budget(ApproxDP(max(total.epsilon, current.epsilon), max(total.delta, current.delta)))
    return ledger


def create_app(config: ServiceConfig) -> FastAPI:
    """The service for ``config``: opens the ledger and the registry, sets the dataset budgets."""
    ledger = _open_ledger(config)
    registry = AnalystRegistry(config.registry)
    datasets: dict[str, _Dataset] = {}
    budgets = ledger.budgets()
    for name, spec in config.datasets.items():
        catalog = Catalog.from_toml(spec.catalog)
        datasets[name] = _Dataset(spec, catalog, *_open_backend(spec, catalog))
        wanted = ApproxDP(spec.budget, spec.delta_budget)
        if budgets.get(Scope(dataset=name)) != wanted:
            ledger.set_budget(wanted, dataset=name)  # recorded in the budget chain
    limiter = RateLimiter(config.requests_per_minute)
    gate = Gate(registry, config.admin_key_hash, failed_per_minute=config.failed_auth_per_minute)
    bearer = HTTPBearer(auto_error=False)

    @contextlib.asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        yield
        for dataset in datasets.values():
            dataset.backend.close()
        registry.close()
        ledger.close()

    app = FastAPI(title="kakeibo query service", version="1", lifespan=lifespan)

    @app.middleware("http")
    async def limit_body(request: Request, call_next: Callable[[Request], Awaitable[Response]]) -> Response:
        declared = request.headers.get("content-length")
        if declared is not None and (not declared.isdigit() or int(declared) > config.max_body_bytes):
            return JSONResponse({"detail": "request body too large."}, status_code=413)
        if declared is None and request.method in ("POST", "PUT", "PATCH"):  # chunked: count while reading
            received = bytearray()
            async for chunk in request.stream():
                received += chunk
                if len(received) > config.max_body_bytes:  # stop here: never buffer an unbounded body
                    return JSONResponse({"detail": "request body too large."}, status_code=413)
            request._body = bytes(received)  # Starlette's middleware replays a cached body to the endpoint
        return await call_next(request)

    @app.exception_handler(RequestValidationError)
    async def invalid_request(_: Request, error: RequestValidationError) -> JSONResponse:
        """422 naming each bad field and its rule, without FastAPI's echo of the input: an error repeats
        nothing that was sent (and a NaN or a lone surrogate could not even be encoded: a 500)."""
        problems = [{"type": e["type"], "loc": list(e["loc"]), "msg": e["msg"]} for e in error.errors()]
        return JSONResponse({"detail": problems}, status_code=422)

    @app.exception_handler(StarletteHTTPException)
    async def http_exception(request: Request, error: StarletteHTTPException) -> Response:
        """FastAPI's answer, with a 405's ``Allow`` naming the methods of *every* route on the path:
        Starlette names only those of the first route that matched it (``POST`` alone on
        ``/v1/admin/analysts``, which serves ``GET`` too)."""
        if error.status_code == 405:
            error = StarletteHTTPException(405, error.detail, headers={"Allow": ", ".join(allowed(request))})
        return await http_exception_handler(request, error)

    @app.exception_handler(Exception)
    async def unexpected(_: Request, error: Exception) -> JSONResponse:
        """A bare JSON 500 for whatever escaped a handler (Starlette's own answer is plain text; the server
        logs the error, which Starlette raises again once this answer is sent)."""
        return JSONResponse({"detail": INTERNAL}, status_code=500)

    def allowed(request: Request) -> list[str]:
        """The methods some route serves on ``request``'s path (asked of each route as a request with that
        method, since FastAPI keeps an included router's routes behind one route object)."""
        return [
            method
            for method in _METHODS
            if any(
                route.matches({**request.scope, "method": method})[0] is Match.FULL
                for route in app.router.routes
            )
        ]

    def caller(
        request: Request, credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(bearer)]
    ) -> str | None:
        """The analyst's name, ADMIN, or None (see :class:`.auth.Gate`)."""
        address = request.client.host if request.client is not None else "unknown"
        return gate.identify(address, credentials.credentials if credentials is not None else None)

    def analyst(who: Annotated[str | None, Depends(caller)]) -> str:
        if who is None or who == ADMIN:  # every answer is charged to a real analyst
            raise HTTPException(401, _BAD_KEY)
        if not limiter.allow(who):
            raise HTTPException(429, "too many requests for this key; retry in a minute.")
        return who

    def admin(who: Annotated[str | None, Depends(caller)]) -> None:
        if who != ADMIN:
            raise HTTPException(401, _BAD_KEY)

    def granted(name: str, dataset: str) -> _Dataset:
        if dataset not in datasets or not registry.granted(name, dataset):
            raise HTTPException(403, _NOT_GRANTED)
        return datasets[dataset]

    def known(dataset: str) -> _Dataset:
        if dataset not in datasets:
            raise HTTPException(404, "no such dataset.")
        return datasets[dataset]

    def limit(epsilon: float, delta: float | None, dataset: _Dataset) -> ApproxDP:
        """A budget from an admin request; its delta defaults to the dataset's configured delta_budget."""
        with mapped():
            return ApproxDP(epsilon, dataset.config.delta_budget if delta is None else delta)

    def session(name: str, dataset: _Dataset) -> Session:
        return Session(
            dataset.backend,
            dataset.catalog,
            ledger,
            analyst=name,
            delta=config.delta,
            dataset=dataset.config.name,
            source=f"{dataset.config.engine}:{redact(dataset.config.database)}",
        )

    # what each kind of route can answer besides 200 (the body limit and the key check come first)
    keyed = (401, 413, 429)
    admin_writes = responses(*keyed, 400, 404, 422, s400=_BELOW_SPENT)

    @app.post("/v1/query", responses=responses(*keyed, 400, 403, 409, 422, 500, 503))
    def query(body: QueryRequest, name: Annotated[str, Depends(analyst)]) -> dict[str, Any]:
        dataset = granted(name, body.dataset)
        answering = session(name, dataset)
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
            "ledger_entry": None
            if result.ledger_entry is None
            else result.ledger_entry.seq,  # None: a view's
            "confidence": result.confidence,
            "bounds": None if result.bounds is None else json.loads(result.bounds.to_json()),
        }

    @app.post("/v1/views", responses=responses(*keyed, 400, 403, 409, 422, 500, 503))
    def create_view(body: ViewRequest, name: Annotated[str, Depends(analyst)]) -> dict[str, Any]:
        dataset = granted(name, body.dataset)
        with mapped(dataset.engine_errors):
            built = session(name, dataset).create_view(
                body.name,
                body.sql,
                epsilon=body.epsilon,
                rows_per_person=body.rows_per_person,
                bins=body.bins,
            )
        assert built.ledger_entry is not None  # the session charged its ledger (or replayed the entry)
        return {**view_json(built.view), "ledger_entry": built.ledger_entry.seq}

    @app.get("/v1/views", responses=responses(*keyed, 403, 422))
    def list_views(
        dataset: Annotated[str, Query(max_length=64)], name: Annotated[str, Depends(analyst)]
    ) -> list[dict[str, Any]]:
        return [view_json(stored) for stored in session(name, granted(name, dataset)).views().values()]

    @app.post("/v1/explain", responses=responses(*keyed, 400, 403, 422))
    def explain(body: ExplainRequest, name: Annotated[str, Depends(analyst)]) -> dict[str, Any]:
        dataset = granted(name, body.dataset)
        with mapped(dataset.engine_errors):
            text = session(name, dataset).explain(body.sql, **body.options())
        return {"plan": text}

    @app.get("/v1/budget", responses=responses(*keyed))
    def budget(name: Annotated[str, Depends(analyst)]) -> list[dict[str, Any]]:
        return [
            {
                "dataset": ds,
                "spent": loss_json(ledger.spent(analyst=name, dataset=ds)),
                "remaining": loss_json(ledger.remaining(analyst=name, dataset=ds)),
                "dataset_remaining": loss_json(ledger.remaining(dataset=ds)),
            }
            for ds in registry.datasets(name)
            if ds in datasets
        ]

    @app.get("/v1/history", responses=responses(*keyed))
    def history(name: Annotated[str, Depends(analyst)]) -> list[dict[str, Any]]:
        return [
            {
                "ledger_entry": e.seq,
                "dataset": e.dataset,
                "sql": e.label,
                "privacy_loss": loss_json(e.loss),
                "created_at": e.created_at.isoformat(),
            }
            for e in ledger.entries(analyst=name)
        ]

    @app.get("/v1/ledger/verify", responses=responses(*keyed))
    def verify(name: Annotated[str, Depends(analyst)]) -> dict[str, Any]:
        result = ledger.verify()  # no entry count: it would tell how busy the other analysts are
        return {"ok": result.ok, "problems": len(result.problems)}

    @app.post(
        "/v1/admin/analysts",
        dependencies=[Depends(admin)],
        responses=responses(*keyed, 400, 409, 422, s409="An analyst of that name already exists."),
    )
    def create_analyst(body: NewAnalyst) -> dict[str, str]:
        with mapped():
            key = registry.create(body.name)
        return {"name": body.name, "key": key}

    @app.get("/v1/admin/analysts", dependencies=[Depends(admin)], responses=responses(*keyed))
    def list_analysts() -> list[dict[str, Any]]:
        return [{**a, "datasets": registry.datasets(str(a["name"]))} for a in registry.analysts()]

    @app.post(
        "/v1/admin/analysts/{analyst_name}/revoke",
        dependencies=[Depends(admin)],
        responses=responses(*keyed, 404, 422),
    )
    def revoke(analyst_name: Annotated[str, Path(pattern=NAME_PATTERN, max_length=64)]) -> dict[str, str]:
        try:
            registry.revoke(analyst_name)
        except KeyError:
            raise HTTPException(404, "no such analyst.") from None
        return {"revoked": analyst_name}

    @app.post("/v1/admin/grants", dependencies=[Depends(admin)], responses=admin_writes)
    def grant(body: GrantRequest) -> dict[str, Any]:
        """Let an analyst query a dataset, up to their own budget on it. The request is checked whole
        before anything is written; then the budget is written, and the grant only after it, so that no
        grant ever exists without its budget (a failed budget write leaves no grant; a process stopped in
        between leaves a budget that grants nothing)."""
        dataset = known(body.dataset)
        cap = limit(body.budget, body.delta, dataset)
        if not registry.exists(body.analyst):
            raise HTTPException(404, "no such analyst.")
        with mapped():
            # refused (400, nothing written) if below what the analyst has already spent on the dataset
            ledger.set_budget(cap, analyst=body.analyst, dataset=body.dataset)
            try:
                registry.grant(body.analyst, body.dataset)
            except KeyError:  # cannot happen today (analysts are never deleted), but never answer 200 then
                raise HTTPException(404, "no such analyst.") from None
        return {"analyst": body.analyst, "dataset": body.dataset, **loss_json(cap)}

    @app.delete(
        "/v1/admin/grants/{analyst_name}/{dataset}",
        dependencies=[Depends(admin)],
        responses=responses(*keyed, 422),
    )
    def revoke_grant(
        analyst_name: Annotated[str, Path(pattern=NAME_PATTERN, max_length=64)],
        dataset: Annotated[str, Path(pattern=NAME_PATTERN, max_length=64)],
    ) -> dict[str, str]:
        registry.revoke_grant(analyst_name, dataset)
        return {"analyst": analyst_name, "dataset": dataset, "granted": "no"}

    @app.post("/v1/admin/budgets", dependencies=[Depends(admin)], responses=admin_writes)
    def set_budget(body: BudgetRequest) -> dict[str, Any]:
        dataset = known(body.dataset)
        if body.analyst is not None and not registry.exists(body.analyst):
            raise HTTPException(404, "no such analyst.")  # a budget row for nobody would stay in the chain
        cap = limit(body.budget, body.delta, dataset)
        with mapped():
            ledger.set_budget(cap, analyst=body.analyst, dataset=body.dataset)
        return {"dataset": body.dataset, "analyst": body.analyst, **loss_json(cap)}

    app.include_router(
        dashboard_router(ledger, registry, list(datasets), caller=caller, analyst=analyst),
        responses=responses(*keyed),
    )
    return app
