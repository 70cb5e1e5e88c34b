"""Ledger charges per second next to the raw SQLite transaction they are built on, in one run.

Run: ``.venv/bin/python benchmarks/bench_ledger.py [--charges 2000]``

Rows:
* raw SQLite: one ``BEGIN IMMEDIATE; SELECT sum; INSERT; COMMIT`` per charge on a WAL file -- the floor
  any transactional check-and-charge pays;
* kakeibo ``Ledger.charge`` (sequential and with a parallel-composition region), same file system;
* kakeibo ``Ledger.verify`` over the whole chain, entries per second.
"""

from __future__ import annotations

import argparse
import sqlite3
import tempfile
import time
from pathlib import Path

from kakeibo.accounting import Box, Ledger


def raw_sqlite(path: Path, n: int) -> float:
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute(
        "CREATE TABLE entries (seq INTEGER PRIMARY KEY, eps_num INTEGER, eps_den INTEGER, label TEXT)"
    )
    start = time.perf_counter()
    for _ in range(n):
        conn.execute("BEGIN IMMEDIATE")
        conn.execute("SELECT COALESCE(SUM(eps_num), 0) FROM entries").fetchone()
        conn.execute("INSERT INTO entries (eps_num, eps_den, label) VALUES (1, 1000000, 'q')")
        conn.execute("COMMIT")
    elapsed = time.perf_counter() - start
    conn.close()
    return n / elapsed


def ledger_charges(path: Path, n: int, with_region: bool) -> tuple[float, Ledger]:
    ledger = Ledger(path, budget=10.0)
    start = time.perf_counter()
    for i in range(n):
        if with_region:
            box = Box({"age": (i % 90, i % 90 + 1)}, unit="record")
            ledger.charge(1e-6, label="q", dataset="t", region=box)
        else:
            ledger.charge(1e-6, label="q")
    return n / (time.perf_counter() - start), ledger


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--charges", type=int, default=2000)
    n = parser.parse_args().charges
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        raw = raw_sqlite(folder / "raw.sqlite", n)
        seq_rate, ledger = ledger_charges(folder / "seq.sqlite", n, with_region=False)
        start = time.perf_counter()
        assert ledger.verify()
        verify_rate = n / (time.perf_counter() - start)
        region_rate, _ = ledger_charges(folder / "region.sqlite", n, with_region=True)
    print(f"# ledger, {n:,} charges")
    print(f"| {'operation':<58} | {'per second':>12} |")
    print(f"|{'-' * 60}|{'-' * 14}|")
    for name, rate in [
        ("raw SQLite check-and-insert transaction (WAL)", raw),
        ("kakeibo Ledger.charge, sequential", seq_rate),
        ("kakeibo Ledger.charge, with a parallel-composition region", region_rate),
        ("kakeibo Ledger.verify (entries checked)", verify_rate),
    ]:
        print(f"| {name:<58} | {rate:>12,.0f} |")


if __name__ == "__main__":
    main()
