"""What a new user of ``kakeibo.connect`` meets first (issue 16, section 3): budgets as pairs, a sentence
instead of a TypeError for a pure-epsilon ledger, a default delta that leaves room for more queries, a
DuckDB file other processes can still open, sessions as context managers, and results that pandas,
Polars, pyarrow and DuckDB take directly."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import duckdb
import numpy as np
import pyarrow as pa
import pytest

import kakeibo
from kakeibo.privacy import ApproxDP
from kakeibo.sql import Catalog, QueryRefused

CATALOG = Catalog.from_toml(
    """
[tables.visits]
privacy_unit = "user_id"
max_partitions = 1
max_rows_per_partition = 2
[tables.visits.columns]
user_id = "int"
shop = "str"
amount = { type = "float", lower = 0, upper = 100 }
"""
)
GROUPED = "SELECT shop, COUNT(*) AS n FROM visits GROUP BY shop"


@pytest.fixture
def database(tmp_path: Path) -> Path:
    path = tmp_path / "visits.duckdb"
    with duckdb.connect(str(path)) as con:
        con.execute(
            "CREATE TABLE visits AS SELECT i AS user_id, CASE WHEN i % 2 = 0 THEN 'north' ELSE 'south' END "
            "AS shop, CAST(i % 100 AS DOUBLE) AS amount FROM range(2000) t(i)"
        )
    return path


def test_a_budget_pair_pays_for_private_partition_selection(database: Path, tmp_path: Path) -> None:
    with kakeibo.connect(database, catalog=CATALOG, ledger=tmp_path / "l.sqlite", budget=(1.0, 1e-5)) as s:
        result = s.sql(GROUPED, epsilon=0.5, rng=np.random.default_rng(0))
        assert sorted(result.table.column("shop").to_pylist()) == ["north", "south"]
        assert s.ledger.spent() == ApproxDP(0.5, 1e-7)  # the default delta: 1/100 of the delta budget


def test_a_pure_epsilon_ledger_refuses_selection_with_a_sentence(database: Path, tmp_path: Path) -> None:
    with kakeibo.connect(database, catalog=CATALOG, ledger=tmp_path / "l.sqlite", budget=1.0) as s:
        with pytest.raises(QueryRefused, match=r"budget such as budget=\(1\.0, 1e-5\)"):
            s.sql(GROUPED, epsilon=0.5)
        assert s.ledger.entries() == []
        s.sql("SELECT COUNT(*) AS n FROM visits", epsilon=0.5)  # no delta needed: answered


def test_the_default_delta_leaves_room_for_more_queries(database: Path, tmp_path: Path) -> None:
    """With a delta budget of 1e-6, the first grouped query used to spend all of it."""
    budget = ApproxDP(2, 1e-6)
    with kakeibo.connect(database, catalog=CATALOG, ledger=tmp_path / "l.sqlite", budget=budget) as s:
        for limit in range(1, 4):
            s.sql(GROUPED + f" LIMIT {limit}", epsilon=0.5)
        assert s.ledger.spent() == ApproxDP(1.5, 3e-8)


def test_a_session_opens_the_file_read_only(database: Path, tmp_path: Path) -> None:
    """Another process (the CLI, a notebook) can open the file while a session is open; a missing file is
    one sentence."""
    with kakeibo.connect(database, catalog=CATALOG, ledger=tmp_path / "l.sqlite", budget=1.0) as session:
        opened = f"duckdb.connect({str(database)!r}, read_only=True)"
        code = f"import duckdb; print({opened}.sql('FROM visits').shape)"
        other = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
        assert other.stdout.strip() == "(2000, 3)"
        with pytest.raises(duckdb.Error):
            session.backend.execute("CREATE TABLE t (x INT)")
    with pytest.raises(kakeibo.ConfigurationError, match="there is no DuckDB database at"):
        kakeibo.connect(tmp_path / "missing.duckdb", catalog=CATALOG, ledger=tmp_path / "l.sqlite")


def test_results_are_read_by_dataframe_libraries_directly(database: Path, tmp_path: Path) -> None:
    with kakeibo.connect(database, catalog=CATALOG, ledger=tmp_path / "l.sqlite", budget=10.0) as s:
        result = s.sql("SELECT COUNT(*) AS n, AVG(amount) AS a FROM visits", epsilon=5)
    columns = ["n", "a", "n_ci_low", "n_ci_high", "a_ci_low", "a_ci_high"]
    assert list(result.df().columns) == columns
    assert pa.table(result).column_names == columns
    assert duckdb.sql("SELECT n FROM result").fetchall() == [(result.table.column("n")[0].as_py(),)]
    if importlib.util.find_spec("polars") is not None:
        import polars as pl

        assert pl.DataFrame(result).columns == columns


def test_to_pandas_without_pandas_names_what_to_install(
    database: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with kakeibo.connect(database, catalog=CATALOG, ledger=tmp_path / "l.sqlite", budget=10.0) as s:
        result = s.sql("SELECT COUNT(*) AS n FROM visits", epsilon=5)
    find_spec = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name: None if name == "pandas" else find_spec(name)
    )
    with pytest.raises(ImportError, match="to_pandas\\(\\) needs pandas: pip install pandas"):
        result.to_pandas()
