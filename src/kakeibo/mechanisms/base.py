"""What every kakeibo mechanism has in common: a neighbour relation, a sensitivity, a privacy loss, and an
accuracy statement, all visible next to the code that adds the noise."""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from collections.abc import Callable
from typing import Any

import numpy as np
from numpy.typing import ArrayLike, NDArray

from ..errors import ArgumentError, ArgumentTypeError
from ..noise import RandomSource
from ..privacy import Number, PrivacyLoss, as_fraction

__all__ = [
    "Mechanism",
    "Rng",
    "as_output",
    "check_beta",
    "check_integers",
    "check_positive",
    "check_tolerance",
    "check_values",
    "release_integers",
]

Rng = np.random.Generator | RandomSource | None


def check_positive(value: Number, name: str) -> float:
    """``value`` as a float after checking it is a finite positive number (one-sentence ValueError)."""
    frac = as_fraction(value, name)
    if frac <= 0:
        raise ArgumentError(f"{name} must be positive, got {float(frac)}.")
    return float(frac)


def check_beta(beta: float, name: str = "beta") -> float:
    """A failure probability in (0, 1)."""
    if isinstance(beta, bool) or not isinstance(beta, (int, float)) or not 0 < beta < 1:
        raise ArgumentError(f"{name} must be a probability strictly between 0 and 1, got {beta!r}.")
    return float(beta)


def check_values(value: ArrayLike) -> NDArray[np.float64]:
    """The query answer as a float array, refusing NaN and infinities (they cannot be noised privately) and
    what is not numbers (with the error numpy gives, as kakeibo's class of the same built-in)."""
    try:
        arr = np.asarray(value, dtype=np.float64)
    except TypeError as error:
        raise ArgumentTypeError(f"the value to release must be numbers ({error}).") from None
    except ValueError as error:
        raise ArgumentError(f"the value to release must be numbers ({error}).") from None
    if not np.all(np.isfinite(arr)):
        raise ArgumentError("the value to release must be finite (no NaN or infinity).")
    return arr


def check_integers(value: ArrayLike) -> NDArray[np.int64]:
    """The query answer as an int64 array; floats are accepted only when they are whole numbers."""
    arr = np.asarray(value)
    if arr.dtype.kind not in "iu":
        as_float = check_values(arr)
        if not np.all(as_float == np.rint(as_float)):
            raise ArgumentError(
                "this mechanism releases integers; round the answer or use a real-valued one."
            )
        arr = as_float
    return arr.astype(np.int64)


def check_tolerance(tolerance: float) -> float:
    """A tolerance for :meth:`Mechanism.failure_probability`: any real number but NaN (negative: certain)."""
    if isinstance(tolerance, bool) or not isinstance(tolerance, (int, float)) or math.isnan(tolerance):
        raise ArgumentError(f"tolerance must be a number, got {tolerance!r}.")
    return float(tolerance)


def release_integers(value: ArrayLike, draw: Callable[[int], NDArray[np.int64]]) -> Any:
    """``value + draw(size)`` for an integer answer (scalar in, Python int out; array in, array out)."""
    ints = check_integers(value)
    noise = draw(max(ints.size, 1))
    return as_output(ints + noise[: ints.size].reshape(ints.shape), value)


def as_output(arr: NDArray[Any], like: ArrayLike) -> Any:
    """Return a Python scalar for scalar input and an array otherwise."""
    return arr.item() if np.ndim(like) == 0 else arr


class Mechanism(ABC):
    """A randomized function with a declared privacy loss under a declared neighbour relation.

    Subclasses state ``neighbour`` (which change to the data is hidden) and ``sensitivity`` (how much the
    query may move under that change, in the norm the mechanism needs); :attr:`privacy_loss` is what a
    ledger is charged for one call of :meth:`release`.
    """

    #: Which pair of datasets the guarantee is about, in words.
    neighbour: str = (
        "datasets whose query answers differ by at most `sensitivity` in the stated norm "
        "(the caller states the neighbour relation that bounds it: add/remove or change one record or user)"
    )
    #: False for mechanisms whose output is not "answer + noise" (a selected index, a randomized report):
    #: they have no additive :meth:`error_bound`.
    additive: bool = True

    @property
    @abstractmethod
    def privacy_loss(self) -> PrivacyLoss:
        """The privacy loss of one :meth:`release`."""

    @property
    def ledger_loss(self) -> PrivacyLoss:
        """What a ledger is charged for one :meth:`release`: :attr:`privacy_loss`, or a
        :class:`~kakeibo.accounting.curves.MechanismLoss` that adds the mechanism's tighter curve for the
        ledger's rdp and pld books. A pure epsilon-DP mechanism needs none: the books account pure DP as
        randomized response, which dominates every epsilon-DP mechanism."""
        return self.privacy_loss

    @abstractmethod
    def release(self, value: ArrayLike, rng: Rng = None) -> Any:
        """The noisy answer: a Python number for scalar input, a numpy array for array input."""

    @abstractmethod
    def error_bound(self, beta: float) -> float:
        """A bound ``a`` with ``Pr(|release(x)_i - x_i| > a) <= beta`` for every coordinate ``i``."""

    @abstractmethod
    def failure_probability(self, tolerance: float) -> float:
        """An upper bound on ``Pr(|release(x)_i - x_i| > tolerance)`` for every coordinate ``i``.

        The inverse of :meth:`error_bound`, from the same tail bound: ``failure_probability(error_bound(beta))
        <= beta`` (up to floating-point rounding). A negative tolerance gives 1.
        """

    def confidence_interval(self, released: ArrayLike, alpha: float = 0.05) -> tuple[Any, Any]:
        """An interval that contains the true value with probability at least ``1 - alpha`` (per coordinate).

        The interval is ``released +- error_bound(alpha)``, so its coverage is exactly the error bound's.
        """
        half = self.error_bound(check_beta(alpha, "alpha"))
        arr = np.asarray(released, dtype=np.float64)
        return as_output(arr - half, released), as_output(arr + half, released)


def log_ratio(numerator: float, beta: float) -> float:
    """``ln(numerator / beta)`` computed without overflow."""
    return math.log(numerator) - math.log(beta)
