"""Kept-alive HTTP/1.1 connections to the addresses the request-forgery guard checked
(docs/api.md#webhooks).

A webhook send is one plain POST; :mod:`http.client` makes it for a quarter of the CPU
httpx spends on its request and response models (bench/README.md, "Outbound webhooks").
A connection goes to :attr:`Target.address`, never resolving the host name again, while
TLS verifies the certificate against the host name, sent as SNI (certifi's roots, as
httpx uses). Nothing here follows a redirect. :class:`Connections` keeps one connection
per target for reuse; it belongs to one thread.

Each attempt holds its ground against the receiver: one deadline bounds everything it
does on the network (connect, TLS handshake, each send, each read), not each operation
by itself, so a receiver trickling a byte now and then cannot stretch it; and the reads
of one answer stop at a byte budget (status line, headers and body together), so a
receiver streaming without end costs the worker nothing beyond it. Past either, the
operation raises (:class:`TimeoutError`, :class:`AnswerTooLarge`) and the caller closes
the connection.
"""

from __future__ import annotations

import collections
import http.client
import io
import select
import socket
import ssl
import time
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


class AnswerTooLarge(Exception):
    """The receiver's answer went past the bytes an attempt reads of it."""


class _PinnedHTTP(http.client.HTTPConnection):
    """An HTTP connection to a checked address, whatever the host name resolves to; what
    it does on the network is bounded by :attr:`deadline` (``time.monotonic()``) and each
    answer's reads by :attr:`max_answer_bytes` (both set for each attempt)."""

    #: what http.client calls on it is sendall, makefile and close
    sock: _Bounded | None

    def __init__(self, target: Target, tls: ssl.SSLContext) -> None:
        super().__init__(target.host, target.port)
        self.address, self.tls = str(target.address), tls
        self.deadline = 0.0
        self.max_answer_bytes = 0

    def remaining_s(self) -> float:
        """Seconds left before the deadline; raises :class:`TimeoutError` past it."""
        left = self.deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError("the attempt's deadline passed")
        return left

    def _open(self) -> socket.socket:
        sock = socket.create_connection((self.address, self.port), self.remaining_s())
        # a POST is written in two parts (head, body): no Nagle wait between them
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        return sock

    def connect(self) -> None:
        self.sock = _Bounded(self._open(), self)

    def abort(self) -> None:
        """Close the socket now, whatever still reads from it, and forget it."""
        if self.sock is not None:
            self.sock.abort()
        self.close()


class _PinnedHTTPS(_PinnedHTTP):
    """The same over TLS, the certificate checked for the host name (SNI)."""

    def connect(self) -> None:
        sock = self._open()
        # the handshake is one call, bounded as a whole by the socket's timeout
        sock.settimeout(self.remaining_s())
        self.sock = _Bounded(self.tls.wrap_socket(sock, server_hostname=self.host), self)


class _Bounded:
    """A connected socket as :mod:`http.client` uses it (``sendall``, ``makefile``,
    ``close``), each send and read given only the time left before the connection's
    deadline, and the reads of one answer (one ``makefile``) stopped at its
    ``max_answer_bytes``. Like a socket, it is closed for good once it and every reader
    made from it are closed (http.client closes it before reading the body of an answer
    that ends the connection)."""

    def __init__(self, sock: socket.socket, connection: _PinnedHTTP) -> None:
        self.sock, self.connection = sock, connection
        self._readers = 0
        self._closed = False

    def fileno(self) -> int:
        return self.sock.fileno()

    def sendall(self, data: Any) -> None:
        with memoryview(data) as view, view.cast("B") as octets:
            sent = 0
            while sent < len(octets):
                self.sock.settimeout(self.connection.remaining_s())
                sent += self.sock.send(octets[sent:])

    def makefile(self, mode: str) -> io.BufferedReader:
        if mode != "rb":
            raise ValueError(f"only reads are bounded, not mode {mode!r}")
        self._readers += 1
        return io.BufferedReader(_AnswerReader(self, self.connection.max_answer_bytes))

    def reader_closed(self) -> None:
        self._readers -= 1
        self._release()

    def close(self) -> None:
        self._closed = True
        self._release()

    def abort(self) -> None:
        self._closed = True
        self.sock.close()

    def _release(self) -> None:
        if self._closed and self._readers <= 0:
            self.sock.close()


class _AnswerReader(io.RawIOBase):
    """One answer's bytes from a :class:`_Bounded` socket: each read given the time left
    before the deadline; :class:`AnswerTooLarge` once ``budget`` bytes were read and more
    are asked for."""

    def __init__(self, bounded: _Bounded, budget: int) -> None:
        super().__init__()
        self.bounded, self.left = bounded, budget

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        if self.left <= 0:
            raise AnswerTooLarge("the answer went past its byte budget")
        sock = self.bounded.sock
        sock.settimeout(self.bounded.connection.remaining_s())
        with memoryview(buffer) as view, view.cast("B") as octets:
            read = sock.recv_into(octets[:self.left])
        self.left -= read
        return read

    def close(self) -> None:
        if not self.closed:
            self.bounded.reader_closed()
        super().close()


class Connections:
    """One thread's kept-alive connections, by target (scheme, host, address, port).
    ``tls``: the roots and checks of https connections (default: certifi's roots, the
    certificate and its host name verified)."""

    def __init__(self, tls: ssl.SSLContext | None = None) -> None:
        self.tls = tls or _tls_context()
        self._kept: collections.OrderedDict[tuple[Any, ...], _PinnedHTTP] = (
            collections.OrderedDict())

    def get(self, target: Target, *, deadline: float, max_answer_bytes: int) -> _PinnedHTTP:
        """A connection to ``target``: a kept one the server has not closed, or a new
        one (connected on first use). Until ``deadline`` (``time.monotonic()``) it
        connects, sends and reads, and it reads at most ``max_answer_bytes`` of an
        answer; past either it raises :class:`TimeoutError` or :class:`AnswerTooLarge`
        (then :meth:`discard` it)."""
        key = (target.scheme, target.host, target.address, target.port)
        connection = self._kept.pop(key, None)
        if connection is not None and _closed_by_server(connection):
            connection.abort()
            connection = None
        if connection is None:
            kind = _PinnedHTTPS if target.scheme == "https" else _PinnedHTTP
            connection = kind(target, self.tls)
        connection.deadline, connection.max_answer_bytes = deadline, max_answer_bytes
        self._kept[key] = connection
        while len(self._kept) > MAX_KEPT:
            self._kept.popitem(last=False)[1].abort()
        return connection

    def discard(self, target: Target) -> None:
        """Close the connection to ``target`` at once, and forget it (its state is
        unknown, or the receiver is still sending what will not be read)."""
        key = (target.scheme, target.host, target.address, target.port)
        connection = self._kept.pop(key, None)
        if connection is not None:
            connection.abort()

    def close(self) -> None:
        """Close every kept connection."""
        while self._kept:
            self._kept.popitem()[1].abort()


def _closed_by_server(connection: _PinnedHTTP) -> bool:
    """True when an idle connection can be read from: the server closed it (or sent
    what no request asked for), so it must not carry the next request."""
    sock = connection.sock
    if sock is None:
        return False
    readable, _, _ = select.select([sock], [], [], 0)
    return bool(readable)
