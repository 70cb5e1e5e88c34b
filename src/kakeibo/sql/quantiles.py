"""Private quantiles (MEDIAN, QUANTILE, PERCENTILE_CONT, MIN, MAX) by the exponential mechanism over an
engine-computed histogram: how the ``quantile`` entry of :data:`kakeibo.sql.aggregates.AGGREGATES` (a
*selected* aggregate) is planned and drawn.

The engine buckets each clamped value of the column into ``B`` equal buckets of ``[lower, upper]`` and
returns, per group, the bounded mass of every bucket: one user's rows in a group weigh
``min(n, kappa) / n`` each (``n`` = their non-null rows there), so a user adds at most ``kappa`` mass to
at most ``L0`` groups -- the same bounding as the sums (see :mod:`kakeibo.sql.rewrite`).

Target. With ``N`` the group's mass, ``C<(b)`` and ``C<=(b)`` the mass below and up to bucket ``b``, the
q-quantile is read as the value at mass position ``t = 1/2 + q (N - 1)``: for unit masses that is the
centre of the record at rank ``1 + q (N - 1)``, the rank PERCENTILE_CONT interpolates at, and for MIN
(q = 0) and MAX (q = 1) the first and last record. The utility of bucket ``b`` is minus the distance from
``t`` to the bucket's mass interval::

    u_t(b) = -max(C<(b) - t, t - C<=(b), 0)

Sensitivity (add or remove one user of mass ``m <= kappa`` in the group): ``C<(b)`` grows by some
``a in [0, m]``, ``C<=(b)`` by ``a' in [a, m]`` and ``t`` by ``q m``, so each term inside the max moves by
at most ``max(q, 1 - q) m``: ``Delta = kappa max(q, 1 - q)``. The bucket is picked by permute-and-flip
(:class:`~kakeibo.mechanisms.Exponential`, the exponential mechanism of McSherry and Talwar 2007 as
improved by McKenna and Sheldon 2020) at ``epsilon / L0`` per group, so a user's ``L0`` groups cost
``epsilon`` in all; the released value is the chosen bucket's midpoint.

Confidence interval. With probability ``>= 1 - beta/2`` a selection's utility is above ``-a`` for
``a = 2 Delta ln((B - 1) / (beta / 2)) / epsilon'`` (:meth:`Exponential.utility_error_bound`). The lower
end is a second selection aimed at ``t - 1/2 - a``: then ``C<(b_low) < t - 1/2``, so the records at
positions ``>= t - 1/2`` lie at or above the bucket's lower edge. Symmetrically the upper end aims at
``t + 1/2 + a``. Both ends are released values, the interval comes from no unreleased data, and it holds
the bounded data's q-quantile (both records PERCENTILE_CONT interpolates between), up to the resolution
of the buckets, with probability ``>= 1 - beta``. The budget of a quantile is split 1/2 for the value and
1/4 for each end.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction

import numpy as np
from numpy.typing import NDArray

from ..mechanisms import Exponential
from ..noise.source import RandomSource
from .catalog import ColumnSpec
from .predicates import double_text

__all__ = ["DEFAULT_BUCKETS", "Buckets", "QuantileEstimate", "make_quantile"]

#: Buckets of a float column (an int column gets one bucket per value when it has at most this many).
DEFAULT_BUCKETS = 1024


@dataclass(frozen=True)
class Buckets:
    """``count`` equal buckets over ``[lower, upper]``; for an int column each holds ``step`` whole values.

    >>> b = Buckets.for_column(ColumnSpec("age", "int", lower=0, upper=120))
    >>> b.count, b.step, b.edges(np.array([0, 120]))
    (121, 1.0, (array([  0., 120.]), array([  0., 120.])))
    >>> b = Buckets.for_column(ColumnSpec("amount", "float", lower=0, upper=100), count=4)
    >>> b.edges(np.array([0, 3]))
    (array([ 0., 75.]), array([ 25., 100.]))
    """

    lower: float
    upper: float
    count: int
    step: float
    integer: bool

    @classmethod
    def for_column(cls, spec: ColumnSpec, count: int = DEFAULT_BUCKETS) -> Buckets:
        assert spec.lower is not None and spec.upper is not None
        lower, upper = float(spec.lower), float(spec.upper)
        if spec.type == "int":
            step = float(math.ceil((upper - lower + 1) / count))
            return cls(lower, upper, math.ceil((upper - lower + 1) / step), step, True)
        if upper == lower:
            return cls(lower, upper, 1, 1.0, False)
        return cls(lower, upper, count, (upper - lower) / count, False)

    def sql(self, value: str) -> str:
        """The engine expression of a clamped value's bucket index, in ``0 .. count - 1`` (NULL for NULL).

        Total by construction: the value and the bounds are 0 or of magnitude in ``[TINY, HUGE]``
        (:mod:`kakeibo.sql.values`), so the offset ``d`` from the lower bound is finite and ``step`` (a
        1024th of a width that is a non-zero multiple of 2^-385, or a whole number) is a positive normal
        double. Offsets below one step and from the last bucket's start on are placed by comparisons; only
        ``1 <= d / step < count`` is divided (no underflow, which PostgreSQL raises on) and cast (it fits).
        """
        offset = f"({value} - {double_text(self.lower)})"
        step, last = double_text(self.step), self.count - 1
        return (
            f"CASE WHEN {offset} < {step} THEN 0 WHEN {offset} >= {double_text(self.step * last)} "
            f"THEN {last} ELSE CAST(FLOOR({offset} / {step}) AS BIGINT) END"
        )

    def edges(self, index: NDArray[np.int64]) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
        """The smallest and largest value bucket ``index`` holds (its closed range)."""
        low = self.lower + index.astype(np.float64) * self.step
        high = np.minimum(low + (self.step - 1 if self.integer else self.step), self.upper)
        return low, high


@dataclass(frozen=True)
class QuantileEstimate:
    """The release plan of one quantile aggregate: three selections per group over ``buckets``."""

    alias: str
    column: str
    quantile: float
    buckets: Buckets
    utility_sensitivity: float
    value: Exponential
    low: Exponential
    high: Exponential

    def rank_error(self, beta: float) -> float:
        """Mass distance from the target within which the released value lies w.p. ``>= 1 - beta``."""
        return self.value.utility_error_bound(beta, n_candidates=self.buckets.count)

    def utilities(self, masses: NDArray[np.float64], shift: float = 0.0) -> NDArray[np.float64]:
        """``u_t(b)`` per group (row of ``masses``) and bucket, aimed at ``t = 1/2 + q (N - 1) + shift``.

        >>> q = make_quantile("m", ColumnSpec("x", "int", lower=0, upper=3), 0.5, epsilon=Fraction(1),
        ...                   kappa=1, max_partitions=1)
        >>> q.utilities(np.array([[1.0, 0.0, 2.0, 0.0]])).tolist()  # t = 1.5: inside bucket 2's mass [1, 3]
        [[-0.5, -0.5, -0.0, -1.5]]
        """
        at_most = np.cumsum(masses, axis=1)
        below = at_most - masses
        target = 0.5 + self.quantile * (at_most[:, -1:] - 1) + shift
        return -np.maximum(np.maximum(below - target, target - at_most), 0.0)

    def release(
        self, masses: NDArray[np.float64], beta: float, source: RandomSource
    ) -> tuple[NDArray[np.float64], NDArray[np.float64], NDArray[np.float64]]:
        """Value and ``(1 - beta)`` interval per group from the bounded bucket masses (groups x buckets)."""

        def pick(mechanism: Exponential, shift: float) -> NDArray[np.int64]:
            return mechanism.release_each(self.utilities(masses, shift), rng=source)

        margin_low = self.low.utility_error_bound(beta / 2, n_candidates=self.buckets.count)
        margin_high = self.high.utility_error_bound(beta / 2, n_candidates=self.buckets.count)
        value_low, value_high = self.buckets.edges(pick(self.value, 0.0))
        low, _ = self.buckets.edges(pick(self.low, -0.5 - margin_low))
        _, high = self.buckets.edges(pick(self.high, 0.5 + margin_high))
        return (value_low + value_high) / 2, np.minimum(low, value_low), np.maximum(high, value_high)


def make_quantile(
    alias: str, column: ColumnSpec, quantile: float, *, epsilon: Fraction, kappa: int, max_partitions: int
) -> QuantileEstimate:
    """Plan a quantile of ``column`` at ``epsilon`` under (kappa, L0) bounding (see the module docstring)."""
    sensitivity = kappa * max(Fraction(quantile), 1 - Fraction(quantile))
    per_group = epsilon / max_partitions
    return QuantileEstimate(
        alias=alias,
        column=column.name,
        quantile=quantile,
        buckets=Buckets.for_column(column),
        utility_sensitivity=float(sensitivity),
        value=Exponential(utility_sensitivity=sensitivity, epsilon=per_group / 2),
        low=Exponential(utility_sensitivity=sensitivity, epsilon=per_group / 4),
        high=Exponential(utility_sensitivity=sensitivity, epsilon=per_group / 4),
    )
