"""The OneSignal provider for email, SMS and push (httpx, OneSignal's Create Message API).

``POST {ONESIGNAL_BASE_URL}/notifications`` with ``Authorization: Key <ONESIGNAL_API_KEY>``
and a JSON body of ``app_id``, ``target_channel`` and the channel's fields:

- email: ``email_to``, ``email_subject``, ``email_body`` (the html, else the text
  escaped into html)
- sms: ``include_phone_numbers``, ``contents: {"en": text}``
- push: ``include_aliases: {"external_id": [to]}``, ``contents``, ``headings`` (subject)

Every request carries ``idempotency_key`` = the delivery id: OneSignal answers a repeat
with the first notification's id instead of sending again, so a retry after a lost
response is never a duplicate. Success is 200 ``{"id": "…"}``; ``id`` is the provider
message id.

Failures are classified by ``providers.classification.ONESIGNAL``:

- HTTP 429 and 5xx and a failure to connect → transient
- a read timeout or a connection lost after the request was written, and a 2xx without
  a readable id (``bad_response``) → ambiguous: the retry at OneSignal is deduplicated
  by the idempotency key
- 401/403, an app id that is not the account's, a channel the app has not set up →
  refused; so is a 200 with an empty ``id`` and ``errors`` (``no_recipients``: OneSignal
  holds no subscription for the recipient, which another provider does not need)
- other 4xx (``{"errors": [...]}``: an invalid number, missing content) → terminal
- an email with attachments → refused ``attachments_unsupported``: the Create Message API
  cannot carry files, and dropping an eSIM QR code silently is worse than failing;
  likewise an email with a Cc → refused ``cc_unsupported`` (SMTP can carry both; a sender
  other than the app's goes as ``email_from_address`` / ``email_from_name``)
- missing app id or API key → refused ``not_configured``
"""

from __future__ import annotations

import html
import json
from email.utils import parseaddr
from typing import Any

import httpx

from herald.settings import Settings, get_settings
from providers.base import (
    CallbackEvent,
    CallbackRequest,
    CallbackStatus,
    Channel,
    InvalidCallback,
    OutboundMessage,
    SendResult,
    json_object,
    redact,
    text_field,
    verify_hmac_sha256,
    without_addresses,
)
from providers.classification import ONESIGNAL
from providers.http import HttpProvider

#: The language key of ``contents`` / ``headings`` (OneSignal requires English).
CONTENT_LANGUAGE = "en"


class OneSignalProvider(HttpProvider):
    """Sends email, SMS and push through OneSignal."""

    name = "onesignal"
    channels = frozenset({Channel.EMAIL, Channel.SMS, Channel.PUSH})

    base_url_setting = "onesignal_base_url"
    classification = ONESIGNAL

    def send(self, message: OutboundMessage) -> SendResult:
        """Create one OneSignal message; ok carries the notification id."""
        settings = self._settings
        if not settings.onesignal_app_id or not settings.onesignal_api_key:
            return ONESIGNAL.outcome("not_configured",
                                     "ONESIGNAL_APP_ID and ONESIGNAL_API_KEY are required")
        if message.channel is Channel.EMAIL and message.attachments:
            return ONESIGNAL.outcome("attachments_unsupported",
                                     "OneSignal email cannot carry attachments")
        if message.channel is Channel.EMAIL and message.cc:
            return ONESIGNAL.outcome("cc_unsupported", "OneSignal email cannot carry a Cc")
        return self.post_json(message, "/notifications",
                              build_payload(message, settings.onesignal_app_id),
                              {"Authorization": f"Key {settings.onesignal_api_key}",
                               "Accept": "application/json"}, _response_result)


def build_payload(message: OutboundMessage, app_id: str) -> dict[str, Any]:
    """The Create Message request body for ``message``."""
    payload: dict[str, Any] = {"app_id": app_id, "target_channel": str(message.channel)}
    if message.idempotency_key:
        payload["idempotency_key"] = message.idempotency_key
    if message.channel is Channel.EMAIL:
        payload["email_to"] = [message.to]
        payload["email_subject"] = message.subject or ""
        if message.sender:
            name, address = parseaddr(message.sender)
            payload["email_from_address"] = address
            if name:
                payload["email_from_name"] = name
        payload["email_body"] = (message.html if message.html is not None
                                 else html.escape(message.text).replace("\n", "<br>\n"))
    elif message.channel is Channel.SMS:
        payload["include_phone_numbers"] = [message.to]
        payload["contents"] = {CONTENT_LANGUAGE: message.text}
    else:
        payload["include_aliases"] = {"external_id": [message.to]}
        payload["contents"] = {CONTENT_LANGUAGE: message.text}
        if message.subject:
            payload["headings"] = {CONTENT_LANGUAGE: message.subject}
    return payload


def _response_result(response: httpx.Response, recipient: str) -> SendResult:
    try:
        body = response.json()
    except ValueError:
        body = {}
    if not isinstance(body, dict):
        body = {}
    errors = body.get("errors")
    if response.is_success:
        notification_id = body.get("id")
        if notification_id:
            return SendResult.ok(str(notification_id))
        if errors:
            return ONESIGNAL.outcome("no_recipients", redact(_describe(errors), recipient))
        return ONESIGNAL.outcome("bad_response", "a success answer without an id")
    text = _describe(errors) if errors else (response.reason_phrase or "error")
    return ONESIGNAL.answer(response.status_code, f"http_{response.status_code}",
                            redact(text, recipient), error=text)


def _describe(errors: object) -> str:
    """OneSignal's ``errors``: a list of sentences, or an object such as invalid_aliases."""
    if isinstance(errors, list):
        return "; ".join(str(item) for item in errors)
    if isinstance(errors, dict):
        # the values are the offending recipients; name the problem, not the people
        return "; ".join(str(key) for key in errors)
    return json.dumps(errors)


# -- delivery-receipt callbacks ---------------------------------------------------------------
#: The header that carries a OneSignal event's signature. OneSignal's Event Streams sign
#: nothing themselves (they send the headers configured on the stream), so herald asks for
#: an HMAC-SHA256 of the raw body under ONESIGNAL_CALLBACK_SECRET.
ONESIGNAL_SIGNATURE_HEADER = "X-OneSignal-Signature"
#: Event Stream actions (the last part of ``event.kind``, e.g. ``message.sms.delivered``)
#: that change a delivery; others (clicked, opened, unsubscribed …) change nothing.
ONESIGNAL_CALLBACK_ACTIONS = {"sent": CallbackStatus.SENT, "delivered": CallbackStatus.DELIVERED,
                              "received": CallbackStatus.DELIVERED,
                              "failed": CallbackStatus.FAILED_TERMINAL,
                              "bounced": CallbackStatus.FAILED_TERMINAL,
                              "hardbounced": CallbackStatus.FAILED_TERMINAL,
                              "suppressed": CallbackStatus.FAILED_TERMINAL}


def parse_callback(request: CallbackRequest, settings: Settings | None = None) -> CallbackEvent:
    """A OneSignal Event Stream event whose body is configured (Liquid) as
    ``{"event": {"id": "{{ event.id }}", "kind": "{{ event.kind }}"},
    "message": {"id": "{{ message.id }}"}}``, signed ``X-OneSignal-Signature:
    sha256=<hex HMAC-SHA256 of the raw body>`` under ONESIGNAL_CALLBACK_SECRET (every event
    is refused while it is unset).

    ``event.id`` is the event id, ``message.id`` the notification id the send answered
    with, and ``event.kind`` is ``message.<email|sms|push>.<action>``. Raises
    :class:`InvalidSignature`, then :class:`InvalidCallback`.
    """
    secret = (settings or get_settings()).onesignal_callback_secret
    verify_hmac_sha256(secret, request.body, request.header(ONESIGNAL_SIGNATURE_HEADER))
    fields = json_object(request.body)
    event, message = _object(fields, "event"), _object(fields, "message")
    kind = text_field(event, "kind") or ""
    parts = kind.split(".")
    if len(parts) != 3 or parts[0] != "message" or parts[1] not in {c.value for c in Channel}:
        raise InvalidCallback("event.kind: must be message.<email|sms|push>.<action>")
    return CallbackEvent(event_id=text_field(event, "id") or "",
                         provider_message_id=text_field(message, "id") or "",
                         channel=Channel(parts[1]),
                         status=ONESIGNAL_CALLBACK_ACTIONS.get(parts[2], CallbackStatus.OTHER),
                         detail=kind, payload={"event": without_addresses(event),
                                               "message": without_addresses(message)})


def _object(fields: dict[str, Any], name: str) -> dict[str, Any]:
    value = fields.get(name)
    if not isinstance(value, dict):
        raise InvalidCallback(f"{name}: must be an object")
    return value
