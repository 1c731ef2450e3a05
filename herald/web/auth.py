"""Bearer tokens, checked before the body is read (a caller without the token learns
nothing about the body's schema).

* ``Authorization: Bearer $API_TOKEN`` on the ``/v1`` routes. While API_TOKEN is unset they
  answer loopback clients only (protected mode, as Redis has it): any other client, and a
  request a proxy forwarded (``X-Forwarded-For``, ``Forwarded``), gets a 403
  ``api_token_required``, and a loopback request naming another ``Host`` than localhost,
  127.0.0.1, [::1] or ALLOWED_HOSTS a 403 ``host_not_allowed`` (DNS rebinding), unless
  HERALD_OPEN_API opens ``/v1`` on purpose (docs/api.md, "Routes";
  :mod:`herald.access` decides).
* ``Authorization: Bearer $ADMIN_TOKEN`` on the ``/admin`` routes (the operator console);
  while ADMIN_TOKEN is unset the console is off (404), never open.
* ``Authorization: Bearer $METRICS_TOKEN`` on ``/metrics`` while METRICS_TOKEN is set.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Coroutine
from enum import Enum
from typing import Any

from fastapi import APIRouter, Depends, Request, Response
from fastapi.routing import APIRoute
from fastapi.security import HTTPBearer

from herald import access
from herald.settings import Settings, get_settings
from herald.web.errors import api_error

log = logging.getLogger(__name__)


def check_bearer_token(request: Request) -> None:
    """Let the request through ``/v1``'s door, or raise.

    With API_TOKEN set: a 401 (with ``WWW-Authenticate: Bearer``) unless the request
    carries ``Authorization: Bearer <API_TOKEN>`` (scheme in any case, a bare token
    refused). With API_TOKEN unset and HERALD_OPEN_API off: a 403 ``api_token_required``
    unless the socket's peer is on loopback and no proxy header says otherwise, then a
    403 ``host_not_allowed`` unless ``Host`` names localhost, 127.0.0.1, [::1] or a name
    of ALLOWED_HOSTS."""
    refusal = access.api_refusal(get_settings(), request.headers, _peer(request))
    if refusal is None:
        return
    if refusal == "unauthorized":
        raise _unauthorized()
    if refusal == "host_not_allowed":
        raise api_error(403, "host_not_allowed",
                        "API_TOKEN is unset, so only a request naming Host localhost, "
                        "127.0.0.1 or [::1] (any port) or a name of ALLOWED_HOSTS gets in: "
                        "add the name clients use to ALLOWED_HOSTS, or set API_TOKEN")
    raise api_error(403, "api_token_required",
                    "API_TOKEN is unset, so /v1 answers loopback clients only (a request a "
                    "proxy forwarded, with X-Forwarded-For or Forwarded, is not one): set "
                    "API_TOKEN (and send Authorization: Bearer <token>), or set "
                    "HERALD_OPEN_API=1 to open /v1 to every client on purpose")


def has_api_access(request: Request) -> bool:
    """True when :func:`check_bearer_token` would let the request through."""
    return access.has_api_access(get_settings(), request.headers, _peer(request))


def check_metrics_token(request: Request) -> None:
    """A 401 (with ``WWW-Authenticate: Bearer``) while METRICS_TOKEN is set, unless the
    request carries ``Authorization: Bearer <METRICS_TOKEN>``."""
    if not access.has_metrics_access(get_settings(), request.headers):
        raise _unauthorized()


def _peer(request: Request) -> str | None:
    # uvicorn's proxy-header support may have replaced the peer's address with the one
    # X-Forwarded-For claims; herald.access never trusts it when that header is there.
    return request.client.host if request.client else None


def log_protection(settings: Settings) -> None:
    """Say at start who ``/v1`` answers: a WARNING when HERALD_OPEN_API opens it to every
    client with no token, an INFO line in protected mode."""
    if settings.api_token:
        return
    if settings.herald_open_api:
        log.warning("HERALD_OPEN_API is on and API_TOKEN is unset: /v1 answers every client "
                    "that reaches this port, with no token")
    else:
        log.info("API_TOKEN is unset: /v1 answers loopback clients only (not through a "
                 "proxy, naming Host localhost, 127.0.0.1, [::1] or one of ALLOWED_HOSTS; "
                 "set API_TOKEN to serve other hosts)")


def check_admin_token(request: Request) -> None:
    """Raise a 401 unless the request carries ``Authorization: Bearer <ADMIN_TOKEN>``; a
    404 while ADMIN_TOKEN is unset (the console is off, never open)."""
    _require_token(request.headers.get("authorization"), require_console_on())


def require_console_on() -> str:
    """ADMIN_TOKEN; a 404 while it is unset (the console is off, never open)."""
    expected = get_settings().admin_token
    if not expected:
        raise api_error(404, "not_found", "the operator console is off (ADMIN_TOKEN is unset)")
    return expected


def _require_token(authorization: str | None, expected: str) -> None:
    if not access.bearer_matches(authorization, expected):
        raise _unauthorized()


def _unauthorized() -> Exception:
    return api_error(401, "unauthorized",
                     "a valid bearer token is required (Authorization: Bearer <token>)",
                     headers={"WWW-Authenticate": "Bearer"})


class BearerRoute(APIRoute):
    """A route behind API_TOKEN: the token is checked before the body is read, parsed or
    validated (FastAPI's own dependencies run only after the body is parsed)."""

    #: The check run on the request before anything else.
    check: Callable[[Request], None] = staticmethod(check_bearer_token)

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        """The route's handler, preceded by the bearer token check."""
        handler = super().get_route_handler()
        check = type(self).check

        async def checked(request: Request) -> Response:
            check(request)
            return await handler(request)

        return checked


class AdminRoute(BearerRoute):
    """A route behind ADMIN_TOKEN (the operator console)."""

    check = staticmethod(check_admin_token)


#: Declares the bearer scheme in OpenAPI; the check itself is :class:`BearerRoute`'s.
bearer_scheme = HTTPBearer(auto_error=False,
                           description="API_TOKEN; while it is unset, loopback clients only "
                                       "(403 api_token_required to others, 403 "
                                       "host_not_allowed to a Host not allowed)")


#: Declares the ``/metrics`` bearer scheme in OpenAPI; :func:`check_metrics_token` checks.
metrics_scheme = HTTPBearer(auto_error=False, scheme_name="MetricsToken",
                            description="METRICS_TOKEN, while it is set")


#: Declares the admin bearer scheme in OpenAPI; the check itself is :class:`AdminRoute`'s.
admin_scheme = HTTPBearer(auto_error=False, scheme_name="AdminToken",
                          description="ADMIN_TOKEN (the console is off while it is unset)")


def admin_router(tags: list[str | Enum]) -> APIRouter:
    """An ``/admin`` router whose routes all require ADMIN_TOKEN."""
    return APIRouter(prefix="/admin", tags=tags, route_class=AdminRoute,
                     dependencies=[Depends(admin_scheme)])


def protected_router(tags: list[str | Enum]) -> APIRouter:
    """A ``/v1`` router whose routes all pass :func:`check_bearer_token` first."""
    return APIRouter(prefix="/v1", tags=tags, route_class=BearerRoute,
                     dependencies=[Depends(bearer_scheme)])
