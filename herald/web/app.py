"""The HTTP app (``herald web``): FastAPI, OpenAPI at ``/openapi.json``.

Every error leaves in one envelope (:mod:`herald.web.errors`): unknown routes, wrong
methods, bodies over MAX_BODY_BYTES (413, before any route reads them,
:mod:`herald.web.body_limit`), malformed bodies (422, before any handler touches the
database or a queue). A database that stops answering mid-request becomes a 503 with the
same shape, never a bare 500.

Routers are assembled in :func:`_routers`; a new area of the API adds its router there.
"""

from __future__ import annotations

from collections.abc import Iterable
from importlib.metadata import PackageNotFoundError, version

from fastapi import APIRouter, FastAPI

from herald.settings import get_settings
from herald.web.body_limit import BodySizeLimit
from herald.web.errors import ErrorResponse, install_error_handlers

#: Seconds uvicorn gives in-flight requests after SIGTERM (Heroku kills at 30).
SHUTDOWN_GRACE_S = 20


def _routers() -> list[APIRouter]:
    """Every router the app serves. A new area of the API adds its router here."""
    # these import actors: only when serving
    from herald.web.routes import (
        accounts,
        activations,
        admin,
        admin_search,
        batches,
        callbacks,
        console,
        events,
        health,
        inbound,
        notifications,
        payments,
        products,
        purchasing,
        store,
    )

    return [health.router, accounts.router, events.router, notifications.router,
            batches.router, callbacks.router, payments.router, activations.router,
            store.router, store.webhooks, products.router, purchasing.router, admin.router,
            admin_search.router, console.router, inbound.router, inbound.admin]


def _version() -> str:
    try:
        return version("herald")
    except PackageNotFoundError:
        return "0.0.0"


def create_app(extra_routers: Iterable[APIRouter] = ()) -> FastAPI:
    """The herald HTTP app: health, metrics and every API router, with JSON errors.

    ``extra_routers`` lets an application that extends herald (or a test) mount more.
    """
    app = FastAPI(
        title="herald",
        version=_version(),
        description="Durable notifications and fulfillment jobs on Dramatiq.",
        # Replaces FastAPI's stock 422 schema, which our error shape does not follow.
        responses={"4XX": {"model": ErrorResponse, "description": "Client error"}},
    )
    install_error_handlers(app)
    app.add_middleware(BodySizeLimit)
    for router in [*_routers(), *extra_routers]:
        app.include_router(router)
    return app


def serve(host: str = "0.0.0.0", port: int | None = None) -> None:
    """Run the app under uvicorn until SIGTERM/SIGINT (port default: ``$PORT`` or 8000)."""
    import uvicorn

    from herald.logs import configure_logging

    settings = get_settings()
    configure_logging(settings)
    uvicorn.run(
        create_app(),
        host=host,
        port=settings.port if port is None else port,
        # None keeps uvicorn off the logging config: its records go through ours.
        log_config=None,
        timeout_graceful_shutdown=SHUTDOWN_GRACE_S,
    )
