"""Multidimensional records under eps-LDP by attribute sampling (Wang, Xiao, Yang, Zhao, Hui, Shin, Shin and
Yu 2019, "Collecting and Analyzing Multidimensional Data with Local Differential Privacy", ICDE, Sec. IV,
Algorithm 4).

Each client holds a record of ``d`` attributes: numeric ones in ``[-1, 1]`` and, optionally, categorical ones
(codes ``0 .. m - 1``). Splitting epsilon over all ``d`` attributes makes every report very noisy; instead
the client samples ``k = max(1, min(d, floor(eps / 2.5)))`` distinct attributes uniformly at random and
spends ``eps / k`` on each of them (Algorithm 4): a numeric attribute goes through the Duchi, Piecewise or
Hybrid randomizer of :mod:`.numeric` (the paper uses the latter two), a categorical one through OUE (Sec. IV
extends Algorithm 4 to categorical attributes that way). The paper's report is ``t*[A_j] = (d / k) y_j``
for a sampled attribute and ``0`` for the others; the wire carries only the ``k`` sampled indices and their
randomized values ``y_j`` (sparse), and the server applies the public factor ``d / k``.

Estimators (Horvitz-Thompson: attribute ``j`` is sampled with probability ``k / d`` independently of the
data). For a numeric attribute the mean of the ``t*[A_j]`` over ``n`` clients is unbiased, because
``E[t*[A_j]] = (k / d) (d / k) E[y_j] = x_j``. Its per-client variance follows from
``E[t*[A_j]^2] = (k / d) (d / k)^2 (Var_M(x_j) + x_j^2)``::

    Var t*[A_j] = (d / k) (Var_M(x_j) + x_j^2) - x_j^2 = (d / k) Var_M(x_j) + (d / k - 1) x_j^2,

with ``Var_M`` the exact variance of the randomizer at ``eps / k`` (derived here; Sec. IV analyses the same
variance for Algorithm 4 with the Piecewise and Hybrid mechanisms; the second term is the price of
sampling). The mean's variance is the sum of these over the clients divided by ``n^2``. For a categorical
attribute the count of value ``v`` is estimated by ``(d / k) (#{sampled reports with bit v set} - n_j q) /
(p - q)``, ``n_j`` the number of clients that sampled it (the OUE estimator of Wang et al. 2017, Eq. (1),
scaled by ``d / k``); the same argument gives ``Var = (d / k) Var_OUE(c_v) + (d / k - 1) c_v`` with
``Var_OUE`` Wang et al. 2017's Eq. (2).

The sampling uses Floyd's algorithm (Bentley and Floyd 1987, "Programming Pearls: A Sample of Brilliance",
CACM 30(9)) on exact uniform integers, so every ``k``-subset has probability exactly ``1 / C(d, k)``.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Mapping
from fractions import Fraction
from typing import Any, ClassVar

import numpy as np
from numpy.typing import ArrayLike, NDArray

from ..errors import ArgumentError, ArgumentTypeError
from ..mechanisms.base import Rng
from ..noise import resolve_source
from ..noise.exact import uniform_below
from ..noise.source import RandomSource
from ..privacy import Number
from .estimates import CountEstimate, MultidimensionalEstimate, deprecated_alias
from .framework import (
    FloatArray,
    IntArray,
    LocalRandomizer,
    check_domain_size,
    check_domain_values,
    check_integer,
    check_payload_range,
)
from .numeric import DuchiMechanism, HybridMechanism, NumericRandomizer, PiecewiseMechanism
from .reports import Param, Reports
from .unary import OUE

__all__ = ["MultidimensionalEstimate", "MultidimensionalSampling", "sample_attributes", "sample_size"]

#: The numeric randomizers a client may use, by name.
_NUMERIC: dict[str, type[NumericRandomizer]] = {
    "duchi": DuchiMechanism,
    "hybrid": HybridMechanism,
    "piecewise": PiecewiseMechanism,
}

#: Budget per sampled attribute the paper aims at: ``k = floor(eps / 2.5)`` (Sec. IV).
_BUDGET_PER_ATTRIBUTE = Fraction(5, 2)


def sample_size(epsilon: Fraction, dimensions: int) -> int:
    """``k = max(1, min(d, floor(eps / 2.5)))``: how many attributes each client reports
    (Algorithm 4).

    >>> sample_size(Fraction(1), 10), sample_size(Fraction(5), 10), sample_size(Fraction(64), 3)
    (1, 2, 3)
    """
    return max(1, min(dimensions, math.floor(epsilon / _BUDGET_PER_ATTRIBUTE)))


def _check_mechanism(mechanism: str) -> type[NumericRandomizer]:
    if not isinstance(mechanism, str):
        raise ArgumentTypeError(f"mechanism must be a name, not {type(mechanism).__name__}.")
    if mechanism not in _NUMERIC:
        raise ArgumentError(f"mechanism must be one of {sorted(_NUMERIC)}, got {mechanism!r}.")
    return _NUMERIC[mechanism]


def _check_categorical(categorical: Mapping[int, int] | None, dimensions: int) -> dict[int, int]:
    """``{column: domain_size}`` with columns in ``0 .. dimensions - 1``, sorted by column."""
    if categorical is None:
        return {}
    if not isinstance(categorical, Mapping):
        raise ArgumentTypeError(
            f"categorical must map columns to domain sizes, not {type(categorical).__name__}."
        )
    for column in categorical:
        if isinstance(column, bool) or not isinstance(column, (int, np.integer)):
            raise ArgumentTypeError(f"categorical columns must be integers, got {column!r}.")
        if not 0 <= column < dimensions:
            raise ArgumentError(f"categorical column {column} is not one of the columns 0..{dimensions - 1}.")
    return {int(c): check_domain_size(categorical[c]) for c in sorted(categorical)}


def sample_attributes(n: int, d: int, k: int, source: RandomSource) -> IntArray:
    """For each of ``n`` clients ``k`` distinct attributes of ``0 .. d - 1``, uniformly, in increasing order.

    Floyd's algorithm: for ``top = d - k, ..., d - 1`` draw ``t`` uniform in ``0 .. top`` and take ``t``, or
    ``top`` when ``t`` is already taken; every ``k``-subset comes out with probability ``1 / C(d, k)``.
    """
    chosen = np.empty((n, k), dtype=np.int64)
    for i, top in enumerate(range(d - k, d)):
        t = uniform_below(top + 1, n, source)
        taken = np.any(chosen[:, :i] == t[:, None], axis=1)
        chosen[:, i] = np.where(taken, top, t)
    chosen.sort(axis=1)
    return chosen


class MultidimensionalSampling(LocalRandomizer):
    """Wang et al. 2019's attribute-sampling protocol (Algorithm 4) for records of ``dimensions`` attributes.

    * Neighbour relation: local, any two records of one client (all ``d`` attributes may differ).
    * Sensitivity: the whole record; each sampled attribute's randomizer covers its full range (``[-1, 1]``
      or all ``m`` categories).
    * Privacy loss: ``PureDP(epsilon)`` per client. Which attributes are sampled does not depend on the
      record, and the ``k`` sampled ones are randomized independently, each ``(eps / k)``-LDP with exact
      coins, so the likelihood ratio of a report is at most ``(e^(eps / k))^k = e^eps`` (basic composition).

    ``mechanism`` names the numeric randomizer (``"hybrid"``, ``"piecewise"`` or ``"duchi"``);
    ``categorical`` maps categorical columns to their number of categories (the record then holds the
    category's code in that column).

    >>> import numpy as np
    >>> protocol = MultidimensionalSampling(epsilon=5, dimensions=3, categorical={2: 4})
    >>> protocol.k, protocol.attribute_epsilon
    (2, 2.5)
    >>> records = np.array([[0.5, -1.0, 3], [0.0, 0.25, 1]])
    >>> reports = protocol.randomize(records, rng=np.random.default_rng(0))
    >>> reports["attributes"].shape, reports["values"].shape
    ((2, 2), (2, 2))
    >>> estimate = protocol.estimate(reports)
    >>> estimate.columns, estimate.categories[2].counts.shape
    ((0, 1), (4,))
    """

    protocol: ClassVar[str] = "MultidimensionalSampling"
    neighbour = "local: any two records (all d attributes) of one client"

    def __init__(
        self,
        *,
        epsilon: Number,
        dimensions: int,
        mechanism: str = "hybrid",
        categorical: Mapping[int, int] | None = None,
    ) -> None:
        super().__init__(epsilon=epsilon)
        self._d = check_integer(dimensions, "dimensions", 1, 2**31 - 1, "2**31 - 1")
        numeric_type = _check_mechanism(mechanism)
        self._categorical = _check_categorical(categorical, self._d)
        self._mechanism = mechanism
        self._k = sample_size(self._epsilon, self._d)
        share = self._epsilon / self._k
        self._numeric = numeric_type(epsilon=share)
        self._oracles = {c: OUE(epsilon=share, domain_size=m) for c, m in self._categorical.items()}
        self._is_categorical = np.zeros(self._d, dtype=np.bool_)
        self._is_categorical[list(self._categorical)] = True
        self._columns = tuple(int(c) for c in np.flatnonzero(~self._is_categorical))
        self._bytes = max((-(-m // 8) for m in self._categorical.values()), default=0)

    # -- description ---------------------------------------------------------------------------------------
    @property
    def dimensions(self) -> int:
        return self._d

    @property
    def k(self) -> int:
        """Number of attributes each client samples and reports."""
        return self._k

    @property
    def attribute_epsilon(self) -> float:
        """``eps / k``: the budget of each sampled attribute's randomizer."""
        return float(self._epsilon / self._k)

    @property
    def mechanism(self) -> str:
        return self._mechanism

    @property
    def categorical(self) -> dict[int, int]:
        """``{column: number of categories}`` of the categorical attributes."""
        return dict(self._categorical)

    @property
    def numeric_columns(self) -> tuple[int, ...]:
        return self._columns

    @property
    def params(self) -> dict[str, Param]:
        """Everything the server needs to decode this protocol's reports."""
        return {
            "epsilon": str(self._epsilon),
            "dimensions": self._d,
            "k": self._k,
            "mechanism": self._mechanism,
            "categorical": ",".join(f"{c}:{m}" for c, m in self._categorical.items()),
        }

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(epsilon={self.epsilon!r}, dimensions={self._d}, "
            f"mechanism={self._mechanism!r}, categorical={self._categorical!r})"
        )

    # -- client --------------------------------------------------------------------------------------------
    def randomize(self, records: ArrayLike, rng: Rng = None) -> Reports:
        """One epsilon-LDP report per client (``records[i]`` is client ``i``'s record of ``d`` attributes):
        the ``k`` sampled attributes (``attributes``, increasing), the numeric randomizer's output for each
        sampled numeric attribute (``values``; 0 elsewhere) and, with categorical attributes, the OUE bits of
        each sampled categorical attribute (``bits``, ``k`` blocks of equal width; 0 elsewhere)."""
        table = self._check_records(records)
        source = resolve_source(rng)
        n = table.shape[0]
        attributes = sample_attributes(n, self._d, self._k, source)
        sampled = np.take_along_axis(table, attributes, axis=1)
        numeric = ~self._is_categorical[attributes]
        values = np.zeros((n, self._k), dtype=np.float64)
        values[numeric] = self._numeric.randomize(sampled[numeric], rng=source)
        arrays: dict[str, NDArray[Any]] = {
            "attributes": attributes.astype(np.min_scalar_type(self._d - 1)),
            "values": values,
        }
        if self._oracles:
            arrays["bits"] = self._categorical_bits(attributes, sampled, source)
        return Reports(self.protocol, self.params, arrays)

    def _check_records(self, records: ArrayLike) -> FloatArray:
        """``records`` as an ``n x d`` float array, or a one-sentence error."""
        arr = np.asarray(records)
        if arr.dtype.kind not in "biuf":
            raise ArgumentTypeError(f"records must be numbers, got an array of {arr.dtype}.")
        if arr.ndim != 2 or arr.shape[1] != self._d or arr.shape[0] == 0:
            raise ArgumentError(
                f"records must be a non-empty 2-d array with {self._d} columns (one row per client), "
                f"got shape {arr.shape}."
            )
        table = arr.astype(np.float64)
        numeric = table[:, list(self._columns)]
        if not np.all(np.isfinite(numeric)) or np.any(np.abs(numeric) > 1):
            raise ArgumentError("numeric attributes must be finite numbers in [-1, 1]; scale them first.")
        for column, m in self._categorical.items():
            check_domain_values(table[:, column], m, f"categorical column {column}")
        return table

    def _categorical_bits(
        self, attributes: IntArray, sampled: FloatArray, source: RandomSource
    ) -> NDArray[Any]:
        """The OUE reports of the sampled categorical attributes, one ``self._bytes``-wide block per slot."""
        n = attributes.shape[0]
        bits = np.zeros((n, self._k, self._bytes), dtype=np.uint8)
        for column, oracle in self._oracles.items():
            rows, slots = np.nonzero(attributes == column)
            packed = oracle.randomize(sampled[rows, slots].astype(np.int64), rng=source)["bits"]
            bits[rows, slots, : packed.shape[1]] = packed
        return bits.reshape(n, self._k * self._bytes)

    # -- server --------------------------------------------------------------------------------------------
    def estimate(self, reports: Reports) -> MultidimensionalEstimate:
        """Unbiased means of the numeric attributes (with worst-case variance bounds) and estimated counts of
        every categorical attribute's values (with variances); see the module docstring."""
        reports.check(self.protocol, self.params)
        attributes, values = self._checked_payload(reports)
        n = reports.n
        sums = np.bincount(attributes.ravel(), weights=values.ravel(), minlength=self._d)
        columns = list(self._columns)
        means = self._scale * sums[columns] / n
        variances = np.full(len(columns), self.worst_report_variance / n)
        categories = {c: self._category_counts(reports, attributes, c) for c in self._categorical}
        for a in (means, variances):
            a.setflags(write=False)
        return MultidimensionalEstimate(
            columns=self._columns,
            means=means,
            variances=variances,
            n=n,
            privacy_loss=self.privacy_loss,
            categories=categories,
        )

    #: Deprecated name of :meth:`estimate` (removed in the next release).
    estimate_means = deprecated_alias("estimate")

    @property
    def _scale(self) -> float:
        """``d / k``: the inverse probability that a given attribute is sampled."""
        return self._d / self._k

    def _checked_payload(self, reports: Reports) -> tuple[IntArray, FloatArray]:
        """The sampled attributes and values, after checking every array's shape and range."""
        if reports.n == 0:
            raise ArgumentError("there are no reports to estimate from.")
        check_payload_range(reports, "attributes", self._d, columns=self._k)
        attributes = reports["attributes"].astype(np.int64)
        if np.any(np.diff(attributes, axis=1) <= 0):
            raise ArgumentError(f"{self.protocol} reports must list distinct attributes in increasing order.")
        values = reports.arrays.get("values")
        if values is None or values.dtype != np.float64 or values.shape != attributes.shape:
            raise ArgumentError(
                f"{self.protocol} reports need a float array 'values' of shape {attributes.shape}."
            )
        categorical = self._is_categorical[attributes]
        self._numeric.check_reports(values[~categorical], f"{self.protocol} report values")
        if np.any(values[categorical] != 0):  # also refuses NaN
            raise ArgumentError(
                f"{self.protocol} reports must carry the value 0 for every categorical attribute."
            )
        if self._oracles:
            check_payload_range(reports, "bits", 256, columns=self._k * self._bytes)
        elif "bits" in reports.arrays:
            raise ArgumentError(f"{self.protocol} reports without categorical attributes carry no 'bits'.")
        return attributes, values

    def _category_counts(self, reports: Reports, attributes: IntArray, column: int) -> CountEstimate:
        """Estimated counts of ``column``'s categories: OUE's estimate over the clients that sampled it,
        scaled by ``d / k``."""
        oracle = self._oracles[column]
        rows, slots = np.nonzero(attributes == column)
        blocks = reports["bits"].reshape(reports.n, self._k, self._bytes)
        packed = np.ascontiguousarray(blocks[rows, slots, : -(-oracle.domain_size // 8)])
        inner = Reports(oracle.protocol, oracle.params, {"bits": packed})
        counts = self._scale * oracle.estimate(inner).counts
        variance = self.count_variance(column, reports.n, np.clip(counts, 0, reports.n))
        return CountEstimate(counts=counts, variance=variance, n=reports.n, privacy_loss=self.privacy_loss)

    # -- variances -----------------------------------------------------------------------------------------
    def report_variance(self, x: ArrayLike) -> FloatArray:
        """Exact variance of one client's report ``t*[A_j]`` of a numeric attribute holding ``x``:
        ``(d / k) (Var_M(x) + x^2) - x^2`` (module docstring)."""
        xs = np.atleast_1d(np.asarray(x, dtype=np.float64))
        return np.asarray(self._scale * (self._numeric.variance(xs) + xs**2) - xs**2, dtype=np.float64)

    @functools.cached_property
    def worst_report_variance(self) -> float:
        """``max over x in [-1, 1]`` of :meth:`report_variance`: for all three randomizers
        ``(d / k) Var_M(x) + (d / k - 1) x^2`` is a quadratic in ``x`` (up to the Piecewise mechanism's
        discretisation), so the maximum is at ``x = 0`` or ``x = +-1``."""
        return float(np.max(self.report_variance(np.array([-1.0, 0.0, 1.0]))))

    def mean_variances(self, records: ArrayLike) -> FloatArray:
        """Exact variance of each numeric attribute's estimated mean (in :attr:`numeric_columns` order) for
        these records: ``sum_i Var t*[A_j](x_ij) / n^2``."""
        table = self._check_records(records)
        numeric = table[:, list(self._columns)]
        per_report = self.report_variance(numeric.ravel()).reshape(numeric.shape)
        return np.asarray(per_report.sum(axis=0) / table.shape[0] ** 2, dtype=np.float64)

    def count_variance(self, column: int, n: int, counts: ArrayLike) -> FloatArray:
        """Exact variance of the estimated counts of categorical ``column``'s values held by ``counts`` of
        ``n`` clients: ``(d / k) Var_OUE(c) + (d / k - 1) c`` (module docstring)."""
        if column not in self._oracles:
            raise ArgumentError(f"column {column!r} is not a categorical attribute of this protocol.")
        c = np.asarray(counts, dtype=np.float64)
        oue_variance = self._oracles[column].count_variance(n, c)
        return np.asarray(self._scale * oue_variance + (self._scale - 1) * c, dtype=np.float64)
