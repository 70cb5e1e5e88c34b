"""Frequent items (SVIM) and frequent itemsets (SVSM) of set-valued data under local DP.

Wang, Li and Jha 2018, "Locally Differentially Private Frequent Itemset Mining" (IEEE S&P; seed 003,
"Itemset mining"): SVIM (Sec. V) finds the top-k items in three groups of users, SVSM (Sec. VI) then the
top-k itemsets, both on the padding-and-sampling oracle of :mod:`.padding`. Each user belongs to exactly one
group and sends exactly one report: ``PureDP(epsilon)`` per user, whatever the protocol step.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

import numpy as np
from numpy.typing import ArrayLike, NDArray

from ..errors import ArgumentError, ArgumentTypeError
from ..mechanisms.base import Rng
from ..noise import resolve_source
from ..noise.source import RandomSource
from ..privacy import Number, PrivacyLoss
from .direct import GRR
from .estimates import CountEstimate, FrequentItems, FrequentItemsets, TopItems, deprecated_alias
from .framework import (
    FloatArray,
    FrequencyOracle,
    IntArray,
    LocalRandomizer,
    check_domain_size,
    check_domain_values,
    check_integer,
)
from .hashing import OLH
from .padding import (
    SET_NEIGHBOUR,
    PaddingSamplingOracle,
    UserSets,
    as_user_sets,
    lower_variance,
)
from .postprocess import clip_and_normalize
from .reports import Param, Reports

__all__ = [
    "SVIM",
    "SVSM",
    "FrequentItems",
    "FrequentItemsets",
    "LengthChoice",
    "TopItems",
    "check_candidates",
    "ranked",
    "take_estimates",
]

#: Guessed frequency of the most frequent item when SVSM ranks candidate itemsets (Wang et al. 2018, Sec. VI).
_TOP_ITEM_GUESS = 0.9
#: SVSM marks a user's top items in one 64-bit word.
_MAX_SVSM_K = 64


# -- SVIM / SVSM steps 2-4, shared ---------------------------------------------------------------------------
@dataclass(frozen=True, eq=False)
class LengthChoice:
    """Step 2 of SVIM and SVSM (Wang et al. 2018, Sec. V): the padding length and the truncation correction,
    from the sizes ``s = |v ∩ candidates|`` that one group of users reported.

    * ``size_shares[s]``: estimated share of users holding ``s = 0 .. m`` candidates (negative estimates
      clipped, then normalised);
    * ``length``: the smallest ``l`` covering ``percentile`` of the users who hold at least one candidate;
    * ``update_factor``: ``u = sum_s s theta_s / sum_s min(s, l) theta_s`` with the unbiased size estimates
      ``theta_s`` (clipping first would bias ``u`` upwards), at least 1: the inverse of the share of held
      (user, candidate) pairs that survive truncation to ``l``;
    * ``update_variance``: the delta-method variance of ``u``, ``Var(A - u B) / B^2`` for the numerator
      ``A`` and denominator ``B``, each a sum of independent per-report terms (estimated by ``n`` times the
      reports' sample variance);
    * ``privacy_loss``: the loss of each client's report (local DP; the client's ledger holds the charge).
    """

    length: int
    update_factor: float
    update_variance: float
    size_shares: FloatArray
    privacy_loss: PrivacyLoss


def _length_choice(oracle: FrequencyOracle, reports: Reports, percentile: float) -> LengthChoice:
    """The :class:`LengthChoice` from size reports of ``oracle`` over ``0 .. m`` (already checked)."""
    if reports.n < 2:
        raise ArgumentError("choosing the length needs at least two size reports.")
    counts = oracle.estimate(reports).counts
    shares = clip_and_normalize(counts, 1.0)
    shares.setflags(write=False)
    holding = np.clip(counts[1:], 0, None)
    if not holding.sum() > 0:
        return LengthChoice(
            length=1,
            update_factor=1.0,
            update_variance=0.0,
            size_shares=shares,
            privacy_loss=oracle.privacy_loss,
        )
    covered = np.cumsum(holding) / holding.sum()
    length = min(int(np.searchsorted(covered, percentile)) + 1, holding.size)
    factor, variance = _update_factor(oracle, reports, counts, length)
    return LengthChoice(
        length=length,
        update_factor=factor,
        update_variance=variance,
        size_shares=shares,
        privacy_loss=oracle.privacy_loss,
    )


def _update_factor(
    oracle: FrequencyOracle, reports: Reports, counts: FloatArray, length: int
) -> tuple[float, float]:
    """``u = A / B`` with ``A = sum_s s theta_s`` and ``B = sum_s min(s, l) theta_s``, and its delta-method
    variance. Eq. (1) of Wang et al. 2017 is linear in the support indicators, so ``A - u B`` is a constant
    plus ``sum_j r_j / (p* - q*)`` with ``r_j = sum_s (s - u min(s, l)) [report j supports s]``, independent
    over reports."""
    sizes = np.arange(counts.size, dtype=np.float64)
    kept = np.minimum(sizes, length)
    held_total, kept_total = float(sizes @ counts), float(kept @ counts)
    factor = max(1.0, held_total / kept_total) if kept_total > 0 else 1.0
    residual = np.zeros(reports.n)
    for size, weight in enumerate((sizes - factor * kept).tolist()):
        residual += weight * oracle.supports(reports, np.full(reports.n, size, dtype=np.int64))
    spread = oracle.p_star - oracle.q_star
    return factor, reports.n * float(residual.var(ddof=1)) / (spread * max(kept_total, 1.0)) ** 2


def _relabel(reports: Reports, protocol: str, params: Mapping[str, Param]) -> Reports:
    return Reports(protocol, dict(params), reports.arrays)


class _CandidateRounds:
    """Steps 2-4 of SVIM (and of SVSM's itemset phase) for users holding subsets of ``m`` candidates, given
    as positions ``0 .. m-1``. ``key`` names the candidate list and travels with the reports, so reports made
    for one list are never decoded against another."""

    def __init__(self, epsilon: Fraction, name: str, percentile: float) -> None:
        self._epsilon, self._name, self._percentile = epsilon, name, percentile

    def _size_oracle(self, m: int) -> FrequencyOracle:
        """GRR or OLH (the lower variance) over the sizes ``0 .. m``."""
        return lower_variance(
            [GRR(epsilon=self._epsilon, domain_size=m + 1), OLH(epsilon=self._epsilon, domain_size=m + 1)]
        )

    def _counting_oracle(self, m: int, length: int) -> PaddingSamplingOracle:
        return PaddingSamplingOracle(epsilon=self._epsilon, domain_size=m, length=length)

    def report_sizes(self, held: UserSets, key: str, m: int, source: RandomSource) -> Reports:
        oracle = self._size_oracle(m)
        reports = oracle.randomize(held.sizes, rng=source)
        return _relabel(reports, f"{self._name}-sizes", {**reports.params, "candidates": key})

    def choose_length(self, reports: Reports, key: str, m: int) -> LengthChoice:
        oracle = self._size_oracle(m)
        reports.check(f"{self._name}-sizes", {**oracle.params, "candidates": key})
        return _length_choice(oracle, _relabel(reports, oracle.protocol, oracle.params), self._percentile)

    def report(self, held: UserSets, key: str, m: int, length: int, source: RandomSource) -> Reports:
        psfo = self._counting_oracle(m, length)
        reports = psfo.randomize(held, rng=source)
        return _relabel(reports, f"{self._name}-counts", {**reports.params, "candidates": key})

    def estimate(self, reports: Reports, key: str, m: int, choice: LengthChoice) -> CountEstimate:
        """The group's counts of the ``m`` candidates times the update factor ``u``. The two are independent
        (other users), so ``Var(u c) = u^2 Var c + c^2 Var u + Var u Var c`` (clipped ``c`` plugged in)."""
        psfo = self._counting_oracle(m, choice.length)
        reports.check(f"{self._name}-counts", {**psfo.params, "candidates": key})
        group = psfo.estimate(_relabel(reports, psfo.protocol, psfo.params))
        u, u_var = choice.update_factor, choice.update_variance
        held = np.clip(group.counts, 0, group.n)
        variance = u**2 * group.variance + (held**2 + group.variance) * u_var
        return CountEstimate(group.counts * u, variance, group.n, group.privacy_loss)


def _to_population(group: CountEstimate, n_total: int) -> CountEstimate:
    """Counts of a uniformly random group of ``n_g`` of ``N`` users scaled by ``N / n_g``. The variance adds
    the group's sampling variance: the group's true count is hypergeometric, with variance
    ``n_g f (1 - f) (N - n_g) / (N - 1)`` at share ``f`` (the clipped estimate)."""
    n_g = group.n
    share = np.clip(group.counts / n_g, 0, 1)
    sampling = n_g * share * (1 - share) * (n_total - n_g) / max(n_total - 1, 1)
    scale = n_total / n_g
    variance = (group.variance + sampling) * scale**2
    return CountEstimate(group.counts * scale, variance, n_total, group.privacy_loss)


def _check_split(split: Sequence[float]) -> tuple[float, float, float]:
    shares = tuple(float(s) for s in split)
    if len(shares) != 3 or not all(s > 0 for s in shares) or not math.isclose(sum(shares), 1.0):
        raise ArgumentError(f"split must be three positive shares of the users summing to 1, got {split!r}.")
    return shares[0], shares[1], shares[2]


def _check_percentile(percentile: float) -> float:
    if not 0 < percentile <= 1:
        raise ArgumentError(f"percentile must lie in (0, 1], got {percentile!r}.")
    return float(percentile)


def _assign_groups(n: int, split: tuple[float, float, float], source: RandomSource) -> IntArray:
    """Group ``0, 1, 2`` of each of ``n`` users: a uniformly random partition with ``floor(share * n)`` users
    in groups 0 and 1 and the rest in group 2 (each user reports in one group only)."""
    if isinstance(n, bool) or not isinstance(n, (int, np.integer)):
        raise ArgumentTypeError(f"the number of users must be an integer, not {type(n).__name__}.")
    sizes = [math.floor(split[0] * n), math.floor(split[1] * n)]
    sizes.append(int(n) - sum(sizes))
    if min(sizes) < 1:
        raise ArgumentError(f"{int(n)} users are too few to give every protocol group at least one user.")
    order = np.argsort(source.words(int(n)), kind="stable")  # ties (chance below n^2 2^-65) keep index order
    groups = np.empty(int(n), dtype=np.int64)
    groups[order] = np.repeat(np.arange(3), sizes)
    return groups


def check_candidates(candidates: ArrayLike, domain_size: int) -> IntArray:
    found = check_domain_values(candidates, domain_size, "candidates")
    if found.size == 0 or np.unique(found).size != found.size:
        raise ArgumentError("candidates must be a non-empty list of distinct items.")
    return found


def _check_population(n_users: int, reports: int) -> None:
    if isinstance(n_users, bool) or not isinstance(n_users, (int, np.integer)):
        raise ArgumentTypeError(f"n_users must be an integer, not {type(n_users).__name__}.")
    if n_users < reports:
        raise ArgumentError(f"n_users ({int(n_users)}) must be at least the number of reports ({reports}).")


def ranked(estimate: CountEstimate, how_many: int) -> IntArray:
    """Indices of the ``how_many`` largest counts, largest first (ties: lower index first)."""
    return np.argsort(-estimate.counts, kind="stable")[:how_many]


def take_estimates(estimate: CountEstimate, index: IntArray) -> CountEstimate:
    return CountEstimate(estimate.counts[index], estimate.variance[index], estimate.n, estimate.privacy_loss)


# -- SVIM ----------------------------------------------------------------------------------------------------
def _item_key(candidates: IntArray) -> str:
    return ",".join(str(c) for c in candidates.tolist())


class _MiningProtocol(LocalRandomizer):
    """What SVIM and SVSM share: epsilon, the item domain, ``k``, the three-way random split of the users
    and the steps-2-and-3 rounds over a candidate list (named ``name`` in the reports)."""

    neighbour = SET_NEIGHBOUR

    def __init__(
        self,
        *,
        epsilon: Number,
        domain_size: int,
        k: int,
        least_k: int,
        most_k: int,
        split: Sequence[float],
        percentile: float,
        name: str,
    ) -> None:
        super().__init__(epsilon=epsilon)
        self._d = check_domain_size(domain_size)
        self._k = check_integer(k, "k", least_k, min(self._d, most_k))
        self._split = _check_split(split)
        self._rounds = _CandidateRounds(self._epsilon, name, _check_percentile(percentile))

    @property
    def k(self) -> int:
        return self._k

    def __repr__(self) -> str:
        return f"{type(self).__name__}(epsilon={self.epsilon!r}, domain_size={self._d}, k={self._k})"

    def assign_groups(self, n: int, rng: Rng = None) -> IntArray:
        """Protocol group (0, 1 or 2: steps 1, 2 and 3) of each of ``n`` users, uniformly at random with the
        split's shares."""
        return _assign_groups(n, self._split, resolve_source(rng))


class SVIM(_MiningProtocol):
    """Set-Value Item Mining: the top-k items of set-valued data (Wang et al. 2018, Sec. V).

    Users are split at random into three groups (``split``, default 40%, 10%, 50%: the size distribution is
    only needed to a percentile, the final estimates need the most users):

    1. group 1 reports with PSFO(``discovery_length``) over all ``d`` items (default ``l = 1``: truncation
       only reweights items, while every extra slot costs signal); the server keeps the ``2k`` items with
       the largest estimates as candidates (:meth:`find_candidates`);
    2. group 2 reports how many candidates it holds, ``|v ∩ S|`` in ``0 .. 2k``, with GRR or OLH (the lower
       variance); the server picks ``l`` as the ``percentile`` (default 90%) of the estimated sizes of the
       users holding a candidate (:meth:`choose_length`, :class:`LengthChoice`);
    3. group 3 reports ``v ∩ S`` with PSFO(``l``) over the candidates (:meth:`report_items`);
    4. the server multiplies the candidates' estimates by the update factor ``E[s] / E[min(s, l)]`` (sizes
       ``s`` from step 2), which undoes the truncation exactly when every candidate's holders are spread
       over the sizes in proportion to ``s theta_s`` (candidates fill set slots regardless of the set's
       size; otherwise a small per-item bias remains), scales them to the whole population, returns the top k
       (:meth:`estimate`).

    * Neighbour relation: local, any two item sets of one client. Sensitivity: one report per user.
    * Privacy loss: ``PureDP(epsilon)`` per user (each user is in exactly one group and reports once).
    * Released variances: PSFO's, the update factor's (delta method, :class:`LengthChoice`) and the random
      split's sampling variance (:func:`_to_population`).

    :meth:`run` plays all rounds on one dataset; the client methods (``discovery.randomize``,
    :meth:`report_sizes`, :meth:`report_items`) and server methods can also run on separate machines.

    >>> import numpy as np
    >>> gen = np.random.default_rng(1)
    >>> sets = [gen.choice(8, size=gen.integers(1, 4), replace=False) for _ in range(3000)]
    >>> found = SVIM(epsilon=4, domain_size=8, k=2).run(sets, rng=gen)
    >>> found.items.shape, found.estimate.counts.shape
    ((2,), (2,))
    """

    def __init__(
        self,
        *,
        epsilon: Number,
        domain_size: int,
        k: int,
        discovery_length: int = 1,
        split: Sequence[float] = (0.4, 0.1, 0.5),
        percentile: float = 0.9,
    ) -> None:
        super().__init__(
            epsilon=epsilon,
            domain_size=domain_size,
            k=k,
            least_k=1,
            most_k=domain_size,
            split=split,
            percentile=percentile,
            name="SVIM",
        )
        self._discovery = PaddingSamplingOracle(
            epsilon=self._epsilon, domain_size=self._d, length=discovery_length
        )

    @property
    def discovery(self) -> PaddingSamplingOracle:
        """Step 1's randomizer (group 1's clients call ``discovery.randomize``)."""
        return self._discovery

    def find_candidates(self, reports: Reports) -> IntArray:
        """Step 1 (server): the ``min(2k, d)`` items with the largest estimates, largest first."""
        return ranked(self._discovery.estimate(reports), min(2 * self._k, self._d))

    def report_sizes(
        self, sets: UserSets | Sequence[ArrayLike] | NDArray[Any], candidates: ArrayLike, rng: Rng = None
    ) -> Reports:
        """Step 2 (client): each user's epsilon-LDP report of how many candidates it holds."""
        found = check_candidates(candidates, self._d)
        held = as_user_sets(sets, self._d).positions_in(found, self._d)
        return self._rounds.report_sizes(held, _item_key(found), found.size, resolve_source(rng))

    def choose_length(self, reports: Reports, candidates: ArrayLike) -> LengthChoice:
        """Step 2 (server): the padding length and the update factor."""
        found = check_candidates(candidates, self._d)
        return self._rounds.choose_length(reports, _item_key(found), found.size)

    def report_items(
        self,
        sets: UserSets | Sequence[ArrayLike] | NDArray[Any],
        candidates: ArrayLike,
        length: int,
        rng: Rng = None,
    ) -> Reports:
        """Step 3 (client): each user's epsilon-LDP PSFO(``length``) report of its candidates."""
        found = check_candidates(candidates, self._d)
        held = as_user_sets(sets, self._d).positions_in(found, self._d)
        return self._rounds.report(held, _item_key(found), found.size, length, resolve_source(rng))

    def estimate(
        self, reports: Reports, candidates: ArrayLike, choice: LengthChoice, n_users: int
    ) -> FrequentItems:
        """Step 4 (server): the top-k items with their estimated counts among all ``n_users`` users."""
        found = check_candidates(candidates, self._d)
        _check_population(n_users, reports.n)
        group = self._rounds.estimate(reports, _item_key(found), found.size, choice)
        every = _to_population(group, n_users)
        top = ranked(every, self._k)
        return FrequentItems(
            items=found[top],
            estimate=take_estimates(every, top),
            candidates=found,
            candidate_estimate=every,
            length_choice=choice,
        )

    #: Deprecated name of :meth:`estimate` (removed in the next release).
    estimate_items = deprecated_alias("estimate")

    def run(self, sets: UserSets | Sequence[ArrayLike] | NDArray[Any], rng: Rng = None) -> FrequentItems:
        """All four steps on ``sets`` (one set per user; each user reports once)."""
        data = as_user_sets(sets, self._d)
        return self._mine(data, resolve_source(rng), data.n_users)

    def _mine(self, data: UserSets, source: RandomSource, n_users: int) -> FrequentItems:
        """Steps 1-4 on ``data``, a uniformly random group of the ``n_users`` users (all in :meth:`run`)."""
        groups = _assign_groups(data.n_users, self._split, source)
        step = [data.select(np.flatnonzero(groups == g)) for g in range(3)]
        found = self.find_candidates(self._discovery.randomize(step[0], rng=source))
        choice = self.choose_length(self.report_sizes(step[1], found, rng=source), found)
        reports = self.report_items(step[2], found, choice.length, rng=source)
        return self.estimate(reports, found, choice, n_users)


# -- SVSM ----------------------------------------------------------------------------------------------------
def _guessed_itemsets(items: FrequentItems, how_many: int) -> tuple[tuple[int, ...], ...]:
    """The ``how_many`` itemsets of two or more of the top items with the largest guessed frequency
    ``prod g_i``, ``g_i = 0.9 c_i / c_max`` (Wang et al. 2018, Sec. VI; clipped estimates ``c``).

    Best-first enumeration over the items sorted by ``g`` (descending): the subset with largest index ``i``
    has two successors, one adding item ``i + 1`` and one replacing ``i`` by ``i + 1``; both have a guess no
    larger, and every subset is reached exactly once, so subsets leave the heap in order of their guesses.
    """
    counts = np.clip(items.estimate.counts, 0, None)
    top = float(counts.max())
    guess = _TOP_ITEM_GUESS * counts / top if top > 0 else np.zeros(counts.size)
    order = np.argsort(-guess, kind="stable")
    ranked_items, g = items.items[order].tolist(), guess[order].tolist()

    def entry(subset: tuple[int, ...]) -> tuple[float, tuple[int, ...]]:
        return -math.prod(g[i] for i in subset), subset

    heap = [entry((0,))]
    found: list[tuple[int, ...]] = []
    while heap and len(found) < how_many:
        _, subset = heapq.heappop(heap)
        if len(subset) > 1:
            found.append(tuple(sorted(ranked_items[i] for i in subset)))
        last = subset[-1]
        if last + 1 < len(g):
            heapq.heappush(heap, entry((*subset, last + 1)))
            heapq.heappush(heap, entry((*subset[:-1], last + 1)))
    return tuple(found)


def _itemset_key(candidates: tuple[tuple[int, ...], ...]) -> str:
    return ",".join("+".join(str(i) for i in itemset) for itemset in candidates)


def _held_itemsets(sets: UserSets, candidates: tuple[tuple[int, ...], ...], domain_size: int) -> UserSets:
    """Each user's set of candidate itemsets it holds (positions in ``candidates``): the user's top items as
    bits of one word, then one vectorised subset test per candidate."""
    items = np.unique(np.concatenate([np.array(c, dtype=np.int64) for c in candidates]))
    bits = sets.positions_in(items, domain_size)
    words = np.zeros(sets.n_users, dtype=np.uint64)
    np.bitwise_or.at(words, bits._rows(), np.left_shift(np.uint64(1), bits.items.astype(np.uint64)))
    masks = [np.uint64(sum(1 << int(np.searchsorted(items, i)) for i in c)) for c in candidates]
    holders = [np.flatnonzero((words & mask) == mask) for mask in masks]
    rows = np.concatenate(holders)
    order = np.argsort(rows, kind="stable")
    positions = np.repeat(np.arange(len(masks), dtype=np.int64), [h.size for h in holders])[order]
    sizes = np.bincount(rows, minlength=sets.n_users)
    return UserSets._trusted(np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64), positions)


def _check_itemsets(candidates: Sequence[Sequence[int]], domain_size: int) -> tuple[tuple[int, ...], ...]:
    itemsets = tuple(tuple(sorted(int(i) for i in c)) for c in candidates)
    items = {i for c in itemsets for i in c}
    if (
        not itemsets
        or any(len(c) < 2 or len(set(c)) != len(c) for c in itemsets)
        or len(set(itemsets)) != len(itemsets)
    ):
        raise ArgumentError("candidates must be distinct itemsets of at least two distinct items each.")
    if len(items) > _MAX_SVSM_K or min(items) < 0 or max(items) >= domain_size:
        raise ArgumentError(
            f"candidate itemsets must use at most {_MAX_SVSM_K} distinct items in 0..{domain_size - 1}."
        )
    return itemsets


class SVSM(_MiningProtocol):
    """Set-Value itemSet Mining: the top-k itemsets (single items included) of set-valued data (Wang et al.
    2018, Sec. VI).

    Users are split at random into three groups (``split``, default 50%, 10%, 40%):

    1. group 1 runs :class:`SVIM` (with its own three-way split) for the top-k items and their counts;
    2. the server guesses each itemset's frequency as ``prod g_i`` with ``g_i = 0.9 c_i / c_max`` over its
       items and keeps the ``2k`` itemsets of two or more top items with the largest guesses
       (:meth:`candidate_itemsets`);
    3. group 2 reports how many candidate itemsets its set contains (subsets of ``v``), and the server picks
       ``l`` and the update factor as in SVIM's step 2;
    4. group 3 reports the candidate itemsets it contains with PSFO(``l``) over the candidates;
    5. the server corrects by the update factor, scales to the population and returns the top k among the
       items of step 1 and the candidate itemsets (:meth:`estimate`).

    * Neighbour relation: local, any two item sets of one client. Sensitivity: one report per user.
    * Privacy loss: ``PureDP(epsilon)`` per user (each user is in exactly one group and reports once).
    * Released variances as in :class:`SVIM`.

    >>> import numpy as np
    >>> gen = np.random.default_rng(2)
    >>> sets = [gen.choice(6, size=gen.integers(1, 4), replace=False) for _ in range(4000)]
    >>> found = SVSM(epsilon=4, domain_size=6, k=3).run(sets, rng=gen)
    >>> len(found.itemsets), found.estimate.counts.shape
    (3, (3,))
    """

    def __init__(
        self,
        *,
        epsilon: Number,
        domain_size: int,
        k: int,
        split: Sequence[float] = (0.5, 0.1, 0.4),
        percentile: float = 0.9,
    ) -> None:
        super().__init__(
            epsilon=epsilon,
            domain_size=domain_size,
            k=k,
            least_k=3,
            most_k=_MAX_SVSM_K,
            split=split,
            percentile=percentile,
            name="SVSM",
        )
        self._svim = SVIM(epsilon=self._epsilon, domain_size=self._d, k=self._k, percentile=percentile)

    @property
    def svim(self) -> SVIM:
        """The item miner that group 1 (protocol group 0) runs; groups 2 and 3 report itemset sizes and
        itemsets."""
        return self._svim

    def candidate_itemsets(self, items: FrequentItems) -> tuple[tuple[int, ...], ...]:
        """Step 2 (server): the ``2k`` itemsets of the top items with the largest guessed frequencies."""
        return _guessed_itemsets(items, 2 * self._k)

    def report_sizes(
        self,
        sets: UserSets | Sequence[ArrayLike] | NDArray[Any],
        candidates: Sequence[Sequence[int]],
        rng: Rng = None,
    ) -> Reports:
        """Step 3 (client): each user's epsilon-LDP report of how many candidate itemsets it contains."""
        itemsets = _check_itemsets(candidates, self._d)
        held = _held_itemsets(as_user_sets(sets, self._d), itemsets, self._d)
        return self._rounds.report_sizes(held, _itemset_key(itemsets), len(itemsets), resolve_source(rng))

    def choose_length(self, reports: Reports, candidates: Sequence[Sequence[int]]) -> LengthChoice:
        """Step 3 (server): the padding length and the update factor."""
        itemsets = _check_itemsets(candidates, self._d)
        return self._rounds.choose_length(reports, _itemset_key(itemsets), len(itemsets))

    def report_itemsets(
        self,
        sets: UserSets | Sequence[ArrayLike] | NDArray[Any],
        candidates: Sequence[Sequence[int]],
        length: int,
        rng: Rng = None,
    ) -> Reports:
        """Step 4 (client): each user's epsilon-LDP PSFO(``length``) report of the candidates it contains."""
        itemsets = _check_itemsets(candidates, self._d)
        held = _held_itemsets(as_user_sets(sets, self._d), itemsets, self._d)
        key = _itemset_key(itemsets)
        return self._rounds.report(held, key, len(itemsets), length, resolve_source(rng))

    def estimate(
        self,
        reports: Reports,
        candidates: Sequence[Sequence[int]],
        choice: LengthChoice,
        items: FrequentItems,
        n_users: int,
    ) -> FrequentItemsets:
        """Step 5 (server): the top-k of the items and the candidate itemsets, counts among ``n_users``."""
        itemsets = _check_itemsets(candidates, self._d)
        _check_population(n_users, reports.n)
        if items.estimate.n != n_users:
            raise ArgumentError(
                f"the items were estimated for {items.estimate.n} users, not n_users = {n_users}."
            )
        group = self._rounds.estimate(reports, _itemset_key(itemsets), len(itemsets), choice)
        sets_estimate = _to_population(group, n_users)
        every = CountEstimate(
            np.concatenate([items.estimate.counts, sets_estimate.counts]),
            np.concatenate([items.estimate.variance, sets_estimate.variance]),
            n_users,
            self.privacy_loss,
        )
        labels = [(int(i),) for i in items.items] + list(itemsets)
        top = ranked(every, self._k)
        return FrequentItemsets(
            itemsets=tuple(labels[i] for i in top.tolist()),
            estimate=take_estimates(every, top),
            candidates=itemsets,
            candidate_estimate=sets_estimate,
            length_choice=choice,
            items=items,
        )

    #: Deprecated name of :meth:`estimate` (removed in the next release).
    estimate_itemsets = deprecated_alias("estimate")

    def run(self, sets: UserSets | Sequence[ArrayLike] | NDArray[Any], rng: Rng = None) -> FrequentItemsets:
        """All steps on ``sets`` (one set per user; each user reports once)."""
        data = as_user_sets(sets, self._d)
        source = resolve_source(rng)
        groups = _assign_groups(data.n_users, self._split, source)
        step = [data.select(np.flatnonzero(groups == g)) for g in range(3)]
        items = self._svim._mine(step[0], source, data.n_users)
        itemsets = self.candidate_itemsets(items)
        choice = self.choose_length(self.report_sizes(step[1], itemsets, rng=source), itemsets)
        reports = self.report_itemsets(step[2], itemsets, choice.length, rng=source)
        return self.estimate(reports, itemsets, choice, items, data.n_users)
