"""RAPPOR: Bloom filters, a memoised permanent randomized response and a fresh instantaneous one.

Erlingsson, Pihur and Korolova 2014, "RAPPOR: Randomized Aggregatable Privacy-Preserving Ordinal Response"
(CCS; seed 003). A client holding a string (or a non-negative integer) ``v``:

1. **Signal.** Hashes ``v`` onto a Bloom filter ``B`` of ``k`` bits with ``h`` hash functions. Clients are
   split into ``m`` cohorts; cohort ``c`` uses functions ``c h .. c h + h - 1`` of one public, seeded
   :class:`~kakeibo.ldp._hash.HashFamily`, so different cohorts see different collisions.
2. **Permanent randomized response (PRR).** ``B'_i = 1`` with probability ``f/2``, ``0`` with probability
   ``f/2``, ``B_i`` otherwise; equivalently ``B'_i = B_i XOR F_i`` with ``F_i ~ Bernoulli(f/2)``.
   ``B'`` is *memoised*: the same client reporting the same value always uses the same ``B'``
   (:class:`RapporClient` derives its coins from a keyed PRF of the client's secret and the value).
3. **Instantaneous randomized response (IRR).** Each report sends ``S_i ~ Bernoulli(q)`` where
   ``B'_i = 1`` and ``S_i ~ Bernoulli(p)`` where ``B'_i = 0``, fresh every time.

Privacy (paper Sec. 3): two values differ in at most ``2h`` Bloom bits, and all coins are independent per
bit, so

* ``epsilon_infinity = 2h ln((1 - f/2) / (f/2))`` bounds what the memoised ``B'`` reveals, hence what any
  number of reports of one value reveal together (the longitudinal guarantee; the seed's ``eps_1``);
* ``epsilon_one = h ln(q* (1 - p*) / (p* (1 - q*)))`` bounds one report (the seed's ``eps_2``), where
  ``q* = P(S_i = 1 | B_i = 1) = f/2 (p + q) + (1 - f) q`` and ``p* = P(S_i = 1 | B_i = 0) =
  f/2 (p + q) + (1 - f) p``. (The seed writes ``p* = f/2 (p + 1) + (1 - f) p``, a typo: a 0 bit of ``B``
  becomes a 1 of ``B'`` with probability ``f/2`` and is then reported with ``q``, else with ``p``, so the
  paper's ``f/2 (p + q)`` is right.)

With the paper's parameters ``h = 2, f = 1/2, p = 1/2, q = 3/4``: ``epsilon_infinity = 4 ln 3 ~ 4.39`` and
``epsilon_one ~ 1.07``.

**One-time RAPPOR** (:class:`OneTimeRAPPOR`; paper Sec. 2, for collections that ask once): step 3 is
skipped and the client sends ``B'``. A report then costs ``epsilon_infinity`` at once, and reporting the
same value again (the memoised ``B'``, byte for byte) costs nothing more. It is decoded like RAPPOR with
``p* = f/2`` and ``q* = 1 - f/2``.

Under the *removal* relation (a client's value against the client holding none, which reports the empty
filter) only ``h`` bits differ, so each protocol's :attr:`~OneTimeRAPPOR.removal_loss` is
``h ln max(q*/p*, (1 - p*)/(1 - q*))``, about half the replacement loss.

Exactness: ``p``, ``q`` and ``f/2`` are used as dyadic rationals. One with more than 32 fractional bits
(or not dyadic at all, like ``1/3``) is rounded to a multiple of ``2^-32`` in the direction that lowers
the loss (``p`` and ``f/2`` up, ``q`` down); :attr:`RAPPOR.p`, :attr:`RAPPOR.q` and :attr:`RAPPOR.f` report
the values used, the losses are computed from them (rational upper bounds on the logarithms, see
:func:`~kakeibo.ldp._coins.ln_upper`) and every coin is drawn exactly with
:func:`~kakeibo.ldp._coins.bernoulli_words`.

Decoding (paper Sec. 4): per cohort ``j`` with ``N_j`` reports and ``c_ij`` reports with bit ``i`` set,
``E c_ij = t_ij q* + (N_j - t_ij) p*`` for the number ``t_ij`` of its clients whose Bloom bit ``i`` is set,
so ``t_ij = (c_ij - p* N_j) / (q* - p*)``, with ``p* = p + f q/2 - f p/2`` and ``q* - p* = (1 - f)(q - p)``,
is unbiased with variance ``(t_ij q*(1 - q*) + (N_j - t_ij) p*(1 - p*)) / (q* - p*)^2``
(:meth:`RAPPOR.estimate` without candidates). With candidates it regresses these on the candidates' Bloom bits
(LASSO to select, least squares to estimate, Bonferroni to detect); see :class:`RapporDecoding`.

>>> import numpy as np
>>> rappor = RAPPOR()  # the paper's k = 128, h = 2, m = 64, p = 1/2, q = 3/4, f = 1/2
>>> round(rappor.epsilon_infinity, 2), round(rappor.epsilon_one, 2)
(4.39, 1.07)
>>> reports = rappor.randomize(["apple", "pear", "apple"], rng=np.random.default_rng(0))
>>> reports["bits"].shape, reports["cohort"].shape
((3, 16), (3,))
"""

from __future__ import annotations

import hashlib
import math
import struct
from abc import ABC, abstractmethod
from collections.abc import Sequence
from fractions import Fraction
from typing import TYPE_CHECKING, Any, ClassVar, overload

import numpy as np
from numpy.typing import ArrayLike, NDArray
from scipy.special import ndtr

if TYPE_CHECKING:  # imported where the server decodes: a client that only randomizes never loads it
    import scipy.sparse as sp

from ..errors import ArgumentError, ArgumentTypeError
from ..mechanisms.base import Rng, check_beta
from ..noise import resolve_source
from ..noise.exact import uniform_below
from ..noise.source import KeyedSource, RandomSource
from ..privacy import Number, PureDP, as_fraction
from ._coins import bernoulli_words, column_counts, dyadic_at_least, dyadic_at_most, ln_upper, removal_loss
from ._hash import HashFamily, KeyArray, value_keys
from .estimates import CountEstimate, RapporDecoding, deprecated_alias
from .framework import (
    MAX_EPSILON,
    FloatArray,
    LocalRandomizer,
    check_domain_values,
    check_integer,
    check_payload_range,
)
from .reports import Param, Reports

__all__ = ["RAPPOR", "RapporClient", "RapporDecoding"]

WordArray = NDArray[np.uint64]
BoolArray = NDArray[np.bool_]
Values = ArrayLike | Sequence[Any]

#: Probabilities finer than ``2^-COIN_BITS`` are rounded to that grid (in the direction of less loss).
COIN_BITS = 32
_PERSON = b"kakeibo-rappor"
#: LASSO screen: a candidate stays in the model when its evidence exceeds about this many standard errors.
#: Lenient on purpose: the screen only removes clear noise columns; the Bonferroni test decides detection.
_SELECTION_Z = 1.0
#: Largest number of columns (candidates + background) of the unselected fit behind ``other_count``.
_MAX_FULL_FIT_COLUMNS = 2048


# -- exact coins ---------------------------------------------------------------------------------------------
def _coin(value: Fraction, round_up: bool) -> Fraction:
    """``value`` itself when a multiple of ``2^-COIN_BITS``, else rounded exactly to one (up or down)."""
    if value.denominator <= 1 << COIN_BITS and value.denominator & (value.denominator - 1) == 0:
        return value
    return (dyadic_at_least if round_up else dyadic_at_most)(value, COIN_BITS)


def _probability(value: Number, name: str) -> Fraction:
    """``value`` as an exact fraction strictly between 0 and 1, or a one-sentence error."""
    frac = as_fraction(value, name)
    if not 0 < frac < 1:
        raise ArgumentError(f"{name} must lie strictly between 0 and 1, got {float(frac)!r}.")
    return frac


# -- the protocols -------------------------------------------------------------------------------------------
class _BloomRandomizer(LocalRandomizer, ABC):
    """What both RAPPOR variants share: the Bloom filter (``k`` bits, ``h`` hash functions per cohort, ``m``
    cohorts), the memoised permanent randomized response with noise level ``f``, the packed wire format and
    the server's decoding (Erlingsson et al. 2014, Secs. 2 and 4). A variant fixes how a report is made from
    ``B'`` (:meth:`_report_words`) and so the probabilities ``p*`` and ``q*`` that a reported bit is set when
    the client's Bloom bit is 0 and 1, from which the decoder and the losses follow."""

    protocol: ClassVar[str]

    def __init__(self, *, k: int, h: int, m: int, f: Number, hash_seed: int) -> None:
        self._k = check_integer(k, "k", 2, 1 << 16)
        self._h = check_integer(h, "h", 1, 64)
        self._m = check_integer(m, "m", 1, 1 << 16)
        if self._m * self._h > 1 << 20:
            raise ArgumentError(f"m * h must be at most 2**20 hash functions, got {self._m * self._h}.")
        self._half_f = _coin(_probability(f, "f") / 2, round_up=True)
        if not self._half_f < Fraction(1, 2):
            raise ArgumentError(f"f={f} is too close to 1 for exact coins on the 2^-{COIN_BITS} grid.")
        self._hashes = HashFamily(seed=hash_seed, count=self._m * self._h, buckets=self._k)
        self._epsilon_infinity = 2 * self._h * ln_upper((1 - self._half_f) / self._half_f)
        loss = self._report_loss()
        if loss > MAX_EPSILON:
            raise ArgumentError(
                f"these parameters give epsilon = {float(loss):.4g} per report, above the largest supported "
                f"{MAX_EPSILON}."
            )
        super().__init__(epsilon=loss)
        self._params: dict[str, Param] = {
            "k": self._k,
            "h": self._h,
            "m": self._m,
            **self._coin_params(),
            "f": str(2 * self._half_f),
            "hash_seed": self._hashes.seed,
        }

    @abstractmethod
    def _report_loss(self) -> Fraction:
        """A rational upper bound on the loss of one report."""

    def _coin_params(self) -> dict[str, Param]:
        """The variant's own coins, as exact fractions for the report parameters."""
        return {}

    @abstractmethod
    def _report_words(self, permanent: WordArray, source: RandomSource) -> WordArray:
        """The reported bits, as words, made from the permanent responses ``B'``."""

    # -- description ---------------------------------------------------------------------------------------
    @property
    def k(self) -> int:
        """Bloom filter bits."""
        return self._k

    @property
    def h(self) -> int:
        """Hash functions per cohort."""
        return self._h

    @property
    def m(self) -> int:
        """Cohorts."""
        return self._m

    @property
    def hash_seed(self) -> int:
        return self._hashes.seed

    @property
    def f(self) -> float:
        """PRR noise level: each Bloom bit is replaced by a fair coin with probability ``f``."""
        return float(2 * self._half_f)

    @property
    @abstractmethod
    def _p_star(self) -> Fraction: ...

    @property
    @abstractmethod
    def _q_star(self) -> Fraction: ...

    @property
    def p_star(self) -> float:
        """``P(reported bit = 1 | B_i = 0)``."""
        return float(self._p_star)

    @property
    def q_star(self) -> float:
        """``P(reported bit = 1 | B_i = 1)``."""
        return float(self._q_star)

    @property
    def epsilon_infinity(self) -> float:
        """Longitudinal loss ``2h ln((1 - f/2) / (f/2))``: what the memoised PRR, hence any number of reports
        of one value, reveals."""
        return float(self._epsilon_infinity)

    @property
    def longitudinal_loss(self) -> PureDP:
        """``PureDP(epsilon_infinity)`` per client and value, whatever the number of reports."""
        return PureDP(self._epsilon_infinity)

    @property
    def removal_loss(self) -> PureDP:
        """The loss of one report under the *removal* relation: a client's value against the same client
        holding no value and reporting the empty Bloom filter. Only the ``h`` bits of one value differ (not
        ``2h``), each with likelihood ratio at most ``max(q*/p*, (1 - p*)/(1 - q*))``, so the loss is ``h ln``
        of that: half of :attr:`privacy_loss` when the two ratios are equal (one-time RAPPOR), a little more
        than half otherwise."""
        return PureDP(removal_loss(self._q_star, self._p_star, self._h))

    @property
    def report_bits(self) -> int:
        """Bits of one report's payload on the wire (the cohort id comes on top)."""
        return self._k

    @property
    def params(self) -> dict[str, Param]:
        """Everything the server needs to decode these reports (the exact coins as fractions)."""
        return dict(self._params)

    # -- client side ---------------------------------------------------------------------------------------
    def randomize(self, values: Values, rng: Rng = None, cohorts: ArrayLike | None = None) -> Reports:
        """One report per client (``values[j]`` is client ``j``'s value), each with a fresh PRR: a simulation
        of a population reporting once. ``cohorts`` (default: uniform at random) assigns the clients."""
        keys = value_keys(values)
        chosen = None if cohorts is None else self._check_cohorts(cohorts, keys.size)
        source = resolve_source(rng)
        if chosen is None:
            chosen = uniform_below(self._m, keys.size, source)
        permanent = self._permanent(self._bloom_words(keys, chosen), source)
        return self._reports(self._report_words(permanent, source), chosen)

    def bloom_filters(self, values: Values, cohorts: ArrayLike) -> NDArray[np.uint8]:
        """The (unrandomized) Bloom filters of ``values`` in ``cohorts``, packed like the reports' bits."""
        keys = value_keys(values)
        return self._pack(self._bloom_words(keys, self._check_cohorts(cohorts, keys.size)))

    def _check_cohorts(self, cohorts: ArrayLike, n: int) -> NDArray[np.int64]:
        chosen = check_domain_values(cohorts, self._m, "cohorts")
        if chosen.size != n:
            raise ArgumentError(f"cohorts must hold one cohort per value ({n}), got {chosen.size}.")
        return chosen

    @property
    def _words_per_row(self) -> int:
        return -(-self._k // 64)

    def _bloom_words(self, keys: KeyArray, cohorts: NDArray[np.int64]) -> WordArray:
        """Bloom filters as rows of 64-bit words (bit ``i`` is bit ``i % 64`` of word ``i // 64``)."""
        functions = cohorts[:, None] * self._h + np.arange(self._h)
        positions = self._hashes.hash(functions, keys[:, None])
        words = np.zeros((keys.size, self._words_per_row), dtype=np.uint64)
        rows = np.arange(keys.size)
        for column in positions.T:
            words[rows, column >> 6] |= np.uint64(1) << (column & 63).astype(np.uint64)
        return words

    def _permanent(self, bloom: WordArray, source: RandomSource) -> WordArray:
        """The PRR ``B' = B XOR Bernoulli(f/2)`` bits (paper Sec. 2, step 2)."""
        flips = bernoulli_words(self._half_f, bloom.size, source).reshape(bloom.shape)
        return bloom ^ flips

    def _pack(self, words: WordArray) -> NDArray[np.uint8]:
        """Rows of words as ``ceil(k/8)`` bytes each, little-endian bit order, bits beyond ``k`` cleared."""
        width = -(-self._k // 8)
        packed = np.ascontiguousarray(words.astype("<u8", copy=False).view(np.uint8)[:, :width])
        if self._k % 8:
            packed[:, -1] &= np.uint8((1 << (self._k % 8)) - 1)
        return packed

    def _reports(self, words: WordArray, cohorts: NDArray[np.int64]) -> Reports:
        arrays: dict[str, NDArray[Any]] = {"bits": self._pack(words), "cohort": cohorts.astype(np.uint16)}
        return Reports(self.protocol, self.params, arrays)

    # -- server side ---------------------------------------------------------------------------------------
    @overload
    def estimate(self, reports: Reports, candidates: None = None, beta: float = 0.05) -> CountEstimate: ...

    @overload
    def estimate(self, reports: Reports, candidates: Values, beta: float = 0.05) -> RapporDecoding: ...

    def estimate(
        self, reports: Reports, candidates: Values | None = None, beta: float = 0.05
    ) -> CountEstimate | RapporDecoding:
        """What the reports say: without ``candidates``, unbiased estimates ``t_ij`` of how many clients of
        cohort ``j`` have Bloom bit ``i`` set (shape ``(m, k)``), with the variance of each (the clipped
        estimate plugged in; see :meth:`bit_count_variance`); with them, each candidate's estimated number
        of holders, standard error and detection at family-wise failure probability ``beta``
        (:class:`RapporDecoding`, paper Sec. 4, see :meth:`_decode`)."""
        if candidates is None:
            counts, sizes = self._bit_counts(reports)
            return self._bit_estimate(counts, sizes)
        return self._decode(reports, candidates, beta, "beta")

    #: Deprecated names of :meth:`estimate` (removed in the next release); ``decode``'s ``alpha`` is
    #: :meth:`estimate`'s ``beta``.
    estimate_bits = deprecated_alias("estimate")
    decode = deprecated_alias(
        "estimate",
        lambda self, reports, candidates, alpha=0.05: self._decode(reports, candidates, alpha, "alpha"),
    )

    def bit_count_variance(self, cohort_sizes: ArrayLike, bit_counts: ArrayLike) -> FloatArray:
        """Exact variance of ``t_ij`` when ``bit_counts[j, i]`` of the ``cohort_sizes[j]`` clients of cohort
        ``j`` have bit ``i`` set: ``(t q*(1 - q*) + (N_j - t) p*(1 - p*)) / (q* - p*)^2``."""
        t = np.asarray(bit_counts, dtype=np.float64)
        sizes = np.asarray(cohort_sizes, dtype=np.float64)[:, None]
        p, q = self.p_star, self.q_star
        return np.asarray((t * q * (1 - q) + (sizes - t) * p * (1 - p)) / (q - p) ** 2, dtype=np.float64)

    def _bit_counts(self, reports: Reports) -> tuple[NDArray[np.int64], NDArray[np.int64]]:
        """Validated reports -> ``c_ij`` (shape ``(m, k)``) and the cohort sizes ``N_j``."""
        reports.check(self.protocol, self.params)
        width = -(-self._k // 8)
        check_payload_range(reports, "bits", 256, columns=width)
        check_payload_range(reports, "cohort", self._m)
        bits, cohorts = reports["bits"].astype(np.uint8), reports["cohort"].astype(np.uint16)
        if self._k % 8 and bits.size and int(bits[:, -1].max()) >> (self._k % 8):
            raise ArgumentError(
                f"{self.protocol} report array 'bits' sets bits beyond the k = {self._k} Bloom bits."
            )
        order = np.argsort(cohorts, kind="stable")  # a radix sort for 16-bit keys
        sizes = np.bincount(cohorts, minlength=self._m).astype(np.int64)
        groups = np.split(bits[order], np.cumsum(sizes)[:-1])
        counts = np.stack([column_counts(group, self._k) for group in groups])
        return counts, sizes

    def _bit_estimate(self, counts: NDArray[np.int64], sizes: NDArray[np.int64]) -> CountEstimate:
        spread = self.q_star - self.p_star
        estimate = (counts - self.p_star * sizes[:, None]) / spread
        variance = self.bit_count_variance(sizes, np.clip(estimate, 0, sizes[:, None]))
        n = int(sizes.sum())
        return CountEstimate(counts=estimate, variance=variance, n=n, privacy_loss=self.privacy_loss)

    def _decode(self, reports: Reports, candidates: Values, beta: float, name: str) -> RapporDecoding:
        """Estimated number of clients holding each candidate, with standard errors and detection flags
        (``name``: the keyword ``beta`` came under, for the message refusing it).

        Paper Sec. 4: the bit estimates ``t_ij`` are regressed on the design matrix ``X`` with
        ``X[(j, i), s] = N_j / N`` when candidate ``s`` sets bit ``i`` in cohort ``j`` (the expected share
        of its holders in cohort ``j``; 0 otherwise), plus one *background* column
        ``(N_j / N) (1 - (1 - 1/k)^h)`` for clients whose value is not a candidate (each bit of a value
        outside the list is set with that probability under random hashing). Then:

        1. LASSO (non-negative, on rows scaled to unit variance and columns to unit norm) selects the
           candidates with at least about one standard error of evidence;
        2. ordinary least squares on the selected columns and the background gives the counts, and the
           sandwich ``(X'X)^-1 X' D X (X'X)^-1`` with ``D`` the variances of the ``t_ij`` (independent given
           the population) their covariance;
        3. a candidate is *detected* when the one-sided p-value of its count is below ``beta / M`` for
           ``M`` candidates (Bonferroni: all ``M`` candidates nobody holds stay undetected with probability
           at least ``1 - beta``, up to the normal approximation).

        Least squares rather than non-negative least squares: it is unbiased and has the closed-form
        covariance above. The counts of the candidates LASSO drops are reported as 0.

        The number of clients holding none of the candidates is the background coefficient of the same
        least-squares fit on *all* candidates, without selection: LASSO drops the held candidates whose
        noise happened to be negative, so after selection the background would absorb that noise (in the
        test population it came out 3 to 5 standard errors low). That fit needs ``M + 1`` identifiable
        columns, at most 2048; otherwise the count is NaN.
        """
        wanted, keys = _check_candidates(candidates)
        level = check_beta(beta, name)
        counts, sizes = self._bit_counts(reports)
        if not sizes.sum():
            raise ArgumentError("decode needs at least one report.")
        positions = self._candidate_positions(keys, wanted)
        bits = self._bit_estimate(counts, sizes)
        design = self._design(positions, sizes)
        live = np.repeat(sizes > 0, self._k)  # rows of empty cohorts carry no information
        design, y, variance = design[live], bits.counts.ravel()[live], bits.variance.ravel()[live]
        selected = _lasso_screen(design, y, np.sqrt(variance))
        columns = np.append(np.flatnonzero(selected), keys.size)
        coef, covariance = _least_squares(design[:, columns], y, variance)
        other = _background_count(design, y, variance)
        return _decoding(wanted, selected, coef, covariance, other, level, bits)

    def _candidate_positions(self, keys: KeyArray, candidates: tuple[Any, ...]) -> NDArray[np.int64]:
        """Bloom positions of each candidate in each cohort, shape ``(M, m, h)``; refuses candidates that no
        cohort tells apart."""
        functions = np.arange(self._m * self._h).reshape(self._m, self._h)
        positions = self._hashes.hash(functions[None, :, :], keys[:, None, None])
        signatures = np.sort(positions, axis=2).reshape(keys.size, -1)
        distinct, first = np.unique(signatures, axis=0, return_index=True)
        if distinct.shape[0] < keys.size:
            clash = candidates[int(np.setdiff1d(np.arange(keys.size), first)[0])]
            raise ArgumentError(
                f"candidate {clash!r} has the same Bloom bits as another candidate in every cohort, so the "
                "two cannot be told apart (use more cohorts or bits)."
            )
        return positions

    def _design(self, positions: NDArray[np.int64], sizes: NDArray[np.int64]) -> sp.csr_matrix:
        import scipy.sparse as sp

        """The ``(m k) x (M + 1)`` design matrix of :meth:`_decode` (last column: the background)."""
        n_candidates = positions.shape[0]
        share = sizes / sizes.sum()
        cohort = np.broadcast_to(np.arange(self._m)[None, :, None], positions.shape)
        rows = (cohort * self._k + positions).ravel()
        cols = np.broadcast_to(np.arange(n_candidates)[:, None, None], positions.shape).ravel()
        hits = sp.csr_matrix((np.ones(rows.size), (rows, cols)), shape=(self._m * self._k, n_candidates))
        hits.sum_duplicates()
        hits.data[:] = 1.0  # a value whose hash functions collide sets that bit once
        background = (1 - (1 - 1 / self._k) ** self._h) * np.ones((self._m * self._k, 1))
        row_share = sp.diags(np.repeat(share, self._k))
        return sp.csr_matrix(row_share @ sp.hstack([hits, sp.csr_matrix(background)]))


class RAPPOR(_BloomRandomizer):
    """RAPPOR with ``k`` Bloom bits, ``h`` hash functions, ``m`` cohorts and coins ``p``, ``q``, ``f``
    (Erlingsson et al. 2014, Sec. 2; see the module docstring): every report applies a fresh instantaneous
    randomized response to the memoised ``B'``.

    * Neighbour relation: local, any two values of one client (:attr:`removal_loss`: a value against none).
    * Sensitivity: at most ``2h`` bits of the Bloom filter differ between two values (``h`` set by each).
    * Privacy loss: ``PureDP(epsilon_one)`` per report (:attr:`privacy_loss`, paper Sec. 3,
      ``h ln(q*(1 - p*) / (p*(1 - q*)))``) and ``PureDP(epsilon_infinity)`` per client and value however
      many reports it sends (:attr:`longitudinal_loss`, ``2h ln((1 - f/2) / (f/2))``), both computed from
      the exact coins used. The cohort id travels in the clear; it is chosen independently of the value.

    :meth:`randomize` simulates a population in which every client reports once (PRR drawn fresh per
    client: for one report that is the same distribution as a memoised one); deployed clients use
    :class:`RapporClient`, which memoises the PRR.
    """

    protocol: ClassVar[str] = "RAPPOR"

    def __init__(
        self,
        *,
        k: int = 128,
        h: int = 2,
        m: int = 64,
        p: Number = 0.5,
        q: Number = 0.75,
        f: Number = 0.5,
        hash_seed: int = 0,
    ) -> None:
        exact_p, exact_q = _probability(p, "p"), _probability(q, "q")
        if not exact_p < exact_q:
            raise ArgumentError(
                f"p must be smaller than q (a 1 must be reported more often), got p={p}, q={q}."
            )
        self._p = _coin(exact_p, round_up=True)
        self._q = _coin(exact_q, round_up=False)
        if not self._p < self._q:
            raise ArgumentError(
                f"p={p} and q={q} are too close to each other for exact coins on the 2^-{COIN_BITS} grid."
            )
        super().__init__(k=k, h=h, m=m, f=f, hash_seed=hash_seed)

    def _report_loss(self) -> Fraction:
        p_star, q_star = self._p_star, self._q_star
        return self._h * ln_upper(q_star * (1 - p_star) / (p_star * (1 - q_star)))

    def _coin_params(self) -> dict[str, Param]:
        return {"p": str(self._p), "q": str(self._q)}

    def _report_words(self, permanent: WordArray, source: RandomSource) -> WordArray:
        """The IRR: Bernoulli(q) bits where ``B'`` is 1, Bernoulli(p) bits where it is 0 (Sec. 2, step 3)."""
        ones = bernoulli_words(self._q, permanent.size, source).reshape(permanent.shape)
        zeros = bernoulli_words(self._p, permanent.size, source).reshape(permanent.shape)
        return (permanent & ones) | (~permanent & zeros)

    @property
    def p(self) -> float:
        """IRR probability of reporting a 1 where ``B'`` has a 0 (exact dyadic value used)."""
        return float(self._p)

    @property
    def q(self) -> float:
        """IRR probability of reporting a 1 where ``B'`` has a 1 (exact dyadic value used)."""
        return float(self._q)

    @property
    def _p_star(self) -> Fraction:
        """``P(S_i = 1 | B_i = 0) = f/2 (p + q) + (1 - f) p`` (paper Sec. 3)."""
        return self._half_f * (self._p + self._q) + (1 - 2 * self._half_f) * self._p

    @property
    def _q_star(self) -> Fraction:
        """``P(S_i = 1 | B_i = 1) = f/2 (p + q) + (1 - f) q`` (paper Sec. 3)."""
        return self._half_f * (self._p + self._q) + (1 - 2 * self._half_f) * self._q

    @property
    def epsilon_one(self) -> float:
        """Loss of one report, ``h ln(q*(1 - p*) / (p*(1 - q*)))`` (equal to :attr:`epsilon`)."""
        return self.epsilon

    def __repr__(self) -> str:
        return (
            f"RAPPOR(k={self._k}, h={self._h}, m={self._m}, p={self.p!r}, q={self.q!r}, f={self.f!r}, "
            f"hash_seed={self.hash_seed})"
        )


class OneTimeRAPPOR(_BloomRandomizer):
    """One-time RAPPOR (Erlingsson et al. 2014, Sec. 2: "a one-time collection ... may skip the
    instantaneous randomized response"): the client sends its permanent response ``B'`` itself, so a report
    is ``B'_i = B_i XOR Bernoulli(f/2)`` and ``p* = f/2``, ``q* = 1 - f/2``. The server decodes it like
    RAPPOR (:meth:`estimate`) with these ``p*`` and ``q*``: ``t_ij = (c_ij - N_j f/2) /
    (1 - f)``, variance ``N_j (f/2)(1 - f/2) / (1 - f)^2`` whatever the bit counts.

    * Neighbour relation: local, any two values of one client (:attr:`removal_loss`: a value against none,
      ``h ln((1 - f/2) / (f/2))``, half the loss).
    * Sensitivity: at most ``2h`` Bloom bits differ between two values.
    * Privacy loss: ``PureDP(epsilon_infinity)``, ``2h ln((1 - f/2) / (f/2))``, per client and value: one
      report spends all of it, and a memoised client (:class:`RapporClient`) that reports the same value
      again sends the same ``B'``, which costs nothing more.
    """

    protocol: ClassVar[str] = "RAPPOR-1"

    def __init__(self, *, k: int = 128, h: int = 2, m: int = 64, f: Number = 0.5, hash_seed: int = 0) -> None:
        super().__init__(k=k, h=h, m=m, f=f, hash_seed=hash_seed)

    def _report_loss(self) -> Fraction:
        return self._epsilon_infinity

    def _report_words(self, permanent: WordArray, source: RandomSource) -> WordArray:
        """``B'`` itself: no instantaneous step."""
        return permanent

    @property
    def _p_star(self) -> Fraction:
        return self._half_f

    @property
    def _q_star(self) -> Fraction:
        return 1 - self._half_f

    def __repr__(self) -> str:
        return (
            f"OneTimeRAPPOR(k={self._k}, h={self._h}, m={self._m}, f={self.f!r}, hash_seed={self.hash_seed})"
        )


def _check_candidates(candidates: Values) -> tuple[tuple[Any, ...], KeyArray]:
    """The candidates as given (a tuple) and their keys; refuses an empty list and duplicates."""
    listed = np.asarray(candidates)
    if not listed.size:
        raise ArgumentError("decode needs at least one candidate.")
    keys = value_keys(listed)
    wanted = tuple(listed.tolist())
    distinct, first = np.unique(keys, return_index=True)
    if distinct.size < keys.size:
        repeated = wanted[int(np.setdiff1d(np.arange(keys.size), first)[0])]
        raise ArgumentError(f"candidates must be distinct, but {repeated!r} appears twice.")
    return wanted, keys


def _lasso_screen(design: sp.csr_matrix, y: FloatArray, sd: FloatArray) -> BoolArray:
    import scipy.sparse as sp

    """Which candidate columns (all but the last, the background) a non-negative LASSO keeps.

    Rows are divided by the standard deviations of ``y`` and columns by their norms, so that under the null
    each column's correlation with the noise is a standard normal; the penalty ``alpha = z / rows`` of
    scikit-learn's ``(1 / (2 rows)) ||y - X w||^2 + alpha ||w||_1`` then keeps a column only when that
    correlation, net of the other columns, exceeds ``z = _SELECTION_Z``.
    """
    from sklearn.linear_model import Lasso  # imported here: scikit-learn takes seconds to import

    weighted = sp.diags(1 / sd) @ design
    norms = np.sqrt(np.asarray(weighted.multiply(weighted).sum(axis=0)).ravel())
    scaled = sp.csc_matrix(weighted @ sp.diags(1 / norms))
    lasso = Lasso(alpha=_SELECTION_Z / y.size, positive=True, fit_intercept=False, max_iter=100_000, tol=1e-8)
    lasso.fit(scaled, y / sd)
    return np.asarray(lasso.coef_[:-1] > 0, dtype=np.bool_)


def _least_squares(
    design: sp.csr_matrix, y: FloatArray, variance: FloatArray
) -> tuple[FloatArray, FloatArray]:
    """Ordinary least-squares coefficients ``G^-1 X'y`` (``G = X'X``) and their sandwich covariance
    ``G^-1 X' D X G^-1`` for independent observations of variances ``D``, refusing a rank-deficient
    design."""
    gram = np.asarray((design.T @ design).toarray())
    eigenvalues = np.linalg.eigvalsh(gram)
    if eigenvalues[0] <= 1e-10 * eigenvalues[-1]:
        raise ArgumentError(
            "the selected candidates' Bloom bits are linearly dependent, so their counts are not "
            "identifiable (use more cohorts or bits, or fewer candidates)."
        )
    import scipy.sparse as sp

    inverse = np.linalg.inv(gram)
    coef = inverse @ (design.T @ y)
    meat = np.asarray((design.T @ sp.diags(variance) @ design).toarray())
    return np.asarray(coef, dtype=np.float64), np.asarray(inverse @ meat @ inverse, dtype=np.float64)


def _background_count(design: sp.csr_matrix, y: FloatArray, variance: FloatArray) -> tuple[float, float]:
    """The background coefficient of the least-squares fit on every column, and its standard error; NaN when
    that fit is too large or not identifiable."""
    if design.shape[1] > min(design.shape[0], _MAX_FULL_FIT_COLUMNS):
        return math.nan, math.nan
    try:
        coef, covariance = _least_squares(design, y, variance)
    except ValueError:
        return math.nan, math.nan
    return float(coef[-1]), math.sqrt(covariance[-1, -1])


def _decoding(
    candidates: tuple[Any, ...],
    selected: BoolArray,
    coef: FloatArray,
    covariance: FloatArray,
    other: tuple[float, float],
    beta: float,
    bits: CountEstimate,
) -> RapporDecoding:
    """Spread the fit over all candidates (0 for the unselected) and run the Bonferroni test; ``bits`` (the
    bit estimates decoded) gives the number of reports and their loss."""
    size = len(candidates)
    errors = np.sqrt(np.diag(covariance))
    counts, std_errors = np.zeros(size), np.full(size, np.nan)
    p_values = np.ones(size)
    counts[selected], std_errors[selected] = coef[:-1], errors[:-1]
    p_values[selected] = ndtr(-coef[:-1] / errors[:-1])
    detected = selected & (p_values < beta / size)
    for a in (counts, std_errors, p_values, selected, detected):
        a.setflags(write=False)
    return RapporDecoding(
        counts=counts,
        variance=std_errors**2,
        n=bits.n,
        privacy_loss=bits.privacy_loss,
        candidates=candidates,
        std_errors=std_errors,
        p_values=p_values,
        selected=selected,
        detected=detected,
        beta=beta,
        other_count=other[0],
        other_std_error=other[1],
    )


# -- a deployed client ---------------------------------------------------------------------------------------
class RapporClient:
    """One client of a :class:`RAPPOR` or :class:`OneTimeRAPPOR` collection, memoising its permanent
    randomized response.

    The PRR coins of value ``v`` are the keystream of a PRF keyed by the client's ``secret`` (32 random
    bytes from ``os.urandom`` are right) applied to ``(parameters, cohort, v)``, so reporting ``v`` again
    gives the same ``B'`` without storing it, and nobody without the secret can predict it. Under RAPPOR the
    IRR coins come fresh from ``rng`` for every report; under one-time RAPPOR every report of ``v`` is that
    same ``B'``. The cohort, unless given, is derived from the secret too.

    * Neighbour relation: local, any two values of this client.
    * Privacy loss: ``rappor.privacy_loss`` per report and ``PureDP(rappor.epsilon_infinity)`` for all
      reports of one value together (paper Sec. 3); distinct values have independent PRRs. The client's
      books (:class:`~kakeibo.ldp.client.ClientLedger`) charge accordingly.
    """

    def __init__(self, rappor: RAPPOR | OneTimeRAPPOR, secret: bytes, cohort: int | None = None) -> None:
        if not isinstance(rappor, _BloomRandomizer):
            raise ArgumentTypeError(
                f"rappor must be a RAPPOR or a OneTimeRAPPOR, not {type(rappor).__name__}."
            )
        if not isinstance(secret, bytes):
            raise ArgumentTypeError(f"secret must be bytes, not {type(secret).__name__}.")
        if not 16 <= len(secret) <= 64:
            raise ArgumentError(
                f"secret must hold 16 to 64 bytes (32 random ones are best), got {len(secret)}."
            )
        self._rappor, self._secret = rappor, secret
        self._context = repr(sorted(rappor.params.items())).encode()
        if cohort is None:
            self._cohort = int(uniform_below(rappor.m, 1, self._stream(b"cohort|" + self._context))[0])
        else:
            self._cohort = check_integer(cohort, "cohort", 0, rappor.m - 1)

    @property
    def cohort(self) -> int:
        return self._cohort

    @property
    def rappor(self) -> RAPPOR | OneTimeRAPPOR:
        return self._rappor

    def report(self, values: Values, rng: Rng = None) -> Reports:
        """This client's successive reports, one per entry of ``values`` (memoised PRR, fresh IRR)."""
        keys = value_keys(values)
        source = resolve_source(rng)
        permanent = self._permanent_words(keys)
        cohorts = np.full(keys.size, self._cohort, dtype=np.int64)
        return self._rappor._reports(self._rappor._report_words(permanent, source), cohorts)

    def permanent_response(self, values: Values) -> NDArray[np.uint8]:
        """The memoised ``B'`` of each value, packed like report bits. Client-side only: sending it would
        spend ``epsilon_infinity`` at once."""
        return self._rappor._pack(self._permanent_words(value_keys(values)))

    def memo_key(self, value: Any) -> str:
        """The name of ``value`` in this client's books (:class:`~kakeibo.ldp.client.ClientLedger`): a keyed
        hash under the client's secret of the parameters, the cohort and the value, so that the books can
        tell repeats of one value apart from other values without holding any value."""
        key = int(value_keys([value])[0])
        label = b"memo|" + self._context + struct.pack("<IQ", self._cohort, key)
        return hashlib.blake2b(label, key=self._secret, digest_size=16, person=_PERSON).hexdigest()

    def _permanent_words(self, keys: KeyArray) -> WordArray:
        distinct, inverse = np.unique(keys, return_inverse=True)
        cohorts = np.full(distinct.size, self._cohort, dtype=np.int64)
        bloom = self._rappor._bloom_words(distinct, cohorts)
        rows = [
            self._rappor._permanent(bloom[i : i + 1], self._value_stream(int(key)))
            for i, key in enumerate(distinct.tolist())
        ]
        stacked = np.concatenate(rows) if rows else bloom
        return stacked[inverse.reshape(-1)]

    def _value_stream(self, key: int) -> KeyedSource:
        return self._stream(b"prr|" + self._context + struct.pack("<IQ", self._cohort, key))

    def _stream(self, label: bytes) -> KeyedSource:
        """The ChaCha20 keystream under ``BLAKE2b(label; key=secret)``: re-creating it replays the coins."""
        return KeyedSource(hashlib.blake2b(label, key=self._secret, digest_size=32, person=_PERSON).digest())

    def __repr__(self) -> str:
        return f"RapporClient({self._rappor!r}, secret=<{len(self._secret)} bytes>, cohort={self._cohort})"
