"""The encrypted summary's protocol, each party in its own operating-system process.

:func:`encrypted_summary` starts the crypto service provider, the analytics server and one process per
data owner (``processes=False`` runs the same objects in this process), passes only the messages the
protocol allows between them (public key, ciphertexts, the block ends, query ranges) and returns the
analyst's handle, :class:`EncryptedSummary`. Every message is recorded in ``transcript`` (sender,
receiver, kind, bytes), so a test can check what each party was ever sent.

Messages travel over :mod:`multiprocessing` pipes between processes this module started itself (their
pickling is trusted; nothing here accepts a message from outside).
"""

from __future__ import annotations

import multiprocessing
import pickle
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from multiprocessing.connection import Connection
from typing import Any

from ..accounting import Ledger
from ..errors import ArgumentError
from .parties import AnalyticsServer, CryptoServiceProvider, DataOwner, Domain, Grid, Upload
from .partition import RangeCount, Segments, SummaryPlan

__all__ = ["EncryptedSummary", "OwnerData", "Party", "encrypted_summary"]


def _serve(
    connection: Connection, factory: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]
) -> None:
    """A party's process: build the party (sending back whether that failed), then answer method calls
    until told to stop."""
    try:
        party = factory(*args, **kwargs)
    except Exception as error:
        connection.send((False, error))
        return
    connection.send((True, None))
    while True:
        request = connection.recv()
        if request is None:
            return
        method, call_args = request
        try:
            connection.send((True, getattr(party, method)(*call_args)))
        except Exception as error:  # sent back to the caller, raised there
            connection.send((False, error))


class Party:
    """One party: an object of ``factory(*args, **kwargs)``, in its own process or (``process=False``)
    in this one; ``party(method, *args)`` calls its method and returns the result."""

    def __init__(self, factory: Callable[..., Any], *args: Any, process: bool = True, **kwargs: Any) -> None:
        self.name = factory.__name__
        self._local: Any = None
        self._process: Any = None
        if not process:
            self._local = factory(*args, **kwargs)
            return
        context = multiprocessing.get_context("spawn")
        self._connection, child = context.Pipe()
        self._process = context.Process(target=_serve, args=(child, factory, args, kwargs), daemon=True)
        self._process.start()
        child.close()
        self._started = (
            False  # the party's construction is awaited at the first call, so parties start in parallel
        )

    def _await_start(self) -> None:
        if not self._started:
            ok, error = self._connection.recv()
            if not ok:
                self._process.join()
                raise error
            self._started = True

    def __call__(self, method: str, *args: Any) -> Any:
        if self._local is not None:
            return getattr(self._local, method)(*args)
        self._await_start()
        self._connection.send((method, args))
        ok, result = self._connection.recv()
        if not ok:
            raise result
        return result

    @property
    def pid(self) -> int | None:
        return None if self._process is None else int(self._process.pid)

    def close(self) -> None:
        if self._process is not None and self._process.is_alive():
            self._await_start()
            self._connection.send(None)
            self._process.join(timeout=30)
            if self._process.is_alive():
                self._process.kill()
                self._process.join()


@dataclass(frozen=True)
class OwnerData:
    """One data owner's rows: who each row belongs to and its value."""

    persons: Any
    values: Any


@dataclass
class EncryptedSummary:
    """The analyst's handle on a built encrypted summary: each :meth:`range_count` asks the analytics
    server for the masked summary and the provider for its decrypted answer. Close it (or use ``with``) to
    stop the parties' processes."""

    plan: SummaryPlan
    provider: Party
    server: Party
    owners: list[Party]
    transcript: list[tuple[str, str, str, int]] = field(default_factory=list)

    def count(self, segments: Segments, beta: float = 0.05) -> RangeCount:
        """The count over the cells of ``segments`` (see :data:`~kakeibo.crypto.partition.Segments`)."""
        masked = self.server("query", segments)
        self.transcript.append(("analyst", "AnalyticsServer", "query range", _size(segments)))
        self.transcript.append(("AnalyticsServer", "CryptoServiceProvider", "masked summary", _size(masked)))
        result: RangeCount = self.provider("answer", masked, segments, beta)
        return result

    def range_count(self, lo: int, hi: int, beta: float = 0.05) -> RangeCount:
        """The count over the cells ``lo .. hi``."""
        return self.count(((lo, hi),), beta)

    def rebuild(self) -> None:
        """A new summary over the same uploaded ciphertexts: a new release, charged again."""
        gaps = self.server("noisy_gaps") if self.plan.method == "he-friendly" else None
        if gaps is not None:
            self.transcript.append(("AnalyticsServer", "CryptoServiceProvider", "noisy gaps", _size(gaps)))
        ends, noise = self.provider("summarise", gaps)
        self.server("summarise", ends, noise)
        self.transcript.append(
            ("CryptoServiceProvider", "AnalyticsServer", "block ends and noise", _size((ends, noise)))
        )

    def close(self) -> None:
        for party in (self.provider, self.server, *self.owners):
            party.close()

    def __enter__(self) -> EncryptedSummary:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()


def _size(message: Any) -> int:
    return len(pickle.dumps(message))


def encrypted_summary(
    owners: Sequence[OwnerData],
    domain: Domain | Grid,
    plan: SummaryPlan,
    ledger: Ledger | str,
    *,
    max_rows: int,
    processes: bool = True,
    rngs: tuple[Any, Any, Sequence[Any]] | None = None,
    label: str = "encrypted summary",
    analyst: str | None = None,
    dataset: str | None = None,
) -> EncryptedSummary:
    """Build an encrypted DP summary of the owners' rows and return the analyst's handle.

    ``ledger`` is the provider's (a path when ``processes``: the provider opens it in its own process).
    ``rngs`` seeds the provider, the server and each owner (tests and reproduction; default: secure).
    Charged once, to ``ledger``, by the provider: ``plan.privacy_loss``."""
    if not owners:
        raise ArgumentError("a summary needs at least one data owner.")
    if domain.cells != plan.bins:
        raise ArgumentError(f"the domain has {domain.cells} cells and the plan {plan.bins} bins.")
    if processes and not isinstance(ledger, str):
        raise ArgumentError("with processes, pass the ledger's path: the provider opens it in its process.")
    provider_rng, server_rng, owner_rngs = rngs or (None, None, [None] * len(owners))
    if len(owner_rngs) != len(owners):
        raise ArgumentError("rngs must seed every owner.")
    provider = Party(
        CryptoServiceProvider,
        ledger,
        plan,
        provider_rng,
        process=processes,
        label=label,
        analyst=analyst,
        dataset=dataset,
    )
    started: list[Party] = [provider]
    try:
        holders = []
        for data, rng in zip(owners, owner_rngs, strict=True):  # started alongside the provider
            holders.append(
                Party(DataOwner, data.persons, data.values, domain, max_rows, rng, process=processes)
            )
            started.append(holders[-1])
        public = provider("public_key")
        server = Party(AnalyticsServer, public, plan, server_rng, process=processes)
        started.append(server)
        summary = EncryptedSummary(plan, provider, server, holders)
        log = summary.transcript
        log.append(("CryptoServiceProvider", "AnalyticsServer", "public key", len(public)))
        for owner in summary.owners:
            log.append(("CryptoServiceProvider", "DataOwner", "public key", len(public)))
            upload: Upload = owner("upload", public)
            server("receive", upload)
            log.append(("DataOwner", "AnalyticsServer", "ciphertexts", _size(upload)))
        summary.rebuild()
        return summary
    except BaseException:
        for party in started:
            party.close()
        raise
