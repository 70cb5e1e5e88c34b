"""Frequency oracles: kakeibo against pure-ldp and multi-freq-ldpy in one run (issue 4).

n users with Zipf(1.1) values over d = 1024, eps in {1, 4}; for GRR, OUE, OLH and Hadamard response:
wall time of all clients' perturbation, of the aggregation (reports to estimated counts of the whole
domain), peak memory (VmHWM of a child process per row), and the MSE of the estimated counts next to the
oracle's theoretical variance (Wang et al. 2017, Eq. (2), averaged over the domain). Every row runs in its
own child process so that peak memory is that row's.

The peers loop in Python per user, so they run on ``--peer-n`` users (default 10^5) and their times are
also shown scaled linearly to n (their per-user cost is constant: both loop once per report, and OLH's
aggregation loops over reports times domain values). Their MSE is compared with theory at their own n.

    python3 -m venv /tmp/peer-ldp
    /tmp/peer-ldp/bin/pip install pure-ldp==1.2.0 multi-freq-ldpy==0.2.5 numpy 'xxhash<4' \
        scikit-learn statsmodels
    .venv/bin/python benchmarks/bench_ldp.py --peer-python /tmp/peer-ldp/bin/python
"""

from __future__ import annotations

import argparse
import json
import math
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from ldp_peer_runners import peak_rss_mb, zipf_values  # noqa: E402

ORACLES = ("GRR", "OUE", "OLH", "HR")


def theory_mse(oracle: str, epsilon: float, n: int, true_counts: np.ndarray) -> float:
    """The idealised variance of Eq. (2) for the textbook parameters, averaged over the domain."""
    e = math.exp(epsilon)
    d = true_counts.size
    if oracle == "GRR":
        p, q = e / (e + d - 1), 1 / (e + d - 1)
    elif oracle in ("OUE", "OLH"):
        p, q = 0.5, 1 / (e + 1)
    else:  # HR
        p, q = e / (e + 1), 0.5
    per_value = n * q * (1 - q) / (p - q) ** 2 + true_counts * (1 - p - q) / (p - q)
    return float(per_value.mean())


def run_kakeibo(oracle: str, epsilon: float, d: int, n: int, seed: int) -> dict[str, Any]:
    """One kakeibo row, in this (child) process: secure randomness, as a deployment would use."""
    from kakeibo import ldp

    cls = {"GRR": ldp.GRR, "OUE": ldp.OUE, "OLH": ldp.OLH, "HR": ldp.HadamardResponse}[oracle]
    values = zipf_values(n, d, seed)
    fo = cls(epsilon=epsilon, domain_size=d)
    start = time.perf_counter()
    reports = fo.randomize(values)
    perturb_s = time.perf_counter() - start
    start = time.perf_counter()
    counts = fo.estimate(reports).counts
    aggregate_s = time.perf_counter() - start
    true = np.bincount(values, minlength=d)
    return {
        "perturb_s": perturb_s,
        "aggregate_s": aggregate_s,
        "peak_rss_mb": peak_rss_mb(),
        "mse": float(np.mean((counts - true) ** 2)),
        "own_theory": float(fo.count_variance(n, true).mean()),
        "report_bytes": len(reports.to_bytes()) / n,
    }


def child(cmd: list[str], timeout: float) -> dict[str, Any] | str:
    with tempfile.NamedTemporaryFile(suffix=".json") as out:
        try:
            proc = subprocess.run([*cmd, "--out", out.name], capture_output=True, text=True, timeout=timeout)
        except subprocess.TimeoutExpired:
            return f"timeout after {timeout:.0f} s"
        if proc.returncode != 0:
            return proc.stderr.strip().splitlines()[-1] if proc.stderr.strip() else f"exit {proc.returncode}"
        result: dict[str, Any] = json.loads(Path(out.name).read_text())
        return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=1_000_000)
    parser.add_argument("--peer-n", type=int, default=100_000)
    parser.add_argument("--domain-size", type=int, default=1024)
    parser.add_argument("--epsilons", type=float, nargs="+", default=[1.0, 4.0])
    parser.add_argument("--peer-python", help="python of a venv with pure-ldp and multi-freq-ldpy")
    parser.add_argument("--timeout", type=float, default=1800)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--kakeibo-row", nargs=2, metavar=("ORACLE", "EPSILON"), help=argparse.SUPPRESS)
    parser.add_argument("--out", help=argparse.SUPPRESS)
    args = parser.parse_args()
    d = args.domain_size

    if args.kakeibo_row:
        row = run_kakeibo(args.kakeibo_row[0], float(args.kakeibo_row[1]), d, args.n, args.seed)
        Path(args.out).write_text(json.dumps(row))
        return

    print(f"n = {args.n:,} (peers: {args.peer_n:,}, times scaled to n), d = {d}, Zipf(1.1)\n")
    header = (
        f"| {'system':<16} | {'oracle':<6} | {'eps':>3} | {'perturb s':>10} | {'aggregate s':>11} | "
        f"{'peak MB':>8} | {'MSE / theory':>12} | {'speed-up':>8} |"
    )
    print(header)
    print("|" + "|".join("-" * (len(c)) for c in header.split("|")[1:-1]) + "|")
    true_n = np.bincount(zipf_values(args.n, d, args.seed), minlength=d)
    true_peer = np.bincount(zipf_values(args.peer_n, d, args.seed), minlength=d)
    for eps in args.epsilons:
        for oracle in ORACLES:
            mine = child(
                [
                    sys.executable,
                    __file__,
                    "--n",
                    str(args.n),
                    "--domain-size",
                    str(d),
                    "--seed",
                    str(args.seed),
                    "--kakeibo-row",
                    oracle,
                    str(eps),
                ],
                args.timeout,
            )
            if isinstance(mine, str):
                print(f"| kakeibo | {oracle} | {eps:g} | failed: {mine} |")
                continue
            total = mine["perturb_s"] + mine["aggregate_s"]
            ratio = mine["mse"] / theory_mse(oracle, eps, args.n, true_n)
            own = mine["mse"] / mine["own_theory"]
            print(
                f"| {'kakeibo':<16} | {oracle:<6} | {eps:>3g} | {mine['perturb_s']:>10.2f} | "
                f"{mine['aggregate_s']:>11.3f} | {mine['peak_rss_mb']:>8.0f} | {ratio:>12.3f} | {'1':>8} | "
                f"{own:.3f}, {mine['report_bytes']:.1f} B/report |"
            )
            if not args.peer_python:
                continue
            for library in ("pure-ldp", "multi-freq-ldpy"):
                peer = child(
                    [
                        args.peer_python,
                        str(HERE / "ldp_peer_runners.py"),
                        "--library",
                        library,
                        "--oracle",
                        oracle,
                        "--epsilon",
                        str(eps),
                        "--domain-size",
                        str(d),
                        "--n",
                        str(args.peer_n),
                        "--seed",
                        str(args.seed),
                    ],
                    args.timeout,
                )
                if isinstance(peer, str):
                    print(f"| {library:<16} | {oracle:<6} | {eps:>3g} | n/a: {peer[:90]} |")
                    continue
                scale = args.n / args.peer_n
                perturb, aggregate = peer["perturb_s"] * scale, peer["aggregate_s"] * scale
                ratio = peer["mse"] / theory_mse(oracle, eps, args.peer_n, true_peer)
                print(
                    f"| {library:<16} | {oracle:<6} | {eps:>3g} | {perturb:>10.1f} | {aggregate:>11.1f} | "
                    f"{peer['peak_rss_mb']:>8.0f} | {ratio:>12.3f} | {(perturb + aggregate) / total:>8.0f} |"
                )
    print("\nMSE / theory: MSE of the estimated counts over the domain divided by Eq. (2) for the textbook")
    print("p, q (one run: its own relative standard deviation is about sqrt(2/d) = 4.4%).")
    print(
        "peak MB of the peers is at --peer-n users; speed-up = peer (scaled) total time / kakeibo total time."
    )


if __name__ == "__main__":
    main()
