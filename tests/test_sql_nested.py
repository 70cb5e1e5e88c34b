"""Nested queries read as the flat query they mean (issue 32; :mod:`kakeibo.sql.nested`).

A subquery in FROM or a common table expression that selects, computes and filters its table's rows one by
one, or that sums and counts each person's rows (per-person totals, aggregated again outside), is replaced
by what it means before analysis, so the engine statement, the noise and the charge are
those of the flat query (the privacy claim is the flat query's: checked here by equality of the compiled
statements and of seeded releases). The differential fuzzer reads ``visits`` through both forms on DuckDB,
PostgreSQL and Spark (``tests/adversarial_harness.py``: ``SOURCES``)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

import kakeibo
from kakeibo.backends import DuckDBBackend
from kakeibo.sql import Catalog, QueryRefused
from kakeibo.sql.analyze import analyze
from kakeibo.sql.plan import plan_query
from kakeibo.sql.rewrite import bounded_sql

CATALOG = Catalog.from_dict(
    {
        "tables": {
            "visits": {
                "privacy_unit": "user_id",
                "max_partitions": 2,
                "max_rows_per_partition": 3,
                "columns": {
                    "user_id": "int",
                    "category": {"type": "str", "public_values": ["a", "b"]},
                    "amount": {"type": "float", "lower": 0, "upper": 100},
                    "age": {"type": "int", "lower": 0, "upper": 120},
                },
            }
        }
    }
)

PAIRS = [
    (
        "SELECT category, SUM(x) AS s FROM (SELECT category, amount * 2 AS x FROM visits WHERE age > 30) v "
        "WHERE category = 'a' GROUP BY category",
        "SELECT category, SUM(amount * 2) AS s FROM visits WHERE (age > 30) AND (category = 'a') "
        "GROUP BY category",
    ),
    (
        "WITH v AS (SELECT category, amount AS x FROM visits) "
        "SELECT category, AVG(x) AS a FROM v GROUP BY category",
        "SELECT category, AVG(amount) AS a FROM visits GROUP BY category",
    ),
    (
        "SELECT COUNT(*) AS n FROM (SELECT * FROM visits WHERE amount > 5) AS visits",
        "SELECT COUNT(*) AS n FROM visits WHERE amount > 5",
    ),
    (
        "SELECT bucket, COUNT(*) AS n FROM (SELECT CASE WHEN age < 30 THEN 'young' ELSE 'old' END AS bucket "
        "FROM visits) t GROUP BY bucket",
        "SELECT CASE WHEN age < 30 THEN 'young' ELSE 'old' END AS bucket, COUNT(*) AS n FROM visits "
        "GROUP BY CASE WHEN age < 30 THEN 'young' ELSE 'old' END",
    ),
    (
        "SELECT t.category, COUNT(*) AS n FROM (SELECT category FROM visits) t GROUP BY t.category",
        "SELECT category, COUNT(*) AS n FROM visits GROUP BY category",
    ),
    # per-person totals: totals of totals are the table's aggregates (the flat query truncates each
    # person's total as any query on the table does)
    (
        "SELECT SUM(s) AS total, COUNT(*) AS people, AVG(c) AS per_person FROM (SELECT user_id, "
        "SUM(amount) AS s, COUNT(*) AS c FROM visits WHERE age > 30 GROUP BY user_id) t",
        "SELECT SUM(amount) AS total, COUNT(DISTINCT user_id) AS people, COUNT(*) / COUNT(DISTINCT "
        "user_id) AS per_person FROM visits WHERE (age > 30)",
    ),
    (
        "WITH p AS (SELECT user_id, category, SUM(amount * 2) AS s, COUNT(amount) AS c FROM visits "
        "GROUP BY user_id, category) SELECT category, SUM(s) / COUNT(*) AS mean_total, SUM(c) AS n "
        "FROM p WHERE category = 'a' GROUP BY category HAVING n > 1 ORDER BY mean_total",
        "SELECT category, SUM(amount * 2) / COUNT(DISTINCT user_id) AS mean_total, COUNT(amount) AS n "
        "FROM visits WHERE (category = 'a') GROUP BY category HAVING n > 1 ORDER BY mean_total",
    ),
]


@pytest.mark.parametrize(("nested", "flat"), PAIRS)
def test_a_nested_query_compiles_to_the_flat_querys_statement(nested: str, flat: str) -> None:
    plans = [plan_query(analyze(sql, CATALOG), epsilon=1) for sql in (nested, flat)]
    assert bounded_sql(plans[0]) == bounded_sql(plans[1])
    assert plans[0].privacy_loss == plans[1].privacy_loss
    assert plans[0].query.output == plans[1].query.output


def test_a_nested_query_releases_what_the_flat_query_releases(tmp_path: Path) -> None:
    rng = np.random.default_rng(4)
    rows = 3_000
    table = pa.table(
        {
            "user_id": rng.integers(0, 800, rows),
            "category": rng.choice(["a", "b"], rows),
            "amount": rng.uniform(0, 100, rows),
            "age": rng.integers(0, 121, rows),
        }
    )
    backend = DuckDBBackend()
    backend.load_table("visits", table)
    session = kakeibo.connect(backend, catalog=CATALOG, ledger=tmp_path / "l.sqlite", budget=100)
    nested, flat = PAIRS[0]
    answers = [session.sql(sql, epsilon=1, rng=np.random.default_rng(9)).to_arrow() for sql in (nested, flat)]
    assert answers[0].equals(answers[1])


@pytest.mark.parametrize(
    ("sql", "fragment"),
    [
        (
            "SELECT COUNT(*) AS n FROM (SELECT user_id, SUM(amount) AS s FROM visits GROUP BY user_id) t "
            "WHERE s > 5",
            "is one person's total",
        ),
        (
            "SELECT AVG(s) AS a FROM (SELECT user_id, SUM(amount) AS s FROM visits GROUP BY user_id) t",
            "write SUM(s) / COUNT(*)",
        ),
        (
            "SELECT MEDIAN(s) AS m FROM (SELECT user_id, SUM(amount) AS s FROM visits GROUP BY user_id) t",
            "is not a total of per-person totals",
        ),
        (
            "SELECT s AS m, COUNT(*) AS n FROM (SELECT user_id, SUM(amount) AS s FROM visits GROUP BY "
            "user_id) t GROUP BY s",
            "is not a GROUP BY key of the per-person subquery",
        ),
        (
            "SELECT COUNT(*) AS n FROM (SELECT category, COUNT(*) AS c FROM visits GROUP BY category) t",
            "one privacy unit",
        ),
        (
            "SELECT COUNT(*) AS n FROM (SELECT user_id, COUNT(*) AS c FROM visits GROUP BY user_id "
            "HAVING COUNT(*) > 2) t",
            "the per-person subquery uses HAVING",
        ),
        ("SELECT COUNT(*) AS n FROM (SELECT amount FROM visits LIMIT 5) t", "the subquery uses LIMIT"),
        ("SELECT COUNT(*) AS n FROM (SELECT DISTINCT amount FROM visits) t", "the subquery uses DISTINCT"),
        (
            "SELECT COUNT(*) AS n FROM (SELECT amount FROM visits ORDER BY amount) t",
            "the subquery uses ORDER BY",
        ),
        ("SELECT COUNT(*) AS n FROM (SELECT COUNT(*) AS c FROM visits) t", "the subquery uses an aggregate"),
        ("SELECT SUM(y) AS n FROM (SELECT amount AS x FROM visits) t", "the subquery t has no column y"),
        ("SELECT COUNT(*) AS n FROM (SELECT * FROM (SELECT * FROM visits) a) b", "one level of nesting"),
        (
            "WITH a AS (SELECT * FROM visits), b AS (SELECT * FROM visits) SELECT COUNT(*) FROM a",
            "one common table expression",
        ),
        ("WITH a AS (SELECT * FROM visits) SELECT COUNT(*) FROM visits", "its FROM does not read it"),
        (
            "SELECT COUNT(*) FROM (SELECT * FROM visits) t JOIN visits ON t.user_id = visits.user_id",
            "read alone",
        ),
        (
            "SELECT COUNT(u.amount) FROM (SELECT amount FROM visits) t",
            "names a table the query does not read",
        ),
        ("SELECT COUNT(*) FROM (SELECT amount + 1 FROM visits) t", "needs a name"),
        ("SELECT * FROM (SELECT amount FROM visits) t", "SELECT * would return individual rows"),
    ],
)
def test_what_is_not_a_row_by_row_subquery_is_refused(sql: str, fragment: str) -> None:
    with pytest.raises(QueryRefused) as refused:
        analyze(sql, CATALOG)
    assert fragment in str(refused.value) and str(refused.value).endswith(".")
