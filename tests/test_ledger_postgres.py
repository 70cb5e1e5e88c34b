"""The ledger and the analyst registry on PostgreSQL (kakeibo.accounting.storage), against a real server.

The server is the throwaway one of ``tests/backend_fixtures.py``; each test gets a new empty database.
Concurrency across processes is tested with the SQLite store in ``test_ledger_concurrency.py`` (both stores
are parametrised there).
"""

from __future__ import annotations

from fractions import Fraction

import psycopg
import pytest

from kakeibo.accounting import BudgetExceeded, Ledger
from kakeibo.accounting.curves import Composed, MechanismLoss, SubsampledGaussian
from kakeibo.accounting.ledger import Scope
from kakeibo.accounting.storage import is_postgres_url
from kakeibo.privacy import ApproxDP, PureDP
from kakeibo.service import AnalystRegistry


def test_a_new_database_holds_no_ledger_until_one_is_created(postgres_database: str) -> None:
    assert is_postgres_url(postgres_database)
    with pytest.raises(FileNotFoundError, match="there is no ledger"):
        Ledger(postgres_database)
    Ledger(postgres_database, budget=2).close()
    reopened = Ledger(postgres_database)
    assert reopened.budgets() == {Scope(): PureDP(2)}
    assert reopened.remaining() == PureDP(2)
    reopened.close()


def test_charges_budgets_releases_and_verification(postgres_database: str) -> None:
    ledger = Ledger(postgres_database, budget=1)
    ledger.set_budget(Fraction(1, 2), analyst="alice", dataset="shop")
    first = ledger.charge(
        Fraction(1, 4), label="q1", analyst="alice", dataset="shop", request_id="r1", release=b"a"
    )
    again = ledger.charge(Fraction(1, 4), label="q1", analyst="alice", dataset="shop", request_id="r1")
    assert again == first  # a retry is the same entry, charged once
    ledger.charge(Fraction(1, 4), label="q2", analyst="alice", dataset="shop")
    with pytest.raises(BudgetExceeded, match="analyst 'alice' on dataset 'shop'"):
        ledger.charge(Fraction(1, 100), label="q3", analyst="alice", dataset="shop")
    assert ledger.stored_release("r1") == b"a" and ledger.stored_release("missing") is None
    assert ledger.remaining(analyst="alice", dataset="shop") == PureDP(0)
    ledger.close()

    other = Ledger(postgres_database)  # another process's view: everything is in the database
    assert [e.label for e in other.entries()] == ["q1", "q2"]
    assert other.spent() == PureDP(Fraction(1, 2))
    assert other.lookup("r1") == first
    verification = other.verify()
    assert verification.ok and verification.entries == 2, verification.problems
    other.close()


def test_verification_finds_rows_edited_in_the_database(postgres_database: str) -> None:
    ledger = Ledger(postgres_database, budget=1)
    for i in range(3):
        ledger.charge(Fraction(1, 10), label=f"q{i}")
    with psycopg.connect(postgres_database, autocommit=True) as conn:
        conn.execute("UPDATE entries SET epsilon = '1/1000' WHERE seq = 2")
    problems = ledger.verify().problems
    assert any("entry 2 does not match its hash" in p for p in problems), problems
    ledger.close()


def test_a_dropped_connection_is_replaced(postgres_database: str) -> None:
    ledger = Ledger(postgres_database, budget=1)
    ledger.charge(Fraction(1, 10), label="before")
    with psycopg.connect(postgres_database, autocommit=True) as admin:
        dropped = admin.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
            "WHERE datname = current_database() AND pid <> pg_backend_pid()"
        ).fetchall()
    assert dropped == [(True,)]  # the ledger's one connection
    ledger.charge(Fraction(1, 10), label="after")  # noticed at BEGIN, reconnected, charged
    assert [e.label for e in ledger.entries()] == ["before", "after"]
    assert ledger.verify().ok
    ledger.close()


def test_messages_never_show_the_password() -> None:
    url = "postgresql://kakeibo:hunter2-secret@127.0.0.1:1/nowhere"  # nothing listens on port 1
    with pytest.raises(ValueError) as raised:
        Ledger(url, budget=1, timeout=2)
    assert "hunter2" not in str(raised.value) and "kakeibo:***@127.0.0.1:1" in str(raised.value)


def test_two_registries_share_analysts_grants_and_revocations(postgres_database: str) -> None:
    replica_a, replica_b = AnalystRegistry(postgres_database), AnalystRegistry(postgres_database)
    key = replica_a.create("alice")
    replica_a.grant("alice", "shop")
    assert replica_b.authenticate(key) == "alice"  # verified (and cached) on replica b
    assert replica_b.granted("alice", "shop") and replica_b.datasets("alice") == ["shop"]
    with pytest.raises(ValueError, match="already exists"):
        replica_b.create("alice")
    replica_a.revoke("alice")
    assert replica_b.authenticate(key) is None  # the cache never outlives a revocation
    replica_b.revoke_grant("alice", "shop")
    assert not replica_a.granted("alice", "shop")
    with psycopg.connect(postgres_database) as conn:
        stored = conn.execute("SELECT salt, digest FROM analysts").fetchall()
    assert all(key.encode() not in bytes(salt) + bytes(digest) for salt, digest in stored)
    replica_a.close()
    replica_b.close()


def test_tight_books_keep_mechanisms_and_migrate_an_older_table(postgres_database: str) -> None:
    """The mechanism column, its hash and the rdp books on PostgreSQL; a ledger whose entries table predates
    the column gets it when opened."""
    ledger = Ledger(postgres_database, budget=(5, 1e-5), composition="rdp")
    ledger.charge(ApproxDP(0, 0), label="before")
    ledger.close()
    with psycopg.connect(postgres_database, autocommit=True) as conn:
        conn.execute("ALTER TABLE entries DROP COLUMN mechanism")
    reopened = Ledger(postgres_database)
    run = MechanismLoss.of(Composed([(SubsampledGaussian(1, 0.01), 1000)]), 1e-5)
    reopened.charge(run, label="dp-sgd")
    spent = reopened.spent()
    reopened.close()
    other = Ledger(postgres_database, composition="rdp")
    assert other.entries()[1].loss == run and other.spent() == spent
    assert other.verify().ok
    other.close()
