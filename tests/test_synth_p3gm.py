"""kakeibo.synth.P3GM: the sensitivities of its PCA and EM releases, every Gaussian it draws calibrated as the
charge composes them (PCA, EM iterations, DP-SGD steps), one ledger entry, a decoder that learns a skewed
marginal at a large epsilon, and refusals.

Neighbour relation: add or remove one record. Sensitivities: the PCA's second moment moves by at most 1
(``||u u^T||_F = ||u||^2 <= 1``), each EM step's statistics by at most sqrt(3), each DP-SGD step's clipped sum
by ``clip_norm`` (module docstring of kakeibo.synth.p3gm)."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest
from scipy.stats import ortho_group

from kakeibo import Error
from kakeibo.accounting import Composed, GaussianNoise, Ledger, MechanismLoss, SubsampledGaussian
from kakeibo.ml import NotFittedError
from kakeibo.synth import P3GM
from kakeibo.synth import p3gm as p3gm_module
from kakeibo.synth.p3gm import MARGIN, Mixture, em_statistics

DELTA = 1e-5


def _centred(points: np.ndarray) -> np.ndarray:
    return (points - 0.5) / (math.sqrt(points.shape[1]) / 2)


def test_the_pca_and_em_statistics_move_by_at_most_their_sensitivities() -> None:
    """Points at the corners of [0, 1]^7 and inside: ||u|| <= 1, so removing a record moves the second
    moment's upper triangle by at most 1; under any mixture each record's EM statistics row has norm at most
    sqrt(3) for z = u V, V orthonormal."""
    rng = np.random.default_rng(0)
    points = np.vstack([rng.integers(0, 2, (100, 7)).astype(float), rng.random((100, 7))])
    u = _centred(points)
    assert np.linalg.norm(u, axis=1).max() <= 1 + 1e-12
    upper = np.triu_indices(7)
    whole = (u.T @ u)[upper]
    for i in range(0, 200, 9):
        rest = np.delete(u, i, axis=0)
        assert np.linalg.norm(whole - (rest.T @ rest)[upper]) <= 1 + 1e-12
    v = ortho_group.rvs(7, random_state=1)[:, :4]
    z = u @ v
    for seed in range(5):
        draw = np.random.default_rng(seed)
        shape = (3, 4)
        weights, means = draw.dirichlet(np.ones(3)), draw.normal(0, 0.5, shape)
        mixture = Mixture(weights, means, draw.uniform(1e-4, 1, shape))
        rows = [np.linalg.norm(em_statistics(z[i : i + 1], mixture)) for i in range(len(z))]
        assert max(rows) <= math.sqrt(3) * (1 + 1e-12)


def test_every_gaussian_is_calibrated_as_the_charge_composes_them(monkeypatch: pytest.MonkeyPatch) -> None:
    """The charge is the PLD composition of one PCA Gaussian, em_iterations EM Gaussians and the DP-SGD steps,
    within the request; the fit draws exactly those: one release at sigma_pca (sensitivity 1), 4 at sigma_em
    (sqrt(3)), each DP-SGD step at sigma clip_norm (all with the float margin for PCA and EM)."""
    drawn: list[tuple[float, float]] = []
    real = p3gm_module.lattice_gaussian

    def counted(total: Any, scale: float, sensitivity: float, noise: Any) -> Any:
        drawn.append((scale, sensitivity))
        return real(total, scale, sensitivity, noise)

    monkeypatch.setattr(p3gm_module, "lattice_gaussian", counted)
    ledger = Ledger(":memory:", budget=(5, 1e-4), composition="pld")
    codes = np.random.default_rng(2).integers(0, 3, (500, 3))
    settings: dict[str, Any] = {"em_iterations": 4, "hidden": 16, "epochs": 1, "pretrain_steps": 5}
    model = P3GM(2.0, DELTA, ledger=ledger, random_state=0, **settings).fit(codes, (3, 3, 3))
    sigma_pca, sigma_em, plan = model.plan(500)
    [entry] = ledger.entries()
    assert entry.loss == model.privacy_loss_ == plan.loss and isinstance(plan.loss, MechanismLoss)
    expected = Composed(
        [
            (GaussianNoise(sigma_pca), 1),
            (GaussianNoise(sigma_em), 4),
            (SubsampledGaussian(plan.noise_multiplier, plan.sampling_rate), plan.steps),
        ]
    )
    assert plan.loss.curve == expected and float(plan.loss.declared.epsilon) <= 2.0
    assert drawn[0] == (float(sigma_pca) * MARGIN, MARGIN)
    bound = math.sqrt(3) * MARGIN
    assert drawn[1:5] == [(float(sigma_em) * bound, bound)] * 4
    assert len(drawn) == 5  # DP-SGD draws through kakeibo.ml.dpsgd.train, counted below by the plan
    assert plan.steps == math.ceil(1 / plan.sampling_rate)


def _skewed(n: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return np.column_stack([rng.choice(3, n, p=[0.7, 0.2, 0.1]), rng.integers(0, 5, n)])


def test_the_decoder_learns_a_skewed_marginal_at_a_large_epsilon() -> None:
    """At epsilon 20 on 3,000 records the synthetic shares of column 0 are within 0.1 of 0.7 / 0.2 / 0.1;
    sampling is free and reproducible."""
    codes = _skewed(3_000, 3)
    settings: dict[str, Any] = {"ordinal": (False, True), "hidden": 64, "batch_size": 300, "random_state": 0}
    model = P3GM(20.0, DELTA, epochs=10, ledger=False, **settings).fit(codes, (3, 5))
    shares = np.bincount(model.sample(5_000, random_state=4)[:, 0], minlength=3) / 5_000
    assert np.abs(shares - [0.7, 0.2, 0.1]).max() < 0.1, shares
    np.testing.assert_array_equal(model.sample(40, random_state=5), model.sample(40, random_state=5))


@pytest.mark.parametrize(
    ("settings", "fragment"),
    [
        ({"shares": (0.5, 0.5)}, "shares must leave"),
        ({"shares": (0.0, 0.1)}, "each share"),
        ({"components": 0}, "components"),
        ({"em_iterations": 0}, "em_iterations"),
        ({"latent": 0}, "latent"),
        ({"pretrain_steps": 0}, "pretrain_steps"),
        ({"hidden": 0}, "hidden"),
        ({"epsilon": 0.0}, "epsilon"),
    ],
)
def test_bad_parameters_are_refused_before_any_charge(settings: dict[str, Any], fragment: str) -> None:
    ledger = Ledger(":memory:", budget=(2, 1e-4))
    arguments = {"epsilon": 1.0, "delta": DELTA, "ledger": ledger, **settings}
    with pytest.raises(Error, match=fragment):
        P3GM(**arguments).fit(np.zeros((10, 2), dtype=int), (3, 2))
    assert ledger.entries() == []
    with pytest.raises(NotFittedError):
        P3GM().sample(3)
