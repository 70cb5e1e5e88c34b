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

Layout: :func:`create_app` opens the shared :class:`.context.ServiceContext` (the ledger, the registry, the
datasets' engines, and the dependencies that identify callers), puts the request boundary on the application
(:mod:`.boundary`: body limit, 422, 405, 500) and includes one router per resource (:mod:`.routes`).
"""

from fastapi import FastAPI

from .boundary import install
from .config import ServiceConfig
from .context import ServiceContext
from .routes import routers

__all__ = ["create_app"]


def create_app(config: ServiceConfig) -> FastAPI:
    """The service for ``config``: opens the ledger and the registry, sets the dataset budgets, and assembles
    the request boundary and the resource routes on one application."""
    context = ServiceContext.open(config)
    app = FastAPI(title="kakeibo query service", version="1", lifespan=context.lifespan)
    install(app, config.max_body_bytes)
    for router in routers(context):
        app.include_router(router)
    return app
