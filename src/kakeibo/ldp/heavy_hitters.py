"""Heavy hitters over huge domains: the Prefix Extending Method and TreeHist (seed 003, "Heavy Hitter
Identification").

Values are ``bits``-bit keys (``bits <= 40``): non-negative integers below ``2^bits``, or strings and bytes,
keyed by the top ``bits`` bits of their 64-bit BLAKE2b key (:func:`kakeibo.ldp._hash.value_keys`; two
distinct strings share a key with probability ``2^-bits``). String heavy hitters are returned as keys:
the caller maps candidate strings to keys with :meth:`encode` and looks them up.

A frequency oracle over ``2^32`` values cannot be decoded value by value, so both protocols find the
heavy hitters prefix by prefix. The clients are split uniformly at random into groups, independently of
their values; each client reports once, in its own group: the prefix of its key of that group's length
``s_t``, through an epsilon-LDP frequency oracle over ``2^s_t`` values. The server estimates, group after
group, only the *candidate* prefixes (:meth:`FrequencyOracle.estimate` with candidates), keeps the
promising ones and extends them by every value of the next bits to form the next group's candidates; the
domain is never enumerated.

* :class:`PrefixExtendingMethod` (PEM; Wang, Li and Jha, "Locally Differentially Private Heavy Hitter
  Identification", IEEE TDSC 2019, arXiv 1708.06674, Sec. "Prefix Extending Method"): group ``t = 1..g``
  reports ``s_t = min(bits, gamma + t eta)`` bits, ``g = ceil((bits - gamma) / eta)``. The first group's
  candidates are all ``2^(gamma + eta)`` prefixes; after each group the server keeps the ``keep`` (default
  ``k``) prefixes of largest estimated count and extends each by all ``2^eta`` suffixes. The last group
  reports whole keys; the ``k`` largest of its estimates are the answer.
* :class:`TreeHist` (Bassily, Nissim, Stemmer and Thakurta, "Practical Locally Private Heavy Hitters",
  NeurIPS 2017, Sec. 3, the TreeHist protocol): a binary prefix tree. Group ``t = 1..bits`` reports the
  ``t``-bit prefix; a node survives when its estimate exceeds ``z`` standard deviations of the estimate of
  an empty node (and it is among the ``cap`` largest at its level); the survivors' children are the next
  level's candidates. A separate final group reports whole keys and estimates the surviving leaves.

Estimates are scaled from a group to the whole population: with ``n`` clients, ``n_t`` of them in group
``t`` and ``c_t`` of the ``C`` holders of a prefix, the oracle's unbiased estimate ``c^_t`` (Wang et al.
2017, Eq. (1)) gives ``C^ = (n / n_t) c^_t``. Given the group sizes, ``c_t`` is hypergeometric with mean
``C n_t / n``, so ``C^`` is unbiased, and its variance is (Eq. (2) for the oracle's part, which is linear in
the count, plus the hypergeometric variance of ``c_t``)::

    Var C^ = (n / n_t)^2 Var_oracle(n_t, C n_t / n) + C (1 - C / n) n (n - n_t) / (n_t (n - 1))

Privacy (both protocols). Neighbour relation: local, any two values of one client. Sensitivity: not
applicable (each client randomizes only its own value). Privacy loss: ``PureDP(epsilon)`` per client. The
group is drawn with exact uniform coins independently of the value, so ``P(group = t, report = y | x) =
P(t) P_t(y | x)`` and the ratio for two values is the ratio of one epsilon-LDP oracle: revealing the group
costs nothing, and since every client reports once, the groups compose in parallel.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from typing import Any, ClassVar, overload

import numpy as np
from numpy.typing import ArrayLike
from scipy.special import ndtri

from ..errors import ArgumentError, ArgumentTypeError
from ..mechanisms.base import Rng, check_beta
from ..noise import resolve_source
from ..noise.exact import uniform_below
from ..noise.source import RandomSource
from ..privacy import Number
from ._hash import value_keys
from .estimates import CountEstimate, HeavyHitters, deprecated_alias
from .framework import (
    FloatArray,
    FrequencyOracle,
    IntArray,
    LocalRandomizer,
    check_domain_values,
    check_integer,
)
from .hashing import OLH
from .reports import Param, Reports

__all__ = [
    "PEM",
    "HeavyHitters",
    "PrefixExtendingMethod",
    "TreeHist",
    "extend_prefixes",
    "group_batches",
    "key_bits",
    "population_count_variance",
    "prefixes",
]

#: Longest key: the frequency oracles accept domains up to ``2^40``.
_MAX_BITS = 40
#: Most candidates estimated per group (each costs one support test per report of the group).
_MAX_CANDIDATES = 1 << 16
#: Largest report an oracle may send per client (unary encodings send one bit per domain value).
_MAX_REPORT_BITS = 1 << 12


def prefixes(keys: IntArray, bits: int, length: int) -> IntArray:
    """The top ``length`` bits of each ``bits``-bit key.

    >>> prefixes(np.array([0b1011, 0b0110]), 4, 2).tolist()
    [2, 1]
    """
    return np.asarray(keys >> (bits - length), dtype=np.int64)


def extend_prefixes(kept: IntArray, step: int) -> IntArray:
    """Every extension of each kept prefix by ``step`` more bits, in order (``step = 0``: the prefixes).

    >>> extend_prefixes(np.array([1, 3]), 1).tolist()
    [2, 3, 6, 7]
    """
    suffixes = np.arange(1 << step, dtype=np.int64)
    return np.asarray(((kept[:, None] << step) | suffixes[None, :]).reshape(-1), dtype=np.int64)


def key_bits(values: ArrayLike | Sequence[Any], bits: int) -> IntArray:
    """The ``bits``-bit key of each value: integers below ``2^bits`` as themselves, strings and bytes by the
    top ``bits`` bits of their 64-bit key (:func:`~kakeibo.ldp._hash.value_keys`).

    >>> key_bits([5, 9], 4).tolist()
    [5, 9]
    """
    arr = np.asarray(values)
    if arr.dtype.kind in "USO":
        return np.asarray(value_keys(arr) >> np.uint64(64 - bits), dtype=np.int64)
    return check_domain_values(arr, 1 << bits)


def population_count_variance(
    oracle: FrequencyOracle, n: int, group_size: int, counts: ArrayLike
) -> FloatArray:
    """Variance of ``(n / n_t) c^_t``, the population count estimated from a group of ``n_t = group_size``
    of the ``n`` clients, for a value held by ``counts`` clients in all (module docstring)."""
    c = np.asarray(counts, dtype=np.float64)
    scale = n / group_size
    oracle_part = scale**2 * oracle.count_variance(group_size, c / scale)
    sampling = c * (1 - c / n) * n * (n - group_size) / (group_size * max(n - 1, 1))
    return np.asarray(oracle_part + sampling, dtype=np.float64)


class _PrefixProtocol(LocalRandomizer, ABC):
    """Groups of clients reporting key prefixes of given lengths through one oracle class; the server walks
    the groups, pruning and extending candidate prefixes. Subclasses fix the lengths and the pruning."""

    protocol: ClassVar[str]

    def __init__(self, *, epsilon: Number, bits: int, k: int, oracle: type[FrequencyOracle]) -> None:
        super().__init__(epsilon=epsilon)
        self._bits = check_integer(bits, "bits", 1, _MAX_BITS)
        self._k = check_integer(k, "k", 1, _MAX_CANDIDATES)
        if not (isinstance(oracle, type) and issubclass(oracle, FrequencyOracle)):
            raise ArgumentTypeError(f"oracle must be a FrequencyOracle class such as OLH, not {oracle!r}.")
        self._oracle_class = oracle

    def _build_oracles(self, lengths: Sequence[int]) -> None:
        """One oracle per group, over the ``2^s`` prefixes of that group's length ``s``."""
        self._lengths = tuple(lengths)
        self._oracles = tuple(self._make_oracle(s) for s in self._lengths)

    def _make_oracle(self, length: int) -> FrequencyOracle:
        name = self._oracle_class.__name__
        try:
            oracle = self._oracle_class(epsilon=self._epsilon, domain_size=1 << length)
        except TypeError as exc:
            raise ArgumentTypeError(
                f"oracle {name} must be constructible as {name}(epsilon=, domain_size=)."
            ) from exc
        if oracle.report_bits > _MAX_REPORT_BITS:
            raise ArgumentError(
                f"{name} sends {oracle.report_bits} bits per report over 2**{length} prefixes; "
                "use a local hashing oracle (OLH, BLH) for long prefixes."
            )
        return oracle

    # -- description ---------------------------------------------------------------------------------------
    @property
    def bits(self) -> int:
        return self._bits

    @property
    def k(self) -> int:
        return self._k

    @property
    def groups(self) -> int:
        """Number of groups the clients are split into (uniformly at random)."""
        return len(self._lengths)

    @property
    def prefix_lengths(self) -> tuple[int, ...]:
        """Bits of its key that a client of each group reports."""
        return self._lengths

    @property
    def oracles(self) -> tuple[FrequencyOracle, ...]:
        """The frequency oracle of each group."""
        return self._oracles

    def group_params(self, group: int) -> dict[str, Param]:
        """The parameters of group ``group``'s report batches: the protocol's, then the oracle's."""
        oracle = self._oracles[group]
        own: dict[str, Param] = {
            "epsilon": str(self._epsilon),
            "bits": self._bits,
            "groups": self.groups,
            "group": group,
            "prefix_bits": self._lengths[group],
            "oracle": oracle.protocol,
        }
        return own | {f"oracle_{key}": value for key, value in oracle.params.items()}

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(epsilon={self.epsilon!r}, bits={self._bits}, k={self._k}, "
            f"oracle={self._oracle_class.__name__})"
        )

    # -- client --------------------------------------------------------------------------------------------
    def encode(self, values: ArrayLike | Sequence[Any]) -> IntArray:
        """The ``bits``-bit key of each value (:func:`key_bits`)."""
        return key_bits(values, self._bits)

    def randomize(self, values: ArrayLike | Sequence[Any], rng: Rng = None) -> list[Reports]:
        """One epsilon-LDP report per client, batched by group: element ``t`` of the list holds the reports
        of the clients that drew group ``t`` (possibly none)."""
        keys = self.encode(values)
        source = resolve_source(rng)
        group = self._assign_groups(keys, source)
        order = np.argsort(group, kind="stable")
        ends = np.cumsum(np.bincount(group, minlength=self.groups))
        starts = ends - np.bincount(group, minlength=self.groups)
        return [self._group_reports(t, keys[order[starts[t] : ends[t]]], source) for t in range(self.groups)]

    def _assign_groups(self, keys: IntArray, source: RandomSource) -> IntArray:
        """Each client's group: exact uniform coins, independent of its key."""
        return uniform_below(self.groups, keys.size, source)

    def _group_reports(self, group: int, keys: IntArray, source: RandomSource) -> Reports:
        oracle = self._oracles[group]
        inner = oracle.randomize(prefixes(keys, self._bits, self._lengths[group]), rng=source)
        return Reports(self.protocol, self.group_params(group), dict(inner.arrays))

    # -- server --------------------------------------------------------------------------------------------
    @overload
    def estimate(self, batches: Sequence[Reports], candidates: None = None) -> HeavyHitters: ...

    @overload
    def estimate(self, batches: Sequence[Reports], candidates: ArrayLike) -> CountEstimate: ...

    def estimate(
        self, batches: Sequence[Reports], candidates: ArrayLike | None = None
    ) -> HeavyHitters | CountEstimate:
        """The (at most) ``k`` keys of largest estimated count, with population counts and variances
        (:class:`HeavyHitters`); with ``candidates``, the population counts (and variances) of those keys
        only, in their order, from the last group (which reports whole keys; map strings to keys with
        :meth:`encode` first).

        Each count is unbiased for a key fixed in advance; the heavy hitters returned are the keys whose
        estimates came out largest, so their counts lean high (selection bias), most for keys near the
        k-th. For unbiased counts of chosen keys give them as ``candidates`` to reports of other clients.
        """
        groups = self._collect(batches)
        if candidates is not None:
            wanted = check_domain_values(candidates, 1 << self._bits, "candidates")
            return self._estimate(groups, self.groups - 1, wanted, sum(batch.n for batch in groups))
        n = sum(batch.n for batch in groups)
        candidates = np.arange(1 << self._lengths[0], dtype=np.int64)
        for t in range(self.groups - 1):
            estimate = self._estimate(groups, t, candidates, n)
            empty_sd = math.sqrt(population_count_variance(self._oracles[t], n, groups[t].n, 0.0).item())
            kept = candidates[self._prune(estimate, empty_sd)]
            candidates = extend_prefixes(kept, self._lengths[t + 1] - self._lengths[t])
        final = self._estimate(groups, self.groups - 1, candidates, n)
        top = _largest(final.counts, self._k)
        return HeavyHitters(
            counts=final.counts[top],
            variance=final.variance[top],
            n=n,
            privacy_loss=final.privacy_loss,
            values=candidates[top],
        )

    #: Deprecated names of :meth:`estimate` (removed in the next release).
    identify = deprecated_alias("estimate")
    estimate_candidates = deprecated_alias("estimate")

    def count_variance(self, n: int, group_size: int, counts: ArrayLike) -> FloatArray:
        """Exact variance of :meth:`estimate`'s candidate counts for keys held by ``counts`` of ``n``
        clients when the last group has ``group_size`` clients."""
        return population_count_variance(self._oracles[-1], n, group_size, counts)

    @abstractmethod
    def _prune(self, estimate: CountEstimate, empty_sd: float) -> IntArray:
        """Indices of the candidates to extend, given their estimates and the standard deviation of the
        estimate of a prefix nobody holds."""

    def _estimate(self, groups: Sequence[Reports], t: int, candidates: IntArray, n: int) -> CountEstimate:
        """Population counts of candidate prefixes, from group ``t``'s reports."""
        oracle, batch = self._oracles[t], groups[t]
        inner = Reports(oracle.protocol, oracle.params, batch.arrays)
        scale = n / batch.n
        counts = oracle.estimate(inner, candidates).counts * scale
        variance = population_count_variance(oracle, n, batch.n, np.clip(counts, 0, n))
        return CountEstimate(counts=counts, variance=variance, n=n, privacy_loss=self.privacy_loss)

    def _collect(self, batches: Sequence[Reports]) -> list[Reports]:
        """The batches of each group joined into one, every batch's parameters and payload checked first."""
        joined = group_batches(batches, self.protocol, self.groups, self.group_params)
        for t, batch in enumerate(joined):
            oracle = self._oracles[t]
            oracle.check_reports(Reports(oracle.protocol, oracle.params, batch.arrays))
        return joined


def group_batches(
    batches: Sequence[Reports], protocol: str, groups: int, group_params: Callable[[int], dict[str, Param]]
) -> list[Reports]:
    """The report batches of a protocol that splits its clients into ``groups`` groups, joined into one
    batch per group: each batch must name its group and carry that group's parameters
    (``group_params(group)``), and every group must have reports. The payloads are the caller's to check.
    """
    if isinstance(batches, Reports):
        raise ArgumentTypeError("pass the list of report batches that randomize returns, not a single batch.")
    by_group: list[list[Reports]] = [[] for _ in range(groups)]
    for batch in batches:
        if not isinstance(batch, Reports):
            raise ArgumentTypeError(f"every batch must be a Reports object, got {type(batch).__name__}.")
        group = batch.params.get("group")
        if not isinstance(group, int) or isinstance(group, bool) or not 0 <= group < groups:
            raise ArgumentError(  # neither the batch's protocol nor its group is echoed: a client wrote them
                f"a batch names a group that is not one of 0..{groups - 1}."
            )
        batch.check(protocol, group_params(group))
        by_group[group].append(batch)
    missing = [t for t, found in enumerate(by_group) if not sum(batch.n for batch in found)]
    if missing:
        shown = ", ".join(str(t) for t in missing[:8]) + (", ..." if len(missing) > 8 else "")
        raise ArgumentError(f"groups [{shown}] have no reports; every group needs clients to estimate.")
    return [Reports.concatenate(found) for found in by_group]


class PrefixExtendingMethod(_PrefixProtocol):
    """The Prefix Extending Method (PEM) of Wang, Li and Jha (2019) over ``bits``-bit keys.

    * Neighbour relation: local, any two values of one client.
    * Sensitivity: not applicable; each client randomizes its own value once.
    * Privacy loss: ``PureDP(epsilon)`` per client (one report, in a group chosen independently of the value,
      through an epsilon-LDP ``oracle``; parallel composition over the groups).

    Group ``t = 1..g`` reports ``s_t = min(bits, start + t step)`` bits (``start`` is the paper's gamma,
    default ``ceil(log2 k)``; ``step`` its eta); the server keeps the ``keep`` (default ``k``) prefixes of
    largest estimated count after each group and extends each by all ``2^step`` suffixes.

    >>> pem = PEM(epsilon=4, bits=16, k=2)
    >>> pem.prefix_lengths
    (5, 9, 13, 16)
    >>> values = np.repeat([7, 40_000, 123], [3000, 2000, 100])
    >>> found = pem.estimate(pem.randomize(values, rng=np.random.default_rng(0)))
    >>> found.values.tolist()
    [7, 40000]
    """

    protocol = "PEM"

    def __init__(
        self,
        *,
        epsilon: Number,
        bits: int,
        k: int,
        oracle: type[FrequencyOracle] = OLH,
        step: int = 4,
        start: int | None = None,
        keep: int | None = None,
    ) -> None:
        super().__init__(epsilon=epsilon, bits=bits, k=k, oracle=oracle)
        gamma = min(math.ceil(math.log2(self._k)), self._bits - 1) if start is None else start
        self._start = check_integer(gamma, "start", 0, self._bits - 1)
        self._step = check_integer(step, "step", 1, _MAX_BITS)
        self._keep = check_integer(self._k if keep is None else keep, "keep", self._k, _MAX_CANDIDATES)
        first = min(self._bits, self._start + self._step)
        if 1 << first > _MAX_CANDIDATES or self._keep << self._step > _MAX_CANDIDATES:
            raise ArgumentError(
                f"start + step = {first} bits and keep * 2**step = {self._keep << self._step} candidates "
                f"exceed the limit of {_MAX_CANDIDATES} candidates per group; use a smaller step."
            )
        count = math.ceil((self._bits - self._start) / self._step)
        self._build_oracles([min(self._bits, self._start + t * self._step) for t in range(1, count + 1)])

    @property
    def start(self) -> int:
        """Gamma: the first group reports ``start + step`` bits."""
        return self._start

    @property
    def step(self) -> int:
        """Eta: bits added per group."""
        return self._step

    @property
    def keep(self) -> int:
        """Prefixes kept (and extended) after each group but the last."""
        return self._keep

    def _prune(self, estimate: CountEstimate, empty_sd: float) -> IntArray:
        return _largest(estimate.counts, self._keep)


class TreeHist(_PrefixProtocol):
    """TreeHist (Bassily, Nissim, Stemmer and Thakurta 2017): a pruned binary prefix tree over ``bits``-bit
    keys, one group of clients per level plus a final group for the surviving leaves' counts.

    * Neighbour relation: local, any two values of one client.
    * Sensitivity: not applicable; each client randomizes its own value once.
    * Privacy loss: ``PureDP(epsilon)`` per client (one report, in a group chosen independently of the value,
      through an epsilon-LDP ``oracle``; parallel composition over the ``bits + 1`` groups).

    The threshold: a node at a level survives when its estimated count exceeds ``z`` times the standard
    deviation of the estimate of a node *nobody* holds at that level (``population_count_variance`` at count
    0), with ``z = Phi^-1(1 - false_positive_rate / m)`` and ``m = 2 + 2 cap (bits - 1)`` the most nodes the
    tree can test. By the union bound (and the normal approximation of the estimates), the probability that
    any empty node survives any level is at most ``false_positive_rate``: every surviving leaf is then a key
    that some client holds. At most the ``cap`` (default ``4 k``) largest nodes above the threshold survive a
    level, which bounds the server's work; a key whose count is far below ``z`` standard deviations is lost.

    >>> tree = TreeHist(epsilon=4, bits=8, k=2)
    >>> tree.groups, tree.prefix_lengths[-2:]
    (9, (8, 8))
    >>> values = np.repeat([7, 200, 123], [3000, 2000, 20])
    >>> tree.estimate(tree.randomize(values, rng=np.random.default_rng(0))).values.tolist()
    [7, 200]
    """

    protocol = "TreeHist"

    def __init__(
        self,
        *,
        epsilon: Number,
        bits: int,
        k: int,
        oracle: type[FrequencyOracle] = OLH,
        cap: int | None = None,
        false_positive_rate: float = 0.05,
    ) -> None:
        super().__init__(epsilon=epsilon, bits=bits, k=k, oracle=oracle)
        self._cap = check_integer(4 * self._k if cap is None else cap, "cap", self._k, _MAX_CANDIDATES // 2)
        self._fpr = check_beta(false_positive_rate, "false_positive_rate")
        self._build_oracles([*range(1, self._bits + 1), self._bits])

    @property
    def cap(self) -> int:
        """Most nodes kept per level."""
        return self._cap

    @property
    def threshold_z(self) -> float:
        """``z``: a node survives when its estimate exceeds ``z`` standard deviations of an empty node's."""
        tests = 2 + 2 * self._cap * (self._bits - 1)
        return float(-ndtri(self._fpr / tests))

    def _prune(self, estimate: CountEstimate, empty_sd: float) -> IntArray:
        above = np.flatnonzero(estimate.counts > self.threshold_z * empty_sd)
        return above[_largest(estimate.counts[above], self._cap)]


PEM = PrefixExtendingMethod


def _largest(counts: FloatArray, keep: int) -> IntArray:
    """Indices of the ``keep`` largest counts, largest first (ties: the earlier candidate)."""
    return np.asarray(np.argsort(-counts, kind="stable")[:keep], dtype=np.int64)
