"""``Authorization: Bearer $API_TOKEN`` on the ``/v1`` routes, checked before the body is
read: a caller without the token learns nothing about the body's schema. Open while
API_TOKEN is unset (local use)."""

from __future__ import annotations

import hmac
from collections.abc import Callable, Coroutine
from typing import Any

from fastapi import APIRouter, Depends, Request, Response
from fastapi.routing import APIRoute
from fastapi.security import HTTPBearer

from herald.settings import get_settings
from herald.web.errors import api_error


def check_bearer_token(authorization: str | None) -> None:
    """Raise a 401 (with ``WWW-Authenticate: Bearer``) unless ``authorization`` is
    ``Bearer <API_TOKEN>``; the scheme is case-insensitive, a bare token is refused.
    Open when API_TOKEN is unset."""
    expected = get_settings().api_token
    if not expected:
        return
    scheme, _, token = (authorization or "").strip().partition(" ")
    if scheme.lower() != "bearer" or not hmac.compare_digest(token.strip().encode(),
                                                             expected.encode()):
        raise api_error(401, "unauthorized",
                        "a valid bearer token is required (Authorization: Bearer <token>)",
                        headers={"WWW-Authenticate": "Bearer"})


class BearerRoute(APIRoute):
    """A route behind API_TOKEN: the token is checked before the body is read, parsed or
    validated (FastAPI's own dependencies run only after the body is parsed)."""

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        """The route's handler, preceded by the bearer token check."""
        handler = super().get_route_handler()

        async def checked(request: Request) -> Response:
            check_bearer_token(request.headers.get("authorization"))
            return await handler(request)

        return checked


#: Declares the bearer scheme in OpenAPI; the check itself is :class:`BearerRoute`'s.
bearer_scheme = HTTPBearer(auto_error=False, description="API_TOKEN, when it is set")


def protected_router(tags: list[str]) -> APIRouter:
    """A ``/v1`` router whose routes all require the bearer token (when API_TOKEN is set)."""
    return APIRouter(prefix="/v1", tags=tags, route_class=BearerRoute,
                     dependencies=[Depends(bearer_scheme)])
