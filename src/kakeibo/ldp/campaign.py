"""What an LDP collection asks of each client, stated before it starts, and the data owner's books of it.

A :class:`Campaign` lists the reports it asks of every client (:class:`Ask`: a randomizer, how many reports
a day, and for memoised RAPPOR how many distinct values a client may report) for a number of days. From
that alone it bounds the loss of one client, a day and in all, by sequential composition with RAPPOR's
memoisation credited (Erlingsson et al. 2014, Sec. 3: all reports of one value reveal at most
``epsilon_infinity``):

* an ask of ``r`` reports a day at ``epsilon`` costs ``r epsilon`` a day and ``r d epsilon`` over ``d`` days;
* a memoised RAPPOR ask over at most ``V`` distinct values costs ``min(r epsilon_one, V epsilon_infinity)``
  a day and ``min(r d epsilon_one, V epsilon_infinity)`` in all (each value's reports are capped at
  ``epsilon_infinity``; spreading the reports over ``V`` values reaches the minimum).

:meth:`Campaign.explain` prints these before the campaign starts; a device's
:class:`~kakeibo.ldp.client.ClientLedger` enrols in it and enforces them. On the server,
:meth:`Campaign.book` charges the per-client total to the central :class:`~kakeibo.accounting.Ledger` under
the dataset ``ldp:<population>``, so the data owner's budget for that population composes every campaign
it ran (a campaign booked twice is charged once).

Neighbour relation: local (replacement), any two values of one client, per report; the totals bound what
one client's reports reveal together.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from fractions import Fraction
from typing import TYPE_CHECKING

from ..errors import ArgumentError, ArgumentTypeError
from ..privacy import PureDP
from .framework import LocalRandomizer, check_integer
from .rappor import RAPPOR, OneTimeRAPPOR

if TYPE_CHECKING:
    from ..accounting import Ledger, LedgerEntry

__all__ = ["Ask", "Campaign"]

#: Most reports a campaign may ask of one client a day.
MAX_REPORTS_PER_DAY = 1 << 16
#: Longest campaign, in days (ten years).
MAX_DAYS = 3660


@dataclass(frozen=True)
class Ask:
    """``reports_per_day`` reports by ``randomizer`` from each client. ``distinct_values`` (RAPPOR or
    one-time RAPPOR only, reported through a memoising :class:`~kakeibo.ldp.rappor.RapporClient`): the most
    distinct values one client reports over the campaign, which caps the loss at ``distinct_values
    epsilon_infinity``."""

    randomizer: LocalRandomizer
    reports_per_day: int
    distinct_values: int | None = None

    def __post_init__(self) -> None:
        kind = type(self.randomizer).__name__
        if not isinstance(self.randomizer, LocalRandomizer):
            raise ArgumentTypeError(f"an ask's randomizer must be a local randomizer, not {kind}.")
        check_integer(self.reports_per_day, "reports_per_day", 1, MAX_REPORTS_PER_DAY)
        if self.distinct_values is not None:
            if not isinstance(self.randomizer, (RAPPOR, OneTimeRAPPOR)):
                raise ArgumentError(f"distinct_values credits RAPPOR's memoisation; {kind} does not memoise.")
            check_integer(self.distinct_values, "distinct_values", 1, MAX_REPORTS_PER_DAY * MAX_DAYS)

    def loss(self, days: int) -> Fraction:
        """The most one client loses to this ask over ``days`` days (module docstring)."""
        plain = self.reports_per_day * days * self.randomizer.privacy_loss.epsilon
        if self.distinct_values is None:
            return plain
        assert isinstance(self.randomizer, (RAPPOR, OneTimeRAPPOR))
        return min(plain, self.distinct_values * self.randomizer.longitudinal_loss.epsilon)

    def describe(self, days: int) -> str:
        """One line: the randomizer, the reports, the loss a day and in all."""
        eps = self.randomizer.privacy_loss
        memo = ""
        if self.distinct_values is not None:
            assert isinstance(self.randomizer, (RAPPOR, OneTimeRAPPOR))
            values = f"{self.distinct_values} value" + ("s" if self.distinct_values > 1 else "")
            memo = f", memoised over at most {values} ({self.randomizer.longitudinal_loss} each)"
        daily, total = PureDP(self.loss(1)), PureDP(self.loss(days))
        asked = f"{self.randomizer!r}: {self.reports_per_day} a day at {eps}{memo}"
        return f"{asked} -> {daily} a day, {total} in all"


class Campaign:
    """An LDP collection named ``name`` that asks ``asks`` of each client every day for ``days`` days."""

    def __init__(self, name: str, asks: Sequence[Ask], *, days: int) -> None:
        if not isinstance(name, str) or not name.strip() or len(name) > 200 or not name.isprintable():
            raise ArgumentError("a campaign needs a printable name of 1 to 200 characters.")
        listed = tuple(asks)
        if not listed or not all(isinstance(a, Ask) for a in listed):
            raise ArgumentError("a campaign needs at least one Ask.")
        names = [repr(a.randomizer) for a in listed]
        if len(set(names)) < len(names):
            raise ArgumentError("a campaign lists each randomizer once (merge the asks of the same one).")
        self._name, self._asks = name, listed
        self._days = check_integer(days, "days", 1, MAX_DAYS)

    @property
    def name(self) -> str:
        return self._name

    @property
    def asks(self) -> tuple[Ask, ...]:
        return self._asks

    @property
    def days(self) -> int:
        return self._days

    @property
    def daily_loss(self) -> PureDP:
        """The most one client loses in one day (the asks compose sequentially)."""
        return PureDP(sum((a.loss(1) for a in self._asks), Fraction(0)))

    @property
    def per_client_loss(self) -> PureDP:
        """The most one client loses over the whole campaign."""
        return PureDP(sum((a.loss(self._days) for a in self._asks), Fraction(0)))

    def explain(self) -> str:
        """What the campaign will cost each client, before it starts.

        >>> from kakeibo.ldp import OUE, RAPPOR
        >>> print(Campaign("emoji", [Ask(OUE(epsilon=1, domain_size=8), reports_per_day=2),
        ...                          Ask(RAPPOR(), reports_per_day=4, distinct_values=1)], days=7).explain())
        campaign 'emoji', 7 days, per client (local DP, composed):
          OUE(epsilon=1.0, domain_size=8): 2 a day at epsilon=1 -> epsilon=2 a day, epsilon=14 in all
          RAPPOR(k=128, h=2, m=64, p=0.5, q=0.75, f=0.5, hash_seed=0): 4 a day at epsilon=~1.07429, memoised \
over at most 1 value (epsilon=~4.39445 each) -> epsilon=~4.29714 a day, epsilon=~4.39445 in all
          total: epsilon=~6.29714 a day, epsilon=~18.3944 in all
        """
        lines = [f"campaign {self._name!r}, {self._days} days, per client (local DP, composed):"]
        lines += [f"  {a.describe(self._days)}" for a in self._asks]
        lines.append(f"  total: {self.daily_loss} a day, {self.per_client_loss} in all")
        return "\n".join(lines)

    def book(self, ledger: Ledger, *, population: str, analyst: str | None = None) -> LedgerEntry:
        """Charge :attr:`per_client_loss` to ``ledger`` under the dataset ``ldp:<population>`` (the request id
        names the campaign, so booking it again charges nothing), or raise the ledger's ``BudgetExceeded``
        when the data owner's budget for that population would be exceeded."""
        return ledger.charge(
            self.per_client_loss,
            label=f"LDP campaign {self._name!r}: {self._days} days, {len(self._asks)} asks per client",
            analyst=analyst,
            dataset=f"ldp:{population}",
            request_id=f"ldp-campaign:{self._name}",
        )

    def __repr__(self) -> str:
        return f"Campaign({self._name!r}, {len(self._asks)} asks, days={self._days})"
