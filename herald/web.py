"""The HTTP app (``herald web``): FastAPI, OpenAPI at ``/openapi.json``.

Every error leaves as ``{"error": {"code": "...", "message": "..."}}``: unknown routes,
wrong methods, bodies over MAX_BODY_BYTES (413, before any route reads them), malformed
bodies (422, before any handler touches the database or a queue) and errors routes raise
with :func:`api_error`. A database that stops answering mid-request becomes a 503 with
the same shape, never a bare 500.

Routers are assembled in :func:`_routers`; a new area of the API adds its router there.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from importlib.metadata import PackageNotFoundError, version
from typing import Any

from fastapi import APIRouter, FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from pydantic import BaseModel
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError
from sqlalchemy.exc import DataError, DBAPIError, OperationalError
from sqlalchemy.exc import TimeoutError as PoolTimeout
from starlette.exceptions import HTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from herald.health import OK, check_readiness, is_ready
from herald.metrics import CONTENT_TYPE, exposition
from herald.settings import get_settings

log = logging.getLogger(__name__)

#: Seconds uvicorn gives in-flight requests after SIGTERM (Heroku kills at 30).
SHUTDOWN_GRACE_S = 20
#: Seconds a 503 asks the client to wait before trying again.
RETRY_AFTER_S = 5
#: How many validation problems a 422 lists; the rest are counted, not listed.
MAX_VALIDATION_DETAILS = 20

#: The error code each status gets unless the route names its own.
ERROR_CODES = {
    400: "bad_request",
    401: "unauthorized",
    403: "forbidden",
    404: "not_found",
    405: "method_not_allowed",
    409: "conflict",
    413: "payload_too_large",
    415: "unsupported_media_type",
    422: "validation_error",
    429: "rate_limited",
    503: "unavailable",
}


class ValidationProblem(BaseModel):
    """One problem with a request: where (``["body", "email"]``), what, and its kind."""

    loc: list[str]
    msg: str
    type: str


class ErrorDetail(BaseModel):
    """What went wrong: a stable machine ``code`` and a human ``message``."""

    code: str
    message: str
    #: Present on 422: each problem found (never the rejected input itself).
    details: list[ValidationProblem] | None = None


class ErrorResponse(BaseModel):
    """The body of every error response (documented in OpenAPI for all 4xx)."""

    error: ErrorDetail


def api_error(status_code: int, code: str, message: str,
              headers: dict[str, str] | None = None) -> HTTPException:
    """An exception a route raises to answer ``{"error": {"code", "message"}}`` with status."""
    return HTTPException(status_code, detail={"code": code, "message": message},
                         headers=headers)


def error_body(code: str, message: str, **more: Any) -> dict[str, Any]:
    """The JSON body of every error herald's API returns."""
    return {"error": {"code": code, "message": message, **more}}


async def _http_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, HTTPException)
    detail = exc.detail
    if isinstance(detail, dict) and {"code", "message"} <= detail.keys():
        body = error_body(**detail)
    else:
        code = ERROR_CODES.get(exc.status_code, f"http_{exc.status_code}")
        message = str(detail)
        if exc.status_code in (404, 405) and message in ("Not Found", "Method Not Allowed"):
            # The router's stock phrase; say what was asked for instead.
            message = f"{message.lower()}: {request.method} {request.url.path}"
        body = error_body(code, message)
    return JSONResponse(body, status_code=exc.status_code, headers=exc.headers)


def _json_position(exc: RequestValidationError, error: dict[str, Any]) -> str:
    """Where a body stopped being JSON, in bytes from its start (the parser counts
    characters of the decoded text)."""
    position = error["loc"][-1]
    text = exc.body if isinstance(exc.body, str) else ""
    if isinstance(position, int) and position <= len(text):
        position = len(text[:position].encode())
    return f"invalid JSON at byte {position}"


async def _validation_error(_request: Request, exc: Exception) -> Response:
    assert isinstance(exc, RequestValidationError)
    # Only location, message and type: the rejected input may hold personal data.
    errors = exc.errors()
    problems = [{"loc": [str(part) for part in error.get("loc", ())],
                 "msg": str(error.get("msg", "")), "type": str(error.get("type", ""))}
                for error in errors]
    first_error = errors[0] if errors else None
    if first_error is not None and first_error.get("type") == "json_invalid":
        # the parser's own words ("Expecting ',' delimiter") quote no input
        reason = str((first_error.get("ctx") or {}).get("error", "")).lower()
        message = _json_position(exc, first_error) + (f": {reason}" if reason else "")
        problems[0]["msg"] = message
    elif problems:
        first = problems[0]
        where = ".".join(part for part in first["loc"] if part != "body") or "request"
        message = f"{where}: {first['msg']}"
        if len(problems) > 1:
            message += f" (and {len(problems) - 1} more)"
    else:
        message = "the request is malformed"
    body = error_body("validation_error", message, details=problems[:MAX_VALIDATION_DETAILS])
    return JSONResponse(body, status_code=422)


async def _database_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, DBAPIError)
    # Operational errors (connection refused or lost, lock and statement timeouts) are
    # the database being unavailable; anything else is a bug and stays a 500.
    if isinstance(exc, OperationalError) or exc.connection_invalidated:
        return _unavailable("database", exc)
    # A value the database cannot store (a NUL character in text, a number out of range)
    # is the request's fault; the failed statement's transaction changed nothing.
    if isinstance(exc, DataError):
        return JSONResponse(error_body("invalid_value", "a value in the request cannot be "
                                       "stored (for example a NUL character)"), status_code=422)
    # Handled here, Starlette no longer re-raises it, so the trace is ours to log.
    log.error("database error", exc_info=exc)
    return await _unexpected(request, exc)


async def _pool_timeout(_request: Request, exc: Exception) -> Response:
    return _unavailable("database", exc)


async def _redis_error(_request: Request, exc: Exception) -> Response:
    return _unavailable("redis", exc)


def _unavailable(dependency: str, exc: Exception) -> Response:
    log.warning("%s unavailable", dependency, extra={"error": type(exc).__name__})
    return JSONResponse(error_body("unavailable", f"the {dependency} is unavailable"),
                        status_code=503, headers={"Retry-After": str(RETRY_AFTER_S)})


async def _unexpected(_request: Request, exc: Exception) -> Response:
    # No logging here: Starlette re-raises after responding and the server logs the trace.
    return JSONResponse(error_body("internal_error", "internal error"), status_code=500)


health_router = APIRouter(tags=["health"])


#: Load balancers probe with HEAD: the GET's status and headers, no body (Starlette's
#: responses send only the headers to a HEAD request).
PROBE_METHODS = ["GET", "HEAD"]


@health_router.api_route("/healthz", methods=PROBE_METHODS,
                         summary="Liveness: the process answers (no I/O)")
async def healthz() -> dict[str, str]:
    """Always ``{"status": "ok"}`` while the process serves requests."""
    return {"status": OK}


class Readiness(BaseModel):
    """Each dependency's check: ``ok`` or ``error: <short reason>``."""

    database: str
    redis: str
    broker: str


@health_router.api_route(
    "/readyz",
    methods=PROBE_METHODS,
    summary="Readiness: database, Redis and broker",
    response_model=None,
    responses={200: {"model": Readiness, "description": "Every check passed"},
               503: {"model": Readiness, "description": "A check failed; the body names it"}},
)
def readyz() -> JSONResponse:
    """Each dependency ``ok`` or ``error: …``; 200 when all pass, 503 otherwise."""
    checks = check_readiness()
    return JSONResponse(checks, status_code=200 if is_ready(checks) else 503)


@health_router.get("/metrics", summary="Prometheus metrics, the queues' included",
                   response_class=Response)
def metrics() -> Response:
    """This process's metrics and every registry queue's counts (``queue_depth`` by queue
    and state, ``queue_jobs_total`` by outcome) in the Prometheus text format: the same
    text a worker's health port serves."""
    return Response(exposition(), media_type=CONTENT_TYPE)


class BodySizeLimit:
    """ASGI middleware: a request whose body is over MAX_BODY_BYTES is answered 413 in the
    error shape before any route reads it.

    A declared Content-Length decides at once (the server delivers no more than it
    declares). A chunked body is read here, up to the limit, and handed on whole.
    """

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Pass the request on, or answer 413 when its body is too large."""
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        limit = get_settings().max_body_bytes
        headers = dict(scope["headers"])
        declared = headers.get(b"content-length")
        if declared is not None:
            if declared.isdigit() and int(declared) > limit:
                await self._too_large(scope, receive, send, limit)
                return
            await self.app(scope, receive, send)
            return
        if b"transfer-encoding" not in headers:  # no body at all
            await self.app(scope, receive, send)
            return
        body = await self._read_up_to(receive, limit)
        if body is None:
            await self._too_large(scope, receive, send, limit)
            return
        await self.app(scope, _replay(body, receive), send)

    @staticmethod
    async def _read_up_to(receive: Receive, limit: int) -> bytes | None:
        """The whole body, or None as soon as it passes ``limit`` bytes."""
        chunks, size = [], 0
        while True:
            message = await receive()
            if message["type"] != "http.request":  # the client went away
                break
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > limit:
                return None
            chunks.append(chunk)
            if not message.get("more_body", False):
                break
        return b"".join(chunks)

    @staticmethod
    async def _too_large(scope: Scope, receive: Receive, send: Send, limit: int) -> None:
        response = JSONResponse(error_body("payload_too_large",
                                           f"the request body may hold at most {limit} "
                                           "bytes (MAX_BODY_BYTES)"), status_code=413)
        await response(scope, receive, send)


def _replay(body: bytes, receive: Receive) -> Receive:
    """A ``receive`` that gives ``body`` as one message, then defers to ``receive``."""
    pending: list[Message] = [{"type": "http.request", "body": body, "more_body": False}]

    async def replay() -> Message:
        return pending.pop() if pending else await receive()

    return replay


def _routers() -> list[APIRouter]:
    """Every router the app serves. A new area of the API adds its router here."""
    # these import actors: only when serving
    from herald.api_batches import router as batches_router
    from herald.api_callbacks import router as callbacks_router
    from herald.api_v1 import router as v1_router

    return [health_router, v1_router, batches_router, callbacks_router]


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
    app.add_exception_handler(HTTPException, _http_error)
    app.add_exception_handler(RequestValidationError, _validation_error)
    app.add_exception_handler(DBAPIError, _database_error)
    app.add_exception_handler(PoolTimeout, _pool_timeout)
    app.add_exception_handler(RedisConnectionError, _redis_error)
    app.add_exception_handler(RedisTimeoutError, _redis_error)
    app.add_exception_handler(Exception, _unexpected)
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
