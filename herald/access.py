"""Who may read what the outside should not see: the API token, and loopback clients
while it is unset (protected mode, docs/api.md "Routes"). The web app's door
(:mod:`herald.web.auth`) and the worker health server's ``/readyz`` decide the same way.

Protected mode trusts the socket's peer only: a request that carries ``X-Forwarded-For``
or ``Forwarded`` came through a proxy, and uvicorn (told to trust proxies with
``FORWARDED_ALLOW_IPS``) may already have replaced the peer's address with whatever that
header claims, so such a request is never a loopback one. And it answers only the
``Host`` names a loopback client uses (``localhost``, ``127.0.0.1``, ``[::1]``, any port,
and ALLOWED_HOSTS): a web page that rebinds its own name to 127.0.0.1 sends its own name.
"""

from __future__ import annotations

import hmac
import ipaddress
from typing import Literal, Protocol

from herald.settings import Settings, host_name_of

#: Headers a proxy adds to name the client it forwards for (RFC 7239 and the de facto one).
FORWARDED_HEADERS = ("x-forwarded-for", "forwarded")
#: The ``Host`` names protected mode always answers, whatever the port.
LOOPBACK_HOSTS = frozenset({"localhost", "127.0.0.1", "[::1]"})

#: Why a request is kept out: no valid token while one is set; API_TOKEN unset and the
#: request not a loopback one; or a loopback request naming a ``Host`` protected mode does
#: not answer.
Refusal = Literal["unauthorized", "api_token_required", "host_not_allowed"]


class Headers(Protocol):
    """A request's headers, looked up by name in any case (Starlette's ``Headers``, the
    stdlib's ``email.message.Message``)."""

    def get(self, name: str, /) -> str | None:
        """The header's value, or None when the request does not carry it."""


def is_loopback_address(host: str | None) -> bool:
    """True for a loopback address (127.0.0.0/8, ::1, 127.x mapped into IPv6). A name
    (``localhost``, Starlette's TestClient's ``testclient``) or no address is not one: a
    name says nothing about where the connection came from."""
    try:
        address = ipaddress.ip_address((host or "").split("%", 1)[0])
    except ValueError:
        return False
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        address = address.ipv4_mapped
    return address.is_loopback


def is_forwarded(headers: Headers) -> bool:
    """True when the request carries ``X-Forwarded-For`` or ``Forwarded`` (even empty):
    a proxy passed it on, and its client is not the socket's peer."""
    return any(headers.get(name) is not None for name in FORWARDED_HEADERS)


def is_local_request(headers: Headers, client_host: str | None) -> bool:
    """True when the socket's peer is on loopback and no proxy header says the request
    came from somewhere else."""
    return is_loopback_address(client_host) and not is_forwarded(headers)


def host_header_name(host: str | None) -> str | None:
    """The name a ``Host`` header value gives (``name``, ``name:port``, ``[v6]:port``),
    lower-case, an IPv6 address in brackets; None for no header or a malformed one."""
    if not host:
        return None
    name, port = host, ""
    if host.startswith("["):
        end = host.find("]")
        if end < 0:
            return None
        name, port = host[:end + 1], host[end + 1:]
    elif ":" in host:
        name, _, port = host.rpartition(":")
        port = ":" + port
    if port and not (port.startswith(":") and port[1:].isdigit()):
        return None
    return host_name_of(name)


def is_allowed_host(settings: Settings, host: str | None) -> bool:
    """True when the ``Host`` header value ``host`` names localhost, 127.0.0.1, [::1] or
    a name of ALLOWED_HOSTS (any port); a missing or malformed one is not allowed."""
    name = host_header_name(host)
    return name is not None and (name in LOOPBACK_HOSTS or name in settings.allowed_host_names)


def bearer_matches(authorization: str | None, expected: str) -> bool:
    """True when ``authorization`` is ``Bearer <expected>`` (the scheme in any case, the
    token compared in constant time); a bare token is not."""
    scheme, _, token = (authorization or "").strip().partition(" ")
    return scheme.lower() == "bearer" and hmac.compare_digest(token.strip().encode(),
                                                              expected.encode())


def api_refusal(settings: Settings, headers: Headers, client_host: str | None
                ) -> Refusal | None:
    """Why a request with these headers from this socket peer would be kept out of
    ``/v1``, or None when it gets in: with API_TOKEN set, the token alone decides; while
    it is unset, HERALD_OPEN_API lets every request in, else only a local request
    (:func:`is_local_request`) naming an allowed ``Host`` (:func:`is_allowed_host`)."""
    if settings.api_token:
        if bearer_matches(headers.get("authorization"), settings.api_token):
            return None
        return "unauthorized"
    if settings.herald_open_api:
        return None
    if not is_local_request(headers, client_host):
        return "api_token_required"
    if not is_allowed_host(settings, headers.get("host")):
        return "host_not_allowed"
    return None


def has_api_access(settings: Settings, headers: Headers, client_host: str | None) -> bool:
    """True when a request with these headers from this socket peer would get into
    ``/v1`` (:func:`api_refusal` has nothing against it)."""
    return api_refusal(settings, headers, client_host) is None


def has_metrics_access(settings: Settings, headers: Headers) -> bool:
    """True when ``/metrics`` answers a request with these headers: METRICS_TOKEN is
    unset, or the request carries ``Authorization: Bearer <METRICS_TOKEN>``."""
    return not settings.metrics_token or bearer_matches(headers.get("authorization"),
                                                        settings.metrics_token)
