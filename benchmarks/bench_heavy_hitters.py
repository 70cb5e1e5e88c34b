"""Heavy hitters over 2^32 values: PEM (OLH) and TreeHist (OLH) at n = 10^6 clients (seed 003).

Each client's rank follows Zipf(1.1) truncated at 10^6 ranks and every rank is mapped to its own random
32-bit key. For eps in {1, 2, 4} and k in {10, 20}: precision and recall of the keys returned against the
true top-k, the wall time of all clients' randomization and of the server's identification, and the
groups each protocol splits the clients into. Clients use the secure randomness source unless ``--seed``
is given (then a seeded generator, for a reproducible table).

    .venv/bin/python benchmarks/bench_heavy_hitters.py [--n 1000000] [--seed 1]
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from kakeibo.ldp.heavy_hitters import PEM, TreeHist

EPSILONS = (1.0, 2.0, 4.0)
KS = (10, 20)
RANKS = 1_000_000


def zipf_keys(n: int, seed: int) -> np.ndarray:
    """``n`` clients: Zipf(1.1) ranks truncated at ``RANKS``, each rank its own random 32-bit key."""
    rng = np.random.default_rng(seed)
    shares = np.arange(1, RANKS + 1, dtype=np.float64) ** -1.1
    rank = rng.choice(RANKS, size=n, p=shares / shares.sum())
    return rng.choice(2**32, size=RANKS, replace=False)[rank]


def true_top(keys: np.ndarray, k: int) -> np.ndarray:
    distinct, counts = np.unique(keys, return_counts=True)
    return distinct[np.argsort(-counts, kind="stable")[:k]]


def run_row(proto: PEM | TreeHist, keys: np.ndarray, top: np.ndarray, rng: np.random.Generator | None) -> str:
    start = time.perf_counter()
    batches = proto.randomize(keys, rng=rng)
    client = time.perf_counter() - start
    start = time.perf_counter()
    found = proto.identify(batches)
    server = time.perf_counter() - start
    hits = int(np.isin(found.values, top).sum())
    precision = f"{hits / found.values.size:.2f}" if found.values.size else "-"
    return (
        f"| {type(proto).__name__:<21} | {proto.epsilon:>3g} | {proto.k:>2} | {proto.groups:>6} | "
        f"{found.values.size:>5} | {precision:>9} | {hits / top.size:>6.2f} | "
        f"{client:>8.2f} | {server:>8.2f} |"
    )


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--n", type=int, default=1_000_000, help="number of clients")
    parser.add_argument("--seed", type=int, default=None, help="seed the clients' randomness")
    parser.add_argument("--population-seed", type=int, default=2017, help="seed of the Zipf population")
    args = parser.parse_args()
    keys = zipf_keys(args.n, args.population_seed)
    rng = None if args.seed is None else np.random.default_rng(args.seed)
    print(f"n = {args.n}, Zipf(1.1) over {RANKS} ranks mapped into 2^32; times in seconds")
    print("| protocol              | eps |  k | groups | found | precision | recall |  client  |  server  |")
    print("|-----------------------|-----|----|--------|-------|-----------|--------|----------|----------|")
    for k in KS:
        top = true_top(keys, k)
        for epsilon in EPSILONS:
            for proto in (PEM(epsilon=epsilon, bits=32, k=k), TreeHist(epsilon=epsilon, bits=32, k=k)):
                print(run_row(proto, keys, top, rng), flush=True)


if __name__ == "__main__":
    main()
