"""Direct encoding: generalized randomized response (GRR) as a pure-LDP frequency oracle.

Wang et al. 2017, Sec. 4.1 ("direct encoding", DE): report the true value with probability
``p = e^eps / (e^eps + d - 1)``, otherwise one of the other ``d - 1`` values uniformly (``q = p e^-eps``
each). The support of a report ``y`` is ``{y}``, so ``p* = p`` and ``q* = q``; the variance
``n (d - 2 + e^eps) / (e^eps - 1)^2`` (at frequency 0) grows with ``d``, which is why DE only wins for small
domains (``d < 3 e^eps + 2``). Binary randomized response, the seed's two-coin survey included, is the
case ``d = 2``.

The sampling is kakeibo's exact randomized response (:class:`kakeibo.mechanisms.RandomizedResponse`).
"""

from __future__ import annotations

from typing import Any

import numpy as np
from numpy.typing import NDArray

from ..mechanisms import RandomizedResponse
from ..noise.source import RandomSource
from ..privacy import Number
from .framework import FloatArray, FrequencyOracle, IntArray, check_payload_range
from .reports import Param, Reports

__all__ = ["GRR"]


class GRR(FrequencyOracle):
    """Generalized randomized response (direct encoding) over ``0 .. domain_size - 1``.

    * Neighbour relation: local, any two values of one client. Privacy loss ``PureDP(epsilon)`` per report.
    * ``p* = e^eps' / (e^eps' + d - 1)``, ``q* = p* e^-eps'`` where ``eps' <= epsilon`` is the exact
      rational the sampler uses (see :class:`~kakeibo.mechanisms.RandomizedResponse`).

    >>> import numpy as np
    >>> grr = GRR(epsilon=1, domain_size=4)
    >>> reports = grr.randomize(np.array([0, 1, 2, 3, 3]), rng=np.random.default_rng(0))
    >>> grr.estimate(reports).counts.shape
    (4,)
    """

    protocol = "GRR"

    def __init__(self, *, epsilon: Number, domain_size: int) -> None:
        super().__init__(epsilon=epsilon, domain_size=domain_size)
        self._rr = RandomizedResponse(epsilon=self._epsilon, categories=self._d)

    @classmethod
    def two_coin(cls) -> GRR:
        """The seed's two-coin survey: truth on heads, else a fair yes/no (``p* = 3/4``, ``q* = 1/4``,
        epsilon = ln 3). The estimated count of "yes" over ``n`` is the seed's ``2 (X - 1/4)``."""
        rr = RandomizedResponse.two_coin()
        oracle = cls(epsilon=rr.privacy_loss.epsilon, domain_size=2)
        oracle._rr = rr
        return oracle

    def _extra_params(self) -> dict[str, Param]:
        return {"variant": self._rr.protocol}

    @property
    def p_star(self) -> float:
        return self._rr.p

    @property
    def q_star(self) -> float:
        return self._rr.q

    @property
    def report_bits(self) -> int:
        return max(1, (self._d - 1).bit_length())

    def _perturb(self, values: IntArray, source: RandomSource) -> dict[str, NDArray[Any]]:
        reports = np.asarray(self._rr.release(values, rng=source), dtype=np.int64)
        return {"value": reports.astype(value_dtype(self._d))}

    def _support_counts(self, reports: Reports) -> FloatArray:
        return np.bincount(reports["value"].astype(np.intp), minlength=self._d).astype(np.float64)

    def _candidate_support_counts(self, reports: Reports, candidates: IntArray) -> FloatArray:
        seen, counts = np.unique(reports["value"].astype(np.int64), return_counts=True)
        at = np.searchsorted(seen, candidates)
        found = at < seen.size
        found[found] = seen[at[found]] == candidates[found]
        out = np.zeros(candidates.size, dtype=np.float64)
        out[found] = counts[at[found]]
        return out

    def _check_payload(self, reports: Reports) -> None:
        check_payload_range(reports, "value", self._d)

    def _supports(self, reports: Reports, values: IntArray) -> NDArray[np.bool_]:
        return np.asarray(reports["value"] == values)


def value_dtype(domain_size: int) -> type[np.unsignedinteger[Any]]:
    """The narrowest unsigned integer type holding ``0 .. domain_size - 1``."""
    for dtype in (np.uint8, np.uint16, np.uint32):
        if domain_size - 1 <= np.iinfo(dtype).max:
            return dtype
    return np.uint64
