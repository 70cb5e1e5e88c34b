"""Set-valued data under local DP: padding-and-sampling frequency oracles (PSFO).

Wang, Li and Jha 2018, "Locally Differentially Private Frequent Itemset Mining" (IEEE S&P; seed 003,
"Itemset mining"), Sec. IV: every user holds a *set* of items from ``0 .. d-1`` and sends one report. A
frequency oracle takes one value per user, so a user first *pads* its set to ``l`` items and *samples* one
(:class:`PaddingSamplingOracle`); :mod:`.itemsets` builds SVIM and SVSM on it.

Sets come as :class:`UserSets` (compressed rows: user ``j`` holds ``items[indptr[j]:indptr[j+1]]``), a list
of per-user item arrays (converted once, at Python speed) or a 2-d integer array (one equal-size set per
row). Everything after the conversion is vectorised over users.

>>> import numpy as np
>>> psfo = PaddingSamplingOracle(epsilon=2, domain_size=6, length=2)
>>> sets = UserSets.from_lists([[0, 3], [3], [1, 3, 5], []])
>>> reports = psfo.randomize(sets, rng=np.random.default_rng(0))
>>> psfo.oracle.protocol, reports.n, psfo.estimate(reports).counts.shape
('GRR', 4, (6,))
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from fractions import Fraction
from typing import Any

import numpy as np
from numpy.typing import ArrayLike, NDArray

from ..errors import ArgumentError, ArgumentTypeError
from ..mechanisms.base import Rng
from ..noise import resolve_source
from ..noise.exact import uniform_below
from ..noise.source import RandomSource
from ..privacy import Number
from ._coins import exp_upper, ln_upper
from .direct import GRR
from .estimates import CountEstimate, deprecated_alias
from .framework import (
    FloatArray,
    FrequencyOracle,
    IntArray,
    LocalRandomizer,
    check_domain_size,
    check_domain_values,
)
from .hashing import OLH
from .reports import Param, Reports

__all__ = ["PaddingSamplingOracle", "UserSets", "amplified_epsilon"]

#: Longest padding length accepted (a user's report is one of ``d + l`` values).
_MAX_LENGTH = 1 << 20
#: Resolution of the amplified GRR epsilon: a multiple of 2^-32, rounded down.
_EPSILON_BITS = 32
_ORACLE_CHOICES = ("adaptive", "GRR", "OLH")
SET_NEIGHBOUR = (
    "local: any two item sets of one client (each report hides its client's whole set, even from the server)"
)


# -- users' sets ---------------------------------------------------------------------------------------------
class UserSets:
    """One set of distinct items per user, in compressed-row form: user ``j`` holds
    ``items[indptr[j]:indptr[j + 1]]`` (any order).

    >>> s = UserSets.from_lists([[4, 1], [], [2]])
    >>> s.n_users, s.sizes.tolist(), s.items.tolist()
    (3, [2, 0, 1], [4, 1, 2])
    """

    __slots__ = ("_indptr", "_items")

    def __init__(self, indptr: ArrayLike, items: ArrayLike) -> None:
        ptr = _index_array(indptr, "indptr")
        values = _index_array(items, "items")
        if ptr.size == 0 or ptr[0] != 0 or ptr[-1] != values.size or np.any(np.diff(ptr) < 0):
            raise ArgumentError(
                "indptr must start at 0, never decrease and end at len(items) (one row boundary per user)."
            )
        _check_distinct(ptr, values)
        self._indptr, self._items = _frozen(ptr), _frozen(values)

    @classmethod
    def from_lists(cls, sets: Sequence[ArrayLike]) -> UserSets:
        """From one item array (or Python set) per user; a per-user loop, so prefer building the compressed
        rows directly for millions of users."""
        arrays = [np.asarray(sorted(s) if isinstance(s, (set, frozenset)) else s) for s in sets]
        if any(a.ndim != 1 for a in arrays):
            raise ArgumentError("each user's set must be a 1-d array of item indices.")
        sizes = np.fromiter((a.size for a in arrays), dtype=np.int64, count=len(arrays))
        filled = [a for a in arrays if a.size]
        items = np.concatenate(filled) if filled else np.zeros(0, dtype=np.int64)
        return cls(np.concatenate([[0], np.cumsum(sizes)]), items)

    @classmethod
    def _trusted(cls, indptr: IntArray, items: IntArray) -> UserSets:
        """Sets derived from already-checked sets (no re-validation)."""
        sets = cls.__new__(cls)
        sets._indptr, sets._items = _frozen(indptr), _frozen(items)
        return sets

    @property
    def indptr(self) -> IntArray:
        return self._indptr

    @property
    def items(self) -> IntArray:
        return self._items

    @property
    def sizes(self) -> IntArray:
        """Number of items each user holds."""
        return np.diff(self._indptr)

    @property
    def n_users(self) -> int:
        return int(self._indptr.size - 1)

    def __len__(self) -> int:
        return self.n_users

    def __repr__(self) -> str:
        return f"UserSets(n_users={self.n_users}, items={self._items.size})"

    def _rows(self) -> IntArray:
        """The user of every entry of :attr:`items`."""
        return np.repeat(np.arange(self.n_users, dtype=np.int64), self.sizes)

    def select(self, users: IntArray) -> UserSets:
        """The sets of the listed users, in that order."""
        sizes = self.sizes[users]
        indptr = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
        gather = np.repeat(self._indptr[users] - indptr[:-1], sizes) + np.arange(indptr[-1], dtype=np.int64)
        return UserSets._trusted(indptr, self._items[gather])

    def positions_in(self, candidates: IntArray, domain_size: int) -> UserSets:
        """Each user's set restricted to ``candidates``, items replaced by their position in that list."""
        position = np.full(domain_size, -1, dtype=np.int64)
        position[candidates] = np.arange(candidates.size)
        mapped = position[self._items]
        kept = mapped >= 0
        sizes = np.bincount(self._rows()[kept], minlength=self.n_users)
        return UserSets._trusted(np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64), mapped[kept])


def _frozen(arr: IntArray) -> IntArray:
    out = np.ascontiguousarray(arr, dtype=np.int64)
    out.setflags(write=False)
    return out


def _index_array(values: ArrayLike, name: str) -> IntArray:
    arr = np.asarray(values)
    if arr.ndim != 1:
        raise ArgumentError(f"{name} must be a 1-d array, got shape {arr.shape}.")
    if arr.dtype.kind not in "iu" and arr.size:
        raise ArgumentTypeError(f"{name} must hold integers, got an array of {arr.dtype}.")
    if arr.size and int(arr.min()) < 0:
        raise ArgumentError(f"{name} must be non-negative integers; got {int(arr.min())}.")
    return arr.astype(np.int64)


def _check_distinct(indptr: IntArray, items: IntArray) -> None:
    rows = np.repeat(np.arange(indptr.size - 1, dtype=np.int64), np.diff(indptr))
    order = np.lexsort((items, rows))
    rows, items = rows[order], items[order]
    twice = np.flatnonzero((items[1:] == items[:-1]) & (rows[1:] == rows[:-1]))
    if twice.size:
        j, item = int(rows[twice[0]]), int(items[twice[0]])
        raise ArgumentError(
            f"user {j}'s set holds item {item} twice; each user must hold a set of distinct items."
        )


def as_user_sets(sets: UserSets | Sequence[ArrayLike] | NDArray[Any], domain_size: int) -> UserSets:
    """``sets`` (:class:`UserSets`, a list of per-user item arrays or a 2-d array with one set per row) as
    :class:`UserSets` over the items ``0 .. domain_size - 1``."""
    if isinstance(sets, np.ndarray):
        if sets.ndim != 2:
            raise ArgumentError(f"an array of sets must be 2-d (one set per row), got shape {sets.shape}.")
        n, width = sets.shape
        sets = UserSets(np.arange(n + 1, dtype=np.int64) * width, sets.reshape(-1))
    elif isinstance(sets, (str, bytes)) or not isinstance(sets, (UserSets, Sequence)):
        raise ArgumentTypeError(
            f"sets must be UserSets, a list of per-user item arrays or a 2-d array, "
            f"not {type(sets).__name__}."
        )
    data = sets if isinstance(sets, UserSets) else UserSets.from_lists(sets)
    if data.items.size and int(data.items.max()) >= domain_size:
        raise ArgumentError(f"items must be indices in 0..{domain_size - 1}; got {int(data.items.max())}.")
    return data


# -- the padding-and-sampling frequency oracle --------------------------------------------------------------
def amplified_epsilon(epsilon: Fraction, length: int) -> Fraction:
    """The GRR epsilon a PSFO client may use with padding length ``l`` and still be epsilon-LDP: a multiple
    of ``2^-32`` just below ``ln(l (e^eps - 1) + 1)``, checked exactly: ``(e^eps' + l - 1) / l <= e^eps``
    (Wang et al. 2018, Sec. IV, privacy amplification; derivation in :class:`PaddingSamplingOracle`).

    >>> float(amplified_epsilon(Fraction(1), 1)), round(float(amplified_epsilon(Fraction(1), 4)), 4)
    (1.0, 2.0635)
    """
    if length == 1:
        return epsilon
    target = math.log(length * math.expm1(float(epsilon)) + 1)
    scale = 1 << _EPSILON_BITS
    amplified = Fraction(math.floor(target * scale) - 2, scale)
    ratio = (exp_upper(amplified) + length - 1) / length
    if not ln_upper(ratio) <= epsilon:
        raise AssertionError("the amplified GRR epsilon exceeded the budget; this is a bug in kakeibo")
    return amplified


def _per_report_variance(oracle: FrequencyOracle) -> float:
    """Variance one report adds to a count estimate at frequency 0 (Wang et al. 2017, Eq. (2) with c = 0)."""
    return float(oracle.count_variance(1, np.zeros(1))[0])


def lower_variance(oracles: Sequence[FrequencyOracle]) -> FrequencyOracle:
    """The oracle with the smaller per-report variance at frequency 0 (the first on a tie)."""
    return min(oracles, key=_per_report_variance)


def _padded_oracle(epsilon: Fraction, items: int, length: int, choice: str) -> FrequencyOracle:
    """The frequency oracle over the ``items + length`` padded values for ``choice``."""
    grr = GRR(epsilon=amplified_epsilon(epsilon, length), domain_size=items + length)
    olh = OLH(epsilon=epsilon, domain_size=items + length)
    if choice == "adaptive":
        return lower_variance([grr, olh])
    return grr if choice == "GRR" else olh


def _check_length(length: int) -> int:
    if isinstance(length, bool) or not isinstance(length, (int, np.integer)):
        raise ArgumentTypeError(f"length must be an integer, not {type(length).__name__}.")
    if not 1 <= length <= _MAX_LENGTH:
        raise ArgumentError(f"length must lie in 1..{_MAX_LENGTH}, got {int(length)}.")
    return int(length)


def padded_sample(sets: UserSets, length: int, domain_size: int, source: RandomSource) -> IntArray:
    """One value per user: a uniform draw from its ``s`` items padded to ``l`` with the ``l - s`` dummies
    ``d + s .. d + l - 1``, or (for ``s > l``) from the set itself, which is the same as truncating it to
    ``l`` items uniformly at random and then drawing one of them."""
    sizes = sets.sizes
    index = uniform_below(np.maximum(sizes, length), sizes.size, source)
    real = index < sizes
    value = domain_size + index  # dummy number ``index`` for the padded slots index >= size
    value[real] = sets.items[sets.indptr[:-1][real] + index[real]]
    return value


class PaddingSamplingOracle(LocalRandomizer):
    """PSFO(l, FO): padding-and-sampling frequency oracle over item sets (Wang et al. 2018, Sec. IV).

    Client: pad the set ``v`` of ``s`` items to exactly ``l`` with the dummies ``d + s .. d + l - 1`` (a set
    of more than ``l`` items is cut to ``l`` uniformly at random), draw one of the ``l`` uniformly and report
    it with a frequency oracle over the ``d + l`` values. Server: ``c(x) = l * FO estimate(x)``.

    * Neighbour relation: local, any two item sets of one client. Sensitivity: one report per user.
    * Privacy loss ``PureDP(epsilon)`` per user. With OLH (run at ``epsilon``): the report is a randomized
      function of one value, and OLH is epsilon-LDP for any two values, hence for any two sets. With GRR,
      sampling *amplifies* privacy, so the client may run GRR at ``eps' = ln(l (e^eps - 1) + 1)``: let
      ``p', q'`` be GRR's probabilities (``p' / q' = e^eps'``) and ``V`` the padded set (``l`` distinct
      values). A value ``y in V`` is reported with ``P[y | v] = (p' + (l - 1) q') / l`` (drawn itself, or
      another member drawn and GRR moving to ``y``), a value ``y not in V`` with ``q'``. So for any two sets
      ``P[y | v] / P[y | v'] <= (p' + (l - 1) q') / (l q') = (e^eps' + l - 1) / l = e^eps``; a set of
      ``s > l`` items gives ``(p' + (s - 1) q') / s``, smaller still. kakeibo rounds ``eps'`` down to a
      multiple of ``2^-32`` and checks ``(e^eps' + l - 1) / l <= e^eps`` in rational arithmetic
      (:func:`amplified_epsilon`); GRR's exact sampler then never exceeds ``eps'``.
    * Estimator and variance: report ``j`` supports ``x`` with probability ``pi = q* + (p* - q*) / l`` when
      ``x`` is in a set of at most ``l`` items, ``q*`` when it is not, independently over users, so ``c(x)``
      is unbiased and ``Var c(x) = l^2 [c pi (1 - pi) + (n - c) q* (1 - q*)] / (p* - q*)^2`` (Wang et al.
      2017, Eq. (2), with ``pi`` for ``p*``; ``p*, q*`` those of the inner oracle). Truncation bias: a user
      with ``s > l`` items reports each with weight ``l / s``, so ``E c(x) = sum over holders of
      min(1, l / s)``, an under-estimate that SVIM corrects (:class:`SVIM`, step 4).
    * Adaptive choice (``oracle="adaptive"``): the inner oracle with the smaller variance. Per user at
      frequency 0, GRR over ``D = d + l`` values gives ``l^2 (e^eps' + D - 2) / (e^eps' - 1)^2 =
      (l (e^eps - 1) + d + l - 1) / (e^eps - 1)^2`` and OLH ``l^2 4 e^eps / (e^eps - 1)^2``, so GRR wins iff
      ``d < (4 l^2 - l) e^eps + 1``: GRR for *small* item domains, as the paper has it (the seed's
      ``|J| > (4 l^2 - l) e^eps + 1`` has the inequality reversed; at ``l = 1`` the rule is Wang et al.
      2017's ``D < 3 e^eps + 2``). kakeibo compares the exact variances of the two oracles it would
      actually run (OLH's prime number of buckets, the rounded ``eps'``), which is this rule up to a few
      percent of ``d`` at the threshold.

    >>> PaddingSamplingOracle(epsilon=1, domain_size=1000, length=4).oracle.protocol
    'OLH'
    >>> round(PaddingSamplingOracle(epsilon=1, domain_size=100, length=4).oracle.epsilon, 4)
    2.0635
    """

    protocol = "PSFO"
    neighbour = SET_NEIGHBOUR

    def __init__(self, *, epsilon: Number, domain_size: int, length: int, oracle: str = "adaptive") -> None:
        super().__init__(epsilon=epsilon)
        self._d = check_domain_size(domain_size)
        self._l = _check_length(length)
        check_domain_size(self._d + self._l)
        if oracle not in _ORACLE_CHOICES:
            raise ArgumentError(f"oracle must be one of {', '.join(_ORACLE_CHOICES)}; got {oracle!r}.")
        self._oracle = _padded_oracle(self._epsilon, self._d, self._l, oracle)

    @property
    def domain_size(self) -> int:
        """``d``, the number of items."""
        return self._d

    @property
    def length(self) -> int:
        """``l``, the padding length."""
        return self._l

    @property
    def oracle(self) -> FrequencyOracle:
        """The inner oracle over the ``d + l`` padded values (GRR at the amplified epsilon, or OLH)."""
        return self._oracle

    @property
    def params(self) -> dict[str, Param]:
        inner = {f"oracle_{key}": value for key, value in self._oracle.params.items()}
        return {
            "epsilon": str(self._epsilon),
            "domain_size": self._d,
            "length": self._l,
            "oracle": self._oracle.protocol,
            **inner,
        }

    def __repr__(self) -> str:
        return (
            f"PaddingSamplingOracle(epsilon={self.epsilon!r}, domain_size={self._d}, length={self._l}, "
            f"oracle={self._oracle.protocol!r})"
        )

    # -- client --------------------------------------------------------------------------------------------
    def randomize(self, sets: UserSets | Sequence[ArrayLike] | NDArray[Any], rng: Rng = None) -> Reports:
        """One epsilon-LDP report per user (``sets`` holds one set per user)."""
        data = as_user_sets(sets, self._d)
        source = resolve_source(rng)
        inner = self._oracle.randomize(padded_sample(data, self._l, self._d, source), rng=source)
        return Reports(self.protocol, self.params, dict(inner.arrays))

    # -- server --------------------------------------------------------------------------------------------
    def _inner_reports(self, reports: Reports) -> Reports:
        reports.check(self.protocol, self.params)
        return Reports(self._oracle.protocol, self._oracle.params, reports.arrays)

    def estimate(self, reports: Reports, candidates: ArrayLike | None = None) -> CountEstimate:
        """Estimated number of users holding each item ``0 .. d-1`` (or each of the ``candidates`` listed,
        in their order), with variances (see the class) and this oracle's ``PureDP(epsilon)`` per report
        (not the inner GRR's amplified ``eps'``)."""
        inner = self._inner_reports(reports)
        if candidates is None:
            return self._scaled(self._oracle.estimate(inner).counts[: self._d], reports.n)
        wanted = check_domain_values(candidates, self._d, "candidates")
        return self._scaled(np.array(self._oracle.estimate(inner, wanted).counts), reports.n)

    #: Deprecated name of :meth:`estimate` (removed in the next release).
    estimate_candidates = deprecated_alias("estimate")

    def supports(self, reports: Reports, items: ArrayLike) -> NDArray[np.bool_]:
        """Whether report ``j`` supports item ``items[j]``."""
        wanted = check_domain_values(items, self._d, "items")
        return self._oracle.supports(self._inner_reports(reports), wanted)

    def count_variance(self, n: int, counts: ArrayLike) -> FloatArray:
        """Exact variance of the estimated count of an item held by ``counts`` of ``n`` users, all with sets
        of at most ``l`` items."""
        c = np.asarray(counts, dtype=np.float64)
        p, q = self._oracle.p_star, self._oracle.q_star
        holds = q + (p - q) / self._l
        spread = (p - q) / self._l
        return np.asarray((c * holds * (1 - holds) + (n - c) * q * (1 - q)) / spread**2, dtype=np.float64)

    def _scaled(self, inner_counts: FloatArray, n: int) -> CountEstimate:
        counts = np.asarray(inner_counts * self._l, dtype=np.float64)
        variance = self.count_variance(n, np.clip(counts, 0, n))
        return CountEstimate(counts=counts, variance=variance, n=n, privacy_loss=self.privacy_loss)
