"""Privacy accounting: the persisted, hash-chained budget ledger and the composition rules it applies.

* :class:`Ledger` -- SQLite-backed, one ``BEGIN IMMEDIATE`` transaction per charge, hash-chained entries
  and budgets, per-analyst / per-dataset budgets, idempotent request ids.
* Composition -- :func:`sequential_composition`, :func:`advanced_composition` (Dwork, Rothblum and Vadhan
  2010), :func:`optimal_homogeneous_composition` (Kairouz, Oh and Viswanath 2015), :func:`zcdp_composition`
  (Bun and Steinke 2016), and the ledger policies built on them, among them the tight books:
  :class:`RDPComposition` (Renyi curves, a privacy filter) and :class:`PLDComposition` (privacy-loss
  distributions, for planned sequences).
* Mechanism curves (:mod:`.curves`) -- what the tight books compose: :class:`MechanismLoss` pairs a declared
  loss with a :class:`Curve` (:class:`GaussianNoise`, :class:`LaplaceNoise`, :class:`SubsampledGaussian`,
  :class:`Composed`, ...); :mod:`.pld` holds the privacy-loss distributions.
* Parallel composition over the query-overlap graph (seed 002, slides 51-61) -- :class:`Box`,
  :func:`max_weighted_depth`, :func:`max_weight_clique`, :func:`parallel_composition`.
"""

from __future__ import annotations

from .composition import (
    AdvancedComposition,
    CompositionPolicy,
    PLDComposition,
    RDPComposition,
    SequentialComposition,
    ZCDPComposition,
    advanced_composition,
    convert,
    optimal_homogeneous_composition,
    sequential_composition,
    zcdp_composition,
)
from .curves import (
    Composed,
    Concentrated,
    Curve,
    EpsilonDelta,
    GaussianNoise,
    LaplaceNoise,
    MechanismLoss,
    SubsampledGaussian,
)
from .ledger import (
    BudgetExceeded,
    DuplicateRequest,
    Ledger,
    LedgerEntry,
    LedgerIntegrityError,
    Scope,
    Verification,
)
from .overlap import (
    Box,
    Interval,
    boxes_overlap,
    max_weight_clique,
    max_weighted_depth,
    overlap_graph,
    parallel_composition,
)

__all__ = [
    "AdvancedComposition",
    "Box",
    "BudgetExceeded",
    "Composed",
    "CompositionPolicy",
    "Concentrated",
    "Curve",
    "DuplicateRequest",
    "EpsilonDelta",
    "GaussianNoise",
    "Interval",
    "LaplaceNoise",
    "Ledger",
    "LedgerEntry",
    "LedgerIntegrityError",
    "MechanismLoss",
    "PLDComposition",
    "RDPComposition",
    "Scope",
    "SequentialComposition",
    "SubsampledGaussian",
    "Verification",
    "ZCDPComposition",
    "advanced_composition",
    "boxes_overlap",
    "convert",
    "max_weight_clique",
    "max_weighted_depth",
    "optimal_homogeneous_composition",
    "overlap_graph",
    "parallel_composition",
    "sequential_composition",
    "zcdp_composition",
]
