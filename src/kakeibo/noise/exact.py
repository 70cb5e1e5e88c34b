"""Exact, vectorised samplers over the integers (Canonne, Kamath and Steinke 2020, "The Discrete
Gaussian for Differential Privacy", Algorithms 1-3).

Every probability is a ratio of integers and every decision compares uniform integers, so given a uniform
word source the output distribution is exactly the stated one: no floating point is involved. The
algorithms are the paper's, run in *rounds* over numpy arrays: each round advances every still-undecided
sample by one step of its rejection loop, so the Python overhead is per round (a few dozen per call), not
per sample.

:func:`exact_bernoulli` takes float probabilities, but reads each as the exact dyadic rational it is
(``frexp``) and compares integers, so its coins are exact too.

Arithmetic is in ``int64`` where the operands provably fit and falls back to Python integers for the
(rare, parameter-dependent) samples where they might not, so exactness never depends on the parameters.
"""

from __future__ import annotations

from fractions import Fraction
from math import isqrt
from typing import Any

import numpy as np
from numpy.typing import ArrayLike, NDArray

from ..errors import ArgumentError, ArgumentTypeError
from .source import RandomSource

__all__ = [
    "bernoulli_exp",
    "discrete_gaussian",
    "discrete_laplace",
    "exact_bernoulli",
    "uniform_below",
]

IntArray = NDArray[np.int64]
BoolArray = NDArray[np.bool_]

_U64_MAX = np.uint64(2**64 - 1)


def uniform_below(m: int | IntArray, size: int, source: RandomSource) -> IntArray:
    """``size`` independent uniform integers in ``[0, m)``; ``m`` is a scalar or an array of length
    ``size`` with ``1 <= m < 2**63``. Rejection sampling on 64-bit words: a word ``w`` is accepted when
    ``w < floor((2**64 - 1) / m) * m``, which holds every residue equally often.
    """
    bound = np.asarray(m, dtype=np.uint64)
    limit = (_U64_MAX // bound) * bound
    w = source.words(size)
    out = (w % bound).astype(np.int64)
    bad = np.flatnonzero(w >= limit)
    while bad.size:
        w = source.words(bad.size)
        sub_bound = bound if bound.ndim == 0 else bound[bad]
        sub_limit = limit if limit.ndim == 0 else limit[bad]
        ok = w < sub_limit
        out[bad[ok]] = (w[ok] % (sub_bound if bound.ndim == 0 else sub_bound[ok])).astype(np.int64)
        bad = bad[~ok]
    return out


def _bernoulli_exp_fraction(num: IntArray, den: int | IntArray, source: RandomSource) -> BoolArray:
    """Bernoulli(exp(-num/den)) for ``0 <= num <= den`` (CKS Algorithm 1, gamma in [0, 1]).

    Draw A_k ~ Bernoulli(gamma / k) = [Uniform{0..k den - 1} < num] for k = 1, 2, ... until the first
    failure at k = K; return [K odd]. When ``k den`` could reach 2**63 the draw is split into the
    independent Bernoulli(num/den) and Bernoulli(1/k), whose conjunction has the same probability.
    """
    n = num.size
    result = np.empty(n, dtype=np.bool_)
    live = np.arange(n)
    live_num = num
    live_den: Any = den if np.ndim(den) == 0 else np.asarray(den)
    merged_ok = int(np.max(den, initial=1)) < 2**48
    k = 1
    while live.size:
        if merged_ok and k < 2**15:
            a = uniform_below(live_den * k, live.size, source) < live_num
        else:  # Bernoulli(num/den) AND Bernoulli(1/k): independent, so exactly num/(den k)
            a = uniform_below(live_den, live.size, source) < live_num
            a &= uniform_below(k, live.size, source) == 0
        result[live[~a]] = k % 2 == 1
        live, live_num = live[a], live_num[a]
        if np.ndim(live_den):
            live_den = live_den[a]
        k += 1
    return result


def _bernoulli_exp_minus_one(size: int, source: RandomSource) -> BoolArray:
    """Bernoulli(exp(-1)) (CKS Algorithm 1 with gamma = 1, whose first step always succeeds)."""
    result = np.empty(size, dtype=np.bool_)
    live = np.arange(size)
    k = 2
    while live.size:
        a = uniform_below(k, live.size, source) == 0
        result[live[~a]] = k % 2 == 1
        live = live[a]
        k += 1
    return result


def bernoulli_exp(num: IntArray, den: int | IntArray, source: RandomSource) -> BoolArray:
    """Bernoulli(exp(-num/den)) for integers ``num >= 0``, ``0 < den < 2**63`` (CKS Algorithm 1).

    For gamma > 1: exp(-gamma) = exp(-1)^floor(gamma) * exp(-(gamma - floor(gamma))); the factors are
    drawn independently and the result is their conjunction, evaluated lazily in rounds (a sample stops
    at its first failure, so after j rounds only a fraction exp(-j) of samples are still drawing).
    """
    num = np.asarray(num, dtype=np.int64)
    whole, frac = np.divmod(num, den)
    result = _bernoulli_exp_fraction(frac, den, source)
    live = np.flatnonzero(result & (whole > 0))
    remaining = whole[live]
    while live.size:
        ok = _bernoulli_exp_minus_one(live.size, source)
        result[live[~ok]] = False
        remaining = remaining - 1
        keep = ok & (remaining > 0)
        live, remaining = live[keep], remaining[keep]
    return result


def _uniform_below_int(m: int, source: RandomSource) -> int:
    """One uniform integer in ``[0, m)`` for an arbitrary Python integer ``m >= 1``."""
    bits = m.bit_length()
    nwords = (bits + 63) // 64
    mask = (1 << bits) - 1
    while True:
        value = 0
        for word in source.words(nwords).tolist():
            value = (value << 64) | int(word)
        value &= mask
        if value < m:
            return value


def _bernoulli_exp_int(num: int, den: int, source: RandomSource) -> bool:
    """Scalar Bernoulli(exp(-num/den)) with Python integers (CKS Algorithm 1), for huge operands."""
    whole, frac = divmod(num, den)
    k = 1
    while _uniform_below_int(den, source) < frac and (k == 1 or _uniform_below_int(k, source) == 0):
        k += 1
    if k % 2 == 0:
        return False
    return all(bool(_bernoulli_exp_minus_one(1, source)[0]) for _ in range(whole))


def _check_positive_int(value: int, name: str, limit: int = 2**48) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise ArgumentTypeError(f"{name} must be an integer, got {type(value).__name__}.")
    value = int(value)
    if not 0 < value < limit:
        raise ArgumentError(
            f"{name} must be a positive integer below 2**{limit.bit_length() - 1}, got {value}."
        )
    return value


def discrete_laplace(scale_num: int, scale_den: int, size: int, source: RandomSource) -> IntArray:
    """``size`` draws of the discrete Laplace distribution with scale ``t/s = scale_num/scale_den``:
    ``P(X = x) = (e^(1/scale) - 1)/(e^(1/scale) + 1) * e^(-|x|/scale)`` (CKS Algorithm 2).

    Per sample: U ~ Uniform{0..t-1}, accept with Bernoulli(exp(-U/t)); V counts Bernoulli(exp(-1))
    successes before the first failure; X = U + tV is then geometric with ratio exp(-1/t);
    Y = floor(X/s); a fair sign B, rejecting (B=1, Y=0); output (1-2B)Y.
    """
    t = _check_positive_int(scale_num, "scale_num", 2**52)
    s = _check_positive_int(scale_den, "scale_den", 2**52)
    out = np.empty(size, dtype=np.int64)
    pending = np.arange(size)
    while pending.size:
        m = pending.size
        u = uniform_below(t, m, source)
        keep = _bernoulli_exp_fraction(u, t, source)
        v = np.zeros(m, dtype=np.int64)
        live = np.flatnonzero(keep)
        while live.size:
            ok = _bernoulli_exp_minus_one(live.size, source)
            live = live[ok]
            v[live] += 1
        if v.max(initial=0) >= 2**62 // t:  # t < 2**52, so this needs V >= 1024: probability e**-1024
            raise OverflowError("a discrete Laplace draw exceeded int64 (probability below exp(-1024)).")
        y = (u + t * v) // s
        negative = (source.words(m) & np.uint64(1)).astype(np.bool_)
        keep &= ~(negative & (y == 0))
        out[pending[keep]] = np.where(negative, -y, y)[keep]
        pending = pending[~keep]
    return out


def discrete_gaussian(
    sigma2_num: int, sigma2_den: int, size: int, source: RandomSource, proposal_scale: int | None = None
) -> IntArray:
    """``size`` draws of the discrete Gaussian ``P(X = x) ~ exp(-x^2 / (2 sigma^2))`` with
    ``sigma^2 = sigma2_num / sigma2_den`` (CKS Algorithm 3).

    Draw Y ~ discrete Laplace(scale t) and accept it with probability exp(-(|Y| - sigma^2/t)^2 / (2 sigma^2)).
    The paper takes t = floor(sigma) + 1 (the default), but the output is exact for any integer t > 0: the
    target-to-proposal ratio is proportional to that acceptance probability, which is at most 1. With
    sigma^2/t = p/q in lowest terms the exponent is (|Y| q - p)^2 b / (2 a q^2); callers that choose t
    dividing sigma^2 (q = 1) keep it in int64 for sigma up to about 1e9.
    """
    a = _check_positive_int(sigma2_num, "sigma2_num", 2**62)
    b = _check_positive_int(sigma2_den, "sigma2_den", 2**62)
    t = isqrt(a * b) // b + 1 if proposal_scale is None else _check_positive_int(proposal_scale, "t")
    ratio = Fraction(a, b * t)
    p, q = ratio.numerator, ratio.denominator
    den = 2 * a * q * q
    # Fast path: (|Y| q - p)^2 b < 2**63 and den < 2**62.
    diff_limit = isqrt((2**63 - 1) // b)
    int64_ok = den < 2**62 and p <= diff_limit and q < 2**62
    out = np.empty(size, dtype=np.int64)
    pending = np.arange(size)
    while pending.size:
        m = pending.size
        y = discrete_laplace(t, 1, m, source)
        mag = np.abs(y)
        fast = mag <= ((p + diff_limit) // q if int64_ok else -1)
        accept = np.empty(m, dtype=np.bool_)
        if fast.any():
            diff = mag[fast] * q - p
            accept[fast] = bernoulli_exp(diff * diff * b, den, source)
        for i in np.flatnonzero(~fast).tolist():
            accept[i] = _bernoulli_exp_int((int(mag[i]) * q - p) ** 2 * b, den, source)
        out[pending[accept]] = y[accept]
        pending = pending[~accept]
    return out


def exact_bernoulli(probability: ArrayLike, source: RandomSource) -> NDArray[np.bool_]:
    """Independent coins, ``True`` with probability exactly ``probability[i]`` (floats in [0, 1]).

    Write ``p = M 2^-(53 + z)`` with ``2^52 <= M < 2^53`` (``frexp``); for a uniform real ``U`` in [0, 1),
    ``U < p`` exactly when the integer formed by the first ``53 + z`` bits of ``U`` is below ``M``. The
    first 64 bits are one word; when ``z > 11`` the answer is "no" unless the first ``z`` bits are all
    zero (probability ``2^-z <= 2^-12``), and only then are further words read (a short Python loop).

    >>> import numpy as np
    >>> from kakeibo.noise import GeneratorSource
    >>> coins = exact_bernoulli(np.array([0.0, 1.0, 0.5]), GeneratorSource(np.random.default_rng(1)))
    >>> coins[:2].tolist()
    [False, True]
    """
    p = np.asarray(probability, dtype=np.float64)
    if np.any(~((p >= 0) & (p <= 1))):
        raise ArgumentError("probabilities must lie in [0, 1].")
    out = p >= 1
    live = np.flatnonzero((p > 0) & (p < 1))
    if live.size == 0:
        return out
    mantissa, exponent = np.frexp(p.reshape(-1)[live])
    m = np.ldexp(mantissa, 53).astype(np.uint64)  # exact: a float has at most 53 significant bits
    z = -exponent.astype(np.int64)  # >= 0 because p < 1
    words = source.words(live.size)
    flat = out.reshape(-1)
    short = z <= 11
    flat[live[short]] = (words[short] >> (11 - z[short]).astype(np.uint64)) < m[short]
    long_idx, long_z, long_w, long_m = live[~short], z[~short], words[~short], m[~short]
    zero_lead = np.where(
        long_z >= 64, long_w == 0, (long_w >> (64 - np.minimum(long_z, 63)).astype(np.uint64)) == 0
    )
    for i in np.flatnonzero(zero_lead).tolist():
        bits = 53 + int(long_z[i])
        n_words = -(-bits // 64)
        u = int(long_w[i])
        for word in source.words(n_words - 1).tolist():
            u = (u << 64) | int(word)
        flat[long_idx[i]] = (u >> (64 * n_words - bits)) < int(long_m[i])
    return out
