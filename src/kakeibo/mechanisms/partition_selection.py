"""Optimal (epsilon, delta)-DP partition selection (Desfontaines, Voss, Gipson and Mandayam, "Differentially
private partition selection", PoPETs 2022, arXiv 2006.03684).

A GROUP BY over keys that are not public may only release a key (a partition) with a probability that
depends on how many users hold it, and each key must be kept or dropped independently. With ``n`` the number
of distinct users of a key, the keep probability ``pi(n)`` must satisfy, for every ``n >= 1``
(neighbours add or remove one user; ``pi(0) = 0`` because a key nobody holds cannot appear)::

    (a)  pi(n)     <= e^eps pi(n-1) + delta          (b)  pi(n-1)     <= e^eps pi(n) + delta
    (c)  1-pi(n-1) <= e^eps (1-pi(n)) + delta        (d)  1-pi(n)     <= e^eps (1-pi(n-1)) + delta

Both right-hand sides of (a) and (c) grow with ``pi(n-1)``, so the greedy recursion
``pi(n) = min(e^eps pi(n-1) + delta, 1 - e^-eps (1 - delta - pi(n-1)), 1)`` is feasible ((b) and (d) hold
because it is increasing) and bounds every feasible rule from above, key by key (induction on ``n``). This
is the paper's Theorem 1 (Google's differential-privacy library calls it "near-truncated geometric"
partition selection). Solving the two linear recursions gives the closed form, ``c = delta / (e^eps - 1)``::

    pi(n) = c (e^(n eps) - 1)                                      for 1 <= n <= n1
    pi(n) = 1 - (1 - pi(n1) + c) e^(-(n - n1) eps) + c             for n1 < n <= n2
    pi(n) = 1                                                      for n > n2
    n1 = 1 + floor(ln(1 + tanh(eps/2) (1/delta - 1)) / eps)
    n2 = n1 + floor(ln(1 + (e^eps - 1)(1 - pi(n1)) / delta) / eps)

(the first line is the paper's ``delta (e^(n eps) - 1)/(e^eps - 1)``, the second its
``pi(n1) + (1 - pi(n1) + c)(1 - e^(-(n - n1) eps))``). ``n1`` is the last ``n`` whose predecessor has
``pi(n-1) <= (1 - delta) / (e^eps + 1)``, where the two bounds cross; ``n2`` the last with ``pi(n) < 1``.

Shifted by ``c`` the two binding inequalities are pure ratios: (a) is ``P(n) <= e^eps P(n-1)`` for
``P = pi + c`` and (c) is ``Q(n-1) <= e^eps Q(n)`` for ``Q = 1 - pi + c``; the optimum has ``P(n) =
c e^(n eps)`` up to ``n1`` and ``Q(n) = Q(n1) e^(-(n - n1) eps)`` after. This drives the numerics below.
"""

from __future__ import annotations

import math
from decimal import ROUND_FLOOR, Decimal, localcontext
from fractions import Fraction
from typing import Any

import numpy as np
from numpy.typing import ArrayLike, NDArray

from ..errors import ArgumentError, ArgumentTypeError
from ..noise import resolve_source
from ..noise.exact import exact_bernoulli
from ..privacy import ApproxDP, Number, as_fraction
from .base import Mechanism, Rng, as_output, check_integers, check_positive

__all__ = ["PartitionSelection"]

#: The table is the optimum for ``epsilon' - EPSILON_SLACK``; the margin absorbs the float error of every
#: entry (at most ``6 * 2**-42`` relative to ``pi + c`` and to ``1 - pi + c``; see the class).
EPSILON_SLACK = Fraction(1, 2**36)
#: Per-partition epsilon below which float64 cannot hold the table to the precision the ratios need.
MIN_EPSILON = Fraction(1, 2**24)
#: The table is computed with ``min(epsilon', 256)``: any larger epsilon is already meaningless, and a
#: mechanism with a smaller epsilon satisfies every larger one. Likewise ``min(delta', 1/2)``.
MAX_WORKING_EPSILON = Fraction(256)
MAX_WORKING_DELTA = Fraction(1, 2)
#: Smallest per-partition delta accepted (so that every entry stays a normal float64 and the exponents in
#: the error bound stay below ``ln(1e100) ~ 231``).
MIN_DELTA_TEXT = "1e-100"

_PRECISION = 250  # decimal digits for the per-mechanism constants (cancellations lose at most ~115)
_SHRINK = Decimal(1) - Decimal(10) ** -40  # covers the decimal error before rounding a bound down


def _float_down(value: Fraction | Decimal) -> float:
    """The largest float64 that is <= ``value`` (exact comparison)."""
    result = float(value)
    if Fraction(result) > Fraction(value):
        result = math.nextafter(result, -math.inf)
    return result


def _check_max_partitions(value: int) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
        raise ArgumentError(f"max_partitions must be a positive integer, got {value!r}.")
    return int(value)


class PartitionSelection(Mechanism):
    """The optimal (epsilon, delta)-DP choice of which GROUP BY keys to release (Desfontaines et al. 2022,
    Theorem 1), for users who each hold at most ``max_partitions`` (L0) keys.

    * Neighbour relation: add or remove one user, who holds at most L0 keys (contributions bounded to L0
      keys before counting). ``release`` takes, per candidate key, ``n`` = its number of distinct users.
    * Sensitivity: one user moves the user count of at most L0 keys, each by exactly 1; keys are kept
      independently, so the guarantee composes over the L0 keys a user touches.
    * Privacy loss: ``ApproxDP(epsilon, delta)`` per :meth:`release` (the whole set of keys). Each key is
      kept with the optimal one-key rule at ``eps' = epsilon / L0`` and ``delta' = 1 - (1 - delta)^(1/L0)``
      (computed to 250 digits, rounded down). For one pair of neighbours an (eps', delta')-DP mechanism's two
      output laws are ``(1 - delta')`` times an eps'-close pair plus ``delta'`` times anything (the
      decomposition behind optimal composition: Kairouz, Oh and Viswanath 2015; Murtagh and Vadhan 2016);
      so L0 independent keys then give ``L0 eps' = epsilon``
      and ``1 - (1 - delta')^L0 <= delta``. Keys the user does not hold have the same law on both sides.
    * Sampling (exact): each key's coin is ``U < s`` for a uniform real ``U`` read from 64-bit words and
      ``s`` the stored float64 (``pi(n)``, or ``1 - pi(n)`` on the drop side). Only the bits that decide
      the comparison are read, so ``Pr[keep]`` is exactly ``s`` (or ``1 - s``), with full relative
      precision at any magnitude. Rounding ``pi`` down to a multiple of ``2**-53`` instead would NOT be
      safe: at ``eps' = 5``, ``delta' = 1e-17`` it makes ``pi(1) = 0`` but ``pi(2) = 13 * 2**-53``, which
      breaks (a) (``tests/test_partition_selection.py`` shows it).
    * Numerics and why the float table is private: the table stored is the optimum ``pi*`` for the
      *working* parameters ``E = min(eps', 256) - 2**-36`` (rounded down) and ``D = min(delta', 1/2) (e^E -
      1)/(e^(E + 2**-36) - 1)`` (rounded down), with shift ``C = D/(e^E - 1)``. In shifted form ``pi*``
      satisfies ``P(n) <= e^E P(n-1)`` and ``Q(n-1) <= e^E Q(n)`` exactly. Every stored entry is within
      ``rho <= 6 * 2**-42`` of ``pi*`` relative to both ``P`` and ``Q``: ``n < n1`` is ``D e^((n-1)E)
      expm1(-nE)/expm1(-E)`` with exponents below ~231 (``delta' >= 1e-100``), so under 250 ulps, and
      ``pi* <= 1/2`` there; ``n = n1`` is ``pi*(n1)`` computed to 250 digits, stored on its smaller side;
      ``n1 < n <= n2`` stores the drop side ``Q(n1) e^(-(n - n1)E) - C`` with exponents below ~490, so
      under 500 ulps of ``Q``, and ``pi* >= 1/6`` there, so ``Q <= 6P``. Then each ratio of stored values
      is within ``(1 + rho)/(1 - rho) < e^(2**-36)`` of the exact one, so the stored table satisfies
      ``P(n) <= e^(E + 2**-36) P(n-1)`` and ``Q(n-1) <= e^(E + 2**-36) Q(n)`` (and the reverse ratios,
      as ``P*`` increases and ``Q*`` decreases); unshifting with ``C (e^(E + 2**-36) - 1) <= delta'``
      gives (a)-(d) at ``(eps', delta')``, as ``E + 2**-36 <= eps'``. The cost: keep probabilities about
      ``(n + 1/eps') 2**-36`` relative below the exact optimum (e.g. ``pi(1) = D`` instead of ``delta'``).
      ``eps'`` must be at least ``2**-24`` (below that, float64 ratios are too coarse).

    >>> import numpy as np
    >>> m = PartitionSelection(epsilon=1, delta=1e-5)
    >>> m.n1, m.n2, m.users_for(0.5)
    (11, 22, 12)
    >>> [round(float(p), 3) for p in m.keep_probability([0, 1, 10, 12, 14, 23])]
    [0.0, 0.0, 0.128, 0.76, 0.968, 1.0]
    >>> m.release(np.array([0, 5, 40]), rng=np.random.default_rng(0)).tolist()
    [False, False, True]
    >>> m.privacy_loss
    ApproxDP(epsilon=Fraction(1, 1), delta=Fraction(1, 100000))
    """

    additive = False
    neighbour = (
        "add or remove one user (privacy unit), who is counted in at most max_partitions (L0) groups; "
        "each candidate group's input is its number of distinct users"
    )

    def __init__(self, *, epsilon: Number, delta: Number, max_partitions: int = 1) -> None:
        check_positive(epsilon, "epsilon")
        self._epsilon = as_fraction(epsilon, "epsilon")
        self._delta = as_fraction(delta, "delta")
        if not 0 < self._delta < 1:
            raise ArgumentError(f"delta must lie strictly between 0 and 1, got {float(self._delta)}.")
        self._l0 = _check_max_partitions(max_partitions)
        eps_part = self._epsilon / self._l0
        if eps_part < MIN_EPSILON:
            raise ArgumentError(
                f"epsilon / max_partitions = {float(eps_part):.3g} is below 2**-24, too small for partition "
                "selection; raise epsilon or lower max_partitions."
            )
        with localcontext() as ctx:
            ctx.prec = _PRECISION
            # delta' = 1 - (1 - delta)^(1/L0) = -expm1(log1p(-delta) / L0), to 250 digits, rounded down.
            delta_dec = Decimal(self._delta.numerator) / Decimal(self._delta.denominator)
            exact = delta_dec if self._l0 == 1 else -((Decimal(1) - delta_dec).ln() / self._l0).exp() + 1
            if exact < Decimal(MIN_DELTA_TEXT):
                raise ArgumentError(
                    f"delta' = 1 - (1 - delta)^(1/max_partitions) = {float(exact):.3g} is below "
                    f"{MIN_DELTA_TEXT}; raise delta."
                )
            self._delta_part = _float_down(exact * _SHRINK)
            self._eps_part = eps_part
            work_eps = _float_down(min(eps_part, MAX_WORKING_EPSILON) - EPSILON_SLACK)
            E = Decimal(work_eps)
            slack = Decimal(EPSILON_SLACK.numerator) / EPSILON_SLACK.denominator
            cap = Decimal(MAX_WORKING_DELTA.numerator) / MAX_WORKING_DELTA.denominator
            d_cap = min(Decimal(self._delta_part), cap)
            work_delta = _float_down(d_cap * (E.exp() - 1) / ((E + slack).exp() - 1) * _SHRINK)
            D = Decimal(work_delta)
            em1 = E.exp() - 1
            C = D / em1
            tanh_half = em1 / (E.exp() + 1)
            n1 = 1 + int(((1 + tanh_half * (1 / D - 1)).ln() / E).to_integral_value(rounding=ROUND_FLOOR))
            p1 = C * ((n1 * E).exp() - 1)
            q1 = 1 - p1
            n2 = n1 + int(((1 + em1 * q1 / D).ln() / E).to_integral_value(rounding=ROUND_FLOOR))
            self._work_eps, self._work_delta = work_eps, work_delta
            self._n1, self._n2 = n1, n2
            self._shift = float(C)
            self._q1_shifted = float(q1 + C)
            self._n1_drop = bool(p1 > Decimal(1) / 2)
            self._n1_value = float(q1 if self._n1_drop else p1)
        self._expm1_neg = math.expm1(-work_eps)

    # --- parameters ----------------------------------------------------------------------------------------

    @property
    def epsilon(self) -> float:
        return float(self._epsilon)

    @property
    def delta(self) -> float:
        return float(self._delta)

    @property
    def max_partitions(self) -> int:
        return self._l0

    @property
    def epsilon_per_partition(self) -> float:
        """``eps' = epsilon / max_partitions``."""
        return float(self._eps_part)

    @property
    def delta_per_partition(self) -> float:
        """``delta' = 1 - (1 - delta)^(1/max_partitions)``, rounded down to a float64 (so that
        ``1 - (1 - delta')^L0 <= delta`` holds exactly)."""
        return self._delta_part

    @property
    def working_epsilon(self) -> float:
        """``E``: the table is the exact optimum for ``(E, working_delta)`` (see the class docstring)."""
        return self._work_eps

    @property
    def working_delta(self) -> float:
        """``D``, slightly below ``delta_per_partition``."""
        return self._work_delta

    @property
    def n1(self) -> int:
        """Last user count on the geometric branch ``pi(n) = c (e^(n eps) - 1)``."""
        return self._n1

    @property
    def n2(self) -> int:
        """Last user count with keep probability below 1; larger counts are always kept."""
        return self._n2

    @property
    def privacy_loss(self) -> ApproxDP:
        return ApproxDP(self._epsilon, self._delta)

    # --- the table ------------------------------------------------------------------------------------------

    def _coins(self, users: ArrayLike) -> tuple[NDArray[np.bool_], NDArray[np.float64]]:
        """``(drop_side, s)`` per user count: ``Pr[keep] = s`` where ``drop_side`` is False, ``1 - s``
        where it is True; these are the exact probabilities :meth:`release` uses."""
        counts = check_integers(users)
        n = counts.reshape(-1)
        drop = n > self._n1
        value = np.zeros(n.shape, dtype=np.float64)
        low = (n >= 1) & (n < self._n1)
        if np.any(low):
            x = n[low].astype(np.float64)
            E = self._work_eps
            value[low] = self._work_delta * np.exp((x - 1) * E) * (np.expm1(-x * E) / self._expm1_neg)
        at = n == self._n1
        drop[at] = self._n1_drop
        value[at] = self._n1_value
        mid = (n > self._n1) & (n <= self._n2)
        if np.any(mid):
            k = (n[mid] - self._n1).astype(np.float64)
            value[mid] = np.clip(self._q1_shifted * np.exp(-k * self._work_eps) - self._shift, 0.0, 1.0)
        return drop.reshape(counts.shape), value.reshape(counts.shape)

    def keep_probability(self, users: ArrayLike) -> NDArray[np.float64]:
        """``Pr[keep]`` for each user count (float64, same shape; 0 for ``n <= 0``, 1 above :attr:`n2`).

        Exactly the sampler's probability, except that a drop-side entry is shown as ``1 - s`` rounded to
        float64."""
        drop, value = self._coins(users)
        return np.where(drop, 1.0 - value, value)

    def users_for(self, probability: float) -> int:
        """The least user count whose keep probability is at least ``probability`` (in (0, 1]).

        >>> PartitionSelection(epsilon=1, delta=1e-5).users_for(0.99)
        16
        """
        if (
            isinstance(probability, bool)
            or not isinstance(probability, (int, float))
            or not (0 < probability <= 1)
        ):
            raise ArgumentError(f"probability must lie in (0, 1], got {probability!r}.")
        target = Fraction(probability)

        def reaches(n: int) -> bool:
            drop, value = self._coins(np.array([n]))
            s = Fraction(float(value[0]))
            return (1 - s if drop[0] else s) >= target

        low, high = 0, self._n2 + 1  # reaches(high) always; the table increases with n
        while high - low > 1:
            middle = (low + high) // 2
            low, high = (low, middle) if reaches(middle) else (middle, high)
        return high

    # --- release --------------------------------------------------------------------------------------------

    def release(self, value: ArrayLike, rng: Rng = None) -> Any:
        """Keep mask: ``True`` where the key with that many distinct users is released (a Python bool for a
        scalar count, a bool array of the same shape otherwise)."""
        drop, s = self._coins(value)
        coins = exact_bernoulli(s, resolve_source(rng))
        return as_output(coins != drop, value)

    def error_bound(self, beta: float) -> float:
        raise ArgumentTypeError(
            "partition selection releases a set of keys, not a noisy value; use keep_probability(n) or "
            "users_for(probability) for its utility."
        )

    def failure_probability(self, tolerance: float) -> float:
        raise ArgumentTypeError(
            "partition selection releases a set of keys, not a noisy value; a key with n users is dropped "
            "with probability 1 - keep_probability(n)."
        )
