"""The in-memory tally a ledger checks budgets against: what each scope has spent, kept as running sums.

A :class:`~kakeibo.accounting.Ledger` caches its committed entries (they are append-only) and adds each
one to a :class:`Tally` once, as an :class:`Item` of additive weights under the composition policy. A
budget check then costs O(groups + distinct regions), not O(entries): charges without a region are summed
exactly per (analyst, dataset), and charges over regions compose by the maximum weighted depth of those
regions per dataset (:func:`~kakeibo.accounting.max_weighted_depth`). :mod:`.verify` builds a fresh tally
from the stored rows, independently of the ledger's cache.
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction

from ..privacy import PrivacyLoss
from .composition import CompositionPolicy, kind_zero
from .overlap import Box, max_weighted_depth
from .records import LedgerEntry, Scope

__all__ = ["Item", "Tally"]


@dataclass(frozen=True)
class Item:
    """A charge as the composition needs it: additive weights, region and scope keys."""

    weights: tuple[Fraction, ...]
    region: Box | None
    analyst: str | None
    dataset: str | None

    @classmethod
    def from_entry(cls, entry: LedgerEntry, policy: CompositionPolicy, kind: type[PrivacyLoss]) -> Item:
        """The item of a committed entry, weighed by ``policy`` against budgets of ``kind``."""
        return cls(policy.weights(entry.loss, kind), entry.region, entry.analyst, entry.dataset)


_Key = tuple[str | None, str | None]


class Tally:
    """Charges grouped by (analyst, dataset): exact running sums of those without a region, and per distinct
    region the summed weights of the charges over it (identical boxes always overlap, so merging them
    keeps the maximum weighted depth), composed by ``policy`` into losses of ``kind``."""

    def __init__(self, policy: CompositionPolicy, kind: type[PrivacyLoss]) -> None:
        self.policy = policy
        self.kind = kind
        self.width = len(policy.weights(kind_zero(kind), kind))
        self.counts: dict[_Key, int] = {}
        self.plain: dict[_Key, list[Fraction]] = {}
        self.regions: dict[_Key, dict[Box, list[Fraction]]] = {}

    def add(self, item: Item) -> None:
        key = (item.analyst, item.dataset)
        self.counts[key] = self.counts.get(key, 0) + 1
        if item.region is None:
            sums = self.plain.setdefault(key, [Fraction(0)] * self.width)
        else:
            sums = self.regions.setdefault(key, {}).setdefault(item.region, [Fraction(0)] * self.width)
        for j, weight in enumerate(item.weights):
            sums[j] += weight

    def sums(self, scope: Scope, extra: Item | None = None) -> tuple[tuple[Fraction, ...], bool]:
        """Per-weight totals of the charges ``scope`` covers (plus ``extra``): plain sums, plus the maximum
        weighted depth of the regions per dataset; and whether there is any charge at all."""
        covered = [key for key in self.counts if scope.covers(*key)]
        totals = [Fraction(0)] * self.width
        by_dataset: dict[str | None, dict[Box, list[Fraction]]] = {}
        for key in covered:
            for j, weight in enumerate(self.plain.get(key, ())):
                totals[j] += weight
            for box, weights in self.regions.get(key, {}).items():
                merged = by_dataset.setdefault(key[1], {}).setdefault(box, [Fraction(0)] * self.width)
                for j, weight in enumerate(weights):
                    merged[j] += weight
        if extra is not None:
            if extra.region is None:
                target = totals
            else:
                target = by_dataset.setdefault(extra.dataset, {}).setdefault(
                    extra.region, [Fraction(0)] * self.width
                )
            for j, weight in enumerate(extra.weights):
                target[j] += weight
        for group in by_dataset.values():
            boxes = list(group)
            for j in range(self.width):
                column = [group[box][j] for box in boxes]
                if any(column):
                    totals[j] += max_weighted_depth(boxes, column)
        return tuple(totals), bool(covered) or extra is not None

    def spent(self, scope: Scope) -> PrivacyLoss:
        """What the charges ``scope`` covers have spent, composed by the policy."""
        sums, any_charge = self.sums(scope)
        return self.policy.total(sums, self.kind, any_charge=any_charge)
