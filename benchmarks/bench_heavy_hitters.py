"""Local-DP heavy hitters side by side (issue 21): PEM, TreeHist, succinct histogram, Bitstogram,
PrivateExpanderSketch and Hashtogram.

Each client's rank follows Zipf(1.1) over ``min(10^6, 2^bits / 2)`` ranks and every rank is mapped to its
own random ``bits``-bit key (distinct keys), for ``|D| = 2^20`` and ``2^32``. Every heavy-hitter protocol in
``kakeibo.ldp`` runs on the same clients with k = 10 (library defaults otherwise: PEM and TreeHist over
OLH, PEM with step 4; Bitstogram with 1024 buckets; SuccinctHistogram with 16 blocks;
PrivateExpanderSketch with 64 buckets, 8-bit symbols, 2 D chunks, 1 link bit; the last three count their
candidates with a Hashtogram of 1024 buckets and 16 repetitions on half of the clients). Hashtogram is a
frequency oracle, not a heavy-hitter finder: it runs on all clients (1024 buckets, 16 repetitions) and is
given the true top-k keys as candidates, so only its estimation error is comparable.

Per (protocol, n, |D|, epsilon): keys returned, precision and recall against the true top-k, estimation
error over the true top-k keys that were returned (RMSE of estimated minus true count, and the RMS of the
relative error), wall time of all clients' randomization and of the server's identification, the server's
peak memory (tracemalloc peak of the allocations made inside identify, measured in a second identify on
the same reports, so the timing runs without tracing), and bits per report: the information a client
sends (its group's id, ``ceil(log2 groups)`` bits, plus its oracle's documented ``report_bits``, averaged
over the clients' groups) and the wire size of the numpy arrays (``nbytes``; the group id is not in them).

Exponent fit: at |D| = 2^32, for n in {10^5, 3x10^5, 10^6, 3x10^6} (and 10^7 with ``--large``) and each
fit epsilon, ``--runs`` independent runs per protocol; the frequency error is the RMS over runs and over
the true top-10 keys found of (estimated - true count), divided by n, and ``log(error) ~ a log(n) + b`` is
fitted by least squares (a = -1/2 is the rate of the lower bound ``sqrt(log|D| / n) / epsilon``). Also
the detection threshold: the smallest true count, over n, among the top-10 keys found in every run.

With 1024 buckets the counting Hashtograms carry a bias that does not shrink relative to n (a key's
bucket also holds other keys' clients, of order n/1024 in every repetition, so the median keeps part of
it); ``--count-buckets sqrt`` takes the least power of two at least sqrt(n) instead, as Hashtogram's
docstring prescribes for its optimal error.

Clients use the secure randomness source unless ``--seed`` is given (then seeded generators, for a
reproducible table). Before timing, every protocol runs once on 20,000 clients (imports, caches).

    .venv/bin/python benchmarks/bench_heavy_hitters.py --seed 1
    .venv/bin/python benchmarks/bench_heavy_hitters.py --seed 1 --large
    .venv/bin/python benchmarks/bench_heavy_hitters.py --seed 1 --large --no-table --count-buckets sqrt \\
        --protocols SuccinctHistogram Bitstogram PrivateExpanderSketch Hashtogram

The issue-4 table (PEM and TreeHist at 10^6, eps 1, 2, 4, k 10 and 20, secure randomness):

    .venv/bin/python benchmarks/bench_heavy_hitters.py --ns 1000000 --bits 32 --epsilons 1 2 4 \\
        --ks 10 20 --protocols PEM TreeHist --no-fit
"""

from __future__ import annotations

import argparse
import math
import time
import tracemalloc
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from kakeibo.ldp import (
    PEM,
    Bitstogram,
    HadamardResponse,
    Hashtogram,
    PrivateExpanderSketch,
    SuccinctHistogram,
    TreeHist,
)
from kakeibo.ldp.reports import Reports

RANKS = 1_000_000
PROTOCOLS = ("PEM", "TreeHist", "SuccinctHistogram", "Bitstogram", "PrivateExpanderSketch", "Hashtogram")
NS = (100_000, 1_000_000)
FIT_NS = (100_000, 300_000, 1_000_000, 3_000_000)
LARGE_N = 10_000_000
WARM_N = 20_000

Finder = PEM | TreeHist | Bitstogram | SuccinctHistogram | PrivateExpanderSketch
Protocol = Finder | Hashtogram


def zipf_keys(n: int, seed: int, bits: int = 32) -> np.ndarray:
    """``n`` clients: Zipf(1.1) ranks truncated at ``min(RANKS, 2^bits / 2)``, each rank its own random
    ``bits``-bit key."""
    rng = np.random.default_rng(seed)
    ranks = min(RANKS, 2**bits // 2)
    shares = np.arange(1, ranks + 1, dtype=np.float64) ** -1.1
    rank = rng.choice(ranks, size=n, p=shares / shares.sum())
    return np.asarray(rng.choice(2**bits, size=ranks, replace=False)[rank], dtype=np.int64)


def true_top(keys: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """The ``k`` most frequent keys and their counts."""
    distinct, counts = np.unique(keys, return_counts=True)
    order = np.argsort(-counts, kind="stable")[:k]
    return distinct[order], counts[order]


def count_buckets(spec: str, n: int) -> int:
    """Buckets of the counting Hashtograms: a power of two, or ``sqrt``: the least power of two at least
    ``sqrt(n)`` (Hashtogram's docstring: ``T ~ sqrt(n)`` for the optimal error)."""
    if spec == "sqrt":
        return 1 << max(1, math.ceil(math.log2(math.sqrt(n))))
    return int(spec)


def make(name: str, epsilon: float, bits: int, k: int, buckets: int = 1024) -> Protocol:
    """Library defaults, except ``buckets`` for the Hashtogram that counts (1024 is the default)."""
    if name == "PEM":
        return PEM(epsilon=epsilon, bits=bits, k=k)
    if name == "TreeHist":
        return TreeHist(epsilon=epsilon, bits=bits, k=k)
    if name == "SuccinctHistogram":
        return SuccinctHistogram(epsilon=epsilon, bits=bits, k=k, count_buckets=buckets)
    if name == "Bitstogram":
        return Bitstogram(epsilon=epsilon, bits=bits, k=k, count_buckets=buckets)
    if name == "PrivateExpanderSketch":
        return PrivateExpanderSketch(epsilon=epsilon, bits=bits, k=k, count_buckets=buckets)
    if name == "Hashtogram":
        return Hashtogram(epsilon=epsilon, bits=bits, buckets=buckets, repetitions=16)
    raise ValueError(f"unknown protocol {name!r}")


def id_bits(groups: int) -> int:
    return max(0, math.ceil(math.log2(groups)))


def info_bits(proto: Protocol) -> float:
    """Bits a client sends, averaged over the clients: its group's id and its oracle's ``report_bits``."""
    if isinstance(proto, Hashtogram):
        return float(proto.report_bits)
    if isinstance(proto, PEM | TreeHist):  # groups drawn uniformly
        return id_bits(proto.groups) + float(np.mean([oracle.report_bits for oracle in proto.oracles]))
    if isinstance(proto, Bitstogram):  # half in the bit groups (Hadamard over 2T items), half counted
        bit_group = HadamardResponse(epsilon=proto.epsilon, domain_size=2 * proto.buckets).report_bits
        return id_bits(proto.groups) + (bit_group + proto.count_oracle.report_bits) / 2
    if isinstance(proto, PrivateExpanderSketch):  # half in the M chunk groups (Hadamard), half counted
        return id_bits(proto.groups) + (proto.report_bits + proto.count_oracle.report_bits) / 2
    # SuccinctHistogram: half sketch (coordinate and bit), half counted; one bit says which half
    return 1 + (proto.report_bits + proto.count_oracle.report_bits) / 2


def wire_bits(batches: Sequence[Reports], n: int) -> float:
    """Bits of the report arrays as numpy holds them, per client."""
    return 8 * sum(array.nbytes for batch in batches for array in batch.arrays.values()) / n


@dataclass
class Outcome:
    """One run of one protocol on one population."""

    protocol: str
    found: int | None  # None: a frequency oracle given the true top-k as candidates
    hits: int
    found_keys: np.ndarray  # the true top-k keys returned (all of them for the oracle)
    errors: np.ndarray  # estimated - true count of each of found_keys
    true_counts: np.ndarray
    client_s: float = 0.0
    server_s: float = 0.0
    server_mb: float = math.nan
    bits: float = math.nan
    wire: float = math.nan


def run_once(
    name: str,
    keys: np.ndarray,
    top: np.ndarray,
    top_counts: np.ndarray,
    epsilon: float,
    bits: int,
    rng: np.random.Generator | None,
    measure_memory: bool = True,
    buckets: int = 1024,
) -> Outcome:
    proto = make(name, epsilon, bits, top.size, buckets)
    start = time.perf_counter()
    reports = proto.randomize(keys, rng=rng)
    client = time.perf_counter() - start
    batches = [reports] if isinstance(reports, Reports) else reports

    def serve() -> tuple[np.ndarray, np.ndarray]:
        if isinstance(proto, Hashtogram):
            assert isinstance(reports, Reports)
            return top, proto.estimate(reports, top).counts
        assert not isinstance(reports, Reports)
        found = proto.estimate(reports)
        return found.values, found.counts

    start = time.perf_counter()
    values, counts = serve()
    server = time.perf_counter() - start
    peak = math.nan
    if measure_memory:
        tracemalloc.start()
        again, _ = serve()
        peak = tracemalloc.get_traced_memory()[1] / 2**20
        tracemalloc.stop()
        assert np.array_equal(again, values), "identify is deterministic given the reports"
    where = {key: i for i, key in enumerate(top.tolist())}
    hit = np.array([v in where for v in values.tolist()], dtype=bool)
    index = np.array([where[v] for v in values[hit].tolist()], dtype=np.int64)
    return Outcome(
        protocol=name,
        found=None if isinstance(proto, Hashtogram) else int(values.size),
        hits=int(hit.sum()),
        found_keys=top[index],
        errors=counts[hit] - top_counts[index],
        true_counts=top_counts[index],
        client_s=client,
        server_s=server,
        server_mb=peak,
        bits=info_bits(proto),
        wire=wire_bits(batches, keys.size),
    )


def warm_up(names: Sequence[str], bits: int, epsilon: float, seed: int) -> None:
    """One small run of each protocol: the first identify imports scipy's optimizers, among others."""
    keys = zipf_keys(WARM_N, seed, bits)
    top, counts = true_top(keys, 10)
    for name in names:
        run_once(name, keys, top, counts, epsilon, bits, np.random.default_rng(0), measure_memory=False)


def fmt(x: float, digits: int = 2) -> str:
    return "-" if math.isnan(x) else f"{x:.{digits}f}"


def rms(x: np.ndarray) -> float:
    return float(np.sqrt(np.mean(np.square(x)))) if x.size else math.nan


def table_row(out: Outcome, n: int, bits: int, epsilon: float, k: int) -> str:
    if out.found is None:
        found, precision, recall = "(top-k given)", "-", "-"
    else:
        found = str(out.found)
        precision = f"{out.hits / out.found:.2f}" if out.found else "-"
        recall = f"{out.hits / k:.2f}"
    rel = rms(out.errors / out.true_counts) if out.errors.size else math.nan
    return (
        f"| {out.protocol} | {n:,} | 2^{bits} | {epsilon:g} | {k} | {found} | {precision} | {recall} | "
        f"{fmt(rms(out.errors), 0)} | {fmt(rel, 3)} | {out.client_s:.2f} | {out.server_s:.2f} | "
        f"{fmt(out.server_mb, 0)} | {out.bits:.1f} | {out.wire:.0f} |"
    )


TABLE_HEAD = (
    "| protocol | n | \\|D\\| | eps | k | found | precision | recall | RMSE | rel. RMSE | client s "
    "| server s | server MB | bits/report | wire bits |\n"
    "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"
)


def side_by_side(args: argparse.Namespace, ns: Sequence[int]) -> None:
    print(
        f"\n### Side by side (Zipf(1.1), population seed {args.population_seed}, client seed {args.seed}, "
        f"counting Hashtograms with {args.count_buckets} buckets)\n"
    )
    print(TABLE_HEAD)
    rng = None if args.seed is None else np.random.default_rng(args.seed)
    seconds: dict[tuple[str, int, float, int], tuple[int, float]] = {}
    for bits in args.bits:
        for epsilon in args.epsilons:
            for k in args.ks:
                for n in ns:
                    keys = zipf_keys(n, args.population_seed, bits)
                    top, counts = true_top(keys, k)
                    for name in args.protocols:
                        known = seconds.get((name, bits, epsilon, k))
                        if known is not None:  # linear in n, the traced identify included
                            guess = known[1] * n / known[0]
                            if guess > args.budget:
                                print(
                                    f"| {name} | {n:,} | 2^{bits} | {epsilon:g} | {k} | skipped: about "
                                    f"{guess:.0f} s expected from n = {known[0]:,} |" + " |" * 9
                                )
                                continue
                        buckets = count_buckets(args.count_buckets, n)
                        out = run_once(name, keys, top, counts, epsilon, bits, rng, True, buckets)
                        seconds[(name, bits, epsilon, k)] = (n, out.client_s + 2 * out.server_s)
                        print(table_row(out, n, bits, epsilon, k), flush=True)


@dataclass
class FitPoint:
    n: int
    errors: list[np.ndarray] = field(default_factory=list)
    found_sets: list[set[int]] = field(default_factory=list)
    runs_with_none: int = 0


def fit_line(ns: Sequence[int], values: Sequence[float]) -> tuple[float, float]:
    """Slope of log(value) on log(n) by least squares, and its standard error (nan below 3 points)."""
    x, y = np.log(np.asarray(ns, dtype=float)), np.log(np.asarray(values, dtype=float))
    if x.size < 2:
        return math.nan, math.nan
    slope, intercept = np.polyfit(x, y, 1)
    if x.size < 3:
        return float(slope), math.nan
    residual = y - (slope * x + intercept)
    se = math.sqrt(float(residual @ residual) / (x.size - 2) / float(((x - x.mean()) ** 2).sum()))
    return float(slope), se


def exponent_fit(args: argparse.Namespace, ns: Sequence[int]) -> None:
    bits, k = 32, 10
    base = 0 if args.seed is None else args.seed
    print(
        f"\n### Exponent fit: |D| = 2^{bits}, k = {k}, {args.runs} runs per point "
        f"({'seeded from ' + str(base) if args.seed is not None else 'secure randomness'}), "
        f"counting Hashtograms with {args.count_buckets} buckets\n"
    )
    for epsilon in args.fit_epsilons:
        points: dict[str, list[FitPoint]] = {name: [] for name in args.protocols}
        truth: dict[int, tuple[np.ndarray, np.ndarray]] = {}
        for n in ns:
            keys = zipf_keys(n, args.population_seed, bits)
            top, counts = true_top(keys, k)
            truth[n] = (top, counts)
            for index, name in enumerate(args.protocols):
                point = FitPoint(n)
                start = time.perf_counter()
                for run in range(args.runs):
                    rng = None if args.seed is None else np.random.default_rng([base, n, run, index])
                    buckets = count_buckets(args.count_buckets, n)
                    out = run_once(name, keys, top, counts, epsilon, bits, rng, False, buckets)
                    point.errors.append(out.errors)
                    point.found_sets.append(set(out.found_keys.tolist()))
                    point.runs_with_none += out.hits == 0
                points[name].append(point)
                took = time.perf_counter() - start
                print(f"  eps {epsilon:g} n {n:,} {name}: {args.runs} runs in {took:.1f} s", flush=True)
        print(f"\nepsilon = {epsilon:g}: frequency error = RMS(estimated - true count) / n over the true")
        print("top-10 keys found in all runs (keys found of 10 x runs in brackets); detection threshold =")
        print(
            "smallest true count / n among the top-10 keys found in every run ('<=': the 10th key is one of"
        )
        print("them, so the threshold is at most its share, not fitted; '-': no key found in every run).\n")
        print("| protocol | quantity | " + " | ".join(f"n = {n:,}" for n in ns) + " | exponent |")
        print("|---|---|" + "---|" * len(ns) + "---|")
        for name in args.protocols:
            errs, thresholds = [], []
            cells_e, cells_t = [], []
            for point in points[name]:
                pooled = np.concatenate(point.errors)
                err = rms(pooled) / point.n
                cells_e.append(f"{err:.2e} ({pooled.size})" if pooled.size else "none found")
                if pooled.size:
                    errs.append((point.n, err))
                top, counts = truth[point.n]
                always = set.intersection(*point.found_sets)
                if name == "Hashtogram":  # given the true top-k: nothing to detect
                    cells_t.append("n/a")
                    continue
                if not always:
                    cells_t.append("-")
                    continue
                smallest = min(
                    int(c) for key, c in zip(top.tolist(), counts.tolist(), strict=True) if key in always
                )
                share = smallest / point.n
                censored = smallest == int(counts[-1])  # the k-th key: the threshold may be lower
                cells_t.append(("<= " if censored else "") + f"{share:.4f}")
                if not censored:
                    thresholds.append((point.n, share))
            slope, se = fit_line([n for n, _ in errs], [e for _, e in errs])
            exponent = f"{slope:.3f} +- {se:.3f}" if not math.isnan(se) else fmt(slope, 3)
            print(f"| {name} | frequency error | " + " | ".join(cells_e) + f" | {exponent} |")
            t_slope, t_se = fit_line([n for n, _ in thresholds], [t for _, t in thresholds])
            t_exp = "n/a (< 3 uncensored)" if math.isnan(t_se) else f"{t_slope:.3f} +- {t_se:.3f}"
            print(f"| {name} | detection threshold | " + " | ".join(cells_t) + f" | {t_exp} |")
        bound = [math.sqrt(bits * math.log(2) / n) / epsilon for n in ns]
        print(
            "| (lower bound rate) | sqrt(ln\\|D\\| / n) / eps | "
            + " | ".join(f"{b:.2e}" for b in bound)
            + " | -0.5 |"
        )


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--ns", type=int, nargs="+", default=list(NS), help="client counts of the table")
    parser.add_argument("--large", action="store_true", help=f"add n = {LARGE_N:,} to the table and the fit")
    parser.add_argument("--bits", type=int, nargs="+", default=[20, 32], help="key bits, |D| = 2^bits")
    parser.add_argument("--epsilons", type=float, nargs="+", default=[4.0, 2.0])
    parser.add_argument("--ks", type=int, nargs="+", default=[10])
    parser.add_argument("--protocols", nargs="+", choices=PROTOCOLS, default=list(PROTOCOLS))
    parser.add_argument("--seed", type=int, default=None, help="seed the clients' randomness")
    parser.add_argument("--population-seed", type=int, default=2017, help="seed of the Zipf population")
    parser.add_argument("--budget", type=float, default=600, help="skip a row expected to take longer (s)")
    parser.add_argument("--no-table", action="store_true", help="only the exponent fit")
    parser.add_argument("--no-fit", action="store_true", help="only the side-by-side table")
    parser.add_argument("--fit-epsilons", type=float, nargs="+", default=[4.0, 2.0])
    parser.add_argument("--runs", type=int, default=3, help="runs per point of the exponent fit")
    parser.add_argument(
        "--count-buckets",
        default="1024",
        help="buckets of Hashtogram and of the Hashtograms counting for the protocols that use one: "
        "a power of two, or 'sqrt' (the least power of two >= sqrt(n))",
    )
    args = parser.parse_args()
    started = time.perf_counter()
    warm_up(args.protocols, 32, 4.0, args.population_seed)
    if not args.no_table:
        side_by_side(args, sorted(set(args.ns) | ({LARGE_N} if args.large else set())))
    if not args.no_fit:
        exponent_fit(args, sorted(set(FIT_NS) | ({LARGE_N} if args.large else set())))
    print(f"\ntotal {time.perf_counter() - started:.0f} s")


if __name__ == "__main__":
    main()
