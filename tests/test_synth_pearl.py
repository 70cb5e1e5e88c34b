"""kakeibo.synth.PEARL: the sensitivity of the released embedding, the noise's spread, an audit of the release
(and the same audit refuting a release calibrated to one record when a person has three), one ledger entry
per fit, a class-conditional generator that reproduces a known dependence, and refusals.

Neighbour relation: add or remove one record (one person of at most ``k`` records: ``sensitivity=k``).
Sensitivity: each record's vector ``e_c (x) [1, cos(W x) / sqrt(m), sin(W x) / sqrt(m)]`` has L2 norm sqrt(2)
(module docstring of kakeibo.synth.pearl)."""

from __future__ import annotations

import importlib.util
import math
from typing import Any

import numpy as np
import pytest
from scipy import stats

from kakeibo import Error
from kakeibo.accounting import Ledger
from kakeibo.audit import audit, threshold
from kakeibo.ml import NotFittedError
from kakeibo.noise import resolve_source
from kakeibo.synth import PEARL
from kakeibo.synth.pearl import Encoding, embedding_mechanism, record_vectors, release_embedding

DELTA = 1e-5
SIZES = (5, 3, 8, 2)
ORDINAL = (True, False, True, False)


def _codes(n: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return np.column_stack([rng.integers(0, size, n) for size in SIZES])


def _encoding() -> Encoding:
    return PEARL(ordinal=ORDINAL, label_column=3).encoding(SIZES)


def _frequencies(m: int, scale: float, seed: int) -> np.ndarray:
    return np.random.default_rng(seed).normal(0, 1 / scale, (m, _encoding().width))


def _exact_sums(codes: np.ndarray, frequencies: np.ndarray) -> np.ndarray:
    """The class-blocked sums the release noises, computed here from the definition."""
    encoding = _encoding()
    vectors = record_vectors(encoding.encode(codes), frequencies)
    return np.stack([vectors[codes[:, 3] == c].sum(axis=0) for c in range(2)])


def test_encoding_round_trips_and_scales_ordinals_into_the_unit_interval() -> None:
    encoding, codes = _encoding(), _codes(500, 0)
    points = encoding.encode(codes)
    assert points.shape == (500, 1 + 3 + 1) and points.min() >= 0 and points.max() <= 1
    np.testing.assert_array_equal(encoding.decode(points, codes[:, 3]), codes)
    np.testing.assert_array_equal(points[:, 0], codes[:, 0] / 4)  # ordinal: code / (size - 1)
    np.testing.assert_array_equal(points[:, 1:4].sum(axis=1), 1)  # categorical: one-hot


@pytest.mark.parametrize("scale", [1e-300, 1e-6, 1.0, 1e300])
def test_each_record_moves_the_sum_by_at_most_sqrt2(scale: float) -> None:
    """Every record vector has norm sqrt(2) (to float rounding), so removing one record moves the released
    sums by at most that, and a person of 3 records by at most 3 sqrt(2), for frequencies of any size (phases
    past 1e300, or all zero)."""
    codes = _codes(200, 1)
    frequencies = _frequencies(16, scale, 2)
    norms = np.linalg.norm(record_vectors(_encoding().encode(codes), frequencies), axis=1)
    assert np.all(np.isfinite(norms)) and np.all(np.abs(norms - math.sqrt(2)) < 1e-12)
    whole = _exact_sums(codes, frequencies)
    for i in range(0, 200, 7):
        assert np.linalg.norm(whole - _exact_sums(np.delete(codes, i, axis=0), frequencies)) <= math.sqrt(
            2
        ) * (1 + 1e-12)
    person = np.delete(codes, [3, 4, 5], axis=0)
    assert np.linalg.norm(whole - _exact_sums(person, frequencies)) <= 3 * math.sqrt(2) * (1 + 1e-12)
    assert embedding_mechanism(1.0, DELTA, 3).sensitivity >= 3 * math.sqrt(2)


@pytest.mark.statistical
def test_the_release_is_the_sum_plus_the_gaussians_noise() -> None:
    """120 releases of 2 x 33 values: the noise (release minus the exact sums) has mean 0 and the
    mechanism's variance (t and chi-square tests at 99.9%); the class counts are the first column."""
    codes, frequencies = _codes(300, 3), _frequencies(16, 0.5, 4)
    mechanism = embedding_mechanism(1.0, DELTA, 1)
    exact = _exact_sums(codes, frequencies)
    np.testing.assert_array_equal(exact[:, 0], np.bincount(codes[:, 3], minlength=2))
    source = resolve_source(np.random.default_rng(5))
    ones = np.ones(len(codes), dtype=np.int64)
    noise = np.concatenate(
        [
            (
                release_embedding(codes, ones, _encoding(), frequencies, mechanism, source).noisy - exact
            ).ravel()
            for _ in range(120)
        ]
    )
    assert stats.ttest_1samp(noise, 0.0).pvalue > 1e-3
    chi2 = float(np.sum(noise**2) / mechanism.variance)
    assert stats.chi2.sf(chi2, noise.size) > 5e-4 and stats.chi2.cdf(chi2, noise.size) > 5e-4


#: the claim the audits test: large enough that a few thousand releases show the canary (the exact sampler
#: takes about 2 ms per release of 18 values)
AUDITED = 4.0


def _projections(sensitivity: int, canary_rows: int) -> Any:
    """A sampler of releases on 40 records plus, on ``D'``, ``canary_rows`` copies of a canary, through
    :func:`release_embedding` with the mechanism calibrated to ``sensitivity`` records, projected on the
    direction in which the canary moves the sums."""
    codes, frequencies = _codes(40, 6), _frequencies(4, 0.7, 7)
    canary = np.array([[4, 2, 7, 1]] * canary_rows)
    worlds = {"D": codes, "D'": np.vstack([codes, canary])}
    shift = (_exact_sums(worlds["D'"], frequencies) - _exact_sums(codes, frequencies)).ravel()
    direction = shift / np.linalg.norm(shift)
    mechanism = embedding_mechanism(AUDITED, DELTA, sensitivity)

    def sampler(key: str, count: int, rng: np.random.Generator) -> np.ndarray:
        source, data = resolve_source(rng), worlds[key]
        ones = np.ones(len(data), dtype=np.int64)
        return np.array(
            [
                release_embedding(data, ones, _encoding(), frequencies, mechanism, source).noisy.ravel()
                @ direction
                for _ in range(count)
            ]
        )

    base = float(_exact_sums(codes, frequencies).ravel() @ direction)
    events = [threshold(base + t * mechanism.sigma) for t in np.linspace(-1, 4, 21)]
    return sampler, events


@pytest.mark.statistical
def test_an_audit_of_the_release_finds_no_epsilon_above_the_claim() -> None:
    """1,500 releases per dataset (one canary record), confidence 1 - 1e-3: not refuted at the claim, and
    the audit has power (its bound is well above 0)."""
    sampler, events = _projections(1, 1)
    result = audit(
        sampler,
        "D",
        "D'",
        trials=1_500,
        alpha=1e-3,
        events=events,
        rng=np.random.default_rng(35),
        delta=DELTA,
    )
    assert not result.refutes(AUDITED), result
    assert result.epsilon_lower_bound > 0.5, result


@pytest.mark.statistical
def test_the_audit_refutes_a_release_calibrated_to_one_record_of_a_three_record_person() -> None:
    """The negative control: the canary is a person of 3 records, the mechanism calibrated to 1 (what
    forgetting rows_per_person would do): refuted from 2,500 releases per dataset; calibrated to 3, not
    (800)."""
    sampler, events = _projections(1, 3)
    result = audit(
        sampler,
        "D",
        "D'",
        trials=2_500,
        alpha=1e-3,
        events=events,
        rng=np.random.default_rng(36),
        delta=DELTA,
    )
    assert result.refutes(AUDITED), result
    calibrated, events = _projections(3, 3)  # the same person with the mechanism calibrated to 3 records
    honest = audit(
        calibrated,
        "D",
        "D'",
        trials=800,
        alpha=1e-3,
        events=events,
        rng=np.random.default_rng(37),
        delta=DELTA,
    )
    assert not honest.refutes(AUDITED), honest


def _separated(n: int, seed: int) -> np.ndarray:
    """label 0: ordinal a in {0, 1, 2}; label 1: a in {5, 6, 7}; b categorical, independent."""
    rng = np.random.default_rng(seed)
    label = rng.integers(0, 2, n)
    a = np.where(label == 0, rng.integers(0, 3, n), rng.integers(5, 8, n))
    return np.column_stack([a, rng.integers(0, 3, n), label])


def _share_on_its_side(model: PEARL) -> float:
    rows = model.sample(2_000, random_state=0)
    return float(np.mean(np.where(rows[:, 2] == 0, rows[:, 0] <= 3, rows[:, 0] >= 4)))


def test_a_fit_is_one_ledger_entry_and_the_generator_learns_the_classes() -> None:
    """At epsilon 8 on 4,000 records the generator puts at least 90% of each class's rows on its side of a
    (a control: the same network untrained, one step, does not), the class shares within 0.05, and the
    charge is the embedding mechanism's; sampling is free and reproducible."""
    ledger = Ledger(":memory:", budget=(10, 1e-4), composition="rdp")
    codes = _separated(4_000, 8)
    settings: dict[str, Any] = {"ordinal": (True, False, False), "label_column": 2, "random_state": 0}
    model = PEARL(8.0, DELTA, steps=300, ledger=ledger, dataset="separated", **settings).fit(codes, (8, 3, 2))
    [entry] = ledger.entries()
    assert entry.loss == model.privacy_loss_ == embedding_mechanism(8.0, DELTA, 1).ledger_loss
    assert entry.dataset == "separated"
    assert _share_on_its_side(model) >= 0.9
    assert abs(model.model_.shares[1] - codes[:, 2].mean()) < 0.05
    np.testing.assert_array_equal(model.sample(50, random_state=3), model.sample(50, random_state=3))
    assert len(ledger.entries()) == 1
    untrained = PEARL(8.0, DELTA, steps=1, ledger=False, **settings).fit(codes, (8, 3, 2))
    assert _share_on_its_side(untrained) < 0.9


@pytest.mark.parametrize(
    ("settings", "sizes", "fragment"),
    [
        ({"ordinal": (True,)}, (3, 2), "2 flags"),
        ({"ordinal": (1, 0)}, (3, 2), "2 flags"),
        ({"label_column": 2}, (3, 2), "label_column"),
        ({"label_column": True}, (3, 2), "label_column"),
        ({"label_column": 0}, (3,), "besides the label"),
        ({"frequencies": 0}, (3, 2), "frequencies"),
        ({"length_scales": 0}, (3, 2), "length_scales"),
        ({"length_scale": -1.0}, (3, 2), "length_scale"),
        ({"critic_every": -1}, (3, 2), "critic_every"),
        ({"hidden": (8, 0)}, (3, 2), "hidden"),
        ({"learning_rate": 0.0}, (3, 2), "learning_rate"),
        ({}, (3, 0), "each size"),
        ({}, (), "at least one column"),
    ],
)
def test_bad_parameters_are_refused_with_a_sentence_before_any_charge(
    settings: dict[str, Any], sizes: tuple[int, ...], fragment: str
) -> None:
    ledger = Ledger(":memory:", budget=(2, 1e-4))
    with pytest.raises(Error, match=fragment):
        PEARL(1.0, DELTA, ledger=ledger, **settings).fit(np.zeros((4, len(sizes)), dtype=int), sizes)
    assert ledger.entries() == []


def test_bad_data_and_budgets_are_refused_before_any_charge() -> None:
    ledger = Ledger(":memory:", budget=(2, 1e-4))
    for codes, sizes in ((np.full((4, 2), 3), (3, 2)), (np.zeros((4, 2)), (3, 2))):
        with pytest.raises(Error):
            PEARL(1.0, DELTA, ledger=ledger).fit(codes, sizes)
    for epsilon, delta in ((0.0, DELTA), (1.0, 0.0), (1.0, 1.0), (5.0, DELTA)):  # 5: past the budget
        with pytest.raises(Error):
            PEARL(epsilon, delta, ledger=ledger).fit(np.zeros((4, 2), dtype=int), (3, 2))
    assert ledger.entries() == []
    with pytest.raises(NotFittedError):
        PEARL().sample(3)


def test_a_machine_without_jax_is_refused_before_any_charge(monkeypatch: pytest.MonkeyPatch) -> None:
    """The training after the release needs JAX: without it, the fit is refused before the charge (else the
    release would be paid for and fail)."""
    real = importlib.util.find_spec

    def without_jax(name: str, *rest: Any) -> Any:
        return None if name == "jax" else real(name, *rest)

    monkeypatch.setattr(importlib.util, "find_spec", without_jax)
    ledger = Ledger(":memory:", budget=(2, 1e-4))
    with pytest.raises(Error, match=r"pip install .kakeibo\[deep\]."):
        PEARL(1.0, DELTA, ledger=ledger).fit(np.zeros((4, 2), dtype=int), (3, 2))
    assert ledger.entries() == []
