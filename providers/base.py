"""The provider contract: one message in, one classified result out.

Every adapter (SMTP, Twilio, Taqnyat, OneSignal, the mock) is a :class:`Provider`:
a ``name``, the ``channels`` it can carry, and ``send(message) -> SendResult``.
``send`` never raises for a failure it can classify; it returns a value object that
says what the channel worker should do next (like procrastinate's ``RetryDecision``)::

    SendResult
     ├── accepted=True                   the provider took the message (provider_message_id)
     └── accepted=False
          ├── failure_kind=TRANSIENT     try again later: network error or timeout,
          │                              connection refused, HTTP 429 or 5xx, SMTP 4xx reply
          └── failure_kind=TERMINAL      no retry can succeed: HTTP 4xx (validation, auth,
                                         invalid number), SMTP 5xx reply, misconfiguration

Only an unexpected bug raises. ``failure_code`` is short and machine-readable (an HTTP
status, a provider error code, ``timeout``); ``failure_message`` is for operators and
never holds the recipient's address (see :func:`redact`), so it is safe to store.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from enum import StrEnum
from typing import Protocol, runtime_checkable

#: Longest failure message kept; provider error bodies can be large.
FAILURE_MESSAGE_MAX_CHARS = 300


class Channel(StrEnum):
    """A channel a provider can carry (in-app needs no provider)."""

    #: An email address.
    EMAIL = "email"
    #: An E.164 phone number.
    SMS = "sms"
    #: A push subscription / external id of a signed-in device.
    PUSH = "push"


@dataclass(frozen=True, kw_only=True)
class Attachment:
    """A file sent with an email; with ``content_id`` it is shown inline (``cid:``)."""

    filename: str
    content_type: str
    data: bytes
    content_id: str | None = None


@dataclass(frozen=True, kw_only=True)
class OutboundMessage:
    """One rendered message for one recipient on one channel."""

    channel: Channel
    #: Email address, E.164 phone number, or push subscription / external id.
    to: str
    subject: str | None = None
    text: str = ""
    html: str | None = None
    attachments: tuple[Attachment, ...] = ()
    #: The delivery id: providers that support idempotency pass it on, so a retry after a
    #: lost response is never a second message.
    idempotency_key: str | None = None


class FailureKind(StrEnum):
    """How a failed send should be treated."""

    #: Another attempt may succeed (network, timeout, rate limit, provider outage).
    TRANSIENT = "transient"
    #: No attempt can succeed (invalid recipient, rejected content, bad credentials).
    TERMINAL = "terminal"


@dataclass(frozen=True, kw_only=True)
class SendResult:
    """The outcome of one :meth:`Provider.send`: accepted, or a classified failure."""

    accepted: bool
    provider_message_id: str | None = None
    failure_kind: FailureKind | None = None
    failure_code: str | None = None
    failure_message: str | None = None

    @classmethod
    def ok(cls, message_id: str | None) -> SendResult:
        """The provider accepted the message under ``message_id``."""
        return cls(accepted=True, provider_message_id=message_id)

    @classmethod
    def transient(cls, code: str, message: str) -> SendResult:
        """A failure that another attempt may get past."""
        return cls(accepted=False, failure_kind=FailureKind.TRANSIENT, failure_code=code,
                   failure_message=_clip(message))

    @classmethod
    def terminal(cls, code: str, message: str) -> SendResult:
        """A failure no retry can fix."""
        return cls(accepted=False, failure_kind=FailureKind.TERMINAL, failure_code=code,
                   failure_message=_clip(message))

    @property
    def retryable(self) -> bool:
        """True for a transient failure."""
        return self.failure_kind is FailureKind.TRANSIENT


@runtime_checkable
class Provider(Protocol):
    """An adapter to one outside service."""

    #: ``smtp`` | ``twilio`` | ``taqnyat`` | ``onesignal`` | ``mock``
    name: str
    #: The channels this provider can carry.
    channels: frozenset[Channel]

    def send(self, message: OutboundMessage) -> SendResult:
        """Send one message; return a classified failure rather than raising."""
        ...


def http_status_result(status: int, code: str, message: str) -> SendResult:
    """Classify a failed HTTP answer: 429 and 5xx are transient, other 4xx terminal."""
    if status == 429 or status >= 500:
        return SendResult.transient(code, message)
    return SendResult.terminal(code, message)


def redact(text: str, recipient: str) -> str:
    """``text`` with the recipient (as given, and as bare digits) replaced by ``<recipient>``.

    Providers echo the address in their errors ("The 'To' number +9665… is not valid");
    failure messages are stored and shown to operators, so they must not carry it.
    """
    if not recipient:
        return text
    candidates = {recipient, recipient.lstrip("+")}
    for candidate in sorted(filter(None, candidates), key=len, reverse=True):
        text = re.sub(re.escape(candidate), "<recipient>", text, flags=re.IGNORECASE)
    return text


def _clip(message: str) -> str:
    return message if len(message) <= FAILURE_MESSAGE_MAX_CHARS else (
        message[: FAILURE_MESSAGE_MAX_CHARS - 1] + "…")
