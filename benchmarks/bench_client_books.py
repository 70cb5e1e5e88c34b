"""Device books (issue 29): the latency of one report against how many reports the books already hold.

For each size n (default 100, 1,000 and 10,000): books in a file hold n prior reports of one campaign; the
script opens them (which verifies the whole file; timed), sends ``--reports`` more reports one at a time and
prints the median and the largest wall time of one ``ClientLedger.report`` (check, randomize, record,
commit), then times ``verify()`` over the whole file. One OUE report (epsilon 1, 8 values) each, a fixed
clock (one day), secure randomness, the file in ``--dir`` (default: the system's temporary directory).

The prior reports are copies of one real report written straight into the file and chained with the rule
the module docstring of :mod:`kakeibo.ldp.client` states (sha256 of the previous hash and the canonical
JSON of the row's kind and columns, as ``tests/test_ldp_client_books_integrity.py``'s ``_rechain`` does),
so that 10,000 of them take about a second to build whatever the code under test costs per report;
opening the books verifies them, so a chain this script got wrong stops the run.

    .venv/bin/python benchmarks/bench_client_books.py [--sizes 100 1000 10000] [--reports 50] [--dir D]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sqlite3
import statistics
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path

from kakeibo.ldp import OUE, Ask, Campaign, ClientLedger

#: Every report of the run is sent at this instant (one UTC day), so the daily caps are the binding ones.
NOW = datetime(2026, 11, 28, 9, tzinfo=timezone.utc)
#: The most reports a campaign may ask for a day; the budgets below allow all of them.
PER_DAY = 1 << 16
COLUMNS = {
    "campaigns": "seq, name, enrolled_at, days, daily, total, asks",
    "reports": "seq, sent_at, day, campaign, randomizer, report_epsilon, charged, memo, payload_sha256",
}


def books_with(path: Path, n: int, oue: OUE) -> None:
    """Books at ``path`` holding ``n`` reports (``n >= 1``): one sent through kakeibo, ``n - 1`` copies of
    it, all chained by the documented rule."""
    with ClientLedger(path, daily_budget=PER_DAY, clock=lambda: NOW) as books:
        books.enrol(Campaign("bench", [Ask(oue, reports_per_day=PER_DAY)], days=1))
        books.report("bench", oue, 0)
    conn = sqlite3.connect(path)
    with conn:
        conn.executemany(
            "INSERT INTO reports SELECT ?, sent_at, day, campaign, randomizer, report_epsilon, charged, memo,"
            " payload_sha256, hash, payload FROM reports WHERE seq = 1",
            [(seq,) for seq in range(2, n + 1)],
        )
        meta = dict(conn.execute("SELECT key, value FROM meta"))
        for table, kind in (("campaigns", "campaign"), ("reports", "report")):
            previous, hashes = meta["genesis"], []
            for row in conn.execute(f"SELECT {COLUMNS[table]} FROM {table} ORDER BY seq").fetchall():
                record = json.dumps([kind, *row], ensure_ascii=False, sort_keys=True, separators=(",", ":"))
                previous = hashlib.sha256(previous.encode() + record.encode()).hexdigest()
                hashes.append((previous, row[0]))
            conn.executemany(f"UPDATE {table} SET hash = ? WHERE seq = ?", hashes)
            conn.executemany(
                "UPDATE meta SET value = ? WHERE key = ?",
                [(previous, f"{table}_head"), (str(len(hashes)), f"{table}_count")],
            )
    conn.close()


def one_size(folder: Path, n: int, reports: int) -> dict[str, float]:
    """Open books of ``n`` reports, send ``reports`` more, verify; the times in seconds."""
    path, oue = folder / f"books-{n}.sqlite", OUE(epsilon=1, domain_size=8)
    books_with(path, n, oue)
    start = time.perf_counter()
    books = ClientLedger(path, clock=lambda: NOW)
    opened = time.perf_counter() - start
    latencies = []
    for value in range(reports):
        start = time.perf_counter()
        books.report("bench", oue, value % 8)
        latencies.append(time.perf_counter() - start)
    start = time.perf_counter()
    books.verify()
    verified = time.perf_counter() - start
    assert books.spent().epsilon == n + reports  # every report was charged
    books.close()
    return {
        "open": opened,
        "median": statistics.median(latencies),
        "max": max(latencies),
        "verify": verified,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[100, 1_000, 10_000])
    parser.add_argument("--reports", type=int, default=50)
    parser.add_argument("--dir", type=Path, default=None)
    args = parser.parse_args()
    print(f"# device books, {args.reports} reports timed per size")
    print("| prior reports | open (verifies all) s | report median ms | report max ms | verify() s |")
    print("|--------------:|----------------------:|-----------------:|--------------:|-----------:|")
    with tempfile.TemporaryDirectory(dir=args.dir) as tmp:
        for n in args.sizes:
            t = one_size(Path(tmp), n, args.reports)
            print(
                f"| {n:>13,} | {t['open']:>21.3f} | {t['median'] * 1e3:>16.2f} | {t['max'] * 1e3:>13.2f} "
                f"| {t['verify']:>10.3f} |"
            )


if __name__ == "__main__":
    main()
