"""COUNT(DISTINCT c) on a row-level table (issue 32; :class:`kakeibo.sql.aggregates.DISTINCT`).

Neighbour relation: add or remove one row (each row is a person). Sensitivity: the row falls in one group
and adds at most one distinct value to it, so 1 per group and L0 = 1; geometric noise at the statistic's
epsilon. The privacy test audits the release on the neighbour that adds a value no other row has (the
largest change), with the audit's 95% confidence (its false-failure rate is at most 5%); the calibration
test counts how often the 95% interval covers the exact count."""

from __future__ import annotations

import datetime
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pytest
from scipy import stats

import kakeibo
from kakeibo.audit import audit
from kakeibo.backends import DuckDBBackend
from kakeibo.sql import Catalog, QueryRefused
from kakeibo.sql.analyze import analyze
from kakeibo.sql.plan import plan_query
from kakeibo.sql.rewrite import bounded_sql, engine_sql

CATALOG = Catalog.from_dict(
    {
        "tables": {
            "people": {
                "columns": {
                    "city": "str",
                    "sex": {"type": "str", "public_values": ["f", "m"]},
                    "age": {"type": "int", "lower": 0, "upper": 120},
                    "born": "date",
                    "married": "bool",
                    "income": {"type": "float", "lower": 0, "upper": 1_000},
                }
            }
        }
    }
)
QUERY = "SELECT sex, COUNT(DISTINCT city) AS cities, COUNT(*) AS n FROM people GROUP BY sex"


def _people(rows: int = 2_000, seed: int = 3) -> pa.Table:
    """Cities with NULLs, an empty string, text that differs by case or accent only, dates and bools."""
    rng = np.random.default_rng(seed)
    cities = np.array(["Tokyo", "tokyo", "Tōkyō", "", "Osaka", "Kyoto", "Nara", "Kobe"], dtype=object)
    city = cities[rng.integers(0, len(cities), rows)]
    city[rng.random(rows) < 0.05] = None
    return pa.table(
        {
            "city": pa.array(city, pa.string()),
            "sex": rng.choice(["f", "m"], rows),
            "age": rng.integers(0, 121, rows),
            "born": pa.array(np.datetime64("1950-01-01") + rng.integers(0, 20_000, rows), pa.date32()),
            "married": rng.random(rows) < 0.5,
            "income": rng.uniform(0, 1_000, rows),
        }
    )


def _statistics(table: pa.Table, backend: Any = None) -> dict[str, int]:
    """The engine's exact statistic per group (no noise): ``d_city`` by sex."""
    backend = backend or DuckDBBackend()
    backend.load_table("people", table)
    rows = backend.execute(bounded_sql(plan_query(analyze(QUERY, CATALOG), epsilon=1))).to_pylist()
    return {row["__g0"]: int(row["d_city"]) for row in rows}


@pytest.mark.statistical
def test_a_row_with_a_new_value_moves_one_count_by_one_and_the_release_keeps_its_epsilon() -> None:
    base = _people()
    new_value = pa.table(
        {
            "city": ["Sapporo"],
            "sex": ["f"],
            "age": [30],
            "born": pa.array([datetime.date(1990, 1, 1)], pa.date32()),
            "married": [True],
            "income": [1.0],
        },
        schema=base.schema,
    )
    repeated = new_value.set_column(0, "city", pa.array(["Osaka"]))
    d, with_new, with_repeated = (
        _statistics(t)
        for t in (base, pa.concat_tables([base, new_value]), pa.concat_tables([base, repeated]))
    )
    assert with_new == {"f": d["f"] + 1, "m": d["m"]} and with_repeated == d
    (statistic,) = [
        s for s in plan_query(analyze(QUERY, CATALOG), epsilon=1).statistics if s.name == "d_city"
    ]
    assert statistic.per_group_sensitivity == 1
    result = audit(statistic.mechanism, d["f"], with_new["f"], trials=400_000, rng=np.random.default_rng(21))
    assert result.seeded and not result.refutes(float(statistic.mechanism.privacy_loss.epsilon)), str(result)


def test_the_interval_covers_the_exact_count_at_its_rate(tmp_path: Path) -> None:
    """60 releases of each group's distinct cities: the 95% intervals cover the exact counts in at least
    105 of the 120 cells (a true rate of 95% falls below that with probability under 1%)."""
    table = _people()
    backend = DuckDBBackend()
    backend.load_table("people", table)
    exact = {
        r["sex"]: r["c"]
        for r in backend.execute("SELECT sex, COUNT(DISTINCT city) AS c FROM people GROUP BY sex").to_pylist()
    }
    session = kakeibo.connect(backend, catalog=CATALOG, ledger=tmp_path / "l.sqlite", budget=1_000)
    covered = 0
    for seed in range(60):
        for row in session.sql(QUERY, epsilon=1, rng=np.random.default_rng(seed)).to_arrow().to_pylist():
            covered += row["cities_ci_low"] <= exact[row["sex"]] <= row["cities_ci_high"]
    assert stats.binom.cdf(104, 120, 0.95) < 0.01
    assert covered >= 105, covered


@pytest.mark.xdist_group("spark")
@pytest.mark.parametrize("column", ["city", "age", "born", "married"])
def test_the_engines_count_alike(column: str, postgres_server: str, spark_backend: Any) -> None:
    """DuckDB, PostgreSQL and Spark count the same distinct values of text (NULL, '', case and accents
    apart), int, date and bool columns."""
    from tpch_fixtures import three_engines

    table = _people()
    statement = bounded_sql(
        plan_query(
            analyze(f"SELECT sex, COUNT(DISTINCT {column}) AS d FROM people GROUP BY sex", CATALOG), epsilon=1
        )
    )

    def counts(backend: Any) -> dict[str, int]:
        sql = engine_sql(statement, backend.dialect)
        return {r["__g0"]: int(r[f"d_{column}"]) for r in backend.execute(sql).to_pylist()}

    with three_engines(postgres_server, spark_backend, {"people": table}) as engines:
        assert counts(engines["duckdb"]) == counts(engines["postgres"]) == counts(engines["spark"])


@pytest.mark.parametrize(
    ("sql", "fragment"),
    [
        ("SELECT COUNT(DISTINCT income) AS d FROM people", "engines disagree on whether -0.0 and 0.0"),
        ("SELECT COUNT(DISTINCT age + 1) AS d FROM people", "count the distinct values of one column"),
        ("SELECT COUNT(DISTINCT city, sex) AS d FROM people", "count the distinct values of one column"),
        ("SELECT COUNT(DISTINCT city) AS d, MEDIAN(age) AS m FROM people", "in one query with a quantile"),
    ],
)
def test_what_it_does_not_count_is_refused_free(sql: str, fragment: str) -> None:
    with pytest.raises(QueryRefused) as refused:
        plan_query(analyze(sql, CATALOG), epsilon=1)
    assert fragment in str(refused.value)


def test_a_column_with_auto_bounds_spends_nothing_on_bounds_it_does_not_use() -> None:
    """COUNT(DISTINCT c) reads c as stored, so c's "auto" bounds are not chosen (no histogram, no share of
    epsilon) and the statement does not clamp it."""
    catalog = Catalog.from_dict(
        {"tables": {"p": {"columns": {"age": {"type": "int", "lower": "auto", "upper": "auto"}}}}}
    )
    backend = DuckDBBackend()
    backend.load_table("p", pa.table({"age": np.arange(100) % 50}))
    session = kakeibo.connect(backend, catalog=catalog, ledger=":memory:", budget=10)
    text = session.explain("SELECT COUNT(DISTINCT age) AS d FROM p", epsilon=1)
    assert "histograms" not in text and '"__v_age"' not in text and 'COUNT(DISTINCT "__d_age")' in text
