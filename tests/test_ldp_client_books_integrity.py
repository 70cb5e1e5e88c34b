"""Issue 29's device-books defects D1-D5: a file that is not intact kakeibo books is never taken for new books
(D1); the books are hash-chained, verified in full on open and by verify(), before every report for what can
have changed since the last one (in time independent of the books' length), and refuse charges that are not
charges (D2); every epsilon parser refuses out-of-range numbers of every type with one sentence, before
expanding them (D3-D5).
"""

from __future__ import annotations

import hashlib
import json
import signal
import sqlite3
import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import datetime, timedelta, timezone
from decimal import Decimal
from fractions import Fraction
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import kakeibo
from kakeibo.accounting import Ledger
from kakeibo.ldp import (
    GRR,
    OUE,
    Ask,
    Campaign,
    ClientBudgetExceeded,
    ClientLedger,
    ClientLedgerIntegrityError,
)
from kakeibo.ldp import client as client_module
from kakeibo.mechanisms import Laplace
from kakeibo.privacy import PureDP, as_fraction

RANGE = r"must be finite, 0 or of magnitude between 1e-1000 and the largest double \(~1\.8e308\)"


class CountingOUE(OUE):
    """OUE that counts how often its client side runs (a refused report must never randomize)."""

    calls = 0

    def randomize(self, values: Any, rng: Any = None) -> Any:
        CountingOUE.calls += 1
        return super().randomize(values, rng=rng)


def books_with_reports(path: Path, reports: int = 2) -> None:
    """Books at ``path`` with a daily budget of ``reports`` reports at epsilon 1 (by a CountingOUE), all
    spent, then closed."""
    oue = CountingOUE(epsilon=1, domain_size=8)
    with ClientLedger(path, daily_budget=reports) as books:
        books.enrol(Campaign("c", [Ask(oue, reports_per_day=reports)], days=30))
        for value in range(reports):
            books.report("c", oue, value % 8)


def one_sentence(message: str) -> bool:
    """Whether ``message`` (its path replaced) is one sentence holding no number."""
    return message.endswith(".") and message.count(".") == 1 and not any(c.isdigit() for c in message)


def edit(path: Path, *statements: str) -> None:
    """Run ``statements`` on the books' file directly, as a user with sqlite3 would."""
    conn = sqlite3.connect(path)
    with conn:
        for statement in statements:
            conn.execute(statement)
    conn.close()


# --- D1: never new books on an existing file ---------------------------------------------------------------


def _empty_sqlite(path: Path) -> None:
    edit(path, "CREATE TABLE t (x)", "DROP TABLE t")


def _foreign_sqlite(path: Path) -> None:
    edit(path, "CREATE TABLE people (name TEXT)", "INSERT INTO people VALUES ('ada')")


def _random_bytes(path: Path) -> None:
    path.write_bytes(np.random.default_rng(29).bytes(8192))


def _central_ledger(path: Path) -> None:
    Ledger(path, budget=1).close()


def _old_style_books(path: Path) -> None:
    """Books as kakeibo wrote them before the chain (settings, campaigns, reports; no format marker)."""
    edit(
        path,
        "CREATE TABLE settings (name TEXT PRIMARY KEY, value TEXT)",
        "INSERT INTO settings VALUES ('daily_budget', '1'), ('lifetime_budget', 'none')",
    )


@pytest.mark.parametrize(
    "make",
    [
        lambda path: path.write_bytes(b""),
        _empty_sqlite,
        _foreign_sqlite,
        _random_bytes,
        _central_ledger,
        _old_style_books,
        lambda path: path.write_text("daily_budget = 1\n"),
        lambda path: path.mkdir(),
    ],
    ids=[
        "zero-bytes",
        "empty-sqlite",
        "foreign-sqlite",
        "random-bytes",
        "central-ledger",
        "unchained",
        "text",
        "dir",
    ],
)
def test_a_file_that_is_not_books_is_refused_naming_its_path_and_left_alone(
    tmp_path: Path, make: Callable[[Path], None]
) -> None:
    path = tmp_path / "device.sqlite"
    make(path)
    before = sorted(p.name for p in tmp_path.iterdir())
    content = path.read_bytes() if path.is_file() else None
    for budgets in ({"daily_budget": 1}, {}):
        with pytest.raises(ClientLedgerIntegrityError) as refused:
            ClientLedger(path, **budgets)
        message = str(refused.value).replace(str(path), "PATH")
        assert message.startswith("PATH holds no intact kakeibo client books") and one_sentence(message)
        assert isinstance(refused.value, kakeibo.Error) and isinstance(refused.value, RuntimeError)
    assert sorted(p.name for p in tmp_path.iterdir()) == before  # no temporary file, no journal left behind
    assert (path.read_bytes() if path.is_file() else None) == content


def test_books_truncated_to_zero_bytes_are_not_reopened_as_new_books(tmp_path: Path) -> None:
    """The review's shape: a device that spent its lifetime budget, its books truncated, reopened the
    documented way, must not send again."""
    path, oue = tmp_path / "device.sqlite", OUE(epsilon=1, domain_size=8)
    with ClientLedger(path, daily_budget=1, lifetime_budget=1) as books:
        books.enrol(Campaign("c", [Ask(oue, reports_per_day=1)], days=30))
        books.report("c", oue, 3)
        with pytest.raises(ClientBudgetExceeded):
            books.report("c", oue, 3)
    with path.open("r+b") as file:
        file.truncate(0)
    with pytest.raises(ClientLedgerIntegrityError, match="move it away to start new books"):
        ClientLedger(path, daily_budget=1, lifetime_budget=1)
    assert path.stat().st_size == 0


def test_new_books_are_created_whole_where_no_file_exists(tmp_path: Path) -> None:
    path = tmp_path / "device.sqlite"
    with pytest.raises(ValueError, match="needs a daily_budget or a lifetime_budget"):
        ClientLedger(path)
    assert list(tmp_path.iterdir()) == []  # nothing created without budgets
    with ClientLedger(path, daily_budget=2) as books:
        assert books.spent() == ClientLedger(path).spent()
    assert [p.name for p in tmp_path.iterdir()] == ["device.sqlite"]


def test_devices_starting_at_once_share_one_set_of_books(tmp_path: Path) -> None:
    """Eight first starts race on one new path with a daily budget of one report: they all open the same
    books (the first complete one linked into place), so exactly one report is sent."""
    path, oue = tmp_path / "device.sqlite", OUE(epsilon=1, domain_size=8)
    start, outcomes, failures = threading.Barrier(8), [], []

    def first_start() -> None:
        try:
            start.wait()
            with ClientLedger(path, daily_budget=1) as books:
                books.enrol(Campaign("c", [Ask(oue, reports_per_day=1)], days=1))
                try:
                    books.report("c", oue, 1)
                    outcomes.append("sent")
                except ClientBudgetExceeded:
                    outcomes.append("refused")
        except Exception as exc:  # reported below: the assertion names it
            failures.append(exc)

    threads = [threading.Thread(target=first_start) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert failures == []
    assert sorted(outcomes) == ["refused"] * 7 + ["sent"]
    assert [p.name for p in tmp_path.iterdir()] == ["device.sqlite"]


# --- D2: the chain ----------------------------------------------------------------------------------------


#: Edits of books holding campaign 1 and reports 1-2 (the last of each chain is the last row an open device
#: verified): the statements, a problem that verify() names, and whether the open device's next report finds
#: the edit (an edit of the chains' ends, their meta row or the header) or only verify() and the next open do
#: (an older row, or report bytes, which reports never read).
EDITS = {
    "charged-1-to-0": (
        ["UPDATE reports SET charged = '0/1' WHERE seq = 1"],
        "report 1 does not match its hash",
        False,
    ),
    "charged-of-last": (
        ["UPDATE reports SET charged = '0/1' WHERE seq = 2"],
        "report 2 does not match its hash",
        True,
    ),
    "delete-last": (
        ["DELETE FROM reports WHERE seq = 2"],
        "the last report does not match the recorded head",
        True,
    ),
    "delete-first": (
        ["DELETE FROM reports WHERE seq = 1"],
        "report 2 stands where report 1 should be",
        False,
    ),
    "reorder": (
        [
            "UPDATE reports SET seq = 3 WHERE seq = 1",
            "UPDATE reports SET seq = 1 WHERE seq = 2",
            "UPDATE reports SET seq = 2 WHERE seq = 3",
        ],
        "report 1 does not match its hash",
        True,
    ),
    "insert": (
        [
            "INSERT INTO reports SELECT 3, sent_at, day, campaign, randomizer, report_epsilon, charged,"
            " memo, payload_sha256, hash, payload FROM reports WHERE seq = 2"
        ],
        "report 3 does not match its hash",
        True,
    ),
    "meta-head": (
        ["UPDATE meta SET value = (SELECT hash FROM reports WHERE seq = 1) WHERE key = 'reports_head'"],
        "the last report does not match the recorded head",
        True,
    ),
    "budget": (["UPDATE meta SET value = replace(value, '2/1', '9/1') WHERE key = 'header'"], "header", True),
    "declaration": (["UPDATE campaigns SET daily = '9/1'"], "campaign 1 does not match its hash", True),
    "bytes": (
        ["UPDATE reports SET payload = zeroblob(length(payload)) WHERE seq = 2"],
        "report 2's bytes",
        False,
    ),
}


@pytest.mark.parametrize("edited", list(EDITS))
def test_every_edit_of_the_books_is_found_on_open(tmp_path: Path, edited: str) -> None:
    statements, problem, _ = EDITS[edited]
    path = tmp_path / "device.sqlite"
    books_with_reports(path)
    ClientLedger(path).verify()  # the books as written verify
    edit(path, *statements)
    for budgets in ({"daily_budget": 2}, {}):
        with pytest.raises(ClientLedgerIntegrityError, match="do not verify") as refused:
            ClientLedger(path, **budgets)
        message = str(refused.value).replace(str(path), "PATH")
        assert message.startswith("The client books at PATH do not verify") and one_sentence(message)
        assert any(problem in p for p in refused.value.problems), refused.value.problems


def test_an_edit_while_the_books_are_open_stops_every_report_and_read(tmp_path: Path) -> None:
    """The review's shape: ``charged`` edited from 1 to 0 behind an open device's back; the device must not
    send past its budget. The edited report is the last one, the chain's end that every transaction
    re-checks, so reports, reads and verify() all refuse; nothing is randomized."""
    path, oue = tmp_path / "device.sqlite", CountingOUE(epsilon=1, domain_size=8)
    books = ClientLedger(path, daily_budget=1)
    books.enrol(Campaign("c", [Ask(oue, reports_per_day=1)], days=30))
    books.report("c", oue, 1)
    edit(path, "UPDATE reports SET charged = '0/1'")
    before = CountingOUE.calls
    for use in (lambda: books.report("c", oue, 2), books.spent, books.entries, books.verify, books.campaigns):
        with pytest.raises(ClientLedgerIntegrityError, match="do not verify"):
            use()
    assert CountingOUE.calls == before
    books.close()
    assert sqlite3.connect(path).execute("SELECT count(*) FROM reports").fetchone() == (1,)


@pytest.mark.parametrize("edited", list(EDITS))
def test_an_open_device_finds_edits_of_the_chains_ends_at_once_and_older_ones_by_verify(
    tmp_path: Path, edited: str
) -> None:
    """A running device checks per report only what can have changed since its last transaction (the module
    docstring's promise): an edit of a chain's end, its meta row or the header stops the next report; an
    edit of an older row (or of bytes) is found by verify(), and until then the device sums its own verified
    copy, so the edit frees no budget (its daily budget is spent: the report is refused as over budget).
    Once found, every report and read refuses. Nothing is randomized throughout."""
    statements, problem, next_report_finds = EDITS[edited]
    path = tmp_path / "device.sqlite"
    books_with_reports(path)
    books, oue = ClientLedger(path), CountingOUE(epsilon=1, domain_size=8)
    before = CountingOUE.calls
    edit(path, *statements)
    expected = ClientLedgerIntegrityError if next_report_finds else ClientBudgetExceeded
    with pytest.raises(expected):
        books.report("c", oue, 1)
    if not next_report_finds:
        assert books.spent().epsilon == 2
        with pytest.raises(ClientLedgerIntegrityError, match="do not verify") as found:
            books.verify()
        assert any(problem in p for p in found.value.problems), found.value.problems
    for use in (lambda: books.report("c", oue, 2), books.spent, books.campaigns):
        with pytest.raises(ClientLedgerIntegrityError, match="do not verify"):
            use()
    assert CountingOUE.calls == before
    books.close()


def test_a_row_another_process_appended_is_checked_in_full_before_it_is_summed(tmp_path: Path) -> None:
    """Rows this process has not verified yet are checked like on open: a report another process of the
    device appended, edited before this one reads it, stops this one; the other process's own last row is
    its chain's end, so it stops too."""
    path, grr = tmp_path / "device.sqlite", GRR(epsilon=Fraction(1, 3), domain_size=4)
    first = ClientLedger(path, lifetime_budget=1)
    first.enrol(Campaign("c", [Ask(grr, reports_per_day=3)], days=30))
    second = ClientLedger(path)
    second.report("c", grr, 0)
    assert first.spent() == PureDP(Fraction(1, 3))  # first has verified report 1
    second.report("c", grr, 1)
    edit(path, "UPDATE reports SET charged = '0/1' WHERE seq = 2")
    for books in (first, second):
        with pytest.raises(ClientLedgerIntegrityError) as refused:
            books.report("c", grr, 2)
        assert any("report 2 does not match its hash" in p for p in refused.value.problems)
        books.close()


def test_reports_of_another_process_are_summed_exactly_as_they_come(tmp_path: Path) -> None:
    """Two processes of one device share its lifetime budget of 1 through the running sums: two reports at
    1/3 by one, one by the other reach exactly 1 (so the third is sent and a fourth is not, from either)."""
    path, grr = tmp_path / "device.sqlite", GRR(epsilon=Fraction(1, 3), domain_size=4)
    first = ClientLedger(path, lifetime_budget=1)
    first.enrol(Campaign("c", [Ask(grr, reports_per_day=4)], days=30))
    second = ClientLedger(path)
    second.report("c", grr, 0)
    second.report("c", grr, 1)
    assert first.spent() == PureDP(Fraction(2, 3)) == first.spent(campaign="c", day=first.entries()[0].day)
    first.report("c", grr, 2)
    for books in (second, first):
        with pytest.raises(ClientBudgetExceeded, match="in its lifetime"):
            books.report("c", grr, 3)
        assert books.spent().epsilon == Fraction(1) and [e.seq for e in books.entries()] == [1, 2, 3]
        books.close()


def test_a_report_rehashes_a_bounded_number_of_rows_whatever_the_books_hold(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The per-report check is incremental: with 300 reports in the books, a report or a read hashes at most
    4 rows (each chain's last verified row, the rows appended since, the new one), where re-verifying the
    whole file, as verify() does, hashes all 301 rows."""
    path = tmp_path / "device.sqlite"
    books_with_reports(path, reports=300)
    tomorrow = datetime.now(timezone.utc) + timedelta(days=1)  # a fresh daily budget
    books, oue = ClientLedger(path, clock=lambda: tomorrow), CountingOUE(epsilon=1, domain_size=8)
    hashed = 0
    link = client_module._link

    def counting_link(previous: str, record: Any) -> str:
        nonlocal hashed
        hashed += 1
        return link(previous, record)

    monkeypatch.setattr(client_module, "_link", counting_link)
    counts = []
    for use in (lambda: books.report("c", oue, 1), lambda: books.report("c", oue, 2), books.spent):
        hashed = 0
        use()
        counts.append(hashed)
    assert counts == [3, 4, 3]
    hashed = 0
    books.verify()
    assert hashed == 1 + 302
    books.close()


def _rechain(path: Path) -> None:
    """What an attacker who rewrites the whole file does: recompute every hash and head (the format as the
    module docstring states it: sha256 of the previous hash and the canonical JSON of the row's kind and
    columns), independently of kakeibo's code."""
    conn = sqlite3.connect(path)
    meta = dict(conn.execute("SELECT key, value FROM meta"))
    genesis = hashlib.sha256(f"kakeibo-client-books/1\n{meta['header']}".encode()).hexdigest()
    columns = {
        "campaigns": "seq, name, enrolled_at, days, daily, total, asks",
        "reports": "seq, sent_at, day, campaign, randomizer, report_epsilon, charged, memo, payload_sha256",
    }
    with conn:
        conn.execute("UPDATE meta SET value = ? WHERE key = 'genesis'", (genesis,))
        for table, kind in (("campaigns", "campaign"), ("reports", "report")):
            previous = genesis
            for row in conn.execute(f"SELECT {columns[table]} FROM {table} ORDER BY seq").fetchall():
                record = json.dumps([kind, *row], ensure_ascii=False, sort_keys=True, separators=(",", ":"))
                previous = hashlib.sha256(previous.encode() + record.encode()).hexdigest()
                conn.execute(f"UPDATE {table} SET hash = ? WHERE seq = ?", (previous, row[0]))
            conn.execute("UPDATE meta SET value = ? WHERE key = ?", (previous, f"{table}_head"))
    conn.close()


def test_a_rewritten_chain_passes_but_charges_that_are_not_charges_never_do(tmp_path: Path) -> None:
    """The chain is unkeyed (the docstring says so): recomputed after an edit to charge 0, it verifies, which
    also shows that this test's chain is kakeibo's. A negative, non-numeric or oversized charge is refused
    by the amount checks whatever the chain says."""
    path = tmp_path / "device.sqlite"
    books_with_reports(path)
    edit(path, "UPDATE reports SET charged = '0/1' WHERE seq = 1")
    _rechain(path)
    assert ClientLedger(path).spent().epsilon == 1  # the documented limit of an unkeyed chain
    for charged in ("-1/1", "NaN", "1e0", "3/1", "1/0", "1.0"):
        edit(path, f"UPDATE reports SET charged = '{charged}' WHERE seq = 1")
        _rechain(path)
        with pytest.raises(ClientLedgerIntegrityError) as refused:
            ClientLedger(path)
        assert refused.value.problems == (
            "report 1 holds a charge that is negative, not an exact number, or above its report's epsilon.",
        ), charged


# --- D3-D5: epsilon parsers --------------------------------------------------------------------------------


@contextmanager
def alarm_after(seconds: int) -> Iterator[None]:
    """Fail the test if the block runs longer than ``seconds`` (a generous guard against expanding a huge
    number first: Decimal('1e-30000000') took over 30 s; its refusal takes microseconds)."""

    def expired(*_: object) -> None:
        raise AssertionError(f"the refusal took more than {seconds} s")

    previous = signal.signal(signal.SIGALRM, expired)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


OUT_OF_RANGE = [
    10**400,
    -(10**400),
    Decimal("Infinity"),
    Decimal("-Infinity"),
    Decimal("NaN"),
    Decimal("1e-30000000"),
    Decimal("1e30000000"),
    Decimal("1e400"),
    Decimal("1." + "0" * 100),
    Decimal("1.7976931348623159e308"),
    Fraction(1, 10**1001),
    Fraction(10**400, 3),
    18 * 10**307,
    "1e400",
    "1e-1001",
    "1e-30000000",
    float("inf"),
    float("nan"),
    np.float64("-inf"),
]
FRONT_DOORS: dict[str, Callable[[Any], object]] = {
    "as_fraction": lambda v: as_fraction(v, "epsilon"),
    "ClientLedger": lambda v: ClientLedger(":memory:", daily_budget=v),
    "Ask(OUE)": lambda v: Campaign("c", [Ask(OUE(epsilon=v, domain_size=8), reports_per_day=1)], days=1),
    "Laplace": lambda v: Laplace(sensitivity=1, epsilon=v),
}


@pytest.mark.skipif(not hasattr(signal, "SIGALRM"), reason="the time guard needs SIGALRM")
@pytest.mark.parametrize("door", list(FRONT_DOORS))
@pytest.mark.parametrize("value", OUT_OF_RANGE, ids=lambda v: f"{type(v).__name__}-{str(v)[:24]}")
def test_out_of_range_numbers_are_refused_at_once_with_the_range_sentence(door: str, value: object) -> None:
    name = "daily_budget" if door == "ClientLedger" else "epsilon"
    with (
        alarm_after(5),
        pytest.raises(ValueError, match=f"^{name} {RANGE}, written in at most 100 characters.$"),
    ):
        FRONT_DOORS[door](value)


@pytest.mark.parametrize(
    ("value", "exact"),
    [
        (Decimal("1e-1000"), Fraction(1, 10**1000)),
        (Decimal("0E-30000000"), Fraction(0)),
        (Decimal("-0"), Fraction(0)),
        (Decimal("1.7976931348623157e308"), Fraction(17976931348623157 * 10**292)),
        (17976931348623157 * 10**292, Fraction(17976931348623157 * 10**292)),
        (sys.float_info.max, Fraction(17976931348623157 * 10**292)),  # as written, which float() reads back
        (5e-324, Fraction(5, 10**324)),
        ("1e-400", Fraction(1, 10**400)),
        (Fraction(-1, 10**1000), Fraction(-1, 10**1000)),
        (np.int64(3), Fraction(3)),
        (Decimal("0.1"), Fraction(1, 10)),
    ],
)
def test_numbers_at_the_ends_of_the_range_are_read_exactly(value: Any, exact: Fraction) -> None:
    assert as_fraction(value, "x") == exact
