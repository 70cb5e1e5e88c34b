"""The DP SQL query service (``kakeibo serve``): analysts, grants and budgets over HTTP.

* :mod:`.config` -- the TOML configuration (datasets, ledger, registry, limits).
* :mod:`.registry` -- analysts, salted key digests, grants (SQLite, or PostgreSQL shared by replicas).
* :mod:`.app` -- the FastAPI application (:func:`create_app`).
* :mod:`.dashboard` -- the budget dashboard page and its data endpoint.
* :mod:`.process`, :mod:`.browser` -- a server process and headless Chromium, for tests and screenshots.
"""

from __future__ import annotations

from .app import create_app
from .config import DatasetConfig, ServiceConfig
from .registry import AnalystRegistry, hash_key, new_key, verify_key

__all__ = [
    "AnalystRegistry",
    "DatasetConfig",
    "ServiceConfig",
    "create_app",
    "hash_key",
    "new_key",
    "verify_key",
]
