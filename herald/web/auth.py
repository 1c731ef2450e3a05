"""Bearer tokens, checked before the body is read (a caller without the token learns
nothing about the body's schema).

* ``Authorization: Bearer $API_TOKEN`` on the ``/v1`` routes; open while API_TOKEN is unset
  (local use).
* ``Authorization: Bearer $ADMIN_TOKEN`` on the ``/admin`` routes (the operator console);
  while ADMIN_TOKEN is unset the console is off (404), never open.
"""

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
    if expected:
        _require_token(authorization, expected)


def check_admin_token(authorization: str | None) -> None:
    """Raise a 401 unless ``authorization`` is ``Bearer <ADMIN_TOKEN>``; a 404 while
    ADMIN_TOKEN is unset (the console is off, never open)."""
    _require_token(authorization, require_console_on())


def require_console_on() -> str:
    """ADMIN_TOKEN; a 404 while it is unset (the console is off, never open)."""
    expected = get_settings().admin_token
    if not expected:
        raise api_error(404, "not_found", "the operator console is off (ADMIN_TOKEN is unset)")
    return expected


def _require_token(authorization: str | None, expected: str) -> None:
    scheme, _, token = (authorization or "").strip().partition(" ")
    if scheme.lower() != "bearer" or not hmac.compare_digest(token.strip().encode(),
                                                             expected.encode()):
        raise api_error(401, "unauthorized",
                        "a valid bearer token is required (Authorization: Bearer <token>)",
                        headers={"WWW-Authenticate": "Bearer"})


class BearerRoute(APIRoute):
    """A route behind API_TOKEN: the token is checked before the body is read, parsed or
    validated (FastAPI's own dependencies run only after the body is parsed)."""

    #: The check run on the request's ``Authorization`` header before anything else.
    check: Callable[[str | None], None] = staticmethod(check_bearer_token)

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        """The route's handler, preceded by the bearer token check."""
        handler = super().get_route_handler()
        check = type(self).check

        async def checked(request: Request) -> Response:
            check(request.headers.get("authorization"))
            return await handler(request)

        return checked


class AdminRoute(BearerRoute):
    """A route behind ADMIN_TOKEN (the operator console)."""

    check = staticmethod(check_admin_token)


#: Declares the bearer scheme in OpenAPI; the check itself is :class:`BearerRoute`'s.
bearer_scheme = HTTPBearer(auto_error=False, description="API_TOKEN, when it is set")


#: Declares the admin bearer scheme in OpenAPI; the check itself is :class:`AdminRoute`'s.
admin_scheme = HTTPBearer(auto_error=False, scheme_name="AdminToken",
                          description="ADMIN_TOKEN (the console is off while it is unset)")


def admin_router(tags: list[str]) -> APIRouter:
    """An ``/admin`` router whose routes all require ADMIN_TOKEN."""
    return APIRouter(prefix="/admin", tags=tags, route_class=AdminRoute,
                     dependencies=[Depends(admin_scheme)])


def protected_router(tags: list[str]) -> APIRouter:
    """A ``/v1`` router whose routes all require the bearer token (when API_TOKEN is set)."""
    return APIRouter(prefix="/v1", tags=tags, route_class=BearerRoute,
                     dependencies=[Depends(bearer_scheme)])
