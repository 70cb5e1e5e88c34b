"""SUP.ML (seed 004, section 3.3): budget split, dimension reduction, data types, scikit-learn behaviour."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from sklearn.base import clone
from sklearn.linear_model import LogisticRegression
from sklearn.pipeline import make_pipeline
from sklearn.svm import SVC

from kakeibo.ml.supml import SUPML
from kakeibo.privacy import PureDP


def informative(n: int, d: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Attributes 1 and 3 carry the label (plus noise); the others are independent uniform noise."""
    rng = np.random.default_rng(seed)
    y = rng.choice([-1, 1], n)
    X = rng.uniform(-1, 1, (n, d))
    X[:, 1] = np.clip(0.6 * y + rng.normal(0, 0.3, n), -1, 1)
    X[:, 3] = np.clip(-0.5 * y + rng.normal(0, 0.3, n), -1, 1)
    return X, y


@pytest.mark.parametrize("k", [1, 3, 6])
def test_every_attribute_and_the_target_get_eps_over_k_plus_1(k: int) -> None:
    X, y = informative(300, 8, 0)
    model = SUPML(epsilon=7.0, n_features_to_select=k, n_classes=3, random_state=1).fit(X, y)
    assert model.attribute_epsilon == pytest.approx(7.0 / (k + 1))
    assert model.testing_encoder_.attribute_epsilon == pytest.approx(7.0 / (k + 1))
    assert model.testing_encoder_.privacy_loss.epsilon + model.attribute_epsilon == pytest.approx(7.0)
    assert model.selected_features_.size == k


@pytest.mark.parametrize(
    ("reduction", "training", "testing", "expected"),
    [
        (
            "rand",
            "waldp",
            "waldp",
            {"dimension_reduction": PureDP(0), "training": PureDP(5), "testing": PureDP(5)},
        ),
        ("pm", "waldp", "wa", {"dimension_reduction": PureDP(2), "training": PureDP(5), "testing": None}),
        ("wa", "wa", "waldp", {"dimension_reduction": None, "training": None, "testing": PureDP(5)}),
        ("rand", "pm", "pm", {"dimension_reduction": PureDP(0), "training": PureDP(5), "testing": PureDP(5)}),
        ("none", "raw", "raw", {"dimension_reduction": PureDP(0), "training": None, "testing": None}),
    ],
)
def test_privacy_loss_per_phase(
    reduction: str, training: str, testing: str, expected: dict[str, Any]
) -> None:
    """Weak anonymisation (DR.WA, WA data) and raw data give no DP guarantee: ``None``."""
    X, y = informative(200, 6, 1)
    model = SUPML(
        epsilon=5,
        n_features_to_select=2,
        dimension_reduction=reduction,  # type: ignore[arg-type]
        training=training,  # type: ignore[arg-type]
        testing=testing,  # type: ignore[arg-type]
        dimension_reduction_epsilon=2,
        random_state=0,
    ).fit(X, y)
    assert model.privacy_loss_ == expected


def test_dr_rand_is_a_seeded_uniform_subset() -> None:
    X, y = informative(50, 10, 2)
    picks = [
        tuple(SUPML(n_features_to_select=3, random_state=s).fit(X, y).selected_features_) for s in range(400)
    ]
    assert all(len(set(p)) == 3 and list(p) == sorted(p) for p in picks)
    assert picks[0] == tuple(SUPML(n_features_to_select=3, random_state=0).fit(X, y).selected_features_)
    counts = np.bincount(np.concatenate(picks), minlength=10)
    # each attribute is picked with probability 3/10: 120 of 400 expected, sd sqrt(400 * 0.3 * 0.7) = 9.2
    assert np.all(np.abs(counts - 120) < 5 * 9.2)


@pytest.mark.parametrize("reduction", ["wa", "pm"])
def test_dr_wa_and_dr_pm_find_the_informative_attributes(reduction: str) -> None:
    """Algorithms 6 and 7 on 4,000 owners: the two attributes that carry the label are chosen (DR.PM at
    eps_DR = 20 per record, 20/3 per report)."""
    X, y = informative(4000, 6, 3)
    model = SUPML(
        n_features_to_select=2,
        dimension_reduction=reduction,  # type: ignore[arg-type]
        dimension_reduction_epsilon=20,
        random_state=4,
    ).fit(X, y)
    assert model.selected_features_.tolist() == [1, 3]


def test_raw_data_is_the_plain_estimator() -> None:
    X, y = informative(300, 5, 5)
    model = SUPML(SVC(C=2.1, gamma="scale"), dimension_reduction="none", training="raw", testing="raw").fit(
        X, y
    )
    plain = SVC(C=2.1, gamma="scale").fit(X, y)
    assert np.array_equal(model.predict(X), plain.predict(X))


def test_class_labels_come_back_and_sklearn_conventions_hold() -> None:
    X, y = informative(300, 5, 6)
    labels = np.where(y == 1, "benign", "malignant")
    model = SUPML(LogisticRegression(), epsilon=20, n_features_to_select=2, random_state=0)
    fitted = clone(model).fit(X, labels)
    assert set(fitted.predict(X)) <= {"benign", "malignant"}
    assert list(fitted.classes_) == ["benign", "malignant"]
    assert model.get_params()["n_features_to_select"] == 2
    pipeline = make_pipeline(SUPML(epsilon=20, n_features_to_select=2, random_state=0)).fit(X, labels)
    assert 0.5 < pipeline.score(X, labels) <= 1.0


def test_waldp_testing_draws_fresh_noise_per_call() -> None:
    X, y = informative(500, 5, 7)
    model = SUPML(epsilon=2, n_features_to_select=3, n_classes=4, random_state=0).fit(X, y)
    assert not np.array_equal(
        model.testing_encoder_.transform(X[:, model.selected_features_]),
        model.testing_encoder_.transform(X[:, model.selected_features_]),
    )


def test_one_perturbed_class_gives_a_constant_prediction() -> None:
    """Two owners of different classes at eps = 0.02: randomized response sends the same label for both
    with probability about 1/2 per seed; across 40 seeds that happens (miss probability 2^-40) and the
    model then predicts that label everywhere."""
    X = np.array([[-0.5, 0.5], [0.5, -0.5]])
    y = np.array([-1, 1])
    constants = []
    for seed in range(40):
        model = SUPML(epsilon=0.02, n_features_to_select=1, random_state=seed).fit(X, y)
        if model.constant_prediction_ is not None:
            constants.append(model)
            assert set(model.predict(np.zeros((5, 2)))) == {model.constant_prediction_}
    assert constants


@pytest.mark.parametrize(
    ("params", "error", "match"),
    [
        ({"dimension_reduction": "pca"}, ValueError, "dimension_reduction must be one of rand, pm, wa, none"),
        ({"training": "laplace"}, ValueError, "training must be one of waldp, wa, pm, pm-sampled, raw"),
        ({"testing": "x"}, ValueError, "testing must be one of"),
        ({"epsilon": 0}, ValueError, "epsilon must be a positive finite number"),
        ({"dimension_reduction_epsilon": -1}, ValueError, "dimension_reduction_epsilon must be"),
        ({"n_features_to_select": 6}, ValueError, r"n_features_to_select must be an integer in 1\.\.5"),
        ({"random_state": "seed"}, TypeError, "random_state must be"),
    ],
)
def test_bad_parameters_are_refused_at_fit(params: dict[str, Any], error: type, match: str) -> None:
    X, y = informative(20, 5, 8)
    with pytest.raises(error, match=match):
        SUPML(**params).fit(X, y)


def test_bad_data_is_refused() -> None:
    X, y = informative(20, 5, 9)
    with pytest.raises(ValueError, match="exactly two classes"):
        SUPML().fit(X, np.zeros(20))
    model = SUPML(n_features_to_select=2, random_state=0).fit(X, y)
    with pytest.raises(ValueError, match="X has 4 attributes, but this was fitted with 5"):
        model.predict(X[:, :4])
