"""PostgreSQL's semantics (:class:`kakeibo.backends.postgres.PostgresBackend`)."""

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

__all__ = ["POSTGRES"]

POSTGRES = EngineSemantics(
    name="postgres",
    default_schema="public",
    underflow=OutOfRange.RAISES,
    overflow=OutOfRange.RAISES,
    division_by_zero=DivisionByZero.RAISES,
    integer_division=IntegerDivision.TRUNCATES,
    like_escape="\\",
    like_matching=LikeMatching.DIRECT,
    exponent_literal=LiteralType.NUMERIC,
    decimal_literal=LiteralType.NUMERIC,
    long_decimal_literal=LiteralType.NUMERIC,
    int_to_literal_scale=False,
    round_double=Rounding.HALF_EVEN,
    round_decimal=Rounding.HALF_AWAY_FROM_ZERO,
    cancellation=Cancellation.SERVER_TIMEOUT,
)
