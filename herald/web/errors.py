"""The error envelope: every error herald's API returns is
``{"error": {"code": "...", "message": "..."}}`` with a 4xx status (503 when a dependency
is away, 500 for a bug), whatever raised it.

Routes raise :func:`api_error`; :func:`install_error_handlers` turns FastAPI's and
Starlette's own errors (unknown routes, wrong methods, malformed bodies) and database or
Redis outages into the same shape.
"""

from __future__ import annotations

import logging
import traceback
from collections.abc import Sequence
from typing import Any, TypeVar

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from pydantic import BaseModel
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError
from sqlalchemy.exc import DataError, DBAPIError, OperationalError
from sqlalchemy.exc import TimeoutError as PoolTimeout
from starlette.exceptions import HTTPException

from herald.secrets_box import SecretsKeyMissing
from herald.text import ERROR_TYPE as CONTROL_CHARACTER

log = logging.getLogger("herald.web")

T = TypeVar("T")

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


#: The 422 code and message of a value the database cannot store.
INVALID_VALUE = ("invalid_value",
                 "a value in the request cannot be stored (for example a NUL character)")


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
    # the handler below answers this dict (starlette types ``detail`` as text only)
    detail: Any = {"code": code, "message": message}
    return HTTPException(status_code, detail=detail, headers=headers)


def not_found(kind: str, key: str) -> HTTPException:
    """The 404 ``<kind>_not_found`` of a ``kind`` (``purchase_order``) looked up by id:
    "no purchase order with id <key>"."""
    return api_error(404, f"{kind}_not_found", not_found_message(kind, key))


def not_found_message(kind: str, key: str) -> str:
    """The sentence of a 404: "no <kind, in words> with id <key>"."""
    return f"no {kind.replace('_', ' ')} with id {key}"


def found(value: T | None, kind: str, key: str) -> T:
    """``value``, or :func:`not_found` when it is None."""
    if value is None:
        raise not_found(kind, key)
    return value


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


def validation_error_body(errors: Sequence[Any], exc: RequestValidationError | None = None
                          ) -> dict[str, Any]:
    """The 422 body of these validation errors (pydantic's ``errors()``, each ``loc``
    from the request's root, like ``("body", "type")``): a message naming the first
    problem's place, and each problem's location, message and type — never the rejected
    input. The code is ``validation_error``, or ``control_character`` when the first
    problem is a control character in text (herald/text.py). ``exc``: the request's own
    error, for where a body stopped being JSON."""
    # Only location, message and type: the rejected input may hold personal data.
    problems = [{"loc": [str(part) for part in error.get("loc", ())],
                 "msg": str(error.get("msg", "")), "type": str(error.get("type", ""))}
                for error in errors]
    first_error = errors[0] if errors else None
    if (exc is not None and first_error is not None
            and first_error.get("type") == "json_invalid"):
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
    # the code names the problem the message names
    code = (CONTROL_CHARACTER if problems and problems[0]["type"] == CONTROL_CHARACTER
            else "validation_error")
    return error_body(code, message, details=problems[:MAX_VALIDATION_DETAILS])


#: The 415 message of a body that is not sent as JSON.
NOT_JSON = ("the body must be JSON, sent with Content-Type: application/json (this "
            "request's Content-Type is {content_type})")


def _not_sent_as_json(request: Request, exc: RequestValidationError) -> str | None:
    """The request's content type when its body was refused for not being sent as JSON:
    FastAPI hands a route's model the raw bytes of a body of any other content type
    (a form, text/plain), which then fails as "not a valid dictionary"."""
    content_type = request.headers.get("content-type")
    if not content_type:
        return None  # read as JSON: a body that does not parse is json_invalid
    for error in exc.errors():
        if tuple(error.get("loc", ())) == ("body",) and isinstance(
                error.get("input"), bytes | bytearray):
            return content_type.partition(";")[0].strip()[:100] or content_type[:100]
    return None


async def _validation_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, RequestValidationError)
    content_type = _not_sent_as_json(request, exc)
    if content_type is not None:
        return JSONResponse(error_body("unsupported_media_type",
                                       NOT_JSON.format(content_type=content_type)),
                            status_code=415)
    return JSONResponse(validation_error_body(exc.errors(), exc), status_code=422)


async def _database_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, DBAPIError)
    # Operational errors (connection refused or lost, lock and statement timeouts) are
    # the database being unavailable; anything else is a bug and stays a 500.
    if isinstance(exc, OperationalError) or exc.connection_invalidated:
        return unavailable("database", exc)
    # A value the database cannot store (a NUL character in text, a number out of range)
    # is the request's fault; the failed statement's transaction changed nothing.
    if isinstance(exc, DataError):
        return JSONResponse(error_body(*INVALID_VALUE), status_code=422)
    # Handled here, Starlette no longer re-raises it, so the trace is ours to log: the
    # statement and the stack, never the database's message, whose DETAIL quotes the row
    # ("Key (email)=(…)", "Failing row contains (…)"); docs/deployment.md#logging.
    log.error("database error: %s", type(exc.orig).__name__, extra={
        "sqlstate": getattr(exc.orig, "sqlstate", None), "statement": exc.statement,
        "stack": "".join(traceback.format_tb(exc.__traceback__))})
    return await _unexpected(request, exc)


async def _pool_timeout(_request: Request, exc: Exception) -> Response:
    return unavailable("database", exc)


async def _redis_error(_request: Request, exc: Exception) -> Response:
    return unavailable("redis", exc)


def unavailable(dependency: str, exc: Exception) -> Response:
    """The 503 answer (with Retry-After) for ``dependency`` being unreachable, logged."""
    log.warning("%s unavailable", dependency, extra={"error": type(exc).__name__})
    return JSONResponse(error_body("unavailable", f"the {dependency} is unavailable"),
                        status_code=503, headers={"Retry-After": str(RETRY_AFTER_S)})


async def _secrets_key_missing(_request: Request, exc: Exception) -> Response:
    # a configuration the operator must fix, not a bug: the request made nothing (a secret
    # is refused before it is made), and as a 5xx its Idempotency-Key is not kept
    log.error("a secret cannot be stored: SECRETS_KEY is not set")
    return JSONResponse(error_body("secrets_key_unset", str(exc)), status_code=503)


async def _unexpected(_request: Request, exc: Exception) -> Response:
    # No logging here: Starlette re-raises after responding and the server logs the trace.
    return JSONResponse(error_body("internal_error", "internal error"), status_code=500)


def install_error_handlers(app: FastAPI) -> None:
    """Answer every error of ``app`` in the envelope (see the module docstring)."""
    app.add_exception_handler(HTTPException, _http_error)
    app.add_exception_handler(RequestValidationError, _validation_error)
    app.add_exception_handler(DBAPIError, _database_error)
    app.add_exception_handler(PoolTimeout, _pool_timeout)
    app.add_exception_handler(SecretsKeyMissing, _secrets_key_missing)
    app.add_exception_handler(RedisConnectionError, _redis_error)
    app.add_exception_handler(RedisTimeoutError, _redis_error)
    app.add_exception_handler(Exception, _unexpected)
