"""Accuracy planning: how large an error to expect, and a warning when a large one is too likely.

Seed 000, ch. 8 states the Laplace accuracy theorem,
``Pr(|y - q(D)| > (Delta / epsilon) ln(1/beta)) <= beta``, works the example of a mean over ``n = 1000``
records (sensitivity ``1/n``) at ``epsilon = 0.001`` -- the error exceeds 1 with probability about 0.38 --
and asks for a warning when the failure probability for the tolerated error is large. Each noise has a
trio of functions here, all keyword-only:

* ``*_error(...)`` -- the error ``a`` exceeded with probability at most ``beta``;
* ``*_failure_probability(...)`` -- the probability that the error exceeds ``tolerance``;
* ``*_epsilon_for(...)`` -- the smallest epsilon that keeps that probability at or below ``beta``.

These describe the ideal noise (continuous Laplace, discrete Laplace of scale ``Delta/epsilon``, continuous
Gaussian with Balle-Wang calibration) and are meant for planning a budget. kakeibo's own mechanisms add a
little to the noise (grid rounding, a reserved slack); their ``failure_probability(tolerance)`` method
includes it, and :func:`check_accuracy` uses that.

>>> round(laplace_failure_probability(sensitivity=1 / 1000, epsilon=0.001, tolerance=1), 4)
0.3679
"""

from __future__ import annotations

import math
import warnings
from typing import Protocol

import numpy as np
from numpy.typing import ArrayLike
from scipy.special import ndtr, ndtri

from ..errors import ArgumentError, ArgumentTypeError
from ..privacy import Number, as_fraction, positive_fraction
from .base import check_beta
from .gaussian import analytic_gaussian_sigma

__all__ = [
    "AccuracyWarning",
    "UnresolvedBiasWarning",
    "check_accuracy",
    "gaussian_epsilon_for",
    "gaussian_error",
    "gaussian_failure_probability",
    "geometric_epsilon_for",
    "geometric_error",
    "geometric_failure_probability",
    "geometric_sum_error",
    "laplace_epsilon_for",
    "laplace_error",
    "laplace_failure_probability",
]

#: Relative margin by which computed epsilons are rounded up, so that the tolerance is met despite
#: floating-point rounding in the formulas.
_UP = 1 + 1e-12


class AccuracyWarning(UserWarning):
    """The error of a release exceeds the tolerated one with a probability above the accepted level."""


class UnresolvedBiasWarning(AccuracyWarning):
    """What a release's limits or bounds drop is not measured to below its noise: its bias *may* exceed the
    noise, and its interval then covers the bounded answer only.

    Why it fires on most releases whose bounds are chosen or checked: a warning that fires, with probability
    ``1 - beta``, whenever the true bias exceeds the noise must also fire with probability at least ``(1 -
    beta) e^-epsilon`` on every neighbour of such a table (it is computed from the release's own
    ``epsilon``-DP outputs), and a table with one heavy enough person added is always such a table. Only a
    declared largest contribution (``max_rows_bound``, a column's upper bound) near the chosen threshold lets
    the measurement bound the drop, and silences it. Filter it by its category to keep the warnings of a
    *measured* bias above the noise (plain :class:`AccuracyWarning`)."""


class SupportsFailureProbability(Protocol):
    """Anything that bounds the probability of an error above a tolerance, such as a kakeibo mechanism."""

    def failure_probability(self, tolerance: float) -> float: ...


def _delta(value: Number) -> float:
    frac = as_fraction(value, "delta")
    if not 0 < frac < 1:
        raise ArgumentError(f"delta must lie strictly between 0 and 1, got {float(frac)}.")
    return float(frac)


# --- Laplace ---------------------------------------------------------------------------------------------


def laplace_error(*, sensitivity: Number, epsilon: Number, beta: float) -> float:
    """``(Delta / epsilon) ln(1/beta)``: Laplace noise of scale ``Delta / epsilon`` exceeds it with
    probability exactly ``beta`` (seed 000, ch. 8).

    >>> round(laplace_error(sensitivity=1, epsilon=0.5, beta=0.05), 4)  # 2 ln 20
    5.9915
    """
    scale = positive_fraction(sensitivity, "sensitivity") / positive_fraction(epsilon, "epsilon")
    return float(scale) * -math.log(check_beta(beta))


def laplace_failure_probability(*, sensitivity: Number, epsilon: Number, tolerance: Number) -> float:
    """``Pr(|Laplace(Delta/epsilon)| > tolerance) = exp(-tolerance epsilon / Delta)``.

    Seed 000 ch. 8: the mean of 1000 records at epsilon 0.001 misses by more than 1 with probability e^-1.

    >>> laplace_failure_probability(sensitivity=1 / 1000, epsilon=0.001, tolerance=1) == math.exp(-1)
    True
    """
    ratio = (
        positive_fraction(tolerance, "tolerance")
        * positive_fraction(epsilon, "epsilon")
        / positive_fraction(sensitivity, "sensitivity")
    )
    return math.exp(-float(ratio))


def laplace_epsilon_for(*, sensitivity: Number, tolerance: Number, beta: float) -> float:
    """Smallest epsilon with ``Pr(|error| > tolerance) <= beta``: ``(Delta / tolerance) ln(1/beta)``.

    >>> round(laplace_epsilon_for(sensitivity=1 / 1000, tolerance=1, beta=0.05), 6)  # ln(20) / 1000
    0.002996
    """
    per_unit = positive_fraction(sensitivity, "sensitivity") / positive_fraction(tolerance, "tolerance")
    return float(per_unit) * -math.log(check_beta(beta)) * _UP


# --- Geometric (discrete Laplace) ------------------------------------------------------------------------


def _geometric_log_tail(ratio: float, j: int) -> float:
    """``ln Pr(|Z| >= j) = ln(2 q^j / (1 + q))`` for ``j >= 1`` and discrete Laplace with ``q = e^-ratio``."""
    return math.log(2) - j * ratio - math.log1p(math.exp(-ratio))


def geometric_failure_probability(*, sensitivity: Number, epsilon: Number, tolerance: Number) -> float:
    """Exact ``Pr(|Z| > tolerance) = 2 q^j / (1 + q)`` for discrete Laplace noise ``Z`` of scale
    ``Delta/epsilon`` (``q = exp(-epsilon/Delta)``, ``j = floor(tolerance) + 1``; Ghosh, Roughgarden and
    Sundararajan 2009).

    >>> round(geometric_failure_probability(sensitivity=1, epsilon=1, tolerance=2), 6)
    0.072795
    """
    ratio = float(positive_fraction(epsilon, "epsilon") / positive_fraction(sensitivity, "sensitivity"))
    tol = as_fraction(tolerance, "tolerance")
    if tol < 0:
        raise ArgumentError(f"tolerance must be non-negative, got {float(tol)}.")
    return min(1.0, math.exp(_geometric_log_tail(ratio, math.floor(tol) + 1)))


def geometric_error(*, sensitivity: Number, epsilon: Number, beta: float) -> float:
    """Least integer ``m`` with ``Pr(|Z| > m) <= beta`` (exact discrete tail; the same figure as
    :meth:`Geometric.error_bound <kakeibo.mechanisms.Geometric.error_bound>` when the scale is exact).

    >>> geometric_error(sensitivity=1, epsilon=1, beta=0.05)
    3.0
    """
    ratio = float(positive_fraction(epsilon, "epsilon") / positive_fraction(sensitivity, "sensitivity"))
    beta = check_beta(beta)
    log_beta = math.log(beta)
    # Pr(|Z| > m) = Pr(|Z| >= m + 1); start from the closed form and correct for rounding by exact steps.
    m = max(0, math.ceil((math.log(2) - math.log1p(math.exp(-ratio)) - log_beta) / ratio) - 1)
    while m > 0 and _geometric_log_tail(ratio, m) <= log_beta:
        m -= 1
    while _geometric_log_tail(ratio, m + 1) > log_beta:
        m += 1
    return float(m)


#: the values of ``s`` at which :func:`geometric_sum_error` evaluates its Chernoff bound
CHERNOFF_POINTS = 64


def geometric_sum_error(*, scale: float, weights: ArrayLike, beta: float, step: float = 1.0) -> float:
    """``a`` with ``Pr(|sum_b w_b Z_b| > a) <= beta`` for independent discrete Laplace noises ``Z_b`` of
    ``scale`` (``P(Z = z) ∝ e^(-|z|/scale)``) on a grid of ``step`` (``step * Z_b``), by Chernoff: for every
    ``s`` with ``s w_b step < 1/scale``, ``Pr(sum > a) <= exp(-s a) prod_b M(s w_b)`` with the exact moment
    generating function ``M(u) = (1 - q)^2 / ((1 - q e^(u step)) (1 - q e^(-u step)))``, ``q =
    e^(-1/scale)``; both tails at ``beta / 2`` give ``a = (ln(2/beta) + sum_b ln M(s w_b)) / s``, minimised
    over :data:`CHERNOFF_POINTS` values of ``s`` (each one a valid bound). Tight for many terms; for a few,
    a union bound over each noise's own tail can be smaller (callers take the lesser).

    >>> round(geometric_sum_error(scale=1.0, weights=[1.0] * 100, beta=0.05), 1)  # the sum's sd: 13.6
    37.3
    """
    beta = check_beta(beta)
    w = np.asarray(weights, np.float64)
    w = w[w > 0]
    if w.size == 0:
        return 0.0
    s_max = 1 / (scale * step * float(w.max()))
    s = s_max * (1 - np.geomspace(1e-6, 1 - 1e-9, CHERNOFF_POINTS))[:, None]  # strictly inside (0, s_max)
    v = s * w[None] * step
    one_minus_q = -math.expm1(-1 / scale)
    log_m = 2 * math.log(one_minus_q) - np.log(-np.expm1(v - 1 / scale)) - np.log(-np.expm1(-v - 1 / scale))
    return float(((math.log(2 / beta) + log_m.sum(axis=1)) / s[:, 0]).min())


def geometric_epsilon_for(*, sensitivity: Number, tolerance: Number, beta: float) -> float:
    """Smallest epsilon with ``Pr(|Z| > tolerance) <= beta`` for discrete Laplace noise of scale
    ``Delta/epsilon`` (bisection on the exact tail, which decreases in epsilon; rounded up).

    >>> eps = geometric_epsilon_for(sensitivity=1, tolerance=3, beta=0.05)
    >>> geometric_failure_probability(sensitivity=1, epsilon=eps, tolerance=3) <= 0.05
    True
    """
    delta_1 = positive_fraction(sensitivity, "sensitivity")
    tol = as_fraction(tolerance, "tolerance")
    if tol < 0:
        raise ArgumentError(f"tolerance must be non-negative, got {float(tol)}.")
    log_beta = math.log(check_beta(beta))
    j = math.floor(tol) + 1
    # ratio = epsilon / Delta. At ratio = ln(2/beta)/j the tail is 2 q^j / (1 + q) <= 2 q^j = beta.
    lo, hi = 0.0, (math.log(2) - log_beta) / j
    while hi - lo > 1e-14 * hi:
        mid = (lo + hi) / 2
        if _geometric_log_tail(mid, j) <= log_beta:
            hi = mid
        else:
            lo = mid
    return hi * float(delta_1) * _UP


# --- Gaussian --------------------------------------------------------------------------------------------


def gaussian_error(*, sensitivity: Number, epsilon: Number, delta: Number, beta: float) -> float:
    """``sigma * Phi^-1(1 - beta/2)``: the two-sided error of the analytic Gaussian mechanism (Balle and Wang
    2018) that is exceeded with probability exactly ``beta``.

    >>> sigma = analytic_gaussian_sigma(1.0, 1e-5, 1.0)
    >>> round(gaussian_error(sensitivity=1, epsilon=1, delta=1e-5, beta=0.05) / sigma, 4)  # 97.5% quantile
    1.96
    """
    sigma = _gaussian_sigma(sensitivity, epsilon, delta)
    return sigma * float(-ndtri(check_beta(beta) / 2))


def gaussian_failure_probability(
    *, sensitivity: Number, epsilon: Number, delta: Number, tolerance: Number
) -> float:
    """``Pr(|N(0, sigma^2)| > tolerance) = 2 Phi(-tolerance / sigma)`` with the analytic calibration of sigma.

    >>> sigma = analytic_gaussian_sigma(1.0, 1e-5, 1.0)
    >>> round(gaussian_failure_probability(sensitivity=1, epsilon=1, delta=1e-5, tolerance=sigma), 4)
    0.3173
    """
    sigma = _gaussian_sigma(sensitivity, epsilon, delta)
    return float(2 * ndtr(-float(positive_fraction(tolerance, "tolerance")) / sigma))


def gaussian_epsilon_for(*, sensitivity: Number, delta: Number, tolerance: Number, beta: float) -> float:
    """Smallest epsilon (at the given delta) with ``Pr(|error| > tolerance) <= beta``, analytic Gaussian.

    The largest admissible sigma is ``tolerance / Phi^-1(1 - beta/2)``; the analytic sigma decreases in
    epsilon, so bisection finds the epsilon that reaches it (rounded up). Returns 0.0 when even epsilon -> 0
    meets the tolerance (delta alone then carries the guarantee).

    >>> eps = gaussian_epsilon_for(sensitivity=1, delta=1e-5, tolerance=10, beta=0.05)
    >>> gaussian_error(sensitivity=1, epsilon=eps, delta=1e-5, beta=0.05) <= 10
    True
    """
    sens = float(positive_fraction(sensitivity, "sensitivity"))
    dlt = _delta(delta)
    sigma_max = float(positive_fraction(tolerance, "tolerance")) / float(-ndtri(check_beta(beta) / 2))
    if analytic_gaussian_sigma(0.0, dlt, sens) <= sigma_max:
        return 0.0
    lo, hi = 0.0, 1.0
    while analytic_gaussian_sigma(hi, dlt, sens) > sigma_max:
        lo, hi = hi, 2 * hi
    while hi - lo > 1e-10 * hi:
        mid = (lo + hi) / 2
        if analytic_gaussian_sigma(mid, dlt, sens) <= sigma_max:
            hi = mid
        else:
            lo = mid
    return hi


def _gaussian_sigma(sensitivity: Number, epsilon: Number, delta: Number) -> float:
    sens = float(positive_fraction(sensitivity, "sensitivity"))
    eps = float(positive_fraction(epsilon, "epsilon"))
    return analytic_gaussian_sigma(eps, _delta(delta), sens)


# --- The warning -----------------------------------------------------------------------------------------


def check_accuracy(
    mechanism: SupportsFailureProbability, tolerance: float, max_failure_probability: float
) -> float:
    """The probability that ``mechanism`` misses a coordinate by more than ``tolerance``; warns with an
    :class:`AccuracyWarning` (attributed to the caller's line) when it exceeds ``max_failure_probability``.

    Seed 000 ch. 8: decide how large an error is tolerable, and warn when the matching failure
    probability is large.

    >>> import warnings
    >>> from kakeibo.mechanisms import Laplace
    >>> mean_query = Laplace(sensitivity=1 / 1000, epsilon=0.001)
    >>> with warnings.catch_warnings(record=True) as caught:
    ...     warnings.simplefilter("always")
    ...     p = check_accuracy(mean_query, tolerance=1.0, max_failure_probability=0.05)
    >>> round(p, 3), caught[0].category.__name__
    (0.368, 'AccuracyWarning')
    >>> print(caught[0].message)  # doctest: +ELLIPSIS
    Laplace: the error exceeds 1 with probability up to 0.368, above the accepted 0.05; spend more ...
    """
    if isinstance(tolerance, bool) or not isinstance(tolerance, (int, float)) or not 0 < tolerance < math.inf:
        raise ArgumentError(f"tolerance must be a positive finite number, got {tolerance!r}.")
    limit = check_beta(max_failure_probability, "max_failure_probability")
    if not callable(getattr(mechanism, "failure_probability", None)):
        raise ArgumentTypeError(
            f"mechanism must have a failure_probability(tolerance) method, got {type(mechanism).__name__}."
        )
    failure = mechanism.failure_probability(float(tolerance))
    if failure > limit:
        warnings.warn(
            f"{type(mechanism).__name__}: the error exceeds {tolerance:g} with probability up to "
            f"{failure:.3g}, above the accepted {limit:.3g}; spend more epsilon, tolerate a larger error or "
            "ask a less sensitive query.",
            AccuracyWarning,
            stacklevel=2,
        )
    return failure
