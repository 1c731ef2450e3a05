"""Sending one webhook message: signed the Standard Webhooks way and POSTed to the
address the request-forgery guard checked (docs/api.md#webhooks).

:func:`signature_header` signs ``"{id}.{timestamp}.{body}"`` with HMAC-SHA256 under each
base64-decoded secret (two during a rotation, space-separated). :func:`post_message`
connects to :attr:`Target.address` (:mod:`providers.webhook_connections`) — never
resolving the host again, so a DNS answer changed since the check cannot redirect it —
while TLS still verifies the certificate against the host name (SNI) and the ``Host``
header names it. Redirects are not followed: a 3xx is a failed attempt like any other
non-2xx answer.

An attempt is given :data:`SEND_TIMEOUT_S` in all (connect, TLS, send, answer) and reads
at most :data:`MAX_ANSWER_BYTES` of the answer (status line, headers and body); beyond
either it is a failure (``timeout``, ``answer_too_large``) and the connection is closed,
so a receiver that trickles or streams without end holds neither a worker's slot for
long nor its memory.
"""

from __future__ import annotations

import base64
import dataclasses
import email.utils
import hashlib
import hmac
import http.client
import time
from datetime import UTC, datetime
from urllib.parse import quote, urlsplit

from providers.webhook_connections import AnswerTooLarge, Connections
from providers.webhook_target import Target

#: Seconds one attempt has in all, from connecting to the answer's last byte; a slower
#: one is a failed attempt (``timeout``).
SEND_TIMEOUT_S = 15.0
#: Bytes of an answer read at most (status line, headers and body together); a longer
#: answer is a failed attempt (``answer_too_large``). Only its status counts; the
#: budget leaves room for any error page.
MAX_ANSWER_BYTES = 64 * 1024
#: The size of each read of an answer's body: http.client allocates what it is asked
#: for, so never a length the receiver announced.
_READ_SIZE = 16 * 1024
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
        """A 2xx answer, read whole within :data:`SEND_TIMEOUT_S` and
        :data:`MAX_ANSWER_BYTES`."""
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


def post_message(connections: Connections, target: Target, *, msg_id: str, timestamp: int,
                 body: bytes, secrets: list[str]) -> Attempt:
    """POST ``body`` to ``target`` with the Standard Webhooks headers, on a connection of
    ``connections``, within :data:`SEND_TIMEOUT_S` in all and reading at most
    :data:`MAX_ANSWER_BYTES` of the answer (past either: a failed attempt, the connection
    closed); never raises for what the network or the receiver does: the outcome is in
    the :class:`Attempt` (its status code whenever the answer's status line was read)."""
    headers = {"content-type": "application/json", "user-agent": "herald-webhooks/1",
               "host": _host_header(target), "webhook-id": msg_id,
               "webhook-timestamp": str(timestamp),
               "webhook-signature": signature_header(secrets, msg_id, timestamp, body)}
    timeout_s = SEND_TIMEOUT_S  # read now: a test shortens it
    started = time.monotonic()
    response: http.client.HTTPResponse | None = None
    try:
        connection = connections.get(target, deadline=started + timeout_s,
                                     max_answer_bytes=MAX_ANSWER_BYTES)
        connection.request("POST", _path(target.url), body=body, headers=headers)
        response = connection.getresponse()
        _read_answer(response)  # all of it, so that the connection can carry the next
    except TimeoutError:
        connections.discard(target)
        return Attempt(_status(response), _ms(started),
                       f"timeout: no complete answer within {timeout_s:g} s")
    except AnswerTooLarge:
        connections.discard(target)
        return Attempt(_status(response), _ms(started),
                       f"answer_too_large: the answer went past {MAX_ANSWER_BYTES // 1024} KiB")
    except (OSError, http.client.HTTPException) as error:
        connections.discard(target)
        return Attempt(_status(response), _ms(started), f"{type(error).__name__}: {error}"[:500])
    duration, status = _ms(started), response.status
    if 200 <= status < 300:
        return Attempt(status, duration, None)
    wait = (retry_after_s(response.getheader("retry-after"))
            if status in (429, 503) else None)
    return Attempt(status, duration, f"HTTP {status}", wait)


def _read_answer(response: http.client.HTTPResponse) -> None:
    """Read the answer's body to its end, in reads of :data:`_READ_SIZE`; an announced
    length past :data:`MAX_ANSWER_BYTES` is refused before any of it is read."""
    if response.length is not None and response.length > MAX_ANSWER_BYTES:
        raise AnswerTooLarge(f"the answer announced {response.length} bytes")
    while response.read(_READ_SIZE):
        pass


def _status(response: http.client.HTTPResponse | None) -> int | None:
    return None if response is None else response.status


def _host_header(target: Target) -> str:
    """The URL's host (IDNA-encoded) and its port when the URL names one."""
    parts = urlsplit(target.url)
    host = target.host if target.host.isascii() else target.host.encode("idna").decode()
    if ":" in host:  # an IPv6 literal
        host = f"[{host}]"
    return host if parts.port is None else f"{host}:{parts.port}"


def _path(url: str) -> str:
    """The request target of ``url``: its path (``/`` when empty) and query, with any
    character HTTP may not carry raw percent-encoded."""
    parts = urlsplit(url)
    path = parts.path or "/"
    if parts.query:
        path += "?" + parts.query
    return quote(path, safe=_URL_SAFE)


#: What stays as it is in a request target: RFC 3986's reserved and unreserved
#: characters, and ``%`` (the URL's own escapes).
_URL_SAFE = "/?#[]@!$&'()*+,;=-._~:%"


def _ms(started: float) -> int:
    return round((time.monotonic() - started) * 1000)
