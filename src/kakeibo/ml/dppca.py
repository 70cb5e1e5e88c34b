"""DP-PCA by the Gaussian mechanism on the second-moment matrix: "Analyze Gauss" (Dwork, Talwar, Thakurta
and Zhang, STOC 2014, Algorithm 1), charged to a ledger once per fit (seed 002, p. 85: P3GM's embedding is
learned with DP-PCA).

**The algorithm.** Each record is mapped to norm at most 1, record by record: ``x -> x / max(norm_bound,
||x||)`` (rows longer than ``norm_bound`` are shrunk onto that sphere, then everything is divided by it).
The matrix ``A = sum_i x_i x_i^T`` is released by kakeibo's :class:`~kakeibo.mechanisms.Gaussian` on its
upper triangle (diagonal included), mirrored to a symmetric ``A_hat``; the components are the top
``n_components`` eigenvectors of ``A_hat`` (``numpy.linalg.eigh``), which is post-processing.

**Neighbour relation**: add or remove one record. **Sensitivity**: the upper triangle of ``x x^T`` has L2
norm at most ``||x x^T||_F = ||x||^2 <= 1``, so one record moves the released vector by at most 1 in L2.
The data are not centred (a mean would need budget of its own): the components are those of the
uncentred second moment, as in Analyze Gauss; centre the data with public values first if that matters.

**Loss**: the Gaussian mechanism's ``(epsilon, delta)``, with its zCDP curve for rdp books
(:attr:`kakeibo.mechanisms.Gaussian.ledger_loss`).

>>> import numpy as np
>>> X = np.random.default_rng(0).normal(size=(500, 5)) * [5, 1, 1, 1, 1]
>>> pca = DPPCA(1, epsilon=2.0, delta=1e-6, norm_bound=12, ledger=False, random_state=0).fit(X)
>>> bool(abs(pca.components_[0, 0]) > 0.9)
True
"""

from __future__ import annotations

from typing import Any, Literal, TypeVar

import numpy as np
from numpy.typing import ArrayLike
from sklearn.base import BaseEstimator, TransformerMixin

from ..accounting import Ledger
from ..errors import ArgumentError
from ..mechanisms import Gaussian
from ..mechanisms.base import check_positive
from ..noise import RandomSource
from ._common import (
    FloatMatrix,
    RandomState,
    charged_run,
    check_features,
    check_fitted,
    check_ledger,
    symmetric,
    unit_rows,
)

__all__ = ["DPPCA"]

_Transformer = TypeVar("_Transformer", bound="DPPCA")


class DPPCA(TransformerMixin, BaseEstimator):  # type: ignore[misc]
    """Principal components under ``(epsilon, delta)``-DP (module docstring), scikit-learn style:
    ``fit`` charges the ledger once; ``transform`` projects rows (clipped and scaled as in ``fit``) on the
    components, for free."""

    def __init__(
        self,
        n_components: int = 2,
        *,
        epsilon: float = 1.0,
        delta: float = 1e-6,
        norm_bound: float = 1.0,
        ledger: Ledger | Literal[False] | None = None,
        dataset: str | None = None,
        label: str | None = None,
        random_state: RandomState = None,
    ) -> None:
        self.n_components = n_components
        self.epsilon = epsilon
        self.delta = delta
        self.norm_bound = norm_bound
        self.ledger = ledger
        self.dataset = dataset
        self.label = label
        self.random_state = random_state

    def fit(self: _Transformer, X: ArrayLike, y: Any = None) -> _Transformer:
        """Release the noisy second-moment matrix (one :func:`kakeibo.release.run`) and keep its top
        eigenvectors as ``components_`` (rows) with their eigenvalues as ``explained_variance_``."""
        features = check_features(X)
        dimension = features.shape[1]
        if isinstance(self.n_components, bool) or not isinstance(self.n_components, int):
            raise ArgumentError(f"n_components must be a whole number, got {self.n_components!r}.")
        if not 1 <= self.n_components <= dimension:
            raise ArgumentError(f"n_components must lie in [1, {dimension}], got {self.n_components}.")
        norm_bound = check_positive(self.norm_bound, "norm_bound")
        check_ledger(self.ledger)
        mechanism = Gaussian(sensitivity=1, epsilon=self.epsilon, delta=self.delta)
        rows = unit_rows(features, norm_bound, False)
        upper = np.triu_indices(dimension)

        def draw(source: RandomSource) -> FloatMatrix:
            return symmetric(mechanism.release((rows.T @ rows)[upper], rng=source), dimension)

        out = charged_run(self, mechanism.ledger_loss, "DPPCA.fit (Analyze Gauss)", draw)
        values, vectors = np.linalg.eigh(out.value)
        order = np.argsort(values)[::-1][: self.n_components]
        self.components_ = vectors[:, order].T
        self.explained_variance_ = values[order]
        self.n_features_in_ = dimension
        self.privacy_loss_ = mechanism.privacy_loss
        self.ledger_entry_ = out.ledger_entry
        return self

    def transform(self, X: ArrayLike) -> FloatMatrix:
        """Rows clipped and scaled as in ``fit``, projected on the components."""
        check_fitted(self)
        rows = unit_rows(check_features(X, self.n_features_in_), float(self.norm_bound), False)
        return np.asarray(rows @ self.components_.T, dtype=np.float64)
