"""What :func:`kakeibo.sql.analyze` accepts, and the structure it hands to the rewriter and the planner."""

from __future__ import annotations

import dataclasses
import pickle
from fractions import Fraction
from typing import Any

import pytest

from kakeibo.accounting.overlap import Box, Interval
from kakeibo.sql import Aggregate, AnalyzedQuery, Catalog, JoinSpec, QueryRefused, analyze

CATALOG = Catalog.from_toml(
    """
[tables.visits]
privacy_unit = "user_id"
max_partitions = 3
max_rows_per_partition = 5
source = "/nonexistent/visits.parquet"   # never read by the analysis
[tables.visits.columns]
user_id = { type = "int" }
category = { type = "str" }
amount = { type = "float", lower = 0, upper = 100 }
age = { type = "int", lower = 0, upper = 120, user_constant = true }
region = { type = "str", user_constant = true }
score = { type = "float" }
visit_date = { type = "date" }
member = { type = "bool" }
bucket = { type = "float", lower = 0, upper = 1, public_values = [0.0, 0.5, 1.0] }
items = { type = "int", lower = 0, upper = 10 }

[tables.people]
[tables.people.columns]
age = { type = "int", lower = 0, upper = 120 }
city = "str"
income = { type = "float", lower = 0, upper = 200000 }
height = { type = "float" }

[tables.categories]
public = true
[tables.categories.columns]
category = { type = "str", unique = true }
label = { type = "str", unique = true }
weight = "float"
"""
)

Agg = tuple[str, str, str | None, float | None, bool]


def aggs(query: AnalyzedQuery) -> list[Agg]:
    return [(a.alias, a.function, a.column, a.quantile, a.sample) for a in query.aggregates]


# (sql, group_by, group_aliases, output, aggregates)
ACCEPTED: list[tuple[str, tuple[str, ...], tuple[str, ...], tuple[str, ...], list[Agg]]] = [
    ("SELECT COUNT(*) FROM visits", (), (), ("count",), [("count", "count", None, None, True)]),
    (
        "SELECT category, COUNT(*) AS n FROM visits GROUP BY category",
        ("category",),
        ("category",),
        ("category", "n"),
        [("n", "count", None, None, True)],
    ),
    (
        "SELECT category, COUNT(*), SUM(amount), AVG(amount) FROM visits GROUP BY category",
        ("category",),
        ("category",),
        ("category", "count", "sum_amount", "avg_amount"),
        [
            ("count", "count", None, None, True),
            ("sum_amount", "sum", "amount", None, True),
            ("avg_amount", "avg", "amount", None, True),
        ],
    ),
    (
        "SELECT COUNT(DISTINCT user_id) AS users FROM visits",
        (),
        (),
        ("users",),
        [("users", "count_distinct_unit", None, None, True)],
    ),
    (
        "SELECT COUNT(DISTINCT v.user_id) FROM visits v",
        (),
        (),
        ("count_distinct_user_id",),
        [("count_distinct_user_id", "count_distinct_unit", None, None, True)],
    ),
    (
        "SELECT COUNT(amount) FROM visits",
        (),
        (),
        ("count_amount",),
        [("count_amount", "count", "amount", None, True)],
    ),
    (
        "SELECT COUNT(score) FROM visits",
        (),
        (),
        ("count_score",),
        [("count_score", "count", "score", None, True)],
    ),
    ("SELECT COUNT(1) AS c FROM people", (), (), ("c",), [("c", "count", None, None, True)]),
    (
        "SELECT VAR(amount), VARIANCE(amount) AS v2, VAR_SAMP(amount) AS v3, VAR_POP(amount) FROM visits",
        (),
        (),
        ("variance_amount", "v2", "v3", "var_pop_amount"),
        [
            ("variance_amount", "variance", "amount", None, True),
            ("v2", "variance", "amount", None, True),
            ("v3", "variance", "amount", None, True),
            ("var_pop_amount", "variance", "amount", None, False),
        ],
    ),
    (
        "SELECT STDDEV(items), STDDEV_SAMP(items) AS s2, STDDEV_POP(items) FROM visits",
        (),
        (),
        ("stddev_items", "s2", "stddev_pop_items"),
        [
            ("stddev_items", "stddev", "items", None, True),
            ("s2", "stddev", "items", None, True),
            ("stddev_pop_items", "stddev", "items", None, False),
        ],
    ),
    (
        "SELECT MEDIAN(amount), MIN(amount), MAX(amount) FROM visits",
        (),
        (),
        ("median_amount", "min_amount", "max_amount"),
        [
            ("median_amount", "quantile", "amount", 0.5, True),
            ("min_amount", "quantile", "amount", 0.0, True),
            ("max_amount", "quantile", "amount", 1.0, True),
        ],
    ),
    (
        "SELECT QUANTILE(amount, 0.25), quantile_cont(amount, 0.9), quantile_disc(items, 0.75) FROM visits",
        (),
        (),
        ("quantile_amount_0_25", "quantile_amount_0_9", "quantile_items_0_75"),
        [
            ("quantile_amount_0_25", "quantile", "amount", 0.25, True),
            ("quantile_amount_0_9", "quantile", "amount", 0.9, True),
            ("quantile_items_0_75", "quantile", "items", 0.75, True),
        ],
    ),
    (
        "SELECT PERCENTILE_CONT(0.1) WITHIN GROUP (ORDER BY amount) AS p10, "
        "PERCENTILE_CONT(0.1) WITHIN GROUP (ORDER BY amount DESC) AS p90, "
        "PERCENTILE_DISC(0.3) WITHIN GROUP (ORDER BY age) FROM visits",
        (),
        (),
        ("p10", "p90", "quantile_age_0_3"),
        [
            ("p10", "quantile", "amount", 0.1, True),
            ("p90", "quantile", "amount", 0.9, True),
            ("quantile_age_0_3", "quantile", "age", 0.3, True),
        ],
    ),
    (
        "SELECT category AS c, COUNT(*) AS n FROM visits GROUP BY category",
        ("category",),
        ("c",),
        ("c", "n"),
        [("n", "count", None, None, True)],
    ),
    (
        "SELECT category AS c, COUNT(*) FROM visits GROUP BY c",
        ("category",),
        ("c",),
        ("c", "count"),
        [("count", "count", None, None, True)],
    ),
    (
        "SELECT region, SUM(items) FROM visits GROUP BY 1",
        ("region",),
        ("region",),
        ("region", "sum_items"),
        [("sum_items", "sum", "items", None, True)],
    ),
    (
        "SELECT region, category, COUNT(*) FROM visits GROUP BY ALL",
        ("region", "category"),
        ("region", "category"),
        ("region", "category", "count"),
        [("count", "count", None, None, True)],
    ),
    (
        "SELECT COUNT(*) FROM visits GROUP BY category",
        ("category",),
        ("category",),
        ("count",),
        [("count", "count", None, None, True)],
    ),
    (
        "SELECT region, COUNT(*), category FROM visits GROUP BY category, region",
        ("category", "region"),
        ("category", "region"),
        ("region", "count", "category"),
        [("count", "count", None, None, True)],
    ),
    (
        "SELECT bucket, COUNT(*) FROM visits GROUP BY bucket",
        ("bucket",),
        ("bucket",),
        ("bucket", "count"),
        [("count", "count", None, None, True)],
    ),
    (
        "SELECT member, visit_date, items, COUNT(*) FROM visits GROUP BY member, visit_date, items",
        ("member", "visit_date", "items"),
        ("member", "visit_date", "items"),
        ("member", "visit_date", "items", "count"),
        [("count", "count", None, None, True)],
    ),
    (
        "select CATEGORY, Count(*) AS N, avg(AMOUNT) from VISITS group by Category",
        ("category",),
        ("category",),
        ("category", "n", "avg_amount"),
        [("n", "count", None, None, True), ("avg_amount", "avg", "amount", None, True)],
    ),
    (
        'SELECT "Category", COUNT(*) AS "Total" FROM "Visits" GROUP BY "CATEGORY"',
        ("category",),
        ("category",),
        ("category", "total"),
        [("total", "count", None, None, True)],
    ),
    (
        "SELECT v.category, SUM(v.amount) FROM visits AS v GROUP BY v.category",
        ("category",),
        ("category",),
        ("category", "sum_amount"),
        [("sum_amount", "sum", "amount", None, True)],
    ),
    (
        "-- how many visits?\nSELECT COUNT(*) /* all rows */ FROM visits;",
        (),
        (),
        ("count",),
        [("count", "count", None, None, True)],
    ),
    ("FROM visits SELECT COUNT(*) AS n", (), (), ("n",), [("n", "count", None, None, True)]),
    (
        "SELECT city, AVG(income), MEDIAN(age) FROM people GROUP BY city",
        ("city",),
        ("city",),
        ("city", "avg_income", "median_age"),
        [("avg_income", "avg", "income", None, True), ("median_age", "quantile", "age", 0.5, True)],
    ),
    (
        "SELECT COUNT(*), COUNT(*) FROM visits",
        (),
        (),
        ("count", "count_2"),
        [("count", "count", None, None, True), ("count_2", "count", None, None, True)],
    ),
    (
        "SELECT SUM(amount) AS count, COUNT(*), COUNT(*) FROM visits",
        (),
        (),
        ("count", "count_2", "count_3"),
        [
            ("count", "sum", "amount", None, True),
            ("count_2", "count", None, None, True),
            ("count_3", "count", None, None, True),
        ],
    ),
    (
        "SELECT category AS sum_amount, SUM(amount) FROM visits GROUP BY category",
        ("category",),
        ("sum_amount",),
        ("sum_amount", "sum_amount_2"),
        [("sum_amount_2", "sum", "amount", None, True)],
    ),
    (
        'SELECT COUNT(*) AS "件数" FROM visits',
        (),
        (),
        ("件数",),
        [("件数", "count", None, None, True)],
    ),
]


@pytest.mark.parametrize(("sql", "group_by", "group_aliases", "output", "expected"), ACCEPTED)
def test_accepted_query_structure(
    sql: str,
    group_by: tuple[str, ...],
    group_aliases: tuple[str, ...],
    output: tuple[str, ...],
    expected: list[Agg],
) -> None:
    query = analyze(sql, CATALOG)
    assert query.sql == sql
    assert query.group_by == group_by
    assert query.group_aliases == group_aliases
    assert query.output == output
    assert aggs(query) == expected
    assert query.group_tables == (query.table.name,) * len(group_by)
    assert query.joins == ()


def test_at_least_thirty_accepted_shapes() -> None:
    assert len(ACCEPTED) >= 30
    assert len({sql for sql, *_ in ACCEPTED}) == len(ACCEPTED)


def test_table_and_defaults() -> None:
    query = analyze("SELECT COUNT(*) FROM people", CATALOG)
    assert query.table is CATALOG.table("people")
    assert (query.where, query.having, query.order_by, query.limit) == (None, None, (), None)
    assert (query.joins, query.where_box, query.table_alias) == ((), None, None)


# WHERE is handed back with lower-case quoted identifiers, unqualified when there is no join.
WHERE_CASES = [
    ("SELECT COUNT(*) FROM visits WHERE amount > 3", '"amount" > 3e0'),  # a float column: a double literal
    (
        "SELECT COUNT(*) FROM visits AS v WHERE v.AMOUNT > 3 AND v.category = 'food'",
        '"amount" > 3e0 AND "category" = \'food\'',
    ),
    ("SELECT COUNT(*) FROM visits WHERE amount <= 0.1", '"amount" <= 0.1e0'),
    ("SELECT COUNT(*) FROM visits WHERE age = 30.000", '"age" = 30'),  # an int column: an integer literal
    # LIKE: no escape character in the analyst's pattern, sent with ESCAPE '!' (its '!' doubled)
    ("SELECT COUNT(*) FROM visits WHERE category LIKE 'T\\'", "\"category\" LIKE 'T\\' ESCAPE '!'"),
    ("SELECT COUNT(*) FROM visits WHERE category LIKE '50!%'", "\"category\" LIKE '50!!%' ESCAPE '!'"),
    ("SELECT COUNT(*) FROM visits WHERE visits.age BETWEEN 18 AND 30", '"age" BETWEEN 18 AND 30'),
    (
        "SELECT COUNT(*) FROM visits WHERE lower(category) LIKE 'f%' AND visit_date >= DATE '2024-01-01'",
        "LOWER(\"category\") LIKE 'f%' ESCAPE '!' AND \"visit_date\" >= CAST('2024-01-01' AS DATE)",
    ),
    (
        "SELECT COUNT(*) FROM visits WHERE category IN ('a', 'b') OR amount IS NULL",
        "\"category\" IN ('a', 'b') OR \"amount\" IS NULL",
    ),
    ("SELECT COUNT(*) FROM visits WHERE user_id = 42", '"user_id" = 42'),
    ("SELECT COUNT(*) FROM visits WHERE NOT member", 'NOT "member"'),
    (
        "SELECT COUNT(*) FROM visits WHERE UPPER(category) IS DISTINCT FROM 'X' AND member = TRUE",
        'UPPER("category") IS DISTINCT FROM \'X\' AND "member" = TRUE',
    ),
    ("SELECT COUNT(*) FROM visits WHERE visit_date < '2024-02-29'", "\"visit_date\" < '2024-02-29'"),
]


@pytest.mark.parametrize(("sql", "where_sql"), WHERE_CASES)
def test_where_is_normalised(sql: str, where_sql: str) -> None:
    query = analyze(sql, CATALOG)
    assert query.where is not None
    assert query.where.sql("duckdb") == where_sql


def test_table_alias_is_reported() -> None:
    assert analyze("SELECT COUNT(*) FROM visits v", CATALOG).table_alias == "v"
    assert analyze("SELECT COUNT(*) FROM visits AS V", CATALOG).table_alias == "v"


def test_having_is_rewritten_over_output_names() -> None:
    query = analyze(
        "SELECT category AS c, COUNT(*) AS n, SUM(amount) FROM visits GROUP BY category "
        "HAVING COUNT(*) > 10 AND n < 1000 AND category <> 'rent' AND SUM(amount) >= 2.5",
        CATALOG,
    )
    assert query.having is not None
    expected = '"n" > 10 AND "n" < 1000 AND "c" <> \'rent\' AND "sum_amount" >= 2.5e0'
    assert query.having.sql("duckdb") == expected
    no_group = analyze("SELECT COUNT(*) FROM visits HAVING count > 3", CATALOG)
    assert no_group.having is not None and no_group.having.sql("duckdb") == '"count" > 3'
    computed = analyze("SELECT COUNT(*) AS n FROM visits HAVING abs(n - 10) > 1", CATALOG)  # by kakeibo
    assert computed.having is not None and computed.having.sql("duckdb") == '"__term" > 1e0'
    (term,) = computed.terms
    assert (term.alias, term.expression.sql("duckdb"), term.inputs, term.text) == (
        "__term",
        "ABS(n - 10)",
        ("n",),
        False,
    )
    median = analyze("SELECT MEDIAN(amount) AS m FROM visits HAVING MEDIAN(amount) > 1", CATALOG)
    assert median.having is not None and median.having.sql("duckdb") == '"m" > 1e0'


def test_order_by_and_limit() -> None:
    query = analyze(
        "SELECT category, COUNT(*) AS n, AVG(amount) FROM visits GROUP BY category "
        "ORDER BY 2 DESC, category, AVG(amount) DESC LIMIT 10",
        CATALOG,
    )
    assert query.order_by == (("n", True), ("category", False), ("avg_amount", True))
    assert query.limit == 10
    aliased = analyze("SELECT category AS c, COUNT(*) FROM visits GROUP BY 1 ORDER BY category DESC", CATALOG)
    assert aliased.order_by == (("c", True),)
    fetch = analyze("SELECT COUNT(*) FROM visits FETCH FIRST 5 ROWS ONLY", CATALOG)
    assert fetch.limit == 5
    assert analyze("SELECT COUNT(*) FROM visits LIMIT 0", CATALOG).limit == 0


def test_join_to_public_table() -> None:
    query = analyze(
        "SELECT c.label, COUNT(*) AS n FROM visits v JOIN categories c ON v.category = c.category "
        "WHERE c.weight > 1 AND v.amount < 50 GROUP BY c.label",
        CATALOG,
    )
    assert query.table is CATALOG.table("visits")
    assert query.joins == (JoinSpec(CATALOG.table("categories"), "category", "v", "category", "c"),)
    assert (query.group_by, query.group_tables, query.output) == (("label",), ("categories",), ("label", "n"))
    assert query.table_alias == "v"
    assert query.where is not None
    assert query.where.sql("duckdb") == '"c"."weight" > 1e0 AND "v"."amount" < 50e0'
    assert query.where_box is None  # a public column is constrained


def test_join_written_from_the_public_side_and_on_different_names() -> None:
    query = analyze(
        "SELECT label, SUM(amount) FROM categories JOIN visits ON categories.label = visits.region "
        "GROUP BY label",
        CATALOG,
    )
    assert query.table.name == "visits"
    assert query.joins == (JoinSpec(CATALOG.table("categories"), "label", "visits", "region"),)
    assert query.group_tables == ("categories",)
    assert query.table_alias is None


def test_join_using_qualifies_where_and_resolves_the_shared_column() -> None:
    query = analyze(
        "SELECT category, label, COUNT(*) FROM visits JOIN categories USING (category) "
        "WHERE category = 'food' AND weight > 1 AND age >= 18 GROUP BY category, label",
        CATALOG,
    )
    assert query.joins == (JoinSpec(CATALOG.table("categories"), "category", "visits", "category"),)
    assert query.group_by == ("category", "label")
    assert query.group_tables == ("visits", "categories")
    assert query.where is not None
    assert query.where.sql("duckdb") == (
        '"visits"."category" = \'food\' AND "categories"."weight" > 1e0 AND "visits"."age" >= 18'
    )


def test_group_by_public_float_column_is_allowed() -> None:
    query = analyze(
        "SELECT weight, COUNT(*) FROM visits JOIN categories USING (category) GROUP BY weight", CATALOG
    )
    assert query.group_by == ("weight",) and query.group_tables == ("categories",)


def test_dialect_is_selectable() -> None:
    query = analyze("SELECT `category`, COUNT(*) FROM `visits` GROUP BY `category`", CATALOG, dialect="mysql")
    assert query.group_by == ("category",)
    with pytest.raises(QueryRefused, match="could not be parsed"):
        analyze("SELECT `category`, COUNT(*) FROM `visits` GROUP BY `category`", CATALOG, dialect="postgres")


def B(bounds: dict[str, Any], unit: str) -> Box:  # noqa: N802 - reads like the Box it builds
    return Box(bounds, unit=unit)  # type: ignore[arg-type]


def open_(lo: Any, hi: Any, lo_closed: bool = False, hi_closed: bool = False) -> Interval:
    return Interval(lo, hi, lo_closed=lo_closed, hi_closed=hi_closed)


BOX_CASES: list[tuple[str, Box | None]] = [
    ("SELECT COUNT(*) FROM people WHERE age BETWEEN 18 AND 65", B({"age": (18, 65)}, "record")),
    (
        "SELECT COUNT(*) FROM people WHERE age > 18 AND age <= 65 AND income < 1000",
        B({"age": open_(18, 65, hi_closed=True), "income": open_(None, 1000)}, "record"),
    ),
    ("SELECT COUNT(*) FROM people WHERE 18 < age", B({"age": open_(18, None)}, "record")),
    ("SELECT COUNT(*) FROM people WHERE 65 >= age", B({"age": open_(None, 65, hi_closed=True)}, "record")),
    ("SELECT COUNT(*) FROM people WHERE age = 30", B({"age": (30, 30)}, "record")),
    ("SELECT COUNT(*) FROM people WHERE age > -5", B({"age": open_(-5, None)}, "record")),
    (
        "SELECT COUNT(*) FROM people WHERE income <= 1e4",
        B({"income": open_(None, 10000, hi_closed=True)}, "record"),
    ),
    (
        "SELECT COUNT(*) FROM people WHERE income >= 0.1",
        B({"income": Interval(Fraction(1, 10), None)}, "record"),
    ),
    (
        "SELECT COUNT(*) FROM people WHERE age >= 10 AND age >= 20 AND age < 50 AND age <= 40",
        B({"age": (20, 40)}, "record"),
    ),
    ("SELECT COUNT(*) FROM people WHERE age > 20 AND age >= 20", B({"age": open_(20, None)}, "record")),
    (
        "SELECT COUNT(*) FROM people WHERE (age > 1) AND ((income < 5))",
        B({"age": open_(1, None), "income": open_(None, 5)}, "record"),
    ),
    ("SELECT COUNT(*) FROM visits WHERE age BETWEEN 18 AND 30", B({"age": (18, 30)}, "user")),
    (
        "SELECT COUNT(*) FROM visits WHERE user_id < 1000 AND age > 30",
        B({"user_id": open_(None, 1000), "age": open_(30, None)}, "user"),
    ),
    (
        "SELECT c.label, COUNT(*) FROM visits v JOIN categories c ON v.category = c.category "
        "WHERE v.age >= 65 GROUP BY c.label",
        B({"age": Interval(65, None)}, "user"),
    ),
    ("SELECT COUNT(*) FROM visits WHERE amount > 3", None),  # amount varies within a user
    ("SELECT COUNT(*) FROM visits WHERE age > 3 AND amount > 3", None),
    ("SELECT COUNT(*) FROM people WHERE age > 30 OR age < 10", None),
    ("SELECT COUNT(*) FROM people WHERE NOT age > 3", None),
    ("SELECT COUNT(*) FROM people WHERE city = 'Kyoto'", None),
    ("SELECT COUNT(*) FROM people WHERE age > 30 AND city = 'Kyoto'", None),
    ("SELECT COUNT(*) FROM people WHERE age BETWEEN SYMMETRIC 65 AND 18", None),
    ("SELECT COUNT(*) FROM people WHERE age > 30 AND age < 20", None),  # empty: selects nothing
    ("SELECT COUNT(*) FROM people", None),
    ("SELECT COUNT(*) FROM people WHERE age IN (1, 2)", None),
    ("SELECT COUNT(*) FROM people WHERE age > income", None),
]


@pytest.mark.parametrize(("sql", "box"), BOX_CASES)
def test_where_box(sql: str, box: Box | None) -> None:
    assert analyze(sql, CATALOG).where_box == box


def test_results_are_frozen_and_aggregates_can_be_looked_up() -> None:
    query = analyze("SELECT category, COUNT(*) AS n FROM visits GROUP BY category", CATALOG)
    with pytest.raises(dataclasses.FrozenInstanceError):
        query.limit = 3  # type: ignore[misc]
    assert query.aggregate("n") == Aggregate("n", "count", None)
    with pytest.raises(KeyError):
        query.aggregate("category")


def test_analyzed_queries_are_hashable_and_picklable() -> None:
    sql = (
        "SELECT c.label, COUNT(*) FROM visits v JOIN categories c ON v.category = c.category "
        "WHERE v.age > 3 GROUP BY c.label HAVING count > 1"
    )
    query = analyze(sql, CATALOG)
    assert hash(query) == hash(analyze(sql, CATALOG))
    assert pickle.loads(pickle.dumps(query)) == query


def test_where_is_a_copy_of_the_parsed_predicate() -> None:
    first = analyze("SELECT COUNT(*) FROM visits v WHERE v.amount > 3", CATALOG)
    second = analyze("SELECT COUNT(*) FROM visits WHERE amount > 3", CATALOG)
    assert first.where == second.where  # same normalised predicate, whatever the qualifier


def test_analyzed_query_defaults_for_hand_built_queries() -> None:
    visits = CATALOG.table("visits")
    query = AnalyzedQuery(
        sql="",
        table=visits,
        group_by=("category",),
        aggregates=(Aggregate("count", "count", None),),
        output=("category", "count"),
        where=None,
        having=None,
        order_by=(),
        limit=None,
        where_box=None,
    )
    assert query.group_aliases == ("category",) and query.group_tables == ("visits",)
    with pytest.raises(ValueError, match="one entry per GROUP BY key"):
        dataclasses.replace(query, group_aliases=("a", "b"))
