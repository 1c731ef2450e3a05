"""The SMTP email provider (aiosmtplib).

One send has a 20-second overall deadline, below the email queue's 30-second lock and
the delivery's 60-second claim, so no other attempt can take a delivery over while its
send is still in flight; the transport is always closed (docs/pipeline.md#providers).
SMTP email ends at ``sent``: a relay's acceptance is all SMTP tells us. It is not
exactly-once — a relay that accepted the mail before a crash or a lost reply gets it
again on retry, and SMTP offers no idempotency operation. To soften that, the
Message-ID is derived from the delivery id, so both copies carry the same Message-ID and
mail clients that collapse duplicates show one.

Classification:

- a reply code 4xx (greylisting, "try again later", temporary auth failure) → transient
- a reply code 5xx (unknown user, rejected content, bad credentials) → terminal
- connection refused, disconnects, socket errors, TLS errors, the deadline → transient
- the relay lacking an extension the settings require (STARTTLS, AUTH) → terminal
  ``smtp_config``: configuration has to change before any attempt can succeed

``send`` runs its coroutine with ``asyncio.run``: it is called from worker threads that
have no event loop of their own.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
from collections.abc import Sequence
from dataclasses import dataclass
from email.message import EmailMessage
from email.utils import formatdate, make_msgid, parseaddr
from typing import cast

import aiosmtplib

from herald.settings import Settings, get_settings
from providers.base import Channel, OutboundMessage, SendResult, redact

log = logging.getLogger(__name__)

#: Overall deadline of one send, connect to quit (under the 30 s lock and 60 s claim).
SEND_DEADLINE_S = 20.0
#: Seconds the polite QUIT may take after the relay accepted the mail.
QUIT_TIMEOUT_S = 2.0


@dataclass
class _Attempt:
    """What one send got to; read after a timeout to tell sent from not sent."""

    accepted: bool = False


class SmtpProvider:
    """Sends email through the configured SMTP relay."""

    name = "smtp"
    channels = frozenset({Channel.EMAIL})

    def __init__(self, settings: Settings | None = None, *,
                 deadline_s: float = SEND_DEADLINE_S) -> None:
        self._settings = settings or get_settings()
        self._deadline_s = deadline_s

    def send(self, message: OutboundMessage) -> SendResult:
        """Send one email; ok carries the Message-ID, failures are classified."""
        if message.channel is not Channel.EMAIL:
            return SendResult.terminal("unsupported_channel", f"smtp cannot send {message.channel}")
        mime = build_mime(message, sender=message.sender or self._settings.email_from)
        result = send_mime(mime, [message.to, *message.cc], self._settings,
                           deadline_s=self._deadline_s)
        if not result.accepted:
            log.info("smtp send failed", extra={"delivery_id": message.idempotency_key,
                                                "failure_code": result.failure_code})
        return result


def send_mime(mime: EmailMessage, recipients: Sequence[str], settings: Settings, *,
              deadline_s: float = SEND_DEADLINE_S) -> SendResult:
    """Send an already built message to ``recipients`` through the SMTP_* relay within
    ``deadline_s``: ok carries its Message-ID; a failure is classified as described at the
    top of this module and its message never holds a recipient's address."""
    message_id = str(mime["Message-ID"])
    attempt = _Attempt()
    try:
        asyncio.run(asyncio.wait_for(_deliver(mime, list(recipients), attempt, settings,
                                              deadline_s), deadline_s))
    except TimeoutError:
        if attempt.accepted:  # the deadline hit during QUIT: the mail is with the relay
            return SendResult.ok(message_id)
        return SendResult.transient("timeout", f"no answer within {deadline_s} s")
    except aiosmtplib.SMTPRecipientsRefused as error:
        refused = error.recipients[0]
        return _reply_result(refused.code, refused.message, *recipients)
    except aiosmtplib.SMTPResponseException as error:
        return _reply_result(error.code, error.message, *recipients)
    except OSError as error:
        # refused, reset, disconnected, TLS handshake: nothing was accepted (aiosmtplib's
        # connect and disconnect errors are ConnectionErrors, hence OSErrors, too)
        return SendResult.transient("connection", type(error).__name__)
    except aiosmtplib.SMTPException as error:
        # what is left is the relay lacking what the settings require (STARTTLS, AUTH):
        # its messages are fixed sentences, never an address
        return SendResult.terminal("smtp_config", str(error))
    return SendResult.ok(message_id)


async def _deliver(mime: EmailMessage, recipients: list[str], attempt: _Attempt,
                   settings: Settings, deadline_s: float) -> None:
    smtp = aiosmtplib.SMTP(
        hostname=settings.smtp_host,
        port=settings.smtp_port,
        username=settings.smtp_username or None,
        password=settings.smtp_password or None,
        use_tls=settings.smtp_use_tls,
        # True requires STARTTLS (never send credentials in clear); implicit TLS
        # (SMTP_USE_TLS) excludes it
        start_tls=settings.smtp_starttls and not settings.smtp_use_tls,
        timeout=deadline_s,
    )
    try:
        await smtp.connect()
        await smtp.send_message(mime, sender=parseaddr(str(mime["From"]))[1],
                                recipients=recipients)
        attempt.accepted = True
        # the relay has the mail; a QUIT that fails or stalls changes nothing
        with contextlib.suppress(aiosmtplib.SMTPException, OSError, TimeoutError):
            await smtp.quit(timeout=QUIT_TIMEOUT_S)
    finally:
        smtp.close()  # idempotent; also runs when the deadline cancels us


def build_mime(message: OutboundMessage, *, sender: str) -> EmailMessage:
    """The MIME message for ``message``.

    Structure: ``text/plain``, or ``multipart/alternative`` (text + html) when there is
    html; inline attachments (``content_id``) join the html part in
    ``multipart/related`` so ``cid:`` references resolve; other attachments make the
    whole a ``multipart/mixed``.
    """
    mime = EmailMessage()
    mime["From"] = sender
    mime["To"] = message.to
    if message.cc:
        mime["Cc"] = ", ".join(message.cc)
    mime["Subject"] = message.subject or ""
    mime["Date"] = formatdate(usegmt=True)
    mime["Message-ID"] = _message_id(message.idempotency_key, sender)
    mime.set_content(message.text)
    html_part: EmailMessage | None = None
    if message.html is not None:
        mime.add_alternative(message.html, subtype="html")
        html_part = cast(EmailMessage, mime.get_payload(1))  # the part add_alternative added
    for attachment in message.attachments:
        maintype, subtype = _split_type(attachment.content_type)
        if attachment.content_id is None:
            continue  # files go last, once the body parts are complete
        cid = f"<{attachment.content_id.strip('<>')}>"
        # beside the html it illustrates when there is html, else inline in the mixed part
        adder = html_part.add_related if html_part is not None else mime.add_attachment
        adder(attachment.data, maintype=maintype, subtype=subtype, cid=cid,
              filename=attachment.filename, disposition="inline")
    for attachment in message.attachments:
        if attachment.content_id is None:
            maintype, subtype = _split_type(attachment.content_type)
            mime.add_attachment(attachment.data, maintype=maintype, subtype=subtype,
                                filename=attachment.filename)
    return mime


def _message_id(delivery_id: str | None, sender: str) -> str:
    domain = parseaddr(sender)[1].rpartition("@")[2] or "herald.local"
    if not delivery_id:
        return make_msgid(domain=domain)
    # stable per delivery: a retry that duplicates the mail repeats the same Message-ID
    safe = re.sub(r"[^A-Za-z0-9._-]", "-", delivery_id)
    return f"<herald.{safe}@{domain}>"


def _split_type(content_type: str) -> tuple[str, str]:
    maintype, _, subtype = content_type.partition("/")
    if not maintype or not subtype:
        return "application", "octet-stream"
    return maintype, subtype


def _reply_result(code: int, text: str, *recipients: str) -> SendResult:
    """Classify an SMTP reply: 5xx terminal; 4xx (and anything odd) transient."""
    message = f"{code} {text}"
    for recipient in recipients:
        message = redact(message, recipient)
    if 500 <= code < 600:
        return SendResult.terminal(f"smtp_{code}", message)
    return SendResult.transient(f"smtp_{code}", message)
