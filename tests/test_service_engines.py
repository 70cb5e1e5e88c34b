"""The query service over the other engines (issue 7, scope item 1): a dataset read from PostgreSQL, and one
read by Spark from the catalog's Parquet source, each answering like the DuckDB default; and two Spark
datasets in one service, each reading its own tables only.

The PostgreSQL server is the throwaway one of ``tests/backend_fixtures.py``; Spark runs in local mode inside a
real ``kakeibo serve`` process (its own JVM, so it never shares a session with the other Spark tests).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from fastapi.testclient import TestClient

from kakeibo.accounting import Ledger
from kakeibo.backends.postgres import PostgresBackend
from kakeibo.service import ServiceConfig, create_app, hash_key, new_key
from kakeibo.service.process import free_port, start_server
from test_service import bearer, make_analyst
from test_sql_cli import CATALOG

# COUNT(DISTINCT user) has sensitivity 1: at this epsilon the released count is within 1 of the truth
# except with probability below exp(-EPSILON) (Laplace tail), about 2e-22.
EPSILON = 50.0
DISTINCT = "SELECT COUNT(DISTINCT user_id) AS users FROM visits"


def visits() -> pa.Table:
    rng = np.random.default_rng(7)
    return pa.table(
        {
            "user_id": rng.integers(0, 400, 3000),
            "category": np.array(["food", "rent"])[rng.integers(0, 2, 3000)],
            "amount": rng.uniform(0, 120, 3000),
        }
    )


def write_config(folder: Path, dataset: str) -> str:
    """A service configuration with one dataset section (``dataset``); returns the admin key."""
    admin = new_key()[0]
    (folder / "service.toml").write_text(
        '[service]\nledger = "ledger.sqlite"\nregistry = "analysts.sqlite"\n'
        f'admin_key_hash = "{hash_key(admin)}"\nrequests_per_minute = 1000000\n\n'
        f"[datasets.shop]\n{dataset}\nbudget = 200\n"
    )
    return admin


def _new_analyst(url: str, admin_headers: dict[str, str]) -> str:
    """Create analyst alice on a running server; her key."""
    answer = httpx.post(f"{url}/v1/admin/analysts", json={"name": "alice"}, headers=admin_headers)
    return str(answer.json()["key"])


def test_a_postgres_dataset(tmp_path: Path, postgres_database: str) -> None:
    data = visits()
    loader = PostgresBackend(postgres_database)
    loader.load_table("visits", data)
    loader.close()
    (tmp_path / "catalog.toml").write_text(CATALOG + '\n[tables.ghost]\n[tables.ghost.columns]\nx = "int"\n')
    admin = write_config(
        tmp_path, f'engine = "postgres"\ndatabase = "{postgres_database}"\ncatalog = "catalog.toml"'
    )
    with TestClient(create_app(ServiceConfig.from_toml(tmp_path / "service.toml"))) as client:
        key = make_analyst(client, admin, "alice", budget=200)
        answer = client.post(
            "/v1/query", json={"dataset": "shop", "sql": DISTINCT, "epsilon": EPSILON}, headers=bearer(key)
        )
        assert answer.status_code == 200, answer.text
        [[users, low, high]] = answer.json()["rows"]
        truth = len(set(data["user_id"].to_pylist()))
        assert abs(users - truth) <= 1 and low <= users <= high
        grouped = client.post(
            "/v1/query",
            json={
                "dataset": "shop",
                "sql": "SELECT category, SUM(amount) AS s FROM visits GROUP BY category",
                "epsilon": 1,
            },
            headers=bearer(key),
        )
        assert grouped.status_code == 200 and [r[0] for r in grouped.json()["rows"]] == ["food", "rent"]
        # a table the catalog declares but PostgreSQL lacks: the engine's error, without its message
        ghost = client.post(
            "/v1/query",
            json={"dataset": "shop", "sql": "SELECT COUNT(*) FROM ghost", "epsilon": 1},
            headers=bearer(key),
        )
        assert ghost.status_code == 400 and "the engine could not run this query" in ghost.json()["detail"]
        assert "relation" not in ghost.text and "does not exist" not in ghost.text
    ledger = Ledger(tmp_path / "ledger.sqlite")
    assert len(ledger.entries()) == 2 and ledger.verify().ok  # the failed statement charged nothing


def test_postgres_datasets_need_a_url_and_no_source_files(tmp_path: Path) -> None:
    (tmp_path / "catalog.toml").write_text(CATALOG)
    write_config(tmp_path, 'engine = "postgres"\ndatabase = "visits.duckdb"\ncatalog = "catalog.toml"')
    with pytest.raises(ValueError, match="must be a postgresql:// URL for engine postgres"):
        ServiceConfig.from_toml(tmp_path / "service.toml")
    write_config(tmp_path, 'engine = "oracle"\ncatalog = "catalog.toml"')
    with pytest.raises(ValueError, match="engine must be one of duckdb, postgres, spark"):
        ServiceConfig.from_toml(tmp_path / "service.toml")
    write_config(tmp_path, 'engine = "spark"\ncatalog = "catalog.toml"')
    with pytest.raises(ValueError, match="database must be the Spark master"):
        ServiceConfig.from_toml(tmp_path / "service.toml")


def test_a_spark_dataset_from_a_parquet_source(tmp_path: Path) -> None:
    data = visits()
    pq.write_table(data, tmp_path / "visits.parquet")
    catalog = CATALOG.replace("[tables.visits]\n", '[tables.visits]\nsource = "visits.parquet"\n', 1)
    (tmp_path / "catalog.toml").write_text(catalog)
    admin = write_config(tmp_path, 'engine = "spark"\ndatabase = "local[1]"\ncatalog = "catalog.toml"')
    port = free_port()
    server = start_server(tmp_path / "service.toml", port, timeout=180)  # a JVM starts first
    try:
        url = f"http://127.0.0.1:{port}"
        admin_headers = bearer(admin)
        key = _new_analyst(url, admin_headers)
        grant: dict[str, Any] = {"analyst": "alice", "dataset": "shop", "budget": 200}
        httpx.post(f"{url}/v1/admin/grants", json=grant, headers=admin_headers).raise_for_status()
        body = {"dataset": "shop", "sql": DISTINCT, "epsilon": EPSILON}
        answer = httpx.post(f"{url}/v1/query", json=body, headers=bearer(key), timeout=120)
        assert answer.status_code == 200, answer.text
        [[users, low, high]] = answer.json()["rows"]
        assert abs(users - len(set(data["user_id"].to_pylist()))) <= 1 and low <= users <= high
    finally:
        server.terminate()
        server.wait(timeout=60)


def test_two_spark_datasets_read_their_own_tables(tmp_path: Path) -> None:
    """Two Spark datasets of one service, each with a table ``visits`` from its own file (security review
    G3: one session for both had ``eu`` answer with ``us``'s rows, charged to ``eu``)."""
    users = {"eu": 100, "us": 400}
    sections = []
    for name, count in users.items():
        rng = np.random.default_rng(len(name) + count)
        data = pa.table(
            {
                "user_id": np.concatenate([np.arange(count), rng.integers(0, count, 1000)]),
                "category": np.array(["food", "rent"])[rng.integers(0, 2, count + 1000)],
                "amount": rng.uniform(0, 120, count + 1000),
            }
        )
        pq.write_table(data, tmp_path / f"{name}.parquet")
        catalog = CATALOG.replace("[tables.visits]\n", f'[tables.visits]\nsource = "{name}.parquet"\n', 1)
        (tmp_path / f"{name}.toml").write_text(catalog)
        sections.append(
            f'[datasets.{name}]\nengine = "spark"\ndatabase = "local[1]"\ncatalog = "{name}.toml"\n'
            "budget = 200\n"
        )
    admin = new_key()[0]
    (tmp_path / "service.toml").write_text(
        '[service]\nledger = "ledger.sqlite"\nregistry = "analysts.sqlite"\n'
        f'admin_key_hash = "{hash_key(admin)}"\nrequests_per_minute = 1000000\n\n' + "\n".join(sections)
    )
    port = free_port()
    server = start_server(tmp_path / "service.toml", port, timeout=180)  # a JVM starts first
    try:
        url = f"http://127.0.0.1:{port}"
        admin_headers = bearer(admin)
        key = _new_analyst(url, admin_headers)
        for name in users:
            grant: dict[str, Any] = {"analyst": "alice", "dataset": name, "budget": 200}
            httpx.post(f"{url}/v1/admin/grants", json=grant, headers=admin_headers).raise_for_status()
        for turn, name in enumerate(["eu", "us", "eu"]):  # eu again after us was read: a fresh release
            body = {"dataset": name, "sql": DISTINCT, "epsilon": EPSILON, "request_id": f"turn-{turn}"}
            answer = httpx.post(f"{url}/v1/query", json=body, headers=bearer(key), timeout=120)
            assert answer.status_code == 200, answer.text
            [[released, _, _]] = answer.json()["rows"]
            assert abs(released - users[name]) <= 1, name
    finally:
        server.terminate()
        server.wait(timeout=60)
    charged = [entry.dataset for entry in Ledger(tmp_path / "ledger.sqlite").entries()]
    assert charged == ["eu", "us", "eu"]
