"""Literals of another type than their column, converted once by the catalog (issue 32;
:mod:`kakeibo.sql.predicates`): the engine then compares values of one type, so no row can make it convert
(or fail to convert) anything. Where the catalog does not make the conversion unambiguous the query is
refused, free, as before. The differential fuzzer draws numbers against ``visits.level``, a text column
declared as public numerals whose target rows hold numerals it does not list
(``tests/adversarial_harness.py``), on DuckDB, PostgreSQL and Spark."""

from __future__ import annotations

import pytest

from kakeibo.sql import Catalog, QueryRefused
from kakeibo.sql.analyze import analyze
from kakeibo.sql.plan import plan_query
from kakeibo.sql.rewrite import bounded_sql

CATALOG = Catalog.from_dict(
    {
        "tables": {
            "pums": {
                "columns": {
                    "sex": {"type": "str", "public_values": ["1", "2"]},
                    "educ": {"type": "str", "public_values": [str(i) for i in range(1, 17)]},
                    "married": "bool",
                    "married_text": {"type": "str", "public_values": ["Yes", "No"]},
                    "race": "str",
                    "code": {"type": "str", "public_values": ["01", "2"]},
                    "age": {"type": "int", "lower": 0, "upper": 100},
                    "income": {"type": "float", "lower": 0, "upper": 100_000},
                }
            }
        }
    }
)


@pytest.mark.parametrize(
    ("condition", "engine"),
    [
        ("educ = 2", "\"educ\" = '2'"),
        ("educ <> 16", "\"educ\" <> '16'"),
        ("educ IN (1, 2, 17)", "\"educ\" IN ('1', '2', '17')"),
        ("educ < 3", "\"educ\" IN ('1', '2')"),  # numerically, not as text ('10' < '3')
        ("3 > educ", "\"educ\" IN ('1', '2')"),
        ("educ BETWEEN 2 AND 4.5", "\"educ\" IN ('2', '3', '4')"),
        ("educ > 100", "FALSE"),
        ("NOT educ >= 15", "NOT \"educ\" IN ('15', '16')"),
        ("married_text = TRUE", "\"married_text\" = 'Yes'"),
        ("married_text <> FALSE", "\"married_text\" <> 'No'"),
        ("married = 1", '"married" = TRUE'),
        ("married = 'false'", '"married" = FALSE'),
        ("age = '30'", '"age" = 30'),
        ("income > '2.5'", '"income" > 2.5e0'),
    ],
)
def test_a_literal_is_converted_once_to_its_columns_type(condition: str, engine: str) -> None:
    query = analyze(f"SELECT COUNT(*) AS n FROM pums WHERE {condition}", CATALOG)
    assert query.where is not None and query.where.sql("duckdb") == engine


def test_a_converted_condition_sends_the_statement_of_the_condition_written_in_the_columns_type() -> None:
    converted = plan_query(analyze("SELECT COUNT(*) AS n FROM pums WHERE educ < 3", CATALOG), epsilon=1)
    written = plan_query(
        analyze("SELECT COUNT(*) AS n FROM pums WHERE educ IN ('1', '2')", CATALOG), epsilon=1
    )
    assert bounded_sql(converted) == bounded_sql(written)


@pytest.mark.parametrize(
    ("key", "having"),
    [
        ("sex", '"__term" = 1e0 OR "__term" > 1e0'),
        ("race", '"__term" = 1e0 OR "__term" > 1e0'),
        ("educ", '"__term" = 2.5e0 OR "__term" > 1e0'),
    ],
)
def test_having_reads_a_text_key_as_a_number_whatever_its_public_values(key: str, having: str) -> None:
    """HAVING filters released keys, so kakeibo parses them (``tests/test_sql_post_terms.py``) instead of
    converting the literal: the declared numerals of ``sex`` and the undeclared ``race`` read alike, and a
    fraction the numerals do not hold (refused in WHERE) keeps no key."""
    number = "2.5" if key == "educ" else "1"
    query = analyze(
        f"SELECT {key}, COUNT(*) AS n FROM pums GROUP BY {key} HAVING {key} = {number} OR {key} > 1", CATALOG
    )
    assert [t.expression.sql("duckdb") for t in query.terms] == [f"CAST({key} AS DOUBLE)"]
    assert query.having is not None and query.having.sql("duckdb") == having


@pytest.mark.parametrize(
    ("condition", "fragment"),
    [
        ("educ = 2.5", "it compares number and str"),  # the declared numerals are whole
        ("code = 1", "it compares number and str"),  # "01" is not a plain numeral: '1' or '01'?
        ("race = 1", "it compares number and str"),  # nothing declared
        ("married_text = 1", "it compares number and str"),
        ("educ = TRUE", "it compares boolean and str"),  # numerals are no truth spellings
        ("age = 'x'", "it compares int and text"),
        ("age = '3e1'", "it compares int and text"),  # only plain decimal numerals are read
        ("married = 2", "it compares bool and number"),
        ("married = 'yes'", "it compares bool and text"),
    ],
)
def test_what_the_catalog_does_not_make_unambiguous_is_refused(condition: str, fragment: str) -> None:
    with pytest.raises(QueryRefused) as refused:
        analyze(f"SELECT COUNT(*) AS n FROM pums WHERE {condition}", CATALOG)
    assert fragment in str(refused.value), str(refused.value)
