"""GROUP BY a column of a public table (issue 32; ``Session._public_table_keys``): its keys are public by
construction, so the query releases every one of them (empty groups included) with noise and no private
partition selection, and needs no delta for them. TPC-H's Q5 groups by ``n_name`` from ``nation``.

Privacy: reading the public table's values spends nothing (it holds no person's data); the release is the
plan's with public keys, whose neighbour relation and noise are those of any query over declared
public_values (:mod:`kakeibo.sql.plan`). The engine statement filters the grouping column to the listed
values, so a key is one of them whatever the private tables hold."""

from __future__ import annotations

import datetime
from pathlib import Path

import duckdb
import numpy as np
import pyarrow as pa
import pytest

import kakeibo
from kakeibo.backends import DuckDBBackend
from kakeibo.data.tpch import QUERIES
from kakeibo.data.tpch import catalog as tpch_catalog
from kakeibo.privacy import PureDP
from kakeibo.sql import Catalog

Q5_BY_NATION = (
    "SELECT n_name, COUNT(*) AS n FROM customer JOIN orders ON c_custkey = o_custkey "
    "JOIN nation ON c_nationkey = n_nationkey WHERE o_orderdate < DATE '1992-02-01' GROUP BY n_name"
)


def _session(path: Path, tmp_path: Path, budget: object) -> kakeibo.Session:
    backend = DuckDBBackend(duckdb.connect(str(path), read_only=True))
    catalog = Catalog.from_toml(tpch_catalog())
    return kakeibo.connect(backend, catalog=catalog, ledger=str(tmp_path / "l.sqlite"), budget=budget)


def test_a_public_tables_column_releases_all_its_keys_under_a_pure_epsilon_budget(
    tpch_duckdb: Path, tmp_path: Path
) -> None:
    session = _session(tpch_duckdb, tmp_path, 10.0)  # pure epsilon: no delta for a selection
    nations = sorted(
        r[0]
        for r in duckdb.connect(str(tpch_duckdb), read_only=True).sql("SELECT n_name FROM nation").fetchall()
    )
    result = session.sql(Q5_BY_NATION, epsilon=1)
    released = result.to_arrow().to_pylist()
    assert sorted(r["n_name"] for r in released) == nations and len(nations) == 25  # empty groups included
    assert isinstance(result.privacy_loss, PureDP)
    plan = session.plan(Q5_BY_NATION, epsilon=1)
    assert plan.selection is None and plan.public_keys is not None and len(plan.public_keys) == 25
    assert "all 25 public keys" in session.explain(Q5_BY_NATION, epsilon=1)


def test_tpch_q5_answers_under_a_pure_epsilon_budget(tpch_duckdb: Path, tmp_path: Path) -> None:
    session = _session(tpch_duckdb, tmp_path, 10.0)
    rows = session.sql(QUERIES["Q5"], epsilon=1).to_arrow().to_pylist()
    assert len(rows) == 25 and {r["n_name"] for r in rows} >= {"CHINA", "INDIA", "JAPAN"}


def test_a_public_column_with_declared_values_keeps_them(tpch_duckdb: Path, tmp_path: Path) -> None:
    """What the catalog declares is not replaced by the table's values."""
    backend = DuckDBBackend(duckdb.connect(str(tpch_duckdb), read_only=True))
    text = (
        Path(tpch_catalog())
        .read_text()
        .replace(
            'n_name      = "str"', 'n_name      = { type = "str", public_values = ["JAPAN", "ATLANTIS"] }'
        )
    )
    catalog = Catalog.from_toml(text)
    session = kakeibo.connect(backend, catalog=catalog, ledger=str(tmp_path / "l.sqlite"), budget=10.0)
    rows = session.sql(Q5_BY_NATION, epsilon=1).to_arrow().to_pylist()
    assert sorted(r["n_name"] for r in rows) == ["ATLANTIS", "JAPAN"]


def test_more_values_than_the_limit_keep_partition_selection(
    tpch_duckdb: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from kakeibo.sql import session as session_module

    monkeypatch.setattr(session_module, "PUBLIC_TABLE_KEYS", 3)  # nation has 25
    session = _session(tpch_duckdb, tmp_path, (10.0, 1e-5))
    plan = session.plan(Q5_BY_NATION, epsilon=1)
    assert plan.selection is not None and plan.public_keys is None


def test_the_keys_are_read_whatever_the_tables_and_columns_are_named(tmp_path: Path) -> None:
    """The statement quotes the catalog's names (a double quote inside one included)."""
    con = duckdb.connect()
    con.execute('CREATE TABLE "my ""people""" AS SELECT * FROM (VALUES (1, \'a\'), (2, \'b\')) t(id, k)')
    con.execute(
        "CREATE TABLE \"ci\"\"ty\" AS SELECT * FROM (VALUES ('a', 'x'), ('c', 'z')) t(k, \"na\"\"me\")"
    )
    people = {"privacy_unit": "id", "max_rows_per_partition": 1, "max_partitions": 1}
    city = {"public": True, "columns": {"k": {"type": "str", "unique": True}, 'na"me': "str"}}
    catalog = Catalog.from_dict(
        {"tables": {'my "people"': {**people, "columns": {"id": "int", "k": "str"}}, 'ci"ty': city}}
    )
    session = kakeibo.connect(
        DuckDBBackend(con), catalog=catalog, ledger=str(tmp_path / "l.sqlite"), budget=10.0
    )
    sql = (
        'SELECT c."na""me", COUNT(*) AS n FROM "my ""people""" p JOIN "ci""ty" c ON p.k = c.k '
        'GROUP BY c."na""me"'
    )
    rows = session.sql(sql, epsilon=1).to_arrow().to_pylist()
    assert sorted(r['na"me'] for r in rows) == ["x", "z"]  # "z": a key no person has


# -- keys a date column's declared bounds make public -------------------------------------------------

DATED = Catalog.from_dict(
    {
        "tables": {
            "orders": {
                "privacy_unit": "cust",
                "max_partitions": 3,
                "max_rows_per_partition": 5,
                "columns": {
                    "cust": "int",
                    "order_date": {"type": "date", "lower": "2025-01-01", "upper": "2025-12-31"},
                },
            }
        }
    }
)
BY_MONTH = (
    "SELECT DATE_TRUNC('month', order_date) AS m, COUNT(*) AS n FROM orders "
    "GROUP BY DATE_TRUNC('month', order_date)"
)


def _orders(extra: tuple[tuple[int, str], ...] = ()) -> pa.Table:
    """Orders from March to May 2025 only (the other months are empty), plus ``extra`` rows."""
    rng = np.random.default_rng(2)
    days = datetime.date(2025, 3, 1) + np.array(
        [datetime.timedelta(days=int(d)) for d in rng.integers(0, 90, 800)]
    )
    rows = [(int(c), d) for c, d in zip(rng.integers(0, 300, 800), days, strict=True)]
    rows += [(c, datetime.date.fromisoformat(d)) for c, d in extra]
    return pa.table({"cust": [r[0] for r in rows], "order_date": pa.array([r[1] for r in rows], pa.date32())})


def test_a_date_columns_bounds_make_its_days_and_months_public_keys() -> None:
    column = DATED.table("orders").column("order_date")
    assert len(column.public_values) == 365 and column.days == (
        datetime.date(2025, 1, 1),
        datetime.date(2025, 12, 31),
    )
    assert Catalog.from_dict(DATED.to_dict()).table("orders").column("order_date").days == column.days
    for bad in (
        {"lower": "2025-12-31", "upper": "2025-01-01"},
        {"lower": "1990-01-01", "upper": "2025-12-31"},  # more than 10,000 days
        {"lower": "2025-01-01", "upper": "next year"},
        {"lower": "2025-01-01", "upper": "2025-12-31", "public_values": ["2025-01-01"]},
    ):
        with pytest.raises(kakeibo.ArgumentError):
            Catalog.from_dict({"tables": {"t": {"columns": {"d": {"type": "date", **bad}}}}})


def test_months_of_a_bounded_date_release_under_pure_epsilon_whatever_the_data() -> None:
    """Every month of 2025 is released (nine of them empty), with no selection and no delta, and a
    neighbour with a row outside the bounds (or at their ends) releases the same keys."""
    keys = []
    for extra in ((), ((9_999, "1999-01-01"), (9_999, "2025-12-31"))):
        backend = DuckDBBackend()
        backend.load_table("orders", _orders(extra))
        session = kakeibo.connect(backend, catalog=DATED, ledger=":memory:", budget=10.0)
        result = session.sql(BY_MONTH, epsilon=1)
        assert isinstance(result.privacy_loss, PureDP)
        keys.append([r["m"] for r in result.to_arrow().to_pylist()])
        plan = session.plan(BY_MONTH, epsilon=1)
        assert plan.selection is None and plan.public_keys is not None
    assert keys[0] == keys[1] == [datetime.date(2025, month, 1) for month in range(1, 13)]
