"""The engine semantics table (:mod:`kakeibo.sql.dialects`) against the engines themselves: the same probe
queries run on DuckDB, PostgreSQL and Spark, and each answer must be what the engine's table says.

A probe is written in the engine's own SQL, never translated by sqlglot: it asks what the engine does with
the text, where a translation could have written around the difference (sqlglot turns DuckDB's ``7 / 2``
into a cast for PostgreSQL). The one field no probe checks, LIKE's matching algorithm, is argued in its
docstring (:class:`~kakeibo.sql.dialects.semantics.EngineSemantics`).
"""

from __future__ import annotations

import importlib
import inspect
import pkgutil
import re
import time
from collections.abc import Callable, Iterator
from dataclasses import fields
from typing import Any

import pyarrow as pa
import pytest
import sqlglot
from sqlglot import exp
from sqlglot.dialects.dialect import Dialect

import kakeibo.backends
from kakeibo.backends import DuckDBBackend, StatementTimeout
from kakeibo.errors import ArgumentError
from kakeibo.sql.dialects import (
    ENGINE_SCHEMAS,
    ENGINES,
    LIKE_ESCAPE,
    default_schemas,
    double_text,
    engine,
    query_dialect,
)
from kakeibo.sql.dialects.semantics import (
    Cancellation,
    DivisionByZero,
    EngineSemantics,
    IntegerDivision,
    LiteralType,
    OutOfRange,
    Rounding,
)
from kakeibo.sql.values import clamped_sql

#: the fields no probe can check (each argued in its docstring)
ARGUED = {"like_matching"}

#: each engine's spelling of the DOUBLE type and of "the type of x"
DOUBLE_TYPE = {"duckdb": "DOUBLE", "postgres": "DOUBLE PRECISION", "spark": "DOUBLE"}
TYPE_OF = {"duckdb": "typeof({})", "postgres": "pg_typeof({})::text", "spark": "typeof({})"}

#: 2.7e10 rows of a cross join of ``GRID``: minutes of work on every engine, so only the deadline ends it
SLOW = "SELECT SUM(a.x * b.x + c.x) AS s FROM grid a CROSS JOIN grid b CROSS JOIN grid c"
GRID = 3000


class Probe:
    """Probe queries on one backend, in its own SQL (``dialect``), with the engine's error as ``None``."""

    def __init__(self, backend: Any, raw: Callable[[str], list[tuple[Any, ...]]]) -> None:
        self.backend = backend
        self.dialect: str = backend.dialect
        self.raw = raw

    def row(self, sql: str) -> tuple[Any, ...] | None:
        """The first row of ``sql``, or ``None`` when the engine raises."""
        try:
            return self.raw(sql)[0]
        except Exception:  # an engine error is the answer
            return None

    def double(self, text: str) -> str:
        return f"CAST({text} AS {DOUBLE_TYPE[self.dialect]})"

    def string(self, text: str) -> str:
        return exp.Literal.string(text).sql(self.dialect)

    def literal_type(self, literal: str) -> LiteralType:
        row = self.row(f"SELECT {TYPE_OF[self.dialect].format(literal)}")
        if row is None:
            return LiteralType.RAISES
        name = str(row[0]).lower()
        if name == "numeric":
            return LiteralType.NUMERIC
        if name.startswith("decimal"):
            return LiteralType.DECIMAL
        assert name in ("double", "double precision"), name
        return LiteralType.DOUBLE

    def out_of_range(self, left: str, right: str) -> OutOfRange:
        row = self.row(f"SELECT {self.double(left)} * {self.double(right)}")
        return OutOfRange.RAISES if row is None else OutOfRange.ROUNDS

    def rounding(self, value: str) -> Rounding:
        row = self.row(f"SELECT ROUND({value}), ROUND(-{value})")
        assert row is not None
        halves = {(3, -3): Rounding.HALF_AWAY_FROM_ZERO, (2, -2): Rounding.HALF_EVEN}
        return halves[(int(row[0]), int(row[1]))]

    def observe(self) -> dict[str, object]:
        """Every probed field of the engine's semantics, as the engine answers."""
        quotient = self.row(f"SELECT {self.double('1')} / {self.double('0')}")
        division = self.row("SELECT 7 / 2")
        escape = self.row(
            f"SELECT {self.string('a%')} LIKE {self.string('a' + chr(92) + '%')}, "
            f"{self.string('ab')} LIKE {self.string('a' + chr(92) + '%')}"
        )
        classes = self.row(f"SELECT {self.string('a')} LIKE {self.string('[a]')}")
        assert division is not None and escape is not None and classes is not None
        return {
            "name": self.dialect,
            "underflow": self.out_of_range("1e-200", "1e-200"),
            "overflow": self.out_of_range("1e200", "1e200"),
            "division_by_zero": (
                DivisionByZero.RAISES
                if quotient is None
                else DivisionByZero.NULL
                if quotient[0] is None
                else DivisionByZero.INFINITY
            ),
            "integer_division": IntegerDivision.TRUNCATES if division[0] == 3 else IntegerDivision.EXACT,
            "like_escape": "\\" if escape == (True, False) else None,
            "like_classes": bool(classes[0]),
            "exponent_literal": self.literal_type("0.1e0"),
            "decimal_literal": self.literal_type("0.1"),
            "long_decimal_literal": self.literal_type("0." + "123456789" * 4 + "123"),
            "int_to_literal_scale": self.row(f"SELECT CAST(1000 AS BIGINT) = 0.{'0' * 34}1") is None,
            "round_double": self.rounding(self.double("2.5")),
            "round_decimal": self.rounding("2.5"),
            "default_schema": self.default_schema(),
            "cancellation": self.cancellation(),
        }

    def default_schema(self) -> str | None:
        """The schema a bare name reads from; ``None`` when the backend's tables are temporary views, in no
        schema (Spark)."""
        if self.dialect == "spark":
            self.backend.load_table("probe", pa.table({"x": [1]}))
            views = {t.name: t.isTemporary for t in self.backend.session.catalog.listTables()}
            return None if views.get("probe") is True else "?"
        row = self.row("SELECT current_schema()")
        assert row is not None
        return str(row[0])

    def cancellation(self) -> Cancellation:
        """How a statement past its deadline was stopped, told by the engine error under the
        :class:`StatementTimeout`."""
        self.backend.load_table("grid", pa.table({"x": pa.array(range(GRID), pa.int64())}))
        started = time.monotonic()
        with pytest.raises(StatementTimeout) as caught:
            self.backend.execute(SLOW, timeout=0.5)
        assert time.monotonic() - started < 20  # stopped, not finished
        cause = f"{type(caught.value.__cause__).__name__}: {caught.value.__cause__}"
        if "Interrupt" in cause:
            return Cancellation.INTERRUPT
        if "statement timeout" in cause:
            return Cancellation.SERVER_TIMEOUT
        assert re.search("cancel", cause, re.IGNORECASE), cause
        return Cancellation.JOB_TAG


def check(probe: Probe) -> None:
    """Every field of the engine's table is what the engine does (or argued), and the guards the compiler
    writes because of them keep a statement total on it."""
    table = engine(probe.dialect)
    observed = probe.observe()
    assert set(observed) | ARGUED == {f.name for f in fields(EngineSemantics)}
    expected = {name: getattr(table, name) for name in observed}
    assert observed == expected
    # the compiler's forms (DuckDB's dialect, translated as kakeibo sends them): a value flushed below TINY
    # multiplies without underflow, a NULLIF divisor of 0 gives NULL
    tiny = clamped_sql("CAST(1e-200 AS DOUBLE)", -1e100, 1e100)
    guarded = f"SELECT ({tiny}) * ({tiny}) AS p, CAST(1 AS DOUBLE) / NULLIF(CAST(0 AS DOUBLE), 0) AS q"
    assert probe.row(sqlglot.transpile(guarded, read="duckdb", write=probe.dialect)[0]) == (0.0, None)


def test_duckdb_does_what_its_table_says() -> None:
    backend = DuckDBBackend(":memory:")
    try:
        check(Probe(backend, lambda sql: backend._cursor().sql(sql).fetchall()))
    finally:
        backend.close()


@pytest.mark.xdist_group("postgres")
def test_postgres_does_what_its_table_says(postgres_backend: Any) -> None:
    def raw(sql: str) -> list[tuple[Any, ...]]:
        with postgres_backend.connection.cursor() as cursor:
            cursor.execute(sql.encode())
            return list(cursor.fetchall())

    check(Probe(postgres_backend, raw))


@pytest.mark.xdist_group("spark")
def test_spark_does_what_its_table_says(spark_backend: Any) -> None:
    def raw(sql: str) -> list[tuple[Any, ...]]:
        return [tuple(row) for row in spark_backend.session.sql(sql).collect()]

    check(Probe(spark_backend, raw))


def _backend_classes() -> Iterator[type]:
    """The backend classes the modules of :mod:`kakeibo.backends` define."""
    for module in pkgutil.iter_modules(kakeibo.backends.__path__):
        if module.name.startswith("_"):
            continue
        loaded = importlib.import_module(f"kakeibo.backends.{module.name}")
        for _, cls in inspect.getmembers(loaded, inspect.isclass):
            if cls.__module__ == loaded.__name__ and isinstance(getattr(cls, "dialect", None), str):
                yield cls


def test_every_backend_has_its_engine_semantics_and_every_entry_a_backend() -> None:
    dialects = {cls.dialect for cls in _backend_classes()}  # type: ignore[attr-defined]
    assert dialects == set(ENGINES) == {"duckdb", "postgres", "spark"}
    for name, semantics in ENGINES.items():
        assert engine(name) is semantics and semantics.name == name
    with pytest.raises(ArgumentError, match="no engine semantics for the dialect 'tsql'"):
        engine("tsql")


def test_integer_division_agrees_with_sqlglot() -> None:
    """sqlglot marks a truncating ``/`` by its dialects' ``TYPED_DIVISION``, which the GROUP BY keys read."""
    for name, semantics in ENGINES.items():
        truncates = semantics.integer_division is IntegerDivision.TRUNCATES
        assert truncates == Dialect.get_or_raise(name).TYPED_DIVISION, name


def test_the_guards_the_compiler_writes_are_needed_by_some_engine() -> None:
    """The flush below TINY, the clamp to HUGE, NULLIF around divisors and the explicit LIKE escape are each
    written for every engine because one engine needs it: were none to, the guard would be dead weight."""
    engines = ENGINES.values()
    assert any(e.underflow is OutOfRange.RAISES for e in engines)
    assert any(e.overflow is OutOfRange.RAISES for e in engines)
    assert any(e.division_by_zero is DivisionByZero.RAISES for e in engines)
    assert any(e.like_escape is not None for e in engines)
    assert all(e.like_escape != LIKE_ESCAPE for e in engines) and LIKE_ESCAPE not in "%_"
    assert not any(e.like_classes for e in engines)  # so a T-SQL class is read by kakeibo, or refused


def test_double_literals_are_read_as_the_double_they_spell() -> None:
    """Every engine reads an exponent-form literal as a DOUBLE or as an exact number it converts to the
    nearest double, never as a decimal at a scale of its own: :func:`double_text` relies on that."""
    assert all(e.exponent_literal in (LiteralType.DOUBLE, LiteralType.NUMERIC) for e in ENGINES.values())
    for value in (0.1, 1e-100, 1e100, -2.5, 5e-324, 123456789.125):
        assert float(double_text(value)) == value
        assert "e" in double_text(value)


def test_query_dialects() -> None:
    assert query_dialect("tsql").like_classes and query_dialect("tsql").default_schema == "dbo"
    assert query_dialect("postgres") is ENGINES["postgres"]
    assert not query_dialect("bigquery").like_classes and query_dialect("bigquery").default_schema is None
    assert ENGINE_SCHEMAS == ("main", "public")
    assert default_schemas("spark") == default_schemas("postgres") == ENGINE_SCHEMAS
    assert default_schemas("tsql") == ("main", "public", "dbo")
