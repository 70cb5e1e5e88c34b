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

* ``POST /v1/query`` ``{dataset, sql, epsilon | accuracy: [alpha, beta], delta?, request_id?}``
* ``POST /v1/explain`` -- the plan, its cost and expected errors; free
* ``GET /v1/budget`` -- spent and remaining per granted dataset (the caller's and the dataset's)
* ``GET /v1/history`` -- the caller's ledger entries; ``GET /v1/ledger/verify``
* ``GET /dashboard`` -- the budget dashboard page; ``GET /v1/dashboard`` its data (:mod:`.dashboard`)
* admin: ``POST /v1/admin/analysts`` (returns the new key once), ``POST /v1/admin/analysts/{name}/revoke``,
  ``POST /v1/admin/grants`` ``{analyst, dataset, budget, delta?}``, ``DELETE
  /v1/admin/grants/{analyst}/{dataset}``, ``POST /v1/admin/budgets`` ``{dataset, analyst?, budget, delta?}``,
  ``GET /v1/admin/analysts``.

Safety: a refused query costs nothing and its message is the analyser's reason (which names columns,
never values); a malformed request gets 422 naming the field, never echoing what was sent; unexpected
errors answer a bare 500; bodies above ``max_body_bytes`` get 413 (chunked ones are counted while read);
more than ``requests_per_minute`` per key get 429, and so does an address after ``failed_auth_per_minute``
bad keys (:mod:`.auth`). ``tests/test_service_security.py`` is the attack corpus.
"""

import contextlib
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from dataclasses import dataclass
from fractions import Fraction
from typing import Annotated, Any

import duckdb
from fastapi import Depends, FastAPI, HTTPException, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from pydantic import BaseModel, Field, StrictFloat

from ..accounting import BudgetExceeded, Ledger
from ..accounting.composition import loss_leq
from ..accounting.ledger import Scope
from ..accounting.storage import redact
from ..backends import Backend, DuckDBBackend, StatementTimeout
from ..privacy import ApproxDP
from ..sql import Catalog, QueryRefused
from ..sql.session import ReleaseFailed, Session
from .auth import ADMIN, Gate, RateLimiter
from .config import DatasetConfig, ServiceConfig
from .dashboard import dashboard_router, loss_json
from .registry import AnalystRegistry, check_name

__all__ = ["create_app"]

log = logging.getLogger("kakeibo.service")
_NOT_GRANTED = "this key has no access to that dataset."
_BAD_KEY = "missing, invalid or revoked API key."


class QueryRequest(BaseModel):
    dataset: str = Field(max_length=64)
    sql: str = Field(max_length=20_000)
    # strict: a JSON string or boolean is refused, not read as a number (`"epsilon": true` must not spend 1)
    epsilon: float | None = Field(default=None, gt=0, strict=True)
    accuracy: tuple[StrictFloat, StrictFloat] | None = None
    delta: float | None = Field(default=None, ge=0, lt=1, strict=True)
    request_id: str | None = Field(default=None, max_length=128)


class NewAnalyst(BaseModel):
    name: str = Field(max_length=64)


class GrantRequest(BaseModel):
    analyst: str = Field(max_length=64)
    dataset: str = Field(max_length=64)
    budget: float = Field(gt=0, strict=True)
    delta: float | None = Field(default=None, ge=0, lt=1, strict=True)  # default: the dataset's delta_budget


class BudgetRequest(BaseModel):
    dataset: str = Field(max_length=64)
    analyst: str | None = Field(default=None, max_length=64)
    budget: float = Field(gt=0, strict=True)
    delta: float | None = Field(default=None, ge=0, lt=1, strict=True)  # default: the dataset's delta_budget


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
            raise ValueError(
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
        raise ValueError(
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

    def limit(epsilon: float, delta: float | None, dataset: str) -> ApproxDP:
        """A budget from an admin request; its delta defaults to the dataset's configured delta_budget."""
        return ApproxDP(epsilon, datasets[dataset].config.delta_budget if delta is None else delta)

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

    @app.post("/v1/query")
    def query(body: QueryRequest, name: Annotated[str, Depends(analyst)]) -> dict[str, Any]:
        dataset = granted(name, body.dataset)
        with _errors(dataset.engine_errors):
            result = session(name, dataset).sql(
                body.sql,
                epsilon=body.epsilon,
                accuracy=body.accuracy,
                delta=body.delta,
                request_id=body.request_id,
            )
        entry = ledger.lookup(result.request_id)
        assert entry is not None  # the session stored the release with its charge
        table = result.to_arrow()
        return {
            "columns": table.column_names,
            "rows": [list(row.values()) for row in table.to_pylist()],
            "privacy_loss": loss_json(result.privacy_loss),
            "ledger_entry": entry.seq,
            "confidence": 0.95,
        }

    @app.post("/v1/explain")
    def explain(body: QueryRequest, name: Annotated[str, Depends(analyst)]) -> dict[str, Any]:
        dataset = granted(name, body.dataset)
        with _errors(dataset.engine_errors):
            text = session(name, dataset).explain(
                body.sql, epsilon=body.epsilon, accuracy=body.accuracy, delta=body.delta
            )
        return {"plan": text}

    @app.get("/v1/budget")
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

    @app.get("/v1/history")
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

    @app.get("/v1/ledger/verify")
    def verify(name: Annotated[str, Depends(analyst)]) -> dict[str, Any]:
        result = ledger.verify()  # no entry count: it would tell how busy the other analysts are
        return {"ok": result.ok, "problems": len(result.problems)}

    @app.post("/v1/admin/analysts", dependencies=[Depends(admin)])
    def create_analyst(body: NewAnalyst) -> dict[str, str]:
        with _errors():
            key = registry.create(body.name)
        return {"name": body.name, "key": key}

    @app.get("/v1/admin/analysts", dependencies=[Depends(admin)])
    def list_analysts() -> list[dict[str, Any]]:
        return [{**a, "datasets": registry.datasets(str(a["name"]))} for a in registry.analysts()]

    @app.post("/v1/admin/analysts/{analyst_name}/revoke", dependencies=[Depends(admin)])
    def revoke(analyst_name: str) -> dict[str, str]:
        try:
            registry.revoke(analyst_name)
        except KeyError:
            raise HTTPException(404, "no such analyst.") from None
        return {"revoked": analyst_name}

    @app.post("/v1/admin/grants", dependencies=[Depends(admin)])
    def grant(body: GrantRequest) -> dict[str, Any]:
        if body.dataset not in datasets:
            raise HTTPException(404, "no such dataset.")
        try:
            registry.grant(check_name(body.analyst, "an analyst name"), body.dataset)
        except KeyError:
            raise HTTPException(404, "no such analyst.") from None
        budget = limit(body.budget, body.delta, body.dataset)
        with _errors():
            ledger.set_budget(budget, analyst=body.analyst, dataset=body.dataset)
        return {"analyst": body.analyst, "dataset": body.dataset, **loss_json(budget)}

    @app.delete("/v1/admin/grants/{analyst_name}/{dataset}", dependencies=[Depends(admin)])
    def revoke_grant(analyst_name: str, dataset: str) -> dict[str, str]:
        registry.revoke_grant(analyst_name, dataset)
        return {"analyst": analyst_name, "dataset": dataset, "granted": "no"}

    @app.post("/v1/admin/budgets", dependencies=[Depends(admin)])
    def set_budget(body: BudgetRequest) -> dict[str, Any]:
        if body.dataset not in datasets:
            raise HTTPException(404, "no such dataset.")
        budget = limit(body.budget, body.delta, body.dataset)
        with _errors():
            ledger.set_budget(budget, analyst=body.analyst, dataset=body.dataset)
        return {"dataset": body.dataset, "analyst": body.analyst, **loss_json(budget)}

    app.include_router(dashboard_router(ledger, registry, list(datasets), caller=caller, analyst=analyst))
    return app


@contextlib.contextmanager
def _errors(engine: tuple[type[Exception], ...] = ()) -> Iterator[None]:
    """Map kakeibo's exceptions to HTTP answers that carry the reason but never data: 400 for a refused
    query or bad parameters and for ``engine`` errors (without the engine's message), 409 for an exhausted
    budget, a bare 500 for anything else (logged)."""
    try:
        yield
    except HTTPException:
        raise
    except BudgetExceeded as error:
        raise HTTPException(409, f"budget exhausted: {error}") from None
    except StatementTimeout as error:  # charged: how long a statement runs depends on the data
        raise HTTPException(503, f"{error} Its cost was charged.") from None
    except ReleaseFailed as error:  # charged; a fixed sentence
        raise HTTPException(500, str(error)) from None
    except RecursionError:  # the SQL parser recurses: a deeply nested query exhausts the stack
        raise HTTPException(400, "the query is nested too deeply to check; nothing was charged.") from None
    except (QueryRefused, ValueError, TypeError) as error:
        raise HTTPException(400, str(error)) from None
    except engine as error:  # the engine's message stays in the server log
        # the engine's message may quote a data value: only its kind at WARNING, the text at DEBUG
        log.warning("the engine refused a statement (%s)", type(error).__name__)
        log.debug("the engine's message: %s", error)
        raise HTTPException(
            400, "the engine could not run this query (check literal types); nothing was charged."
        ) from None
    except Exception:
        log.exception("unexpected error while answering a request")
        raise HTTPException(500, "internal error.") from None
