"""Empirical epsilon of a hypothesis test and its confidence bounds.

A mechanism ``M`` is (epsilon, delta)-DP exactly when every test that tries to tell ``M(D)`` from ``M(D')``
by a rejection region ``S`` has false-positive rate ``FP = Pr[M(D) in S]`` and false-negative rate
``FN = Pr[M(D') not in S]`` with (Kairouz, Oh and Viswanath 2015, "The Composition Theorem for
Differential Privacy", Theorem 2.1; seed 002, slides 32-34)::

    FP + e^eps FN >= 1 - delta    and    e^eps FP + FN >= 1 - delta.

Solving for epsilon gives the empirical epsilon of the test,
``max(log((1 - delta - FP) / FN), log((1 - delta - FN) / FP))``; any epsilon the mechanism satisfies is at
least this large. Replacing FP and FN by *upper* confidence bounds can only shrink both ratios, so the same
formula applied to upper bounds is a lower confidence bound on epsilon.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from numpy.typing import ArrayLike, NDArray
from scipy import stats

from ..errors import ArgumentError, ArgumentTypeError

__all__ = ["clopper_pearson_lower", "clopper_pearson_upper", "empirical_epsilon", "epsilon_terms"]

FloatArray = NDArray[np.float64]


def _check_rate(value: float, name: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float, np.floating, np.integer)):
        raise ArgumentTypeError(f"{name} must be a number, not {type(value).__name__}.")
    rate = float(value)
    if not 0.0 <= rate <= 1.0:
        raise ArgumentError(f"{name} must be a probability in [0, 1], got {value!r}.")
    return rate


def _check_delta(delta: float) -> float:
    rate = _check_rate(delta, "delta")
    if rate >= 1.0:
        raise ArgumentError(f"delta must lie in [0, 1), got {delta!r}.")
    return rate


def _log_ratio(numerator: FloatArray, denominator: FloatArray) -> FloatArray:
    """``log(numerator / denominator)`` with the limits a privacy bound needs: a non-positive numerator
    makes the inequality vacuous (``-inf``); a zero denominator under a positive numerator means no finite
    epsilon satisfies it (``+inf``)."""
    num = np.asarray(numerator, dtype=np.float64)
    den = np.asarray(denominator, dtype=np.float64)
    out = np.full(np.broadcast(num, den).shape, -np.inf)
    positive = num > 0
    zero_den = positive & (den <= 0)
    regular = positive & (den > 0)
    out[zero_den] = np.inf
    with np.errstate(divide="ignore"):
        out[regular] = np.log(np.broadcast_to(num, out.shape)[regular]) - np.log(
            np.broadcast_to(den, out.shape)[regular]
        )
    return out


def epsilon_terms(fp: ArrayLike, fn: ArrayLike, delta: float = 0.0) -> FloatArray:
    """``max(log((1 - delta - FP)/FN), log((1 - delta - FN)/FP))`` element-wise, *not* clipped at 0.

    ``-inf`` means the test says nothing (both inequalities hold for every epsilon >= 0).
    """
    fp_arr = np.asarray(fp, dtype=np.float64)
    fn_arr = np.asarray(fn, dtype=np.float64)
    first = _log_ratio(1.0 - delta - fp_arr, fn_arr)
    second = _log_ratio(1.0 - delta - fn_arr, fp_arr)
    return np.maximum(first, second)


def empirical_epsilon(fp: float, fn: float, *, delta: float = 0.0) -> float:
    """Empirical epsilon of one hypothesis test (Kairouz et al. 2015; seed 002, slide 33).

    ``eps_emp = max(log((1 - FP) / FN), log((1 - FN) / FP))`` for the false-positive rate
    ``FP = Pr[M(D) in S]`` and false-negative rate ``FN = Pr[M(D') not in S]`` of a rejection region ``S``.
    With ``delta > 0`` the (epsilon, delta) version
    ``max(log((1 - delta - FP)/FN), log((1 - delta - FN)/FP))`` is used.

    Edge cases follow the inequalities ``FP + e^eps FN >= 1 - delta`` and ``e^eps FP + FN >= 1 - delta``
    themselves: a zero rate in a denominator under a positive numerator gives ``inf`` (no epsilon passes
    the test), and a non-positive numerator makes that inequality vacuous. The result is clipped at 0,
    because every epsilon is non-negative: a test no better than a coin (``FP + FN >= 1 - delta``) shows
    nothing.

    >>> round(empirical_epsilon(0.1, 0.2), 4)  # max(log(0.9 / 0.2), log(0.8 / 0.1))
    2.0794
    >>> empirical_epsilon(0.3, 0.0), empirical_epsilon(0.5, 0.5), empirical_epsilon(1.0, 0.0)
    (inf, 0.0, 0.0)
    """
    fp_rate = _check_rate(fp, "fp")
    fn_rate = _check_rate(fn, "fn")
    dlt = _check_delta(delta)
    return max(0.0, float(epsilon_terms(fp_rate, fn_rate, dlt)))


def _counts(successes: ArrayLike, trials: int) -> tuple[NDArray[np.int64], int]:
    k = np.asarray(successes, dtype=np.int64)
    n = int(trials)
    if n < 1 or np.any(k < 0) or np.any(k > n):
        raise ArgumentError("Clopper-Pearson bounds need 0 <= successes <= trials and trials >= 1.")
    return k, n


def _check_level(level: float) -> float:
    if not 0.0 < level < 1.0:
        raise ArgumentError(f"the error level of a one-sided bound must lie in (0, 1), got {level!r}.")
    return float(level)


def clopper_pearson_upper(successes: ArrayLike, trials: int, level: float) -> FloatArray:
    """One-sided Clopper-Pearson upper bound: ``Pr[p > bound] <= level`` for ``Binomial(trials, p)`` counts.

    ``bound = Beta.ppf(1 - level, k + 1, n - k)`` (1 when ``k = n``); exact, hence conservative.

    >>> round(float(clopper_pearson_upper(0, 1000, 0.05)), 6)  # the "rule of three": about 3 / n
    0.002991
    """
    k, n = _counts(successes, trials)
    a = _check_level(level)
    out: Any = np.ones(k.shape, dtype=np.float64)
    inner = k < n
    if np.any(inner):
        out[inner] = stats.beta.ppf(1.0 - a, k[inner] + 1, n - k[inner])
    return np.asarray(out, dtype=np.float64)


def clopper_pearson_lower(successes: ArrayLike, trials: int, level: float) -> FloatArray:
    """One-sided Clopper-Pearson lower bound: ``Pr[p < bound] <= level``.

    ``bound = Beta.ppf(level, k, n - k + 1)`` (0 when ``k = 0``).

    >>> round(float(clopper_pearson_lower(1000, 1000, 0.05)), 6)
    0.997009
    """
    k, n = _counts(successes, trials)
    a = _check_level(level)
    out: Any = np.zeros(k.shape, dtype=np.float64)
    inner = k > 0
    if np.any(inner):
        out[inner] = stats.beta.ppf(a, k[inner], n - k[inner] + 1)
    return np.asarray(out, dtype=np.float64)
