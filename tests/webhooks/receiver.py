"""A customer's webhook receiver, for the tests: a real HTTP server on loopback that
verifies every message with the ``standardwebhooks`` package (an implementation herald
shares no code with) and answers what the test scripted: a status (held for a while if
asked), an endless body, or an answer trickled a byte at a time."""

from __future__ import annotations

import dataclasses
import io
import ssl
import threading
import time
from collections import deque
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Literal

from standardwebhooks import Webhook
from standardwebhooks.webhooks import WebhookVerificationError


@dataclasses.dataclass(frozen=True)
class Received:
    """One request: its headers (lower-case names), its body, and which of the
    receiver's secrets verified it."""

    headers: dict[str, str]
    body: bytes
    verified_by: tuple[str, ...]
    payload: Any


#: How an endless body is framed: read until the connection closes, in chunks, or
#: announced by a content-length (the one it would reach).
Framing = Literal["close", "chunked", "length"]


@dataclasses.dataclass
class Stream:
    """An answer written without end (a 200 whose body goes on) or trickled a byte at a
    time: what the receiver managed to write of it, and how its writing ended."""

    framing: Framing | None = None
    #: a trickled answer: ``at_once`` first, then ``trickled`` one byte every ``every_s``
    at_once: bytes = b""
    trickled: bytes = b""
    every_s: float = 0.0
    #: an endless body stops here, so that a sender that reads it all still ends
    up_to: int = 64 * 1024 * 1024
    written: int = 0
    #: why the writing stopped: None while it goes on, "done" at its end, else the
    #: error writing met (the sender closed the connection)
    ended: str | None = None
    ended_at: float | None = None


class Receiver:
    """Holds the secrets to verify with, the answers still scripted (then 200) and every
    request received."""

    def __init__(self) -> None:
        self.secrets: list[str] = []
        self.answers: deque[tuple[int, dict[str, str], float] | Stream] = deque()
        self.received: list[Received] = []
        self.lock = threading.Lock()
        self.url = ""
        #: Set: answers still held (``after_s``) go out at once.
        self.released = threading.Event()

    def release(self) -> None:
        """Answer every request held now or later at once (a test's end: the relay's
        worker stops without waiting out its send timeout)."""
        self.released.set()

    def answer(self, status: int, headers: dict[str, str] | None = None, times: int = 1,
               after_s: float = 0.0) -> None:
        """Answer the next ``times`` requests with ``status`` (and ``headers``), each
        ``after_s`` seconds after it arrived."""
        self.answers.extend([(status, headers or {}, after_s)] * times)

    def stream(self, framing: Framing, up_to: int = 64 * 1024 * 1024) -> Stream:
        """Answer the next request 200 with a body of zeros written without end (until
        ``up_to`` bytes), framed as ``framing``."""
        stream = Stream(framing=framing, up_to=up_to)
        self.answers.append(stream)
        return stream

    def trickle(self, answer: bytes, every_s: float, at_once: bytes = b"") -> Stream:
        """Answer the next request with ``at_once`` and then ``answer`` (raw HTTP), one
        byte every ``every_s`` (all at once from :meth:`release` on)."""
        stream = Stream(at_once=at_once, trickled=answer, every_s=every_s)
        self.answers.append(stream)
        return stream

    def record(self, headers: dict[str, str],
               body: bytes) -> tuple[int, dict[str, str], float] | Stream:
        verified, payload = [], None
        for secret in self.secrets:
            try:
                payload = Webhook(secret).verify(body, headers)
            except WebhookVerificationError:  # not this secret's signature
                continue
            verified.append(secret)
        with self.lock:
            self.received.append(Received(headers, body, tuple(verified), payload))
            return self.answers.popleft() if self.answers else (200, {}, 0.0)


@contextmanager
def running_receiver(tls: ssl.SSLContext | None = None) -> Iterator[Receiver]:
    """A receiver listening on 127.0.0.1 (``receiver.url``) until the block ends; over
    TLS with ``tls`` (a server context holding its certificate)."""
    receiver = Receiver()

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("content-length", 0)))
            answer = receiver.record(
                {name.lower(): value for name, value in self.headers.items()}, body)
            if isinstance(answer, Stream):
                self.close_connection = True
                _write_stream(answer, self.wfile, receiver.released)
                return
            status, headers, after_s = answer
            receiver.released.wait(after_s)
            self.send_response(status)
            for name, value in headers.items():
                self.send_header(name, value)
            self.send_header("content-length", "0")
            self.end_headers()

        def log_message(self, format: str, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    if tls is not None:
        server.socket = tls.wrap_socket(server.socket, server_side=True)
    scheme = "http" if tls is None else "https"
    receiver.url = f"{scheme}://127.0.0.1:{server.server_address[1]}/hooks"
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield receiver
    finally:
        server.shutdown()
        server.server_close()


def _write_stream(stream: Stream, out: io.BufferedIOBase, released: threading.Event) -> None:
    """Write the stream's answer, counting what was written, until it ends or the
    sender closes the connection."""
    try:
        if stream.framing is None:
            out.write(stream.at_once)
            stream.written += len(stream.at_once)
            for byte in stream.trickled:
                out.write(bytes([byte]))
                out.flush()
                stream.written += 1
                released.wait(stream.every_s)
        else:
            _write_endless(stream, out)
        stream.ended = "done"
    except OSError as error:  # the sender closed the connection
        stream.ended = type(error).__name__
    finally:
        stream.ended_at = time.monotonic()


def _write_endless(stream: Stream, out: io.BufferedIOBase) -> None:
    framing = {"close": b"", "chunked": b"transfer-encoding: chunked\r\n",
               "length": b"content-length: %d\r\n" % stream.up_to}[stream.framing or "close"]
    out.write(b"HTTP/1.1 200 OK\r\nconnection: close\r\n" + framing + b"\r\n")
    piece = bytes(16 * 1024)
    chunk = b"%x\r\n" % len(piece) + piece + b"\r\n" if stream.framing == "chunked" else piece
    while stream.written < stream.up_to:
        out.write(chunk)
        out.flush()
        stream.written += len(piece)
    if stream.framing == "chunked":
        out.write(b"0\r\n\r\n")
        out.flush()
