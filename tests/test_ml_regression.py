"""DPLinearRegression (kakeibo.ml.regression): the sensitivity of one record's sufficient statistics, the
one ledger charge, and accuracy against least squares.

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
from kakeibo.mechanisms import Gaussian
from kakeibo.ml.regression import SENSITIVITY, DPLinearRegression, _design


@pytest.mark.parametrize("intercept", [True, False])
def test_one_record_moves_the_statistics_by_at_most_the_sensitivity(intercept: bool) -> None:
    rng = np.random.default_rng(0)
    rows = _design(rng.normal(0, 5, (200, 6)) * rng.choice([0.01, 1, 50], (200, 1)), 2.0, intercept)
    labels = np.clip(rng.normal(0, 3, 200), -1, 1)
    upper = np.triu_indices(rows.shape[1])
    moves = [
        np.linalg.norm(np.concatenate([np.outer(z, z)[upper], z * y]))
        for z, y in zip(rows, labels, strict=True)
    ]
    assert max(moves) <= math.sqrt(2) <= SENSITIVITY
    assert max(moves) > 1.0  # rows on the sphere with |y| = 1 come close to the bound


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


@pytest.mark.parametrize(
    ("kwargs", "y", "message"),
    [
        ({"norm_bound": 0}, np.zeros(5), "norm_bound must be positive"),
        ({"y_bound": -1}, np.zeros(5), "y_bound must be positive"),
        ({"regularization": 0}, np.zeros(5), "regularization must be positive"),
        ({}, np.zeros(4), "y must be 5 finite numbers"),
        ({"ledger": "ledger.sqlite"}, np.zeros(5), "ledger must be a kakeibo.accounting.Ledger"),
    ],
)
def test_bad_parameters_are_refused_before_anything_is_charged(
    kwargs: dict, y: np.ndarray, message: str
) -> None:  # type: ignore[type-arg]
    with pytest.raises((ValueError, TypeError), match=message):
        DPLinearRegression(**kwargs).fit(np.zeros((5, 2)), y)
