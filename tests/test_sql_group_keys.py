"""GROUP BY an expression (issue 17, :mod:`kakeibo.sql.group_keys`).

The engine never evaluates the analyst's expression: it runs a CASE over total comparisons with literal
results that kakeibo computed. These tests check that the CASE gives, on every value of the column, what
the dialect the query was written in would give (against the dialect's own engine: DuckDB, SQLite,
PostgreSQL, Spark), that it gives the same on every engine kakeibo runs on (NULLs and values beyond the
bounds included), that the keys are public (a key without rows is released with its noisy zero), the
refusals, and the privacy claim: one row moves one key's count by one, and the released count of that key
is as private as its mechanism claims (an audit).
"""

from __future__ import annotations

import datetime
import sqlite3
from decimal import Decimal
from typing import Any

import numpy as np
import pyarrow as pa
import pytest

import kakeibo
from backend_fixtures import run
from kakeibo.audit import audit
from kakeibo.backends import DuckDBBackend
from kakeibo.sql import Catalog, QueryRefused
from kakeibo.sql.analyze import analyze
from kakeibo.sql.group_keys import MAX_KEY_PIECES, truncate_date
from kakeibo.sql.plan import plan_query
from kakeibo.sql.rewrite import bounded_sql, group_name
from kakeibo.sql.session import Session

CATALOG = Catalog.from_toml(
    """
[tables.t]
[tables.t.columns]
x = { type = "int", lower = -40, upper = 40 }
y = { type = "int", lower = 0, upper = 3000000 }
z = { type = "int", lower = 0, upper = 5000 }
f = { type = "float", lower = 0, upper = 1 }
s = { type = "str" }
u = "int"
day = "date"
pday = { type = "date", public_values = ["2026-01-31", "2026-02-01", "2026-05-17", "2026-11-25"] }
"""
)
LOW, HIGH = -40, 40
#: values of x beyond its bounds, and NULL: the key reads x clamped (or is NULL)
EXTRA = [-1000, -41, 41, 10**6, None]


def _key(expression: str, dialect: str = "duckdb") -> Any:
    """The :class:`GroupExpression` of ``GROUP BY <expression>``."""
    query = analyze(f"SELECT COUNT(*) AS n FROM t GROUP BY {expression}", CATALOG, dialect=dialect)
    (key,) = query.group_expressions
    assert key is not None
    return key


def _compiled(backend: Any, expression: str, dialect: str, values: list[int | None]) -> list[Any]:
    """The engine CASE of ``expression`` evaluated by ``backend`` on ``values`` of x, in that order."""
    backend.load_table("domain", pa.table({"i": list(range(len(values))), "x": pa.array(values, pa.int64())}))
    case = _key(expression, dialect).sql.sql("duckdb")
    rows = run(backend, f"SELECT i, {case} AS k FROM domain AS t ORDER BY i").to_pylist()
    return [row["k"] for row in rows]


def _same(ours: list[Any], theirs: list[Any]) -> None:
    """Equal values of the same kind (int or float), position by position. A DECIMAL the engine computes
    (DuckDB's ``x * 0.1``) counts as a float: kakeibo computes keys with a fraction in double precision."""
    assert len(ours) == len(theirs)
    theirs = [float(b) if isinstance(b, Decimal) else b for b in theirs]
    for i, (a, b) in enumerate(zip(ours, theirs, strict=True)):
        assert a == b and isinstance(a, float) == isinstance(b, float), (LOW + i, a, b)


DOMAIN = list(range(LOW, HIGH + 1))

DUCKDB_EXPRESSIONS = [
    "x / 7",
    "x // 7",
    "x % 7",
    "-x // 4",
    "FLOOR(x / 7)",
    "CEIL(x / 7)",
    "ROUND(x / 4)",
    "ROUND(x / 7, 0)",
    "ABS(x) // 3",
    "(x - 3) * 2",
    "x / 2.5",
    "FLOOR(x * 0.1)",
]


@pytest.mark.parametrize("expression", DUCKDB_EXPRESSIONS)
def test_a_key_is_what_duckdb_computes_on_every_value(expression: str) -> None:
    db = DuckDBBackend()
    db.load_table("t", pa.table({"i": range(len(DOMAIN)), "x": DOMAIN}))
    native = [r["k"] for r in db.execute(f"SELECT i, {expression} AS k FROM t ORDER BY i").to_pylist()]
    _same(_compiled(DuckDBBackend(), expression, "duckdb", DOMAIN), native)


@pytest.mark.parametrize("expression", ["x / 7", "x % 7", "-x / 4", "(x - 3) * 2 / 5", "x / 2.5"])
def test_a_key_is_what_sqlite_computes_on_every_value(expression: str) -> None:
    """SQLite divides integers by truncating (as PostgreSQL and T-SQL do): ``typed`` division."""
    con = sqlite3.connect(":memory:")
    con.execute("CREATE TABLE t (i INTEGER, x INTEGER)")
    con.executemany("INSERT INTO t VALUES (?, ?)", list(enumerate(DOMAIN)))
    native = [row[0] for row in con.execute(f"SELECT {expression} FROM t ORDER BY i")]
    _same(_compiled(DuckDBBackend(), expression, "sqlite", DOMAIN), native)


@pytest.mark.xdist_group("postgres")
@pytest.mark.parametrize("expression", ["x / 7", "x % 7", "-x / 4", "ABS(x) / 3", "x * 3 - 5"])
def test_a_key_is_what_postgresql_computes_on_every_value(postgres_backend: Any, expression: str) -> None:
    postgres_backend.load_table("t", pa.table({"i": range(len(DOMAIN)), "x": DOMAIN}))
    rows = postgres_backend.execute(f"SELECT i, {expression} AS k FROM t ORDER BY i").to_pylist()
    _same(_compiled(DuckDBBackend(), expression, "postgres", DOMAIN), [r["k"] for r in rows])


@pytest.mark.xdist_group("spark")
@pytest.mark.parametrize("expression", ["x / 7", "x DIV 7", "x % 7", "FLOOR(x / 7)", "ABS(x) DIV 3"])
def test_a_key_is_what_spark_computes_on_every_value(spark_backend: Any, expression: str) -> None:
    """Spark's ``FLOOR`` returns a BIGINT where DuckDB and PostgreSQL return a double: kakeibo's key is the
    double, so the comparison here is of values only for it."""
    spark_backend.load_table("t", pa.table({"i": range(len(DOMAIN)), "x": DOMAIN}))
    rows = spark_backend.execute(f"SELECT i, {expression} AS k FROM t ORDER BY i").to_pylist()
    ours = _compiled(DuckDBBackend(), expression, "spark", DOMAIN)
    if expression.startswith("FLOOR"):
        assert ours == [r["k"] for r in rows] and all(isinstance(v, float) for v in ours)
    else:
        _same(ours, [r["k"] for r in rows])


ENGINE_EXPRESSIONS = [
    ("x / 7", "duckdb"),
    ("x / 7", "postgres"),
    ("ROUND(x / 4)", "duckdb"),
    ("x / 2.5", "duckdb"),
    ("x % 7", "duckdb"),
    ("CASE WHEN x < 0 THEN 'negative' WHEN x = 0 THEN 'zero' ELSE 'positive' END", "duckdb"),
    ("CASE WHEN x BETWEEN -5 AND 5 THEN 0.5 WHEN x > 5 THEN 2 END", "duckdb"),
]


@pytest.mark.xdist_group("spark")
def test_the_engine_case_gives_the_same_keys_on_every_engine(
    postgres_backend: Any, spark_backend: Any
) -> None:
    """DuckDB, PostgreSQL and Spark agree on every compiled key, for values beyond the bounds and NULL too
    (an expression that differs across engines would make the released keys depend on the engine)."""
    values = [*DOMAIN, *EXTRA]
    for expression, dialect in ENGINE_EXPRESSIONS:
        on_duckdb = _compiled(DuckDBBackend(), expression, dialect, values)
        if not expression.startswith("CASE"):  # a CASE's ELSE takes NULL x, as SQL says
            assert on_duckdb[-1] is None  # NULL x: a NULL key
        for backend in (postgres_backend, spark_backend):
            _same(_compiled(backend, expression, dialect, values), on_duckdb)


def test_a_value_beyond_the_bounds_is_keyed_as_the_bound() -> None:
    keys = _compiled(DuckDBBackend(), "x // 10", "duckdb", [-1000, -41, -40, 40, 41, 10**6])
    assert keys == [-4, -4, -4, 4, 4, 4]


def test_the_keys_are_the_results_over_the_domain_in_order() -> None:
    assert _key("x // 10").public_values == (-4, -3, -2, -1, 0, 1, 2, 3, 4)
    assert _key("x / 10", "postgres").public_values == (-4, -3, -2, -1, 0, 1, 2, 3, 4)
    assert _key("FLOOR(x / 10)").public_values == (-4.0, -3.0, -2.0, -1.0, 0.0, 1.0, 2.0, 3.0, 4.0)
    assert _key("x % 3").public_values == (-1, 0, -2, 1, 2)
    assert _key("ABS(x) // 20").public_values == (2, 1, 0)
    key = _key("CASE WHEN s = 'a' THEN 'A' WHEN f < 0.5 THEN 'low' ELSE 'other' END")
    assert key.public_values == ("A", "low", "other") and key.type == "str" and key.not_null is None
    key = _key("CASE s WHEN 'a' THEN 1 WHEN 'b' THEN 2.5 END")
    assert key.public_values == (1.0, 2.5) and key.type == "float" and key.not_null is not None
    assert _key("CASE WHEN f < 0.5 THEN TRUE ELSE FALSE END").public_values == (True, False)


def test_minus_zero_is_zero() -> None:
    assert _key("CEIL(x / 100)").public_values == (0.0, 1.0)
    assert str(_key("CEIL(x / 100)").public_values[0]) == "0.0"


REFUSALS = [
    ("x + u", "reads one int column with bounds"),
    ("u // 10", "u is int without bounds"),
    ("f * 10", "f is float"),
    ("UPPER(s)", "s is str"),
    ("y // 3", "the bounds of y span 3,000,001 values"),
    ("z % 7", f"changes value 5,000 times over [0, 5000]; a key may have at most {MAX_KEY_PIECES:,} pieces"),
    ("x // 0", "divides by zero"),
    ("100 / (x - 1)", "divides by zero"),
    ("x / 2.5 // 1", "integer division takes integers"),
    ("CAST(x AS DOUBLE)", "is not an operation a key may use"),
    ("POWER(x, 2)", "is not an operation a key may use"),
    ("ROUND(x / 3, 1)", "takes one argument here"),
    ("x * 4503599627370496", "leaves the exact integers"),
    ("CASE WHEN x < 0 THEN 'a' ELSE 1 END", "mixes results of the types"),
    ("CASE WHEN x < 0 THEN x ELSE 1 END", "must give literals"),
    ("CASE WHEN x < 0 THEN NULL END", "every branch gives NULL"),
    ("CASE WHEN s = 1 THEN 'a' END", "compares number and str"),
    ("CASE WHEN CAST(s AS INT) = 1 THEN 'a' END", "is not a column or a literal"),
    ("'x'", "names no column"),
    ("DATE_TRUNC('hour', day)", "a date key truncates to YEAR, QUARTER, MONTH, WEEK or DAY"),
    ("DATE_TRUNC('month', s)", "a date key truncates one date column, and s is str"),
]


@pytest.mark.parametrize(("expression", "fragment"), REFUSALS)
def test_refused_keys_say_why_in_one_sentence(expression: str, fragment: str) -> None:
    with pytest.raises(QueryRefused) as info:
        analyze(f"SELECT COUNT(*) AS n FROM t GROUP BY {expression}", CATALOG)
    reason = str(info.value)
    assert fragment in reason and "\n" not in reason and reason.endswith("."), reason


def test_select_list_and_group_by_name_the_same_key_by_text_alias_or_position() -> None:
    for group_by in ("x // 10", "dec", "1"):
        query = analyze(f"SELECT x // 10 AS dec, COUNT(*) AS n FROM t GROUP BY {group_by}", CATALOG)
        assert query.group_aliases == ("dec",) and query.output == ("dec", "n")
    query = analyze("SELECT COUNT(*) AS n FROM t GROUP BY x // 10", CATALOG)
    assert query.group_aliases == ("key",) and query.output == ("n",)
    with pytest.raises(QueryRefused, match="released only as a GROUP BY key"):
        analyze("SELECT x // 10 AS d, COUNT(*) AS n FROM t GROUP BY x // 5", CATALOG)
    with pytest.raises(QueryRefused, match="GROUP BY lists x // 10 twice"):
        analyze("SELECT COUNT(*) AS n FROM t GROUP BY x // 10, x // 10", CATALOG)
    # a column of the table takes precedence over an output alias of the same name, as in SQL
    query = analyze("SELECT x // 10 AS dec, COUNT(*) AS n FROM t GROUP BY dec, day", CATALOG)
    assert query.group_by == ("dec", "day") and query.group_expressions[1] is None
    with pytest.raises(QueryRefused, match="GROUP BY day names the column day, which takes precedence"):
        analyze("SELECT x // 10 AS day, COUNT(*) AS n FROM t GROUP BY day", CATALOG)
    with pytest.raises(QueryRefused, match="GROUP BY u // 10: an expression key"):
        analyze("SELECT u // 10 AS d, COUNT(*) AS n FROM t GROUP BY d", CATALOG)


# --- date keys ---------------------------------------------------------------------------------------------

DAYS = [datetime.date(2023, 12, 25) + datetime.timedelta(days=k) for k in range(0, 800, 3)]


@pytest.mark.parametrize(
    ("expression", "dialect", "unit"),
    [
        ("DATE_TRUNC('month', day)", "duckdb", "MONTH"),
        ("DATE_TRUNC('quarter', day)", "postgres", "QUARTER"),
        ("DATETRUNC(week, day)", "tsql", "WEEK"),
        ("DATE_TRUNC(day, YEAR)", "bigquery", "YEAR"),
        ("TRUNC(day, 'MM')", "spark", "MONTH"),
        ("DATE_TRUNC('day', day)", "duckdb", "DAY"),
    ],
)
def test_a_date_key_truncates_in_every_dialects_spelling(expression: str, dialect: str, unit: str) -> None:
    """DuckDB runs the key on dates three days apart over two years; each is its date truncated by
    :func:`truncate_date`, a date (not a timestamp), and a NULL date is a NULL key."""
    db = DuckDBBackend()
    db.load_table("t", pa.table({"i": range(len(DAYS) + 1), "day": pa.array([*DAYS, None], pa.date32())}))
    key = _key(expression, dialect)
    assert key.type == "date" and key.public_values is None
    rows = db.execute(f"SELECT i, {key.sql.sql('duckdb')} AS k FROM t ORDER BY i").to_pylist()
    assert [r["k"] for r in rows] == [truncate_date(day, unit) for day in DAYS] + [None]


@pytest.mark.xdist_group("spark")
def test_a_date_key_is_the_same_on_every_engine(postgres_backend: Any, spark_backend: Any) -> None:
    table = pa.table({"i": range(len(DAYS) + 1), "day": pa.array([*DAYS, None], pa.date32())})
    for unit in ("year", "quarter", "month", "week", "day"):
        sql = _key(f"DATE_TRUNC('{unit}', day)").sql.sql("duckdb")
        results = []
        for backend in (DuckDBBackend(), postgres_backend, spark_backend):
            backend.load_table("t", table)
            results.append(
                [r["k"] for r in run(backend, f"SELECT i, {sql} AS k FROM t ORDER BY i").to_pylist()]
            )
        assert results[0] == results[1] == results[2], unit
        assert all(
            isinstance(k, datetime.date) and not isinstance(k, datetime.datetime) for k in results[0][:-1]
        )


def test_a_date_key_over_public_dates_has_public_keys_and_otherwise_needs_selection() -> None:
    key = _key("DATE_TRUNC('month', pday)")
    assert key.public_values == (
        datetime.date(2026, 1, 1),
        datetime.date(2026, 2, 1),
        datetime.date(2026, 5, 1),
        datetime.date(2026, 11, 1),
    )
    plan = plan_query(
        analyze("SELECT COUNT(*) AS n FROM t GROUP BY DATE_TRUNC('month', day)", CATALOG),
        epsilon=1,
        delta=1e-6,
    )
    assert plan.public_keys is None and plan.selection is not None
    with pytest.raises(QueryRefused, match="needs private partition selection, which needs delta > 0"):
        plan_query(
            analyze("SELECT COUNT(*) AS n FROM t GROUP BY DATE_TRUNC('month', day)", CATALOG), epsilon=1
        )


# --- releases ----------------------------------------------------------------------------------------------


@pytest.fixture
def session(tmp_path: Any) -> Session:
    rng = np.random.default_rng(5)
    x = rng.integers(LOW, HIGH + 1, 500).astype(object)
    x[:20] = None  # rows with a NULL x belong to no key
    db = DuckDBBackend()
    db.load_table(
        "t",
        pa.table(
            {
                "x": pa.array(list(x), pa.int64()),
                "y": rng.integers(0, 10, 500),
                "z": rng.integers(0, 10, 500),
                "f": rng.uniform(0, 1, 500),
                "s": rng.choice(["a", "b"], 500),
                "u": rng.integers(0, 9, 500),
                "day": pa.array([datetime.date(2026, 1, 1)] * 500, pa.date32()),
                "pday": pa.array([datetime.date(2026, 1, 31)] * 500, pa.date32()),
            }
        ),
    )
    return kakeibo.connect(db, catalog=CATALOG, ledger=tmp_path / "l.sqlite", budget=10**7)


def test_every_public_key_is_released_and_rows_without_a_key_are_in_none(session: Session) -> None:
    """At an epsilon where the noise scale is below 1e-6 the counts are the exact ones: the rows with a NULL
    x are in no group, and a key no row has (x >= 0 is filtered out) is released with its (noisy) zero."""
    exact = {
        r["d"]: r["n"]
        for r in session.backend.execute(
            "SELECT x // 10 AS d, COUNT(*) AS n FROM t WHERE x < 0 AND x IS NOT NULL GROUP BY 1"
        ).to_pylist()
    }
    released = session.sql(
        "SELECT x // 10 AS d, COUNT(*) AS n FROM t WHERE x < 0 GROUP BY 1", epsilon=10**7
    ).to_arrow()
    assert released.column("d").to_pylist() == [-4, -3, -2, -1, 0, 1, 2, 3, 4]
    assert {
        d: n for d, n in zip(released.column("d").to_pylist(), released.column("n").to_pylist(), strict=True)
    } == {
        **{d: 0 for d in range(-4, 5)},
        **exact,
    }
    assert exact[0] > 0  # x in (-10, 0) truncates to key 0: the keys follow the dialect's division


def test_a_case_without_else_drops_the_rows_no_branch_matches(session: Session) -> None:
    (exact,) = session.backend.execute("SELECT COUNT(*) AS n FROM t WHERE s = 'a'").to_pylist()
    released = session.sql(
        "SELECT CASE WHEN s = 'a' THEN 'first' END AS k, COUNT(*) AS n FROM t GROUP BY k", epsilon=10**7
    ).to_arrow()
    assert released.to_pylist() == [
        {"k": "first", "n": exact["n"], "n_ci_low": exact["n"], "n_ci_high": exact["n"]}
    ]


def test_explain_shows_each_key_and_its_values(session: Session) -> None:
    text = session.explain(
        "SELECT CASE WHEN f < 0.5 THEN 'low' ELSE 'high' END AS b, COUNT(*) AS n FROM t GROUP BY b"
    )
    assert "groups: all 2 public keys" in text
    assert "key b = CASE WHEN f < 0.5 THEN 'low' ELSE 'high' END: values 'low', 'high'" in text


def test_a_key_needs_no_partition_selection_and_no_delta(session: Session) -> None:
    plan = session.plan("SELECT x // 10 AS d, SUM(y) AS s FROM t GROUP BY d", epsilon=1)
    assert plan.selection is None and plan.delta == 0 and len(plan.public_keys or ()) == 9


def test_keys_alone_are_refused_as_public(session: Session) -> None:
    with pytest.raises(QueryRefused, match="every GROUP BY key of this query is public"):
        session.sql("SELECT x // 10 AS d FROM t GROUP BY d", epsilon=1)


# --- the privacy claim -------------------------------------------------------------------------------------


@pytest.mark.statistical
def test_one_row_moves_one_key_by_one_and_its_release_keeps_its_epsilon() -> None:
    """Neighbouring tables D and D' = D plus one row with x = 7 (key 0 under truncating division). The
    engine's bounded counts differ in exactly that key, by exactly one (the sensitivity the plan noises
    for). Audit (kakeibo.audit, 10^6 releases per input, seed 17, 95% Clopper-Pearson lower bound over the
    default events) of that key's released count at epsilon 1: the bound must not exceed 1 (false-failure
    rate <= 5%)."""
    rng = np.random.default_rng(3)
    base = pa.table(
        {
            "x": rng.integers(LOW, HIGH + 1, 300),
            "y": [0] * 300,
            "f": [0.5] * 300,
            "s": ["a"] * 300,
            "z": [0] * 300,
            "u": [0] * 300,
        }
    )
    neighbour = pa.concat_tables(
        [base, pa.table({"x": [7], "y": [0], "f": [0.5], "s": ["a"], "z": [0], "u": [0]})]
    )
    plan = plan_query(
        analyze("SELECT x / 10 AS d, COUNT(*) AS n FROM t GROUP BY d", CATALOG, dialect="postgres"), epsilon=1
    )
    counts = []
    for table in (base, neighbour):
        db = DuckDBBackend()
        db.load_table("t", table)
        rows = db.execute(bounded_sql(plan)).to_pylist()
        counts.append({row[group_name(0)]: row["rows"] for row in rows})
    moved = {k for k in counts[0].keys() | counts[1].keys() if counts[0].get(k, 0) != counts[1].get(k, 0)}
    assert moved == {0} and counts[1][0] - counts[0].get(0, 0) == 1
    (statistic,) = plan.statistics
    assert statistic.per_group_sensitivity == 1
    result = audit(
        statistic.mechanism,
        counts[0].get(0, 0),
        counts[1][0],
        trials=1_000_000,
        rng=np.random.default_rng(17),
    )
    assert result.seeded and not result.refutes(1.0), str(result)
    assert result.epsilon_lower_bound > 0.5, f"the audit lost its power:\n{result}"


def test_a_key_over_a_joined_public_table_is_qualified_like_where() -> None:
    """With a join, the key's columns are written qualified by their table, as the WHERE clause's are, so
    the engine reads the public table's column and no other."""
    from adversarial_harness import CATALOG as JOINED

    query = analyze(
        "SELECT CASE WHEN dim.label = 'L1' THEN 'one' ELSE 'other' END AS kk, v.age // 10 AS dec, COUNT(*) "
        "AS n FROM visits AS v JOIN dim ON v.category = dim.category GROUP BY kk, dec",
        JOINED,
    )
    case, decade = (key.sql.sql("duckdb") for key in query.group_expressions if key is not None)
    assert case == "CASE WHEN \"dim\".\"label\" = 'L1' THEN 'one' ELSE 'other' END"
    assert decade.startswith('CASE WHEN "v"."age" < 10 THEN CAST(0 AS BIGINT)') and decade.count("WHEN") == 13
