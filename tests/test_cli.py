"""The ``kakeibo`` command line, run as a real subprocess."""

from __future__ import annotations

import sqlite3
import subprocess
import sys
from fractions import Fraction
from pathlib import Path

import pytest

import kakeibo
from kakeibo.accounting import Box, Ledger
from kakeibo.privacy import ApproxDP, PureDP

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
