"""DP linear regression on scikit-learn's diabetes data: kakeibo's noisy sufficient statistics and DP-SGD
against diffprivlib's ``LinearRegression`` and least squares without privacy, in one run.

Run: ``.venv/bin/python benchmarks/bench_regression.py --diffprivlib-python /tmp/dplvenv/bin/python``

diffprivlib 0.6.6 does not import with scikit-learn 1.9, so it runs in its own interpreter (a venv with
``diffprivlib==0.6.6 'scikit-learn<1.8'``) as ``bench_regression.py --worker``, a mode that imports no
kakeibo. Data: 442 patients, 10 standardised attributes (row norms at most 0.33), target 25-346; split
75/25 with a fixed seed; test mean squared error, mean over ``--runs`` seeds. Both get the same public
bounds: kakeibo ``norm_bound = 0.2`` (rows longer are shrunk onto it) and ``y_bound = 350``; diffprivlib
``bounds_X = (-0.2, 0.2)`` per attribute and ``bounds_y = (0, 350)``. kakeibo is (epsilon, 1e-6)-DP,
diffprivlib epsilon-DP (its functional mechanism). kakeibo's DP-SGD (``method="sgd"``) runs 30 epochs at
expected batch 128, learning rate 0.5, clip 0.5: the best of 16 settings on a validation split carved from
the training records at epsilon 1 (4 seeds), not on the test split.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

EPSILONS = (0.5, 1.0, 3.0, 8.0)


def split() -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    from sklearn.datasets import load_diabetes
    from sklearn.model_selection import train_test_split

    data = load_diabetes()
    return train_test_split(data.data, data.target, test_size=0.25, random_state=0)


def worker(out: str, runs: int) -> None:
    """diffprivlib's test errors (its own interpreter; imports no kakeibo)."""
    from diffprivlib.models import LinearRegression

    X_train, X_test, y_train, y_test = split()
    errors = {}
    for epsilon in EPSILONS:
        cell = []
        for seed in range(runs):
            model = LinearRegression(
                epsilon=epsilon, bounds_X=(-0.2, 0.2), bounds_y=(0, 350), random_state=seed
            ).fit(X_train, y_train)
            cell.append(float(np.mean((model.predict(X_test) - y_test) ** 2)))
        errors[repr(epsilon)] = float(np.mean(cell))
    Path(out).write_text(json.dumps(errors))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--diffprivlib-python", help="interpreter with diffprivlib 0.6.6 installed")
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        worker(args.worker, args.runs)
        return
    from sklearn.linear_model import LinearRegression

    from kakeibo.ml import DPLinearRegression

    X_train, X_test, y_train, y_test = split()
    peer: dict[str, float] = {}
    if args.diffprivlib_python:
        with tempfile.TemporaryDirectory() as tmp:
            out = Path(tmp) / "errors.json"
            command = [args.diffprivlib_python, __file__, "--worker", str(out), "--runs", str(args.runs)]
            done = subprocess.run(command, capture_output=True, text=True, timeout=3600)
            if done.returncode:
                sys.exit(f"the diffprivlib worker failed:\n{done.stderr[-2000:]}")
            peer = json.loads(out.read_text())
    ols = float(np.mean((LinearRegression().fit(X_train, y_train).predict(X_test) - y_test) ** 2))
    baseline = float(np.mean((y_train.mean() - y_test) ** 2))
    title = (
        f"test MSE, mean of {args.runs} seeds; least squares {ols:.0f}, predicting the mean {baseline:.0f}"
    )
    print(f"# diabetes: {title}")
    head = ("kakeibo, statistics", "kakeibo, DP-SGD", "diffprivlib LinearRegression")
    print(f"| {'epsilon':>7} | {head[0]:>19} | {head[1]:>15} | {head[2]:>28} |")
    print(f"|{'-' * 9}|{'-' * 21}|{'-' * 17}|{'-' * 30}|")
    sgd = {"method": "sgd", "epochs": 30, "batch_size": 128, "learning_rate": 0.5, "clip_norm": 0.5}
    for epsilon in EPSILONS:
        cells = []
        for settings in ({}, sgd):
            errors = []
            for seed in range(args.runs):
                model = DPLinearRegression(
                    epsilon=epsilon,
                    delta=1e-6,
                    norm_bound=0.2,
                    y_bound=350,
                    ledger=False,
                    random_state=seed,
                    **settings,
                ).fit(X_train, y_train)
                errors.append(float(np.mean((model.predict(X_test) - y_test) ** 2)))
            cells.append(np.mean(errors))
        theirs = peer.get(repr(epsilon))
        shown = "-" if theirs is None else f"{theirs:.0f}"
        print(f"| {epsilon:>7g} | {cells[0]:>19.0f} | {cells[1]:>15.0f} | {shown:>28} |")


if __name__ == "__main__":
    main()
