"""Samples per second of kakeibo's exact samplers next to numpy's float sampler and OpenDP, in one run.

Run: ``make bench`` (installs the ``bench`` extra with OpenDP), or
``.venv/bin/python benchmarks/bench_samplers.py [--n 1000000] [--repeats 5]``.

Every row draws ``n`` noise values for an array of ``n`` answers and reports the best of ``repeats``
wall-clock runs. kakeibo rows use the default secure source (ChaCha20 keyed from the OS) unless marked
"seeded". OpenDP rows go through its public Python API (vector domain measurement), which is how a Python
user calls it; they include OpenDP's conversion of the input list.
"""

from __future__ import annotations

import argparse
import platform
import time
from collections.abc import Callable

import numpy as np

from kakeibo.mechanisms import Gaussian, Laplace
from kakeibo.noise import discrete_gaussian, discrete_laplace


def best_rate(draw: Callable[[], object], n: int, repeats: int) -> float:
    """Best samples/second over ``repeats`` runs of ``draw`` (which produces ``n`` samples)."""
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        draw()
        best = min(best, time.perf_counter() - start)
    return n / best


def opendp_rows(n: int, repeats: int) -> list[tuple[str, float]]:
    try:
        import opendp.prelude as dp
    except ImportError:
        return [("opendp (not installed: make bench installs it)", float("nan"))]
    dp.enable_features("contrib")
    ints = [1] * n
    floats = [1.0] * n
    int_l1 = (dp.vector_domain(dp.atom_domain(T=int)), dp.l1_distance(T=int))
    float_l1 = (dp.vector_domain(dp.atom_domain(T=float, nan=False)), dp.l1_distance(T=float))
    int_l2 = (dp.vector_domain(dp.atom_domain(T=int)), dp.l2_distance(T=int))
    float_l2 = (dp.vector_domain(dp.atom_domain(T=float, nan=False)), dp.l2_distance(T=float))
    lap_int = int_l1 >> dp.m.then_laplace(scale=10.0)
    lap_float = float_l1 >> dp.m.then_laplace(scale=10.0)
    gauss_int = int_l2 >> dp.m.then_gaussian(scale=10.0)
    gauss_float = float_l2 >> dp.m.then_gaussian(scale=10.0)
    return [
        ("opendp make_laplace, int vector (discrete Laplace)", best_rate(lambda: lap_int(ints), n, repeats)),
        (
            "opendp make_laplace, float vector (grid Laplace)",
            best_rate(lambda: lap_float(floats), n, repeats),
        ),
        (
            "opendp make_gaussian, int vector (discrete Gaussian)",
            best_rate(lambda: gauss_int(ints), n, repeats),
        ),
        ("opendp make_gaussian, float vector", best_rate(lambda: gauss_float(floats), n, repeats)),
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=1_000_000)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    n, repeats = args.n, args.repeats
    values = np.ones(n)
    numpy_rng = np.random.default_rng(1)
    laplace = Laplace(sensitivity=1, epsilon=0.1)
    gaussian = Gaussian(sensitivity=1, epsilon=1, delta=1e-6)
    rows = [
        ("numpy.random.laplace (float, NOT private: Mironov 2012)", best_rate(
            lambda: values + numpy_rng.laplace(0.0, 10.0, n), n, repeats)),
        ("kakeibo discrete_laplace(scale=10)", best_rate(lambda: discrete_laplace(10, n), n, repeats)),
        ("kakeibo discrete_laplace(scale=10), seeded", best_rate(
            lambda: discrete_laplace(10, n, rng=np.random.default_rng(2)), n, repeats)),
        ("kakeibo discrete_gaussian(sigma2=100)", best_rate(lambda: discrete_gaussian(100, n), n, repeats)),
        ("kakeibo Laplace(eps=0.1).release(array) (grid Laplace)", best_rate(
            lambda: laplace.release(values), n, repeats)),
        ("kakeibo Gaussian(eps=1, delta=1e-6).release(array) (grid)", best_rate(
            lambda: gaussian.release(values), n, repeats)),
    ]  # fmt: skip
    rows += opendp_rows(min(n, 200_000), repeats)
    print(f"# samplers, n={n:,} per call, best of {repeats}; {platform.processor() or platform.machine()}")
    print(f"| {'sampler':<62} | {'samples/s':>14} |")
    print(f"|{'-' * 64}|{'-' * 16}|")
    for name, rate in rows:
        print(f"| {name:<62} | {rate:>14,.0f} |")


if __name__ == "__main__":
    main()
