"""The local randomizers of seed 004 (Miyaji et al.) as scikit-learn transformers: the Piecewise mechanism
(Algorithm 1), k-ary randomized response (Algorithm 2) and WALDP, the unified mechanism (Algorithm 5).

Every record (a row of ``X``) belongs to one data owner, who randomizes it before it leaves their hands:

* **Neighbour relation** (local DP): any two records of one owner, i.e. every attribute may change within
  its public domain (``feature_range`` or the declared categories).
* **Privacy loss**: each of the ``d`` attributes is randomized at ``epsilon / d`` (``attribute_epsilon``)
  with its own independent coins, so by sequential composition the whole report of a record is
  ``epsilon``-LDP (``privacy_loss = PureDP(epsilon)``); a record that differs in one attribute only is
  distinguished with loss at most ``epsilon / d``.
* **Calibration**: in the local model the "sensitivity" is the whole domain of an attribute. The Piecewise
  mechanism is calibrated for any two values of ``[low, high]`` (width ``Range_j``, mapped onto
  ``[-1, 1]``), randomized response for any two categories (or classes); nothing data-dependent enters.
* Each :meth:`transform` call is a *new* report by every owner, with fresh coins, and spends the loss again.
  ``random_state`` seeds the coins for experiments and tests (``None``, the default, uses the operating
  system's CSPRNG; see :mod:`kakeibo.ml._common`); a seeded transformer's reports continue one stream
  from :meth:`fit` on, so successive calls differ.

The transformers do not charge a ledger: the randomization happens on the owners' side, and each owner's
loss is stated by :attr:`privacy_loss` for whoever keeps the owners' books.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping, Sequence
from fractions import Fraction
from typing import Any

import numpy as np
from numpy.typing import ArrayLike, NDArray
from sklearn.base import BaseEstimator, OneToOneFeatureMixin, TransformerMixin

from ..errors import ArgumentError, ArgumentTypeError
from ..ldp.framework import MAX_EPSILON
from ..ldp.multidim import MultidimensionalSampling, sample_size
from ..ldp.numeric import PiecewiseMechanism
from ..mechanisms import RandomizedResponse
from ..noise.source import RandomSource
from ..privacy import PureDP, as_fraction
from ._common import FloatMatrix, check_features, check_fitted, random_source
from .weak_anonymization import (
    DiscreteToOrdered,
    WeakAnonymizer,
    check_dense,
    check_feature_range,
    check_records,
    ordering_for,
    record_columns,
)

__all__ = ["WALDP", "PiecewiseTransformer", "RandomizedResponseTransformer"]

IntMatrix = NDArray[np.int64]


def _check_epsilon(epsilon: Any) -> Fraction:
    """``epsilon`` as an exact positive rational (see :func:`kakeibo.privacy.as_fraction`)."""
    eps = as_fraction(epsilon, "epsilon")
    if eps <= 0:
        raise ArgumentError(f"epsilon must be positive, got {float(eps):g}.")
    return eps


@functools.lru_cache(maxsize=256)
def _randomized_response(categories: int, epsilon: Fraction) -> RandomizedResponse | None:
    """k-ary randomized response over ``categories`` values at ``epsilon`` (``None`` for a single value:
    nothing to hide, the value is released as it is and costs nothing). Cached, so attributes with the same
    ``(categories, epsilon)`` share one mechanism and are released together."""
    return None if categories == 1 else RandomizedResponse(epsilon=epsilon, categories=categories)


def _release_indices(
    index: IntMatrix, mechanisms: Sequence[RandomizedResponse | None], source: RandomSource
) -> IntMatrix:
    """Every column of 0-based indices through its attribute's randomized response (fresh coins); the
    columns sharing a mechanism go through it in one call (each value still gets its own coins)."""
    reports: IntMatrix = np.array(index, dtype=np.int64)
    groups: dict[int, list[int]] = {}
    for j, mechanism in enumerate(mechanisms):
        if mechanism is not None:
            groups.setdefault(id(mechanism), []).append(j)
    for columns in groups.values():
        block = index[:, columns]
        released = mechanisms[columns[0]].release(block.ravel(), rng=source)  # type: ignore[union-attr]
        reports[:, columns] = np.asarray(released, dtype=np.int64).reshape(block.shape)
    return reports


class _LocalRandomizer(OneToOneFeatureMixin, TransformerMixin, BaseEstimator):  # type: ignore[misc]
    """What the three transformers share: the budget split over attributes, the stated losses and the
    source of fresh coins. Subclasses define ``__init__`` (with ``epsilon`` and ``random_state``)."""

    epsilon: Any
    random_state: Any
    n_features_in_: int

    def _attribute_budget(self, epsilon: Fraction, n_features: int) -> Fraction:
        """Sequential composition over a record's attributes: each gets ``epsilon / n_features``."""
        return epsilon / n_features

    def _start(self, epsilon: Fraction, n_features: int, budget: Fraction) -> None:
        """Check ``random_state`` and record the shared fitted state: the losses, ``n_features_in_`` and
        the coins (a seeded source is created here, once, so every later :meth:`transform` continues its
        stream)."""
        seeded = None if self.random_state is None else random_source(self.random_state)
        self._epsilon = epsilon
        self._budget = budget
        self._seeded = seeded
        self.n_features_in_ = n_features

    def _coins(self) -> RandomSource:
        return self._seeded if self._seeded is not None else random_source(None)

    @property
    def privacy_loss(self) -> PureDP:
        """``PureDP(epsilon)``: the loss of one report of a whole record (all its attributes)."""
        check_fitted(self)
        return PureDP(self._epsilon)

    @property
    def attribute_epsilon(self) -> float:
        """``epsilon / n_features_in_``: the loss of one attribute's report."""
        check_fitted(self)
        return float(self._budget)

    def __sklearn_tags__(self) -> Any:
        tags = super().__sklearn_tags__()
        tags.non_deterministic = True
        return tags


class PiecewiseTransformer(_LocalRandomizer):
    """The Piecewise mechanism (seed 004, Algorithm 1; Wang et al. 2019) on every attribute at
    ``epsilon / d``.

    Algorithm 1, line 1 ("adapt the range to [-1, 1]"): each attribute's public domain ``[low, high]``
    (``feature_range``: one pair, or one per attribute) is mapped affinely onto ``[-1, 1]`` (values outside
    it are clipped first: a per-record map, so the guarantee is unaffected), randomized by
    :class:`kakeibo.ldp.numeric.PiecewiseMechanism` (exact discretised PM) and mapped back. The report is
    unbiased in the original units, ``E[y | x] = x`` for ``x`` in the domain, with variance
    ``((high - low) / 2)^2 Var_PM(x)``; every report is ``centre + half * c`` with ``c`` one of the
    mechanism's cell centres in ``[-C, C]``, ``C = (e^(eps/2d) + 1) / (e^(eps/2d) - 1)``. The map back is a
    function of the reported cell alone, so its floating-point rounding reveals nothing about ``x``.

    Loss: ``epsilon / d`` per attribute (any two values of its domain), ``epsilon`` per record. The
    Piecewise mechanism accepts at most ``epsilon / d = 64``.

    ``sample_attributes=True`` is the multidimensional protocol of Wang et al. 2019 (Algorithm 4), which
    seed 004 (section 3.1) describes as PM's way with many attributes and uses as its PM baseline: each
    record samples ``k = max(1, min(d, floor(eps / 2.5)))`` attributes uniformly, sends each through the
    Piecewise mechanism at ``epsilon / k``, and the others as 0 (the domain's centre); the sampled reports
    are scaled by ``d / k`` so that every attribute stays unbiased
    (:class:`kakeibo.ldp.multidim.MultidimensionalSampling`). Loss: ``epsilon / k`` per sampled attribute,
    ``epsilon`` per record.

    Fitted: ``mechanism_`` (the per-attribute Piecewise mechanism, or the sampling protocol),
    ``feature_range_``, ``n_features_in_``.

    >>> X = np.array([[0.0, 5.0], [10.0, 5.0]])
    >>> pm = PiecewiseTransformer(4.0, feature_range=(0.0, 10.0), random_state=0).fit(X)
    >>> pm.attribute_epsilon, pm.transform(X).shape
    (2.0, (2, 2))
    """

    mechanism_: PiecewiseMechanism | MultidimensionalSampling
    feature_range_: FloatMatrix

    def __init__(
        self,
        epsilon: float,
        *,
        feature_range: Any = (-1.0, 1.0),
        sample_attributes: bool = False,
        random_state: Any = None,
    ) -> None:
        self.epsilon = epsilon
        self.feature_range = feature_range
        self.sample_attributes = sample_attributes
        self.random_state = random_state

    def fit(self, X: ArrayLike, y: object = None) -> PiecewiseTransformer:
        """Check the parameters and ``X``; build the Piecewise mechanism at ``epsilon / d``."""
        epsilon = _check_epsilon(self.epsilon)
        features = check_features(check_dense(X))
        d = features.shape[1]
        ranges = check_feature_range(self.feature_range, d)
        if not isinstance(self.sample_attributes, bool):
            raise ArgumentTypeError(
                f"sample_attributes must be True or False, got {self.sample_attributes!r}."
            )
        sampled = sample_size(epsilon, d) if self.sample_attributes else d
        budget = self._attribute_budget(epsilon, sampled)
        if budget > MAX_EPSILON:
            raise ArgumentError(
                f"epsilon per attribute = {float(budget):g} exceeds {MAX_EPSILON}, the Piecewise mechanism's "
                "largest epsilon."
            )
        mechanism: PiecewiseMechanism | MultidimensionalSampling = (
            MultidimensionalSampling(epsilon=budget * sampled, dimensions=d, mechanism="piecewise")
            if self.sample_attributes
            else PiecewiseMechanism(epsilon=budget)
        )
        self._start(epsilon, d, budget)
        self.mechanism_ = mechanism
        self.feature_range_ = ranges
        return self

    def transform(self, X: ArrayLike) -> FloatMatrix:
        """One fresh report per record: every attribute through the Piecewise mechanism."""
        check_fitted(self)
        features = check_features(check_dense(X), self.n_features_in_)
        centre = self.feature_range_.mean(axis=1)
        half = (self.feature_range_[:, 1] - self.feature_range_[:, 0]) / 2
        unit = np.clip((features - centre) / half, -1.0, 1.0)
        if isinstance(self.mechanism_, MultidimensionalSampling):
            sent = self.mechanism_.randomize(unit, rng=self._coins())
            reports = np.zeros_like(unit)
            scale = self.n_features_in_ / self.mechanism_.k  # the public d / k of Algorithm 4
            np.put_along_axis(reports, sent["attributes"].astype(np.int64), scale * sent["values"], axis=1)
        else:
            reports = self.mechanism_.randomize(unit.ravel(), rng=self._coins()).reshape(unit.shape)
        return np.asarray(centre + half * reports, dtype=np.float64)


class RandomizedResponseTransformer(_LocalRandomizer):
    """k-ary randomized response (seed 004, Algorithm 2) on every attribute at ``epsilon / d``.

    Attribute ``j`` has categories ``categories[j]`` (a sequence per attribute) or, when ``categories`` is
    ``None``, the sorted distinct values seen in :meth:`fit` (which treats the observed categories as the
    public domain; declare them in a deployment). The report is a category value: the true one with
    probability ``p = e^(eps/d) / (k_j - 1 + e^(eps/d))``, each other one with ``q = 1 / (k_j - 1 +
    e^(eps/d))`` (:class:`kakeibo.mechanisms.RandomizedResponse`, exact coins). That is the distribution
    the paper states above Algorithm 2 (whose text gives the total for a changed value as
    ``n / (n - 1 + e^eps)``; it is ``(k - 1) / (k - 1 + e^eps)``); Algorithm 2's line 5 ("sample ``y_j``
    uniformly from ``{0, ..., l}`` except ``x_j``") is read as "uniformly from the other ``k_j - 1``
    categories", the standard k-RR that has that ``p``. An attribute with a single category is released
    as that category (no coins, loss 0).

    Loss: ``epsilon / d`` per attribute (``p / q = e^(eps/d)``), ``epsilon`` per record.

    Output: the reported categories, as floats when every category is a number, else as an object array.
    Fitted: ``mechanisms_`` (per attribute, its :class:`~kakeibo.mechanisms.RandomizedResponse` or
    ``None``), ``categories_`` (per attribute, its categories), ``n_features_in_``.

    >>> rr = RandomizedResponseTransformer(2.0, categories=[[-1, 1]], random_state=0)
    >>> reports = rr.fit_transform(np.array([[-1.0], [1.0], [1.0]]))
    >>> set(reports[:, 0]) <= {-1.0, 1.0}, round(rr.mechanisms_[0].p, 4)  # e^2 / (1 + e^2)
    (True, 0.8808)
    """

    mechanisms_: list[RandomizedResponse | None]
    categories_: list[tuple[Any, ...]]
    _orderings: list[DiscreteToOrdered]

    def __init__(
        self, epsilon: float, *, categories: Sequence[Sequence[Any]] | None = None, random_state: Any = None
    ) -> None:
        self.epsilon = epsilon
        self.categories = categories
        self.random_state = random_state

    def fit(self, X: ArrayLike, y: object = None) -> RandomizedResponseTransformer:
        """Check the parameters and ``X``; one randomized response per attribute at ``epsilon / d``."""
        epsilon = _check_epsilon(self.epsilon)
        records = check_records(X)
        d = records.shape[1]
        given = self._given_categories(d)
        columns = record_columns(records, range(d))
        orderings = [ordering_for(column, given[j], f"attribute {j}") for j, column in enumerate(columns)]
        budget = self._attribute_budget(epsilon, d)
        mechanisms = [_randomized_response(ordering.k, budget) for ordering in orderings]
        self._start(epsilon, d, budget)
        self._orderings = orderings
        self.mechanisms_ = mechanisms
        self.categories_ = [ordering.categories for ordering in orderings]
        return self

    def _given_categories(self, n_features: int) -> list[Sequence[Any] | None]:
        if self.categories is None:
            return [None] * n_features
        given = list(self.categories) if isinstance(self.categories, np.ndarray) else self.categories
        if isinstance(given, (str, bytes, Mapping)) or not isinstance(given, Sequence):
            raise ArgumentTypeError(
                "categories must be None or a sequence with one sequence of categories per attribute."
            )
        if len(given) != n_features:
            raise ArgumentError(f"categories must give one sequence for each of the {n_features} attributes.")
        return list(given)

    def transform(self, X: ArrayLike) -> NDArray[Any]:
        """One fresh report per record: every attribute's category through its randomized response."""
        check_fitted(self)
        columns = record_columns(check_records(X, self.n_features_in_), range(self.n_features_in_))
        index = np.column_stack(
            [
                ordering.order_index(column) - 1
                for ordering, column in zip(self._orderings, columns, strict=True)
            ]
        )
        reports = _release_indices(index, self.mechanisms_, self._coins())
        numeric = all(ordering.numeric for ordering in self._orderings)
        out = np.empty(reports.shape, dtype=np.float64 if numeric else object)
        for j, ordering in enumerate(self._orderings):
            out[:, j] = np.array(ordering.categories, dtype=out.dtype)[reports[:, j]]
        return out

    def __sklearn_tags__(self) -> Any:
        tags = super().__sklearn_tags__()
        tags.input_tags.categorical = True
        tags.input_tags.string = True
        return tags


class WALDP(_LocalRandomizer):
    """WALDP, the unified LDP mechanism UPM (seed 004, Algorithm 5): DTO -> WAT -> k-ary randomized response.

    Each attribute goes through :class:`~kakeibo.ml.weak_anonymization.WeakAnonymizer` (same parameters:
    ``n_classes`` is ``L``, ``feature_range`` / ``discrete_features`` / ``categories`` the attributes'
    public domains) to one of its ``l_j`` classes; k-ary randomized response over the ``l_j`` classes at
    ``epsilon / d`` (line 5: over the attribute's own classes, ``l_j``, which differs from ``L`` for a
    discrete attribute with ``k_j <= L + 1`` categories) reports a class, and the output is that class's
    representative. So every output of attribute ``j`` is one of ``representatives_[j]``.

    Loss: ``epsilon / d`` per attribute: the report's class is the true one with probability
    ``p = e^(eps/d) / (l_j - 1 + e^(eps/d))`` and each other with ``p e^(-eps/d)``, whatever the value
    (any two values of the domain: WAT is applied by the owner and is a function of the value), and
    ``epsilon`` per record. An attribute with a single class (a discrete attribute with one category) is
    released as its constant representative: no coins, loss 0 for it, so the record's real loss is
    ``epsilon`` times the share of the other attributes, and ``epsilon`` is a bound.

    Fitted: ``anonymizer_`` (the fitted :class:`WeakAnonymizer`), ``mechanisms_`` (per attribute, a
    :class:`~kakeibo.mechanisms.RandomizedResponse` over ``l_j`` classes or ``None``),
    ``representatives_``, ``n_features_in_``.

    >>> X = np.array([[-1.0, 0.0], [0.3, 1.0]])
    >>> waldp = WALDP(2.0, 4, discrete_features=[1], random_state=0).fit(X)
    >>> waldp.representatives_[0].tolist(), waldp.attribute_epsilon
    ([-0.75, -0.25, 0.25, 0.75], 1.0)
    """

    anonymizer_: WeakAnonymizer
    mechanisms_: list[RandomizedResponse | None]

    def __init__(
        self,
        epsilon: float,
        n_classes: int = 2,
        *,
        feature_range: Any = (-1.0, 1.0),
        discrete_features: Sequence[int] = (),
        categories: Mapping[int, Sequence[Any]] | None = None,
        random_state: Any = None,
    ) -> None:
        self.epsilon = epsilon
        self.n_classes = n_classes
        self.feature_range = feature_range
        self.discrete_features = discrete_features
        self.categories = categories
        self.random_state = random_state

    def fit(self, X: ArrayLike, y: object = None) -> WALDP:
        """Check the parameters and ``X``; fit the weak anonymisation and one randomized response per
        attribute over its classes at ``epsilon / d``."""
        epsilon = _check_epsilon(self.epsilon)
        anonymizer = WeakAnonymizer(
            self.n_classes,
            feature_range=self.feature_range,
            discrete_features=self.discrete_features,
            categories=self.categories,
        ).fit(X)
        d = anonymizer.n_features_in_
        budget = self._attribute_budget(epsilon, d)
        mechanisms = [_randomized_response(int(l_j), budget) for l_j in anonymizer.n_classes_]
        self._start(epsilon, d, budget)
        self.anonymizer_ = anonymizer
        self.mechanisms_ = mechanisms
        return self

    @property
    def representatives_(self) -> list[NDArray[np.float64]]:
        """Per attribute, the values its reports can take (its classes' representatives)."""
        check_fitted(self)
        return self.anonymizer_.representatives_

    def report_class_index(self, X: ArrayLike) -> IntMatrix:
        """One fresh report per record as 0-based class indices, shape ``(n, d)`` (Algorithm 5, lines 1-5)."""
        check_fitted(self)
        classes = self.anonymizer_.class_index(X)
        return _release_indices(classes, self.mechanisms_, self._coins())

    def transform(self, X: ArrayLike) -> FloatMatrix:
        """One fresh report per record: the representative of every attribute's reported class."""
        reports = self.report_class_index(X)
        return self.anonymizer_.representative_values(reports)

    def __sklearn_tags__(self) -> Any:
        tags = super().__sklearn_tags__()
        tags.input_tags.categorical = True
        tags.input_tags.string = True
        return tags
