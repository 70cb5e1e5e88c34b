"""Run the R2T authors' own reference code on ego-Facebook, for comparison with kakeibo (issue 33).

A benchmark helper, not part of kakeibo. It runs ``Code/R2T.py`` of Dong, Fang, Yi, Tao and
Machanavajjhala's "R2T: Instance-optimal Truncation for Differentially Private Query Evaluation with
Foreign Keys" (SIGMOD 2022; github.com/wdongac/Race-to-the-Top, mirrored as hkustDB/Race-to-the-Top) on
node-DP pattern counts of an undirected graph, and reports the authors' statistic: the mean relative error
of the runs without the 2 best and 2 worst (their ``Script/CollectResultsGraph.py`` trims the sorted
absolute errors the same way), plus the seconds per run.

None of their code is copied here. The script takes the path of a git snapshot of their repository
(a bare git directory, e.g. the one the ``fetch`` tool returns), extracts ``Code/R2T.py`` at run time into a
scratch directory, and runs it there unmodified, one subprocess per run, with their command-line flags
(``-I <input> -e <epsilon> -b <beta> -G <GS> -p <processes>``).

Their LP solver is IBM CPLEX's Python API (``import cplex``), which cannot be installed here. It is
replaced by a stand-in package named ``cplex`` written by this script into the scratch directory (found
through ``PYTHONPATH``), implemented on HiGHS (``highspy``). It covers exactly what R2T.py uses:
``Cplex()``, ``objective.set_sense`` / ``objective.sense.maximize``, ``variables.add(obj=, ub=)`` (lower
bound 0, as in CPLEX), ``linear_constraints.add(rhs=, senses=)``, ``linear_constraints.set_coefficients``,
the ``set_*_stream`` calls, ``parameters.lpmethod.set`` (1 = primal simplex, 2 = dual simplex, mapped to
HiGHS's primal / dual simplex), ``register_callback`` with ``callbacks.SimplexCallback``, ``solve``,
``solution.get_status`` / ``solution.status.optimal`` and ``solution.get_objective_value``.
R2T.py registers a simplex callback that aborts a threshold's LP early (when its dual bound can no longer
beat the best candidate found so far, or comes within tau of the never-updated primal value 0). The stand-in
accepts the registration but never calls the callback: every LP is solved to optimality. Early stopping
is meant to discard only candidates that cannot win, so the released value is the one R2T.py computes
without pruning; the one difference is that with CPLEX an LP whose dual bound reaches tau or less is
aborted and counted as 0. ``--solver`` (e.g. ``ipm``) makes the stand-in use another HiGHS solver than
the simplex variant R2T.py's ``lpmethod`` asks for (dual simplex).

Measured on ego-Facebook (2 cores, shared with a test suite): an edge run takes about 3 s. Triangles
(1,612,010 occurrences, 8 thresholds, LPs with 1,612,010 columns) do not finish within the 900 s timeout:
the LP at tau = 5.5^5 alone took 1,131 s with HiGHS's dual simplex, and HiGHS's IPM (``--solver ipm``)
stopped on it with a solve error.

Each run seeds Python's ``random`` module (which R2T.py's ``LapNoise`` draws from) through a small
runner, so the noise of every candidate can be recomputed afterwards; with the LP values that the
stand-in logs, the script rebuilds every candidate from the shift and noise formulas read in R2T.py and
checks that it reproduces each released value.

Run (from /work/main, with the fetched snapshot's git directory)::

    .venv/bin/python benchmarks/authors_r2t.py /work/.mirror/hkustDB+Race-to-the-Top/repo \\
        --patterns edge --epsilon 0.8 --beta 0.1 --max-degree 1024 --runs 10
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import re
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_graphs import trimmed_relative_error

DATA = Path(__file__).resolve().parents[2] / "shared" / "data" / "facebook_combined.txt"

STANDIN_INIT = '''"""Stand-in for the part of IBM CPLEX's Python API that R2T's Code/R2T.py uses, on HiGHS.

Written by kakeibo's benchmarks/authors_r2t.py. Simplex callbacks are accepted but never called: every LP
is solved to optimality. If R2T_STANDIN_LOG names a file, one JSON line per solve is appended to it.
"""

import itertools
import json
import os
import time

import highspy
import numpy as np

from . import callbacks

__all__ = ["Cplex", "callbacks"]

_OPTIMAL = 1  # CPX_STAT_OPTIMAL
_NOT_OPTIMAL = 0


class _Sense:
    maximize = -1
    minimize = 1


class _Objective:
    sense = _Sense

    def __init__(self):
        self.value = _Sense.minimize

    def set_sense(self, sense):
        self.value = sense


class _Variables:
    def __init__(self):
        self.obj, self.lb, self.ub = [], [], []

    def add(self, obj=None, lb=None, ub=None):
        n = len(next(x for x in (obj, lb, ub) if x is not None))
        self.obj.append(np.zeros(n) if obj is None else np.asarray(obj, dtype=float))
        self.lb.append(np.zeros(n) if lb is None else np.asarray(lb, dtype=float))
        self.ub.append(np.full(n, highspy.kHighsInf) if ub is None else np.asarray(ub, dtype=float))


class _LinearConstraints:
    def __init__(self):
        self.rhs, self.senses, self.triples = [], "", []

    def add(self, rhs=None, senses=""):
        rhs = np.asarray(rhs, dtype=float)
        self.rhs.append(rhs)
        self.senses += senses if senses else "E" * len(rhs)

    def set_coefficients(self, *args):
        if len(args) == 3:
            self.triples.append(np.array([args], dtype=float))
        else:
            flat = np.fromiter(itertools.chain.from_iterable(args[0]), dtype=float)
            self.triples.append(flat.reshape(-1, 3))


class _Parameter:
    def __init__(self, default):
        self.value = default

    def set(self, value):
        self.value = value


class _Parameters:
    def __init__(self):
        self.lpmethod = _Parameter(0)


class _Status:
    optimal = _OPTIMAL


class _Solution:
    status = _Status

    def __init__(self):
        self.status_code, self.objective = _NOT_OPTIMAL, float("nan")

    def get_status(self):
        return self.status_code

    def get_objective_value(self):
        return self.objective


class Cplex:
    def __init__(self):
        self.objective = _Objective()
        self.variables = _Variables()
        self.linear_constraints = _LinearConstraints()
        self.parameters = _Parameters()
        self.solution = _Solution()
        self.callbacks = []

    def set_log_stream(self, stream):
        pass

    def set_error_stream(self, stream):
        pass

    def set_warning_stream(self, stream):
        pass

    def set_results_stream(self, stream):
        pass

    def register_callback(self, kind):
        callback = kind(None)
        self.callbacks.append(callback)
        return callback

    def solve(self):
        start = time.perf_counter()
        cost = np.concatenate(self.variables.obj)
        n_col = len(cost)
        rhs = np.concatenate(self.linear_constraints.rhs) if self.linear_constraints.rhs else np.zeros(0)
        senses = np.array(list(self.linear_constraints.senses))
        inf = highspy.kHighsInf
        lower = np.where(senses == "L", -inf, rhs)
        upper = np.where(senses == "G", inf, rhs)
        triples = np.concatenate(self.linear_constraints.triples or [np.zeros((0, 3))])
        order = np.argsort(triples[:, 1], kind="stable")
        cols = triples[order, 1].astype(np.int64)
        lp = highspy.HighsLp()
        lp.num_col_, lp.num_row_ = n_col, len(rhs)
        lp.col_cost_ = cost
        lp.col_lower_ = np.concatenate(self.variables.lb)
        lp.col_upper_ = np.concatenate(self.variables.ub)
        lp.row_lower_, lp.row_upper_ = lower, upper
        maximize = self.objective.value == _Sense.maximize
        lp.sense_ = highspy.ObjSense.kMaximize if maximize else highspy.ObjSense.kMinimize
        lp.a_matrix_.format_ = highspy.MatrixFormat.kColwise
        lp.a_matrix_.num_col_, lp.a_matrix_.num_row_ = n_col, len(rhs)
        lp.a_matrix_.start_ = np.concatenate([[0], np.cumsum(np.bincount(cols, minlength=n_col))])
        lp.a_matrix_.index_ = triples[order, 0].astype(np.int32)
        lp.a_matrix_.value_ = triples[order, 2]
        highs = highspy.Highs()
        highs.setOptionValue("output_flag", False)
        highs.setOptionValue("threads", 1)
        method = int(self.parameters.lpmethod.value)
        override = os.environ.get("R2T_STANDIN_SOLVER", "")
        if override:
            highs.setOptionValue("solver", override)
        elif method in (1, 2):
            highs.setOptionValue("solver", "simplex")
            highs.setOptionValue("simplex_strategy", 4 if method == 1 else 1)
        elif method == 4:
            highs.setOptionValue("solver", "ipm")
        built = time.perf_counter()
        highs.passModel(lp)
        highs.run()
        optimal = highs.getModelStatus() == highspy.HighsModelStatus.kOptimal
        self.solution.status_code = _OPTIMAL if optimal else _NOT_OPTIMAL
        self.solution.objective = highs.getInfo().objective_function_value
        log = os.environ.get("R2T_STANDIN_LOG")
        if log:
            record = {
                "rhs_max": float(rhs.max()) if len(rhs) else None,
                "rows": len(rhs),
                "cols": n_col,
                "nonzeros": len(triples),
                "lpmethod": method,
                "solver": override or {1: "primal simplex", 2: "dual simplex"}.get(method, "choose"),
                "status": str(highs.getModelStatus()),
                "objective": self.solution.objective,
                "build_s": built - start,
                "solve_s": time.perf_counter() - built,
            }
            with open(log, "a") as out:
                out.write(json.dumps(record) + "\\n")
'''

STANDIN_CALLBACKS = '''"""Stand-in for cplex.callbacks (see the package docstring): never called."""


class SimplexCallback:
    def __init__(self, env=None):
        self.env = env

    def get_objective_value(self):
        raise NotImplementedError("the HiGHS stand-in never calls simplex callbacks")

    def abort(self):
        raise NotImplementedError("the HiGHS stand-in never calls simplex callbacks")
'''

RUNNER = '''"""Seed Python's random module, then run the given script as __main__ with its arguments."""
import random
import runpy
import sys

random.seed(int(sys.argv[1]))
sys.argv = sys.argv[2:]
runpy.run_path(sys.argv[0], run_name="__main__")
'''


@dataclass
class Run:
    seed: int
    truth: float
    released: float
    their_seconds: float
    wall_seconds: float
    lp_values: dict[float, float]


def git_show(snapshot: Path, rev: str, path: str) -> str:
    return subprocess.run(
        ["git", f"--git-dir={snapshot}", "show", f"{rev}:{path}"], check=True, capture_output=True, text=True
    ).stdout


def read_edges(path: Path) -> np.ndarray:
    """Undirected simple edges as sorted (u < v) unique pairs."""
    raw = np.loadtxt(path, dtype=np.int64).reshape(-1, 2)
    raw = raw[raw[:, 0] != raw[:, 1]]
    return np.unique(np.sort(raw, axis=1), axis=0)


def triangles(edges: np.ndarray) -> np.ndarray:
    """Each triangle once, as (a, b, c) with a < b < c."""
    later: dict[int, set[int]] = {}
    for u, v in edges.tolist():
        later.setdefault(u, set()).add(v)
    found = [(u, v, w) for u, v in edges.tolist() for w in later.get(u, set()) & later.get(v, set()) if w > v]
    return np.array(found, dtype=np.int64).reshape(-1, 3)


def write_input(occurrences: np.ndarray, path: Path) -> None:
    """Their input format (what Code/ExtractInfo.py writes): per join result, its value (1 for a count)
    and the ids of the private tuples (here: nodes) it involves."""
    with path.open("w") as out:
        for row in occurrences.tolist():
            out.write("1 " + " ".join(map(str, row)) + "\n")


def parse_output(text: str) -> tuple[float, float, float]:
    """The values printed after R2T.py's 'Query Result', 'Noised Result' and 'Time' labels."""
    lines = [line.strip() for line in text.splitlines()]
    value = {
        label: float(lines[lines.index(label) + 1]) for label in ("Query Result", "Noised Result", "Time")
    }
    return value["Query Result"], value["Noised Result"], value["Time"]


def their_noise(seed: int, k: int) -> dict[int, float]:
    """The unit Laplace draws R2T.py's LapNoise makes after random.seed(seed), one per i = k, k-1, ..., 1
    (RunAlgorithm draws them in that order, before any LP): magnitude log(1/(1-a)), sign + iff c > 0.5."""
    rng = random.Random(seed)
    draws = {}
    for i in range(k, 0, -1):
        a, c = rng.uniform(0, 1), rng.uniform(0, 1)
        draws[i] = math.log(1 / (1 - a)) * (1 if c > 0.5 else -1)
    return draws


def solved(log: Path) -> str:
    """The stand-in's log of a run, briefly: tau, objective and seconds of each LP solved."""
    records = [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []
    return ", ".join(f"tau {x['rhs_max']:g}: {x['objective']:,.1f} in {x['solve_s']:.0f} s" for x in records)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("snapshot", type=Path, help="git directory of a Race-to-the-Top snapshot")
    parser.add_argument("--rev", default="HEAD")
    parser.add_argument("--graph", type=Path, default=DATA, help="edge list, one 'u v' per line")
    parser.add_argument("--patterns", default="edge", help="edge and/or triangle, comma-separated")
    parser.add_argument("--epsilon", type=float, default=0.8)
    parser.add_argument("--beta", type=float, default=0.1)
    parser.add_argument("--max-degree", type=int, default=1024)
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--seed", type=int, default=0, help="run r seeds random with seed + r")
    parser.add_argument("--processes", type=int, default=1, help="their -p (their scripts use 10)")
    parser.add_argument("--timeout", type=float, default=900.0, help="seconds per run before giving up")
    parser.add_argument(
        "--solver",
        default="",
        help="HiGHS 'solver' option for every LP (e.g. ipm) instead of the simplex their lpmethod asks for",
    )
    parser.add_argument("--workdir", type=Path, default=None, help="scratch directory (default: a new one)")
    args = parser.parse_args()

    commit = subprocess.run(
        ["git", f"--git-dir={args.snapshot}", "rev-parse", args.rev],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()
    work = args.workdir or Path(tempfile.mkdtemp(prefix="authors_r2t_"))
    (work / "Code").mkdir(parents=True, exist_ok=True)
    (work / "standin" / "cplex").mkdir(parents=True, exist_ok=True)
    source = git_show(args.snapshot, commit, "Code/R2T.py")
    script = work / "Code" / "R2T.py"
    script.write_text(source)
    (work / "standin" / "cplex" / "__init__.py").write_text(STANDIN_INIT)
    (work / "standin" / "cplex" / "callbacks.py").write_text(STANDIN_CALLBACKS)
    runner = work / "run_seeded.py"
    runner.write_text(RUNNER)
    found = re.search(r"^\s*base = ([0-9.]+)", source, re.MULTILINE)
    if found is None:
        sys.exit("could not find R2T.py's 'base = ...' line")
    base = float(found.group(1))
    print(f"snapshot {args.snapshot} at {commit}; scratch {work}; their base {base:g}")

    edges = read_edges(args.graph)
    n_nodes = len(np.unique(edges))
    print(f"graph {args.graph.name}: {n_nodes:,} nodes, {len(edges):,} edges")
    eps, beta = args.epsilon, args.beta
    summary = []
    for pattern in args.patterns.split(","):
        power = {"edge": 1, "triangle": 2}[pattern]
        start = time.perf_counter()
        occurrences = edges if pattern == "edge" else triangles(edges)
        data = work / f"{pattern}.txt"
        write_input(occurrences, data)
        truth = float(len(occurrences))
        ds = float(np.bincount(occurrences.ravel()).max())
        gs = float(args.max_degree) ** power
        print(
            f"\n## {pattern}: {int(truth):,} occurrences (written in {time.perf_counter() - start:.1f} s); "
            f"largest per-node count (their downward_sensitivity) {ds:,.0f}, GS = {gs:,.0f}, "
            f"epsilon {eps:g}, beta {beta:g}, -p {args.processes}"
        )
        k = int(math.log(gs, base))
        k = k + 1 if k <= 1 else k
        taus = {i: base**i for i in range(1, k + 1)}
        print(
            f"their grid: tau_i = {base:g}^i, i = 1..{k}; candidate i = Q(I, tau_i) + Lap(tau_i*{k}/eps) "
            f"- tau_i*{k}/eps*ln({k}/beta)"
        )
        runs: list[Run] = []
        for r in range(args.runs):
            seed = args.seed + r
            log = work / f"{pattern}_run{r}.jsonl"
            log.unlink(missing_ok=True)
            command = [
                sys.executable,
                str(runner),
                str(seed),
                str(script),
                "-I",
                str(data),
                "-e",
                repr(eps),
                "-b",
                repr(beta),
                "-G",
                repr(gs),
                "-p",
                str(args.processes),
            ]
            env = {"PYTHONPATH": str(work / "standin"), "R2T_STANDIN_LOG": str(log), "PATH": "/usr/bin:/bin"}
            if args.solver:
                env["R2T_STANDIN_SOLVER"] = args.solver
            start = time.perf_counter()
            # Own session, so that a timeout ends R2T.py's worker and Manager processes too.
            process = subprocess.Popen(
                command,
                cwd=work / "Code",
                env=env,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
                start_new_session=True,
            )
            try:
                stdout, stderr = process.communicate(timeout=args.timeout)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
                process.communicate()
                print(f"run {r}: no result within {args.timeout:g} s (LPs solved: {solved(log)}); stopping")
                break
            wall = time.perf_counter() - start
            if process.returncode != 0:
                print(f"run {r}: R2T.py exited with {process.returncode}\n{stdout}\n{stderr}")
                break
            query, released, their_time = parse_output(stdout)
            lp_values = {}
            for line in log.read_text().splitlines() if log.exists() else []:
                record = json.loads(line)
                if record["status"] != "HighsModelStatus.kOptimal":
                    print(f"run {r}: LP at tau {record['rhs_max']} ended with {record['status']}")
                lp_values[record["rhs_max"]] = record["objective"]
            runs.append(Run(seed, query, released, their_time, wall, lp_values))
            print(
                f"run {r} (seed {seed}): released {released:,.1f}; their Time {their_time:.2f} s; "
                f"wall {wall:.2f} s; LPs: {solved(log)}",
                flush=True,
            )
        if not runs:
            continue
        if any(run.truth != truth for run in runs):
            print(f"their Query Result differs from the count here: {[run.truth for run in runs]}")
        # Rebuild every candidate from the formulas read in R2T.py and check the release.
        q = {}
        for i, tau in taus.items():
            if tau >= ds:
                q[i] = truth
            else:
                near = [v for t, v in runs[0].lp_values.items() if math.isclose(t, tau, rel_tol=1e-12)]
                q[i] = near[0] if near else float("nan")
        print(
            "\n| i | tau_i | Q(I, tau_i) | noise scale tau_i*k/eps | shift tau_i*k/eps*ln(k/beta) "
            "| Q - shift |"
        )
        print("| --- | --- | --- | --- | --- | --- |")
        for i, tau in taus.items():
            scale, shift = tau * k / eps, tau * k / eps * math.log(k / beta)
            note = " (tau >= their DS: real count, no LP)" if tau >= ds else ""
            print(
                f"| {i} | {tau:,.2f} | {q[i]:,.2f}{note} | {scale:,.1f} | {shift:,.1f} | "
                f"{q[i] - shift:,.1f} |"
            )
        print(
            "\n| run | seed | released | rel. error | their Time s | wall s | rebuilt release | winning i "
            "| same | candidates (i: value) |"
        )
        print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
        for r, run in enumerate(runs):
            noise = their_noise(run.seed, k)
            cand = {
                i: q[i] + noise[i] * tau * k / eps - tau * k / eps * math.log(k / beta)
                for i, tau in taus.items()
            }
            positive = {i: v for i, v in cand.items() if v > 0}
            win = max(positive, key=lambda i: positive[i]) if positive else 1
            rebuilt = cand[win]
            unmatched = [
                t for t in run.lp_values if not any(math.isclose(t, u, rel_tol=1e-12) for u in taus.values())
            ]
            if unmatched or any(
                not math.isclose(v, q[i], rel_tol=1e-9)
                for t, v in run.lp_values.items()
                for i, u in taus.items()
                if math.isclose(t, u, rel_tol=1e-12)
            ):
                print(f"run {r}: LP values differ from run 0's: {run.lp_values}")
            shown = ", ".join(f"{i}: {v:,.0f}" for i, v in sorted(cand.items()))
            print(
                f"| {r} | {run.seed} | {run.released:,.2f} | {abs(run.released - truth) / truth:.4%} | "
                f"{run.their_seconds:.2f} | {run.wall_seconds:.2f} | {rebuilt:,.2f} | {win} | "
                f"{'yes' if math.isclose(rebuilt, run.released, rel_tol=1e-9) else 'NO'} | {shown} |"
            )
        error = trimmed_relative_error(np.array([run.released for run in runs]), truth)
        per_run = float(np.mean([run.their_seconds for run in runs]))
        per_run_wall = float(np.mean([run.wall_seconds for run in runs]))
        summary.append((pattern, truth, len(runs), error, per_run, per_run_wall))
        print(
            f"\n{pattern}: truth {truth:,.0f}; {len(runs)} runs; trimmed mean relative error {error:.4%}; "
            f"their Time {per_run:.2f} s/run; wall {per_run_wall:.2f} s/run"
        )
    print("\n| pattern | truth | runs | trimmed mean relative error | their Time s/run | wall s/run |")
    print("| --- | --- | --- | --- | --- | --- |")
    for pattern, truth, n_runs, error, per_run, per_run_wall in summary:
        print(f"| {pattern} | {truth:,.0f} | {n_runs} | {error:.2%} | {per_run:.2f} | {per_run_wall:.2f} |")


if __name__ == "__main__":
    main()
