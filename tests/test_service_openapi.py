"""The service's OpenAPI document tells a client what the server does: every status each operation can
answer, with the body it answers with, and the rules each request must follow (names, bounds, one of
epsilon and accuracy). A client generated from the document and the server agree: a body the document
calls valid is never refused with 422, and a body it calls invalid always is. (Which statuses the attack
corpus actually saw is checked against the document in ``test_service_security.py``; the fuzzer in
``test_service_fuzz.py`` checks every answer to generated requests.)"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient

from kakeibo.service import ServiceConfig, create_app
from test_service import bearer, make_analyst, write_service

jsonschema_rs = pytest.importorskip("jsonschema_rs", reason="comes with schemathesis (the dev extra)")

COUNT = "SELECT COUNT(*) AS n FROM visits"
KEYED = {401, 413, 429}  # the body limit and the key check come before any operation
EXPECTED = {  # what each operation answers besides 200, by design
    ("post", "/v1/query"): KEYED | {400, 403, 409, 422, 500, 503},
    ("post", "/v1/explain"): KEYED | {400, 403, 422},
    ("get", "/v1/budget"): KEYED,
    ("get", "/v1/history"): KEYED,
    ("get", "/v1/ledger/verify"): KEYED,
    ("get", "/v1/dashboard"): KEYED,
    ("get", "/v1/admin/analysts"): KEYED,
    ("post", "/v1/admin/analysts"): KEYED | {400, 409, 422},
    ("post", "/v1/admin/analysts/{analyst_name}/revoke"): KEYED | {404, 422},
    ("post", "/v1/admin/grants"): KEYED | {400, 404, 422},
    ("delete", "/v1/admin/grants/{analyst_name}/{dataset}"): KEYED | {422},
    ("post", "/v1/admin/budgets"): KEYED | {400, 404, 422},
    ("post", "/v1/views"): KEYED | {400, 403, 409, 422, 500, 503},
    ("get", "/v1/views"): KEYED | {403, 422},
    ("post", "/v1/synthesize"): KEYED | {400, 403, 409, 422, 500, 503},
    ("post", "/v1/fidelity"): KEYED | {400, 403, 409, 422, 500, 503},
}


def query(**fields: Any) -> dict[str, Any]:
    return {"dataset": "shop", "sql": COUNT, **fields}


def grant(**fields: Any) -> dict[str, Any]:
    return {"analyst": "bob", "dataset": "shop", "budget": 0.5, **fields}


# (path, body): each rule of the document from both sides; NaN and infinities are not JSON (the security
# corpus sends them as Python's json writes them, and gets 422)
BODIES: list[tuple[str, object]] = [
    ("/v1/query", query(epsilon=0.25)),
    ("/v1/query", query(epsilon=0)),
    ("/v1/query", query(epsilon=-1)),
    ("/v1/query", query(epsilon="0.25")),
    ("/v1/query", query(epsilon=True)),
    ("/v1/query", query(epsilon=1e-300)),  # valid in the document; the planner's range answers 400
    ("/v1/query", query()),  # neither epsilon nor accuracy
    ("/v1/query", query(epsilon=None, accuracy=None)),
    ("/v1/query", query(epsilon=0.25, accuracy=[10, 0.05])),  # both
    ("/v1/query", query(accuracy=[4000, 0.05])),
    ("/v1/query", query(accuracy=[10, 0])),
    ("/v1/query", query(accuracy=[10, 1])),
    ("/v1/query", query(accuracy=[0, 0.05])),
    ("/v1/query", query(accuracy=[10])),
    ("/v1/query", query(accuracy=[10, 0.05, 1])),
    ("/v1/query", query(epsilon=0.25, delta=0)),
    ("/v1/query", query(epsilon=0.25, delta=1)),
    ("/v1/query", query(epsilon=0.25, delta=-0.1)),
    ("/v1/query", query(epsilon=0.25, request_id="r" * 129)),
    ("/v1/query", {"sql": COUNT, "epsilon": 0.25}),
    ("/v1/query", query(dataset="../clinic", epsilon=0.25)),  # no pattern: the 403 of an unknown dataset
    ("/v1/explain", query()),  # epsilon 1
    ("/v1/explain", query(accuracy=[4000, 0.05])),
    ("/v1/explain", query(epsilon=0.25, accuracy=[10, 0.05])),
    ("/v1/explain", query(epsilon=0)),
    ("/v1/admin/analysts", {"name": "eve"}),
    ("/v1/admin/analysts", {"name": "e" * 64}),
    ("/v1/admin/analysts", {"name": "e" * 65}),
    ("/v1/admin/analysts", {"name": ""}),
    ("/v1/admin/analysts", {"name": "1eve"}),
    ("/v1/admin/analysts", {"name": "eve\n"}),
    ("/v1/admin/analysts", {"name": "ève"}),
    ("/v1/admin/analysts", {"name": "e v e"}),
    ("/v1/admin/grants", grant()),
    ("/v1/admin/grants", grant(budget=0)),
    ("/v1/admin/grants", grant(budget=-1)),
    ("/v1/admin/grants", grant(budget="1")),
    ("/v1/admin/grants", grant(delta=1)),
    ("/v1/admin/grants", grant(delta=1e-6)),
    ("/v1/admin/grants", grant(analyst="_bob")),
    ("/v1/admin/grants", grant(dataset="shop/../x")),
    ("/v1/admin/grants", grant(dataset="nowhere")),  # valid: 404
    ("/v1/admin/budgets", {"dataset": "shop", "budget": 2}),
    ("/v1/admin/budgets", {"dataset": "shop", "analyst": "bob", "budget": 0.75}),
    ("/v1/admin/budgets", {"dataset": "shop", "analyst": "-bob", "budget": 0.75}),
    ("/v1/admin/budgets", {"dataset": "shop", "budget": 0}),
    ("/v1/admin/budgets", {"dataset": "shop", "budget": 1e-9}),  # valid: below what was spent, 400
]


@pytest.fixture
def service(tmp_path: Path) -> Iterator[tuple[TestClient, FastAPI, str]]:
    config, admin_key = write_service(tmp_path)
    app = create_app(ServiceConfig.from_toml(config))
    with TestClient(app) as client:
        yield client, app, admin_key


def request_schema(document: dict[str, Any], path: str) -> Any:
    """A validator of the JSON body of ``POST path``, as the document describes it."""
    body = document["paths"][path]["post"]["requestBody"]["content"]["application/json"]["schema"]
    return jsonschema_rs.Draft202012Validator({**body, "components": document["components"]})


def test_every_operation_documents_what_it_answers(service: tuple[TestClient, FastAPI, str]) -> None:
    """The statuses each operation answers by design, each with its body: one sentence, or for 422 the list
    of fields and rules (``test_service_security.py`` checks them against what the corpus saw)."""
    client, _, _ = service
    document = client.get("/openapi.json").json()
    operations = {(m, p): op for p, ops in document["paths"].items() for m, op in ops.items()}
    assert set(operations) == set(EXPECTED)
    for key, operation in operations.items():
        responses = operation["responses"]
        assert {int(status) for status in responses} == EXPECTED[key] | {200}, key
        for status, response in responses.items():
            if status == "200":
                continue
            model = "InvalidRequest" if status == "422" else "ErrorMessage"
            assert response["content"]["application/json"]["schema"] == {
                "$ref": f"#/components/schemas/{model}"
            }
            assert response["description"], (key, status)
    schemas = document["components"]["schemas"]
    assert schemas["ErrorMessage"]["properties"]["detail"]["type"] == "string"
    assert set(schemas["InvalidField"]["required"]) == {"type", "loc", "msg"}
    revoke = operations["post", "/v1/admin/analysts/{analyst_name}/revoke"]["parameters"]
    assert revoke[0]["schema"]["pattern"] == "^[A-Za-z][A-Za-z0-9_.-]{0,63}$"


def test_the_document_and_the_server_agree_on_every_rule(service: tuple[TestClient, FastAPI, str]) -> None:
    """Each body of :data:`BODIES` is invalid in the document exactly when the server answers 422; valid
    ones get one of the operation's documented statuses (the planner's epsilon range is a documented 400)."""
    client, app, admin_key = service
    alice = make_analyst(client, admin_key, "alice")
    make_analyst(client, admin_key, "bob", budget=0.5)
    assert client.post("/v1/query", json=query(epsilon=0.25), headers=bearer(alice)).status_code == 200
    document = app.openapi()
    disagreements, invalid = [], 0
    for path, body in BODIES:
        key = admin_key if path.startswith("/v1/admin/") else alice
        answer = client.post(path, json=body, headers=bearer(key))
        valid = request_schema(document, path).is_valid(body)
        invalid += not valid
        documented = {int(status) for status in document["paths"][path]["post"]["responses"]}
        if valid == (answer.status_code == 422) or answer.status_code not in documented:
            disagreements.append((path, body, valid, answer.status_code, answer.text))
    assert not disagreements, disagreements
    assert 0 < invalid < len(BODIES)  # both sides of the rules were tried
