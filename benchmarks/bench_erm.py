"""DP empirical risk minimisation on WDBC: kakeibo against diffprivlib and a non-private RBF SVC (issue 6).

Data: WDBC (569 records, 30 attributes min-max normalised to [-1, 1], labels -1/+1; seed 004's
preprocessing, :func:`kakeibo.ml.datasets.load_wdbc`). Protocol: ``KFold(10, shuffle=True,
random_state=seed)`` for 5 seeds; each cell is the test accuracy, mean +- std over the 50 folds, and the
wall time of the 50 fits and predictions.

**Norm-1 preprocessing (both libraries).** Every row is divided by ``sqrt(d)``, the largest norm a point
of ``[-1, 1]^d`` can have: a fixed, per-record map that needs no look at the data, after which every row
has norm at most 1. kakeibo then runs with ``norm_bound=1`` and diffprivlib with ``data_norm=1`` on the
same rows; both fit an intercept (kakeibo's is regularised, see :mod:`kakeibo.ml.erm`).

**Regularisation rule (kakeibo).** ``Lambda = kappa * d' / (n * epsilon)``, ``d'`` = number of
coefficients (attributes + intercept), ``n`` = training records: Chaudhuri et al.'s utility bounds balance
the noise (of norm about ``d' / epsilon`` in the objective) against the regularisation in this way. The
constant ``kappa`` was chosen once, on a different dataset (Ionosphere, same protocol with 2 seeds,
``kappa`` in {0.03, 0.1, 0.3, 1, 3}), never on WDBC: ``kappa = 0.3`` for objective perturbation, ``1``
for output perturbation (whose noise relative to the classifier does not shrink with ``Lambda``, so it
prefers more regularisation). diffprivlib runs with its defaults (``C = 1``) apart from ``epsilon`` and
``data_norm``; its problem is kakeibo's with ``Lambda = 1/(2n)`` (see :func:`diffprivlib_rule`), and one
extra row runs kakeibo on exactly that problem, so that row compares the implementations alone.

diffprivlib 0.6.6 does not import with scikit-learn 1.9, so it runs in a separate interpreter
(``--diffprivlib-python``) as ``bench_erm.py --worker diffprivlib``, a mode that does not import kakeibo
and reads the preprocessed rows from a temporary ``.npz``. Without the option those rows are skipped.

    .venv/bin/python benchmarks/bench_erm.py --diffprivlib-python /tmp/dplvenv/bin/python
"""

from __future__ import annotations

import argparse
import json
import math
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
from sklearn.model_selection import KFold

EPSILONS = (0.5, 1.0, 5.0, 10.0)
N_SEEDS = 5
FOLDS = 10
KAPPA = {"objective": 0.3, "output": 1.0}

#: (accuracies over all folds and seeds, wall time in seconds)
Cell = tuple[list[float], float]
#: ``fit(X_train, y_train, random_state) -> fitted model with .score``
Fitter = Callable[[np.ndarray, np.ndarray, int], Any]


def folds(n: int, seeds: tuple[int, ...]) -> Iterator[tuple[int, int, np.ndarray, np.ndarray]]:
    """``(seed, fold, train, test)`` for every seed's shuffled 10-fold split."""
    for seed in seeds:
        for fold, (train, test) in enumerate(
            KFold(FOLDS, shuffle=True, random_state=seed).split(np.arange(n))
        ):
            yield seed, fold, train, test


def run_cell(X: np.ndarray, y: np.ndarray, seeds: tuple[int, ...], fit: Fitter) -> Cell:
    """Test accuracy of ``fit`` on every fold of every seed (``random_state = 1000 seed + fold``)."""
    start = time.perf_counter()
    scores = [
        float(fit(X[train], y[train], 1000 * seed + fold).score(X[test], y[test]))
        for seed, fold, train, test in folds(len(y), seeds)
    ]
    return scores, time.perf_counter() - start


# -- diffprivlib worker (separate interpreter; must not import kakeibo) --------------------------------------


def diffprivlib_fitter(epsilon: float) -> Fitter:
    import warnings

    from diffprivlib.models import LogisticRegression

    def fit(X_train: np.ndarray, y_train: np.ndarray, state: int) -> Any:
        model = LogisticRegression(epsilon=epsilon, data_norm=1.0, random_state=state)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # convergence warnings of its 100-iteration solver
            return model.fit(X_train, y_train)

    return fit


def diffprivlib_worker(data_path: str, out_path: str) -> None:
    data = np.load(data_path)
    seeds = tuple(int(s) for s in data["seeds"])
    results = {
        repr(float(eps)): run_cell(data["X"], data["y"], seeds, diffprivlib_fitter(float(eps)))
        for eps in data["epsilons"]
    }
    Path(out_path).write_text(json.dumps(results))


def run_diffprivlib(python: str, X: np.ndarray, y: np.ndarray, seeds: tuple[int, ...]) -> dict[float, Cell]:
    with tempfile.TemporaryDirectory() as tmp:
        data, out = Path(tmp) / "wdbc.npz", Path(tmp) / "out.json"
        np.savez(data, X=X, y=y, seeds=np.array(seeds), epsilons=np.array(EPSILONS))
        command = [python, __file__, "--worker", "diffprivlib", "--data", str(data), "--out", str(out)]
        done = subprocess.run(command, capture_output=True, text=True, timeout=3600)
        if done.returncode != 0:
            raise RuntimeError(f"the diffprivlib worker failed:\n{done.stderr[-2000:]}")
        raw = json.loads(out.read_text())
    return {float(eps): (cell[0], cell[1]) for eps, cell in raw.items()}


# -- kakeibo and the non-private reference -----------------------------------------------------------------


def kappa_rule(n: int, n_coefficients: int, epsilon: float, method: str) -> float:
    """The regularisation rule of the module docstring: ``kappa * d' / (n epsilon)``."""
    return KAPPA[method] * n_coefficients / (n * epsilon)


def diffprivlib_rule(n: int, n_coefficients: int, epsilon: float, method: str) -> float:
    """diffprivlib's default problem in kakeibo's terms: ``C = 1`` is ``Lambda = 1/n`` on rows ``[x, 1]``
    of norm up to ``sqrt(2)``, which is ``Lambda = 1/(2n)`` on kakeibo's rows ``[x, 1] / sqrt(2)``."""
    return 1.0 / (2 * n)


Rule = Callable[[int, int, float, str], float]


def kakeibo_fitter(cls: Any, method: str, epsilon: float, rule: Rule) -> Fitter:
    """kakeibo's estimator, its regularisation given by ``rule``."""

    def fit(X_train: np.ndarray, y_train: np.ndarray, state: int) -> Any:
        regularization = rule(X_train.shape[0], X_train.shape[1] + 1, epsilon, method)
        model = cls(  # ledger=False: a benchmark on public data, charged to no one on purpose
            epsilon,
            regularization=regularization,
            method=method,
            classes=(-1, 1),
            ledger=False,
            random_state=state,
        )
        return model.fit(X_train, y_train)

    return fit


def kakeibo_rows(X: np.ndarray, y: np.ndarray, seeds: tuple[int, ...]) -> dict[str, dict[float, Cell]]:
    from kakeibo.ml.erm import DPHuberSVM, DPLogisticRegression

    variants: dict[str, tuple[Any, str, Rule]] = {
        "kakeibo DPLogisticRegression (objective)": (DPLogisticRegression, "objective", kappa_rule),
        "kakeibo DPLogisticRegression (output)": (DPLogisticRegression, "output", kappa_rule),
        "kakeibo DPHuberSVM h=0.5 (objective)": (DPHuberSVM, "objective", kappa_rule),
        "kakeibo DPLogisticRegression (objective, diffprivlib's Lambda)": (
            DPLogisticRegression,
            "objective",
            diffprivlib_rule,
        ),
    }
    return {
        name: {eps: run_cell(X, y, seeds, kakeibo_fitter(cls, method, eps, rule)) for eps in EPSILONS}
        for name, (cls, method, rule) in variants.items()
    }


def svc_cell(X: np.ndarray, y: np.ndarray, C: float, seeds: tuple[int, ...]) -> Cell:
    from sklearn.svm import SVC

    return run_cell(
        X, y, seeds, lambda X_train, y_train, state: SVC(C=C, gamma="scale").fit(X_train, y_train)
    )


def show(cell: Cell) -> str:
    scores, seconds = cell
    return f"{100 * np.mean(scores):5.1f}% +- {100 * np.std(scores):4.1f} ({seconds:5.1f} s)"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--diffprivlib-python", help="interpreter with diffprivlib 0.6.6 installed")
    parser.add_argument("--seeds", type=int, default=N_SEEDS, help="number of CV seeds 0, 1, ... (default 5)")
    parser.add_argument("--worker", choices=["diffprivlib"], help=argparse.SUPPRESS)
    parser.add_argument("--data", help=argparse.SUPPRESS)
    parser.add_argument("--out", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        diffprivlib_worker(args.data, args.out)
        return

    from kakeibo.ml.datasets import load_wdbc

    data = load_wdbc()
    seeds = tuple(range(args.seeds))
    X_unit = data.X / math.sqrt(data.n_features)  # the norm-1 preprocessing (module docstring)
    print(
        f"WDBC: n={len(data.y)}, d={data.n_features}; 10-fold CV x {len(seeds)} seeds; accuracy mean +- std"
    )
    rows = kakeibo_rows(X_unit, data.y, seeds)
    if args.diffprivlib_python:
        rows["diffprivlib 0.6.6 LogisticRegression"] = run_diffprivlib(
            args.diffprivlib_python, X_unit, data.y, seeds
        )
    else:
        print("(diffprivlib rows skipped: pass --diffprivlib-python /path/to/python with diffprivlib 0.6.6)")
    width = max(len(name) for name in rows) + 2
    print("method".ljust(width) + "".join(f"eps = {eps:<28}" for eps in EPSILONS))
    for name, cells in rows.items():
        print(name.ljust(width) + "".join(f"{show(cells[eps]):<34}" for eps in EPSILONS))
    reference = svc_cell(data.X, data.y, data.svm_C, seeds)
    print(f"{'sklearn SVC rbf C=2.1 (not private)'.ljust(width)}{show(reference)}")


if __name__ == "__main__":
    main()
