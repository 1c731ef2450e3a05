"""The SMTP email provider (aiosmtplib).

One send has a 20-second overall deadline, below the email queue's 30-second lock and
the delivery's 60-second claim, so no other attempt can take a delivery over while its
send is still in flight; the transport is always closed (docs/pipeline.md#providers).
SMTP email ends at ``sent``: a relay's acceptance is all SMTP tells us. It is not
exactly-once — a relay that accepted the mail before a crash or a lost reply gets it
again on retry, and SMTP offers no idempotency operation. To soften that, the
Message-ID is derived from the delivery id, so both copies carry the same Message-ID and
mail clients that collapse duplicates show one.

Failures are classified by ``providers.classification.SMTP``: a 4xx reply is transient;
a 5xx is refused when it is about herald (the greeting, AUTH, MAIL FROM, a policy
refusal) and terminal when it is about the recipient (RCPT TO 550/551/553); a connection
refused, lost or timed out before the DATA command is transient, and from the DATA
command on it is ambiguous (the relay may have the whole message); the relay lacking an
extension the settings require (STARTTLS, AUTH) is refused ``smtp_config``.

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
from typing import Any, Literal, cast

import aiosmtplib
from aiosmtplib.typing import Default

from herald.settings import Settings, get_settings
from providers.base import Channel, OutboundMessage, SendResult, redact
from providers.classification import SMTP, smtp_exception, smtp_reply, smtp_stage

log = logging.getLogger(__name__)

#: Overall deadline of one send, connect to quit (under the 30 s lock and 60 s claim).
SEND_DEADLINE_S = 20.0
#: Seconds the polite QUIT may take after the relay accepted the mail.
QUIT_TIMEOUT_S = 2.0


@dataclass
class _Attempt:
    """What one send got to; read after a failure to tell sent, perhaps sent, not sent."""

    #: The DATA command was issued: from here on the relay may have the whole message.
    data_started: bool = False
    #: The relay answered the message with 250.
    accepted: bool = False


class _StagedSMTP(aiosmtplib.SMTP):
    """aiosmtplib's client, noting on ``attempt`` when the DATA command is issued."""

    def __init__(self, attempt: _Attempt, **options: Any) -> None:
        super().__init__(**options)
        self._attempt = attempt

    async def data(self, message: str | bytes, /, *,
                   timeout: float | Literal[Default.token] | None = Default.token,
                   ) -> aiosmtplib.SMTPResponse:
        self._attempt.data_started = True
        return await super().data(message, timeout=timeout)


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
            return SMTP.outcome("unsupported_channel", f"smtp cannot send {message.channel}")
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
    except aiosmtplib.SMTPRecipientsRefused as error:
        refused = error.recipients[0]
        return smtp_reply("rcpt", refused.code, refused.message,
                          _redacted(f"{refused.code} {refused.message}", recipients))
    except aiosmtplib.SMTPResponseException as error:
        return smtp_reply(smtp_stage(error), error.code, error.message,
                          _redacted(f"{error.code} {error.message}", recipients))
    except (OSError, TimeoutError, aiosmtplib.SMTPException) as error:
        if attempt.accepted:  # the deadline hit during QUIT: the mail is with the relay
            return SendResult.ok(message_id)
        return smtp_exception(error, _describe(error, deadline_s),
                              data_started=attempt.data_started)
    return SendResult.ok(message_id)


def _describe(error: BaseException, deadline_s: float) -> str:
    """A transport failure in words that never hold an address: the exception's name, or
    aiosmtplib's fixed sentence about what the relay lacks (STARTTLS, AUTH, SMTPUTF8)."""
    if isinstance(error, TimeoutError):
        return f"no answer within {deadline_s} s"
    if isinstance(error, OSError):
        return type(error).__name__
    return str(error)


async def _deliver(mime: EmailMessage, recipients: list[str], attempt: _Attempt,
                   settings: Settings, deadline_s: float) -> None:
    smtp = _StagedSMTP(
        attempt,
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


def _redacted(message: str, recipients: Sequence[str]) -> str:
    for recipient in recipients:
        message = redact(message, recipient)
    return message
