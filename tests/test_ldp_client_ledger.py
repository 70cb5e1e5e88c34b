"""The client's privacy books (issue 21): a device's ClientLedger charges every report its loss, credits
RAPPOR's memoisation, never lets the device exceed its budgets or a campaign's declaration, survives
restarts; a Campaign states its per-client cost before it starts and books it in the data owner's ledger.
"""

from __future__ import annotations

import threading
from datetime import datetime, timedelta, timezone
from fractions import Fraction
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from kakeibo.accounting import BudgetExceeded, Ledger
from kakeibo.ldp import GRR, OUE, RAPPOR, Ask, Campaign, ClientBudgetExceeded, ClientLedger, OneTimeRAPPOR
from kakeibo.ldp.rappor import RapporClient
from kakeibo.privacy import PureDP

SECRET = bytes(range(32))


class Clock:
    """A settable UTC clock."""

    def __init__(self, start: str = "2026-11-27T09:00:00") -> None:
        self.now = datetime.fromisoformat(start).replace(tzinfo=timezone.utc)

    def __call__(self) -> datetime:
        return self.now

    def advance(self, **kwargs: float) -> None:
        self.now += timedelta(**kwargs)


class CountingOUE(OUE):
    """OUE that counts how often its client side runs (a refused report must never randomize)."""

    calls = 0

    def randomize(self, values: Any, rng: Any = None) -> Any:
        CountingOUE.calls += 1
        return super().randomize(values, rng=rng)


def ledger(tmp_path: Path, clock: Clock | None = None, **budgets: Any) -> ClientLedger:
    return ClientLedger(tmp_path / "device.sqlite", clock=clock or Clock(), **budgets)


# --- charges ------------------------------------------------------------------------------------------------


def test_each_report_is_charged_its_loss_and_the_books_add_up(tmp_path: Path) -> None:
    oue, grr = OUE(epsilon=1, domain_size=8), GRR(epsilon=Fraction(1, 2), domain_size=4)
    books = ledger(tmp_path, daily_budget=10)
    books.enrol(Campaign("survey", [Ask(oue, reports_per_day=3), Ask(grr, reports_per_day=4)], days=2))
    rng = np.random.default_rng(0)
    sent = [books.report("survey", oue, v, rng=rng) for v in (1, 5, 7)]
    sent += [books.report("survey", grr, v, rng=rng) for v in (0, 3)]
    entries = books.entries()
    assert [e.report_epsilon for e in entries] == [1, 1, 1, Fraction(1, 2), Fraction(1, 2)]
    assert [e.charged for e in entries] == [e.report_epsilon for e in entries]
    assert books.spent() == PureDP(Fraction(4)) == books.spent(campaign="survey", day="2026-11-27")
    assert [e.payload for e in entries] == [r.to_bytes() for r in sent]
    assert [e.seq for e in entries] == [1, 2, 3, 4, 5] and not any(e.memoised for e in entries)
    assert entries[0].randomizer == repr(oue) and entries[0].sent_at.startswith("2026-11-27T09:00:00")
    assert books.remaining_today() == PureDP(6)


def test_memoised_rappor_repeats_cost_nothing_past_epsilon_infinity(tmp_path: Path) -> None:
    """Two-step RAPPOR: eleven reports of one value are charged ``epsilon_one`` each until the total reaches
    ``epsilon_infinity`` (4 ln 3 = 4.39, i.e. four full charges and a partial one), then nothing; another
    value starts its own tally. One-time RAPPOR: the first report of a value costs ``epsilon_infinity``,
    its repeats (byte-identical) nothing."""
    rappor, one_time = RAPPOR(), OneTimeRAPPOR()
    books = ledger(tmp_path, daily_budget=20)
    asks = [
        Ask(rappor, reports_per_day=12, distinct_values=2),
        Ask(one_time, reports_per_day=3, distinct_values=1),
    ]
    books.enrol(Campaign("sites", asks, days=1))
    client, one_time_client = RapporClient(rappor, SECRET), RapporClient(one_time, SECRET)
    for _ in range(11):
        books.report("sites", client, "example.org")
    books.report("sites", client, "example.com")
    eps_one, eps_inf = rappor.privacy_loss.epsilon, rappor.longitudinal_loss.epsilon
    charged = [e.charged for e in books.entries()]
    assert charged[:4] == [eps_one] * 4 and charged[4] == eps_inf - 4 * eps_one and charged[5:11] == [0] * 6
    assert charged[11] == eps_one and all(e.memoised for e in books.entries())
    assert sum(charged[:11]) == min(11 * eps_one, eps_inf)
    first = books.report("sites", one_time_client, "example.org")
    again = books.report("sites", one_time_client, "example.org")
    assert first.to_bytes() == again.to_bytes()
    assert [e.charged for e in books.entries()][12:] == [one_time.privacy_loss.epsilon, 0]
    assert books.spent() == PureDP(eps_inf + eps_one + one_time.privacy_loss.epsilon)


def test_the_books_never_name_a_reported_value(tmp_path: Path) -> None:
    rappor = RAPPOR()
    books = ledger(tmp_path, daily_budget=20)
    books.enrol(Campaign("sites", [Ask(rappor, reports_per_day=2, distinct_values=2)], days=1))
    books.report("sites", RapporClient(rappor, SECRET), "secret-site.example")
    raw = (tmp_path / "device.sqlite").read_bytes()
    assert b"secret-site" not in raw
    other_device = RapporClient(rappor, bytes(32))
    assert other_device.memo_key("secret-site.example") != RapporClient(rappor, SECRET).memo_key(
        "secret-site.example"
    )


# --- budgets ------------------------------------------------------------------------------------------------


def test_a_device_never_exceeds_its_budgets_and_refusals_never_randomize(tmp_path: Path) -> None:
    """Seeded random traffic over ten days from three campaigns: every day's spending stays within the daily
    budget, the total within the lifetime budget, each campaign within its declaration; refused reports
    leave no row and never reach the randomizer."""
    clock = Clock()
    books = ledger(tmp_path, clock, daily_budget=3, lifetime_budget=20)
    oracles = {
        name: CountingOUE(epsilon=Fraction(k, 4), domain_size=4) for k, name in ((2, "a"), (3, "b"), (4, "c"))
    }
    for name, oracle in oracles.items():
        books.enrol(Campaign(name, [Ask(oracle, reports_per_day=2)], days=10))
    rng = np.random.default_rng(5)
    refused = 0
    for _day in range(10):
        for _ in range(12):
            name = str(rng.choice(list(oracles)))
            before = CountingOUE.calls
            try:
                books.report(name, oracles[name], int(rng.integers(4)), rng=rng)
            except ClientBudgetExceeded:
                refused += 1
                assert CountingOUE.calls == before
        clock.advance(days=1)
    entries = books.entries()
    assert refused > 0 and len(entries) + refused == 120
    days = {e.day for e in entries}
    assert all(books.spent(day=d).epsilon <= 3 for d in days)
    assert books.spent().epsilon <= 20 and books.spent().epsilon > 17  # the lifetime cap was reached
    for name, oracle in oracles.items():
        per_day = [books.spent(day=d, campaign=name).epsilon for d in days]
        assert max(per_day) <= 2 * oracle.privacy_loss.epsilon
    assert sum(e.charged for e in entries) == books.spent().epsilon


def test_campaign_declarations_are_enforced(tmp_path: Path) -> None:
    oue, other = OUE(epsilon=1, domain_size=8), OUE(epsilon=2, domain_size=8)
    books = ledger(tmp_path, daily_budget=4)
    with pytest.raises(
        ClientBudgetExceeded, match=r"asks up to epsilon=6 a day; this device allows epsilon=4"
    ):
        books.enrol(Campaign("greedy", [Ask(other, reports_per_day=3)], days=1))
    campaign = Campaign("survey", [Ask(oue, reports_per_day=2)], days=2)
    books.enrol(campaign)
    books.enrol(campaign)  # the same declaration again: nothing changes
    with pytest.raises(ValueError, match="a different campaign named 'survey' is already enrolled"):
        books.enrol(Campaign("survey", [Ask(oue, reports_per_day=3)], days=2))
    with pytest.raises(ClientBudgetExceeded, match="has not enrolled in campaign 'other'"):
        books.report("other", oue, 1)
    with pytest.raises(ClientBudgetExceeded, match=r"did not declare reports by OUE\(epsilon=2.0"):
        books.report("survey", other, 1)
    books.report("survey", oue, 1)
    books.report("survey", oue, 2)
    with pytest.raises(
        ClientBudgetExceeded, match="declared at most epsilon=2 a day and has spent epsilon=2 today"
    ):
        books.report("survey", oue, 3)
    assert books.campaigns() == ["survey"] and len(books.entries()) == 2


def test_the_day_is_the_utc_date(tmp_path: Path) -> None:
    clock = Clock("2026-11-27T23:59:00")
    oue = OUE(epsilon=1, domain_size=8)
    books = ledger(tmp_path, clock, daily_budget=1)
    books.enrol(Campaign("c", [Ask(oue, reports_per_day=1)], days=3))
    books.report("c", oue, 1)
    with pytest.raises(ClientBudgetExceeded, match=r"(This device allows|declared at most) epsilon=1 a day"):
        books.report("c", oue, 1)
    clock.advance(minutes=2)
    books.report("c", oue, 1)
    assert [e.day for e in books.entries()] == ["2026-11-27", "2026-11-28"]
    naive = ClientLedger(":memory:", daily_budget=1, clock=lambda: datetime(2026, 1, 1))
    with pytest.raises(ValueError, match="timezone-aware"):
        naive.enrol(Campaign("c", [Ask(oue, reports_per_day=1)], days=3))


def test_the_books_survive_restarts(tmp_path: Path) -> None:
    oue = OUE(epsilon=1, domain_size=8)
    with ledger(tmp_path, daily_budget=2, lifetime_budget=5) as books:
        books.enrol(Campaign("c", [Ask(oue, reports_per_day=2)], days=5))
        books.report("c", oue, 1)
    reopened = ledger(tmp_path)  # the stored budgets apply
    assert (reopened.daily_budget, reopened.lifetime_budget) == (PureDP(2), PureDP(5))
    assert reopened.spent() == PureDP(1) and reopened.campaigns() == ["c"]
    reopened.report("c", oue, 2)
    with pytest.raises(ClientBudgetExceeded):
        reopened.report("c", oue, 3)
    reopened.close()
    with pytest.raises(ValueError, match="created with daily_budget 2, not 3"):
        ledger(tmp_path, daily_budget=3)
    with pytest.raises(ValueError, match="needs a daily_budget or a lifetime_budget"):
        ClientLedger(tmp_path / "new.sqlite")
    assert repr(ledger(tmp_path)) == "ClientLedger(daily_budget=2, lifetime_budget=5)"


def test_two_processes_cannot_both_spend_the_last_epsilon(tmp_path: Path) -> None:
    """Eight threads, each with its own connection to one device file, race for a daily budget of one
    report: exactly one report is sent."""
    oue = OUE(epsilon=1, domain_size=8)
    ledger(tmp_path, daily_budget=1).enrol(Campaign("c", [Ask(oue, reports_per_day=1)], days=1))
    start, outcomes = threading.Barrier(8), []

    def race() -> None:
        books = ledger(tmp_path)
        start.wait()
        try:
            books.report("c", oue, 1)
            outcomes.append("sent")
        except ClientBudgetExceeded:
            outcomes.append("refused")
        books.close()

    threads = [threading.Thread(target=race) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(outcomes) == ["refused"] * 7 + ["sent"]
    assert len(ledger(tmp_path).entries()) == 1


def test_bad_inputs_are_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="daily_budget must be positive"):
        ledger(tmp_path, daily_budget=0)
    books = ledger(tmp_path, daily_budget=1)
    books.enrol(Campaign("c", [Ask(OUE(epsilon=1, domain_size=8), reports_per_day=1)], days=1))
    with pytest.raises(TypeError, match="must be a local randomizer or a RapporClient, not str"):
        books.report("c", "OUE", 1)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"values must be indices in 0\.\.7"):
        books.report("c", OUE(epsilon=1, domain_size=8), 9)
    assert books.entries() == []  # a report that failed to randomize is not in the books


# --- campaigns ----------------------------------------------------------------------------------------------


def test_campaign_losses_follow_sequential_composition_with_memoisation_credited() -> None:
    rappor, oue = RAPPOR(), OUE(epsilon=Fraction(1, 2), domain_size=16)
    eps_one, eps_inf = rappor.privacy_loss.epsilon, rappor.longitudinal_loss.epsilon
    campaign = Campaign(
        "c", [Ask(rappor, reports_per_day=2, distinct_values=3), Ask(oue, reports_per_day=4)], days=30
    )
    assert campaign.daily_loss == PureDP(min(2 * eps_one, 3 * eps_inf) + 2)
    assert campaign.per_client_loss == PureDP(min(60 * eps_one, 3 * eps_inf) + 60)
    text = campaign.explain()
    assert "30 days" in text and f"{PureDP(3 * eps_inf)} in all" in text and "epsilon=60 in all" in text
    assert text.splitlines()[-1] == f"  total: {campaign.daily_loss} a day, {campaign.per_client_loss} in all"


def test_an_honest_device_following_its_campaign_is_never_refused_and_spends_at_most_the_declared(
    tmp_path: Path,
) -> None:
    """A device that sends what the campaign declared (RAPPOR over at most 2 values, OUE) every day for the
    campaign's days is never refused, and its books equal the declared per-client loss when it spreads its
    reports over the values (the worst case)."""
    clock = Clock()
    rappor, oue = RAPPOR(), OUE(epsilon=1, domain_size=8)
    campaign = Campaign(
        "c", [Ask(rappor, reports_per_day=3, distinct_values=2), Ask(oue, reports_per_day=1)], days=4
    )
    books = ledger(tmp_path, clock, daily_budget=campaign.daily_loss.epsilon)
    books.enrol(campaign)
    client = RapporClient(rappor, SECRET)
    for day in range(4):
        for j in range(3):
            books.report("c", client, ["home", "work"][(3 * day + j) % 2])
        books.report("c", oue, day)
        clock.advance(days=1)
    assert books.spent() == campaign.per_client_loss


def test_the_data_owners_books_compose_every_campaign(tmp_path: Path) -> None:
    central = Ledger(tmp_path / "owner.sqlite", budget=PureDP(100))
    central.set_budget(PureDP(30), dataset="ldp:phones")
    first = Campaign("emoji", [Ask(OUE(epsilon=1, domain_size=8), reports_per_day=2)], days=7)
    entry = first.book(central, population="phones", analyst="growth")
    assert entry.loss == PureDP(14) and entry.dataset == "ldp:phones" and "emoji" in entry.label
    assert first.book(central, population="phones", analyst="growth").seq == entry.seq  # booked once
    second = Campaign("words", [Ask(GRR(epsilon=1, domain_size=4), reports_per_day=1)], days=20)
    with pytest.raises(BudgetExceeded):
        second.book(central, population="phones")
    assert central.spent(dataset="ldp:phones") == PureDP(14)
    Campaign("words", [Ask(GRR(epsilon=1, domain_size=4), reports_per_day=1)], days=16).book(
        central, population="phones"
    )
    assert central.spent(dataset="ldp:phones") == PureDP(30)


@pytest.mark.parametrize(
    ("make", "error", "message"),
    [
        (
            lambda: Ask(OUE(epsilon=1, domain_size=8), reports_per_day=0),
            ValueError,
            "reports_per_day must lie",
        ),
        (lambda: Ask("OUE", reports_per_day=1), TypeError, "must be a local randomizer, not str"),  # type: ignore[arg-type]
        (
            lambda: Ask(OUE(epsilon=1, domain_size=8), reports_per_day=1, distinct_values=2),
            ValueError,
            "OUE does not memoise",
        ),
        (lambda: Campaign("", [Ask(OUE(epsilon=1, domain_size=8), 1)], days=1), ValueError, "printable name"),
        (lambda: Campaign("c", [], days=1), ValueError, "at least one Ask"),
        (lambda: Campaign("c", [Ask(OUE(epsilon=1, domain_size=8), 1)], days=0), ValueError, "days must lie"),
        (
            lambda: Campaign(
                "c", [Ask(OUE(epsilon=1, domain_size=8), 1), Ask(OUE(epsilon=1, domain_size=8), 2)], days=1
            ),
            ValueError,
            "each randomizer once",
        ),
    ],
)
def test_bad_campaigns_are_refused(make: Any, error: type[Exception], message: str) -> None:
    with pytest.raises(error, match=message):
        make()
