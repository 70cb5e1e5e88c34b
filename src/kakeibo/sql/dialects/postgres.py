"""PostgreSQL's semantics (:class:`kakeibo.backends.postgres.PostgresBackend`)."""

from __future__ import annotations

from . import semantics

__all__ = ["POSTGRES"]

POSTGRES = semantics.EngineSemantics(
    name="postgres",
    default_schema="public",  # search_path "$user", public
    underflow=semantics.OutOfRange.RAISES,  # float8mul / float8div: "value out of range: underflow"
    overflow=semantics.OutOfRange.RAISES,  # "value out of range: overflow"
    division_by_zero=semantics.DivisionByZero.RAISES,  # "division by zero" (SQLSTATE 22012)
    integer_division=semantics.IntegerDivision.TRUNCATES,  # int4div / int8div truncate toward 0
    like_escape="\\",  # "the default escape character is the backslash"
    like_matching=semantics.LikeMatching.DIRECT,  # MatchText() stops at LIKE_ABORT
    exponent_literal=semantics.LiteralType.NUMERIC,  # a numeric constant with an exponent is numeric
    decimal_literal=semantics.LiteralType.NUMERIC,  # numeric of any precision
    long_decimal_literal=semantics.LiteralType.NUMERIC,  # numeric keeps every digit
    int_to_literal_scale=False,  # int = numeric compares the exact values
    round_double=semantics.Rounding.HALF_EVEN,  # dround() is rint(): half to even
    round_decimal=semantics.Rounding.HALF_AWAY_FROM_ZERO,  # numeric_round(): half away from zero
    cancellation=semantics.Cancellation.SERVER_TIMEOUT,  # SET LOCAL statement_timeout
)
