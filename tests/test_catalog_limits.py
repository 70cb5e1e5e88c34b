"""A contribution limit a table with persons leaves out is undeclared, never a silent 1 (issue 31).

A query that needs the missing limit is refused, naming the table, the limit and the ways to declare it,
before any statement reaches the engine and before any charge; a query that does not need it is answered
as if it were declared 1 (an ungrouped query, or one grouped by a column constant per person, keeps one
group of each person whatever L0 is). A row-level table needs neither limit.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

import kakeibo
from kakeibo.backends import DuckDBBackend
from kakeibo.privacy import ApproxDP
from kakeibo.sql import Catalog, QueryRefused, analyze
from kakeibo.sql.catalog import ColumnSpec, TableSpec
from kakeibo.sql.rewrite import bounded_sql
from kakeibo.sql.session import Session

COLUMNS = {
    "user_id": "int",
    "category": "str",
    "region": {"type": "str", "user_constant": True},
    "amount": {"type": "float", "lower": 0, "upper": 100},
}
GROUPED = "SELECT category, COUNT(*) AS n FROM visits GROUP BY category"
UNGROUPED = "SELECT COUNT(*) AS n, SUM(amount) AS total FROM visits"
BY_REGION = "SELECT region, COUNT(*) AS n FROM visits GROUP BY region"


def _catalog(**limits: object) -> Catalog:
    return Catalog.from_dict(
        {"tables": {"visits": {"privacy_unit": "user_id", **limits, "columns": COLUMNS}}}
    )


def _data() -> pa.Table:
    rng = np.random.default_rng(3)
    users = rng.integers(0, 300, 3000)
    return pa.table(
        {
            "user_id": users,
            "category": rng.choice(["food", "rent", "travel"], users.size),
            "region": np.where(users % 2 == 0, "north", "south"),
            "amount": rng.uniform(0, 120, users.size),
        }
    )


class RecordingBackend(DuckDBBackend):
    """DuckDB that records every statement kakeibo sends it."""

    def __init__(self) -> None:
        super().__init__()
        self.statements: list[str] = []

    def execute(self, sql: str, *, timeout: float | None = None) -> pa.Table:
        self.statements.append(sql)
        return super().execute(sql, timeout=timeout)


def _session(catalog: Catalog, tmp_path: Path) -> tuple[Session, list[str]]:
    """A session on the data, and the statements it sends to the engine."""
    backend = RecordingBackend()
    backend.load_table("visits", _data())
    session = kakeibo.connect(backend, catalog=catalog, ledger=tmp_path / "l.sqlite", budget=(10, 1e-5))
    return session, backend.statements


@pytest.mark.parametrize(
    ("limits", "query", "missing"),
    [
        ({"max_rows_per_partition": 5}, GROUPED, "max_partitions"),
        ({"max_partitions": 3}, UNGROUPED, "max_rows_per_partition"),
        ({"max_partitions": 3}, GROUPED, "max_rows_per_partition"),
        ({}, BY_REGION, "max_rows_per_partition"),
    ],
)
def test_a_query_that_needs_an_undeclared_limit_is_refused_before_any_read_or_charge(
    limits: dict[str, object], query: str, missing: str, tmp_path: Path
) -> None:
    session, statements = _session(_catalog(**limits), tmp_path)
    for ask in (
        lambda: session.sql(query, epsilon=1),
        lambda: session.explain(query, epsilon=1),
        lambda: session.plan(query, epsilon=1),
    ):
        with pytest.raises(QueryRefused) as refused:
            ask()
        assert isinstance(refused.value, kakeibo.Error)
        message = str(refused.value)
        assert f"table visits declares no {missing}" in message, message
        assert f"as a whole number ({missing} = 3)" in message and 'or as "auto"' in message, message
    assert statements == []
    assert session.ledger.entries() == [] and session.ledger.spent() == ApproxDP(0, 0)


@pytest.mark.parametrize("query", [UNGROUPED, BY_REGION])
def test_a_query_whose_persons_keep_one_group_needs_no_max_partitions(query: str, tmp_path: Path) -> None:
    """Ungrouped, or grouped by a user_constant column: the bounded statement is the one the catalog
    declaring max_partitions = 1 gives, and the query is answered."""
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    undeclared, statements = _session(_catalog(max_rows_per_partition=5), tmp_path / "a")
    declared, _ = _session(_catalog(max_rows_per_partition=5, max_partitions=1), tmp_path / "b")
    plan = undeclared.plan(query, epsilon=1)
    assert plan.max_partitions == 1
    assert bounded_sql(plan) == bounded_sql(declared.plan(query, epsilon=1))
    result = undeclared.sql(query, epsilon=1, rng=np.random.default_rng(0))
    assert result.to_arrow().num_rows >= 1 and len(undeclared.ledger.entries()) == 1
    assert statements  # the recording sees what reaches the engine


def test_a_grouped_query_may_give_the_missing_limit_itself(tmp_path: Path) -> None:
    session, _ = _session(_catalog(max_rows_per_partition=5), tmp_path)
    plan = session.plan(GROUPED, epsilon=1, bounds={"max_partitions": 2})
    assert plan.max_partitions == 2


def test_a_table_reached_by_reference_refuses_alike() -> None:
    catalog = Catalog.from_dict(
        {
            "tables": {
                "people": {"privacy_unit": "pid", "max_rows_per_partition": 1, "columns": {"pid": "int"}},
                "orders": {
                    "references": {"pid": "people.pid"},
                    "max_rows_per_partition": 4,
                    "columns": {"pid": "int", "day": "int"},
                },
            }
        }
    )
    assert analyze("SELECT COUNT(*) FROM orders", catalog).max_partitions == 1
    with pytest.raises(QueryRefused, match="table orders declares no max_partitions"):
        analyze("SELECT day, COUNT(*) FROM orders GROUP BY day", catalog)


def test_a_row_level_table_needs_neither_limit() -> None:
    catalog = Catalog.from_dict({"tables": {"people": {"columns": {"city": "str", "age": "int"}}}})
    table = catalog.table("people")
    assert (table.max_partitions, table.max_rows_per_partition) == (1, 1)
    query = analyze("SELECT city, COUNT(*) FROM people GROUP BY city", catalog)
    assert (query.max_partitions, query.max_rows_per_partition) == (1, 1)
    assert "max_partitions" not in table.to_dict()


@pytest.mark.parametrize(
    "limits",
    [
        {},
        {"max_partitions": 3},
        {"max_rows_per_partition": "auto"},
        {"max_partitions": 2, "max_rows_per_partition": 4},
    ],
)
def test_an_undeclared_limit_round_trips_as_omitted(limits: dict[str, object]) -> None:
    catalog = _catalog(**limits)
    entry = catalog.to_dict()["tables"]["visits"]
    assert {k: entry[k] for k in ("max_partitions", "max_rows_per_partition") if k in entry} == limits
    assert catalog.table("visits").declared_limits == limits
    assert Catalog.from_dict(catalog.to_dict()) == catalog


def test_python_construction_leaves_an_omitted_limit_undeclared() -> None:
    columns = {"user_id": ColumnSpec("user_id", "int")}
    table = TableSpec("visits", columns, privacy_unit="user_id", max_partitions=2)
    assert table.max_rows_per_partition is None and table.declared_limits == {"max_partitions": 2}
    with pytest.raises(QueryRefused, match="declares no max_rows_per_partition"):
        analyze("SELECT COUNT(*) FROM visits", Catalog([table]))


def test_a_race_needs_a_whole_number_max_partitions_when_the_catalog_loads() -> None:
    """The R2T race runs at a fixed L0, which "auto" cannot give: its table declares one up front."""
    race = {"max_rows_per_partition": "auto", "bound_selection": "race"}
    with pytest.raises(kakeibo.errors.ArgumentError, match="at a fixed max_partitions"):
        _catalog(**race)
    assert _catalog(max_partitions=2, **race).table("visits").auto_truncation
