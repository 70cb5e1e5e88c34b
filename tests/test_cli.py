"""The ``kakeibo`` command line, run as a real subprocess."""

from __future__ import annotations

import sqlite3
import subprocess
import sys
from fractions import Fraction
from pathlib import Path

import duckdb
import pyarrow as pa
import pytest

import kakeibo
from kakeibo.accounting import Box, BudgetExceeded, Ledger, Scope
from kakeibo.accounting.ledger import DuplicateRequest, LedgerIntegrityError
from kakeibo.accounting.storage import StoreError
from kakeibo.backends import StatementTimeout
from kakeibo.cli import _failure
from kakeibo.errors import ConfigurationError, ReleaseFailed
from kakeibo.privacy import ApproxDP, PureDP
from kakeibo.sql import QueryRefused
from kakeibo.sql.session import CatalogMismatch
from test_sql_cli import CATALOG as SQL_CATALOG

SCRIPT = Path(sys.executable).with_name("kakeibo")


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "kakeibo.cli", *args], capture_output=True, text=True, timeout=120
    )


def _ledger(path: Path) -> None:
    ledger = Ledger(path, budget=ApproxDP(1, "1e-6"))
    ledger.set_budget(ApproxDP("0.5", "1e-6"), analyst="alice")
    ledger.charge(PureDP("0.25"), label="count adults", analyst="alice", dataset="census", request_id="r-1")
    ledger.charge(ApproxDP(Fraction(1, 8), "1e-7"), label="mean income", analyst="bob")
    ledger.charge(
        PureDP("0.125"), label="ages 10-20", dataset="census", region=Box({"age": (10, 20)}, unit="record")
    )
    ledger.close()


def test_version() -> None:
    result = run("--version")
    assert result.returncode == 0
    assert result.stdout.strip() == f"kakeibo {kakeibo.__version__}" == "kakeibo 0.1.0"


@pytest.mark.skipif(not SCRIPT.exists(), reason="console script not installed in this environment")
def test_console_script() -> None:
    result = subprocess.run([str(SCRIPT), "--version"], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0 and result.stdout.strip() == f"kakeibo {kakeibo.__version__}"


def test_show(tmp_path: Path) -> None:
    path = tmp_path / "ledger.sqlite"
    _ledger(path)
    result = run("ledger", "show", str(path))
    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert "composition sequential" in out and "entries     3" in out
    lines = out.splitlines()
    global_row = next(line for line in lines if line.startswith("global"))
    assert global_row.split() == [
        "global",
        "(epsilon=1,", "delta=1e-06)",  # budget
        "(epsilon=0.5,", "delta=1e-07)",  # spent: 0.25 + 0.125 + 0.125
        "(epsilon=0.5,", "delta=9e-07)",  # remaining
    ]  # fmt: skip
    alice_row = next(line for line in lines if line.startswith("analyst=alice"))
    assert "(epsilon=0.25, delta=0)" in alice_row and alice_row.rstrip().endswith(
        "(epsilon=0.25, delta=1e-06)"
    )
    assert any(line.startswith("1 ") and "count adults" in line and "r-1" in line for line in lines)
    assert any(line.startswith("3 ") and "age in [10, 20] [record-level]" in line for line in lines)
    assert Ledger(path).head_hash in out


def test_verify_ok_and_tampered(tmp_path: Path) -> None:
    path = tmp_path / "ledger.sqlite"
    _ledger(path)
    ok = run("ledger", "verify", str(path))
    assert ok.returncode == 0, ok.stdout + ok.stderr
    assert ok.stdout.startswith("ok: 3 entries")

    conn = sqlite3.connect(path)
    conn.execute("UPDATE entries SET epsilon = '1/1000' WHERE seq = 2")
    conn.commit()
    conn.close()
    bad = run("ledger", "verify", str(path))
    assert bad.returncode == 1
    assert bad.stdout.splitlines()[0].startswith("FAILED: 1 problem(s)")
    assert "  - entry 2 does not match its hash" in bad.stdout


def test_missing_ledger_and_usage_errors(tmp_path: Path) -> None:
    missing = tmp_path / "nope.sqlite"
    result = run("ledger", "show", str(missing))
    assert result.returncode == 2 and "there is no ledger at" in result.stderr
    assert not missing.exists()
    assert run().returncode == 2
    assert run("ledger").returncode == 2
    assert run("ledger", "frobnicate", "x").returncode == 2


def test_verify_fails_on_a_ledger_too_damaged_to_open(tmp_path: Path) -> None:
    path = tmp_path / "ledger.sqlite"
    _ledger(path)
    conn = sqlite3.connect(path)
    conn.execute("UPDATE meta SET value = 'garbage' WHERE key = 'header'")
    conn.commit()
    conn.close()
    result = run("ledger", "verify", str(path))
    assert result.returncode == 1
    assert result.stdout.startswith("FAILED: cannot open") and "damaged ledger header" in result.stdout
    assert run("ledger", "show", str(path)).returncode == 2


# ------------------------------------------------------------- one map from kakeibo's errors to exit statuses


@pytest.mark.parametrize(
    ("error", "status", "message"),
    [
        (
            QueryRefused("SELECT * returns individual rows."),
            1,
            "query refused: SELECT * returns individual rows.",
        ),
        (
            BudgetExceeded("over budget.", requested=PureDP(1), remaining=PureDP(0), scope=Scope()),
            1,
            "over budget.",
        ),
        (DuplicateRequest("request id r-1 was already charged."), 1, "request id r-1 was already charged."),
        (
            StatementTimeout(2.0),
            1,
            "the statement ran longer than its 2 s limit and was cancelled. Its cost was charged.",
        ),
        (ReleaseFailed(), 1, str(ReleaseFailed())),
        (ConfigurationError("the catalog says int."), 2, "the catalog says int."),
        (
            CatalogMismatch("column visits.amount is DOUBLE in the engine."),
            2,
            "column visits.amount is DOUBLE",
        ),
        (LedgerIntegrityError("entry 2 does not match its hash."), 2, "entry 2 does not match its hash."),
        (StoreError("not a SQLite file."), 2, "not a SQLite file."),
        (
            duckdb.ConversionException("Could not convert string 'zz-secret' to INT32"),
            2,
            "(ConversionException)",
        ),
        (pa.ArrowInvalid("value 123456789 out of range"), 2, "(ArrowInvalid)"),
        (RecursionError("maximum recursion depth exceeded"), 2, "nested too deeply"),
        (FileNotFoundError("no such file: x.toml"), 2, "no such file: x.toml"),
        (ValueError("beta must lie strictly between 0 and 1."), 2, "beta must lie strictly"),
        (TypeError("accuracy must be a pair."), 2, "accuracy must be a pair."),
        (ImportError("to_pandas() needs pandas: pip install pandas."), 2, "pip install pandas"),
    ],
    ids=lambda value: type(value).__name__ if isinstance(value, BaseException) else None,
)
def test_one_map_from_errors_to_exit_statuses(error: BaseException, status: int, message: str) -> None:
    """The tree is read before the built-in bases (a ConfigurationError is a ValueError, a CatalogMismatch a
    ConfigurationError), and an engine's message is never printed: it may quote a data value."""
    failure = _failure(error)
    assert failure is not None and failure[0] == status and message in failure[1]
    assert "zz-secret" not in failure[1] and "123456789" not in failure[1]


def test_a_bug_keeps_its_traceback() -> None:
    assert _failure(KeyError("a bug")) is None and _failure(RuntimeError("a bug")) is None


def test_the_cli_answers_the_tree_in_one_line(tmp_path: Path) -> None:
    """Through the real command: a refused query exits 1, a query over budget 1, a catalog whose types are
    not the engine's 2 (a ConfigurationError), each with one line on stderr and no traceback."""
    database, catalog, ledger = tmp_path / "v.duckdb", tmp_path / "catalog.toml", tmp_path / "ledger.sqlite"
    with duckdb.connect(str(database)) as con:
        con.execute(
            "CREATE TABLE visits AS SELECT i % 50 AS user_id, CASE WHEN i % 3 = 0 THEN 'rent' "
            "ELSE 'food' END AS category, (i % 97)::DOUBLE AS amount FROM range(300) t(i)"
        )
    catalog.write_text(SQL_CATALOG)
    Ledger(ledger, budget=1).close()
    common = ["--database", str(database), "--catalog", str(catalog), "--ledger", str(ledger)]
    count = "SELECT COUNT(*) AS n FROM visits"
    refused = run("sql", *common, "--epsilon", "0.5", "SELECT * FROM visits")
    over = run("sql", *common, "--epsilon", "2", count)
    catalog.write_text(SQL_CATALOG.replace('amount = { type = "float"', 'amount = { type = "int"'))
    mismatch = run("sql", *common, "--epsilon", "0.5", "SELECT SUM(amount) AS s FROM visits")
    for result, status, said in [(refused, 1, "query refused"), (over, 1, "exceed"), (mismatch, 2, "amount")]:
        assert result.returncode == status, result.stderr
        assert result.stderr.startswith("kakeibo: ") and said in result.stderr, result.stderr
        assert len(result.stderr.strip().splitlines()) == 1 and "Traceback" not in result.stderr
    with Ledger(ledger) as opened:
        assert opened.entries() == []
