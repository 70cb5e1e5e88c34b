"""Exact coins for local randomizers: dyadic probabilities, bit-parallel Bernoulli words, packed bit counts.

A local randomizer's privacy rests on ratios of probabilities such as ``p (1 - q) / (q (1 - p)) <= e^eps``.
kakeibo samples every such coin with a *dyadic* probability ``N / 2^K`` from uniform 64-bit words, so the
report distribution is exactly the stated one, and it chooses ``N`` by rounding in the direction that keeps
each ratio at most ``e^eps``; :func:`ln_upper` then checks the ratio against ``epsilon`` in exact rational
arithmetic. The estimators use the rounded probabilities, so they stay unbiased.
"""

from __future__ import annotations

import math
from decimal import ROUND_CEILING, Decimal, localcontext
from fractions import Fraction

import numpy as np
from numpy.typing import NDArray

from ..errors import ArgumentError
from ..noise import RandomSource

__all__ = [
    "bernoulli_words",
    "column_counts",
    "dyadic_at_least",
    "dyadic_at_most",
    "exp_upper",
    "flip_probability",
    "ln_upper",
    "precision_bits",
    "unpack_bits",
]

WordArray = NDArray[np.uint64]

#: Bits of packed report processed per chunk when counting columns (bounded memory for any n).
_COUNT_CHUNK_BYTES = 1 << 25


def ln_upper(value: Fraction) -> Fraction:
    """A rational upper bound on ``ln(value)`` for ``value > 0``: the 60-digit decimal logarithms of numerator
    and denominator (each correctly rounded) and a margin of ``10**-40``, far above their rounding error."""
    if value <= 0:
        raise ArgumentError("ln_upper needs a positive value.")
    with localcontext() as ctx:
        ctx.prec = 60
        log = Decimal(value.numerator).ln() - Decimal(value.denominator).ln()
    return Fraction(log) + Fraction(1, 10**40)


def exp_upper(x: Fraction) -> Fraction:
    """A rational upper bound on ``e^x``: the 60-digit exponential of ``x`` rounded up, plus a relative margin
    of ``10**-40``, far above the rounding error of the correctly rounded 60-digit ``exp``."""
    with localcontext() as ctx:
        ctx.prec = 60
        ctx.rounding = ROUND_CEILING
        value = (Decimal(x.numerator) / Decimal(x.denominator)).exp()
    return Fraction(value) * (1 + Fraction(1, 10**40))


def precision_bits(probability: float) -> int:
    """Bits ``K`` for a dyadic approximation of ``probability`` whose rounding is below ``2^-12`` of the
    smaller of ``probability`` and ``1 - probability`` (at least 16 bits, at most 62)."""
    small = min(probability, 1.0 - probability)
    if not small > 0:
        raise ArgumentError(f"a coin probability must lie strictly between 0 and 1, got {probability!r}.")
    return min(62, max(16, 12 + math.ceil(-math.log2(small))))


def dyadic_at_most(probability: float | Fraction, bits: int) -> Fraction:
    """The largest ``N / 2^bits <= probability`` (exact), but at least ``1 / 2^bits``."""
    scale = 1 << bits
    return Fraction(max(1, math.floor(Fraction(probability) * scale)), scale)


def dyadic_at_least(probability: float | Fraction, bits: int) -> Fraction:
    """The smallest ``N / 2^bits >= probability``, but at most ``1 - 1 / 2^bits``."""
    scale = 1 << bits
    return Fraction(min(scale - 1, math.ceil(Fraction(probability) * scale)), scale)


def flip_probability(epsilon: Fraction, protocol: str, differing: int = 1) -> Fraction:
    """The flip probability ``f = 1 / (1 + e^(eps / t))`` of binary randomized response applied to the ``t``
    coordinates in which two inputs differ, rounded *up* to a dyadic rational and checked exactly:
    ``((1 - f) / f)^t <= e^eps``. ``ValueError`` (naming ``protocol``) when epsilon is too small for that."""
    target = 1 / (1 + math.exp(float(epsilon) / differing))
    flip = dyadic_at_least(target, precision_bits(target))
    if not flip < Fraction(1, 2) or ln_upper(((1 - flip) / flip) ** differing) > epsilon:
        raise ArgumentError(f"epsilon = {float(epsilon):g} is too small for an exact {protocol}.")
    return flip


def removal_loss(p: Fraction, q: Fraction, bits: int) -> Fraction:
    """A rational upper bound on the loss of independent bit reports under the *removal* relation, when a
    value sets ``bits`` bits that the empty input leaves clear (each reported 1 with probability ``p`` when
    set, ``q`` when clear): ``bits ln max(p/q, (1 - q)/(1 - p))``. Against the replacement relation (two
    values, ``2 bits`` differing bits) it is about half."""
    return bits * ln_upper(max(p / q, (1 - q) / (1 - p)))


def bernoulli_words(probability: Fraction, n_words: int, source: RandomSource) -> WordArray:
    """``n_words`` words whose 64 bits are independent Bernoulli(``probability``) draws, for a dyadic
    ``probability = 0.b_1 b_2 ... b_K`` (binary).

    Exact and bit-parallel: starting from ``x = 0`` and going from the last binary digit to the first,
    ``x <- u | x`` where ``b_i = 1`` and ``x <- u & x`` where ``b_i = 0``, each ``u`` a fresh uniform word.
    Each step maps ``P(bit = 1) = v`` to ``(b_i + v) / 2``, so after ``K`` steps it is ``sum b_i 2^-i``.
    Costs ``K - (trailing zero digits)`` random words per output word.
    """
    den = probability.denominator
    if not 0 < probability < 1 or den & (den - 1):
        raise ArgumentError(
            f"bernoulli_words needs a dyadic probability strictly between 0 and 1, got {probability}."
        )
    bits = den.bit_length() - 1
    num = probability.numerator
    out = np.zeros(n_words, dtype=np.uint64)
    for i in range(bits):  # digit b_(bits - i): the i-th lowest bit of the numerator
        u = source.words(n_words)
        if (num >> i) & 1:
            np.bitwise_or(out, u, out=out)
        else:
            np.bitwise_and(out, u, out=out)
    return out


def unpack_bits(words: WordArray, n: int) -> NDArray[np.uint8]:
    """The first ``n`` bits of ``words`` (bit 0 of word 0 first) as 0/1 bytes."""
    return np.unpackbits(words.astype("<u8", copy=False).view(np.uint8), bitorder="little")[:n]


def column_counts(packed: NDArray[np.uint8], columns: int) -> NDArray[np.int64]:
    """How many rows of a bit matrix have each of its first ``columns`` bits set.

    ``packed`` holds one row per report, little-endian bit order within bytes (bit ``j`` of a row is bit
    ``j % 8`` of byte ``j // 8``), as :func:`numpy.packbits` with ``bitorder="little"`` writes it. Rows are
    counted in chunks, so memory stays bounded whatever the number of reports.
    """
    rows, width = packed.shape
    totals = np.zeros(width * 8, dtype=np.int64)
    step = max(1, _COUNT_CHUNK_BYTES // max(width, 1))
    for start in range(0, rows, step):
        chunk = packed[start : start + step]
        for bit in range(8):
            plane = (chunk >> np.uint8(bit)) & np.uint8(1)
            totals[bit::8] += plane.sum(axis=0, dtype=np.int64)
    return totals[:columns]
