"""Tables in a schema of their own (issue 32: SmartNoise's queries name their table ``PUMS.PUMS``).

A catalog table may declare the engine ``schema`` it lives in: every statement kakeibo writes reads it
there (``TableSpec.engine_name``), and a query may name it with that schema or without one; any other
qualifier, the engine's default schema included, names another table and is refused. The privacy claims
are those of the same queries on a table of the default schema (the statement differs by its FROM only),
so the tests here check that the schema's table is the one read, on DuckDB, PostgreSQL and Spark."""

from __future__ import annotations

from typing import Any

import pyarrow as pa
import pytest

import kakeibo
from kakeibo.backends import DuckDBBackend
from kakeibo.errors import ArgumentError
from kakeibo.sql import Catalog, QueryRefused
from kakeibo.sql.rewrite import bounded_sql

CATALOG = Catalog.from_dict(
    {
        "tables": {
            "pums": {
                "schema": "PUMS",
                "columns": {
                    "age": {"type": "int", "lower": 0, "upper": 100},
                    "sex": {"type": "str", "public_values": ["0", "1"]},
                },
            }
        }
    }
)
#: the schema's table and a decoy of the same name in the default schema, which no query may read
IN_SCHEMA = pa.table({"age": [30, 40, 50, 60] * 50, "sex": ["0", "1"] * 100})
DECOY = pa.table({"age": [1] * 7, "sex": ["0"] * 7})


def _duckdb() -> DuckDBBackend:
    backend = DuckDBBackend()
    backend.load_table("pums", DECOY)
    backend.execute("CREATE SCHEMA pums")
    backend.execute("CREATE TABLE pums.pums AS SELECT * FROM pums")  # the decoy's shape ...
    backend.execute("DELETE FROM pums.pums")
    for age, sex in zip(IN_SCHEMA["age"].to_pylist(), IN_SCHEMA["sex"].to_pylist(), strict=True):
        backend.execute(f"INSERT INTO pums.pums VALUES ({age}, '{sex}')")  # ... with the schema's rows
    return backend


def test_the_catalog_keeps_a_tables_schema() -> None:
    spec = CATALOG.table("pums")
    assert spec.schema == "pums" and spec.engine_name() == '"pums"."pums"'
    assert spec.engine_name("spark") == "`pums`.`pums`"
    assert Catalog.from_dict(CATALOG.to_dict()).table("pums").schema == "pums"
    with pytest.raises(ArgumentError, match="drop its schema, or its source"):
        Catalog.from_dict({"tables": {"t": {"schema": "s", "source": "t.csv", "columns": {"a": "int"}}}})


@pytest.mark.parametrize(
    "query",
    [
        "SELECT COUNT(*) AS n, SUM(age) AS s FROM PUMS.PUMS",
        "SELECT COUNT(*) AS n, SUM(age) AS s FROM pums",
        "SELECT COUNT(*) AS n, SUM(PUMS.age) AS s FROM PUMS.PUMS WHERE PUMS.sex IN ('0', '1')",
        "SELECT COUNT(*) AS n, SUM(p.age) AS s FROM PUMS.PUMS AS p",
    ],
)
def test_a_query_reads_the_schemas_table_with_or_without_its_schema(query: str) -> None:
    session = kakeibo.connect(_duckdb(), catalog=CATALOG, ledger=":memory:", budget=100.0)
    plan = session.plan(query, epsilon=1)
    assert 'FROM "pums"."pums"' in bounded_sql(plan)
    row = session.backend.execute(bounded_sql(plan)).to_pylist()[0]
    assert (row["rows"], row["s_age"]) == (200, 9_000)  # the schema's rows, not the decoy's


@pytest.mark.parametrize(
    ("query", "fragment"),
    [
        ("SELECT COUNT(*) AS n FROM main.pums", "lives in the schema pums, not main"),
        ("SELECT COUNT(*) AS n FROM other.pums", "lives in the schema pums, not other"),
        ("SELECT COUNT(*) AS n FROM pums WHERE main.pums.age > 3", "too many qualifiers"),
    ],
)
def test_another_schema_is_refused_free(query: str, fragment: str) -> None:
    session = kakeibo.connect(_duckdb(), catalog=CATALOG, ledger=":memory:", budget=100.0)
    with pytest.raises(QueryRefused, match=fragment):
        session.sql(query, epsilon=1)
    assert session.ledger.spent().epsilon == 0


@pytest.mark.xdist_group("spark")
def test_postgres_reads_the_schemas_table_and_spark_refuses_it_free(
    postgres_server: str, spark_backend: Any
) -> None:
    """PostgreSQL answers from the schema's table, not the decoy of the default schema. Spark's backend
    serves only its own temporary views, which live in no schema: it refuses the table before anything
    is charged (the same refusal in every world)."""
    from kakeibo.backends.postgres import PostgresBackend
    from kakeibo.backends.spark import SparkBackend
    from tpch_fixtures import postgres_database_with

    postgres = PostgresBackend(postgres_database_with(postgres_server, {"pums": DECOY, "staged": IN_SCHEMA}))
    postgres.execute("CREATE SCHEMA pums")
    postgres.execute("CREATE TABLE pums.pums AS SELECT * FROM staged")
    spark = SparkBackend(session=spark_backend.session.newSession())
    spark.load_table("pums", DECOY)
    try:
        session = kakeibo.connect(postgres, catalog=CATALOG, ledger=":memory:", budget=1e6)
        row = session.sql("SELECT COUNT(*) AS n FROM PUMS.PUMS", epsilon=1e5).to_arrow().to_pylist()[0]
        assert abs(row["n"] - 200) <= 1
        session = kakeibo.connect(spark, catalog=CATALOG, ledger=":memory:", budget=1e6)
        with pytest.raises(Exception, match="runs only queries over its own tables"):
            session.sql("SELECT COUNT(*) AS n FROM PUMS.PUMS", epsilon=1)
        assert session.ledger.spent().epsilon == 0
    finally:
        postgres.close()
        spark.close()
