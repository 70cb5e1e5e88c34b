"""kakeibo.synth.P3GM: the sensitivities of its centre, PCA and EM releases, every Gaussian it draws
calibrated as the charge composes them (centre, PCA, EM iterations, DP-SGD steps), per-record gradients that
depend on their own record only, one ledger entry, a decoder that learns a skewed marginal at a large
epsilon, and refusals.

Neighbour relation: add or remove one record. Sensitivities: the centre's sums ``[1, u]`` move by at most
sqrt(2) (``||u|| <= 1``), the PCA's second moment by at most 1 (``||y y^T||_F = ||y||^2 <= 1`` for the
centred, shrunk ``y``), each EM step's statistics by at most sqrt(3), each DP-SGD step's clipped sum by
``clip_norm`` (module docstring of kakeibo.synth.p3gm)."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest
from scipy.stats import ortho_group

from kakeibo import Error
from kakeibo.accounting import Composed, GaussianNoise, Ledger, MechanismLoss, SubsampledGaussian
from kakeibo.ml import NotFittedError
from kakeibo.ml.dpsgd import glorot
from kakeibo.synth import P3GM
from kakeibo.synth import p3gm as p3gm_module
from kakeibo.synth.dpvae import network_shapes
from kakeibo.synth.p3gm import MARGIN, Mixture, _record_gradients, centred, em_statistics

DELTA = 1e-5


def _centred(points: np.ndarray) -> np.ndarray:
    return (points - 0.5) / (math.sqrt(points.shape[1]) / 2)


def test_the_centre_pca_and_em_statistics_move_by_at_most_their_sensitivities() -> None:
    """Points at the corners of [0, 1]^7 and inside: ||u|| <= 1, so removing a record moves the centre's
    sums [1, u] by at most sqrt(2); for any centre in the cube (a corner, the middle, a random point) the
    centred, shrunk rows have norm at most 1, so removing a record moves the second moment's upper triangle
    by at most 1; under any mixture each record's EM statistics row has norm at most sqrt(3) for z = y V, V
    orthonormal."""
    rng = np.random.default_rng(0)
    points = np.vstack([rng.integers(0, 2, (100, 7)).astype(float), rng.random((100, 7))])
    u = _centred(points)
    assert np.linalg.norm(u, axis=1).max() <= 1 + 1e-12
    sums = np.column_stack([np.ones(len(u)), u])
    assert np.linalg.norm(sums, axis=1).max() <= math.sqrt(2) * (1 + 1e-12)
    upper = np.triu_indices(7)
    for centre in (np.zeros(7), np.ones(7), np.full(7, 0.5), rng.random(7)):
        y = centred(points, centre)
        assert np.linalg.norm(y, axis=1).max() <= 1 + 1e-12
        whole = (y.T @ y)[upper]
        for i in range(0, 200, 9):
            rest = np.delete(y, i, axis=0)
            assert np.linalg.norm(whole - (rest.T @ rest)[upper]) <= 1 + 1e-12
    v = ortho_group.rvs(7, random_state=1)[:, :4]
    z = centred(points, rng.random(7)) @ v
    for seed in range(5):
        draw = np.random.default_rng(seed)
        shape = (3, 4)
        weights, means = draw.dirichlet(np.ones(3)), draw.normal(0, 0.5, shape)
        mixture = Mixture(weights, means, draw.uniform(1e-4, 1, shape))
        rows = [np.linalg.norm(em_statistics(z[i : i + 1], mixture)) for i in range(len(z))]
        assert max(rows) <= math.sqrt(3) * (1 + 1e-12)


def test_every_gaussian_is_calibrated_as_the_charge_composes_them(monkeypatch: pytest.MonkeyPatch) -> None:
    """The charge is the PLD composition of one centre Gaussian, one PCA Gaussian, em_iterations EM Gaussians
    and the DP-SGD steps, within the request; the fit draws exactly those: one release at sigma_mean
    (sensitivity sqrt(2)), one at sigma_pca (1), 4 at sigma_em (sqrt(3)), each DP-SGD step at sigma clip_norm
    (all with the float margin for the centre, PCA and EM)."""
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
    (sigma_mean, sigma_pca, sigma_em), plan = model.plan(500)
    [entry] = ledger.entries()
    assert entry.loss == model.privacy_loss_ == plan.loss and isinstance(plan.loss, MechanismLoss)
    expected = Composed(
        [
            (GaussianNoise(sigma_mean), 1),
            (GaussianNoise(sigma_pca), 1),
            (GaussianNoise(sigma_em), 4),
            (SubsampledGaussian(plan.noise_multiplier, plan.sampling_rate), plan.steps),
        ]
    )
    assert plan.loss.curve == expected and float(plan.loss.declared.epsilon) <= 2.0
    root2 = math.sqrt(2) * MARGIN
    assert drawn[:2] == [(float(sigma_mean) * root2, root2), (float(sigma_pca) * MARGIN, MARGIN)]
    bound = math.sqrt(3) * MARGIN
    assert drawn[2:6] == [(float(sigma_em) * bound, bound)] * 4
    assert len(drawn) == 6  # DP-SGD draws through kakeibo.ml.dpsgd.train, counted below by the plan
    assert plan.steps == math.ceil(1 / plan.sampling_rate)


def test_each_records_gradient_depends_on_its_record_and_draw_only() -> None:
    """Gradients of a chunk of 6 records equal each record's alone (jax.vmap), with the centring and
    shrinking inside the loss: one record cannot move another's row, so clipping each row bounds a record's
    effect on the step."""
    shapes = network_shapes(4, 8, 2)
    flat = glorot(shapes, np.random.default_rng(0)).astype(np.float32)
    rng = np.random.default_rng(1)
    points, draws = rng.random((6, 4)).astype(np.float32), rng.standard_normal((6, 2))
    fixed = (
        ortho_group.rvs(4, random_state=2)[:, :2].astype(np.float32),  # V
        rng.random(4).astype(np.float32),  # the centre
        np.array([0.6, 0.4], np.float32),  # the mixture: weights, means, variances
        rng.normal(0, 0.3, (2, 2)).astype(np.float32),
        rng.uniform(0.1, 1, (2, 2)).astype(np.float32),
    )
    together = np.asarray(_record_gradients(shapes)(flat, points, draws, *fixed))
    assert np.abs(together).max() > 0
    for i in range(6):
        alone = np.asarray(_record_gradients(shapes)(flat, points[i : i + 1], draws[i : i + 1], *fixed))[0]
        np.testing.assert_allclose(together[i], alone, rtol=1e-5, atol=1e-6)


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
        ({"shares": (0.2, 0.5, 0.3)}, "shares must leave"),
        ({"shares": (0.1, 0.0, 0.1)}, "each share"),
        ({"shares": (0.1, 0.1)}, "shares must be three"),
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
