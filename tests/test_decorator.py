"""``@private``: the choke point. Public refusals (budget, repeated request id, a wrong call) cost nothing;
once the query has seen the data every outcome is charged and released (a failure as the public default).
The attacks on that order are in ``test_adversarial_decorator.py``."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import pytest

from kakeibo import Release, private
from kakeibo.accounting import BudgetExceeded, DuplicateRequest, Ledger
from kakeibo.mechanisms import Gaussian, Laplace
from kakeibo.privacy import ApproxDP, PureDP


@pytest.fixture
def ledger(tmp_path: Path) -> Ledger:
    return Ledger(tmp_path / "ledger.sqlite", budget=ApproxDP(1, 1e-6))


def test_release_is_charged_and_carries_its_error_bound(ledger: Ledger) -> None:
    mechanism = Laplace(sensitivity=1, epsilon=0.25)

    @private(mechanism=mechanism, ledger=ledger, analyst="ana", dataset="ages")
    def count(xs: list[int]) -> float:
        return float(len(xs))

    r = count([1, 2, 3], rng=np.random.default_rng(0))
    assert isinstance(r, Release)
    assert r.privacy_loss == PureDP(0.25) and r.mechanism == "Laplace" and r.seeded
    assert r.error_bound == mechanism.error_bound(1 - 0.95) and r.confidence == 0.95
    low, high = r.confidence_interval
    assert low == r.value - r.error_bound and high == r.value + r.error_bound
    assert ledger.remaining() == ApproxDP(0.75, 1e-6)
    [entry] = ledger.entries()
    assert entry == r.ledger_entry and entry.label.endswith("count") and entry.analyst == "ana"
    assert not count([1], request_id=None).seeded  # rng=None: the secure source


def test_invalid_answer_is_charged_and_released_as_the_default(ledger: Ledger) -> None:
    """Was ``test_invalid_answer_costs_nothing``: a NaN answer raised a free ValueError, which told the
    analyst something about the data. Now it is charged and the public default (0) is released."""

    @private(mechanism=Laplace(sensitivity=1, epsilon=0.5), ledger=ledger)
    def broken(_: object) -> float:
        return float("nan")

    r = broken(None, rng=np.random.default_rng(0))
    assert isinstance(r.value, float) and np.isfinite(r.value)
    assert r.value == Laplace(sensitivity=1, epsilon=0.5).release(0.0, rng=np.random.default_rng(0))
    assert len(ledger.entries()) == 1 and ledger.remaining() == ApproxDP(0.5, 1e-6)


def test_query_error_is_charged_and_does_not_propagate(ledger: Ledger) -> None:
    """Was ``test_query_error_costs_nothing``: an exception inside the query depends on the data, so it
    neither escapes nor goes free; the default is released instead."""

    @private(mechanism=Laplace(sensitivity=1, epsilon=0.5), ledger=ledger)
    def failing(_: object) -> float:
        raise KeyError("no such column")

    r = failing(None)
    assert isinstance(r, Release) and np.isfinite(r.value)
    assert len(ledger.entries()) == 1


def test_public_refusals_cost_nothing(ledger: Ledger) -> None:
    """A wrong call, a bad rng and a bad default are refused before the ledger is charged."""

    @private(mechanism=Laplace(sensitivity=1, epsilon=0.5), ledger=ledger)
    def one(xs: list[int]) -> float:
        return float(len(xs))

    with pytest.raises(TypeError):
        one([1], [2])  # type: ignore[call-arg]
    with pytest.raises(TypeError, match="rng must be"):
        one([1], rng="seed")  # type: ignore[call-arg]
    with pytest.raises(ValueError, match="default=nan must be a value Laplace can release"):
        private(mechanism=Laplace(sensitivity=1, epsilon=0.5), ledger=ledger, default=float("nan"))
    with pytest.raises(TypeError, match="mechanism must be"):
        private(mechanism="laplace", ledger=ledger)  # type: ignore[arg-type]
    assert ledger.entries() == []


def test_refused_release_returns_nothing_and_records_nothing(ledger: Ledger) -> None:
    @private(mechanism=Gaussian(sensitivity=1, epsilon=0.6, delta=1e-7), ledger=ledger)
    def mean(xs: np.ndarray) -> float:
        return float(np.mean(xs))

    mean(np.ones(10))
    with pytest.raises(BudgetExceeded):
        mean(np.ones(10))
    assert len(ledger.entries()) == 1
    assert ledger.verify()


def test_request_id_is_charged_once_and_never_redrawn(ledger: Ledger) -> None:
    @private(mechanism=Laplace(sensitivity=1, epsilon=0.1), ledger=ledger)
    def total(xs: list[float]) -> float:
        return sum(xs)

    calls = []

    @private(mechanism=Laplace(sensitivity=1, epsilon=0.1), ledger=ledger)
    def counted(xs: list[float]) -> float:
        calls.append(1)
        return sum(xs)

    first = total([1.0, 2.0], request_id="req-1")
    with pytest.raises(DuplicateRequest):
        total([1.0, 2.0], request_id="req-1")
    assert [e.request_id for e in ledger.entries()] == ["req-1"]
    assert first.ledger_entry.seq == 1
    counted([1.0], request_id="req-2")
    with pytest.raises(DuplicateRequest):  # refused before the query runs
        counted([1.0], request_id="req-2")
    assert len(calls) == 1


def test_confidence_must_be_a_probability(ledger: Ledger) -> None:
    with pytest.raises(ValueError):
        private(mechanism=Laplace(sensitivity=1, epsilon=1), ledger=ledger, confidence=1.0)


CHILD = textwrap.dedent(
    """
    import sys
    from kakeibo import private
    from kakeibo.accounting import Ledger
    from kakeibo.mechanisms import Laplace

    ledger = Ledger(sys.argv[1], budget=1000)

    @private(mechanism=Laplace(sensitivity=1, epsilon=0.01), ledger=ledger)
    def answer(x: float) -> float:
        return x

    while True:
        r = answer(1.0)
        print(r.ledger_entry.seq, r.value, flush=True)
    """
)


def test_sigkill_never_leaves_a_released_value_without_its_entry(tmp_path: Path) -> None:
    """The child prints each value after @private returns it; after SIGKILL the ledger must hold an entry
    for every printed value (and may hold one more: killed between commit and print)."""
    path = tmp_path / "ledger.sqlite"
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1] / "src")}
    for delay in (0.05, 0.3, 0.7):
        child = subprocess.Popen(
            [sys.executable, "-c", CHILD, str(path)], stdout=subprocess.PIPE, text=True, env=env
        )
        assert child.stdout is not None
        first = child.stdout.readline()  # wait until the child is releasing, however slow its start
        time.sleep(delay)
        child.send_signal(signal.SIGKILL)
        rest, _ = child.communicate()
        printed = [int(line.split()[0]) for line in (first + rest).splitlines() if line.strip()]
        ledger = Ledger(path)
        entries = len(ledger.entries())
        assert ledger.verify()
        assert printed, "the child released nothing before it was killed"
        assert entries in (printed[-1], printed[-1] + 1)
        ledger.close()


def test_selection_mechanisms_release_without_an_error_interval(ledger: Ledger) -> None:
    from kakeibo.mechanisms import Exponential

    with pytest.raises(ValueError, match="must be a value Exponential can release"):  # needs candidates
        private(mechanism=Exponential(utility_sensitivity=1, epsilon=0.5), ledger=ledger)

    @private(
        mechanism=Exponential(utility_sensitivity=1, epsilon=0.5),
        ledger=ledger,
        label="argmax",
        default=np.zeros(3),
    )
    def best(scores: list[float]) -> np.ndarray:
        return np.asarray(scores)

    r = best([1.0, 5.0, 2.0], rng=np.random.default_rng(1))
    assert r.value in (0, 1, 2) and r.error_bound is None
    with pytest.raises(ValueError, match="no error interval"):
        _ = r.confidence_interval
    assert len(ledger.entries()) == 1
