"""kakeibo.synth.MST: the budget split composes to the charged rho, one ledger entry per fit, an audit of the
measurements with a canary record (and the same audit refuting a fit whose 2-way marginals skip the
noise), the tree it finds and the marginals it reproduces on data with a known chain, and refusals.

Neighbour relation: add or remove one record. Sensitivities: each marginal moves by 1 in L2, each selection
utility by at most 1 (module docstring of kakeibo.synth.mst)."""

from __future__ import annotations

import math
from fractions import Fraction
from typing import Any

import numpy as np
import pytest

from kakeibo import Error
from kakeibo.accounting import Ledger
from kakeibo.audit import audit
from kakeibo.ml import NotFittedError
from kakeibo.noise import resolve_source
from kakeibo.privacy import zcdp_epsilon
from kakeibo.synth import MST, rho_for
from kakeibo.synth import mst as mst_module

EPSILON, DELTA = 1.0, 1e-6
DOMAIN = (2, 2, 2)


def _chain(n: int, seed: int) -> np.ndarray:
    """a uniform on 4 values; b = a with probability 0.8; c = b mod 2 with probability 0.8; e independent."""
    rng = np.random.default_rng(seed)
    a = rng.integers(0, 4, n)
    b = np.where(rng.random(n) < 0.8, a, rng.integers(0, 4, n))
    c = np.where(rng.random(n) < 0.8, b % 2, rng.integers(0, 2, n))
    return np.column_stack([a, b, c, rng.integers(0, 3, n)])


def tvd(x: np.ndarray, y: np.ndarray, columns: tuple[int, ...], sizes: tuple[int, ...]) -> float:
    """The total variation distance between the marginals of ``columns`` of two coded tables."""
    shape = tuple(sizes[c] for c in columns)
    counts = [
        np.bincount(np.ravel_multi_index(tuple(z[:, c] for c in columns), shape), minlength=math.prod(shape))
        / len(z)
        for z in (x, y)
    ]
    return float(np.abs(counts[0] - counts[1]).sum() / 2)


def test_rho_is_the_largest_that_converts_to_the_request() -> None:
    for epsilon, delta in ((0.2, 1e-5), (1.0, 1e-6), (10.0, 1e-9)):
        rho = rho_for(epsilon, delta)
        assert zcdp_epsilon(float(rho), delta) <= epsilon
        assert zcdp_epsilon(float(rho) * (1 + 1e-4), delta) > epsilon  # 6 digits: within 1e-5 relative


def spy_zcdp(monkeypatch: pytest.MonkeyPatch, module: Any) -> list[float]:
    """The zCDP of every DiscreteGaussian and Exponential ``module``'s fits release (permute-and-flip at e
    counted as e^2 / 2), appended as they release."""
    spent: list[float] = []
    gaussian, exponential = module.DiscreteGaussian, module.Exponential

    class CountedGaussian(gaussian):  # type: ignore[misc, valid-type]
        def release(self, value: Any, rng: Any = None) -> Any:
            spent.append(self.rho)
            return super().release(value, rng)

    class CountedExponential(exponential):  # type: ignore[misc, valid-type]
        def release(self, value: Any, rng: Any = None) -> int:
            spent.append(self.epsilon**2 / 2)
            return int(super().release(value, rng))

    monkeypatch.setattr(module, "DiscreteGaussian", CountedGaussian)
    monkeypatch.setattr(module, "Exponential", CountedExponential)
    return spent


def test_the_measurements_compose_to_the_charged_rho(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every DiscreteGaussian and Exponential the fit builds, summed as zCDP (permute-and-flip at e:
    e^2 / 2), is at most the rho the ledger is charged."""
    spent = spy_zcdp(monkeypatch, mst_module)
    codes = _chain(500, 1)
    model = MST(EPSILON, DELTA, ledger=False, random_state=0).fit(codes, sizes=(4, 4, 2, 3))
    assert len(spent) == 4 + 3 + 3  # four 1-way, three picks, three 2-way
    assert sum(spent) <= float(model.rho_) * (1 + 1e-12)
    assert sum(spent) >= float(model.rho_) * (1 - 1e-9)


def test_a_fit_is_one_ledger_entry_with_its_zcdp_curve() -> None:
    ledger = Ledger(":memory:", budget=(2, 1e-5), composition="rdp")
    model = MST(EPSILON, DELTA, ledger=ledger, dataset="chain", random_state=0).fit(
        _chain(300, 2), sizes=(4, 4, 2, 3)
    )
    [entry] = ledger.entries()
    assert entry.loss == model.privacy_loss_
    assert entry.loss.curve.rho == model.rho_ == rho_for(EPSILON, DELTA)
    assert float(entry.loss.declared.epsilon) <= EPSILON and float(entry.loss.declared.delta) == DELTA
    model.sample(1_000, random_state=0)  # sampling is free
    assert len(ledger.entries()) == 1


#: the audits' claim: large enough that the 2-way noise (sigma about 1.9) lets the canary show
AUDITED = 8.0


def _release(
    canary: int, n: int, rng: np.random.Generator, epsilon: float = AUDITED, measure: Any = None
) -> np.ndarray:
    """n fits' releases at ``epsilon`` on 20 records of (0, 0, 0), plus the canary (1, 1, 1) when
    ``canary``, coded as ``first edge * 10**5 + noisy count of that edge's cell (1, 1)``: a function of what
    the fit releases (the first pick and one noisy 2-way count)."""
    data = np.zeros((20 + canary, 3), dtype=np.int64)
    data[20:] = 1
    rho = rho_for(epsilon, DELTA)
    ones = np.ones(len(data), dtype=np.int64)
    source = resolve_source(rng)
    out = np.empty(n, dtype=np.int64)
    for i in range(n):
        _, edges, pairs = (measure or mst_module._measure)(data, ones, DOMAIN, rho, 1, source)
        first = edges[0]
        pair = [(0, 1), (0, 2), (1, 2)].index(first)
        out[i] = pair * 10**5 + int(np.clip(pairs[first][1, 1], -49_999, 49_999)) + 50_000
    return out


@pytest.mark.statistical
def test_an_audit_of_the_measurements_finds_no_epsilon_above_the_claim() -> None:
    """1,000 fits per dataset (events chosen on 300 more), 95% confidence: the audit sees the canary (a
    lower bound above 0) and stays below the claim."""
    result = audit(
        _release, 0, 1, trials=1_000, selection_trials=300, rng=np.random.default_rng(35), delta=DELTA
    )
    assert result.epsilon_lower_bound > 0.1 and not result.refutes(AUDITED), result


@pytest.mark.statistical
def test_the_audit_refutes_two_way_marginals_without_noise() -> None:
    """The negative control: the same audit at epsilon 1, with the 2-way marginals released exactly, refutes
    the claim (300 trials bound epsilon by about ln 300 from below, so the control runs at a small claim)."""

    def exact_pairs(
        data: np.ndarray, counts: np.ndarray, domain: tuple[int, ...], rho: Fraction, k: int, source: Any
    ) -> Any:
        ones, edges, _ = mst_module._measure(data, counts, domain, rho, k, source)
        exact = {edge: mst_module.marginal_counts(data, counts, domain, edge).astype(float) for edge in edges}
        return ones, edges, exact

    def leaky(canary: int, n: int, rng: np.random.Generator) -> np.ndarray:
        return _release(canary, n, rng, EPSILON, exact_pairs)

    result = audit(leaky, 0, 1, trials=300, selection_trials=300, rng=np.random.default_rng(36), delta=DELTA)
    assert result.refutes(EPSILON), result


def test_the_tree_follows_the_chain_and_the_marginals_are_close() -> None:
    codes, sizes = _chain(20_000, 3), (4, 4, 2, 3)
    model = MST(10.0, DELTA, ledger=False, random_state=4).fit(codes, sizes=sizes)
    assert {(0, 1), (1, 2)} <= set(model.model_.edges)
    synthetic = model.sample(50_000, random_state=5)
    for columns in ((0,), (1,), (2,), (3,), (0, 1), (1, 2), (0, 2)):
        assert tvd(codes, synthetic, columns, sizes) < 0.03, columns
    shuffle = np.random.default_rng(6)
    independent = np.column_stack([shuffle.permutation(codes[:, j]) for j in range(4)])
    assert tvd(codes, independent, (0, 1), sizes) > 0.5  # the pair is far from independent


def test_sampling_allocates_each_value_its_share_to_within_a_row() -> None:
    """Sampling is post-processing, so it may allocate instead of drawing row by row: the root attribute's
    counts are within one row of n times its distribution, and each child's counts among the rows of one
    parent value within one row of their share (independent draws would miss by about sqrt(n p))."""
    model = MST(10.0, DELTA, ledger=False, random_state=4).fit(_chain(5_000, 3), sizes=(4, 4, 2, 3))
    fitted = model.model_
    assert (0, 1) in fitted.edges  # the chain's first link: attribute 0 is 1's parent in the walk from 0
    n = 10_001
    synthetic = model.sample(n, random_state=7)
    assert np.all(np.abs(np.bincount(synthetic[:, 0], minlength=4) - n * fitted.marginals[0]) < 1)
    conditional = fitted.tables[(0, 1)] / fitted.tables[(0, 1)].sum(axis=1, keepdims=True)
    for value in range(4):
        rows = synthetic[synthetic[:, 0] == value, 1]
        assert np.all(np.abs(np.bincount(rows, minlength=4) - len(rows) * conditional[value]) < 1)


def test_one_attribute_spends_everything_on_its_marginal() -> None:
    model = MST(5.0, DELTA, ledger=False, random_state=0).fit(np.zeros((50, 1), dtype=int), sizes=(3,))
    assert model.model_.edges == () and model.model_.marginals[0].argmax() == 0
    assert model.sample(10, random_state=0).shape == (10, 1)


@pytest.mark.parametrize(
    ("codes", "sizes", "fragment"),
    [
        (np.zeros((4, 2)), (2, 2), "whole numbers"),
        (np.zeros((4, 2), dtype=int), (2,), "one column per size"),
        (np.full((4, 2), 2), (2, 2), r"in \[0, size\)"),
        (np.full((4, 2), -1), (2, 2), r"in \[0, size\)"),
        (np.zeros((4, 2), dtype=int), (2, 0), "each size"),
    ],
)
def test_bad_data_is_refused_with_a_sentence(
    codes: np.ndarray, sizes: tuple[int, ...], fragment: str
) -> None:
    with pytest.raises(Error, match=fragment):
        MST(1.0, DELTA, ledger=False).fit(codes, sizes=sizes)


def test_bad_parameters_are_refused_before_any_charge() -> None:
    ledger = Ledger(":memory:", budget=(2, 1e-5))
    for epsilon, delta in ((0.0, DELTA), (1.0, 0.0), (1.0, 1.0)):
        with pytest.raises(Error):
            MST(epsilon, delta, ledger=ledger).fit(np.zeros((4, 2), dtype=int), sizes=(2, 2))
    assert ledger.entries() == []
    with pytest.raises(NotFittedError):
        MST().sample(3)
