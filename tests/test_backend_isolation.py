"""Several SparkBackends in one process (two Spark datasets of one query service): each reads its own tables
only, whatever order the backends are made, loaded and closed in, and a statement naming anything but the
backend's own tables is refused before it runs (security review G3).

The backends join the local Spark of the ``spark_backend`` fixture (a JVM holds one SparkContext); each
works in a session of its own.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from pyspark.errors import AnalysisException

from kakeibo.backends.spark import _CONTEXTS, SparkBackend

pytestmark = pytest.mark.xdist_group("spark")

COUNT = "SELECT COUNT(*) AS n, CAST(SUM(x) AS BIGINT) AS s FROM visits"


def rows(n: int, x: int) -> pa.Table:
    """``n`` rows, each ``x``: COUNT tells the tables apart by size, SUM by content."""
    return pa.table({"x": pa.array([x] * n, pa.int64())})


@pytest.fixture
def pair(spark_backend: SparkBackend) -> Iterator[tuple[SparkBackend, SparkBackend]]:
    first, second = SparkBackend("local[2]"), SparkBackend("local[2]")
    try:
        yield first, second
    finally:
        first.close()
        second.close()


@pytest.mark.parametrize("order", ["first loads first", "second loads first"])
def test_two_backends_each_read_their_own_table_of_the_same_name(
    pair: tuple[SparkBackend, SparkBackend], order: str
) -> None:
    first, second = pair if order == "first loads first" else pair[::-1]
    first.load_table("visits", rows(3, 1))
    second.load_table("visits", rows(5, 10))
    assert first.execute(COUNT).to_pylist() == [{"n": 3, "s": 3}]
    assert second.execute(COUNT).to_pylist() == [{"n": 5, "s": 50}]
    first.load_table("visits", rows(4, 2))  # re-registering replaces this backend's table only
    assert first.execute(COUNT).to_pylist() == [{"n": 4, "s": 8}]
    assert second.execute(COUNT).to_pylist() == [{"n": 5, "s": 50}]
    second.load_table("visits", rows(6, 100))
    assert first.execute(COUNT).to_pylist() == [{"n": 4, "s": 8}]
    assert second.execute(COUNT).to_pylist() == [{"n": 6, "s": 600}]


def test_source_files_are_views_of_their_own_backend(
    pair: tuple[SparkBackend, SparkBackend], tmp_path: Path
) -> None:
    eu, us = pair
    pq.write_table(rows(7, 1), tmp_path / "eu.parquet")
    pq.write_table(rows(9, 2), tmp_path / "us.parquet")
    us.register_source("visits", tmp_path / "us.parquet")  # made second, registered first
    eu.register_source("visits", tmp_path / "eu.parquet")
    assert eu.execute(COUNT).to_pylist() == [{"n": 7, "s": 7}]
    assert us.execute(COUNT).to_pylist() == [{"n": 9, "s": 18}]


def test_a_name_registered_in_one_backend_is_not_found_in_another(
    pair: tuple[SparkBackend, SparkBackend], spark_backend: SparkBackend
) -> None:
    first, second = pair
    first.load_table("only_first", rows(2, 1))
    assert first.execute("SELECT COUNT(*) AS n FROM only_first").to_pylist() == [{"n": 2}]
    for backend in (second, spark_backend):
        with pytest.raises(AnalysisException, match="'only_first' is not loaded in this backend"):
            backend.execute("SELECT COUNT(*) AS n FROM only_first")
    spark_backend.load_table("only_fixture", rows(1, 1))
    with pytest.raises(AnalysisException, match="not loaded in this backend"):
        first.execute("SELECT * FROM only_fixture")
    # a borrowed session is a new session too: it sees neither the lender's tables nor lends its own
    borrowed = SparkBackend(session=first.session)
    try:
        with pytest.raises(AnalysisException, match="not loaded in this backend"):
            borrowed.execute("SELECT * FROM only_first")
        borrowed.load_table("only_borrowed", rows(1, 1))
        with pytest.raises(AnalysisException, match="not loaded in this backend"):
            first.execute("SELECT * FROM only_borrowed")
    finally:
        borrowed.close()


def test_closing_one_backend_leaves_the_other_running(spark_backend: SparkBackend) -> None:
    users = _CONTEXTS._users
    first, second = SparkBackend("local[2]"), SparkBackend("local[2]")
    try:
        assert first.session.sparkContext is second.session.sparkContext is spark_backend.session.sparkContext
        assert first.session is not second.session
        if _CONTEXTS._root is not None:  # a backend started this process's context: both count as users
            assert _CONTEXTS._users == users + 2
        first.load_table("visits", rows(3, 1))
        second.load_table("visits", rows(5, 1))
        first.close()
        first.close()  # a second close does nothing more
        assert second.execute(COUNT).to_pylist() == [{"n": 5, "s": 5}]
        with pytest.raises(AnalysisException, match="not loaded"):  # the closed backend's views are gone
            first.execute(COUNT)
        second.close()
        assert _CONTEXTS._users == users
        assert spark_backend.execute("SELECT 1 AS still_up").to_pylist() == [{"still_up": 1}]
    finally:
        first.close()
        second.close()


# Statements that would reach past the backend's own views, or change something: refused by the check on
# Spark's parse of the statement, before anything runs.
OUTSIDE = [
    ("SELECT * FROM global_temp.visits", "without a database"),
    ("SELECT * FROM default.visits", "without a database"),
    ("SELECT * FROM spark_catalog.default.visits", "without a database"),
    ("SELECT * FROM parquet.`/etc/passwd`", "without a database"),
    ("SELECT * FROM IDENTIFIER('default.visits')", "without a database"),
    ("SELECT * FROM persistent_table", "'persistent_table' is not loaded"),
    ("SELECT * FROM visits WHERE x IN (SELECT x FROM elsewhere)", "'elsewhere' is not loaded"),
    ("SELECT (SELECT MAX(x) FROM elsewhere) AS m FROM visits", "'elsewhere' is not loaded"),
    ("WITH c AS (SELECT * FROM elsewhere) SELECT * FROM c", "'elsewhere' is not loaded"),
    # the CTE ``t`` is not in scope for the outer ``t``, which would be looked up in the catalog
    ("SELECT * FROM (WITH t AS (SELECT * FROM visits) SELECT * FROM t) a, t", "'t' is not loaded"),
    ("SELECT * FROM range(10)", "not a plain query"),
    ("SELECT * FROM read_files('/etc/passwd', format => 'text')", "not a plain query"),
    ("DROP VIEW visits", "not a plain query"),
    ("CREATE TABLE stolen AS SELECT * FROM visits", "not a plain query"),
    ("INSERT INTO visits VALUES (1)", "not a plain query"),
    ("CACHE TABLE visits", "not a plain query"),
    ("SET spark.sql.shuffle.partitions = 7", "not a plain query"),
    ("EXECUTE IMMEDIATE 'SELECT * FROM default.visits'", "not a plain query"),
    ("BEGIN SELECT 1; END", "not a plain query"),
]


@pytest.mark.parametrize(("statement", "reason"), OUTSIDE, ids=[s for s, _ in OUTSIDE])
def test_statements_reaching_outside_the_backend_are_refused(
    pair: tuple[SparkBackend, SparkBackend], statement: str, reason: str
) -> None:
    backend = pair[0]
    backend.load_table("visits", rows(3, 1))
    with pytest.raises(AnalysisException, match=reason) as refused:
        backend.execute(statement)
    assert "This backend runs only queries over its own tables." in str(refused.value)
    assert backend.execute(COUNT).to_pylist() == [{"n": 3, "s": 3}]  # nothing was dropped or changed
    assert backend.session.conf.get("spark.sql.shuffle.partitions") == "2"


def test_queries_over_its_own_tables_run(pair: tuple[SparkBackend, SparkBackend]) -> None:
    backend = pair[0]
    backend.load_table("Visits", rows(3, 1))  # names are case-insensitive, as in Spark
    accepted = [
        "WITH c AS (SELECT x FROM visits), d AS (SELECT x FROM c) SELECT COUNT(*) AS n FROM d",
        "SELECT COUNT(*) AS n FROM VISITS WHERE x IN (SELECT x FROM visits) "
        "AND EXISTS (SELECT 1 FROM visits)",
        "SELECT COUNT(*) AS n FROM visits CROSS JOIN (VALUES (0), (1)) AS h(q) WHERE q = 0",
        "SELECT COUNT(*) AS n FROM (SELECT x FROM visits UNION ALL SELECT x FROM visits WHERE false)",
        "SELECT x, n FROM (SELECT x, ROW_NUMBER() OVER (PARTITION BY x ORDER BY rand()) AS n FROM visits) "
        "WHERE n = 3",
    ]
    for statement in accepted:
        assert backend.execute(statement).column(-1).to_pylist() == [3], statement


def test_names_follow_the_sessions_case_sensitivity(pair: tuple[SparkBackend, SparkBackend]) -> None:
    """With ``spark.sql.caseSensitive`` a name differing in case from a view or CTE is another name, one
    Spark would look up in the catalog: refused as well."""
    backend = pair[0]
    backend.load_table("visits", rows(3, 1))
    backend.session.conf.set("spark.sql.caseSensitive", "true")
    assert backend.execute("WITH c AS (SELECT x FROM visits) SELECT COUNT(*) AS n FROM c").to_pylist() == [
        {"n": 3}
    ]
    for statement in ("SELECT COUNT(*) AS n FROM VISITS", "WITH C AS (SELECT x FROM visits) SELECT * FROM c"):
        with pytest.raises(AnalysisException, match="is not loaded in this backend"):
            backend.execute(statement)
