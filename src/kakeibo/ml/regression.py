"""Linear regression under ``(epsilon, delta)``-DP, charged to a ledger once per fit, by one of two methods:

* ``method="statistics"`` (the default): noisy sufficient statistics. The squared loss of seed 000,
  chapter 9 (``l_sq``) is minimised from ``Z^T Z`` and ``Z^T y`` alone, so releasing those two with the
  Gaussian mechanism releases the model (the "sufficient statistics perturbation" of Vu and Slavkovic 2009
  and Wang 2018; the noisy normal equations are then solved with a ridge term, post-processing).
* ``method="sgd"``: DP-SGD (:mod:`kakeibo.ml.dpsgd`) on the squared loss ``(w.z - y')^2 / 2`` of the same
  mapped rows and labels, from zero weights; each record's gradient is clipped to ``clip_norm``, and the run
  is charged its subsampled-Gaussian curve. ``benchmarks/bench_regression.py`` measures both.

**Rows and labels** are mapped record by record: ``x -> x / max(norm_bound, ||x||)`` (norm at most 1); with
``fit_intercept`` a constant is appended and the row divided by ``sqrt(2)``, ``z = [x', 1] / sqrt(2)``; the
label is clipped to ``[-y_bound, y_bound]`` and divided by ``y_bound``. **Neighbour relation**: add or
remove one record. **Sensitivity**: one record adds ``(upper(z z^T), z y)`` to the released vector, of L2
norm at most ``sqrt(||z||^4 + ||z||^2 y^2) <= sqrt(2)``; kakeibo's :class:`~kakeibo.mechanisms.Gaussian`
is calibrated for ``SENSITIVITY`` (a rational just above sqrt(2)).

**Solve** (statistics). ``w = (A_+ + lambda I)^-1 b`` with ``A`` the noisy ``Z^T Z`` (symmetrised), ``A_+`` it
with its negative eigenvalues set to 0 (the true matrix is positive semi-definite) and ``b`` the noisy ``Z^T
y``; ``lambda`` is ``regularization`` or, by default, ``2 sqrt(d) sigma``, about the spectral norm of the
symmetric noise (a public function of the parameters). The coefficients map back to the original units.

>>> from sklearn.datasets import load_diabetes
>>> data = load_diabetes()
>>> model = DPLinearRegression(epsilon=8.0, delta=1e-6, norm_bound=0.25, y_bound=350, ledger=False,
...                            random_state=0).fit(data.data, data.target)
>>> model.coef_.shape, model.privacy_loss_
((10,), ApproxDP(epsilon=Fraction(8, 1), delta=Fraction(1, 1000000)))
>>> sgd = DPLinearRegression(epsilon=8.0, delta=1e-6, norm_bound=0.25, y_bound=350, method="sgd",
...                          epochs=2, ledger=False, random_state=0).fit(data.data, data.target)
>>> sgd.coef_.shape, sgd.privacy_loss_.declared.epsilon <= 8
((10,), True)
"""

from __future__ import annotations

import math
from fractions import Fraction
from typing import Any, Literal, TypeVar, get_args

import numpy as np
from numpy.typing import ArrayLike
from sklearn.base import BaseEstimator, RegressorMixin

from ..accounting import Ledger, MechanismLoss
from ..errors import ArgumentError
from ..mechanisms import Gaussian
from ..mechanisms.base import check_positive
from ..noise import RandomSource
from ..privacy import PrivacyLoss
from ._common import (
    FloatMatrix,
    FloatVector,
    RandomState,
    charged_run,
    check_features,
    check_fitted,
    check_ledger,
    clip_rows,
    symmetric,
    unit_rows,
)

__all__ = ["SENSITIVITY", "DPLinearRegression"]

#: An exact rational just above sqrt(2): the L2 sensitivity of one record's statistics.
SENSITIVITY = Fraction(141422, 100000)

_Regressor = TypeVar("_Regressor", bound="DPLinearRegression")
Method = Literal["statistics", "sgd"]


class DPLinearRegression(RegressorMixin, BaseEstimator):  # type: ignore[misc]
    """Least squares by noisy sufficient statistics or DP-SGD (module docstring), scikit-learn style.
    ``epochs``, ``batch_size``, ``learning_rate`` and ``clip_norm`` are DP-SGD's (``method="sgd"``) and
    ignored otherwise; ``regularization`` is the statistics method's ridge."""

    privacy_loss_: PrivacyLoss | MechanismLoss

    def __init__(
        self,
        *,
        epsilon: float = 1.0,
        delta: float = 1e-6,
        norm_bound: float = 1.0,
        y_bound: float = 1.0,
        fit_intercept: bool = True,
        method: Method = "statistics",
        regularization: float | None = None,
        epochs: float = 20,
        batch_size: int = 64,
        learning_rate: float = 0.5,
        clip_norm: float = 1.0,
        ledger: Ledger | Literal[False] | None = None,
        dataset: str | None = None,
        label: str | None = None,
        random_state: RandomState = None,
    ) -> None:
        self.epsilon = epsilon
        self.delta = delta
        self.norm_bound = norm_bound
        self.y_bound = y_bound
        self.fit_intercept = fit_intercept
        self.method = method
        self.regularization = regularization
        self.epochs = epochs
        self.batch_size = batch_size
        self.learning_rate = learning_rate
        self.clip_norm = clip_norm
        self.ledger = ledger
        self.dataset = dataset
        self.label = label
        self.random_state = random_state

    def fit(self: _Regressor, X: ArrayLike, y: ArrayLike) -> _Regressor:
        """Release the model in one :func:`kakeibo.release.run` (``method``: module docstring)."""
        features = check_features(X)
        targets = np.asarray(y, dtype=np.float64)
        if targets.shape != (features.shape[0],) or not np.all(np.isfinite(targets)):
            raise ArgumentError(f"y must be {features.shape[0]} finite numbers in a 1-d array.")
        norm_bound = check_positive(self.norm_bound, "norm_bound")
        y_bound = check_positive(self.y_bound, "y_bound")
        if self.method not in get_args(Method):
            raise ArgumentError(f"method must be 'statistics' or 'sgd', got {self.method!r}.")
        check_ledger(self.ledger)
        rows = unit_rows(features, norm_bound, bool(self.fit_intercept))
        labels = np.clip(targets, -y_bound, y_bound) / y_bound
        weights = self._sgd(rows, labels) if self.method == "sgd" else self._statistics(rows, labels)
        scale = math.sqrt(2.0) if self.fit_intercept else 1.0
        n_features = features.shape[1]
        self.coef_ = y_bound * weights[:n_features] / (scale * norm_bound)
        self.intercept_ = float(y_bound * weights[n_features] / scale) if self.fit_intercept else 0.0
        self.n_features_in_ = n_features
        return self

    def _statistics(self, rows: FloatMatrix, labels: FloatVector) -> FloatVector:
        """Release ``(upper(Z^T Z), Z^T y)``, then solve the noisy normal equations."""
        if self.regularization is not None:
            check_positive(self.regularization, "regularization")
        mechanism = Gaussian(sensitivity=SENSITIVITY, epsilon=self.epsilon, delta=self.delta)
        width = rows.shape[1]
        upper = np.triu_indices(width)

        def draw(source: RandomSource) -> FloatMatrix:
            statistics = np.concatenate([(rows.T @ rows)[upper], rows.T @ labels])
            return np.asarray(mechanism.release(statistics, rng=source), dtype=np.float64)

        out = charged_run(self, mechanism.ledger_loss, "DPLinearRegression.fit", draw)
        second = symmetric(out.value[: upper[0].size], width)
        default = 2 * math.sqrt(width) * mechanism.sigma
        ridge = float(self.regularization) if self.regularization is not None else default
        values, vectors = np.linalg.eigh(second)
        inverse = 1.0 / (np.maximum(values, 0.0) + ridge)
        self.regularization_ = float(ridge)
        self.privacy_loss_ = mechanism.privacy_loss
        self.ledger_entry_ = out.ledger_entry
        return np.asarray(vectors @ (inverse * (vectors.T @ out.value[upper[0].size :])), dtype=np.float64)

    def _sgd(self, rows: FloatMatrix, labels: FloatVector) -> FloatVector:
        """DP-SGD on the squared loss of the mapped rows, from zero weights."""
        import optax

        from .dpsgd import epoch_plan, record_contributions, train

        check_positive(self.learning_rate, "learning_rate")
        clip = check_positive(self.clip_norm, "clip_norm")
        n = rows.shape[0]
        plan = epoch_plan(self.epsilon, self.delta, n, self.batch_size, self.epochs)

        def draw(source: RandomSource) -> FloatVector:
            return train(
                record_contributions(_squared_loss, rows, labels),
                np.zeros(rows.shape[1]),
                np.ones(n),
                plan=plan,
                clip_norm=clip,
                normaliser=float(plan.sampling_rate) * n,
                optimizer=optax.sgd(float(self.learning_rate)),
                source=source,
            )

        out = charged_run(self, plan.loss, "DPLinearRegression.fit (DP-SGD)", draw)
        self.plan_ = plan
        self.privacy_loss_ = plan.loss
        self.ledger_entry_ = out.ledger_entry
        return np.asarray(out.value, dtype=np.float64)

    def predict(self, X: ArrayLike) -> Any:
        """``clip(X) @ coef_ + intercept_`` (rows longer than ``norm_bound`` shrunk onto it, as in fit)."""
        check_fitted(self)
        clipped = clip_rows(check_features(X, self.n_features_in_), float(self.norm_bound))
        return np.asarray(clipped @ self.coef_ + self.intercept_, dtype=np.float64)


def _squared_loss(weights: Any, row: Any, label: Any) -> Any:
    """One record's ``(w.z - y')^2 / 2``."""
    residual = row @ weights - label
    return 0.5 * residual * residual
