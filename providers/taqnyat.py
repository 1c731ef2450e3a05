"""The Taqnyat SMS provider (httpx, Taqnyat's REST API).

``POST {TAQNYAT_BASE_URL}/v1/messages`` with ``Authorization: Bearer <TAQNYAT_API_KEY>``
and ``{"recipients": ["9665…"], "body": "…", "sender": "<TAQNYAT_SENDER>"}`` —
recipients are international numbers without the ``+``. Success is 201 with
``{"statusCode": 201, "messageId": …, "accepted": "[9665…,]", "rejected": "[]", …}``;
``messageId`` is the provider message id.

Classification:

- HTTP 429 and 5xx, connection errors, timeouts → transient
- other 4xx (401 bad key, 400 invalid recipient or sender) → terminal
- a 201 that lists the recipient as rejected and none as accepted → terminal
  ``recipient_rejected``
- a 2xx whose body cannot be read → accepted without an id: the status says Taqnyat
  took the message, and a retry would send it twice (Taqnyat has no idempotency key)
- missing API key or sender → terminal ``not_configured``
"""

from __future__ import annotations

import re
from typing import Any

import httpx

from herald.settings import Settings, get_settings
from providers.base import (
    CallbackEvent,
    CallbackRequest,
    CallbackStatus,
    Channel,
    OutboundMessage,
    SendResult,
    http_status_result,
    json_object,
    redact,
    text_field,
    verify_hmac_sha256,
    without_addresses,
)
from providers.http import HttpProvider


class TaqnyatProvider(HttpProvider):
    """Sends SMS through Taqnyat's REST API."""

    name = "taqnyat"
    channels = frozenset({Channel.SMS})

    base_url_setting = "taqnyat_base_url"

    def send(self, message: OutboundMessage) -> SendResult:
        """Send one SMS; ok carries Taqnyat's messageId."""
        if message.channel is not Channel.SMS:
            return SendResult.terminal("unsupported_channel",
                                       f"taqnyat cannot send {message.channel}")
        settings = self._settings
        if not settings.taqnyat_api_key or not settings.taqnyat_sender:
            return SendResult.terminal("not_configured",
                                       "TAQNYAT_API_KEY and TAQNYAT_SENDER are required")
        payload = {"recipients": [message.to.lstrip("+")], "body": message.text,
                   "sender": settings.taqnyat_sender}
        return self.post_json(message, "/v1/messages", payload,
                              {"Authorization": f"Bearer {settings.taqnyat_api_key}"},
                              _response_result)


def _response_result(response: httpx.Response, recipient: str) -> SendResult:
    body = _json(response)
    if response.is_success:
        if _numbers(body.get("accepted")) == [] and _numbers(body.get("rejected")):
            return SendResult.terminal("recipient_rejected", "Taqnyat rejected the recipient")
        message_id = body.get("messageId")
        return SendResult.ok(str(message_id) if message_id is not None else None)
    text = body.get("message") or response.reason_phrase or "error"
    return http_status_result(response.status_code, f"http_{response.status_code}",
                              redact(str(text), recipient))


def _json(response: httpx.Response) -> dict[str, Any]:
    try:
        body = response.json()
    except ValueError:
        return {}
    return body if isinstance(body, dict) else {}


def _numbers(listing: object) -> list[str] | None:
    """The numbers in Taqnyat's ``"[9665…,9665…,]"`` strings (None when absent)."""
    if listing is None:
        return None
    if isinstance(listing, list):
        return [str(item) for item in listing]
    return re.findall(r"\d+", str(listing))


# -- delivery-receipt callbacks ---------------------------------------------------------------
#: The header that carries a Taqnyat receipt's signature. Taqnyat documents no signing of
#: its own, so herald asks for an HMAC-SHA256 of the raw body under TAQNYAT_CALLBACK_SECRET
#: (added by whatever forwards Taqnyat's reports to herald).
TAQNYAT_SIGNATURE_HEADER = "X-Taqnyat-Signature"
#: Taqnyat report statuses (case-insensitive) that change a delivery; others (pending,
#: queued, accepted …) are kept with the receipt and change nothing.
TAQNYAT_CALLBACK_STATUSES = {"sent": CallbackStatus.SENT, "delivered": CallbackStatus.DELIVERED,
                             "undelivered": CallbackStatus.FAILED_TERMINAL,
                             "failed": CallbackStatus.FAILED_TERMINAL,
                             "rejected": CallbackStatus.FAILED_TERMINAL,
                             "expired": CallbackStatus.FAILED_TERMINAL}


def parse_callback(request: CallbackRequest, settings: Settings | None = None) -> CallbackEvent:
    """A Taqnyat delivery report: JSON ``{"messageId", "status", "eventId"?, "errorCode"?}``
    signed ``X-Taqnyat-Signature: sha256=<hex HMAC-SHA256 of the raw body>`` under
    TAQNYAT_CALLBACK_SECRET (every report is refused while it is unset).

    ``messageId`` is the id the send answered with; the event id is ``eventId`` when
    given, else ``<messageId>-<status>``. Raises :class:`InvalidSignature`, then
    :class:`InvalidCallback`.
    """
    secret = (settings or get_settings()).taqnyat_callback_secret
    verify_hmac_sha256(secret, request.body, request.header(TAQNYAT_SIGNATURE_HEADER))
    fields = json_object(request.body)
    message_id = text_field(fields, "messageId") or ""
    status = (text_field(fields, "status") or "").lower()
    error_code = text_field(fields, "errorCode", required=False)
    event_id = text_field(fields, "eventId", required=False) or f"{message_id}-{status}"
    return CallbackEvent(event_id=event_id, provider_message_id=message_id, channel=Channel.SMS,
                         status=TAQNYAT_CALLBACK_STATUSES.get(status, CallbackStatus.OTHER),
                         detail=status if error_code is None else f"{status} ({error_code})",
                         payload=without_addresses(fields))
