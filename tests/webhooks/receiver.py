"""A customer's webhook receiver, for the tests: a real HTTP server on loopback that
verifies every message with the ``standardwebhooks`` package (an implementation herald
shares no code with) and answers what the test scripted."""

from __future__ import annotations

import dataclasses
import ssl
import threading
from collections import deque
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

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


class Receiver:
    """Holds the secrets to verify with, the answers still scripted (then 200) and every
    request received."""

    def __init__(self) -> None:
        self.secrets: list[str] = []
        self.answers: deque[tuple[int, dict[str, str], float]] = deque()
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

    def record(self, headers: dict[str, str], body: bytes) -> tuple[int, dict[str, str], float]:
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
            status, headers, after_s = receiver.record(
                {name.lower(): value for name, value in self.headers.items()}, body)
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
