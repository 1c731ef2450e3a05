"""A real SMTP relay (aiosmtpd) on a local port that keeps what it accepts and answers as a
test tells it: the SMTP provider's, the supplier emails' and the log privacy tests'."""

from __future__ import annotations

import asyncio
import email
import socketserver
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from email.message import EmailMessage
from email.policy import default as default_policy
from typing import Any

from aiosmtpd.controller import Controller
from aiosmtpd.smtp import AuthResult, LoginPassword

from tests.support.services import find_free_port


@dataclass
class Received:
    """One message the relay accepted."""

    mail_from: str
    rcpt_tos: list[str]
    message: EmailMessage


@dataclass
class Relay:
    """An aiosmtpd handler that keeps what it accepts and answers as told."""

    received: list[Received] = field(default_factory=list)
    mail_reply: str | None = None
    rcpt_reply: str | None = None
    data_reply: str | None = None
    data_delay_s: float = 0.0
    #: Keep the message, then close the connection instead of answering it.
    drop_after_data: bool = False

    def reset(self) -> None:
        """Forget what it received and answer everything normally again."""
        self.__init__()  # type: ignore[misc]  # a dataclass: its fields' defaults

    async def handle_MAIL(self, server: Any, session: Any, envelope: Any, address: str,
                          mail_options: list[str]) -> str:
        if self.mail_reply:
            return self.mail_reply
        envelope.mail_from = address
        envelope.mail_options.extend(mail_options)
        return "250 OK"

    async def handle_RCPT(self, server: Any, session: Any, envelope: Any, address: str,
                          rcpt_options: list[str]) -> str:
        if self.rcpt_reply:
            return self.rcpt_reply
        envelope.rcpt_tos.append(address)
        return "250 OK"

    async def handle_DATA(self, server: Any, session: Any, envelope: Any) -> str:
        if self.data_delay_s:
            await asyncio.sleep(self.data_delay_s)
        if self.data_reply:
            return self.data_reply
        parsed = email.message_from_bytes(envelope.original_content, policy=default_policy)
        self.received.append(Received(envelope.mail_from, list(envelope.rcpt_tos), parsed))
        if self.drop_after_data:
            server.transport.abort()  # the message is here; its 250 never leaves
        return "250 Message accepted for delivery"


def authenticate(server: Any, session: Any, envelope: Any, mechanism: str,
                 auth_data: Any) -> AuthResult:
    """An aiosmtpd authenticator that lets in ``herald`` / ``s3cret`` only."""
    ok = isinstance(auth_data, LoginPassword) and auth_data == (b"herald", b"s3cret")
    return AuthResult(success=ok, handled=False)  # not handled: aiosmtpd answers 535


def start_relay(**smtp_options: Any) -> tuple[Relay, Controller]:
    """A relay listening on a free port of 127.0.0.1 (``smtp_options`` go to aiosmtpd's
    SMTP server); the caller stops the controller."""
    relay = Relay()
    controller = Controller(relay, hostname="127.0.0.1", port=find_free_port(), **smtp_options)
    controller.start()
    return relay, controller


@contextmanager
def greeting_server(reply: str | None) -> Iterator[int]:
    """A server on a free port of 127.0.0.1 that greets every connection with ``reply``
    (e.g. ``554 5.7.1 no service``) and closes it, or with ``None`` holds the connection
    and never greets until the server stops; yields the port."""
    stopping = threading.Event()

    class Greeter(socketserver.BaseRequestHandler):
        def handle(self) -> None:
            if reply is None:
                stopping.wait(30)
            else:
                self.request.sendall(reply.encode() + b"\r\n")

    server = socketserver.ThreadingTCPServer(("127.0.0.1", 0), Greeter)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, args=(0.02,), daemon=True)
    thread.start()
    try:
        yield server.server_address[1]
    finally:
        stopping.set()
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)
