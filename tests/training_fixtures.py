"""What the audits of DP-SGD (test_dpsgd) and DP-FedAvg (test_fedavg) share: the canary loss, a one-step
plan, and the epsilon the accountant claims for one Poisson-subsampled Gaussian step."""

from __future__ import annotations

from fractions import Fraction

from kakeibo.accounting import Composed, MechanismLoss, SubsampledGaussian
from kakeibo.ml.dpsgd import TrainingPlan
from kakeibo.privacy import ApproxDP


def canary_loss(flat, x, y):  # type: ignore[no-untyped-def]
    """A loss whose gradient is ``x * y``: rows with x = 0 contribute nothing, a canary row (x = 1, y = 5)
    contributes 5 before clipping."""
    return flat[0] * x[0] * y


def one_step_plan(noise_multiplier: float, rate: float) -> TrainingPlan:
    """A plan of one step at ``noise_multiplier`` and sampling rate ``rate`` (its charge is not used)."""
    return TrainingPlan(
        Fraction(noise_multiplier),
        Fraction(rate),
        1,
        MechanismLoss(ApproxDP(1, 1e-5), Composed([(SubsampledGaussian(noise_multiplier, rate), 1)])),
    )


def claimed_epsilon(noise_multiplier: float, rate: float, delta: float) -> float:
    """The PLD epsilon at ``delta`` of one step, the larger of its two directions."""
    remove, add = SubsampledGaussian(noise_multiplier, rate).distributions(1e-4)
    return max(remove.epsilon(delta), add.epsilon(delta))
