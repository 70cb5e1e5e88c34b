"""DP-PCA (kakeibo.ml.dppca, Analyze Gauss): sensitivity of the clipped second moment, the noise's spread, an
audit of the whole fit, the one ledger charge, and accuracy against PCA at a large epsilon.

Neighbour relation: add or remove one record. Sensitivity: the upper triangle of ``x x^T`` for a record
scaled to norm at most 1 has L2 norm at most 1.
"""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats

from kakeibo.accounting import Ledger
from kakeibo.audit import audit
from kakeibo.mechanisms import Gaussian
from kakeibo.ml._common import unit_rows
from kakeibo.ml.dppca import DPPCA

pytestmark = pytest.mark.statistical


def test_one_record_moves_the_upper_triangle_by_at_most_one() -> None:
    rng = np.random.default_rng(0)
    rows = unit_rows(rng.normal(0, 30, (300, 7)) * rng.choice([0.01, 1, 100], (300, 1)), 5.0, False)
    upper = np.triu_indices(7)
    with_all = (rows.T @ rows)[upper]
    for i in range(300):
        without = np.delete(rows, i, axis=0)
        assert np.linalg.norm(with_all - (without.T @ without)[upper]) <= 1 + 1e-12


def test_the_noise_has_the_gaussians_spread() -> None:
    """All-zero rows: the released matrix is the noise alone. 40 fits of 10 x 10 (55 draws each), rebuilt from
    the components and eigenvalues; the spread is the Gaussian's sigma^2 (chi-square, 99.9%)."""
    sigma2 = Gaussian(sensitivity=1, epsilon=1.0, delta=1e-6).variance
    draws = []
    for seed in range(40):
        model = DPPCA(10, epsilon=1.0, delta=1e-6, ledger=False, random_state=1000 + seed).fit(
            np.zeros((5, 10))
        )
        matrix = (model.components_.T * model.explained_variance_) @ model.components_
        draws.append(matrix[np.triu_indices(10)])
    values = np.concatenate(draws)
    statistic = float(np.sum(values**2) / sigma2)
    low, high = stats.chi2.ppf([0.0005, 0.9995], values.size)
    assert low <= statistic <= high


def test_the_fit_audited_finds_no_epsilon_above_the_claim() -> None:
    """One attribute: the release is A = sum x^2, 0 without the canary, 1 with it (a canary of norm 10,
    scaled to 1 by the row map). 1,000 fits per dataset (events chosen on 1,000 more) at epsilon 4, 95%
    confidence: a fit that skipped the row map or the noise would be refuted (the Gaussian's own audit is
    in test_privacy_statistical)."""

    def sampler(d: int, n: int, rng: np.random.Generator) -> np.ndarray:
        rows = np.zeros((10 + d, 1))
        if d:
            rows[-1, 0] = 10.0
        return np.array(
            [
                DPPCA(1, epsilon=1.0, delta=1e-5, ledger=False, random_state=rng)
                .fit(rows)
                .explained_variance_[0]
                for _ in range(n)
            ]
        )

    result = audit(
        sampler, 0, 1, trials=1_000, selection_trials=1_000, rng=np.random.default_rng(4), delta=1e-5
    )
    assert not result.refutes(4.0), result


def test_fit_is_one_ledger_entry_and_finds_the_components() -> None:
    rng = np.random.default_rng(2)
    basis = np.linalg.qr(rng.normal(size=(8, 8)))[0]
    X = (rng.normal(size=(5000, 8)) * [6, 4, 1, 1, 1, 1, 1, 1]) @ basis.T
    ledger = Ledger(":memory:", budget=(5, 1e-5), composition="rdp")
    pca = DPPCA(2, epsilon=2.0, delta=1e-6, norm_bound=20, ledger=ledger, random_state=3).fit(X)
    [entry] = ledger.entries()
    assert entry.loss == Gaussian(sensitivity=1, epsilon=2.0, delta=1e-6).ledger_loss
    truth = basis[:, :2]
    overlap = np.linalg.svd(truth.T @ pca.components_.T, compute_uv=False)  # cosines of principal angles
    assert overlap.min() > 0.95
    assert pca.transform(X).shape == (5000, 2)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"n_components": 0}, "n_components must lie in"),
        ({"n_components": 4}, "n_components must lie in"),
        ({"norm_bound": 0}, "norm_bound must be positive"),
        ({"ledger": "ledger.sqlite"}, "ledger must be a kakeibo.accounting.Ledger"),
    ],
)
def test_bad_parameters_are_refused_before_anything_is_charged(kwargs: dict, message: str) -> None:  # type: ignore[type-arg]
    with pytest.raises((ValueError, TypeError), match=message):
        DPPCA(**{"n_components": 1, **kwargs}).fit(np.zeros((5, 3)))
