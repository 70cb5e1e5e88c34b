"""Privacy-loss values and the conversions between them.

A privacy loss is what a measurement costs under its neighbour relation. kakeibo knows four kinds:

* :class:`PureDP` -- epsilon-DP (Dwork et al. 2006).
* :class:`ApproxDP` -- (epsilon, delta)-DP.
* :class:`ZCDP` -- rho-zero-concentrated DP (Bun and Steinke 2016).
* :class:`RDPCurve` -- Renyi DP (Mironov 2017): epsilon(alpha) on a finite grid of orders.

Budgets are added and compared with exact rational arithmetic (:class:`fractions.Fraction`). A float is
read as the shortest decimal that prints as it (``0.01`` means 1/100, as the user wrote it), so 100
charges of 0.01 fill a budget of 1 exactly. This is sound because every mechanism calibrates its noise
against that same rational (in exact arithmetic, or in floats with a margin far larger than the 1e-17
gap to the binary value). Comparison is the product order: ``a <= b`` holds only when every
coordinate of ``a`` is at most the matching coordinate of ``b``; two losses can be incomparable.

Conversions (all sound, i.e. they never understate the loss):

* pure -> approximate: epsilon-DP is (epsilon, 0)-DP.
* pure -> zCDP: epsilon-DP implies (epsilon^2 / 2)-zCDP (Bun and Steinke 2016, Prop. 1.4).
* zCDP -> approximate: the conversion of Canonne, Kamath and Steinke 2020 (Cor. 13),
  ``delta = inf_{a>1} exp((a-1)(a rho - eps)) / a * (1 - 1/a)^(a-1)``, which is never worse than
  Bun and Steinke's ``eps = rho + 2 sqrt(rho ln(1/delta))`` (also exposed).
* RDP -> approximate: ``eps = eps(a) + ln((a-1)/a) - (ln delta + ln a)/(a-1)`` minimised over the
  curve's orders (Canonne, Kamath and Steinke 2020, Prop. 12; Balle et al. 2020).
"""

from __future__ import annotations

import math
import numbers
import re
import sys
from dataclasses import dataclass
from decimal import Decimal
from fractions import Fraction

from .errors import ArgumentError, ArgumentTypeError

__all__ = [
    "ZCDP",
    "ApproxDP",
    "Number",
    "PrivacyLoss",
    "PureDP",
    "RDPCurve",
    "as_fraction",
    "format_fraction",
    "fraction_text",
    "positive_fraction",
    "zcdp_delta",
    "zcdp_epsilon",
    "zcdp_epsilon_bun_steinke",
]

Number = int | float | Fraction | str


#: The longest number kakeibo reads from text, and the largest exponent: ``Fraction("1e10000000")`` would
#: expand ten million digits first, seconds of work an analyst could ask for repeatedly.
MAX_NUMBER_CHARS = 100
MAX_EXPONENT = 1000
#: The magnitudes :func:`as_fraction` accepts besides 0. Above: the largest double as written (its shortest
#: decimal, which is how a float is read), because every parameter is also used as a float (a scale, a
#: message), and ``float()`` of anything much larger raises OverflowError far from the parameter that
#: caused it. Below: ``10**-MAX_EXPONENT``, the limit text already had, for every type (an exact ``delta``
#: of ``1e-400`` stays meaningful in the ledger's exact sums).
MAX_MAGNITUDE = Fraction(repr(sys.float_info.max))
MIN_MAGNITUDE = Fraction(1, 10**MAX_EXPONENT)
#: ``MAX_MAGNITUDE`` as a decimal exponent (1.8e308): a Decimal whose ``adjusted()`` exponent is above it
#: is out of range, one at it is compared exactly.
_MAX_DECIMAL_EXPONENT = 308


def is_short_number(text: str) -> bool:
    """Whether ``text`` is short enough to be read as an exact number (checked before any arithmetic).

    >>> is_short_number("2.5e-3"), is_short_number("1e10000000"), is_short_number("1" * 101)
    (True, False, False)
    """
    exponent = re.search(r"[eE]\s*([+-]?[0-9]+)", text)
    return len(text) <= MAX_NUMBER_CHARS and (
        exponent is None or abs(int(exponent.group(1)[:8])) <= MAX_EXPONENT
    )


def as_fraction(value: Number | Decimal, name: str) -> Fraction:
    """Convert ``value`` to an exact :class:`Fraction`, refusing NaN, infinities and magnitudes outside
    ``[MIN_MAGNITUDE, MAX_MAGNITUDE]`` (0 is always accepted) with one sentence, an
    :class:`~kakeibo.ArgumentError` (a ValueError).

    Floats are read as the shortest decimal that round-trips to them:

    >>> as_fraction(0.01, "epsilon"), as_fraction(0.5, "epsilon")
    (Fraction(1, 100), Fraction(1, 2))
    >>> as_fraction("1/3", "epsilon")
    Fraction(1, 3)

    Every kind of number is checked before it is expanded, from what costs nothing to read: a Decimal's
    digit count and exponent (``Decimal("1e-30000000")`` would otherwise build a 30-million-digit
    denominator, half a minute of work), a string's length and exponent; an int or a Fraction exists
    already, and comparing it with the bounds takes time linear in its size:

    >>> as_fraction(10**400, "epsilon")
    Traceback (most recent call last):
    ...
    kakeibo.errors.ArgumentError: epsilon must be finite, 0 or of magnitude between 1e-1000 and the \
largest double (~1.8e308), written in at most 100 characters.
    """
    if isinstance(value, bool):
        raise ArgumentTypeError(f"{name} must be a number, not a bool.")
    if isinstance(value, numbers.Real) and not isinstance(value, numbers.Rational):  # floats, numpy floats
        as_float = float(value)
        if not math.isfinite(as_float):
            raise _out_of_range(name)
        return Fraction(repr(as_float))  # a finite double is within the bounds
    if isinstance(value, Decimal):
        if not value.is_finite():
            raise _out_of_range(name)
        if not value.is_zero() and (
            len(value.as_tuple().digits) > MAX_NUMBER_CHARS
            or not -MAX_EXPONENT <= value.adjusted() <= _MAX_DECIMAL_EXPONENT
        ):
            raise _out_of_range(name)
    if isinstance(value, str) and not is_short_number(value):
        raise _out_of_range(name)
    if isinstance(value, numbers.Integral):  # numpy integers too, whose fixed width products would overflow
        value = int(value)
    try:
        exact = Fraction(value)  # cheap now: ints and Fractions exist already, text and Decimals are short
    except (TypeError, ValueError, ZeroDivisionError) as exc:
        raise ArgumentError(f"{name} must be a finite number, got {value!r}.") from exc
    if exact and not MIN_MAGNITUDE <= abs(exact) <= MAX_MAGNITUDE:  # products by the bounds: linear time
        raise _out_of_range(name)
    return exact


def _out_of_range(name: str) -> ArgumentError:
    """The one sentence for every number :func:`as_fraction` refuses by its value (it quotes none: a huge
    int cannot even be printed)."""
    return ArgumentError(
        f"{name} must be finite, 0 or of magnitude between 1e-{MAX_EXPONENT} and the largest double "
        f"(~1.8e308), written in at most {MAX_NUMBER_CHARS} characters."
    )


def format_fraction(value: Fraction) -> str:
    """A short, honest rendering: exact when short (``0.01``, ``1/3``), else ``~`` and 6 digits.

    >>> format_fraction(Fraction(1, 100)), format_fraction(Fraction(1, 3)), format_fraction(Fraction(0.1))
    ('0.01', '1/3', '~0.1')
    """
    if value.denominator == 1:
        return str(value.numerator)
    text = f"{float(value):.12g}"
    if Fraction(text) == value:
        return text
    if value.denominator < 10**6:
        return f"{value.numerator}/{value.denominator}"
    return f"~{float(value):.6g}"


def positive_fraction(value: Number, name: str) -> Fraction:
    """``value`` as an exact :class:`Fraction` (:func:`as_fraction`), refused unless it is above 0."""
    frac = as_fraction(value, name)
    if frac <= 0:
        raise ArgumentError(f"{name} must be positive, got {float(frac)}.")
    return frac


def fraction_text(value: Fraction) -> str:
    """The ``"num/den"`` text a ledger stores an exact value as (it reads back and hashes the same forever).

    >>> fraction_text(Fraction(1, 100000))
    '1/100000'
    """
    return f"{value.numerator}/{value.denominator}"


def _non_negative(value: Number, name: str) -> Fraction:
    frac = as_fraction(value, name)
    if frac < 0:
        raise ArgumentError(f"{name} must be non-negative, got {float(frac)}.")
    return frac


class PrivacyLoss:
    """Base class of the privacy-loss values. Instances are immutable and hashable."""

    def to_approx(self, delta: Number = 0) -> ApproxDP:
        """The tightest (epsilon, delta)-DP guarantee this loss implies at the given delta."""
        raise NotImplementedError


@dataclass(frozen=True)
class PureDP(PrivacyLoss):
    """epsilon-differential privacy: ``Pr[M(D) in S] <= exp(epsilon) Pr[M(D') in S]`` for neighbours.

    >>> PureDP(0.5) + PureDP(0.25)
    PureDP(epsilon=Fraction(3, 4))
    """

    epsilon: Fraction

    def __init__(self, epsilon: Number) -> None:
        object.__setattr__(self, "epsilon", _non_negative(epsilon, "epsilon"))

    def __str__(self) -> str:
        return f"epsilon={format_fraction(self.epsilon)}"

    def __add__(self, other: PureDP) -> PureDP:
        if not isinstance(other, PureDP):
            return NotImplemented
        return PureDP(self.epsilon + other.epsilon)

    def __mul__(self, k: int) -> PureDP:
        return PureDP(self.epsilon * k)

    __rmul__ = __mul__

    def __le__(self, other: PureDP) -> bool:
        if not isinstance(other, PureDP):
            return NotImplemented
        return self.epsilon <= other.epsilon

    def __lt__(self, other: PureDP) -> bool:
        if not isinstance(other, PureDP):
            return NotImplemented
        return self.epsilon < other.epsilon

    def to_approx(self, delta: Number = 0) -> ApproxDP:
        return ApproxDP(self.epsilon, delta)

    def to_zcdp(self) -> ZCDP:
        """epsilon-DP implies (epsilon^2/2)-zCDP (Bun and Steinke 2016, Prop. 1.4)."""
        return ZCDP(self.epsilon**2 / 2)


@dataclass(frozen=True)
class ApproxDP(PrivacyLoss):
    """(epsilon, delta)-DP: ``Pr[M(D) in S] <= exp(epsilon) Pr[M(D') in S] + delta``.

    Ordered by the product order: neither of (1, 1e-6) and (2, 1e-9) is below the other.

    >>> ApproxDP(1, 1e-6) <= ApproxDP(2, 1e-9), ApproxDP(2, 1e-9) <= ApproxDP(1, 1e-6)
    (False, False)
    """

    epsilon: Fraction
    delta: Fraction

    def __init__(self, epsilon: Number, delta: Number) -> None:
        eps = _non_negative(epsilon, "epsilon")
        dlt = _non_negative(delta, "delta")
        if dlt >= 1:
            raise ArgumentError(f"delta must lie in [0, 1), got {float(dlt)}.")
        object.__setattr__(self, "epsilon", eps)
        object.__setattr__(self, "delta", dlt)

    def __str__(self) -> str:
        return f"(epsilon={format_fraction(self.epsilon)}, delta={format_fraction(self.delta)})"

    def __add__(self, other: ApproxDP) -> ApproxDP:
        if not isinstance(other, ApproxDP):
            return NotImplemented
        total_delta = self.delta + other.delta
        if total_delta >= 1:
            raise ArgumentError("the composed delta reaches 1, so the combined guarantee would be vacuous.")
        return ApproxDP(self.epsilon + other.epsilon, total_delta)

    def __le__(self, other: ApproxDP) -> bool:
        if not isinstance(other, ApproxDP):
            return NotImplemented
        return self.epsilon <= other.epsilon and self.delta <= other.delta

    def __lt__(self, other: ApproxDP) -> bool:
        if not isinstance(other, ApproxDP):
            return NotImplemented
        return self <= other and self != other

    def to_approx(self, delta: Number = 0) -> ApproxDP:
        if as_fraction(delta, "delta") < self.delta:
            raise ArgumentError(
                f"an (epsilon, {float(self.delta)})-DP loss cannot be stated at a smaller delta."
            )
        return ApproxDP(self.epsilon, delta)


@dataclass(frozen=True)
class ZCDP(PrivacyLoss):
    """rho-zCDP: ``D_alpha(M(D) || M(D')) <= rho * alpha`` for every order alpha > 1.

    >>> ZCDP(0.25) + ZCDP(0.25)
    ZCDP(rho=Fraction(1, 2))
    """

    rho: Fraction

    def __init__(self, rho: Number) -> None:
        object.__setattr__(self, "rho", _non_negative(rho, "rho"))

    def __str__(self) -> str:
        return f"rho={format_fraction(self.rho)}"

    def __add__(self, other: ZCDP) -> ZCDP:
        if not isinstance(other, ZCDP):
            return NotImplemented
        return ZCDP(self.rho + other.rho)

    def __le__(self, other: ZCDP) -> bool:
        if not isinstance(other, ZCDP):
            return NotImplemented
        return self.rho <= other.rho

    def __lt__(self, other: ZCDP) -> bool:
        if not isinstance(other, ZCDP):
            return NotImplemented
        return self.rho < other.rho

    def to_approx(self, delta: Number = 0) -> ApproxDP:
        dlt = float(as_fraction(delta, "delta"))
        if not 0 < dlt < 1:
            raise ArgumentError("converting zCDP to (epsilon, delta)-DP needs delta in (0, 1).")
        return ApproxDP(zcdp_epsilon(float(self.rho), dlt), delta)

    def to_rdp(self, orders: tuple[float, ...] | None = None) -> RDPCurve:
        """rho-zCDP is the RDP curve ``eps(alpha) = rho * alpha``."""
        grid = orders or DEFAULT_ORDERS
        return RDPCurve(grid, tuple(float(self.rho) * a for a in grid))


#: The usual grid of Renyi orders (the RDP books' too): dense where a conversion at delta ~ 1e-5 to 1e-9
#: usually finds its best order, sparse above.
DEFAULT_ORDERS: tuple[float, ...] = (
    1.25, 1.5, 1.75, 2.0, 2.25, 2.5, 3.0, 3.5, 4.0, 4.5, 5.0, 5.5, 6.0, 7.0, 8.0, 9.0, 10.0, 11.0, 12.0, 14.0,
    16.0, 20.0, 24.0, 28.0, 32.0, 48.0, 64.0, 128.0, 256.0, 512.0, 1024.0,
)  # fmt: skip


@dataclass(frozen=True)
class RDPCurve(PrivacyLoss):
    """Renyi DP on a grid of orders: ``D_alpha(M(D) || M(D')) <= epsilons[i]`` at ``alpha = orders[i]``.

    Curves on the same grid compose by pointwise addition (Mironov 2017, Prop. 1). Values are floats:
    RDP is an analysis tool whose conversions already involve transcendental functions.

    >>> c = RDPCurve((2.0, 4.0), (0.5, 1.0))
    >>> (c + c).epsilons
    (1.0, 2.0)
    """

    orders: tuple[float, ...]
    epsilons: tuple[float, ...]

    def __post_init__(self) -> None:
        if len(self.orders) != len(self.epsilons) or not self.orders:
            raise ArgumentError("an RDP curve needs the same, non-zero number of orders and epsilons.")
        if any(not (math.isfinite(a) and a > 1) for a in self.orders):
            raise ArgumentError("every Renyi order must be a finite number greater than 1.")
        if any(not (math.isfinite(e) and e >= 0) for e in self.epsilons):
            raise ArgumentError("every Renyi epsilon must be finite and non-negative.")

    def __add__(self, other: RDPCurve) -> RDPCurve:
        if not isinstance(other, RDPCurve):
            return NotImplemented
        if self.orders != other.orders:
            raise ArgumentError("RDP curves compose only on the same grid of orders.")
        return RDPCurve(self.orders, tuple(a + b for a, b in zip(self.epsilons, other.epsilons, strict=True)))

    def __le__(self, other: RDPCurve) -> bool:
        if not isinstance(other, RDPCurve):
            return NotImplemented
        return self.orders == other.orders and all(
            a <= b for a, b in zip(self.epsilons, other.epsilons, strict=True)
        )

    def to_approx(self, delta: Number = 0) -> ApproxDP:
        """Canonne-Kamath-Steinke 2020, Prop. 12, minimised over the curve's orders."""
        dlt = float(as_fraction(delta, "delta"))
        if not 0 < dlt < 1:
            raise ArgumentError("converting RDP to (epsilon, delta)-DP needs delta in (0, 1).")
        best = min(
            e + math.log1p(-1 / a) - (math.log(dlt) + math.log(a)) / (a - 1)
            for a, e in zip(self.orders, self.epsilons, strict=True)
        )
        return ApproxDP(max(best, 0.0), delta)


def zcdp_epsilon_bun_steinke(rho: float, delta: float) -> float:
    """Bun and Steinke 2016, Prop. 1.3: rho-zCDP implies (rho + 2 sqrt(rho ln(1/delta)), delta)-DP.

    >>> round(zcdp_epsilon_bun_steinke(0.5, 1e-6), 4)
    5.7565
    """
    return rho + 2 * math.sqrt(rho * math.log(1 / delta))


def zcdp_delta(rho: float, epsilon: float) -> float:
    """Smallest delta with rho-zCDP => (epsilon, delta)-DP by Canonne-Kamath-Steinke 2020, Cor. 13."""
    if rho == 0:
        return 0.0

    def log_delta(alpha: float) -> float:
        return (alpha - 1) * (alpha * rho - epsilon) - math.log(alpha) + (alpha - 1) * math.log1p(-1 / alpha)

    # The exponent is convex in alpha; its minimiser lies near (epsilon + rho) / (2 rho) + 1.
    upper = max(2.0, (epsilon + rho) / rho + 2)
    from scipy import (
        optimize,
    )  # here, not at the top: scipy.optimize loads scipy.sparse (LDP clients need neither)

    res = optimize.minimize_scalar(log_delta, bounds=(1.0 + 1e-9, upper), method="bounded")
    return min(1.0, math.exp(min(float(res.fun), log_delta(upper))))


def zcdp_epsilon(rho: float, delta: float) -> float:
    """Smallest epsilon with ``zcdp_delta(rho, epsilon) <= delta`` (bisection, rounded up).

    Never larger than Bun and Steinke's bound:

    >>> zcdp_epsilon(0.5, 1e-6) <= zcdp_epsilon_bun_steinke(0.5, 1e-6)
    True
    """
    if rho == 0:
        return 0.0
    lo, hi = 0.0, zcdp_epsilon_bun_steinke(rho, delta)
    if zcdp_delta(rho, lo) <= delta:
        return 0.0
    for _ in range(100):
        mid = (lo + hi) / 2
        if zcdp_delta(rho, mid) <= delta:
            hi = mid
        else:
            lo = mid
    return hi
