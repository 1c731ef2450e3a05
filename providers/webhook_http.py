"""Sending one webhook message: signed the Standard Webhooks way and POSTed to the
address the request-forgery guard checked (docs/api.md#webhooks).

:func:`signature_header` signs ``"{id}.{timestamp}.{body}"`` with HMAC-SHA256 under each
base64-decoded secret (two during a rotation, space-separated). :func:`post_message`
connects to :attr:`Target.address` — never resolving the host again, so a DNS answer
changed since the check cannot redirect it — while TLS still verifies the certificate
against the host name (SNI) and the ``Host`` header names it. Redirects are not followed:
a 3xx is a failed attempt like any other non-2xx answer.
"""

from __future__ import annotations

import base64
import dataclasses
import email.utils
import hashlib
import hmac
import time
from datetime import UTC, datetime

import httpx

from providers.webhook_target import Target

#: Seconds a receiver has to answer; a slower answer is a failed attempt.
SEND_TIMEOUT_S = 15.0
#: The longest Retry-After honoured (a receiver cannot park a message for a week).
MAX_RETRY_AFTER_S = 86_400.0
_SECRET_PREFIX = "whsec_"


def signature(secret: str, msg_id: str, timestamp: int, body: bytes) -> str:
    """``v1,<base64 HMAC-SHA256>`` of ``"{msg_id}.{timestamp}.{body}"`` under ``secret``
    (``whsec_`` and base64, as an endpoint's secret is written)."""
    key = base64.b64decode(secret.removeprefix(_SECRET_PREFIX))
    signed = f"{msg_id}.{timestamp}.".encode() + body
    return "v1," + base64.b64encode(hmac.new(key, signed, hashlib.sha256).digest()).decode()


def signature_header(secrets: list[str], msg_id: str, timestamp: int, body: bytes) -> str:
    """The ``webhook-signature`` header: one signature per secret, space-separated."""
    return " ".join(signature(secret, msg_id, timestamp, body) for secret in secrets)


@dataclasses.dataclass(frozen=True)
class Attempt:
    """What one POST got: the status code (None: no answer), how long it took, the
    error (None on success) and the wait a 429 or 503 asked for."""

    status_code: int | None
    duration_ms: int
    error: str | None
    retry_after_s: float | None = None

    @property
    def ok(self) -> bool:
        """A 2xx within :data:`SEND_TIMEOUT_S`."""
        return self.error is None


def retry_after_s(value: str | None, now: datetime | None = None) -> float | None:
    """A ``Retry-After`` header's wait in seconds (delay-seconds or an HTTP date), at most
    :data:`MAX_RETRY_AFTER_S`; None when absent or unreadable."""
    if not value:
        return None
    value = value.strip()
    if value.isdigit():
        return min(float(value), MAX_RETRY_AFTER_S)
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    wait = (when - (now or datetime.now(UTC))).total_seconds()
    return min(max(wait, 0.0), MAX_RETRY_AFTER_S)


def post_message(client: httpx.Client, target: Target, *, msg_id: str, timestamp: int,
                 body: bytes, secrets: list[str]) -> Attempt:
    """POST ``body`` to ``target`` with the Standard Webhooks headers; never raises for
    what the network or the receiver does: the outcome is in the :class:`Attempt`."""
    url = httpx.URL(target.url)
    headers = {"content-type": "application/json", "user-agent": "herald-webhooks/1",
               "host": url.netloc.decode("ascii"), "webhook-id": msg_id,
               "webhook-timestamp": str(timestamp),
               "webhook-signature": signature_header(secrets, msg_id, timestamp, body)}
    started = time.monotonic()
    try:
        response = client.post(url.copy_with(host=str(target.address)), content=body,
                               headers=headers, timeout=SEND_TIMEOUT_S,
                               extensions={"sni_hostname": target.host})
    except httpx.TimeoutException:
        return Attempt(None, _ms(started), f"no answer within {SEND_TIMEOUT_S:g} s")
    except httpx.HTTPError as error:
        return Attempt(None, _ms(started), f"{type(error).__name__}: {error}"[:500])
    duration = _ms(started)
    if duration > SEND_TIMEOUT_S * 1000:
        return Attempt(response.status_code, duration,
                       f"answered after {SEND_TIMEOUT_S:g} s")
    if 200 <= response.status_code < 300:
        return Attempt(response.status_code, duration, None)
    wait = (retry_after_s(response.headers.get("retry-after"))
            if response.status_code in (429, 503) else None)
    return Attempt(response.status_code, duration, f"HTTP {response.status_code}", wait)


def _ms(started: float) -> int:
    return round((time.monotonic() - started) * 1000)
