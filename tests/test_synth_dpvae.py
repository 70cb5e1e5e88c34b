"""kakeibo.synth.DPVAE (the naive DP-SGD baseline of private synthesis): one ledger entry charged the DP-SGD
run's loss, per-record gradients that depend on their own record only (what DP-SGD's clipping bounds), a
decoder that learns a skewed marginal at a large epsilon, and refusals.

Neighbour relation: add or remove one record. Sensitivity of each step's clipped sum: ``clip_norm`` (the
DP-SGD module, whose statistical tests cover the noise and the accountant)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from kakeibo import Error
from kakeibo.accounting import Ledger
from kakeibo.ml import NotFittedError
from kakeibo.ml.dpsgd import epoch_plan, glorot
from kakeibo.synth import DPVAE
from kakeibo.synth.dpvae import _record_gradients, network_shapes

DELTA = 1e-5


def _skewed(n: int, seed: int) -> np.ndarray:
    """Column 0 categorical with shares 0.7 / 0.2 / 0.1; column 1 ordinal, uniform on 5 values."""
    rng = np.random.default_rng(seed)
    return np.column_stack([rng.choice(3, n, p=[0.7, 0.2, 0.1]), rng.integers(0, 5, n)])


def test_each_records_gradient_depends_on_its_record_and_draw_only() -> None:
    """Gradients of a chunk of 6 records equal each record's alone (jax.vmap): one record cannot move
    another's row, so clipping each row bounds a record's effect on the step."""
    shapes = network_shapes(4, 8, 2)
    flat = glorot(shapes, np.random.default_rng(0)).astype(np.float32)
    rng = np.random.default_rng(1)
    points, draws = rng.random((6, 4)).astype(np.float32), rng.standard_normal((6, 2))
    together = np.asarray(_record_gradients(shapes)(flat, points, draws))
    for i in range(6):
        alone = np.asarray(_record_gradients(shapes)(flat, points[i : i + 1], draws[i : i + 1]))[0]
        np.testing.assert_allclose(together[i], alone, rtol=1e-5, atol=1e-6)


def test_a_fit_is_one_ledger_entry_charged_the_runs_loss_and_learns_a_skewed_marginal() -> None:
    """At epsilon 20 on 3,000 records the synthetic shares of column 0 are within 0.25 of 0.7 / 0.2 / 0.1 in
    total variation (0.15 seen: the naive VAE over-weights the mode) and a decoder trained for one step, the
    control, is over 0.4 away (0.60 seen); the charge is the DP-SGD plan's."""
    ledger = Ledger(":memory:", budget=(30, 1e-4))
    codes = _skewed(3_000, 2)
    settings: dict[str, Any] = {"ordinal": (False, True), "hidden": 64, "batch_size": 300, "random_state": 0}
    model = DPVAE(20.0, DELTA, epochs=10, ledger=ledger, dataset="skewed", **settings).fit(codes, (3, 5))
    [entry] = ledger.entries()
    assert entry.loss == model.privacy_loss_ == epoch_plan(20.0, DELTA, 3_000, 300, 10).loss
    shares = np.bincount(model.sample(5_000, random_state=3)[:, 0], minlength=3) / 5_000
    assert np.abs(shares - [0.7, 0.2, 0.1]).sum() / 2 < 0.25, shares
    assert len(ledger.entries()) == 1
    untrained = DPVAE(20.0, DELTA, epochs=1e-4, ledger=False, **settings).fit(codes, (3, 5))
    control = np.bincount(untrained.sample(5_000, random_state=3)[:, 0], minlength=3) / 5_000
    assert np.abs(control - [0.7, 0.2, 0.1]).sum() / 2 > 0.4, control


@pytest.mark.parametrize(
    ("settings", "fragment"),
    [
        ({"hidden": 0}, "hidden"),
        ({"latent": 0}, "latent"),
        ({"clip_norm": 0.0}, "clip_norm"),
        ({"learning_rate": -1.0}, "learning_rate"),
        ({"ordinal": (True,)}, "2 flags"),
        ({"epsilon": 0.0}, "epsilon"),
        ({"delta": 1.0}, "delta"),
        ({"batch_size": 0}, "batch_size"),
    ],
)
def test_bad_parameters_are_refused_before_any_charge(settings: dict[str, Any], fragment: str) -> None:
    ledger = Ledger(":memory:", budget=(2, 1e-4))
    arguments = {"epsilon": 1.0, "delta": DELTA, "ledger": ledger, **settings}
    with pytest.raises(Error, match=fragment):
        DPVAE(**arguments).fit(np.zeros((10, 2), dtype=int), (3, 2))
    assert ledger.entries() == []
    with pytest.raises(NotFittedError):
        DPVAE().sample(3)
