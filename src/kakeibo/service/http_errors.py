"""How the query service answers when it does not answer 200: the one map from kakeibo's error tree
(:mod:`kakeibo.errors`) to HTTP statuses, and the error bodies the OpenAPI document describes.

=============================================  ======  ===================================================
error                                          status  detail
=============================================  ======  ===================================================
``QueryRefused``                               400     its sentence (it names columns, never values)
``BudgetExceeded``                             409     ``budget exhausted: `` and its sentence
``DuplicateRequest``, ``AnalystExists``        409     its sentence
``StatementTimeout``                           503     its sentence and "Its cost was charged."
``ReleaseFailed``                              500     its fixed sentence (its cost was charged)
``ConfigurationError`` (``CatalogMismatch``)   500     :data:`MISCONFIGURED` (the real message is logged)
``LedgerIntegrityError``, ``StoreError``       503     :data:`LEDGER_UNAVAILABLE` (the reason is logged)
any other ``kakeibo.Error``                    400     its sentence
the engine's own errors                        400     :data:`ENGINE_FAILED` (the message is logged)
``RecursionError`` (the SQL parser)            400     a fixed sentence
``ValueError`` / ``TypeError``                 400     its sentence (parameter checks below kakeibo's)
anything else                                  500     :data:`INTERNAL` (logged with its trace)
=============================================  ======  ===================================================

The tree is read first, so a kakeibo error that is also a ``ValueError`` (``ConfigurationError``,
``DuplicateRequest``) gets its own status, and the engine's errors are read before the plain
``ValueError``: an engine message may quote a data value and must never reach an answer, whatever the
engine's exception derives from (pyarrow's ``ArrowInvalid`` is a ``ValueError``).
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator
from typing import Any

import pyarrow as pa
from fastapi import HTTPException
from pydantic import BaseModel

from ..accounting import BudgetExceeded
from ..accounting.ledger import DuplicateRequest, LedgerIntegrityError
from ..accounting.storage import StoreError
from ..errors import ConfigurationError, Error, ReleaseFailed, StatementTimeout
from .registry import AnalystExists

__all__ = [
    "BELOW_SPENT",
    "ENGINE_FAILED",
    "INTERNAL",
    "KEYED",
    "LEDGER_UNAVAILABLE",
    "MISCONFIGURED",
    "ErrorMessage",
    "InvalidField",
    "InvalidRequest",
    "http_error",
    "mapped",
    "responses",
]

log = logging.getLogger("kakeibo.service")

#: The detail of a 500 for a dataset whose catalog or engine is set up wrongly (the message is logged).
MISCONFIGURED = "the dataset is misconfigured; the administrator has been told."
#: The detail of a 503 when the ledger does not verify or cannot be reached (the reason is logged).
LEDGER_UNAVAILABLE = "the ledger is unavailable; the administrator has been told. Nothing was charged."
#: The detail of an engine error: its own message may quote a data value.
ENGINE_FAILED = "the engine could not run this query (check literal types); nothing was charged."
#: The detail of any error kakeibo did not raise on purpose.
INTERNAL = "internal error."
#: What every route behind the key check can answer besides its own statuses: the body limit and the key
#: check come before any handler.
KEYED = (401, 413, 429)
#: The 400 of an admin write of a budget (a grant, or a budget alone).
BELOW_SPENT = (
    "Refused: the budget is below what the scope has spent, or the ledger cannot keep it; nothing written."
)
#: Errors of libraries between the engine and the release that may quote a data value as well.
_ENGINE_ADJACENT: tuple[type[Exception], ...] = (pa.ArrowException,)


class ErrorMessage(BaseModel):
    """Every answer other than 200 and 422: one sentence saying why, quoting no data."""

    detail: str


class InvalidField(BaseModel):
    """One field of a request that breaks the schema: where it is and the rule it breaks (what was sent is
    never echoed)."""

    type: str
    loc: list[str | int]
    msg: str


class InvalidRequest(BaseModel):
    """422: the request does not match the schema."""

    detail: list[InvalidField]


_DESCRIPTIONS = {
    400: "Refused: the query or a parameter breaks one of kakeibo's rules (the detail says which); nothing "
    "was charged.",
    401: "Missing, invalid or revoked API key, or a key of the wrong role.",
    403: "This key has no access to that dataset (the same answer whether or not the dataset exists).",
    404: "No such analyst or dataset.",
    409: "Conflict: the budget is exhausted, or the request id was already charged; nothing was charged.",
    413: "The request body is larger than the service's max_body_bytes.",
    422: "The request does not match this document's schema (each bad field is named; nothing is echoed).",
    429: "Too many requests for this key, or too many failed key checks from this address; retry in a "
    "minute.",
    500: "The release failed after its noise was drawn (its cost was charged), or the dataset is "
    "misconfigured (the administrator has been told).",
    503: "The statement ran past its time limit and was cancelled (its cost was charged), or the ledger is "
    "unavailable (nothing was charged).",
}


def responses(*statuses: int, **descriptions: str) -> dict[int | str, dict[str, Any]]:
    """The ``responses=`` of a route answering ``statuses`` besides 200; ``descriptions`` (keyed ``s400``
    and so on) replace the general description of a status for this route."""
    table: dict[int | str, dict[str, Any]] = {}
    for status in sorted(statuses):
        model = InvalidRequest if status == 422 else ErrorMessage
        description = descriptions.get(f"s{status}", _DESCRIPTIONS[status])
        table[status] = {"model": model, "description": description}
    return table


def http_error(error: BaseException, engine: tuple[type[BaseException], ...] = ()) -> HTTPException:
    """The answer to ``error`` (see the module docstring); ``engine`` are the exceptions the dataset's engine
    raises for a statement it cannot run."""
    if isinstance(error, HTTPException):
        return error
    if isinstance(error, Error):
        if isinstance(error, BudgetExceeded):
            return HTTPException(409, f"budget exhausted: {error}")
        if isinstance(error, (DuplicateRequest, AnalystExists)):
            return HTTPException(409, str(error))
        if isinstance(error, StatementTimeout):  # charged: how long a statement runs depends on the data
            return HTTPException(503, f"{error} Its cost was charged.")
        if isinstance(error, ReleaseFailed):  # charged; a fixed sentence
            return HTTPException(500, str(error))
        if isinstance(error, ConfigurationError):  # the data owner's to fix: the analyst learns no more
            log.error("a dataset is misconfigured: %s", error)
            return HTTPException(500, MISCONFIGURED)
        if isinstance(error, (LedgerIntegrityError, StoreError)):  # the server's fault, not the request's
            log.error("the ledger cannot be used: %s", error)
            return HTTPException(503, LEDGER_UNAVAILABLE)
        return HTTPException(400, str(error))  # QueryRefused, and every other refusal kakeibo words
    if isinstance(error, (*engine, *_ENGINE_ADJACENT)):
        # the engine's message may quote a data value: only its kind at WARNING, the text at DEBUG
        log.warning("the engine refused a statement (%s)", type(error).__name__)
        log.debug("the engine's message: %s", error)
        return HTTPException(400, ENGINE_FAILED)
    if isinstance(error, RecursionError):  # the SQL parser recurses: a deeply nested query exhausts the stack
        return HTTPException(400, "the query is nested too deeply to check; nothing was charged.")
    if isinstance(error, (ValueError, TypeError)):  # parameter validation below kakeibo's own checks
        return HTTPException(400, str(error))
    log.error("unexpected error while answering a request", exc_info=error)
    return HTTPException(500, INTERNAL)


@contextlib.contextmanager
def mapped(engine: tuple[type[BaseException], ...] = ()) -> Iterator[None]:
    """Answer any exception raised inside as :func:`http_error` says."""
    try:
        yield
    except Exception as error:
        raise http_error(error, engine) from None
