"""Two replicas of the query service share one ledger and one analyst registry in PostgreSQL (issue 7, scope
item 4): real ``kakeibo serve`` processes on loopback, a real PostgreSQL server (tests/backend_fixtures.py).

Clients spread their queries over both replicas; the dataset's budget allows exactly ``ANSWERABLE``
answers, and exactly that many are answered, whatever replica each request reaches. A request retried on
the other replica gets the same answer at no cost, and a key revoked on one replica stops working on the
other at once.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from fractions import Fraction
from pathlib import Path
from typing import Any

import httpx
import pytest

from kakeibo.accounting import Ledger
from kakeibo.privacy import ApproxDP
from kakeibo.service.process import free_port, start_server
from test_service import write_service

EPSILON = Fraction(1, 10)
ANSWERABLE = 30  # dataset budget / EPSILON
ANALYSTS = ("alice", "bob", "carol", "dave")  # 1.0 each: together more than the dataset's 3.0
THREADS_PER_ANALYST = 2
QUERIES_PER_THREAD = 15


def query(request_id: str) -> dict[str, Any]:
    return {
        "dataset": "shop",
        "sql": "SELECT COUNT(*) AS n FROM visits",
        "request_id": request_id,
        "epsilon": float(EPSILON),
    }


@pytest.fixture
def replicas(tmp_path: Path, postgres_database: str) -> Iterator[tuple[list[str], str, str]]:
    """Two servers on one configuration whose ledger and registry are the same PostgreSQL database."""
    config, admin = write_service(tmp_path, per_minute=10**6, dataset_budget=float(ANSWERABLE * EPSILON))
    text = config.read_text()
    for local in ('"ledger.sqlite"', '"analysts.sqlite"'):
        assert local in text
        text = text.replace(local, f'"{postgres_database}"')
    config.write_text(text)
    ports = [free_port(), free_port()]
    servers = [start_server(config, port) for port in ports]
    try:
        yield [f"http://127.0.0.1:{port}" for port in ports], admin, postgres_database
    finally:
        for server in servers:
            server.terminate()
            server.wait(timeout=30)


def test_replicas_spend_one_budget_exactly(replicas: tuple[list[str], str, str]) -> None:
    urls, admin, database = replicas
    keys = {}
    for i, name in enumerate(ANALYSTS):  # admin calls alternate between the replicas too
        headers = {"Authorization": f"Bearer {admin}"}
        created = httpx.post(f"{urls[i % 2]}/v1/admin/analysts", json={"name": name}, headers=headers)
        keys[name] = created.json()["key"]
        grant = {"analyst": name, "dataset": "shop", "budget": 1.0}
        httpx.post(f"{urls[(i + 1) % 2]}/v1/admin/grants", json=grant, headers=headers).raise_for_status()

    outcomes: dict[str, httpx.Response] = {}
    lock = threading.Lock()

    def load(name: str, thread: int) -> None:
        headers = {"Authorization": f"Bearer {keys[name]}"}
        with httpx.Client(headers=headers, timeout=60) as client:
            for n in range(QUERIES_PER_THREAD):
                request_id = f"{name}-{thread}-{n}"
                response = client.post(f"{urls[n % 2]}/v1/query", json=query(request_id))
                with lock:
                    outcomes[request_id] = response

    threads = [
        threading.Thread(target=load, args=(name, t)) for name in ANALYSTS for t in range(THREADS_PER_ANALYST)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    answered = {rid: r.json() for rid, r in outcomes.items() if r.status_code == 200}
    refused = [r for r in outcomes.values() if r.status_code == 409]
    assert len(outcomes) == len(ANALYSTS) * THREADS_PER_ANALYST * QUERIES_PER_THREAD
    assert len(answered) == ANSWERABLE
    assert len(refused) == len(outcomes) - ANSWERABLE
    assert all("budget exhausted" in r.json()["detail"] for r in refused)

    ledger = Ledger(database)
    verification = ledger.verify()
    assert verification.ok and verification.entries == ANSWERABLE, verification.problems
    assert ledger.spent(dataset="shop") == ApproxDP(ANSWERABLE * EPSILON, 0)
    entries = {e.seq for e in ledger.entries()}
    assert {a["ledger_entry"] for a in answered.values()} == entries  # every answer has its own entry

    # a retry reaching the other replica: the same answer, nothing charged
    request_id, first = next(iter(answered.items()))
    name = request_id.split("-")[0]
    index = int(request_id.rsplit("-", 1)[1])
    retried = httpx.post(
        f"{urls[(index + 1) % 2]}/v1/query",
        json=query(request_id),
        headers={"Authorization": f"Bearer {keys[name]}"},
    )
    assert retried.status_code == 200 and retried.json() == first
    assert len(ledger.entries()) == ANSWERABLE

    # revoked on one replica, refused by the other at once (keys are cached, revocations are not)
    revoke = httpx.post(
        f"{urls[0]}/v1/admin/analysts/{name}/revoke", headers={"Authorization": f"Bearer {admin}"}
    )
    assert revoke.status_code == 200
    after = httpx.get(f"{urls[1]}/v1/budget", headers={"Authorization": f"Bearer {keys[name]}"})
    assert after.status_code == 401
    ledger.close()
