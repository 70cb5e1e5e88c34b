"""Analysts, their API keys and their dataset grants, for the query service (:mod:`kakeibo.service.app`).

A key is ``kak_<id>_<secret>``: ``id`` (16 hex digits) finds the analyst's row, ``secret`` (32 random bytes,
URL-safe base64) is checked against a salted scrypt digest (RFC 7914; ``n = 2^14, r = 8, p = 1``) with a
constant-time comparison. Only the salt and the digest are stored; a key is shown once, when it is made.
The admin key is checked the same way against a digest in the service configuration
(:func:`hash_key`, printed by ``kakeibo hash-key``).

Budgets are not kept here: they are ledger budgets (per dataset, and per analyst and dataset), so every
change is a row of the ledger's budget chain and never silent.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import os
import re
import secrets
import threading
import time

from ..accounting.storage import open_store
from ..errors import ArgumentError, Error

__all__ = ["NAME_PATTERN", "AnalystExists", "AnalystRegistry", "hash_key", "new_key", "verify_key"]


class AnalystExists(Error, ValueError):  # noqa: N818 -- the name reads as the event it reports
    """An analyst of that name is registered already (the service answers 409)."""


_KEY = re.compile(r"kak_([0-9a-f]{16})_([A-Za-z0-9_-]{43})")
#: Analyst and dataset names: 1-64 letters, digits, ``_ . -``, starting with a letter (a JSON-schema pattern
#: too: the service's request models carry it, so a generated client knows the rule).
NAME_PATTERN = r"^[A-Za-z][A-Za-z0-9_.-]{0,63}$"
_NAME = re.compile(NAME_PATTERN)
_SCHEMA = """
CREATE TABLE IF NOT EXISTS analysts (
    name TEXT PRIMARY KEY, key_id TEXT UNIQUE NOT NULL, salt {blob} NOT NULL, digest {blob} NOT NULL,
    created_at {real} NOT NULL, revoked_at {real}
);
CREATE TABLE IF NOT EXISTS grants (
    analyst TEXT NOT NULL REFERENCES analysts(name), dataset TEXT NOT NULL, granted_at {real} NOT NULL,
    PRIMARY KEY (analyst, dataset)
);
"""


def _digest(secret: str, salt: bytes) -> bytes:
    return hashlib.scrypt(secret.encode(), salt=salt, n=2**14, r=8, p=1, dklen=32)


def new_key() -> tuple[str, str, str]:
    """A fresh key as ``(key, key_id, secret)``."""
    key_id = secrets.token_hex(8)
    secret = base64.urlsafe_b64encode(secrets.token_bytes(32)).decode().rstrip("=")
    return f"kak_{key_id}_{secret}", key_id, secret


def hash_key(key: str) -> str:
    """``scrypt$<salt hex>$<digest hex>`` of a whole key (for the admin key in the configuration)."""
    salt = os.urandom(16)
    return f"scrypt${salt.hex()}${_digest(key, salt).hex()}"


def verify_key(key: str, stored: str) -> bool:
    """Whether ``key`` matches a :func:`hash_key` string (constant-time comparison)."""
    parts = stored.split("$")
    if len(parts) != 3 or parts[0] != "scrypt":
        raise ArgumentError("a stored key hash must look like scrypt$<salt hex>$<digest hex>.")
    return hmac.compare_digest(_digest(key, bytes.fromhex(parts[1])), bytes.fromhex(parts[2]))


def fingerprint(key: str) -> bytes:
    """SHA-256 of a key: how a key verified once is remembered in memory (the key itself never is)."""
    return hashlib.sha256(key.encode("utf-8", "replace")).digest()


def check_name(name: object, what: str, *, error: type[Error] = ArgumentError) -> str:
    """A name of 1-64 letters, digits, ``_ . -`` starting with a letter, else ``error`` (a one-sentence
    :class:`~kakeibo.errors.ArgumentError`; the configuration's reader asks for a ``ConfigurationError``)."""
    if not isinstance(name, str) or not _NAME.fullmatch(name):
        raise error(f"{what} must be 1-64 letters, digits, '_', '.' or '-', starting with a letter.")
    return name


class AnalystRegistry:
    """The analysts (with their key digests) and which datasets each may query: a SQLite file, or a PostgreSQL
    database shared by service replicas (``location`` is then a ``postgresql://`` URL; see
    :mod:`kakeibo.accounting.storage`)."""

    def __init__(self, location: str | os.PathLike[str]) -> None:
        self._store = open_store(os.fspath(location), timeout=30, owner="registry")
        self.location = self._store.describe()
        self._lock = threading.Lock()  # guards the cache of verified keys
        self._verified: dict[bytes, str] = {}
        with self._store.transaction(write=True) as con:
            for statement in self._store.ddl(_SCHEMA):
                con.execute(statement)

    def create(self, name: str) -> str:
        """Register analyst ``name`` and return their key (the only time it is shown)."""
        check_name(name, "an analyst name")
        key, key_id, secret = new_key()
        salt = os.urandom(16)
        with self._store.transaction(write=True) as con:
            if con.execute("SELECT 1 FROM analysts WHERE name = ?", (name,)).fetchone():
                raise AnalystExists(f"analyst {name!r} already exists.")
            con.execute(
                "INSERT INTO analysts VALUES (?, ?, ?, ?, ?, NULL)",
                (name, key_id, salt, _digest(secret, salt), time.time()),
            )
        return key

    def authenticate(self, key: str) -> str | None:
        """The analyst whose valid, unrevoked key this is, else ``None`` (no hint which part was wrong).

        scrypt is slow on purpose; a key verified once is remembered in memory by its SHA-256 (never
        stored), and revocation is still read from the database on every call."""
        match = _KEY.fullmatch(key) if isinstance(key, str) else None
        if match is None:
            return None
        known_as = fingerprint(key)
        with self._store.transaction(write=False) as con:
            row = con.execute(
                "SELECT name, salt, digest, revoked_at FROM analysts WHERE key_id = ?", (match[1],)
            ).fetchone()
        with self._lock:
            known = self._verified.get(known_as)
        if row is None:
            _digest(match[2], b"\0" * 16)  # the same work whether or not the id exists
            return None
        name, salt, digest, revoked = row
        if known != name:
            if not hmac.compare_digest(_digest(match[2], bytes(salt)), bytes(digest)):
                return None
            with self._lock:
                self._verified[known_as] = name
        return str(name) if revoked is None else None

    def recognised(self, key: str) -> bool:
        """Whether this process has verified ``key`` before (a memory lookup; says nothing of revocation)."""
        with self._lock:
            return fingerprint(key) in self._verified

    def exists(self, name: str) -> bool:
        """Whether analyst ``name`` was ever created (revoked or not)."""
        with self._store.transaction(write=False) as con:
            return con.execute("SELECT 1 FROM analysts WHERE name = ?", (name,)).fetchone() is not None

    def revoke(self, name: str) -> None:
        """Revoke analyst ``name``'s key (their ledger history stays)."""
        with self._store.transaction(write=True) as con:
            if (
                con.execute("UPDATE analysts SET revoked_at = ? WHERE name = ?", (time.time(), name)).rowcount
                != 1
            ):
                raise KeyError(name)

    def grant(self, name: str, dataset: str) -> None:
        with self._store.transaction(write=True) as con:
            if not con.execute("SELECT 1 FROM analysts WHERE name = ?", (name,)).fetchone():
                raise KeyError(name)
            con.execute(
                "INSERT INTO grants VALUES (?, ?, ?) ON CONFLICT DO NOTHING", (name, dataset, time.time())
            )

    def revoke_grant(self, name: str, dataset: str) -> None:
        with self._store.transaction(write=True) as con:
            con.execute("DELETE FROM grants WHERE analyst = ? AND dataset = ?", (name, dataset))

    def granted(self, name: str, dataset: str) -> bool:
        with self._store.transaction(write=False) as con:
            row = con.execute(
                "SELECT 1 FROM grants WHERE analyst = ? AND dataset = ?", (name, dataset)
            ).fetchone()
        return row is not None

    def datasets(self, name: str) -> list[str]:
        with self._store.transaction(write=False) as con:
            rows = con.execute(
                "SELECT dataset FROM grants WHERE analyst = ? ORDER BY dataset", (name,)
            ).fetchall()
        return [r[0] for r in rows]

    def analysts(self) -> list[dict[str, object]]:
        with self._store.transaction(write=False) as con:
            rows = con.execute("SELECT name, created_at, revoked_at FROM analysts ORDER BY name").fetchall()
        return [{"name": n, "created_at": c, "revoked": r is not None} for n, c, r in rows]

    def close(self) -> None:
        self._store.close()
