"""Sensitivities of the usual aggregates, and what a guarantee means for users and groups.

A sensitivity is only meaningful next to the neighbour relation it was computed for (seed 002, slides 25-29:
"the sensitivity changes with the assumed neighbouring databases"). Every helper here therefore takes
``neighbour=`` explicitly, as a :class:`Neighbour` or its string value:

* ``"add_remove"`` -- *unbounded* DP (Dwork 2006): the hidden change is adding or removing one record, so
  the number of records is itself private.
* ``"replace"`` -- *bounded* DP (Kifer and Machanavajjhala 2011, "No free lunch in data privacy"): the
  hidden change is replacing the value of one record; the number of records ``n`` is public.

Results are floats rounded *up*: the smallest float that kakeibo's mechanisms read (through
:func:`~kakeibo.privacy.as_fraction`) as at least the exact rational value, since a sensitivity a hair too
small would understate the noise. So ``1/3`` comes back as ``0.33333333333333337``.

Records versus people (seed 002, slides 67-69): when one person may own up to ``c`` records, multiply a
record-level sensitivity by ``c`` (:func:`user_level`), or keep the mechanism and read its guarantee for
groups of ``c`` records (:func:`group_privacy`).

>>> [sum_sensitivity(lower=-20, upper=100, neighbour=r) for r in ("add_remove", "replace")]
[100.0, 120.0]
>>> mean_sensitivity(lower=0, upper=1, n=1000)  # seed 000 ch. 8: the mean of n values in [0, 1]
0.001
"""

from __future__ import annotations

import math
from enum import Enum
from fractions import Fraction
from typing import Literal, TypeVar

import numpy as np

from ..errors import ArgumentError, ArgumentTypeError
from ..privacy import ZCDP, ApproxDP, Number, PrivacyLoss, PureDP, as_fraction

__all__ = [
    "Neighbour",
    "NeighbourLike",
    "count_sensitivity",
    "group_privacy",
    "histogram_sensitivity",
    "mean_sensitivity",
    "sum_sensitivity",
    "user_level",
]


class Neighbour(str, Enum):
    """Which change to the data a guarantee hides.

    ``ADD_REMOVE`` (``"add_remove"``, unbounded DP): two datasets are neighbours when one is the other plus
    one record. An observer cannot tell whether any given record is in the data at all -- not even through
    the record count, which is therefore private.

    ``REPLACE`` (``"replace"``, bounded DP): two datasets of the same size ``n`` are neighbours when they
    differ in the value of exactly one record. An observer cannot tell what any record's value is, but the
    size ``n`` is public. One replacement is a removal followed by an addition, so an add/remove guarantee
    of epsilon implies a replace guarantee of 2 epsilon (group privacy with k = 2), not the converse.

    >>> Neighbour("replace") is Neighbour.REPLACE
    True
    """

    ADD_REMOVE = "add_remove"
    REPLACE = "replace"


NeighbourLike = Neighbour | Literal["add_remove", "replace"]

L = TypeVar("L", PureDP, ApproxDP, ZCDP)


def _neighbour(value: NeighbourLike | str) -> Neighbour:
    if isinstance(value, Neighbour):
        return value
    try:
        return Neighbour(value)
    except ValueError:
        raise ArgumentError(f"neighbour must be 'add_remove' or 'replace', got {value!r}.") from None


def _round_up(value: Fraction) -> float:
    """The smallest float that kakeibo reads (:func:`~kakeibo.privacy.as_fraction`) as at least ``value``."""
    try:
        out = float(value)
    except OverflowError:
        out = math.inf
    while math.isfinite(out) and as_fraction(out, "sensitivity") < value:
        out = math.nextafter(out, math.inf)
    if math.isinf(out):
        raise ArgumentError("the sensitivity is too large to be represented as a float; tighten the bounds.")
    return out


def _bounds(lower: Number, upper: Number) -> tuple[Fraction, Fraction]:
    lo = as_fraction(lower, "lower")
    hi = as_fraction(upper, "upper")
    if lo > hi:
        raise ArgumentError(
            f"the clamping bounds are inverted: lower = {float(lo)} exceeds upper = {float(hi)}."
        )
    return lo, hi


def _positive_int(value: int, name: str) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise ArgumentTypeError(f"{name} must be an integer, not {type(value).__name__}.")
    if value < 1:
        raise ArgumentError(f"{name} must be at least 1, got {int(value)}.")
    return int(value)


def count_sensitivity(*, neighbour: NeighbourLike, predicate: bool = True) -> float:
    """Sensitivity of a count of records.

    ``predicate=True`` (the default) is any count that can change when one record's *value* changes:
    ``COUNT(*) ... WHERE ...``, the count of one group, the number of "yes" answers. Its sensitivity is 1
    under both relations (seed 002, slide 29).

    ``predicate=False`` is ``COUNT(*)`` over the whole table, the number of records ``n``: 1 under add/remove,
    but 0 under replace, where ``n`` is public and may be released without noise. Passing ``False`` for a
    filtered count would release it without protection, hence the safe default.

    >>> count_sensitivity(neighbour="add_remove"), count_sensitivity(neighbour="replace")
    (1.0, 1.0)
    >>> count_sensitivity(neighbour="replace", predicate=False)
    0.0
    """
    relation = _neighbour(neighbour)
    if not isinstance(predicate, bool):
        raise ArgumentTypeError(f"predicate must be True or False, not {type(predicate).__name__}.")
    if relation is Neighbour.REPLACE and not predicate:
        return 0.0
    return 1.0


def sum_sensitivity(*, lower: Number, upper: Number, neighbour: NeighbourLike) -> float:
    """Sensitivity of a sum of values clamped to ``[lower, upper]``.

    * add/remove: the sum moves by the added or removed value, at most ``max(|lower|, |upper|)``;
    * replace: one value moves within the interval, at most ``upper - lower``.

    The values must really be clamped to the bounds before summing, and the bounds must not depend on
    the data.

    >>> sum_sensitivity(lower=-5, upper=3, neighbour="add_remove")
    5.0
    >>> sum_sensitivity(lower=-5, upper=3, neighbour="replace")
    8.0
    """
    relation = _neighbour(neighbour)
    lo, hi = _bounds(lower, upper)
    if relation is Neighbour.ADD_REMOVE:
        return _round_up(max(abs(lo), abs(hi)))
    return _round_up(hi - lo)


def mean_sensitivity(*, lower: Number, upper: Number, n: int, neighbour: NeighbourLike = "replace") -> float:
    """Sensitivity of the mean of ``n`` values clamped to ``[lower, upper]``: ``(upper - lower) / n``.

    This needs the replace relation, under which ``n`` is public (seed 000 ch. 8 and seed 002 slide 29 use
    ``1/n`` for values in [0, 1]). Under add/remove the mean of a neighbour has a different, private
    denominator and no useful worst case exists; there, release a noisy sum and a noisy count (or use a
    dedicated mean mechanism) and divide the two -- so this function refuses.

    >>> mean_sensitivity(lower=0, upper=1, n=1000)
    0.001
    >>> mean_sensitivity(lower=0, upper=1, n=3)
    0.33333333333333337
    """
    relation = _neighbour(neighbour)
    lo, hi = _bounds(lower, upper)
    size = _positive_int(n, "n")
    if relation is Neighbour.ADD_REMOVE:
        raise ArgumentError(
            "a mean has no fixed sensitivity under add/remove neighbours because the record count is "
            "private; release a noisy sum and a noisy count and divide them instead."
        )
    return _round_up((hi - lo) / size)


def histogram_sensitivity(*, neighbour: NeighbourLike, norm: Literal["l1", "l2"] = "l1") -> float:
    """Sensitivity of a histogram (counts over disjoint bins, every record in exactly one bin).

    * add/remove: one count moves by 1, so 1 in both L1 and L2;
    * replace: one count goes down by 1 and another up by 1, so 2 in L1 and sqrt(2) in L2 (rounded up).

    A per-person bound on contributions changes these figures; see :func:`user_level`.

    >>> histogram_sensitivity(neighbour="add_remove"), histogram_sensitivity(neighbour="replace")
    (1.0, 2.0)
    >>> histogram_sensitivity(neighbour="replace", norm="l2")
    1.4142135623730951
    """
    relation = _neighbour(neighbour)
    if norm not in ("l1", "l2"):
        raise ArgumentError(f"norm must be 'l1' or 'l2', got {norm!r}.")
    if relation is Neighbour.ADD_REMOVE:
        return 1.0
    if norm == "l1":
        return 2.0
    root2 = math.sqrt(2.0)
    while as_fraction(root2, "sensitivity") ** 2 < 2:
        root2 = math.nextafter(root2, math.inf)
    return root2


def user_level(sensitivity: Number, max_contributions: int) -> float:
    """Sensitivity when one person may own up to ``max_contributions`` records (seed 002, slide 69).

    Adding, removing or changing one person is a chain of at most ``c = max_contributions`` record-level
    changes, so by the triangle inequality the query moves by at most ``c`` times the record-level
    sensitivity. ``c`` must be enforced (each person's records truncated to ``c``) and must not be chosen
    by looking at the data (slide 73).

    >>> user_level(count_sensitivity(neighbour="add_remove"), 3)  # COUNT when a person has <= 3 rows
    3.0
    """
    value = as_fraction(sensitivity, "sensitivity")
    if value < 0:
        raise ArgumentError(f"sensitivity must be non-negative, got {float(value)}.")
    return _round_up(value * _positive_int(max_contributions, "max_contributions"))


def group_privacy(loss: L, k: int) -> L:
    """The guarantee a privacy loss gives to a group of ``k`` records (datasets ``k`` neighbour steps apart).

    * ``PureDP(eps)`` -> ``PureDP(k eps)`` (Dwork and Roth 2014, Thm. 2.2; seed 002, slide 68).
    * ``ApproxDP(eps, delta)`` -> ``ApproxDP(k eps, delta (1 + e^eps + ... + e^((k-1) eps)))``: chaining
      the definition ``k`` times (Vadhan 2017, "The Complexity of Differential Privacy", Sec. 2). The sum
      is at most the textbook ``k e^((k-1) eps) delta``; it is computed with an upward margin of 1e-9 and
      refused when it reaches 1.
    * ``ZCDP(rho)`` -> ``ZCDP(k^2 rho)`` (Bun and Steinke 2016, Prop. 1.9).

    >>> group_privacy(PureDP(0.5), 3)
    PureDP(epsilon=Fraction(3, 2))
    >>> group_privacy(ZCDP(0.125), 2)
    ZCDP(rho=Fraction(1, 2))
    >>> g = group_privacy(ApproxDP(1, 1e-6), 2)
    >>> float(g.epsilon), round(float(g.delta) / 1e-6, 6)  # delta (1 + e)
    (2.0, 3.718282)
    """
    size = _positive_int(k, "k")
    if isinstance(loss, PureDP):
        return PureDP(loss.epsilon * size)
    if isinstance(loss, ZCDP):
        return ZCDP(loss.rho * size * size)
    if isinstance(loss, ApproxDP):
        eps = float(loss.epsilon)
        if size == 1:
            return ApproxDP(loss.epsilon, loss.delta)
        # sum_{i<k} e^(i eps) = expm1(k eps) / expm1(eps), each evaluated to a relative error below 1e-12
        try:
            series = float(size) if eps == 0 else math.expm1(size * eps) / math.expm1(eps)
        except OverflowError:
            series = math.inf
        series_up = Fraction(series * (1 + 1e-9)) if math.isfinite(series) else None
        if series_up is None or loss.delta * series_up >= 1:
            raise ArgumentError(
                f"group privacy for {size} records at epsilon = {eps:g} leaves no meaningful delta (it "
                "reaches 1); use a smaller group or a pure-DP mechanism."
            )
        return ApproxDP(loss.epsilon * size, loss.delta * series_up)
    if isinstance(loss, PrivacyLoss):
        raise ArgumentTypeError(
            f"group privacy is defined here for PureDP, ApproxDP and ZCDP, not {type(loss).__name__}."
        )
    raise ArgumentTypeError(f"loss must be a privacy-loss value, not {type(loss).__name__}.")
