"""HAVING operands and ORDER BY items computed from released values (issue 32): ``HAVING n * 100 / 2 >
500``, ``HAVING count / CAST(educ AS INT) > 5``, ``ORDER BY CAST(gender AS INT) * -1``, ``ORDER BY
CAST(educ AS TEXT)``. They are post-processing (Dwork and Roth 2014, Prop. 2.1): kakeibo computes them on the
released table, totally, and the engine never sees them, so the statement it runs, the charge and the noise
are those of the same query without them. Neighbour relation and privacy claim: those of the query's release
(:mod:`kakeibo.sql.plan`); the differential fuzzer's grammar draws these shapes on DuckDB, PostgreSQL and
Spark (``tests/adversarial_harness.py``: ``HAVING_TERMS``, ``ORDER_TERMS``)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

import kakeibo
from kakeibo.backends import DuckDBBackend
from kakeibo.sql import Catalog, QueryRefused
from kakeibo.sql.analyze import analyze
from kakeibo.sql.rewrite import bounded_sql

EDUC = [str(i) for i in range(1, 17)]


@pytest.fixture
def session(tmp_path: Path) -> kakeibo.Session:
    """A person-level table: sex an int key, educ an int key and its text twin with one key that is no
    numeral ("n/a"), income bounded."""
    rng = np.random.default_rng(5)
    n = 3_000
    educ = rng.integers(1, 17, n)
    table = pa.table(
        {
            "pid": np.arange(n, dtype=np.int64),
            "sex": rng.integers(1, 3, n),
            "educ": educ,
            "educ_text": np.where(rng.random(n) < 0.05, "n/a", educ.astype(str)),
            "income": rng.uniform(0, 1_000, n),
        }
    )
    backend = DuckDBBackend()
    backend.load_table("pums", table)
    catalog = Catalog.from_dict(
        {
            "tables": {
                "pums": {
                    "columns": {
                        "pid": "int",
                        "sex": {"type": "int", "public_values": [1, 2]},
                        "educ": {"type": "int", "public_values": list(range(1, 17))},
                        "educ_text": {"type": "str", "public_values": [*EDUC, "n/a"]},
                        "income": {"type": "float", "lower": 0, "upper": 1_000},
                    }
                }
            }
        }
    )
    return kakeibo.connect(backend, catalog=catalog, ledger=tmp_path / "l.sqlite", budget=100)


def _rows(session: kakeibo.Session, sql: str, seed: int) -> list[dict[str, object]]:
    return session.sql(sql, epsilon=1, rng=np.random.default_rng(seed)).to_arrow().to_pylist()


def test_the_issues_shapes_filter_and_sort_the_released_values(session: kakeibo.Session) -> None:
    """Each query releases what the same query without HAVING / ORDER BY releases (same seed, same noise),
    filtered and sorted as kakeibo's rules compute from those released values."""
    base = _rows(session, "SELECT educ, COUNT(*) AS count FROM pums GROUP BY educ", 1)
    kept = _rows(
        session, "SELECT educ, COUNT(*) AS count FROM pums GROUP BY educ HAVING count * 100 / 2 > 9000", 1
    )
    assert kept == [r for r in base if r["count"] * 100 / 2 > 9000] and 0 < len(kept) < len(base)
    ratio = _rows(
        session,
        "SELECT educ, COUNT(*) AS count FROM pums GROUP BY educ HAVING count / CAST(educ AS INT) > 20",
        1,
    )
    assert ratio == [r for r in base if r["count"] / r["educ"] > 20] and 0 < len(ratio) < len(base)
    as_text = _rows(
        session, "SELECT educ, COUNT(*) AS count FROM pums GROUP BY educ ORDER BY CAST(educ AS TEXT)", 1
    )
    assert [r["educ"] for r in as_text] == sorted(range(1, 17), key=str)  # 1, 10, 11, ..., 16, 2, ...
    assert sorted(as_text, key=lambda r: r["educ"]) == sorted(base, key=lambda r: r["educ"])
    by_sex = _rows(
        session, "SELECT sex, COUNT(*) AS n FROM pums GROUP BY sex ORDER BY CAST(sex AS INT) * -1", 2
    )
    assert [r["sex"] for r in by_sex] == [2, 1]


def test_the_engine_statement_and_the_charge_are_those_of_the_query_without_them(
    session: kakeibo.Session,
) -> None:
    """What HAVING and ORDER BY compute never reaches the engine, and an aggregate named only there is
    released (and charged) like a selected one."""
    plain = session.plan("SELECT educ, COUNT(*) AS count FROM pums GROUP BY educ", epsilon=1)
    computed = session.plan(
        "SELECT educ, COUNT(*) AS count FROM pums GROUP BY educ HAVING count / CAST(educ AS INT) > 20 "
        "ORDER BY CAST(educ AS TEXT) DESC",
        epsilon=1,
    )
    assert bounded_sql(computed) == bounded_sql(plain) and computed.privacy_loss == plain.privacy_loss
    text = session.explain(
        "SELECT educ, COUNT(*) AS count FROM pums GROUP BY educ HAVING count / CAST(educ AS INT) > 20",
        epsilon=1,
    )
    assert (
        "__term           = count / CAST(educ AS INT), computed by kakeibo from the released count, educ"
        in text
    )
    hidden = session.plan(
        "SELECT educ, COUNT(*) AS n FROM pums GROUP BY educ ORDER BY SUM(income) / n", epsilon=1
    )
    assert [a.alias for a in hidden.query.aggregates] == ["n", "__sum_income"]
    (row, *_) = _rows(
        session, "SELECT educ, COUNT(*) AS n FROM pums GROUP BY educ ORDER BY SUM(income) / n", 3
    )
    assert set(row) == {"educ", "n", "n_ci_low", "n_ci_high"}  # the hidden sum and the term are dropped


def test_what_cannot_be_computed_is_null_never_an_error(session: kakeibo.Session) -> None:
    """A division by zero, a text that is no numeral and a cast out of its type's range are NULL: a HAVING
    comparison with NULL keeps nothing, and NULL sorts last either way."""
    base = _rows(session, "SELECT educ, COUNT(*) AS n FROM pums GROUP BY educ", 4)
    by_zero = _rows(
        session, "SELECT educ, COUNT(*) AS n FROM pums GROUP BY educ HAVING n / (educ - 3) <> 0", 4
    )
    assert by_zero == [r for r in base if r["educ"] != 3]
    for direction in ("ASC", "DESC"):
        rows = _rows(
            session,
            "SELECT educ_text, COUNT(*) AS n FROM pums GROUP BY educ_text "
            f"ORDER BY CAST(educ_text AS INT) {direction}",
            5,
        )
        keys = [r["educ_text"] for r in rows]
        numbers = sorted(EDUC, key=int, reverse=direction == "DESC")
        assert keys == [*numbers, "n/a"], keys
    fraction = _rows(
        session,
        "SELECT educ_text, COUNT(*) AS n FROM pums GROUP BY educ_text HAVING CAST(educ_text AS DOUBLE) >= 16",
        6,
    )
    assert [r["educ_text"] for r in fraction] == ["16"]
    tiny = _rows(
        session,
        "SELECT COUNT(*) AS n FROM pums HAVING CAST(n * 1e9 AS TINYINT) = 0 OR CAST(n AS TINYINT) IS NULL",
        7,
    )
    assert (
        len(tiny) == 1
    )  # n * 1e9 is beyond TINYINT: NULL, so the first comparison is unknown, the second true


@pytest.mark.parametrize(
    ("having", "keep"),
    [
        ("educ_text = 3", lambda v: v == 3),
        ("educ_text > 14", lambda v: v > 14),
        ("NOT educ_text >= 2.5", lambda v: not v >= 2.5),
        ("educ_text IN (1, 16, -4)", lambda v: v in (1, 16, -4)),
        ("educ_text BETWEEN 2 AND 4", lambda v: 2 <= v <= 4),
        ("educ_text <> 1e308", lambda v: v != 1e308),
    ],
)
def test_a_text_key_compared_with_numbers_is_read_as_a_number_by_kakeibo(
    session: kakeibo.Session, having: str, keep: Callable[[float], bool]
) -> None:
    """``HAVING educ_text = 3`` (SmartNoise's PUMS metadata types sex and educ as text, its tests compare
    them with numbers): each released key is parsed by kakeibo, a numeral compares as its number, "n/a" is
    NULL and kept by no comparison (nor by its negation); the engine statement and the charge are those of
    the query without HAVING."""
    plain = "SELECT educ_text, COUNT(*) AS n FROM pums GROUP BY educ_text"
    base = _rows(session, plain, 8)
    assert "n/a" in [r["educ_text"] for r in base]
    kept = _rows(session, f"{plain} HAVING {having}", 8)
    assert kept == [r for r in base if r["educ_text"] != "n/a" and keep(float(r["educ_text"]))]
    assert 0 < len(kept) < len(base)
    assert bounded_sql(session.plan(f"{plain} HAVING {having}", epsilon=1)) == bounded_sql(
        session.plan(plain, epsilon=1)
    )


def test_having_reads_a_name_as_the_grouping_column_and_order_by_as_the_output(
    session: kakeibo.Session,
) -> None:
    """``SELECT sex AS educ, educ AS sex ... HAVING educ > 14 ORDER BY educ``: HAVING filters on the column
    educ (released as the output sex), ORDER BY sorts by the output educ, as DuckDB does on the same text."""
    sql = "SELECT sex AS educ, educ AS sex, COUNT(*) AS n FROM pums GROUP BY sex, educ"
    base = _rows(session, sql, 9)
    rows = _rows(session, f"{sql} HAVING educ > 14 ORDER BY educ DESC, sex", 9)
    assert rows == sorted([r for r in base if r["sex"] > 14], key=lambda r: (-r["educ"], r["sex"]))
    assert {r["sex"] for r in rows} == {15, 16} and {r["educ"] for r in rows} == {1, 2}
    engine = DuckDBBackend()
    engine.load_table("pums", pa.table({"sex": [1, 2], "educ": [16, 3]}))
    exact = engine.execute(f"{sql} HAVING educ > 14 ORDER BY educ DESC, sex").to_pylist()
    assert exact == [{"educ": 1, "sex": 16, "n": 1}]


@pytest.mark.parametrize(
    ("sql", "fragment"),
    [
        (
            "SELECT educ_text, COUNT(*) AS n FROM pums GROUP BY educ_text ORDER BY educ_text * 2",
            "reads the text",
        ),
        ("SELECT COUNT(*) AS n FROM pums HAVING CAST(n AS TEXT) = '3'", "casts to text, which kakeibo does"),
        ("SELECT COUNT(*) AS n FROM pums ORDER BY n * income", "ORDER BY can only name output columns (n)"),
        (
            "SELECT COUNT(*) AS n FROM pums HAVING n % 2 = 0",
            "uses MOD, which kakeibo does not evaluate in HAVING",
        ),
        ("SELECT COUNT(*) AS n FROM pums ORDER BY CAST(n AS DECIMAL(4, 1))", "casts to DECIMAL(4, 1)"),
    ],
)
def test_what_kakeibo_does_not_compute_is_refused_free(
    session: kakeibo.Session, sql: str, fragment: str
) -> None:
    with pytest.raises(QueryRefused) as refused:
        session.sql(sql, epsilon=1)
    assert fragment in str(refused.value) and str(refused.value).endswith(".")
    assert float(session.ledger.spent().epsilon) == 0


def test_an_aggregate_of_a_grouping_column_is_the_aggregate_not_the_column() -> None:
    """``ORDER BY SUM(educ) * 2`` over ``GROUP BY educ`` reads the (hidden, noised) sum, not the key."""
    catalog = Catalog.from_dict(
        {
            "tables": {
                "t": {"columns": {"educ": {"type": "int", "public_values": [1, 2], "lower": 0, "upper": 5}}}
            }
        }
    )
    query = analyze("SELECT educ, COUNT(*) AS n FROM t GROUP BY educ ORDER BY SUM(educ) * 2", catalog)
    (term,) = query.terms
    assert term.expression.sql("duckdb") == "__sum_educ * 2" and term.inputs == ("__sum_educ",)
    assert [(a.alias, a.function) for a in query.aggregates] == [("n", "count"), ("__sum_educ", "sum")]
