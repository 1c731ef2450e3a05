"""The HTTP app (``herald web``): FastAPI, OpenAPI at ``/openapi.json``.

Every error leaves in one envelope (:mod:`herald.web.errors`): unknown routes, wrong
methods, bodies over MAX_BODY_BYTES (413, before any route reads them,
:mod:`herald.web.body_limit`), malformed bodies (422, before any handler touches the
database or a queue). A database that stops answering mid-request becomes a 503 with the
same shape, never a bare 500. The creating routes take an ``Idempotency-Key``
(:mod:`herald.web.idempotency`).

Routers are assembled in :func:`_routers`; a new area of the API adds its router there.
"""

from __future__ import annotations

import ctypes
import logging
import multiprocessing
import os
import signal
import sys
from collections.abc import Iterable
from importlib.metadata import PackageNotFoundError, version

from fastapi import APIRouter, FastAPI

from herald.settings import Settings, get_settings
from herald.web.auth import log_protection
from herald.web.body_limit import BodySizeLimit
from herald.web.docs import install_docs
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
        admin_webhooks,
        batches,
        callbacks,
        console,
        events,
        health,
        inbound,
        mock_mail,
        notifications,
        payments,
        preferences,
        products,
        purchasing,
        store,
        webhooks,
    )

    return [health.router, accounts.router, events.router, notifications.router,
            batches.router, callbacks.router, payments.router, activations.router,
            store.router, store.webhooks, products.router, purchasing.router, admin.router,
            admin_search.router, console.router, inbound.router, inbound.admin,
            mock_mail.router, preferences.router, webhooks.router, admin_webhooks.router]


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
        # served by herald.web.docs instead, behind API_TOKEN while it is set
        openapi_url=None, docs_url=None, redoc_url=None,
    )
    install_docs(app)
    install_error_handlers(app)
    from herald.web.idempotency import IdempotencyKeys, document_idempotency

    # added first, so it runs inside the body limit, which bounds what it reads
    app.add_middleware(IdempotencyKeys)
    app.add_middleware(BodySizeLimit)
    document_idempotency(app)
    for router in [*_routers(), *extra_routers]:
        app.include_router(router)
    return app


def create_served_app() -> FastAPI:
    """The app as ``herald web`` serves it: logging configured from the settings first,
    then the process's queue App installed. Each of ``herald web``'s processes builds its
    own (uvicorn imports this factory)."""
    from herald.logs import configure_logging
    from herald.process import quiet_known_warnings, tune_garbage_collector
    from herald.queue_app import start_queue_app

    # a process of its own (spawned), whose routes import asyncssh: herald/cli.py's
    # filter is not inherited
    quiet_known_warnings()
    _end_with_supervisor()
    settings = get_settings()
    configure_logging(settings)
    start_queue_app(settings)
    app = create_app()
    tune_garbage_collector()
    return app


#: Linux's prctl option that sends a process a signal when its parent dies.
_PR_SET_PDEATHSIG = 1


def _end_with_supervisor() -> None:
    """In a process ``herald web``'s supervisor started: get SIGTERM when the supervisor
    dies, however it dies. A supervisor killed outright (SIGKILL, the OOM killer) would
    otherwise leave its processes serving the port with nobody to replace or stop them;
    SIGTERM lets them finish their requests in flight first, as on a normal stop."""
    supervisor = multiprocessing.parent_process()
    if supervisor is None or not sys.platform.startswith("linux"):
        return  # the one process of WEB_CONCURRENCY=1, or no prctl here
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)
    if os.getppid() != supervisor.pid:  # it died before the line above took effect
        os.kill(os.getpid(), signal.SIGTERM)


def log_mock_routes(settings: Settings) -> None:
    """A WARNING at start when the mock provider is configured but its routes do not
    exist: API_TOKEN is set (a deployment) and MOCK_CALLBACK_SECRET is the public
    default, which would let anyone sign the mock's callbacks and webhooks."""
    if settings.mock_provider_configured and settings.mock_routes_refused:
        logging.getLogger(__name__).warning(
            "the mock provider's routes (/v1/callbacks/mock, /v1/store/webhooks/mock) do "
            "not exist: API_TOKEN is set and MOCK_CALLBACK_SECRET is the public default; "
            "set MOCK_CALLBACK_SECRET to a secret of your own to use them")


def web_processes() -> int:
    """How many processes ``herald web`` runs: ``WEB_CONCURRENCY``, or (when it is 0, the
    default) one per CPU core this process may use."""
    configured = get_settings().web_concurrency
    if configured:
        return configured
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not on Linux
        return max(1, os.cpu_count() or 1)


def serve(host: str = "0.0.0.0", port: int | None = None) -> None:
    """Run the app under uvicorn in ``WEB_CONCURRENCY`` processes (one per core by
    default) until SIGTERM/SIGINT, which each process answers by finishing its requests in
    flight (port default: ``$PORT`` or 8000).

    One process serves in this one; more are children of it, sharing its socket, each
    replaced when it dies. A request's work is mostly Python, which one process runs on
    one core at a time (docs/deployment.md).
    """
    import uvicorn

    from herald.logs import configure_logging

    settings = get_settings()
    configure_logging(settings)
    log_protection(settings)
    log_mock_routes(settings)
    processes = web_processes()
    uvicorn.run(
        # by name: each child process imports the factory and builds its own app
        "herald.web.app:create_served_app",
        factory=True,
        workers=processes,
        host=host,
        port=settings.port if port is None else port,
        # None keeps uvicorn off the logging config: its records go through ours
        log_config=None,
        timeout_graceful_shutdown=SHUTDOWN_GRACE_S,
    )
