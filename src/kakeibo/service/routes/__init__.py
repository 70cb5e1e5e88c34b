"""The query service's routes, one module per resource; each module's ``router(context)`` returns the
:class:`fastapi.APIRouter` of its routes, built on the shared :class:`..context.ServiceContext`.

* :mod:`.queries` -- ``POST /v1/query``, ``POST /v1/explain``
* :mod:`.views` -- ``POST /v1/views``, ``GET /v1/views``
* :mod:`.synthesis` -- ``POST /v1/synthesize``, ``POST /v1/fidelity``
* :mod:`.budgets` -- ``GET /v1/budget``, ``POST /v1/admin/budgets``
* :mod:`.ledger` -- ``GET /v1/history``, ``GET /v1/ledger/verify``
* :mod:`.admin` -- analysts and grants (``/v1/admin/analysts...``, ``/v1/admin/grants...``)
* :mod:`.dashboard` -- ``GET /v1/dashboard`` and the page under ``/dashboard``

:data:`RESOURCES` is the order :func:`kakeibo.service.create_app` includes them in (a new resource is a
module with a ``router`` and an entry there).
"""

from collections.abc import Callable
from types import ModuleType

from fastapi import APIRouter

from ..context import ServiceContext
from . import admin, budgets, dashboard, ledger, queries, synthesis, views

__all__ = ["RESOURCES", "routers"]

#: Every resource module, in the order their routes are included.
RESOURCES: tuple[ModuleType, ...] = (queries, views, synthesis, budgets, ledger, admin, dashboard)


def routers(context: ServiceContext) -> list[APIRouter]:
    """Each resource's router on ``context``, in the order of :data:`RESOURCES`."""
    build: list[Callable[[ServiceContext], APIRouter]] = [module.router for module in RESOURCES]
    return [make(context) for make in build]
