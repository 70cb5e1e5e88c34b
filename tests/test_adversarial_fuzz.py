"""A differential fuzzer for DP SQL: generated queries on neighbouring databases must look the same.

``hypothesis`` draws calls from the grammar the analyser accepts (``adversarial_harness.queries``):
group columns; COUNT / COUNT(col) / COUNT(DISTINCT user_id) / SUM / AVG / MEDIAN and the synonyms of other
dialects (``SYNONYM_TEMPLATES``: COUNT_BIG, STD, VAR_SAMP, APPROX_QUANTILE, PERCENTILE_CONT, ...);
aggregates wrapped in expressions (``DERIVED_TEMPLATES``: arithmetic, ROUND, POWER, LN, SQRT, GREATEST,
CASE, and MOD, which is refused); constants and nondeterministic functions in the select list; keys alone
(GROUP BY without an aggregate, or SELECT DISTINCT); GROUP BY expressions over columns (``KEY_TEMPLATES``:
arithmetic keys, CASE keys over drawn conditions, and refused ones); an optional JOIN to the public
``dim``; WHERE as a random boolean combination of comparisons, BETWEEN, IN, LIKE and IS NULL with boundary
literals -- 0, -0.0, 0.5 and the double above it, 1e308, 5e-324, 2**53 + 1, 2**63, long decimals, strings
with quotes, backslashes, % and _; optional HAVING (on an output, or on an aggregate named only there),
ORDER BY, and LIMIT or T-SQL's TOP; epsilons from 1e-3 to 1000; each call read in a drawn dialect (DuckDB,
PostgreSQL, T-SQL, BigQuery), with or without ``nonnegative`` clamping. Each call runs on the base world
and on the target world (one user added with extreme values), each with a fresh ledger, and the test
asserts that acceptance, error class, error text, charge and released schema are identical, and that no
error text holds a number the public inputs do not.

The run is bounded and reproducible (``derandomize=True``, no example database): 120 examples on DuckDB, 40
on PostgreSQL, 20 on Spark. ``benchmarks/fuzz_neighbours.py`` runs
the same property for many more examples and reports every mismatch instead of stopping at the first.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings

from adversarial_harness import (
    Drawn,
    Worlds,
    assert_indistinguishable,
    duckdb_worlds,
    postgres_worlds,
    queries,
    spark_worlds,
)

pytestmark = pytest.mark.xdist_group("spark")

SPARK_TIMEOUT = 120.0


def _settings(examples: int) -> settings:
    return settings(
        max_examples=examples,
        deadline=None,
        derandomize=True,
        database=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
        print_blob=False,
    )


#: examples per engine (Spark's statements cost most)
EXAMPLES = {"duckdb": 120, "postgres": 40, "spark": 20}


@pytest.fixture(scope="module", params=list(EXAMPLES))
def worlds(request: pytest.FixtureRequest) -> Iterator[Worlds]:
    engine = request.param
    if engine == "duckdb":
        pair = duckdb_worlds()
    elif engine == "postgres":
        pair = postgres_worlds(request.getfixturevalue("postgres_server"))
    else:
        pair = spark_worlds(request.getfixturevalue("spark_backend"))
    try:
        yield pair
    finally:
        pair.close()


@pytest.fixture(scope="module")
def ledgers(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One directory for the fresh ledger of every call (tmp_path is per test, not per example)."""
    return tmp_path_factory.mktemp("fuzz-ledgers")


def _check(worlds: Worlds, ledgers: Path, drawn: Drawn) -> None:
    timeout = SPARK_TIMEOUT if worlds.engine == "spark" else None
    assert_indistinguishable(
        worlds, drawn.query, drawn.epsilon, ledger_dir=ledgers, timeout=timeout, **drawn.options()
    )


def test_fuzz(worlds: Worlds, ledgers: Path) -> None:
    @_settings(EXAMPLES[worlds.engine])
    @given(queries())
    def prop(drawn: Drawn) -> None:
        _check(worlds, ledgers, drawn)

    prop()
