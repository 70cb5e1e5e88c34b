"""Pattern counts on a graph under node-level DP (issue 33): kakeibo's R2T race over its linear program
against a fixed threshold at GS, side by side, with each step timed.

For each pattern the occurrences are joined once by DuckDB and each threshold's program solved once (both
timed); the race and the fixed threshold then release ``--runs`` times with fresh noise (the programs'
values are a function of the graph, so this is the distribution of ``--runs`` full releases). Error: the
authors' statistic, the mean relative error of the runs without the 2 best and 2 worst. The fixed
threshold: the program at tau = GS with Laplace noise of sensitivity GS at the whole epsilon (the same
certified program, no race).

    .venv/bin/python benchmarks/bench_graphs.py --patterns edge,triangle --epsilons 0.1,0.2,0.4,0.8,1.6,3.2
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np

from kakeibo import graphs
from kakeibo.mechanisms import Laplace
from kakeibo.noise import resolve_source
from kakeibo.sql.truncation_lp import SENSITIVITY_FACTOR, truncated_values

DATA = Path(__file__).resolve().parents[2] / "shared" / "data" / "facebook_combined.txt"


def trimmed_relative_error(released: np.ndarray, truth: float) -> float:
    """Mean relative error without the 2 best and 2 worst runs (R2T's experiments)."""
    errors = np.sort(np.abs(released - truth) / truth)
    return float(errors[2:-2].mean()) if len(errors) > 4 else float(errors.mean())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--graph", type=Path, default=DATA, help="edge list, one 'u v' per line")
    parser.add_argument("--patterns", default="edge,triangle")
    parser.add_argument("--epsilons", default="0.1,0.2,0.4,0.8,1.6,3.2")
    parser.add_argument("--max-degree", type=int, default=1024)
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--beta", type=float, default=0.1)
    parser.add_argument("--seed", type=int, default=33)
    args = parser.parse_args()
    edges = np.loadtxt(args.graph, dtype=np.int64)
    rng = np.random.default_rng(args.seed)
    print(
        f"graph {args.graph.name}: {len(edges)} edges; D = {args.max_degree}; {args.runs} runs; "
        f"beta {args.beta}"
    )
    print(
        "| pattern | occurrences | largest per-node total | GS | join s | programs s | epsilon | race | "
        "fixed tau = GS |"
    )
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for pattern in args.patterns.split(","):
        start = time.perf_counter()
        incidence, _ = graphs.occurrences(edges, pattern)
        joined = time.perf_counter() - start
        truth = float(incidence.size)
        gs = float(args.max_degree) ** graphs.PATTERNS[pattern][1]
        taus = graphs._race(pattern, 1.0, args.max_degree, args.beta, 10.0).taus
        start = time.perf_counter()
        values = truncated_values(incidence, [*taus, gs])
        solved = time.perf_counter() - start
        for epsilon in (float(e) for e in args.epsilons.split(",")):
            race = graphs._race(pattern, epsilon, args.max_degree, args.beta, 10.0)
            source = resolve_source(rng)
            raced = race.release(np.tile(values[:-1], (args.runs, 1)), source)[0]
            fixed = Laplace(sensitivity=gs * SENSITIVITY_FACTOR, epsilon=epsilon, coordinates=1)
            plain = np.asarray(fixed.release(np.full(args.runs, values[-1]), rng=source))
            print(
                f"| {pattern} | {int(truth):,} | {incidence.totals().max():,.0f} | {gs:,.0f} | "
                f"{joined:.2f} | {solved:.1f} | {epsilon:g} | {trimmed_relative_error(raced, truth):.2%} | "
                f"{trimmed_relative_error(plain, truth):.2%} |",
                flush=True,
            )


if __name__ == "__main__":
    main()
