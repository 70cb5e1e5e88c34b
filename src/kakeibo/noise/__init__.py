"""Secure randomness: exact integer samplers over a CSPRNG, and leak-free noise for real values.

``rng=None`` (the default everywhere) draws from an OS-keyed ChaCha20 stream; a seeded
:class:`numpy.random.Generator` is accepted for tests and reproduction.

>>> import numpy as np
>>> from kakeibo.noise import discrete_laplace
>>> x = discrete_laplace(2, size=5, rng=np.random.default_rng(0))
>>> x.dtype, x.shape
(dtype('int64'), (5,))
"""

from __future__ import annotations

import math
import numbers
from fractions import Fraction

import numpy as np
from numpy.typing import NDArray

from ..errors import ArgumentError, ArgumentTypeError
from ..privacy import Number, as_fraction
from . import exact
from ._grid import granularity_exponent, grid_gaussian, grid_laplace, round_to_grid
from .source import GeneratorSource, RandomSource, SecureSource, resolve_source

__all__ = [
    "GeneratorSource",
    "RandomSource",
    "SecureSource",
    "bernoulli_exp",
    "discrete_gaussian",
    "discrete_laplace",
    "exact_ratio",
    "granularity_exponent",
    "grid_gaussian",
    "grid_laplace",
    "resolve_source",
    "round_to_grid",
]

_MAX_PART = 2**48


def exact_ratio(value: Number, name: str) -> tuple[int, int]:
    """``value`` as ``(numerator, denominator)``, exact when both are below 2**48, otherwise rounded *up*
    to the next multiple of 2**-24 (more noise, never less).

    >>> exact_ratio(0.5, "scale"), exact_ratio("1/3", "scale")
    ((1, 2), (1, 3))
    >>> exact_ratio(Fraction(1, 3**40), "scale")  # denominator above 2**48: rounded up
    (1, 16777216)
    """
    frac = as_fraction(value, name)
    if frac <= 0:
        raise ArgumentError(f"{name} must be positive, got {float(frac)}.")
    if frac.numerator >= _MAX_PART or frac.denominator >= _MAX_PART:
        frac = Fraction(math.ceil(frac * 2**24), 2**24)
        if frac.numerator >= _MAX_PART:
            raise ArgumentError(f"{name} = {float(frac)} is too large for the exact samplers (limit 2**24).")
    return frac.numerator, frac.denominator


def _size(size: int | None) -> int:
    """How many draws ``size`` asks for (``None``: one, returned as a scalar); a whole number >= 0."""
    if size is None:
        return 1
    if isinstance(size, bool) or not isinstance(size, numbers.Integral):
        raise ArgumentTypeError(f"size must be a whole number or None, got {size!r}.")
    if size < 0:
        raise ArgumentError(f"size must be >= 0, got {size}.")
    return int(size)


def _shape(draws: NDArray[np.int64], size: int | None) -> NDArray[np.int64] | int:
    return int(draws[0]) if size is None else draws


def discrete_laplace(
    scale: Number, size: int | None = None, rng: np.random.Generator | RandomSource | None = None
) -> NDArray[np.int64] | int:
    """Exact discrete Laplace: ``P(X = x) ∝ exp(-|x| / scale)`` over the integers (CKS 2020, Alg. 2)."""
    num, den = exact_ratio(scale, "scale")
    return _shape(exact.discrete_laplace(num, den, _size(size), resolve_source(rng)), size)


def discrete_gaussian(
    sigma2: Number, size: int | None = None, rng: np.random.Generator | RandomSource | None = None
) -> NDArray[np.int64] | int:
    """Exact discrete Gaussian: ``P(X = x) ∝ exp(-x^2 / (2 sigma2))`` over the integers (CKS 2020, Alg. 3)."""
    num, den = exact_ratio(sigma2, "sigma2")
    return _shape(exact.discrete_gaussian(num, den, _size(size), resolve_source(rng)), size)


def bernoulli_exp(
    gamma: Number, size: int | None = None, rng: np.random.Generator | RandomSource | None = None
) -> NDArray[np.bool_] | bool:
    """Exact Bernoulli(exp(-gamma)) for a rational ``gamma >= 0`` (CKS 2020, Alg. 1).

    ``gamma`` goes through :func:`exact_ratio`, so a gamma whose numerator or denominator reaches 2**48 is
    rounded *up* (the success probability goes down). Callers for whom that direction matters (a privacy
    argument that needs the probability at least exp(-gamma)) must pass a gamma that is exact.

    >>> bool(bernoulli_exp(0, rng=np.random.default_rng(1)))
    True
    """
    frac = as_fraction(gamma, "gamma")
    if frac < 0:
        raise ArgumentError(f"gamma must be non-negative, got {float(frac)}.")
    if frac == 0:
        draws = np.ones(_size(size), dtype=np.bool_)
    else:
        num, den = exact_ratio(frac, "gamma")
        draws = exact.bernoulli_exp(np.full(_size(size), num, dtype=np.int64), den, resolve_source(rng))
    return bool(draws[0]) if size is None else draws
