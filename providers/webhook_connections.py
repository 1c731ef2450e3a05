"""Kept-alive HTTP/1.1 connections to the addresses the request-forgery guard checked
(docs/api.md#webhooks).

A webhook send is one plain POST; :mod:`http.client` makes it for a quarter of the CPU
httpx spends on its request and response models (bench/README.md, "Outbound webhooks").
A connection goes to :attr:`Target.address`, never resolving the host name again, while
TLS verifies the certificate against the host name, sent as SNI (certifi's roots, as
httpx uses). Nothing here follows a redirect. :class:`Connections` keeps one connection
per target for reuse; it belongs to one thread.
"""

from __future__ import annotations

import collections
import http.client
import select
import socket
import ssl
from typing import Any

import certifi

from providers.webhook_target import Target

#: Idle connections one :class:`Connections` keeps; the least recently used one beyond
#: this is closed.
MAX_KEPT = 20

_tls: ssl.SSLContext | None = None


def _tls_context() -> ssl.SSLContext:
    """Certificates and host names verified, against certifi's roots (built once)."""
    global _tls
    if _tls is None:
        _tls = ssl.create_default_context(cafile=certifi.where())
    return _tls


class _PinnedHTTP(http.client.HTTPConnection):
    """An HTTP connection to a checked address, whatever the host name resolves to."""

    def __init__(self, target: Target, timeout_s: float, tls: ssl.SSLContext) -> None:
        super().__init__(target.host, target.port, timeout=timeout_s)
        self.address, self.tls = str(target.address), tls

    def _open(self) -> socket.socket:
        sock = socket.create_connection((self.address, self.port), self.timeout)
        # a POST is written in two parts (head, body): no Nagle wait between them
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        return sock

    def connect(self) -> None:
        self.sock = self._open()


class _PinnedHTTPS(_PinnedHTTP):
    """The same over TLS, the certificate checked for the host name (SNI)."""

    def connect(self) -> None:
        self.sock = self.tls.wrap_socket(self._open(), server_hostname=self.host)


class Connections:
    """One thread's kept-alive connections, by target (scheme, host, address, port).
    ``tls``: the roots and checks of https connections (default: certifi's roots, the
    certificate and its host name verified)."""

    def __init__(self, tls: ssl.SSLContext | None = None) -> None:
        self.tls = tls or _tls_context()
        self._kept: collections.OrderedDict[tuple[Any, ...], _PinnedHTTP] = (
            collections.OrderedDict())

    def get(self, target: Target, timeout_s: float) -> _PinnedHTTP:
        """A connection to ``target``: a kept one the server has not closed, or a new
        one (connected on first use)."""
        key = (target.scheme, target.host, target.address, target.port)
        connection = self._kept.pop(key, None)
        if connection is not None and _closed_by_server(connection):
            connection.close()
            connection = None
        if connection is None:
            kind = _PinnedHTTPS if target.scheme == "https" else _PinnedHTTP
            connection = kind(target, timeout_s, self.tls)
        self._kept[key] = connection
        while len(self._kept) > MAX_KEPT:
            self._kept.popitem(last=False)[1].close()
        return connection

    def discard(self, target: Target) -> None:
        """Close and forget the connection to ``target`` (its state is unknown)."""
        key = (target.scheme, target.host, target.address, target.port)
        connection = self._kept.pop(key, None)
        if connection is not None:
            connection.close()

    def close(self) -> None:
        """Close every kept connection."""
        while self._kept:
            self._kept.popitem()[1].close()


def _closed_by_server(connection: http.client.HTTPConnection) -> bool:
    """True when an idle connection can be read from: the server closed it (or sent
    what no request asked for), so it must not carry the next request."""
    sock = connection.sock
    if sock is None:
        return False
    readable, _, _ = select.select([sock], [], [], 0)
    return bool(readable)
