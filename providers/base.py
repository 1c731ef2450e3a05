"""The provider contract: one message in, one classified result out.

Every adapter (SMTP, Twilio, Taqnyat, OneSignal, the mock) is a :class:`Provider`:
a ``name``, the ``channels`` it can carry, and ``send(message) -> SendResult``.
``send`` never raises for a failure it can classify; it returns a value object that
says what the channel worker should do next (like procrastinate's ``RetryDecision``)::

    SendResult
     ├── accepted=True                   the provider took the message (provider_message_id)
     └── accepted=False
          ├── failure_kind=TRANSIENT     certainly not accepted, try again later (here or at
          │                              the next provider of the chain): connection refused
          │                              or reset before the request was written, DNS or TLS
          │                              failure, HTTP 429 or 5xx, SMTP 4xx reply
          ├── failure_kind=REFUSED       certainly not accepted, and this provider never will:
          │                              a destination it does not serve, a sender not
          │                              registered with it, not configured; another
          │                              provider may take it
          ├── failure_kind=TERMINAL      no provider can send it: invalid recipient,
          │                              rejected content
          └── failure_kind=AMBIGUOUS     it may have been accepted: a timeout after the
                                         request was written, the connection lost before the
                                         answer; only this provider may be tried again

Each adapter's table of which failure is which kind is in ``providers.classification``.
Only an unexpected bug raises. ``failure_code`` is short and machine-readable (an HTTP
status, a provider error code, ``timeout``); ``failure_message`` is for operators and
never holds the recipient's address (see :func:`redact`), so it is safe to store.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, Literal, Protocol, overload, runtime_checkable

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
    #: Email only: more recipients (a ``Cc`` header), and a sender other than EMAIL_FROM.
    cc: tuple[str, ...] = ()
    sender: str | None = None
    subject: str | None = None
    text: str = ""
    html: str | None = None
    attachments: tuple[Attachment, ...] = ()
    #: The delivery id: providers that support idempotency pass it on, so a retry after a
    #: lost response is never a second message.
    idempotency_key: str | None = None


class FailureKind(StrEnum):
    """How a failed send should be treated (docs/pipeline.md#providers)."""

    #: Certainly not accepted; another attempt may succeed (rate limit, outage, refused
    #: connection), here or at another provider.
    TRANSIENT = "transient"
    #: Certainly not accepted, and no attempt at this provider can succeed (a destination
    #: it does not serve, a sender not registered with it); another provider may.
    REFUSED = "refused"
    #: No attempt at any provider can succeed (invalid recipient, rejected content).
    TERMINAL = "terminal"
    #: Perhaps accepted (a timeout after the request was written, a connection lost before
    #: the answer): trying another provider could deliver it twice, so only this one may be
    #: tried again (with the delivery id as idempotency key where it takes one).
    AMBIGUOUS = "ambiguous"


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
    def failed(cls, kind: FailureKind, code: str, message: str) -> SendResult:
        """A failure of ``kind``; ``message`` is clipped to FAILURE_MESSAGE_MAX_CHARS."""
        return cls(accepted=False, failure_kind=kind, failure_code=code,
                   failure_message=_clip(message))

    @classmethod
    def transient(cls, code: str, message: str) -> SendResult:
        """A failure that another attempt may get past."""
        return cls.failed(FailureKind.TRANSIENT, code, message)

    @classmethod
    def terminal(cls, code: str, message: str) -> SendResult:
        """A failure no retry at any provider can fix."""
        return cls.failed(FailureKind.TERMINAL, code, message)

    @classmethod
    def refused(cls, code: str, message: str) -> SendResult:
        """A failure no retry at this provider can fix; another provider may succeed."""
        return cls.failed(FailureKind.REFUSED, code, message)

    @classmethod
    def ambiguous(cls, code: str, message: str) -> SendResult:
        """A send that may have been accepted: retry this provider only."""
        return cls.failed(FailureKind.AMBIGUOUS, code, message)

    @property
    def retryable(self) -> bool:
        """True when trying this provider again may succeed (transient or ambiguous)."""
        return self.failure_kind in (FailureKind.TRANSIENT, FailureKind.AMBIGUOUS)

    @property
    def definite(self) -> bool:
        """True when the provider certainly did not accept it: failing over is safe."""
        return not self.accepted and self.failure_kind is not FailureKind.AMBIGUOUS


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


# -- delivery-receipt callbacks ---------------------------------------------------------------
#: Longest provider id (event or message) a receipt can hold.
CALLBACK_ID_MAX_CHARS = 255
#: Longest provider status / error text a receipt keeps.
CALLBACK_DETAIL_MAX_CHARS = 255
#: Body fields that name a person (never stored with a receipt).
_ADDRESS_FIELDS = frozenset({"to", "from", "body", "recipient", "recipients", "phone",
                             "phone_number", "email", "email_to"})


class InvalidSignature(Exception):
    """A callback's signature is missing, wrong, or cannot be checked (no secret set)."""


class InvalidCallback(ValueError):
    """A correctly signed callback whose body herald cannot read; the message says why."""


class CallbackStatus(StrEnum):
    """What a provider's event means for the delivery it reports on."""

    SENT = "sent"
    DELIVERED = "delivered"
    FAILED_TERMINAL = "failed_terminal"
    #: A step that changes no delivery (queued, accepted, opened, clicked …); kept anyway.
    OTHER = "other"


@dataclass(frozen=True, kw_only=True)
class CallbackRequest:
    """A provider's callback as it arrived: the public URL it was sent to, its headers
    (names in lower case) and its raw body."""

    url: str
    headers: dict[str, str]
    body: bytes

    def header(self, name: str) -> str | None:
        """One header's value, whatever the case of ``name``."""
        return self.headers.get(name.lower())


@dataclass(frozen=True, kw_only=True)
class CallbackEvent:
    """One provider event, normalized; construction fails with :class:`InvalidCallback`
    when an id is empty or too long, so nothing malformed reaches the database."""

    #: The provider's id of this event (a redelivery carries the same one).
    event_id: str
    channel: Channel
    #: The id the provider gave the message when it accepted it.
    provider_message_id: str
    status: CallbackStatus
    #: The provider's own status and error code, for operators.
    detail: str | None = None
    #: The event's fields without addresses or message text.
    payload: dict[str, object] | None = None

    def __post_init__(self) -> None:
        for name in ("event_id", "provider_message_id"):
            value = getattr(self, name)
            if not isinstance(value, str) or not value.strip():
                raise InvalidCallback(f"{name}: missing")
            if len(value) > CALLBACK_ID_MAX_CHARS:
                raise InvalidCallback(f"{name}: longer than {CALLBACK_ID_MAX_CHARS} characters")
            # an id is looked up and put in a job id: no NUL (PostgreSQL refuses it) or
            # other control characters
            if not value.isprintable():
                raise InvalidCallback(f"{name}: contains control characters")
        if self.detail is not None:
            printable = "".join(c if c.isprintable() else " " for c in self.detail)
            object.__setattr__(self, "detail", _clip_to(printable, CALLBACK_DETAIL_MAX_CHARS))


def hmac_sha256_signature(secret: str, body: bytes) -> str:
    """The ``sha256=<hex>`` HMAC-SHA256 signature of ``body`` under ``secret``."""
    return "sha256=" + hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()


def verify_hmac_sha256(secret: str, body: bytes, signature: str | None) -> None:
    """Raise :class:`InvalidSignature` unless ``signature`` is ``sha256=<hex HMAC-SHA256 of
    body>`` under ``secret``; an unset secret refuses every callback. Constant time."""
    if not secret:
        raise InvalidSignature("no callback secret is configured")
    if not signature:
        raise InvalidSignature("the signature header is missing")
    expected = hmac_sha256_signature(secret, body)
    if not hmac.compare_digest(expected.encode(), signature.strip().encode()):
        raise InvalidSignature("the signature does not match the body")


def json_object(body: bytes) -> dict[str, Any]:
    """A callback body parsed as a JSON object; :class:`InvalidCallback` otherwise."""
    try:
        parsed = json.loads(body)
    except (ValueError, UnicodeDecodeError):
        raise InvalidCallback("the body is not JSON") from None
    if not isinstance(parsed, dict):
        raise InvalidCallback("the body is not a JSON object")
    return parsed


@overload
def text_field(fields: Mapping[str, Any], name: str, *,
               required: Literal[True] = True) -> str: ...
@overload
def text_field(fields: Mapping[str, Any], name: str, *, required: bool) -> str | None: ...
def text_field(fields: Mapping[str, Any], name: str, *, required: bool = True) -> str | None:
    """``fields[name]`` as text (numbers allowed: some providers send numeric ids); a
    missing required field or a value of another type is :class:`InvalidCallback`."""
    value = fields.get(name)
    if value is None or value == "":
        if required:
            raise InvalidCallback(f"{name}: missing")
        return None
    if isinstance(value, bool) or not isinstance(value, str | int):
        raise InvalidCallback(f"{name}: must be text")
    return str(value)


def without_addresses(fields: Mapping[str, Any]) -> dict[str, object]:
    """``fields`` without the ones that carry an address or the message text."""
    return {key: value for key, value in fields.items() if key.lower() not in _ADDRESS_FIELDS}


def _clip_to(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"
