"""Time two peer local-DP libraries on frequency estimation: pure-ldp 1.2.0 and multi-freq-ldpy 0.2.5.

The peers have heavy, conflicting dependencies, so they live in a venv of their own and this module is run
there as a child process (it imports only numpy and the standard library at top level; each peer is
imported inside the function that uses it)::

    python3 -m venv /tmp/peer-ldp
    /tmp/peer-ldp/bin/pip install pure-ldp==1.2.0 multi-freq-ldpy==0.2.5 numpy 'xxhash<4' \\
        scikit-learn statsmodels
    /tmp/peer-ldp/bin/python benchmarks/ldp_peer_runners.py --library pure-ldp --oracle OLH \\
        --epsilon 1 --domain-size 1024 --n 10000 --seed 0 --out /tmp/peer.json

Extra packages, beyond what the peers declare:

* ``xxhash<4``: both peers hash ``str(value)`` with ``xxhash.xxh32``; xxhash 4 refuses ``str`` ("Strings must
  be encoded before hashing"), so their local hashing fails with the xxhash that pip picks by default.
* ``scikit-learn`` and ``statsmodels``: ``pure_ldp.frequency_oracles/__init__`` imports its RAPPOR server,
  which imports both, but pure-ldp does not declare them, so no pure-ldp oracle can be imported without them.

What is timed, for every (library, oracle): ``perturb_s`` is the client-side perturbation of all users, one
library call per user (the library has no batch client); ``aggregate_s`` is the server side, from the list of
reports to the estimated counts of the whole domain. Converting the input array to Python ints and building
the client/server objects are outside both timers (building pure-ldp's Hadamard response objects draws a
random permutation of the domain, which is cheap).

Estimators: the unbiased, non-post-processed one of each library (no clipping, normalisation or projection),
so that the MSE can be compared with the textbook variance:

* pure-ldp: ``server.estimate_all(range(d), normalization=0)``; its servers estimate counts already.
* multi-freq-ldpy: its ``*_Aggregator_MI`` functions always post-process (``MI`` clips negative estimates to
  0 and renormalises to a distribution) and it has no public raw estimator. ``run_peer`` therefore calls the
  library's own ``*_Aggregator_MI`` (its report counting and its p, q) while the module-level ``MI`` name of
  that oracle's module is temporarily replaced by the same matrix-inversion formula without the clipping
  and renormalisation, ``(count - n q) / (p - q)``, which is the estimated count. The original is restored
  afterwards.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import random
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np

LIBRARIES = ("pure-ldp", "multi-freq-ldpy")
ORACLES = ("GRR", "OUE", "OLH", "HR")
ZIPF_EXPONENT = 1.1


def peak_rss_mb() -> float:
    """Peak resident set size of this process in MB (``VmHWM`` of ``/proc/self/status``), NaN if unknown."""
    try:
        with open("/proc/self/status") as status:
            for line in status:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024.0
    except OSError:
        pass
    return float("nan")


def _reset_peak_rss() -> None:
    """Reset ``VmHWM`` to the current RSS (Linux ``clear_refs`` 5), so the peak is that of the next run only.

    Best effort: where this is not allowed, the peak stays that of the whole process so far.
    """
    with contextlib.suppress(OSError), open("/proc/self/clear_refs", "w") as clear_refs:
        clear_refs.write("5")


def _identity(index: int) -> int:
    """Index mapper for pure-ldp, whose default mapper ``x - 1`` expects values 1..d."""
    return index


def _seed_python_and_numpy(seed: int) -> None:
    """Seed the two global generators the peers draw from: ``random`` and the legacy ``numpy.random``."""
    random.seed(seed)
    np.random.seed(seed % 2**32)


def _seed_numba(seed: int) -> None:
    """Seed numba's own generator, which jitted code uses instead of ``numpy.random``'s global state.

    ``numpy.random.seed`` called from Python does not reach it; it has to be called from jitted code.
    """
    import numba

    def seed_generator(value: int) -> None:
        np.random.seed(value)

    jitted: Callable[[int], None] = numba.njit(seed_generator)
    jitted(seed % 2**32)


def _run_pure_ldp(
    oracle: str, epsilon: float, domain_size: int, users: list[int], seed: int
) -> tuple[float, float, np.ndarray, dict[str, Any]]:
    """Perturb ``users`` and estimate counts with pure-ldp's client/server classes.

    pure-ldp has no seed parameter and draws from the global ``random`` and ``numpy.random`` generators, so
    both are seeded after the import and before the objects are built (the Hadamard response server draws
    its permutation at construction).
    """
    import pure_ldp.frequency_oracles as fo

    _seed_python_and_numpy(seed)

    client: Any
    server: Any
    config: dict[str, Any]
    if oracle == "GRR":
        client = fo.DEClient(epsilon, domain_size, index_mapper=_identity)
        server = fo.DEServer(epsilon, domain_size, index_mapper=_identity)
        config = {"api": "pure_ldp DEClient.privatise / DEServer.aggregate_all + estimate_all"}
    elif oracle == "OUE":
        client = fo.UEClient(epsilon, domain_size, use_oue=True, index_mapper=_identity)
        server = fo.UEServer(epsilon, domain_size, use_oue=True, index_mapper=_identity)
        config = {"api": "pure_ldp UEClient(use_oue=True) / UEServer(use_oue=True)"}
    elif oracle == "OLH":
        # use_olh=True is pure-ldp's OLH setting: g = int(round(e^eps)) + 1 (4 at eps=1, 56 at eps=4), one
        # random xxh32 seed per user; the server checks every domain value against every report (O(n d)).
        client = fo.LHClient(epsilon, domain_size, use_olh=True, index_mapper=_identity)
        server = fo.LHServer(epsilon, domain_size, use_olh=True, index_mapper=_identity)
        config = {"api": "pure_ldp LHClient(use_olh=True) / LHServer(use_olh=True)", "g": server.g}
    elif oracle == "HR":
        # The server draws the random permutation used for eps > 1; the client must be given it.
        server = fo.HadamardResponseServer(epsilon, domain_size, index_mapper=_identity)
        client = fo.HadamardResponseClient(
            epsilon, domain_size, server.get_hash_funcs(), index_mapper=_identity
        )
        variant = "high privacy (eps <= 1)" if epsilon <= 1 else "general (eps > 1)"
        config = {"api": "pure_ldp HadamardResponseClient / HadamardResponseServer", "variant": variant}
    else:
        raise ValueError(f"unknown oracle {oracle!r}")

    start = time.perf_counter()
    reports = [client.privatise(value) for value in users]
    perturb_s = time.perf_counter() - start

    start = time.perf_counter()
    server.aggregate_all(reports)
    counts = server.estimate_all(range(domain_size), suppress_warnings=True, normalization=0)
    aggregate_s = time.perf_counter() - start
    return perturb_s, aggregate_s, np.asarray(counts, dtype=float), config


def _mi_counts(count_report: Any, n: int, p: float, q: float) -> np.ndarray:
    """Matrix inversion without multi-freq-ldpy's clipping and renormalisation: the estimated counts."""
    return (np.asarray(count_report, dtype=float) - n * q) / (p - q)


@contextlib.contextmanager
def _unclipped_mi(module: Any) -> Iterator[None]:
    """Make ``module``'s aggregators use :func:`_mi_counts` instead of its ``MI`` while the block runs.

    ``module`` is one of multi-freq-ldpy's oracle modules, which call ``MI`` through their module globals.
    """
    original = module.MI
    module.MI = _mi_counts
    try:
        yield
    finally:
        module.MI = original


def _run_multi_freq_ldpy(
    oracle: str, epsilon: float, domain_size: int, users: list[int], seed: int
) -> tuple[float, float, np.ndarray, dict[str, Any]]:
    """Perturb ``users`` and estimate counts with multi-freq-ldpy's ``*_Client`` / ``*_Aggregator_MI``.

    Its clients are numba-jitted (GRR, UE; LH calls the jitted GRR client on the hashed value), so one
    client call is made first to compile them outside the timer, and then both numba's generator and the
    global ``numpy.random`` / ``random`` ones are seeded (LH draws its hash seeds from ``numpy.random``).
    """
    from multi_freq_ldpy.pure_frequency_oracles import GRR, LH, UE

    module: Any
    client: Callable[[int], Any]
    aggregate: Callable[[list[Any]], Any]
    config: dict[str, Any]
    if oracle == "GRR":
        module = GRR
        config = {"api": "multi_freq_ldpy GRR_Client / GRR_Aggregator_MI (unclipped MI)"}

        def client(value: int) -> Any:
            return GRR.GRR_Client(value, domain_size, epsilon)

        def aggregate(reports: list[Any]) -> Any:
            return GRR.GRR_Aggregator_MI(reports, domain_size, epsilon)

    elif oracle == "OUE":
        module = UE
        config = {"api": "multi_freq_ldpy UE_Client(optimal=True) / UE_Aggregator_MI (unclipped MI)"}

        def client(value: int) -> Any:
            return UE.UE_Client(value, domain_size, epsilon, True)

        def aggregate(reports: list[Any]) -> Any:
            return UE.UE_Aggregator_MI(reports, epsilon, True)

    elif oracle == "OLH":
        # optimal=True is multi-freq-ldpy's OLH: g = int(round(np.exp(eps))) + 1 (4 at eps=1, 56 at eps=4),
        # computed inside its functions and not exposed, so it is recomputed here only to report it.
        module = LH
        config = {
            "api": "multi_freq_ldpy LH_Client(optimal=True) / LH_Aggregator_MI (unclipped MI)",
            "g": round(math.exp(epsilon)) + 1,
        }

        def client(value: int) -> Any:
            return LH.LH_Client(value, domain_size, epsilon, True)

        def aggregate(reports: list[Any]) -> Any:
            return LH.LH_Aggregator_MI(reports, domain_size, epsilon, True)

    elif oracle == "HR":
        raise NotImplementedError(
            "multi-freq-ldpy 0.2.5 has no Hadamard response oracle (its pure frequency oracles are GRR, "
            "UE/OUE, LH/OLH, HE, SS and the adaptive ADP)"
        )
    else:
        raise ValueError(f"unknown oracle {oracle!r}")

    client(users[0])  # compile the jitted client outside the timer, before seeding
    _seed_python_and_numpy(seed)
    _seed_numba(seed)

    start = time.perf_counter()
    reports = [client(value) for value in users]
    perturb_s = time.perf_counter() - start

    start = time.perf_counter()
    with _unclipped_mi(module):
        counts = aggregate(reports)
    aggregate_s = time.perf_counter() - start
    return perturb_s, aggregate_s, np.asarray(counts, dtype=float), config


def run_peer(
    library: str, oracle: str, *, epsilon: float, domain_size: int, values: np.ndarray, seed: int
) -> dict[str, Any]:
    """Run one peer frequency oracle over ``values`` and time it.

    Args:
        library: ``"pure-ldp"`` or ``"multi-freq-ldpy"``.
        oracle: ``"GRR"``, ``"OUE"``, ``"OLH"`` or ``"HR"`` (Hadamard response; pure-ldp only).
        epsilon: the local privacy parameter.
        domain_size: d; the values are 0..d-1.
        values: one int per user, each user's true value.
        seed: seeds every generator the library draws from: ``random.seed(seed)`` and
            ``numpy.random.seed(seed mod 2**32)`` for both libraries (they take no seed or generator
            argument), and numba's generator for multi-freq-ldpy's jitted clients. pure-ldp's OLH and
            multi-freq-ldpy's OLH draw per-user hash seeds from these generators, so runs are reproducible.

    Returns:
        ``perturb_s`` and ``aggregate_s`` (seconds, see the module docstring), ``counts`` (float array of
        length d, the library's unbiased estimated counts, not frequencies, not post-processed),
        ``peak_rss_mb`` (``VmHWM`` after the run; it is reset to the current RSS at the start where Linux
        allows it, so it covers this run plus what the process already held) and ``config`` (the API used
        and, for OLH, the hash range g).

    Raises:
        NotImplementedError: the library has no such oracle (multi-freq-ldpy and HR).
        ValueError: unknown library or oracle, or values outside 0..d-1.
    """
    if library not in LIBRARIES:
        raise ValueError(f"library must be one of {LIBRARIES}, not {library!r}")
    if oracle not in ORACLES:
        raise ValueError(f"oracle must be one of {ORACLES}, not {oracle!r}")
    if domain_size < 2:
        raise ValueError("domain_size must be at least 2")
    values = np.asarray(values)
    if values.ndim != 1 or values.size == 0 or not np.issubdtype(values.dtype, np.integer):
        raise ValueError("values must be a non-empty 1-d integer array")
    if values.min() < 0 or values.max() >= domain_size:
        raise ValueError(f"values must lie in 0..{domain_size - 1}")
    users = [int(value) for value in values]  # the peers index and hash Python ints

    _reset_peak_rss()
    if library == "pure-ldp":
        perturb_s, aggregate_s, counts, config = _run_pure_ldp(oracle, epsilon, domain_size, users, seed)
    else:
        perturb_s, aggregate_s, counts, config = _run_multi_freq_ldpy(
            oracle, epsilon, domain_size, users, seed
        )
    return {
        "perturb_s": perturb_s,
        "aggregate_s": aggregate_s,
        "counts": counts,
        "peak_rss_mb": peak_rss_mb(),
        "config": config,
    }


def zipf_values(n: int, domain_size: int, seed: int, exponent: float = ZIPF_EXPONENT) -> np.ndarray:
    """``n`` values in 0..d-1 with p_i proportional to (i + 1)^-exponent, by ``default_rng(seed).choice``."""
    weights = np.arange(1, domain_size + 1, dtype=float) ** -exponent
    return np.random.default_rng(seed).choice(domain_size, size=n, p=weights / weights.sum())


def main(argv: Sequence[str] | None = None) -> int:
    """Command line: run one (library, oracle) on Zipf(1.1) data and write the result as JSON."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--library", required=True, choices=LIBRARIES)
    parser.add_argument("--oracle", required=True, choices=ORACLES)
    parser.add_argument("--epsilon", required=True, type=float)
    parser.add_argument("--domain-size", required=True, type=int)
    parser.add_argument("--n", required=True, type=int, help="number of users")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", required=True, type=Path, help="JSON file to write")
    args = parser.parse_args(argv)

    values = zipf_values(args.n, args.domain_size, args.seed)
    true_counts = np.bincount(values, minlength=args.domain_size).astype(float)
    try:
        result = run_peer(
            args.library,
            args.oracle,
            epsilon=args.epsilon,
            domain_size=args.domain_size,
            values=values,
            seed=args.seed,
        )
    except NotImplementedError as error:
        print(f"{args.library} {args.oracle}: {error}", file=sys.stderr)
        return 2
    counts = result["counts"]
    record = {
        "library": args.library,
        "oracle": args.oracle,
        "epsilon": args.epsilon,
        "domain_size": args.domain_size,
        "n": args.n,
        "seed": args.seed,
        "zipf_exponent": ZIPF_EXPONENT,
        **result,
        "mse": float(np.mean((counts - true_counts) ** 2)),
        "counts": counts.tolist(),
        "true_counts": true_counts.tolist(),
    }
    args.out.write_text(json.dumps(record))
    return 0


if __name__ == "__main__":
    sys.exit(main())
