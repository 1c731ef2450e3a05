"""A cap on request bodies (``MAX_BODY_BYTES``), applied before any route reads one, and
a lower one that the routes storing a provider's body as it came apply
(:data:`SIGNED_BODY_MAX_BYTES`)."""

from __future__ import annotations

from fastapi import Request
from fastapi.responses import JSONResponse
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from herald.settings import get_settings
from herald.web.errors import api_error, error_body

#: Largest body a provider's callback or webhook may carry: its receipt is stored as it
#: came, and no provider sends a status report anywhere near this.
SIGNED_BODY_MAX_BYTES = 64 * 1024


async def read_body_up_to(request: Request, limit: int = SIGNED_BODY_MAX_BYTES) -> bytes:
    """The request's body; a 413 ``payload_too_large`` once it passes ``limit`` bytes (a
    declared Content-Length over it decides before anything is read)."""
    declared = request.headers.get("content-length", "")
    if declared.isascii() and declared.isdigit() and int(declared) > limit:
        raise _signed_too_large(limit)
    chunks, size = [], 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise _signed_too_large(limit)
        chunks.append(chunk)
    return b"".join(chunks)


def _signed_too_large(limit: int) -> Exception:
    return api_error(413, "payload_too_large",
                     f"a provider's callback or webhook body may hold at most {limit} bytes")


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
        await self.app(scope, replay_body(body, receive), send)

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


def replay_body(body: bytes, receive: Receive) -> Receive:
    """A ``receive`` that gives ``body`` (already read) as one message, then defers to
    ``receive``: the app reads the body as if nobody had before."""
    pending: list[Message] = [{"type": "http.request", "body": body, "more_body": False}]

    async def replay() -> Message:
        return pending.pop() if pending else await receive()

    return replay
