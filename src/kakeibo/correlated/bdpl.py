"""Exact Bayesian differential privacy leakage (BDPL) of a mechanism on a discrete joint distribution.

Yang, Sato and Nakagawa, "Bayesian Differential Privacy on Correlated Data" (SIGMOD 2015; seed 001).
The tuples ``x_1, ..., x_n`` are random variables with a public joint distribution (assumption 1), the
mechanism ``M`` is public (assumption 3), and an adversary ``A(i, K)`` knows the values ``x_K`` of the
tuples in ``K`` and attacks tuple ``i`` (assumption 2); the other tuples ``U = [n] \\ {i} \\ K`` are unknown.
Definition 4.1 measures what ``A(i, K)`` learns::

    BDPL_A(M) = sup_{x_i, x_i', x_K, S} log Pr(r in S | x_i, x_K) / Pr(r in S | x_i', x_K)        (eq. 2)

    Pr(r in S | x_i, x_K) = sum_{x_U} Pr(r in S | x) Pr(x_U | x_i, x_K)                        (eq. 4)

which for outputs with a density or pmf is the supremum over single outputs ``r`` (eq. 6, 7). ``M`` is
epsilon-BDP when ``sup_A BDPL_A(M) <= epsilon`` (eq. 5). This module computes eq. 6/7 exactly for a joint
distribution given as a table (:class:`JointDistribution`), any query (default: the sum of the tuples),
and a mechanism whose supremum over outputs can be located exactly (:class:`OutputModel`: Laplace,
geometric, any finite-output mechanism such as randomized response).

* Neighbour relation: BDP's "neighbours" are two values ``x_i, x_i'`` of the target tuple, each with the
  unknown tuples drawn from the joint distribution conditioned on it and on ``x_K`` (Pufferfish's
  discriminative pairs, seed section 4.3). Only values of positive probability enter the supremum
  (conditioning on an event of probability 0 is undefined); a target whose value ``x_K`` already
  determines has no pair and leaks 0.
* Adversary model: ``A(i, K)`` for one target ``i`` and one known set ``K`` (:func:`adversary_leakage`,
  :func:`bdpl`), or all ``n 2^(n-1)`` of them (:func:`max_adversary_leakage`, :func:`max_bdpl`; small
  ``n`` only).
* Sensitivity: plain DP calibrates the Laplace sum to ``Delta / epsilon`` with ``Delta`` the largest range
  of one tuple's domain (:func:`bdpl` uses that scale); BDP needs the larger scale of
  :func:`bdp_laplace_scale`.

Tuples are numbered from 0: the seed's ``A(1, {})`` is ``target=0, known=()``. Section 4.2.3, table 3(b),
``Lap(1/epsilon)`` at epsilon = 0.1: the weak adversary's leakage is about ``2 epsilon``, the strong one's
is epsilon (theorem 4.2); for the negatively correlated table 3(c) the weak adversary learns almost nothing:

>>> table_b = [[0.49, 0.01], [0.01, 0.49]]
>>> round(bdpl(table_b, epsilon=0.1, target=0), 3), round(bdpl(table_b, epsilon=0.1, target=0, known=[1]), 12)
(0.196, 0.1)
>>> round(bdpl([[0.01, 0.49], [0.49, 0.01]], epsilon=0.1, target=0), 3)
0.004
"""

from __future__ import annotations

import itertools
import math
import numbers
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, Protocol, TypeAlias, runtime_checkable

import numpy as np
from numpy.typing import ArrayLike, NDArray

from ..errors import ArgumentError, ArgumentTypeError
from ..mechanisms import Geometric, Laplace, RandomizedResponse
from ..mechanisms.base import check_positive

__all__ = [
    "MAX_TUPLES",
    "BeliefUpdate",
    "FiniteOutputs",
    "GeometricNoise",
    "JointDistribution",
    "LaplaceNoise",
    "Leakage",
    "OutputModel",
    "adversary_leakage",
    "bdp_laplace_scale",
    "bdpl",
    "belief_update",
    "max_adversary_leakage",
    "max_bdpl",
    "max_odds_ratio",
]

FloatArray = NDArray[np.float64]
IntArray = NDArray[np.int64]

#: Largest number of tuples for which the supremum over all ``n 2^(n-1)`` adversaries is computed.
MAX_TUPLES = 12
#: How far the probabilities of a joint table may sum from 1.
PROBABILITY_TOLERANCE = 1e-9
#: :func:`bdp_laplace_scale` aims at ``epsilon (1 - margin)``: the margin absorbs the floating-point rounding
#: of the computed leakage (a few units in the last place), so the returned scale is never too small.
CALIBRATION_MARGIN = 1e-9
#: :func:`bdp_laplace_scale` stops bisecting when the bracket is this narrow (relative).
SCALE_RTOL = 1e-9
#: :func:`bdp_laplace_scale` gives up after halving the scale this many times without any leak.
MAX_HALVINGS = 64
#: Combined integer keys are compressed before they could exceed this.
_KEY_LIMIT = 2**62

#: A query: ``None`` (the sum of the tuple values), a function of the tuple vector, or, for a joint
#: given as an array, an array of the same shape holding the query value of every cell.
Query: TypeAlias = Callable[[FloatArray], Any] | ArrayLike | None


# --------------------------------------------------------------------------------------------------------
# Joint distributions
# --------------------------------------------------------------------------------------------------------


class JointDistribution:
    """A public joint distribution ``Pr(x_1, ..., x_n)`` of ``n`` discrete tuples (seed assumption 1).

    * From an array: ``probabilities[v_1, ..., v_n] = Pr(x_1 = values[0][v_1], ..., x_n = values[n-1][v_n])``;
      ``values`` defaults to the axis indices ``0, ..., d_j - 1``; the domain of tuple ``j`` is
      ``values[j]`` (all of it, cells of probability 0 included).
    * From a mapping ``{(x_1, ..., x_n): probability}``: the domain of tuple ``j`` is the set of values it
      takes among the keys.

    Probabilities must be finite, non-negative and sum to 1 (within ``PROBABILITY_TOLERANCE``). The
    *support* -- the cells of positive probability -- is what the leakage computations use: ``codes[c, j]``
    indexes ``domains[j]``, ``cells[c]`` is the tuple vector and ``probabilities[c]`` its probability.

    >>> joint = JointDistribution({(0, 0): 0.5, (1, 1): 0.5, (0, 1): 0.0})
    >>> joint.n, joint.cells.tolist(), joint.sum_sensitivity
    (2, [[0.0, 0.0], [1.0, 1.0]], 1.0)
    """

    def __init__(
        self,
        probabilities: ArrayLike | Mapping[tuple[Any, ...], Any],
        values: Sequence[ArrayLike] | None = None,
    ) -> None:
        if isinstance(probabilities, Mapping):
            if values is not None:
                raise ArgumentError(
                    "values label the axes of an array; a mapping's keys are the values already."
                )
            domains, codes, probs = _from_mapping(probabilities)
            self.shape: tuple[int, ...] | None = None
        else:
            domains, codes, probs, self.shape = _from_array(probabilities, values)
        keep = probs > 0
        self.domains: tuple[FloatArray, ...] = domains
        self.codes: IntArray = codes[keep]
        self.probabilities: FloatArray = probs[keep]
        self.cells: FloatArray = np.column_stack([d[self.codes[:, j]] for j, d in enumerate(domains)])
        for arr in (*self.domains, self.codes, self.probabilities, self.cells):
            arr.setflags(write=False)

    @property
    def n(self) -> int:
        """Number of tuples."""
        return len(self.domains)

    @property
    def sizes(self) -> tuple[int, ...]:
        """Domain size of every tuple."""
        return tuple(len(d) for d in self.domains)

    @property
    def sum_sensitivity(self) -> float:
        """Sensitivity of the sum under "change one tuple": the largest range ``max - min`` of a domain."""
        return max(float(np.ptp(d)) for d in self.domains)

    def __repr__(self) -> str:
        return f"JointDistribution(n={self.n}, sizes={self.sizes}, support={len(self.probabilities)} cells)"


JointLike: TypeAlias = JointDistribution | ArrayLike | Mapping[tuple[Any, ...], Any]


def _as_joint(joint: JointLike) -> JointDistribution:
    return joint if isinstance(joint, JointDistribution) else JointDistribution(joint)


def _real_array(values: Any, what: str) -> FloatArray:
    """``values`` as a float array, refusing non-numeric input (TypeError) and NaN or infinity."""
    arr = np.asarray(values)
    if arr.dtype.kind not in "iufO":
        raise ArgumentTypeError(f"{what} must be real numbers, got dtype {arr.dtype}.")
    try:
        out = arr.astype(np.float64)
    except (TypeError, ValueError) as exc:
        raise ArgumentTypeError(f"{what} must be real numbers.") from exc
    if not np.all(np.isfinite(out)):
        raise ArgumentError(f"{what} must be finite (no NaN or infinity).")
    return out


def _check_probabilities(probs: FloatArray) -> None:
    if np.any(probs < 0):
        raise ArgumentError("joint probabilities must be non-negative.")
    total = float(probs.sum())
    if abs(total - 1.0) > PROBABILITY_TOLERANCE:
        raise ArgumentError(f"joint probabilities must sum to 1, got {total!r}.")


def _from_array(
    probabilities: ArrayLike, values: Sequence[ArrayLike] | None
) -> tuple[tuple[FloatArray, ...], IntArray, FloatArray, tuple[int, ...]]:
    table = _real_array(probabilities, "joint probabilities")
    if table.ndim == 0 or table.size == 0:
        raise ArgumentError("the joint table needs one non-empty axis per tuple.")
    _check_probabilities(table)
    domains = _axis_values(values, table.shape)
    codes = np.indices(table.shape).reshape(table.ndim, -1).T.astype(np.int64)
    return domains, codes, table.reshape(-1), table.shape


def _axis_values(values: Sequence[ArrayLike] | None, shape: tuple[int, ...]) -> tuple[FloatArray, ...]:
    if values is None:
        return tuple(np.arange(d, dtype=np.float64) for d in shape)
    if isinstance(values, (str, bytes)) or len(values) != len(shape):
        raise ArgumentError(f"values must give one sequence of tuple values per axis ({len(shape)} axes).")
    domains = tuple(_real_array(v, f"values[{j}]") for j, v in enumerate(values))
    for j, (dom, d) in enumerate(zip(domains, shape, strict=True)):
        if dom.shape != (d,):
            raise ArgumentError(
                f"values[{j}] must hold {d} values (the length of axis {j}), got shape {dom.shape}."
            )
        if len(np.unique(dom)) != d:
            raise ArgumentError(f"values[{j}] must not repeat a value.")
    return domains


def _from_mapping(
    mapping: Mapping[tuple[Any, ...], Any],
) -> tuple[tuple[FloatArray, ...], IntArray, FloatArray]:
    if not mapping:
        raise ArgumentError("the joint mapping is empty.")
    keys = list(mapping)
    if not all(isinstance(k, tuple) for k in keys):
        raise ArgumentTypeError("the keys of a joint mapping must be tuples (x_1, ..., x_n).")
    n = len(keys[0])
    if n == 0 or any(len(k) != n for k in keys):
        raise ArgumentError("every key of a joint mapping must be a tuple of the same positive length.")
    try:
        cells = np.array(keys, dtype=np.float64)
    except (TypeError, ValueError) as exc:
        raise ArgumentTypeError("the keys of a joint mapping must hold real numbers.") from exc
    cells = _real_array(cells, "tuple values")
    probs = _real_array(list(mapping.values()), "joint probabilities")
    _check_probabilities(probs)
    domains = tuple(np.unique(cells[:, j]) for j in range(n))
    codes = np.column_stack([np.searchsorted(d, cells[:, j]) for j, d in enumerate(domains)]).astype(np.int64)
    if len(np.unique(codes, axis=0)) != len(codes):
        raise ArgumentError("two keys of the joint mapping name the same cell.")
    return domains, codes, probs


def _query_values(joint: JointDistribution, query: Query) -> FloatArray:
    """The query value of every support cell (the sum of the tuple values when ``query`` is None)."""
    if query is None:
        sums: FloatArray = joint.cells.sum(axis=1)
        return sums
    if callable(query):
        return _real_array(
            [_real_scalar(query(row.copy()), "the query's value") for row in joint.cells], "query values"
        )
    if joint.shape is None:
        raise ArgumentError("a precomputed query array needs a joint given as an array; pass a callable.")
    table = _real_array(query, "query values")
    if table.shape != joint.shape:
        raise ArgumentError(
            f"the query array must have the joint table's shape {joint.shape}, got {table.shape}."
        )
    per_cell: FloatArray = table[tuple(joint.codes.T)]
    return per_cell


def _real_scalar(value: Any, what: str) -> float:
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers.Real):
        raise ArgumentTypeError(f"{what} must be a real number, got {value!r}.")
    if not math.isfinite(value):
        raise ArgumentError(f"{what} must be finite, got {value!r}.")
    return float(value)


# --------------------------------------------------------------------------------------------------------
# Output models: where the supremum over outputs (eq. 6, 7) is attained
# --------------------------------------------------------------------------------------------------------


@runtime_checkable
class OutputModel(Protocol):
    """A mechanism's output distribution given the true query value ``q``, as the leakage needs it.

    * ``check_query_values(q)`` refuses (ValueError) query values the mechanism cannot take.
    * ``log_density(r, q)`` is ``log p(r | q)`` (a density or a pmf), elementwise over equal-shape arrays.
    * ``critical_outputs(groups, q)`` receives the distinct query values of several groups (``q[j]``
      belongs to group ``groups[j]``) and returns ``(groups', r)``: candidate outputs ``r[k]`` of group
      ``groups'[k]``. Contract: for any two mixtures ``sum_k a_k p(r | q_k)`` and ``sum_k c_k p(r | q_k)``
      with weights on the query values of one group, the supremum over *all* outputs of their log-ratio is
      attained at one of that group's candidates. This is what makes eq. 6/7 a finite maximum.
    """

    def check_query_values(self, query_values: FloatArray) -> None: ...

    def log_density(self, outputs: FloatArray, query_values: FloatArray) -> FloatArray: ...

    def critical_outputs(self, groups: IntArray, query_values: FloatArray) -> tuple[IntArray, FloatArray]: ...


class _TwoSidedExponential(ABC):
    """Output ``r = q + Z`` with ``p(r | q) = c exp(-|r - q| / scale)``: Laplace and geometric noise.

    The supremum over outputs of the log-ratio of two mixtures ``A(r) = sum_k a_k exp(-|r - q_k| / b)``
    and ``B(r) = sum_k c_k exp(-|r - q_k| / b)`` (weights ``>= 0``, not all 0) is attained at a
    *breakpoint* ``q_k``. Proof: sort the union of the breakpoints, ``q_(1) < ... < q_(m)``.

    * Between breakpoints, ``r`` in ``[q_(j), q_(j+1)]``: every ``|r - q_k|`` is affine there
      (``r - q_k`` for ``q_k <= q_(j)``, ``q_k - r`` for ``q_k >= q_(j+1)``), so
      ``A(r) = alpha e^(-r/b) + beta e^(r/b)`` and ``B(r) = gamma e^(-r/b) + delta e^(r/b)`` with
      non-negative ``alpha, beta, gamma, delta``. In ``u = e^(2r/b) > 0``,
      ``A/B = (alpha + beta u) / (gamma + delta u)``, whose derivative ``(beta gamma - alpha delta) /
      (gamma + delta u)^2`` has one sign on the whole interval: ``A/B`` is monotone there and its maximum
      over the closed interval is at an endpoint. (On integer outputs -- the geometric mechanism, integer
      ``q_k`` -- the same holds for the integers of the interval, its endpoints included.)
    * Tails, ``r <= q_(1)``: ``|r - q_k| = q_k - r`` for every ``k``, so
      ``A(r) / B(r) = sum_k a_k e^(-q_k/b) / sum_k c_k e^(-q_k/b)`` -- the same constant for every such
      ``r``, equal to the ratio at ``q_(1)``; this constant is also the limit as ``r -> -inf``. Likewise
      ``A/B = sum_k a_k e^(q_k/b) / sum_k c_k e^(q_k/b)`` for every ``r >= q_(m)``. Because both mixtures
      have the same scale, the tails are flat rather than dominated by their extreme components.

    Hence ``sup_r log A(r)/B(r) = max_k log A(q_(k))/B(q_(k))``, a maximum (attained), and the candidate
    outputs of a group are exactly its query values. ``B > 0`` everywhere, so the maximum is finite.
    """

    def __init__(self, scale: float) -> None:
        self.scale = check_positive(scale, "scale")

    @property
    @abstractmethod
    def log_normaliser(self) -> float:
        """``log c``: the logarithm of the density's normalising constant."""

    @abstractmethod
    def check_query_values(self, query_values: FloatArray) -> None: ...

    def log_density(self, outputs: FloatArray, query_values: FloatArray) -> FloatArray:
        return -np.abs(outputs - query_values) / self.scale + self.log_normaliser

    def critical_outputs(self, groups: IntArray, query_values: FloatArray) -> tuple[IntArray, FloatArray]:
        """The breakpoints: every group's own query values (see the class docstring for the proof)."""
        return groups, query_values

    def __repr__(self) -> str:
        return f"{type(self).__name__}(scale={self.scale!r})"


class LaplaceNoise(_TwoSidedExponential):
    """The Laplace mechanism ``r = q + Lap(scale)`` on real outputs (seed eq. 23):
    ``p(r | q) = exp(-|r - q| / scale) / (2 scale)``.

    >>> LaplaceNoise(2.0).log_density(np.array([1.0]), np.array([1.0])).tolist() == [-math.log(4.0)]
    True
    """

    @property
    def log_normaliser(self) -> float:
        return -math.log(2 * self.scale)

    def check_query_values(self, query_values: FloatArray) -> None:
        """Every finite query value is a valid Laplace centre."""


class GeometricNoise(_TwoSidedExponential):
    """The geometric (discrete Laplace) mechanism on integers: ``Pr(r | q) = tanh(1 / (2 scale))
    exp(-|r - q| / scale)`` for integer ``r`` and integer query values ``q`` (the normaliser is
    ``1 / sum_z e^(-|z|/scale) = (1 - e^(-1/scale)) / (1 + e^(-1/scale))``).

    >>> GeometricNoise(1.0).check_query_values(np.array([0.5]))
    Traceback (most recent call last):
    ...
    kakeibo.errors.ArgumentError: the geometric mechanism releases integers; every query value must be \
an integer.
    """

    @property
    def log_normaliser(self) -> float:
        return math.log(math.tanh(1 / (2 * self.scale)))

    def check_query_values(self, query_values: FloatArray) -> None:
        if not np.all(query_values == np.rint(query_values)):
            raise ArgumentError(
                "the geometric mechanism releases integers; every query value must be an integer."
            )


class FiniteOutputs:
    """A mechanism with finitely many outputs: ``Pr(r | q) = exp(log_pmf(r, q))`` for ``r`` in ``outputs``.

    The supremum over outputs (eq. 7) is then a maximum over the listed outputs, so it is exact: every
    output is a candidate. ``log_pmf`` must be vectorised (elementwise over two equal-shape float arrays)
    and, for every query value the query takes, a pmf over ``outputs`` (checked to within 1e-9; -inf marks
    an impossible output). Randomized response on categories ``0, ..., k-1`` (query values must be
    categories), from a :class:`kakeibo.mechanisms.RandomizedResponse`:

    >>> rr = FiniteOutputs.randomized_response(RandomizedResponse(epsilon=1.0))
    >>> np.exp(rr.log_density(np.array([0.0, 1.0]), np.array([0.0, 0.0]))).round(4).tolist()
    [0.7311, 0.2689]
    """

    def __init__(self, outputs: ArrayLike, log_pmf: Callable[[FloatArray, FloatArray], ArrayLike]) -> None:
        self.outputs = _real_array(outputs, "outputs")
        if (
            self.outputs.ndim != 1
            or self.outputs.size == 0
            or len(np.unique(self.outputs)) != self.outputs.size
        ):
            raise ArgumentError("outputs must be a non-empty 1-d sequence of distinct values.")
        if not callable(log_pmf):
            raise ArgumentTypeError(
                "log_pmf must be a function log_pmf(outputs, query_values) -> log probabilities."
            )
        self._log_pmf = log_pmf

    @classmethod
    def randomized_response(cls, mechanism: RandomizedResponse) -> FiniteOutputs:
        """The exact output pmf of ``mechanism``: keep the category with probability ``p``, report each other
        one with probability ``q`` (its ``p`` and ``q`` describe the coins it actually uses)."""
        if not isinstance(mechanism, RandomizedResponse):
            raise ArgumentTypeError("mechanism must be a kakeibo.mechanisms.RandomizedResponse.")
        log_keep, log_other = math.log(mechanism.p), math.log(mechanism.q)

        def log_pmf(outputs: FloatArray, query_values: FloatArray) -> FloatArray:
            return np.where(outputs == query_values, log_keep, log_other)

        return cls(np.arange(mechanism.categories, dtype=np.float64), log_pmf)

    def log_density(self, outputs: FloatArray, query_values: FloatArray) -> FloatArray:
        values = np.asarray(self._log_pmf(outputs, query_values), dtype=np.float64)
        if values.shape != np.broadcast_shapes(outputs.shape, query_values.shape):
            raise ArgumentError("log_pmf must return one log probability per (output, query value) pair.")
        if np.any(np.isnan(values)) or np.any(values > 0):
            raise ArgumentError("log_pmf must return log probabilities (<= 0, -inf allowed, no NaN).")
        return values

    def check_query_values(self, query_values: FloatArray) -> None:
        table = self.log_density(self.outputs[:, None], query_values[None, :])
        totals = np.exp(table).sum(axis=0)
        bad = np.flatnonzero(np.abs(totals - 1.0) > PROBABILITY_TOLERANCE)
        if bad.size:
            raise ArgumentError(
                f"the output probabilities sum to {totals[bad[0]]!r}, not 1, at query value "
                f"{query_values[bad[0]]!r}: is that a valid input of the mechanism?"
            )

    def critical_outputs(self, groups: IntArray, query_values: FloatArray) -> tuple[IntArray, FloatArray]:
        """Every output, for every group."""
        distinct = np.unique(groups)
        return np.repeat(distinct, self.outputs.size), np.tile(self.outputs, distinct.size)

    def __repr__(self) -> str:
        return f"FiniteOutputs(outputs={self.outputs.tolist()!r})"


MechanismLike: TypeAlias = OutputModel | Geometric | RandomizedResponse


def _as_output_model(mechanism: Any) -> OutputModel:
    """An :class:`OutputModel` for ``mechanism`` (kakeibo's geometric and randomized response exactly)."""
    if isinstance(mechanism, Geometric):
        return GeometricNoise(mechanism.scale)
    if isinstance(mechanism, RandomizedResponse):
        return FiniteOutputs.randomized_response(mechanism)
    if isinstance(mechanism, Laplace):
        raise ArgumentTypeError(
            "kakeibo.mechanisms.Laplace adds discrete noise on a grid that depends on the batch size; "
            "analyse its continuous model with LaplaceNoise(mechanism.scale)."
        )
    if isinstance(mechanism, OutputModel):
        return mechanism
    raise ArgumentTypeError(
        "mechanism must be an OutputModel (LaplaceNoise, GeometricNoise, FiniteOutputs, ...) or a kakeibo "
        f"Geometric or RandomizedResponse, got {type(mechanism).__name__}."
    )


# --------------------------------------------------------------------------------------------------------
# The leakage of one adversary
# --------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Leakage:
    """``BDPL_A(M)`` of the adversary ``A(target, known)`` (eq. 2, 6, 7), in nats, with a witness.

    The witness attains the supremum: ``log p(r | x_i, x_K) - log p(r | x_i', x_K) == value`` for
    ``x_K = known_values`` (aligned with ``known``), ``(x_i, x_i') = target_values`` and ``r = output``.
    They are ``None`` (and ``value`` is 0) when no value ``x_K`` of positive probability leaves two values
    of the target possible: then the adversary already knows ``x_i`` and nothing can leak.
    """

    value: float
    target: int
    known: tuple[int, ...]
    known_values: tuple[float, ...] | None
    target_values: tuple[float, float] | None
    output: float | None


@dataclass(frozen=True, eq=False)
class _Problem:
    """A joint distribution, a query and an output model, validated and indexed once."""

    joint: JointDistribution
    model: OutputModel
    levels: FloatArray  # the distinct query values, sorted
    level_of_cell: IntArray  # index into ``levels`` of every support cell's query value


def _prepare(joint: JointDistribution, mechanism: Any, query: Query) -> _Problem:
    model = _as_output_model(mechanism)
    levels, level_of_cell = np.unique(_query_values(joint, query), return_inverse=True)
    model.check_query_values(levels)
    return _Problem(joint, model, levels, level_of_cell.reshape(-1).astype(np.int64))


def _check_index(value: Any, n: int, name: str) -> int:
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)):
        raise ArgumentTypeError(f"{name} must be a tuple index (an integer), got {value!r}.")
    if not 0 <= value < n:
        raise ArgumentError(f"{name} must be a tuple index in 0..{n - 1}, got {value}.")
    return int(value)


def _as_list(items: Any, name: str) -> list[Any]:
    if isinstance(items, (str, bytes)) or not isinstance(items, Iterable):
        raise ArgumentTypeError(f"{name} must be an iterable, got {type(items).__name__}.")
    return list(items)


def _check_adversary(n: int, target: Any, known: Any) -> tuple[int, tuple[int, ...]]:
    """``(i, K)`` with ``K`` sorted, after checking ``A(i, K)`` is an adversary of seed section 3.1.2."""
    i = _check_index(target, n, "target")
    ks = [_check_index(k, n, "every known index") for k in _as_list(known, "known")]
    if len(set(ks)) != len(ks):
        raise ArgumentError("known must not repeat an index.")
    if i in ks:
        raise ArgumentError(f"the target {i} cannot also be a known tuple.")
    return i, tuple(sorted(ks))


def _rank_rows(columns: Sequence[IntArray], sizes: Sequence[int], rows: int) -> tuple[IntArray, IntArray]:
    """``(rank, first)``: the lexicographic rank of every row of the given integer columns among the
    distinct rows (``0 .. G-1``) and one row index per rank. ``sizes`` bound the columns' values; the
    combined key is re-ranked before it could overflow."""
    key = np.zeros(rows, dtype=np.int64)
    bound = 1
    for column, size in zip(columns, sizes, strict=True):
        if bound * size > _KEY_LIMIT:
            _, key = np.unique(key, return_inverse=True)
            bound = int(key.max()) + 1
        key = key.reshape(-1) * size + column
        bound *= size
    _, first, rank = np.unique(key, return_index=True, return_inverse=True)
    return rank.reshape(-1).astype(np.int64), first.astype(np.int64)


def _segment_logsumexp(values: FloatArray, starts: IntArray) -> FloatArray:
    """``log sum exp`` of each run ``values[starts[k]:starts[k+1]]`` (all ``-inf`` gives ``-inf``)."""
    run = np.zeros(values.size, dtype=np.int64)
    run[starts[1:]] = 1
    run = np.cumsum(run)
    peak = np.maximum.reduceat(values, starts)
    safe_peak = np.where(np.isfinite(peak), peak, 0.0)
    total = np.add.reduceat(np.exp(values - safe_peak[run]), starts)
    with np.errstate(divide="ignore"):
        return np.where(peak == -np.inf, -np.inf, safe_peak + np.log(total))


def _candidates(model: OutputModel, groups: IntArray, levels: FloatArray) -> tuple[IntArray, FloatArray]:
    """The model's candidate outputs, checked: one group (among ``groups``) per finite output."""
    cand_group, outputs = (np.asarray(a) for a in model.critical_outputs(groups, levels))
    if cand_group.ndim != 1 or cand_group.shape != outputs.shape or not np.all(np.isin(cand_group, groups)):
        raise ArgumentError(
            "critical_outputs must return equal-length groups (among those given) and outputs."
        )
    return cand_group.astype(np.int64), _real_array(outputs, "critical outputs")


@dataclass(frozen=True, eq=False)
class _Conditionals:
    """The conditional query distributions ``Pr(q | x_i, x_K)`` of one adversary (eq. 4, unknown tuples
    summed out), as *triples* ``(group, value, level)`` sorted in that order: ``group`` numbers the values
    ``x_K`` (``group_first[g]`` is a support cell with that ``x_K``), ``value`` indexes the target's domain,
    ``level`` the distinct query values; ``log_weight`` is ``log Pr(level | value, group)``."""

    group: IntArray
    value: IntArray
    level: IntArray
    log_weight: FloatArray
    group_first: IntArray
    values_in_group: IntArray  # how many target values of positive probability each x_K leaves


def _conditionals(problem: _Problem, target: int, known: tuple[int, ...]) -> _Conditionals:
    joint = problem.joint
    codes, sizes, n_cells = joint.codes, joint.sizes, len(joint.probabilities)
    group, group_first = _rank_rows([codes[:, k] for k in known], [sizes[k] for k in known], n_cells)
    n_groups = group_first.size
    triple, first = _rank_rows(
        [group, codes[:, target], problem.level_of_cell],
        [n_groups, sizes[target], problem.levels.size],
        n_cells,
    )
    weight = np.bincount(triple, weights=joint.probabilities)
    t_group, t_value = group[first], codes[first, target]
    pair, pair_first = _rank_rows([t_group, t_value], [n_groups, sizes[target]], weight.size)
    return _Conditionals(
        group=t_group,
        value=t_value,
        level=problem.level_of_cell[first],
        log_weight=np.log(weight) - np.log(np.bincount(pair, weights=weight))[pair],
        group_first=group_first,
        values_in_group=np.bincount(t_group[pair_first], minlength=n_groups),
    )


def _log_mixtures(
    problem: _Problem, cond: _Conditionals, cand_group: IntArray, outputs: FloatArray
) -> tuple[FloatArray, IntArray, IntArray]:
    """``log p(r | x_i, x_K) = log sum_level Pr(level | x_i, x_K) p(r | level)`` for every candidate output
    ``r`` (of group ``x_K``) and every target value of that group: ``(log_mixture, candidate, value)``, one
    entry per (candidate, value), sorted by candidate."""
    n_groups = cond.group_first.size
    # One row per (candidate, triple of the candidate's group), in (candidate, value, level) order.
    start = np.searchsorted(cond.group, np.arange(n_groups))
    repeats = np.bincount(cond.group, minlength=n_groups)[cand_group]
    row_cand = np.repeat(np.arange(cand_group.size), repeats)
    offset = np.arange(row_cand.size) - np.repeat(np.cumsum(repeats) - repeats, repeats)
    row_triple = np.repeat(start[cand_group], repeats) + offset
    log_term = cond.log_weight[row_triple] + problem.model.log_density(
        outputs[row_cand], problem.levels[cond.level[row_triple]]
    )
    row_value = cond.value[row_triple]
    seg_start = np.flatnonzero(np.r_[True, (np.diff(row_cand) != 0) | (np.diff(row_value) != 0)])
    return _segment_logsumexp(log_term, seg_start), row_cand[seg_start], row_value[seg_start]


def _leakage(problem: _Problem, target: int, known: tuple[int, ...]) -> Leakage:
    """Eq. 6/7 for ``A(target, known)``: for every ``x_K`` and candidate output ``r``, the largest minus the
    smallest ``log p(r | x_i, x_K)`` over target values ``x_i`` (both orders of every pair), maximised;
    vectorised over all ``x_K`` and candidates at once."""
    cond = _conditionals(problem, target, known)
    if cond.values_in_group.max() < 2:
        return Leakage(0.0, target, known, None, None, None)
    _, level_first = _rank_rows(
        [cond.group, cond.level], [cond.group_first.size, problem.levels.size], cond.group.size
    )
    level_first = level_first[cond.values_in_group[cond.group[level_first]] >= 2]
    cand_group, outputs = _candidates(
        problem.model, cond.group[level_first], problem.levels[cond.level[level_first]]
    )
    log_mixture, seg_cand, seg_value = _log_mixtures(problem, cond, cand_group, outputs)
    cand_start = np.flatnonzero(np.r_[True, np.diff(seg_cand) != 0])
    high = np.maximum.reduceat(log_mixture, cand_start)
    low = np.minimum.reduceat(log_mixture, cand_start)
    with np.errstate(invalid="ignore"):
        gap = np.where(high == -np.inf, -np.inf, high - low)  # an output impossible for every x_i: no leak
    best = int(np.argmax(gap))

    span = slice(cand_start[best], cand_start[best + 1] if best + 1 < cand_start.size else None)
    domain, codes = problem.joint.domains[target], problem.joint.codes
    x_high = float(domain[seg_value[span][np.argmax(log_mixture[span])]])
    x_low = float(domain[seg_value[span][np.argmin(log_mixture[span])]])
    row = cond.group_first[cand_group[best]]
    known_values = tuple(float(problem.joint.domains[k][codes[row, k]]) for k in known)
    return Leakage(float(gap[best]), target, known, known_values, (x_high, x_low), float(outputs[best]))


def adversary_leakage(
    joint: JointLike, mechanism: MechanismLike, *, target: int, known: Iterable[int] = (), query: Query = None
) -> Leakage:
    """``BDPL_A(M)`` for ``A = A(target, known)`` (definition 4.1, eq. 6/7), exactly, with a witness.

    * Neighbour relation: two values ``x_i, x_i'`` of tuple ``target`` of positive probability given
      ``x_K``, the unknown tuples drawn from the joint distribution conditioned on each (eq. 4).
    * Adversary model: knows the joint distribution, the mechanism and the values of the tuples ``known``.
    * Sensitivity: none is needed -- the leakage is computed from the output distributions themselves.

    ``mechanism`` is an :class:`OutputModel` (its candidate outputs make the supremum over ``r`` a finite
    maximum; :class:`LaplaceNoise` and :class:`GeometricNoise` prove it for their breakpoints) or a kakeibo
    ``Geometric`` or ``RandomizedResponse``. ``query`` maps the tuple vector to the value the mechanism
    releases (default: the sum). The result is exact up to floating-point rounding (a few units in the
    last place of the log-densities).

    Theorem 4.1: independent tuples leak exactly what DP allows (table 3(a), ``Lap(1/epsilon)``):

    >>> table_a = [[0.1, 0.3], [0.15, 0.45]]  # joint[x_1, x_2]; the seed prints x_2 as rows
    >>> round(adversary_leakage(table_a, LaplaceNoise(10.0), target=0).value, 12)
    0.1
    """
    table = _as_joint(joint)
    i, ks = _check_adversary(table.n, target, known)
    return _leakage(_prepare(table, mechanism, query), i, ks)


def _all_adversaries(n: int) -> Iterable[tuple[int, tuple[int, ...]]]:
    """Every ``A(i, K)``: each target with each subset of the other tuples, weakest (``K`` empty) first."""
    for i in range(n):
        others = [k for k in range(n) if k != i]
        for size in range(n):
            for ks in itertools.combinations(others, size):
                yield i, ks


def _max_leakage(problem: _Problem) -> Leakage:
    return max(
        (_leakage(problem, i, ks) for i, ks in _all_adversaries(problem.joint.n)), key=lambda a: a.value
    )


def _check_small(joint: JointDistribution) -> None:
    if joint.n > MAX_TUPLES:
        raise ArgumentError(
            f"the supremum over all n 2^(n-1) adversaries is computed for at most {MAX_TUPLES} tuples, "
            f"got {joint.n}."
        )


def max_adversary_leakage(joint: JointLike, mechanism: MechanismLike, *, query: Query = None) -> Leakage:
    """``sup_A BDPL_A(M)`` over all ``n 2^(n-1)`` adversaries ``A(i, K)`` (eq. 5), with the worst one.

    ``M`` is epsilon-BDP iff the value is at most epsilon. Exhaustive, hence for ``n <= MAX_TUPLES`` only
    (measured on one core, full tables of binary tuples: 0.5 s for n = 8, 3 s for 10, 23 s for 12).
    Neighbour relation, adversary model and (absence of) sensitivity as in :func:`adversary_leakage`.
    Section 4.2.3: for the negatively correlated table 3(c) the strong adversary is the worst:

    >>> worst = max_adversary_leakage([[0.01, 0.49], [0.49, 0.01]], LaplaceNoise(10.0))
    >>> round(worst.value, 12), worst.known
    (0.1, (1,))
    """
    joint = _as_joint(joint)
    _check_small(joint)
    return _max_leakage(_prepare(joint, mechanism, query))


# --------------------------------------------------------------------------------------------------------
# The sum query under Laplace noise
# --------------------------------------------------------------------------------------------------------


def _sum_laplace(
    joint: JointLike, epsilon: float, sensitivity: float | None
) -> tuple[JointDistribution, LaplaceNoise]:
    eps = check_positive(epsilon, "epsilon")
    joint = _as_joint(joint)
    delta = joint.sum_sensitivity if sensitivity is None else check_positive(sensitivity, "sensitivity")
    if delta <= 0:
        raise ArgumentError(
            "every tuple's domain is a single value, so the sum has sensitivity 0; pass sensitivity."
        )
    return joint, LaplaceNoise(delta / eps)


def bdpl(
    joint: JointLike,
    *,
    epsilon: float,
    target: int,
    known: Iterable[int] = (),
    sensitivity: float | None = None,
) -> float:
    """``BDPL_A(M)`` of the Laplace sum calibrated for plain epsilon-DP, for ``A = A(target, known)``.

    ``M(x) = sum_j x_j + Lap(Delta / epsilon)`` (seed section 3.2), with ``Delta = sensitivity`` or, by
    default, the sum's sensitivity under "change one tuple": the largest range ``max - min`` of one tuple's
    domain (:attr:`JointDistribution.sum_sensitivity`). ``joint`` is a :class:`JointDistribution`, a table
    ``joint[x_1, ..., x_n]`` (tuple values = axis indices) or a mapping ``{(x_1, ..., x_n): probability}``.

    * Neighbour relation: DP's -- one tuple changed, the others fixed -- sets the scale; the leakage is
      then measured over BDP's pairs (see :func:`adversary_leakage`).
    * Adversary model: ``A(target, known)``; ``known=()`` is the weak adversary, all other tuples the strong
      one (theorem 4.2: its leakage is at most epsilon, and exactly epsilon on a full-support table).
    * Sensitivity: ``Delta`` as above.

    Section 4.2.3's worked example (table 3(b), epsilon = 0.1) matches the seed's closed form
    ``log((0.98 + 0.02 e^-eps) / (0.02 e^-eps + 0.98 e^-2eps))``:

    >>> eps = 0.1
    >>> u = math.exp(-eps)
    >>> closed = math.log((0.98 + 0.02 * u) / (0.02 * u + 0.98 * u * u))
    >>> math.isclose(bdpl([[0.49, 0.01], [0.01, 0.49]], epsilon=eps, target=0), closed, rel_tol=1e-12)
    True
    """
    table, noise = _sum_laplace(joint, epsilon, sensitivity)
    return adversary_leakage(table, noise, target=target, known=known).value


def max_bdpl(joint: JointLike, *, epsilon: float, sensitivity: float | None = None) -> float:
    """``sup_A BDPL_A(M)`` (eq. 5) of the Laplace sum calibrated for plain epsilon-DP (as in :func:`bdpl`),
    over all adversaries; ``n <= MAX_TUPLES`` only.

    >>> round(max_bdpl([[0.49, 0.01], [0.01, 0.49]], epsilon=0.1), 3)  # the weak adversary, table 3(b)
    0.196
    """
    table, noise = _sum_laplace(joint, epsilon, sensitivity)
    return max_adversary_leakage(table, noise).value


def bdp_laplace_scale(joint: JointLike, *, epsilon: float, query: Query = None) -> float:
    """The Laplace scale ``lambda`` that makes ``q(x) + Lap(lambda)`` epsilon-BDP (eq. 5) for this joint.

    Returns a scale within a relative ``SCALE_RTOL`` above the smallest one whose leakage over *all*
    adversaries is at most ``epsilon`` (computed leakage at most ``epsilon (1 - CALIBRATION_MARGIN)``, which
    absorbs rounding: the returned scale is never too small). ``n <= MAX_TUPLES``.

    * Neighbour relation: BDP's pairs ``x_i, x_i'`` with the unknown tuples drawn from the joint
      distribution (see :func:`adversary_leakage`), for every target and every known set.
    * Adversary model: every ``A(i, K)``.
    * Sensitivity: not used. The search starts from ``lambda_hi = spread / epsilon``, ``spread`` the range of
      the query over the support: each component ratio ``p(r | q) / p(r | q')`` is at most
      ``e^(|q - q'| / lambda)``, so every mixture ratio is at most ``e^(spread / lambda)`` and
      ``lambda_hi`` is safe. It then bisects, which is valid because the leakage does not increase with the
      scale: ``Lap(b2) = Lap(b1) + Z`` for ``b2 > b1`` with ``Z`` independent of the data (``Z`` is 0 with
      probability ``(b1/b2)^2``, else ``Lap(b2)``: compare characteristic functions
      ``(1 + b1^2 t^2) / (1 + b2^2 t^2)``), and post-processing cannot increase the supremum over sets of
      eq. 2.

    For the seed's table 3(b) the BDP scale (about twice ``1 / epsilon``) solves the seed's closed form
    ``log((0.98 + 0.02 e^-1/lambda) / (0.02 e^-1/lambda + 0.98 e^-2/lambda)) = epsilon``:

    >>> scale = bdp_laplace_scale([[0.49, 0.01], [0.01, 0.49]], epsilon=0.1)
    >>> u = math.exp(-1 / scale)
    >>> round(math.log((0.98 + 0.02 * u) / (0.02 * u + 0.98 * u * u)), 9)
    0.1
    """
    eps = check_positive(epsilon, "epsilon")
    table = _as_joint(joint)
    _check_small(table)
    problem = _prepare(table, LaplaceNoise(1.0), query)
    spread = float(np.ptp(problem.levels))
    if spread == 0:
        raise ArgumentError(
            "the query is constant on the support of the joint distribution: it needs no noise."
        )
    allowed = eps * (1 - CALIBRATION_MARGIN)

    def leaks(scale: float) -> bool:
        return _max_leakage(replace(problem, model=LaplaceNoise(scale))).value > allowed

    high = spread / allowed
    low = high / 2
    for _ in range(MAX_HALVINGS):
        if leaks(low):
            break
        high, low = low, low / 2
    else:
        raise ArgumentError(
            f"the leakage stays below epsilon for every Laplace scale down to {high:.3g}: the query hardly "
            "depends on any tuple; release it without noise only after checking that claim yourself."
        )
    while high - low > SCALE_RTOL * high:
        middle = (low + high) / 2
        if leaks(middle):
            low = middle
        else:
            high = middle
    return high


# --------------------------------------------------------------------------------------------------------
# Prior and posterior odds (section 4.4)
# --------------------------------------------------------------------------------------------------------


@dataclass(frozen=True, eq=False)
class BeliefUpdate:
    """An adversary's belief about the target before and after seeing one output (seed section 4.4).

    ``values`` are the target values of positive probability given ``x_K``; ``prior[k] = Pr(x_i =
    values[k] | x_K)`` and ``posterior[k] = Pr(x_i = values[k] | r, x_K)``.
    """

    values: FloatArray
    prior: FloatArray
    posterior: FloatArray

    def log_odds_change(self, value: float, other: float) -> float:
        """``log Pr(value | r, x_K) / Pr(other | r, x_K) - log Pr(value | x_K) / Pr(other | x_K)``.

        By Bayes' rule this equals ``log p(r | value, x_K) / p(r | other, x_K)``: the quantity whose
        supremum is the BDPL (section 4.4).
        """
        a, b = self._index(value), self._index(other)
        return float(
            np.log(self.posterior[a])
            - np.log(self.posterior[b])
            - np.log(self.prior[a])
            + np.log(self.prior[b])
        )

    def _index(self, value: float) -> int:
        hits = np.flatnonzero(self.values == value)
        if hits.size == 0:
            raise ArgumentError(f"{value!r} is not a target value of positive probability given x_K.")
        return int(hits[0])


def _belief_update(
    problem: _Problem, target: int, known: tuple[int, ...], known_values: tuple[float, ...], output: float
) -> BeliefUpdate:
    joint = problem.joint
    match = np.all(joint.cells[:, list(known)] == np.asarray(known_values, dtype=np.float64), axis=1)
    if not match.any():
        raise ArgumentError("the known values have probability 0 under the joint distribution.")
    probs = joint.probabilities[match]
    value_codes, value_of_cell = np.unique(joint.codes[match, target], return_inverse=True)
    value_of_cell = value_of_cell.reshape(-1)
    levels = problem.levels[problem.level_of_cell[match]]
    log_joint = np.log(probs) + problem.model.log_density(np.full(levels.shape, output), levels)
    order = np.argsort(value_of_cell, kind="stable")
    starts = np.searchsorted(value_of_cell[order], np.arange(value_codes.size))
    log_posterior = _segment_logsumexp(log_joint[order], starts)  # log Pr(x_i, r | x_K) up to a constant
    if np.all(log_posterior == -np.inf):
        raise ArgumentError(f"the output {output!r} has probability 0 given the known values.")
    prior = np.bincount(value_of_cell, weights=probs)
    posterior = np.exp(log_posterior - log_posterior.max())
    return BeliefUpdate(
        values=joint.domains[target][value_codes],
        prior=prior / prior.sum(),
        posterior=posterior / posterior.sum(),
    )


def belief_update(
    joint: JointLike,
    mechanism: MechanismLike,
    *,
    target: int,
    output: float,
    known: Iterable[int] = (),
    known_values: Iterable[float] = (),
    query: Query = None,
) -> BeliefUpdate:
    """Prior ``Pr(x_i | x_K)`` and posterior ``Pr(x_i | r, x_K)`` of ``A(target, known)`` after output ``r``.

    ``known_values`` gives ``x_K`` in the order of ``known``. Section 4.4, table 3(b) with ``Lap(1/0.1)``
    and ``r = 2``: the strong adversary (``x_2 = 1`` known) moves from ``{0.02, 0.98}`` to
    ``{0.018, 0.982}``, the weak one from ``{0.5, 0.5}`` to ``{0.45, 0.55}``:

    >>> table_b = [[0.49, 0.01], [0.01, 0.49]]
    >>> strong = belief_update(table_b, LaplaceNoise(10.0), target=0, known=[1], known_values=[1], output=2.0)
    >>> strong.prior.round(3).tolist(), strong.posterior.round(3).tolist()
    ([0.02, 0.98], [0.018, 0.982])
    >>> weak = belief_update(table_b, LaplaceNoise(10.0), target=0, output=2.0)
    >>> weak.prior.round(3).tolist(), weak.posterior.round(2).tolist()
    ([0.5, 0.5], [0.45, 0.55])
    """
    table = _as_joint(joint)
    ks, xs = _as_list(known, "known"), _as_list(known_values, "known_values")
    i, _ = _check_adversary(table.n, target, ks)
    if len(xs) != len(ks):
        raise ArgumentError(f"known_values must give one value per known tuple ({len(ks)}), got {len(xs)}.")
    r = _real_scalar(output, "output")
    values = tuple(_real_scalar(x, "every known value") for x in xs)
    return _belief_update(_prepare(table, mechanism, query), i, tuple(ks), values, r)


def max_odds_ratio(
    joint: JointLike, mechanism: MechanismLike, *, target: int, known: Iterable[int] = (), query: Query = None
) -> float:
    """The largest factor by which one output multiplies ``A(target, known)``'s odds of ``x_i`` against
    ``x_i'`` (section 4.4): ``sup Pr(x_i | r, x_K) / Pr(x_i' | r, x_K) * Pr(x_i' | x_K) / Pr(x_i | x_K)``.

    Relation to BDPL: by Bayes' rule the posterior odds are the prior odds times the likelihood ratio
    ``p(r | x_i, x_K) / p(r | x_i', x_K)``, for every ``x_K``, pair and output. So the two suprema are the
    same and ``log max_odds_ratio == BDPL_A(M)``: this function evaluates the odds change through the
    posterior at the witness of :func:`adversary_leakage` (1 when no pair of target values exists).

    >>> ratio = max_odds_ratio([[0.49, 0.01], [0.01, 0.49]], LaplaceNoise(10.0), target=0)
    >>> round(math.log(ratio), 3)
    0.196
    """
    table = _as_joint(joint)
    i, ks = _check_adversary(table.n, target, known)
    problem = _prepare(table, mechanism, query)
    witness = _leakage(problem, i, ks)
    if witness.target_values is None or witness.known_values is None or witness.output is None:
        return 1.0
    update = _belief_update(problem, i, ks, witness.known_values, witness.output)
    return math.exp(update.log_odds_change(*witness.target_values))
