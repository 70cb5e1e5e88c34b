"""Mechanisms: each states its neighbour relation, sensitivity and privacy loss next to its noise.

>>> from kakeibo.mechanisms import Laplace
>>> Laplace(sensitivity=1, epsilon=1).privacy_loss
PureDP(epsilon=Fraction(1, 1))
"""

from __future__ import annotations

from . import sensitivity
from .accuracy import (
    AccuracyWarning,
    UnresolvedBiasWarning,
    check_accuracy,
    gaussian_epsilon_for,
    gaussian_error,
    gaussian_failure_probability,
    geometric_epsilon_for,
    geometric_error,
    geometric_failure_probability,
    laplace_epsilon_for,
    laplace_error,
    laplace_failure_probability,
)
from .base import Mechanism
from .exponential import Exponential
from .gaussian import DiscreteGaussian, Gaussian, analytic_gaussian_delta, analytic_gaussian_sigma
from .laplace import Geometric, Laplace
from .partition_selection import PartitionSelection
from .randomized_response import FrequencyEstimate, RandomizedResponse
from .sensitivity import (
    Neighbour,
    count_sensitivity,
    group_privacy,
    histogram_sensitivity,
    mean_sensitivity,
    sum_sensitivity,
    user_level,
)

__all__ = [
    "AccuracyWarning",
    "DiscreteGaussian",
    "Exponential",
    "FrequencyEstimate",
    "Gaussian",
    "Geometric",
    "Laplace",
    "Mechanism",
    "Neighbour",
    "PartitionSelection",
    "RandomizedResponse",
    "UnresolvedBiasWarning",
    "analytic_gaussian_delta",
    "analytic_gaussian_sigma",
    "check_accuracy",
    "count_sensitivity",
    "gaussian_epsilon_for",
    "gaussian_error",
    "gaussian_failure_probability",
    "geometric_epsilon_for",
    "geometric_error",
    "geometric_failure_probability",
    "group_privacy",
    "histogram_sensitivity",
    "laplace_epsilon_for",
    "laplace_error",
    "laplace_failure_probability",
    "mean_sensitivity",
    "sensitivity",
    "sum_sensitivity",
    "user_level",
]
