"""Mechanisms: each states its neighbour relation, sensitivity and privacy loss next to its noise.

>>> from kakeibo.mechanisms import Laplace
>>> Laplace(sensitivity=1, epsilon=1).privacy_loss
PureDP(epsilon=Fraction(1, 1))
"""

from __future__ import annotations

from ._base import Mechanism
from .gaussian import DiscreteGaussian, Gaussian, analytic_gaussian_delta, analytic_gaussian_sigma
from .laplace import Geometric, Laplace

__all__ = [
    "DiscreteGaussian",
    "Gaussian",
    "Geometric",
    "Laplace",
    "Mechanism",
    "analytic_gaussian_delta",
    "analytic_gaussian_sigma",
]
