"""Unary encodings: symmetric (SUE, basic RAPPOR), optimized (OUE) and thresholded histogram encoding (THE).

Wang et al. 2017, Sec. 4.3-4.4 (seed 003). The client one-hot encodes its value into ``d`` bits and sends
each bit independently: a 1 stays 1 with probability ``p``, a 0 becomes 1 with probability ``q``. The
support of a report is the set of its 1 bits, so ``p* = p``, ``q* = q`` and the report is
``ln(p (1 - q) / (q (1 - p)))``-LDP (two values differ in two bits).

* SUE (basic one-time RAPPOR): ``p = e^(eps/2) / (e^(eps/2) + 1)``, ``q = 1 - p``.
* OUE: ``p = 1/2``, ``q = 1 / (e^eps + 1)``; variance ``n 4 e^eps / (e^eps - 1)^2``, optimal among unary
  encodings (Wang et al., Eq. (13)).
* THE: the client adds Laplace(2/eps) noise to each coordinate of the one-hot vector and sends which
  coordinates exceed a threshold ``theta``. Only those bits leave the device, and they are independent
  with ``p = P(1 + L > theta) = 1 - e^(-(1 - theta) eps/2) / 2`` and
  ``q = P(L > theta) = e^(-theta eps/2) / 2`` for ``theta`` in (1/2, 1), so kakeibo samples the bits
  directly with those probabilities (the same report distribution, without real-valued noise). ``theta``
  minimises ``q (1 - q) / (p - q)^2`` (Wang et al., Sec. 4.2.2).

Exactness: ``p`` is rounded down and ``q`` up to multiples of ``2^-K`` (see :mod:`._coins`), which only
lowers the loss; the rounded pair is checked against epsilon in rational arithmetic at construction, and the
estimator uses it. Reports are packed bits (``ceil(d/8)`` bytes per client).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
from numpy.typing import NDArray

from ..errors import ArgumentError
from ..noise.source import RandomSource
from ..privacy import Number, PureDP
from ._coins import (
    bernoulli_words,
    column_counts,
    dyadic_at_least,
    dyadic_at_most,
    ln_upper,
    precision_bits,
    removal_loss,
    unpack_bits,
)
from .framework import FloatArray, FrequencyOracle, IntArray, check_epsilon, check_payload_range
from .reports import Param, Reports

__all__ = ["OUE", "SUE", "THE", "UnaryEncoding"]


class UnaryEncoding(FrequencyOracle):
    """A unary encoding with keep probability ``p`` and flip-on probability ``q`` (subclasses choose them).

    * Neighbour relation: local, any two values of one client; sensitivity: two bits of the encoding.
    * Privacy loss: ``PureDP(epsilon)``; the coins' own loss ``ln(p (1 - q) / (q (1 - p)))`` is at most
      epsilon, checked exactly.
    """

    def __init__(self, *, epsilon: Number, domain_size: int) -> None:
        super().__init__(epsilon=epsilon, domain_size=domain_size)
        p_target, q_target = self._target_probabilities()
        bits = max(precision_bits(p_target), precision_bits(q_target))
        p, q = dyadic_at_most(p_target, bits), dyadic_at_least(q_target, bits)
        if not q < p or ln_upper(p * (1 - q) / (q * (1 - p))) > self._epsilon:
            raise ArgumentError(
                f"epsilon = {self.epsilon:g} is too small for an exact {self.protocol} over this domain."
            )
        self._p, self._q = p, q

    def _target_probabilities(self) -> tuple[float, float]:
        """The ideal ``(p, q)`` before exact rounding."""
        raise NotImplementedError

    @property
    def p_star(self) -> float:
        return float(self._p)

    @property
    def q_star(self) -> float:
        return float(self._q)

    @property
    def report_bits(self) -> int:
        return self._d

    @property
    def coin_epsilon(self) -> float:
        """The loss the coins actually have, ``ln(p (1 - q) / (q (1 - p))) <= epsilon``. Equal to epsilon up
        to rounding for SUE and OUE; below it for THE, whose thresholding discards part of the Laplace
        noise's privacy loss (0.896 at epsilon = 1)."""
        return math.log(self._p * (1 - self._q) / (self._q * (1 - self._p)))

    @property
    def removal_loss(self) -> PureDP:
        """The loss under the *removal* relation: a value against a client holding none, which reports the
        all-zero encoding. One bit differs, so ``ln max(p/q, (1 - q)/(1 - p))``: ``eps/2`` for SUE,
        ``ln((e^eps + 1) / 2)`` for OUE (0.62 at epsilon 1), against ``eps`` for two values."""
        return PureDP(removal_loss(self._p, self._q, 1))

    def _extra_params(self) -> dict[str, Param]:
        return {"p": str(self._p), "q": str(self._q)}

    def _perturb(self, values: IntArray, source: RandomSource) -> dict[str, NDArray[Any]]:
        n, d = values.size, self._d
        width = -(-d // 8)
        words_per_row = -(-d // 64)
        # Every bit Bernoulli(q) first, then each client's own bit replaced by an independent Bernoulli(p).
        words = bernoulli_words(self._q, n * words_per_row, source).reshape(n, words_per_row)
        packed = np.ascontiguousarray(words.astype("<u8", copy=False).view(np.uint8)[:, :width])
        if d % 8:
            packed[:, -1] &= np.uint8((1 << (d % 8)) - 1)
        own = unpack_bits(bernoulli_words(self._p, -(-n // 64), source), n)
        rows = np.arange(n)
        byte, shift = values >> 3, (values & 7).astype(np.uint8)
        cleared = packed[rows, byte] & ~(np.uint8(1) << shift)
        packed[rows, byte] = cleared | (own << shift)
        return {"bits": packed}

    def _check_payload(self, reports: Reports) -> None:
        check_payload_range(reports, "bits", 256, columns=-(-self._d // 8))

    def _support_counts(self, reports: Reports) -> FloatArray:
        return column_counts(reports["bits"], self._d).astype(np.float64)

    def _supports(self, reports: Reports, values: IntArray) -> NDArray[np.bool_]:
        byte = reports["bits"][np.arange(values.size), values >> 3]
        return np.asarray((byte >> (values & 7).astype(np.uint8)) & 1, dtype=np.bool_)


class SUE(UnaryEncoding):
    """Symmetric unary encoding (basic one-time RAPPOR): ``p = e^(eps/2) / (e^(eps/2) + 1)``, ``q = 1 - p``
    (``q`` rounded up, ``p = 1 - q``). Variance ``n e^(eps/2) / (e^(eps/2) - 1)^2`` at frequency 0."""

    protocol = "SUE"

    def _target_probabilities(self) -> tuple[float, float]:
        q = 1 / (1 + math.exp(self.epsilon / 2))
        return 1 - q, q

    def __init__(self, *, epsilon: Number, domain_size: int) -> None:
        super().__init__(epsilon=epsilon, domain_size=domain_size)
        self._p = 1 - self._q  # symmetric: the rounded q determines p, and the ratio (p/q)^2 only shrinks


class OUE(UnaryEncoding):
    """Optimized unary encoding: ``p = 1/2``, ``q = 1 / (e^eps + 1)``; variance
    ``n 4 e^eps / (e^eps - 1)^2`` at frequency 0 (Wang et al. 2017, Eq. (13)).

    >>> oue = OUE(epsilon=1, domain_size=3)
    >>> oue.p_star, round(oue.q_star, 3), oue.q_star >= 1 / (math.e + 1)  # q rounded up: never more loss
    (0.5, 0.269, True)
    """

    protocol = "OUE"

    def _target_probabilities(self) -> tuple[float, float]:
        return 0.5, 1 / (math.exp(self.epsilon) + 1)


class THE(UnaryEncoding):
    """Thresholded histogram encoding with the variance-optimal threshold ``theta`` in (1/2, 1)."""

    protocol = "THE"

    def __init__(self, *, epsilon: Number, domain_size: int) -> None:
        self._theta = _optimal_threshold(float(check_epsilon(epsilon)))
        super().__init__(epsilon=epsilon, domain_size=domain_size)

    @property
    def theta(self) -> float:
        """The threshold on the noisy one-hot coordinates."""
        return self._theta

    def _target_probabilities(self) -> tuple[float, float]:
        return _threshold_probabilities(self._theta, self.epsilon)

    def _extra_params(self) -> dict[str, Param]:
        return {**super()._extra_params(), "theta": repr(self._theta)}


def _threshold_probabilities(theta: float, epsilon: float) -> tuple[float, float]:
    """``(P(1 + L > theta), P(L > theta))`` for ``L ~ Laplace(2/eps)`` and ``theta`` in [1/2, 1]."""
    half = epsilon / 2
    return 1 - 0.5 * math.exp(-(1 - theta) * half), 0.5 * math.exp(-theta * half)


def _optimal_threshold(epsilon: float) -> float:
    """The ``theta`` in [1/2, 1] minimising ``q (1 - q) / (p - q)^2`` (Wang et al. 2017, Sec. 4.2.2)."""

    def variance(theta: float) -> float:
        p, q = _threshold_probabilities(theta, epsilon)
        return q * (1 - q) / (p - q) ** 2

    from scipy.optimize import minimize_scalar  # loads scipy.sparse: only where it is needed

    return float(minimize_scalar(variance, bounds=(0.5, 1.0), method="bounded", options={"xatol": 1e-9}).x)
