"""What each SQL engine and query dialect means, as one table per dialect, and the rules the compiler derives
from the tables.

kakeibo compiles every query into one statement in DuckDB's dialect, which sqlglot translates for the
engine of the session; the statement must mean the same and be total (no row may make it fail) on every
engine. The engines differ on exactly the points the compiler writes around, listed by
:class:`~kakeibo.sql.dialects.semantics.EngineSemantics`, one module per engine:

==========================  =============================  =====================  =========================
fact                        DuckDB (:mod:`.duckdb`)        PostgreSQL             Spark (ANSI)
==========================  =============================  =====================  =========================
double underflow, overflow  rounds (to 0, to infinity)     raises                 rounds
``x / 0`` (DOUBLE)          infinity                       raises                 raises
``7 / 2``                   3.5                            3                      3.5
LIKE's default escape       none                           ``\\``                 ``\\``
LIKE ``[a]`` classes        none                           none                   none
LIKE matching               direct                         direct                 backtracking regex
``0.1e0`` / ``0.1``         DOUBLE / DECIMAL               numeric / numeric      DOUBLE / DECIMAL
39-digit decimal literal    DOUBLE                         numeric                raises
int = ``1e-35`` literal     casts the int, may fail        exact                  exact
ROUND(2.5) DOUBLE/decimal   3 / 3                          2 / 3                  3 / 3
default schema              main                           public                 (temporary views)
statement timeout           interrupt                      server timeout         job tag cancel
==========================  =============================  =====================  =========================

What the compiler derives (each rule is there because of the row that names it):

* a DOUBLE product or quotient is flushed below ``TINY`` and clamped to ``HUGE``, and every divisor is
  written ``NULLIF(d, 0)`` (:mod:`kakeibo.sql.values`): PostgreSQL raises on underflow and overflow, and
  PostgreSQL and Spark on a division by 0;
* a LIKE pattern is sent with an explicit ``ESCAPE`` (:data:`LIKE_ESCAPE`), since PostgreSQL and Spark
  would read ``\\`` as one; to Spark, whose LIKE backtracks, a pattern with more than one ``%`` before its
  end goes as a regular expression that does not (:func:`kakeibo.sql.rewrite.engine_sql`); and classes are
  read only in a dialect that has them (:func:`query_dialect`, :mod:`kakeibo.sql.predicates`);
* a double is spelled in exponent form (:func:`double_text`): DOUBLE in DuckDB and Spark, an exact numeric
  that PostgreSQL converts to the same double; decimal literals would be typed at each engine's own scale;
* an int column is compared with integers only: DuckDB casts it to the scale of a decimal literal;
* a GROUP BY key or an output is evaluated by kakeibo, never by the engine: ``/`` and ``ROUND`` differ
  (:mod:`kakeibo.sql.group_keys`, :mod:`kakeibo.sql.derived`);
* a table may be qualified by the default schema of any engine (:func:`default_schemas`).

Query dialects that are not engines (T-SQL, :mod:`.tsql`) have only the reading facts of
:class:`~kakeibo.sql.dialects.semantics.QueryDialect`; the other dialects sqlglot reads (BigQuery, MySQL,
SQLite, Snowflake) read LIKE without classes and name no schema of their own.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType

from ...errors import ArgumentError
from .duckdb import DUCKDB
from .postgres import POSTGRES
from .semantics import EngineSemantics, QueryDialect
from .spark import SPARK
from .tsql import TSQL

__all__ = [
    "ENGINES",
    "ENGINE_SCHEMAS",
    "LIKE_ESCAPE",
    "EngineSemantics",
    "QueryDialect",
    "default_schemas",
    "double_text",
    "engine",
    "query_dialect",
]

#: the engines kakeibo runs statements on, by their backends' ``dialect``
ENGINES: Mapping[str, EngineSemantics] = MappingProxyType({e.name: e for e in (DUCKDB, POSTGRES, SPARK)})

#: query dialects that are not engines but read some text differently from them
_READINGS: Mapping[str, QueryDialect] = MappingProxyType({TSQL.name: TSQL})

#: the schema qualifiers that name an engine's default schema, where kakeibo reads every catalog table: each
#: engine's, whatever the engine of the session, so that a query means the same on every engine
ENGINE_SCHEMAS: tuple[str, ...] = tuple(
    dict.fromkeys(e.default_schema for e in ENGINES.values() if e.default_schema is not None)
)

#: the escape character kakeibo writes after every LIKE pattern: no engine's default escape (PostgreSQL's and
#: Spark's ``\\`` would otherwise apply) and no wildcard, so every engine reads the pattern alike
LIKE_ESCAPE = "!"


def engine(name: str) -> EngineSemantics:
    """The semantics of the engine whose backends have ``dialect == name``.

    >>> engine("postgres").like_escape
    '\\\\'
    """
    found = ENGINES.get(name)
    if found is None:
        raise ArgumentError(f"no engine semantics for the dialect {name!r}; known: {', '.join(ENGINES)}")
    return found


def query_dialect(name: str) -> QueryDialect:
    """How a query written in the dialect ``name`` is read: an engine's own reading, T-SQL's, or (any other
    dialect) LIKE without classes and no schema of its own.

    >>> query_dialect("tsql").like_classes, query_dialect("duckdb").like_classes
    (True, False)
    """
    return ENGINES.get(name) or _READINGS.get(name) or QueryDialect(name=name)


def default_schemas(dialect: str) -> tuple[str, ...]:
    """The schema qualifiers a query read in ``dialect`` may name the default schema with: every engine's
    (:data:`ENGINE_SCHEMAS`) and the dialect's own.

    >>> default_schemas("duckdb"), default_schemas("tsql")
    (('main', 'public'), ('main', 'public', 'dbo'))
    """
    own = query_dialect(dialect).default_schema
    return ENGINE_SCHEMAS if own is None or own in ENGINE_SCHEMAS else (*ENGINE_SCHEMAS, own)


def double_text(value: float) -> str:
    """A literal every engine reads as exactly the double ``value``: its shortest repr in exponent form, which
    DuckDB and Spark type as DOUBLE and PostgreSQL as a numeric it converts to the same double with correct
    rounding (``exponent_literal``).

    >>> double_text(0.1), double_text(1e16), double_text(-2.5), double_text(50.0)
    ('0.1e0', '1e16', '-2.5e0', '50e0')
    """
    text = repr(float(value)).replace("e+", "e")
    if "e" in text:
        return text
    return (text[:-2] if text.endswith(".0") else text) + "e0"
