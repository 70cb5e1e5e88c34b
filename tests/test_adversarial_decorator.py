"""Adversarial review F3: ``@private`` must not answer "is carol in the data?" for free.

The old decorator ran the query, drew the noise and charged only if that worked, so a NaN mean over a
selection that is empty without carol, an answer too large for the noise grid only with her, or a query that
raised on a condition came back as a free ``ValueError`` in one world and a charged number in the other:
4 calls, 2 charged, and carol's presence read exactly. Each test runs the same attack in the world with
carol and the world without her and checks that the charge, and everything observable besides the noisy
number (exception or not, its class and message, the result's type, shape and dtype, warnings), is the
same; and that a failure is released exactly as the public default would be (same seed, same output).
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from kakeibo import Release, private
from kakeibo.accounting import BudgetExceeded, Ledger
from kakeibo.mechanisms import Exponential, Gaussian, Geometric, Laplace, Mechanism
from kakeibo.privacy import ApproxDP

PEOPLE = {"alice": 41_000.0, "bob": 52_000.0, "carol": 47_000.0, "dave": 38_000.0}
WITH_CAROL = dict(PEOPLE)
WITHOUT_CAROL = {k: v for k, v in PEOPLE.items() if k != "carol"}


def observe(call: Callable[[], Release]) -> tuple[Any, ...]:
    """Everything an analyst sees of one call except the noisy number itself."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            r = call()
        except Exception as error:  # an escaping exception is what we look for
            return ("raised", type(error).__name__, str(error), len(caught))
    value = r.value
    return (
        "released",
        type(value),
        np.shape(value),
        np.asarray(value).dtype,
        r.mechanism,
        r.privacy_loss,
        r.confidence,
        r.error_bound,
        r.ledger_entry.loss,
        r.ledger_entry.label,
        len(caught),
    )


def mean_salary_of(name: str) -> Callable[[dict[str, float]], float]:
    def query(salaries: dict[str, float]) -> float:
        selected = np.array([v for k, v in salaries.items() if k == name])
        return float(np.clip(selected, 0, 100_000).mean())  # NaN (and a warning) when nobody is selected

    return query


def too_large_with(name: str) -> Callable[[dict[str, float]], float]:
    def query(salaries: dict[str, float]) -> float:
        return 1e300 if name in salaries else 0.0  # beyond every noise grid with carol

    return query


def raising_without(name: str) -> Callable[[dict[str, float]], float]:
    def query(salaries: dict[str, float]) -> float:
        if name not in salaries:
            raise LookupError(f"{name} is not in the data")
        return float(len(salaries))

    return query


def half_with(name: str) -> Callable[[dict[str, float]], float]:
    def query(salaries: dict[str, float]) -> float:
        return len(salaries) + (0.5 if name in salaries else 0.0)  # not an integer with carol

    return query


ATTACKS: list[tuple[str, Callable[[str], Callable[[dict[str, float]], float]], Mechanism]] = [
    ("nan mean on an empty selection", mean_salary_of, Laplace(sensitivity=100_000, epsilon=0.5)),
    ("too large for the noise grid", too_large_with, Laplace(sensitivity=1, epsilon=0.5)),
    ("query raising on a condition", raising_without, Laplace(sensitivity=1, epsilon=0.5)),
    ("not an integer for an integer mechanism", half_with, Geometric(sensitivity=1, epsilon=0.5)),
    (
        "nan under the Gaussian mechanism",
        mean_salary_of,
        Gaussian(sensitivity=100_000, epsilon=0.5, delta=1e-6),
    ),
]


@pytest.mark.parametrize(("attack", "make", "mechanism"), ATTACKS, ids=[a[0] for a in ATTACKS])
def test_carol_present_or_absent_looks_the_same_and_costs_the_same(
    tmp_path: Path, attack: str, make: Callable[[str], Any], mechanism: Mechanism
) -> None:
    seen = []
    for world, data in (("with", WITH_CAROL), ("without", WITHOUT_CAROL)):
        ledger = Ledger(tmp_path / f"{world}.sqlite", budget=ApproxDP(10, 1e-3))
        query = private(mechanism=mechanism, ledger=ledger, label="attack")(make("carol"))
        seen.append((observe(lambda q=query, d=data: q(d)), ledger.spent(), len(ledger.entries())))
        ledger.close()
    assert seen[0] == seen[1], attack
    observed, _, entries = seen[0]
    assert observed[0] == "released" and observed[-1] == 0  # no exception, no warning
    assert observed[-3] == mechanism.ledger_loss and entries == 1  # one charge of the full loss


def test_the_reviewed_sequence_charges_every_call(tmp_path: Path) -> None:
    """The review's 4 calls (two attacks, each with and without carol): all 4 are charged now."""
    ledger = Ledger(tmp_path / "l.sqlite", budget=ApproxDP(10, 1e-3))
    mechanism = Laplace(sensitivity=1, epsilon=0.5)
    mean = private(mechanism=mechanism, ledger=ledger)(mean_salary_of("carol"))
    large = private(mechanism=mechanism, ledger=ledger)(too_large_with("carol"))
    for query in (mean, large):
        for data in (WITH_CAROL, WITHOUT_CAROL):
            assert isinstance(query(data), Release)
    assert len(ledger.entries()) == 4 and ledger.spent() == ApproxDP(2, 0)


@pytest.mark.parametrize("make", [mean_salary_of, too_large_with, raising_without, half_with])
def test_a_failure_is_exactly_the_release_of_the_default(tmp_path: Path, make: Callable[[str], Any]) -> None:
    """With one seed, the world where the answer fails and a query that answers the default (0) give the
    same output bit for bit: the failure path is the default's release, not something beside it."""
    ledger = Ledger(tmp_path / "l.sqlite", budget=100)
    mechanism = (
        Geometric(sensitivity=1, epsilon=0.5) if make is half_with else Laplace(sensitivity=1, epsilon=1)
    )
    failing_data = WITH_CAROL if make in (too_large_with, half_with) else WITHOUT_CAROL
    failing = private(mechanism=mechanism, ledger=ledger)(make("carol"))
    zero = private(mechanism=mechanism, ledger=ledger)(lambda _: 0)
    for seed in range(5):
        got = failing(failing_data, rng=np.random.default_rng(seed)).value
        assert got == zero(failing_data, rng=np.random.default_rng(seed)).value
        assert type(got) is type(zero(None).value)


def test_an_array_query_releases_the_declared_shape_in_both_worlds(tmp_path: Path) -> None:
    """A histogram query that raises without carol still releases three numbers: the declared default."""

    def histogram(salaries: dict[str, float]) -> np.ndarray:
        if "carol" not in salaries:
            raise ValueError("empty bin")
        return np.histogram(list(salaries.values()), bins=3, range=(0, 90_000))[0].astype(float)

    seen = []
    for world, data in (("with", WITH_CAROL), ("without", WITHOUT_CAROL)):
        ledger = Ledger(tmp_path / f"{world}.sqlite", budget=ApproxDP(10, 1e-3))
        query = private(
            mechanism=Gaussian(sensitivity=1, epsilon=0.5, delta=1e-6), ledger=ledger, default=np.zeros(3)
        )
        released = query(histogram)
        seen.append((observe(lambda q=released, d=data: q(d)), ledger.spent()))
    assert seen[0] == seen[1] and seen[0][0][2] == (3,)


def test_a_selection_over_a_data_dependent_candidate_count_keeps_its_structure(tmp_path: Path) -> None:
    """Exponential over utilities whose length depends on the data: the index is released either way."""
    ledger = Ledger(tmp_path / "l.sqlite", budget=ApproxDP(10, 1e-3))

    @private(mechanism=Exponential(utility_sensitivity=1, epsilon=1), ledger=ledger, default=np.zeros(3))
    def best(salaries: dict[str, float]) -> np.ndarray:
        return np.array([v for k, v in salaries.items() if k == "carol"])  # empty without carol

    assert observe(lambda: best(WITH_CAROL)) == observe(lambda: best(WITHOUT_CAROL))


def test_budget_refusal_happens_before_the_query_sees_the_data(tmp_path: Path) -> None:
    """A refusal is decided by the ledger alone: the query is not run, so it cannot depend on the data."""
    ledger = Ledger(tmp_path / "l.sqlite", budget=0.5)
    runs = []

    @private(mechanism=Laplace(sensitivity=1, epsilon=0.5), ledger=ledger)
    def count(salaries: dict[str, float]) -> float:
        runs.append(1)
        return float(len(salaries))

    count(WITH_CAROL)
    for data in (WITH_CAROL, WITHOUT_CAROL):
        assert observe(lambda d=data: count(d))[:2] == ("raised", BudgetExceeded.__name__)
    assert len(runs) == 1 and len(ledger.entries()) == 1


def test_interrupts_still_propagate_but_are_charged(tmp_path: Path) -> None:
    """``KeyboardInterrupt`` is not an answer: it propagates, and the charge made before it stays."""
    ledger = Ledger(tmp_path / "l.sqlite", budget=1)

    @private(mechanism=Laplace(sensitivity=1, epsilon=0.5), ledger=ledger)
    def interrupted(_: object) -> float:
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        interrupted(None)
    assert len(ledger.entries()) == 1
