"""kakeibo: differential privacy around an auditable privacy-budget ledger.

Two front doors for central DP, both charging a :class:`kakeibo.accounting.Ledger` before returning:
:func:`private` turns a Python query function into a release, and :func:`connect` opens a DP SQL session.
"""

from __future__ import annotations

from . import sql
from .mechanisms.decorator import Release, private
from .sql.session import connect

__version__ = "0.1.0"

__all__ = ["Release", "__version__", "connect", "private", "sql"]
