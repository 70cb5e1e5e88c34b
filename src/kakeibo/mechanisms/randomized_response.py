"""Randomized response: local differential privacy for one client's categorical value.

Each client randomizes their own value before it leaves the device, so nobody -- the collector included --
sees a true value (local DP; seed 003, "Local Differential Privacy: a Tutorial"). Two protocols:

* ``RandomizedResponse(epsilon=..., categories=k)`` -- k-ary generalized randomized response (Warner 1965;
  Kairouz, Oh and Viswanath 2016; Wang, Blocki, Li and Jha 2017, "Locally differentially private protocols
  for frequency estimation", where it is called direct encoding): report the true value with probability
  ``p = e^eps / (e^eps + k - 1)``, otherwise a uniformly random *other* value (each with ``q = p e^-eps``).
* ``RandomizedResponse.two_coin()`` -- the seed's survey protocol: toss a fair coin; on heads answer
  truthfully, on tails toss again and answer "yes" on heads, "no" on tails. So ``P(yes | yes) = 3/4``,
  ``P(yes | no) = 1/4`` and epsilon = ln 3.

The collector turns the reports into unbiased frequency estimates with :meth:`RandomizedResponse.estimate`;
for the two-coin protocol the estimated share of true "yes" is the seed's ``2 (X - 1/4)``, X the share of
"yes" reports.

>>> import numpy as np
>>> rr = RandomizedResponse.two_coin()
>>> reports = rr.release(np.array([True, False, True, True]), rng=np.random.default_rng(0))
>>> reports.dtype, reports.shape
(dtype('bool'), (4,))
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from decimal import Decimal, localcontext
from fractions import Fraction
from typing import Any

import numpy as np
from numpy.typing import ArrayLike, NDArray
from scipy.special import ndtri

from ..errors import ArgumentError, ArgumentTypeError
from ..noise import exact, resolve_source
from ..noise.source import RandomSource
from ..privacy import Number, PrivacyLoss, PureDP, as_fraction
from .base import Mechanism, Rng, as_output, check_beta, check_positive

__all__ = ["FrequencyEstimate", "RandomizedResponse"]

FloatArray = NDArray[np.float64]

#: ln 3 rounded up to the next float: the two-coin protocol's epsilon. ln 3 is irrational and a privacy
#: loss is an exact rational, so the charge is the smallest float above it (never an understatement).
LN3_UP = math.nextafter(math.log(3), math.inf)


@dataclass(frozen=True, eq=False)
class FrequencyEstimate:
    """Estimated share of clients holding each category, with the estimator's variance.

    ``frequencies[i] = (n_i / n - q) / (p - q)`` is unbiased for the true share ``f_i`` (it may fall outside
    [0, 1]; clip or project it yourself if you need a distribution). ``variance[i]`` estimates its variance
    ``p_i' (1 - p_i') / (n (p - q)^2)``, ``p_i' = f_i p + (1 - f_i) q`` (Wang et al. 2017), by plugging in the
    observed share ``n_i / n`` with the unbiased factor ``1 / (n - 1)``. That formula is exact when the
    clients are a random sample of a population with shares ``f``; for a fixed set of clients the variance
    is smaller by ``f_i (1 - f_i) / n``, so the figure is conservative either way.

    ``privacy_loss``: the loss of each client's report (local DP; the client's ledger holds the charge).
    """

    frequencies: FloatArray
    variance: FloatArray
    n: int
    privacy_loss: PrivacyLoss

    def confidence_interval(self, alpha: float = 0.05) -> tuple[FloatArray, FloatArray]:
        """Per-category normal-approximation interval ``frequencies +- z_(1-alpha/2) sqrt(variance)``
        (asymptotic coverage ``1 - alpha`` per category; the central limit theorem applies to ``n_i``).
        """
        z = float(-ndtri(check_beta(alpha, "alpha") / 2))
        half = z * np.sqrt(self.variance)
        return self.frequencies - half, self.frequencies + half


class RandomizedResponse(Mechanism):
    """epsilon-local-DP randomization of categorical values in ``{0, ..., k-1}`` (booleans when k = 2).

    * Neighbour relation (local): any two values of one client. Each report hides which of the ``k``
      categories its client holds, from everyone including the collector; ``release`` randomizes every
      client independently, so an array of values is many clients, each protected on their own.
    * Privacy loss: ``PureDP(epsilon)`` per client and report.
    * Sampling, k-ary (exact, no floating point): first decide *keep* or *other*, then draw the other value
      uniformly among the ``k - 1`` (exact uniform integers). Keep must have probability
      ``p = 1 / (1 + e^-theta)`` with ``theta = epsilon - ln(k - 1)``. Rejection with fair proposals does
      it with exact Bernoulli(exp(-|theta|)) coins (Canonne, Kamath and Steinke 2020, Alg. 1): propose keep
      or other with probability 1/2 each; for ``theta >= 0`` accept keep always and other with
      ``e^-theta``, for ``theta < 0`` accept other always and keep with ``e^theta``; repeat until accepted.
      Each round accepts with probability at least 1/2, whatever ``k`` and ``epsilon``.
    * Exactness of epsilon: ``theta`` must be rational, so kakeibo uses a rational ``theta' <= theta``
      (``ln(k-1)`` bounded above to 50 digits with :mod:`decimal`, the difference rounded down to a
      multiple of 2**-61 when its parts are too large). The report then has loss
      ``ln(k-1) + theta' <= epsilon`` (checked exactly at construction); ``p`` and ``q`` describe the coins
      actually used. For ``k = 2``, ``theta = epsilon`` is used exactly whenever epsilon is a rational with
      numerator and denominator below 2**62 (as the usual values are).
    * Sampling, two-coin: two fair bits per client from the word stream (exact 3/4 and 1/4).

    A single report carries no additive noise, so :meth:`error_bound` refuses; accuracy lives in
    :meth:`estimate` (``.variance``, ``.confidence_interval``) and :meth:`estimator_variance`.

    >>> import numpy as np
    >>> rr = RandomizedResponse(epsilon=1, categories=4)
    >>> round(rr.p, 4), round(rr.q, 4)  # e / (e + 3) and 1 / (e + 3)
    (0.4754, 0.1749)
    >>> reports = rr.release(np.array([0, 1, 2, 3, 3]), rng=np.random.default_rng(0))
    >>> reports.shape, bool(reports.min() >= 0 and reports.max() <= 3)
    ((5,), True)
    """

    additive = False
    neighbour = (
        "local: any two values of a single client (each report hides which category its client holds, "
        "even from the collector)"
    )

    def __init__(self, *, epsilon: Number, categories: int = 2) -> None:
        check_positive(epsilon, "epsilon")
        eps = as_fraction(epsilon, "epsilon")
        if eps >= 2**40:
            raise ArgumentError(
                f"epsilon = {float(eps):g} is too large to be meaningful for randomized response."
            )
        k = _check_categories(categories)
        log_others = _ln_upper(k - 1)
        theta = _round_down(eps - log_others)
        if not log_others + theta <= eps:
            raise AssertionError("randomized-response calibration exceeded epsilon; this is a bug in kakeibo")
        if log_others + theta <= 0:
            raise ArgumentError(
                f"epsilon = {float(eps):g} is too small for the exact randomized-response sampler."
            )
        self._configure(k=k, loss=PureDP(eps), theta=theta, protocol="grr")

    @classmethod
    def two_coin(cls) -> RandomizedResponse:
        """The seed's two-coin survey protocol (k = 2): truth on heads, otherwise a fair yes/no.

        ``P(yes | yes) = 3/4`` and ``P(yes | no) = 1/4``, so the loss is ln 3, charged as ``LN3_UP``.

        >>> rr = RandomizedResponse.two_coin()
        >>> rr.p, rr.q, rr.epsilon > math.log(3)
        (0.75, 0.25, True)
        """
        rr = cls.__new__(cls)
        rr._configure(k=2, loss=PureDP(LN3_UP), theta=None, protocol="two_coin")
        return rr

    def _configure(self, *, k: int, loss: PureDP, theta: Fraction | None, protocol: str) -> None:
        self._k = k
        self._loss = loss
        self._theta = theta
        self._protocol = protocol
        if theta is None:
            self._p, self._q, self._spread = 0.75, 0.25, 0.5
        else:
            odds = math.exp(-float(theta))  # (k - 1) q / p = e^-theta
            self._p = 1 / (1 + odds)
            self._q = self._p * odds / (k - 1)
            # p - q = (1 - e^-eps') / (1 + e^-theta) with eps' = ln(k - 1) + theta, without cancellation
            self._spread = -math.expm1(-(math.log(k - 1) + float(theta))) / (1 + odds)

    def __repr__(self) -> str:
        if self._protocol == "two_coin":
            return "RandomizedResponse.two_coin()"
        return f"RandomizedResponse(epsilon={self.epsilon!r}, categories={self._k})"

    @property
    def categories(self) -> int:
        return self._k

    @property
    def epsilon(self) -> float:
        return float(self._loss.epsilon)

    @property
    def protocol(self) -> str:
        """``"grr"`` (k-ary generalized randomized response) or ``"two_coin"``."""
        return self._protocol

    @property
    def p(self) -> float:
        """Probability that a report equals its client's true value."""
        return self._p

    @property
    def q(self) -> float:
        """Probability that a report equals one given value other than the true one."""
        return self._q

    @property
    def privacy_loss(self) -> PureDP:
        return self._loss

    def release(self, value: ArrayLike, rng: Rng = None) -> Any:
        """One randomized report per client: same shape as ``value`` (booleans in, booleans out)."""
        truth, is_bool = self._check_values(value, "values")
        source = resolve_source(rng)
        flat = truth.ravel()
        if self._theta is None:
            reports = _two_coin(flat, source)
        else:
            reports = _generalized(flat, self._k, self._theta, source)
        out: NDArray[Any] = reports.reshape(truth.shape)
        return as_output(out.astype(np.bool_) if is_bool else out, value)

    def estimate(self, reports: ArrayLike) -> FrequencyEstimate:
        """Unbiased shares of the categories among the clients who sent ``reports`` (Wang et al. 2017).

        >>> rr = RandomizedResponse.two_coin()
        >>> est = rr.estimate([1, 1, 1, 0])  # X = 3/4 "yes" reports
        >>> float(est.frequencies[1]) == 2 * (0.75 - 0.25)
        True
        """
        values, _ = self._check_values(reports, "reports")
        n = values.size
        if n < 2:
            raise ArgumentError("estimating frequencies needs at least two reports.")
        observed = np.bincount(values.ravel(), minlength=self._k) / n
        spread = self._spread
        frequencies = (observed - self._q) / spread
        variance = observed * (1 - observed) / ((n - 1) * spread**2)
        frequencies.setflags(write=False)
        variance.setflags(write=False)
        return FrequencyEstimate(frequencies=frequencies, variance=variance, n=n, privacy_loss=self._loss)

    def estimator_variance(self, *, n: int, frequency: float, fixed_clients: bool = False) -> float:
        """Exact variance of one category's estimate from ``n`` reports when its true share is ``frequency``.

        * ``fixed_clients=False``: clients are a random sample of a population with that share, so each
          report is that category with probability ``p' = f p + (1 - f) q``: ``p' (1 - p') / (n (p - q)^2)``.
        * ``fixed_clients=True``: a fixed set of clients, a share ``f`` of whom hold it:
          ``(f p (1 - p) + (1 - f) q (1 - q)) / (n (p - q)^2)`` (Wang et al. 2017, Sec. 4).

        >>> rr = RandomizedResponse.two_coin()
        >>> rr.estimator_variance(n=100, frequency=0.0)  # (1/4)(3/4) / (100 (1/2)^2)
        0.0075
        """
        if isinstance(n, bool) or not isinstance(n, (int, np.integer)):
            raise ArgumentTypeError(f"n must be an integer, not {type(n).__name__}.")
        if n < 1:
            raise ArgumentError(f"n must be at least 1, got {int(n)}.")
        f = float(frequency)
        if not 0 <= f <= 1:
            raise ArgumentError(f"frequency must lie in [0, 1], got {frequency!r}.")
        p, q = self._p, self._q
        if fixed_clients:
            per_report = f * p * (1 - p) + (1 - f) * q * (1 - q)
        else:
            shown = f * p + (1 - f) * q
            per_report = shown * (1 - shown)
        return per_report / (int(n) * self._spread**2)

    def error_bound(self, beta: float) -> float:
        raise ArgumentTypeError(
            "a randomized-response report carries no additive noise; use "
            "estimate(reports).confidence_interval(alpha) for the error of the estimated frequencies."
        )

    def failure_probability(self, tolerance: float) -> float:
        raise ArgumentTypeError(
            "a randomized-response report carries no additive noise; use "
            "estimator_variance(...) or estimate(reports).confidence_interval(alpha) instead."
        )

    def _check_values(self, value: ArrayLike, name: str) -> tuple[NDArray[np.int64], bool]:
        arr = np.asarray(value)
        kind = arr.dtype.kind
        if kind == "b":
            if self._k != 2:
                raise ArgumentError(f"boolean {name} need categories=2, but this protocol has {self._k}.")
            return arr.astype(np.int64), True
        if kind == "f":
            if not np.all(np.isfinite(arr)) or not np.all(arr == np.rint(arr)):
                raise ArgumentError(f"{name} must be whole category indices in 0..{self._k - 1}.")
        elif kind not in "iu":
            raise ArgumentTypeError(
                f"{name} must be integer category indices (or booleans), got an array of {arr.dtype}."
            )
        bad = (arr < 0) | (arr >= self._k)
        if np.any(bad):
            raise ArgumentError(
                f"{name} must be category indices in 0..{self._k - 1}; got {arr[bad].ravel()[0]!r}."
            )
        return arr.astype(np.int64), False


def _check_categories(categories: int) -> int:
    if isinstance(categories, bool) or not isinstance(categories, (int, np.integer)):
        raise ArgumentTypeError(f"categories must be an integer, not {type(categories).__name__}.")
    if not 2 <= categories < 2**62:
        raise ArgumentError(f"categories must be at least 2, got {int(categories)}.")
    return int(categories)


def _ln_upper(m: int) -> Fraction:
    """A rational upper bound on ``ln(m)`` (exact 0 for ``m = 1``): the correctly rounded 60-digit decimal
    logarithm plus 10**-50."""
    if m == 1:
        return Fraction(0)
    with localcontext() as ctx:
        ctx.prec = 60
        value = Decimal(m).ln()
    return Fraction(value) + Fraction(1, 10**50)


def _round_down(value: Fraction) -> Fraction:
    """``value`` itself when its numerator and denominator are below 2**62, else the next smaller multiple
    of a power of two chosen so that they are."""
    if abs(value.numerator) < 2**62 and value.denominator < 2**62:
        return value
    bits = 61 - math.ceil(abs(value)).bit_length()
    return Fraction(math.floor(value * 2**bits), 2**bits)


def _two_coin(truth: NDArray[np.int64], source: RandomSource) -> NDArray[np.int64]:
    """Two fair bits per client: the low bit says heads (answer truthfully), the next bit is the fallback."""
    words = source.words(truth.size)
    heads = (words & np.uint64(1)).astype(np.bool_)
    fallback = ((words >> np.uint64(1)) & np.uint64(1)).astype(np.int64)
    return np.where(heads, truth, fallback)


def _generalized(
    truth: NDArray[np.int64], k: int, theta: Fraction, source: RandomSource
) -> NDArray[np.int64]:
    """Exact k-ary randomized response (see :class:`RandomizedResponse`) in vectorised rounds over clients."""
    num, den = abs(theta.numerator), theta.denominator
    keep = np.empty(truth.size, dtype=np.bool_)
    pending = np.arange(truth.size)
    while pending.size:
        m = pending.size
        propose_keep = (source.words(m) & np.uint64(1)).astype(np.bool_)
        # The proposal that needs the coin: "other" when theta > 0, "keep" when theta < 0.
        coin_side = ~propose_keep if theta > 0 else propose_keep
        accepted = np.ones(m, dtype=np.bool_)
        todo = np.flatnonzero(coin_side)
        if todo.size and num:
            accepted[todo] = exact.bernoulli_exp(np.full(todo.size, num, dtype=np.int64), den, source)
        keep[pending[accepted]] = propose_keep[accepted]
        pending = pending[~accepted]
    out: NDArray[np.int64] = truth.copy()
    changed = np.flatnonzero(~keep)
    other = exact.uniform_below(k - 1, changed.size, source)
    out[changed] = other + (other >= truth[changed])  # uniform over the k - 1 values other than the truth
    return out
