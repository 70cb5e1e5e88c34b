"""Session fixtures with TPC-H data at scale factor 0.01 (1,500 customers, 15,000 orders, 60,175 line
items): the Parquet files, the Arrow tables, a DuckDB file, and the same tables in the PostgreSQL and
Spark test backends of ``backend_fixtures``.

Loaded as a pytest plugin by ``tests/conftest.py``. The data are generated on this machine by
``tpchgen-cli`` (kakeibo's ``dev`` extra; about 1 s) into the session's temporary folder, so a clean
clone needs nothing but its installed packages. With ``pytest -n N`` every worker that asks for the data
generates its own copy. A test that reads the PostgreSQL or Spark tables belongs in the xdist group
``"postgres"`` or ``"spark"`` (``pytest.mark.xdist_group``), as the other engine tests do, so that one
worker starts the server or the JVM.

The tables are shared by the whole session: read them, never change them. The DuckDB file is meant to
be opened with ``read_only=True``.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from kakeibo.data.tpch import arrow_tables, generate, load_duckdb

TPCH_SCALE = 0.01


@pytest.fixture(scope="session")
def tpch_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The folder of the eight TPC-H Parquet files at scale factor 0.01, generated once per session."""
    return generate(TPCH_SCALE, tmp_path_factory.mktemp("tpch-sf0.01"))


@pytest.fixture(scope="session")
def tpch_tables(tpch_dir: Path) -> dict[str, pa.Table]:
    """The eight tables as Arrow, with the catalog's types (:func:`kakeibo.data.tpch.arrow_tables`)."""
    return arrow_tables(tpch_dir)


@pytest.fixture(scope="session")
def tpch_duckdb(tpch_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The path of a DuckDB file holding the eight tables (:func:`kakeibo.data.tpch.load_duckdb`); open it
    with ``read_only=True``."""
    path = tmp_path_factory.mktemp("tpch-duckdb") / "tpch.duckdb"
    load_duckdb(path, tpch_dir)
    return path


def postgres_database_with(server_conninfo: str, tables: dict[str, pa.Table]) -> str:
    """Conninfo of a new database on the PostgreSQL server of ``server_conninfo`` holding ``tables`` (loaded
    with :meth:`PostgresBackend.load_table`). It goes with the server at the end of the session."""
    import psycopg

    from kakeibo.backends.postgres import PostgresBackend

    params = dict(part.split("=", 1) for part in server_conninfo.split())
    name = f"kakeibo_tpch_{uuid.uuid4().hex[:10]}"
    admin = " ".join(f"{k}={v}" for k, v in {**params, "dbname": "postgres"}.items())
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(f"CREATE DATABASE {name}".encode())
    conninfo = " ".join(f"{k}={v}" for k, v in {**params, "dbname": name}.items())
    backend = PostgresBackend(conninfo)
    try:
        for table, data in tables.items():
            backend.load_table(table, data)
    finally:
        backend.close()
    return conninfo


@contextmanager
def three_engines(server_conninfo: str, spark: Any, tables: dict[str, pa.Table]) -> Iterator[dict[str, Any]]:
    """``tables`` on each engine, by its dialect name: in memory (DuckDB), a new database on the server of
    ``server_conninfo`` (PostgreSQL), a new session of the ``spark`` test backend's context (Spark);
    closed on leaving."""
    from kakeibo.backends import DuckDBBackend
    from kakeibo.backends.postgres import PostgresBackend
    from kakeibo.backends.spark import SparkBackend

    built: dict[str, Any] = {
        "duckdb": DuckDBBackend(),
        "postgres": PostgresBackend(postgres_database_with(server_conninfo, tables)),
        "spark": SparkBackend(session=spark.session.newSession()),
    }
    for name in ("duckdb", "spark"):
        for table, data in tables.items():
            built[name].load_table(table, data)
    try:
        yield built
    finally:
        for backend in built.values():
            backend.close()


@pytest.fixture(scope="session")
def tpch_postgres_database(postgres_server: str, tpch_tables: dict[str, pa.Table]) -> str:
    """Conninfo of a database of its own on the session's PostgreSQL server, holding the eight tables."""
    return postgres_database_with(postgres_server, tpch_tables)


@pytest.fixture
def tpch_postgres(tpch_postgres_database: str) -> Iterator[Any]:
    """A :class:`~kakeibo.backends.postgres.PostgresBackend` on the TPC-H database, closed afterwards."""
    from kakeibo.backends.postgres import PostgresBackend

    backend = PostgresBackend(tpch_postgres_database)
    try:
        yield backend
    finally:
        backend.close()


@pytest.fixture(scope="session")
def tpch_spark(spark_backend: Any, tpch_tables: dict[str, pa.Table]) -> Iterator[Any]:
    """A :class:`~kakeibo.backends.spark.SparkBackend` on the session's Spark context with the eight tables
    as its views (loaded with :meth:`SparkBackend.load_table`), in a Spark session of its own so that no
    other test's view of the same name replaces them."""
    from kakeibo.backends.spark import SparkBackend

    backend = SparkBackend(session=spark_backend.session)
    try:
        for table, data in tpch_tables.items():
            backend.load_table(table, data)
        yield backend
    finally:
        backend.close()
