"""The query service (issue 7, first part): keys, grants, budgets, idempotency and refusals over HTTP
(FastAPI's in-process test client; no network)."""

from __future__ import annotations

import json
import logging
import math
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import duckdb
import numpy as np
import pyarrow as pa
import pytest
from fastapi.testclient import TestClient

from kakeibo.accounting import BudgetExceeded, Ledger, Scope
from kakeibo.accounting.ledger import DuplicateRequest, LedgerIntegrityError
from kakeibo.accounting.storage import StoreError
from kakeibo.backends import StatementTimeout
from kakeibo.errors import ConfigurationError, ReleaseFailed
from kakeibo.privacy import ApproxDP, PureDP
from kakeibo.service import AnalystRegistry, ServiceConfig, create_app, hash_key, new_key
from kakeibo.service.http_errors import ENGINE_FAILED, LEDGER_UNAVAILABLE, MISCONFIGURED
from kakeibo.sql import QueryRefused
from kakeibo.sql.session import CatalogMismatch, Session
from test_sql_cli import CATALOG  # the visits catalog of the CLI tests: the same table is served here

SECRET_CATEGORY = "zz-private-category-value"


def write_service(
    tmp_path: Path, *, per_minute: int = 600, dataset_budget: float = 1.5, failed_per_minute: int = 1000
) -> tuple[Path, str]:
    rng = np.random.default_rng(0)
    con = duckdb.connect(str(tmp_path / "visits.duckdb"))
    users = rng.integers(0, 300, 2000)
    categories = np.array(["food", "rent", SECRET_CATEGORY])[rng.integers(0, 3, 2000)]
    amounts = rng.uniform(0, 120, 2000)
    con.register("generated", pa.table({"user_id": users, "category": categories, "amount": amounts}))
    con.execute("CREATE TABLE visits AS SELECT * FROM generated")
    con.execute("CREATE TABLE secrets (user_id BIGINT, ssn VARCHAR)")
    con.close()
    (tmp_path / "catalog.toml").write_text(CATALOG)
    admin_key = new_key()[0]
    (tmp_path / "service.toml").write_text(
        f"""
[service]
ledger = "ledger.sqlite"
registry = "analysts.sqlite"
admin_key_hash = "{hash_key(admin_key)}"
max_body_bytes = 4096
requests_per_minute = {per_minute}
failed_auth_per_minute = {failed_per_minute}

[datasets.shop]
database = "visits.duckdb"
catalog = "catalog.toml"
budget = {dataset_budget}
"""
    )
    return tmp_path / "service.toml", admin_key


@pytest.fixture
def service(tmp_path: Path) -> Iterator[tuple[TestClient, str]]:
    config, admin_key = write_service(tmp_path)
    with TestClient(create_app(ServiceConfig.from_toml(config))) as client:
        yield client, admin_key


def bearer(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


def make_analyst(client: TestClient, admin_key: str, name: str, budget: float | None = 1.0) -> str:
    created = client.post("/v1/admin/analysts", json={"name": name}, headers=bearer(admin_key))
    assert created.status_code == 200, created.text
    if budget is not None:
        granted = client.post(
            "/v1/admin/grants",
            json={"analyst": name, "dataset": "shop", "budget": budget},
            headers=bearer(admin_key),
        )
        assert granted.status_code == 200, granted.text
    return str(created.json()["key"])


def ask(client: TestClient, key: str, **body: Any) -> Any:
    return client.post("/v1/query", json={"dataset": "shop", **body}, headers=bearer(key))


def spent(client: TestClient, key: str) -> float:
    [row] = client.get("/v1/budget", headers=bearer(key)).json()
    return float(row["spent"]["epsilon"])


def test_keys_are_stored_only_as_salted_digests(service: tuple[TestClient, str], tmp_path: Path) -> None:
    client, admin_key = service
    key = make_analyst(client, admin_key, "alice")
    assert key.startswith("kak_")
    secret = key.rsplit("_", 1)[1]
    files = sorted(tmp_path.glob("analysts.sqlite*"))  # the database and its write-ahead log
    stored = b"".join(f.read_bytes() for f in files)
    assert b"alice" in stored  # the check below reads where the registry wrote
    assert secret.encode() not in stored and key.encode() not in stored


def test_an_answer_carries_intervals_loss_and_ledger_entry(
    service: tuple[TestClient, str], tmp_path: Path
) -> None:
    client, admin_key = service
    key = make_analyst(client, admin_key, "alice")
    answer = ask(
        client, key, sql="SELECT category, SUM(amount) AS total FROM visits GROUP BY category", epsilon=0.5
    )
    assert answer.status_code == 200, answer.text
    body = answer.json()
    assert body["columns"] == ["category", "total", "total_ci_low", "total_ci_high"]
    assert [row[0] for row in body["rows"]] == ["food", "rent"]
    assert all(low <= value <= high for _, value, low, high in body["rows"])
    assert body["privacy_loss"] == {"epsilon": 0.5, "delta": 0.0}
    entry = next(e for e in Ledger(tmp_path / "ledger.sqlite").entries() if e.seq == body["ledger_entry"])
    assert entry.analyst == "alice" and entry.dataset == "shop"
    assert spent(client, key) == 0.5


def test_a_retried_request_is_charged_once(service: tuple[TestClient, str]) -> None:
    client, admin_key = service
    key = make_analyst(client, admin_key, "alice")
    query = {"sql": "SELECT COUNT(*) AS n FROM visits", "epsilon": 0.25, "request_id": "r-1"}
    first, again = ask(client, key, **query).json(), ask(client, key, **query).json()
    assert first == again and spent(client, key) == 0.25
    fresh = ask(client, key, **{**query, "request_id": "r-2"}).json()
    assert fresh["ledger_entry"] != first["ledger_entry"] and spent(client, key) == 0.5


def test_a_query_names_its_dialect_and_may_ask_for_nonnegative_values(
    service: tuple[TestClient, str],
) -> None:
    client, admin_key = service
    key = make_analyst(client, admin_key, "alice")
    tsql = {"sql": "SELECT TOP 1 category, SUM(amount) AS s FROM visits GROUP BY category ORDER BY s DESC"}
    answer = ask(client, key, **tsql, epsilon=0.25, dialect="tsql", nonnegative=True, request_id="t-1")
    assert answer.status_code == 200, answer.text
    [row] = answer.json()["rows"]
    assert min(row[1:]) >= 0  # the sum and its interval's ends, clamped at 0
    plan = client.post(
        "/v1/explain",
        json={"dataset": "shop", **tsql, "dialect": "tsql", "nonnegative": True},
        headers=bearer(key),
    )
    assert plan.status_code == 200 and "clamped at 0 with their intervals" in plan.json()["plan"]
    for bad in ({"dialect": "oracle"}, {"dialect": "TSQL "}, {"nonnegative": "yes"}):
        refused = ask(client, key, sql="SELECT COUNT(*) AS n FROM visits", epsilon=0.25, **bad)
        assert refused.status_code == 422, (bad, refused.text)


def test_a_query_without_a_dialect_is_read_in_the_catalogs(tmp_path: Path) -> None:
    """A dataset whose catalog says ``dialect = "tsql"`` reads T-SQL when the request names no dialect."""
    config, admin_key = write_service(tmp_path)
    (tmp_path / "catalog.toml").write_text('dialect = "tsql"\n' + CATALOG)
    with TestClient(create_app(ServiceConfig.from_toml(config))) as client:
        key = make_analyst(client, admin_key, "alice")
        top = "SELECT TOP 1 category, COUNT(*) AS n FROM dbo.visits GROUP BY category ORDER BY n DESC"
        answer = ask(client, key, sql=top, epsilon=0.25)
        assert answer.status_code == 200 and len(answer.json()["rows"]) == 1, answer.text
        refused = ask(client, key, sql=top, epsilon=0.25, dialect="duckdb")  # TOP is read; dbo is not
        assert refused.status_code == 400 and "the schema dbo" in refused.text, refused.text


def test_budgets_per_analyst_and_per_dataset(service: tuple[TestClient, str]) -> None:
    """alice and bob each may spend 1.0 on shop, the dataset only 1.5 in all: colluders cannot exceed it."""
    client, admin_key = service
    alice, bob = make_analyst(client, admin_key, "alice"), make_analyst(client, admin_key, "bob")
    assert ask(client, alice, sql="SELECT COUNT(*) FROM visits", epsilon=1.0).status_code == 200
    refused = ask(client, alice, sql="SELECT SUM(amount) FROM visits", epsilon=0.1)
    assert refused.status_code == 409 and refused.json()["detail"].startswith("budget exhausted")
    assert ask(client, bob, sql="SELECT COUNT(*) FROM visits", epsilon=0.5).status_code == 200
    over = ask(client, bob, sql="SELECT SUM(amount) FROM visits", epsilon=0.1)
    assert over.status_code == 409  # bob has 0.5 left, the dataset has none
    assert spent(client, alice) == 1.0 and spent(client, bob) == 0.5


def test_partition_selection_spends_the_delta_budget(tmp_path: Path) -> None:
    """GROUP BY without public keys needs delta (private partition selection): it is paid from (epsilon,
    delta) budgets, the analyst's delta defaulting to the dataset's delta_budget."""
    config, admin_key = write_service(tmp_path)
    catalog = tmp_path / "catalog.toml"
    catalog.write_text(catalog.read_text().replace(', public_values = ["food", "rent"]', ""))
    config.write_text(config.read_text().replace("budget = 1.5", 'budget = 1.5\ndelta_budget = "2e-6"'))
    grouped = "SELECT category, COUNT(*) AS n FROM visits GROUP BY category"
    with TestClient(create_app(ServiceConfig.from_toml(config))) as client:
        alice = make_analyst(client, admin_key, "alice")
        first = ask(client, alice, sql=grouped, epsilon=0.25)
        assert first.status_code == 200, first.text
        assert first.json()["privacy_loss"] == {"epsilon": 0.25, "delta": 1e-6}  # the service's default
        [row] = client.get("/v1/budget", headers=bearer(alice)).json()
        assert row["remaining"] == {"epsilon": 0.75, "delta": 1e-6}
        assert ask(client, alice, sql=grouped, epsilon=0.25, request_id="again").status_code == 200
        third = ask(client, alice, sql=grouped, epsilon=0.25, request_id="third")
        assert third.status_code == 409 and "delta=0" in third.json()["detail"]  # delta is spent
        assert ask(client, alice, sql="SELECT COUNT(*) AS n FROM visits", epsilon=0.25).status_code == 200
        bob = make_analyst(client, admin_key, "bob", budget=None)
        grant = {"analyst": "bob", "dataset": "shop", "budget": 0.5, "delta": 0}
        assert client.post("/v1/admin/grants", json=grant, headers=bearer(admin_key)).json()["delta"] == 0
        assert ask(client, bob, sql=grouped, epsilon=0.1).status_code == 409
    ledger = Ledger(tmp_path / "ledger.sqlite")
    assert ledger.spent(dataset="shop") == ApproxDP("0.75", "2e-6")
    assert ledger.verify().ok


def test_a_ledger_of_pure_epsilon_budgets_is_refused(tmp_path: Path) -> None:
    config, _ = write_service(tmp_path)
    Ledger(tmp_path / "ledger.sqlite", budget=1).close()
    with pytest.raises(ValueError, match="keeps PureDP budgets, but the service keeps"):
        create_app(ServiceConfig.from_toml(config))


def test_a_ledger_with_pld_books_is_refused(tmp_path: Path) -> None:
    """PLD books are tight only for releases planned in advance; analysts choose queries adaptively."""
    config, _ = write_service(tmp_path)
    Ledger(tmp_path / "ledger.sqlite", budget=(1, 1e-6), composition="pld").close()
    with pytest.raises(ValueError, match="keeps PLD books, which are sound only for releases planned"):
        create_app(ServiceConfig.from_toml(config))


def test_explain_is_free_and_limits_hold(tmp_path: Path) -> None:
    config, admin_key = write_service(tmp_path, per_minute=4)
    with TestClient(create_app(ServiceConfig.from_toml(config))) as client:
        key = make_analyst(client, admin_key, "alice")
        plan = client.post(
            "/v1/explain",
            json={"dataset": "shop", "sql": "SELECT COUNT(*) FROM visits", "epsilon": 1},
            headers=bearer(key),
        )
        assert plan.status_code == 200 and "privacy loss: epsilon=1" in plan.json()["plan"]
        assert spent(client, key) == 0
        big = client.post(
            "/v1/query", content=b"x" * 5000, headers={**bearer(key), "content-type": "application/json"}
        )
        assert big.status_code == 413
        statuses = [client.get("/v1/history", headers=bearer(key)).status_code for _ in range(3)]
        assert statuses == [200, 200, 429]  # explain, budget and two histories used the 4 per minute


def test_budget_changes_are_ledger_records_and_the_ledger_verifies(
    service: tuple[TestClient, str], tmp_path: Path
) -> None:
    client, admin_key = service
    key = make_analyst(client, admin_key, "alice", budget=0.5)
    raised = client.post(
        "/v1/admin/budgets",
        json={"dataset": "shop", "analyst": "alice", "budget": 0.75},
        headers=bearer(admin_key),
    )
    assert raised.status_code == 200
    budgets = {
        (s.analyst, s.dataset): float(b.epsilon)
        for s, b in Ledger(tmp_path / "ledger.sqlite").budgets().items()
    }
    assert budgets[("alice", "shop")] == 0.75 and budgets[(None, "shop")] == 1.5
    nobody = client.post(
        "/v1/admin/budgets",
        json={"dataset": "shop", "analyst": "nobody", "budget": 0.75},
        headers=bearer(admin_key),
    )
    assert nobody.status_code == 404 and nobody.json()["detail"] == "no such analyst."
    assert len(Ledger(tmp_path / "ledger.sqlite").budgets()) == len(budgets)  # nothing written for nobody
    assert client.get("/v1/ledger/verify", headers=bearer(key)).json()["ok"] is True
    assert client.get("/openapi.json").json()["info"]["title"] == "kakeibo query service"


def test_hash_key_cli_and_bad_configurations(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from kakeibo.cli import main
    from kakeibo.service import verify_key

    assert main(["hash-key", "--new"]) == 0
    key_line, hash_line = capsys.readouterr().out.splitlines()
    assert verify_key(key_line.split()[1], hash_line.split()[1])
    assert not verify_key(new_key()[0], hash_line.split()[1])
    config, _ = write_service(tmp_path)
    good = config.read_text()
    for text, match in [
        (good.replace("budget = 1.5", "budget = 0"), "budget of dataset shop must be positive"),
        (good.replace("budget = 1.5", "budgt = 1.5"), r"unknown key\(s\) budgt in \[datasets.shop\]"),
        (good.replace('"scrypt$', '"plain$'), "output of `kakeibo hash-key`"),
        (good.replace("[datasets.shop]", "[datasets.'bad name']"), "a dataset name must be"),
    ]:
        config.write_text(text)
        with pytest.raises(ValueError, match=match):
            ServiceConfig.from_toml(config)
    assert main(["serve", "--config", str(tmp_path / "missing.toml")]) == 2


# ------------------------------------------------------ a request is checked whole before anything is written


def post_json(client: TestClient, path: str, body: object, key: str) -> Any:
    """POST ``body`` as Python's json writes it: NaN and Infinity included (httpx would refuse to)."""
    headers = {**bearer(key), "content-type": "application/json"}
    return client.post(path, content=json.dumps(body).encode(), headers=headers)


def written(tmp_path: Path) -> tuple[object, ...]:
    """What admin requests write: grants (from the registry's file) and budgets (from the ledger's)."""
    registry = AnalystRegistry(tmp_path / "analysts.sqlite")
    try:
        grants = {str(a["name"]): registry.datasets(str(a["name"])) for a in registry.analysts()}
    finally:
        registry.close()
    with Ledger(tmp_path / "ledger.sqlite") as ledger:
        return grants, ledger.budgets(), [e.seq for e in ledger.entries()]


@pytest.mark.parametrize("value", [math.inf, -math.inf, math.nan], ids=["Infinity", "-Infinity", "NaN"])
def test_non_finite_numbers_are_refused_before_anything_is_written(
    service: tuple[TestClient, str], tmp_path: Path, value: float
) -> None:
    """``"budget": Infinity`` once wrote bob's grant and then failed with a plain 500 before his budget, so
    bob could query with no cap of his own. Every number of every request is now finite or refused with 422
    before anything is read or written; bob stays without access, and no budget or charge changes."""
    client, admin_key = service
    alice = make_analyst(client, admin_key, "alice")
    bob = make_analyst(client, admin_key, "bob", budget=None)
    before = written(tmp_path)
    count = {"dataset": "shop", "sql": "SELECT COUNT(*) AS n FROM visits"}
    for path, key, body in [
        ("/v1/admin/grants", admin_key, {"analyst": "bob", "dataset": "shop", "budget": value}),
        ("/v1/admin/grants", admin_key, {"analyst": "bob", "dataset": "shop", "budget": 1, "delta": value}),
        ("/v1/admin/budgets", admin_key, {"dataset": "shop", "analyst": "alice", "budget": value}),
        ("/v1/admin/budgets", admin_key, {"dataset": "shop", "budget": value}),
        ("/v1/admin/budgets", admin_key, {"dataset": "shop", "budget": 2, "delta": value}),
        ("/v1/query", alice, {**count, "epsilon": value}),
        ("/v1/query", alice, {**count, "epsilon": 0.1, "delta": value}),
        ("/v1/query", alice, {**count, "accuracy": [value, 0.05]}),
        ("/v1/query", alice, {**count, "accuracy": [10, value]}),
        ("/v1/explain", alice, {**count, "epsilon": value}),
        ("/v1/explain", alice, {**count, "epsilon": 0.1, "delta": value}),
    ]:
        answer = post_json(client, path, body, key)
        assert answer.status_code == 422, (path, body, answer.text)
        [problem] = answer.json()["detail"]
        assert problem["type"] == "finite_number", answer.text
        assert written(tmp_path) == before, (path, body)
    assert ask(client, bob, sql="SELECT COUNT(*) AS n FROM visits", epsilon=500).status_code == 403


def test_an_unknown_field_is_refused_not_ignored(service: tuple[TestClient, str], tmp_path: Path) -> None:
    """``"detla": 1e-3`` used to be dropped silently, and the query ran at the default delta. A field the
    request model does not know is 422, named, and nothing is read, charged or written."""
    client, admin_key = service
    alice = make_analyst(client, admin_key, "alice")
    before = written(tmp_path)
    count = {"dataset": "shop", "sql": "SELECT COUNT(*) AS n FROM visits", "epsilon": 0.1}
    for path, key, body in [
        ("/v1/query", alice, {**count, "detla": 1e-3}),
        ("/v1/explain", alice, {**count, "requestid": "r-1"}),
        ("/v1/admin/grants", admin_key, {"analyst": "alice", "dataset": "shop", "budget": 1, "buget": 9}),
        ("/v1/admin/analysts", admin_key, {"name": "carol", "role": "admin"}),
    ]:
        answer = post_json(client, path, body, key)
        assert answer.status_code == 422, (path, body, answer.text)
        [problem] = answer.json()["detail"]
        assert problem["type"] == "extra_forbidden" and problem["loc"][-1] in body, answer.text
        assert written(tmp_path) == before, (path, body)


def test_an_analyst_name_taken_is_a_conflict(service: tuple[TestClient, str], tmp_path: Path) -> None:
    client, admin_key = service
    make_analyst(client, admin_key, "alice")
    before = written(tmp_path)
    answer = post_json(client, "/v1/admin/analysts", {"name": "alice"}, admin_key)
    assert answer.status_code == 409 and answer.json() == {"detail": "analyst 'alice' already exists."}
    assert written(tmp_path) == before


def test_a_grant_whose_budget_is_refused_leaves_no_grant(
    service: tuple[TestClient, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The budget is written before the grant, so a grant never exists without its cap: when the budget
    write fails -- refused (below what was spent, 400) or broken (500) -- no grant is left behind."""
    client, admin_key = service
    bob = make_analyst(client, admin_key, "bob", budget=0.5)
    assert ask(client, bob, sql="SELECT COUNT(*) AS n FROM visits", epsilon=0.5).status_code == 200
    assert client.delete("/v1/admin/grants/bob/shop", headers=bearer(admin_key)).status_code == 200
    before = written(tmp_path)
    below = {"analyst": "bob", "dataset": "shop", "budget": 0.25}
    refused = client.post("/v1/admin/grants", json=below, headers=bearer(admin_key))
    assert refused.status_code == 400 and "already been spent" in refused.json()["detail"], refused.text
    assert written(tmp_path) == before
    monkeypatch.setattr(Ledger, "set_budget", lambda *_, **__: 1 / 0)  # the ledger's write breaks
    broken = client.post("/v1/admin/grants", json={**below, "budget": 1}, headers=bearer(admin_key))
    assert broken.status_code == 500 and broken.json() == {"detail": "internal error."}
    assert written(tmp_path) == before
    assert ask(client, bob, sql="SELECT COUNT(*) AS n FROM visits", epsilon=0.1).status_code == 403


# ----------------------------------------------------------------- one map from kakeibo's errors to statuses


@pytest.mark.parametrize(
    ("error", "status", "detail"),
    [
        (QueryRefused("SELECT * returns individual rows."), 400, "SELECT * returns individual rows."),
        (
            BudgetExceeded("over budget.", requested=PureDP(1), remaining=PureDP(0), scope=Scope()),
            409,
            "budget exhausted: over budget.",
        ),
        (DuplicateRequest("request id r-1 was already charged."), 409, "request id r-1 was already charged."),
        (
            StatementTimeout(2.0),
            503,
            "the statement ran longer than its 2 s limit and was cancelled. Its cost was charged.",
        ),
        (ReleaseFailed(), 500, str(ReleaseFailed())),
        (ConfigurationError("/srv/secret/catalog.toml is wrong."), 500, MISCONFIGURED),
        (CatalogMismatch("column visits.amount is DOUBLE in the engine."), 500, MISCONFIGURED),
        (LedgerIntegrityError("entry 2 does not match its hash."), 503, LEDGER_UNAVAILABLE),
        (StoreError("postgresql://kakeibo:***@db/kakeibo is unreachable."), 503, LEDGER_UNAVAILABLE),
        (duckdb.ConversionException("Could not convert string 'zz-secret' to INT32"), 400, ENGINE_FAILED),
        (pa.ArrowInvalid("value 123456789 does not fit"), 400, ENGINE_FAILED),  # a ValueError: not its text
        (RecursionError(), 400, "the query is nested too deeply to check; nothing was charged."),
        (ValueError("epsilon must lie in [2**-40, 2**40]."), 400, "epsilon must lie in [2**-40, 2**40]."),
        (TypeError("accuracy must be a pair."), 400, "accuracy must be a pair."),
        (KeyError("a bug"), 500, "internal error."),
    ],
    ids=lambda value: type(value).__name__ if isinstance(value, BaseException) else None,
)
def test_one_map_from_errors_to_statuses(
    service: tuple[TestClient, str],
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
    error: Exception,
    status: int,
    detail: str,
) -> None:
    """Whatever the session raises answers as :mod:`kakeibo.service.http_errors` says: the tree first (a
    ConfigurationError is a ValueError, yet 500 with a fixed sentence and its message only in the log), the
    engine's errors never with their message."""
    client, admin_key = service
    alice = make_analyst(client, admin_key, "alice")

    def fail(*_: object, **__: object) -> None:
        raise error

    monkeypatch.setattr(Session, "sql", fail)
    monkeypatch.setattr(Session, "explain", fail)
    for path in ("/v1/query", "/v1/explain"):
        with caplog.at_level(logging.ERROR, logger="kakeibo.service"):
            answer = client.post(
                path, json={"dataset": "shop", "sql": "SELECT 1", "epsilon": 1}, headers=bearer(alice)
            )
        assert (answer.status_code, answer.json()) == (status, {"detail": detail}), answer.text
        assert "zz-secret" not in answer.text and "123456789" not in answer.text
    if isinstance(error, ConfigurationError):
        assert str(error) in caplog.text  # the administrator is told


def test_a_query_may_choose_its_bounds_privately(service: tuple[TestClient, str]) -> None:
    """``bounds`` overrides the catalog's limits and column bounds for one query ("auto": chosen from the
    data at a share of epsilon); the answer says what was chosen, what it drops and its accuracy warning
    (the client cannot catch a Python warning), and a bad override is a free 400."""
    client, admin_key = service
    key = make_analyst(client, admin_key, "alice")
    sql = "SELECT category, COUNT(*) AS n, SUM(amount) AS total FROM visits GROUP BY category"
    auto = {"max_rows_per_partition": "auto", "max_partitions": "auto", "amount": "auto"}
    answer = ask(client, key, sql=sql, epsilon=0.5, bounds=auto)
    assert answer.status_code == 200, answer.text
    chosen = answer.json()["bounds"]
    assert chosen["max_rows_per_partition"] >= 1 and chosen["max_partitions"] >= 1
    assert chosen["histogram_epsilon"] == "1/20" and set(chosen["columns"]) == {"amount"}
    assert answer.json()["bounds_described"].startswith("chosen at epsilon 0.05: ")
    # a bias above the noise measured, or not ruled out (a heavier visitor in groups past max_partitions)
    warning = answer.json()["warning"]
    assert warning["category"] in ("AccuracyWarning", "UnresolvedBiasWarning") and warning["message"]
    assert spent(client, key) == pytest.approx(0.5)
    fixed = ask(client, key, sql=sql, epsilon=0.25, bounds={"amount": [0, 50]})
    assert fixed.status_code == 200 and fixed.json()["bounds"] is None and fixed.json()["warning"] is None
    for bad in ({"amount": [5, 1]}, {"height": "auto"}, {"max_partitions": "many"}):
        refused = ask(client, key, sql=sql, epsilon=0.25, bounds=bad)
        assert refused.status_code in (400, 422), (bad, refused.text)
    assert spent(client, key) == pytest.approx(0.75)


def test_a_view_is_released_once_and_queried_at_no_cost(service: tuple[TestClient, str]) -> None:
    """POST /v1/views charges the view's epsilon once; /v1/query answers counts over it with no ledger entry
    and no spending; a query it cannot answer is a 400 with the reason, or charged with outside_view."""
    client, admin_key = service
    key = make_analyst(client, admin_key, "alice")
    view = {"dataset": "shop", "name": "v", "sql": "SELECT category, amount FROM visits", "epsilon": 0.5}
    created = client.post("/v1/views", json=view, headers=bearer(key))
    assert created.status_code == 200, created.text
    body = created.json()
    assert body["name"] == "v" and [c["name"] for c in body["columns"]] == ["category", "amount"]
    assert body["columns"][0]["public_values"] == ["food", "rent"] and body["blocks"] >= 1
    again = client.post("/v1/views", json=view, headers=bearer(key))
    assert again.json() == body and spent(client, key) == 0.5
    listed = client.get("/v1/views", params={"dataset": "shop"}, headers=bearer(key))
    assert listed.status_code == 200 and listed.json() == [
        {k: v for k, v in body.items() if k != "ledger_entry"}
    ]
    for _ in range(5):
        counted = ask(client, key, sql="SELECT category, COUNT(*) AS n FROM v GROUP BY category")
        assert counted.status_code == 200, counted.text
        assert counted.json()["ledger_entry"] is None and counted.json()["privacy_loss"]["epsilon"] == 0
    assert spent(client, key) == 0.5
    refused = ask(client, key, sql="SELECT SUM(amount) AS s FROM v", epsilon=0.25)
    assert refused.status_code == 400 and "outside_view" in refused.json()["detail"]
    charged = ask(client, key, sql="SELECT SUM(amount) AS s FROM v", epsilon=0.25, outside_view="charge")
    assert charged.status_code == 200 and charged.json()["ledger_entry"] is not None
    assert spent(client, key) == 0.75
    bare = ask(client, key, sql="SELECT COUNT(*) AS n FROM visits")
    assert bare.status_code == 400 and "a query over a view needs neither" in bare.text
    other = make_analyst(client, admin_key, "bob")
    assert client.get("/v1/views", params={"dataset": "shop"}, headers=bearer(other)).json() == []
    assert ask(client, other, sql="SELECT COUNT(*) FROM v").status_code == 400


def test_a_synthesis_is_charged_once_from_the_grant_and_replayed_free(tmp_path: Path) -> None:
    """POST /v1/synthesize charges (epsilon', delta) once from the analyst's grant and returns synthetic rows
    of the columns; the same request again is a free replay (new rows for another random_state); the
    history shows the entry's (epsilon, delta); a request past the grant is a 409 with nothing charged."""
    config, admin_key = write_service(tmp_path)
    config.write_text(config.read_text().replace("budget = 1.5", 'budget = 1.5\ndelta_budget = "1e-5"'))
    body = {
        "dataset": "shop",
        "sql": "SELECT category, amount FROM visits",
        "epsilon": 0.5,
        "delta": 1e-6,
        "rows_per_person": 3,
        "rows": 500,
        "random_state": 1,
    }
    with TestClient(create_app(ServiceConfig.from_toml(config))) as client:
        key = make_analyst(client, admin_key, "alice")
        first = client.post("/v1/synthesize", json=body, headers=bearer(key))
        assert first.status_code == 200, first.text
        out = first.json()
        assert out["columns"] == ["category", "amount"] and len(out["rows"]) == 500
        assert {row[0] for row in out["rows"]} <= {"food", "rent", None}
        assert all(row[1] is None or 0 <= row[1] <= 100 for row in out["rows"])
        assert 0 < out["privacy_loss"]["epsilon"] <= 0.5 and out["privacy_loss"]["delta"] == 1e-6
        assert not out["replayed"] and "each person bounded to 3 rows" in out["note"]
        again = client.post("/v1/synthesize", json={**body, "random_state": 2}, headers=bearer(key)).json()
        assert again["replayed"] and again["ledger_entry"] == out["ledger_entry"]
        assert again["rows"] != out["rows"] and again["estimated_rows"] == out["estimated_rows"]
        assert spent(client, key) == out["privacy_loss"]["epsilon"]
        [entry] = client.get("/v1/history", headers=bearer(key)).json()
        assert entry["privacy_loss"] == out["privacy_loss"]
        past = client.post("/v1/synthesize", json={**body, "epsilon": 0.9}, headers=bearer(key))
        assert past.status_code == 409, past.text
        assert spent(client, key) == out["privacy_loss"]["epsilon"]
        for bad in ({"delta": -1e-9}, {"method": "gan"}, {"rows": 100_001}, {"rows_per_person": 0}):
            assert client.post("/v1/synthesize", json={**body, **bad}, headers=bearer(key)).status_code == 422
        # delta 0 is PrivBayes' (pure epsilon-DP); the other methods refuse it, and PrivBayes any other delta
        for bad in ({"delta": 0}, {"method": "privbayes"}):
            refused = client.post("/v1/synthesize", json={**body, **bad}, headers=bearer(key))
            assert refused.status_code == 400 and "delta" in refused.text, refused.text
        pure = client.post(
            "/v1/synthesize",
            json={**body, "method": "privbayes", "delta": 0, "epsilon": 0.25},
            headers=bearer(key),
        )
        assert pure.status_code == 200, pure.text
        assert pure.json()["privacy_loss"] == {"epsilon": 0.25, "delta": 0.0}


def test_a_fidelity_report_names_the_analysts_own_synthesis_and_is_charged_from_the_grant(
    tmp_path: Path,
) -> None:
    """POST /v1/fidelity on the ledger entry a synthesis answered with: charged (epsilon, 0) from the
    analyst's grant, one new entry, distances in [0, 1] with their noise's deviation; another analyst, an
    entry that does not exist and an entry that is not a synthesis get the same refusal (400, nothing
    charged); a report past the grant is a 409; neither or both of epsilon and holdout, or a holdout the
    catalog does not declare public, a 400."""
    config, admin_key = write_service(tmp_path)
    config.write_text(config.read_text().replace("budget = 1.5", 'budget = 1.5\ndelta_budget = "1e-5"'))
    body = {"dataset": "shop", "sql": "SELECT category, amount FROM visits", "epsilon": 0.5, "delta": 1e-6}
    with TestClient(create_app(ServiceConfig.from_toml(config))) as client:
        key, other = make_analyst(client, admin_key, "alice"), make_analyst(client, admin_key, "bob")
        made = client.post("/v1/synthesize", json={**body, "rows": 10}, headers=bearer(key)).json()
        counted = ask(client, key, sql="SELECT COUNT(*) AS n FROM visits", epsilon=0.1)
        assert counted.status_code == 200, counted.text
        before = spent(client, key)
        request = {"dataset": "shop", "synthesis": made["ledger_entry"], "rows": 2000, "random_state": 3}
        report = client.post("/v1/fidelity", json={**request, "epsilon": 0.2}, headers=bearer(key))
        assert report.status_code == 200, report.text
        out = report.json()
        assert out["orders"] == [1, 2] and out["marginals"] == [2, 1] and out["rows"] == 2000
        assert all(0 <= d <= 1 for d in out["distances"]) and all(s > 0 for s in out["deviations"])
        assert out["privacy_loss"] == {"epsilon": 0.2, "delta": 0.0}
        assert out["ledger_entry"] not in (None, made["ledger_entry"], counted.json()["ledger_entry"])
        assert spent(client, key) == pytest.approx(before + 0.2, abs=1e-12)
        [refusal] = {
            (answer.status_code, answer.json()["detail"].replace(str(entry), "N"))
            for entry, who in (
                (made["ledger_entry"], other),
                (10**6, key),
                (counted.json()["ledger_entry"], key),
            )
            for answer in [
                client.post(
                    "/v1/fidelity", json={**request, "synthesis": entry, "epsilon": 0.1}, headers=bearer(who)
                )
            ]
        }
        assert refusal == (400, "there is no synthesis of yours at ledger entry N of this dataset."), refusal
        past = client.post("/v1/fidelity", json={**request, "epsilon": 0.9}, headers=bearer(key))
        assert past.status_code == 409, past.text
        for bad in ({}, {"epsilon": 0.1, "holdout": "visits"}, {"holdout": "visits"}):
            refused = client.post("/v1/fidelity", json={**request, **bad}, headers=bearer(key))
            assert refused.status_code == 400, refused.text
        assert spent(client, key) == pytest.approx(before + 0.2, abs=1e-12) and spent(client, other) == 0
