"""The same DP SQL query on DuckDB, PostgreSQL and Spark (local): identical bounded aggregates.

The comparison is on the engine-side bounded aggregates (kakeibo's compiled statement, translated by
sqlglot), never on a switch that turns noise off. The data keep every user within L0 groups, so the only
random step of the bounding (which L0 groups a user keeps) has nothing to choose, while users with more
than kappa rows per group exercise the deterministic clamping and scaling.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pytest
import sqlglot

import kakeibo
from kakeibo.backends import Backend, DuckDBBackend
from kakeibo.privacy import ApproxDP
from kakeibo.sql import Catalog
from kakeibo.sql.rewrite import bounded_sql

pytestmark = pytest.mark.xdist_group("spark")

CATALOG = Catalog.from_toml(
    """
[tables.visits]
privacy_unit = "user_id"
max_partitions = 3
max_rows_per_partition = 4
[tables.visits.columns]
user_id = { type = "int" }
category = { type = "str" }
amount = { type = "float", lower = 0, upper = 100 }
age = { type = "int", lower = 0, upper = 120, user_constant = true }
"""
)

QUERIES = [
    "SELECT category, COUNT(*) AS n, SUM(amount) AS total, AVG(amount) AS mean FROM visits GROUP BY category",
    "SELECT COUNT(*) AS n, COUNT(DISTINCT user_id) AS people FROM visits WHERE age BETWEEN 20 AND 60",
    "SELECT category, COUNT(amount) AS n FROM visits WHERE amount > 10 GROUP BY category",
    # quantiles: one row per (group, histogram, bucket) with weighted statistics and bucket masses
    "SELECT category, MEDIAN(amount) AS m, COUNT(*) AS n, AVG(amount) AS mean FROM visits GROUP BY category",
    "SELECT category, MIN(age) AS youngest, QUANTILE(amount, 0.9) AS p90, COUNT(DISTINCT user_id) AS people "
    "FROM visits GROUP BY category",
]


def _visits() -> pa.Table:
    rng = np.random.default_rng(42)
    users, categories, amounts, ages = [], [], [], []
    for user in range(300):
        own = rng.choice(["a", "b", "c", "d", "e"], size=rng.integers(1, 4), replace=False)  # <= L0 = 3
        for category in own:
            for _ in range(rng.integers(1, 9)):  # up to 8 rows: above kappa = 4 for many
                users.append(user)
                categories.append(str(category))
                amounts.append(None if rng.random() < 0.05 else float(rng.gamma(2.0, 30.0)))
                ages.append(int(20 + user % 60))
    return pa.table({"user_id": users, "category": categories, "amount": amounts, "age": ages})


def _bounded(backend: Backend, query: str) -> list[tuple[Any, ...]]:
    plan = kakeibo.sql.plan_query(kakeibo.sql.analyze(query, CATALOG), epsilon=1, delta=1e-6)
    statement = sqlglot.transpile(bounded_sql(plan), read="duckdb", write=backend.dialect)[0]
    table = backend.execute(statement)
    rows = [
        tuple(round(v, 6) if isinstance(v, float) else v for v in row.values()) for row in table.to_pylist()
    ]
    return sorted(rows, key=repr)


@pytest.mark.parametrize("query", QUERIES)
def test_bounded_aggregates_are_identical_on_three_engines(
    query: str, postgres_backend: Backend, spark_backend: Backend
) -> None:
    data = _visits()
    duck = DuckDBBackend()
    for backend in (duck, postgres_backend, spark_backend):
        backend.load_table("visits", data)
    expected = _bounded(duck, query)
    assert expected, "the query must return groups"
    assert _bounded(postgres_backend, query) == expected
    assert _bounded(spark_backend, query) == expected


def test_sessions_answer_on_postgres_and_spark(
    tmp_path: Path, postgres_backend: Backend, spark_backend: Backend
) -> None:
    data = _visits()
    for i, backend in enumerate((postgres_backend, spark_backend)):
        backend.load_table("visits", data)
        session = kakeibo.connect(
            backend, catalog=CATALOG, ledger=tmp_path / f"l{i}.sqlite", budget=ApproxDP(4, 1e-5)
        )
        # ~120 users per category; at epsilon 3 split over 5 statistics the selection threshold is ~75.
        result = session.sql(QUERIES[0], epsilon=3, rng=np.random.default_rng(i)).to_pandas()
        assert set(result["category"]) <= {"a", "b", "c", "d", "e"} and len(result) >= 3
        assert (result["n_ci_low"] < result["n"]).all() and (result["n"] < result["n_ci_high"]).all()
        assert session.ledger.spent() == ApproxDP(3, 1e-7)  # default delta: 1/100 of the budget's 1e-5
