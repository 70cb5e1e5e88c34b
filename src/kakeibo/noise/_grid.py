"""Noise for real-valued releases without floating-point leaks.

Textbook float Laplace noise leaks the input through the low bits of its output (Mironov 2012, "On
Significance of the Least Significant Bits for Differential Privacy"). kakeibo never adds float noise to a
released value. Instead (as OpenDP and Google's "Secure Noise Generation" note do) a real value ``x`` is

1. rounded to the nearest multiple of the granularity ``2**k``: ``n = rint(x * 2**-k)`` (exact: scaling by a
   power of two and rounding to an integer are exact in IEEE arithmetic), then
2. perturbed with exact *integer* noise ``Z`` on that grid, and
3. released as ``(n + Z) * 2**k``: a deterministic function of the integer ``n + Z`` (IEEE addition is
   correctly rounded), so the output reveals nothing beyond ``n + Z``.

Rounding moves each coordinate by at most half a grid step, so two neighbouring inputs whose difference
had L1 norm ``Delta`` become integer vectors at L1 distance at most ``Delta * 2**-k + d`` (L2: at most
``Delta * 2**-k + sqrt(d)``) for ``d`` coordinates. Mechanisms choose ``k`` so that this extra is
covered by a slack reserved when they were calibrated.
"""

from __future__ import annotations

import math

import numpy as np
from numpy.typing import NDArray

from ..errors import ArgumentError
from .exact import discrete_gaussian, discrete_laplace
from .source import RandomSource

__all__ = ["granularity_exponent", "grid_gaussian", "grid_laplace", "round_to_grid"]

FloatArray = NDArray[np.float64]


def granularity_exponent(room: float) -> int:
    """Largest ``k`` with ``2**k <= room`` (``room`` > 0 and finite).

    >>> granularity_exponent(1.0), granularity_exponent(0.3), granularity_exponent(1e-300)
    (0, -2, -997)
    """
    if not (math.isfinite(room) and room > 0):
        raise ArgumentError(f"grid room must be a positive finite number, got {room}.")
    _, exponent = math.frexp(room)  # room = mantissa * 2**exponent, mantissa in [0.5, 1)
    return exponent - 1


def round_to_grid(values: FloatArray, k: int) -> NDArray[np.int64]:
    """Nearest grid points ``rint(x / 2**k)`` as integers; refuses values whose grid index overflows."""
    with np.errstate(over="ignore"):
        scaled = np.ldexp(values, -k)
    if not np.all(np.isfinite(scaled)) or np.max(np.abs(scaled), initial=0.0) >= 2.0**62:
        raise ArgumentError("value is not finite or too large for the noise grid; clamp it before release.")
    return np.rint(scaled).astype(np.int64)


def _release(grid_index: NDArray[np.int64], noise: NDArray[np.int64], k: int) -> FloatArray:
    return np.ldexp((grid_index + noise).astype(np.float64), k)


def grid_laplace(values: FloatArray, k: int, scale_grid: int, source: RandomSource) -> FloatArray:
    """``(rint(x / 2**k) + Z) * 2**k`` with ``Z`` discrete Laplace of integer scale ``scale_grid``."""
    index = round_to_grid(values, k)
    return _release(index, discrete_laplace(scale_grid, 1, index.size, source).reshape(index.shape), k)


def grid_gaussian(
    values: FloatArray, k: int, sigma2_grid: int, proposal_scale: int, source: RandomSource
) -> FloatArray:
    """``(rint(x / 2**k) + Z) * 2**k`` with ``Z`` discrete Gaussian of integer variance parameter
    ``sigma2_grid``, sampled with a discrete Laplace proposal of scale ``proposal_scale`` (which should
    divide ``sigma2_grid`` to keep the exact arithmetic in int64; see ``discrete_gaussian``)."""
    index = round_to_grid(values, k)
    noise = discrete_gaussian(sigma2_grid, 1, index.size, source, proposal_scale)
    return _release(index, noise.reshape(index.shape), k)
