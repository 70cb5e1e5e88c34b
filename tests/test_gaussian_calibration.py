"""The Gaussian mechanism's (epsilon, delta) claim, checked exactly for the noise it really adds.

``Gaussian(sensitivity=, epsilon=, delta=)`` calibrates sigma with the *continuous* analytic formula of
Balle and Wang (2018) for the sensitivity times ``1 + 2**-8``, but adds *discrete* Gaussian noise of
integer variance parameter ``sigma2`` on a grid ``2**k`` (``k, sigma2 = mechanism.grid(d)[:2]``). Its
docstring argues that the discrete noise on the grid keeps the claim. Here we compute the exact delta of
the noise actually used and compare it with the claimed delta.

Worst-case integer shifts. Two answers at L2 distance ``Delta`` are ``s = Delta / 2**k`` grid steps apart;
rounding each coordinate to the grid moves it by at most 1/2, so the integer shift ``v`` satisfies
``|v_i| <= floor(|r_i| + 1)`` for real differences ``r`` with ``|r|_2 <= s``: every integer ``v`` with
``sum_i max(0, |v_i| - 1)^2 <= s^2`` can occur (ties aside). For ``d = 1`` the worst is
``v = floor(s + 1)``; all shifts up to it are checked.

Exact delta of a shift (Canonne, Kamath and Steinke 2020, Theorem 7 in one dimension). For
``P = N_Z(0, sigma2)^d`` and ``Q = N_Z(v, sigma2)^d`` the privacy loss at ``y`` is
``(|v|^2 - 2 <v, y>) / (2 sigma2)``, so with ``W = <v, X>``, ``X ~ P``:
``delta(eps) = P[W < c] - e^eps P[W < c - |v|^2]``, ``c = |v|^2 / 2 - eps sigma2``. In one dimension this is
CKS's ``P[X > eps sigma2 / v - v / 2] - e^eps P[X > eps sigma2 / v + v / 2]``. For ``d > 1`` we check the
feasible shifts of largest norm (delta depends on ``v`` almost only through ``|v|_2``, exactly so for the
continuous Gaussian): all of them for ``d = 2``; for ``d = 4`` the equal shift ``(m, m, m, m)``,
``m = 1 + floor(s / 2)``, the vectors with ``m + 1`` on ``j`` coordinates and the largest feasible value on
the rest, and the concentrated ``(floor(s + 1), 1, 1, 1)``; ``W`` is then a sum of scaled discrete
Gaussians, whose law we build by exact convolution.

Numerics: the pmf is summed over ``|x| <= 12 sigma + 2`` (the mass beyond is below e^-72) in float64:
every sum is of non-negative terms (relative error below 1e-12), and the one subtraction loses at most a
factor ``P[W < c] / delta`` (below 10 here). A 50-digit ``decimal`` computation of one configuration
confirms the float64 value to 1e-11. The assertion is ``delta_exact * (1 + 1e-9) <= delta``.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable
from decimal import Decimal, localcontext
from functools import cache

import numpy as np
import pytest
from numpy.typing import NDArray

from kakeibo.mechanisms import Gaussian, analytic_gaussian_delta

FloatArray = NDArray[np.float64]

#: Relative numerical error allowed for the float64 computation of delta.
TOLERANCE = 1e-9

EPSILONS = (0.05, 0.3, 1.0, 3.0, 10.0)
DELTAS = (1e-3, 1e-6, 1e-10)
SENSITIVITIES = (1.0, 0.3, 7 / 3, 1000.0, 2.0**-10)


@cache
def discrete_gaussian_pmf(sigma2: int) -> tuple[FloatArray, int]:
    """``(pmf, half)``: ``pmf[i] = P[X = i - half]`` for ``X ~ N_Z(0, sigma2)``, ``|x| <= half``,
    ``half = ceil(12 sigma) + 2``."""
    half = math.ceil(12 * math.sqrt(sigma2)) + 2
    x = np.arange(-half, half + 1, dtype=np.float64)
    w = np.exp(-(x * x) / (2.0 * sigma2))
    pmf: FloatArray = w / math.fsum(w.tolist())
    return pmf, half


@cache
def sum_law(sigma2: int, count: int) -> tuple[FloatArray, int]:
    """Law of ``X_1 + ... + X_count`` (i.i.d. N_Z(0, sigma2)) by direct convolution: ``(pmf, offset)``."""
    pmf, half = discrete_gaussian_pmf(sigma2)
    if count == 1:
        return pmf, half
    previous, offset = sum_law(sigma2, count - 1)
    return np.convolve(previous, pmf), offset + half


def below(pmf: FloatArray, offset: int) -> Callable[[FloatArray], FloatArray]:
    """``c -> P[S < c]`` for the integer law ``pmf[i] = P[S = i - offset]``, by a left cumulative sum."""
    cum = np.concatenate([[0.0], np.cumsum(pmf)])

    def f(c: FloatArray) -> FloatArray:
        index = np.clip(np.ceil(np.asarray(c, dtype=np.float64)).astype(np.int64) + offset, 0, pmf.size)
        out: FloatArray = cum[index]
        return out

    return f


def exact_delta(sigma2: int, epsilon: float, groups: tuple[tuple[int, int], ...]) -> float:
    """Exact delta(epsilon) of N_Z(0, sigma2)^d against its shift by ``v``; ``v`` has ``count`` coordinates
    equal to ``shift`` for each ``(count, shift)`` in ``groups`` (one or two groups)."""
    norm2 = sum(count * shift * shift for count, shift in groups)
    c = norm2 / 2 - epsilon * sigma2
    (count_a, a), *rest = groups
    law_a, off_a = sum_law(sigma2, count_a)
    if not rest:
        f = below(law_a, off_a)
        hit = f(np.array([c / a, (c - norm2) / a]))
        return float(hit[0] - math.exp(epsilon) * hit[1])
    ((count_b, b),) = rest
    law_b, off_b = sum_law(sigma2, count_b)
    f = below(law_b, off_b)
    support = np.flatnonzero(law_a > 0)
    s = (support - off_a).astype(np.float64)
    weights = law_a[support]
    first = float(np.sum(weights * f((c - a * s) / b)))  # pairwise summation of non-negative terms
    second = float(np.sum(weights * f((c - norm2 - a * s) / b)))
    return first - math.exp(epsilon) * second


def one_dimensional_deltas(sigma2: int, epsilon: float, shifts: NDArray[np.int64]) -> FloatArray:
    """CKS 2020, Theorem 7 for every shift ``D`` at once:
    ``delta = P[X > eps sigma2/D - D/2] - e^eps P[X > eps sigma2/D + D/2]``."""
    pmf, half = discrete_gaussian_pmf(sigma2)
    above = np.concatenate([np.cumsum(pmf[::-1])[::-1], [0.0]])  # above[i] = P[X >= i - half]

    def greater(a: FloatArray) -> FloatArray:  # P[X > a] = P[X >= floor(a) + 1]
        index = np.clip(np.floor(a).astype(np.int64) + 1 + half, 0, pmf.size)
        out: FloatArray = above[index]
        return out

    d = shifts.astype(np.float64)
    return greater(epsilon * sigma2 / d - d / 2) - math.exp(epsilon) * greater(epsilon * sigma2 / d + d / 2)


# --- d = 1 ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("epsilon", "delta"), list(itertools.product(EPSILONS, DELTAS)))
def test_single_value_release_meets_its_delta(epsilon: float, delta: float) -> None:
    """For every sensitivity in SENSITIVITIES and every integer shift 1..floor(s + 1), the exact delta of
    the discrete Gaussian actually used for one value is at most the claimed delta."""
    for sensitivity in SENSITIVITIES:
        m = Gaussian(sensitivity=sensitivity, epsilon=epsilon, delta=delta)
        k, sigma2 = m.grid(1)[:2]
        s = sensitivity / 2.0**k
        worst_shift = math.floor(s + 1)
        deltas = one_dimensional_deltas(sigma2, epsilon, np.arange(1, worst_shift + 1))
        worst = float(deltas.max())
        assert worst * (1 + TOLERANCE) <= delta, (
            f"Gaussian(sensitivity={sensitivity}, epsilon={epsilon}, delta={delta}): grid k={k}, "
            f"sigma2={sigma2}, shift {int(np.argmax(deltas)) + 1} of at most {worst_shift}: exact delta "
            f"{worst!r} > claimed {delta!r}"
        )


def test_the_worst_shift_is_the_largest() -> None:
    """Sanity of the model: delta does not decrease with the shift (it is 0 for small shifts, whose privacy
    loss never exceeds epsilon on the summed support), and the largest feasible shift is floor(s + 1)."""
    m = Gaussian(sensitivity=1, epsilon=1, delta=1e-5)
    k, sigma2 = m.grid(1)[:2]
    deltas = one_dimensional_deltas(sigma2, 1.0, np.arange(1, 258))
    assert np.all(np.diff(deltas) >= 0) and deltas[-1] > deltas[-2] > 0
    assert math.floor(1 / 2.0**k + 1) == 257


def test_one_dimensional_formula_agrees_with_the_general_one() -> None:
    """CKS Theorem 7 and the general ``<v, X>`` formula are the same computation for d = 1."""
    m = Gaussian(sensitivity=1, epsilon=1, delta=1e-5)
    sigma2 = m.grid(1)[1]
    for shift in (1, 100, 257):
        general = exact_delta(sigma2, 1.0, ((1, shift),))
        assert general == pytest.approx(
            float(one_dimensional_deltas(sigma2, 1.0, np.array([shift]))[0]), rel=1e-10
        )


def test_float64_delta_agrees_with_50_digit_decimal() -> None:
    """The float64 computation of delta (Gaussian(sensitivity=1, epsilon=10, delta=1e-3), one value, worst
    shift) agrees with a 50-digit decimal computation to 1e-11 relative."""
    m = Gaussian(sensitivity=1, epsilon=10, delta=1e-3)
    k, sigma2 = m.grid(1)[:2]
    shift = math.floor(1 / 2.0**k + 1)
    float_value = float(one_dimensional_deltas(sigma2, 10.0, np.array([shift]))[0])
    with localcontext() as ctx:
        ctx.prec = 50
        half = math.ceil(12 * math.sqrt(sigma2)) + 2
        two_sigma2 = Decimal(2 * sigma2)
        w = {x: (-(Decimal(x * x)) / two_sigma2).exp() for x in range(0, half + 1)}
        total = 2 * sum(w.values()) - w[0]
        a = Decimal(10) * sigma2 / shift

        def greater(t: Decimal) -> Decimal:
            start = math.floor(t) + 1
            assert start >= 0
            return sum((w[x] for x in range(start, half + 1)), Decimal(0)) / total

        exact = greater(a - Decimal(shift) / 2) - Decimal(10).exp() * greater(a + Decimal(shift) / 2)
    assert float_value == pytest.approx(float(exact), rel=1e-11)
    assert 0 < float(exact) <= 1e-3


# --- d > 1 ----------------------------------------------------------------------------------------------


def _two_dimensional_boundary(s: float) -> list[tuple[tuple[int, int], ...]]:
    """Every feasible shift (a, b), a >= b >= 1, with b as large as (a - 1)^2 + (b - 1)^2 <= s^2 allows."""
    out: list[tuple[tuple[int, int], ...]] = []
    for a in range(1, math.floor(s) + 2):
        b = 1 + math.floor(math.sqrt(max(0.0, s * s - (a - 1) ** 2)))
        if b > a:
            continue
        out.append(((1, a), (1, b)) if a != b else ((2, a),))
    return out


def _four_dimensional_candidates(s: float) -> list[tuple[tuple[int, int], ...]]:
    m = 1 + math.floor(s / 2)
    out: list[tuple[tuple[int, int], ...]] = [((4, m),), ((1, math.floor(s + 1)), (3, 1))]
    for j in (1, 2, 3):
        rest = s * s - j * m * m  # (m + 1 - 1)^2 on j coordinates
        if rest >= 0:
            b = 1 + math.floor(math.sqrt(rest / (4 - j)))
            out.append(((j, m + 1), (4 - j, b)))
    return out


@pytest.mark.parametrize(
    ("d", "epsilon", "delta", "sensitivity"),
    [
        (2, 10.0, 1e-3, 1.0),
        (2, 3.0, 1e-3, 0.3),
        (2, 1.0, 1e-5, 1.0),
        (2, 0.3, 1e-6, 1.0),
        (4, 10.0, 1e-3, 1.0),
        (4, 3.0, 1e-3, 0.3),
        (4, 1.0, 1e-5, 1.0),
    ],
)
def test_vector_release_meets_its_delta(d: int, epsilon: float, delta: float, sensitivity: float) -> None:
    """An answer of d values: for the worst feasible integer shifts (see the module docstring) the exact
    delta of the discrete Gaussian at ``grid(d)`` is at most the claimed delta."""
    m = Gaussian(sensitivity=sensitivity, epsilon=epsilon, delta=delta)
    k, sigma2 = m.grid(d)[:2]
    s = sensitivity / 2.0**k
    candidates = _two_dimensional_boundary(s) if d == 2 else _four_dimensional_candidates(s)
    assert all(sum(c * max(0, v - 1) ** 2 for c, v in g) <= s * s for g in candidates)  # all feasible
    norms = [math.sqrt(sum(c * v * v for c, v in g)) for g in candidates]
    assert max(norms) > s + math.sqrt(d) - 1  # the search reaches the largest norms (<= s + sqrt(d))
    for groups, norm in zip(candidates, norms, strict=True):
        value = exact_delta(sigma2, epsilon, groups)
        assert value * (1 + TOLERANCE) <= delta, (
            f"Gaussian(sensitivity={sensitivity}, epsilon={epsilon}, delta={delta}), d={d}: grid k={k}, "
            f"sigma2={sigma2}, shift {groups} (|v|={norm:.4f}, s={s}): exact delta {value!r} "
            f"> claimed {delta!r}"
        )


def test_vector_delta_is_close_to_the_continuous_gaussian() -> None:
    """Cross-check of the d-dimensional computation: for the equal shift in d = 4 the discrete delta is
    within 1% of the continuous Gaussian's delta at the same sigma and |v| (they differ only through the
    lattice, at sigma of about 2000 grid steps)."""
    m = Gaussian(sensitivity=1, epsilon=1, delta=1e-5)
    k, sigma2 = m.grid(4)[:2]
    shift = 1 + math.floor(1 / 2.0**k / 2)
    discrete = exact_delta(sigma2, 1.0, ((4, shift),))
    continuous = analytic_gaussian_delta(math.sqrt(sigma2), 2 * shift, 1.0)
    assert discrete == pytest.approx(continuous, rel=1e-2)
