"""DuckDB's semantics (the embedded default engine, :class:`kakeibo.backends.duckdb.DuckDBBackend`)."""

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

__all__ = ["DUCKDB"]

DUCKDB = EngineSemantics(
    name="duckdb",
    default_schema="main",
    underflow=OutOfRange.ROUNDS,
    overflow=OutOfRange.ROUNDS,
    division_by_zero=DivisionByZero.INFINITY,
    integer_division=IntegerDivision.EXACT,
    like_escape=None,
    like_matching=LikeMatching.DIRECT,
    exponent_literal=LiteralType.DOUBLE,
    decimal_literal=LiteralType.DECIMAL,
    long_decimal_literal=LiteralType.DOUBLE,
    int_to_literal_scale=True,
    round_double=Rounding.HALF_AWAY_FROM_ZERO,
    round_decimal=Rounding.HALF_AWAY_FROM_ZERO,
    cancellation=Cancellation.INTERRUPT,
)
