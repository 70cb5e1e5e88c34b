"""Private selection: the exponential mechanism, run as permute-and-flip with exact coins.

Given one utility score per candidate, the exponential mechanism (McSherry and Talwar 2007) picks a candidate
whose score is close to the best while hiding which dataset produced the scores. kakeibo implements it as
**permute-and-flip** (McKenna and Sheldon 2020, "Permute-and-Flip: A new mechanism for differentially
private selection"): visit the candidates in a uniformly random order and stop at the first candidate ``r``
that passes a coin of probability ``exp(-epsilon (u* - u_r) / (2 Delta))``, where ``u*`` is the best score.
It is epsilon-DP, its expected score is never below the exponential mechanism's (and up to twice as close
to the best), and it is equivalent to report-noisy-max with exponential noise (Ding et al. 2021).
"""

from __future__ import annotations

import math
from fractions import Fraction
from typing import Any

import numpy as np
from numpy.typing import ArrayLike, NDArray

from ..errors import ArgumentError, ArgumentTypeError
from ..noise import exact, resolve_source
from ..noise.source import RandomSource
from ..privacy import Number, PureDP, as_fraction
from .base import Mechanism, Rng, check_beta, check_positive, check_tolerance

__all__ = ["Exponential"]

#: Share of epsilon reserved for rounding the coins' exponents up to the grid 2**-m (see the class docstring).
EPSILON_SLACK = Fraction(1, 2**20)
#: Exponents beyond this many nats are capped (a coin of probability exp(-2**62) is drawn instead of a
#: smaller one); capping the score gap is 1-Lipschitz, so the privacy argument is unchanged.
_GAMMA_CAP = 2**62


class Exponential(Mechanism):
    """epsilon-DP selection of one candidate index by permute-and-flip, with exact (rational) coins.

    * Neighbour relation: any two datasets on which every candidate's utility differs by at most
      ``utility_sensitivity`` (the caller derives that bound for their scores under their own relation:
      add/remove or change one record or user).
    * Privacy loss: ``PureDP(epsilon)`` per :meth:`release`.
    * Mechanism: candidate ``r`` with gap ``a_r = u* - u_r`` passes its coin with probability
      ``exp(-gamma_r)``, ``gamma_r = ceil(eps' a_r / (2 Delta) * 2**m) / 2**m``, where
      ``eps' = epsilon (1 - 2**-20)`` and ``m`` is the least integer with ``2**-m <= epsilon 2**-22``.
      Utilities are converted to exact rationals (a float is a dyadic rational), so ``gamma_r`` is exact and
      the coin is the exact Bernoulli(exp(-gamma)) of Canonne, Kamath and Steinke 2020 (Alg. 1): no
      floating-point ``exp`` is involved. (``epsilon`` and ``utility_sensitivity`` are the rationals of
      :func:`~kakeibo.privacy.as_fraction`; a sensitivity understated by less than a relative 2**-21 is
      still covered, since the loss scales with it and ``eps' + 2**(1-m) <= epsilon (1 - 2**-21)``.)

    Privacy with the rounding. With ``g = 2 Delta 2**-m / eps'``, the rounded coins are exactly those of
    permute-and-flip at ``eps'`` run on the scores ``v_r = u* - g ceil(a_r / g)``, whose best score is still
    ``u*``. For neighbouring utilities ``u, w`` with gaps ``a, b``, the difference
    ``v_r(u) - v_r(w) = (u* - w*) - g (ceil(a_r/g) - ceil(b_r/g))``
    lies strictly within ``g`` of ``(u* - w*) - (a_r - b_r) = u_r - w_r``, so the scores ``v`` have
    sensitivity below ``Delta + g``. Permute-and-flip at ``eps'`` calibrated for ``Delta`` is therefore
    ``eps' (Delta + g) / Delta = eps' + 2**(1-m)``-DP, and ``eps' + 2**(1-m) <= epsilon (1 - 2**-20 + 2**-21)
    < epsilon`` (checked in exact arithmetic at construction). Capping ``gamma`` at 2**62 nats caps the
    gaps, which is 1-Lipschitz in them and changes nothing above.

    Sampling. Permute-and-flip stops at the first success among independent coins visited in a uniformly
    random order, so its output is a uniformly random element of the set of candidates whose coins succeed
    (the coins do not depend on the order). kakeibo flips every candidate's coin in one vectorised batch and
    picks uniformly among the successes; a best candidate has ``gamma = 0``, so the set is never empty.

    Accuracy: see :meth:`utility_error_bound`. The output is an index, not a noisy value, so
    :meth:`error_bound` and :meth:`failure_probability` refuse.

    >>> import numpy as np
    >>> m = Exponential(utility_sensitivity=1, epsilon=1)
    >>> m.privacy_loss
    PureDP(epsilon=Fraction(1, 1))
    >>> m.release([3.0, 10.0, 4.0], rng=np.random.default_rng(0))  # index 1 wins with probability ~0.96
    1
    """

    additive = False
    neighbour = (
        "datasets on which every candidate's utility differs by at most `utility_sensitivity` (the caller "
        "derives that bound under their neighbour relation: add/remove or change one record or user)"
    )

    def __init__(self, *, utility_sensitivity: Number, epsilon: Number) -> None:
        check_positive(utility_sensitivity, "utility_sensitivity")
        check_positive(epsilon, "epsilon")
        self._sensitivity = as_fraction(utility_sensitivity, "utility_sensitivity")
        self._epsilon = as_fraction(epsilon, "epsilon")
        self._calibrated = self._epsilon * (1 - EPSILON_SLACK)
        target = self._epsilon / 2**22
        m = max(0, target.denominator.bit_length() - target.numerator.bit_length() - 1)  # 2**-m > target
        while Fraction(1, 2**m) > target:  # at most two steps
            m += 1
        if m > 62:
            raise ArgumentError(
                f"epsilon = {float(self._epsilon):g} is too small for the exact selection sampler "
                "(it needs epsilon >= 2**-40)."
            )
        self._m = m
        if not self._calibrated + 2 * self.gamma_grid <= self._epsilon:
            raise AssertionError("selection calibration exceeded epsilon; this is a bug in kakeibo")
        # gamma_r * 2**m = gap_r * eps' 2**m / (2 Delta): the constant, as an exact ratio.
        self._per_gap = self._calibrated * 2**m / (2 * self._sensitivity)

    @property
    def utility_sensitivity(self) -> float:
        return float(self._sensitivity)

    @property
    def epsilon(self) -> float:
        return float(self._epsilon)

    @property
    def calibrated_epsilon(self) -> Fraction:
        """``eps' = epsilon (1 - 2**-20)``: the epsilon the coins are calibrated with."""
        return self._calibrated

    @property
    def gamma_grid(self) -> Fraction:
        """``2**-m``: the coins' exponents are rounded up to multiples of this."""
        return Fraction(1, 2**self._m)

    @property
    def privacy_loss(self) -> PureDP:
        return PureDP(self._epsilon)

    def release(self, value: ArrayLike, rng: Rng = None) -> int:
        """The index of the selected candidate; ``value`` holds one finite utility per candidate."""
        if np.ndim(value) != 1:
            raise ArgumentError("utilities must be a non-empty 1-D array with one score per candidate.")
        whole, frac = self._exponents(value)
        return int(self._select(whole, frac, 1, resolve_source(rng))[0])

    def release_each(self, utilities: ArrayLike, rng: Rng = None) -> NDArray[np.int64]:
        """One independent selection per row of a 2-D array of utilities (rows: e.g. the groups of a
        GROUP BY; columns: the candidates). Each row's selection is an epsilon-DP release of that row's
        scores; the caller composes them (a user who can change ``k`` rows' scores costs ``k epsilon``).

        >>> m = Exponential(utility_sensitivity=1, epsilon=10)
        >>> m.release_each([[0.0, 100.0, 0.0], [100.0, 0.0, 0.0]], rng=np.random.default_rng(0)).tolist()
        [1, 0]
        """
        arr = np.asarray(utilities)
        if arr.ndim != 2 or arr.shape[0] == 0:
            raise ArgumentError("utilities must be a 2-D array with one row of scores per selection.")
        whole, frac = self._exponents(arr)
        return self._select_rows(whole, frac, resolve_source(rng))

    def utility_error_bound(self, beta: float, *, n_candidates: int) -> float:
        """``a`` with ``Pr(u* - u_out >= a) <= beta`` among ``n_candidates`` candidates:
        ``a = 2 Delta ln((n - 1) / beta) / eps'`` (0 when that is negative or ``n = 1``).

        Every candidate with gap ``>= a`` passes its coin with probability at most
        ``exp(-eps' a / (2 Delta)) = beta / (n - 1)``, and it can be output only if its coin passes; a union
        bound over the ``n - 1`` candidates other than a best one gives ``beta``. This is the exponential
        mechanism's guarantee ``Pr(u* - u_out >= 2 Delta (ln n + t) / epsilon) <= e^-t`` (McSherry and Talwar
        2007; Dwork and Roth 2014, Thm. 3.11), slightly sharpened.

        >>> m = Exponential(utility_sensitivity=1, epsilon=1)
        >>> round(m.utility_error_bound(0.05, n_candidates=3), 4)  # 2 ln(40) / (1 - 2**-20)
        7.3778
        """
        n = _check_count(n_candidates)
        beta = check_beta(beta)
        if n == 1:
            return 0.0
        bound = 2 * float(self._sensitivity / self._calibrated) * (math.log(n - 1) - math.log(beta))
        return max(0.0, bound)

    def utility_failure_probability(self, tolerance: float, *, n_candidates: int) -> float:
        """Upper bound ``(n - 1) exp(-eps' tolerance / (2 Delta))`` on ``Pr(u* - u_out >= tolerance)``
        (the bound of :meth:`utility_error_bound` read the other way), capped at 1.

        >>> m = Exponential(utility_sensitivity=1, epsilon=1)
        >>> m.utility_failure_probability(m.utility_error_bound(0.05, n_candidates=3), n_candidates=3) <= 0.05
        True
        """
        n = _check_count(n_candidates)
        tolerance = check_tolerance(tolerance)
        if n == 1 or tolerance == math.inf:
            return 0.0
        if tolerance <= 0:
            return 1.0
        rate = float(self._calibrated / self._sensitivity) / 2
        return min(1.0, (n - 1) * math.exp(-rate * tolerance))

    def error_bound(self, beta: float) -> float:
        raise ArgumentTypeError(
            "the exponential mechanism releases an index, not a noisy value; its accuracy is the utility "
            "loss given by utility_error_bound(beta, n_candidates=...)."
        )

    def failure_probability(self, tolerance: float) -> float:
        raise ArgumentTypeError(
            "the exponential mechanism releases an index, not a noisy value; use "
            "utility_failure_probability(tolerance, n_candidates=...) for the chance of a poor choice."
        )

    # --- internals ---------------------------------------------------------------------------------------

    def _exponents(self, utilities: ArrayLike) -> tuple[NDArray[np.int64], NDArray[np.int64]]:
        """``(whole, frac)`` with ``gamma_r = whole_r + frac_r / 2**m`` for every candidate, exactly (per row
        of a 2-D array, each row against its own best score)."""
        exact_scores, exponent = _exact_scores(utilities)
        best = exact_scores.max(axis=-1, keepdims=True)
        gaps = best - exact_scores  # Python integers: u* - u_r = gaps * 2**exponent
        ratio = self._per_gap * Fraction(2) ** exponent
        scaled = -((-gaps * ratio.numerator) // ratio.denominator)  # ceil(gamma_r * 2**m)
        whole = scaled >> self._m
        capped = whole >= _GAMMA_CAP
        frac = np.where(capped, 0, scaled & (2**self._m - 1))
        whole = np.where(capped, _GAMMA_CAP, whole)
        return whole.astype(np.int64), frac.astype(np.int64)

    def _select(
        self, whole: NDArray[np.int64], frac: NDArray[np.int64], size: int, source: RandomSource
    ) -> NDArray[np.int64]:
        """``size`` independent permute-and-flip selections for the same exponents (one per row)."""
        shape = (size, whole.size)
        return self._select_rows(np.broadcast_to(whole, shape), np.broadcast_to(frac, shape), source)

    def _select_rows(
        self, whole: NDArray[np.int64], frac: NDArray[np.int64], source: RandomSource
    ) -> NDArray[np.int64]:
        """One permute-and-flip selection per row of the 2-D exponents ``(whole, frac)``."""
        size, n = whole.shape
        whole_all, frac_all = whole.ravel(), frac.ravel()
        passed = np.ones(n * size, dtype=np.bool_)
        todo = np.flatnonzero(frac_all)
        if todo.size:
            passed[todo] = exact.bernoulli_exp(frac_all[todo], 2**self._m, source)
        todo = np.flatnonzero(passed & (whole_all > 0))
        if todo.size:  # exp(-whole) as `whole` independent exp(-1) coins, stopped at the first failure
            passed[todo] = exact.bernoulli_exp(whole_all[todo], 1, source)
        table = passed.reshape(size, n)
        successes = table.sum(axis=1)
        pick = exact.uniform_below(successes.astype(np.int64), size, source)
        rank = np.cumsum(table, axis=1) - 1
        chosen: NDArray[np.int64] = np.argmax(table & (rank == pick[:, None]), axis=1).astype(np.int64)
        return chosen


def _check_count(n_candidates: int) -> int:
    if isinstance(n_candidates, bool) or not isinstance(n_candidates, (int, np.integer)):
        raise ArgumentTypeError(f"n_candidates must be an integer, not {type(n_candidates).__name__}.")
    if n_candidates < 1:
        raise ArgumentError(f"n_candidates must be at least 1, got {int(n_candidates)}.")
    return int(n_candidates)


def _exact_scores(utilities: ArrayLike) -> tuple[NDArray[Any], int]:
    """Utilities (1-D, or 2-D with one row per selection) as Python integers ``s`` (an object array) and
    one exponent ``e`` with ``u = s * 2**e`` exactly: integers as they are, floats through their exact
    dyadic value."""
    arr = np.asarray(utilities)
    if arr.ndim not in (1, 2) or arr.size == 0:
        raise ArgumentError("utilities must be a non-empty array with one score per candidate.")
    if arr.dtype.kind in "biu":
        return arr.astype(np.int64 if arr.dtype.kind == "b" else arr.dtype).astype(object), 0
    if arr.dtype.kind == "O":
        try:
            arr = arr.astype(np.float64)
        except (TypeError, ValueError):
            raise ArgumentTypeError("utilities must be real numbers.") from None
    elif arr.dtype.kind != "f":
        raise ArgumentTypeError(f"utilities must be real numbers, got an array of {arr.dtype}.")
    arr = arr.astype(np.float64)
    if not np.all(np.isfinite(arr)):
        raise ArgumentError("every utility must be finite (no NaN or infinity).")
    mantissa, exponent = np.frexp(arr)  # arr = mantissa * 2**exponent, |mantissa| in [0.5, 1) or 0
    digits = np.ldexp(mantissa, 53).astype(np.int64)  # exact: 53-bit integers
    shifts = exponent.astype(np.int64) - 53
    low = int(shifts.min())
    return digits.astype(object) << (shifts - low).astype(object), low
