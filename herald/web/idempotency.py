"""``Idempotency-Key`` on the creating ``POST`` routes: a retried request is answered
with the first answer instead of running again (docs/api.md#idempotency-key).

:class:`IdempotencyKeys` is an ASGI middleware keyed on :data:`IDEMPOTENT_ROUTES`. A
request without the header passes straight through: one scan of its header list, no
database round trip, no body read. With it, for one API token (:func:`token_scope`):

- a first request claims the key (:func:`models.idempotency.claim_key`, one INSERT that
  exactly one of any concurrent requests wins), runs, and its answer is kept unless it is
  a 5xx — then the claim is released and a retry runs again;
- the same key and the same request (method, path, query, and the body's parsed JSON:
  key order and whitespace do not matter, :func:`fingerprint`) within 24 h gets the
  kept answer — status, headers, body — with ``Idempotent-Replayed: true``, and nothing
  runs;
- the same key for another request: 422 ``idempotency_key_reused``; while the first still
  runs: 409 ``idempotency_key_in_use``; a key that is not 1–255 printable ASCII: 422
  ``invalid_idempotency_key``.

The door is checked first (the token, or a local request naming an allowed ``Host`` while
API_TOKEN is unset, :func:`herald.access.has_api_access`): a request it would refuse passes
through untouched (the route answers 401 or 403) and claims nothing.
"""

from __future__ import annotations

import hashlib
import json
import logging
import re
from collections.abc import Callable
from typing import Any

import anyio
from fastapi import FastAPI
from fastapi.responses import JSONResponse
from sqlalchemy.exc import DBAPIError, OperationalError
from sqlalchemy.exc import TimeoutError as PoolTimeout
from starlette.concurrency import run_in_threadpool
from starlette.datastructures import Headers
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from herald import db
from herald.access import has_api_access
from herald.settings import get_settings
from herald.web.body_limit import replay_body
from herald.web.errors import error_body, unavailable
from models.idempotency import (
    ANONYMOUS,
    Answered,
    Claimed,
    ClaimOutcome,
    InUse,
    claim_key,
    release_key,
    store_answer,
)

log = logging.getLogger("herald.web")

#: The creating routes that take the header (each a ``POST``), as OpenAPI names them.
IDEMPOTENT_ROUTES = (
    "/v1/accounts", "/v1/events", "/v1/events/bulk", "/v1/batches", "/v1/store/orders",
    "/v1/payments", "/v1/payments/{payment_id}/complete", "/v1/activations",
    "/v1/suppliers", "/v1/catalog-items", "/v1/purchase-orders", "/v1/webhook-endpoints",
)
HEADER = b"idempotency-key"
#: The header a replayed answer carries.
REPLAYED = (b"idempotent-replayed", b"true")
#: 1–255 printable ASCII characters (space to tilde).
_VALID_KEY = re.compile(rb"[\x20-\x7e]{1,255}")
_ROUTES = re.compile("|".join(re.sub(r"\\{[^/]+?\\}", "[^/]+", re.escape(path))
                              for path in IDEMPOTENT_ROUTES))
#: Seconds a client is asked to wait before retrying a key still in use.
IN_USE_RETRY_AFTER_S = 1


def token_scope(authorization: str | None) -> str:
    """The scope of a request's keys: the SHA-256 (hex) of its bearer token (the token
    itself is never stored), or :data:`~models.idempotency.ANONYMOUS` without one."""
    scheme, _, token = (authorization or "").strip().partition(" ")
    token = token.strip()
    if scheme.lower() != "bearer" or not token:
        return ANONYMOUS
    return hashlib.sha256(token.encode()).hexdigest()


def fingerprint(scope: Scope, body: bytes) -> str:
    """What makes two requests "the same" for one key: method, path, query and the body
    the route reads. A JSON body (the content type FastAPI parses as JSON) counts by its
    parsed value, so the same JSON with other whitespace or key order is the same
    request; any other body counts by its bytes."""
    canonical = _canonical_json(scope, body)
    if canonical is None:
        return _digest(scope, body)
    # a fifth part marks the parsed JSON: never the same as a body read as bytes
    return _digest(scope, canonical, b"json")


def byte_fingerprint(scope: Scope, body: bytes) -> str:
    """The fingerprint of method, path, query and the body's exact bytes: what keys
    claimed before bodies were compared parsed hold, matched until they expire (24 h)."""
    return _digest(scope, body)


def _digest(scope: Scope, body: bytes, *more: bytes) -> str:
    digest = hashlib.sha256()
    for part in (scope["method"].encode(), scope["path"].encode(),
                 scope.get("query_string", b""), body, *more):
        digest.update(len(part).to_bytes(8, "big"))  # no two splits hash alike
        digest.update(part)
    return digest.hexdigest()


def _canonical_json(scope: Scope, body: bytes) -> bytes | None:
    """The body's JSON value written one way (keys sorted, no spaces), or None when the
    route would not read it as JSON: another content type, or not JSON at all. Parsed
    as the route parses it (``json.loads``), so what compares equal here is one request
    to the route."""
    content_type = next((value for name, value in scope["headers"]
                         if name == b"content-type"), b"").decode("latin-1")
    media = content_type.partition(";")[0].strip().lower()
    # FastAPI reads a body without a content type, and application/json or */*+json, as JSON
    if media and media != "application/json" and not (
            media.startswith("application/") and media.endswith("+json")):
        return None
    try:
        value = json.loads(body)
    except (ValueError, RecursionError):  # not JSON the route reads: compare bytes
        return None
    return json.dumps(value, sort_keys=True, separators=(",", ":"),
                      ensure_ascii=False).encode()


class IdempotencyKeys:
    """ASGI middleware: ``Idempotency-Key`` on :data:`IDEMPOTENT_ROUTES` (see the module
    docstring). Must sit inside :class:`~herald.web.body_limit.BodySizeLimit`, which
    bounds the body this reads."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Pass the request on, answer it from its key, or refuse its key."""
        if scope["type"] != "http" or scope["method"] != "POST":
            await self.app(scope, receive, send)
            return
        keys = [value for name, value in scope["headers"] if name == HEADER]
        if not keys or not _ROUTES.fullmatch(scope["path"]):
            await self.app(scope, receive, send)
            return
        headers = Headers(scope=scope)
        authorization = headers.get("authorization")
        client = scope.get("client")
        if not has_api_access(get_settings(), headers, client[0] if client else None):
            # the route answers 401 or 403: a caller the door refuses claims nothing
            await self.app(scope, receive, send)
            return
        if len(keys) != 1 or not _VALID_KEY.fullmatch(keys[0]):
            await _refuse(scope, receive, send, 422, "invalid_idempotency_key",
                          "Idempotency-Key must be one value of 1 to 255 printable ASCII "
                          "characters")
            return
        body = await _read_body(receive)
        if body is None:  # the client went away mid-body
            return
        key, owner = keys[0].decode("ascii"), token_scope(authorization)
        try:
            outcome = await run_in_threadpool(_claim, owner, key, scope, body)
        except (OperationalError, PoolTimeout, DBAPIError) as error:
            if isinstance(error, DBAPIError) and not (
                    isinstance(error, OperationalError) or error.connection_invalidated):
                raise
            await unavailable("database", error)(scope, receive, send)
            return
        if isinstance(outcome, Claimed):
            await self._run(scope, replay_body(body, receive), send, owner, key, outcome.claim)
        elif isinstance(outcome, Answered):
            await _replay_answer(outcome, send)
        elif isinstance(outcome, InUse):
            await _refuse(scope, receive, send, 409, "idempotency_key_in_use",
                          "a request with this Idempotency-Key is still running; retry "
                          "once it has finished",
                          headers={"Retry-After": str(IN_USE_RETRY_AFTER_S)})
        else:
            await _refuse(scope, receive, send, 422, "idempotency_key_reused",
                          "this Idempotency-Key was used for another request (another "
                          "body, path or method); use a new key for a new request")

    async def _run(self, scope: Scope, receive: Receive, send: Send, owner: str, key: str,
                   claim: str) -> None:
        """Run the claimed request, keep its answer (below 500) or release the claim,
        then send the answer: a retry never finds the key claimed with no answer kept
        after the client has its answer."""
        start: Message | None = None
        chunks: list[bytes] = []

        async def capture(message: Message) -> None:
            nonlocal start
            if message["type"] == "http.response.start":
                start = message
            elif message["type"] == "http.response.body":
                chunks.append(message.get("body", b""))

        try:
            await self.app(scope, receive, capture)
        except BaseException:
            with anyio.CancelScope(shield=True):  # a cancelled request releases too
                await _settle(release_key, owner, key, claim)
            raise
        if start is None:  # nothing answered (the client went away): run it again
            with anyio.CancelScope(shield=True):
                await _settle(release_key, owner, key, claim)
            return
        body = b"".join(chunks)
        status = int(start["status"])
        if status >= 500:
            await _settle(release_key, owner, key, claim)
        else:
            kept = [(name.decode("latin-1"), value.decode("latin-1"))
                    for name, value in start.get("headers", [])]
            await _settle(store_answer, owner, key, claim, status, kept, body)
        await send(start)
        await send({"type": "http.response.body", "body": body})


def _claim(owner: str, key: str, scope: Scope, body: bytes) -> ClaimOutcome:
    # parsed here, on a worker thread: a large JSON body does not hold up the event loop
    request = fingerprint(scope, body)
    with db.autocommit() as connection:
        return claim_key(connection, owner, key, request,
                         earlier=(byte_fingerprint(scope, body),))


async def _settle(step: Callable[..., bool], owner: str, key: str, claim: str,
                  *args: Any) -> None:
    """Store or release a claim; a database that fails here is logged, not raised: the
    request's own answer still goes out, and the claim lapses after its lease."""
    def run() -> None:
        with db.autocommit() as connection:
            step(connection, owner, key, claim, *args)

    try:
        await run_in_threadpool(run)
    except Exception as error:
        log.warning("idempotency key not settled: %s", type(error).__name__)


async def _read_body(receive: Receive) -> bytes | None:
    """The whole request body, or None when the client disconnects first."""
    chunks = []
    while True:
        message = await receive()
        if message["type"] != "http.request":
            return None
        chunks.append(message.get("body", b""))
        if not message.get("more_body", False):
            return b"".join(chunks)


async def _replay_answer(answer: Answered, send: Send) -> None:
    headers = [(name.encode("latin-1"), value.encode("latin-1"))
               for name, value in answer.headers]
    await send({"type": "http.response.start", "status": answer.status,
                "headers": [*headers, REPLAYED]})
    await send({"type": "http.response.body", "body": answer.body})


async def _refuse(scope: Scope, receive: Receive, send: Send, status: int, code: str,
                  message: str, headers: dict[str, str] | None = None) -> None:
    await JSONResponse(error_body(code, message), status_code=status,
                       headers=headers)(scope, receive, send)


#: The header as an optional parameter in OpenAPI.
HEADER_PARAMETER: dict[str, Any] = {
    "name": "Idempotency-Key",
    "in": "header",
    "required": False,
    "description": (
        "Makes a retry safe: the same key with the same request within 24 h is answered "
        "with the first answer again (same status and body, with `Idempotent-Replayed: "
        "true`) and does nothing; another request with the key is 422 "
        "`idempotency_key_reused`; while the first still runs, 409 "
        "`idempotency_key_in_use`. Keys are per API token; a 5xx answer is not kept."),
    "schema": {"type": "string", "minLength": 1, "maxLength": 255,
               "pattern": "^[\\x20-\\x7E]+$"},
}


def document_idempotency(app: FastAPI) -> None:
    """Add the ``Idempotency-Key`` header to the OpenAPI operation of every route of
    :data:`IDEMPOTENT_ROUTES` the app serves (the middleware, not FastAPI, reads it)."""
    build = app.openapi

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            schema = build()  # cached on the app by FastAPI
            for path in IDEMPOTENT_ROUTES:
                operation = schema.get("paths", {}).get(path, {}).get("post")
                if operation is not None:
                    operation.setdefault("parameters", []).append(HEADER_PARAMETER)
        return app.openapi_schema or build()

    app.openapi = openapi  # type: ignore[method-assign]  # FastAPI's hook for a custom schema
