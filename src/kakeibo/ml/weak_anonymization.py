"""Weak anonymisation of records (seed 004, Miyaji et al., section 3.2): DTO (Algorithm 3) and WAT
(Algorithm 4), the deterministic first two steps of the WALDP mechanism (Algorithm 5,
:class:`kakeibo.ml.randomizers.WALDP`).

Every attribute ``A_j`` gets ``l_j`` ordered *classes*, each with a numeric *representative*; the weakly
anonymised (WA) value of ``x_j`` is the representative of its class.

* Continuous attribute (Algorithm 4, lines 2-7): its public domain ``[min(A_j), min(A_j) + Range_j]``
  (``feature_range``) is cut into ``l_j = L`` classes of width ``Range_j / L``; ``x`` (clipped to the
  domain) is in class ``i = ceil((x - min(A_j)) L / Range_j)`` (1-based; ``x = min(A_j)`` belongs to class
  1, a value on a class edge to the lower class) and the representative of class ``i`` is the class centre
  ``min(A_j) + (2i - 1) Range_j / (2L)`` (lines 2-5 and 7).
* Discrete attribute (Algorithm 3 then Algorithm 4, lines 9-19): DTO labels the ``k`` categories ``1..k`` in
  a fixed public order (so ``min(A_j) = 1``, ``Range_j = k - 1``); ``l_j = k`` when ``Range_j <= L``, else
  ``l_j = L`` (lines 10-14, literally: so ``k = L + 1`` categories keep ``L + 1`` classes). See
  :class:`DiscreteClasses` for the reading of line 18 and for the representatives.

**Privacy.** Weak anonymisation is a deterministic map: it has no neighbour relation under which it is
differentially private and no privacy loss to state. It only coarsens the data (the paper's section 5.2
calls it weak protection); the privacy comes from the randomized response that WALDP applies to its
classes.

>>> import numpy as np
>>> wa = WeakAnonymizer(4).fit(np.array([[-1.0], [1.0]]))
>>> wa.representatives_[0].tolist()
[-0.75, -0.25, 0.25, 0.75]
>>> wa.transform(np.array([[-1.0], [-0.5], [-0.4], [1.0]]))[:, 0].tolist()
[-0.75, -0.75, -0.25, 0.75]
"""

from __future__ import annotations

import numbers
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, NoReturn, Protocol

import numpy as np
from numpy.typing import ArrayLike, NDArray
from scipy import sparse
from sklearn.base import BaseEstimator, OneToOneFeatureMixin, TransformerMixin

from ..errors import ArgumentError, ArgumentTypeError
from ._common import FloatMatrix, check_features, check_fitted

__all__ = [
    "AttributeClasses",
    "ContinuousClasses",
    "DiscreteClasses",
    "DiscreteToOrdered",
    "WeakAnonymizer",
]

FloatArray = NDArray[np.float64]
IntArray = NDArray[np.int64]
IntMatrix = NDArray[np.int64]


# -- Algorithm 3: DTO -----------------------------------------------------------------------------------


def _is_number(value: object) -> bool:
    return isinstance(value, numbers.Real) and not isinstance(value, (bool, np.bool_))


def _check_category_list(categories: object, name: str) -> tuple[Any, ...]:
    """``categories`` as a tuple of distinct hashable values (finite when numbers), or a clear error."""
    if isinstance(categories, np.ndarray):
        categories = categories.tolist()
    if isinstance(categories, (str, bytes)) or not isinstance(categories, Sequence):
        raise ArgumentTypeError(
            f"{name} must be a sequence of category values, got {type(categories).__name__}."
        )
    values = tuple(categories)
    if not values:
        raise ArgumentError(f"{name} must hold at least one category.")
    seen: set[Any] = set()
    for value in values:
        try:
            duplicate = value in seen
        except TypeError:
            raise ArgumentTypeError(f"{name} holds {value!r}, which is not hashable.") from None
        if duplicate:
            raise ArgumentError(f"{name} lists the category {value!r} twice.")
        if _is_number(value) and not np.isfinite(float(value)):
            raise ArgumentError(f"{name} holds {value!r}; numeric categories must be finite.")
        seen.add(value)
    return values


class DiscreteToOrdered:
    """Algorithm 3 (DTO): the categories of a discrete attribute labelled ``1, 2, ..., k`` in a fixed order.

    The order is the order of ``categories`` (decided once and announced to the data owners, as the paper
    says); it makes ``min(A_j) = 1``, ``max(A_j) = k`` and ``Range_j = k - 1`` meaningful for any discrete
    attribute. (The paper's example labels north, east, south, west as 1..4 but then says DTO maps west to
    2; kakeibo follows the stated order, west -> 4.)

    >>> dto = DiscreteToOrdered(["north", "east", "south", "west"])
    >>> dto.order_index(["west", "east"]).tolist(), dto.range
    ([4, 2], 3)
    """

    def __init__(self, categories: Sequence[Any], name: str = "categories") -> None:
        self.categories: tuple[Any, ...] = _check_category_list(categories, name)
        self.name = name
        self._order = {value: position + 1 for position, value in enumerate(self.categories)}
        #: True when every category is a real number (then the categories have a numeric scale).
        self.numeric = all(_is_number(value) for value in self.categories)

    def __repr__(self) -> str:
        return f"DiscreteToOrdered({list(self.categories)!r})"

    @property
    def k(self) -> int:
        """The number of categories."""
        return len(self.categories)

    @property
    def range(self) -> int:
        """``Range_j = max(A_j) - min(A_j) = k - 1``."""
        return self.k - 1

    def order_index(self, values: ArrayLike) -> IntArray:
        """The ordered index ``ox`` (1..k) of each value; a value that is not a category is refused."""
        column = np.asarray(values)
        if column.ndim != 1:
            raise ArgumentError(f"the values of {self.name} must be a 1-d array, got shape {column.shape}.")
        if self.numeric and column.dtype.kind in "biuf":
            return self._numeric_order_index(column.astype(np.float64))
        return np.array([self._lookup(value) for value in column.tolist()], dtype=np.int64)

    def _numeric_order_index(self, column: FloatArray) -> IntArray:
        values = np.array(self.categories, dtype=np.float64)
        by_value = np.argsort(values)
        sorted_values = values[by_value]
        position = np.clip(np.searchsorted(sorted_values, column), 0, self.k - 1)
        unknown = sorted_values[position] != column
        if np.any(unknown):
            self._refuse(column[unknown][0].item())
        return np.asarray(by_value[position] + 1, dtype=np.int64)

    def _lookup(self, value: Any) -> int:
        try:
            return self._order[value]
        except (KeyError, TypeError):
            self._refuse(value)

    def _refuse(self, value: Any) -> NoReturn:
        raise ArgumentError(
            f"{self.name} holds {value!r}, which is not one of its {self.k} categories "
            "(given in `categories` or seen in fit)."
        )


# -- Algorithm 4: WAT -----------------------------------------------------------------------------------


class AttributeClasses(Protocol):
    """The ``l_j`` weak-anonymisation classes of one attribute."""

    @property
    def n_classes(self) -> int:
        """``l_j``."""
        ...

    @property
    def representatives(self) -> FloatArray:
        """The numeric value of each class, in class order."""
        ...

    def class_index(self, column: NDArray[Any]) -> IntArray:
        """The 0-based class of each value."""
        ...


@dataclass(frozen=True)
class ContinuousClasses:
    """Algorithm 4, lines 2-7: ``n_classes`` classes of width ``Range / L`` over ``[low, high]``.

    >>> c = ContinuousClasses(0.0, 10.0, 5)
    >>> c.representatives.tolist(), c.class_index(np.array([0.0, 2.0, 2.5, 10.0, 12.0])).tolist()
    ([1.0, 3.0, 5.0, 7.0, 9.0], [0, 0, 1, 4, 4])
    """

    low: float
    high: float
    n_classes: int

    @property
    def representatives(self) -> FloatArray:
        """Class centres ``min + (2i - 1) Range / (2L)``, ``i = 1..L`` (lines 2-5)."""
        i = np.arange(1, self.n_classes + 1)
        return np.asarray(self.low + (2 * i - 1) * (self.high - self.low) / (2 * self.n_classes))

    def class_index(self, column: NDArray[Any]) -> IntArray:
        """``ceil((x - min) L / Range) - 1`` with ``x`` clipped to the domain and ``x = min`` in class 0
        (line 6; the quotient is evaluated in floating point, so a value within rounding error of a class
        edge may fall on either side of it)."""
        x = np.clip(column.astype(np.float64), self.low, self.high)
        i = np.ceil((x - self.low) * self.n_classes / (self.high - self.low))
        return np.asarray(np.clip(i, 1, self.n_classes) - 1, dtype=np.int64)


class DiscreteClasses:
    """Algorithm 4, lines 9-19: the classes of a discrete attribute after DTO.

    * ``l = k`` when ``Range_j = k - 1 <= L``, else ``l = L`` (lines 10-14, followed literally).
    * **Line 18** reads ``i' = ox mod L``. Taken literally it yields class 0, which does not exist (for
      ``ox = L``), and puts non-adjacent categories together (``ox`` and ``ox + L``), so the ordering that
      DTO introduced would be lost. kakeibo reads it as *merge adjacent categories into ``l`` classes of
      (nearly) equal size*: ``i' = ceil(ox l / k)``. Every ``i'`` lies in ``1..l``, every class is
      non-empty (consecutive ``ox`` raise ``ox l / k`` by less than 1), only adjacent categories share a
      class, and when ``l = k`` it is the identity ``i' = ox``.
    * **Line 16** (``WA_j[i] <- j_i``) does not say what value a class takes. The WA data feed an SVM, so
      the representative keeps the attribute on its numeric scale: the mean of the class's category
      values when the categories are numbers, else the mean ordered index of the class mapped affinely
      from ``[1, k]`` onto the attribute's ``[low, high]`` (the midpoint when ``k = 1``). So a class of a
      single numeric category is represented by that category itself (Ionosphere's ``{-1, 1}`` attribute
      stays ``{-1, 1}`` for every ``L >= 2``).

    >>> d = DiscreteClasses(DiscreteToOrdered([0, 1, 2, 3, 4]), 2, low=-1.0, high=1.0)
    >>> d.n_classes, d.representatives.tolist(), d.class_index(np.array([1.0, 2.0])).tolist()
    (2, [0.5, 3.0], [0, 1])
    """

    def __init__(self, ordering: DiscreteToOrdered, n_classes: int, *, low: float, high: float) -> None:
        k = ordering.k
        self.ordering = ordering
        self.n_classes = k if ordering.range <= n_classes else n_classes
        members = self._class_of_order(np.arange(1, k + 1))
        counts = np.bincount(members, minlength=self.n_classes)
        if ordering.numeric:
            weights = np.array(ordering.categories, dtype=np.float64)
        else:
            unit = (np.arange(k) / ordering.range) if k > 1 else np.full(1, 0.5)
            weights = low + unit * (high - low)
        self.representatives: FloatArray = np.bincount(members, weights=weights) / counts

    def __repr__(self) -> str:
        return f"DiscreteClasses({self.ordering!r}, n_classes={self.n_classes})"

    def _class_of_order(self, order: IntArray) -> IntArray:
        """``ceil(ox l / k) - 1`` in integer arithmetic."""
        k = self.ordering.k
        return np.asarray((order * self.n_classes + k - 1) // k - 1, dtype=np.int64)

    def class_index(self, column: NDArray[Any]) -> IntArray:
        return self._class_of_order(self.ordering.order_index(column))


# -- input checks shared with the randomizers ---------------------------------------------------------


def check_n_classes(n_classes: object) -> int:
    """``L``: an integer of at least 2."""
    if isinstance(n_classes, bool) or not isinstance(n_classes, (int, np.integer)):
        raise ArgumentTypeError(f"n_classes must be an integer, not {type(n_classes).__name__}.")
    if n_classes < 2:
        raise ArgumentError(f"n_classes must be at least 2, got {int(n_classes)}.")
    return int(n_classes)


def check_feature_range(feature_range: object, n_features: int) -> FloatMatrix:
    """``(n_features, 2)`` array of ``(low, high)`` from one pair or one pair per attribute."""
    message = (
        f"feature_range must be one (low, high) pair or {n_features} such pairs (one per attribute) of "
        "finite numbers with low < high"
    )
    try:
        pairs = np.asarray(feature_range, dtype=np.float64)
    except (TypeError, ValueError):
        raise ArgumentError(f"{message}, got {feature_range!r}.") from None
    if pairs.shape == (2,):
        pairs = np.tile(pairs, (n_features, 1))
    if pairs.shape != (n_features, 2) or not np.all(np.isfinite(pairs)) or np.any(pairs[:, 0] >= pairs[:, 1]):
        raise ArgumentError(f"{message}, got {feature_range!r}.")
    return pairs


def check_discrete_features(discrete_features: object, n_features: int) -> tuple[int, ...]:
    """Distinct attribute indices in ``0..n_features - 1``."""
    if isinstance(discrete_features, (str, bytes)) or not isinstance(discrete_features, Collection):
        shown = type(discrete_features).__name__
        raise ArgumentTypeError(f"discrete_features must be a sequence of attribute indices, got {shown}.")
    indices = list(discrete_features)
    for index in indices:
        if isinstance(index, (bool, np.bool_)) or not isinstance(index, (int, np.integer)):
            raise ArgumentTypeError(
                f"discrete_features must hold attribute indices (integers), got {index!r}."
            )
        if not 0 <= index < n_features:
            raise ArgumentError(
                f"discrete_features holds {int(index)}, but X has attributes 0..{n_features - 1}."
            )
    if len(set(indices)) != len(indices):
        raise ArgumentError("discrete_features lists an attribute twice.")
    return tuple(sorted(int(i) for i in indices))


def check_dense(X: ArrayLike) -> ArrayLike:
    """``X`` itself unless it is a scipy sparse matrix or array (refused: records are dense rows)."""
    if sparse.issparse(X):
        raise ArgumentTypeError(
            "X is sparse; these transformers need a dense array (sparse input is not supported)."
        )
    return X


def check_records(X: ArrayLike, n_features: int | None = None) -> NDArray[Any]:
    """``X`` as a non-empty 2-d array: finite floats when it holds numbers (``_common.check_features``),
    else an object array (discrete attributes may hold any category values)."""
    arr = np.asarray(check_dense(X))
    if arr.dtype.kind in "biuf":
        return check_features(arr, n_features)
    if arr.dtype.kind not in "OUS":
        raise ArgumentTypeError(f"X must hold numbers or category values, got dtype {arr.dtype}.")
    if arr.ndim != 2 or arr.shape[0] == 0 or arr.shape[1] == 0:
        raise ArgumentError(f"X must be a non-empty 2-d array (records x attributes), got shape {arr.shape}.")
    if n_features is not None and arr.shape[1] != n_features:
        raise ArgumentError(f"X has {arr.shape[1]} attributes, but this was fitted with {n_features}.")
    return arr.astype(object)


def record_columns(records: NDArray[Any], discrete: Collection[int]) -> list[NDArray[Any]]:
    """The columns of checked ``records``: continuous ones as finite floats, discrete ones as they are."""
    columns: list[NDArray[Any]] = []
    for j in range(records.shape[1]):
        column = records[:, j]
        if j not in discrete and column.dtype == object:
            if not all(_is_number(value) for value in column):
                raise ArgumentTypeError(f"attribute {j} is continuous and must hold numbers only.")
            column = column.astype(np.float64)
            if not np.all(np.isfinite(column)):
                raise ArgumentError(f"attribute {j} contains NaN or infinite values.")
        columns.append(column)
    return columns


def _check_categories(categories: object, discrete: tuple[int, ...]) -> dict[int, tuple[Any, ...]]:
    if categories is None:
        return {}
    if not isinstance(categories, Mapping):
        shown = type(categories).__name__
        raise ArgumentTypeError(
            f"categories must be a mapping from attribute index to category values, got {shown}."
        )
    given: dict[int, tuple[Any, ...]] = {}
    for index, values in categories.items():
        is_index = isinstance(index, (int, np.integer)) and not isinstance(index, (bool, np.bool_))
        if not is_index or index not in discrete:
            raise ArgumentError(f"categories are given for {index!r}, which is not one of discrete_features.")
        given[int(index)] = _check_category_list(values, f"categories[{int(index)}]")
    return given


def learned_categories(column: NDArray[Any], name: str) -> tuple[Any, ...]:
    """The sorted distinct values of ``column`` (the categories of a discrete attribute seen in fit)."""
    try:
        values = sorted(set(column.tolist()))
    except TypeError:
        raise ArgumentTypeError(
            f"the values of {name} cannot be sorted; give its categories explicitly."
        ) from None
    return tuple(values)


def ordering_for(column: NDArray[Any], given: Sequence[Any] | None, name: str) -> DiscreteToOrdered:
    """DTO for one discrete attribute: over ``given`` (every value of ``column`` must be one of them) or,
    when ``None``, over the sorted values seen in ``column``."""
    ordering = DiscreteToOrdered(learned_categories(column, name) if given is None else given, name)
    ordering.order_index(column)  # refuses values that are not categories
    return ordering


# -- the transformer ------------------------------------------------------------------------------------


class WeakAnonymizer(OneToOneFeatureMixin, TransformerMixin, BaseEstimator):  # type: ignore[misc]
    """Weak anonymisation (WAT, Algorithm 4, with DTO, Algorithm 3, for discrete attributes).

    ``n_classes`` is the paper's ``L``. ``feature_range`` is each attribute's public domain: one
    ``(low, high)`` pair for all attributes or one pair per attribute (``min(A_j) = low``,
    ``Range_j = high - low``); continuous values outside it are clipped to it. ``discrete_features`` lists
    the discrete attributes; ``categories`` maps (some of) them to their category values in the order DTO
    labels them ``1, 2, ...``. A discrete attribute without given categories takes the sorted distinct
    values seen in :meth:`fit`: that treats the observed categories as the attribute's public domain (as
    min-max normalisation with the data's own extremes does), which a deployment should declare instead.

    Fitted attributes: ``n_features_in_``; ``representatives_`` (per attribute, the ``l_j`` class values
    in class order); ``n_classes_`` (the ``l_j``); ``attribute_classes_`` (per attribute, a
    :class:`ContinuousClasses` or :class:`DiscreteClasses`); ``categories_`` (discrete attribute ->
    its categories in DTO order); ``feature_range_`` (``(n_features, 2)``); ``discrete_features_``.

    Deterministic, hence not differentially private (see the module docstring).

    >>> X = np.array([[-1.0, 0.0], [0.2, 1.0], [1.0, 1.0]])
    >>> wa = WeakAnonymizer(2, discrete_features=[1]).fit(X)
    >>> wa.class_index(X).tolist(), wa.transform(X).tolist()
    ([[0, 0], [1, 1], [1, 1]], [[-0.5, 0.0], [0.5, 1.0], [0.5, 1.0]])
    """

    n_features_in_: int
    representatives_: list[FloatArray]
    n_classes_: IntArray
    attribute_classes_: list[AttributeClasses]
    categories_: dict[int, tuple[Any, ...]]
    feature_range_: FloatMatrix
    discrete_features_: tuple[int, ...]

    def __init__(
        self,
        n_classes: int = 2,
        *,
        feature_range: Any = (-1.0, 1.0),
        discrete_features: Sequence[int] = (),
        categories: Mapping[int, Sequence[Any]] | None = None,
    ) -> None:
        self.n_classes = n_classes
        self.feature_range = feature_range
        self.discrete_features = discrete_features
        self.categories = categories

    def fit(self, X: ArrayLike, y: object = None) -> WeakAnonymizer:
        """Check the parameters and ``X`` and build each attribute's classes (``y`` is ignored)."""
        n_classes = check_n_classes(self.n_classes)
        records = check_records(X)
        d = records.shape[1]
        ranges = check_feature_range(self.feature_range, d)
        discrete = check_discrete_features(self.discrete_features, d)
        given = _check_categories(self.categories, discrete)
        columns = record_columns(records, discrete)
        classes: list[AttributeClasses] = []
        for j, column in enumerate(columns):
            low, high = float(ranges[j, 0]), float(ranges[j, 1])
            if j in discrete:
                ordering = ordering_for(column, given.get(j), f"attribute {j}")
                classes.append(DiscreteClasses(ordering, n_classes, low=low, high=high))
            else:
                classes.append(ContinuousClasses(low, high, n_classes))
        self.n_features_in_ = d
        self.feature_range_ = ranges
        self.discrete_features_ = discrete
        self.attribute_classes_ = classes
        self.categories_ = {
            j: c.ordering.categories for j, c in enumerate(classes) if isinstance(c, DiscreteClasses)
        }
        self.n_classes_ = np.array([c.n_classes for c in classes], dtype=np.int64)
        self.representatives_ = [c.representatives for c in classes]
        return self

    def class_index(self, X: ArrayLike) -> IntMatrix:
        """The 0-based class of every value, shape ``(n, d)`` (deterministic WAT, Algorithm 4 lines 6, 18)."""
        check_fitted(self)
        columns = record_columns(check_records(X, self.n_features_in_), self.discrete_features_)
        pairs = zip(self.attribute_classes_, columns, strict=True)
        return np.column_stack([classes.class_index(column) for classes, column in pairs]).astype(np.int64)

    def representative_values(self, class_index: ArrayLike) -> FloatMatrix:
        """The representative of each class index (an ``(n, d)`` array of 0-based classes): the WA data."""
        check_fitted(self)
        index = np.asarray(class_index)
        if index.ndim != 2 or index.shape[1] != self.n_features_in_ or index.dtype.kind not in "iu":
            raise ArgumentError(f"class_index must be an integer array of shape (n, {self.n_features_in_}).")
        if np.any(index < 0) or np.any(index >= self.n_classes_):
            raise ArgumentError("class_index holds a class outside 0..l_j - 1 for its attribute.")
        return np.column_stack(
            [values[index[:, j]] for j, values in enumerate(self.representatives_)]
        ).astype(np.float64)

    def transform(self, X: ArrayLike) -> FloatMatrix:
        """The WA data: every value replaced by its class's representative (Algorithm 4, lines 7 / 19)."""
        return self.representative_values(self.class_index(X))

    def __sklearn_tags__(self) -> Any:
        tags = super().__sklearn_tags__()
        tags.input_tags.categorical = True
        tags.input_tags.string = True
        return tags
