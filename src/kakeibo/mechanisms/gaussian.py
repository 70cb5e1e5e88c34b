"""Gaussian mechanisms: the analytically calibrated Gaussian on real values and the discrete Gaussian on
integers.

* ``Gaussian(sensitivity=, epsilon=, delta=)`` -- (epsilon, delta)-DP with the smallest noise the exact
  Gaussian privacy profile allows (Balle and Wang 2018, "Improving the Gaussian Mechanism for Differential
  Privacy: Analytical Calibration and Optimal Denoising", Theorem 8).
* ``DiscreteGaussian(sensitivity=, rho=)`` -- rho-zCDP for integer answers (Canonne, Kamath and Steinke
  2020, Theorem 14: noise N_Z(0, sigma^2) per coordinate is (Delta_2^2 / (2 sigma^2))-zCDP).
"""

from __future__ import annotations

import math
import numbers
from fractions import Fraction
from typing import Any

from numpy.typing import ArrayLike
from scipy.special import log_ndtr

from ..errors import ArgumentError, ArgumentTypeError
from ..noise import exact, exact_ratio, granularity_exponent, grid_gaussian, resolve_source
from ..privacy import ZCDP, ApproxDP, Number, PrivacyLoss, as_fraction
from .base import (
    Mechanism,
    Rng,
    as_output,
    check_beta,
    check_positive,
    check_tolerance,
    check_values,
    release_integers,
)

__all__ = ["DiscreteGaussian", "Gaussian", "analytic_gaussian_delta", "analytic_gaussian_sigma"]

#: Share of the L2 sensitivity reserved for grid rounding (noise grows by 1 + 2**-8).
GRID_SLACK = Fraction(1, 2**8)


def analytic_gaussian_delta(sigma: float, sensitivity: float, epsilon: float) -> float:
    """Exact delta(epsilon) of Gaussian noise ``sigma`` at L2 sensitivity ``Delta`` (Balle-Wang 2018, Thm. 8):
    ``Phi(Delta/(2 sigma) - eps sigma/Delta) - e^eps Phi(-Delta/(2 sigma) - eps sigma/Delta)``.

    >>> round(analytic_gaussian_delta(1.0, 1.0, 0.0), 6)  # total variation of N(0,1) and N(1,1)
    0.382925
    """
    a = sensitivity / (2 * sigma)
    b = epsilon * sigma / sensitivity
    first = float(log_ndtr(a - b))
    second = epsilon + float(log_ndtr(-a - b))
    if second >= first:
        return 0.0
    return math.exp(first) * -math.expm1(second - first)


def analytic_gaussian_sigma(epsilon: float, delta: float, sensitivity: float) -> float:
    """Smallest ``sigma`` (to 1e-12 relative, rounded up) with ``analytic_gaussian_delta <= delta``.

    delta(sigma) decreases in sigma, so bisection on a bracketing interval finds the calibration; the
    target is tightened by a factor 1 - 1e-9 to absorb rounding in the two normal tails.

    >>> sigma = analytic_gaussian_sigma(1.0, 1e-5, 1.0)
    >>> analytic_gaussian_delta(sigma, 1.0, 1.0) <= 1e-5 < analytic_gaussian_delta(0.999 * sigma, 1.0, 1.0)
    True
    """
    for value, name in ((epsilon, "epsilon"), (delta, "delta"), (sensitivity, "sensitivity")):
        if isinstance(value, bool) or not isinstance(value, numbers.Real):
            raise ArgumentTypeError(f"{name} must be a real number, got {value!r}.")
    target = delta * (1 - 1e-9)
    lo, hi = 0.0, sensitivity
    while analytic_gaussian_delta(hi, sensitivity, epsilon) > target:
        lo, hi = hi, 2 * hi
    while hi - lo > 1e-12 * hi:
        mid = (lo + hi) / 2
        if mid > 0 and analytic_gaussian_delta(mid, sensitivity, epsilon) <= target:
            hi = mid
        else:
            lo = mid
    return hi


class Gaussian(Mechanism):
    """(epsilon, delta)-DP release of real values with analytically calibrated Gaussian noise.

    * Neighbour relation: any two datasets whose answers differ by at most ``sensitivity`` in the L2 norm.
    * Privacy loss: ``ApproxDP(epsilon, delta)``.
    * Noise: ``sigma`` is calibrated (Balle-Wang) for the sensitivity times ``1 + 2**-8``; the answer is
      rounded to a grid ``2**k`` with ``sqrt(d) 2**k <= 2**-8 sensitivity`` (which the reserve covers:
      rounded answers differ by at most ``sensitivity / 2**k + sqrt(d)`` steps in L2), and exact discrete
      Gaussian noise with variance parameter ``sigma^2 / 4**k`` (rounded up to a multiple of the proposal
      scale, see :meth:`grid`) is added. One sensitivity spans at least 256 grid steps, and at that
      resolution the discrete Gaussian's exact delta (Canonne-Kamath-Steinke 2020, Thm. 7) stays below the
      claimed delta: ``tests/test_gaussian_calibration.py`` checks this for 75 (epsilon, delta,
      sensitivity) settings at d = 1 and the worst shifts at d = 2 and 4; the tightest ratio is 0.99996.

    >>> m = Gaussian(sensitivity=1, epsilon=1, delta=1e-5)
    >>> m.sigma == analytic_gaussian_sigma(1.0, 1e-5, 1 + 2**-8)
    True
    """

    def __init__(self, *, sensitivity: Number, epsilon: Number, delta: Number) -> None:
        check_positive(sensitivity, "sensitivity")
        check_positive(epsilon, "epsilon")
        self._loss = ApproxDP(epsilon, delta)
        if self._loss.delta == 0:
            raise ArgumentError("the Gaussian mechanism needs delta > 0; use Laplace for pure epsilon-DP.")
        self._sensitivity = as_fraction(sensitivity, "sensitivity")
        reserved = float(self._sensitivity * (1 + GRID_SLACK))
        self.sigma = analytic_gaussian_sigma(float(self._loss.epsilon), float(self._loss.delta), reserved)

    @property
    def sensitivity(self) -> float:
        return float(self._sensitivity)

    @property
    def epsilon(self) -> float:
        return float(self._loss.epsilon)

    @property
    def delta(self) -> float:
        return float(self._loss.delta)

    @property
    def privacy_loss(self) -> ApproxDP:
        return self._loss

    @property
    def ledger_loss(self) -> PrivacyLoss:
        """The declared (epsilon, delta) with a zCDP curve for rdp books: the answers, on the grid, differ by
        at most ``sensitivity (1 + 2**-8) / 2**k`` steps in L2 and the noise is a discrete Gaussian of
        variance parameter at least ``sigma^2 / 4**k`` steps, so a release is
        ``rho = (sensitivity (1 + 2**-8))^2 / (2 sigma^2)``-zCDP (Canonne, Kamath and Steinke 2020, Thm.
        14), whatever the grid. (PLD books account it by its declared loss.)

        >>> m = Gaussian(sensitivity=1, epsilon=1, delta=1e-5)
        >>> round(float(m.ledger_loss.curve.rho), 5)  # converts back to epsilon 1.09 at delta 1e-5
        0.03593
        """
        from ..accounting.curves import Concentrated, MechanismLoss  # here: LDP clients load no ledger

        reserved = self._sensitivity * (1 + GRID_SLACK)
        return MechanismLoss(self._loss, Concentrated(reserved**2 / (2 * Fraction(self.sigma) ** 2)))

    def grid(self, size: int) -> tuple[int, int, int]:
        """``(k, sigma2, t)`` for ``size`` values: grid exponent, integer variance parameter in grid steps,
        and the sampler's proposal scale ``t`` -- a power of two near sigma that divides ``sigma2``
        (``sigma2`` is rounded up to a multiple of ``t``, adding at most a factor 1 + 1/sigma)."""
        room = self._sensitivity * GRID_SLACK
        k = granularity_exponent(float(room) / math.sqrt(size))
        while Fraction(4) ** k * size > room**2:  # exact check of sqrt(d) 2**k <= room
            k -= 1
        exact_sigma2 = Fraction(self.sigma) ** 2 / Fraction(4) ** k
        t = 2 ** granularity_exponent(math.sqrt(float(exact_sigma2)))
        sigma2 = t * math.ceil(exact_sigma2 / t)
        if sigma2 >= 2**60:
            raise ArgumentError(f"an answer of {size} values is too large for the exact Gaussian sampler.")
        return k, sigma2, t

    def release(self, value: ArrayLike, rng: Rng = None) -> Any:
        arr = check_values(value)
        k, sigma2, t = self.grid(max(arr.size, 1))
        return as_output(grid_gaussian(arr, k, sigma2, t, resolve_source(rng)), value)

    def error_bound(self, beta: float) -> float:
        """``a`` with ``Pr(|y_i - x_i| > a) <= beta``: the discrete Gaussian is sub-Gaussian,
        ``Pr(|Z| >= z) <= 2 exp(-z^2 / (2 sigma^2))`` (CKS 2020, Prop. 25), plus half a grid step."""
        beta = check_beta(beta)
        k, sigma2, _ = self.grid(1)
        sigma_real = math.ldexp(math.sqrt(sigma2), k)
        return sigma_real * math.sqrt(2 * math.log(2 / beta)) + math.ldexp(1.0, k - 1)

    def failure_probability(self, tolerance: float) -> float:
        """Upper bound on ``Pr(|y_i - x_i| > tolerance)``, inverse to :meth:`error_bound`: the sub-Gaussian
        tail ``2 exp(-(tolerance - 2**(k-1))^2 / (2 sigma^2))`` (CKS 2020, Prop. 25), capped at 1.

        >>> m = Gaussian(sensitivity=1, epsilon=1, delta=1e-5)
        >>> m.failure_probability(m.error_bound(0.05)) <= 0.05 * (1 + 1e-12)
        True
        """
        tolerance = check_tolerance(tolerance)
        k, sigma2, _ = self.grid(1)
        excess = tolerance - math.ldexp(1.0, k - 1)
        if excess <= 0:
            return 1.0
        z = excess / math.ldexp(math.sqrt(sigma2), k)
        return min(1.0, 2 * math.exp(-z * z / 2))

    @property
    def variance(self) -> float:
        """Upper bound on the noise variance (a discrete Gaussian's variance is below its sigma^2)."""
        k, sigma2, _ = self.grid(1)
        return math.ldexp(float(sigma2), 2 * k)


class DiscreteGaussian(Mechanism):
    """rho-zCDP release of integers with discrete Gaussian noise, ``sigma^2 = sensitivity^2 / (2 rho)``.

    * Neighbour relation: any two datasets whose integer answers differ by at most ``sensitivity`` in L2.
    * Privacy loss: ``ZCDP(rho)`` (CKS 2020, Thm. 14; exact, for any number of coordinates).
    * Noise: exact discrete Gaussian; sigma^2 is rounded up to a rational with parts below 2**48 if needed.

    >>> DiscreteGaussian(sensitivity=1, rho=0.5).sigma2
    1.0
    """

    def __init__(self, *, sensitivity: Number, rho: Number) -> None:
        check_positive(sensitivity, "sensitivity")
        check_positive(rho, "rho")
        self._loss = ZCDP(rho)
        self.sensitivity = float(as_fraction(sensitivity, "sensitivity"))
        sigma2 = as_fraction(sensitivity, "sensitivity") ** 2 / (2 * self._loss.rho)
        self._num, self._den = exact_ratio(sigma2, "sigma2")

    @property
    def rho(self) -> float:
        return float(self._loss.rho)

    @property
    def sigma2(self) -> float:
        return self._num / self._den

    @property
    def privacy_loss(self) -> ZCDP:
        return self._loss

    def release(self, value: ArrayLike, rng: Rng = None) -> Any:
        source = resolve_source(rng)
        return release_integers(value, lambda n: exact.discrete_gaussian(self._num, self._den, n, source))

    def error_bound(self, beta: float) -> float:
        """Largest integer below ``sigma sqrt(2 ln(2/beta))`` (sub-Gaussian tail, CKS 2020, Prop. 25)."""
        beta = check_beta(beta)
        return float(math.floor(math.sqrt(2 * self.sigma2 * math.log(2 / beta))))

    def failure_probability(self, tolerance: float) -> float:
        """Upper bound ``2 exp(-j^2 / (2 sigma^2))`` on ``Pr(|Z| > tolerance) = Pr(|Z| >= j)``,
        ``j = floor(tolerance) + 1`` (sub-Gaussian tail, CKS 2020, Prop. 25), capped at 1.

        >>> round(DiscreteGaussian(sensitivity=1, rho=0.5).failure_probability(2), 6)  # 2 e^(-9/2)
        0.022218
        """
        tolerance = check_tolerance(tolerance)
        if tolerance < 0:
            return 1.0
        if math.isinf(tolerance):
            return 0.0
        z = (math.floor(tolerance) + 1) / math.sqrt(self.sigma2)
        return min(1.0, 2 * math.exp(-z * z / 2))

    @property
    def variance(self) -> float:
        """Upper bound ``sigma^2`` on the noise variance."""
        return self.sigma2
