"""The SQL analysts actually write (issue 17): aggregate synonyms, dialects and schema-qualified names.

Each class is answered like its canonical form: at epsilon 1e6 the release is the exact answer (computed
here by DuckDB on the same data, never typed in) up to noise far below the tolerances, and what stays
unsupported is refused with one sentence, before any data is read.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pytest

import kakeibo
from kakeibo.backends import DuckDBBackend
from kakeibo.sql import Catalog, QueryRefused, Session, analyze
from kakeibo.sql.shape import DIALECTS

N = 1000
EPSILON = 1e6
INCOME = (0, 100000)

CATALOG = Catalog.from_toml(
    f"""
[tables.census]
[tables.census.columns]
pid = "int"
age = {{ type = "int", lower = 18, upper = 90 }}
sex = {{ type = "str", public_values = ["1", "2"] }}
educ = {{ type = "int", lower = 1, upper = 16 }}
income = {{ type = "float", lower = {INCOME[0]}, upper = {INCOME[1]} }}
married = {{ type = "int", lower = 0, upper = 1 }}

[tables.levels]
public = true
[tables.levels.columns]
educ = {{ type = "int", unique = true }}
label = "str"
"""
)


def _census() -> pa.Table:
    rng = np.random.default_rng(0)
    return pa.table(
        {
            "pid": np.arange(N),
            "age": rng.integers(18, 91, N),
            "sex": rng.choice(["1", "2"], N),
            "educ": rng.integers(1, 17, N),
            "income": rng.uniform(*INCOME, N),
            "married": rng.integers(0, 2, N),
        }
    )


@pytest.fixture(scope="module")
def backend() -> Iterator[DuckDBBackend]:
    db = DuckDBBackend()
    db.load_table("census", _census())
    db.load_table(
        "levels",
        pa.table({"educ": np.arange(1, 17), "label": [f"level {i}" for i in range(1, 17)]}),
    )
    yield db
    db.close()


@pytest.fixture
def session(backend: DuckDBBackend, tmp_path: Path) -> Session:
    return kakeibo.connect(backend, catalog=CATALOG, ledger=tmp_path / "ledger.sqlite", budget=(1e12, 0.5))


def exact(backend: DuckDBBackend, sql: str) -> list[dict[str, Any]]:
    """The exact answer of a DuckDB query on the same data."""
    return list(backend.execute(sql).to_pylist())


def released(session: Session, query: str, **kwargs: Any) -> list[dict[str, Any]]:
    return list(session.sql(query, epsilon=EPSILON, delta=1e-6, **kwargs).to_arrow().to_pylist())


def assert_one_sentence(message: str) -> None:
    assert message.endswith(".") and "\n" not in message, message
    assert not re.search(r"\.\s+[A-Z]", message), f"more than one sentence: {message}"


def refusal(query: str, **kwargs: Any) -> str:
    with pytest.raises(QueryRefused) as info:
        analyze(query, CATALOG, **kwargs)
    message = str(info.value)
    assert_one_sentence(message)
    return message


def assert_close(got: float, want: float, *, absolute: float = 0.0, relative: float = 1e-4) -> None:
    assert got == pytest.approx(want, rel=relative, abs=absolute), (got, want)


# ------------------------------------------------------------------------------------ aggregate names

SAMPLE_SD = "STDDEV_SAMP(income)"
POP_SD = "STDDEV_POP(income)"
SAMPLE_VAR = "VAR_SAMP(income)"
POP_VAR = "VAR_POP(income)"

#: (dialect, the analyst's aggregate, DuckDB's exact aggregate, the output name kakeibo gives it)
SPREAD = [
    ("duckdb", "STD(income)", SAMPLE_SD, "stddev_income"),
    ("duckdb", "STDDEV(income)", SAMPLE_SD, "stddev_income"),
    ("duckdb", "STDDEV_SAMP(income)", SAMPLE_SD, "stddev_income"),
    ("duckdb", "STDDEV_POP(income)", POP_SD, "stddev_pop_income"),
    ("duckdb", "VAR(income)", SAMPLE_VAR, "variance_income"),
    ("duckdb", "VARIANCE(income)", SAMPLE_VAR, "variance_income"),
    ("duckdb", "VAR_SAMP(income)", SAMPLE_VAR, "variance_income"),
    ("duckdb", "VAR_POP(income)", POP_VAR, "var_pop_income"),
    ("tsql", "STDEV(income)", SAMPLE_SD, "stddev_income"),
    ("tsql", "STDEVP(income)", POP_SD, "stddev_pop_income"),
    ("tsql", "VAR(income)", SAMPLE_VAR, "variance_income"),
    ("tsql", "VARP(income)", POP_VAR, "var_pop_income"),
    ("spark", "std(income)", SAMPLE_SD, "stddev_income"),
    # MySQL's STD, STDDEV and VARIANCE are population statistics: the dialect says what a name means
    ("mysql", "STD(income)", POP_SD, "stddev_pop_income"),
    ("mysql", "STDDEV(income)", POP_SD, "stddev_pop_income"),
    ("mysql", "VARIANCE(income)", POP_VAR, "var_pop_income"),
    ("postgres", "stddev(income)", SAMPLE_SD, "stddev_income"),
]


@pytest.mark.parametrize(
    ("dialect", "call", "truth", "name"), SPREAD, ids=[f"{d}-{c}" for d, c, _, _ in SPREAD]
)
def test_spread_synonyms_answer_as_their_statistic(
    session: Session, backend: DuckDBBackend, dialect: str, call: str, truth: str, name: str
) -> None:
    rows = released(session, f"SELECT sex, {call} FROM census GROUP BY sex ORDER BY sex", dialect=dialect)
    want = exact(backend, f"SELECT sex, {truth} AS v FROM census GROUP BY sex ORDER BY sex")
    assert list(rows[0]) == ["sex", name, f"{name}_ci_low", f"{name}_ci_high"]
    assert [r["sex"] for r in rows] == [w["sex"] for w in want]
    for row, truth_row in zip(rows, want, strict=True):
        assert_close(row[name], truth_row["v"])


#: (dialect, the analyst's count, DuckDB's exact count, its output name)
COUNTS = [
    ("duckdb", "COUNT_BIG(*)", "COUNT(*)", "count"),
    ("tsql", "COUNT_BIG(*)", "COUNT(*)", "count"),
    ("postgres", "COUNT_BIG(*)", "COUNT(*)", "count"),
    ("duckdb", "COUNT_BIG(age)", "COUNT(age)", "count_age"),
    ("tsql", "COUNT_BIG(age)", "COUNT(age)", "count_age"),
    ("duckdb", "count_big(1)", "COUNT(*)", "count"),
]


@pytest.mark.parametrize(
    ("dialect", "call", "truth", "name"), COUNTS, ids=[f"{d}-{c}" for d, c, _, _ in COUNTS]
)
def test_count_big_is_count(
    session: Session, backend: DuckDBBackend, dialect: str, call: str, truth: str, name: str
) -> None:
    where = "WHERE age >= 40 AND educ < 9"
    rows = released(session, f"SELECT {call} FROM census {where}", dialect=dialect)
    want = exact(backend, f"SELECT {truth} AS v FROM census {where}")[0]["v"]
    assert list(rows[0]) == [name, f"{name}_ci_low", f"{name}_ci_high"]
    assert abs(rows[0][name] - want) <= 1


#: (dialect, the analyst's quantile, the quantile asked)
QUANTILES = [
    ("duckdb", "APPROX_QUANTILE(income, 0.25)", 0.25),
    ("duckdb", "QUANTILE(income, 0.25)", 0.25),
    ("duckdb", "PERCENTILE_CONT(0.25) WITHIN GROUP (ORDER BY income)", 0.25),
    ("duckdb", "QUANTILE_CONT(income, 0.9)", 0.9),
    ("duckdb", "APPROX_PERCENTILE(income, 0.9)", 0.9),
    ("postgres", "APPROX_QUANTILE(income, 0.9)", 0.9),
    ("postgres", "PERCENTILE_CONT(0.5) WITHIN GROUP (ORDER BY income)", 0.5),
    ("spark", "percentile_approx(income, 0.75)", 0.75),
    ("spark", "approx_percentile(income, 0.75)", 0.75),
    ("snowflake", "APPROX_PERCENTILE(income, 0.1)", 0.1),
    ("tsql", "APPROX_QUANTILE(income, 0.1)", 0.1),
]


@pytest.mark.parametrize(("dialect", "call", "q"), QUANTILES, ids=[f"{d}-{c}" for d, c, _ in QUANTILES])
def test_quantile_synonyms_are_the_private_quantile(
    session: Session, backend: DuckDBBackend, dialect: str, call: str, q: float
) -> None:
    rows = released(session, f"SELECT {call} AS q FROM census WHERE married = 1", dialect=dialect)
    want = exact(backend, f"SELECT QUANTILE_CONT(income, {q}) AS v FROM census WHERE married = 1")[0]["v"]
    assert list(rows[0]) == ["q", "q_ci_low", "q_ci_high"]
    # the private quantile is exact up to its buckets (a two-thousandth of the bounds' range or less)
    assert_close(rows[0]["q"], want, absolute=(INCOME[1] - INCOME[0]) / 500)


def test_synonyms_of_one_aggregate_are_released_alike(session: Session) -> None:
    rows = released(
        session, "SELECT COUNT_BIG(*) AS a, COUNT(*) AS b, STD(age) AS c, STDDEV(age) AS d FROM census"
    )
    assert rows[0]["a"] == rows[0]["b"] and rows[0]["c"] == pytest.approx(rows[0]["d"], rel=1e-3)


ONE_ARGUMENT = "takes exactly one argument"
ROW_LEVEL_DISTINCT = "engines disagree on whether -0.0 and 0.0, or two NaNs, are one value"


@pytest.mark.parametrize(
    ("query", "fragment", "dialect"),
    [
        ("SELECT STD(income, age) FROM census", "STD takes exactly one column", "duckdb"),
        ("SELECT STDEVP() FROM census", "STDEVP takes exactly one column", "tsql"),
        ("SELECT VARP(income, age) FROM census", "VARP takes exactly one column", "tsql"),
        ("SELECT STD(sex) FROM census", "needs a numeric column, but sex has type str", "duckdb"),
        ("SELECT STD(pid) FROM census", "column pid has no clamping bounds", "duckdb"),
        ("SELECT STD(ABS(income)) FROM census", "is not supported inside an aggregate", "duckdb"),
        ("SELECT COUNT_BIG(age, educ) FROM census", f"{ONE_ARGUMENT}: *, a column or DISTINCT", "duckdb"),
        ("SELECT COUNT_BIG() FROM census", ONE_ARGUMENT, "duckdb"),
        ("SELECT COUNT_BIG(DISTINCT income) FROM census", ROW_LEVEL_DISTINCT, "duckdb"),
        ("SELECT COUNT_BIG(DISTINCT income) FROM census", ROW_LEVEL_DISTINCT, "tsql"),
        ("SELECT APPROX_QUANTILE(income, 0.5, 100) FROM census", "without an accuracy or weight", "duckdb"),
        ("SELECT percentile_approx(income, 0.5, 100) FROM census", "without an accuracy or weight", "spark"),
        ("SELECT APPROX_PERCENTILE(income) FROM census", "takes a column and one quantile", "duckdb"),
        ("SELECT APPROX_QUANTILE(income, [0.1, 0.9]) FROM census", "asks for several quantiles", "duckdb"),
        ("SELECT APPROX_QUANTILE(income, 1.5) FROM census", "must be a number between 0 and 1", "duckdb"),
        ("SELECT APPROX_QUANTILE(income, age) FROM census", "must be a number between 0 and 1", "duckdb"),
        ("SELECT COUNT(*) FROM census WHERE STD(age) > 1", "aggregates are not allowed in WHERE", "duckdb"),
    ],
)
def test_synonyms_are_refused_like_their_aggregate(query: str, fragment: str, dialect: str) -> None:
    assert fragment in refusal(query, dialect=dialect)


SYNONYM_EXAMPLES = {
    "COUNT_BIG": "COUNT_BIG(*)",
    "STD": "STD(age)",
    "VAR_POP": "VAR_POP(age)",
    "STDDEV_POP": "STDDEV_POP(age)",
    "APPROX_QUANTILE": "APPROX_QUANTILE(age, 0.5)",
    "PERCENTILE_CONT": "PERCENTILE_CONT(0.5) WITHIN GROUP (ORDER BY age)",
}


@pytest.mark.parametrize(
    "query",
    [
        "SELECT APPROX_COUNT_DISTINCT(age) FROM census",
        "SELECT STRING_AGG(sex, ',') FROM census",
        "SELECT MODE(age) FROM census",
    ],
)
def test_the_list_of_supported_aggregates_names_the_synonyms(query: str) -> None:
    message = refusal(query)
    assert "is not supported; use one of COUNT, COUNT(DISTINCT <privacy unit>), SUM, AVG" in message
    for name, call in SYNONYM_EXAMPLES.items():
        assert name in message
        analyze(f"SELECT {call} FROM census", CATALOG)  # each synonym named is accepted


# ------------------------------------------------------------------------------------------- dialects


def test_tsql_top_is_limit(session: Session, backend: DuckDBBackend) -> None:
    query = "SELECT TOP 3 educ, COUNT_BIG(*) AS n FROM [census] GROUP BY educ ORDER BY n DESC, educ"
    rows = released(session, query, dialect="tsql")
    want = exact(
        backend, "SELECT educ, COUNT(*) AS n FROM census GROUP BY educ ORDER BY n DESC, educ LIMIT 3"
    )
    assert len(rows) == 3 and list(rows[0]) == ["educ", "n", "n_ci_low", "n_ci_high"]
    assert [(r["educ"], r["n"]) for r in rows] == [(w["educ"], w["n"]) for w in want]
    assert analyze(query, CATALOG, dialect="tsql").limit == 3


@pytest.mark.parametrize(
    ("dialect", "query"),
    [
        (
            "duckdb",
            'SELECT "sex", AVG("income") AS m FROM census GROUP BY sex ORDER BY sex FETCH FIRST 1 ROWS ONLY',
        ),
        (
            "postgres",
            'SELECT "sex", AVG("income") AS m FROM census GROUP BY "sex" ORDER BY 1 FETCH FIRST 1 ROW ONLY',
        ),
        (
            "tsql",
            "SELECT [sex], AVG([income]) AS m FROM census GROUP BY sex ORDER BY sex "
            "OFFSET 0 ROWS FETCH NEXT 1 ROWS ONLY",
        ),
        ("bigquery", "SELECT `sex`, AVG(`income`) AS m FROM `census` GROUP BY `sex` ORDER BY sex LIMIT 1"),
        ("mysql", "SELECT `sex`, AVG(income) AS m FROM census GROUP BY sex ORDER BY sex LIMIT 0, 1"),
        ("sqlite", "SELECT sex, AVG(income) AS m FROM census GROUP BY sex ORDER BY sex LIMIT 1 OFFSET 0"),
        ("spark", "SELECT `sex`, AVG(income) AS m FROM census GROUP BY sex ORDER BY sex LIMIT 1"),
        (
            "snowflake",
            'SELECT "SEX", AVG(income) AS m FROM census GROUP BY sex ORDER BY sex FETCH FIRST 1 ROWS ONLY',
        ),
    ],
    ids=lambda value: value if value in DIALECTS else "",
)
def test_each_dialect_reads_its_quoting_and_row_limits(
    session: Session, backend: DuckDBBackend, dialect: str, query: str
) -> None:
    rows = released(session, query, dialect=dialect)
    want = exact(backend, "SELECT sex, AVG(income) AS m FROM census GROUP BY sex ORDER BY sex LIMIT 1")
    assert len(rows) == 1 and list(rows[0]) == ["sex", "m", "m_ci_low", "m_ci_high"]
    assert rows[0]["sex"] == want[0]["sex"]
    assert_close(rows[0]["m"], want[0]["m"])


@pytest.mark.parametrize("dialect", DIALECTS)
def test_every_dialect_answers_a_filtered_count(
    session: Session, backend: DuckDBBackend, dialect: str
) -> None:
    where = "WHERE age >= 30 AND sex = '2' AND income BETWEEN 1000 AND 50000"
    rows = released(session, f"SELECT COUNT(*) AS n FROM census {where}", dialect=dialect)
    assert abs(rows[0]["n"] - exact(backend, f"SELECT COUNT(*) AS n FROM census {where}")[0]["n"]) <= 1


def test_string_literals_follow_the_dialect(session: Session, backend: DuckDBBackend) -> None:
    """In MySQL and BigQuery "2" is a string; in DuckDB it would name a column."""
    want = exact(backend, "SELECT COUNT(*) AS n FROM census WHERE sex = '2'")[0]["n"]
    for dialect in ("mysql", "bigquery"):
        rows = released(session, 'SELECT COUNT(*) AS n FROM census WHERE sex = "2"', dialect=dialect)
        assert abs(rows[0]["n"] - want) <= 1
    assert "has no column '2'" in refusal('SELECT COUNT(*) AS n FROM census WHERE sex = "2"')


def test_the_session_dialect_is_the_default_and_a_query_may_override_it(
    backend: DuckDBBackend, tmp_path: Path
) -> None:
    tsql = kakeibo.connect(
        backend, catalog=CATALOG, ledger=tmp_path / "l.sqlite", budget=(1e12, 0.5), dialect="TSQL"
    )
    assert tsql.dialect == "tsql"
    top = "SELECT TOP 1 sex, COUNT(*) AS n FROM census GROUP BY sex ORDER BY sex"
    assert tsql.plan(top, epsilon=1).query.limit == 1
    assert "LIMIT" not in tsql.explain(top)  # LIMIT is applied to the released rows, not in the engine
    assert len(tsql.sql(top, epsilon=EPSILON)) == 1
    assert tsql.plan(top, epsilon=1, dialect="duckdb").query.limit == 1  # TOP n is LIMIT n in every dialect
    assert len(tsql.sql(top, epsilon=EPSILON, dialect="duckdb")) == 1  # and runs (its columns are checked)
    fetch = "SELECT sex, COUNT(*) AS n FROM census GROUP BY sex ORDER BY sex LIMIT 1"
    assert len(tsql.sql(fetch, epsilon=EPSILON, dialect="duckdb")) == 1


def test_the_same_text_in_another_dialect_is_another_release(
    session: Session, backend: DuckDBBackend
) -> None:
    """STDDEV is the sample statistic in DuckDB and the population one in MySQL: the ledger must not answer
    one with the other's stored release."""
    query = "SELECT STDDEV(income) AS s FROM census"
    duck = session.sql(query, epsilon=EPSILON, delta=1e-6)
    mysql = session.sql(query, epsilon=EPSILON, delta=1e-6, dialect="mysql")
    again = session.sql(query, epsilon=EPSILON, delta=1e-6, dialect="mysql")
    want = exact(backend, "SELECT STDDEV_SAMP(income) AS s, STDDEV_POP(income) AS p FROM census")[0]
    assert_close(duck.table["s"][0].as_py(), want["s"])
    assert_close(mysql.table["s"][0].as_py(), want["p"])
    assert duck.request_id != mysql.request_id == again.request_id
    assert again.table.equals(mysql.table)
    assert len(session.ledger.entries()) == 2  # the repeated MySQL query was answered from the ledger


@pytest.mark.parametrize("dialect", ["oracle", "", "DuckDB SQL", 3, None])
def test_an_unknown_dialect_is_refused_with_the_accepted_ones(
    backend: DuckDBBackend, tmp_path: Path, dialect: Any
) -> None:
    accepted = "use one of duckdb, postgres, tsql, bigquery, spark, mysql, sqlite or snowflake."
    assert refusal("SELECT COUNT(*) FROM census", dialect=dialect).endswith(accepted)
    if dialect is None:  # a session without a dialect reads the catalog's, else DuckDB's
        session = kakeibo.connect(backend, catalog=CATALOG, ledger=tmp_path / "l.sqlite", budget=1)
        assert session.dialect == "duckdb"
        session.ledger.close()  # the module's backend stays open
        return
    with pytest.raises(QueryRefused, match=re.escape(accepted)):
        kakeibo.connect(backend, catalog=CATALOG, ledger=tmp_path / "l.sqlite", budget=1, dialect=dialect)
    assert not (tmp_path / "l.sqlite").exists()  # refused before the ledger is opened


@pytest.mark.parametrize(
    ("query", "fragment", "dialect"),
    [
        ("SELECT TOP 50 PERCENT sex, COUNT(*) FROM census GROUP BY sex", "could not be parsed", "duckdb"),
        ("SELECT TOP 1 sex, COUNT(*) FROM census GROUP BY sex LIMIT 2", "could not be parsed", "duckdb"),
        ("SELECT TOP 50 PERCENT sex, COUNT(*) FROM census GROUP BY sex", "percentage or WITH TIES", "tsql"),
        (
            "SELECT TOP 1 WITH TIES sex, COUNT(*) AS n FROM census GROUP BY sex ORDER BY n",
            "WITH TIES",
            "tsql",
        ),
        (
            "SELECT TOP (SELECT 1) sex, COUNT(*) FROM census GROUP BY sex",
            "subqueries are not supported",
            "tsql",
        ),
        (
            "SELECT sex, COUNT(*) FROM census GROUP BY sex ORDER BY sex OFFSET 1 ROWS",
            "OFFSET is not supported",
            "tsql",
        ),
        ("SELECT sex, COUNT(*) FROM census GROUP BY sex LIMIT 1, 1", "OFFSET is not supported", "mysql"),
        (
            "SELECT sex, COUNT(*) FROM census GROUP BY sex FETCH FIRST 50 PERCENT ROWS ONLY",
            "PERCENT",
            "postgres",
        ),
        ("SELECT COUNT(*) FROM census WHERE RAND() > 0.5", "non-deterministic", "tsql"),
        ("SELECT COUNT(*) FROM census; SELECT 1", "send one SELECT statement at a time", "tsql"),
    ],
)
def test_dialects_keep_the_refusals(query: str, fragment: str, dialect: str) -> None:
    assert fragment in refusal(query, dialect=dialect)


# --------------------------------------------------------------------------------- schema.table names


@pytest.mark.parametrize(
    ("query", "dialect"),
    [
        ("SELECT sex, COUNT(*) AS n FROM main.census GROUP BY sex", "duckdb"),
        ("SELECT sex, COUNT(*) AS n FROM public.census GROUP BY sex", "duckdb"),
        ('SELECT sex, COUNT(*) AS n FROM "main"."census" GROUP BY sex', "duckdb"),
        ("SELECT sex, COUNT(*) AS n FROM MAIN.Census GROUP BY sex", "duckdb"),
        ('SELECT "public"."census"."sex", COUNT(*) AS n FROM "public"."census" GROUP BY 1', "postgres"),
        ("SELECT main.census.sex, COUNT(*) AS n FROM main.census GROUP BY main.census.sex", "duckdb"),
        ("SELECT census.sex, COUNT(*) AS n FROM main.census GROUP BY census.sex", "duckdb"),
        ("SELECT main.census.sex, COUNT(*) AS n FROM census GROUP BY sex", "duckdb"),
        ("SELECT c.sex, COUNT(*) AS n FROM main.census AS c GROUP BY c.sex", "duckdb"),
        ("SELECT [main].[census].[sex], COUNT(*) AS n FROM [main].[census] GROUP BY [sex]", "tsql"),
        ("SELECT sex, COUNT(*) AS n FROM `main.census` GROUP BY sex", "bigquery"),
    ],
)
def test_the_default_schema_names_the_catalog_table(
    session: Session, backend: DuckDBBackend, query: str, dialect: str
) -> None:
    rows = released(session, query + " ORDER BY n", dialect=dialect)
    want = exact(backend, "SELECT sex, COUNT(*) AS n FROM census GROUP BY sex ORDER BY n")
    assert list(rows[0]) == ["sex", "n", "n_ci_low", "n_ci_high"]
    assert [(r["sex"], r["n"]) for r in rows] == [(w["sex"], w["n"]) for w in want]


def test_schema_qualified_columns_in_where_having_and_a_join(
    session: Session, backend: DuckDBBackend
) -> None:
    query = (
        "SELECT public.levels.label, SUM(main.census.income) AS s FROM main.census "
        "JOIN public.levels ON main.census.educ = public.levels.educ "
        "WHERE main.census.married = 1 AND public.census.age BETWEEN 30 AND 60 "
        "GROUP BY public.levels.label HAVING s > 0 ORDER BY main.levels.label"
    )
    analysed = analyze(query, CATALOG)
    assert [join.table.name for join in analysed.joins] == ["levels"]
    assert analysed.where_box is not None  # the WHERE region is read through the qualified names
    rows = released(session, query)
    want = exact(
        backend,
        "SELECT label, SUM(income) AS s FROM census JOIN levels USING (educ) "
        "WHERE married = 1 AND age BETWEEN 30 AND 60 GROUP BY label ORDER BY label",
    )
    assert [r["label"] for r in rows] == [w["label"] for w in want]
    for row, truth in zip(rows, want, strict=True):
        assert_close(row["s"], truth["s"], relative=1e-3)


def test_a_known_database_may_lead_a_three_part_name() -> None:
    query = "SELECT db.main.census.sex, COUNT(*) FROM db.main.census GROUP BY sex"
    assert analyze(query, CATALOG, database="DB").group_by == ("sex",)
    assert "the database db is not known to be the session's" in refusal(query)
    assert "the database db is not the session's database prod" in refusal(query, database="prod")


@pytest.mark.parametrize(
    ("query", "fragment"),
    [
        ("SELECT COUNT(*) FROM other.census", "the schema other is not the engine's default one"),
        (
            "SELECT COUNT(*) FROM information_schema.tables",
            "the schema information_schema is not the engine's",
        ),
        ("SELECT COUNT(*) FROM pg_catalog.pg_user", "the schema pg_catalog is not the engine's default one"),
        ("SELECT COUNT(*) FROM dbo.census", "the schema dbo is not"),
        (
            "SELECT COUNT(*) FROM main.secrets",
            "unknown table 'main.secrets'; the catalog has: census, levels",
        ),
        ("SELECT COUNT(*) FROM public.nope", "named without a schema or qualified by main or public"),
        ("SELECT COUNT(*) FROM mydb.main.census", "the database mydb is not known to be the session's"),
        ("SELECT COUNT(*) FROM a.b.main.census", "the table name a.b.main.census has too many qualifiers"),
        ("SELECT COUNT(*) FROM census JOIN other.levels USING (educ)", "the schema other is not"),
        ("SELECT COUNT(*) FROM main.census WHERE other.census.age > 3", "has too many qualifiers"),
        ("SELECT COUNT(*) FROM main.census c WHERE main.census.age > 3", "unknown table or alias 'census'"),
        ("SELECT COUNT(*) FROM main.'census.csv'", "reading files such as 'census.csv' is not allowed"),
        ("SELECT COUNT(*) FROM main.census TABLESAMPLE (10 PERCENT)", "TABLESAMPLE is not supported"),
    ],
)
def test_other_schemas_and_databases_are_refused_with_the_known_tables(query: str, fragment: str) -> None:
    assert fragment in refusal(query)


def test_a_refused_qualified_name_costs_nothing(session: Session) -> None:
    with pytest.raises(QueryRefused):
        session.sql("SELECT COUNT(*) FROM other.census", epsilon=1)
    assert session.ledger.entries() == []
