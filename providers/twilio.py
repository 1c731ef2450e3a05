"""The Twilio SMS provider (the official ``twilio`` SDK).

``client.messages.create(to=, from_=, body=)``; the message SID is the provider message
id. ``TWILIO_BASE_URL`` points the SDK at another host speaking Twilio's API (tests run
one locally): the SDK builds every URL from ``https://api.twilio.com``, and the
supported seam is its pluggable HTTP client, so :class:`_RebasingHttpClient` rewrites
that origin just before the request goes out.

Failures are classified by ``providers.classification.TWILIO``, by Twilio's error code
first, then the HTTP status:

- HTTP 429 and 5xx, codes 20429 (too many requests) and 21611 (the sender's queue is
  full), a failure to connect → transient
- a read timeout or a connection lost after the request was written → ambiguous
- bad credentials (20003), a region not enabled (21408), a number Twilio cannot route to
  from this sender (21612), a sender that is not valid or verified (21606, 21659), other
  401/403/404 → refused: another provider may send it
- an invalid or non-mobile 'To' (21211, 21614), an unsubscribed recipient (21610), other
  4xx → terminal
- missing account SID, auth token or from number → refused ``not_configured``

Twilio has no idempotency key for Messages: a timeout after Twilio accepted the message
means the retry sends a second SMS. Timeouts are short so that window stays small.
"""

from __future__ import annotations

import logging
from typing import Any
from urllib.parse import parse_qs

import requests
from twilio.base.exceptions import TwilioRestException, TwilioServiceException
from twilio.http.http_client import TwilioHttpClient
from twilio.http.response import Response
from twilio.request_validator import (
    SIGNATURE_HEADER,
    SIGNATURE_SETTINGS_HEADER,
    RequestValidator,
    get_signature_algorithm,
)
from twilio.rest import Client

from herald.settings import Settings, get_settings
from providers.base import (
    CallbackEvent,
    CallbackRequest,
    CallbackStatus,
    Channel,
    InvalidSignature,
    OutboundMessage,
    SendResult,
    redact,
    text_field,
    without_addresses,
)
from providers.classification import TWILIO

log = logging.getLogger(__name__)

#: Seconds one HTTP request to Twilio may take (connect and read).
REQUEST_TIMEOUT_S = 10.0
#: The origin the SDK addresses for the Messages API.
TWILIO_API_ORIGIN = "https://api.twilio.com"


class _RebasingHttpClient(TwilioHttpClient):  # type: ignore[misc]  # twilio ships no types
    """The SDK's HTTP client, sending requests for api.twilio.com to ``base_url``."""

    def __init__(self, base_url: str, *, timeout: float) -> None:
        super().__init__(timeout=timeout)
        self._base_url = base_url.rstrip("/")

    def request(self, method: str, url: str, *args: Any, **kwargs: Any) -> Response:
        if self._base_url and url.startswith(TWILIO_API_ORIGIN):
            url = self._base_url + url.removeprefix(TWILIO_API_ORIGIN)
        return super().request(method, url, *args, **kwargs)


class TwilioProvider:
    """Sends SMS through Twilio's Messages API."""

    name = "twilio"
    channels = frozenset({Channel.SMS})

    def __init__(self, settings: Settings | None = None, *,
                 timeout_s: float = REQUEST_TIMEOUT_S) -> None:
        self._settings = settings or get_settings()
        self._timeout_s = timeout_s
        s = self._settings
        self._configured = bool(s.twilio_account_sid and s.twilio_auth_token
                                and s.twilio_from_number)
        self._client = Client(
            username=s.twilio_account_sid or None,
            password=s.twilio_auth_token or None,
            http_client=_RebasingHttpClient(s.twilio_base_url, timeout=timeout_s),
        )

    def send(self, message: OutboundMessage) -> SendResult:
        """Send one SMS; ok carries Twilio's message SID."""
        if message.channel is not Channel.SMS:
            return TWILIO.outcome("unsupported_channel",
                                  f"twilio cannot send {message.channel}")
        if not self._configured:
            return TWILIO.outcome("not_configured", "TWILIO_ACCOUNT_SID, "
                                  "TWILIO_AUTH_TOKEN and TWILIO_FROM_NUMBER are required")
        try:
            created = self._client.messages.create(
                to=message.to, from_=self._settings.twilio_from_number, body=message.text)
        except (TwilioRestException, TwilioServiceException) as error:
            result = _error_result(error, message.to)
        except requests.RequestException as error:
            detail = (f"no answer within {self._timeout_s} s"
                      if isinstance(error, requests.Timeout) else type(error).__name__)
            result = TWILIO.exception(error, detail)
        else:
            return SendResult.ok(created.sid)
        log.info("twilio send failed", extra={"delivery_id": message.idempotency_key,
                                              "failure_code": result.failure_code})
        return result


def _error_result(error: TwilioRestException | TwilioServiceException,
                  recipient: str) -> SendResult:
    status = int(error.status)
    code = int(error.code) if error.code is not None else status
    text = ((error.detail or error.title) if isinstance(error, TwilioServiceException)
            else error.msg)
    return TWILIO.answer(status, f"twilio_{code}", redact(str(text), recipient), error=code)


# -- delivery-receipt callbacks ---------------------------------------------------------------
#: Twilio's MessageStatus values that change a delivery; the rest (queued, accepted,
#: sending, scheduled, read, canceled …) are kept with the receipt and change nothing.
TWILIO_CALLBACK_STATUSES = {"sent": CallbackStatus.SENT, "delivered": CallbackStatus.DELIVERED,
                            "undelivered": CallbackStatus.FAILED_TERMINAL,
                            "failed": CallbackStatus.FAILED_TERMINAL}


class _FormParams(dict[str, list[str]]):
    """Form fields with every value of a repeated name, as the SDK's validator reads them."""

    def getlist(self, name: str) -> list[str]:
        return self[name]


def parse_callback(request: CallbackRequest, settings: Settings | None = None) -> CallbackEvent:
    """A Twilio message status callback (form-encoded ``MessageSid``, ``MessageStatus``,
    ``ErrorCode`` …) whose ``X-Twilio-Signature`` the SDK's ``RequestValidator`` accepts
    for ``request.url`` and the form fields under TWILIO_AUTH_TOKEN.

    The event id is ``<MessageSid>-<MessageStatus>``: Twilio sends one callback per status
    change and repeats it unchanged when our answer was lost. Raises
    :class:`InvalidSignature` (also while TWILIO_AUTH_TOKEN is unset), then
    :class:`InvalidCallback`.
    """
    params = _FormParams(parse_qs(request.body.decode("utf-8", errors="replace"),
                                  keep_blank_values=True))
    _verify_signature(request, params, (settings or get_settings()).twilio_auth_token)
    fields = {name: values[-1] for name, values in params.items()}
    sid = text_field(fields, "MessageSid") or ""
    status = (text_field(fields, "MessageStatus") or "").lower()
    error_code = text_field(fields, "ErrorCode", required=False)
    return CallbackEvent(event_id=f"{sid}-{status}", provider_message_id=sid,
                         channel=Channel.SMS,
                         status=TWILIO_CALLBACK_STATUSES.get(status, CallbackStatus.OTHER),
                         detail=status if error_code is None else f"{status} ({error_code})",
                         payload=without_addresses(fields))


def _verify_signature(request: CallbackRequest, params: _FormParams, auth_token: str) -> None:
    if not auth_token:
        raise InvalidSignature("TWILIO_AUTH_TOKEN is not configured")
    signature = request.header(SIGNATURE_HEADER)
    if not signature:
        raise InvalidSignature(f"the {SIGNATURE_HEADER} header is missing")
    algorithm = get_signature_algorithm(request.header(SIGNATURE_SETTINGS_HEADER))
    # the SDK compares in constant time, with and without the default port in the URL
    if not RequestValidator(auth_token).validate(request.url, params, signature, algorithm):
        raise InvalidSignature("the signature does not match the URL and parameters")
