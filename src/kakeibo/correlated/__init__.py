"""Privacy of correlated data: Bayesian differential privacy (Yang, Sato and Nakagawa, "Bayesian
Differential Privacy on Correlated Data", SIGMOD 2015; seed 001).

When records are correlated and an adversary knows only some of them, a mechanism that is epsilon-DP can
leak more than epsilon about a target record. Bayesian DP leakage (BDPL, Def. 4.1) measures that leakage
for an adversary ``A(i, K)`` (target ``i``, known records ``K``):

* :mod:`.bdpl` -- exact BDPL for discrete joint distributions (:func:`bdpl` for the Laplace sum,
  :func:`adversary_leakage` for any query and output model, the sup over all adversaries for small ``n``,
  the prior/posterior odds view, and :func:`bdp_laplace_scale`).
* :mod:`.gaussian` -- the Gaussian correlation model (Def. 5.1) over a weighted graph with a prior: every
  weak adversary's leakage coefficient (Theorem 5.1), Algorithm 1, and the Laplace scale
  ``(M / eps)(1 + max l)`` (eq. 26) that bounds every adversary's leakage by ``eps``.
* :mod:`.repro` -- the paper's Sec. 6 experiments (``kakeibo repro bdp``).
"""

from __future__ import annotations

from .bdpl import (
    BeliefUpdate,
    FiniteOutputs,
    GeometricNoise,
    JointDistribution,
    LaplaceNoise,
    Leakage,
    adversary_leakage,
    bdp_laplace_scale,
    bdpl,
    belief_update,
    max_adversary_leakage,
    max_bdpl,
    max_odds_ratio,
)
from .gaussian import ConditionalGaussian, GaussianCorrelationModel, MaxLeakage

__all__ = [
    "BeliefUpdate",
    "ConditionalGaussian",
    "FiniteOutputs",
    "GaussianCorrelationModel",
    "GeometricNoise",
    "JointDistribution",
    "LaplaceNoise",
    "Leakage",
    "MaxLeakage",
    "adversary_leakage",
    "bdp_laplace_scale",
    "bdpl",
    "belief_update",
    "max_adversary_leakage",
    "max_bdpl",
    "max_odds_ratio",
]
