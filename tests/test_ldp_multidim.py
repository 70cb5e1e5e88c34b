"""Attribute sampling for multidimensional records (Wang et al. ICDE 2019, Algorithm 4): eps-LDP audits,
calibration of k, unbiased estimators with the exact variance, the wire format and refusals.

Statistical tests are seeded; each states the false-failure rate of its bound.
"""

from __future__ import annotations

import math
from fractions import Fraction
from itertools import combinations
from typing import Any

import numpy as np
import pytest

from kakeibo.audit import audit, value_event
from kakeibo.ldp import OUE, PiecewiseMechanism, Reports
from kakeibo.ldp.multidim import MultidimensionalEstimate, MultidimensionalSampling, sample_size
from kakeibo.privacy import PureDP

MECHANISMS = ["hybrid", "piecewise", "duchi"]
Z = 5.0  # two-sided normal tail 5.7e-7 per check


# --- privacy ---------------------------------------------------------------------------------------------


def extreme_counts_view(protocol: MultidimensionalSampling) -> Any:
    """A sampler for :func:`kakeibo.audit.audit`: ``n`` reports of the record ``(value, ..., value)``, each
    reduced to ``(k + 1) * high + low``, where ``high`` (``low``) counts the sampled attributes whose
    randomized value is ``>= 1`` (``<= -1``).

    A post-processing of the report, so every event on it is an event on the report. It keeps what matters
    for the worst-case pair ``x = -1`` vs ``x = +1``: with ``x = +1`` the Piecewise window is ``[1, C]`` and
    Duchi's output is ``+B >= 1``, so each sampled attribute lands in ``[1, C]`` with ``e^(eps/k)`` times the
    probability it has under ``x = -1``; "all ``k`` sampled attributes high" then has ratio ``e^eps``, the
    claimed loss (up to the Piecewise mechanism's discretisation).
    """

    def sample(value: float, n: int, rng: np.random.Generator) -> np.ndarray:
        reports = protocol.randomize(np.full((n, protocol.dimensions), value), rng=rng)
        y = reports["values"]
        high = np.count_nonzero(y >= 1, axis=1)
        low = np.count_nonzero(y <= -1, axis=1)
        return np.asarray((protocol.k + 1) * high + low)

    return sample


def audit_extremes(protocol: MultidimensionalSampling, seed: int) -> Any:
    """The audit of all -1 against all +1, 10^6 reports each, at confidence 1 - 1e-6."""
    events = [value_event(code) for code in range((protocol.k + 1) ** 2)]
    return audit(
        extreme_counts_view(protocol),
        -1.0,
        1.0,
        trials=1_000_000,
        alpha=1e-6,
        events=events,
        rng=np.random.default_rng(seed),
    )


@pytest.mark.statistical
@pytest.mark.parametrize(
    ("mechanism", "epsilon"),
    [("piecewise", 2.0), ("piecewise", 5.0), ("duchi", 5.0), ("hybrid", 5.0)],
)
def test_each_report_is_epsilon_ldp(mechanism: str, epsilon: float) -> None:
    """d = 2; epsilon = 2 gives k = 1 (one attribute at the full budget), epsilon = 5 gives k = 2 (both at
    2.5). Not refuted at confidence 1 - 1e-6; and the best event's point estimate comes within 0.15 of the
    claim, which shows the audit has power: the "all high" event has ratio e^eps (for the Hybrid mechanism
    too, since both of its randomizers have ratio e^(eps/k) on "y >= 1"), and its rarer side has about 4000
    reports at epsilon = 5 (Piecewise), so the estimate's standard error is about 0.02."""
    protocol = MultidimensionalSampling(epsilon=epsilon, dimensions=2, mechanism=mechanism)
    result = audit_extremes(protocol, seed=2019)
    assert not result.refutes(epsilon), str(result)
    assert max(e.epsilon_estimate for e in result.events) > epsilon - 0.15, str(result)


class FullBudgetPerAttribute(MultidimensionalSampling):
    """A broken protocol: it samples k attributes but spends the whole epsilon on each (real loss k eps)."""

    def __init__(self, *, epsilon: float, dimensions: int) -> None:
        super().__init__(epsilon=epsilon, dimensions=dimensions, mechanism="piecewise")
        self._numeric = PiecewiseMechanism(epsilon=self._epsilon)


@pytest.mark.statistical
def test_audit_refutes_a_protocol_that_does_not_split_the_budget() -> None:
    """Negative control: at epsilon = 5 (k = 2) the broken protocol's "both high" event has ratio e^10; the
    audit refutes epsilon = 5 (a false pass would need the rare side's ~40 counts to exceed about 280)."""
    broken = FullBudgetPerAttribute(epsilon=5.0, dimensions=2)
    result = audit_extremes(broken, seed=7)
    assert result.refutes(5.0), str(result)


# --- calibration -----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("epsilon", "dimensions", "k"),
    [
        ("0.5", 10, 1),
        ("2.5", 10, 1),
        ("4.99", 10, 1),
        ("5", 10, 2),
        ("7.5", 10, 3),
        ("10", 2, 2),
        ("10", 10, 4),
        ("64", 100, 25),
        ("64", 1, 1),
    ],
)
def test_sample_size_is_the_papers(epsilon: str, dimensions: int, k: int) -> None:
    """k = max(1, min(d, floor(eps / 2.5))) (Algorithm 4); each attribute gets exactly eps / k."""
    protocol = MultidimensionalSampling(epsilon=epsilon, dimensions=dimensions, categorical={0: 3})
    eps = Fraction(epsilon)
    assert protocol.k == k == sample_size(eps, dimensions)
    assert protocol.attribute_epsilon == float(eps / k)
    assert protocol.privacy_loss == PureDP(eps)
    # The per-attribute randomizers are calibrated to eps / k exactly, so k of them compose to eps.
    assert k * protocol._numeric.privacy_loss.epsilon <= eps
    oracle = protocol._oracles[0]
    reference = OUE(epsilon=eps / k, domain_size=3)
    assert (oracle.p_star, oracle.q_star) == (reference.p_star, reference.q_star)
    assert oracle.q_star >= 1 / (math.exp(float(eps / k)) + 1)  # q rounded up: never more loss


def test_params_describe_the_protocol() -> None:
    protocol = MultidimensionalSampling(epsilon=5, dimensions=4, mechanism="piecewise", categorical={3: 5})
    assert protocol.params == {
        "epsilon": "5",
        "dimensions": 4,
        "k": 2,
        "mechanism": "piecewise",
        "categorical": "3:5",
    }
    assert protocol.numeric_columns == (0, 1, 2)
    assert protocol.categorical == {3: 5}
    assert "piecewise" in repr(protocol)


@pytest.mark.statistical
def test_every_subset_of_attributes_is_equally_likely() -> None:
    """d = 4, k = 2: each of the 6 subsets is sampled with probability 1/6; every count is within 5 binomial
    standard errors of n / 6 (false failure below 6 * 5.7e-7)."""
    protocol = MultidimensionalSampling(epsilon=5, dimensions=4)
    n = 600_000
    attributes = protocol.randomize(np.zeros((n, 4)), rng=np.random.default_rng(3))["attributes"]
    assert np.all(np.diff(attributes.astype(np.int64), axis=1) > 0)
    codes = 4 * attributes[:, 0].astype(np.int64) + attributes[:, 1]
    expected = n / 6
    sd = math.sqrt(n * (1 / 6) * (5 / 6))
    for a, b in combinations(range(4), 2):
        assert abs(np.count_nonzero(codes == 4 * a + b) - expected) < Z * sd, (a, b)


# --- estimators ------------------------------------------------------------------------------------------


def population(n: int, seed: int) -> np.ndarray:
    """``n`` records of 3 attributes: two numeric in [-1, 1] (one skewed, one spread out), one categorical
    over 3 codes (column 2)."""
    rng = np.random.default_rng(seed)
    return np.column_stack(
        [
            np.clip(rng.normal(0.6, 0.3, n), -1, 1),
            rng.uniform(-1, 1, n),
            rng.choice(3, size=n, p=[0.6, 0.3, 0.1]),
        ]
    )


def repeated_estimates(
    protocol: MultidimensionalSampling, records: np.ndarray, runs: int, seed: int
) -> list[MultidimensionalEstimate]:
    """``runs`` independent estimates of the same records, from one batch of reports."""
    n = records.shape[0]
    reports = protocol.randomize(np.tile(records, (runs, 1)), rng=np.random.default_rng(seed))
    return [
        protocol.estimate(
            Reports(
                reports.protocol,
                reports.params,
                {k: a[r * n : (r + 1) * n] for k, a in reports.arrays.items()},
            )
        )
        for r in range(runs)
    ]


def check_unbiased_with_variance(estimates: np.ndarray, truth: np.ndarray, formula: np.ndarray) -> None:
    """Each column's mean over the runs is within 5 standard errors of the truth (false failure 5.7e-7 per
    column); its empirical variance is within ``5 sqrt((kurtosis - 1) / runs)`` of the formula, relatively:
    the standard deviation of a sample variance over ``runs`` independent draws (kurtosis from the sample,
    about 3 here, so the tolerance is about 8% at 8000 runs; same false-failure rate)."""
    runs = estimates.shape[0]
    z = (estimates.mean(axis=0) - truth) / np.sqrt(formula / runs)
    assert np.all(np.abs(z) < Z), z
    centred = estimates - estimates.mean(axis=0)
    kurtosis = np.mean(centred**4, axis=0) / np.mean(centred**2, axis=0) ** 2
    ratio = estimates.var(axis=0, ddof=1) / formula
    assert np.all(np.abs(ratio - 1) < Z * np.sqrt((kurtosis - 1) / runs)), (ratio, kurtosis)


@pytest.mark.statistical
@pytest.mark.parametrize("mechanism", MECHANISMS)
def test_estimates_are_unbiased_with_the_exact_variance(mechanism: str) -> None:
    """epsilon = 5 over d = 3 (k = 2, so each attribute is sampled with probability 2/3), 40 clients,
    8000 runs: the numeric means and the categorical counts against the exact formulas."""
    protocol = MultidimensionalSampling(epsilon=5, dimensions=3, mechanism=mechanism, categorical={2: 3})
    records = population(40, seed=1)
    n = records.shape[0]
    estimates = repeated_estimates(protocol, records, runs=8000, seed=17)
    means = np.array([e.means for e in estimates])
    check_unbiased_with_variance(means, records[:, :2].mean(axis=0), protocol.mean_variances(records))
    counts = np.array([e.categories[2].counts for e in estimates])
    true_counts = np.bincount(records[:, 2].astype(np.int64), minlength=3).astype(np.float64)
    check_unbiased_with_variance(counts, true_counts, protocol.count_variance(2, n, true_counts))


@pytest.mark.parametrize("mechanism", MECHANISMS)
def test_variance_formulas_follow_from_the_sampling(mechanism: str) -> None:
    """The report is (d/k) y with probability k/d and 0 otherwise: Var = (d/k)(Var_M + x^2) - x^2; the
    categorical count adds (d/k - 1) c to d/k times OUE's variance; the server's bound is the worst case."""
    protocol = MultidimensionalSampling(epsilon=6, dimensions=5, mechanism=mechanism, categorical={4: 6})
    scale = 5 / 2
    xs = np.linspace(-1, 1, 41)
    randomizer = protocol._numeric
    np.testing.assert_allclose(
        protocol.report_variance(xs), scale * (randomizer.variance(xs) + xs**2) - xs**2, rtol=1e-12
    )
    assert protocol.worst_report_variance >= np.max(protocol.report_variance(xs)) * (1 - 1e-9)
    assert protocol.worst_report_variance == pytest.approx(np.max(protocol.report_variance(xs)))
    oue = OUE(epsilon=Fraction(6, 2), domain_size=6)
    counts = np.array([0.0, 10.0, 100.0])
    np.testing.assert_allclose(
        protocol.count_variance(4, 100, counts),
        scale * oue.count_variance(100, counts) + (scale - 1) * counts,
    )
    records = population(30, seed=2)
    records = np.column_stack([records[:, :2], records[:, :2], records[:, 2] * 2])
    expected = scale * (randomizer.variance(records[:, :4].ravel()) + records[:, :4].ravel() ** 2)
    expected = (expected - records[:, :4].ravel() ** 2).reshape(30, 4).sum(axis=0) / 30**2
    np.testing.assert_allclose(protocol.mean_variances(records), expected, rtol=1e-12)


@pytest.mark.statistical
def test_confidence_intervals_cover_the_true_means() -> None:
    """The server's variance is a worst-case bound, so the 1 - 1e-6 intervals cover each true mean with
    probability at least 1 - 1e-6 (asymptotically in n = 100 000); the counts' intervals likewise."""
    protocol = MultidimensionalSampling(epsilon=2, dimensions=3, categorical={2: 3})
    records = population(100_000, seed=4)
    estimate = protocol.estimate(protocol.randomize(records, rng=np.random.default_rng(9)))
    assert estimate.n == 100_000 and estimate.columns == (0, 1)
    low, high = estimate.confidence_interval(beta=1e-6)
    truth = records[:, :2].mean(axis=0)
    assert np.all((low <= truth) & (truth <= high)), (low, truth, high)
    assert np.all(estimate.variances >= protocol.mean_variances(records))
    counts = estimate.categories[2]
    low_c, high_c = counts.confidence_interval(beta=1e-6)
    true_counts = np.bincount(records[:, 2].astype(np.int64), minlength=3)
    assert np.all((low_c <= true_counts) & (true_counts <= high_c))


# --- wire format -----------------------------------------------------------------------------------------


def test_reports_are_sparse_and_survive_the_byte_format() -> None:
    protocol = MultidimensionalSampling(epsilon=5, dimensions=3, categorical={1: 10})
    records = population(200, seed=5)[:, [0, 2, 1]]
    reports = protocol.randomize(records, rng=np.random.default_rng(6))
    assert reports.n == 200
    assert reports["attributes"].shape == (200, 2) and reports["attributes"].dtype == np.uint8
    assert reports["bits"].shape == (200, 2 * 2)  # ten categories take two bytes per slot
    categorical_slot = reports["attributes"] == 1
    assert np.all(reports["values"][categorical_slot] == 0)
    assert np.all(reports["bits"].reshape(200, 2, 2)[~categorical_slot] == 0)
    decoded = Reports.from_bytes(reports.to_bytes())
    a, b = protocol.estimate(reports), protocol.estimate(decoded)
    np.testing.assert_array_equal(a.means, b.means)
    np.testing.assert_array_equal(a.categories[1].counts, b.categories[1].counts)


def test_all_categorical_and_all_numeric_records() -> None:
    only_categories = MultidimensionalSampling(epsilon=1, dimensions=2, categorical={0: 2, 1: 4})
    records = np.array([[0, 3], [1, 2], [1, 0]])
    estimate = only_categories.estimate(only_categories.randomize(records, rng=np.random.default_rng(1)))
    assert estimate.columns == () and estimate.means.shape == (0,)
    assert sorted(estimate.categories) == [0, 1] and estimate.categories[1].counts.shape == (4,)
    only_numbers = MultidimensionalSampling(epsilon=1, dimensions=2)
    reports = only_numbers.randomize(np.zeros((5, 2)), rng=np.random.default_rng(1))
    assert "bits" not in reports.arrays and only_numbers.estimate(reports).categories == {}


# --- refusals --------------------------------------------------------------------------------------------


def test_bad_parameters_are_refused() -> None:
    with pytest.raises(ValueError, match="epsilon must lie in"):
        MultidimensionalSampling(epsilon=0, dimensions=2)
    with pytest.raises(TypeError, match="dimensions must be an integer"):
        MultidimensionalSampling(epsilon=1, dimensions=2.0)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="dimensions must lie in"):
        MultidimensionalSampling(epsilon=1, dimensions=0)
    with pytest.raises(ValueError, match="mechanism must be one of"):
        MultidimensionalSampling(epsilon=1, dimensions=2, mechanism="laplace")
    with pytest.raises(TypeError, match="mechanism must be a name"):
        MultidimensionalSampling(epsilon=1, dimensions=2, mechanism=PiecewiseMechanism)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="categorical must map"):
        MultidimensionalSampling(epsilon=1, dimensions=2, categorical=[(0, 3)])  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="categorical column 2 is not one of"):
        MultidimensionalSampling(epsilon=1, dimensions=2, categorical={2: 3})
    with pytest.raises(TypeError, match="categorical columns must be integers"):
        MultidimensionalSampling(epsilon=1, dimensions=2, categorical={"a": 3})  # type: ignore[dict-item]
    with pytest.raises(ValueError, match="domain_size must lie in"):
        MultidimensionalSampling(epsilon=1, dimensions=2, categorical={0: 1})


def test_bad_records_are_refused() -> None:
    protocol = MultidimensionalSampling(epsilon=1, dimensions=3, categorical={2: 3})
    with pytest.raises(ValueError, match="2-d array with 3 columns"):
        protocol.randomize(np.zeros(3))
    with pytest.raises(ValueError, match="2-d array with 3 columns"):
        protocol.randomize(np.zeros((4, 2)))
    with pytest.raises(ValueError, match="non-empty"):
        protocol.randomize(np.zeros((0, 3)))
    with pytest.raises(TypeError, match="records must be numbers"):
        protocol.randomize(np.array([["a", "b", "c"]]))
    for bad in (1.5, np.nan, -np.inf):
        with pytest.raises(ValueError, match=r"finite numbers in \[-1, 1\]"):
            protocol.randomize(np.array([[0.0, bad, 1]]))
    with pytest.raises(ValueError, match=r"categorical column 2 must be indices in 0\.\.2"):
        protocol.randomize(np.array([[0.0, 0.0, 3]]))
    with pytest.raises(ValueError, match="categorical column 2 must be whole indices"):
        protocol.randomize(np.array([[0.0, 0.0, 0.5]]))
    with pytest.raises(ValueError, match="not a categorical attribute"):
        protocol.count_variance(0, 10, [1.0])


def test_reports_of_other_parameters_or_protocols_are_refused() -> None:
    protocol = MultidimensionalSampling(epsilon=5, dimensions=3, categorical={2: 3})
    records = population(10, seed=6)
    for other in (
        MultidimensionalSampling(epsilon=4, dimensions=3, categorical={2: 3}),
        MultidimensionalSampling(epsilon=5, dimensions=3, mechanism="duchi", categorical={2: 3}),
        MultidimensionalSampling(epsilon=5, dimensions=3, categorical={2: 4}),
    ):
        with pytest.raises(ValueError, match="made with other parameters"):
            protocol.estimate(other.randomize(records, rng=np.random.default_rng(0)))
    oue_reports = OUE(epsilon=1, domain_size=3).randomize(np.array([0, 1]), rng=np.random.default_rng(0))
    with pytest.raises(ValueError, match="made by OUE, not MultidimensionalSampling"):
        protocol.estimate(oue_reports)


def tampered(reports: Reports, name: str, array: np.ndarray) -> Reports:
    return Reports(reports.protocol, reports.params, {**reports.arrays, name: array})


def test_malformed_payloads_are_refused() -> None:
    protocol = MultidimensionalSampling(epsilon=5, dimensions=3, categorical={2: 3})
    reports = protocol.randomize(population(10, seed=7), rng=np.random.default_rng(0))
    attributes, values = reports["attributes"], reports["values"]
    with pytest.raises(ValueError, match=r"outside 0\.\.2"):
        protocol.estimate(tampered(reports, "attributes", attributes + 1))
    with pytest.raises(ValueError, match="shape"):
        protocol.estimate(tampered(reports, "attributes", attributes[:, :1]))
    with pytest.raises(ValueError, match="distinct attributes in increasing order"):
        protocol.estimate(tampered(reports, "attributes", attributes[:, ::-1]))
    with pytest.raises(ValueError, match="float array 'values'"):
        protocol.estimate(tampered(reports, "values", values.astype(np.int64)))
    numeric_slot = ~np.isin(attributes, [2])
    for bad in (100.0, np.nan):
        forged = values.copy()
        forged[numeric_slot] = bad
        with pytest.raises(ValueError, match="report values lie outside the output space"):
            protocol.estimate(tampered(reports, "values", forged))
    with pytest.raises(ValueError, match="integer array 'bits'"):
        protocol.estimate(
            Reports(reports.protocol, reports.params, {"attributes": attributes, "values": values})
        )
    with pytest.raises(ValueError, match="shape"):
        protocol.estimate(tampered(reports, "bits", reports["bits"][:, :1]))
    numbers_only = MultidimensionalSampling(epsilon=5, dimensions=3)
    plain = numbers_only.randomize(np.zeros((4, 3)), rng=np.random.default_rng(0))
    with pytest.raises(ValueError, match="carry no 'bits'"):
        numbers_only.estimate(tampered(plain, "bits", np.zeros((4, 2), dtype=np.uint8)))


def test_estimate_carries_the_per_client_loss_of_the_whole_record() -> None:
    """The record's loss is the per-client total: ``k`` sampled attributes, each randomized at ``eps / k``
    (issue 16); the categorical counts carry it too."""
    protocol = MultidimensionalSampling(epsilon=6, dimensions=4, categorical={3: 5})
    records = np.column_stack([np.zeros((40, 3)), np.arange(40) % 5])
    estimate = protocol.estimate(protocol.randomize(records, rng=np.random.default_rng(7)))
    per_attribute = protocol._numeric.privacy_loss
    assert per_attribute == protocol._oracles[3].privacy_loss
    assert protocol.k > 1 and estimate.privacy_loss == per_attribute * protocol.k == protocol.privacy_loss
    assert estimate.categories[3].privacy_loss == protocol.privacy_loss
    low, high = estimate.confidence_interval()
    assert np.all(low <= estimate.means) and np.all(estimate.means <= high)
