"""Who may read what the outside should not see: the API token, and loopback clients
while it is unset (protected mode, docs/api.md "Routes"). The web app's door
(:mod:`herald.web.auth`) and the worker health server's ``/readyz`` decide the same way.
"""

from __future__ import annotations

import hmac
import ipaddress

from herald.settings import Settings


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


def bearer_matches(authorization: str | None, expected: str) -> bool:
    """True when ``authorization`` is ``Bearer <expected>`` (the scheme in any case, the
    token compared in constant time); a bare token is not."""
    scheme, _, token = (authorization or "").strip().partition(" ")
    return scheme.lower() == "bearer" and hmac.compare_digest(token.strip().encode(),
                                                              expected.encode())


def has_api_access(settings: Settings, authorization: str | None,
                   client_host: str | None) -> bool:
    """True when a request with this ``Authorization`` header from this client address
    would get into ``/v1``: the API token when it is set; else a loopback client, or any
    client while HERALD_OPEN_API is on."""
    if settings.api_token:
        return bearer_matches(authorization, settings.api_token)
    return settings.herald_open_api or is_loopback_address(client_host)
