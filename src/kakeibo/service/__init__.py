"""The DP SQL query service (``kakeibo serve``): analysts, grants and budgets over HTTP.

* :mod:`.config` -- the TOML configuration (datasets, ledger, registry, limits).
* :mod:`.registry` -- analysts, salted key digests, grants (SQLite, or PostgreSQL shared by replicas).
* :mod:`.app` -- the FastAPI application (:func:`create_app`), assembled from the modules below.
* :mod:`.context` -- what the routes share: ledger, registry, datasets, and the checks of who is calling.
* :mod:`.routes` -- one module per resource (queries, views, budgets, ledger, admin, dashboard).
* :mod:`.models` -- the strict request base and the number and name types of the request bodies.
* :mod:`.boundary` -- the body limit and the 422, 405 and 500 answers; :mod:`.http_errors` -- the map from
  kakeibo's errors to HTTP statuses; :mod:`.auth` -- keys and rate limits.
* :mod:`.dashboard` -- the budget dashboard's data (its page and endpoint are :mod:`.routes.dashboard`).
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
