"""Composition rules: sequential (exact), zCDP, advanced (Dwork-Rothblum-Vadhan 2010) and optimal
homogeneous composition (Kairouz-Oh-Viswanath 2015, Thm. 3.3)."""

from __future__ import annotations

import itertools
import math
from decimal import Decimal, localcontext
from fractions import Fraction

import pytest

from kakeibo.accounting import (
    AdvancedComposition,
    SequentialComposition,
    ZCDPComposition,
    advanced_composition,
    convert,
    optimal_homogeneous_composition,
    sequential_composition,
    zcdp_composition,
)
from kakeibo.accounting.composition import resolve_policy
from kakeibo.privacy import ZCDP, ApproxDP, PureDP, RDPCurve

# -- sequential ---------------------------------------------------------------------------------


def test_sequential_is_exact_for_one_hundredth() -> None:
    assert sequential_composition([PureDP(Fraction(1, 100))] * 100) == PureDP(1)
    assert sequential_composition([PureDP("0.01")] * 100) == PureDP(1)


def test_sequential_reads_a_float_as_the_decimal_it_prints_as() -> None:
    # float 0.01 is read as 1/100 (kakeibo.privacy.as_fraction), and the mechanisms calibrate to 1/100.
    total = sequential_composition([PureDP(0.01)] * 100)
    assert isinstance(total, PureDP)
    assert total.epsilon == 1


def test_sequential_mixes_pure_and_approximate() -> None:
    total = sequential_composition([PureDP("0.5"), ApproxDP("0.25", "1e-6"), ApproxDP("0.25", "2e-6")])
    assert total == ApproxDP(1, Fraction(3, 10**6))


def test_sequential_refuses_mixing_approx_and_zcdp() -> None:
    with pytest.raises(TypeError, match="do not compose directly"):
        sequential_composition([ApproxDP(1, 0), ZCDP(1)])
    with pytest.raises(TypeError, match="RDPCurve"):
        sequential_composition([RDPCurve((2.0,), (1.0,))])


def test_zcdp_is_additive_and_converts_pure() -> None:
    assert zcdp_composition([ZCDP("0.1"), ZCDP("0.2"), ZCDP("0.3")]) == ZCDP("0.6")
    # eps-DP => eps^2/2-zCDP (Bun and Steinke 2016, Prop. 1.4): 1-DP adds 1/2.
    assert zcdp_composition([ZCDP("0.25"), PureDP(1)]) == ZCDP("0.75")
    with pytest.raises(TypeError, match="cannot be counted"):
        zcdp_composition([ApproxDP(1, 1e-6)])


def test_convert() -> None:
    assert convert(PureDP(2), ApproxDP) == ApproxDP(2, 0)
    assert convert(PureDP(2), ZCDP) == ZCDP(2)
    with pytest.raises(TypeError, match="cannot be counted against a pure epsilon-DP budget"):
        convert(ApproxDP(1, 1e-9), PureDP)
    with pytest.raises(TypeError):
        convert(ZCDP(1), ApproxDP)


# -- advanced composition (DRV 2010) ---------------------------------------------------------------


def test_drv_matches_the_hand_computation() -> None:
    # k = 10 charges of (0.1, 1e-8), slack delta' = 1e-5:
    # eps' = sqrt(2 k ln(1/delta')) eps + k eps (e^eps - 1),  delta_total = delta' + k delta.
    k, eps, delta, slack = 10, 0.1, 1e-8, 1e-5
    by_hand = math.sqrt(2 * k * math.log(1 / slack)) * eps + k * eps * (math.exp(eps) - 1)
    result = advanced_composition([ApproxDP(eps, delta)] * k, delta_slack=slack)
    assert float(result.epsilon) == pytest.approx(by_hand, rel=1e-12)
    assert result.epsilon >= Fraction(by_hand) * (1 - Fraction(1, 10**13))
    assert result.delta == Fraction(repr(slack)) + k * Fraction(repr(delta))  # exact
    assert by_hand == pytest.approx(1.6225980474607942, rel=1e-15)


def test_drv_heterogeneous_form_uses_sums_of_squares() -> None:
    epsilons = [0.05, 0.1, 0.2, 0.4]
    slack = 1e-6
    by_hand = math.sqrt(2 * math.log(1 / slack) * sum(e * e for e in epsilons)) + sum(
        e * (math.exp(e) - 1) for e in epsilons
    )
    result = advanced_composition([PureDP(e) for e in epsilons], delta_slack=slack)
    assert float(result.epsilon) == pytest.approx(by_hand, rel=1e-12)
    assert result.delta == Fraction(repr(slack))


def test_drv_is_rounded_up_against_a_50_digit_evaluation() -> None:
    eps, k, slack = Fraction(1, 7), 37, Fraction(1, 3 * 10**6)
    with localcontext() as ctx:
        ctx.prec = 50
        e = Decimal(eps.numerator) / Decimal(eps.denominator)
        log_term = (Decimal(slack.denominator) / Decimal(slack.numerator)).ln()
        exact = (2 * k * log_term).sqrt() * e + k * e * (e.exp() - 1)
    result = advanced_composition([PureDP(eps)] * k, delta_slack=slack)
    assert result.epsilon >= Fraction(exact)
    assert result.epsilon - Fraction(exact) < Fraction(1, 10**12)


def test_drv_validation() -> None:
    for bad in (0, 1, -1e-6, float("nan")):
        with pytest.raises(ValueError, match="delta_slack"):
            advanced_composition([PureDP(1)], delta_slack=bad)
    with pytest.raises(TypeError, match="sequence"):
        advanced_composition(PureDP(1), delta_slack=1e-6)  # type: ignore[arg-type]


def test_advanced_policy_takes_the_tighter_epsilon() -> None:
    policy = AdvancedComposition(Fraction(1, 10**6))
    few = policy.compose([PureDP("0.1")] * 3, ApproxDP)
    # sqrt(2*3*ln 1e6)*0.1 + ... = 0.93 > 0.3: sequential epsilon, but the slack is reserved.
    assert few == ApproxDP("0.3", Fraction(1, 10**6))
    many = policy.compose([PureDP("0.01")] * 1000, ApproxDP)
    drv = advanced_composition([PureDP("0.01")] * 1000, delta_slack=Fraction(1, 10**6))
    assert many == drv
    assert many.epsilon < 10  # sequential would be 10
    assert policy.compose([], ApproxDP) == ApproxDP(0, 0)


def test_policies_resolve_and_validate() -> None:
    assert isinstance(resolve_policy("sequential"), SequentialComposition)
    assert isinstance(resolve_policy("zcdp"), ZCDPComposition)
    advanced = resolve_policy("advanced", delta_slack=1e-7)
    assert resolve_policy(advanced.config()) == advanced
    with pytest.raises(ValueError, match="needs delta_slack"):
        resolve_policy("advanced")
    with pytest.raises(ValueError, match="only applies"):
        resolve_policy("sequential", delta_slack=1e-7)
    with pytest.raises(ValueError, match="composition must be"):
        resolve_policy("renyi")
    with pytest.raises(ValueError, match="needs an \\(epsilon, delta\\) budget"):
        advanced.check_budget(PureDP(1))
    with pytest.raises(ValueError, match="reserves delta_slack"):
        advanced.check_budget(ApproxDP(1, 1e-9))
    with pytest.raises(ValueError, match="needs a ZCDP budget"):
        ZCDPComposition().check_budget(PureDP(1))


# -- optimal homogeneous composition (KOV 2015) -----------------------------------------------------


def test_kov_equals_k_eps_exactly_when_no_delta_is_allowed() -> None:
    for eps, k in ((Fraction(1, 10), 7), (Fraction(1, 2), 4), (Fraction(3), 1)):
        assert optimal_homogeneous_composition(eps, 0, k, 0) == ApproxDP(k * eps, 0)


@pytest.mark.parametrize(
    ("eps", "delta", "k", "slack"),
    [(0.1, 0, 10, 1e-5), (0.1, 1e-7, 100, 1e-6), (0.5, 1e-9, 30, 1e-4), (0.01, 0, 2000, 1e-6)],
)
def test_kov_is_never_worse_than_drv_or_sequential(eps: float, delta: float, k: int, slack: float) -> None:
    target = Fraction(repr(slack)) + k * Fraction(repr(delta))
    kov = optimal_homogeneous_composition(eps, delta, k, target)
    drv = advanced_composition([ApproxDP(eps, delta)] * k, delta_slack=slack)
    assert kov.delta == target == drv.delta
    assert kov.epsilon <= drv.epsilon
    assert kov.epsilon <= k * Fraction(eps)


def test_kov_reproduces_theorem_3_3_at_a_grid_point() -> None:
    # Thm 3.3: ((k - 2i) eps, 1 - (1 - delta)^k (1 - delta_i))-DP with
    # delta_i = sum_{l < i} C(k, l) (e^{(k-l) eps} - e^{(k-2i+l) eps}) / (1 + e^eps)^k.
    k, eps, i = 10, 0.5, 2
    delta_i = (
        sum(math.comb(k, j) * (math.exp((k - j) * eps) - math.exp((k - 2 * i + j) * eps)) for j in range(i))
        / (1 + math.exp(eps)) ** k
    )
    result = optimal_homogeneous_composition(eps, 0, k, delta_i)
    assert float(result.epsilon) == pytest.approx((k - 2 * i) * eps, rel=1e-6)
    assert float(result.epsilon) >= (k - 2 * i) * eps * (1 - 1e-12)
    # with a base delta the curve shifts by 1 - (1 - delta)^k (1 - delta_i)
    delta = 1e-4
    total = 1 - (1 - delta) ** k * (1 - delta_i)
    shifted = optimal_homogeneous_composition(eps, delta, k, total)
    assert float(shifted.epsilon) == pytest.approx((k - 2 * i) * eps, rel=1e-5)


def _brute_force_delta(eps: float, delta: float, k: int, eps_prime: float) -> float:
    """delta(eps') of k copies of KOV's dominating mechanism, by enumerating all 4^k outcomes."""
    p = (delta, (1 - delta) * math.exp(eps) / (1 + math.exp(eps)), (1 - delta) / (1 + math.exp(eps)), 0.0)
    q = (0.0, p[2], p[1], delta)
    total = 0.0
    for outcome in itertools.product(range(4), repeat=k):
        pp = math.prod(p[o] for o in outcome)
        qq = math.prod(q[o] for o in outcome)
        total += max(0.0, pp - math.exp(eps_prime) * qq)
    return total


@pytest.mark.parametrize(
    ("eps", "delta", "k", "target"), [(0.7, 0.01, 5, 0.1), (0.3, 0.0, 6, 0.05), (1.0, 0.02, 4, 0.2)]
)
def test_kov_agrees_with_brute_force_enumeration(eps: float, delta: float, k: int, target: float) -> None:
    result = float(optimal_homogeneous_composition(eps, delta, k, target).epsilon)
    assert _brute_force_delta(eps, delta, k, result) <= target
    assert _brute_force_delta(eps, delta, k, result - 1e-6) > target  # tight: the least such epsilon


def test_kov_refuses_an_unreachable_target() -> None:
    with pytest.raises(ValueError, match="no epsilon can reach"):
        optimal_homogeneous_composition(0.1, 1e-6, 10, 1e-6)  # below 1 - (1 - 1e-6)^10
    for args in ((-0.1, 0, 2, 0), (0.1, 1, 2, 0), (0.1, 0, 0, 0), (0.1, 0, 2, 1), (0.1, 0, 2.5, 0)):
        with pytest.raises(ValueError):
            optimal_homogeneous_composition(*args)


def test_kov_with_a_large_target_reaches_zero() -> None:
    assert optimal_homogeneous_composition(0.1, 0, 4, 0.5).epsilon == 0
