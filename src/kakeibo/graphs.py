"""Counting patterns in a graph under node differential privacy: R2T's race over its linear program.

Dong, Fang, Yi, Tao and Machanavajjhala, "R2T: Instance-optimal Truncation for Differentially Private Query
Evaluation with Foreign Keys", SIGMOD 2022, Section 7 (graph pattern counting). A pattern's occurrences are
the results of a self-join of the edge table, computed by DuckDB; each occurrence references its nodes.

**Neighbour relation.** Node-level: two graphs are neighbours when one is the other with one node added
together with all of its edges. A node with degree ``d`` is in up to ``d`` edges, ``d^2`` length-2 paths or
triangles and ``d^3`` rectangles (4-cycles), so no fixed sensitivity bounds a count; R2T races thresholds.

**Mechanism.** For each threshold ``tau_j = GS / base^(K - j)`` (``j = 0 .. K = floor(log_base GS)``, ``GS =
max_degree^e`` and ``e`` the pattern's exponent: 1 for edges, 2 for length-2 paths and triangles, 3 for
rectangles) the count truncated by R2T's linear program ``Q(G, tau_j)``
(:mod:`kakeibo.sql.truncation_lp`, sensitivity ``tau_j`` under node-level neighbours, released within
``1e-6 tau_j`` of the optimum) gets Laplace noise of sensitivity ``(1 + 2e-6) tau_j`` at ``epsilon / (K +
1)``, minus its error bound at ``beta / (K + 1)``; the release is the largest candidate, at least 0 (R2T,
Algorithm 1; :class:`kakeibo.sql.truncation.Race`). ``epsilon``-DP by sequential composition over the
candidates; the maximum is post-processing.

**Accuracy.** With probability at least ``1 - beta`` the released count is at most the true one (every
candidate's noise within its shift), and R2T's Theorem 5.1 bounds how far below it is by a logarithmic
factor of the error the best threshold chosen in hindsight would have. The result carries a ``1 - beta``
interval: its lower end always holds at that level; its upper end holds when no node takes part in more
than ``GS`` occurrences (true when the declared ``max_degree`` holds).

**What this does not hide.** The time of the join and of the linear programs grows with the number of
occurrences, and one node changes it by its own occurrences; like every engine scan's time, it is not
made constant (``docs/architecture.md``, threat table).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import duckdb
import numpy as np
import pyarrow as pa
from numpy.typing import ArrayLike

from . import release
from .accounting import Ledger, LedgerEntry
from .errors import ArgumentError, ArgumentTypeError
from .noise import RandomSource
from .privacy import PureDP, as_fraction
from .sql.truncation import DEFAULT_BASE, Race
from .sql.truncation_lp import Incidence, program_race, race_release

__all__ = ["PATTERNS", "PatternCount", "count", "occurrences"]

#: each pattern's nodes per occurrence, the exponent of the degree bound in its GS, and its occurrences as a
#: DuckDB query over ``e(a, b)`` (each undirected edge once, ``a < b``) and ``d(s, t)`` (both directions);
#: each occurrence is listed once
PATTERNS: dict[str, tuple[tuple[str, ...], int, str]] = {
    "edge": (("a", "b"), 1, "SELECT a, b FROM e"),
    "path2": (  # x - m - y, by its middle node m, x < y
        ("x", "m", "y"),
        2,
        "SELECT d1.t AS x, d1.s AS m, d2.t AS y FROM d d1 JOIN d d2 ON d1.s = d2.s AND d1.t < d2.t",
    ),
    "triangle": (
        ("a", "b", "c"),
        2,
        "SELECT e1.a, e1.b, e2.b AS c FROM e e1 JOIN e e2 ON e1.a = e2.a AND e1.b < e2.b "
        "JOIN e e3 ON e3.a = e1.b AND e3.b = e2.b",
    ),
    "rectangle": (  # a - b - c - d - a, a the least node, b < d
        ("a", "b", "c", "d"),
        3,
        "SELECT d1.s AS a, d1.t AS b, d2.t AS c, d3.t AS d FROM d d1 JOIN d d2 ON d2.s = d1.t "
        "JOIN d d3 ON d3.s = d2.t AND d3.t > d1.t JOIN d d4 ON d4.s = d3.t AND d4.t = d1.s "
        "WHERE d1.s < d1.t AND d1.s < d2.t AND d1.s < d3.t",
    ),
}


@dataclass(frozen=True)
class PatternCount:
    """A released pattern count: ``value``, and the ``1 - beta`` interval ``[low, high]`` around the true
    count (module docstring: ``high`` assumes the declared degree bound), with the thresholds raced and the
    ledger entry that paid for it."""

    pattern: str
    value: float
    low: float
    high: float
    beta: float
    epsilon: float
    taus: tuple[float, ...]
    ledger_entry: LedgerEntry | None


def occurrences(edges: ArrayLike | pa.Table, pattern: str) -> tuple[Incidence, int]:
    """The occurrences of ``pattern`` in the undirected graph ``edges`` (self-loops and repeated edges
    dropped) as an :class:`~kakeibo.sql.truncation_lp.Incidence` over dense node numbers, and the number
    of nodes. This reads the data: call it inside a release's draw only."""
    nodes, _, sql = PATTERNS[pattern]
    con = duckdb.connect()
    con.register("input", _edge_table(edges))
    con.execute(
        "CREATE TABLE e AS SELECT DISTINCT LEAST(x, y) AS a, GREATEST(x, y) AS b FROM input "
        "WHERE x IS NOT NULL AND y IS NOT NULL AND x <> y"
    )
    con.execute(
        "CREATE TABLE ids AS SELECT v, (ROW_NUMBER() OVER (ORDER BY v) - 1)::BIGINT AS i "
        "FROM (SELECT a AS v FROM e UNION SELECT b FROM e)"
    )
    con.execute(
        "CREATE OR REPLACE TABLE e AS SELECT ia.i AS a, ib.i AS b FROM e "
        "JOIN ids ia ON ia.v = e.a JOIN ids ib ON ib.v = e.b"
    )
    con.execute("CREATE TABLE d AS SELECT a AS s, b AS t FROM e UNION ALL SELECT b, a FROM e")
    found = con.sql(sql).to_arrow_table()
    n = int(con.execute("SELECT COUNT(*) FROM ids").fetchone()[0])  # type: ignore[index]
    columns = [found.column(c).to_numpy().astype(np.int64) for c in nodes]
    return Incidence.from_codes(columns, n), n


def count(
    edges: ArrayLike | pa.Table,
    pattern: str,
    *,
    epsilon: float,
    max_degree: int,
    ledger: Ledger,
    beta: float = 0.05,
    base: float = DEFAULT_BASE,
    rng: np.random.Generator | RandomSource | None = None,
    label: str | None = None,
    dataset: str | None = None,
) -> PatternCount:
    """The number of occurrences of ``pattern`` (a key of :data:`PATTERNS`) in ``edges``, released with
    ``epsilon``-DP under node-level neighbours and charged to ``ledger`` (module docstring).

    ``edges`` is an array of shape ``(m, 2)`` of integer node ids or an Arrow table of two integer columns;
    ``max_degree`` declares the degree bound ``D`` that sets the largest threshold ``GS = D^e``."""
    race = _race(pattern, epsilon, max_degree, beta, base)
    _edge_table(edges)  # refuse a bad input before anything is charged
    loss = PureDP(as_fraction(epsilon, "epsilon"))
    charge = release.Charge(loss, label or f"graphs.count({pattern})", dataset=dataset)

    def draw(source: RandomSource) -> tuple[float, float]:
        return race_release(race, occurrences(edges, pattern)[0], source)

    out = release.run(ledger, charge, draw, rng=rng)
    value, high = out.value
    return PatternCount(pattern, value, value, high, beta, float(epsilon), race.taus, out.ledger_entry)


def _race(pattern: str, epsilon: Any, max_degree: Any, beta: Any, base: Any) -> Race:
    """The race for ``pattern`` (public arguments only; refusals here are free)."""
    if pattern not in PATTERNS:
        raise ArgumentError(f"pattern must be one of {', '.join(PATTERNS)}, got {pattern!r}.")
    if isinstance(max_degree, bool) or not isinstance(max_degree, (int, np.integer)) or max_degree < 1:
        raise ArgumentError(f"max_degree must be a positive integer, got {max_degree!r}.")
    if not (isinstance(beta, (int, float)) and 0 < beta < 1):
        raise ArgumentError(f"beta must be in (0, 1), got {beta!r}.")
    if not (isinstance(base, (int, float)) and math.isfinite(base) and base > 1):
        raise ArgumentError(f"base must be a finite number above 1, got {base!r}.")
    share = as_fraction(epsilon, "epsilon")
    if share <= 0:
        raise ArgumentError(f"epsilon must be positive, got {epsilon!r}.")
    gs = int(max_degree) ** PATTERNS[pattern][1]
    return program_race(1.0, gs, float(base), share, float(beta), integer=True)


def _edge_table(edges: ArrayLike | pa.Table) -> pa.Table:
    """``edges`` as an Arrow table of two int64 columns ``x`` and ``y``, or a refusal."""
    if isinstance(edges, pa.Table):
        if edges.num_columns != 2 or not all(_fits(c.type.to_pandas_dtype()) for c in edges.columns):
            raise ArgumentTypeError(
                "an edge table has exactly two integer columns (the two nodes), not unsigned 64-bit ones."
            )
        return pa.table({"x": edges.column(0).cast(pa.int64()), "y": edges.column(1).cast(pa.int64())})
    array = np.asarray(edges)
    if array.ndim != 2 or array.shape[1] != 2 or not _fits(array.dtype):
        raise ArgumentTypeError(
            "edges must be an integer array of shape (m, 2) or an Arrow table of two integer columns "
            "(not unsigned 64-bit: every id must fit in 64-bit signed integers whatever its value)."
        )
    return pa.table({"x": array[:, 0].astype(np.int64), "y": array[:, 1].astype(np.int64)})


def _fits(dtype: Any) -> bool:
    """Whether every value of an integer type fits in int64 (decided by the type, not the values)."""
    kind = np.dtype(dtype)
    return bool(kind.kind == "i" or (kind.kind == "u" and kind.itemsize < 8))
