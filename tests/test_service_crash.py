"""Crash test of the query service (issue 7): a real server is SIGKILLed at random moments of a load run,
``KILLS`` times, and restarted. After each restart the ledger verifies, every answer a client received has its
ledger entry, and retrying every request (answered or cut off) charges nothing twice: an answered request
comes back identical, and the ledger's spent equals its entries' sum."""

from __future__ import annotations

import random
import signal
import threading
import time
from fractions import Fraction
from pathlib import Path
from typing import Any

import httpx

from kakeibo.accounting import Ledger
from kakeibo.privacy import ApproxDP
from kakeibo.service.process import free_port, start_server
from test_service import write_service

EPSILON = Fraction(1, 1000)
#: kills per run: each lands at a random moment of six clients' load, an independent trial of the same
#: property
KILLS = 10
QUERIES = (
    "SELECT COUNT(*) AS n FROM visits",
    "SELECT category, SUM(amount) AS s FROM visits GROUP BY category",
)


def body(request_id: str) -> dict[str, Any]:
    query = QUERIES[int(request_id.rsplit("-", 1)[1]) % len(QUERIES)]
    return {"dataset": "shop", "sql": query, "epsilon": float(EPSILON), "request_id": request_id}


def test_sigkill_during_load_loses_and_doubles_nothing(tmp_path: Path) -> None:
    config, admin = write_service(tmp_path, per_minute=10**6, dataset_budget=100.0)
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    server = start_server(config, port)
    with httpx.Client(base_url=url, headers={"Authorization": f"Bearer {admin}"}) as client:
        key = client.post("/v1/admin/analysts", json={"name": "alice"}).json()["key"]
        client.post(
            "/v1/admin/grants", json={"analyst": "alice", "dataset": "shop", "budget": 100}
        ).raise_for_status()
    answers: dict[str, dict[str, Any]] = {}
    sent: list[str] = []
    unexpected: list[str] = []  # any answer but 200 from a live server (a thread cannot fail the test)
    lock = threading.Lock()
    rng = random.Random(2026)

    def load(round_: int, worker: int, stop: threading.Event, answered: threading.Event) -> None:
        with httpx.Client(base_url=url, headers={"Authorization": f"Bearer {key}"}, timeout=10) as client:
            for n in range(10_000):
                if stop.is_set():
                    return
                request_id = f"{round_}-{worker}-{n}"
                with lock:
                    sent.append(request_id)
                try:
                    response = client.post("/v1/query", json=body(request_id))
                except httpx.HTTPError:
                    return  # the server was killed under this request
                with lock:
                    if response.status_code != 200:
                        unexpected.append(f"{response.status_code} {response.text}")
                        return
                    answers[request_id] = response.json()
                answered.set()

    for round_ in range(KILLS):
        stop, answered = threading.Event(), threading.Event()
        workers = [threading.Thread(target=load, args=(round_, w, stop, answered)) for w in range(6)]
        for w in workers:
            w.start()
        assert answered.wait(60)  # the load is running: kill it at a random moment from here
        time.sleep(rng.uniform(0.0, 1.0))
        server.send_signal(signal.SIGKILL)
        server.wait()
        stop.set()
        for w in workers:
            w.join()
        assert not unexpected, unexpected
        ledger = Ledger(tmp_path / "ledger.sqlite")
        assert ledger.verify().ok
        entries = {e.seq: e for e in ledger.entries()}
        for answer in answers.values():
            assert answer["ledger_entry"] in entries  # every answer a client holds was charged
        assert ledger.spent(analyst="alice", dataset="shop") == ApproxDP(EPSILON * len(entries), 0)
        ledger.close()
        server = start_server(config, port)
    try:
        with httpx.Client(base_url=url, headers={"Authorization": f"Bearer {key}"}, timeout=30) as client:
            for (
                request_id
            ) in sent:  # retry everything: answered ones come back identical, none is charged twice
                retried = client.post("/v1/query", json=body(request_id))
                assert retried.status_code == 200
                if request_id in answers:
                    assert retried.json() == answers[request_id]
    finally:
        server.send_signal(signal.SIGTERM)
        server.wait(timeout=30)
    ledger = Ledger(tmp_path / "ledger.sqlite")
    assert ledger.verify().ok
    assert len(ledger.entries()) == len(set(sent))  # one charge per request id, whether or not it was cut off
    assert ledger.spent(analyst="alice", dataset="shop") == ApproxDP(EPSILON * len(set(sent)), 0)
    print(f"{KILLS} kills: {len(answers)} answers received, {len(set(sent))} requests sent, all charged once")
