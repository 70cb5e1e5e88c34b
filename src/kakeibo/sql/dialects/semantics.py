"""The facts about a SQL dialect that kakeibo's compiler relies on, as data: how a query's text is read
(:class:`QueryDialect`) and, for the engines kakeibo runs statements on, what those statements do
(:class:`EngineSemantics`).

Every field is a fact an engine can be asked about; ``tests/test_engine_semantics.py`` runs one probe query
per field on DuckDB, PostgreSQL and Spark and checks the table against the answers. A field no probe can
check says why in its docstring, with the source it follows.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

__all__ = [
    "Cancellation",
    "DivisionByZero",
    "EngineSemantics",
    "IntegerDivision",
    "LikeMatching",
    "LiteralType",
    "OutOfRange",
    "QueryDialect",
    "Rounding",
]


class OutOfRange(enum.Enum):
    """What a DOUBLE product or quotient of non-zero operands does when its exact value is beyond the
    double range (overflow) or rounds to 0 (underflow)."""

    RAISES = "raises"  #: the statement fails (PostgreSQL: "value out of range")
    ROUNDS = "rounds"  #: IEEE 754: to an infinity, or to 0


class DivisionByZero(enum.Enum):
    """What ``x / 0`` gives for a DOUBLE ``x``."""

    RAISES = "raises"
    NULL = "null"
    INFINITY = "infinity"  #: IEEE 754: an infinity (NaN for ``0 / 0``)


class IntegerDivision(enum.Enum):
    """What ``/`` does between two integers (``7 / 2``)."""

    TRUNCATES = "truncates"  #: an integer, truncated toward 0 (3)
    EXACT = "exact"  #: a DOUBLE or a decimal (3.5)


class LiteralType(enum.Enum):
    """How the engine types a numeric literal."""

    DOUBLE = "double"  #: an IEEE 754 double, correctly rounded from the text
    DECIMAL = "decimal"  #: a fixed-point decimal of at most 38 digits, the literal's own precision and scale
    NUMERIC = "numeric"  #: an exact decimal of any precision (PostgreSQL's ``numeric``)
    RAISES = "raises"  #: the statement fails (Spark: a decimal literal of more than 38 digits)


class Rounding(enum.Enum):
    """How ``ROUND(x)`` rounds a value half-way between two integers."""

    HALF_AWAY_FROM_ZERO = "half away from zero"  #: 2.5 -> 3, -2.5 -> -3
    HALF_EVEN = "half even"  #: 2.5 -> 2, -2.5 -> -2, 3.5 -> 4


class LikeMatching(enum.Enum):
    """How the engine matches a LIKE pattern against a text."""

    #: a scan that tries the text's positions for each ``%`` in turn without backtracking over earlier ones:
    #: time linear in the text (times the pattern), whatever the number of ``%``
    DIRECT = "direct"
    #: the pattern becomes a regular expression (``%`` is ``.*``) run by a backtracking matcher: a pattern
    #: with ``k`` interior ``%`` may try every split of the text, time growing as its length to the ``k``;
    #: kakeibo sends such a pattern as a regular expression that never goes back
    #: (:func:`kakeibo.sql.predicates.linear_like`)
    BACKTRACKING_REGEX = "backtracking regular expression"


class Cancellation(enum.Enum):
    """How a backend stops a statement at its deadline (:mod:`kakeibo.backends._base`)."""

    INTERRUPT = "interrupt"  #: the client interrupts the running statement (DuckDB's ``interrupt()``)
    SERVER_TIMEOUT = "server timeout"  #: the server cancels it itself (PostgreSQL's ``statement_timeout``)
    JOB_TAG = "job tag"  #: the client cancels the statement's jobs by a tag they carry (Spark's job tags)


@dataclass(frozen=True, kw_only=True)
class QueryDialect:
    """How kakeibo reads the text of a query written in the dialect ``name`` (a sqlglot dialect name).

    sqlglot parses the text; these are the facts sqlglot passes through unchanged and kakeibo must read the
    way the dialect's own engine would. Integer division needs no field: sqlglot marks a ``/`` between
    integers of a truncating dialect (``exp.Div``'s ``typed``), which :mod:`kakeibo.sql.group_keys` reads.
    """

    #: the sqlglot dialect name (for an engine, its backend's ``dialect``)
    name: str
    #: whether ``[`` opens a character class in a LIKE pattern (``[a-c]%``), as in SQL Server
    like_classes: bool = False
    #: the schema a bare table name is read from, which a query may also name as a qualifier (``None``: the
    #: dialect's tables have no schema a query can name)
    default_schema: str | None = None


@dataclass(frozen=True, kw_only=True)
class EngineSemantics(QueryDialect):
    """What kakeibo's statements do on one engine: the facts the compiler writes around so that a statement
    means the same on every engine and no row can make it fail (:mod:`kakeibo.sql.predicates`,
    :mod:`kakeibo.sql.values`)."""

    #: a product or quotient of non-zero doubles that rounds to 0 (``1e-200 * 1e-200``)
    underflow: OutOfRange
    #: a product or quotient of doubles beyond the double range (``1e200 * 1e200``)
    overflow: OutOfRange
    #: ``x / 0`` for a DOUBLE ``x``
    division_by_zero: DivisionByZero
    #: ``/`` between two integers (sqlglot's ``TYPED_DIVISION`` of the dialect says the same)
    integer_division: IntegerDivision
    #: the escape character a LIKE pattern has when no ``ESCAPE`` clause names one (``None``: none)
    like_escape: str | None
    #: how LIKE matches. Not probed: a timing probe would depend on the load of the machine. Spark translates
    #: a LIKE pattern into a ``java.util.regex`` pattern (``StringUtils.escapeLikeRegex``; ``%`` becomes
    #: ``.*``), and Java's matcher backtracks; PostgreSQL's ``MatchText`` gives up as soon as the rest of
    #: the pattern cannot match anywhere (``LIKE_ABORT``), and DuckDB's LIKE matched ``%A%B`` against a
    #: text of ``n`` letters A in time linear in ``n`` when this table was written (and, with
    #: ``ESCAPE '!'``, ``%A%B%`` and patterns of up to 12 ``%`` with and without ``_`` over texts of
    #: 160,000 characters in at most 3 ms; issue 32).
    like_matching: LikeMatching
    #: the type of a literal in exponent form (``0.1e0``)
    exponent_literal: LiteralType
    #: the type of a decimal literal of a few digits (``0.1``)
    decimal_literal: LiteralType
    #: the type of a decimal literal of more digits than 38 (``0.123...9``, 39 digits)
    long_decimal_literal: LiteralType
    #: whether comparing an integer with a decimal literal casts the integer to the literal's decimal type,
    #: failing on an integer that does not fit (``1000 = 0.00000000000000000000000000000000001`` casts 1000
    #: to ``DECIMAL(38, 35)``)
    int_to_literal_scale: bool
    #: ``ROUND`` of a DOUBLE half-way between two integers
    round_double: Rounding
    #: ``ROUND`` of a decimal literal half-way between two integers
    round_decimal: Rounding
    #: how the backend stops a statement at its deadline
    cancellation: Cancellation
