"""Where a webhook may be sent: the server-side request forgery guard
(docs/api.md#webhooks, docs/configuration.md).

A customer's URL must be ``https://`` (``http://`` too with WEBHOOK_ALLOW_HTTP) and every
address its host resolves to must be a public one: in none of the special-purpose ranges
of :mod:`providers.webhook_special_addresses` (loopback, private-use, link-local,
unique-local, multicast, documentation, reserved, cloud metadata… an explicit table of
IANA's registries, not the running Python's :mod:`ipaddress` flags), unless
WEBHOOK_ALLOW_PRIVATE. :func:`check_target` runs when an endpoint is created or changed
and again before each send, and returns the address it checked: the send connects to
that address, never resolving the name a second time, so a DNS answer that changes in
between (DNS rebinding) cannot point the send at an internal service.
"""

from __future__ import annotations

import dataclasses
import ipaddress
import socket
from urllib.parse import urlsplit

from providers.webhook_special_addresses import IPAddress, special_range


class UnsafeTarget(ValueError):
    """The URL may not be sent to; the message says why (safe to show the customer)."""


@dataclasses.dataclass(frozen=True)
class Target:
    """A URL that passed the check, and the address its host resolved to then."""

    url: str
    scheme: str
    host: str
    port: int
    address: IPAddress


def address_problem(address: IPAddress) -> str | None:
    """Why a send must not go to ``address`` (None: a public address): the special-purpose
    range it falls in, by name and RFC. An IPv4-mapped or NAT64 address is judged as the
    IPv4 address it carries."""
    special = special_range(address)
    if special is None:
        return None
    if special.kind == "metadata":
        return METADATA
    return f"a special-purpose address: {special.name} ({special.rfc})"


#: What a refusal says of a cloud metadata address: nothing more (no setting named).
METADATA = "a cloud metadata address"


def resolve(host: str, port: int) -> list[IPAddress]:
    """Every address ``host`` resolves to now (a literal address is itself)."""
    try:
        return [ipaddress.ip_address(host)]
    except ValueError:
        pass
    try:
        found = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except (socket.gaierror, UnicodeError) as error:
        raise UnsafeTarget(f"the host {host!r} does not resolve") from error
    # an IPv6 answer may carry a zone (fe80::1%eth0): the zone is not part of the address
    return list(dict.fromkeys(ipaddress.ip_address(str(info[4][0]).partition("%")[0])
                              for info in found))


def check_target(url: str, *, allow_http: bool, allow_private: bool) -> Target:
    """The URL parsed and its host resolved, every address checked; raises
    :class:`UnsafeTarget` saying why it may not be sent to. The returned ``address`` is
    the one a send connects to."""
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError as error:
        raise UnsafeTarget(f"not a URL: {error}") from None
    scheme = parts.scheme.lower()
    if scheme not in ("https", "http") or not parts.hostname:
        raise UnsafeTarget("the URL must be https://host/…")
    if scheme == "http" and not allow_http:
        raise UnsafeTarget("the URL must be https:// (WEBHOOK_ALLOW_HTTP allows http://)")
    if parts.username is not None or parts.password is not None:
        raise UnsafeTarget("the URL must not carry a user name or password")
    port = port or (443 if scheme == "https" else 80)
    addresses = resolve(parts.hostname, port)
    if not addresses:
        raise UnsafeTarget(f"the host {parts.hostname!r} does not resolve")
    if not allow_private:
        # every answer, not only the first: a send may not pick a checked one otherwise
        for address in addresses:
            problem = address_problem(address)
            if problem is not None:
                # a metadata address is refused without naming the setting that allows
                # private addresses: the customer reading this is told no way to it
                hint = "" if problem == METADATA else " (WEBHOOK_ALLOW_PRIVATE allows it)"
                raise UnsafeTarget(f"the host {parts.hostname!r} resolves to {address}, "
                                   f"{problem}{hint}")
    return Target(url=url, scheme=scheme, host=parts.hostname, port=port,
                  address=addresses[0])
