"""The dashboard resource (:mod:`kakeibo.service.dashboard` builds its data): ``GET /v1/dashboard`` is the
JSON of the caller's view (an analyst's own, or the administrator's of everything), ``GET /dashboard`` and
``GET /dashboard/{name}`` the static page, script, style sheet and icon that draw it. The page loads nothing
from elsewhere and is served with ``Content-Security-Policy: default-src 'self'``."""

from importlib import resources
from typing import Annotated, Any

from fastapi import APIRouter, Depends, HTTPException
from fastapi.responses import Response

from ..context import ServiceContext
from ..dashboard import CONTENT_SECURITY_POLICY, Viewer, dashboard_data
from ..http_errors import KEYED, responses

__all__ = ["router"]

_PAGE_HEADERS = {
    "Content-Security-Policy": CONTENT_SECURITY_POLICY,
    "X-Content-Type-Options": "nosniff",
    "X-Frame-Options": "DENY",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-cache",
}
_STATIC = {
    "dashboard.html": "text/html; charset=utf-8",
    "dashboard.js": "text/javascript; charset=utf-8",
    "dashboard.css": "text/css; charset=utf-8",
    "favicon.svg": "image/svg+xml",
}


def router(context: ServiceContext) -> APIRouter:
    """The dashboard's routes, on ``context``'s ledger, registry and datasets. The data route identifies its
    caller with :meth:`.ServiceContext.viewer`, which admits an analyst exactly as every analyst route does
    (401, the rate limit, the failed-check throttle), so the dashboard bypasses no check."""
    files = resources.files("kakeibo.service").joinpath("static")
    static = {name: files.joinpath(name).read_bytes() for name in _STATIC}
    datasets = list(context.datasets)
    routes = APIRouter(responses=responses(*KEYED))

    @routes.get("/v1/dashboard")
    def data(who: Annotated[Viewer, Depends(context.viewer)], response: Response) -> dict[str, Any]:
        response.headers["Cache-Control"] = "no-store"  # it holds analysts' SQL
        return dashboard_data(context.ledger, context.registry, datasets, who)

    def page(name: str) -> Response:
        return Response(static[name], media_type=_STATIC[name], headers=_PAGE_HEADERS)

    @routes.get("/dashboard", include_in_schema=False)
    def html() -> Response:
        return page("dashboard.html")

    @routes.get("/dashboard/{name}", include_in_schema=False)
    def asset(name: str) -> Response:  # the page's script, style sheet and icon; nothing else is served
        if name not in _STATIC:
            raise HTTPException(404, "not found.")
        return page(name)

    return routes
