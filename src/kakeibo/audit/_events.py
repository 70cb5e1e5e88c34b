"""Rejection regions (events) for auditing, and the default family chosen from a pilot sample.

Two kinds of event matter in practice:

* *threshold* and *value* events ``{y > c}``, ``{y = v}``: for noise-adding mechanisms on neighbouring
  inputs the likelihood ratio is monotone or piecewise constant in ``y``, so the best test is of this form
  (Neyman-Pearson);
* *low-bit* events, which ask about the floating-point representation of ``y``: is it a multiple of
  ``2**-j``, is ``floor(y 2**j)`` odd, are the low bits of its significand zero? Textbook floating-point
  Laplace noise leaks the input exactly there (Mironov 2012, "On Significance of the Least Significant
  Bits for Differential Privacy"): ``x + noise`` is rounded to a double, and which doubles it can land on
  depends on ``x`` (``1 + noise`` is always a multiple of 2**-53, ``0 + noise`` often is not).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from numpy.typing import NDArray

from ..errors import ArgumentError

__all__ = [
    "Event",
    "default_events",
    "grid_parity",
    "mantissa_bit",
    "mantissa_trailing_zeros",
    "on_grid",
    "threshold",
    "value_event",
]

BoolArray = NDArray[np.bool_]

_SIGNIFICAND = np.uint64(2**52 - 1)

#: Quantile levels of the pooled pilot sample at which threshold events are placed.
THRESHOLD_LEVELS: tuple[float, ...] = tuple(
    sorted(
        {1e-4, 1e-3, 5e-3, 1e-2, 2.5e-2, 0.975, 0.99, 0.995, 0.999, 1 - 1e-4} | {i / 40 for i in range(2, 39)}
    )
)


@dataclass(frozen=True)
class Event:
    """A rejection region ``S`` over the outputs of a mechanism, as a vectorised indicator.

    ``predicate`` maps a 1-d array of outputs to a boolean array of the same shape (``True`` = in ``S``).
    The audit also tests the complement of every event, so ``S`` and ``not S`` need not both be listed.

    >>> import numpy as np
    >>> e = Event("y > 1", lambda y: y > 1)
    >>> e(np.array([0.5, 2.0])).tolist()
    [False, True]
    """

    description: str
    predicate: Callable[[NDArray[Any]], NDArray[Any]] = field(compare=False, repr=False)

    def __call__(self, outputs: NDArray[Any]) -> BoolArray:
        result = np.asarray(self.predicate(outputs), dtype=np.bool_)
        if result.shape != np.shape(outputs):
            raise ArgumentError(f"event {self.description!r} must return one boolean per output.")
        return result


def _is_integer(values: NDArray[Any]) -> bool:
    return values.dtype.kind in "iu"


def threshold(c: float) -> Event:
    """``{y > c}``.

    >>> threshold(0.5)(np.array([0.0, 1.0])).tolist()
    [False, True]
    """
    shown = c.item() if isinstance(c, np.generic) else c
    return Event(f"y > {shown!r}", lambda y: y > c)


def value_event(v: Any) -> Event:
    """``{y == v}`` (for mechanisms with a finite output set)."""
    shown = v.item() if isinstance(v, np.generic) else v
    return Event(f"y == {shown!r}", lambda y: y == v)


def on_grid(j: int) -> Event:
    """``{y is an integer multiple of 2**-j}`` (``j`` may be negative: multiples of ``2**|j|``).

    >>> on_grid(1)(np.array([0.5, 0.25, 3.0])).tolist()
    [True, False, True]
    """
    factor = math.ldexp(1.0, j)

    def predicate(y: NDArray[Any]) -> BoolArray:
        if _is_integer(y):
            if j >= 0:
                return np.ones(y.shape, dtype=np.bool_)
            return np.asarray((y.astype(np.int64) & ((1 << -j) - 1)) == 0, dtype=np.bool_)
        scaled = np.asarray(y, dtype=np.float64) * factor  # exact: same as ldexp(y, j)
        return np.asarray(scaled == np.floor(scaled), dtype=np.bool_)

    return Event(f"y is a multiple of 2**{-j}", predicate)


def grid_parity(j: int) -> Event:
    """``{floor(y * 2**j) is odd}``: bit ``j`` after the binary point of ``y`` (two's complement).

    >>> grid_parity(1)(np.array([0.5, 1.0, 1.5])).tolist()
    [True, False, True]
    """
    factor = math.ldexp(1.0, j - 1)

    def predicate(y: NDArray[Any]) -> BoolArray:
        if _is_integer(y) and j <= 0:
            return np.asarray(((y.astype(np.int64) >> -j) & 1) == 1, dtype=np.bool_)
        # floor(y 2**j) is odd exactly when h = y 2**(j-1) has fractional part >= 1/2 (h - floor(h) is exact).
        half = np.asarray(y, dtype=np.float64) * factor
        return np.asarray(half - np.floor(half) >= 0.5, dtype=np.bool_)

    return Event(f"floor(y * 2**{j}) is odd", predicate)


def _significand(y: NDArray[Any]) -> NDArray[np.uint64]:
    bits: NDArray[np.uint64] = np.ascontiguousarray(y, dtype=np.float64).view(np.uint64)
    low: NDArray[np.uint64] = bits & _SIGNIFICAND
    return low


def mantissa_trailing_zeros(t: int) -> Event:
    """``{the lowest t bits of y's 52-bit significand are all zero}``: ``y`` is coarser than its own binade.

    >>> mantissa_trailing_zeros(4)(np.array([1.0, 1.0 + 2.0**-52])).tolist()
    [True, False]
    """
    mask = np.uint64((1 << t) - 1)
    return Event(f"lowest {t} significand bits of y are 0", lambda y: (_significand(y) & mask) == 0)


def mantissa_bit(i: int) -> Event:
    """``{bit i of y's significand is set}`` (bit 0 is the least significant)."""
    bit = np.uint64(1 << i)
    return Event(f"significand bit {i} of y is 1", lambda y: (_significand(y) & bit) != 0)


def _exponent(x: float) -> int:
    return math.frexp(x)[1]


def candidate_events(pilot: NDArray[Any], *, max_values: int = 64) -> list[Event]:
    """Every event of the default family for outputs like ``pilot`` (before pruning)."""
    events: list[Event] = []
    distinct = np.unique(pilot)
    if distinct.size <= max_values:
        events.extend(value_event(v) for v in distinct)
    if pilot.dtype.kind not in "iuf":
        return events
    cuts = np.unique(np.quantile(pilot, THRESHOLD_LEVELS, method="lower"))
    events.extend(threshold(c) for c in cuts)
    magnitude = np.abs(pilot[np.isfinite(pilot) & (pilot != 0)].astype(np.float64))
    if magnitude.size == 0:
        return events
    j_low = -_exponent(float(magnitude.max()))
    if _is_integer(pilot):
        j_high = 0
    else:
        # Bits below the significand of the smallest typical output carry no information; stop there.
        j_high = 54 - _exponent(float(np.quantile(magnitude, 1e-3)))
        events.extend(mantissa_trailing_zeros(t) for t in (1, 2, 3, 4, 6, 8, 12, 16, 20, 24, 28, 32, 40, 48))
        events.extend(mantissa_bit(i) for i in range(4))
    j_high = min(j_high, j_low + 120)
    for j in range(j_low, j_high + 1):
        events.append(on_grid(j))
        events.append(grid_parity(j))
    return events


def default_events(pilot: NDArray[Any], *, max_values: int = 64) -> list[Event]:
    """The default event family, chosen from a pilot sample that the audit then discards.

    Candidates are value events (when the pilot shows at most ``max_values`` distinct outputs), threshold
    events at fixed quantiles of the pilot, and for numeric outputs the low-bit events over the range of
    binary exponents the pilot spans. Candidates that are constant on the pilot are dropped, and so are
    duplicates (events equal to, or the complement of, an earlier one on every pilot output): fewer events
    mean a milder Bonferroni correction. Choosing events from an independent pilot keeps the audit's
    confidence statement exact (Jagielski et al. 2020; Nasr et al. 2021 select their test the same way).
    """
    pilot = np.asarray(pilot).reshape(-1)
    if pilot.size == 0:
        raise ArgumentError("the pilot sample is empty.")
    kept: list[Event] = []
    seen: set[bytes] = set()
    for event in candidate_events(pilot, max_values=max_values):
        indicator = event(pilot)
        if indicator.all() or not indicator.any():
            continue
        key = np.packbits(indicator ^ indicator[0]).tobytes()
        if key in seen:
            continue
        seen.add(key)
        kept.append(event)
    return kept
