"""The service's route table is public API: the resource modules of :mod:`kakeibo.service.routes` serve
exactly the routes the service served before they were split out of ``create_app`` (issue 30), each
registered by one module, each reachable in the assembled application exactly once, under the operation id
a generated client names its method after."""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi import FastAPI
from fastapi.routing import APIRoute
from fastapi.testclient import TestClient
from starlette.routing import Match

from kakeibo.service import ServiceConfig, create_app
from kakeibo.service.context import ServiceContext
from kakeibo.service.routes import RESOURCES
from test_service import write_service

# (method, path, operation id; None for a route the OpenAPI document leaves out), as the service answered
# them before the split
ROUTES = [
    ("POST", "/v1/query", "query_v1_query_post"),
    ("POST", "/v1/views", "create_view_v1_views_post"),
    ("GET", "/v1/views", "list_views_v1_views_get"),
    ("POST", "/v1/synthesize", "synthesize_v1_synthesize_post"),
    ("POST", "/v1/fidelity", "fidelity_v1_fidelity_post"),
    ("POST", "/v1/explain", "explain_v1_explain_post"),
    ("GET", "/v1/budget", "budget_v1_budget_get"),
    ("GET", "/v1/history", "history_v1_history_get"),
    ("GET", "/v1/ledger/verify", "verify_v1_ledger_verify_get"),
    ("GET", "/v1/admin/analysts", "list_analysts_v1_admin_analysts_get"),
    ("POST", "/v1/admin/analysts", "create_analyst_v1_admin_analysts_post"),
    (
        "POST",
        "/v1/admin/analysts/{analyst_name}/revoke",
        "revoke_v1_admin_analysts__analyst_name__revoke_post",
    ),
    ("POST", "/v1/admin/grants", "grant_v1_admin_grants_post"),
    (
        "DELETE",
        "/v1/admin/grants/{analyst_name}/{dataset}",
        "revoke_grant_v1_admin_grants__analyst_name___dataset__delete",
    ),
    ("POST", "/v1/admin/budgets", "set_budget_v1_admin_budgets_post"),
    ("GET", "/v1/dashboard", "data_v1_dashboard_get"),
    ("GET", "/dashboard", None),
    ("GET", "/dashboard/{name}", None),
]
PARAMETERS = {"analyst_name": "bob", "dataset": "shop", "name": "dashboard.js"}


def concrete(path: str) -> str:
    """``path`` with its parameters filled in."""
    return re.sub(r"\{(\w+)\}", lambda m: PARAMETERS[m.group(1)], path)


def matches(app: FastAPI, method: str, path: str) -> int:
    """How many of ``app``'s top-level routes (an included router is one) take ``method`` on ``path``."""
    scope = {
        "type": "http",
        "method": method,
        "path": path,
        "root_path": "",
        "query_string": b"",
        "headers": [],
    }
    return sum(route.matches(scope)[0] is Match.FULL for route in app.router.routes)


def misrouted(app: FastAPI) -> list[tuple[str, str, int]]:
    """The routes of :data:`ROUTES` that ``app`` does not answer exactly once, with their counts."""
    counts = [(method, path, matches(app, method, concrete(path))) for method, path, _ in ROUTES]
    return [count for count in counts if count[2] != 1]


@pytest.fixture
def config(tmp_path: Path) -> ServiceConfig:
    return ServiceConfig.from_toml(write_service(tmp_path)[0])


@pytest.fixture
def context(config: ServiceConfig) -> Iterator[ServiceContext]:
    opened = ServiceContext.open(config)
    yield opened
    opened.close()


def test_each_route_is_registered_by_exactly_one_resource_module(context: ServiceContext) -> None:
    """The resource modules' routers together hold the route table, no (method, path) in two of them, and
    every module serves something (a module left out of :data:`RESOURCES` would lose its routes)."""
    owners: dict[tuple[str, str], list[str]] = {}
    for module in RESOURCES:
        routes = [route for route in module.router(context).routes if isinstance(route, APIRoute)]
        assert routes, module.__name__
        for route in routes:
            for method in route.methods:
                owners.setdefault((method, route.path), []).append(module.__name__)
    assert {key: names for key, names in owners.items() if len(names) > 1} == {}
    assert set(owners) == {(method, path) for method, path, _ in ROUTES}


def test_the_assembled_app_answers_each_route_once(config: ServiceConfig, context: ServiceContext) -> None:
    """Each route of the table is taken by exactly one route of the application, and a route that was lost
    or included twice is found (checked on applications assembled wrongly from the same modules)."""
    app = create_app(config)
    with TestClient(app):
        assert misrouted(app) == []
    queries, views = RESOURCES[:2]
    doubled, lacking = FastAPI(), FastAPI()
    for module in RESOURCES:
        doubled.include_router(module.router(context))
        if module is not views:
            lacking.include_router(module.router(context))
    doubled.include_router(queries.router(context))
    assert {(method, path) for method, path, count in misrouted(doubled)} == {
        ("POST", "/v1/query"),
        ("POST", "/v1/explain"),
    }
    assert {(method, path, count) for method, path, count in misrouted(lacking)} == {
        ("POST", "/v1/views", 0),
        ("GET", "/v1/views", 0),
    }


def test_allow_and_the_openapi_document_name_the_same_routes(config: ServiceConfig) -> None:
    """From outside: a method no route serves gets 405 with an ``Allow`` naming the table's methods on that
    path, and the OpenAPI document lists the table's documented operations under their operation ids."""
    expected: dict[str, set[str]] = {}
    for method, path, _ in ROUTES:
        expected.setdefault(path, set()).add(method)
    with TestClient(create_app(config)) as client:
        for path, methods in expected.items():
            answer = client.request("PATCH", concrete(path))
            assert answer.status_code == 405, path
            assert set(answer.headers["Allow"].split(", ")) == methods, path
        document = client.get("/openapi.json").json()
    operations = [
        (method.upper(), path, operation["operationId"])
        for path, methods in document["paths"].items()
        for method, operation in methods.items()
    ]
    assert Counter(operations) == Counter(route for route in ROUTES if route[2] is not None)
