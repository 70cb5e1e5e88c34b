"""Leakage coefficients of the Gaussian correlation model (seed 001, section 5) at scale.

Two parts, each printed as a table:

* **ego-Facebook** (SNAP, 4039 nodes, 88234 edges; seed section 6.2), prior ``tau I`` for tau in
  {0.01, 0.1, 1, 10}: wall time of all ``n`` weak-adversary coefficients by the fast method
  (``leakage()``: sparse factorisation + selected inversion; best of ``--repeat`` runs), of the certified
  maximum (``certify_max_leakage()``, with the number of nodes it had to evaluate), and of Algorithm 1
  (``algorithm1_leakage()``, dense ``O(n^3)``). Algorithm 1's arithmetic does not depend on tau, so it is
  run once, at tau = 1, and that time stands for every row; its coefficients are compared with the fast
  ones there. With ``--quick`` it is *not* run on the full graph: it is timed on random networks of 250 and
  500 nodes and extrapolated to 4039 nodes by the ``n^3`` law of theorem 5.3 (marked "extrapolated").
* **random networks** built as in section 6.1 (``n d / 2`` distinct upper-triangle entries of ``W`` set to
  1, average degree ``d = 10``; :func:`kakeibo.correlated.repro.random_network`) with 10^5 and 10^6 nodes
  (10^4 and 10^5 with ``--quick``): wall time of building the model and of the certified maximum, the
  number of nodes evaluated exactly, and the degree of the maximising node against the largest degree.
* **DP SQL on a correlated table**: 10^6 rows (10^5 with ``--quick``) of the 4039 ego-Facebook users in
  DuckDB, ``SELECT COUNT(*), SUM(amount)`` at eps = 1, side by side: the raw query, kakeibo on the table
  declared independent, and kakeibo with the graph declared in the catalog (tau 1 and 10) -- cold (catalog
  load, edge file parse, certified ``l*``) and warm (graph cached) -- with the 95% error of the count.

    .venv/bin/python benchmarks/bench_correlated.py [--quick] [--facebook PATH] [--repeat 3] [--seed 2015]
"""

from __future__ import annotations

import argparse
import resource
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

import kakeibo
from kakeibo.backends import DuckDBBackend
from kakeibo.correlated.gaussian import GaussianCorrelationModel
from kakeibo.correlated.repro import facebook_edges, random_network

TAUS = (0.01, 0.1, 1.0, 10.0)
DEGREE = 10.0


def timed(work: Callable[[], Any]) -> tuple[float, Any]:
    start = time.perf_counter()
    result = work()
    return time.perf_counter() - start, result


def best_of(repeat: int, work: Callable[[], Any]) -> tuple[float, Any]:
    runs = [timed(work) for _ in range(repeat)]
    return min(seconds for seconds, _ in runs), runs[-1][1]


def algorithm1_seconds(edges: np.ndarray, n: int, quick: bool, seed: int) -> tuple[float, str, float | None]:
    """(seconds, how it was obtained, max relative difference to the fast method or None)."""
    if not quick:
        model = GaussianCorrelationModel.from_edges(edges, n=n, tau=1.0)
        seconds, slow = timed(model.algorithm1_leakage)
        fast = model.leakage()
        return seconds, "measured at tau=1", float(np.max(np.abs(slow - fast) / fast))
    sizes = (250, 500)
    rng = np.random.default_rng(seed)
    per_cube = []
    for size in sizes:
        small = GaussianCorrelationModel.from_edges(random_network(size, DEGREE, rng), n=size, tau=1.0)
        seconds, _ = timed(small.algorithm1_leakage)
        per_cube.append(seconds / size**3)
    return float(np.mean(per_cube)) * n**3, f"extrapolated (n^3) from n={sizes}", None


def facebook_table(path: Path | None, quick: bool, repeat: int, seed: int) -> None:
    edges = facebook_edges() if path is None else np.loadtxt(path, dtype=np.int64)
    n = int(edges.max()) + 1
    degrees = np.bincount(edges.ravel(), minlength=n)
    alg1, how, difference = algorithm1_seconds(edges, n, quick, seed)
    print(
        f"ego-Facebook: {n} nodes, {len(edges)} edges, max degree {degrees.max()} (node {degrees.argmax()})"
    )
    print(f"Algorithm 1 (all n coefficients): {alg1:.1f} s, {how}", end="")
    print(f"; max relative difference to the fast method {difference:.1e}" if difference is not None else "")
    header = f"{'tau':>6} {'fast all-n s':>12} {'certify s':>10} {'evaluated':>9} {'max l':>14} {'node':>5}"
    print(header + f" {'Alg. 1 s':>9} {'speed-up':>9}")
    for tau in TAUS:
        model = GaussianCorrelationModel.from_edges(edges, n=n, tau=tau)
        fast_s, values = best_of(repeat, model.leakage)
        certify_s, best = best_of(repeat, model.certify_max_leakage)
        print(
            f"{tau:>6g} {fast_s:>12.3f} {certify_s:>10.3f} {best.evaluated:>9} {best.upper:>14.6f} "
            f"{int(np.argmax(values)):>5} {alg1:>9.1f} {alg1 / fast_s:>9.0f}"
        )


def synthetic_table(sizes: tuple[int, ...], seed: int) -> None:
    print(f"\nrandom networks (section 6.1), average degree {DEGREE:g}: certified maximum")
    print(
        f"{'n':>8} {'tau':>6} {'generate s':>10} {'build s':>8} {'certify s':>10} {'evaluated':>9} "
        f"{'max l':>14} {'deg(argmax)':>11} {'max deg':>7} {'peak RSS GB':>11}"
    )
    for n in sizes:
        generate_s, edges = timed(lambda n=n: random_network(n, DEGREE, np.random.default_rng(seed)))
        for tau in TAUS:
            build_s, model = timed(
                lambda tau=tau, edges=edges, n=n: GaussianCorrelationModel.from_edges(edges, n=n, tau=tau)
            )
            certify_s, best = timed(model.certify_max_leakage)
            degrees = np.diff(model.adjacency.indptr)
            rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20
            cells = [
                f"{n:>8}",
                f"{tau:>6g}",
                f"{generate_s:>10.2f}",
                f"{build_s:>8.2f}",
                f"{certify_s:>10.2f}",
            ]
            cells += [f"{best.evaluated:>9}", f"{best.upper:>14.6f}", f"{degrees[best.node]:>11}"]
            print(" ".join([*cells, f"{degrees.max():>7}", f"{rss:>11.2f}"]))


CATALOG = """
[tables.visits]
privacy_unit = "user_id"
max_rows_per_partition = 5
[tables.visits.columns]
user_id = {{ type = "int" }}
amount = {{ type = "float", lower = 0, upper = 100 }}
{correlation}
"""
QUERY = "SELECT COUNT(*) AS n, SUM(amount) AS total FROM visits"


def sql_table(rows: int, repeat: int, seed: int) -> None:
    print(f"\nDP SQL on {rows} rows of the 4039 ego-Facebook users (DuckDB, eps = 1): {QUERY}")
    print(f"{'catalog':<26} {'cold s':>8} {'warm s':>8} {'l*':>10} {'count 95% error':>16}")
    rng = np.random.default_rng(seed)
    edges = facebook_edges()
    data = pa.table({"user_id": rng.integers(0, 4039, rows), "amount": rng.uniform(0, 120, rows)})
    db = DuckDBBackend()
    db.load_table("visits", data)
    raw, _ = best_of(repeat, lambda: db.execute(QUERY))
    print(f"{'raw DuckDB (no privacy)':<26} {'':>8} {raw:>8.3f}")
    with tempfile.TemporaryDirectory() as folder:
        np.savetxt(Path(folder) / "friends.txt", edges, fmt="%d")
        for tau in (None, 1.0, 10.0):
            section = f'[tables.visits.correlation]\nedges = "friends.txt"\ntau = {tau}'
            declared = "" if tau is None else section
            catalog = Path(folder) / f"catalog_{tau}.toml"
            catalog.write_text(CATALOG.format(correlation=declared))

            def answer(catalog: Path = catalog) -> kakeibo.sql.NoisePlan:
                session = kakeibo.connect(db, catalog=catalog, ledger=":memory:", budget=10)
                session.sql(QUERY, epsilon=1)
                return session.plan(QUERY, epsilon=1)

            cold, plan = timed(answer)
            warm, _ = best_of(repeat, answer)
            leakage = f"{plan.correlation.max_leakage:>10.4g}" if plan.correlation else f"{'-':>10}"
            error = plan.statistic("rows").mechanism.error_bound(0.05)
            name = "independent" if tau is None else f"correlated, tau={tau:g}"
            print(f"{name:<26} {cold:>8.3f} {warm:>8.3f} {leakage} {error:>16.1f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--quick", action="store_true", help="smoke run: small networks, Algorithm 1 extrapolated"
    )
    parser.add_argument(
        "--facebook", type=Path, default=None, help="an edge list 'u v' per line (default: the bundled graph)"
    )
    parser.add_argument("--repeat", type=int, default=3, help="timing runs per Facebook row (best is shown)")
    parser.add_argument("--seed", type=int, default=2015)
    args = parser.parse_args()
    facebook_table(args.facebook, args.quick, args.repeat, args.seed)
    synthetic_table((10_000, 100_000) if args.quick else (100_000, 1_000_000), args.seed)
    sql_table(100_000 if args.quick else 1_000_000, args.repeat, args.seed)


if __name__ == "__main__":
    main()
