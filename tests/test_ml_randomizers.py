"""The LDP transformers of seed 004: PM (Algorithm 1), k-ary RR (Algorithm 2) and WALDP (Algorithm 5).

Calibration is checked against the paper's closed forms, recomputed here: the RR keep probability
``e^(eps/d) / (l - 1 + e^(eps/d))``, the PM bound ``C = (e^(eps/2d) + 1) / (e^(eps/2d) - 1)`` and variance
``x^2 / (e^(eps/2d) - 1) + (e^(eps/2d) + 3) / (3 (e^(eps/2d) - 1)^2)`` (in units of the half-width of the
domain). The statistical tests are seeded and state their false-failure rates; the eps-LDP audits
(:func:`kakeibo.audit.audit`, Clopper-Pearson at confidence 1 - 1e-6) check every mechanism per attribute
and per record, and each has a negative control (the budget not divided by d) that the audit must refute.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from fractions import Fraction
from typing import Any

import numpy as np
import pytest
from sklearn.base import clone
from sklearn.exceptions import NotFittedError
from sklearn.pipeline import Pipeline
from sklearn.svm import SVC

from kakeibo.audit import AuditResult, audit, value_event
from kakeibo.ldp.numeric import PiecewiseMechanism
from kakeibo.ml.randomizers import WALDP, PiecewiseTransformer, RandomizedResponseTransformer
from kakeibo.ml.weak_anonymization import WeakAnonymizer
from kakeibo.privacy import PureDP

Z = 5.0  # two-sided normal tail 5.7e-7 per check
AUDIT_ALPHA = 1e-6  # false-failure rate of each "not refuted" assertion
TRIALS = 1_000_000

# A mixed record for WALDP: a continuous attribute (L = 3 classes), a discrete one with k = 5 > L + 1
# categories (l = 3, classes {0}, {1, 2}, {3, 4}) and Ionosphere's kind of binary attribute (l = 2).
MIXED: dict[str, Any] = {
    "n_classes": 3,
    "discrete_features": (1, 2),
    "categories": {1: [0, 1, 2, 3, 4], 2: [-1, 1]},
}
MIXED_FIT = np.array([[-1.0, 0.0, -1.0], [1.0, 4.0, 1.0]])
MIXED_LEVELS = (3, 3, 2)


def keep_probability(epsilon: float, categories: int) -> float:
    return math.exp(epsilon) / (categories - 1 + math.exp(epsilon))


def piecewise_bound(epsilon: float) -> float:
    half = math.exp(epsilon / 2)
    return (half + 1) / (half - 1)


def piecewise_variance(epsilon: float, x: float) -> float:
    half = math.exp(epsilon / 2)
    return x**2 / (half - 1) + (half + 3) / (3 * (half - 1) ** 2)


# --- calibration ----------------------------------------------------------------------------------------


def test_randomized_response_keep_probability_is_the_closed_form_at_epsilon_over_d() -> None:
    categories = [[0, 1, 2], [0, 1, 2, 3, 4], [7]]
    rr = RandomizedResponseTransformer(3.0, categories=categories).fit(np.array([[0, 0, 7]]))
    assert rr.attribute_epsilon == 1.0 and rr.privacy_loss == PureDP(3)
    for mechanism, k in zip(rr.mechanisms_[:2], (3, 5), strict=True):
        assert mechanism is not None
        assert mechanism.p == pytest.approx(keep_probability(1.0, k), rel=1e-12)
        assert mechanism.q == pytest.approx(1 / (k - 1 + math.e), rel=1e-12)
    assert rr.mechanisms_[2] is None  # a single category: released as it is


def test_waldp_runs_randomized_response_over_each_attributes_classes() -> None:
    waldp = WALDP(6.0, **MIXED).fit(MIXED_FIT)
    assert waldp.attribute_epsilon == 2.0 and waldp.privacy_loss == PureDP(6)
    assert waldp.anonymizer_.n_classes_.tolist() == list(MIXED_LEVELS)
    for mechanism, level in zip(waldp.mechanisms_, MIXED_LEVELS, strict=True):
        assert mechanism is not None and mechanism.categories == level
        assert mechanism.p == pytest.approx(keep_probability(2.0, level), rel=1e-12)


def test_piecewise_transformer_uses_epsilon_over_d_and_stays_within_the_mapped_bound() -> None:
    """Every report of attribute j lies in centre_j +- half_j C with C at eps / d."""
    ranges = [(0.0, 10.0), (-5.0, 5.0), (1.0, 2.0)]
    pm = PiecewiseTransformer(6.0, feature_range=ranges, random_state=4).fit(np.zeros((1, 3)))
    assert pm.attribute_epsilon == 2.0 and pm.mechanism_.epsilon == 2.0
    assert pm.mechanism_.output_bound == pytest.approx(piecewise_bound(2.0), rel=1e-12)
    rng = np.random.default_rng(0)
    x = np.column_stack([rng.uniform(low, high, 20_000) for low, high in ranges])
    y = pm.transform(x)
    centre = np.array([(low + high) / 2 for low, high in ranges])
    half = np.array([(high - low) / 2 for low, high in ranges])
    assert np.all(np.abs(y - centre) <= half * piecewise_bound(2.0) * (1 + 1e-12))


def test_piecewise_clips_values_outside_the_domain() -> None:
    """A value beyond the domain is reported like the domain's end: the report is the same function of the
    clipped value, so with the same coins the outputs agree."""
    fitted = PiecewiseTransformer(2.0, feature_range=(0.0, 1.0), random_state=9).fit(np.zeros((1, 1)))
    outside = fitted.transform(np.array([[5.0], [-3.0]]))
    inside = clone(fitted).fit(np.zeros((1, 1))).transform(np.array([[1.0], [0.0]]))
    assert np.array_equal(outside, inside)


@pytest.mark.statistical
def test_piecewise_reports_are_unbiased_in_the_original_units() -> None:
    """200,000 reports of two records on domains [0, 10] and [-5, 5] at eps = 4 (2 per attribute): the mean
    of each attribute is within 5 standard errors of the true value, the standard error from the
    continuous PM variance ``half^2 Var_PM(x_unit)`` (+0.1% for the discretisation), false failure
    5.7e-7 per check, 2.3e-6 in all."""
    pm = PiecewiseTransformer(4.0, feature_range=[(0.0, 10.0), (-5.0, 5.0)], random_state=11)
    pm.fit(np.zeros((1, 2)))
    n = 200_000
    for record in ([2.5, -5.0], [10.0, 1.0]):
        y = pm.transform(np.tile(record, (n, 1)))
        for j, (value, centre) in enumerate(zip(record, (5.0, 0.0), strict=True)):
            variance = 25.0 * piecewise_variance(2.0, (value - centre) / 5.0) * 1.001
            assert abs(y[:, j].mean() - value) < Z * math.sqrt(variance / n)


@pytest.mark.statistical
def test_randomized_response_reports_follow_the_closed_form() -> None:
    """200,000 reports of category 'b' of ['a', 'b', 'c'] at eps / d = 1: each category's share is within 5
    standard errors of p (for 'b') or q (false failure 5.7e-7 per check)."""
    rr = RandomizedResponseTransformer(2.0, categories=[["a", "b", "c"], [0, 1]], random_state=12)
    rr.fit(np.array([["a", 0]], dtype=object))
    n = 200_000
    reports = rr.transform(np.tile(np.array([["b", 1]], dtype=object), (n, 1)))
    p = keep_probability(1.0, 3)
    for category, expected in (("a", (1 - p) / 2), ("b", p), ("c", (1 - p) / 2)):
        share = float(np.mean(reports[:, 0] == category))
        assert abs(share - expected) < Z * math.sqrt(expected * (1 - expected) / n)


@pytest.mark.statistical
def test_waldp_reports_the_true_class_with_probability_p() -> None:
    """200,000 reports of the record (0.1, 2, 1): true classes (1, 1, 1) of levels (3, 3, 2) at eps / d =
    1; each class's share is within 5 standard errors of p or q (false failure 5.7e-7 per check)."""
    waldp = WALDP(3.0, **MIXED, random_state=13).fit(MIXED_FIT)
    n = 200_000
    reports = waldp.report_class_index(np.tile([0.1, 2.0, 1.0], (n, 1)))
    for j, level in enumerate(MIXED_LEVELS):
        p = keep_probability(1.0, level)
        for c in range(level):
            expected = p if c == 1 else (1 - p) / (level - 1)
            share = float(np.mean(reports[:, j] == c))
            assert abs(share - expected) < Z * math.sqrt(expected * (1 - expected) / n)


# --- outputs --------------------------------------------------------------------------------------------


def test_every_waldp_output_is_a_representative() -> None:
    waldp = WALDP(1.5, **MIXED, random_state=5).fit(MIXED_FIT)
    rng = np.random.default_rng(6)
    x = np.column_stack([rng.uniform(-1, 1, 5000), rng.integers(0, 5, 5000), rng.choice([-1, 1], 5000)])
    out = waldp.transform(x)
    expected = [[-2 / 3, 0.0, 2 / 3], [0.0, 1.5, 3.5], [-1.0, 1.0]]
    for j, representatives in enumerate(expected):
        np.testing.assert_allclose(waldp.representatives_[j], representatives, rtol=0, atol=1e-15)
        assert set(np.unique(out[:, j])) <= set(waldp.representatives_[j].tolist())


def test_a_single_class_attribute_is_released_as_its_constant() -> None:
    waldp = WALDP(2.0, 4, discrete_features=[1], categories={1: [5]}, random_state=0)
    out = waldp.fit_transform(np.column_stack([np.linspace(-1, 1, 1000), np.full(1000, 5.0)]))
    assert waldp.mechanisms_[1] is None
    assert np.all(out[:, 1] == 5.0)


def test_randomized_response_outputs_are_categories() -> None:
    rr = RandomizedResponseTransformer(1.0, random_state=3)
    x = np.array([["n", 1.0], ["s", 2.0], ["w", 2.0]], dtype=object)
    out = rr.fit(x).transform(np.tile(x, (500, 1)))
    assert rr.categories_ == [("n", "s", "w"), (1.0, 2.0)]  # learned in fit: sorted distinct values
    assert out.dtype == object
    assert set(out[:, 0]) <= {"n", "s", "w"} and set(out[:, 1]) <= {1.0, 2.0}
    numeric = RandomizedResponseTransformer(1.0, categories=[[-1, 1]], random_state=3)
    labels = numeric.fit_transform(np.array([[-1.0], [1.0]] * 100))
    assert labels.dtype == np.float64 and set(np.unique(labels).tolist()) <= {-1.0, 1.0}


def test_every_transform_is_a_fresh_report_and_a_seed_reproduces_them() -> None:
    x = np.tile(MIXED_FIT, (200, 1))
    for transformer in (
        WALDP(3.0, **MIXED, random_state=8),
        PiecewiseTransformer(3.0, random_state=8),
        RandomizedResponseTransformer(3.0, random_state=8),
    ):
        fitted = transformer.fit(x)
        first, second = fitted.transform(x), fitted.transform(x)
        assert not np.array_equal(first, second)
        again = clone(transformer).fit(x)
        assert np.array_equal(again.transform(x), first) and np.array_equal(again.transform(x), second)


def test_the_default_randomness_is_the_secure_source() -> None:
    waldp = WALDP(3.0, **MIXED).fit(MIXED_FIT)
    assert waldp._coins().secure and not WALDP(3.0, **MIXED, random_state=1).fit(MIXED_FIT)._coins().secure
    out = waldp.transform(np.tile(MIXED_FIT, (100, 1)))
    for j in range(3):
        assert set(np.unique(out[:, j])) <= set(waldp.representatives_[j].tolist())


def test_waldp_at_a_huge_epsilon_is_the_weak_anonymisation() -> None:
    """At eps / d = 40 a report differs from its class with probability (l - 1) / (l - 1 + e^40) < 1e-17;
    over 3,000 values the chance of any difference is below 1e-13."""
    rng = np.random.default_rng(2)
    x = np.column_stack([rng.uniform(-1, 1, 1000), rng.integers(0, 5, 1000), rng.choice([-1, 1], 1000)])
    waldp = WALDP(120.0, **MIXED, random_state=1).fit(MIXED_FIT)
    assert np.array_equal(waldp.transform(x), WeakAnonymizer(**MIXED).fit(MIXED_FIT).transform(x))


# --- scikit-learn conventions ---------------------------------------------------------------------------


def test_parameters_and_clone() -> None:
    waldp = WALDP(
        2.0, 3, feature_range=(0.0, 1.0), discrete_features=(0,), categories={0: [0, 1]}, random_state=7
    )
    assert waldp.get_params() == {
        "epsilon": 2.0,
        "n_classes": 3,
        "feature_range": (0.0, 1.0),
        "discrete_features": (0,),
        "categories": {0: [0, 1]},
        "random_state": 7,
    }
    assert PiecewiseTransformer(1.0).get_params() == {
        "epsilon": 1.0,
        "feature_range": (-1.0, 1.0),
        "sample_attributes": False,
        "random_state": None,
    }
    assert RandomizedResponseTransformer(1.0).get_params() == {
        "epsilon": 1.0,
        "categories": None,
        "random_state": None,
    }
    copy = clone(waldp).set_params(epsilon=4.0)
    assert copy.epsilon == 4.0 and waldp.epsilon == 2.0
    with pytest.raises(NotFittedError):
        copy.transform(np.zeros((1, 1)))
    with pytest.raises(NotFittedError):
        _ = copy.privacy_loss
    fitted = copy.fit(np.array([[0.0, 0.3]]))
    assert fitted.n_features_in_ == 2 and fitted.get_feature_names_out().tolist() == ["x0", "x1"]


def test_pipeline_with_an_svm_on_wdbc() -> None:
    """(WALDP, WALDP) on WDBC: the pipeline trains and predicts labels; at eps / d = 40 (no flips, see
    above) its predictions are those of the (WA, WA) pipeline."""
    from kakeibo.ml.datasets import load_wdbc

    data = load_wdbc()
    d = data.n_features
    waldp = Pipeline([("waldp", WALDP(2.0 * d, 4, random_state=0)), ("svc", SVC(C=data.svm_C))]).fit(
        data.X, data.y
    )
    assert set(np.unique(waldp.predict(data.X)).tolist()) <= {-1, 1}
    exact = Pipeline([("waldp", WALDP(40.0 * d, 4, random_state=0)), ("svc", SVC(C=data.svm_C))]).fit(
        data.X, data.y
    )
    wa = Pipeline([("wa", WeakAnonymizer(4)), ("svc", SVC(C=data.svm_C))]).fit(data.X, data.y)
    assert np.array_equal(exact.predict(data.X), wa.predict(data.X))
    pm = Pipeline([("pm", PiecewiseTransformer(2.0 * d, random_state=0)), ("svc", SVC())]).fit(data.X, data.y)
    assert set(np.unique(pm.predict(data.X)).tolist()) <= {-1, 1}


# --- refusals -------------------------------------------------------------------------------------------

BAD_EPSILONS: list[tuple[Any, type[Exception]]] = [
    (0.0, ValueError),
    (-1.0, ValueError),
    (math.nan, ValueError),
    (math.inf, ValueError),
    ("many", ValueError),
    (True, TypeError),
]


@pytest.mark.parametrize(("epsilon", "error"), BAD_EPSILONS)
@pytest.mark.parametrize("cls", [WALDP, PiecewiseTransformer, RandomizedResponseTransformer])
def test_bad_epsilon_is_refused(cls: Callable[..., Any], epsilon: Any, error: type[Exception]) -> None:
    with pytest.raises(error, match="epsilon"):
        cls(epsilon).fit(np.zeros((2, 2)))


def test_bad_parameters_are_refused() -> None:
    x = np.zeros((2, 2))
    with pytest.raises(ValueError, match="n_classes must be at least 2"):
        WALDP(1.0, 1).fit(x)
    with pytest.raises(ValueError, match="feature_range"):
        WALDP(1.0, feature_range=(0.0, 0.0)).fit(x)
    with pytest.raises(ValueError, match="feature_range"):
        PiecewiseTransformer(1.0, feature_range=[(0.0, 1.0)]).fit(x)
    with pytest.raises(ValueError, match="exceeds 64"):
        PiecewiseTransformer(130.0).fit(x)
    with pytest.raises(ValueError, match="one sequence for each of the 2 attributes"):
        RandomizedResponseTransformer(1.0, categories=[[0, 1]]).fit(x)
    with pytest.raises(TypeError, match="one sequence of categories per attribute"):
        RandomizedResponseTransformer(1.0, categories={0: [0, 1]}).fit(x)
    with pytest.raises(TypeError, match="random_state"):
        WALDP(1.0, random_state="seed").fit(x)


@pytest.mark.parametrize(
    "transformer",
    [
        WALDP(2.0, **MIXED),
        PiecewiseTransformer(2.0),
        RandomizedResponseTransformer(2.0, categories=[[-1, 1], [0, 1, 2, 3, 4], [-1, 1]]),
    ],
    ids=["WALDP", "PM", "RR"],
)
def test_bad_records_are_refused_before_any_coin_is_drawn(transformer: Any) -> None:
    generator = np.random.default_rng(0)
    fitted = clone(transformer).set_params(random_state=generator).fit(MIXED_FIT)
    state = generator.bit_generator.state
    with pytest.raises(ValueError, match="fitted with 3"):
        fitted.transform(np.zeros((1, 2)))
    with pytest.raises(ValueError, match="NaN"):
        fitted.transform(np.array([[0.0, 1.0, math.nan]]))
    with pytest.raises(ValueError, match="2-d"):
        fitted.transform(np.zeros(3))
    if not isinstance(fitted, PiecewiseTransformer):
        with pytest.raises(ValueError, match=r"attribute 1 holds 7\.0, which is not one of its 5 categories"):
            fitted.transform(np.array([[1.0, 7.0, 1.0]]))
    assert generator.bit_generator.state == state


# --- eps-LDP audits -------------------------------------------------------------------------------------


def undivided(cls: type[Any]) -> type[Any]:
    """A broken variant of ``cls`` that spends the whole epsilon on every attribute (real loss d eps)."""

    class Undivided(cls):  # type: ignore[valid-type, misc]
        def _attribute_budget(self, epsilon: Fraction, n_features: int) -> Fraction:
            return epsilon

    Undivided.__name__ = f"Undivided{cls.__name__}"
    return Undivided


View = Callable[[Any, np.ndarray], np.ndarray]


def record_sampler(
    transformer: Any, view: View, fit_on: np.ndarray
) -> Callable[[Any, int, np.random.Generator], np.ndarray]:
    """A sampler for :func:`kakeibo.audit.audit`: ``n`` reports of one record by ``transformer`` (fitted on
    ``fit_on``, the same for both records, with the audit's generator as its randomness), each reduced by
    ``view`` (a post-processing, so every event on it is an event on the report)."""

    def sample(record: Any, n: int, rng: np.random.Generator) -> np.ndarray:
        fitted = clone(transformer).set_params(random_state=rng).fit(fit_on)
        return view(fitted, fitted.transform(np.tile(record, (n, 1))))

    return sample


def run_audit(
    transformer: Any, view: View, pair: tuple[Any, Any], codes: int, seed: int, trials: int
) -> AuditResult:
    """Audit ``transformer`` on the two records of ``pair`` with one value event per code of ``view``."""
    events = [value_event(code) for code in range(codes)]
    sampler = record_sampler(transformer, view, np.array(pair, dtype=np.float64))
    return audit(
        sampler,
        pair[0],
        pair[1],
        trials=trials,
        alpha=AUDIT_ALPHA,
        events=events,
        rng=np.random.default_rng(seed),
    )


def best_estimate(result: AuditResult) -> float:
    return max(e.epsilon_estimate for e in result.events)


def piecewise_side(fitted: Any, reports: np.ndarray) -> np.ndarray:
    """Per attribute 0 (report at or below the domain's low end, in PM's bottom window ``[-C, -1]``),
    2 (at or above the high end) or 1: with x at an end of the domain, PM puts its window exactly there, so
    ``Pr[top | high] / Pr[top | low] = e^(eps/d)``. A margin of 1e-3 (about ten cells) absorbs rounding at
    the window's edge; it only changes the event, never the audit's validity."""
    ranges = fitted.feature_range_
    unit = (reports - ranges.mean(axis=1)) / ((ranges[:, 1] - ranges[:, 0]) / 2)
    return np.asarray(1 + (unit >= 1 - 1e-3).astype(np.int64) - (unit <= -1 + 1e-3), dtype=np.int64)


def mixed_radix(sides: np.ndarray, levels: tuple[int, ...]) -> np.ndarray:
    code = np.zeros(sides.shape[0], dtype=np.int64)
    for j, level in enumerate(levels):
        code = code * level + sides[:, j]
    return code


def pm_record_view(fitted: Any, reports: np.ndarray) -> np.ndarray:
    return mixed_radix(piecewise_side(fitted, reports), (3, 3))


def pm_attribute_view(fitted: Any, reports: np.ndarray) -> np.ndarray:
    return piecewise_side(fitted, reports)[:, 0]


def waldp_classes(fitted: Any, reports: np.ndarray) -> np.ndarray:
    """The class index of every released value (its position among the representatives; every value must
    be one of them)."""
    columns = []
    for j, representatives in enumerate(fitted.representatives_):
        matches = reports[:, j, None] == representatives[None, :]
        assert np.all(matches.sum(axis=1) == 1), "a WALDP output is not a representative"
        columns.append(np.argmax(matches, axis=1))
    return np.column_stack(columns)


def waldp_record_view(fitted: Any, reports: np.ndarray) -> np.ndarray:
    return mixed_radix(waldp_classes(fitted, reports), MIXED_LEVELS)


def waldp_attribute_view(fitted: Any, reports: np.ndarray) -> np.ndarray:
    return np.asarray(waldp_classes(fitted, reports)[:, 1])


def rr_attribute_view(fitted: Any, reports: np.ndarray) -> np.ndarray:
    return np.asarray(reports[:, 1], dtype=np.int64)


PM_DOMAIN = [(0.0, 10.0), (-5.0, 5.0)]


@pytest.mark.statistical
def test_piecewise_transformer_is_eps_over_d_ldp_per_attribute() -> None:
    """d = 2, eps = 2: two records that differ in attribute 0 only (its two ends) are distinguished with loss
    at most eps / d = 1. 10^6 reports each; not refuted at confidence 1 - 1e-6; the best point estimate
    comes within 0.15 of 1 (the "top window" event has ratio e^1 and ~2.3e5 reports on its rarer side)."""
    pm = PiecewiseTransformer(2.0, feature_range=PM_DOMAIN)
    result = run_audit(pm, pm_attribute_view, ([0.0, 1.0], [10.0, 1.0]), 3, seed=21, trials=TRIALS)
    assert not result.refutes(1.0), str(result)
    assert best_estimate(result) > 1.0 - 0.15, str(result)


@pytest.mark.statistical
def test_piecewise_transformer_is_eps_ldp_per_record() -> None:
    """d = 2, eps = 4: the two corners of the domain, 10^6 reports each. "Both attributes in their top window"
    has ratio e^4 (~1e4 reports on its rarer side); not refuted at confidence 1 - 1e-6, estimate within
    0.15 of 4."""
    pm = PiecewiseTransformer(4.0, feature_range=PM_DOMAIN)
    result = run_audit(pm, pm_record_view, ([0.0, -5.0], [10.0, 5.0]), 9, seed=22, trials=TRIALS)
    assert not result.refutes(4.0), str(result)
    assert best_estimate(result) > 4.0 - 0.15, str(result)


@pytest.mark.statistical
def test_audit_refutes_a_piecewise_transformer_that_does_not_divide_the_budget() -> None:
    """Negative control: each attribute at the full eps = 4, so the record's real loss is 8; with 10^5
    reports the "both top" event has ~26 expected counts under one record against ~7.8e4 under the other,
    a ratio near e^8, far above the claimed e^4."""
    broken = undivided(PiecewiseTransformer)(4.0, feature_range=PM_DOMAIN)
    result = run_audit(broken, pm_record_view, ([0.0, -5.0], [10.0, 5.0]), 9, seed=23, trials=100_000)
    assert result.refutes(4.0), str(result)


RR_CATEGORIES = [[0, 1], [0, 1, 2, 3, 4], [-1, 1]]


@pytest.mark.statistical
def test_randomized_response_transformer_is_eps_over_d_ldp_per_attribute() -> None:
    """d = 3, eps = 3: records differing in attribute 1 only (categories 0 and 4 of 5); reports of that
    attribute have likelihood ratio exactly e^(eps/d) = e on "report = 0". 10^6 each, not refuted at
    confidence 1 - 1e-6, estimate within 0.1 of 1."""
    rr = RandomizedResponseTransformer(3.0, categories=RR_CATEGORIES)
    result = run_audit(rr, rr_attribute_view, ([0, 0, 1], [0, 4, 1]), 5, seed=24, trials=TRIALS)
    assert not result.refutes(1.0), str(result)
    assert best_estimate(result) > 1.0 - 0.1, str(result)


@pytest.mark.statistical
def test_audit_refutes_randomized_response_at_the_full_budget_per_attribute() -> None:
    """Negative control: RR at eps = 3 instead of eps / d = 1 on the attribute; 10^5 reports, the ratio on
    "report = 0" is e^3 (~4,100 against ~83,000 expected counts), refuting 1."""
    broken = undivided(RandomizedResponseTransformer)(3.0, categories=RR_CATEGORIES)
    result = run_audit(broken, rr_attribute_view, ([0, 0, 1], [0, 4, 1]), 5, seed=25, trials=100_000)
    assert result.refutes(1.0), str(result)


@pytest.mark.statistical
def test_waldp_is_eps_over_d_ldp_per_attribute() -> None:
    """d = 3, eps = 3: records differing in the discrete attribute only (0 and 4: classes 0 and 2 of 3).
    Reports of that attribute have ratio e^(eps/d) = e on "class 0"; 10^6 reports each, not refuted at
    confidence 1 - 1e-6, estimate within 0.1 of 1."""
    waldp = WALDP(3.0, **MIXED)
    result = run_audit(
        waldp, waldp_attribute_view, ([0.5, 0.0, 1.0], [0.5, 4.0, 1.0]), 3, seed=26, trials=TRIALS
    )
    assert not result.refutes(1.0), str(result)
    assert best_estimate(result) > 1.0 - 0.1, str(result)


@pytest.mark.statistical
def test_waldp_is_eps_ldp_per_record() -> None:
    """d = 3, eps = 3: records whose every attribute is in a different class ((-1, 0, -1): classes (0, 0, 0);
    (1, 4, 1): classes (2, 2, 1)); the report vector as the mixed-radix code of its classes (18 values).
    "All classes as in the first record" has ratio e^3 (~1.2e4 reports on its rarer side); 10^6 reports
    each, not refuted at confidence 1 - 1e-6, estimate within 0.1 of 3."""
    waldp = WALDP(3.0, **MIXED)
    result = run_audit(
        waldp, waldp_record_view, ([-1.0, 0.0, -1.0], [1.0, 4.0, 1.0]), 18, seed=27, trials=TRIALS
    )
    assert not result.refutes(3.0), str(result)
    assert best_estimate(result) > 3.0 - 0.1, str(result)


@pytest.mark.statistical
def test_audit_refutes_waldp_that_does_not_divide_the_budget() -> None:
    """Negative control: every attribute at the full eps = 3 (real loss 9); 10^5 reports, "all classes as in
    the first record" has ~10 expected counts under the second record against ~7.9e4 under the first, a
    ratio near e^9, far above the claimed e^3."""
    broken = undivided(WALDP)(3.0, **MIXED)
    result = run_audit(
        broken, waldp_record_view, ([-1.0, 0.0, -1.0], [1.0, 4.0, 1.0]), 18, seed=28, trials=100_000
    )
    assert result.refutes(3.0), str(result)


def test_piecewise_attribute_sampling_is_wang_et_al_algorithm_4() -> None:
    """``sample_attributes=True``: each record reports ``k = max(1, min(d, floor(eps / 2.5)))`` attributes
    (the others sit at the domain's centre), each through PM at ``eps / k`` and scaled by ``d / k``, so the
    mean stays unbiased. At eps = 6, d = 5: k = 2, reports at 3 per attribute. The mean over 40,000 records
    of x = 0.5 is within 5 standard errors (the report variance is bounded by (d/k) Var_PM(1) + (d/k - 1))."""
    d, n = 5, 40_000
    X = np.full((n, d), 0.5)
    pm = PiecewiseTransformer(6.0, feature_range=(-1.0, 1.0), sample_attributes=True, random_state=3).fit(X)
    assert pm.attribute_epsilon == pytest.approx(3.0) and pm.privacy_loss == PureDP(6)
    reports = pm.transform(X)
    # exactly k = 2 attributes are non-zero: PM's 2^16 cell centres are symmetric about 0, none is 0
    assert np.all(np.count_nonzero(reports, axis=1) == 2)
    bound = (d / 2) * float(PiecewiseMechanism(epsilon=3.0).variance(np.array([1.0]))[0]) + (d / 2 - 1)
    assert np.all(np.abs(reports.mean(axis=0) - 0.5) < 5 * np.sqrt(bound / n))
