"""The Gaussian correlation model of Yang, Sato and Nakagawa, "Bayesian Differential Privacy on Correlated
Data" (SIGMOD 2015; seed 001, section 5): leakage coefficients, Algorithm 1 and the BDP Laplace scale.

**Model** (definition 5.1, section 5.5). Tuples ``x_0 .. x_{n-1}`` are the nodes of an undirected graph with
weights ``w_ij >= 0``; ``L = D - W`` is its Laplacian (eq. 10). With the Gaussian prior ``tau I`` of section
5.5 the tuples are jointly Gaussian with density ``exp(-x^T Q x / 2)`` and precision (the seed's "Gaussian
correlation matrix")

    Q = L + tau I,       or Q = L + diag(tau_0, ..., tau_{n-1}) for a general diagonal prior, tau_k > 0.

``Q`` is then a symmetric positive definite M-matrix (off-diagonal entries ``-w_ij <= 0``, row sums
``tau_k > 0``), so every principal submatrix is one too and all inverses are entrywise non-negative. The
seed assumes a connected graph; with ``tau > 0`` every graph gives a proper Gaussian, so none is required.

**Adversaries and leakage** (section 3.1.2, theorem 5.1). ``A(i, K)`` knows ``x_K`` and attacks ``x_i``;
``U = [n] - {i} - K`` are unknown, ``m = |U|``. The sum ``s = sum(x)`` is released as ``r = s + Lap(lambda)``.
Theorem 5.1: ``BDPL_A = M (1 + l_A) / lambda`` with leakage coefficient ``l_A = m w_0i / w_0``, where ``w_0``
and ``-w_0i`` are entries of the Gaussian correlation matrix ``L_A`` of ``(x_0, x_i, x_K)``,
``x_0 = s_U / m`` (eq. 24). The seed introduces ``M`` only as "``M > 0``"; eq. 25 is the supremum of eq. 6
over target values with ``|x_i - x_i'| <= M`` (the conditional laws of ``s`` are one Gaussian shifted by
``(1 + l_A)(x_i - x_i')``, and its convolution with ``Lap(lambda)`` has log-ratio tending to the shift over
``lambda`` in the tail), which is how ``M`` is read here. As ``x_0 | x_i, x_K`` has mean
``(w_0i x_i + w_0K^T x_K) / w_0``, ``l_A`` is the coefficient of ``x_i`` in ``E[s_U | x_i, x_K]``; from
``E[x_U | x_C] = -Q_UU^-1 Q_UC x_C``,

    l_A = w_iU^T Q_UU^-1 1_U                                                    (used by leakage_of)

Theorem 5.2: ``l_A <= l_A'`` whenever ``A'`` knows a subset of ``K``, so the largest coefficient over all
``n 2^(n-1)`` adversaries is a weak adversary's ``A(i, {})``.

**Theorem (weak adversaries from the diagonal of the covariance).** Let ``S = Q^-1`` and ``y = S 1``. For
``A(i, {})``, ``l_i = y_i / S_ii - 1``; for ``Q = L + tau I``, ``l_i = 1 / (tau S_ii) - 1``.

*Proof.* ``(x_i, s_U)`` is zero-mean Gaussian, so ``E[s_U | x_i] = Cov(s_U, x_i) / Var(x_i) x_i`` with
``Var(x_i) = S_ii`` and ``Cov(s_U, x_i) = sum_{u != i} S_ui = y_i - S_ii``. If the prior is ``tau I`` then
``L 1 = 0`` gives ``Q 1 = tau 1``, so ``y = 1 / tau``. (As ``tau -> 0``, ``S_ii -> 1/(n tau) + O(1)`` on a
connected graph and ``1 + l_i -> n``: eq. 29. An isolated tuple has ``S_ii = 1/tau_i`` and ``l_i = 0``,
theorem 4.1.) QED

**Computation.**

* :meth:`GaussianCorrelationModel.leakage` -- all ``n`` coefficients at the cost of one sparse
  factorisation: ``Q = P^T F D F^T P`` with ``F`` unit lower triangular (SuperLU, minimum degree on
  ``Q + Q^T``, no pivoting as ``Q`` is SPD), then Takahashi's selected inversion
  ``Z = D^-1 F^-1 + (I - F^T) Z`` evaluated only on the pattern of ``F``, supernode by supernode
  (:func:`_takahashi_diagonal`). Accurate to rounding (backward stable), not certified.
* :meth:`GaussianCorrelationModel.certify_max_leakage` -- the largest coefficient with a *certified*
  enclosure, evaluating as few nodes as possible:

  0. every node gets bounds from exact facts, computed with a few directed roundings
     (:func:`_structural_bounds`): ``l_i <= n_C - 1`` for a component of ``n_C`` tuples (``S_ji <= S_ii``,
     the largest entry of a column of the inverse of a row diagonally dominant M-matrix is its diagonal
     one), ``l_i <= d_i / min tau`` (``S_ii >= 1 / Q_ii`` and ``y <= 1 / min tau`` by the maximum
     principle for ``Q y = 1``), and ``l_i >= w_ij / Q_jj`` for every neighbour ``j`` (theorem 5.2: the
     adversary who knows everyone but ``j`` has exactly that coefficient);
  1. the floating-point steps below run on ``Q`` scaled by a power of two so that its largest diagonal
     entry is in ``[1/2, 1)`` (``l`` depends only on ``W / tau``), and only when that scaling is exact and
     every scaled ``tau_k >= 2^-40`` (:data:`NUMERIC_PRIOR_FLOOR`): then no intermediate overflows and
     underflow only adds absolute errors far below the relative slack (``S_ii >= 1``), which the bounds
     carry anyway. Otherwise the step-0 bounds are the result: when ``tau`` is that small next to the
     weights, ``n_C - 1`` is within ``n_C^2 tau / lambda_2`` of the truth (prior ``tau I``);
  2. every node gets an upper bound ``u_i >= l_i`` from a lower bound on ``S_ii``: Rayleigh-Ritz on the
     span of ``e_i``, its weight vector ``w_i`` and ``1`` (:func:`_covariance_diagonal_lower_bounds`);
  3. nodes are evaluated in decreasing ``u_i`` order by preconditioned conjugate gradients, each with the
     residual certificate ``S_ii = x_i + x^T r + r^T Q^-1 r`` for any ``x`` and ``r = e_i - Q x``, where
     ``0 <= r^T Q^-1 r <= |r|^2 / min tau`` (:func:`_inverse_diagonal_enclosure`);
  4. evaluation stops once the next ``u_i`` is at most the best certified lower value: every node left has
     ``l_i <= u_i <=`` that value. The result is the largest certified *upper* end, which is never below
     the true maximum. (A cap on the evaluations keeps near-regular graphs bounded: the rest is then
     covered by its largest ``u_i``, still an upper bound.)

  Enclosures include the rounding of the residuals and dot products in the standard floating-point model
  (``gamma_k = k u / (1 - k u)`` bounds), the rounding of ``Q``'s diagonal (a sum of ``deg_i + 1`` terms),
  and an absolute term for underflow, so they hold for the computed numbers and the model as declared. An
  upper end of ``+inf`` (an unconverged solve) is a true statement and gives way to step 0's bound; a NaN,
  or a bound contradicting step 0's exact ones (such as an upper bound below ``w_ij / Q_jj``), means the
  arithmetic left its range: :class:`CertificationError` is raised and no number is returned.
* :meth:`GaussianCorrelationModel.algorithm1_leakage` -- Algorithm 1 (proposition 5.1's COMBINE in a
  divide and conquer), ``O(n^3)`` time and ``O(n^2)`` memory (theorem 5.3), kept to check the fast path.

>>> model = GaussianCorrelationModel.from_edges([(0, 1), (1, 2)], tau=1.0)   # a path of three tuples
>>> model.leakage().round(6).tolist()
[0.6, 1.0, 0.6]
>>> round(model.max_leakage(), 6), round(model.leakage_of(1, known=[0]), 6)
(1.0, 0.5)
>>> round(model.laplace_scale(epsilon=1.0, M=1.0), 6)
2.0
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import numpy as np
import scipy.sparse as sp
from numpy.typing import ArrayLike, NDArray
from scipy.linalg import lapack
from scipy.sparse.csgraph import connected_components
from scipy.sparse.linalg import splu

from ..errors import ArgumentError, ArgumentTypeError, Error
from ..mechanisms import Laplace
from ..mechanisms.base import check_positive

__all__ = [
    "CertificationError",
    "ConditionalGaussian",
    "GaussianCorrelationModel",
    "MaxLeakage",
    "calc_leakage_coefficient",
    "combine",
]

FloatArray = NDArray[np.float64]
IntArray = NDArray[np.int64]
#: scipy.sparse is untyped for mypy; sparse matrices are passed as ``Any``.
SparseMatrix = Any

UNIT_ROUNDOFF = 2.0**-53
#: Conjugate gradients stop when ``max |r| <= PCG_RTOL max |b|`` (the certificates do not rely on it).
PCG_RTOL = 1e-13
PCG_MAXITER = 20_000
#: Memory budget of one block of simultaneous solves, in vector entries (8 bytes each, five arrays).
BLOCK_ENTRIES = 1 << 22
#: The default cap on the certified maximum's exact evaluations is ``max(256, EVALUATION_WORK // n)``: all
#: nodes up to n = 4096, 256 from n = 65536 on (each evaluation costs a few sparse products of size n).
EVALUATION_WORK = 1 << 24
#: The certified maximum's floating-point phase runs only when every prior precision, after scaling ``Q`` so
#: that its largest diagonal entry is in ``[1/2, 1)``, is at least this (module docstring, step 1).
NUMERIC_PRIOR_FLOOR = 2.0**-40
#: The smallest positive float: an elementary operation that underflows is off by at most this.
SMALLEST_SUBNORMAL = 2.0**-1074


class CertificationError(Error, ValueError):
    """The leakage of a model cannot be certified in floating point (its numbers overflow, or a bound came
    out NaN or contradicted an exact one); no number is returned in its place."""


def _gamma(k: FloatArray | float) -> Any:
    """``gamma_k = k u / (1 - k u)``: relative error bound of a ``k``-term floating-point sum or product."""
    return np.asarray(k, dtype=np.float64) * UNIT_ROUNDOFF / (1.0 - np.asarray(k) * UNIT_ROUNDOFF)


# --- input checks ----------------------------------------------------------------------------------------


def _check_prior(tau: Any, n: int) -> FloatArray:
    """The prior precisions: ``tau`` as a positive number (``tau I``) or an array of ``n`` positives."""
    if isinstance(tau, bool) or tau is None:
        raise ArgumentTypeError(
            f"tau must be a positive number or an array of n positive numbers, got {tau!r}."
        )
    values = np.asarray(tau)
    if values.dtype.kind not in "iuf":
        raise ArgumentTypeError(f"tau must be real numbers, got dtype {values.dtype}.")
    if values.ndim == 0:
        values = np.full(n, float(values))
    elif values.shape != (n,):
        raise ArgumentError(
            f"tau must be one number or an array of n = {n} prior precisions, got {values.shape}."
        )
    values = values.astype(np.float64)
    bad = ~(np.isfinite(values) & (values > 0))
    if bad.any():
        raise ArgumentError(
            f"tau must be finite and > 0 (the prior of section 5.5 makes the model a proper Gaussian); "
            f"got {values[bad][0]!r} for tuple {int(np.flatnonzero(bad)[0])}."
        )
    return values


def _check_count(n: Any) -> int:
    if isinstance(n, bool) or not isinstance(n, numbers.Integral):
        raise ArgumentTypeError(f"n must be an integer, got {n!r}.")
    if n < 1:
        raise ArgumentError(f"a database needs at least one tuple, got n = {n}.")
    return int(n)


def _check_adjacency(adjacency: Any) -> SparseMatrix:
    """A symmetric, loop-free, non-negative, finite sparse weight matrix, as ``csr_array`` of float64."""
    if not sp.issparse(adjacency):
        raise ArgumentTypeError(
            f"adjacency must be a scipy.sparse matrix or array, got {type(adjacency).__name__}."
        )
    if adjacency.dtype.kind not in "biuf":
        raise ArgumentTypeError(f"adjacency weights must be real numbers, got dtype {adjacency.dtype}.")
    weights = sp.csr_array(adjacency, dtype=np.float64)
    rows, cols = weights.shape
    if rows != cols or rows < 1:
        raise ArgumentError(f"adjacency must be a non-empty square matrix, got shape {weights.shape}.")
    weights.sum_duplicates()
    if not np.all(np.isfinite(weights.data)):
        raise ArgumentError("adjacency weights must be finite.")
    if np.any(weights.data < 0):
        raise ArgumentError(
            "adjacency weights must be >= 0 (definition 5.1 models positive correlation only)."
        )
    loops = np.flatnonzero(weights.diagonal())
    if loops.size:
        raise ArgumentError(f"self loop at tuple {int(loops[0])}: a tuple cannot be correlated with itself.")
    asymmetry = weights - weights.T
    asymmetry.eliminate_zeros()
    if asymmetry.nnz:
        raise ArgumentError("adjacency must be symmetric (w_ij = w_ji, an undirected graph).")
    weights.eliminate_zeros()
    weights.sort_indices()
    return weights


def _check_edges(edges: Any, n: Any, weights: Any) -> tuple[IntArray, FloatArray, int]:
    """Validated ``(pairs, weights, n)`` of an undirected edge list."""
    pairs = np.asarray(edges)
    if pairs.size == 0:
        pairs = pairs.reshape(0, 2)
    if pairs.ndim != 2 or pairs.shape[1] != 2:
        raise ArgumentError(f"edges must be pairs (u, v), an array of shape (E, 2); got shape {pairs.shape}.")
    if pairs.size and pairs.dtype.kind not in "iu":
        raise ArgumentTypeError(f"edge endpoints must be integer tuple ids, got dtype {pairs.dtype}.")
    pairs = pairs.astype(np.int64)
    if n is None:
        if not len(pairs):
            raise ArgumentError("with no edges, give the number of tuples n.")
        n = int(pairs.max()) + 1
    n = _check_count(n)
    if len(pairs) and (pairs.min() < 0 or pairs.max() >= n):
        raise ArgumentError(
            f"edge endpoints must be tuple ids in 0..{n - 1}, got {int(pairs.min())}..{int(pairs.max())}."
        )
    loops = np.flatnonzero(pairs[:, 0] == pairs[:, 1])
    if loops.size:
        u = int(pairs[loops[0], 0])
        raise ArgumentError(f"self loop ({u}, {u}): a tuple cannot be correlated with itself.")
    codes = np.minimum(pairs[:, 0], pairs[:, 1]) * n + np.maximum(pairs[:, 0], pairs[:, 1])
    unique, counts = np.unique(codes, return_counts=True)
    if np.any(counts > 1):
        code = int(unique[counts > 1][0])
        raise ArgumentError(
            f"edge ({code // n}, {code % n}) is listed twice; give each undirected edge once."
        )
    if weights is None:
        values = np.ones(len(pairs))
    else:
        values = np.asarray(weights)
        if values.dtype.kind not in "biuf":
            raise ArgumentTypeError(f"edge weights must be real numbers, got dtype {values.dtype}.")
        if values.shape != (len(pairs),):
            raise ArgumentError(
                f"weights must have one entry per edge ({len(pairs)}), got shape {values.shape}."
            )
        values = values.astype(np.float64)
        if not np.all(np.isfinite(values) & (values >= 0)):
            raise ArgumentError("edge weights must be finite and >= 0 (definition 5.1: w_ij >= 0).")
    return pairs, values, n


def _check_node(value: Any, n: int, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise ArgumentTypeError(f"{what} must be an integer tuple id, got {value!r}.")
    if not 0 <= int(value) < n:
        raise ArgumentError(f"{what} must be a tuple id in 0..{n - 1}, got {value}.")
    return int(value)


def _check_nodes(values: Iterable[Any], n: int, what: str) -> IntArray:
    """Distinct tuple ids, in the order given."""
    if isinstance(values, (str, bytes)) or not isinstance(values, Iterable):
        raise ArgumentTypeError(f"{what} must be a collection of tuple ids, got {values!r}.")
    ids = [_check_node(v, n, what) for v in values]
    if len(set(ids)) != len(ids):
        raise ArgumentError(f"{what} lists a tuple twice: {ids}.")
    return np.asarray(ids, dtype=np.int64)


def _check_adversary(target: Any, known: Iterable[Any], n: int) -> tuple[int, IntArray]:
    """``(i, K)`` of ``A(i, K)``: a target and distinct known tuples other than it (section 3.1.2)."""
    i = _check_node(target, n, "target")
    k = _check_nodes(known, n, "known")
    if i in k:
        raise ArgumentError(f"the target {i} cannot be a known tuple (K is a subset of [n] - {{i}}).")
    return i, k


def _check_budget(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise ArgumentTypeError(f"max_evaluations must be an integer or None, got {value!r}.")
    if value < 1:
        raise ArgumentError(f"max_evaluations must be >= 1, got {value}.")
    return int(value)


def _check_correlation_matrix(matrix: Any) -> FloatArray:
    """A Gaussian correlation matrix ``L_A`` as Algorithm 1 takes it: row 0 is ``x_0``, then ``x_C``."""
    raw = np.asarray(matrix)
    if raw.dtype.kind not in "biuf":
        raise ArgumentTypeError(
            f"the Gaussian correlation matrix must hold real numbers, got dtype {raw.dtype}."
        )
    values = raw.astype(np.float64)
    if values.ndim != 2 or values.shape[0] != values.shape[1] or values.shape[0] < 2:
        raise ArgumentError(
            f"the Gaussian correlation matrix must be square and at least 2 x 2, got {values.shape}."
        )
    if not np.all(np.isfinite(values)):
        raise ArgumentError("the Gaussian correlation matrix must be finite.")
    scale = float(np.max(np.abs(values)))
    if not np.allclose(values, values.T, rtol=0.0, atol=1e-12 * scale):
        raise ArgumentError("the Gaussian correlation matrix must be symmetric.")
    if np.any(np.diag(values) <= 0):
        raise ArgumentError("the Gaussian correlation matrix must have a positive diagonal.")
    return values


def _check_unknown_count(m: Any) -> int:
    if isinstance(m, bool) or not isinstance(m, numbers.Integral):
        raise ArgumentTypeError(
            f"m (the number of unknown tuples merged into x_0) must be an integer, got {m!r}."
        )
    if m < 1:
        raise ArgumentError(f"m (the number of unknown tuples merged into x_0) must be >= 1, got {m}.")
    return int(m)


# --- proposition 5.1 and Algorithm 1 ----------------------------------------------------------------------


def _merge_last(work: FloatArray, size: int, m: int) -> None:
    """Proposition 5.1 in place: merge ``x_j``, the last row of ``work[:size, :size]``, into ``x_0`` (row 0),
    which averages ``m`` unknown tuples. Afterwards ``work[:size-1, :size-1]`` is the Gaussian correlation
    matrix of ``x_0' = (m x_0 + x_j) / (m + 1)`` and the rest (eq. 22)."""
    j = size - 1
    w0, wj, w0j = work[0, 0], work[j, j], -work[0, j]
    a = -work[0, 1:j]  # w_0C'
    b = -work[j, 1:j]  # w_jC'
    denominator = m * m * wj + 2 * m * w0j + w0
    centre = a - m * b
    merged = (m + 1) * ((w0j + m * wj) * a + (w0 + m * w0j) * b) / denominator
    work[1:j, 1:j] -= np.outer(centre, centre / denominator)
    work[0, 0] = (m + 1) ** 2 * (w0 * wj - w0j**2) / denominator
    work[0, 1:j] = -merged
    work[1:j, 0] = -merged


def _merge_tail(work: FloatArray, size: int, count: int, m: int) -> None:
    """Merge the last ``count`` rows of ``work[:size, :size]`` into ``x_0``, last row first; ``x_0`` starts
    as the mean of ``m`` unknown tuples."""
    for step in range(count):
        _merge_last(work, size - step, m + step)


def _weak_coefficient(matrix: FloatArray, m: int) -> float:
    """Theorem 5.1 on a 2 x 2 matrix ``L_A`` of ``(x_0, x_i)``: ``l_A = m w_0i / w_0``."""
    return float(m * -matrix[0, 1] / matrix[0, 0])


def combine(matrix: ArrayLike, j: int, m: int) -> FloatArray:
    """Proposition 5.1: the Gaussian correlation matrix after merging tuple ``x_j`` into ``x_0``.

    ``matrix`` is ``L_A`` of ``(x_0, x_C)`` (eq. 21), row 0 being ``x_0``, the mean of ``m`` unknown
    tuples; ``j >= 1`` is a row of ``C``. Returns ``L_A'`` (eq. 22) of ``(x_0', x_C')`` with
    ``x_0' = (m x_0 + x_j) / (m + 1)`` and ``C' = C - {j}`` in the original order:

        w_0'    = (m+1)^2 (w_0 w_j - w_0j^2) / d,            d = m^2 w_j + 2 m w_0j + w_0
        w_0C''  = (m+1) ((w_0j + m w_j) w_0C' + (w_0 + m w_0j) w_jC') / d
        W_C''   = W_C' - (w_0C' - m w_jC') (w_0C' - m w_jC')^T / d

    (Substituting ``x_j = (m+1) x_0' - m x_0`` in ``x^T L_A x`` and integrating ``x_0`` out gives exactly
    these entries.) Indices are 0-based; the seed numbers rows from 1.

    >>> merged = combine([[2.0, -1.0, -1.0], [-1.0, 2.0, -1.0], [-1.0, -1.0, 2.0]], j=2, m=1)
    >>> merged.round(6).tolist()
    [[2.0, -2.0], [-2.0, 2.0]]
    """
    values = _check_correlation_matrix(matrix)
    size = values.shape[0]
    if size < 3:
        raise ArgumentError(
            "combine needs x_0, the merged tuple and at least one more tuple (a 3 x 3 matrix)."
        )
    j = _check_node(j, size, "j")
    if j == 0:
        raise ArgumentError("j = 0 is x_0 itself; merge a row j >= 1.")
    m = _check_unknown_count(m)
    order = np.r_[np.arange(j), np.arange(j + 1, size), j]
    work = values[np.ix_(order, order)]
    _merge_last(work, size, m)
    return np.array(work[: size - 1, : size - 1])


def _algorithm1(matrix: FloatArray, ids: IntArray, m: int, out: FloatArray) -> None:
    """CALCLEAKAGECOEFFICIENT of Algorithm 1, recording each leaf's coefficient in ``out[tuple id]``.

    Two corrections to the printed pseudo-code, both forced by theorem 5.1: the base case returns
    ``m w_01 / w_0`` (printed: ``w_0 / w_01``, which would give 1 instead of eq. 29's ``n - 1`` for the bare
    Laplacian), and the second loop counts its merges from the ``m`` the call received (printed: it
    continues from the first loop's ``m``, which would count the first branch's merged tuples too)."""
    size = matrix.shape[0]
    if size <= 2:  # lines 3-5
        out[ids[1]] = _weak_coefficient(matrix, m)
        return
    k = (size + 2) // 2  # line 6: ceil((n + 1) / 2), a 1-based row number
    # Lines 7-12: merge rows k, k-1, ..., 2 (1-based); moving them to the end keeps that order.
    order = np.r_[0, np.arange(k, size), np.arange(1, k)]
    first = matrix[np.ix_(order, order)]
    _merge_tail(first, size, k - 1, m)
    kept = size - k + 1
    _algorithm1(first[:kept, :kept], ids[order[:kept]], m + k - 1, out)
    # Lines 13-18: merge rows n, n-1, ..., k+1 (1-based), already last.
    second = matrix.copy()
    _merge_tail(second, size, size - k, m)
    _algorithm1(second[:k, :k], ids[:k], m + size - k, out)


def calc_leakage_coefficient(matrix: ArrayLike, m: int = 1) -> float:
    """Algorithm 1 (CALCLEAKAGECOEFFICIENT): the largest weak-adversary coefficient reachable from ``L_A``.

    ``matrix`` is the Gaussian correlation matrix of ``(x_0, x_1, ..)`` with ``x_0`` the mean of ``m``
    unknown tuples; called on the full precision matrix with ``m = 1``, row 0 is one tuple taken as unknown
    and the leaves are the weak adversaries ``A(i, {})`` of every other row ``i`` (figure 3). Each level
    splits the remaining rows in two halves and merges one half into ``x_0`` by proposition 5.1; by
    theorem 5.3 this costs ``O(n^3)`` time and ``O(n^2)`` memory. See :func:`_algorithm1` for the two
    corrections to the printed pseudo-code. Row 0's own weak adversary is not a leaf:
    :meth:`GaussianCorrelationModel.algorithm1_leakage` adds it.

    Eq. 29: on the bare Laplacian of a connected graph every weak adversary has ``l = n - 1``:

    >>> round(calc_leakage_coefficient([[1.0, -1.0, 0.0], [-1.0, 2.0, -1.0], [0.0, -1.0, 1.0]]), 9)
    2.0
    """
    values = _check_correlation_matrix(matrix)
    out = np.full(values.shape[0], -np.inf)
    _algorithm1(values, np.arange(values.shape[0]), _check_unknown_count(m), out)
    return float(out.max())


# --- selected inversion -----------------------------------------------------------------------------------


def _supernode_starts(rows: IntArray, pointers: IntArray) -> IntArray:
    """First columns of the fundamental supernodes of a lower-triangular pattern: column ``j + 1`` joins
    ``j``'s supernode when ``j``'s rows below the diagonal are ``{j + 1}`` followed by exactly ``j + 1``'s."""
    n = pointers.size - 1
    counts = np.diff(pointers)
    first_row = np.full(n, -1, dtype=np.int64)
    first_row[counts > 0] = rows[pointers[:-1][counts > 0]]
    candidate = np.flatnonzero((counts[:-1] == counts[1:] + 1) & (first_row[:-1] == np.arange(1, n)))
    lengths = counts[candidate + 1]
    owner = np.repeat(candidate, lengths)
    offset = np.arange(owner.size) - np.repeat(np.cumsum(lengths) - lengths, lengths)
    differs = rows[pointers[owner] + 1 + offset] != rows[pointers[owner + 1] + offset]
    joins = np.zeros(n, dtype=bool)
    joins[candidate + 1] = True
    joins[np.unique(owner[differs]) + 1] = False
    joins[0] = False
    return np.flatnonzero(~joins)


def _takahashi_diagonal(lower: SparseMatrix, pivots: FloatArray) -> FloatArray:
    """``diag((L D L^T)^-1)`` for a unit lower-triangular factor ``L`` (CSC, filled pattern; the module
    docstring's ``F``) and pivots ``D``.

    Takahashi's recurrences on each supernode ``J`` with rows ``S`` below it, last supernode first: with
    ``Y = L_SJ L_JJ^-1``, ``Z_SJ = -Z_SS Y`` and ``Z_JJ = L_JJ^-T D_J^-1 L_JJ^-1 - Y^T Z_SJ``. ``S`` lies in
    the rows ``R_P = J_P + S_P`` of the parent supernode ``P`` owning ``min S`` (the pattern of that column
    holds the rest of ``S``), so ``Z_SS`` is one read from the dense ``Z[R_P, R_P]``, kept until ``P``'s
    last child is done."""
    n = pivots.size
    columns = np.repeat(np.arange(n), np.diff(lower.indptr))
    below = lower.indices > columns
    rows, values = lower.indices[below], lower.data[below]
    pointers = np.r_[0, np.cumsum(np.bincount(columns[below], minlength=n))]
    starts = _supernode_starts(rows, pointers)
    ends = np.r_[starts[1:], n]
    owner = np.repeat(np.arange(starts.size), ends - starts)
    has_rows = pointers[ends] > pointers[ends - 1]
    parent = np.full(starts.size, -1)
    parent[has_rows] = owner[rows[pointers[ends - 1][has_rows]]]
    last_child = np.full(starts.size, starts.size)  # children are processed in decreasing order
    np.minimum.at(last_child, parent[has_rows], np.flatnonzero(has_rows))
    is_parent = last_child < starts.size
    kept: dict[int, tuple[IntArray, FloatArray]] = {}
    diagonal = np.empty(n)
    for s in range(starts.size - 1, -1, -1):
        f, e = int(starts[s]), int(ends[s])
        width = e - f
        below_rows = rows[pointers[e - 1] : pointers[e]]
        panel = np.zeros((width + below_rows.size, width))
        for t in range(width):
            panel[t, t] = 1.0
            panel[t + 1 :, t] = values[pointers[f + t] : pointers[f + t + 1]]
        inverse = lapack.dtrtri(panel[:width], lower=1, unitdiag=1)[0] if width > 1 else panel[:1]
        full = np.empty((panel.shape[0], panel.shape[0]))
        full[:width, :width] = inverse.T @ (inverse / pivots[f:e, None])
        if below_rows.size:
            parent_rows, parent_full = kept[int(parent[s])]
            position = np.searchsorted(parent_rows, below_rows)
            if position[-1] >= parent_rows.size or not np.array_equal(parent_rows[position], below_rows):
                raise RuntimeError("the factor's pattern is not closed; this is a bug in kakeibo.")
            full[width:, width:] = parent_full[position[:, None], position]
            y = panel[width:] @ inverse
            full[width:, :width] = -(full[width:, width:] @ y)
            full[:width, :width] -= y.T @ full[width:, :width]
            full[:width, width:] = full[width:, :width].T
            if last_child[parent[s]] == s:
                del kept[int(parent[s])]
        if is_parent[s]:
            kept[s] = (np.r_[np.arange(f, e), below_rows], full)
        diagonal[f:e] = np.diag(full)[:width]
    return diagonal


def _selected_inverse(precision: SparseMatrix) -> tuple[FloatArray, Any]:
    """``diag(Q^-1)`` by sparse ``L D L^T`` and selected inversion, and the factorisation (for solves)."""
    lu = splu(
        sp.csc_matrix(precision),
        permc_spec="MMD_AT_PLUS_A",
        diag_pivot_thresh=0.0,
        options={"SymmetricMode": True},
    )
    pivots = lu.U.diagonal()
    if not np.array_equal(lu.perm_r, lu.perm_c) or np.any(pivots <= 0):
        raise RuntimeError("the factorisation of the SPD precision matrix pivoted; this is a bug in kakeibo.")
    lower = sp.csc_matrix(lu.L)
    lower.sort_indices()
    return _takahashi_diagonal(lower, pivots)[lu.perm_c], lu


# --- certified solves -------------------------------------------------------------------------------------


def _pcg(matrix: SparseMatrix, rhs: FloatArray) -> FloatArray:
    """Jacobi-preconditioned conjugate gradients on each column of ``rhs`` at once (an approximation; every
    use is followed by a residual certificate)."""
    inverse_diagonal = (1.0 / matrix.diagonal())[:, None]
    solution = np.zeros_like(rhs)
    residual = rhs.copy()
    target = PCG_RTOL * np.max(np.abs(rhs), axis=0)
    z = inverse_diagonal * residual
    direction = z.copy()
    rz = np.einsum("ij,ij->j", residual, z)
    for _ in range(PCG_MAXITER):
        active = np.max(np.abs(residual), axis=0) > target
        if not active.any():
            break
        image = matrix @ direction
        curvature = np.einsum("ij,ij->j", direction, image)
        active &= np.isfinite(curvature) & (curvature > 0) & (rz > 0)  # a breakdown keeps the last iterate
        if not active.any():
            break
        alpha = np.where(active, rz / np.where(active, curvature, 1.0), 0.0)
        solution += alpha * direction
        residual -= alpha * image
        z = inverse_diagonal * residual
        rz_next = np.einsum("ij,ij->j", residual, z)
        beta = np.where(active, rz_next / np.where(active, rz, 1.0), 0.0)
        direction = z + beta * direction
        rz = rz_next
    return solution


def _residual(
    matrix: SparseMatrix,
    solution: FloatArray,
    rhs: FloatArray,
    diagonal_error: FloatArray | None = None,
) -> tuple[FloatArray, FloatArray]:
    """``(r, delta)``: the computed residual ``rhs - A x`` and a bound ``|r_true - r| <= delta`` on its error.

    Row ``j`` sums ``nnz_j + 1`` rounded terms: ``gamma_{nnz_j + 3} ((|A||x|)_j + |r_j|)``, plus ``nnz_j + 3``
    smallest subnormals for products that underflow. ``diagonal_error`` (optional) bounds how far ``A``'s
    stored diagonal is from the intended matrix's; ``r_true`` is then the intended matrix's residual and
    ``delta`` grows by ``diagonal_error_j |x_j|``."""
    residual = rhs - matrix @ solution
    row_terms = np.diff(matrix.indptr).astype(np.float64) + 3.0
    absolute = abs(matrix) @ np.abs(solution)
    delta = (
        _gamma(row_terms)[:, None] * (absolute + np.abs(residual)) + (row_terms * SMALLEST_SUBNORMAL)[:, None]
    )
    if diagonal_error is not None:
        delta = (delta + diagonal_error[:, None] * np.abs(solution)) * (1 + _gamma(3.0))
    return residual, delta


def _ones_solution_estimate(
    matrix: SparseMatrix, diagonal_error: FloatArray | None = None
) -> tuple[FloatArray, float]:
    """``(z^, rho)``: an approximation of ``A^-1 1`` and ``rho >= max |1 - A z^|`` (see the enclosure)."""
    ones = np.ones((matrix.shape[0], 1))
    approx = _pcg(matrix, ones)
    residual, delta = _residual(matrix, approx, ones, diagonal_error)
    return approx[:, 0], float(np.max(np.abs(residual) + delta) * (1 + _gamma(2.0)))


def _ones_solution_enclosure(
    matrix: SparseMatrix, diagonal_error: FloatArray | None = None
) -> tuple[FloatArray, FloatArray]:
    """Elementwise ``lo <= A^-1 1 <= hi`` for a nonsingular M-matrix ``A``.

    For any ``z^`` with ``|1 - A z^| <= rho`` entrywise: ``A^-1 >= 0`` gives ``|A^-1 r| <= rho A^-1 1``,
    so ``z = z^ + A^-1 r`` satisfies ``z^ / (1 + rho) <= z <= z^ / (1 - rho)`` (needs ``rho < 1``)."""
    approx, rho = _ones_solution_estimate(matrix, diagonal_error)
    if not rho < 0.5:
        raise RuntimeError(f"conjugate gradients stalled at residual {rho:.3g}; this is a bug in kakeibo.")
    slack = _gamma(4.0)
    return approx / (1 + rho) * (1 - slack), approx / (1 - rho) * (1 + slack)


def _inverse_diagonal_enclosure(
    matrix: SparseMatrix,
    nodes: IntArray,
    smallest_eigenvalue: float,
    diagonal_error: FloatArray | None = None,
) -> tuple[FloatArray, FloatArray]:
    """Certified ``lo <= (A^-1)_ii <= hi`` for the SPD ``A`` at ``nodes``, with ``lambda_min(A) >= smallest``.

    For any ``x`` and ``r = e_i - A x``: ``(A^-1)_ii = x_i + x^T r + r^T A^-1 r`` and
    ``0 <= r^T A^-1 r <= |r|^2 / lambda_min`` (expand ``e_i^T A^-1 e_i`` with ``e_i = A x + r``). ``x`` comes
    from conjugate gradients; the bounds carry the rounding of ``r`` (:func:`_residual`, with
    ``diagonal_error`` as there) and of the sums, and an absolute term for products that underflow (each
    is off by at most the smallest subnormal; a norm loses at most ``sqrt(n) 2^-537`` to squares that
    underflow)."""
    n = matrix.shape[0]
    columns = np.arange(nodes.size)
    unit = np.zeros((n, nodes.size))
    unit[nodes, columns] = 1.0
    approx = _pcg(matrix, unit)
    residual, delta = _residual(matrix, approx, unit, diagonal_error)
    magnitude = np.abs(approx)
    correction = np.einsum("ij,ij->j", approx, residual)
    spread = np.einsum("ij,ij->j", magnitude, delta) + _gamma(n) * np.einsum(
        "ij,ij->j", magnitude, np.abs(residual)
    )
    spread = spread + 4 * n * SMALLEST_SUBNORMAL
    lost = math.sqrt(n) * 2.0**-537
    tail = (
        np.linalg.norm(residual, axis=0) + np.linalg.norm(delta, axis=0) + 2 * lost
    ) ** 2 / smallest_eigenvalue
    centre = approx[nodes, columns] + correction
    spread = (spread + _gamma(6.0) * (np.abs(centre) + spread + tail)) * (1 + _gamma(4.0))
    return centre - spread, centre + spread + tail * (1 + _gamma(4.0))


def _leakage_interval(
    sums: tuple[FloatArray, FloatArray], variances: tuple[FloatArray, FloatArray]
) -> tuple[FloatArray, FloatArray]:
    """``l_i = y_i / S_ii - 1`` on enclosures of ``y_i`` and ``S_ii`` (a non-positive lower end of ``S_ii``
    gives no upper bound), widened by the rounding of the quotient and the difference."""
    slack = _gamma(3.0)
    positive = variances[0] > 0
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        high_ratio = np.where(positive, sums[1] / np.where(positive, variances[0], 1.0), np.inf)
        low_ratio = sums[0] / variances[1]
        return low_ratio - 1 - slack * (low_ratio + 1), high_ratio - 1 + slack * (high_ratio + 1)


# --- exact bounds and consistency checks --------------------------------------------------------------------


def _structural_bounds(weights: SparseMatrix, prior: FloatArray) -> tuple[FloatArray, FloatArray]:
    """``(floor, ceiling)`` with ``floor_i <= l_i <= ceiling_i`` from exact facts (module docstring, step 0),
    rounded outwards: every quotient or sum below is off by a relative ``gamma_k`` or, when it underflows,
    by a few smallest subnormals; an overflow gives ``inf`` (no bound) and never a NaN that is kept.

    * ``ceiling_i = min(n_C - 1, d_i / min tau)``, ``d_i = sum_j w_ij``. With ``S = Q^-1`` and column
      ``s = S e_i``: at a largest entry ``s_k``, ``k != i``, row ``k`` of ``Q s = e_i`` would read
      ``0 = (d_k + tau_k) s_k - sum_l w_kl s_l >= tau_k s_k > 0``; so ``S_ki < S_ii``, ``S`` is 0 across
      components and ``y_i = sum_k S_ki <= n_C S_ii``. And ``S_ii >= 1 / Q_ii`` (Cauchy-Schwarz), so
      ``l_i <= y_i Q_ii - 1 = sum_j w_ij y_j`` (row ``i`` of ``Q y = 1``), while at the largest ``y_k``,
      row ``k`` gives ``tau_k y_k <= 1``, so every ``y_j <= 1 / min tau``.
    * ``floor_i = max(0, max_j w_ij / Q_jj)``: the adversary ``A(i, [n] - {i, j})`` has the single unknown
      ``j`` and coefficient ``w_ij / Q_jj`` (``w_iU^T Q_UU^-1 1``); theorem 5.2 puts ``l_i`` above it."""
    n = prior.size
    counts = np.diff(weights.indptr).astype(np.float64)
    _, labels = connected_components(weights, directed=False)
    sizes = np.bincount(labels)[labels]
    with np.errstate(over="ignore", under="ignore", divide="ignore", invalid="ignore"):
        degrees = np.asarray(weights.sum(axis=1)).ravel()
        smallest = prior.min()
        by_degree = degrees / smallest * (1 + _gamma(counts + 2.0))
        ceiling = np.fmin((sizes - 1).astype(np.float64), by_degree + 8 * SMALLEST_SUBNORMAL)
        diagonal = degrees + prior
        rows = np.repeat(np.arange(n), np.diff(weights.indptr))
        columns = weights.indices
        single = (
            weights.data / diagonal[columns] * (1 - _gamma(counts[columns] + 4.0)) - 8 * SMALLEST_SUBNORMAL
        )
    floor = np.zeros(n)
    np.fmax.at(floor, rows, np.where(np.isnan(single), 0.0, single))
    return floor, ceiling


def _consistent(
    values: FloatArray, floor: FloatArray, ceiling: FloatArray, *, upper: bool, what: str = "leakage"
) -> None:
    """Refuse computed bounds that are NaN, or (``upper``) below ``floor`` or (lower ends) above ``ceiling``:
    both sides are rigorous, so either means the floating-point arithmetic left its range. ``what`` names
    the quantity: a leakage coefficient ``l_i`` or a variance ``S_ii`` (``0 < S_ii <= 1 / min tau``)."""
    bad = np.isnan(values) | ((values < floor) if upper else (values > ceiling))
    if bad.any():
        k = int(np.flatnonzero(bad)[0])
        side = "an upper" if upper else "a lower"
        name = "leakage coefficient" if what == "leakage" else "variance"
        raise CertificationError(
            f"{side} bound on a {name} came out {float(values[k])!r} against the exact range "
            f"[{floor[k]:.6g}, {ceiling[k]:.6g}]: the floating-point arithmetic left its range, so no "
            "certificate is given."
        )


def _checked(result: MaxLeakage, floor: FloatArray) -> MaxLeakage:
    """The final consistency check: a finite ``upper`` at least the largest single-edge coefficient."""
    exact = float(floor.max(initial=0.0))
    if not (math.isfinite(result.upper) and exact <= result.upper and result.lower <= result.upper):
        raise CertificationError(
            f"the certified maximum came out {result.upper!r}, against the exact lower bound {exact:.6g} "
            "(the largest single-edge coefficient): the floating-point arithmetic left its range, so no "
            "certificate is given."
        )
    return result


def _row_sums_of_covariance(scaled: _Scaled) -> tuple[FloatArray, FloatArray]:
    """Enclosure of ``y = Q^-1 1``: exactly ``1/tau`` for ``tau I`` (``Q 1 = tau 1``); else one solve,
    intersected with ``1 / max tau <= y_i <= 1 / min tau`` (maximum principle on ``Q y = 1``)."""
    prior = scaled.prior
    if np.all(prior == prior[0]):
        y = np.full(prior.size, 1.0 / prior[0])
        return y * (1 - UNIT_ROUNDOFF), y * (1 + UNIT_ROUNDOFF)
    low = np.full(prior.size, 1.0 / prior.max() * (1 - _gamma(1.0)))
    high = np.full(prior.size, 1.0 / prior.min() * (1 + _gamma(1.0)))
    approx, rho = _ones_solution_estimate(scaled.precision, scaled.diagonal_error)
    if rho < 0.5:
        slack = _gamma(4.0)
        low = np.maximum(low, approx / (1 + rho) * (1 - slack))
        high = np.minimum(high, approx / (1 - rho) * (1 + slack))
    return low, high


@dataclass(frozen=True)
class _Scaled:
    """The model divided by a power of two (``GaussianCorrelationModel._well_scaled``)."""

    weights: SparseMatrix
    precision: SparseMatrix
    prior: FloatArray
    diagonal_error: FloatArray


# --- the model --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ConditionalGaussian:
    """``x_U | x_K``: Gaussian with this ``mean`` and sparse ``precision = Q_UU`` (eq. 12), ``U`` in order."""

    unknown: IntArray
    mean: FloatArray
    precision: SparseMatrix


@dataclass(frozen=True)
class MaxLeakage:
    """Certified ``lower <= max_i l_i <= upper`` over the weak adversaries, hence over all adversaries
    (theorem 5.2). ``node`` attains ``upper``; ``evaluated`` nodes needed an exact evaluation, the others
    were pruned by their bounds."""

    upper: float
    lower: float
    node: int
    evaluated: int


class GaussianCorrelationModel:
    """Tuples jointly Gaussian with precision ``Q = L + diag(tau)`` (definition 5.1 with section 5.5's prior).

    ``adjacency`` is a symmetric sparse matrix of weights ``w_ij >= 0`` (no self loops); ``tau`` is a
    positive number (the seed's ``tau I``) or an array of ``n`` positive prior precisions. Prefer the
    constructors :meth:`from_edges`, :meth:`from_sparse` and :meth:`from_networkx`.

    * Neighbour relation: the target tuple ``x_i`` changes by at most ``M`` (``|x_i - x_i'| <= M``); the
      unknown tuples follow the model conditioned on each value and on the known ones (definition 4.1).
    * Adversary model: every ``A(i, K)`` with ``K`` a subset of ``[n] - {i}``; by theorem 5.2 the weak
      adversaries ``A(i, {})`` leak most.
    * Sensitivity: the sum has DP sensitivity ``M``; the Bayesian one is ``M (1 + max_A l_A)`` (eq. 26).
    """

    def __init__(self, adjacency: Any, *, tau: Any) -> None:
        weights = _check_adjacency(adjacency)
        self._prior = _check_prior(tau, weights.shape[0])
        self._weights = weights
        with np.errstate(over="ignore"):
            diagonal = np.asarray(weights.sum(axis=1)).ravel() + self._prior
        if not np.all(np.isfinite(diagonal)):
            i = int(np.flatnonzero(~np.isfinite(diagonal))[0])
            raise CertificationError(
                f"the weights and prior of tuple {i} add up to more than the largest float; divide tau and "
                "every weight by one factor (the leakage depends only on their ratio)."
            )
        self._precision = sp.csr_array(sp.diags_array(diagonal) - weights)
        self._precision.sort_indices()
        # |Q_ii as declared - Q_ii as stored|: the degree is a sum of deg_i rounded terms, plus tau_i.
        self._diagonal_error = _gamma(np.diff(weights.indptr) + 1.0) * diagonal

    @classmethod
    def from_edges(
        cls, edges: ArrayLike, n: int | None = None, weights: ArrayLike | None = None, *, tau: Any
    ) -> GaussianCorrelationModel:
        """From undirected edges ``(u, v)`` (each listed once) with optional weights (default 1).

        >>> GaussianCorrelationModel.from_edges([(0, 1)], n=3, tau=0.5).n
        3
        """
        pairs, values, size = _check_edges(edges, n, weights)
        upper = sp.coo_array((values, (pairs[:, 0], pairs[:, 1])), shape=(size, size))
        return cls(upper + upper.T, tau=tau)

    @classmethod
    def from_sparse(cls, adjacency: Any, *, tau: Any) -> GaussianCorrelationModel:
        """From a symmetric scipy.sparse weight matrix ``W`` (zero diagonal, entries ``>= 0``)."""
        return cls(adjacency, tau=tau)

    @classmethod
    def from_networkx(cls, graph: Any, *, tau: Any, weight: str = "weight") -> GaussianCorrelationModel:
        """From an undirected networkx graph whose nodes are ``0 .. n-1``; edge attribute ``weight``
        (default 1) is ``w_ij``."""
        import networkx as nx

        if not isinstance(graph, nx.Graph) or graph.is_directed() or graph.is_multigraph():
            raise ArgumentTypeError(
                "graph must be an undirected networkx.Graph (not directed, not a multigraph)."
            )
        n = graph.number_of_nodes()
        if set(graph.nodes) != set(range(n)):
            raise ArgumentError(
                "graph nodes must be the tuple ids 0..n-1 (see convert_node_labels_to_integers)."
            )
        adjacency = nx.to_scipy_sparse_array(
            graph, nodelist=list(range(n)), weight=weight, dtype=np.dtype(float)
        )
        return cls(adjacency, tau=tau)

    @property
    def n(self) -> int:
        """Number of tuples."""
        return int(self._prior.size)

    @property
    def prior(self) -> FloatArray:
        """The prior precisions ``tau_k`` (all equal to ``tau`` for the seed's ``tau I``)."""
        return np.array(self._prior)

    @property
    def adjacency(self) -> SparseMatrix:
        """The weight matrix ``W`` (CSR)."""
        return self._weights.copy()

    @property
    def precision(self) -> SparseMatrix:
        """``Q = D - W + diag(tau)`` (CSR): eq. 10's Laplacian plus the prior."""
        return self._precision.copy()

    def _block(self, rows: IntArray, cols: IntArray) -> SparseMatrix:
        """``Q[rows, cols]`` as CSR."""
        return sp.csr_array(self._precision[rows][:, cols])

    def conditional(self, known: Iterable[Any], values: ArrayLike) -> ConditionalGaussian:
        """The distribution of the unknown tuples given ``x_K = values`` (eq. 12): precision ``Q_UU`` and
        mean ``-Q_UU^-1 Q_UK x_K``; with one unknown tuple it is eq. 16's weighted neighbour average."""
        k = _check_nodes(known, self.n, "known")
        x = np.asarray(values, dtype=np.float64)
        if x.shape != (k.size,) or not np.all(np.isfinite(x)):
            raise ArgumentError(f"values must be {k.size} finite numbers, one per known tuple.")
        unknown = np.setdiff1d(np.arange(self.n), k)
        block = self._block(unknown, unknown)
        rhs = -(self._block(unknown, k) @ x)
        mean = _pcg(block, rhs[:, None])[:, 0] if unknown.size and np.any(rhs) else np.zeros(unknown.size)
        return ConditionalGaussian(unknown=unknown, mean=mean, precision=block)

    def adversary_matrix(self, target: int, known: Iterable[Any] = ()) -> FloatArray:
        """``L_A`` of eq. 24 for ``A(target, known)``: the precision of ``(x_0, x_i, x_K)``, ``x_0 = s_U/m``.

        With ``z = Q_UU^-1 1``: ``Var(x_0 | x_C) = 1^T z / m^2``, so ``w_0 = m^2 / 1^T z``; the conditional
        mean ``-(1/m) z^T Q_UC x_C`` gives ``w_0C = (w_0 / m) W_CU z``; and the ``C`` block is the marginal
        precision ``Q_CC - Q_CU Q_UU^-1 Q_UC`` plus ``w_0C w_0C^T / w_0``. Solved by conjugate gradients to
        working precision (not certified, unlike :meth:`leakage_of`). Needs at least one unknown tuple."""
        i, k = _check_adversary(target, known, self.n)
        c = np.r_[i, k]
        u = np.setdiff1d(np.arange(self.n), c)
        if not u.size:
            raise ArgumentError(
                "the adversary knows every other tuple: there is no x_0 (the strong adversary)."
            )
        q_uu = self._block(u, u)
        q_uc = self._block(u, c).toarray()
        solved = _pcg(q_uu, np.column_stack([np.ones(u.size), q_uc]))
        z, g = solved[:, 0], solved[:, 1:]
        w0 = u.size**2 / z.sum()
        w0c = -(w0 / u.size) * (q_uc.T @ z)
        marginal = self._block(c, c).toarray() - q_uc.T @ g
        top = np.r_[w0, -w0c]
        return np.block([[top[None, :]], [-w0c[:, None], marginal + np.outer(w0c, w0c) / w0]])

    def leakage_of(self, target: int, known: Iterable[Any] = ()) -> float:
        """Theorem 5.1's ``l_A`` for ``A(target, known)``: ``w_iU^T Q_UU^-1 1_U`` (module docstring), as the
        upper end of a certified enclosure (:func:`_ones_solution_enclosure`). 0 when nothing is unknown
        (theorem 4.2: the strong adversary's BDP is DP)."""
        i, k = _check_adversary(target, known, self.n)
        u = np.setdiff1d(np.arange(self.n), np.r_[i, k])
        link = self._weights[[i]][:, u].toarray()[0]
        if not u.size or not np.any(link):
            return 0.0
        _, high = _ones_solution_enclosure(self._block(u, u), self._diagonal_error[u])
        return float(link @ high * (1 + _gamma(u.size)))

    def leakage(self) -> FloatArray:
        """Every weak adversary's coefficient ``l_i = y_i / S_ii - 1`` (module theorem), index = tuple id.

        One sparse factorisation of ``Q`` and a selected inversion of its diagonal: accurate to rounding
        but not certified (:meth:`certify_max_leakage` is). The cost is that of the factorisation, small for
        graphs with small separators; for large expander-like graphs use :meth:`max_leakage`."""
        diagonal, lu = _selected_inverse(self._precision)
        if np.all(self._prior == self._prior[0]):
            coefficients = 1.0 / (self._prior[0] * diagonal) - 1.0
        else:
            coefficients = lu.solve(np.ones(self.n)) / diagonal - 1.0
        coefficients[np.diff(self._weights.indptr) == 0] = 0.0  # isolated tuples: exactly 0 (theorem 4.1)
        return np.asarray(coefficients)

    def algorithm1_leakage(self) -> FloatArray:
        """Every weak adversary's coefficient by Algorithm 1 on the dense ``Q`` (``O(n^3)``, theorem 5.3).

        Algorithm 1 takes row 0 as an unknown tuple, so its leaves are tuples ``1..n-1``; tuple 0's
        coefficient comes from merging every other tuple into ``x_0 = x_1`` the same way."""
        if self.n == 1:
            return np.zeros(1)
        dense = self._precision.toarray()
        out = np.empty(self.n)
        _algorithm1(dense, np.arange(self.n), 1, out)
        order = np.r_[1, 0, np.arange(2, self.n)]
        work = dense[np.ix_(order, order)]
        _merge_tail(work, self.n, self.n - 2, 1)
        out[0] = _weak_coefficient(work[:2, :2], self.n - 1)
        return out

    def _well_scaled(self) -> _Scaled | None:
        """``Q``, ``W``, the prior and the diagonal's error divided by the power of two ``2^e`` that puts the
        largest ``Q_ii`` in ``[1/2, 1)`` (``l`` depends only on ``W / tau``), or ``None`` when that division
        is not exact (an entry would become subnormal) or a scaled ``tau_k`` is below
        :data:`NUMERIC_PRIOR_FLOOR` (module docstring, step 1)."""
        exponent = math.frexp(float(self._precision.diagonal().max()))[1]
        precision = self._precision.copy()
        precision.data = np.ldexp(precision.data, -exponent)
        weights = self._weights.copy()
        weights.data = np.ldexp(weights.data, -exponent)
        prior = np.ldexp(self._prior, -exponent)
        normal = np.finfo(np.float64).tiny
        if prior.min() < NUMERIC_PRIOR_FLOOR or (
            precision.data.size and np.abs(precision.data).min() < normal
        ):
            return None
        error = np.ldexp(self._diagonal_error, -exponent) + SMALLEST_SUBNORMAL
        return _Scaled(weights=weights, precision=precision, prior=prior, diagonal_error=error)

    def certify_max_leakage(self, *, max_evaluations: int | None = None) -> MaxLeakage:
        """The largest weak-adversary coefficient, certified and pruned (steps 0-4 of the module docstring).

        Nodes are evaluated in decreasing order of their cheap bound, one first and then in growing blocks
        of simultaneous solves; evaluation stops when the next bound cannot beat the best certified lower
        value. Every ``l_i >= 0`` (``Q^-1 >= 0`` entrywise makes ``Cov(s_U, x_i) >= 0``), so 0 is the first
        certified lower value and tuples without correlations are never evaluated.

        Pruning needs the cheap bounds to separate the nodes, as on random, social or scale-free graphs
        (one evaluation on section 6.1's networks, 21 on ego-Facebook at tau = 0.01). On near-regular graphs
        (grids, lattices) every node stays a candidate, so at most ``max_evaluations`` nodes are evaluated
        (default ``max(256, 2^24 // n)``: every node up to ``n = 4096``; pass ``n`` for no cap). Beyond the
        cap ``upper`` also covers the largest remaining cheap bound: still an upper bound on the maximum, but
        possibly loose (up to 1.9x on a 100 x 100 grid at tau = 0.01), so compare it with ``lower``.

        When the floating-point phase cannot run (step 1: ``tau`` tiny next to the weights, or weights so
        unequal that scaling would lose bits), the result is step 0's exact bounds (for a tiny ``tau``,
        ``upper`` is the largest component size minus 1) and ``evaluated`` is 0. ``lower`` is never below
        the largest single-edge coefficient. Raises :class:`CertificationError` rather than return a
        number if a computed bound is NaN or contradicts an exact one."""
        default = max(256, EVALUATION_WORK // self.n)
        budget = default if max_evaluations is None else _check_budget(max_evaluations)
        floor, ceiling = _structural_bounds(self._weights, self._prior)
        scaled = self._well_scaled()
        if scaled is None:
            node = int(np.argmax(ceiling))
            return _checked(MaxLeakage(float(ceiling[node]), float(floor.max()), node, 0), floor)
        sums = _row_sums_of_covariance(scaled)
        variance_floor = _covariance_diagonal_lower_bounds(
            scaled.weights, scaled.precision, scaled.prior, scaled.diagonal_error
        )
        most = 1.0 / scaled.prior.min() * (1 + _gamma(2.0))  # S_ii <= 1 / lambda_min(Q) <= 1 / min tau
        _consistent(variance_floor, np.zeros(self.n), np.full(self.n, most), upper=False, what="variance")
        ritz = _leakage_interval((sums[1], sums[1]), (variance_floor, variance_floor))[1]
        # an isolated tuple: its block of Q is tau_i, so y_i = S_ii = 1 / tau_i and l_i = 0 (theorem 4.1)
        ritz[np.diff(self._weights.indptr) == 0] = 0.0
        _consistent(ritz, floor, ceiling, upper=True)
        bounds = np.fmin(ritz, ceiling)
        order = np.argsort(-bounds, kind="stable")
        smallest = float(scaled.prior.min())
        best_lower, best_upper, best_node, done, evaluated, block = 0.0, 0.0, int(order[0]), 0, 0, 1
        while done < self.n and bounds[order[done]] > best_lower and evaluated < budget:
            chunk = order[done : done + min(block, budget - evaluated)]
            done += chunk.size
            chunk = chunk[bounds[chunk] > best_lower]
            evaluated += chunk.size
            variances = _inverse_diagonal_enclosure(scaled.precision, chunk, smallest, scaled.diagonal_error)
            none, cap = np.zeros(chunk.size), np.full(chunk.size, most)
            _consistent(variances[0], none, cap, upper=False, what="variance")
            _consistent(variances[1], none, cap, upper=True, what="variance")
            low, high = _leakage_interval((sums[0][chunk], sums[1][chunk]), variances)
            _consistent(high, floor[chunk], ceiling[chunk], upper=True)
            _consistent(low, floor[chunk], ceiling[chunk], upper=False)
            low, high = np.maximum(low, floor[chunk]), np.fmin(high, bounds[chunk])
            best_lower = max(best_lower, float(low.max()))
            if high.max() > best_upper:
                best_upper, best_node = float(high.max()), int(chunk[np.argmax(high)])
            block = min(4 * block, max(1, BLOCK_ENTRIES // self.n))
        if done < self.n and bounds[order[done]] > best_upper:  # out of budget: the rest is only bounded
            best_upper, best_node = float(bounds[order[done]]), int(order[done])
        lower = max(best_lower, float(floor.max()))
        return _checked(MaxLeakage(upper=best_upper, lower=lower, node=best_node, evaluated=evaluated), floor)

    def max_leakage(self, *, max_evaluations: int | None = None) -> float:
        """``max_A l_A`` over all ``n 2^(n-1)`` adversaries (theorem 5.2), as a certified upper bound
        (:meth:`certify_max_leakage`)."""
        return self.certify_max_leakage(max_evaluations=max_evaluations).upper

    def laplace_scale(self, *, epsilon: float, M: float) -> float:
        """Eq. 26: the smallest Laplace scale making the sum epsilon-BDP, ``lambda = (M / eps)(1 + max l)``.

        Neighbour relation, adversary model and sensitivity as in the class docstring; the Bayesian
        sensitivity ``M (1 + max l)`` uses the certified upper bound of :meth:`max_leakage`."""
        check_positive(epsilon, "epsilon")
        check_positive(M, "M")
        return M * (1.0 + self.max_leakage()) / epsilon

    def laplace_mechanism(self, *, epsilon: float, M: float) -> Laplace:
        """The epsilon-BDP release of ``sum(x)``: :class:`~kakeibo.mechanisms.Laplace` with sensitivity
        ``M (1 + max l)``. Any mechanism whose outputs on two answers at most that far apart are within
        ``e^eps`` is epsilon-BDP here: both conditional laws of the sum are the same Gaussian shifted by at
        most ``M (1 + l_A)`` (theorem 5.1), so the output densities are averages of pairs within ``e^eps``."""
        check_positive(epsilon, "epsilon")
        check_positive(M, "M")
        return Laplace(sensitivity=M * (1.0 + self.max_leakage()), epsilon=epsilon)


def _covariance_diagonal_lower_bounds(
    weights: SparseMatrix,
    precision: SparseMatrix,
    prior: FloatArray,
    diagonal_error: FloatArray | None = None,
) -> FloatArray:
    """A lower bound on every ``S_ii`` in ``O(nnz)``: Rayleigh-Ritz on ``V_i = [e_i, w_i, 1]``.

    ``S_ii = max_v (v_i)^2 / v^T Q v`` over vectors ``v`` (Cauchy-Schwarz in the ``Q`` inner product), so
    ``S_ii >= (c^T b)^2 / c^T G c`` for any ``c``, with ``G = V^T Q V`` and ``b = V^T e_i = (1, 0, 1)``:
    ``G = [[Q_ii, -sum_j w_ij^2, tau_i], [., w^T Q w, sum_j w_ij tau_j], [., ., sum_k tau_k]]``
    (``Q 1 = tau``).
    ``w^T Q w`` is replaced by ``sum_j w_ij^2 Q_jj``, which is larger (the dropped terms ``-w_ij w_ik w_jk``
    are ``<= 0``) and so keeps the bound valid. ``c = G^-1 b`` is solved approximately (any ``c`` is valid);
    the quotient is evaluated with ``gamma_k`` slack for the rounding of ``G``'s sums (``Q``'s stored diagonal
    included) and of ``c^T G c``, and an absolute slack for products that underflow. A quotient that is not
    finite (its numerator overflowed) is dropped, and ``1 / Q_ii`` (``diagonal_error`` added to ``Q_ii``)
    remains. The ``1`` direction carries the global mode ``1 / sum tau`` that dominates ``S_ii`` for small
    ``tau``."""
    n = prior.size
    squares = weights.multiply(weights)
    gram = np.zeros((n, 3, 3))
    gram[:, 0, 0] = precision.diagonal()
    gram[:, 0, 1] = gram[:, 1, 0] = -np.asarray(squares.sum(axis=1)).ravel()
    gram[:, 0, 2] = gram[:, 2, 0] = prior
    gram[:, 1, 1] = squares @ precision.diagonal()
    gram[:, 1, 2] = gram[:, 2, 1] = weights @ prior
    gram[:, 2, 2] = prior.sum()
    gram[gram[:, 1, 1] == 0, 1, 1] = 1.0  # an isolated tuple: w_i = 0 is not a direction
    b = np.array([1.0, 0.0, 1.0])
    terms = n + np.diff(weights.indptr).max(initial=0) + 16
    with np.errstate(over="ignore", under="ignore", divide="ignore", invalid="ignore"):
        regularised = gram + 1e-12 * np.einsum("nii->ni", gram)[:, :, None] * np.eye(3)
        c = np.linalg.solve(regularised, np.broadcast_to(b, (n, 3))[..., None])[..., 0]
        quadratic = np.einsum("ni,nij,nj->n", c, gram, c)
        size = 1.0 + np.abs(c).max(axis=1)
        slack = _gamma(terms) * np.einsum("ni,nij,nj->n", np.abs(c), np.abs(gram), np.abs(c))
        slack = slack + 16 * terms * SMALLEST_SUBNORMAL * size * size
        numerator = (c @ b) ** 2 * (1 - _gamma(4.0)) - 4 * SMALLEST_SUBNORMAL
        ritz = numerator / (quadratic + slack)
        usable = np.isfinite(ritz) & (quadratic - slack > 0) & (numerator > 0)
        ritz = np.where(usable, ritz, 0.0)
        error = 0.0 if diagonal_error is None else diagonal_error
        single = 1.0 / (gram[:, 0, 0] + error) * (1 - _gamma(3.0))
    return np.asarray(np.maximum(ritz * (1 - _gamma(3.0)), single))
