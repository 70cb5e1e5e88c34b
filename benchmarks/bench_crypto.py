"""What encryption costs, and what each summary's partition buys (issue 36).

Data: the first ``--rows`` orders of the heavy-tailed sales table (``../shared/data/gen_sales.py`` through
``heavy_tails.sales()``: 2% of the customers hold half the orders); a person is a customer, each data owner
keeps at most ``--max-rows`` of a person's orders (so one person moves the histogram by that much), and the
orders are dealt to ``--owners`` data owners by customer (a customer's orders stay with one owner).
``sales``: ``amount`` in [0, 1000] over 1024 bins (larger amounts clamp into the last bin); ``sales2``:
``amount`` x day of the year, 64 x 64; ``plateaus`` (a shape of our own, for a data-aware partition's
strength): six plateaus of random width (8-64 bins) and height over 1024 bins, empty elsewhere, one order
per customer (declared ``max_rows`` 1).

Sections, each timed side by side in one run:

* **HE operations against numpy**: every BFV operation the protocol uses, on one 8192-slot vector, against
  the same operation on a numpy int64 vector (ratio), with ciphertext and key sizes.
* **Build and query**: the raw histogram (numpy, the floor), kakeibo's plaintext summary (``Summary.build``)
  and the encrypted summary (every party in its own process): the first build (processes started, keys
  made, owners' bounding and encryption, the summary) and a rebuild over the same ciphertexts (the
  summary's HE steps alone); a count over ciphertexts (server's mask, provider's decryption, error bound)
  against the plaintext summary's.
* **Accuracy**: mean relative error of ``--queries`` random range counts (boxes for ``sales2``),
  ``|answer - truth| / max(truth, 0.001 N)``, at each epsilon: equi-width (Crypto-epsilon's index) at four
  widths, HE-friendly partitioning (split 1/4) with the seed's threshold ``max_rows / epsilon_2`` and with
  three times the gaps' noise scale, kakeibo's plaintext HDPView of the same bounded histogram (built at
  ``epsilon / max_rows``: group privacy), and geometric noise on each query at ``epsilon / queries``. Truth
  is the bounded histogram (the DP error); one row gives the error against every order (bounding's bias
  included). The summaries' figures are means over ``--runs`` plaintext builds with the protocol's two
  noises (the encrypted protocol's distribution: ``tests/test_crypto_summary.py``), and one row is one run
  through the encrypted protocol.
* **Scaling**: the HE-friendly summary's steps (every party in this process) at 1,024 to 65,536 cells,
  against kakeibo's plaintext build: HE-friendly partitioning is one pass over the gaps, ``O(n)``.
* **Private join**: two organisations' tables of ``n`` customers each (half shared) with a 5- and a
  4-valued attribute: the raw join and count (numpy) against ``private_join`` (three processes).

Run::

    .venv/bin/python benchmarks/bench_crypto.py --rows 10000 100000
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from kakeibo.accounting import Ledger
from kakeibo.crypto import (
    Domain,
    Grid,
    JoinPlan,
    OwnerData,
    Summary,
    SummaryPlan,
    encrypted_summary,
    private_join,
)
from kakeibo.crypto.he import SLOTS, KeyPair, PublicKey
from kakeibo.crypto.parties import bounded_histogram
from kakeibo.mechanisms import Geometric
from kakeibo.views.hdpview import build as hdpview

WIDTHS = (1, 4, 16, 64)


def _best(f: Callable[[], Any], repeat: int) -> float:
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        f()
        times.append(time.perf_counter() - start)
    return min(times)


def he_operations(repeat: int) -> None:
    keys = KeyPair()
    public = keys.public()
    key = PublicKey(public)
    x = np.random.default_rng(0).integers(0, 2**20, SLOTS)
    mask = np.random.default_rng(1).integers(0, 2, SLOTS)
    a, b = key.encrypt(x), key.encrypt(x)
    data = a.serialize()
    rows = [
        ("encrypt", lambda: key.encrypt(x), lambda: x.copy()),
        ("add two ciphertexts", lambda: a + b, lambda: x + x),
        ("add a public vector", lambda: a.plus(x), lambda: x + x),
        ("multiply by a public mask", lambda: a.times(mask), lambda: x * mask),
        ("serialize", lambda: a.serialize(), lambda: x.tobytes()),
        ("load", lambda: key.load(data, SLOTS), lambda: np.frombuffer(x.tobytes(), np.int64)),
        ("decrypt", lambda: keys.decrypt(data, SLOTS), lambda: x.copy()),
    ]
    print(f"\n### HE operations on one vector of {SLOTS} slots (best of {repeat})\n")
    print("| operation | BFV (ms) | numpy (ms) | ratio |")
    print("| --- | ---: | ---: | ---: |")
    for name, he, plain in rows:
        t_he, t_np = _best(he, repeat), _best(plain, repeat * 10)
        print(f"| {name} | {t_he * 1e3:.3f} | {t_np * 1e3:.4f} | {t_he / t_np:,.0f}x |")
    print(
        f"\nciphertext {a.nbytes / 2**10:.0f} KiB for {SLOTS * 8 / 2**10:.0f} KiB of int64 "
        f"({a.nbytes / (SLOTS * 8):.1f}x); public key {len(public) / 2**20:.2f} MiB; key generation "
        f"{_best(KeyPair, 3) * 1e3:.0f} ms"
    )


def _data(rows: int, shape: str) -> tuple[np.ndarray, np.ndarray, Domain | Grid]:
    """``sales`` (amount; ``sales2``: amount x day of the year) or ``plateaus``: six plateaus of random
    width (8-64 bins) and height over 1024 bins, empty elsewhere, one order per customer."""
    if shape == "plateaus":
        rng = np.random.default_rng(rows)
        starts, widths = np.sort(rng.choice(1024 - 64, 6, replace=False)), rng.integers(8, 64, 6)
        weights = rng.uniform(0.2, 1.0, 6)
        which = rng.choice(6, rows, p=weights / weights.sum())
        return (
            np.arange(rows),
            starts[which] + rng.uniform(0, 1, rows) * widths[which],
            Domain(0.0, 1024.0, 1024),
        )
    from heavy_tails import sales  # here: the parties' processes re-import this module, not duckdb

    table = sales(("customer_id", "amount", "order_date")).slice(0, rows)
    persons = table.column("customer_id").to_numpy()
    amount = table.column("amount").to_numpy()
    if shape == "sales":
        return persons, amount, Domain(0.0, 1000.0, 1024)
    day = (table.column("order_date").to_numpy() - np.datetime64("2025-01-01")).astype(np.int64).astype(float)
    return persons, np.c_[amount, day], Grid((Domain(0.0, 1000.0, 64), Domain(0.0, 365.0, 64)))


def _owners(persons: np.ndarray, values: np.ndarray, owners: int) -> list[OwnerData]:
    side = persons % owners
    return [OwnerData(persons[side == o], values[side == o]) for o in range(owners)]


def _queries(domain: Domain | Grid, count: int, seed: int) -> list[tuple[tuple[int, int], ...]]:
    rng = np.random.default_rng(seed)
    axes = (domain,) if isinstance(domain, Domain) else domain.axes
    out = []
    for _ in range(count):
        ends = [np.sort(rng.integers(0, a.bins, 2)) for a in axes]
        out.append(domain.segments([int(e[0]) for e in ends], [int(e[1]) for e in ends]))
    return out


def _truth(histogram: np.ndarray, queries: list[tuple[tuple[int, int], ...]]) -> np.ndarray:
    prefix = np.r_[0, np.cumsum(histogram)]
    return np.array([sum(prefix[hi + 1] - prefix[lo] for lo, hi in q) for q in queries], float)


def _mre(answers: np.ndarray, truth: np.ndarray, total: float) -> float:
    return float(np.mean(np.abs(answers - truth) / np.maximum(truth, 0.001 * total)))


def build_and_query(rows: int, shape: str, owners: int, max_rows: int, queries: int) -> None:
    persons, values, domain = _data(rows, shape)
    cells = domain.cells
    plan = SummaryPlan.of("he-friendly", 1, cells, sensitivity=max_rows)
    floor = _best(lambda: np.bincount(domain.cell_of(values), minlength=cells), 5)
    histogram = sum(
        bounded_histogram(o.persons, o.values, domain, max_rows, np.random.default_rng(1))
        for o in _owners(persons, values, owners)
    )
    ledger = Ledger(":memory:", budget=10**6)
    plain = _best(lambda: Summary.build(histogram, plan, ledger, rng=np.random.default_rng(2)), 3)
    summary = Summary.build(histogram, plan, ledger, rng=np.random.default_rng(2))
    workload = _queries(domain, queries, 3)
    start = time.perf_counter()
    for q in workload:
        summary.count(q)
    plain_query = (time.perf_counter() - start) / queries
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "ledger.sqlite")
        Ledger(path, budget=10)
        start = time.perf_counter()
        with encrypted_summary(
            _owners(persons, values, owners), domain, plan, path, max_rows=max_rows
        ) as enc:
            built = time.perf_counter() - start
            start = time.perf_counter()
            enc.rebuild()
            rebuilt = time.perf_counter() - start
            start = time.perf_counter()
            for q in workload:
                enc.count(q)
            enc_query = (time.perf_counter() - start) / queries
            blocks = enc.provider("__getattribute__", "_partition").blocks
    print(
        f"| {rows:,} | {shape} | {cells} | {floor * 1e3:.1f} ms | {plain * 1e3:.1f} ms | {built:.2f} s "
        f"| {rebuilt:.2f} s | {plain_query * 1e3:.3f} ms | {enc_query * 1e3:.2f} ms | {blocks} |"
    )


def _answers(summary: Summary, workload: list[tuple[tuple[int, int], ...]]) -> np.ndarray:
    """The summary's answers (its exact ``terms``; the error bounds, not needed here, are skipped)."""
    cumulative = summary.cumulative
    return np.array(
        [float(sum(w * int(cumulative[e]) for e, w in summary.partition.terms(q))) for q in workload]
    )


def accuracy(
    rows: int, shape: str, owners: int, max_rows: int, epsilons: list[float], queries: int, runs: int
) -> None:
    persons, values, domain = _data(rows, shape)
    max_rows = 1 if shape == "plateaus" else max_rows  # one order per customer there, declared so
    cells = domain.cells
    sizes = (cells,) if isinstance(domain, Domain) else tuple(a.bins for a in domain.axes)
    coins = [np.random.default_rng(1) for _ in range(owners)]  # the owners' row choice, here and encrypted
    histogram = sum(
        bounded_histogram(o.persons, o.values, domain, max_rows, c)
        for o, c in zip(_owners(persons, values, owners), coins, strict=True)
    )
    raw = np.bincount(domain.cell_of(values), minlength=cells)
    workload = _queries(domain, queries, 3)
    truth, raw_truth = _truth(histogram, workload), _truth(raw, workload)
    total = float(histogram.sum())
    ledger = Ledger(":memory:", budget=10**9)
    print(
        f"\n#### {shape}, {rows:,} orders, {cells} cells; the bounding keeps {total / raw.sum():.1%} of the "
        f"orders ({max_rows} per customer)\n"
    )
    print("| method | " + " | ".join(f"epsilon {e:g}" for e in epsilons) + " |")
    print("| --- |" + " ---: |" * len(epsilons))

    def row(name: str, figure: Callable[[float, int], float]) -> None:
        means = [np.mean([figure(eps, run) for run in range(runs)]) for eps in epsilons]
        print(f"| {name} | " + " | ".join(f"{m:.4f}" for m in means) + " |")

    def plain(against: np.ndarray, **options: Any) -> Callable[[float, int], float]:
        def figure(eps: float, run: int) -> float:
            plan = SummaryPlan.of(
                options.get("method", "he-friendly"),
                eps,
                cells,
                sensitivity=max_rows,
                **{k: v(eps) if callable(v) else v for k, v in options.items() if k != "method"},
            )
            summary = Summary.build(histogram, plan, ledger, rng=np.random.default_rng(100 + run))
            return _mre(_answers(summary, workload), against, total)

        return figure

    for width in WIDTHS:
        row(f"equi-width, width {width}", plain(truth, method="equi-width", width=width))
    row("HE-friendly, threshold max_rows / epsilon_2 (the seed's)", plain(truth))
    row("HE-friendly, the seed's threshold, against every order", plain(raw_truth))
    row("HE-friendly, the seed's threshold, one noise (trusted curator)", plain(truth, parties=1))
    wide = lambda eps: 3 * SummaryPlan.of("he-friendly", eps, cells, sensitivity=max_rows).gap_noise.scale  # noqa: E731
    row("HE-friendly, threshold 3 x the gaps' noise scale", plain(truth, threshold=wide))
    nonzero = np.flatnonzero(histogram)
    coords = np.array(np.unravel_index(nonzero, sizes)).T
    ends = _boxes(workload, sizes)  # the view answers boxes by their per-attribute ends

    def view(eps: float, run: int) -> float:
        built = hdpview(
            coords, histogram[nonzero], sizes, epsilon=eps / max_rows, rng=np.random.default_rng(200 + run)
        )
        return _mre(built.range_counts(*ends), truth, total)

    row("HDPView (plaintext, at epsilon / max_rows)", view)

    def per_query(eps: float, run: int) -> float:
        noise = Geometric(sensitivity=max_rows, epsilon=eps / queries)
        return _mre(
            truth + noise.release(np.zeros(queries, np.int64), rng=np.random.default_rng(300 + run)),
            truth,
            total,
        )

    row("geometric noise on each query (epsilon / queries)", per_query)
    line = []
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "ledger.sqlite")
        Ledger(path, budget=100)
        for eps in epsilons:
            plan = SummaryPlan.of("he-friendly", eps, cells, sensitivity=max_rows)
            rngs = (None, None, [np.random.default_rng(1) for _ in range(owners)])
            with encrypted_summary(
                _owners(persons, values, owners), domain, plan, path, max_rows=max_rows, rngs=rngs
            ) as enc:
                line.append(_mre(np.array([enc.count(q).value for q in workload]), truth, total))
    print(
        "| HE-friendly, the seed's threshold: the encrypted protocol, one run | "
        + " | ".join(f"{m:.4f}" for m in line)
        + " |"
    )


def _boxes(
    workload: list[tuple[tuple[int, int], ...]], sizes: tuple[int, ...]
) -> tuple[np.ndarray, np.ndarray]:
    """Per-attribute inclusive ends of each query, read back from its ranges of cells."""
    lows, highs = [], []
    for q in workload:
        first, last = np.unravel_index(q[0][0], sizes), np.unravel_index(q[-1][1], sizes)
        lows.append([int(v) for v in first])
        highs.append([int(v) for v in last])
    return np.array(lows), np.array(highs)


def scaling(rows: int, cells_list: list[int]) -> None:
    """The summary's HE steps against the number of cells, every party in this process (no pipes)."""
    print(
        f"\n### The HE-friendly summary's steps against the number of cells ({rows:,} uniform rows, eps 1)\n"
    )
    print(
        "| cells | ciphertexts per vector | owner: encrypt | server: noisy gaps | provider: decrypt, cut, "
        "encrypt its noise | server: summary | rebuild in all | plaintext Summary.build | ratio |"
    )
    print("| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    rng = np.random.default_rng(rows)
    persons, values = np.arange(rows), rng.uniform(0, 1, rows)
    for cells in cells_list:
        domain = Domain(0.0, 1.0, cells)
        plan = SummaryPlan.of("he-friendly", 1, cells)
        ledger = Ledger(":memory:", budget=10**6)
        with encrypted_summary(
            [OwnerData(persons, values)], domain, plan, ledger, max_rows=1, processes=False
        ) as enc:
            owner, server, provider = enc.owners[0]._local, enc.server._local, enc.provider._local
            public = provider.public_key()
            encrypt = _best(lambda owner=owner, public=public: owner.upload(public), 3)
            gaps = server.noisy_gaps()
            t_gaps = _best(server.noisy_gaps, 3)
            start = time.perf_counter()
            ends, noise = provider.summarise(gaps)
            t_provider = time.perf_counter() - start
            t_server = _best(lambda server=server, ends=ends, noise=noise: server.summarise(ends, noise), 3)
            t_rebuild = _best(enc.rebuild, 3)
        histogram = bounded_histogram(persons, values, domain, 1)
        plain = _best(lambda h=histogram, p=plan, led=ledger: Summary.build(h, p, led), 3)
        print(
            f"| {cells:,} | {-(-cells // SLOTS)} | {encrypt * 1e3:.0f} ms | {t_gaps * 1e3:.0f} ms "
            f"| {t_provider * 1e3:.0f} ms | {t_server * 1e3:.0f} ms | {t_rebuild * 1e3:.0f} ms "
            f"| {plain * 1e3:.0f} ms | {t_rebuild / plain:.1f}x |"
        )


def join(sizes: list[int]) -> None:
    print("\n### Private join of two organisations (n customers each, half shared; epsilon 1, k 10)\n")
    print("| n per side | raw join and count (numpy) | private_join (3 processes) | ratio |")
    print("| ---: | ---: | ---: | ---: |")
    for n in sizes:
        rng = np.random.default_rng(n)
        left = (rng.permutation(2 * n)[:n], rng.integers(0, 5, n))
        right = (rng.permutation(2 * n)[:n], rng.integers(0, 4, n))

        def raw(left: Any = left, right: Any = right) -> np.ndarray:
            _, i, j = np.intersect1d(left[0], right[0], return_indices=True)
            table = np.zeros((5, 4), np.int64)
            np.add.at(table, (left[1][i], right[1][j]), 1)
            return table

        floor = _best(raw, 3)
        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, "ledger.sqlite")
            Ledger(path, budget=10)
            start = time.perf_counter()
            private_join(left, right, JoinPlan(1, (5, 4)), path)
            took = time.perf_counter() - start
        print(f"| {n:,} | {floor * 1e3:.1f} ms | {took:.1f} s | {took / floor:,.0f}x |")


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rows", type=int, nargs="+", default=[10_000, 100_000])
    parser.add_argument("--epsilons", type=float, nargs="+", default=[0.1, 0.5, 1.0])
    parser.add_argument("--queries", type=int, default=1_000)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--owners", type=int, default=4)
    parser.add_argument("--max-rows", type=int, default=10)
    parser.add_argument("--sections", default="he,build,accuracy,scaling,join")
    args = parser.parse_args()
    sections = set(args.sections.split(","))
    if "he" in sections:
        he_operations(20)
    if "build" in sections:
        print(
            "\n### Build and query: raw histogram, plaintext and encrypted summaries (HE-friendly, eps 1)\n"
        )
        print(
            "| orders | data | cells | raw histogram | plaintext Summary.build | encrypted: first "
            "build (processes, keys, owners' encryption) | encrypted: rebuild | plaintext count "
            "| encrypted count | blocks |"
        )
        print("| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
        for rows in args.rows:
            for shape in ("sales", "sales2"):
                build_and_query(rows, shape, args.owners, args.max_rows, args.queries)
    if "accuracy" in sections:
        print(
            f"\n### Accuracy: mean relative error of {args.queries:,} random range counts ({args.runs} runs)"
        )
        for rows in args.rows:
            for shape in ("sales", "sales2", "plateaus"):
                accuracy(rows, shape, args.owners, args.max_rows, args.epsilons, args.queries, args.runs)
    if "scaling" in sections:
        scaling(max(args.rows), [1024, 4096, 16384, 65536])
    if "join" in sections:
        join(args.rows)


if __name__ == "__main__":
    main()
