"""Pattern counts on a graph under node-level DP (issue 33): kakeibo's R2T race over its linear program
against a fixed threshold at GS, side by side, with each step timed.

For each pattern the occurrences are joined once by DuckDB (timed). For each epsilon, one release runs as
:func:`kakeibo.graphs.count` runs it (:func:`kakeibo.sql.truncation_lp.race_release`: every candidate's
noise first, programs solved from the largest threshold down, skipping those that cannot win), timed
without any cache; then ``--runs`` releases with fresh noise give the error, the programs' values kept
between runs (they are a function of the graph, so the released values are distributed exactly as
``--runs`` full releases). Error: the authors' statistic, the mean relative error of the runs without the
2 best and 2 worst. The fixed threshold: the program at tau = GS with Laplace noise of sensitivity GS at
the whole epsilon (the same certified program, no race).

    .venv/bin/python benchmarks/bench_graphs.py --patterns edge,triangle --epsilons 0.1,0.2,0.4,0.8,1.6,3.2
    .venv/bin/python benchmarks/bench_graphs.py --patterns edge --bases 10,5.5,4
"""

from __future__ import annotations

import argparse
import contextlib
import time
from collections.abc import Iterator, Sequence
from pathlib import Path

import numpy as np

from kakeibo import graphs
from kakeibo.mechanisms import Laplace
from kakeibo.noise import resolve_source
from kakeibo.sql import truncation_lp
from kakeibo.sql.truncation_lp import SENSITIVITY_FACTOR, Incidence

DATA = Path(__file__).resolve().parents[2] / "shared" / "data" / "facebook_combined.txt"


def trimmed_relative_error(released: np.ndarray, truth: float) -> float:
    """Mean relative error without the 2 best and 2 worst runs (R2T's experiments)."""
    errors = np.sort(np.abs(released - truth) / truth)
    return float(errors[2:-2].mean()) if len(errors) > 4 else float(errors.mean())


Known = dict[tuple[int, float], truncation_lp.Certificate]


@contextlib.contextmanager
def remembered_programs(known: Known) -> Iterator[None]:
    """Within the block, each threshold's certificate is solved once per incidence and kept in ``known``
    (which may outlive the block): the programs' values are a function of the data, so releases drawn
    with them are distributed as releases that solve every program again."""
    solve = truncation_lp.certificates

    def remembered(incidence: Incidence, taus: Sequence[float]) -> list[truncation_lp.Certificate]:
        missing = [t for t in taus if (id(incidence), t) not in known]
        known.update(zip(((id(incidence), t) for t in missing), solve(incidence, missing), strict=True))
        return [known[(id(incidence), t)] for t in taus]

    truncation_lp.certificates = remembered
    try:
        yield
    finally:
        truncation_lp.certificates = solve


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--graph", type=Path, default=DATA, help="edge list, one 'u v' per line")
    parser.add_argument("--patterns", default="edge,triangle")
    parser.add_argument("--epsilons", default="0.1,0.2,0.4,0.8,1.6,3.2")
    parser.add_argument("--max-degree", type=int, default=1024)
    parser.add_argument("--bases", default="10", help="race bases to compare (graphs.count's default: 10)")
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
        "| pattern | occurrences | largest per-node total | GS | join s | one release s | epsilon | base "
        "| race | fixed tau = GS |"
    )
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for pattern in args.patterns.split(","):
        start = time.perf_counter()
        incidence, _ = graphs.occurrences(edges, pattern)
        joined = time.perf_counter() - start
        truth = float(incidence.size)
        gs = float(args.max_degree) ** graphs.PATTERNS[pattern][1]
        known: Known = {}
        grid = [(float(e), float(b)) for e in args.epsilons.split(",") for b in args.bases.split(",")]
        for epsilon, base in grid:
            race = graphs._race(pattern, epsilon, args.max_degree, args.beta, base)
            start = time.perf_counter()
            truncation_lp.race_release(race, incidence, resolve_source(rng))  # uncached
            released_in = time.perf_counter() - start
            with remembered_programs(known):
                release = truncation_lp.race_release
                raced = np.array([release(race, incidence, resolve_source(rng))[0] for _ in range(args.runs)])
                at_gs = truncation_lp.certificates(incidence, [gs])[0].value
            fixed = Laplace(sensitivity=gs * SENSITIVITY_FACTOR, epsilon=epsilon, coordinates=1)
            plain = np.asarray(fixed.release(np.full(args.runs, at_gs), rng=rng))
            print(
                f"| {pattern} | {int(truth):,} | {incidence.totals().max():,.0f} | {gs:,.0f} | "
                f"{joined:.2f} | {released_in:.1f} | {epsilon:g} | {base:g} | "
                f"{trimmed_relative_error(raced, truth):.2%} | {trimmed_relative_error(plain, truth):.2%} |",
                flush=True,
            )


if __name__ == "__main__":
    main()
