"""What every request to the query service meets outside the resource routes: the body limit before any
route, and the answers FastAPI would otherwise word itself -- 422 without the echo of the input, 405 with an
``Allow`` naming every method of the path, and a bare JSON 500 (:func:`install`).
"""

from collections.abc import Awaitable, Callable

from fastapi import FastAPI, Request
from fastapi.exception_handlers import http_exception_handler
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.routing import Match

from .http_errors import INTERNAL

__all__ = ["BodyLimit", "install"]

_METHODS = ("GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS")
_TOO_LARGE = {"detail": "request body too large."}


class BodyLimit:
    """HTTP middleware: 413 for a body above ``max_bytes``, declared (``Content-Length``) or, when chunked,
    counted while it is read -- reading stops there, so an unbounded body is never buffered."""

    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = max_bytes

    async def __call__(
        self, request: Request, call_next: Callable[[Request], Awaitable[Response]]
    ) -> Response:
        declared = request.headers.get("content-length")
        if declared is not None and (not declared.isdigit() or int(declared) > self.max_bytes):
            return JSONResponse(_TOO_LARGE, status_code=413)
        if declared is None and request.method in ("POST", "PUT", "PATCH"):  # chunked: count while reading
            received = bytearray()
            async for chunk in request.stream():
                received += chunk
                if len(received) > self.max_bytes:
                    return JSONResponse(_TOO_LARGE, status_code=413)
            request._body = bytes(received)  # Starlette's middleware replays a cached body to the endpoint
        return await call_next(request)


def install(app: FastAPI, max_body_bytes: int) -> None:
    """Put the body limit and the three answers of the module docstring on ``app``."""
    app.middleware("http")(BodyLimit(max_body_bytes))
    app.exception_handler(RequestValidationError)(invalid_request)
    app.exception_handler(StarletteHTTPException)(http_exception)
    app.exception_handler(Exception)(unexpected)


async def invalid_request(_: Request, error: RequestValidationError) -> JSONResponse:
    """422 naming each bad field and its rule, without FastAPI's echo of the input: an error repeats nothing
    that was sent (and a NaN or a lone surrogate could not even be encoded: a 500)."""
    problems = [{"type": e["type"], "loc": list(e["loc"]), "msg": e["msg"]} for e in error.errors()]
    return JSONResponse({"detail": problems}, status_code=422)


async def http_exception(request: Request, error: StarletteHTTPException) -> Response:
    """FastAPI's answer, with a 405's ``Allow`` naming the methods of *every* route on the path: Starlette
    names only those of the first route that matched it (``POST`` alone on ``/v1/admin/analysts``, which
    serves ``GET`` too)."""
    if error.status_code == 405:
        error = StarletteHTTPException(405, error.detail, headers={"Allow": ", ".join(allowed(request))})
    return await http_exception_handler(request, error)


async def unexpected(_: Request, error: Exception) -> JSONResponse:
    """A bare JSON 500 for whatever escaped a handler (Starlette's own answer is plain text; the server logs
    the error, which Starlette raises again once this answer is sent)."""
    return JSONResponse({"detail": INTERNAL}, status_code=500)


def allowed(request: Request) -> list[str]:
    """The methods some route of the application serves on ``request``'s path (asked of each route as a
    request with that method, since FastAPI keeps an included router's routes behind one route object)."""
    routes = request.app.router.routes
    return [
        method
        for method in _METHODS
        if any(route.matches({**request.scope, "method": method})[0] is Match.FULL for route in routes)
    ]
