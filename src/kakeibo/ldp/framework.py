"""The pure-LDP framework (Wang, Blocki, Li and Jha 2017, "Locally Differentially Private Protocols for
Frequency Estimation", USENIX Security; seed 003): every frequency oracle is a randomizer plus a *support*
function.

A report ``y`` supports a set of values ``S(y)``. The oracle is *pure* when a client holding ``v`` sends a
report supporting ``v`` with probability ``p*`` and, holding any ``v' != v``, one supporting ``v`` with
probability ``q* < p*``. Then one estimator serves every oracle (Wang et al., Eq. (1))::

    c(v) = (#{j : v in S(y_j)} - n q*) / (p* - q*)

unbiased for the number of clients holding ``v``, with variance (Wang et al., Eq. (2); "fixed clients")::

    Var c(v) = n q*(1 - q*) / (p* - q*)^2 + c_v (1 - p* - q*) / (p* - q*)

Neighbour relation (local DP): any two values of one client; ``PureDP(epsilon)`` per client and report,
whoever sees the report, the server included.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from fractions import Fraction
from typing import Any, ClassVar

import numpy as np
from numpy.typing import ArrayLike, NDArray

from ..errors import ArgumentError, ArgumentTypeError
from ..mechanisms.base import Rng
from ..noise import resolve_source
from ..noise.source import RandomSource
from ..privacy import Number, PureDP, as_fraction
from .estimates import CountEstimate, deprecated_alias
from .reports import Param, Reports

__all__ = ["CountEstimate", "FrequencyOracle", "LocalRandomizer", "check_domain_values", "check_integer"]

FloatArray = NDArray[np.float64]
IntArray = NDArray[np.int64]

#: Largest epsilon accepted: beyond it every report is essentially the true value.
MAX_EPSILON = 64


def check_domain_values(values: ArrayLike, domain_size: int, name: str = "values") -> IntArray:
    """``values`` as a 1-d int64 array of indices in ``[0, domain_size)``, or a one-sentence error."""
    arr = np.asarray(values)
    if arr.ndim != 1:
        raise ArgumentError(f"{name} must be a 1-d array with one value per client, got shape {arr.shape}.")
    if arr.dtype.kind == "b":
        arr = arr.astype(np.int64)
    elif arr.dtype.kind == "f":
        if not np.all(np.isfinite(arr)) or not np.all(arr == np.rint(arr)):
            raise ArgumentError(f"{name} must be whole indices in 0..{domain_size - 1}.")
    elif arr.dtype.kind not in "iu":
        raise ArgumentTypeError(f"{name} must be integer indices, got an array of {arr.dtype}.")
    if arr.size and (arr.min() < 0 or arr.max() >= domain_size):
        bad = arr[(arr < 0) | (arr >= domain_size)][0]
        raise ArgumentError(f"{name} must be indices in 0..{domain_size - 1}; got {int(bad)}.")
    return arr.astype(np.int64, copy=False)


def check_payload_range(reports: Reports, name: str, bound: int, columns: int | None = None) -> None:
    """Raise ``ValueError`` unless ``reports[name]`` is an integer array of values in ``[0, bound)`` with
    ``columns`` columns (a 1-d array when ``columns`` is None)."""
    arr = reports.arrays.get(name)
    if arr is None or arr.dtype.kind not in "iu":
        raise ArgumentError(f"{reports.protocol} reports need an integer array {name!r}.")
    expected = 1 if columns is None else 2
    if arr.ndim != expected or (columns is not None and arr.shape[1] != columns):
        raise ArgumentError(
            f"{reports.protocol} report array {name!r} has shape {arr.shape}, "
            "which this server does not expect."
        )
    if arr.size and (int(arr.min()) < 0 or int(arr.max()) >= bound):
        raise ArgumentError(f"{reports.protocol} report array {name!r} holds values outside 0..{bound - 1}.")


def check_integer(value: int, name: str, low: int, high: int, shown_high: str | None = None) -> int:
    """``value`` as an ``int`` if it is an integer (not a bool) in ``low..high``, else a one-sentence
    ``TypeError``/``ValueError`` naming ``name`` (``shown_high`` spells ``high`` in the message)."""
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise ArgumentTypeError(f"{name} must be an integer, not {type(value).__name__}.")
    if not low <= value <= high:
        raise ArgumentError(f"{name} must lie in {low}..{shown_high or high}, got {int(value)}.")
    return int(value)


def check_domain_size(domain_size: int) -> int:
    return check_integer(domain_size, "domain_size", 2, 2**40, "2**40")


def check_epsilon(epsilon: Number) -> Fraction:
    eps = as_fraction(epsilon, "epsilon")
    if not 0 < eps <= MAX_EPSILON:
        raise ArgumentError(f"epsilon must lie in (0, {MAX_EPSILON}], got {float(eps):g}.")
    return eps


class LocalRandomizer:
    """What every local randomizer has: an epsilon, its ``PureDP`` loss per report, a neighbour relation."""

    neighbour = (
        "local: any two values of one client (each report hides its client's value, even from the server)"
    )

    def __init__(self, *, epsilon: Number) -> None:
        self._epsilon = check_epsilon(epsilon)

    @property
    def epsilon(self) -> float:
        return float(self._epsilon)

    @property
    def privacy_loss(self) -> PureDP:
        """``PureDP(epsilon)`` per client: each client's report is epsilon-LDP."""
        return PureDP(self._epsilon)

    def __repr__(self) -> str:
        return f"{type(self).__name__}(epsilon={self.epsilon!r})"


class FrequencyOracle(LocalRandomizer, ABC):
    """An epsilon-LDP frequency oracle over the values ``0 .. domain_size - 1`` (see the module docstring).

    Client side: :meth:`randomize` (one report per client, exact coins). Server side: :meth:`estimate`
    (counts with variances), :meth:`support_counts`. Both sides agree through
    :attr:`params`, which travel with every :class:`~kakeibo.ldp.reports.Reports` batch.
    """

    #: Protocol name written into every report batch.
    protocol: ClassVar[str]

    def __init__(self, *, epsilon: Number, domain_size: int) -> None:
        super().__init__(epsilon=epsilon)
        self._d = check_domain_size(domain_size)

    # -- description ---------------------------------------------------------------------------------------
    @property
    def domain_size(self) -> int:
        return self._d

    @property
    @abstractmethod
    def p_star(self) -> float:
        """Probability that a report supports its client's own value."""

    @property
    @abstractmethod
    def q_star(self) -> float:
        """Probability that a report supports one given value its client does not hold."""

    @property
    @abstractmethod
    def report_bits(self) -> int:
        """Bits one report takes on the wire (communication cost)."""

    @property
    def params(self) -> dict[str, Param]:
        """Everything the server needs to decode this oracle's reports."""
        return {"epsilon": str(self._epsilon), "domain_size": self._d, **self._extra_params()}

    def _extra_params(self) -> dict[str, Param]:
        return {}

    def __repr__(self) -> str:
        return f"{type(self).__name__}(epsilon={self.epsilon!r}, domain_size={self._d})"

    # -- client --------------------------------------------------------------------------------------------
    def randomize(self, values: ArrayLike, rng: Rng = None) -> Reports:
        """One epsilon-LDP report per client (``values[j]`` is client ``j``'s value)."""
        truth = check_domain_values(values, self._d)
        return Reports(self.protocol, self.params, self._perturb(truth, resolve_source(rng)))

    @abstractmethod
    def _perturb(self, values: IntArray, source: RandomSource) -> dict[str, NDArray[Any]]:
        """The report arrays for these (validated) values."""

    # -- server --------------------------------------------------------------------------------------------
    def check_reports(self, reports: Reports) -> None:
        """Raise ``ValueError`` unless ``reports`` were made by this oracle (protocol and parameters) and
        their arrays have the shapes and ranges it sends."""
        if not isinstance(reports, Reports):
            raise ArgumentTypeError(f"an estimate reads a batch of Reports, got {type(reports).__name__}.")
        reports.check(self.protocol, self.params)
        self._check_payload(reports)

    def support_counts(self, reports: Reports) -> FloatArray:
        """How many reports support each value (length ``domain_size``)."""
        self.check_reports(reports)
        return self._support_counts(reports)

    @abstractmethod
    def _check_payload(self, reports: Reports) -> None:
        """Raise ``ValueError`` unless the report arrays have the shapes and ranges this oracle sends."""

    @abstractmethod
    def _support_counts(self, reports: Reports) -> FloatArray: ...

    def supports(self, reports: Reports, values: ArrayLike) -> NDArray[np.bool_]:
        """Whether report ``j`` supports ``values[j]`` (one value per report)."""
        self.check_reports(reports)
        truth = check_domain_values(values, self._d)
        if truth.size != reports.n:
            raise ArgumentError(f"supports needs one value per report ({reports.n}), got {truth.size}.")
        return self._supports(reports, truth)

    @abstractmethod
    def _supports(self, reports: Reports, values: IntArray) -> NDArray[np.bool_]: ...

    def estimate(self, reports: Reports, candidates: ArrayLike | None = None) -> CountEstimate:
        """Unbiased estimated number of clients holding each value (Wang et al. 2017, Eq. (1)) with each
        count's variance (Eq. (2), the clipped estimate plugged in).

        Every value of the domain, or only the ``candidates`` listed, in their order: for domains too large
        to enumerate (heavy hitters over ``2^32`` values) the cost is then one support test per (report,
        candidate), never per domain value.
        """
        if candidates is None:
            support = self.support_counts(reports)
        else:
            self.check_reports(reports)
            wanted = check_domain_values(candidates, self._d, "candidates")
            support = self._candidate_support_counts(reports, wanted)
        return self._with_variance(self._unbiased(support, reports.n), reports.n)

    #: Deprecated names of :meth:`estimate` (removed in the next release).
    estimate_with_variance = deprecated_alias("estimate")
    estimate_candidates = deprecated_alias("estimate")

    def _candidate_support_counts(self, reports: Reports, candidates: IntArray) -> FloatArray:
        """How many reports support each candidate (generic: one vectorised support test per candidate)."""
        n = reports.n
        return np.array(
            [self._supports(reports, np.full(n, c, dtype=np.int64)).sum() for c in candidates.tolist()],
            dtype=np.float64,
        )

    def _with_variance(self, counts: FloatArray, n: int) -> CountEstimate:
        variance = self.count_variance(n, np.clip(counts, 0, n))
        return CountEstimate(counts=counts, variance=variance, n=n, privacy_loss=self.privacy_loss)

    def count_variance(self, n: int, counts: ArrayLike) -> FloatArray:
        """Exact variance of the estimated count of a value held by ``counts`` of ``n`` clients."""
        c = np.asarray(counts, dtype=np.float64)
        holds, other = self._indicator_variances()
        spread = self.p_star - self.q_star
        return np.asarray((c * holds + (n - c) * other) / spread**2, dtype=np.float64)

    def _indicator_variances(self) -> tuple[float, float]:
        """Variance of one report's support indicator for a value its client holds, and for one it does
        not."""
        p, q = self.p_star, self.q_star
        return p * (1 - p), q * (1 - q)

    def _unbiased(self, support: FloatArray, n: int) -> FloatArray:
        return np.asarray((support - n * self.q_star) / (self.p_star - self.q_star), dtype=np.float64)
