"""What the public-coin heavy-hitter protocols share (:class:`~kakeibo.ldp.bitstogram.Bitstogram`, the
:class:`~kakeibo.ldp.succinct.SuccinctHistogram` and the
:class:`~kakeibo.ldp.expander_sketch.PrivateExpanderSketch`): some groups of clients report what lets the
server *find* candidate keys, the last group reports through a :class:`~kakeibo.ldp.hashtogram.Hashtogram`
that *counts* them, and the ``k`` largest counts are returned with the Hashtogram's error bound.

Privacy (every subclass): neighbour relation local, any two values of one client; each client is put in one
group by exact coins independent of its value and sends one report through an epsilon-LDP randomizer, so
``PureDP(epsilon)`` per client (parallel composition over the groups).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from typing import Any, ClassVar

import numpy as np
from numpy.typing import ArrayLike

from ..noise.source import RandomSource
from ..privacy import Number
from .estimates import MedianHeavyHitters, deprecated_alias
from .framework import IntArray, LocalRandomizer, check_integer
from .hashtogram import Hashtogram
from .heavy_hitters import group_batches
from .reports import Param, Reports

__all__ = ["CountedHeavyHitters", "MedianHeavyHitters"]


class CountedHeavyHitters(LocalRandomizer, ABC):
    """Finding groups, then a Hashtogram group that counts ``bits``-bit keys (``count_buckets`` buckets,
    ``repetitions`` repetitions); the ``k`` largest candidates are returned (module docstring)."""

    protocol: ClassVar[str]

    def __init__(
        self, *, epsilon: Number, bits: int, k: int, count_buckets: int, repetitions: int, hash_seed: int
    ) -> None:
        super().__init__(epsilon=epsilon)
        self._counts = Hashtogram(
            epsilon=self._epsilon,
            bits=bits,
            buckets=count_buckets,
            repetitions=repetitions,
            hash_seed=hash_seed + 1,
        )
        self._bits = self._counts.bits
        self._k = check_integer(k, "k", 1, 1 << 16)

    @property
    def bits(self) -> int:
        return self._bits

    @property
    def k(self) -> int:
        return self._k

    @property
    def count_oracle(self) -> Hashtogram:
        """The Hashtogram that counts the candidates (the last group's clients report through it)."""
        return self._counts

    @property
    @abstractmethod
    def groups(self) -> int:
        """Report batches: the finding groups, then the Hashtogram's."""

    @abstractmethod
    def group_params(self, group: int) -> dict[str, Param]:
        """The parameters of group ``group``'s batches (:meth:`_count_params` for the last)."""

    def _count_params(self) -> dict[str, Param]:
        return {**self._counts.params, "group": self.groups - 1, "heavy_hitters": repr(self)}

    # -- client --------------------------------------------------------------------------------------------
    def encode(self, values: ArrayLike | Sequence[Any]) -> IntArray:
        """The ``bits``-bit key of each value (see :meth:`Hashtogram.encode`)."""
        return self._counts.encode(values)

    def _count_batch(self, keys: IntArray, source: RandomSource) -> Reports:
        """The counting group's batch: its clients' Hashtogram reports under this protocol's name."""
        counted = self._counts.randomize(keys, rng=source)
        return Reports(self.protocol, self._count_params(), dict(counted.arrays))

    # -- server --------------------------------------------------------------------------------------------
    @abstractmethod
    def _check_finding(self, batch: Reports) -> None:
        """Raise ``ValueError`` unless one finding group's joined batch holds only what clients send."""

    @abstractmethod
    def _candidates(self, groups: Sequence[Reports]) -> IntArray:
        """The candidate keys found from the groups' joined batches."""

    def candidates(self, batches: Sequence[Reports]) -> IntArray:
        """The candidate keys (sorted, distinct) the finding groups' reports give."""
        return self._candidates(self._collect(batches))

    def estimate(self, batches: Sequence[Reports], beta: float = 0.05) -> MedianHeavyHitters:
        """The (at most) ``k`` candidates of largest estimated count among all clients (Hashtogram medians of
        the counting group, scaled up), with the Hashtogram's error bound at ``beta``. As for any top-k
        selection, the counts of the keys returned lean high (they were chosen for being large). When fewer
        than ``k`` keys are heavy enough to be found, decoded noise can fill the list with keys nobody
        holds (Bitstogram and the succinct histogram do not threshold their candidates): a count within
        ``bound`` of zero does not show a key is held."""
        groups = self._collect(batches)
        found = self._candidates(groups)
        population = sum(batch.n for batch in groups)
        inner = Reports(self._counts.protocol, self._counts.params, groups[-1].arrays)
        estimate = self._counts.estimate(inner, found, beta, population=population)
        top = np.argsort(-estimate.counts, kind="stable")[: self._k]
        return MedianHeavyHitters(
            counts=estimate.counts[top],
            bound=estimate.bound,
            confidence=estimate.confidence,
            n=population,
            privacy_loss=self.privacy_loss,
            values=found[top],
        )

    #: Deprecated name of :meth:`estimate` (removed in the next release).
    identify = deprecated_alias("estimate")

    def _collect(self, batches: Sequence[Reports]) -> list[Reports]:
        """The batches of each group joined into one, each checked against its group's parameters and
        payload."""
        joined = group_batches(batches, self.protocol, self.groups, self.group_params)
        for batch in joined[:-1]:
            self._check_finding(batch)
        self._counts.check_reports(Reports(self._counts.protocol, self._counts.params, joined[-1].arrays))
        return joined
