"""Correlated privacy units: a catalog declares a graph over a table's privacy units, and SUM, COUNT and AVG
on that table are calibrated against every Bayesian adversary of the Gaussian correlation model (Yang, Sato
and Nakagawa, "Bayesian Differential Privacy on Correlated Data", SIGMOD 2015; seed 001, Def. 5.1, Thm. 5.1,
Thm. 5.2 and eq. 26; :mod:`kakeibo.correlated.gaussian`).

Declaration (in the catalog)::

    [tables.visits.correlation]
    edges = "friends.csv"    # an edge file, or inline: [["alice", "bob"], ["bob", "carol", 0.5]]
    tau = 1.0                # the prior precision of section 5.5: larger means weaker correlation

An edge file holds one undirected edge per line: two privacy-unit values and an optional weight
``w >= 0`` (default 1), separated by a comma, a tab or spaces; blank lines and lines starting with ``#``
are skipped, a name ending in ``.gz`` is read through gzip. Each edge appears once and no unit is its own
neighbour. The privacy unit must be an ``int`` or ``str`` column; the node labels are read as that type.

**The guarantee, exactly** (what a release on a correlated table promises):

* *Model.* For every released statistic and every group, the users' contributions ``x_u`` to it are
  jointly Gaussian with precision ``Q = L + tau I`` on the declared graph, independently across statistics
  and groups (definition 5.1 with the prior of section 5.5). Units missing from the graph are isolated
  nodes, independent of everyone; graph nodes missing from the table are still part of the model.
* *Adversary.* ``A(i, K)``: knows the contributions of any set ``K`` of other units and infers the record of
  unit ``i``. By theorem 5.2 the weak adversary ``A(i, {})`` leaks most; its coefficient ``l_i`` is at most
  ``l* = max_i l_i``, computed once per graph as a certified upper bound
  (:meth:`~kakeibo.correlated.GaussianCorrelationModel.max_leakage`). ``l*`` depends on the declared graph
  only, never on the rows. It is never below the truth: for ``tau`` tiny next to the weights it is the
  largest connected component's size minus 1 (the limit of eq. 29, exact up to ``n^2 tau / lambda_2``), and
  a graph whose leakage cannot be certified in floating point (weights whose sums overflow it) is refused
  when the catalog loads, with the reason.
* *Neighbour relation.* Bayesian DP compares any two records of the target (definition 4.1), absence
  included: a *replace* relation. One user's contribution to one group's statistic lies in ``[lo, hi]``
  with ``lo <= 0 <= hi`` (0 when absent): ``[0, kappa]`` for COUNT, ``[0, 1]`` for COUNT(DISTINCT unit),
  ``kappa [min(lower, 0), max(upper, 0)]`` for SUM, ``kappa (upper - lower) / 2 [-1, 1]`` for the centred
  sum behind AVG. Two records then differ in L1 by at most ``Delta = hi - lo`` without GROUP BY, and by
  ``Delta = 2 L0 max(-lo, hi)`` with it (each record touches at most ``L0`` groups).
* *Sensitivity.* Given the target's record, every group's statistic is one Gaussian shifted by the
  regression of the included users on the target. ``Q`` is an M-matrix, so ``Q^-1 >= 0`` entrywise and all
  regression coefficients are non-negative: a subset of the users (a WHERE filter, one group) shifts by at
  most ``(1 + l*)`` times the change of the target's own contribution. Laplace noise of scale
  ``Delta (1 + l*) / epsilon`` (eq. 26 with ``M = Delta``) therefore bounds every adversary's leakage by
  ``epsilon``. It is at least the add/remove DP scale, so the release is also epsilon-DP, which is what the
  ledger charges.
* *Composition.* Under the model, releases of the same statistics are jointly a translate of one Gaussian
  convolved with independent Laplace noises, so leakages add up: sequential composition holds. Parallel
  composition does not -- a correlated friend in another WHERE region is evidence about the target -- so
  charges on a correlated table carry no region.
* *Refused* (with the reason): VARIANCE/STDDEV (a sum of squares, which the model does not describe),
  quantiles, MIN and MAX (the exponential mechanism is not a shifted Laplace), and GROUP BY without public
  keys (private partition selection's delta assumes independent users).
"""

from __future__ import annotations

import gzip
import hashlib
import math
import os
import re
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import numpy as np

from ..correlated import GaussianCorrelationModel
from ..correlated.gaussian import CertificationError
from ..errors import ArgumentError, ArgumentTypeError

__all__ = ["CorrelationBound", "CorrelationSpec"]

EdgeRow = tuple[object, ...]
_SEPARATOR = re.compile(r"\s*,\s*|\t|\s+")
_INTEGER = re.compile(r"[+-]?[0-9]+")
_DECIMAL = re.compile(r"[+-]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?")


@dataclass(frozen=True)
class CorrelationBound:
    """The declared graph as the planner uses it: its size, its certified largest leakage coefficient
    ``l*`` and a digest of the edges (part of a release's identity in the ledger)."""

    units: int
    edges: int
    tau: float
    max_leakage: float
    digest: str

    @property
    def factor(self) -> float:
        """``1 + l*``: every Laplace scale on the table is multiplied by it (eq. 26)."""
        return 1.0 + self.max_leakage

    def __str__(self) -> str:
        return (
            f"Gaussian correlation model over {self.units} units ({self.edges} edges, tau={self.tau:g}), "
            f"certified max leakage l*={self.max_leakage:.6g}: noise scales x{self.factor:.6g}"
        )


@dataclass(frozen=True)
class CorrelationSpec:
    """A correlation graph over the privacy units of one table (see the module docstring).

    ``edges`` is the path of an edge file or the edges themselves, each ``(u, v)`` or ``(u, v, weight)``;
    ``tau > 0`` is the prior precision. The graph is read and checked by :meth:`bound`.

    >>> spec = CorrelationSpec([(1, 2), (2, 3)], tau=1.0)
    >>> bound = spec.bound("int")
    >>> bound.units, bound.edges, round(bound.max_leakage, 9)  # middle unit: 1 / (tau (Q^-1)_22) - 1
    (3, 2, 1.0)
    """

    edges: str | tuple[EdgeRow, ...]
    tau: float

    def __post_init__(self) -> None:
        if isinstance(self.tau, bool) or not isinstance(self.tau, (int, float)):
            raise ArgumentTypeError(f"correlation tau must be a positive number, got {self.tau!r}.")
        if not (math.isfinite(self.tau) and self.tau > 0):
            raise ArgumentError(f"correlation tau must be a positive finite number, got {self.tau!r}.")
        object.__setattr__(self, "tau", float(self.tau))
        if isinstance(self.edges, os.PathLike):
            object.__setattr__(self, "edges", os.fspath(self.edges))
        if isinstance(self.edges, str):
            if not self.edges:
                raise ArgumentError("correlation edges must name a file, got an empty string.")
            return
        if isinstance(self.edges, bytes) or not isinstance(self.edges, Iterable):
            raise ArgumentTypeError(
                "correlation edges must be a file path or a list of [u, v] or [u, v, weight]."
            )
        rows = []
        for row in self.edges:
            if isinstance(row, (str, bytes)) or not isinstance(row, Sequence):
                raise ArgumentTypeError(
                    f"each correlation edge must be [u, v] or [u, v, weight], got {row!r}."
                )
            rows.append(tuple(row))
        object.__setattr__(self, "edges", tuple(rows))

    def bound(self, unit_type: str) -> CorrelationBound:
        """Read the graph (node labels of the privacy unit's type, ``"int"`` or ``"str"``), check it and
        compute ``l*``; cached per edge list (a file by its path, size and modification time) and tau."""
        if isinstance(self.edges, str):
            stat = Path(self.edges).stat() if Path(self.edges).is_file() else None
            if stat is None:
                raise FileNotFoundError(f"correlation edge file {self.edges!r} does not exist.")
            key: tuple[object, ...] = ("file", self.edges, stat.st_size, stat.st_mtime_ns)
        else:
            key = ("inline", self.edges)
        return _bound(key, unit_type, self.tau)

    def to_dict(self) -> dict[str, object]:
        """The catalog entry (inverse of the parsing in :meth:`kakeibo.sql.Catalog.from_dict`)."""
        edges = self.edges if isinstance(self.edges, str) else [list(row) for row in self.edges]
        return {"edges": edges, "tau": self.tau}


@lru_cache(maxsize=32)
def _bound(key: tuple[object, ...], unit_type: str, tau: float) -> CorrelationBound:
    """Read the graph and certify ``l*``; a graph whose leakage cannot be certified is refused here, when the
    catalog loads, with the reason, rather than answered with a number that might be below the truth."""
    graph = _graph(key, unit_type)
    try:
        model = GaussianCorrelationModel.from_edges(
            graph.pairs, n=graph.units, weights=graph.weights, tau=tau
        )
        leakage = model.max_leakage()
    except CertificationError as error:
        raise ArgumentError(_uncertifiable(tau, graph.weights, str(error))) from error
    if not (math.isfinite(leakage) and leakage >= 0):  # the model guarantees this; a release relies on it
        raise ArgumentError(_uncertifiable(tau, graph.weights, f"the bound came out {leakage!r}."))
    return CorrelationBound(graph.units, len(graph.pairs), tau, leakage, graph.digest)


def _uncertifiable(tau: float, weights: np.ndarray, reason: str) -> str:
    """One sentence: tau against the weights, what failed, and what to declare instead."""
    return (
        f"tau = {tau:g} is out of proportion to the edge weights (largest {float(weights.max()):g}) for the "
        f"leakage to be certified in floating point ({reason.rstrip('.')}); divide tau and every weight by "
        "one factor so that the largest weight is about 1 (the leakage depends only on their ratio)."
    )


@dataclass(frozen=True)
class _Graph:
    pairs: np.ndarray
    weights: np.ndarray
    units: int
    digest: str


@lru_cache(maxsize=32)
def _graph(key: tuple[object, ...], unit_type: str) -> _Graph:
    """Node ids by sorted label, checked edges, and a digest of the labelled weighted edge list; ``key`` is
    ``("file", path, size, mtime)`` or ``("inline", edges)``."""
    if unit_type not in ("int", "str"):
        raise ArgumentError(
            f"a correlation graph needs an int or str privacy unit, not {unit_type}: its values label "
            "the nodes."
        )
    rows: Iterable[tuple[int, EdgeRow]]
    if key[0] == "file":
        path = str(key[1])
        where, rows = f"correlation edge file {path}", _file_rows(path)
    else:
        inline = key[1]
        assert isinstance(inline, tuple)
        where, rows = "correlation edges", enumerate(inline, start=1)
    labels: list[object] = []
    weights: list[float] = []
    seen: dict[tuple[object, object], int] = {}
    for line, row in rows:
        if len(row) not in (2, 3):
            raise ArgumentError(
                f"{where}, edge {line}: expected u, v and an optional weight, got {list(row)}."
            )
        u, v = (_label(value, unit_type, where, line) for value in row[:2])
        if u == v:
            raise ArgumentError(f"{where}, edge {line}: unit {u!r} cannot be correlated with itself.")
        pair = (u, v) if u <= v else (v, u)  # type: ignore[operator]  # labels share one type
        if pair in seen:
            raise ArgumentError(f"{where}, edge {line}: ({u!r}, {v!r}) repeats edge {seen[pair]}.")
        seen[pair] = line
        weights.append(_weight(row[2], where, line) if len(row) == 3 else 1.0)
        labels.extend(pair)
    if not seen:
        raise ArgumentError(f"{where}: no edges; drop the correlation declaration for independent units.")
    array = np.array(labels, dtype=np.int64 if unit_type == "int" else object)
    nodes, ids = np.unique(array, return_inverse=True)
    text = "\n".join(f"{u!r}\t{v!r}\t{w!r}" for (u, v), w in zip(seen, weights, strict=True))
    return _Graph(
        pairs=ids.reshape(-1, 2).astype(np.int64),
        weights=np.array(weights),
        units=len(nodes),
        digest=hashlib.sha256(text.encode()).hexdigest(),
    )


def _file_rows(path: str) -> Iterator[tuple[int, EdgeRow]]:
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rb") as handle:
        for line, raw in enumerate(handle, start=1):
            try:
                text = raw.decode("utf-8").strip()
            except UnicodeDecodeError:
                raise ArgumentError(
                    f"correlation edge file {path}, edge {line}: the line is not UTF-8 text."
                ) from None
            if text and not text.startswith("#"):
                yield line, tuple(_SEPARATOR.split(text))


def _label(value: object, unit_type: str, where: str, line: int) -> object:
    if unit_type == "str":
        if isinstance(value, str) and value:
            return value
        raise ArgumentError(
            f"{where}, edge {line}: the str privacy unit needs non-empty labels, got {value!r}."
        )
    if isinstance(value, bool):
        raise ArgumentError(
            f"{where}, edge {line}: the int privacy unit needs integer labels, got {value!r}."
        )
    if isinstance(value, str) and _INTEGER.fullmatch(value):  # ASCII digits only: not '١', not '1_0
        value = int(value)
    if isinstance(value, int) and -(2**63) <= value < 2**63:
        return value
    raise ArgumentError(f"{where}, edge {line}: the int privacy unit needs integer labels, got {value!r}.")


def _weight(value: object, where: str, line: int) -> float:
    weight = math.nan
    if isinstance(value, (int, float)) or (isinstance(value, str) and _DECIMAL.fullmatch(value)):
        weight = float(value)  # a plain decimal only: float() also reads '1_0' and '١'
    if isinstance(value, bool) or not (math.isfinite(weight) and weight >= 0):
        raise ArgumentError(f"{where}, edge {line}: the weight must be a finite number >= 0, got {value!r}.")
    return weight
