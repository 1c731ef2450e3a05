"""A local SMTP server that keeps every message it is given: where ``herald demo``'s
purchasing phase sends the supplier emails (aiosmtpd, no TLS, no authentication, on
127.0.0.1 only). Meant for the demo, never for production mail."""

from __future__ import annotations

import dataclasses
import email
import email.policy
import socket
import threading
from email.message import EmailMessage
from typing import Any

from aiosmtpd.controller import Controller


@dataclasses.dataclass(frozen=True)
class Received:
    """One message as the server got it: the envelope and the parsed message."""

    sender: str
    recipients: tuple[str, ...]
    message: EmailMessage


class MailSink:
    """A running SMTP server on 127.0.0.1 (:attr:`port`) keeping what it receives."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._received: list[Received] = []
        self._controller = Controller(self, hostname="127.0.0.1", port=_free_port())
        self.port = self._controller.port

    @property
    def received(self) -> list[Received]:
        """The messages received so far, oldest first."""
        with self._lock:
            return list(self._received)

    async def handle_DATA(self, server: Any, session: Any, envelope: Any) -> str:
        message = email.message_from_bytes(envelope.original_content or envelope.content,
                                           policy=email.policy.default)
        with self._lock:
            self._received.append(Received(envelope.mail_from, tuple(envelope.rcpt_tos),
                                           message))
        return "250 OK"

    def start(self) -> MailSink:
        """Listen; returns once the server answers."""
        self._controller.start()
        return self

    def stop(self) -> None:
        """Stop listening."""
        self._controller.stop()

    def __enter__(self) -> MailSink:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()


def _free_port() -> int:
    """A port free on 127.0.0.1 now (the system's choice)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])
