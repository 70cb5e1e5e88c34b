"""The privacy-budget ledger: exact accounting, kinds, scopes, idempotency, validation, tamper evidence."""

from __future__ import annotations

import math
import sqlite3
import threading
from datetime import timezone
from fractions import Fraction
from pathlib import Path
from typing import Any

import pytest

from kakeibo.accounting import (
    Box,
    BudgetExceeded,
    Ledger,
    LedgerIntegrityError,
    Scope,
    Verification,
)
from kakeibo.privacy import ZCDP, ApproxDP, PureDP, RDPCurve

HUNDREDTH = PureDP(Fraction(1, 100))


@pytest.fixture
def path(tmp_path: Path) -> Path:
    return tmp_path / "ledger.sqlite"


def _raw(path: Path, sql: str, *params: Any) -> None:
    conn = sqlite3.connect(path)
    conn.execute(sql, params)
    conn.commit()
    conn.close()


def _count_rows(path: Path) -> int:
    conn = sqlite3.connect(path)
    (n,) = conn.execute("SELECT count(*) FROM entries").fetchone()
    conn.close()
    return int(n)


# -- exact accounting ------------------------------------------------------------------------------


def test_one_hundred_hundredths_spend_exactly_one(path: Path) -> None:
    ledger = Ledger(path, budget=1.0)
    for i in range(100):
        assert ledger.charge(HUNDREDTH, label=f"q{i}").seq == i + 1
    assert ledger.spent() == PureDP(1)
    assert ledger.remaining() == PureDP(0)
    with pytest.raises(BudgetExceeded):
        ledger.charge(HUNDREDTH, label="one too many")
    assert len(ledger.entries()) == 100
    assert ledger.verify()


def test_float_hundredths_fill_a_budget_of_one_exactly(path: Path) -> None:
    """A float is read as the decimal it prints as (0.01 is 1/100): exactly 100 fit, never 99 or 101."""
    ledger = Ledger(path, budget=1.0)
    accepted = 0
    for _ in range(101):
        try:
            ledger.charge(0.01, label="q")
            accepted += 1
        except BudgetExceeded:
            break
    assert accepted == 100
    assert ledger.remaining().epsilon == 0  # type: ignore[attr-defined]


def test_approx_budget_reduces_both_coordinates(path: Path) -> None:
    ledger = Ledger(path, budget=ApproxDP(1, "1e-6"))
    ledger.charge(ApproxDP("0.25", "3e-7"), label="a")
    ledger.charge(PureDP("0.5"), label="b")  # counts as (0.5, 0)
    assert ledger.spent() == ApproxDP("0.75", "3e-7")
    assert ledger.remaining() == ApproxDP("0.25", "7e-7")
    with pytest.raises(BudgetExceeded, match="delta"):
        ledger.charge(ApproxDP("0.1", "8e-7"), label="too much delta")  # eps fits, delta does not
    assert ledger.remaining() == ApproxDP("0.25", "7e-7")


def test_zcdp_budget_accepts_pure_as_half_epsilon_squared(path: Path) -> None:
    ledger = Ledger(path, budget=ZCDP(1), composition="zcdp")
    ledger.charge(PureDP(1), label="1-DP is 1/2-zCDP")
    ledger.charge(ZCDP("0.5"), label="gaussian")
    assert ledger.remaining() == ZCDP(0)
    with pytest.raises(BudgetExceeded):
        ledger.charge(ZCDP("0.001"), label="more")


@pytest.mark.parametrize(
    ("budget", "charge"),
    [
        (PureDP(1), ApproxDP("0.1", "1e-9")),
        (PureDP(1), ZCDP("0.1")),
        (ApproxDP(1, "1e-6"), ZCDP("0.1")),
        (ZCDP(1), ApproxDP("0.1", "1e-9")),
    ],
)
def test_kinds_that_do_not_convert_are_a_type_error(budget: Any, charge: Any) -> None:
    ledger = Ledger(":memory:", budget=budget)
    with pytest.raises(TypeError, match="cannot be counted against"):
        ledger.charge(charge, label="q")
    assert ledger.entries() == []


def test_rdp_curves_must_be_converted_first() -> None:
    ledger = Ledger(":memory:", budget=ApproxDP(5, "1e-5"))
    curve = RDPCurve((2.0, 4.0), (0.1, 0.2))
    with pytest.raises(TypeError, match="to_approx"):
        ledger.charge(curve, label="q")
    ledger.charge(curve.to_approx("1e-6"), label="q")
    assert len(ledger.entries()) == 1


# -- refusal, idempotency, validation -----------------------------------------------------------------


def test_budget_exceeded_writes_nothing_and_says_why(path: Path) -> None:
    ledger = Ledger(path, budget=1)
    ledger.charge(PureDP("0.75"), label="big")
    head = ledger.head_hash
    with pytest.raises(BudgetExceeded) as info:
        ledger.charge(PureDP("0.5"), label="too big", request_id="r1")
    message = str(info.value)
    assert message == (
        "Charging epsilon=0.5 would exceed the global budget of epsilon=1; only epsilon=0.25 remains."
    )
    assert message.count(".") == 3 and "\n" not in message  # one sentence (the dots are in numbers)
    assert info.value.requested == PureDP("0.5") and info.value.remaining == PureDP("0.25")
    assert info.value.scope == Scope()
    assert _count_rows(path) == 1 and ledger.head_hash == head
    assert ledger.lookup("r1") is None
    assert ledger.verify()


def test_request_id_makes_a_charge_idempotent(path: Path) -> None:
    ledger = Ledger(path, budget=1)
    first = ledger.charge(PureDP("0.6"), label="q", request_id="req-1")
    again = ledger.charge(PureDP("0.6"), label="q", request_id="req-1")
    assert again == first
    assert ledger.spent() == PureDP("0.6") and len(ledger.entries()) == 1
    # a retry still returns the original even though a new charge would no longer fit
    assert Ledger(path).charge(PureDP("0.6"), label="q", request_id="req-1") == first
    with pytest.raises(ValueError, match="already used for a different charge"):
        ledger.charge(PureDP("0.1"), label="q", request_id="req-1")
    assert ledger.lookup("req-1") == first
    assert ledger.spent() == PureDP("0.6")


INVALID_CHARGES: list[tuple[str, Any, dict[str, Any], type[Exception]]] = [
    ("negative epsilon", lambda: -1, {}, ValueError),
    ("NaN epsilon", lambda: math.nan, {}, ValueError),
    ("infinite epsilon", lambda: math.inf, {}, ValueError),
    ("negative PureDP", lambda: PureDP(-1), {}, ValueError),
    ("NaN PureDP", lambda: PureDP(float("nan")), {}, ValueError),
    ("delta 1", lambda: ApproxDP("0.1", 1), {}, ValueError),
    ("delta -0.1", lambda: ApproxDP("0.1", -0.1), {}, ValueError),
    ("delta NaN", lambda: ApproxDP("0.1", float("nan")), {}, ValueError),
    ("string loss", lambda: "0.1", {}, TypeError),
    ("bool loss", lambda: True, {}, TypeError),
    ("None loss", lambda: None, {}, TypeError),
    ("label not a string", lambda: HUNDREDTH, {"label": 3}, TypeError),
    ("empty label", lambda: HUNDREDTH, {"label": "  "}, ValueError),
    ("analyst not a string", lambda: HUNDREDTH, {"analyst": 7}, TypeError),
    ("empty dataset", lambda: HUNDREDTH, {"dataset": ""}, ValueError),
    ("request id not a string", lambda: HUNDREDTH, {"request_id": 12}, TypeError),
    ("region not a box", lambda: HUNDREDTH, {"region": "age < 3", "dataset": "T"}, TypeError),
]


@pytest.mark.parametrize(
    ("name", "make_loss", "kwargs", "error"), INVALID_CHARGES, ids=[c[0] for c in INVALID_CHARGES]
)
def test_invalid_input_raises_one_clear_error_and_charges_nothing(
    path: Path, name: str, make_loss: Any, kwargs: dict[str, Any], error: type[Exception]
) -> None:
    ledger = Ledger(path, budget=ApproxDP(1, "1e-6"))
    head = ledger.head_hash
    arguments = {"label": "q", **kwargs}
    with pytest.raises(error) as info:
        ledger.charge(make_loss(), **arguments)
    message = str(info.value)
    assert message.endswith(".") and "\n" not in message and len(message) < 200
    assert _count_rows(path) == 0 and ledger.head_hash == head
    assert ledger.verify()


def test_a_mutated_loss_object_is_revalidated() -> None:
    ledger = Ledger(":memory:", budget=1)
    loss = PureDP("0.1")
    object.__setattr__(loss, "epsilon", Fraction(-5))
    with pytest.raises(ValueError, match="non-negative"):
        ledger.charge(loss, label="sneaky")
    assert ledger.spent() == PureDP(0)


# -- construction and reopening --------------------------------------------------------------------


def test_constructor_validation(path: Path) -> None:
    with pytest.raises(TypeError, match="needs a path"):
        Ledger(None, budget=1)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="path"):
        Ledger(42, budget=1)  # type: ignore[arg-type]
    with pytest.raises(FileNotFoundError, match="give a budget to create one"):
        Ledger(path)
    assert not path.exists()  # refused before touching the file system
    with pytest.raises(ValueError, match="non-negative"):
        Ledger(path, budget=-1)
    with pytest.raises(TypeError, match="RDPCurve"):
        Ledger(path, budget=RDPCurve((2.0,), (1.0,)))
    with pytest.raises(TypeError, match="bool"):
        Ledger(path, budget=True)
    with pytest.raises(ValueError, match="needs an \\(epsilon, delta\\) budget"):
        Ledger(path, budget=1, composition="advanced", delta_slack=1e-7)
    with pytest.raises(ValueError, match="only applies"):
        Ledger(path, budget=1, delta_slack=1e-7)
    with pytest.raises(ValueError, match="timeout"):
        Ledger(path, budget=1, timeout=0)
    assert not path.exists()


def test_reopening_uses_or_checks_the_stored_budget(path: Path) -> None:
    Ledger(path, budget=ApproxDP(2, "1e-6")).charge(1, label="q")
    assert Ledger(path).remaining() == ApproxDP(1, "1e-6")
    assert Ledger(path, budget=ApproxDP(2, "1e-6")).spent() == ApproxDP(1, 0)
    with pytest.raises(ValueError, match="global budget is \\(epsilon=2, delta=1e-06\\), not"):
        Ledger(path, budget=ApproxDP(3, "1e-6"))
    with pytest.raises(ValueError, match="composition"):
        Ledger(path, composition="advanced", delta_slack=1e-7)
    assert Ledger(path, composition="sequential").composition.name == "sequential"


def test_in_memory_ledger_is_explicit() -> None:
    with pytest.raises(ValueError, match="needs a budget"):
        Ledger(":memory:")
    with Ledger(":memory:", budget=1) as ledger:
        ledger.charge(HUNDREDTH, label="q")
        assert ledger.spent() == HUNDREDTH


def test_not_a_ledger(tmp_path: Path) -> None:
    junk = tmp_path / "junk.sqlite"
    junk.write_bytes(b"this is not a database" * 100)
    with pytest.raises(ValueError, match="not a usable kakeibo ledger"):
        Ledger(junk)


# -- scopes ----------------------------------------------------------------------------------------


def test_scoped_budgets(path: Path) -> None:
    ledger = Ledger(path, budget=10)
    ledger.set_budget(1, analyst="alice")
    ledger.set_budget(2, dataset="census")
    ledger.set_budget(PureDP("1/2"), analyst="bob", dataset="census")
    ledger.charge(PureDP("0.75"), label="a1", analyst="alice", dataset="sales")
    with pytest.raises(BudgetExceeded, match=r"budget of analyst 'alice' of epsilon=1; only epsilon=0\.25"):
        ledger.charge(PureDP("0.5"), label="a2", analyst="alice", dataset="sales")
    ledger.charge(PureDP("0.5"), label="b1", analyst="bob", dataset="census")
    with pytest.raises(BudgetExceeded, match="analyst 'bob' on dataset 'census'"):
        ledger.charge(PureDP("0.1"), label="b2", analyst="bob", dataset="census")
    ledger.charge(PureDP("0.1"), label="b3", analyst="bob", dataset="sales")  # other dataset: fine
    # A charge that names no dataset may have read the census, so it counts against its budget.
    ledger.charge(PureDP("1.4"), label="unattributed", analyst="carol")
    assert ledger.spent(dataset="census") == PureDP("1.9")
    with pytest.raises(BudgetExceeded, match="dataset 'census'"):
        ledger.charge(PureDP("0.2"), label="c2", analyst="carol", dataset="census")
    assert ledger.remaining(dataset="census") == PureDP("0.1")
    assert ledger.remaining(analyst="alice") == PureDP("0.25")
    assert ledger.spent() == PureDP("2.75")
    assert [e.label for e in ledger.entries(analyst="bob")] == ["b1", "b3"]
    assert [e.label for e in ledger.entries(dataset="census")] == ["b1"]
    assert ledger.budgets() == {
        Scope(): PureDP(10),
        Scope("alice", None): PureDP(1),
        Scope(None, "census"): PureDP(2),
        Scope("bob", "census"): PureDP("0.5"),
    }
    with pytest.raises(ValueError, match="no budget is set for analyst 'carol'"):
        ledger.remaining(analyst="carol")
    assert ledger.verify()


def test_set_budget_validation(path: Path) -> None:
    ledger = Ledger(path, budget=1)
    ledger.charge(PureDP("0.5"), label="q", analyst="alice")
    with pytest.raises(ValueError, match=r"epsilon=0\.5 has already been spent"):
        ledger.set_budget(Fraction(1, 4), analyst="alice")
    with pytest.raises(TypeError, match="PureDP like the global one"):
        ledger.set_budget(ApproxDP(1, "1e-6"), analyst="alice")
    with pytest.raises(TypeError, match="analyst must be a string"):
        ledger.set_budget(1, analyst=3)  # type: ignore[arg-type]
    ledger.set_budget(2)  # raising the global budget is an audited action
    assert ledger.remaining() == PureDP("1.5")
    assert Ledger(path, budget=2).remaining() == PureDP("1.5")


# -- advanced composition in the ledger --------------------------------------------------------------


def test_advanced_policy_admits_more_charges_than_sequential(path: Path) -> None:
    eps, slack = 0.01, 1e-7
    ledger = Ledger(path, budget=ApproxDP(1, "1e-6"), composition="advanced", delta_slack=slack)
    accepted = 0
    while True:
        try:
            ledger.charge(eps, label="q")
            accepted += 1
        except BudgetExceeded:
            break

    def bound(k: int) -> float:
        return min(k * eps, math.sqrt(2 * k * math.log(1 / slack)) * eps + k * eps * math.expm1(eps))

    expected = max(k for k in range(1, 1000) if bound(k) <= 1)
    assert accepted == expected > 100  # sequential composition would stop at 100
    spent = ledger.spent()
    assert isinstance(spent, ApproxDP)
    assert spent.delta == Fraction(repr(slack))
    assert float(spent.epsilon) == pytest.approx(bound(accepted), rel=1e-12)
    assert Ledger(path).composition.name == "advanced"
    assert ledger.verify()


# -- threads share one Ledger object ---------------------------------------------------------------


def test_threads_sharing_one_ledger(path: Path) -> None:
    ledger = Ledger(path, budget=1)
    outcomes: list[str] = []

    def work() -> None:
        for _ in range(30):
            try:
                ledger.charge(Fraction(1, 50), label="t")
                outcomes.append("ok")
            except BudgetExceeded:
                outcomes.append("refused")

    threads = [threading.Thread(target=work) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert outcomes.count("ok") == 50 and outcomes.count("refused") == 190
    assert ledger.remaining() == PureDP(0)


# -- tamper evidence -------------------------------------------------------------------------------


def _filled(path: Path, n: int = 5) -> Ledger:
    ledger = Ledger(path, budget=ApproxDP(1, "1e-6"))
    for i in range(n):
        ledger.charge(ApproxDP("0.1", "1e-8"), label=f"q{i + 1}", analyst="alice", request_id=f"r{i + 1}")
    v = ledger.verify()
    assert v.ok and v.entries == n and v.problems == ()
    return ledger


def test_verify_result_type(path: Path) -> None:
    v = _filled(path).verify()
    assert isinstance(v, Verification) and bool(v) is True


def test_editing_a_loss_is_detected_and_names_the_row(path: Path) -> None:
    ledger = _filled(path)
    _raw(path, "UPDATE entries SET epsilon = '1/100' WHERE seq = 3")
    v = ledger.verify()
    assert not v and not v.ok
    assert len(v.problems) == 1 and v.problems[0].startswith("entry 3 does not match its hash")


def test_editing_a_label_or_timestamp_is_detected(path: Path) -> None:
    ledger = _filled(path)
    _raw(path, "UPDATE entries SET label = 'harmless' WHERE seq = 2")
    _raw(path, "UPDATE entries SET created_at = '2000-01-01T00:00:00.000000+00:00' WHERE seq = 4")
    problems = ledger.verify().problems
    assert [p.split(" does")[0] for p in problems] == ["entry 2", "entry 4"]


def test_deleting_the_last_row_is_detected(path: Path) -> None:
    ledger = _filled(path)
    _raw(path, "DELETE FROM entries WHERE seq = 5")
    v = Ledger(path).verify()
    assert not v
    assert any("records 5 entries but holds 4" in p for p in v.problems)
    assert any("last entry does not match the recorded head" in p for p in v.problems)
    with pytest.raises(LedgerIntegrityError):
        ledger.charge(HUNDREDTH, label="after tampering")  # the ledger refuses to go on


def test_deleting_a_middle_row_is_detected(path: Path) -> None:
    ledger = _filled(path)
    _raw(path, "DELETE FROM entries WHERE seq = 2")
    problems = ledger.verify().problems
    assert any(p.startswith("entry 3 stands where entry 2 should be") for p in problems)
    assert any(p.startswith("entry 3 does not match its hash") for p in problems)


def test_reordering_rows_is_detected(path: Path) -> None:
    ledger = _filled(path)
    conn = sqlite3.connect(path)
    conn.execute("UPDATE entries SET seq = -2 WHERE seq = 2")
    conn.execute("UPDATE entries SET seq = 2 WHERE seq = 4")
    conn.execute("UPDATE entries SET seq = 4 WHERE seq = -2")
    conn.commit()
    conn.close()
    problems = ledger.verify().problems
    assert {p.split(" does")[0] for p in problems} >= {"entry 2", "entry 4"}


def test_inserting_a_row_is_detected(path: Path) -> None:
    ledger = _filled(path, 3)
    conn = sqlite3.connect(path)
    row = conn.execute("SELECT * FROM entries WHERE seq = 3").fetchone()
    conn.execute("INSERT INTO entries VALUES (4, ?, ?, ?, ?, ?, ?, ?, NULL, ?, ?, ?, ?)", row[1:8] + row[9:])
    conn.commit()
    conn.close()
    problems = ledger.verify().problems
    assert any("records 3 entries but holds 4" in p for p in problems)
    assert any(p.startswith("entry 4 does not match its hash") for p in problems)


def test_editing_the_budget_is_detected(path: Path) -> None:
    ledger = _filled(path)
    _raw(path, "UPDATE budgets SET epsilon = '100/1' WHERE seq = 1")
    v = ledger.verify()
    assert not v and any(p.startswith("budget row 1 does not match its hash") for p in v.problems)
    with pytest.raises(LedgerIntegrityError, match="budget row 1"):
        ledger.charge(HUNDREDTH, label="spend the forged budget")


def test_editing_the_header_or_head_is_detected(path: Path) -> None:
    ledger = _filled(path)
    conn = sqlite3.connect(path)
    (header,) = conn.execute("SELECT value FROM meta WHERE key = 'header'").fetchone()
    conn.execute("UPDATE meta SET value = ? WHERE key = 'header'", (header.replace("sequential", "zcdp"),))
    conn.commit()
    conn.close()
    assert any("header" in p for p in ledger.verify().problems)
    with pytest.raises(LedgerIntegrityError, match="header"):
        ledger.charge(HUNDREDTH, label="under a forged policy")

    other = tmp = path.with_name("other.sqlite")
    _filled(other)
    _raw(tmp, "UPDATE meta SET value = 'beef' WHERE key = 'entries_head'")
    assert any("recorded head" in p for p in Ledger(other).verify().problems)


def test_entries_round_trip(path: Path) -> None:
    ledger = Ledger(path, budget=ApproxDP(5, "1e-5"))
    box = Box({"age": (18, 65)}, unit="user")
    entry = ledger.charge(
        ApproxDP("1/3", "1e-7"), label="ü label", analyst="a", dataset="d", request_id="x", region=box
    )
    (stored,) = Ledger(path).entries()
    assert stored == entry
    assert stored.loss == ApproxDP(Fraction(1, 3), Fraction(1, 10**7))
    assert stored.region == box and stored.created_at.tzinfo == timezone.utc
    assert len(stored.hash) == 64


def test_incremental_region_totals_match_a_recomputation_from_scratch(path: Path) -> None:
    """The ledger keeps running per-region sums (repeated boxes merged); after 300 seeded charges over 12
    boxes, mixed with region-less charges, its spent equals sum(plain) + max weighted depth over all
    charged boxes, computed here directly from the list of charges."""
    import random

    from kakeibo.accounting import max_weighted_depth

    rng = random.Random(5)
    boxes = [
        Box({"age": (a, a + rng.randint(1, 30)), "height": (h, h + rng.randint(5, 60))}, unit="record")
        for a, h in ((rng.randint(0, 80), rng.randint(100, 190)) for _ in range(12))
    ]
    ledger = Ledger(path, budget=10**6)
    charged: list[tuple[Box | None, Fraction]] = []
    for _ in range(300):
        box = rng.choice([*boxes, None])
        eps = Fraction(rng.randint(1, 50), 100)
        ledger.charge(eps, label="q", dataset="t", region=box)
        charged.append((box, eps))
    plain = sum((e for b, e in charged if b is None), Fraction(0))
    regional = [(b, e) for b, e in charged if b is not None]
    expected = plain + max_weighted_depth([b for b, _ in regional], [e for _, e in regional])
    assert ledger.spent() == PureDP(expected)
    assert Ledger(path).spent() == PureDP(expected)  # a fresh process rebuilds the same totals
    assert ledger.verify()


def test_stored_releases_survive_reopening_and_replays_keep_the_first(tmp_path: Path) -> None:
    path = tmp_path / "l.sqlite"
    with Ledger(path, budget=1) as ledger:
        ledger.charge(0.25, label="q", request_id="r1", release=b"first answer")
        again = ledger.charge(0.25, label="q", request_id="r1", release=b"second answer")
        assert again.seq == 1 and ledger.spent() == PureDP("0.25")
    with Ledger(path) as ledger:
        assert ledger.stored_release("r1") == b"first answer" and ledger.stored_release("r2") is None
        assert ledger.verify().ok


def test_a_refused_charge_stores_no_release(tmp_path: Path) -> None:
    with Ledger(tmp_path / "l.sqlite", budget=1) as ledger:
        with pytest.raises(BudgetExceeded):
            ledger.charge(2, label="too much", request_id="r1", release=b"never released")
        assert ledger.stored_release("r1") is None
        with pytest.raises(ValueError, match="needs a request_id"):
            ledger.charge(0.1, label="q", release=b"payload")
        assert ledger.entries() == []


def test_an_altered_release_is_refused_and_found_by_verify(tmp_path: Path) -> None:
    path = tmp_path / "l.sqlite"
    with Ledger(path, budget=1) as ledger:
        ledger.charge(0.5, label="q", request_id="r1", release=b"count: 10")
    with sqlite3.connect(path) as raw:
        raw.execute("UPDATE releases SET payload = ? WHERE request_id = 'r1'", (b"count: 99",))
    with Ledger(path) as ledger:
        with pytest.raises(ValueError, match="was altered"):
            ledger.stored_release("r1")
        assert not ledger.verify().ok and "was altered" in ledger.verify().problems[0]


def test_a_ledger_written_before_stored_releases_still_opens(tmp_path: Path) -> None:
    path = tmp_path / "l.sqlite"
    Ledger(path, budget=1).close()
    with sqlite3.connect(path) as raw:
        raw.execute("DROP TABLE releases")
    with Ledger(path) as ledger:
        ledger.charge(0.5, label="q", request_id="r1", release=b"x")
        assert ledger.stored_release("r1") == b"x" and ledger.verify().ok


def test_check_looks_ahead_like_charge_and_writes_nothing(path: Path) -> None:
    """``check`` refuses exactly what ``charge`` would refuse, parallel composition included, and records
    nothing: after a full charge over ages 18-40, a disjoint box still fits, an overlapping one does not."""
    ledger = Ledger(path, budget=1)
    young, old = Box({"age": (18, 40)}, unit="user"), Box({"age": (41, 90)}, unit="user")
    ledger.charge(1, label="young", dataset="d", region=young)
    ledger.check(1, dataset="d", region=old)
    for region in (young, None):
        with pytest.raises(BudgetExceeded, match="only epsilon=0 remains"):
            ledger.check(0.5, dataset="d", region=region)
        with pytest.raises(BudgetExceeded):
            ledger.charge(0.5, label="refused", dataset="d", region=region)
    ledger.charge(1, label="old", dataset="d", region=old)
    assert len(ledger.entries()) == 2 and ledger.verify().ok
