"""kakeibo.synth.AIM: every round's mechanisms compose to exactly the charged rho whatever the data (the
number of rounds varies), one ledger entry per fit, an audit of the measurements with a canary record (and
the same audit refuting a fit whose measurements skip the noise), the model size cap, the workload's
weights, accuracy where MST's tree falls short, and refusals.

Neighbour relation: add or remove one record. Sensitivities: each marginal moves by 1 in L2 and L1, each
pick's utility by at most max w_r (module docstring of kakeibo.synth.aim)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from kakeibo import Error
from kakeibo.accounting import Ledger
from kakeibo.audit import audit
from kakeibo.ml import NotFittedError
from kakeibo.noise import resolve_source
from kakeibo.synth import AIM, MST, rho_for
from kakeibo.synth import aim as aim_module
from kakeibo.synth.pgm import model_cells
from test_synth_mst import _chain, spy_zcdp
from test_synth_mst import tvd as tvd_of

EPSILON, DELTA = 1.0, 1e-6
SIZES = (4, 4, 2, 3)


def test_the_rounds_compose_to_the_charged_rho_whatever_the_data(monkeypatch: pytest.MonkeyPatch) -> None:
    spent = spy_zcdp(monkeypatch, aim_module)
    draws = []
    for codes in (_chain(2_000, 1), np.zeros((50, 4), dtype=np.int64)):
        spent.clear()
        model = AIM(EPSILON, DELTA, ledger=False, random_state=0, iterations=20, final_iterations=20)
        model.fit(codes, sizes=SIZES)
        assert sum(spent) <= float(model.rho_) * (1 + 1e-12)
        assert sum(spent) >= float(model.rho_) * (1 - 1e-9)
        draws.append(len(spent))
    assert draws[0] != draws[1]  # annealing depends on the data; the total does not


def test_a_fit_is_one_ledger_entry_with_its_zcdp_curve() -> None:
    ledger = Ledger(":memory:", budget=(2, 1e-5), composition="rdp")
    model = AIM(EPSILON, DELTA, ledger=ledger, dataset="chain", random_state=0).fit(
        _chain(300, 2), sizes=SIZES
    )
    [entry] = ledger.entries()
    assert entry.loss == model.privacy_loss_
    assert entry.loss.curve.rho == model.rho_ == rho_for(EPSILON, DELTA)
    assert float(entry.loss.declared.epsilon) <= EPSILON and float(entry.loss.declared.delta) == DELTA
    model.sample(1_000, random_state=0)
    assert len(ledger.entries()) == 1


#: the audits' claim, large enough that the canary shows through the rounds' noise
AUDITED = 8.0
AUDIT_SIZES = (2, 2, 2)


def _release(canary: int, n: int, rng: np.random.Generator, epsilon: float = AUDITED) -> np.ndarray:
    """n fits at ``epsilon`` on 20 records of (0, 0, 0), plus the canary (1, 1, 1) when ``canary``; each
    coded as the inverse-variance average, over every measurement holding attribute 0, of its noisy count
    of attribute 0 = 1 (a function of what the fit releases; inference kept to 2 steps, which is
    post-processing and changes no privacy)."""
    data = np.zeros((20 + canary, 3), dtype=np.int64)
    data[20:] = 1
    ones = np.ones(len(data), dtype=np.int64)
    plan = aim_module.workload(AUDIT_SIZES, None, 2, 2**10)
    rho = rho_for(epsilon, DELTA)
    source = resolve_source(rng)
    out = np.empty(n)
    seen: list[Any] = []
    estimate = aim_module.estimate

    def spy(sizes: Any, measurements: Any, iterations: int, warm: Any = None) -> Any:
        seen[:] = measurements
        return estimate(sizes, measurements, iterations, warm)

    aim_module.estimate = spy
    try:
        for i in range(n):
            aim_module.fit_aim(
                data,
                ones,
                AUDIT_SIZES,
                rho,
                1,
                plan,
                source,
                max_cells=2**10,
                iterations=2,
                final_iterations=1,
            )
            out[i] = _first_value(seen)
    finally:
        aim_module.estimate = estimate
    return out


def _first_value(measurements: Any) -> float:
    weights = values = 0.0
    for m in measurements:
        if 0 in m.clique:
            count = float(m.values.take(1, axis=m.clique.index(0)).sum())
            weights += 1 / (m.values.size / AUDIT_SIZES[0] * m.sigma**2)
            values += count / (m.values.size / AUDIT_SIZES[0] * m.sigma**2)
    return round(values / weights, 1)


@pytest.mark.statistical
def test_an_audit_of_the_measurements_finds_no_epsilon_above_the_claim() -> None:
    """600 fits per dataset (events chosen on 200 more), 95% confidence: the audit sees the canary (a lower
    bound above 0) and stays below the claim."""
    result = audit(
        _release, 0, 1, trials=600, selection_trials=200, rng=np.random.default_rng(35), delta=DELTA
    )
    assert result.epsilon_lower_bound > 0.1 and not result.refutes(AUDITED), result


@pytest.mark.statistical
def test_the_audit_refutes_measurements_without_noise(monkeypatch: pytest.MonkeyPatch) -> None:
    """The negative control: the same audit at epsilon 1 with every measurement released exactly refutes."""

    class Exact(aim_module.DiscreteGaussian):  # type: ignore[misc, name-defined]
        def release(self, value: Any, rng: Any = None) -> Any:
            return np.asarray(value)

    monkeypatch.setattr(aim_module, "DiscreteGaussian", Exact)

    def leaky(canary: int, n: int, rng: np.random.Generator) -> np.ndarray:
        return _release(canary, n, rng, EPSILON)

    result = audit(leaky, 0, 1, trials=200, selection_trials=100, rng=np.random.default_rng(36), delta=DELTA)
    assert result.refutes(EPSILON), result


def test_the_model_never_outgrows_max_cells() -> None:
    """Every 2-way marginal of 8 attributes of 6 values is a candidate; the cap keeps the junction tree at
    most max_cells, and without the cap the same data grows past it (a control)."""
    rng = np.random.default_rng(3)
    base = rng.integers(0, 6, 3_000)
    codes = np.column_stack([(base + rng.integers(0, 2, 3_000) * j) % 6 for j in range(8)])
    sizes = (6,) * 8
    capped = AIM(10.0, DELTA, max_cells=300, ledger=False, random_state=1, iterations=20).fit(codes, sizes)
    free = AIM(10.0, DELTA, max_cells=2**20, ledger=False, random_state=1, iterations=20).fit(codes, sizes)
    assert sum(t.size for t in capped.model_.marginals) <= 300
    assert model_cells(sizes, capped.model_.tree.cliques) <= 300
    assert sum(t.size for t in free.model_.marginals) > 300


def test_candidate_weights_count_the_workload_attributes_they_share() -> None:
    """w_r = sum_s c_s |r cap s| (AIM, Sec. 4.2), here for the workload {(0, 1): 1, (1, 2): 2}."""
    plan = aim_module.workload((2, 3, 4), {(0, 1): 1.0, (1, 2): 2.0}, 2, 2**20)
    weights = dict(zip(plan.candidates, plan.weights, strict=True))
    assert weights == {(0,): 1.0, (1,): 3.0, (2,): 2.0, (0, 1): 4.0, (1, 2): 5.0}
    assert plan.sensitivity == 5.0
    assert aim_module.workload((2, 3, 4), [(0, 1), (1, 2)], 2, 6).candidates == ((0,), (0, 1), (1,), (2,))


def tvd(x: np.ndarray, y: np.ndarray, columns: tuple[int, ...]) -> float:
    """test_synth_mst's distance on this module's :data:`SIZES`."""
    return tvd_of(x, y, columns, SIZES)


def _triangle(n: int, seed: int) -> np.ndarray:
    """a uniform on 4 values, b = a half the time, c (2 values) a function of a or of b (noisy), e
    independent: the three pairs of (a, b, c) are all dependent and no tree of pairs holds their joint."""
    rng = np.random.default_rng(seed)
    a = rng.integers(0, 4, n)
    b = np.where(rng.random(n) < 0.5, a, rng.integers(0, 4, n))
    c = np.where(rng.random(n) < 0.5, (a + 1) % 4, (b + 2) % 4)
    c = np.where(rng.random(n) < 0.5, c % 2, rng.integers(0, 2, n))
    return np.column_stack([a, b, c, rng.integers(0, 3, n)])


def test_aim_fits_what_a_tree_cannot() -> None:
    """At epsilon 2 on 20,000 records whose pairs form a triangle: AIM measures all three pairs and holds
    every 1- and 2-way marginal within 0.02 and the 3-way within 0.03 (seeds 0-2); MST's tree leaves one pair
    and the 3-way marginal at least 0.05 away (the control: what a model without the third pair does)."""
    codes = _triangle(20_000, 3)
    for seed in range(3):
        aim = AIM(2.0, DELTA, ledger=False, random_state=seed).fit(codes, sizes=SIZES).sample(20_000, seed)
        mst = MST(2.0, DELTA, ledger=False, random_state=seed).fit(codes, sizes=SIZES).sample(20_000, seed)
        for columns in ((0,), (1,), (2,), (3,), (0, 1), (1, 2), (0, 2), (0, 3)):
            assert tvd(codes, aim, columns) < 0.02, (seed, columns)
        assert tvd(codes, aim, (0, 1, 2)) < 0.03
        assert max(tvd(codes, mst, p) for p in ((0, 1), (1, 2), (0, 2))) > 0.05
        assert tvd(codes, mst, (0, 1, 2)) > 0.05


def test_the_model_saves_and_reloads_the_same_samples() -> None:
    from kakeibo.synth.pgm import GraphicalModel

    model = AIM(EPSILON, DELTA, ledger=False, random_state=0).fit(_chain(1_000, 4), sizes=SIZES)
    loaded = GraphicalModel.from_bytes(model.model_.to_bytes())
    rng = [np.random.default_rng(9) for _ in range(2)]
    assert np.array_equal(loaded.sample(500, rng[0]), model.model_.sample(500, rng[1]))


@pytest.mark.parametrize(
    ("settings", "fragment"),
    [
        ({"workload": [(0, 5)]}, "distinct columns"),
        ({"workload": [(0, 0)]}, "distinct columns"),
        ({"workload": [()]}, "distinct columns"),
        ({"workload": {(0, 1): -1.0}}, "positive finite"),
        ({"workload": {(0, 1): float("nan")}}, "positive finite"),
        ({"degree": 0}, "degree"),
        ({"max_cells": 0}, "max_cells"),
        ({"max_cells": 2**25}, "at most"),
        ({"max_cells": 2, "workload": [(0, 1)]}, "no marginal"),
        ({"iterations": 0}, "iterations"),
        ({"final_iterations": -1}, "final_iterations"),
        ({"epsilon": 0.0}, "epsilon"),
        ({"delta": 1.0}, "delta"),
    ],
)
def test_bad_parameters_are_refused_before_any_charge(settings: dict[str, Any], fragment: str) -> None:
    ledger = Ledger(":memory:", budget=(2, 1e-5))
    with pytest.raises(Error, match=fragment):
        AIM(**{"ledger": ledger, **settings}).fit(np.zeros((4, 4), dtype=int), sizes=SIZES)
    assert ledger.entries() == []


def test_too_many_candidates_are_refused_and_an_unfitted_model_does_not_sample() -> None:
    with pytest.raises(Error, match="marginals a fit considers"):
        AIM(degree=3, ledger=False).fit(np.zeros((4, 60), dtype=int), sizes=(2,) * 60)
    with pytest.raises(NotFittedError):
        AIM().sample(3)
