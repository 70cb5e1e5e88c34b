"""kakeibo: differential privacy around an auditable privacy-budget ledger.

The decorator :func:`private` is the front door for central DP: it turns a query into a release that is
charged to a :class:`kakeibo.accounting.Ledger` before it returns.
"""

from __future__ import annotations

from .mechanisms.decorator import Release, private

__version__ = "0.1.0"

__all__ = ["Release", "__version__", "private"]
