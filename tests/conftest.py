"""Shared test setup: the engine and TPC-H fixture plugins, the neighbouring worlds of every engine, and the
xdist groups made to work again.

``pytest -n 2 --dist loadgroup`` (``make test``) sends the tests of one ``xdist_group`` to one worker, so
that one PostgreSQL server and one JVM serve the engine tests. pytest-xdist 3.8 marks a grouped test by
appending ``@<group>`` to ``item._nodeid`` on the worker, but pytest 9.2 reads a test's id from
``item._id`` (a structured ``NodeId``), so the mark was lost and every worker started its own server and
JVM. The hook below, run after xdist's, moves the suffixed id where pytest 9.2 reads it; it does nothing
where the two agree (older pytest, or no grouping).
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from adversarial_harness import ENGINES, Worlds, duckdb_worlds, postgres_worlds, spark_worlds

pytest_plugins = ["backend_fixtures", "tpch_fixtures"]


@pytest.fixture(scope="module", params=ENGINES)
def engine_worlds(request: pytest.FixtureRequest) -> Iterator[Worlds]:
    """The neighbouring databases of :mod:`adversarial_harness` on one engine, built once per module and
    engine (PostgreSQL on the session's server, Spark in sessions of the session's context)."""
    engine = request.param
    if engine == "duckdb":
        built = duckdb_worlds()
    elif engine == "postgres":
        built = postgres_worlds(request.getfixturevalue("postgres_server"))
    else:
        built = spark_worlds(request.getfixturevalue("spark_backend"))
    try:
        yield built
    finally:
        built.close()


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if not getattr(config.option, "loadgroup", False):
        return
    try:
        from _pytest.nodeid import NodeId
    except ImportError:  # a pytest that reads item._nodeid itself
        return
    for item in items:
        grouped = getattr(item, "_nodeid", None)
        if isinstance(grouped, str) and grouped != item.nodeid and hasattr(item, "_id"):
            item._id = NodeId.parse(grouped)
