"""kakeibo's errors: one tree under :class:`Error`, so that a caller can tell kakeibo's refusals from bugs.

Each error keeps the built-in base it has always had (``ValueError`` for bad input, ``RuntimeError`` for a
broken state), so ``except ValueError`` still works; ``except kakeibo.Error`` catches every one of them::

    Error
    |-- ArgumentError (ValueError)           an argument whose value kakeibo does not accept
    |-- ArgumentTypeError (TypeError)        an argument of a type kakeibo does not accept, or a call that
    |                                        gives a conflicting or missing set of keywords
    |-- QueryRefused (ValueError)            kakeibo.sql: a query kakeibo will not answer
    |-- ConfigurationError (ValueError)      a catalog, service file or ledger set up wrongly
    |   `-- CatalogMismatch                  kakeibo.sql: the catalog's types are not the engine's
    |-- BudgetExceeded                       kakeibo.accounting: the charge would exceed a budget
    |-- DuplicateRequest (ValueError)        kakeibo.accounting: a request id already charged
    |-- LedgerIntegrityError (RuntimeError)  kakeibo.accounting: the hash chain does not verify
    |-- StoreError (ValueError)              kakeibo.accounting: a ledger store cannot be opened or used
    |-- ReleaseFailed (RuntimeError)         kakeibo.release: a release failed after its draw (charged)
    |-- StatementTimeout                     kakeibo.backends: a statement ran past its limit (charged
    |                                        when it ran inside a release's draw)
    |-- CertificationError (ValueError)      kakeibo.correlated: leakage cannot be certified
    |-- ReportFormatError (ValueError)       kakeibo.ldp: a malformed batch of reports
    |-- NotFittedError (ValueError,          kakeibo.ml: a model used before fit (scikit-learn's
    |   AttributeError)                      NotFittedError too)
    |-- ClientBudgetExceeded                 kakeibo.ldp: a device refused to randomize (nothing sent)
    `-- ClientLedgerIntegrityError           kakeibo.ldp: a device's books are not intact (not books,
        (RuntimeError)                       or their hash chains do not verify)

Messages are one sentence an analyst understands and hold no number that depends on the data.

>>> from kakeibo.sql import QueryRefused
>>> issubclass(QueryRefused, Error) and issubclass(QueryRefused, ValueError)
True
"""

from __future__ import annotations

__all__ = [
    "ArgumentError",
    "ArgumentTypeError",
    "ConfigurationError",
    "Error",
    "ReleaseFailed",
    "StatementTimeout",
    "UnaccountedRelease",
]


class Error(Exception):
    """The root of every error kakeibo raises on purpose."""


class ArgumentError(Error, ValueError):
    """An argument whose value kakeibo does not accept (an epsilon of 0, a probability above 1, a bound that
    is NaN). It is a ``ValueError`` too, so code written against the built-in keeps working (scikit-learn's
    ``InvalidParameterError`` is the model)."""


class ArgumentTypeError(Error, TypeError):
    """An argument of a type kakeibo does not accept, or a call whose keywords conflict or miss one that is
    needed (``epsilon=`` and ``accuracy=`` together, or neither). It is a ``TypeError`` too."""


class ConfigurationError(Error, ValueError):
    """A catalog, service configuration or ledger that is set up wrongly (the data owner's to fix)."""


class ReleaseFailed(Error, RuntimeError):  # noqa: N818 -- the name reads as the event it reports
    """A release failed after its noise was drawn. Its cost was charged (the draw may depend on the data);
    the message is fixed, so it says nothing of the value. Its request id stays spent: a retry under it
    raises this again without a new charge (:mod:`kakeibo.release`)."""

    def __init__(self) -> None:
        super().__init__(
            "the release failed after its noise was drawn; its cost was charged (ask again with a new "
            "request_id or epsilon for a new release)."
        )


class StatementTimeout(Error):  # noqa: N818 - the name says what happened to the statement
    """A statement ran past its timeout and the engine cancelled it.

    The message names the limit only (a public setting), never anything the statement read. Inside a
    release's draw it is charged like an answer (how long a statement runs depends on the data) and keeps
    this message (:mod:`kakeibo.release`).
    """

    def __init__(self, timeout: float) -> None:
        super().__init__(f"the statement ran longer than its {timeout:g} s limit and was cancelled.")
        self.timeout = timeout


class UnaccountedRelease(UserWarning):
    """A release was made without charging any ledger because no ledger was given. Silence must never mean
    "not charged": pass a ledger to charge it, or ``ledger=False`` to say that it is meant."""
