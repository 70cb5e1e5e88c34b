"""Sensitivities under explicit neighbour relations and group/user-level privacy (seed 002, slides 25-29,
67-69). Every figure is recomputed here from the definition, and every float returned must never be read
by kakeibo as less than the exact value."""

from __future__ import annotations

import itertools
import math
from decimal import Decimal, localcontext
from fractions import Fraction

import numpy as np
import pytest

from kakeibo.mechanisms.sensitivity import (
    Neighbour,
    count_sensitivity,
    group_privacy,
    histogram_sensitivity,
    mean_sensitivity,
    sum_sensitivity,
    user_level,
)
from kakeibo.privacy import ZCDP, ApproxDP, PureDP, RDPCurve, as_fraction


def brute_force_sensitivity(query, domain: list[Fraction], n: int, neighbour: str) -> Fraction:  # type: ignore[no-untyped-def]
    """max |q(D) - q(D')| over all datasets of size n (and n + 1 for add/remove) from a small domain."""
    worst = Fraction(0)
    for data in itertools.product(domain, repeat=n):
        if neighbour == "replace":
            for i, v in itertools.product(range(n), domain):
                other = (*data[:i], v, *data[i + 1 :])
                worst = max(worst, abs(query(data) - query(other)))
        else:
            for v in domain:
                worst = max(worst, abs(query(data) - query((*data, v))))
    return worst


# --- the seed's examples ----------------------------------------------------------------------------------


def test_seed_002_slide_29_examples() -> None:
    """Count 1, histogram 1 (add/remove), mean 1/n (replace, values in [0, 1])."""
    assert count_sensitivity(neighbour="add_remove") == 1.0
    assert histogram_sensitivity(neighbour="add_remove") == 1.0
    assert mean_sensitivity(lower=0, upper=1, n=1000) == 0.001
    assert as_fraction(mean_sensitivity(lower=0, upper=1, n=1000), "s") >= Fraction(1, 1000)


@pytest.mark.parametrize("neighbour", ["add_remove", "replace"])
def test_count_and_sum_against_brute_force(neighbour: str) -> None:
    domain = [Fraction(-2), Fraction(0), Fraction(1), Fraction(3)]

    def count_where(d: tuple[Fraction, ...]) -> Fraction:
        return Fraction(sum(1 for x in d if x > 0))

    def total(d: tuple[Fraction, ...]) -> Fraction:
        return sum(d, Fraction(0))

    def count_all(d: tuple[Fraction, ...]) -> Fraction:
        return Fraction(len(d))

    assert count_sensitivity(neighbour=neighbour) == brute_force_sensitivity(
        count_where, domain, 3, neighbour
    )
    assert count_sensitivity(neighbour=neighbour, predicate=False) == brute_force_sensitivity(
        count_all, domain, 3, neighbour
    )
    assert sum_sensitivity(lower=-2, upper=3, neighbour=neighbour) == brute_force_sensitivity(
        total, domain, 3, neighbour
    )


def test_mean_against_brute_force() -> None:
    domain = [Fraction(0), Fraction(1, 2), Fraction(1)]

    def mean(d: tuple[Fraction, ...]) -> Fraction:
        return sum(d, Fraction(0)) / len(d)

    for n in (1, 2, 4):
        exact = brute_force_sensitivity(mean, domain, n, "replace")
        assert exact == Fraction(1, n)
        assert mean_sensitivity(lower=0, upper=1, n=n) == float(exact)


@pytest.mark.parametrize("neighbour, l1, l2", [("add_remove", 1, 1), ("replace", 2, math.sqrt(2))])
def test_histogram_against_brute_force(neighbour: str, l1: float, l2: float) -> None:
    bins = 3

    def histogram(d: tuple[int, ...]) -> np.ndarray:
        return np.bincount(np.asarray(d, dtype=np.int64), minlength=bins).astype(float)

    worst_l1 = worst_l2 = 0.0
    for data in itertools.product(range(bins), repeat=3):
        others = (
            [(*data[:i], v, *data[i + 1 :]) for i in range(3) for v in range(bins)]
            if neighbour == "replace"
            else [(*data, v) for v in range(bins)]
        )
        for other in others:
            diff = histogram(data) - histogram(other)
            worst_l1 = max(worst_l1, float(np.abs(diff).sum()))
            worst_l2 = max(worst_l2, float(np.sqrt((diff**2).sum())))
    assert histogram_sensitivity(neighbour=neighbour) == l1 == worst_l1
    assert histogram_sensitivity(neighbour=neighbour, norm="l2") == pytest.approx(l2, rel=1e-15)
    assert as_fraction(histogram_sensitivity(neighbour=neighbour, norm="l2"), "s") ** 2 >= round(worst_l2**2)


# --- exactness of the returned floats ----------------------------------------------------------------------


@pytest.mark.parametrize(
    "lower, upper, n", [(0, 1, 3), (0.1, 0.3, 7), (-1e-3, 2.5, 1000), ("1/3", "2/3", 11), (0, 1e300, 3)]
)
def test_returned_floats_are_rounded_up(lower: float | str, upper: float | str, n: int) -> None:
    lo, hi = as_fraction(lower, "lower"), as_fraction(upper, "upper")
    exact = {
        "sum_replace": hi - lo,
        "sum_add_remove": max(abs(lo), abs(hi)),
        "mean": (hi - lo) / n,
        "user": (hi - lo) * 3,
    }
    got = {
        "sum_replace": sum_sensitivity(lower=lower, upper=upper, neighbour="replace"),
        "sum_add_remove": sum_sensitivity(lower=lower, upper=upper, neighbour=Neighbour.ADD_REMOVE),
        "mean": mean_sensitivity(lower=lower, upper=upper, n=n),
        "user": user_level(sum_sensitivity(lower=lower, upper=upper, neighbour="replace"), 3),
    }
    for key, value in exact.items():
        assert as_fraction(got[key], key) >= value, key
        assert got[key] == pytest.approx(float(value), rel=1e-15), (
            key
        )  # ... and by no more than an ulp or two
    assert mean_sensitivity(lower=0, upper=1, n=3) == math.nextafter(1 / 3, math.inf)


def test_too_large_to_represent() -> None:
    with pytest.raises(ValueError, match="too large"):
        sum_sensitivity(lower=-1.7e308, upper=1.7e308, neighbour="replace")


# --- users and groups (seed 002, slides 67-69) -----------------------------------------------------------


def test_user_level_multiplies_by_the_contribution_bound() -> None:
    """Slide 69: with at most c records per person, COUNT has sensitivity c (here checked by brute force:
    removing one person with c records)."""
    for c in (1, 2, 5):
        assert user_level(count_sensitivity(neighbour="add_remove"), c) == c
        assert user_level(histogram_sensitivity(neighbour="replace"), c) == 2 * c
    assert user_level(0, 4) == 0.0
    assert user_level(Fraction(1, 3), 3) == 1.0


def test_group_privacy_pure_and_zcdp() -> None:
    assert group_privacy(PureDP(0.5), 4) == PureDP(2)
    assert group_privacy(PureDP("1/3"), 3) == PureDP(1)
    assert group_privacy(ZCDP(0.1), 3) == ZCDP(as_fraction(0.1, "rho") * 9)
    assert group_privacy(ApproxDP(1, 1e-6), 1) == ApproxDP(1, 1e-6)


def test_group_privacy_pure_matches_the_laplace_density_ratio() -> None:
    """Laplace noise of scale 1/eps on answers k apart (k records changed, sensitivity 1 each): the density
    ratio at any point is at most e^(k eps), which is what group_privacy claims, and it is attained."""
    eps, k = 0.7, 3
    claimed = float(group_privacy(PureDP(eps), k).epsilon)
    ys = np.linspace(-10, 10, 2001)
    log_ratio = (-np.abs(ys - 0) + np.abs(ys - k)) * eps
    assert np.max(log_ratio) == pytest.approx(claimed, rel=1e-12)


@pytest.mark.parametrize("eps, delta, k", [(1, 1e-6, 2), (0.1, 1e-8, 10), (0.5, 1e-9, 30), (0, 1e-6, 5)])
def test_group_privacy_approx_delta(eps: float, delta: float, k: int) -> None:
    """delta_k = delta * sum_{i<k} e^(i eps) (chaining the definition), computed here at 50 digits: the value
    returned is at least that and within 1e-8 of it, and never above the textbook k e^((k-1) eps) delta."""
    g = group_privacy(ApproxDP(eps, delta), k)
    e = as_fraction(eps, "eps")
    assert g.epsilon == e * k
    with localcontext() as ctx:
        ctx.prec = 50
        step = (Decimal(e.numerator) / Decimal(e.denominator)).exp()
        series = sum((step**i for i in range(k)), Decimal(0))
        d = as_fraction(delta, "delta")
        exact = Decimal(d.numerator) / Decimal(d.denominator) * series
        got = Decimal(g.delta.numerator) / Decimal(g.delta.denominator)
        textbook = k * (step ** (k - 1)) * Decimal(d.numerator) / Decimal(d.denominator)
    assert got >= exact
    assert got <= exact * Decimal("1.00000001")
    assert got <= textbook * Decimal("1.00000001")


def test_group_privacy_refusals() -> None:
    with pytest.raises(ValueError, match="reaches 1"):
        group_privacy(ApproxDP(1, 0.01), 10)
    with pytest.raises(ValueError, match="reaches 1"):
        group_privacy(ApproxDP(800, 1e-300), 3)  # e^(800) overflows: refused, not inf
    with pytest.raises(TypeError, match="RDPCurve"):
        group_privacy(RDPCurve((2.0,), (1.0,)), 2)  # type: ignore[type-var]
    with pytest.raises(TypeError, match="privacy-loss"):
        group_privacy(0.5, 2)  # type: ignore[type-var]
    with pytest.raises(ValueError, match="k must be at least 1"):
        group_privacy(PureDP(1), 0)
    with pytest.raises(TypeError, match="k must be an integer"):
        group_privacy(PureDP(1), 2.0)  # type: ignore[arg-type]


# --- neighbour relations and bad input --------------------------------------------------------------------


def test_neighbour_relation_values_and_docs() -> None:
    assert Neighbour("add_remove") is Neighbour.ADD_REMOVE
    assert Neighbour.REPLACE == "replace"
    assert "public" in (Neighbour.__doc__ or "")  # the docstring says what is (not) hidden
    assert count_sensitivity(neighbour=Neighbour.REPLACE, predicate=False) == 0.0


def test_mean_under_add_remove_is_refused_with_the_alternative() -> None:
    with pytest.raises(ValueError, match="noisy sum and a noisy count"):
        mean_sensitivity(lower=0, upper=1, n=10, neighbour="add_remove")


def one_sentence(message: str) -> bool:
    return message.endswith(".") and ". " not in message and "\n" not in message


@pytest.mark.parametrize(
    "call, error",
    [
        (lambda: sum_sensitivity(lower=3, upper=1, neighbour="replace"), ValueError),
        (lambda: sum_sensitivity(lower=math.nan, upper=1, neighbour="replace"), ValueError),
        (lambda: sum_sensitivity(lower=0, upper=math.inf, neighbour="replace"), ValueError),
        (lambda: sum_sensitivity(lower=0, upper="x", neighbour="replace"), ValueError),
        (lambda: sum_sensitivity(lower=True, upper=1, neighbour="replace"), TypeError),
        (lambda: sum_sensitivity(lower=0, upper=1, neighbour="bounded"), ValueError),
        (lambda: mean_sensitivity(lower=0, upper=1, n=0), ValueError),
        (lambda: mean_sensitivity(lower=0, upper=1, n=-5), ValueError),
        (lambda: mean_sensitivity(lower=0, upper=1, n=2.5), TypeError),
        (lambda: mean_sensitivity(lower=1, upper=0, n=3), ValueError),
        (lambda: count_sensitivity(neighbour="unbounded"), ValueError),
        (lambda: count_sensitivity(neighbour="replace", predicate="yes"), TypeError),
        (lambda: histogram_sensitivity(neighbour="replace", norm="linf"), ValueError),
        (lambda: user_level(-1, 2), ValueError),
        (lambda: user_level(math.nan, 2), ValueError),
        (lambda: user_level(1, 0), ValueError),
        (lambda: user_level(1, True), TypeError),
    ],
)
def test_bad_input_gets_one_clear_sentence(call, error: type[Exception]) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(error) as info:
        call()
    assert one_sentence(str(info.value)), str(info.value)


def test_keyword_only() -> None:
    with pytest.raises(TypeError):
        sum_sensitivity(0, 1, "replace")  # type: ignore[call-arg]
