"""SUP.ML, the scalable unified privacy-preserving machine-learning framework of seed 004 (Miyaji et al.,
section 3.3): dimension reduction, training and testing, each on data its owners perturbed themselves, with
no trusted party.

**Phases.**

1. *Dimension reduction* picks ``K`` of the ``m - 1`` attributes:

   * ``"rand"`` (DR.Rand): ``K`` attributes uniformly at random; reads no data, costs nothing.
   * ``"pm"`` (DR.PM, Algorithm 6): every record owner samples ``K`` attributes uniformly and sends them
     and the target through the Piecewise mechanism at ``eps_DR / (K + 1)`` each; the aggregator estimates
     each attribute's correlation with the target from the reports of the owners who sampled it and keeps
     the ``K`` largest in absolute value. Per record: ``eps_DR``-LDP (``dimension_reduction_epsilon``,
     default ``epsilon``).
   * ``"wa"`` (DR.WA, Algorithm 7): every owner samples ``K`` attributes and sends ``WAT(x_j) * TA`` for
     each, without noise; the aggregator keeps the ``K`` attributes with the largest mean product in
     absolute value (it receives only the products, so this mean is its "part of the correlation
     coefficient"). **Weak anonymisation only: no differential privacy** (the paper says so in 5.2).
   * ``"none"``: every attribute (``K = m - 1``).

2. *Training* (PPTraining, Algorithm 8) and 3. *testing* (PPTesting, Algorithm 9): each owner sends the
   chosen attributes as

   * ``"waldp"``: WALDP (Algorithm 5) at ``eps / (K + 1)`` per attribute, and the target through k-ary
     randomized response at ``eps / (K + 1)``: the record is ``eps``-LDP (sequential composition);
   * ``"wa"``: weak anonymisation (WAT, Algorithm 4) and the true target: **not differentially private**;
   * ``"pm-sampled"``: the paper's PM baseline (``(PM, PM)`` on the raw data, section 4.1 (3)): PM used
     the way section 3.1 describes it, Wang et al. 2019's Algorithm 4 -- each owner samples
     ``k = max(1, min(K, floor(eps / 2.5)))`` of the chosen attributes, sends each through the Piecewise
     mechanism and the others as 0 (:class:`~kakeibo.ml.PiecewiseTransformer` with
     ``sample_attributes=True``), at ``eps k / (k + 1)`` in total, and the target through randomized
     response at ``eps / (k + 1)``. Use it with ``dimension_reduction="none"``;
   * ``"pm"``: the Piecewise mechanism on every chosen attribute at ``eps / (K + 1)`` and the target as for
     WALDP: SUP.ML's pipeline with PM in place of WALDP (not in the paper; a control that separates the
     effect of the dimension reduction from that of the mechanism);
   * ``"raw"``: the attributes themselves (the paper's raw-data reference).

   A test record's owner sends the attributes only: its target's share ``eps / (K + 1)`` of Algorithm 9
   is reserved, as in the paper, but :meth:`SUPML.score` compares predictions with the true labels.

``epsilon`` is therefore the per-record budget of one phase, the paper's x axis ("the privacy index used in
the training and testing phases"). :attr:`SUPML.privacy_loss_` states each phase's loss, ``None`` where
the phase gives no DP guarantee.

**Neighbour relation** (local DP): any two records of one owner (all attributes and the target).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from fractions import Fraction
from typing import Any, Literal

import numpy as np
from numpy.typing import ArrayLike, NDArray
from sklearn.base import BaseEstimator, ClassifierMixin, clone
from sklearn.svm import SVC

from ..errors import ArgumentError, ArgumentTypeError
from ..ldp.multidim import sample_attributes, sample_size
from ..ldp.numeric import PiecewiseMechanism
from ..noise.source import RandomSource
from ..privacy import PureDP
from ._common import FloatMatrix, check_binary_labels, check_features, check_fitted, random_source
from .randomizers import WALDP, PiecewiseTransformer, RandomizedResponseTransformer
from .weak_anonymization import WeakAnonymizer, check_feature_range

__all__ = ["SUPML"]

DimensionReduction = Literal["rand", "pm", "wa", "none"]
DataType = Literal["waldp", "wa", "pm", "pm-sampled", "raw"]
_REDUCTIONS = ("rand", "pm", "wa", "none")
_DATA_TYPES = ("waldp", "wa", "pm", "pm-sampled", "raw")
RandomState = int | np.random.Generator | None


class SUPML(ClassifierMixin, BaseEstimator):  # type: ignore[misc]
    """SUP.ML (seed 004, section 3.3; see the module docstring for the phases and their privacy).

    ``estimator``: any scikit-learn binary classifier, trained on the perturbed training data (default: the
    paper's RBF SVC with ``gamma = 1 / ((m - 1) Var(D))``, scikit-learn's ``"scale"``). ``epsilon``: per
    record and phase. ``n_features_to_select``: ``K``; ``n_classes``: ``L`` of the weak anonymisation.
    ``feature_range`` / ``discrete_features`` / ``categories``: each attribute's public domain, as in
    :class:`~kakeibo.ml.WeakAnonymizer` (indices refer to the columns of ``X``).

    >>> from kakeibo.ml.datasets import load_wdbc
    >>> data = load_wdbc()
    >>> model = SUPML(epsilon=10, n_features_to_select=2, n_classes=2, random_state=0)
    >>> model.fit(data.X, data.y).privacy_loss_["training"]
    PureDP(epsilon=Fraction(10, 1))
    """

    def __init__(
        self,
        estimator: Any = None,
        *,
        epsilon: float = 10.0,
        n_features_to_select: int = 5,
        n_classes: int = 2,
        dimension_reduction: DimensionReduction = "rand",
        training: DataType = "waldp",
        testing: DataType = "waldp",
        dimension_reduction_epsilon: float | None = None,
        feature_range: Any = (-1.0, 1.0),
        discrete_features: Sequence[int] = (),
        categories: Mapping[int, Sequence[Any]] | None = None,
        random_state: RandomState = None,
    ) -> None:
        self.estimator = estimator
        self.epsilon = epsilon
        self.n_features_to_select = n_features_to_select
        self.n_classes = n_classes
        self.dimension_reduction = dimension_reduction
        self.training = training
        self.testing = testing
        self.dimension_reduction_epsilon = dimension_reduction_epsilon
        self.feature_range = feature_range
        self.discrete_features = discrete_features
        self.categories = categories
        self.random_state = random_state

    # -- fitting -------------------------------------------------------------------------------------

    def fit(self, X: ArrayLike, y: ArrayLike) -> SUPML:
        """Dimension reduction and PPTraining on ``(X, y)`` (every record is one owner's)."""
        features = check_features(X)
        signs, classes = check_binary_labels(y, features.shape[0])
        self._check_params(features.shape[1])
        reduce_rng, train_rng, test_rng = _spawn(self.random_state, 3)
        self.n_features_in_ = features.shape[1]
        self.classes_ = classes
        self.selected_features_ = self._reduce(features, signs, reduce_rng)
        chosen = features[:, self.selected_features_]
        encoder = self._encoder(self.training, train_rng).fit(chosen)
        trained_on = encoder.transform(chosen)
        labels = self._training_labels(signs, train_rng)
        self.constant_prediction_: int | None = None
        if np.unique(labels).size < 2:  # every perturbed label fell in one class: nothing to learn
            self.constant_prediction_ = int(labels[0])
            self.estimator_ = None
        else:
            self.estimator_ = clone(self.estimator if self.estimator is not None else SVC(gamma="scale"))
            self.estimator_.fit(trained_on, labels)
        self.testing_encoder_ = self._encoder(self.testing, test_rng).fit(chosen)
        self.privacy_loss_ = self._privacy_losses()
        return self

    def _check_params(self, n_features: int) -> None:
        if self.dimension_reduction not in _REDUCTIONS:
            raise ArgumentError(
                f"dimension_reduction must be one of {', '.join(_REDUCTIONS)}, "
                f"got {self.dimension_reduction!r}."
            )
        for phase in ("training", "testing"):
            if getattr(self, phase) not in _DATA_TYPES:
                raise ArgumentError(
                    f"{phase} must be one of {', '.join(_DATA_TYPES)}, got {getattr(self, phase)!r}."
                )
        _check_positive_number(self.epsilon, "epsilon")
        if self.dimension_reduction_epsilon is not None:
            _check_positive_number(self.dimension_reduction_epsilon, "dimension_reduction_epsilon")
        k = self.n_features_to_select
        if isinstance(k, bool) or not isinstance(k, (int, np.integer)) or not 1 <= k <= n_features:
            raise ArgumentError(f"n_features_to_select must be an integer in 1..{n_features}, got {k!r}.")

    @property
    def _k(self) -> int:
        return self.n_features_in_ if self.dimension_reduction == "none" else int(self.n_features_to_select)

    @property
    def attribute_epsilon(self) -> float:
        """``eps / (K + 1)``: each chosen attribute's and the target's share (Algorithms 8 and 9)."""
        return float(self.epsilon) / (self._k + 1)

    def label_epsilon(self, data_type: str) -> float:
        """The target's share of ``epsilon`` for ``data_type`` (the attributes get the rest)."""
        if data_type == "pm-sampled":
            return float(self.epsilon) / (sample_size(Fraction(self.epsilon), self._k) + 1)
        return self.attribute_epsilon

    # -- dimension reduction (Algorithms 6 and 7) ------------------------------------------------------

    def _reduce(self, X: FloatMatrix, signs: NDArray[np.int64], rng: RandomState) -> NDArray[np.int64]:
        d, k = X.shape[1], self._k
        if self.dimension_reduction == "none":
            return np.arange(d)
        source = random_source(rng)
        if self.dimension_reduction == "rand":
            return np.sort(sample_attributes(1, d, k, source)[0])
        sampled = sample_attributes(X.shape[0], d, k, source)
        rows = np.arange(X.shape[0])[:, None]
        if self.dimension_reduction == "wa":
            wa = WeakAnonymizer(
                self.n_classes,
                feature_range=self.feature_range,
                discrete_features=self.discrete_features,
                categories=self.categories,
            ).fit(X)
            products = wa.transform(X)[rows, sampled] * signs[:, None]  # what each owner sends
            scores = _mean_by_attribute(products, sampled, d)
        else:
            scores = self._pm_correlations(X, signs, sampled, source)
        return np.sort(np.argsort(-np.abs(scores), kind="stable")[:k])

    def _pm_correlations(
        self, X: FloatMatrix, signs: NDArray[np.int64], sampled: NDArray[np.int64], source: RandomSource
    ) -> FloatMatrix:
        """Algorithm 6: each owner's ``K`` sampled attributes (mapped to ``[-1, 1]`` by the public domain)
        and target through PM at ``eps_DR / (K + 1)``; the aggregator's correlation estimate per attribute.

        With ``Var(y | x) = a x^2 + b`` for PM (``a = 1 / (e^(eps/2) - 1)``,
        ``b = (e^(eps/2) + 3) / (3 (e^(eps/2) - 1)^2)``; Wang et al. 2019, Lemma 1), ``E[y^2] = (1 + a) x^2
        + b`` recovers the attribute's second moment; the target's variance is common to all attributes,
        so the covariance over the attribute's standard deviation orders them like the correlation."""
        epsilon = float(self.dimension_reduction_epsilon or self.epsilon) / (self._k + 1)
        pm = PiecewiseMechanism(epsilon=epsilon)
        low, high = check_feature_range(self.feature_range, X.shape[1]).T
        rows = np.arange(X.shape[0])[:, None]
        unit = (2 * (X[rows, sampled] - low[sampled]) / (high - low)[sampled] - 1).clip(-1, 1)
        reports = pm.randomize(unit.ravel(), rng=source).reshape(unit.shape)
        target = pm.randomize(signs.astype(np.float64), rng=source)[:, None]
        half = math.exp(epsilon / 2)
        a, b = 1 / (half - 1), (half + 3) / (3 * (half - 1) ** 2)
        d = X.shape[1]
        mean_x = _mean_by_attribute(reports, sampled, d)
        mean_t = _mean_by_attribute(np.broadcast_to(target, sampled.shape), sampled, d)
        mean_xt = _mean_by_attribute(reports * target, sampled, d)
        second = (_mean_by_attribute(reports**2, sampled, d) - b) / (1 + a)
        spread = np.sqrt(np.maximum(second - mean_x**2, 1e-12))
        return np.asarray((mean_xt - mean_x * mean_t) / spread, dtype=np.float64)

    # -- training and testing data (Algorithms 8 and 9) ------------------------------------------------

    def _encoder(self, data_type: str, rng: RandomState) -> Any:
        """The owner-side transformer of the chosen attributes for ``data_type``."""
        chosen = [int(j) for j in self.selected_features_]
        domain = _subset_domain(self.feature_range, chosen, self.n_features_in_)
        discrete = tuple(chosen.index(j) for j in self.discrete_features if j in chosen)
        categories = {chosen.index(j): v for j, v in (self.categories or {}).items() if j in chosen}
        feature_epsilon = float(self.epsilon) - self.label_epsilon(data_type)
        if data_type == "waldp":
            return WALDP(
                feature_epsilon,
                self.n_classes,
                feature_range=domain,
                discrete_features=discrete,
                categories=categories or None,
                random_state=rng,
            )
        if data_type == "wa":
            return WeakAnonymizer(
                self.n_classes,
                feature_range=domain,
                discrete_features=discrete,
                categories=categories or None,
            )
        if data_type in ("pm", "pm-sampled"):
            return PiecewiseTransformer(
                feature_epsilon,
                feature_range=domain,
                sample_attributes=data_type == "pm-sampled",
                random_state=rng,
            )
        return _Identity()

    def _training_labels(self, signs: NDArray[np.int64], rng: RandomState) -> NDArray[np.int64]:
        if self.training in ("wa", "raw"):
            return signs
        share = self.label_epsilon(self.training)
        rr = RandomizedResponseTransformer(share, categories=[[-1, 1]], random_state=rng)
        return np.asarray(rr.fit_transform(signs[:, None].astype(np.float64))[:, 0], dtype=np.int64)

    def _privacy_losses(self) -> dict[str, PureDP | None]:
        reduction: PureDP | None = {
            "rand": PureDP(0),
            "none": PureDP(0),
            "pm": PureDP(self.dimension_reduction_epsilon or self.epsilon),
            "wa": None,
        }[self.dimension_reduction]

        def phase(data_type: str) -> PureDP | None:
            return PureDP(self.epsilon) if data_type in ("waldp", "pm", "pm-sampled") else None

        return {
            "dimension_reduction": reduction,
            "training": phase(self.training),
            "testing": phase(self.testing),
        }

    # -- prediction ----------------------------------------------------------------------------------

    def decision_signs(self, X: ArrayLike) -> NDArray[np.int64]:
        """-1 / +1 predictions for records whose owners send them as ``testing`` data (fresh noise per
        call)."""
        check_fitted(self)
        features = check_features(X, self.n_features_in_)
        sent = self.testing_encoder_.transform(features[:, self.selected_features_])
        if self.estimator_ is None:
            assert self.constant_prediction_ is not None
            return np.full(features.shape[0], self.constant_prediction_, dtype=np.int64)
        return np.asarray(self.estimator_.predict(sent), dtype=np.int64)

    def predict(self, X: ArrayLike) -> NDArray[Any]:
        """Class labels (PPTesting, Algorithm 9)."""
        signs = self.decision_signs(X)  # first: it refuses a model that is not fitted
        return np.asarray(self.classes_[(signs + 1) // 2])


class _Identity:
    """The ``"raw"`` data type: the owner sends the attributes unchanged."""

    def fit(self, X: FloatMatrix) -> _Identity:
        return self

    def transform(self, X: FloatMatrix) -> FloatMatrix:
        return X


def _check_positive_number(value: object, name: str) -> None:
    if (
        isinstance(value, bool)
        or not isinstance(value, (int, float))
        or not (math.isfinite(value) and value > 0)
    ):
        raise ArgumentError(f"{name} must be a positive finite number, got {value!r}.")


def _spawn(random_state: RandomState, count: int) -> list[RandomState]:
    """Independent randomness per phase: child generators of a seed or generator, ``None`` (the OS CSPRNG)
    otherwise."""
    if random_state is None:
        return [None] * count
    if isinstance(random_state, np.random.Generator):
        return list(random_state.spawn(count))
    if isinstance(random_state, bool) or not isinstance(random_state, (int, np.integer)):
        raise ArgumentTypeError(
            f"random_state must be an int, a numpy Generator or None, got {random_state!r}."
        )
    return [np.random.default_rng(s) for s in np.random.SeedSequence(int(random_state)).spawn(count)]


def _mean_by_attribute(values: ArrayLike, sampled: NDArray[np.int64], d: int) -> FloatMatrix:
    """Per attribute, the mean of the values sent for it (0 for an attribute nobody sampled)."""
    sums = np.bincount(sampled.ravel(), weights=np.asarray(values, dtype=np.float64).ravel(), minlength=d)
    counts = np.bincount(sampled.ravel(), minlength=d)
    return np.asarray(np.divide(sums, counts, out=np.zeros(d), where=counts > 0), dtype=np.float64)


def _subset_domain(feature_range: Any, chosen: list[int], d: int) -> FloatMatrix:
    """The ``(low, high)`` pairs of the chosen columns."""
    return check_feature_range(feature_range, d)[chosen]
