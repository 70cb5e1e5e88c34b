"""kakeibo.synth.PrivBayes: the count, the picks and the marginals compose to exactly the charged epsilon
(pure DP: a pure-epsilon ledger takes it), the score's sensitivity of 4 per record, an audit of the releases
with a canary record (and the same audit refuting marginals without noise), the network and marginals it
finds on chained data, and refusals.

Neighbour relation: add or remove one record. Sensitivities: the count and each marginal move by 1 in L1,
each score by at most 4 (module docstring of kakeibo.synth.privbayes)."""

from __future__ import annotations

from fractions import Fraction
from typing import Any

import numpy as np
import pytest

from kakeibo import Error
from kakeibo.accounting import Ledger
from kakeibo.audit import audit
from kakeibo.ml import NotFittedError
from kakeibo.noise import resolve_source
from kakeibo.privacy import PureDP
from kakeibo.synth import PrivBayes
from kakeibo.synth import privbayes as privbayes_module
from kakeibo.synth.privbayes import BayesNetwork, fit_network
from test_synth_aim import tvd
from test_synth_mst import _chain

SIZES = (4, 4, 2, 3)


def test_the_releases_compose_to_exactly_the_charged_epsilon(monkeypatch: pytest.MonkeyPatch) -> None:
    spent: list[Fraction] = []
    geometric, exponential = privbayes_module.Geometric, privbayes_module.Exponential

    class CountedGeometric(geometric):  # type: ignore[misc, valid-type]
        def release(self, value: Any, rng: Any = None) -> Any:
            spent.append(self.privacy_loss.epsilon)
            return super().release(value, rng)

    class CountedExponential(exponential):  # type: ignore[misc, valid-type]
        def release(self, value: Any, rng: Any = None) -> int:
            spent.append(self.privacy_loss.epsilon)
            return int(super().release(value, rng))

    monkeypatch.setattr(privbayes_module, "Geometric", CountedGeometric)
    monkeypatch.setattr(privbayes_module, "Exponential", CountedExponential)
    ledger = Ledger(":memory:", budget=2.0)  # a pure-epsilon budget: PrivBayes needs no delta
    model = PrivBayes(1.5, ledger=ledger, random_state=0).fit(_chain(2_000, 1), sizes=SIZES)
    assert len(spent) == 1 + 3 + 4  # the count, three picks, four marginals
    assert sum(spent) == Fraction(3, 2)
    [entry] = ledger.entries()
    assert entry.loss == model.privacy_loss_ == PureDP(1.5)
    model.sample(100, random_state=0)
    assert len(ledger.entries()) == 1


def test_one_record_moves_a_score_by_at_most_four() -> None:
    """Random joints (and the empty one): adding a record to any cell moves the score by at most 4; the bound
    is nearly reached (above 3) on some of them, so the analysis is not loose by much."""
    rng = np.random.default_rng(5)
    worst = 0.0
    for trial in range(2_000):
        shape = (int(rng.integers(2, 5)), int(rng.integers(1, 4)), int(rng.integers(1, 4)))
        joint = rng.integers(0, 4, shape) * (rng.random(shape) < 0.5) if trial else np.zeros(shape, np.int64)
        added = joint.copy()
        added[tuple(int(rng.integers(s)) for s in shape)] += 1
        before = privbayes_module._score(joint, float(joint.sum()))
        after = privbayes_module._score(added, float(added.sum()))
        worst = max(worst, abs(after - before))
    assert 3.0 < worst <= 4.0, worst


AUDITED = 8.0
AUDIT_SIZES = (2, 2, 2)


def _release(canary: int, n: int, rng: np.random.Generator, epsilon: float = AUDITED) -> np.ndarray:
    """n fits at ``epsilon`` on 20 records of (0, 0, 0), plus the canary (1, 1, 1) when ``canary``; each
    coded as the noisy count of value 1 in the first attribute's marginal (a released table)."""
    data = np.zeros((20 + canary, 3), dtype=np.int64)
    data[20:] = 1
    ones = np.ones(len(data), dtype=np.int64)
    source = resolve_source(rng)
    out = np.empty(n)
    for i in range(n):
        network = fit_network(data, ones, AUDIT_SIZES, epsilon, 1, source, degree=2, max_cells=8)
        out[i] = network.total * network.tables[0][0, 1]  # noisy mass of value 1, rescaled
    return np.round(out, 1)


@pytest.mark.statistical
def test_an_audit_of_the_releases_finds_no_epsilon_above_the_claim() -> None:
    """1,000 fits per dataset (events chosen on 300 more), 95% confidence."""
    result = audit(
        _release, 0, 1, trials=1_000, selection_trials=300, rng=np.random.default_rng(35), delta=1e-6
    )
    assert result.epsilon_lower_bound > 0.1 and not result.refutes(AUDITED), result


@pytest.mark.statistical
def test_the_audit_refutes_marginals_without_noise(monkeypatch: pytest.MonkeyPatch) -> None:
    class Exact(privbayes_module.Geometric):  # type: ignore[misc, name-defined]
        def release(self, value: Any, rng: Any = None) -> Any:
            return np.asarray(value)

    monkeypatch.setattr(privbayes_module, "Geometric", Exact)

    def leaky(canary: int, n: int, rng: np.random.Generator) -> np.ndarray:
        return _release(canary, n, rng, 1.0)

    result = audit(leaky, 0, 1, trials=300, selection_trials=300, rng=np.random.default_rng(36), delta=1e-6)
    assert result.refutes(1.0), result


def test_the_network_follows_the_chain_and_the_marginals_are_close() -> None:
    """At epsilon 10 on 20,000 chained records: every attribute after the first has the one parent the chain
    gives it among those chosen, and every 1- and 2-way marginal within 0.05; an independent table is not."""
    codes = _chain(20_000, 3)
    model = PrivBayes(10.0, degree=1, ledger=False, random_state=4).fit(codes, sizes=SIZES)
    network = model.model_
    links = {frozenset((a, p[0])) for a, p in zip(network.order, network.parents, strict=True) if p}
    assert {frozenset((0, 1)), frozenset((1, 2))} <= links
    synthetic = model.sample(50_000, random_state=5)
    for columns in ((0,), (1,), (2,), (3,), (0, 1), (1, 2), (0, 2)):
        assert tvd(codes, synthetic, columns) < 0.05, columns
    shuffle = np.random.default_rng(6)
    independent = np.column_stack([shuffle.permutation(codes[:, j]) for j in range(4)])
    assert tvd(codes, independent, (0, 1)) > 0.5


def test_the_usefulness_rule_keeps_small_data_to_small_tables() -> None:
    """theta-usefulness (step 0): 40 records at epsilon 1 cannot afford a parent of 4 values (16 cells of
    noise scale d / epsilon_2 each), 100,000 records can; the cap is never below the largest column."""
    sizes = (4, 4, 4)
    mechanisms = privbayes_module.network_mechanisms(1.0, 3, 1)
    assert privbayes_module.useful_cells(sizes, 40.0, mechanisms.distributions, 2**16) == 4
    assert privbayes_module.useful_cells(sizes, 100_000.0, mechanisms.distributions, 2**16) >= 64
    assert privbayes_module.useful_cells(sizes, -5.0, mechanisms.distributions, 2**16) == 4
    small = PrivBayes(1.0, ledger=False, random_state=0).fit(_chain(40, 7), sizes=SIZES).model_
    assert all(
        not parents or SIZES[a] * 4 <= 4 for a, parents in zip(small.order, small.parents, strict=True)
    )


def test_the_model_saves_and_reloads_the_same_samples() -> None:
    model = PrivBayes(2.0, ledger=False, random_state=0).fit(_chain(3_000, 8), sizes=SIZES).model_
    loaded = BayesNetwork.from_bytes(model.to_bytes())
    assert loaded.order == model.order and loaded.parents == model.parents and loaded.total == model.total
    assert np.array_equal(
        loaded.sample(500, np.random.default_rng(1)), model.sample(500, np.random.default_rng(1))
    )


@pytest.mark.parametrize(
    ("settings", "fragment"),
    [
        ({"epsilon": 0.0}, "epsilon"),
        ({"epsilon": float("nan")}, "epsilon"),
        ({"degree": 0}, "degree"),
        ({"max_cells": 0}, "max_cells"),
        ({"max_cells": 3}, "at least the largest column"),
        ({"epsilon": 1e-12}, "too small for the exact selection sampler"),
    ],
)
def test_bad_parameters_are_refused_before_any_charge(settings: dict[str, Any], fragment: str) -> None:
    ledger = Ledger(":memory:", budget=2.0)
    with pytest.raises(Error, match=fragment):
        PrivBayes(**{"ledger": ledger, **settings}).fit(np.zeros((4, 4), dtype=int), sizes=SIZES)
    assert ledger.entries() == []
    with pytest.raises(NotFittedError):
        PrivBayes().sample(3)
