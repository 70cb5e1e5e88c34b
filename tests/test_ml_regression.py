"""DPLinearRegression (kakeibo.ml.regression): the sensitivity of one record's sufficient statistics, the
one ledger charge, and accuracy against least squares, by both methods (method="sgd" trains with DP-SGD,
whose step is audited in test_dpsgd).

Neighbour relation: add or remove one record. Sensitivity: one record adds (upper(z z^T), z y) with
||z|| <= 1 and |y| <= 1, of L2 norm at most sqrt(2) <= SENSITIVITY. The Gaussian that adds the noise is
audited in test_privacy_statistical.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from sklearn.datasets import load_diabetes
from sklearn.linear_model import LinearRegression
from sklearn.model_selection import train_test_split

from kakeibo.accounting import Ledger
from kakeibo.audit import audit
from kakeibo.mechanisms import Gaussian
from kakeibo.ml._common import unit_rows
from kakeibo.ml.regression import SENSITIVITY, DPLinearRegression


@pytest.mark.parametrize("intercept", [True, False])
def test_one_record_moves_the_statistics_by_at_most_the_sensitivity(intercept: bool) -> None:
    rng = np.random.default_rng(0)
    rows = unit_rows(rng.normal(0, 5, (200, 6)) * rng.choice([0.01, 1, 50], (200, 1)), 2.0, intercept)
    labels = np.clip(rng.normal(0, 3, 200), -1, 1)
    upper = np.triu_indices(rows.shape[1])
    moves = [
        np.linalg.norm(np.concatenate([np.outer(z, z)[upper], z * y]))
        for z, y in zip(rows, labels, strict=True)
    ]
    assert max(moves) <= math.sqrt(2) <= SENSITIVITY
    assert max(moves) > 1.0  # rows on the sphere with |y| = 1 come close to the bound


@pytest.mark.statistical
def test_the_fit_audited_finds_no_epsilon_above_the_claim() -> None:
    """One attribute, no intercept: ten silent records, and the canary (x = 10, shrunk to norm 1; y at its
    bound). 1,000 fits per dataset (events chosen on 1,000 more) at epsilon 4, 95% confidence, on the
    released coefficient: a fit that skipped the row map, the label clip or the noise would be refuted."""

    def sampler(d: int, n: int, rng: np.random.Generator) -> np.ndarray:
        X, y = np.zeros((10 + d, 1)), np.zeros(10 + d)
        if d:
            X[-1, 0], y[-1] = 10.0, 5.0
        return np.array(
            [
                DPLinearRegression(
                    epsilon=4.0, delta=1e-5, fit_intercept=False, ledger=False, random_state=rng
                )
                .fit(X, y)
                .coef_[0]
                for _ in range(n)
            ]
        )

    result = audit(
        sampler, 0, 1, trials=1_000, selection_trials=1_000, rng=np.random.default_rng(6), delta=1e-5
    )
    assert not result.refutes(4.0), result


def test_fit_is_one_ledger_entry_and_approaches_least_squares() -> None:
    data = load_diabetes()
    X_train, X_test, y_train, y_test = train_test_split(
        data.data, data.target, test_size=0.25, random_state=0
    )
    ols = np.mean((LinearRegression().fit(X_train, y_train).predict(X_test) - y_test) ** 2)
    ledger = Ledger(":memory:", budget=(200, 1e-5), composition="rdp")
    model = DPLinearRegression(
        epsilon=100, delta=1e-6, norm_bound=0.2, y_bound=350, ledger=ledger, random_state=0
    ).fit(X_train, y_train)
    [entry] = ledger.entries()
    assert entry.loss == Gaussian(sensitivity=SENSITIVITY, epsilon=100, delta=1e-6).ledger_loss
    assert np.mean((model.predict(X_test) - y_test) ** 2) < 1.1 * ols


def test_sgd_fit_is_one_ledger_entry_charged_the_run_and_approaches_least_squares() -> None:
    data = load_diabetes()
    X_train, X_test, y_train, y_test = train_test_split(
        data.data, data.target, test_size=0.25, random_state=0
    )
    ols = np.mean((LinearRegression().fit(X_train, y_train).predict(X_test) - y_test) ** 2)
    mean_only = np.mean((y_train.mean() - y_test) ** 2)
    ledger = Ledger(":memory:", budget=(200, 1e-5), composition="pld")
    model = DPLinearRegression(
        epsilon=20,
        delta=1e-6,
        norm_bound=0.2,
        y_bound=350,
        method="sgd",
        epochs=30,
        batch_size=128,
        clip_norm=0.5,
        ledger=ledger,
        random_state=0,
    ).fit(X_train, y_train)
    [entry] = ledger.entries()
    assert entry.loss == model.privacy_loss_ == model.plan_.loss
    assert model.plan_.steps == math.ceil(30 * X_train.shape[0] / 128)
    error = np.mean((model.predict(X_test) - y_test) ** 2)
    assert error < mean_only and error < 1.5 * ols, (error, ols, mean_only)


@pytest.mark.parametrize(
    ("kwargs", "y", "message"),
    [
        ({"norm_bound": 0}, np.zeros(5), "norm_bound must be positive"),
        ({"y_bound": -1}, np.zeros(5), "y_bound must be positive"),
        ({"regularization": 0}, np.zeros(5), "regularization must be positive"),
        ({"method": "newton"}, np.zeros(5), "method must be 'statistics' or 'sgd'"),
        ({"method": "sgd", "batch_size": 0}, np.zeros(5), "batch_size must be a positive whole number"),
        ({"method": "sgd", "clip_norm": 0}, np.zeros(5), "clip_norm must be positive"),
        ({}, np.zeros(4), "y must be 5 finite numbers"),
        ({"ledger": "ledger.sqlite"}, np.zeros(5), "ledger must be a kakeibo.accounting.Ledger"),
    ],
)
def test_bad_parameters_are_refused_before_anything_is_charged(
    kwargs: dict, y: np.ndarray, message: str
) -> None:  # type: ignore[type-arg]
    with pytest.raises((ValueError, TypeError), match=message):
        DPLinearRegression(**kwargs).fit(np.zeros((5, 2)), y)
