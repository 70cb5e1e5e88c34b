"""LIKE with any number of '%' wildcards (issue 32): accepted on DuckDB, PostgreSQL and Spark alike, matched
in time linear in the text on each.

DuckDB and PostgreSQL match LIKE without going back over an earlier '%' (``like_matching``). Spark compiles
the pattern into a backtracking ``java.util.regex`` (``%`` is ``.*``), in which ``%A%B`` tries every split
of the text; so kakeibo sends Spark a pattern with more than one '%' before its end as the regular
expression of :func:`kakeibo.sql.predicates.linear_like` (each piece between two '%' in an atomic group, at
its leftmost place after the piece before, never tried again). Checked here:

(a) that form on Spark against the reference LIKE below, and against Spark's own LIKE and ILIKE (Java's
    lower case of text and pattern), on generated short texts and patterns: empty texts and NULL, line
    terminators, non-ASCII and characters beyond the BMP (surrogate pairs in Java), regular-expression
    metacharacters, '!'-escaped wildcards; DuckDB's LIKE against the same reference; and texts of 20,000
    characters, where Spark's own LIKE would take hours;
(b) the same DP queries through kakeibo's Session on the three engines: at epsilon 1e6 with one seed each
    release is the reference count, the same on every engine, and a refusal reads the same everywhere;
(c) what is still refused: a pattern of more than ``MAX_LIKE_CHARS`` characters, in every dialect.
"""

from __future__ import annotations

import random
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
from kakeibo.backends import Backend, DuckDBBackend
from kakeibo.sql import Catalog, QueryRefused, analyze
from kakeibo.sql.predicates import MAX_LIKE_CHARS
from kakeibo.sql.rewrite import engine_sql

pytestmark = pytest.mark.xdist_group("spark")

# ---------------------------------------------------------------------------------- the reference LIKE


def like_units(pattern: str, escape: str | None) -> list[tuple[str, str]]:
    """``pattern`` as ("%", ""), ("_", "") and ("char", c) units; ``escape`` makes the next one literal."""
    units: list[tuple[str, str]] = []
    chars = iter(pattern)
    for char in chars:
        if char == escape:
            units.append(("char", next(chars)))
        elif char in "%_":
            units.append((char, ""))
        else:
            units.append(("char", char))
    return units


def reference_like(text: str, pattern: str, escape: str | None = "!") -> bool:
    """SQL LIKE over code points, as a set of pattern positions stepped one character at a time: '%' any
    run of characters (line terminators too), '_' exactly one, any other unit itself."""
    units = like_units(pattern, escape)

    def closed(states: set[int]) -> set[int]:  # a '%' may match nothing
        stack, seen = list(states), set(states)
        while stack:
            j = stack.pop()
            if j < len(units) and units[j][0] == "%" and j + 1 not in seen:
                seen.add(j + 1)
                stack.append(j + 1)
        return seen

    states = closed({0})
    for char in text:
        following = set()
        for j in states:
            if j == len(units):
                continue
            kind, literal = units[j]
            if kind == "%":
                following.add(j)
            elif kind == "_" or literal == char:
                following.add(j + 1)
        states = closed(following)
        if not states:
            return False
    return len(units) in states


def test_the_reference_reads_like_as_sql_does() -> None:
    cases = [
        ("", "%", True),
        ("", "_", False),
        ("", "%%", True),
        ("a\nb", "a_b", True),
        ("a\nb", "a%", True),
        ("😀", "_", True),
        ("ab", "%a%b", True),
        ("ba", "%a%b", False),
        ("aXbYc", "a%b%c", True),
        ("abc", "a%b%bc", False),
        ("50%", "50!%", True),
        ("50x", "50!%", False),
        ("a!b", "a!!b", True),
    ]
    assert [reference_like(text, pattern) for text, pattern, _ in cases] == [m for _, _, m in cases]


# ------------------------------------------------------------------------------ texts and patterns

#: characters of the texts: letters in both cases, the wildcards and the escape, backslash, quote,
#: regular-expression metacharacters, line terminators, non-ASCII (Greek capital sigma, whose lower case
#: depends on what follows it in Java; dotted capital I, two characters in lower case) and two
#: characters beyond the BMP, which Java holds as surrogate pairs
ALPHABET = (
    *"abzAZ%_!\\'.*([$^ ",
    "\n",
    "\r",
    "\u2028",
    "ü",
    "Ü",
    "Σ",
    "σ",
    "İ",
    "😀",
    "𝔸",
)
#: pieces of patterns written for ESCAPE '!' (as kakeibo sends them): wildcards, escaped wildcards and
#: escape, and text that would be syntax in a regular expression (``\\E`` ends Java's quoting)
PIECES = (
    "%",
    "%",
    "%",
    "_",
    "a",
    "b",
    "z",
    "ab",
    "A",
    "!%",
    "!_",
    "!!",
    "\\",
    "\\E",
    "\\Q",
    ".",
    "*",
    "(?",
    "[",
    "$",
    "^",
    "\n",
    "ü",
    "Σ",
    "😀",
    "'",
)
#: patterns chosen by hand: every shape of '%' and what sits next to each one
FIXED_PATTERNS = (
    "%%",
    "%%%",
    "%_%",
    "_%_%_",
    "%a%",
    "a%b%",
    "%a%b",
    "%a%b%",
    "a%b%a",
    "%%a%%b%%",
    "%!%%!_%",
    "%!!%!!",
    "%Σ%Σ",
    "AΣ%Σb%",
    "%AΣ%_Σ%",
    "AΣ!_%b%",
    "%😀%_%",
    "%\\E%\\Q%",
    "%.%*%",
    "%\n%\n",
    "%ü%Ü",
    "%İ%i%",
)


#: texts on which a capital sigma lowered out of its place in the pattern (final or not) would change
#: an ILIKE's answer on the fixed patterns
SIGMAS = ("AΣxΣb", "aςxσb", "aσxσb", "AΣ yΣb", "aς yσb", "AΣ yΣ", "AΣ_b", "aς_b", "aσ_b", "AΣ!_b")


def _texts(count: int = 240, seed: int = 32) -> list[str | None]:
    rng = random.Random(seed)
    texts: list[str | None] = [None, "", *SIGMAS]
    texts += ["".join(rng.choice(ALPHABET) for _ in range(rng.randint(1, 9))) for _ in range(count)]
    return texts


def _patterns(count: int = 160, seed: int = 33) -> list[str]:
    """Generated patterns with at least two '%' (the ones Spark gets as a regular expression, and some it
    gets as LIKE), then the fixed ones."""
    rng = random.Random(seed)
    patterns: list[str] = []
    while len(patterns) < count:
        pattern = "".join(rng.choice(PIECES) for _ in range(rng.randint(3, 9)))
        if like_units(pattern, "!").count(("%", "")) >= 2 and pattern not in patterns:
            patterns.append(pattern)
    return [*patterns, *FIXED_PATTERNS]


TEXTS = _texts()
PATTERNS = _patterns()


def _literal(text: str) -> str:
    return exp.Literal.string(text).sql("duckdb")


def _statement(table: str, patterns: list[str]) -> str:
    """One DuckDB-dialect statement: each pattern's LIKE, NOT LIKE and ILIKE of ``s``, as kakeibo writes
    them (ESCAPE '!')."""
    columns = ["s"]
    for i, pattern in enumerate(patterns):
        p = _literal(pattern)
        columns += [
            f"s LIKE {p} ESCAPE '!' AS l{i}",
            f"s NOT LIKE {p} ESCAPE '!' AS n{i}",
            f"s ILIKE {p} ESCAPE '!' AS i{i}",
        ]
    return f"SELECT {', '.join(columns)} FROM {table}"


def _chunks(items: list[str], size: int = 40) -> Iterator[list[str]]:
    for start in range(0, len(items), size):
        yield items[start : start + size]


def _backtracks(pattern: str) -> bool:
    """Whether Spark's own LIKE would go back over an earlier '%': more than one '%' before the end."""
    units = like_units(pattern, "!")
    return units[:-1].count(("%", "")) > 1


@pytest.fixture(scope="module")
def spark(spark_backend: Any) -> Iterator[Backend]:
    """A Spark backend in a session of its own (the test session's context) holding ``texts``."""
    from kakeibo.backends.spark import SparkBackend

    backend = SparkBackend(session=spark_backend.session.newSession())
    backend.load_table("texts", pa.table({"s": pa.array(TEXTS, pa.string())}))
    try:
        yield backend
    finally:
        backend.close()


# ----------------------------------------------------------------------------- (a) the form on Spark


def test_spark_gets_a_regular_expression_exactly_where_its_like_would_backtrack() -> None:
    for pattern in (*PATTERNS, "a%", "%a", "%a%", "a%b", "a%b%", "%%", "%", "a_b"):
        statement = (
            f"SELECT s LIKE {_literal(pattern)} ESCAPE '!' AS m, s NOT ILIKE 'x%' ESCAPE '!' AS x FROM t"
        )
        spark = engine_sql(statement, "spark")
        assert ("RLIKE" in spark) == _backtracks(pattern), (pattern, spark)
        assert spark.count(" LIKE ") == (0 if _backtracks(pattern) else 1)
        assert "s NOT ILIKE 'x%' ESCAPE '!' AS x" in spark  # one '%': sent as it is
        for dialect in ("duckdb", "postgres"):  # LIKE ... ESCAPE '!' as it is: linear there
            assert (
                engine_sql(statement, dialect)
                == sqlglot.transpile(statement, read="duckdb", write=dialect)[0]
            )


def test_the_spark_form_is_like_on_every_text(spark: Backend) -> None:
    """LIKE and NOT LIKE against the reference (NULL stays NULL), LIKE and ILIKE against Spark's own, which
    is safe to run on texts of at most 9 characters."""
    for patterns in _chunks(PATTERNS):
        statement = _statement("texts", patterns)
        sent = spark.execute(engine_sql(statement, "spark")).to_pylist()
        own = spark.execute(sqlglot.transpile(statement, read="duckdb", write="spark")[0]).to_pylist()
        assert [row["s"] for row in sent] == TEXTS
        for i, pattern in enumerate(patterns):
            expected = [None if t is None else reference_like(t, pattern) for t in TEXTS]
            assert [row[f"l{i}"] for row in sent] == expected, pattern
            assert [row[f"n{i}"] for row in sent] == [None if m is None else not m for m in expected], pattern
            assert [row[f"l{i}"] for row in own] == expected, pattern
            assert [row[f"i{i}"] for row in sent] == [row[f"i{i}"] for row in own], pattern


def test_duckdb_reads_the_patterns_as_the_reference_does() -> None:
    duck = DuckDBBackend()
    duck.load_table("texts", pa.table({"s": pa.array(TEXTS, pa.string())}))
    for patterns in _chunks(PATTERNS):
        rows = duck.execute(engine_sql(_statement("texts", patterns), "duckdb")).to_pylist()
        for i, pattern in enumerate(patterns):
            assert [row[f"l{i}"] for row in rows] == [
                None if t is None else reference_like(t, pattern) for t in TEXTS
            ], pattern
    duck.close()


#: patterns whose own LIKE on Spark tries every split of a long text (cubic and worse)
LONG_PATTERNS = ["%z%z%q", "%z%z%z%z%z%z%z%z%z%z%y%q", "%z_z%z_z%z%q", "z%z%!%%", "%_%_%_%_%_%_%_%_%_%_%_!!"]


def test_the_spark_form_answers_on_long_texts(spark_backend: Any) -> None:
    """20,000 characters: Spark's own LIKE would take hours on these patterns (``%z%z%q`` took 224 s on
    4,000 characters); the form sent is the reference's answer (and carries no LIKE at all)."""
    from kakeibo.backends.spark import SparkBackend

    texts = ["z" * 20_000, "z" * 20_000 + "q", "z" * 10_000 + "%" + "z" * 10_000, "Z" * 20_000 + "Q", None]
    statement = _statement("long", LONG_PATTERNS)
    sent = engine_sql(statement, "spark")
    assert " LIKE " not in sent and " ILIKE " not in sent
    backend = SparkBackend(session=spark_backend.session.newSession())
    try:
        backend.load_table("long", pa.table({"s": pa.array(texts, pa.string())}))
        rows = backend.execute(sent).to_pylist()
    finally:
        backend.close()
    for i, pattern in enumerate(LONG_PATTERNS):
        assert [row[f"l{i}"] for row in rows] == [
            None if t is None else reference_like(t, pattern) for t in texts
        ]
        assert [row[f"i{i}"] for row in rows] == [
            None if t is None else reference_like(t.lower(), pattern) for t in texts
        ]


# ------------------------------------------------------------------- (b) through the Session, 3 engines

CATALOG = Catalog.from_toml(
    """
[tables.orders]
[tables.orders.columns]
comment = "str"
"""
)
#: order comments: TPC-H Q13's words in and out of order, with line breaks, case, wildcards as text,
#: non-ASCII and surrogate pairs, a long one, an empty one and NULL (ILIKE is asked of ASCII case only:
#: PostgreSQL in the C locale folds no other letters)
COMMENTS = [
    "special requests",
    "special packages: requests",
    "requests special",
    "SPECIAL Requests",
    "special\nrequests",
    "a_b c",
    "axb c",
    "50% off, 20% more",
    "tüñ😀 special 😀 requests 😀",
    "z" * 5_000 + "special" + "z" * 5_000 + "requests",
    "",
    None,
]


def _comments(rows: int = 600, seed: int = 13) -> pa.Table:
    rng = np.random.default_rng(seed)
    return pa.table(
        {"comment": pa.array([COMMENTS[i] for i in rng.integers(0, len(COMMENTS), rows)], pa.string())}
    )


DATA = _comments()
ROWS: list[str | None] = DATA.column("comment").to_pylist()


def _like(pattern: str) -> Callable[[str | None], bool]:
    """A row's truth under ``comment LIKE pattern`` as the query writes it (no escape character)."""
    return lambda t: t is not None and reference_like(t, pattern, escape=None)


def _not_like(pattern: str) -> Callable[[str | None], bool]:
    return lambda t: t is not None and not reference_like(t, pattern, escape=None)


def _ilike(pattern: str) -> Callable[[str | None], bool]:
    return lambda t: t is not None and reference_like(t.lower(), pattern.lower(), escape=None)


#: (condition, dialect, which rows it holds for)
CONDITIONS: list[tuple[str, str, Callable[[str | None], bool]]] = [
    ("comment LIKE '%special%requests%'", "duckdb", _like("%special%requests%")),
    ("comment NOT LIKE '%special%requests%'", "duckdb", _not_like("%special%requests%")),  # TPC-H Q13
    ("NOT comment LIKE '%special%requests'", "duckdb", _not_like("%special%requests")),
    ("comment ILIKE '%SPECIAL%Requests%'", "duckdb", _ilike("%SPECIAL%Requests%")),
    (
        "comment NOT ILIKE '%special%requests'",
        "duckdb",
        lambda t: t is not None and not _ilike("%special%requests")(t),
    ),
    ("comment LIKE '%a_b%c'", "duckdb", _like("%a_b%c")),
    ("comment LIKE '%_%_%_%_%_%_%_%_%_%_%_%'", "duckdb", _like("%_%_%_%_%_%_%_%_%_%_%_%")),
    ("comment LIKE '%😀%😀%😀'", "duckdb", _like("%😀%😀%😀")),
    ("comment LIKE '%\n%'", "duckdb", _like("%\n%")),
    ("comment LIKE '%[%]%[%]%'", "tsql", lambda t: t is not None and t.count("%") >= 2),
    (
        "comment LIKE '%special%' OR comment LIKE 'z%z%z%s'",
        "postgres",
        lambda t: _like("%special%")(t) or _like("z%z%z%s")(t),
    ),
]


@pytest.fixture(scope="module")
def backends(postgres_server: str, spark_backend: Any) -> Iterator[dict[str, Backend]]:
    """``orders`` on each engine: in memory (DuckDB), a database of its own (PostgreSQL), a session of its
    own (Spark)."""
    from tpch_fixtures import three_engines

    with three_engines(postgres_server, spark_backend, {"orders": DATA}) as built:
        yield built


def _releases(backends: dict[str, Backend], tmp_path: Path, query: str, dialect: str) -> dict[str, list[Any]]:
    """Each engine's release of ``query`` at epsilon 1e6, with the same seed everywhere."""
    released = {}
    for name, backend in backends.items():
        session = kakeibo.connect(
            backend, catalog=CATALOG, ledger=tmp_path / f"{name}.sqlite", budget=(1e12, 0.5)
        )
        table = session.sql(query, epsilon=1e6, delta=1e-6, dialect=dialect, rng=np.random.default_rng(5))
        released[name] = table.to_arrow().to_pylist()
    return released


@pytest.mark.parametrize(("condition", "dialect", "holds"), CONDITIONS, ids=[c[0][:48] for c in CONDITIONS])
def test_the_engines_count_alike_through_the_session(
    backends: dict[str, Backend],
    tmp_path: Path,
    condition: str,
    dialect: str,
    holds: Callable[[str | None], bool],
) -> None:
    released = _releases(backends, tmp_path, f"SELECT COUNT(*) AS n FROM orders WHERE {condition}", dialect)
    exact = sum(1 for t in ROWS if holds(t))
    assert 0 < exact < len(ROWS), "the condition must hold for some rows and not for others"
    assert released["duckdb"] == released["postgres"] == released["spark"], released
    (row,) = released["duckdb"]
    assert round(row["n"]) == exact and row["n_ci_low"] <= exact <= row["n_ci_high"], (row, exact)


def test_a_group_key_reads_the_pattern_alike(backends: dict[str, Backend], tmp_path: Path) -> None:
    query = (
        "SELECT CASE WHEN comment LIKE '%special%requests%' THEN 'yes' ELSE 'no' END AS k, COUNT(*) AS n "
        "FROM orders GROUP BY k ORDER BY k"
    )
    released = _releases(backends, tmp_path, query, "duckdb")
    assert released["duckdb"] == released["postgres"] == released["spark"], released
    yes = sum(1 for t in ROWS if _like("%special%requests%")(t))
    assert [(r["k"], round(r["n"])) for r in released["duckdb"]] == [("no", len(ROWS) - yes), ("yes", yes)]


def test_a_refusal_reads_the_same_on_every_engine(backends: dict[str, Backend], tmp_path: Path) -> None:
    query = f"SELECT COUNT(*) AS n FROM orders WHERE comment LIKE '%{'a' * MAX_LIKE_CHARS}'"
    messages = set()
    for name, backend in backends.items():
        session = kakeibo.connect(
            backend, catalog=CATALOG, ledger=tmp_path / f"{name}.sqlite", budget=(1e12, 0.5)
        )
        with pytest.raises(QueryRefused) as refused:
            session.sql(query, epsilon=1, delta=1e-6)
        messages.add(str(refused.value))
        assert len(session.ledger.entries()) == 0
    assert len(messages) == 1, messages


# ---------------------------------------------------------------------------------- (c) still refused


@pytest.mark.parametrize("dialect", ["duckdb", "postgres", "spark", "tsql"])
def test_only_the_length_of_a_pattern_is_limited(dialect: str) -> None:
    """Any number of '%' is accepted; more than MAX_LIKE_CHARS characters are refused with one sentence, in
    every dialect (the statement is the same for every engine, so is the refusal)."""
    many = "%".join("ab" for _ in range(80)) + "%"
    for op in ("LIKE", "NOT LIKE", "ILIKE"):
        analyze(f"SELECT COUNT(*) AS n FROM orders WHERE comment {op} '{many}'", CATALOG, dialect=dialect)
        analyze(
            f"SELECT COUNT(*) AS n FROM orders WHERE comment {op} '{'%' * MAX_LIKE_CHARS}'",
            CATALOG,
            dialect=dialect,
        )
        with pytest.raises(QueryRefused) as refused:
            analyze(
                f"SELECT COUNT(*) AS n FROM orders WHERE comment {op} '{'%' * (MAX_LIKE_CHARS + 1)}'",
                CATALOG,
                dialect=dialect,
            )
        message = str(refused.value)
        assert f"a LIKE pattern may have at most {MAX_LIKE_CHARS} characters" in message, message
        assert message.endswith(".") and "\n" not in message and not re.search(r"\.\s+[A-Z]", message), (
            message
        )
