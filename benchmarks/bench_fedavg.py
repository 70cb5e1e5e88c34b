"""User-level DP-FedAvg on a non-IID split of digits: accuracy against epsilon, in one run.

Run: ``.venv/bin/python benchmarks/bench_fedavg.py [--epsilons 0.5,1,3,8] [--clients 100,1000] [--runs 3]``

Data: scikit-learn's 8x8 digits (pixels / 16), split 75/25 with a fixed seed. The 1,347 training records go
to ``N`` simulated clients the way McMahan et al. (2017) build their pathological non-IID split: records
sorted by label, cut into ``2N`` shards, two random shards per client, so most clients see one or two
digits only (at ``N = 1,000`` most clients hold one record, some none).

Rows, per ``N``: scikit-learn's ``LogisticRegression`` on the pooled training data without privacy (the
centralised reference); FedAvg without privacy on the same split (kakeibo's rounds, sampling and client
updates with no noise and no clipping: ``train`` with noise multiplier 0 and clip 100, above any update's norm
here, 10 steps of 0.5 times a gradient of norm at most sqrt(2) sqrt(65); from zero weights);
kakeibo's ``DPFedAvgClassifier`` (softmax regression; 10 local gradient steps at rate 0.5; server SGD at
rate 1 with momentum 0.9; clip 1) at each epsilon with delta = 1e-5.
Rounds, clients per round (50 and 50 at ``N = 100``; 20 and 500 at ``N = 1,000``) and the server's
momentum were chosen on a validation split carved from the training records (at epsilon 8 for
``N = 100``, where epsilon 1 left every setting near 30%; at epsilon 1 for ``N = 1,000``), not on the test
split. Accuracy is the mean and half-range over ``--runs`` seeds (each seed a new split into clients and a
new training run); seconds per round is the median.
"""

from __future__ import annotations

import argparse
import dataclasses
import statistics
import time
import warnings

import numpy as np
import optax
from sklearn.datasets import load_digits
from sklearn.exceptions import ConvergenceWarning
from sklearn.linear_model import LogisticRegression
from sklearn.model_selection import train_test_split

from kakeibo.ml.dpsgd import calibrate, train
from kakeibo.ml.fedavg import DPFedAvgClassifier, client_contributions
from kakeibo.noise import resolve_source

#: clients -> (rounds, clients per round)
SCHEDULE = {100: (50, 50), 1000: (20, 500)}


def shards(labels: np.ndarray, clients: int, rng: np.random.Generator) -> np.ndarray:
    """A client id per record: records sorted by label, cut into ``2 clients`` shards, two random shards
    per client."""
    order = np.argsort(labels, kind="stable")
    parts = np.array_split(order, 2 * clients)
    owner = rng.permutation(2 * clients) // 2
    ids = np.empty(labels.size, dtype=np.int64)
    for shard, client in zip(parts, owner, strict=True):
        ids[shard] = client
    return ids


def softmax_loss(flat, x, target):  # type: ignore[no-untyped-def]
    """One record's cross-entropy under softmax regression on 64 pixels (the model the private rows train)."""
    import jax

    logits = x @ flat[:640].reshape(64, 10) + flat[640:]
    return -jax.nn.log_softmax(logits)[target]


def fedavg_without_privacy(
    X: np.ndarray, y: np.ndarray, ids: np.ndarray, clients: int, rounds: int, per_round: int, seed: int
) -> np.ndarray:
    """FedAvg's weights after ``rounds`` rounds with no noise and no clipping (module docstring). The clip
    sets the lattice of the released sum too (2**k <= 2**-8 clip / sqrt(d)), so it is 100, not infinity."""
    rng = np.random.default_rng(seed)
    members = [np.flatnonzero(ids == c) for c in range(clients)]
    rate = min(per_round, clients) / clients
    plan = dataclasses.replace(
        calibrate(epsilon=8, delta=1e-5, sampling_rate=rate, steps=rounds), noise_multiplier=0
    )
    contributions = client_contributions(
        softmax_loss,
        X,
        y.astype(np.int32),
        np.ones(y.size),
        members,
        width=64,
        rng=rng,
        local_steps=10,
        local_learning_rate=0.5,
    )
    return train(
        contributions,
        np.zeros(650),
        np.ones(clients),
        plan=plan,
        clip_norm=100.0,
        normaliser=rate * clients,
        optimizer=optax.sgd(1.0, momentum=0.9),
        source=resolve_source(rng),
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epsilons", default="0.5,1,3,8")
    parser.add_argument("--clients", default="100,1000")
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    data = load_digits()
    X_train, X_test, y_train, y_test = train_test_split(
        data.data / 16.0, data.target, test_size=0.25, random_state=0, stratify=data.target
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        pooled = LogisticRegression(max_iter=2_000).fit(X_train, y_train).score(X_test, y_test)
    for clients in (int(c) for c in args.clients.split(",")):
        rounds, per_round = SCHEDULE.get(clients, (50, max(1, clients // 2)))
        print(f"\n# {clients:,} clients, {rounds} rounds, {per_round} clients per round (expected)")
        print(
            f"| {'model':<44} | {'epsilon':>7} | {'accuracy':>15} | {'noise mult.':>11} | {'s / round':>9} |"
        )
        print(f"|{'-' * 46}|{'-' * 9}|{'-' * 17}|{'-' * 13}|{'-' * 11}|")
        name = "scikit-learn LogisticRegression, pooled"
        print(f"| {name:<44} | {'inf':>7} | {pooled:>15.4f} | {'-':>11} | {'-':>9} |")
        scores = []
        for seed in range(args.runs):
            ids = shards(y_train, clients, np.random.default_rng(seed))
            flat = fedavg_without_privacy(X_train, y_train, ids, clients, rounds, per_round, seed)
            predicted = np.argmax(X_test @ flat[:640].reshape(64, 10) + flat[640:], axis=1)
            scores.append(float(np.mean(predicted == y_test)))
        name = "FedAvg, no privacy (no noise, no clipping)"
        print(f"| {name:<44} | {'inf':>7} | {_spread(scores):>15} | {'-':>11} | {'-':>9} |")
        for epsilon in (float(e) for e in args.epsilons.split(",")):
            scores, seconds, sigma = [], [], 0.0
            for seed in range(args.runs):
                ids = shards(y_train, clients, np.random.default_rng(seed))
                model = DPFedAvgClassifier(
                    epsilon,
                    1e-5,
                    hidden_layer_sizes=(),
                    rounds=rounds,
                    clients_per_round=per_round,
                    classes=range(10),
                    ledger=False,
                    random_state=seed,
                )
                start = time.perf_counter()
                model.fit(X_train, y_train, clients=ids)
                seconds.append((time.perf_counter() - start) / rounds)
                scores.append(float(np.mean(model.predict(X_test) == y_test)))
                sigma = float(model.plan_.noise_multiplier)
            name = "kakeibo DPFedAvgClassifier"
            print(
                f"| {name:<44} | {epsilon:>7g} | {_spread(scores):>15} | {sigma:>11.4g} "
                f"| {statistics.median(seconds):>9.3f} |"
            )


def _spread(scores: list[float]) -> str:
    mean = statistics.fmean(scores)
    half = (max(scores) - min(scores)) / 2
    return f"{mean:.4f} +- {half:.4f}"


if __name__ == "__main__":
    main()
