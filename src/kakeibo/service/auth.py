"""Who is calling the query service: an analyst, the administrator, or nobody -- and how often they may try.

:class:`Gate` turns a presented key into an analyst's name or :data:`ADMIN`. Checking a key costs a scrypt
derivation (tens of milliseconds, on purpose), so guessing is throttled per client address: an address that
presented ``failed_per_minute`` bad keys within a minute gets 429 without any derivation for the rest of that
minute, except for keys this process has already verified (an analyst or admin who was working before the
guessing started keeps working). A verified admin key, like a verified analyst key (:mod:`.registry`), is
remembered by its SHA-256 only. :class:`RateLimiter` is the sliding one-minute window both limits use.
"""

from __future__ import annotations

import collections
import threading
import time

from fastapi import HTTPException

from .registry import AnalystRegistry, fingerprint, verify_key

__all__ = ["ADMIN", "Gate", "RateLimiter"]

#: What :meth:`Gate.identify` returns for the admin key (no analyst name can look like it).
ADMIN = "(admin)"


class RateLimiter:
    """At most ``limit`` events per key in any 60-second window."""

    def __init__(self, limit: int) -> None:
        self._limit = limit
        self._seen: dict[str, collections.deque[float]] = collections.defaultdict(collections.deque)
        self._lock = threading.Lock()

    def _window(self, key: str) -> collections.deque[float]:
        window, now = self._seen[key], time.monotonic()
        while window and now - window[0] > 60:
            window.popleft()
        return window

    def full(self, key: str) -> bool:
        """Whether ``key`` has used up its window (nothing is counted)."""
        with self._lock:
            return len(self._window(key)) >= self._limit

    def record(self, key: str) -> None:
        with self._lock:
            self._window(key).append(time.monotonic())

    def allow(self, key: str) -> bool:
        """Count one event for ``key`` unless its window is full."""
        with self._lock:
            window = self._window(key)
            if len(window) >= self._limit:
                return False
            window.append(time.monotonic())
            return True


class Gate:
    """Identifies callers by their key (see the module docstring)."""

    def __init__(self, registry: AnalystRegistry, admin_key_hash: str, *, failed_per_minute: int) -> None:
        self._registry = registry
        self._admin_key_hash = admin_key_hash
        self._admin: bytes | None = None  # SHA-256 of the admin key once verified
        self._failures = RateLimiter(failed_per_minute)

    def identify(self, address: str, key: str | None) -> str | None:
        """The analyst's name, :data:`ADMIN`, or ``None`` for a missing, wrong or revoked key (counted as a
        failure of ``address`` when a key was presented); 429 while ``address`` is over its failure limit."""
        if key is None:
            return None
        known_as = fingerprint(key)
        if known_as == self._admin:
            return ADMIN
        if self._failures.full(address) and not self._registry.recognised(key):
            raise HTTPException(429, "too many failed key checks from this address; retry in a minute.")
        name = self._registry.authenticate(key)
        if name is not None:
            return name
        if verify_key(key, self._admin_key_hash):
            self._admin = known_as
            return ADMIN
        self._failures.record(address)
        return None
