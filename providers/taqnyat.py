"""The Taqnyat SMS provider (httpx, Taqnyat's REST API).

``POST {TAQNYAT_BASE_URL}/v1/messages`` with ``Authorization: Bearer <TAQNYAT_API_KEY>``
and ``{"recipients": ["9665…"], "body": "…", "sender": "<TAQNYAT_SENDER>"}`` —
recipients are international numbers without the ``+``. Success is 201 with
``{"statusCode": 201, "messageId": …, "accepted": "[9665…,]", "rejected": "[]", …}``;
``messageId`` is the provider message id.

Failures are classified by ``providers.classification.TAQNYAT``: HTTP 429 and 5xx and a
failure to connect are transient; a read timeout or a connection lost after the request
was written is ambiguous (Taqnyat may have the message); 401/403 and "Sender name is not
active" are refused, as is a 201 that lists the well-formed recipient as rejected and none
as accepted (``recipient_rejected``: a destination Taqnyat does not serve); an invalid
recipient or an empty body is terminal; missing API key or sender is refused
``not_configured``. A 2xx whose body cannot be read is accepted without an id: the status
says Taqnyat took the message, and a retry would send it twice (Taqnyat has no
idempotency key).
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
    json_object,
    redact,
    text_field,
    verify_hmac_sha256,
    without_addresses,
)
from providers.classification import TAQNYAT
from providers.http import HttpProvider


class TaqnyatProvider(HttpProvider):
    """Sends SMS through Taqnyat's REST API."""

    name = "taqnyat"
    channels = frozenset({Channel.SMS})

    base_url_setting = "taqnyat_base_url"
    classification = TAQNYAT

    def send(self, message: OutboundMessage) -> SendResult:
        """Send one SMS; ok carries Taqnyat's messageId."""
        if message.channel is not Channel.SMS:
            return TAQNYAT.outcome("unsupported_channel",
                                   f"taqnyat cannot send {message.channel}")
        settings = self._settings
        if not settings.taqnyat_api_key or not settings.taqnyat_sender:
            return TAQNYAT.outcome("not_configured",
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
            return TAQNYAT.outcome("recipient_rejected", "Taqnyat rejected the recipient")
        message_id = body.get("messageId")
        return SendResult.ok(str(message_id) if message_id is not None else None)
    text = str(body.get("message") or response.reason_phrase or "error")
    return TAQNYAT.answer(response.status_code, f"http_{response.status_code}",
                          redact(text, recipient), error=text)


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
