"""What every resource module of the query service shares (:class:`ServiceContext`): the configuration, the
ledger, the analyst registry, the served datasets with their engines, and the checks a request passes before
a handler reads anything (who is calling, their rate limit, their grants).

:func:`kakeibo.service.create_app` builds one context and hands it to each module of :mod:`.routes`, which
takes what it needs from it explicitly; the context's :meth:`~ServiceContext.lifespan` closes what it opened
when the application stops.
"""

import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass
from fractions import Fraction
from typing import Annotated

import duckdb
from fastapi import Depends, FastAPI, HTTPException, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from ..accounting import Ledger
from ..accounting.composition import loss_leq
from ..accounting.ledger import Scope
from ..accounting.storage import redact
from ..backends import Backend, DuckDBBackend
from ..errors import ConfigurationError
from ..privacy import ApproxDP
from ..sql import Catalog
from ..sql.session import Session
from .auth import ADMIN, Gate, RateLimiter
from .config import DatasetConfig, ServiceConfig
from .dashboard import Viewer
from .registry import AnalystRegistry

__all__ = ["Dataset", "ServiceContext"]

_NOT_GRANTED = "this key has no access to that dataset."
_BAD_KEY = "missing, invalid or revoked API key."
#: The ``Authorization: Bearer <key>`` header; its absence is the caller's to answer (401), not FastAPI's.
_BEARER = HTTPBearer(auto_error=False)
#: The presented key, as every identifying dependency reads it.
Credentials = Annotated[HTTPAuthorizationCredentials | None, Depends(_BEARER)]


@dataclass
class Dataset:
    """A served dataset: its configuration, catalog and engine."""

    config: DatasetConfig
    catalog: Catalog
    # thread-safe: DuckDB runs each request thread on its own cursor, a psycopg connection serialises its
    # users, a Spark session takes statements from any thread
    backend: Backend
    engine_errors: tuple[type[Exception], ...]  # what the engine raises for a statement it cannot run


class ServiceContext:
    """The state the service's routes share, and the dependencies that identify and admit their callers.

    Each identifying dependency (:meth:`analyst`, :meth:`admin`, :meth:`viewer`) checks the key once per
    request (:class:`.auth.Gate`, with its throttle of failed checks per address); a route names one of
    them, never two, so no failure is counted twice."""

    def __init__(
        self, config: ServiceConfig, ledger: Ledger, registry: AnalystRegistry, datasets: dict[str, Dataset]
    ) -> None:
        self.config = config
        self.ledger = ledger
        self.registry = registry
        self.datasets = datasets
        self._limiter = RateLimiter(config.requests_per_minute)
        self._gate = Gate(registry, config.admin_key_hash, failed_per_minute=config.failed_auth_per_minute)

    @classmethod
    def open(cls, config: ServiceConfig) -> "ServiceContext":
        """Open the ledger, the registry and every dataset's engine of ``config``, and set the dataset
        budgets in the ledger (each change a row of its budget chain)."""
        ledger = _open_ledger(config)
        registry = AnalystRegistry(config.registry)
        datasets: dict[str, Dataset] = {}
        budgets = ledger.budgets()
        for name, spec in config.datasets.items():
            catalog = Catalog.from_toml(spec.catalog)
            datasets[name] = Dataset(spec, catalog, *_open_backend(spec, catalog))
            wanted = ApproxDP(spec.budget, spec.delta_budget)
            if budgets.get(Scope(dataset=name)) != wanted:
                ledger.set_budget(wanted, dataset=name)  # recorded in the budget chain
        return cls(config, ledger, registry, datasets)

    @contextlib.asynccontextmanager
    async def lifespan(self, _: FastAPI) -> AsyncIterator[None]:
        """The application's lifespan: :meth:`close` when it stops."""
        yield
        self.close()

    def close(self) -> None:
        """Close the engines, the registry and the ledger."""
        for dataset in self.datasets.values():
            dataset.backend.close()
        self.registry.close()
        self.ledger.close()

    def _caller(self, request: Request, credentials: HTTPAuthorizationCredentials | None) -> str | None:
        """The analyst's name, ADMIN, or None (see :class:`.auth.Gate`)."""
        address = request.client.host if request.client is not None else "unknown"
        return self._gate.identify(address, credentials.credentials if credentials is not None else None)

    def _charged_to(self, who: str | None) -> str:
        """``who`` if it is an analyst within their rate limit (every answer is charged to a real analyst)."""
        if who is None or who == ADMIN:
            raise HTTPException(401, _BAD_KEY)
        if not self._limiter.allow(who):
            raise HTTPException(429, "too many requests for this key; retry in a minute.")
        return who

    def analyst(self, request: Request, credentials: Credentials) -> str:
        """Dependency: the calling analyst (401 for any other key or none, 429 over the rate limit)."""
        return self._charged_to(self._caller(request, credentials))

    def admin(self, request: Request, credentials: Credentials) -> None:
        """Dependency: 401 unless the admin key is presented."""
        if self._caller(request, credentials) != ADMIN:
            raise HTTPException(401, _BAD_KEY)

    def viewer(self, request: Request, credentials: Credentials) -> Viewer:
        """Dependency: the administrator, or an analyst as :meth:`analyst` admits them."""
        who = self._caller(request, credentials)
        return Viewer(None) if who == ADMIN else Viewer(self._charged_to(who))

    def granted(self, name: str, dataset: str) -> Dataset:
        """The dataset ``name`` may query; 403 for any other name, existing or not (the same answer)."""
        if dataset not in self.datasets or not self.registry.granted(name, dataset):
            raise HTTPException(403, _NOT_GRANTED)
        return self.datasets[dataset]

    def known(self, dataset: str) -> Dataset:
        """A configured dataset, for the administrator (404 if there is none of that name)."""
        if dataset not in self.datasets:
            raise HTTPException(404, "no such dataset.")
        return self.datasets[dataset]

    def session(self, name: str, dataset: Dataset) -> Session:
        """The session that answers one request of analyst ``name`` on ``dataset``, charging the ledger."""
        return Session(
            dataset.backend,
            dataset.catalog,
            self.ledger,
            analyst=name,
            delta=self.config.delta,
            dataset=dataset.config.name,
            source=f"{dataset.config.engine}:{redact(dataset.config.database)}",
        )


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
    if ledger.composition.name == "pld":  # analysts choose their queries adaptively: see PLDComposition
        ledger.close()
        raise ConfigurationError(
            f"the ledger at {ledger.path} keeps PLD books, which are sound only for releases planned in "
            "advance; the service's analysts choose queries as they go, so start it on a ledger with rdp, "
            "zcdp, advanced or sequential books."
        )
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
