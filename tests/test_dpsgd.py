"""DP-SGD (kakeibo.ml.dpsgd): its privacy claim audited on one step, the calibration of clipping, noise and
sampling, and the estimators' one ledger charge.

Neighbour relation: add or remove one record, with the sampling rate q and the normaliser q n fixed (n is
public). Sensitivity: one record adds at most clip_norm to a step's clipped sum (L2). Each step is the
Poisson-subsampled Gaussian mechanism; a run is ``steps`` of them.
"""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import optax
import pytest
from scipy import stats

from kakeibo.accounting import Composed, Ledger, MechanismLoss, SubsampledGaussian
from kakeibo.audit import audit
from kakeibo.ml.dpsgd import (
    DPMLPClassifier,
    TrainingPlan,
    calibrate,
    clipped_sum,
    record_contributions,
    record_gradients,
    train,
)
from kakeibo.noise import resolve_source
from kakeibo.privacy import ApproxDP
from training_fixtures import canary_loss, claimed_epsilon, one_step_plan

pytestmark = pytest.mark.statistical


def one_step(noise_multiplier: float, rate: float, clip: float):  # type: ignore[no-untyped-def]
    """A sampler for :func:`kakeibo.audit.audit`: ``d`` is 0 (50 silent records) or 1 (the same and the
    canary); each output is the parameter after one DP-SGD step from 0 with learning rate 1, clipping at
    ``clip`` with noise of standard deviation ``noise_multiplier * clip``."""
    plan = one_step_plan(noise_multiplier, rate)

    def sampler(d: int, n: int, rng: np.random.Generator) -> np.ndarray:
        features = np.zeros((50 + d, 1))
        labels = np.zeros(50 + d)
        if d:
            features[-1, 0], labels[-1] = 1.0, 5.0
        source = resolve_source(rng)
        out = np.empty(n)
        for i in range(n):
            out[i] = train(
                record_contributions(canary_loss, features, labels),
                np.zeros(1),
                np.ones(50 + d),
                plan=plan,
                clip_norm=clip,
                normaliser=rate * 50,
                optimizer=optax.sgd(1.0),
                source=source,
            )[0]
        return out

    return sampler


@pytest.mark.parametrize("rate", [1.0, 0.5])
def test_one_step_audited_finds_no_epsilon_above_the_claim(rate: float) -> None:
    """4,000 steps per dataset (events chosen on 1,000 more), 95% confidence: the lower bound on epsilon
    stays below the accountant's."""
    claim = claimed_epsilon(1.0, rate, 1e-5)
    result = audit(
        one_step(1.0, rate, 1.0),
        0,
        1,
        trials=4_000,
        selection_trials=1_000,
        rng=np.random.default_rng(7),
        delta=1e-5,
    )
    assert not result.refutes(claim), result
    assert result.epsilon_lower_bound > 0.5  # the audit sees the canary: it is not a test that cannot fail


def test_the_audit_catches_a_clip_larger_than_accounted() -> None:
    """The step a mis-wired trainer would take: noise for clip 1 (standard deviation 1), but the canary
    clipped at 6, so its gradient 5 passes whole. The audit refutes the claim for clip 1."""
    claim = claimed_epsilon(1.0, 1.0, 1e-5)
    result = audit(
        one_step(1 / 6, 1.0, 6.0),
        0,
        1,
        trials=4_000,
        selection_trials=1_000,
        rng=np.random.default_rng(8),
        delta=1e-5,
    )
    assert result.refutes(claim), result


def test_clipping_bounds_each_record_and_the_sum_moves_by_at_most_the_clip() -> None:
    import jax.numpy as jnp

    def square(flat, x, y):  # type: ignore[no-untyped-def]
        return 0.5 * (jnp.dot(flat, x) - y) ** 2

    rng = np.random.default_rng(3)
    features, labels = rng.normal(0, 10, (128, 6)), rng.normal(0, 50, 128)
    flat = rng.normal(0, 1, 6)
    gradients = np.asarray(record_gradients(square)(flat, features, labels), dtype=np.float64)
    each = [clipped_sum(gradients[i : i + 1], np.ones(1), 1.5) for i in range(128)]
    assert max(np.linalg.norm(g) for g in each) <= 1.5
    assert min(np.linalg.norm(g) for g in each) > 1.49  # these gradients are all longer than the clip
    everyone = clipped_sum(gradients, np.ones(128), 1.5)
    without_last = clipped_sum(gradients, np.r_[np.ones(127), 0.0], 1.5)
    assert np.linalg.norm(everyone - without_last) <= 1.5
    assert np.allclose(everyone, np.sum(each, axis=0), atol=1e-9)
    small = gradients / np.linalg.norm(gradients, axis=1, keepdims=True)  # norm 1 < 1.5: left alone
    assert np.allclose(clipped_sum(small, np.ones(128), 1.5), small.sum(axis=0), rtol=0, atol=1e-12)


@pytest.mark.parametrize("extreme", [np.nan, np.inf, -np.inf, 1e308, -1e308, 5e-324, 0.0])
def test_clipping_is_total_on_extreme_rows(extreme: float) -> None:
    """A row holding NaN or an infinity counts as zero; a huge or subnormal one is clipped without overflow;
    either way the sum stays finite and moves by at most the clip."""
    rows = np.array([[0.3, 0.4, 0.0], [extreme, extreme, 1.0], [1e308, -1e308, 1e308]])
    total = clipped_sum(rows, np.ones(3), 2.0)
    without = clipped_sum(rows[[0, 2]], np.ones(2), 2.0)
    assert np.all(np.isfinite(total))
    assert np.linalg.norm(total - without) <= 2.0
    assert np.linalg.norm(clipped_sum(rows[2:], np.ones(1), 2.0)) <= 2.0


def test_a_record_of_extreme_values_leaves_the_model_finite() -> None:
    """One record of 1e308s overflows JAX's float32 gradient to inf/NaN; the model must not become NaN
    (that would reveal the record deterministically, whatever the noise)."""
    rng = np.random.default_rng(2)
    X = rng.normal(size=(300, 4))
    y = (X[:, 0] > 0).astype(int)
    X[7] = 1e308
    model = DPMLPClassifier(
        4.0, hidden_layer_sizes=(8,), classes=(0, 1), epochs=3, batch_size=100, ledger=False, random_state=0
    ).fit(X, y)
    assert all(np.all(np.isfinite(w)) and np.all(np.isfinite(b)) for w, b in model.coefs_)


def test_the_noise_has_the_calibrated_spread_and_sits_on_the_lattice() -> None:
    """Silent records, q = 1: each step's update is the noise alone, N(0, (sigma C)^2) rounded to 2**k.
    A chi-square test of the variance at 99.9% confidence (seeded), over 3,000 steps of 8 coordinates."""
    sigma, clip, steps, dimension = 2.0, 0.75, 3_000, 8
    plan = TrainingPlan(
        Fraction(sigma), Fraction(1), steps, MechanismLoss(ApproxDP(1, 1e-5), SubsampledGaussian(sigma, 1))
    )
    updates = []

    class Recording:
        def init(self, params):  # type: ignore[no-untyped-def]
            return None

        def update(self, grads, state, params):  # type: ignore[no-untyped-def]
            updates.append(np.asarray(grads))
            return grads * 0, state

    train(
        record_contributions(lambda flat, x, y: flat[0] * 0.0, np.zeros((10, 1)), np.zeros(10)),
        np.zeros(dimension),
        np.ones(10),
        plan=plan,
        clip_norm=clip,
        normaliser=1.0,
        optimizer=Recording(),
        source=resolve_source(np.random.default_rng(11)),
    )
    noise = np.concatenate(updates)
    k = math.floor(math.log2(clip * 2**-8 / math.sqrt(dimension)))
    assert np.all(np.ldexp(noise, -k) == np.rint(np.ldexp(noise, -k)))  # on the lattice 2**k
    statistic = float(np.sum(noise**2) / (sigma * clip) ** 2)
    low, high = stats.chi2.ppf([0.0005, 0.9995], noise.size)
    assert low <= statistic <= high
    assert abs(float(np.mean(noise))) < 4 * sigma * clip / math.sqrt(noise.size)


def test_poisson_sampling_keeps_each_record_with_probability_q() -> None:
    """How many records each step sums, counted through a loss whose clipped gradient is 1 per record:
    the total over 400 steps of 1,000 records at q = 0.03 is Binomial(400,000, 0.03) (99.9%, seeded)."""
    sums = []

    class Recording:
        def init(self, params):  # type: ignore[no-untyped-def]
            return None

        def update(self, grads, state, params):  # type: ignore[no-untyped-def]
            sums.append(float(grads[0]))
            return grads * 0, state

    plan = TrainingPlan(
        Fraction(1, 10**4), Fraction(3, 100), 400, MechanismLoss(ApproxDP(1, 1e-5), SubsampledGaussian(1, 1))
    )
    train(
        record_contributions(lambda flat, x, y: flat[0] * x[0], np.ones((1000, 1)), np.zeros(1000)),
        np.zeros(1),
        np.ones(1000),
        plan=plan,
        clip_norm=1.0,
        normaliser=1.0,
        optimizer=Recording(),
        source=resolve_source(np.random.default_rng(5)),
    )
    total = round(sum(sums))
    low, high = stats.binom.ppf([0.0005, 0.9995], 400_000, 0.03)
    assert low <= total <= high


def test_calibration_finds_the_least_noise_within_four_digits() -> None:
    plan = calibrate(epsilon=2.0, delta=1e-5, sampling_rate=0.05, steps=100)
    assert plan.loss.declared.epsilon <= 2 and plan.loss.declared.delta == Fraction(1, 10**5)
    assert plan.loss.curve == Composed([(SubsampledGaussian(plan.noise_multiplier, Fraction(1, 20)), 100)])
    slightly_less = plan.noise_multiplier * Fraction(999, 1000)
    assert claimed_epsilon_composed(slightly_less, 0.05, 100) > 2 * 0.995  # within the search's resolution


def claimed_epsilon_composed(sigma: Fraction, rate: float, steps: int) -> float:
    remove, add = Composed([(SubsampledGaussian(sigma, rate), steps)]).distributions(1e-4)
    return max(remove.epsilon(1e-5), add.epsilon(1e-5))


def test_fit_is_one_ledger_entry_charged_the_run() -> None:
    from sklearn.datasets import load_digits

    digits = load_digits()
    ledger = Ledger(":memory:", budget=(10, 1e-5), composition="pld")
    model = DPMLPClassifier(
        4.0,
        1e-5,
        hidden_layer_sizes=(16,),
        epochs=5,
        learning_rate=0.5,
        batch_size=128,
        classes=range(10),
        ledger=ledger,
        random_state=1,
    ).fit(digits.data / 16, digits.target)
    [entry] = ledger.entries()
    assert entry.loss == model.privacy_loss_ == model.plan_.loss
    assert model.plan_.steps == math.ceil(5 * 1797 / 128)
    assert ledger.spent().epsilon <= 4 * (1 + 1e-9)
    assert np.mean(model.predict(digits.data / 16) == digits.target) > 0.3  # it learned something


def test_undeclared_labels_neither_refuse_nor_count() -> None:
    rng = np.random.default_rng(0)
    X = rng.normal(size=(200, 3))
    y = np.where(X[:, 0] > 0, "yes", "no").astype(object)
    y[:5] = ["alice:HIV+", None, ["x"], 3.5, "maybe"]
    model = DPMLPClassifier(
        8.0, hidden_layer_sizes=(), classes=("no", "yes"), epochs=2, ledger=False, random_state=0
    ).fit(X, y)
    assert model.classes_.tolist() == ["no", "yes"] and set(model.predict(X).tolist()) <= {"no", "yes"}


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"classes": None}, "classes must be declared"),
        ({"classes": (1, 1)}, "at least two distinct labels"),
        ({"classes": (0, 1), "batch_size": 0}, "batch_size must be a positive whole number"),
        ({"classes": (0, 1), "delta": 0}, "delta must lie in"),
        ({"classes": (0, 1), "clip_norm": -1}, "clip_norm must be positive"),
        ({"classes": (0, 1), "ledger": "ledger.sqlite"}, "ledger must be a kakeibo.accounting.Ledger"),
    ],
)
def test_bad_parameters_are_refused_before_anything_is_charged(kwargs: dict, message: str) -> None:  # type: ignore[type-arg]
    with pytest.raises((ValueError, TypeError), match=message):
        DPMLPClassifier(1.0, random_state=0, **kwargs).fit(np.zeros((10, 2)), np.zeros(10))
