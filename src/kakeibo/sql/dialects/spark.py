"""Spark SQL's semantics in ANSI mode, Spark 4's default (:class:`kakeibo.backends.spark.SparkBackend`).

``default_schema`` is ``None``: the backend's tables are temporary views of its own session, which no
schema a query can name holds (:meth:`kakeibo.backends.spark.SparkBackend.database_name`).
"""

from __future__ import annotations

from . import semantics

__all__ = ["SPARK"]

SPARK = semantics.EngineSemantics(
    name="spark",
    default_schema=None,  # the tables are temporary views (module docstring)
    underflow=semantics.OutOfRange.ROUNDS,  # Java doubles: IEEE 754, also under ANSI mode
    overflow=semantics.OutOfRange.ROUNDS,  # 1e200 * 1e200 is Infinity
    division_by_zero=semantics.DivisionByZero.RAISES,  # ANSI mode: [DIVIDE_BY_ZERO] (NULL without it)
    integer_division=semantics.IntegerDivision.EXACT,  # `/` casts both sides to DOUBLE; `div` truncates
    like_escape="\\",  # StringUtils.escapeLikeRegex with escapeChar '\\'
    # the pattern runs as a java.util.regex; kakeibo sends one with more than one '%' before its end as a
    # regular expression with atomic groups instead (predicates.linear_like), linear in the text
    like_matching=semantics.LikeMatching.BACKTRACKING_REGEX,
    exponent_literal=semantics.LiteralType.DOUBLE,  # typeof(0.1e0) is double
    decimal_literal=semantics.LiteralType.DECIMAL,  # decimal(precision, scale) of the digits written
    long_decimal_literal=semantics.LiteralType.RAISES,  # [DECIMAL_PRECISION_EXCEEDS_MAX_PRECISION]
    int_to_literal_scale=False,  # bigint and decimal(35, 35) widen to a common decimal
    round_double=semantics.Rounding.HALF_AWAY_FROM_ZERO,  # RoundingMode.HALF_UP (BROUND is half even)
    round_decimal=semantics.Rounding.HALF_AWAY_FROM_ZERO,  # RoundingMode.HALF_UP
    cancellation=semantics.Cancellation.JOB_TAG,  # SparkContext.cancelJobsWithTag on the statement's tag
)
