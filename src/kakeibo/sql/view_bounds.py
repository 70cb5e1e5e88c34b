"""``rows_per_person="auto"``: a view's bound on each person's rows, chosen privately (issue 31).

A view over a table with a privacy unit counts at most ``k`` rows of each person (:mod:`.views`), and is
built at ``epsilon / k``: a small ``k`` drops the rows of the heavy persons, a large one multiplies the
view's noise. ``Session.create_view(..., rows_per_person="auto")`` chooses ``k`` inside the view's own
release (one ledger entry, charged ``epsilon`` in all): :data:`CHOICE_SHARE` of ``epsilon`` buys the
choice, the rest ``epsilon_v`` the view, built at ``epsilon_v / k`` (basic composition).

**The histogram** (:func:`histogram_sql`). Each person's rows ``r`` (persons with a NULL unit are not
persons, as in the view's own statement) fall in one power-of-two bin: bin ``j`` holds ``2^j <= r <
2^(j+1)``, up to a top bin ``J`` with ``2^J <= top`` that holds every person with ``r >= 2^J``; ``top`` is
the catalog's ``max_rows_bound``, a public constant, so the bins are data-independent. Neighbour relation:
add or remove one person, who is in exactly one bin: the histogram's L1 sensitivity is 1, and Laplace
noise of scale ``1 / epsilon_h`` on every bin (:class:`~kakeibo.mechanisms.Laplace`, one coordinate
changing) makes it ``epsilon_h``-DP. No cell is zeroed or floored: a floor hides exactly the few persons
with thousands of rows each that a bound drops (issue 31), so the noisy counts are used as they are,
negative ones included. Everything below is post-processing of the noisy counts ``m_j``.

**The choice.** A person with ``r`` rows loses ``max(0, r - k)`` of them; for a person of bin ``j`` that is
between ``lo_j(k) = max(0, 2^j - k)`` and ``hi_j(k) = max(0, end_j - k)`` (``end_j`` the bin's last value,
``top`` for the top bin). The estimated rows dropped are ``D(k) = sum_j m_j (lo_j(k) + hi_j(k)) / 2``. The
view's noise grows with ``k``: its blocks' totals carry Laplace noise of scale ``s(k) = k s(1)``
(:class:`~kakeibo.views.hdpview.Calibration` at ``epsilon_v / k``), and kakeibo takes the noise of the
view's total count when every cell of its domain is a block -- the finest the view can be cut, so the
most noise its total can carry -- whose standard deviation is ``sqrt(2 cells) s(k)``. The chosen ``k``
minimises ``D(k) + sqrt(2 cells) s(k)`` over :func:`candidates` (whole numbers near the powers of sqrt 2,
up to ``top`` and 2^20; those the view cannot be built at are left out, a data-independent test). Since
``D`` has slope ``-(persons above k)``, the choice keeps about ``sqrt(2 cells) s(1)`` persons above
``k``. The model leaves out HDPView's partitioning, which also coarsens as ``k`` grows.

**What it drops** (:func:`dropped_interval`), at the confidence :data:`DROP_CONFIDENCE`, conditional on
no person holding more than ``top`` rows (the catalog's declaration): with ``Z_j = m_j - n_j`` independent
Laplace noises, the true drop ``D*`` lies between ``sum_j n_j lo_j`` and ``sum_j n_j hi_j``.

* Upper end: ``sum_j m_j hi_j + a``, ``a`` the bound of :func:`~kakeibo.views.hdpview.noise_bound` on
  ``|sum_j hi_j Z_j|`` at ``alpha``, so the end fails with probability at most ``alpha / 2`` (the noise is
  symmetric). It is wide: one person of up to ``top`` rows hides in the top bin's noise, and the upper end
  says so.
* Lower end: since ``n_j >= 0``, ``D* >= sum_{j <= J} n_j lo_j`` for every ``J``; each prefix sum of the
  noisy terms less its noise bound at ``alpha / P`` (``P`` prefixes) fails with probability at most
  ``alpha / (2 P)``, and the best of them is the lower end (union bound: ``alpha / 2``), never below 0.
  The prefixes keep the empty top bins' noise out of the lower end.

Both ends hold together with probability at least ``1 - alpha``. The point estimate ``D(k)``, clipped into
the interval, is stored beside it with its standard deviation (:func:`estimate_deviation`): with the
default ``top`` of 1,000,000 the empty top bins' noise makes that deviation millions of rows at
``epsilon_h = 0.1``, and a point estimate of 0 must not be read as "nothing dropped" (issue 35: with this
choice under a synthesis, 7,880 of 16,000 rows were dropped where the estimate said about 0; its
deviation, 12.5 million rows, says so).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

import numpy as np
import pyarrow as pa
from numpy.typing import NDArray
from sqlglot import exp

from ..mechanisms import Laplace
from ..views.hdpview import noise_bound
from .catalog import TableSpec

__all__ = [
    "CHOICE_SHARE",
    "DROP_CONFIDENCE",
    "RowsChoice",
    "bin_edges",
    "candidates",
    "choose",
    "dropped_interval",
    "estimate_deviation",
    "histogram_counts",
    "histogram_sql",
    "ordinal",
]

#: the share of an ``"auto"`` view's epsilon spent choosing ``rows_per_person``
CHOICE_SHARE = Fraction(1, 10)
#: the confidence of the interval of the rows an ``"auto"`` bound drops
DROP_CONFIDENCE = 0.95
#: the largest ``rows_per_person`` an ``"auto"`` view considers
LARGEST_CANDIDATE = 2**20

FloatArray = NDArray[np.float64]


def bin_edges(top: int) -> tuple[FloatArray, FloatArray]:
    """The first and last row counts of each bin of the histogram (module docstring): ``2^j`` and
    ``2^(j+1) - 1``, the last bin ending at ``top``."""
    firsts = np.ldexp(1.0, np.arange(int(top).bit_length()))
    lasts = np.append(firsts[1:] - 1, float(top))
    return firsts, lasts


def candidates(top: int) -> tuple[int, ...]:
    """The ``k`` an ``"auto"`` bound chooses among: ``round(sqrt(2)^i)``, distinct, up to ``top`` and
    :data:`LARGEST_CANDIDATE`."""
    last = min(int(top), LARGEST_CANDIDATE)
    steps = 2 * LARGEST_CANDIDATE.bit_length()
    return tuple(sorted({k for i in range(steps) if (k := round(math.sqrt(2) ** i)) <= last}))


def histogram_sql(table: TableSpec, top: int) -> str:
    """The engine statement (DuckDB's dialect) of the histogram of persons by rows: ``(__bin, __n)`` for the
    non-empty bins. Total: integer comparisons of ``COUNT(*)`` with integer literals, no division, no cast."""
    assert table.privacy_unit is not None, "a table without a privacy unit has one row per person"
    name = table.engine_name()
    person = exp.to_identifier(table.privacy_unit, quoted=True).sql("duckdb")
    firsts, _ = bin_edges(top)
    cases = " ".join(f"WHEN __rows >= {int(firsts[j])} THEN {j}" for j in range(firsts.size - 1, 0, -1))
    which = f"CASE {cases} ELSE 0 END" if cases else "0"
    return (
        f"SELECT __bin, COUNT(*) AS __n FROM (SELECT {which} AS __bin FROM (SELECT COUNT(*) AS __rows FROM "
        f"{name} WHERE {person} IS NOT NULL GROUP BY {person}) AS __p) AS __h GROUP BY __bin"
    )


def histogram_counts(rows: pa.Table, top: int) -> FloatArray:
    """The engine's rows of :func:`histogram_sql` as the dense histogram, one count per bin."""
    counts = np.zeros(bin_edges(top)[0].size)
    for which, n in zip(rows.column("__bin").to_pylist(), rows.column("__n").to_pylist(), strict=True):
        counts[int(which)] += n
    return counts


def _losses(ks: Sequence[int], top: int) -> tuple[FloatArray, FloatArray]:
    """Per candidate (rows) and bin (columns), the least and the most rows one person of the bin loses."""
    firsts, lasts = bin_edges(top)
    k = np.asarray(ks, np.float64)[:, None]
    return np.maximum(firsts[None] - k, 0.0), np.maximum(lasts[None] - k, 0.0)


def choose(noisy: FloatArray, ks: Sequence[int], costs: Sequence[float], top: int) -> NDArray[np.int64]:
    """The index of the chosen ``k`` for each noisy histogram (the last axis of ``noisy``): the least
    ``D(k) + cost(k)`` (module docstring), the smaller ``k`` on a tie. Post-processing only."""
    low, high = _losses(ks, top)
    errors = noisy @ ((low + high) / 2).T + np.asarray(costs, np.float64)
    chosen: NDArray[np.int64] = np.argmin(errors, axis=-1)
    return chosen


def dropped_interval(
    noisy: FloatArray, k: int, top: int, noise: Laplace, confidence: float = DROP_CONFIDENCE
) -> tuple[float, float, float]:
    """``(low, estimate, high)``: the rows a bound of ``k`` per person drops, with an interval that covers
    the truth with probability at least ``confidence`` when no person holds more than ``top`` rows (module
    docstring); ``noise`` is the histogram's mechanism."""
    (low,), (high,) = _losses([k], top)
    alpha = 1 - confidence
    prefixes = np.flatnonzero(low > 0)
    lower = 0.0
    for end in prefixes:
        weights = low[: end + 1]
        bound = noise_bound(noise, weights, alpha / prefixes.size)
        lower = max(lower, float(noisy[: end + 1] @ weights) - bound)
    upper = max(float(noisy @ high) + noise_bound(noise, high, alpha), lower)
    estimate = float(noisy @ ((low + high) / 2))
    return lower, min(max(estimate, lower), upper), upper


def estimate_deviation(k: int, top: int, noise: Laplace) -> float:
    """The standard deviation of the estimate ``D(k)`` (module docstring) for its noise: each bin's Laplace
    noise (variance ``2 scale^2``) weighted by the bin's mid loss. The empty bins up to ``top`` weigh most,
    so a loose ``max_rows_bound`` shows here as a deviation larger than the estimate."""
    (low,), (high,) = _losses([k], top)
    return float(math.sqrt(2) * noise.scale * np.linalg.norm((low + high) / 2))


def ordinal(n: int) -> str:
    """``1st``, ``2nd``, ``3rd``, ``4th``, ..., ``11th``, ``21st``."""
    suffix = "th" if n % 100 in (11, 12, 13) else {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th")
    return f"{n}{suffix}"


@dataclass(frozen=True)
class RowsChoice:
    """A ``rows_per_person`` chosen privately, and what it drops (stored with the view)."""

    rows: int
    epsilon: float  # spent on the choice
    top: int  # the catalog's max_rows_bound: the upper end holds when no person has more rows
    dropped: float  # the estimate, inside [low, high]
    low: float
    high: float
    confidence: float = DROP_CONFIDENCE
    deviation: float | None = None  # the estimate's standard deviation (None: stored before it was kept)

    def describe(self) -> str:
        about = f"about {self.dropped:,.0f}"
        if self.deviation is not None:
            about += f" (standard deviation {self.deviation:,.0f})"
        return (
            f"{self.rows} rows per person were chosen privately at epsilon {self.epsilon:g}: they drop at "
            f"least {self.low:,.0f} rows ({self.confidence:.0%}), {about}, and at most "
            f"{self.high:,.0f} if no person has more than {self.top:,} rows (the catalog's max_rows_bound)"
        )

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> RowsChoice:
        return cls(**data)
