"""The work of an answer is bounded before it starts (issue 29, R4 and R7).

R7: a join to a public table on a repeated key fanned one person's row out to millions of joined rows
before any per-person bound, so the answer's latency told whether the person was there (0.30 s against at
most 0.007 s on PostgreSQL, at epsilon 1e-3 a query). Every public join is now on a key the catalog declares
unique in the public table, checked against the engine before the draw: the fan-out join is refused, free,
with the same sentence whether or not the person is in the data, and a lookup join is still answered.

R4: a free answer over a view computed boxes x blocks x columns weights with no limit (15-36 s of a core at
8,192 boxes). A query over a view is now refused, free, when its work, counted from the query text and the
view's public structure alone, exceeds a budget; within it, each group's weights are one sum per column
instead of one product per box.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

import kakeibo
from kakeibo.backends import DuckDBBackend
from kakeibo.sql import Catalog, QueryRefused, analyze
from kakeibo.sql.session import CatalogMismatch, Session

# -- R7: joins to public tables never fan out ------------------------------------------------------------

TARGET = 7
#: rows of the public table ``fan`` that share the target's rare key (the review used 4,000,000)
FAN_OUT = 20_000

JOIN_CATALOG = """
[tables.visits]
privacy_unit = "user_id"
max_partitions = 1
max_rows_per_partition = 3
[tables.visits.columns]
user_id = "int"
category = "str"
label = "str"

[tables.dim]
public = true
[tables.dim.columns]
category = {{ type = "str", unique = true }}
label = {{ type = "str", public_values = ["A", "B", "C", "R"] }}

[tables.fan]
public = true
[tables.fan.columns]
category = {{ type = "str", unique = {fan_unique} }}
note = "str"
"""
FAN_QUERY = (
    f"SELECT COUNT(*) AS n FROM visits JOIN fan ON visits.category = fan.category WHERE user_id = {TARGET}"
)


def _join_tables(with_target: bool) -> dict[str, pa.Table]:
    """100 persons with common categories; the target's one row has the key ``rare``, which ``fan`` repeats
    :data:`FAN_OUT` times."""
    users = list(range(100, 200))
    categories = [("a", "b", "c")[u % 3] for u in users]
    if with_target:
        users, categories = [*users, TARGET], [*categories, "rare"]
    visits = pa.table(
        {"user_id": pa.array(users, pa.int64()), "category": categories, "label": ["x"] * len(users)}
    )
    fan_keys = ["a", "b", "c"] + ["rare"] * FAN_OUT
    return {
        "visits": visits,
        "dim": pa.table({"category": ["a", "b", "c", "rare"], "label": ["A", "B", "C", "R"]}),
        "fan": pa.table({"category": fan_keys, "note": ["n"] * len(fan_keys)}),
    }


@pytest.fixture(params=["duckdb", pytest.param("postgres", marks=pytest.mark.xdist_group("postgres"))])
def engine(request: pytest.FixtureRequest) -> Any:
    """A backend of either engine; the tests load each world's tables into it in turn."""
    if request.param == "duckdb":
        return DuckDBBackend()
    return request.getfixturevalue("postgres_backend")


def _join_session(engine: Any, tmp_path: Path, with_target: bool, fan_unique: bool) -> Session:
    for name, table in _join_tables(with_target).items():
        engine.load_table(name, table)
    catalog = Catalog.from_toml(JOIN_CATALOG.format(fan_unique=str(fan_unique).lower()))
    world = "with" if with_target else "without"
    return kakeibo.connect(
        engine, catalog=catalog, ledger=tmp_path / f"{world}-{fan_unique}.sqlite", budget=10
    )


@pytest.mark.parametrize(
    ("fan_unique", "error"),
    [(False, QueryRefused), (True, CatalogMismatch)],
    ids=["undeclared", "false-claim"],
)
def test_a_fan_out_join_is_refused_before_any_charge_alike_in_both_worlds(
    engine: Any, tmp_path: Path, fan_unique: bool, error: type[Exception]
) -> None:
    """The review's shape: the target's row joins :data:`FAN_OUT` public rows, at epsilon 1e-3. A key the
    catalog does not declare unique is refused by the analysis; one it falsely declares unique is refused by
    the engine check before the draw. Either way the sentence is the same with and without the target, and
    nothing is charged."""
    sentences = []
    for with_target in (False, True):
        session = _join_session(engine, tmp_path, with_target, fan_unique)
        with pytest.raises(error) as info:
            session.sql(FAN_QUERY, epsilon=1e-3)
        sentences.append(str(info.value))
        assert session.ledger.entries() == []
        session.ledger.close()
    assert sentences[0] == sentences[1]
    assert "fan" in sentences[0] and "unique" in sentences[0]


def test_a_lookup_join_is_answered(engine: Any, tmp_path: Path) -> None:
    """The control: the same join to a public table whose key is unique is answered and charged once (the
    refusal above is about the repeated key, not about joins)."""
    session = _join_session(engine, tmp_path, True, False)
    query = "SELECT dim.label, COUNT(*) AS n FROM visits JOIN dim USING (category) GROUP BY dim.label"
    result = session.sql(query, epsilon=1)
    assert sorted(result.table.column("label").to_pylist()) == ["A", "B", "C", "R"]
    assert len(session.ledger.entries()) == 1
    session.ledger.close()


def test_the_unique_key_is_chosen_whatever_the_order_of_the_equalities() -> None:
    """With two equalities to one public table, the join is on the declared-unique key and the other one
    stays a condition, also when the query states the other one first."""
    catalog = Catalog.from_toml(JOIN_CATALOG.format(fan_unique="false"))
    query = analyze(
        "SELECT COUNT(*) AS n FROM visits, dim WHERE visits.label = dim.label "
        "AND visits.category = dim.category",
        catalog,
    )
    assert [(j.table.name, j.column) for j in query.joins] == [("dim", "category")]
    assert query.where is not None and "label" in query.where.sql("duckdb")
