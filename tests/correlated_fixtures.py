"""The star used by the statistical audits of Bayesian DP calibration (seed 001, eq. 26)."""

from __future__ import annotations

import numpy as np

from kakeibo.correlated import GaussianCorrelationModel

STAR = [(0, k) for k in range(1, 6)]  # centre 0, leaves 1..5


def star_centre_conditional(tau: float) -> tuple[float, float]:
    """``(slope, spread)`` of the leaves' sum given the centre's value ``v`` under the model on :data:`STAR`
    with prior ``tau``: Normal(slope v, spread^2), from the covariance form with ``np.linalg.inv``."""
    cov = np.linalg.inv(GaussianCorrelationModel.from_edges(STAR, tau=tau).precision.toarray())
    leaves = np.arange(1, 6)
    slope = cov[leaves, 0].sum() / cov[0, 0]
    spread = np.sqrt(
        (cov[np.ix_(leaves, leaves)] - np.outer(cov[leaves, 0], cov[leaves, 0]) / cov[0, 0]).sum()
    )
    return float(slope), float(spread)
