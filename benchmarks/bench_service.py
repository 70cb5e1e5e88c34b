"""Load test of the query service on loopback (issue 7): concurrent analysts against one dataset whose budget
allows exactly ``--answers`` queries.

A real ``kakeibo serve`` process (uvicorn, one worker) serves a DuckDB table of ``--rows`` visits. The admin
creates ``--clients`` analysts, each granted the whole dataset budget, and the dataset budget is
``answers * epsilon``: so the dataset budget, shared by all, is what binds. Each client thread sends
``--queries`` COUNT/SUM queries with distinct ``request_id`` values (so each asks for a fresh release).
Printed: answered / refused-for-budget / other counts (the run fails unless exactly ``answers`` are
answered and every other one is refused for the budget), throughput, p50 / p99 latency of answered and
refused queries and of ``/v1/explain``, and whether the ledger verifies afterwards with exactly
``answers`` entries.

``--store postgresql://...`` keeps the ledger and the analyst registry in that (empty) PostgreSQL database
instead of SQLite files, and ``--replicas N`` starts N servers on it, client ``i`` talking to replica
``i mod N``: the budget must still be spent exactly once across replicas.

    .venv/bin/python benchmarks/bench_service.py [--clients 32] [--queries 200] [--answers 1000]
        [--store postgresql://user@host:port/db] [--replicas 2]
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import duckdb
import httpx
import numpy as np
import pyarrow as pa

from kakeibo.accounting import Ledger
from kakeibo.service import hash_key, new_key
from kakeibo.service.process import free_port, start_server

CATALOG = """
[tables.visits]
privacy_unit = "user_id"
max_partitions = 2
max_rows_per_partition = 3
[tables.visits.columns]
user_id = { type = "int" }
category = { type = "str", public_values = ["food", "rent", "travel"] }
amount = { type = "float", lower = 0, upper = 100 }
"""
QUERIES = (
    "SELECT COUNT(*) AS n FROM visits",
    "SELECT category, SUM(amount) AS total FROM visits GROUP BY category",
)


def write_service(folder: Path, rows: int, budget: float, store: str | None) -> str:
    rng = np.random.default_rng(0)
    con = duckdb.connect(str(folder / "visits.duckdb"))
    con.register(
        "generated",
        pa.table(
            {
                "user_id": rng.integers(0, rows // 4, rows),
                "category": np.array(["food", "rent", "travel"])[rng.integers(0, 3, rows)],
                "amount": rng.uniform(0, 120, rows),
            }
        ),
    )
    con.execute("CREATE TABLE visits AS SELECT * FROM generated")
    con.close()
    (folder / "catalog.toml").write_text(CATALOG)
    admin = new_key()[0]
    ledger, registry = (store, store) if store else ("ledger.sqlite", "analysts.sqlite")
    (folder / "service.toml").write_text(
        f'[service]\nledger = "{ledger}"\nregistry = "{registry}"\n'
        f'admin_key_hash = "{hash_key(admin)}"\nrequests_per_minute = 1000000\n\n'
        f'[datasets.shop]\ndatabase = "visits.duckdb"\ncatalog = "catalog.toml"\nbudget = "{budget!r}"\n'
    )
    return admin


def percentile(values: list[float], q: float) -> float:
    return float(np.percentile(values, q)) * 1000 if values else float("nan")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--clients", type=int, default=32)
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--answers", type=int, default=1000)
    parser.add_argument("--rows", type=int, default=100_000)
    parser.add_argument("--store", help="a postgresql:// URL of an empty database (default: SQLite files)")
    parser.add_argument("--replicas", type=int, default=1)
    args = parser.parse_args()
    if args.replicas > 1 and not args.store:
        parser.error("replicas need a shared --store postgresql://... (SQLite files are per host)")
    epsilon = 0.001
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        admin = write_service(folder, args.rows, epsilon * args.answers, args.store)
        ports = [free_port() for _ in range(args.replicas)]
        urls = [f"http://127.0.0.1:{port}" for port in ports]
        servers = [start_server(folder / "service.toml", port) for port in ports]
        try:
            keys = []
            with httpx.Client(base_url=urls[0], headers={"Authorization": f"Bearer {admin}"}) as client:
                for i in range(args.clients):
                    keys.append(client.post("/v1/admin/analysts", json={"name": f"a{i}"}).json()["key"])
                    granted = {"analyst": f"a{i}", "dataset": "shop", "budget": epsilon * args.answers}
                    client.post("/v1/admin/grants", json=granted).raise_for_status()
            results: list[tuple[str, int, float]] = []
            lock = threading.Lock()

            def run(index: int, key: str) -> None:
                with httpx.Client(
                    base_url=urls[index % len(urls)], headers={"Authorization": f"Bearer {key}"}, timeout=120
                ) as client:
                    for q in range(args.queries):
                        body: dict[str, Any] = {
                            "dataset": "shop",
                            "sql": QUERIES[q % len(QUERIES)],
                            "epsilon": epsilon,
                        }
                        kind = "explain" if q % 10 == 9 else "query"
                        if kind == "query":  # an explanation charges nothing, so it takes no request id
                            body["request_id"] = f"{index}-{q}"
                        start = time.perf_counter()
                        response = client.post(f"/v1/{kind}", json=body)
                        elapsed = time.perf_counter() - start
                        with lock:
                            results.append((kind, response.status_code, elapsed))

            threads = [threading.Thread(target=run, args=(i, k)) for i, k in enumerate(keys)]
            start = time.perf_counter()
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            wall = time.perf_counter() - start
        finally:
            for server in servers:
                server.send_signal(signal.SIGTERM)
                server.wait(timeout=30)
        queries = [r for r in results if r[0] == "query"]
        answered = [r[2] for r in queries if r[1] == 200]
        refused = [r[2] for r in queries if r[1] == 409]
        explains = [r[2] for r in results if r[0] == "explain" and r[1] == 200]
        other = len(results) - len(answered) - len(refused) - len(explains)
        ledger = Ledger(args.store or folder / "ledger.sqlite")
        verification = ledger.verify()
        entries = len(ledger.entries())
        print(
            f"{args.clients} clients x {args.queries} requests ({len(queries)} queries, {len(explains)} "
            f"explains) on {args.rows} rows, budget for exactly {args.answers} answers at eps = {epsilon}; "
            f"{args.replicas} replica(s), ledger in {'PostgreSQL' if args.store else 'SQLite'}"
        )
        print(f"answered {len(answered)}, refused for budget {len(refused)}, other {other}")
        print(f"wall {wall:.1f} s, {len(results) / wall:.0f} requests/s")
        for name, values in (("answered", answered), ("refused", refused), ("explain", explains)):
            print(f"  {name:<9} p50 {percentile(values, 50):7.1f} ms   p99 {percentile(values, 99):7.1f} ms")
        print(f"ledger verifies: {verification.ok}, entries: {entries}")
        ok = len(answered) == args.answers == entries and other == 0 and verification.ok
        print("OK" if ok else "FAILED")
        return 0 if ok else 1


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    sys.exit(main())
