"""The DP SQL query service (``kakeibo serve``): analysts, grants and budgets over HTTP.

* :mod:`.config` -- the TOML configuration (datasets, ledger, registry, limits).
* :mod:`.registry` -- analysts, salted key digests, grants.
* :mod:`.app` -- the FastAPI application (:func:`create_app`).
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
