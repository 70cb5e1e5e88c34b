"""DuckDB's semantics (the embedded default engine, :class:`kakeibo.backends.duckdb.DuckDBBackend`)."""

from __future__ import annotations

from . import semantics

__all__ = ["DUCKDB"]

DUCKDB = semantics.EngineSemantics(
    name="duckdb",
    default_schema="main",  # current_schema() of a new connection
    underflow=semantics.OutOfRange.ROUNDS,  # IEEE 754 doubles throughout
    overflow=semantics.OutOfRange.ROUNDS,  # 1e200 * 1e200 is inf
    division_by_zero=semantics.DivisionByZero.INFINITY,  # IEEE 754: 1.0 / 0 is inf
    integer_division=semantics.IntegerDivision.EXACT,  # `/` is a DOUBLE division; `//` truncates
    like_escape=None,  # only an ESCAPE clause names one
    like_matching=semantics.LikeMatching.DIRECT,  # %A%B over n A's: time linear in n
    exponent_literal=semantics.LiteralType.DOUBLE,  # typeof(0.1e0) is DOUBLE
    decimal_literal=semantics.LiteralType.DECIMAL,  # DECIMAL(width, scale) of the digits written
    long_decimal_literal=semantics.LiteralType.DOUBLE,  # past DECIMAL(38) the parser makes a DOUBLE
    int_to_literal_scale=True,  # "Could not cast value 1000 to DECIMAL(38,35)"
    round_double=semantics.Rounding.HALF_AWAY_FROM_ZERO,  # round(): C round(), half away from zero
    round_decimal=semantics.Rounding.HALF_AWAY_FROM_ZERO,  # the same rule on the decimal digits
    cancellation=semantics.Cancellation.INTERRUPT,  # interrupt() on the statement's cursor
)
