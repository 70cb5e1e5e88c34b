"""The set-valued baselines SVIM is measured against (seed 003, "Itemset mining"): LDPMiner and sampling
RAPPOR (Qin, Yang, Yu, Khalil, Xiao and Ren, "Heavy Hitter Estimation over Set-Valued Data with Local
Differential Privacy", CCS 2016).

* :class:`LDPMiner` (Qin et al., Sec. 5). Every user reports twice, at ``epsilon/2`` each. Phase 1: the
  user pads its set to the bound ``L`` (or cuts it to ``L`` items at random), samples one item and reports
  it with a frequency oracle (in Wang et al. 2018's terms, PSFO(L, FO, eps/2)); the server estimates every
  item's count (``L`` times the oracle's estimate) and keeps the ``2k`` largest as candidates. Phase 2: the
  user reports its set's intersection with the candidates, padded to ``2k`` (it never needs cutting),
  through PSFO(2k, FO, eps/2) over the candidates; those estimates, unbiased for every candidate, give the
  top ``k``. The oracle is OLH by default (the succinct histogram's frequency oracle in the paper is a
  random projection, which local hashing matches; Wang et al. 2017); GRR, with the sampling's privacy
  amplification, on request.
* :class:`SamplingRAPPOR` (Qin et al., Sec. 4, the direct approach): every user pads its set to ``L``,
  samples one item and reports it once through one-time RAPPOR at the full ``epsilon``; the server decodes
  every item's count by RAPPOR's regression (:meth:`~kakeibo.ldp.rappor.OneTimeRAPPOR.estimate`, with the
  padding dummies as candidates of their own) and multiplies by ``L``. One-time RAPPOR rather than the
  two-step one: each user reports once, so the instantaneous step would only add noise.

Error: LDPMiner's phase-2 estimates have the variance of PSFO(2k, FO, eps/2)
(:meth:`~kakeibo.ldp.padding.PaddingSamplingOracle.count_variance`: ``(2k)^2`` times the oracle's variance
at ``eps/2``, sampling included); sampling RAPPOR's, ``L^2`` times RAPPOR's regression variance (its
sandwich standard errors) plus the sampling's ``c (L - 1)`` (:meth:`SamplingRAPPOR.estimate`).
Both grow with the padding length, which is what SVIM's length choice avoids.

Privacy. Neighbour relation: local, any two item sets of one client. Sensitivity: not applicable (each user
randomizes its own set). Privacy loss: ``PureDP(epsilon)`` per user: LDPMiner's two reports compose
sequentially (``eps/2 + eps/2``), each a randomized function of one sampled value through an
``eps/2``-LDP oracle; sampling RAPPOR's one report goes through one-time RAPPOR whose ``epsilon_infinity``
is at most ``epsilon`` (its ``f`` rounded towards less loss and checked exactly).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np
from numpy.typing import ArrayLike, NDArray

from ..errors import ArgumentError
from ..mechanisms.base import Rng
from ..noise import resolve_source
from ..privacy import Number
from ._coins import dyadic_at_least
from .estimates import CountEstimate, deprecated_alias, failure_probability
from .framework import IntArray, LocalRandomizer, check_domain_size, check_integer
from .itemsets import TopItems, check_candidates, ranked, take_estimates
from .padding import SET_NEIGHBOUR, PaddingSamplingOracle, UserSets, as_user_sets, padded_sample
from .rappor import COIN_BITS, OneTimeRAPPOR
from .reports import Reports

__all__ = ["LDPMiner", "SamplingRAPPOR"]

Sets = UserSets | Sequence[ArrayLike] | NDArray[Any]


class LDPMiner(LocalRandomizer):
    """LDPMiner over items ``0 .. domain_size - 1`` with set-size bound ``length`` (``L``), returning the top
    ``k`` (module docstring).

    * Neighbour relation: local, any two item sets of one client.
    * Sensitivity: not applicable.
    * Privacy loss: ``PureDP(epsilon)`` per user: two reports at ``epsilon / 2`` each.

    >>> gen = np.random.default_rng(2)
    >>> sets = [gen.choice(6, size=gen.integers(1, 3), replace=False) for _ in range(20_000)]
    >>> found = LDPMiner(epsilon=4, domain_size=6, k=2, length=2).run(sets, rng=gen)
    >>> found.items.shape, found.candidates.size
    ((2,), 4)
    """

    neighbour = SET_NEIGHBOUR

    def __init__(
        self, *, epsilon: Number, domain_size: int, k: int, length: int, oracle: str = "OLH"
    ) -> None:
        super().__init__(epsilon=epsilon)
        self._d = check_domain_size(domain_size)
        self._k = check_integer(k, "k", 1, self._d)
        self._oracle = oracle
        half = self._epsilon / 2
        self._discovery = PaddingSamplingOracle(
            epsilon=half, domain_size=self._d, length=length, oracle=oracle
        )
        self._candidates = min(2 * self._k, self._d)
        self._counting = PaddingSamplingOracle(
            epsilon=half, domain_size=max(self._candidates, 2), length=self._candidates, oracle=oracle
        )

    @property
    def k(self) -> int:
        return self._k

    @property
    def discovery(self) -> PaddingSamplingOracle:
        """Phase 1's randomizer: PSFO(L, FO, eps/2) over all items."""
        return self._discovery

    @property
    def counting(self) -> PaddingSamplingOracle:
        """Phase 2's randomizer: PSFO(2k, FO, eps/2) over the candidates' positions."""
        return self._counting

    def __repr__(self) -> str:
        return (
            f"LDPMiner(epsilon={self.epsilon!r}, domain_size={self._d}, k={self._k}, "
            f"length={self._discovery.length}, oracle={self._oracle!r})"
        )

    # -- phase 1 -------------------------------------------------------------------------------------------
    def report_items(self, sets: Sets, rng: Rng = None) -> Reports:
        """Phase 1 (client): each user's ``epsilon/2``-LDP report of one sampled item of its padded set."""
        return self._discovery.randomize(sets, rng=rng)

    def find_candidates(self, reports: Reports) -> IntArray:
        """Phase 1 (server): the ``2k`` items with the largest estimates, largest first."""
        return ranked(self._discovery.estimate(reports), self._candidates)

    # -- phase 2 -------------------------------------------------------------------------------------------
    def report_candidates(self, sets: Sets, candidates: ArrayLike, rng: Rng = None) -> Reports:
        """Phase 2 (client): each user's ``epsilon/2``-LDP report of one sampled candidate it holds (its
        intersection with the candidates, padded to ``2k``)."""
        found = self._check(candidates)
        held = as_user_sets(sets, self._d).positions_in(found, self._d)
        return self._counting.randomize(held, rng=rng)

    def estimate(self, reports: Reports, candidates: ArrayLike) -> TopItems:
        """Phase 2 (server): every candidate's estimated count and variance, and the top ``k``."""
        found = self._check(candidates)
        phase = self._counting.estimate(reports)
        every = CountEstimate(phase.counts, phase.variance, phase.n, self.privacy_loss)
        top = ranked(every, self._k)
        return TopItems(
            items=found[top], estimate=take_estimates(every, top), candidates=found, candidate_estimate=every
        )

    #: Deprecated name of :meth:`estimate` (removed in the next release).
    estimate_candidates = deprecated_alias("estimate")

    def run(self, sets: Sets, rng: Rng = None) -> TopItems:
        """Both phases on ``sets`` (one set per user; every user reports in both)."""
        data = as_user_sets(sets, self._d)
        source = resolve_source(rng)
        found = self.find_candidates(self.report_items(data, rng=source))
        return self.estimate(self.report_candidates(data, found, rng=source), found)

    def _check(self, candidates: ArrayLike) -> IntArray:
        found = check_candidates(candidates, self._d)
        if found.size != self._candidates:
            raise ArgumentError(
                f"phase 2 takes the {self._candidates} candidates of phase 1, got {found.size}."
            )
        return found


class SamplingRAPPOR(LocalRandomizer):
    """Sampling RAPPOR over items ``0 .. domain_size - 1`` with set-size bound ``length`` (``L``), returning
    the top ``k``, through one-time RAPPOR with ``bloom_bits`` bits, ``hashes`` hash functions and
    ``cohorts`` cohorts calibrated to ``epsilon`` (module docstring).

    * Neighbour relation: local, any two item sets of one client.
    * Sensitivity: not applicable.
    * Privacy loss: ``PureDP(epsilon)`` per user (one report; one-time RAPPOR's loss is at most epsilon).

    >>> gen = np.random.default_rng(3)
    >>> sets = [gen.choice(6, size=gen.integers(1, 3), replace=False) for _ in range(20_000)]
    >>> SamplingRAPPOR(epsilon=4, domain_size=6, k=2, length=2).run(sets, rng=gen).items.shape
    (2,)
    """

    neighbour = SET_NEIGHBOUR

    def __init__(
        self,
        *,
        epsilon: Number,
        domain_size: int,
        k: int,
        length: int,
        bloom_bits: int = 128,
        hashes: int = 2,
        cohorts: int = 16,
        hash_seed: int = 0,
    ) -> None:
        super().__init__(epsilon=epsilon)
        self._d = check_domain_size(domain_size)
        self._k = check_integer(k, "k", 1, self._d)
        self._l = check_integer(length, "length", 1, 1 << 16)
        h = check_integer(hashes, "hashes", 1, 64)
        target = 1 / (1 + math.exp(float(self._epsilon) / (2 * h)))  # f/2 with 2h ln((1 - f/2)/(f/2)) = eps
        half_f = dyadic_at_least(target, COIN_BITS)
        self._rappor = OneTimeRAPPOR(k=bloom_bits, h=h, m=cohorts, f=2 * half_f, hash_seed=hash_seed)
        if self._rappor.privacy_loss.epsilon > self._epsilon:
            raise ArgumentError(
                f"epsilon = {self.epsilon:g} is too small for one-time RAPPOR with {h} hashes."
            )

    @property
    def k(self) -> int:
        return self._k

    @property
    def length(self) -> int:
        return self._l

    @property
    def rappor(self) -> OneTimeRAPPOR:
        """The one-time RAPPOR every user reports its sampled item through."""
        return self._rappor

    def __repr__(self) -> str:
        return (
            f"SamplingRAPPOR(epsilon={self.epsilon!r}, domain_size={self._d}, k={self._k}, length={self._l}, "
            f"rappor={self._rappor!r})"
        )

    def randomize(self, sets: Sets, rng: Rng = None) -> Reports:
        """Each user's epsilon-LDP report: one item of its set padded to ``L`` (padding dummies are the
        values ``d .. d + L - 1``), through one-time RAPPOR."""
        data = as_user_sets(sets, self._d)
        source = resolve_source(rng)
        return self._rappor.randomize(padded_sample(data, self._l, self._d, source), rng=source)

    def estimate(
        self, reports: Reports, beta: float | None = None, *, alpha: float | None = None
    ) -> CountEstimate:
        """Every item's estimated count (``L`` times RAPPOR's decoded count of it; 0 for the items the LASSO
        screen drops) with its variance (0 for dropped items): ``L^2`` times RAPPOR's squared standard error
        (the randomized response, given what each user sampled) plus the sampling's own, ``L^2 c (1/L)(1 -
        1/L) = c (L - 1)`` for an item held by ``c`` users with sets of at most ``L`` items (the estimate,
        clipped, stands in for ``c``). The padding dummies are decoded as candidates too: they are few
        values held by many users, which the regression's background column (values that hash like random
        ones) would misplace onto the items sharing their Bloom bits. ``beta``: the family-wise failure
        probability of RAPPOR's detection (``alpha`` its deprecated name)."""
        level, _ = failure_probability(beta, alpha)
        decoded = self._rappor.estimate(reports, np.arange(self._d + self._l), level)
        counts = decoded.counts[: self._d] * self._l
        selected = decoded.selected[: self._d]
        sampling = np.clip(counts, 0, reports.n) * (self._l - 1)
        variance = np.where(selected, decoded.std_errors[: self._d] ** 2 * self._l**2 + sampling, 0.0)
        return CountEstimate(counts, np.asarray(variance, dtype=np.float64), reports.n, self.privacy_loss)

    def run(self, sets: Sets, rng: Rng = None) -> TopItems:
        """Every user reports once; the top ``k`` items of the decoded counts."""
        every = self.estimate(self.randomize(sets, rng=rng))
        top = ranked(every, self._k)
        items = np.arange(self._d)
        return TopItems(
            items=top, estimate=take_estimates(every, top), candidates=items, candidate_estimate=every
        )
