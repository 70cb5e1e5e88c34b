"""The in-memory tally a ledger checks budgets against: what each scope has spent, kept as running sums.

A :class:`~kakeibo.accounting.Ledger` caches its committed entries (they are append-only) and adds each
one to a :class:`Tally` once, as an :class:`Item` of additive weights under the composition policy. A
budget check then costs O(groups + distinct regions), not O(entries): charges without a region are summed
exactly per (analyst, dataset), and charges over regions compose by the maximum weighted depth of those
regions per dataset (:func:`~kakeibo.accounting.max_weighted_depth`). :mod:`.verify` builds a fresh tally
from the stored rows, independently of the ledger's cache.
"""

from __future__ import annotations

from collections.abc import Hashable
from dataclasses import dataclass
from fractions import Fraction

from ..privacy import PrivacyLoss
from .composition import CompositionPolicy, Weights
from .overlap import Box, max_weighted_depth
from .records import LedgerEntry, Scope

__all__ = ["Item", "Tally"]


@dataclass(frozen=True)
class Item:
    """A charge as the composition needs it: additive weights (by key), region and scope keys."""

    weights: Weights
    region: Box | None
    analyst: str | None
    dataset: str | None

    @classmethod
    def from_entry(cls, entry: LedgerEntry, policy: CompositionPolicy, kind: type[PrivacyLoss]) -> Item:
        """The item of a committed entry, weighed by ``policy`` against budgets of ``kind``."""
        return cls(policy.weights(entry.loss, kind), entry.region, entry.analyst, entry.dataset)


_Key = tuple[str | None, str | None]


def _add(target: dict[Hashable, Fraction], weights: Weights, times: int = 1) -> None:
    for key, weight in weights.items():
        target[key] = target.get(key, Fraction(0)) + weight * times


class _Sums:
    """Exact sums of weights, added lazily: charges with the very same weights object (the tight books hand
    out one cached object per mechanism) are counted, and folded into the sums when they are read, so that
    rebuilding a tally from 100,000 entries adds each distinct mechanism's weights once."""

    def __init__(self) -> None:
        self._sums: dict[Hashable, Fraction] = {}
        self._pending: dict[int, tuple[Weights, int]] = {}  # id -> (the object, kept alive; its count)

    def add(self, weights: Weights) -> None:
        held, count = self._pending.get(id(weights), (weights, 0))
        self._pending[id(weights)] = (held, count + 1)

    def totals(self) -> dict[Hashable, Fraction]:
        for weights, count in self._pending.values():
            _add(self._sums, weights, count)
        self._pending.clear()
        return self._sums


class Tally:
    """Charges grouped by (analyst, dataset): exact running sums of those without a region, and per distinct
    region the summed weights of the charges over it (identical boxes always overlap, so merging them
    keeps the maximum weighted depth), composed by ``policy`` into losses of ``kind``. Weights are sparse
    (a key a charge does not name weighs 0): the PLD books key them by mechanism."""

    def __init__(self, policy: CompositionPolicy, kind: type[PrivacyLoss]) -> None:
        self.policy = policy
        self.kind = kind
        self.counts: dict[_Key, int] = {}
        self.plain: dict[_Key, _Sums] = {}
        self.regions: dict[_Key, dict[Box, _Sums]] = {}

    def add(self, item: Item) -> None:
        key = (item.analyst, item.dataset)
        self.counts[key] = self.counts.get(key, 0) + 1
        if item.region is None:
            self.plain.setdefault(key, _Sums()).add(item.weights)
        else:
            self.regions.setdefault(key, {}).setdefault(item.region, _Sums()).add(item.weights)

    def sums(self, scope: Scope, extra: Item | None = None) -> tuple[dict[Hashable, Fraction], bool]:
        """Per-weight totals of the charges ``scope`` covers (plus ``extra``): plain sums, plus the maximum
        weighted depth of the regions per dataset; and whether there is any charge at all."""
        covered = [key for key in self.counts if scope.covers(*key)]
        totals: dict[Hashable, Fraction] = {}
        by_dataset: dict[str | None, dict[Box, dict[Hashable, Fraction]]] = {}
        for key in covered:
            if key in self.plain:
                _add(totals, self.plain[key].totals())
            for box, sums in self.regions.get(key, {}).items():
                _add(by_dataset.setdefault(key[1], {}).setdefault(box, {}), sums.totals())
        if extra is not None:
            if extra.region is None:
                _add(totals, extra.weights)
            else:
                _add(by_dataset.setdefault(extra.dataset, {}).setdefault(extra.region, {}), extra.weights)
        for group in by_dataset.values():
            boxes = list(group)
            for weight_key in {k for weights in group.values() for k in weights}:
                column = [group[box].get(weight_key, Fraction(0)) for box in boxes]
                if any(column):
                    totals[weight_key] = totals.get(weight_key, Fraction(0)) + max_weighted_depth(
                        boxes, column
                    )
        return totals, bool(covered) or extra is not None

    def spent(self, scope: Scope) -> PrivacyLoss:
        """What the charges ``scope`` covers have spent, composed by the policy."""
        sums, any_charge = self.sums(scope)
        return self.policy.total(sums, self.kind, any_charge=any_charge)
