"""A peer's own private bound choice on the heavy-tailed suite (issue 31): PipelineDP against the oracle.

Run::

    .venv/bin/python benchmarks/heavy_peers.py [--shapes sales pareto whales] [--runs 5] \\
        [--pipelinedp-python /tmp/peers/sql-pipelinedp/bin/python]

PipelineDP runs in a venv of its own (made as in ``bench_sql_peers.py``: ``python3 -m venv
/tmp/peers/sql-pipelinedp && /tmp/peers/sql-pipelinedp/bin/pip install pipeline-dp==0.3.1 pyarrow numpy``),
in a child process (this file, ``--child``) that imports only PipelineDP, numpy, pyarrow and
``bench_sql_peers`` (whose imports are the standard library's, numpy's and pyarrow's), never kakeibo; it
reads the table from a Parquet file the parent writes to a temporary directory.

Data, queries and error: as ``bench_bounds.py --suite heavy``: the shapes of ``heavy_tails.py``, ``COUNT(*)``
and ``SUM(amount)`` per region, per category and over the whole table, at epsilon 0.1, 1 and 10 for the
query; each cell is the median over ``--runs`` releases of the median relative error over the groups
(``bench_bounds.HEAVY_GROUPS``, given to PipelineDP as public partitions) against the exact answer. The
oracle column is ``heavy_tails.oracle_error`` at epsilon / 2 per statistic, with the seed bench_bounds uses,
so it is the same number as in bench_bounds' table.

What PipelineDP 0.3.1 chooses privately, and what it does not:

* ``max_partitions_contributed`` (L0), by ``DPEngine.calculate_private_contribution_bounds`` (experimental;
  an exponential mechanism whose score weighs COUNT's noise against the rows dropped, up to the number of
  public partitions) at ``BOUNDS_SHARE`` of epsilon; the aggregation gets the rest, split by PipelineDP's
  ``NaiveBudgetAccountant`` evenly over COUNT and SUM, and the score is told COUNT's half. The chosen L0 is
  used for both statistics (PipelineDP scores COUNT only). Over the whole table there is one partition, L0 is
  1 without a choice, and the aggregation gets all of epsilon.
* Nothing else: ``max_contributions_per_partition`` and the amount's ``min_value``/``max_value`` must be
  given. They are fixed to ``KAPPA`` = 10 rows per (customer, group) and ``AMOUNT`` = [0, 1000] for every
  shape and epsilon, the guess of a user who knows amounts are prices (non-negative, rarely above 1,000: in
  ``sales`` and ``whales`` the median is 90, the 99th percentile 920, and the 0.8% of orders above 1,000 hold
  8% of the mass; in ``pareto`` 0.24% of the orders pass 1,000 and hold 21% of the mass) and not how many
  orders a heavy customer places. They are not tuned per shape on the data: that would be an
  oracle.

OpenDP 0.14 (polars frontend) has no private choice of contribution bounds: its "Identifier Truncation" guide
(docs.opendp.org, getting-started/tabular-data/identifier-truncation) has the analyst pass the limits to
``truncate_per_group`` / ``truncate_num_groups`` by assumption ("unlikely that an individual is chosen for the
survey more than ten times"), and value bounds are given to ``.dp.sum((lower, upper))``; a private estimate
of value bounds is an open request (opendp/opendp issue 659, "Approximate Bounds"). So it is not run here.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from importlib import metadata
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow.parquet as pq

sys.path.insert(0, str(Path(__file__).parent))
from bench_sql_peers import _best, _pipelinedp_extractors

EPSILONS = (0.1, 1.0, 10.0)
BOUNDS_SHARE = 0.1  # of epsilon, for PipelineDP's private L0 (bench_sql_peers' default)
KAPPA = 10  # max_contributions_per_partition, fixed (module docstring)
AMOUNT = (0.0, 1000.0)  # min_value, max_value, fixed (module docstring)
PIPELINEDP_PYTHON = "/tmp/peers/sql-pipelinedp/bin/python"

Release = dict[str, list[float]]  # group -> [count, sum]


# --- the child, in PipelineDP's venv ---


def _choose_l0(
    rows: list[tuple[int, str, float]], groups: list[str], calculation: float, count: float
) -> int:
    """PipelineDP's private L0 at epsilon ``calculation``, scored for a COUNT released at ``count``."""
    import pipeline_dp  # type: ignore[import-not-found, unused-ignore]

    engine = pipeline_dp.DPEngine(
        pipeline_dp.NaiveBudgetAccountant(total_epsilon=count, total_delta=0.0), pipeline_dp.LocalBackend()
    )
    params = pipeline_dp.CalculatePrivateContributionBoundsParams(
        aggregation_noise_kind=pipeline_dp.NoiseKind.LAPLACE,
        aggregation_eps=count,
        aggregation_delta=0.0,
        calculation_eps=calculation,
        max_partitions_contributed_upper_bound=len(groups),
    )
    bounds = engine.calculate_private_contribution_bounds(
        rows, params, _pipelinedp_extractors(), partitions=groups
    )
    return int(next(iter(bounds)).max_partitions_contributed)


def _release(
    rows: list[tuple[int, str, float]], groups: list[str], epsilon: float, chosen: list[int]
) -> Release:
    """One release of COUNT and SUM per group at ``epsilon`` in all, L0 chosen privately where there is a
    choice (appended to ``chosen``)."""
    import pipeline_dp  # type: ignore[import-not-found, unused-ignore]

    calculation = epsilon * BOUNDS_SHARE if len(groups) > 1 else 0.0
    aggregation = epsilon - calculation
    l0 = _choose_l0(rows, groups, calculation, aggregation / 2) if calculation else 1
    chosen.append(l0)
    accountant = pipeline_dp.NaiveBudgetAccountant(total_epsilon=aggregation, total_delta=0.0)
    engine = pipeline_dp.DPEngine(accountant, pipeline_dp.LocalBackend())
    params = pipeline_dp.AggregateParams(
        metrics=[pipeline_dp.Metrics.COUNT, pipeline_dp.Metrics.SUM],
        noise_kind=pipeline_dp.NoiseKind.LAPLACE,
        max_partitions_contributed=l0,
        max_contributions_per_partition=KAPPA,
        min_value=AMOUNT[0],
        max_value=AMOUNT[1],
    )
    result = engine.aggregate(rows, params, _pipelinedp_extractors(), public_partitions=groups)
    accountant.compute_budgets()
    return {key: [float(m.count), float(m.sum)] for key, m in result}


def child(job: dict[str, Any]) -> dict[str, Any]:
    """Every epsilon of one (shape, query): the releases, the chosen L0s and the best time of a release."""
    table = pq.read_table(job["path"])
    key = job["key"]
    partition = table[key].to_pylist() if key else ["all"] * table.num_rows
    rows = list(
        zip(
            table["customer_id"].to_numpy().tolist(),
            partition,
            table["amount"].to_numpy().tolist(),
            strict=True,
        )
    )
    cells = []
    for epsilon in job["epsilons"]:
        chosen: list[int] = []
        seconds, answers = _best(lambda e=epsilon, c=chosen: _release(rows, job["groups"], e, c), job["runs"])
        cells.append({"seconds": seconds, "answers": answers, "l0": chosen})
    versions = {name: metadata.version(name) for name in ("pipeline-dp", "python-dp")}
    return {"cells": cells, "versions": versions}


# --- the parent, in kakeibo's venv ---


def _run_child(python: str, job: dict[str, Any], timeout: float) -> dict[str, Any]:
    """The child's result, or ``{"error": ...}`` with its last line of stderr."""
    command = [python, __file__, "--child", json.dumps(job)]
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return {"error": f"did not finish in {timeout:.0f} s"}
    if done.returncode != 0:
        lines = [line for line in done.stderr.splitlines() if line.strip()]
        return {"error": (lines or [f"exit code {done.returncode}"])[-1][:200]}
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def _error(answers: list[Release], groups: list[str], exact: np.ndarray, index: int) -> float:
    """The median over releases of the median relative error over the groups (an unreleased group counts
    as 0)."""
    per_run = [
        np.median([abs(a.get(g, [0.0, 0.0])[index] - exact[i]) / abs(exact[i]) for i, g in enumerate(groups)])
        for a in answers
    ]
    return float(np.median(per_run))


def main_parent(args: argparse.Namespace) -> None:
    """One table row per (shape, query, epsilon): PipelineDP's errors next to the oracle's."""
    import heavy_tails
    from bench_bounds import HEAVY_GROUPS

    print(
        "| shape | query | epsilon | peer | seconds | COUNT err | oracle | ratio | SUM err | oracle | ratio "
        "| note |"
    )
    print("| --- " * 12 + "|")
    shapes = args.shapes or list(heavy_tails.SHAPES)
    if unknown := set(shapes) - set(heavy_tails.SHAPES):
        known = ", ".join(heavy_tails.SHAPES)
        raise SystemExit(f"--shapes: unknown {', '.join(sorted(unknown))} (known: {known})")
    versions: dict[str, str] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for shape in shapes:
            table = heavy_tails.SHAPES[shape]()
            path = str(Path(tmp) / f"{shape}.parquet")
            pq.write_table(table, path)
            for query, groups in HEAVY_GROUPS.items():
                key = None if query == "whole" else query
                pairs = [heavy_tails.Pairs.of(table, key, value, groups) for value in (None, "amount")]
                job = {"path": path, "key": key, "groups": groups, "epsilons": EPSILONS, "runs": args.runs}
                result = _run_child(args.pipelinedp_python, job, args.timeout)
                versions.update(result.get("versions", {}))
                for i, epsilon in enumerate(EPSILONS):
                    oracle = [
                        heavy_tails.oracle_error(p, epsilon / 2, args.runs, np.random.default_rng(1))
                        for p in pairs
                    ]
                    head = f"| {shape} | {query} | {epsilon:g} | PipelineDP, private L0 |"
                    if "error" in result:
                        print(f"{head} | | {oracle[0]:.4f} | | | {oracle[1]:.4f} | | {result['error']} |")
                        continue
                    cell = result["cells"][i]
                    errors = [_error(cell["answers"], groups, p.exact, j) for j, p in enumerate(pairs)]
                    how = f"at epsilon {epsilon * BOUNDS_SHARE:g}" if len(groups) > 1 else "(one partition)"
                    chosen = cell["l0"]
                    note = f"L0 {', '.join(map(str, chosen))} {how}; median {statistics.median(chosen):g}"
                    print(
                        f"{head} {cell['seconds']:.2f} | {errors[0]:.4f} | {oracle[0]:.4f} | "
                        f"{errors[0] / oracle[0]:.2f} | {errors[1]:.4f} | {oracle[1]:.4f} | "
                        f"{errors[1] / oracle[1]:.2f} | {note} |",
                        flush=True,
                    )
    print(
        f"\nFixed for every shape and epsilon: max_contributions_per_partition {KAPPA}, amount in "
        f"[{AMOUNT[0]:g}, {AMOUNT[1]:g}]. Versions: "
        + ", ".join(f"{k} {v}" for k, v in sorted(versions.items()))
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--shapes", nargs="+", help="shapes of heavy_tails.SHAPES (default: all)")
    parser.add_argument("--pipelinedp-python", default=PIPELINEDP_PYTHON, help="interpreter with pipeline-dp")
    parser.add_argument("--timeout", type=float, default=3600, help="seconds allowed per (shape, query)")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(child(json.loads(args.child))))
        return
    main_parent(args)


if __name__ == "__main__":
    main()
