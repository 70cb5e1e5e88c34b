"""BigQuery's and ZetaSQL's differential-privacy syntax (issue 32; :mod:`kakeibo.sql.dp_clause`).

Neighbour relation: add or remove one professor (every row of one ``id``). A SUM with
``contribution_bounds_per_group => (0, t)`` truncates each professor's total in a group at t, so one
professor moves each of at most L0 = ``max_groups_contributed`` groups' sums by at most t: sensitivity t
per group, Laplace noise at the statistic's share of epsilon. The privacy test audits that release on the
neighbour that adds a professor with far more than t in every group, at the audit's 95% confidence (its
false-failure rate is at most 5%); the calibration test counts how often the 95% interval covers the exact
truncated sum, computed here by a statement of the test's own."""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa
import pytest
from scipy import stats

import kakeibo
from kakeibo.audit import audit
from kakeibo.backends import DuckDBBackend
from kakeibo.sql import Catalog, QueryRefused
from kakeibo.sql.rewrite import bounded_sql, engine_sql

CATALOG = Catalog.from_dict(
    {
        "tables": {
            "professors": {
                "privacy_unit": "id",
                "max_partitions": 3,
                "max_rows_per_partition": 100,
                "columns": {
                    "id": "int",
                    "item": {"type": "str", "public_values": ["pen", "pencil", "scissors"]},
                    "quantity": {"type": "int", "lower": 0, "upper": 100},
                },
            },
            "students": {"columns": {"item": "str", "quantity": {"type": "int", "lower": 0, "upper": 10}}},
        }
    }
)
ITEMS = ("pen", "pencil", "scissors")
#: the options of every example of BigQuery's documentation of its differentially private aggregates
OPTIONS = "OPTIONS(epsilon=10, delta=.01, max_groups_contributed=1, privacy_unit_column=id)"
SUM_BOUNDED = (
    "SELECT WITH DIFFERENTIAL_PRIVACY OPTIONS(epsilon=1, delta=1e-5, max_groups_contributed=2, "
    "privacy_unit_column=id) item, SUM(quantity, contribution_bounds_per_group => (0, 150)) AS total "
    "FROM professors GROUP BY item"
)


def _professors(people: int = 400, seed: int = 5) -> pa.Table:
    """Professors with 1 to 40 requests each, over the three items, heavy-tailed quantities."""
    rng = np.random.default_rng(seed)
    rows = rng.integers(1, 41, people)
    ids = np.repeat(np.arange(people), rows)
    return pa.table(
        {
            "id": ids,
            "item": np.array(ITEMS)[rng.integers(0, 3, len(ids))],
            "quantity": np.minimum(rng.pareto(1.5, len(ids)) * 10, 500).astype(np.int64),
        }
    )


def _session(table: pa.Table, budget: object = 1_000.0) -> kakeibo.Session:
    backend = DuckDBBackend()
    backend.load_table("professors", table)
    backend.load_table("students", pa.table({"item": ["pen", "pen"], "quantity": [1, 2]}))
    return kakeibo.connect(backend, catalog=CATALOG, ledger=":memory:", budget=budget)


def _truncated_sums(backend: Any, tau: float) -> dict[str, float]:
    """Each item's sum over professors of their total clamped to [0, 100] per row, truncated at ``tau``."""
    rows = backend.execute(
        f"SELECT item, SUM(LEAST(t, {float(tau)})) AS s FROM (SELECT id, item, "
        "SUM(LEAST(GREATEST(quantity, 0), 100)) AS t FROM professors GROUP BY id, item) GROUP BY item"
    ).to_pylist()
    return {r["item"]: float(r["s"]) for r in rows}


def test_the_clause_plans_as_the_same_limits_given_as_keywords() -> None:
    """OPTIONS and the calls' bounds set epsilon, delta, L0, kappa and the column bounds exactly as the
    keywords would."""
    session = _session(_professors())
    written = session.plan(
        "SELECT WITH DIFFERENTIAL_PRIVACY OPTIONS(epsilon=0.5, delta=1e-6, max_groups_contributed=2, "
        "privacy_unit_column=professors.id) item, COUNT(*, contribution_bounds_per_group => (0, 7)) AS n, "
        "AVG(quantity, contribution_bounds_per_group => (10, 60)) AS a FROM professors GROUP BY item"
    )
    keywords = session.plan(
        "SELECT item, COUNT(*) AS n, AVG(quantity) AS a FROM professors GROUP BY item",
        epsilon=0.5,
        delta=1e-6,
        dialect="bigquery",
        bounds={"max_partitions": 2, "max_rows_per_partition": 7, "quantity": (10, 60)},
    )
    assert (written.epsilon, written.delta, written.max_partitions, written.max_rows_per_partition) == (
        keywords.epsilon,
        keywords.delta,
        2,
        7,
    )
    assert [(s.name, s.per_group_sensitivity) for s in written.statistics] == [
        (s.name, s.per_group_sensitivity) for s in keywords.statistics
    ]
    assert bounded_sql(written) == bounded_sql(keywords)


def test_a_sums_per_group_bounds_truncate_each_persons_total() -> None:
    """SUM(x, contribution_bounds_per_group => (0, t)): sensitivity t per group, the statement sums the
    persons' totals truncated at t, and the release's exact value is the truncated sum."""
    table = _professors()
    session = _session(table)
    plan = session.plan(SUM_BOUNDED)
    (statistic,) = plan.statistics
    assert statistic.truncation == 150 and statistic.per_group_sensitivity == 150
    assert plan.max_partitions == 2
    rows = session.backend.execute(bounded_sql(plan)).to_pylist()
    exact = _truncated_sums(session.backend, 150)
    # the statement keeps at most 2 of a professor's 3 items, at random: its sum is at most the exact one
    assert all(float(r["s_quantity"]) <= exact[r["__g0"]] + 1e-6 for r in rows)
    assert sum(float(r["s_quantity"]) for r in rows) > 0.5 * sum(exact.values())


@pytest.mark.statistical
def test_a_heavy_professor_moves_a_bounded_sum_by_at_most_t_and_the_release_keeps_its_epsilon() -> None:
    base = _professors()
    heavy = pa.table(
        {"id": [10_000] * 30, "item": ["pen"] * 30, "quantity": [100] * 30}, schema=base.schema
    )  # 3,000 in one group, 20 times t
    values = []
    for world in (base, pa.concat_tables([base, heavy])):
        session = _session(world)
        plan = session.plan(SUM_BOUNDED.replace("max_groups_contributed=2", "max_groups_contributed=3"))
        rows = session.backend.execute(bounded_sql(plan)).to_pylist()
        values.append({r["__g0"]: float(r["s_quantity"]) for r in rows})
    assert values[1]["pen"] - values[0]["pen"] == pytest.approx(150)
    assert values[1]["pencil"] == values[0]["pencil"] and values[1]["scissors"] == values[0]["scissors"]
    (statistic,) = plan.statistics
    result = audit(
        statistic.mechanism, values[0]["pen"], values[1]["pen"], trials=300_000, rng=np.random.default_rng(8)
    )
    assert result.seeded and not result.refutes(float(statistic.mechanism.privacy_loss.epsilon)), str(result)


def test_the_bounded_sums_interval_covers_the_exact_truncated_sum_at_its_rate() -> None:
    """40 releases of the three items' bounded sums with L0 = 3 (every professor's every item kept): the
    95% intervals cover the exact truncated sums in at least 108 of the 120 cells (a true rate of 95%
    falls below that with probability under 5%)."""
    session = _session(_professors())
    query = SUM_BOUNDED.replace("max_groups_contributed=2", "max_groups_contributed=3")
    exact = _truncated_sums(session.backend, 150)
    covered = 0
    for seed in range(40):
        for row in session.sql(query, rng=np.random.default_rng(seed)).to_arrow().to_pylist():
            covered += row["total_ci_low"] <= exact[row["item"]] <= row["total_ci_high"]
    assert stats.binom.cdf(107, 120, 0.95) < 0.05
    assert covered >= 108, covered


@pytest.mark.parametrize(
    "query",
    [
        f"SELECT WITH DIFFERENTIAL_PRIVACY {OPTIONS} item, "
        "AVG(quantity, contribution_bounds_per_group => (0,100)) average_quantity "
        "FROM professors GROUP BY item",
        f"SELECT WITH DIFFERENTIAL_PRIVACY {OPTIONS} item, "
        "COUNT(*, contribution_bounds_per_group => (0, 100)) times_requested FROM professors GROUP BY item",
        f"SELECT WITH DIFFERENTIAL_PRIVACY {OPTIONS} item, "
        "COUNT(item, contribution_bounds_per_group => (0,100)) times_requested FROM professors GROUP BY item",
        f"SELECT WITH DIFFERENTIAL_PRIVACY {OPTIONS} item, PERCENTILE_CONT(quantity, 0.5, "
        "contribution_bounds_per_row => (0, 100)) percentile_requested FROM professors GROUP BY item",
        f"SELECT WITH DIFFERENTIAL_PRIVACY {OPTIONS} item, "
        "SUM(quantity, contribution_bounds_per_group => (0,100)) quantity FROM professors GROUP BY item",
        f"SELECT WITH DIFFERENTIAL_PRIVACY {OPTIONS} item, "
        "VAR_POP(quantity, contribution_bounds_per_row => (0,100)) pop_variance "
        "FROM professors GROUP BY item",
        "SELECT WITH ANONYMIZATION OPTIONS(epsilon=10, delta=.01, max_groups_contributed=1) item, "
        "ANON_AVG(quantity CLAMPED BETWEEN 0 AND 100) average_quantity FROM professors GROUP BY item",
        "SELECT WITH ANONYMIZATION OPTIONS(epsilon=10, delta=.01, max_groups_contributed=1) item, "
        "ANON_COUNT(*) times_requested FROM professors GROUP BY item",
        "SELECT WITH ANONYMIZATION OPTIONS(epsilon=10, delta=.01, max_groups_contributed=1) item, "
        "ANON_COUNT(item CLAMPED BETWEEN 0 AND 100) times_requested FROM professors GROUP BY item",
        "SELECT WITH ANONYMIZATION OPTIONS(epsilon=10, delta=.01, max_groups_contributed=1) item, "
        "ANON_PERCENTILE_CONT(quantity, 0.5 CLAMPED BETWEEN 0 AND 100) percentile_requested "
        "FROM professors GROUP BY item",
        "SELECT WITH ANONYMIZATION OPTIONS(epsilon=10, delta=.01, max_groups_contributed=1) item, "
        "ANON_STDDEV_POP(quantity CLAMPED BETWEEN 0 AND 100) pop_standard_deviation "
        "FROM professors GROUP BY item",
        "SELECT WITH ANONYMIZATION OPTIONS(epsilon=10, delta=.01, kappa=1) item, "
        "ANON_SUM(quantity CLAMPED BETWEEN 0 AND 100) quantity FROM professors GROUP BY item",
        "SELECT WITH ANONYMIZATION OPTIONS(epsilon=10, delta=.01, max_groups_contributed=1) item, "
        "ANON_VAR_POP(quantity CLAMPED BETWEEN 0 AND 100) pop_variance FROM professors GROUP BY item",
    ],
)
def test_the_documentations_examples_answer(query: str) -> None:
    """The examples of BigQuery's and ZetaSQL's documentation on its ``professors`` table (id, item,
    quantity), with noise; their noise-free variants (epsilon = 1e20) exceed any budget, and
    ANON_QUANTILES returns an array. Each answers one row per item with its interval."""
    result = _session(_professors(), budget=(1_000.0, 0.5)).sql(query)
    rows = result.to_arrow().to_pylist()
    assert sorted(r["item"] for r in rows) == list(ITEMS)
    assert float(result.privacy_loss.epsilon) == 10
    value = [c for c in result.to_arrow().column_names if c != "item" and not c.endswith(("_low", "_high"))]
    assert len(value) == 1 and all(r[value[0]] is not None for r in rows)


@pytest.mark.parametrize(
    ("query", "fragment"),
    [
        (SUM_BOUNDED.replace("max_groups_contributed=2", "max_groups_contributed=4"), "narrow the owner"),
        (
            SUM_BOUNDED.replace(
                "SUM(quantity, contribution_bounds_per_group => (0, 150))",
                "COUNT(*, contribution_bounds_per_group => (0, 101))",
            ),
            "narrow the owner",
        ),
        (SUM_BOUNDED.replace("(0, 150)", "(0, 10001)"), "more than the catalog's limits allow"),
        (SUM_BOUNDED.replace("(0, 150)", "(-5, 150)"), "truncates each person's total from above only"),
        (
            SUM_BOUNDED.replace(
                "SUM(quantity, contribution_bounds_per_group => (0, 150))",
                "AVG(quantity, contribution_bounds_per_group => (0, 101))",
            ),
            "would widen the bounds",
        ),
        (SUM_BOUNDED.replace("privacy_unit_column=id", "privacy_unit_column=item"), "privacy unit of this"),
        (SUM_BOUNDED.replace("delta=1e-5", "noise=1"), "noise is not one of them"),
        (SUM_BOUNDED.replace("delta=1e-5", "delta=1e-5, delta=1e-5"), "gives delta twice"),
        (SUM_BOUNDED.replace("max_groups_contributed=2", "max_groups_contributed=1.5"), "whole number"),
        (SUM_BOUNDED.replace("epsilon=1", "epsilon=one"), "epsilon is a number"),
        (SUM_BOUNDED.replace("SUM(", "ANON_SUM("), "WITH ANONYMIZATION"),
        (
            "SELECT WITH ANONYMIZATION OPTIONS(epsilon=1, delta=.01) item, "
            "ANON_QUANTILES(quantity, 4 CLAMPED BETWEEN 0 AND 100) q FROM professors GROUP BY item",
            "returns an array",
        ),
        (
            "SELECT item, n FROM (" + SUM_BOUNDED.replace("AS total", "AS n") + ")",
            "belongs to the outermost SELECT",
        ),
        (
            SUM_BOUNDED.replace(
                "AS total", "AS total, AVG(quantity, contribution_bounds_per_group => (0, 50)) a"
            ),
            "otherwise than another call",
        ),
        (SUM_BOUNDED.replace("quantity, contribution", "quantity + 1, contribution"), "neither"),
        (
            "SELECT WITH DIFFERENTIAL_PRIVACY OPTIONS(epsilon=1, privacy_unit_column=id) COUNT(*) AS n "
            "FROM students",
            "each row of students is a person",
        ),
    ],
)
def test_what_the_clause_cannot_mean_here_is_refused_free(query: str, fragment: str) -> None:
    session = _session(_professors(people=20))
    with pytest.raises(QueryRefused) as refused:
        session.sql(query)
    assert fragment in str(refused.value)
    assert session.ledger.spent().epsilon == 0


def test_options_and_keywords_must_agree() -> None:
    session = _session(_professors(people=20))
    with pytest.raises(QueryRefused, match="give it once"):
        session.sql(SUM_BOUNDED, epsilon=2)
    with pytest.raises(QueryRefused, match="both bound quantity"):
        session.sql(SUM_BOUNDED, bounds={"quantity": (0, 10)})
    assert float(session.plan(SUM_BOUNDED, epsilon=1).epsilon) == 1  # the same epsilon twice is one


def test_text_that_only_spells_the_clause_is_not_read() -> None:
    """A string literal or a quoted name is one token: the clause's words inside it are data."""
    session = _session(_professors(people=20))
    query = (
        "SELECT item, COUNT(*) AS n FROM professors WHERE item <> 'SELECT WITH DIFFERENTIAL_PRIVACY "
        "OPTIONS(epsilon=1e9) CLAMPED BETWEEN 0 AND 1' GROUP BY item"
    )
    plan = session.plan(query, epsilon=1)
    assert "SELECT WITH DIFFERENTIAL_PRIVACY OPTIONS(epsilon=1e9) CLAMPED BETWEEN 0 AND 1" in bounded_sql(
        plan
    )
    assert plan.epsilon == 1


@pytest.mark.xdist_group("spark")
def test_the_engines_sum_the_bounded_totals_alike(postgres_server: str, spark_backend: Any) -> None:
    """The statement of a clause's bounded COUNT, SUM and AVG (every professor's three items kept, so no
    random choice of groups) gives the same statistics on DuckDB, PostgreSQL and Spark."""
    from tpch_fixtures import three_engines

    table = _professors()
    plan = _session(table).plan(
        SUM_BOUNDED.replace("max_groups_contributed=2", "max_groups_contributed=3").replace(
            "AS total", "AS total, COUNT(*, contribution_bounds_per_group => (0, 9)) AS n"
        )
    )
    statement = bounded_sql(plan)

    def statistics(backend: Any) -> dict[str, tuple[float, ...]]:
        sql = engine_sql(statement, backend.dialect)
        rows = backend.execute(sql).to_pylist()
        return {r["__g0"]: tuple(round(float(r[s.name]), 6) for s in plan.statistics) for r in rows}

    with three_engines(postgres_server, spark_backend, {"professors": table}) as engines:
        duck, postgres, spark = (statistics(engines[name]) for name in ("duckdb", "postgres", "spark"))
    assert duck == postgres == spark
    assert {s.name for s in plan.statistics} == {"s_quantity", "rows"}
