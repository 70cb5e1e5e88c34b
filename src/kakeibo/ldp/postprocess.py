"""Post-processing of estimated counts into a distribution (Wang, Lopuhaä-Zwakenberg, Li, Škorić and Li
2020, "Locally Differentially Private Frequency Estimation with Consistency", NDSS).

The framework's estimates are unbiased but may be negative and need not sum to ``n``. Post-processing
costs no privacy (it only reads released reports' estimates) and trades bias for lower error:

* :func:`clip_and_normalize`: negative counts to 0, then scale to total ``n`` (Base-Pos plus Norm-Mul).
* :func:`norm_sub`: subtract one constant ``delta`` from every count and clip at 0, with ``delta`` chosen
  so the result sums to ``n``. This is exactly the Euclidean projection onto the scaled simplex
  ``{x >= 0, sum x = n}`` (its KKT conditions are ``x = max(c - delta, 0)``), so :func:`project_simplex`
  is the same operation under its geometric name; it is computed by sorting (Duchi, Shalev-Shwartz, Singer
  and Chandra 2008, Fig. 1).

>>> import numpy as np
>>> norm_sub(np.array([5.0, -1.0, 3.0]), 6).tolist()
[4.0, 0.0, 2.0]
>>> clip_and_normalize(np.array([5.0, -1.0, 3.0]), 4).tolist()
[2.5, 0.0, 1.5]
"""

from __future__ import annotations

import numpy as np
from numpy.typing import ArrayLike

from ..errors import ArgumentError
from .framework import FloatArray

__all__ = ["clip_and_normalize", "norm_sub", "project_simplex"]


def _check(counts: ArrayLike, total: float) -> FloatArray:
    c = np.asarray(counts, dtype=np.float64)
    if c.ndim != 1 or c.size == 0 or not np.all(np.isfinite(c)):
        raise ArgumentError("counts must be a non-empty 1-d array of finite numbers.")
    if not total > 0:
        raise ArgumentError(f"the total must be positive, got {total!r}.")
    return c


def clip_and_normalize(counts: ArrayLike, total: float) -> FloatArray:
    """Negative counts set to 0, the rest scaled to sum to ``total`` (uniform if nothing is positive)."""
    c = np.clip(_check(counts, total), 0, None)
    mass = c.sum()
    if mass == 0:
        return np.full(c.size, total / c.size)
    return np.asarray(c * (total / mass), dtype=np.float64)


def norm_sub(counts: ArrayLike, total: float) -> FloatArray:
    """``max(c - delta, 0)`` with the ``delta`` that makes the sum ``total``: the Euclidean projection of
    ``counts`` onto ``{x >= 0, sum x = total}``."""
    c = _check(counts, total)
    ordered = np.sort(c)[::-1]
    cumulative = np.cumsum(ordered) - total
    ranks = np.arange(1, c.size + 1)
    k = int(np.flatnonzero(ordered - cumulative / ranks > 0)[-1]) + 1
    delta = cumulative[k - 1] / k
    return np.asarray(np.maximum(c - delta, 0.0), dtype=np.float64)


#: The Euclidean projection onto the scaled probability simplex; identical to :func:`norm_sub`.
project_simplex = norm_sub
