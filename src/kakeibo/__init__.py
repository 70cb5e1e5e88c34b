"""kakeibo: differential privacy around an auditable privacy-budget ledger.

Two front doors for central DP, both charging a :class:`kakeibo.accounting.Ledger` before returning:
:func:`private` turns a Python query function into a release, and :func:`connect` opens a DP SQL session.
Every error kakeibo raises on purpose is a :class:`kakeibo.Error` (:mod:`kakeibo.errors`).

The front doors are imported on first use, so ``import kakeibo.ldp`` (a client that only randomizes its
reports) loads neither the SQL engines nor the ledger.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from .errors import ArgumentError, ArgumentTypeError, ConfigurationError, Error, UnaccountedRelease

if TYPE_CHECKING:
    from . import sql
    from .decorator import Release, private
    from .sql.session import connect

__version__ = "0.1.0"

__all__ = [
    "ArgumentError",
    "ArgumentTypeError",
    "ConfigurationError",
    "Error",
    "Release",
    "UnaccountedRelease",
    "__version__",
    "connect",
    "private",
    "sql",
]

_LAZY = {
    "sql": ("kakeibo.sql", None),
    "Release": ("kakeibo.decorator", "Release"),
    "private": ("kakeibo.decorator", "private"),
    "connect": ("kakeibo.sql.session", "connect"),
}


def __getattr__(name: str) -> Any:
    if name not in _LAZY:
        raise AttributeError(f"module 'kakeibo' has no attribute {name!r}")
    module_name, attribute = _LAZY[name]
    module = importlib.import_module(module_name)
    value = module if attribute is None else getattr(module, attribute)
    globals()[name] = value
    return value
