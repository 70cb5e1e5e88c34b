"""Spark SQL's semantics in ANSI mode, Spark 4's default (:class:`kakeibo.backends.spark.SparkBackend`).

``default_schema`` is ``None``: the backend's tables are temporary views of its own session, which no
schema a query can name holds (:meth:`kakeibo.backends.spark.SparkBackend.database_name`).
"""

from __future__ import annotations

from .semantics import (
    Cancellation,
    DivisionByZero,
    EngineSemantics,
    IntegerDivision,
    LikeMatching,
    LiteralType,
    OutOfRange,
    Rounding,
)

__all__ = ["SPARK"]

SPARK = EngineSemantics(
    name="spark",
    default_schema=None,
    underflow=OutOfRange.ROUNDS,
    overflow=OutOfRange.ROUNDS,
    division_by_zero=DivisionByZero.RAISES,
    integer_division=IntegerDivision.EXACT,
    like_escape="\\",
    like_matching=LikeMatching.BACKTRACKING_REGEX,
    exponent_literal=LiteralType.DOUBLE,
    decimal_literal=LiteralType.DECIMAL,
    long_decimal_literal=LiteralType.RAISES,
    int_to_literal_scale=False,
    round_double=Rounding.HALF_AWAY_FROM_ZERO,
    round_decimal=Rounding.HALF_AWAY_FROM_ZERO,
    cancellation=Cancellation.JOB_TAG,
)
