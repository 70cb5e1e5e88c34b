"""RAPPOR at scale: randomization and decoding time, and what the decoder finds.

n clients (default 10^6), the paper's parameters (k = 128, h = 2, m = 64, p = 1/2, q = 3/4, f = 1/2). 90%
of the clients hold one of 100 candidate strings with Zipf(1.1) shares, 10% one of 20 strings that are no
candidate; the decoder gets the 100 held candidates plus 100 decoys nobody holds (200 candidates). Each run
reports, with secure randomness (as a deployment would use):

* the wall time of all clients' randomization through the vectorised population path
  (``RAPPOR.randomize``), and the per-client time of deployed clients (``RapporClient``: keyed PRF for the
  memoised PRR, one report each) on ``--client-n`` clients, scaled to n;
* the wall time of decoding (bit counts, LASSO screen, least squares, Bonferroni at beta = 0.05;
  scikit-learn is imported before timing);
* recall of the true top-10 and top-20 among the detected candidates, precision of the detections (decoys
  count as false), the standard error of one candidate's count, and the estimated number of clients
  holding no candidate next to the truth.

    .venv/bin/python benchmarks/bench_rappor.py [--n 1000000] [--runs 3] [--client-n 10000]
"""

from __future__ import annotations

import argparse
import os
import time

import numpy as np

from kakeibo.ldp.rappor import RAPPOR, RapporClient

HELD, UNLISTED, DECOYS = 100, 20, 100


def population(n: int, seed: int) -> tuple[list[str], np.ndarray, np.ndarray]:
    """(candidate names, true count of each held candidate, every client's value)."""
    shares = np.arange(1, HELD + 1, dtype=np.float64) ** -1.1
    counts = np.floor(shares / shares.sum() * 0.9 * n).astype(np.int64)
    others = np.full(UNLISTED, (n - counts.sum()) // UNLISTED)
    others[0] += n - counts.sum() - others.sum()
    held = [f"site-{i}.example" for i in range(HELD)]
    unlisted = [f"unlisted-{i}.example" for i in range(UNLISTED)]
    decoys = [f"decoy-{i}.example" for i in range(DECOYS)]
    values = np.repeat(np.array(held + unlisted), np.concatenate([counts, others]))
    return held + decoys, counts, np.random.default_rng(seed).permutation(values)


def client_seconds_per_report(rappor: RAPPOR, values: np.ndarray) -> float:
    """Mean wall time of one deployed client (fresh secret, derived cohort) sending one report."""
    start = time.perf_counter()
    for value in values.tolist():
        RapporClient(rappor, os.urandom(32)).report([value])
    return (time.perf_counter() - start) / values.size


def one_run(rappor: RAPPOR, n: int, client_n: int, seed: int) -> dict[str, float]:
    candidates, counts, values = population(n, seed)
    start = time.perf_counter()
    reports = rappor.randomize(values)
    randomize_s = time.perf_counter() - start
    per_client = client_seconds_per_report(rappor, values[:client_n])
    start = time.perf_counter()
    result = rappor.estimate(reports, candidates, beta=0.05)
    decode_s = time.perf_counter() - start
    detected = result.detected
    truly_held = detected[:HELD].sum()
    order = np.argsort(-counts)
    return {
        "randomize_s": randomize_s,
        "clients_s": per_client * n,
        "decode_s": decode_s,
        "detected": float(detected.sum()),
        "recall10": float(detected[order[:10]].mean()),
        "recall20": float(detected[order[:20]].mean()),
        "precision": float(truly_held / max(1, detected.sum())),
        "std_error": float(np.nanmedian(result.std_errors)),
        "other": result.other_count,
        "other_se": result.other_std_error,
        "other_true": float(n - counts.sum()),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=10**6)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--client-n", type=int, default=10_000)
    args = parser.parse_args()
    import sklearn.linear_model  # noqa: F401  (imported once, outside the timed decode)

    rappor = RAPPOR()
    print(f"{rappor!r}: epsilon_one = {rappor.epsilon_one:.4f}, ", end="")
    print(f"epsilon_infinity = {rappor.epsilon_infinity:.4f}")
    print(f"n = {args.n}, {HELD} held + {DECOYS} decoy candidates, {UNLISTED} unlisted strings (10%)\n")
    header = (
        f"{'run':>3} {'randomize s':>11} {'clients s*':>10} {'decode s':>8} {'detected':>8} "
        f"{'recall@10':>9} {'recall@20':>9} {'precision':>9} {'SE(count)':>9} {'other (SE) vs true':>26}"
    )
    print(header)
    print("-" * len(header))
    for run in range(args.runs):
        row = one_run(rappor, args.n, args.client_n, seed=run)
        other = f"{row['other']:.0f} ({row['other_se']:.0f}) vs {row['other_true']:.0f}"
        print(
            f"{run:>3} {row['randomize_s']:>11.2f} {row['clients_s']:>10.0f} {row['decode_s']:>8.2f} "
            f"{row['detected']:>8.0f} {row['recall10']:>9.2f} {row['recall20']:>9.2f} "
            f"{row['precision']:>9.2f} "
            f"{row['std_error']:>9.0f} {other:>26}"
        )
    print(f"\n* clients s: {args.client_n} RapporClient objects (one report each), time scaled to n.")


if __name__ == "__main__":
    main()
