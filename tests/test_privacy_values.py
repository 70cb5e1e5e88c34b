"""Privacy-loss values: exact arithmetic, product order, validation, and sound conversions."""

from __future__ import annotations

import math
from fractions import Fraction

import pytest

from kakeibo.mechanisms import analytic_gaussian_delta
from kakeibo.privacy import (
    ZCDP,
    ApproxDP,
    PureDP,
    RDPCurve,
    zcdp_delta,
    zcdp_epsilon,
    zcdp_epsilon_bun_steinke,
)


def test_hundred_charges_of_float_one_hundredth_sum_exactly_to_one() -> None:
    """A float is read as the decimal it prints as: 0.01 is 1/100, not 0.01000000000000000020816..."""
    total = PureDP(0)
    for _ in range(100):
        total = total + PureDP(0.01)
    assert total == PureDP(1) == PureDP(0.01) * 100
    assert PureDP(0.1).epsilon == Fraction(1, 10) != Fraction(0.1)


def test_string_budgets_are_exact_decimals() -> None:
    total = PureDP(0)
    for _ in range(100):
        total = total + PureDP("0.01")
    assert total == PureDP(1)


def test_product_order_is_not_lexicographic() -> None:
    a, b = ApproxDP(1, 1e-6), ApproxDP(2, 1e-9)
    assert not a <= b and not b <= a
    assert ApproxDP(1, 1e-9) <= a and ApproxDP(1, 1e-9) < a
    assert not a < a and a <= a


@pytest.mark.parametrize("bad", [-1, float("nan"), float("inf"), -0.0001, "x"])
def test_bad_epsilon_is_refused(bad: object) -> None:
    with pytest.raises(ValueError):
        PureDP(bad)  # type: ignore[arg-type]


@pytest.mark.parametrize("delta", [1, 1.5, -0.1, float("nan")])
def test_delta_outside_unit_interval_is_refused(delta: float) -> None:
    with pytest.raises(ValueError):
        ApproxDP(1, delta)


def test_bool_is_not_a_number() -> None:
    with pytest.raises(TypeError):
        PureDP(True)


def test_composed_delta_reaching_one_is_refused() -> None:
    with pytest.raises(ValueError, match="vacuous"):
        ApproxDP(1, 0.6) + ApproxDP(1, 0.5)


def test_pure_to_zcdp_and_approx() -> None:
    assert PureDP(0.5).to_zcdp() == ZCDP(Fraction(1, 8))
    assert PureDP(0.5).to_approx() == ApproxDP(0.5, 0)


@pytest.mark.parametrize("sigma", [0.5, 1.0, 2.0, 5.0, 20.0])
@pytest.mark.parametrize("epsilon", [0.1, 0.5, 1.0, 3.0])
def test_zcdp_conversion_never_understates_the_gaussian(sigma: float, epsilon: float) -> None:
    """The Gaussian mechanism (sensitivity 1) is exactly (1/(2 sigma^2))-zCDP; its exact delta(eps)
    (Balle-Wang) must not exceed the delta any sound zCDP conversion reports."""
    rho = 1 / (2 * sigma**2)
    exact = analytic_gaussian_delta(sigma, 1.0, epsilon)
    converted = zcdp_delta(rho, epsilon)
    assert exact <= converted * (1 + 1e-9)
    # ... and the CKS conversion is at least as good as Bun-Steinke's.
    if 0 < converted < 1:
        assert zcdp_epsilon(rho, converted) <= zcdp_epsilon_bun_steinke(rho, converted) + 1e-9


@pytest.mark.parametrize("rho", [0.01, 0.1, 0.5, 2.0])
def test_zcdp_epsilon_inverts_zcdp_delta(rho: float) -> None:
    delta = 1e-6
    eps = zcdp_epsilon(rho, delta)
    assert zcdp_delta(rho, eps) <= delta
    assert zcdp_delta(rho, eps * (1 - 1e-6)) > delta * (1 - 1e-3)


def test_zcdp_delta_is_the_infimum_over_orders() -> None:
    """A brute-force grid over alpha must never beat the optimiser."""
    rho, eps = 0.3, 2.0
    grid = [1 + i / 1000 for i in range(1, 20000)]
    brute = min(math.exp((a - 1) * (a * rho - eps)) / a * (1 - 1 / a) ** (a - 1) for a in grid)
    assert zcdp_delta(rho, eps) <= brute * (1 + 1e-9)


def test_rdp_conversion_never_understates_the_gaussian() -> None:
    sigma = 3.0
    curve = ZCDP(1 / (2 * sigma**2)).to_rdp()
    for delta in (1e-3, 1e-6, 1e-9):
        eps = float(curve.to_approx(delta).epsilon)
        assert analytic_gaussian_delta(sigma, 1.0, eps) <= delta


def test_rdp_curves_compose_pointwise_and_refuse_mismatched_orders() -> None:
    a = RDPCurve((2.0, 4.0), (0.5, 1.0))
    assert (a + a).epsilons == (1.0, 2.0)
    with pytest.raises(ValueError):
        a + RDPCurve((2.0, 8.0), (0.5, 1.0))
    with pytest.raises(ValueError):
        RDPCurve((1.0,), (0.5,))


def test_zcdp_to_approx_needs_positive_delta() -> None:
    with pytest.raises(ValueError):
        ZCDP(0.5).to_approx(0)
    assert float(ZCDP(0.5).to_approx(1e-6).epsilon) == pytest.approx(zcdp_epsilon(0.5, 1e-6))
