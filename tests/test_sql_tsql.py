"""T-SQL as analysts write it (issue 17): LIKE character classes, N'...' strings, dbo and database names.

Each accepted form is answered as the query it means: at epsilon 1e6 the release is the exact answer
(computed here from the data, and by the raw engine on the pattern kakeibo sends) within its interval. What
kakeibo cannot answer exactly is refused with one sentence, before any data is read and at no cost.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pytest
import sqlglot
from sqlglot import exp

import kakeibo
from kakeibo.backends import Backend, DuckDBBackend, database_name
from kakeibo.sql import Catalog, QueryRefused, Session, analyze
from kakeibo.sql.predicates import MAX_LIKE_CHARS

N = 3000
EPSILON = 1e6

CATALOG_TOML = """
[tables.notes]
[tables.notes.columns]
region = "str"
age = { type = "int", lower = 18, upper = 90 }
"""
CATALOG = Catalog.from_toml(CATALOG_TOML)

#: region values: the usual ones, and texts holding the characters T-SQL patterns escape with brackets
REGIONS = [
    "north",
    "south",
    "east",
    "west",
    "nest",
    "[ns]x",
    "[north",
    "50%",
    "50",
    "a_b",
    "axb",
    "wow!",
    "!",
    "-x",
    "%off",
    "%a%",
    "]x",
    "^a",
]


def _notes() -> pa.Table:
    rng = np.random.default_rng(17)
    return pa.table({"region": rng.choice(REGIONS, N), "age": rng.integers(18, 91, N)})


DATA = _notes()
ROWS: list[str] = DATA.column("region").to_pylist()


@pytest.fixture(scope="module")
def backend() -> Iterator[DuckDBBackend]:
    db = DuckDBBackend()
    db.load_table("notes", DATA)
    yield db
    db.close()


@pytest.fixture
def session(backend: DuckDBBackend, tmp_path: Path) -> Session:
    return kakeibo.connect(
        backend, catalog=CATALOG, ledger=tmp_path / "ledger.sqlite", budget=(1e12, 0.5), dialect="tsql"
    )


def count_where(holds: Callable[[str], bool]) -> int:
    """The exact number of rows whose region satisfies ``holds``."""
    return sum(1 for region in ROWS if holds(region))


def engine_count(backend: Backend, condition: str) -> int:
    """The exact count of a condition (written for DuckDB) on the raw engine."""
    statement = sqlglot.transpile(
        f"SELECT COUNT(*) AS n FROM notes WHERE {condition}", read="duckdb", write=backend.dialect
    )[0]
    return int(backend.execute(statement).to_pylist()[0]["n"])


def released_count(session: Session, query: str, **kwargs: Any) -> dict[str, Any]:
    rows = session.sql(query, epsilon=EPSILON, delta=1e-6, **kwargs).to_arrow().to_pylist()
    assert len(rows) == 1
    return dict(rows[0])


def assert_answers(row: dict[str, Any], exact: int) -> None:
    """The released count is the exact one up to noise far below 1, and its interval holds it."""
    assert abs(row["n"] - exact) <= 1, (row, exact)
    assert row["n_ci_low"] <= exact <= row["n_ci_high"], (row, exact)


def assert_one_sentence(message: str) -> None:
    assert message.endswith(".") and "\n" not in message, message
    assert not re.search(r"\.\s+[A-Z]", message), f"more than one sentence: {message}"


def refused_for_free(session: Session, query: str, **kwargs: Any) -> str:
    """The refusal of ``query`` by the session: one sentence, nothing spent or recorded."""
    spent, entries = session.ledger.spent(), len(session.ledger.entries())
    with pytest.raises(QueryRefused) as info:
        session.sql(query, epsilon=1, delta=1e-6, **kwargs)
    assert session.ledger.spent() == spent and len(session.ledger.entries()) == entries
    message = str(info.value)
    assert_one_sentence(message)
    return message


# ------------------------------------------------------------------------- T-SQL LIKE character classes

#: (T-SQL pattern, the pattern kakeibo sends with ESCAPE '!', what it means on a region)
ONE_CHARACTER_CLASSES: list[tuple[str, str, Callable[[str], bool]]] = [
    ("[[]%", "[%", lambda r: r.startswith("[")),
    ("50[%]", "50!%", lambda r: r == "50%"),
    ("a[_]b", "a!_b", lambda r: r == "a_b"),
    ("%[!]", "%!!", lambda r: r.endswith("!")),
    ("[!]", "!!", lambda r: r == "!"),
    ("[n]orth", "north", lambda r: r == "north"),
    ("[-]%", "-%", lambda r: r.startswith("-")),
    ("]%", "]%", lambda r: r.startswith("]")),
    ("^%", "^%", lambda r: r.startswith("^")),
    ("[[]ns]%", "[ns]%", lambda r: r.startswith("[ns]")),
    # escaped wildcards are characters, and the wildcards beside them wildcards, as many as written
    ("[%]%[%]%", "!%%!%%", lambda r: r.startswith("%") and "%" in r[1:]),
    ("%[%]%[%]%", "%!%%!%%", lambda r: r.count("%") >= 2),
    ("[%]a%", "!%a%", lambda r: r.startswith("%a")),
    ("_[_]%", "_!_%", lambda r: len(r) >= 2 and r[1] == "_"),
]


@pytest.mark.parametrize(
    ("pattern", "sent", "holds"), ONE_CHARACTER_CLASSES, ids=[c[0] for c in ONE_CHARACTER_CLASSES]
)
def test_a_one_character_class_is_that_character(
    session: Session, backend: DuckDBBackend, pattern: str, sent: str, holds: Callable[[str], bool]
) -> None:
    query = f"SELECT COUNT(*) AS n FROM notes WHERE region LIKE '{pattern}'"
    assert f"LIKE '{sent}' ESCAPE '!'" in session.explain(query, epsilon=EPSILON, delta=1e-6)
    exact = count_where(holds)
    assert exact > 0 and engine_count(backend, f"region LIKE '{sent}' ESCAPE '!'") == exact
    assert_answers(released_count(session, query), exact)


def test_sqlglot_passes_a_tsql_pattern_through_unchanged() -> None:
    """kakeibo reads the brackets itself: sqlglot neither translates nor escapes them."""
    for pattern in ("[ns]%", "[[]%", "50[%]", "[^a]", "a[", "]"):
        parsed = sqlglot.parse_one(f"SELECT 1 FROM notes WHERE region LIKE '{pattern}'", read="tsql")
        like = parsed.find(exp.Like)
        assert like is not None and like.expression.name == pattern


def test_not_like_and_having_read_the_classes_too(session: Session) -> None:
    query = "SELECT COUNT(*) AS n FROM notes WHERE NOT region LIKE '[[]%' AND region NOT LIKE '%[!]'"
    exact = count_where(lambda r: not r.startswith("[") and not r.endswith("!"))
    assert_answers(released_count(session, query), exact)
    grouped = session.sql(
        "SELECT region, COUNT(*) AS n FROM notes GROUP BY region HAVING region LIKE '[%]%' ORDER BY region",
        epsilon=EPSILON,
        delta=1e-6,
    ).to_arrow()
    assert grouped.column("region").to_pylist() == sorted(r for r in set(ROWS) if r.startswith("%"))


@pytest.mark.parametrize(
    ("pattern", "shown"),
    [
        ("[ns]%", "[ns]"),
        ("%[a-c]", "[a-c]"),
        ("[^a]%", "[^a]"),
        ("[^]%", "[^]"),
        ("[]", "[]"),
        ("[]]", "[]"),
        ("north[", "[ (no closing ])"),
        ("[%", "[% (no closing ])"),
        ("[[]%[xy]", "[xy]"),
    ],
)
def test_other_classes_are_refused_with_a_sentence_at_no_cost(
    session: Session, pattern: str, shown: str
) -> None:
    message = refused_for_free(session, f"SELECT COUNT(*) AS n FROM notes WHERE region LIKE '{pattern}'")
    assert f"T-SQL LIKE character classes such as {shown} are not supported" in message
    assert "write IN (...) or LIKE conditions joined by OR instead" in message


@pytest.mark.parametrize(
    "query",
    [
        "SELECT COUNT(*) AS n FROM notes WHERE region NOT LIKE '[ns]%'",
        "SELECT COUNT(*) AS n FROM notes WHERE age > 30 OR region LIKE N'[ns]%'",
        "SELECT region, COUNT(*) AS n FROM notes GROUP BY region HAVING region LIKE '[a-c]%'",
    ],
)
def test_a_class_is_refused_wherever_a_condition_is(session: Session, query: str) -> None:
    assert "T-SQL LIKE character classes" in refused_for_free(session, query)


@pytest.mark.parametrize("dialect", ["duckdb", "postgres", "spark", "mysql"])
def test_outside_tsql_a_bracket_is_a_plain_character(
    session: Session, backend: DuckDBBackend, dialect: str
) -> None:
    query = "SELECT COUNT(*) AS n FROM notes WHERE region LIKE '[ns]%'"
    assert "LIKE '[ns]%' ESCAPE '!'" in session.explain(query, dialect=dialect)
    exact = count_where(lambda r: r.startswith("[ns]"))
    assert exact > 0 and engine_count(backend, "region LIKE '[ns]%' ESCAPE '!'") == exact
    assert_answers(released_count(session, query, dialect=dialect), exact)


@pytest.mark.parametrize(
    ("pattern", "accepted"),
    [
        ("%a%[%]", True),  # wildcards and a character '%': any number of wildcards (issue 32)
        ("%[%]" * (MAX_LIKE_CHARS // 2), True),  # as many characters as allowed, half of them wildcards
        ("%[%]" * (MAX_LIKE_CHARS // 2) + "%", False),
        ("[a]" * MAX_LIKE_CHARS, True),  # as many characters as allowed, each written as a class
        ("[a]" * (MAX_LIKE_CHARS + 1), False),
    ],
    ids=["escaped-percent-is-a-character", "max-wildcards", "max+1-wildcards", "max", "max+1"],
)
def test_the_pattern_limits_count_what_the_engine_matches(pattern: str, accepted: bool) -> None:
    query = f"SELECT COUNT(*) AS n FROM notes WHERE region LIKE '{pattern}'"
    if accepted:
        analyze(query, CATALOG, dialect="tsql")
        return
    with pytest.raises(QueryRefused, match="at most 256 characters, since") as info:
        analyze(query, CATALOG, dialect="tsql")
    assert_one_sentence(str(info.value))


# ------------------------------------------------------------------------------ N'...' national strings


@pytest.mark.parametrize(
    ("query", "holds"),
    [
        ("SELECT COUNT(*) AS n FROM notes WHERE region = N'north'", lambda r, a: r == "north"),
        ("SELECT COUNT(*) AS n FROM notes WHERE N'south' <> region", lambda r, a: r != "south"),
        (
            "SELECT COUNT(*) AS n FROM notes WHERE region IN (N'north', 'east', N'50%')",
            lambda r, a: r in ("north", "east", "50%"),
        ),
        ("SELECT COUNT(*) AS n FROM notes WHERE region LIKE N'n%'", lambda r, a: r.startswith("n")),
        ("SELECT COUNT(*) AS n FROM notes WHERE region LIKE N'50[%]'", lambda r, a: r == "50%"),
        ("SELECT COUNT(*) AS n FROM notes WHERE region BETWEEN N'a' AND N'f'", lambda r, a: "a" <= r <= "f"),
        (
            "SELECT COUNT(*) AS n FROM notes WHERE UPPER(region) = N'WEST' AND age >= 40",
            lambda r, a: r == "west" and a >= 40,
        ),
        ("SELECT COUNT(*) AS n FROM notes WHERE region = N'wow!'", lambda r, a: r == "wow!"),
    ],
)
def test_a_national_string_is_the_text_literal(
    session: Session, query: str, holds: Callable[[str, int], bool]
) -> None:
    assert "N'" not in session.explain(query, epsilon=EPSILON, delta=1e-6)  # the engine gets '...'
    ages = DATA.column("age").to_pylist()
    exact = sum(1 for region, age in zip(ROWS, ages, strict=True) if holds(region, age))
    assert_answers(released_count(session, query), exact)


def test_a_national_string_is_a_constant_in_select_and_a_having_literal(session: Session) -> None:
    rows = (
        session.sql(
            "SELECT N'EUR' AS currency, region, COUNT(*) AS n FROM notes GROUP BY region "
            "HAVING region IN (N'north', N'south') ORDER BY region",
            epsilon=EPSILON,
            delta=1e-6,
        )
        .to_arrow()
        .to_pylist()
    )
    assert [(r["currency"], r["region"]) for r in rows] == [("EUR", "north"), ("EUR", "south")]
    for row in rows:
        assert_answers(row, ROWS.count(row["region"]))
    alone = released_count(session, "SELECT N'EUR' AS currency, COUNT(*) AS n FROM notes")
    assert alone["currency"] == "EUR"
    assert_answers(alone, N)


@pytest.mark.parametrize("dialect", ["duckdb", "postgres", "mysql", "snowflake"])
def test_every_dialect_reads_a_national_string_alike(session: Session, dialect: str) -> None:
    row = released_count(session, "SELECT COUNT(*) AS n FROM notes WHERE region = N'east'", dialect=dialect)
    assert_answers(row, ROWS.count("east"))


@pytest.mark.parametrize(
    "condition",
    ["age = N'3e1'", "region = 1", "age IN (N'thirty', 31)", "age LIKE N'3%'", "region > N'a' + 1"],
)
def test_a_national_string_is_refused_where_its_plain_string_is(condition: str) -> None:
    national = f"SELECT COUNT(*) AS n FROM notes WHERE {condition}"
    plain = national.replace("N'", "'")
    with pytest.raises(QueryRefused) as got:
        analyze(national, CATALOG, dialect="tsql")
    with pytest.raises(QueryRefused) as want:
        analyze(plain, CATALOG, dialect="tsql")
    assert str(got.value) == str(want.value)
    assert_one_sentence(str(got.value))


# ----------------------------------------------------------------------- dbo and the engine's database


@pytest.mark.parametrize(
    "query",
    [
        "SELECT COUNT(*) AS n FROM dbo.notes",
        "SELECT COUNT(*) AS n FROM [dbo].[notes]",
        "SELECT COUNT(*) AS n FROM DBO.Notes WHERE dbo.notes.age >= 30",
        "SELECT COUNT(*) AS n FROM memory.dbo.notes WHERE memory.dbo.notes.age >= 30",
        "SELECT COUNT(*) AS n FROM [memory].[dbo].[notes]",
        "SELECT COUNT(*) AS n FROM memory..notes",
        "SELECT COUNT(*) AS n FROM memory.main.notes",
    ],
)
def test_tsql_names_the_default_schema_dbo_and_the_database(session: Session, query: str) -> None:
    ages = DATA.column("age").to_pylist()
    exact = sum(1 for age in ages if age >= 30) if "age >= 30" in query else N
    assert_answers(released_count(session, query), exact)


@pytest.mark.parametrize(
    ("query", "dialect", "fragment"),
    [
        ("SELECT COUNT(*) AS n FROM dbo.notes", "duckdb", "the schema dbo is not the engine's default one"),
        (
            "SELECT COUNT(*) AS n FROM sales.dbo.notes",
            "tsql",
            "the database sales is not the session's database memory",
        ),
        ("SELECT COUNT(*) AS n FROM other.notes", "tsql", "the schema other is not the engine's default one"),
        ("SELECT COUNT(*) AS n FROM dbo.secrets", "tsql", "unknown table 'dbo.secrets'"),
        ("SELECT COUNT(*) AS n FROM notes WHERE sys.notes.age > 3", "tsql", "qualify a column by its table"),
    ],
)
def test_other_schemas_and_databases_stay_refused(
    session: Session, query: str, dialect: str, fragment: str
) -> None:
    message = refused_for_free(session, query, dialect=dialect)
    assert fragment in message
    if "qualify a column" in message:
        assert message.endswith("or by main, public or dbo and the table.")
    else:
        schemas = "main, public or dbo" if dialect == "tsql" else "main or public"
        named = f"named without a schema or qualified by {schemas}, optionally after the session's database"
        assert f"the catalog has: notes, {named}" in message


def test_a_duckdb_file_is_its_database_name(tmp_path: Path) -> None:
    path = tmp_path / "sales.duckdb"
    db = DuckDBBackend(path)
    db.load_table("notes", DATA)
    session = kakeibo.connect(db, catalog=CATALOG, ledger=tmp_path / "l.sqlite", budget=(1e12, 0.5))
    assert db.database_name() == "sales" == database_name(db)
    assert_answers(released_count(session, "SELECT COUNT(*) AS n FROM sales.main.notes"), N)
    message = refused_for_free(session, "SELECT COUNT(*) AS n FROM memory.main.notes")
    assert "the database memory is not the session's database sales" in message
    assert "the catalog has: notes" in message
    db.close()


def test_the_database_name_is_read_once(backend: DuckDBBackend, monkeypatch: pytest.MonkeyPatch) -> None:
    assert backend.database_name() == "memory"

    def no_more_statements() -> None:
        raise AssertionError("the database name was read again")

    monkeypatch.setattr(backend, "_cursor", no_more_statements)
    assert backend.database_name() == "memory"


class _Plain:
    """A backend without ``database_name()``, as one written before it: still a Backend."""

    dialect = "duckdb"

    def __init__(self, inner: DuckDBBackend) -> None:
        self.inner = inner
        self.statement_timeout = inner.statement_timeout

    def execute(self, sql: str, *, timeout: float | None = None) -> pa.Table:
        return self.inner.execute(sql, timeout=timeout)

    def load_table(self, name: str, data: pa.Table) -> None:
        self.inner.load_table(name, data)

    def close(self) -> None:
        self.inner.close()


def test_a_backend_that_cannot_tell_its_database_refuses_three_part_names(
    backend: DuckDBBackend, tmp_path: Path
) -> None:
    plain = _Plain(backend)
    assert isinstance(plain, Backend) and database_name(plain) is None
    session = kakeibo.connect(plain, catalog=CATALOG, ledger=tmp_path / "l.sqlite", budget=(1e12, 0.5))
    assert "the database memory is not known to be the session's" in refused_for_free(
        session, "SELECT COUNT(*) AS n FROM memory.main.notes"
    )
    assert_answers(released_count(session, "SELECT COUNT(*) AS n FROM main.notes"), N)


# ------------------------------------------------------------------------------- PostgreSQL and Spark

#: a T-SQL query with every one-character class that needs the escape, run on each engine
ESCAPED_CLASSES = (
    "SELECT COUNT(*) AS n FROM notes "
    "WHERE region LIKE '[[]%' OR region LIKE '%[!]' OR region LIKE '50[%]' OR region LIKE 'a[_]b'"
)


def _escaped_classes_exact() -> int:
    return count_where(lambda r: r.startswith("[") or r.endswith("!") or r in ("50%", "a_b"))


def test_postgres_names_its_database(postgres_backend: Any, tmp_path: Path) -> None:
    postgres_backend.load_table("notes", DATA)
    current = postgres_backend.execute("SELECT current_database() AS d").to_pylist()[0]["d"]
    assert postgres_backend.database_name() == current == "kakeibo_test" == database_name(postgres_backend)
    session = kakeibo.connect(
        postgres_backend, catalog=CATALOG, ledger=tmp_path / "l.sqlite", budget=(1e12, 0.5), dialect="tsql"
    )
    assert_answers(released_count(session, "SELECT COUNT(*) AS n FROM kakeibo_test.public.notes"), N)
    assert_answers(
        released_count(session, "SELECT COUNT(*) AS n FROM kakeibo_test.dbo.notes WHERE region = N'west'"),
        ROWS.count("west"),
    )
    message = refused_for_free(session, "SELECT COUNT(*) AS n FROM memory.main.notes")
    assert "the database memory is not the session's database kakeibo_test" in message
    exact = _escaped_classes_exact()
    assert_answers(released_count(session, ESCAPED_CLASSES), exact)


@pytest.mark.xdist_group("spark")
def test_spark_has_no_database_for_its_views(spark_backend: Any, tmp_path: Path) -> None:
    """The backend's tables are temporary views, which Spark files under system.session, in no catalog's
    database: spark_catalog.default.notes would name another table (see SparkBackend.database_name)."""
    spark_backend.load_table("notes", DATA)
    assert spark_backend.database_name() is None and database_name(spark_backend) is None
    assert spark_backend.session.catalog.currentCatalog() == "spark_catalog"
    session = kakeibo.connect(
        spark_backend, catalog=CATALOG, ledger=tmp_path / "l.sqlite", budget=(1e12, 0.5), dialect="tsql"
    )
    for query in (
        "SELECT COUNT(*) AS n FROM spark_catalog.default.notes",
        "SELECT COUNT(*) AS n FROM spark_catalog.dbo.notes",
        "SELECT COUNT(*) AS n FROM system.session.notes",
    ):
        assert "is not known to be the session's" in refused_for_free(session, query)
    assert_answers(
        released_count(session, "SELECT COUNT(*) AS n FROM dbo.notes WHERE region = N'west'"),
        ROWS.count("west"),
    )
    assert_answers(released_count(session, ESCAPED_CLASSES), _escaped_classes_exact())


# --- a catalog that names its dialect ------------------------------------------------------------------


def test_a_catalog_names_the_dialect_its_queries_are_read_in(backend: DuckDBBackend, tmp_path: Path) -> None:
    """``dialect = "tsql"`` at the top of a catalog: a session reads T-SQL unless it or the query says
    otherwise; the catalog keeps its dialect through to_dict and TOML, and refuses an unknown one."""
    text = 'dialect = "TSQL"\n' + CATALOG_TOML
    catalog = Catalog.from_toml(text)
    assert catalog.dialect == "tsql" and Catalog.from_dict(catalog.to_dict()) == catalog
    assert catalog != Catalog.from_toml(CATALOG_TOML)
    tsql = "SELECT TOP 1 COUNT(*) AS n FROM dbo.notes WHERE region = N'north'"
    with kakeibo.connect(backend, catalog=catalog, ledger=tmp_path / "l.sqlite", budget=100) as session:
        assert session.dialect == "tsql"
        assert session.plan(tsql, epsilon=1).query.limit == 1
        with pytest.raises(QueryRefused, match="the schema dbo is not the engine's default"):  # TOP is read
            session.plan(tsql, epsilon=1, dialect="duckdb")
    with kakeibo.connect(
        backend, catalog=catalog, ledger=tmp_path / "m.sqlite", budget=100, dialect="postgres"
    ) as session:
        assert session.dialect == "postgres"
    with pytest.raises(ValueError, match="the catalog's dialect 'oracle' is not one of duckdb, postgres"):
        Catalog.from_toml('dialect = "oracle"\n' + CATALOG_TOML)
