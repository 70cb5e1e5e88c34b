"""The Laplace mechanism on real values and its integer twin, the geometric (discrete Laplace) mechanism.

Privacy map (Dwork, McSherry, Nissim, Smith 2006; seed 000 ch. 8): if neighbouring inputs give answers
whose L1 distance is at most ``sensitivity``, adding Laplace noise of scale ``sensitivity / epsilon`` to
every coordinate is epsilon-DP. kakeibo adds the noise on a power-of-two grid with an exact integer sampler
(see :mod:`kakeibo.noise._grid`) and accounts for the grid rounding inside the same epsilon.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from fractions import Fraction
from typing import Any

import numpy as np
from numpy.typing import ArrayLike, NDArray

from ..errors import ArgumentError
from ..noise import exact, exact_ratio, granularity_exponent, grid_laplace, resolve_source, round_to_grid
from ..privacy import Number, PureDP, as_fraction
from .base import (
    Mechanism,
    Rng,
    as_output,
    check_beta,
    check_positive,
    check_tolerance,
    check_values,
    log_ratio,
    release_integers,
)

__all__ = ["Geometric", "Laplace"]

#: Share of the sensitivity reserved for grid rounding (noise grows by this factor, 1 + 2**-20).
GRID_SLACK = Fraction(1, 2**20)


class Laplace(Mechanism):
    """epsilon-DP release of real values by Laplace noise of scale ``sensitivity / epsilon``.

    * Neighbour relation: any two datasets whose query answers differ by at most ``sensitivity`` in the
      L1 norm (summed over all coordinates of an array answer).
    * Privacy loss: ``PureDP(epsilon)`` per :meth:`release`.
    * Noise: ``x`` is rounded to the grid ``2**k`` with ``d * 2**k <= 2**-20 * sensitivity`` for ``d``
      coordinates, and exact discrete Laplace noise of integer scale
      ``t = ceil(sensitivity * (1 + 2**-20) / (epsilon * 2**k))`` grid steps is added. The rounded answers
      differ by at most ``sensitivity / 2**k + d <= sensitivity * (1 + 2**-20) / 2**k`` grid steps, so the
      loss is at most ``epsilon`` -- checked in exact arithmetic on every release.
    * ``coordinates``: when at most that many coordinates of an array answer differ between neighbours
      (a user touches at most L0 groups of a SQL answer), ``d = coordinates`` whatever the array's size:
      coordinates on which two answers agree round alike. The grid, its exactness guard and every error
      then depend on the declared parameters only, never on how many values a release holds.

    >>> import numpy as np
    >>> m = Laplace(sensitivity=1, epsilon=0.5)
    >>> m.privacy_loss
    PureDP(epsilon=Fraction(1, 2))
    >>> round(m.scale, 6)
    2.000002
    >>> isinstance(m.release(10.0, rng=np.random.default_rng(0)), float)
    True
    """

    def __init__(self, *, sensitivity: Number, epsilon: Number, coordinates: int | None = None) -> None:
        check_positive(sensitivity, "sensitivity")
        check_positive(epsilon, "epsilon")
        if coordinates is not None and (
            isinstance(coordinates, bool) or not isinstance(coordinates, (int, np.integer)) or coordinates < 1
        ):
            raise ArgumentError(f"coordinates must be a positive integer or None, got {coordinates!r}.")
        self._sensitivity = as_fraction(sensitivity, "sensitivity")
        self._epsilon = as_fraction(epsilon, "epsilon")
        self._scale = self._sensitivity * (1 + GRID_SLACK) / self._epsilon
        self._coordinates = None if coordinates is None else int(coordinates)
        if self._coordinates is not None:
            self.grid(self._coordinates)  # a release's grid is fixed now: refuse a bad one before any data

    @property
    def sensitivity(self) -> float:
        return float(self._sensitivity)

    @property
    def epsilon(self) -> float:
        return float(self._epsilon)

    @property
    def scale(self) -> float:
        """Nominal Laplace scale ``b`` (the grid adds at most one grid step to it)."""
        return float(self._scale)

    @property
    def privacy_loss(self) -> PureDP:
        return PureDP(self._epsilon)

    def grid(self, size: int) -> tuple[int, int]:
        """``(k, t)``: grid exponent and integer noise scale (grid steps) for ``size`` values."""
        room = self._sensitivity * GRID_SLACK / size
        k = granularity_exponent(float(room))
        if Fraction(2) ** k > room:  # float rounding in the exponent: step down, never up
            k -= 1
        step = Fraction(2) ** k
        t = math.ceil(self._scale / step)
        if not (self._sensitivity / step + size) / t <= self._epsilon:
            raise AssertionError("grid calibration exceeded epsilon; this is a bug in kakeibo")
        if t >= 2**52:
            raise ArgumentError(
                f"the noise of sensitivity {self.sensitivity:g} at epsilon={self.epsilon:g} is beyond the "
                "range of exact noise on its grid; lower the sensitivity or raise epsilon."
            )
        return k, t

    def _grid_for(self, size: int) -> tuple[int, int]:
        """The grid of a release of ``size`` values: fixed by ``coordinates`` when it was given."""
        return self.grid(self._coordinates if self._coordinates is not None else max(size, 1))

    @property
    def max_magnitude(self) -> float:
        """The largest magnitude :meth:`release` accepts: ``2**61`` steps of the coarsest grid it uses (with
        ``coordinates`` given, the only one). Clamping an answer to it is 1-Lipschitz per coordinate, so it
        keeps the sensitivity; a caller that must not fail on its data (SQL) clamps to it."""
        return math.ldexp(1.0, self._grid_for(1)[0] + 61)

    def release(self, value: ArrayLike, rng: Rng = None) -> Any:
        arr = check_values(value)
        k, t = self._grid_for(arr.size)
        return as_output(grid_laplace(arr, k, t, resolve_source(rng)), value)

    def deferred(self, size: int, rng: Rng = None) -> Callable[[ArrayLike], NDArray[np.float64]]:
        """The noise of a release of ``size`` values, drawn now, and the function that releases values with
        it: ``deferred(n, rng)(x)`` draws exactly what ``release(x, rng)`` draws (the same words of the
        source, in the same order) and returns the same values. With the noise fixed, each released value
        is non-decreasing in its input, so a caller that needs only the largest of several releases may skip
        computing an input whose release, at an upper bound of that input, cannot be the largest (R2T's early
        stop, :mod:`kakeibo.graphs`)."""
        k, t = self._grid_for(size)
        noise = exact.discrete_laplace(t, 1, size, resolve_source(rng))

        def release_with_noise(value: ArrayLike) -> NDArray[np.float64]:
            index = round_to_grid(check_values(value).reshape(size), k)
            return np.ldexp((index + noise).astype(np.float64), k)

        return release_with_noise

    def error_bound(self, beta: float) -> float:
        """``a`` with ``Pr(|y_i - x_i| > a) <= beta`` (seed 000 ch. 8, made exact).

        Discrete Laplace noise of scale ``t`` steps has ``Pr(|Z| > z) <= (1 + 1/(2t)) exp(-z/t)``; in real
        units the scale is at most ``b + 2**k`` and rounding moves the answer by at most ``2**(k-1)``. The
        single-value grid is the coarsest, so its figures bound every size.
        """
        beta = check_beta(beta)
        k, t = self._grid_for(1)
        step = math.ldexp(1.0, k)
        return (self.scale + step) * log_ratio(1 + 1 / (2 * t), beta) + step / 2

    def failure_probability(self, tolerance: float) -> float:
        """Upper bound on ``Pr(|y_i - x_i| > tolerance)``: the tail of :meth:`error_bound` read the other way,
        ``(1 + 1/(2t)) exp(-(tolerance - 2**(k-1)) / (b + 2**k))`` on the single-value grid, capped at 1.

        Seed 000 ch. 8: a mean over n = 1000 records (sensitivity 1/n) at epsilon = 0.001 misses by more
        than 1 with probability about exp(-1):

        >>> round(Laplace(sensitivity=1 / 1000, epsilon=0.001).failure_probability(1.0), 4)
        0.3679
        """
        tolerance = check_tolerance(tolerance)
        k, t = self._grid_for(1)
        step = math.ldexp(1.0, k)
        excess = tolerance - step / 2
        if excess <= 0:
            return 1.0
        return min(1.0, (1 + 1 / (2 * t)) * math.exp(-excess / (self.scale + step)))

    @property
    def variance(self) -> float:
        """Upper bound on the noise variance per coordinate, ``2 (b + 2**k)^2``."""
        k, _ = self._grid_for(1)
        return 2 * (self.scale + math.ldexp(1.0, k)) ** 2


class Geometric(Mechanism):
    """epsilon-DP release of integers by two-sided geometric (discrete Laplace) noise (Ghosh et al. 2009).

    * Neighbour relation: any two datasets whose integer answers differ by at most ``sensitivity`` in L1.
    * Privacy loss: ``PureDP(epsilon)``.
    * Noise: exact discrete Laplace of scale ``sensitivity / epsilon`` (rounded up to a rational with
      numerator and denominator below 2**48 when needed: more noise, never less).

    >>> import numpy as np
    >>> Geometric(sensitivity=1, epsilon=1).release(np.array([3, 4]), rng=np.random.default_rng(0)).dtype
    dtype('int64')
    """

    def __init__(self, *, sensitivity: int, epsilon: Number) -> None:
        if isinstance(sensitivity, bool) or not isinstance(sensitivity, (int, np.integer)) or sensitivity < 1:
            raise ArgumentError(f"sensitivity must be a positive integer, got {sensitivity!r}.")
        check_positive(epsilon, "epsilon")
        self.sensitivity = int(sensitivity)
        self._epsilon = as_fraction(epsilon, "epsilon")
        self._num, self._den = exact_ratio(Fraction(self.sensitivity) / self._epsilon, "scale")

    @property
    def epsilon(self) -> float:
        return float(self._epsilon)

    @property
    def scale(self) -> float:
        return self._num / self._den

    @property
    def privacy_loss(self) -> PureDP:
        return PureDP(self._epsilon)

    def release(self, value: ArrayLike, rng: Rng = None) -> Any:
        source = resolve_source(rng)
        return release_integers(value, lambda n: exact.discrete_laplace(self._num, self._den, n, source))

    def error_bound(self, beta: float) -> float:
        """Least integer ``m`` with ``Pr(|Z| > m) <= beta``; ``Pr(|Z| >= j) = 2e^(-j/s) / (1 + e^(-1/s))``."""
        beta = check_beta(beta)
        s = self.scale
        tail_free = s * (math.log(2 / (1 + math.exp(-1 / s))) - math.log(beta))
        return float(max(0, math.ceil(tail_free) - 1))

    def failure_probability(self, tolerance: float) -> float:
        """Exact tail ``Pr(|Z| > tolerance) = 2 q^j / (1 + q)`` with ``j = floor(tolerance) + 1`` and
        ``q = exp(-1/scale)``.

        >>> round(Geometric(sensitivity=1, epsilon=1).failure_probability(2), 6)  # 2 e^-3 / (1 + e^-1)
        0.072795
        """
        tolerance = check_tolerance(tolerance)
        if tolerance < 0:
            return 1.0
        if math.isinf(tolerance):
            return 0.0
        s = self.scale
        j = math.floor(tolerance) + 1
        return min(1.0, 2 * math.exp(-j / s) / (1 + math.exp(-1 / s)))

    @property
    def variance(self) -> float:
        """Exact noise variance ``2q / (1 - q)^2`` with ``q = exp(-1/scale)``."""
        q = math.exp(-1 / self.scale)
        return 2 * q / (1 - q) ** 2
