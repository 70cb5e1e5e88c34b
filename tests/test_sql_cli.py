"""The ``kakeibo sql`` and ``kakeibo explain`` commands on a DuckDB file, as a shell user runs them."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import duckdb
import pytest

import kakeibo
from kakeibo.accounting import Ledger
from kakeibo.privacy import PureDP

CATALOG = """
[tables.visits]
privacy_unit = "user_id"
max_partitions = 2
max_rows_per_partition = 3
[tables.visits.columns]
user_id = { type = "int" }
category = { type = "str", public_values = ["food", "rent"] }
amount = { type = "float", lower = 0, upper = 100 }
"""
QUERY = "SELECT category, COUNT(*) AS n, SUM(amount) AS total FROM visits GROUP BY category"


@pytest.fixture
def files(tmp_path: Path) -> tuple[Path, Path, Path]:
    database, catalog, ledger = tmp_path / "v.duckdb", tmp_path / "catalog.toml", tmp_path / "ledger.sqlite"
    con = duckdb.connect(str(database))
    con.execute(
        "CREATE TABLE visits AS SELECT i % 500 AS user_id, CASE WHEN i % 3 = 0 THEN 'rent' ELSE 'food' END "
        "AS category, (i % 97)::DOUBLE AS amount FROM range(3000) t(i)"
    )
    con.close()
    catalog.write_text(CATALOG)
    Ledger(ledger, budget=5).close()
    return database, catalog, ledger


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "kakeibo.cli", *args], capture_output=True, text=True, timeout=120
    )


def _common(files: tuple[Path, Path, Path]) -> list[str]:
    database, catalog, ledger = files
    return ["--database", str(database), "--catalog", str(catalog), "--ledger", str(ledger)]


def test_sql_prints_a_table_with_intervals_and_charges(files: tuple[Path, Path, Path]) -> None:
    result = run("sql", *_common(files), "--epsilon", "0.5", QUERY)
    assert result.returncode == 0, result.stderr
    header = result.stdout.splitlines()[0].split()
    assert header == ["category", "n", "total", "n_ci_low", "n_ci_high", "total_ci_low", "total_ci_high"]
    assert {line.split()[0] for line in result.stdout.splitlines()[1:]} == {"food", "rent"}
    with Ledger(files[2]) as ledger:
        assert ledger.spent() == PureDP("0.5") and ledger.entries()[0].label == QUERY


def test_sql_json_output(files: tuple[Path, Path, Path]) -> None:
    result = run("sql", *_common(files), "--epsilon", "1", "--format", "json", QUERY)
    assert result.returncode == 0, result.stderr
    rows = json.loads(result.stdout)
    assert sorted(r["category"] for r in rows) == ["food", "rent"]
    assert all(r["n_ci_low"] <= r["n"] <= r["n_ci_high"] for r in rows)


def test_refused_query_exits_1_with_the_reason_and_charges_nothing(files: tuple[Path, Path, Path]) -> None:
    result = run("sql", *_common(files), "--epsilon", "1", "SELECT * FROM visits")
    assert result.returncode == 1 and result.stdout == ""
    assert result.stderr.startswith("kakeibo: query refused: ") and "SELECT *" in result.stderr
    with Ledger(files[2]) as ledger:
        assert ledger.entries() == []


def test_accuracy_flag_spends_the_planned_epsilon(files: tuple[Path, Path, Path]) -> None:
    database, catalog, _ = files
    session = kakeibo.connect(database, catalog=catalog, ledger=Ledger(":memory:", budget=1))
    planned = session.plan(QUERY, accuracy=(4000.0, 0.05)).epsilon
    session.close()
    result = run("sql", *_common(files), "--accuracy", "4000", "0.05", QUERY)
    assert result.returncode == 0, result.stderr
    with Ledger(files[2]) as ledger:
        assert ledger.spent() == PureDP(planned)
    explained = run(
        "explain", "--database", str(database), "--catalog", str(catalog), "--accuracy", "4000", "0.05", QUERY
    )
    assert explained.returncode == 0 and f"privacy loss: {PureDP(planned)}" in explained.stdout


def test_bad_arguments_exit_2(files: tuple[Path, Path, Path]) -> None:
    both = run("sql", *_common(files), "--epsilon", "1", "--accuracy", "1", "0.1", QUERY)
    assert both.returncode == 2 and "not allowed with argument" in both.stderr
    bad_beta = run("sql", *_common(files), "--accuracy", "1", "2", QUERY)
    assert bad_beta.returncode == 2 and "beta must lie strictly between 0 and 1" in bad_beta.stderr


def test_bounds_flag_chooses_them_privately_and_says_what_it_chose(files: tuple[Path, Path, Path]) -> None:
    auto = '{"max_rows_per_partition": "auto", "max_partitions": "auto", "amount": "auto"}'
    result = run("sql", *_common(files), "--epsilon", "1", "--bounds", auto, QUERY)
    assert result.returncode == 0, result.stderr
    said = result.stderr.splitlines()  # an AccuracyWarning may come first (it depends on the data)
    assert any(line.startswith("bounds chosen at epsilon 0.1: max_rows_per_partition = ") for line in said)
    assert {line.split()[0] for line in result.stdout.splitlines()[1:]} == {"food", "rent"}
    explained = run(
        "explain", "--database", str(files[0]), "--catalog", str(files[1]), "--bounds", auto, QUERY
    )
    assert explained.returncode == 0 and "bounds chosen privately (" in explained.stdout
    for bad, fragment in (
        ("[1, 2]", "must be a JSON object"),
        ("{", "is not JSON"),
        ('{"height": "auto"}', "height"),
    ):
        refused = run("sql", *_common(files), "--epsilon", "1", "--bounds", bad, QUERY)
        assert refused.returncode == 2 and fragment in refused.stderr, refused.stderr
    with Ledger(files[2]) as ledger:
        assert len(ledger.entries()) == 1


def test_views_are_created_listed_and_answered_without_a_charge(files: tuple[Path, Path, Path]) -> None:
    create = run(
        "view", "create", *_common(files), "--epsilon", "1", "v", "SELECT category, amount FROM visits"
    )
    assert create.returncode == 0, create.stderr
    assert create.stdout.startswith("view v over visits: category (2 bins), amount (32 bins); ")
    listed = run("view", "list", *_common(files))
    assert listed.returncode == 0 and listed.stdout == create.stdout
    counted = run(
        "sql", *_common(files), "--format", "json", "SELECT category, COUNT(*) AS n FROM v GROUP BY category"
    )
    assert counted.returncode == 0, counted.stderr
    assert [row["category"] for row in json.loads(counted.stdout)] == ["food", "rent"]
    refused = run("sql", *_common(files), "--epsilon", "1", "SELECT SUM(amount) AS s FROM v")
    assert refused.returncode == 1 and 'outside_view="charge" runs it on table visits' in refused.stderr
    charged = run(
        "sql", *_common(files), "--epsilon", "1", "--outside-view", "charge", "SELECT SUM(amount) AS s FROM v"
    )
    assert charged.returncode == 0, charged.stderr
    with Ledger(files[2]) as ledger:
        assert [e.label for e in ledger.entries()] == [
            "CREATE VIEW v AS SELECT category, amount FROM visits",
            "SELECT SUM(amount) AS s FROM visits",
        ]
