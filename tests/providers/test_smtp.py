"""The SMTP provider against a real SMTP server (aiosmtpd) on a local port."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest

from herald.settings import Settings
from providers import Attachment, Channel, FailureKind, OutboundMessage, SmtpProvider
from tests.support.providers.smtp_relay import (
    Relay,
    authenticate,
    greeting_server,
    start_relay,
)
from tests.support.services import find_free_port

SENDER = "herald <no-reply@herald.test>"


@pytest.fixture
def relay() -> Iterator[tuple[Relay, Settings]]:
    """A plain relay (no TLS, no auth) and settings pointing at it."""
    relay, controller = start_relay()
    yield relay, Settings(smtp_host="127.0.0.1", smtp_port=controller.port,
                          smtp_starttls=False, email_from=SENDER)
    controller.stop()


def welcome(to: str = "amina@example.com", delivery_id: str = "del-1",
            **fields: Any) -> OutboundMessage:
    values: dict[str, Any] = {"subject": "Welcome to herald", "text": "Hello Amina",
                              "html": "<p>Hello <b>Amina</b></p>"}
    values.update(fields)
    return OutboundMessage(channel=Channel.EMAIL, to=to, idempotency_key=delivery_id,
                           **values)


def test_the_relay_receives_one_message_with_headers_and_both_alternatives(
        relay: tuple[Relay, Settings]) -> None:
    server, settings = relay

    result = SmtpProvider(settings).send(welcome())

    assert result.accepted
    [received] = server.received
    assert received.mail_from == "no-reply@herald.test"
    assert received.rcpt_tos == ["amina@example.com"]
    message = received.message
    assert message["From"] == SENDER
    assert message["To"] == "amina@example.com"
    assert message["Subject"] == "Welcome to herald"
    assert message["Message-ID"] == result.provider_message_id
    assert message.get_content_type() == "multipart/alternative"
    assert message.get_body(("plain",)).get_content().strip() == "Hello Amina"
    assert message.get_body(("html",)).get_content().strip() == "<p>Hello <b>Amina</b></p>"


def test_attachments_arrive_as_files_and_inline_images(relay: tuple[Relay, Settings]) -> None:
    server, settings = relay
    qr = Attachment(filename="esim-qr.png", content_type="image/png",
                    data=b"\x89PNG fake image", content_id="esim-qr")
    receipt = Attachment(filename="receipt.pdf", content_type="application/pdf",
                         data=b"%PDF-1.4 fake")

    result = SmtpProvider(settings).send(welcome(
        html='<p>Scan <img src="cid:esim-qr"></p>', attachments=(qr, receipt)))

    assert result.accepted
    [received] = server.received
    message = received.message
    assert message.get_content_type() == "multipart/mixed"
    files = {part.get_filename(): part for part in message.iter_attachments()}
    assert files["receipt.pdf"].get_content() == b"%PDF-1.4 fake"
    inline = next(part for part in message.walk() if part["Content-ID"] == "<esim-qr>")
    assert inline.get_content() == b"\x89PNG fake image"
    assert inline.get_content_disposition() == "inline"
    assert inline.get_filename() == "esim-qr.png"
    # the html and the image it references travel together
    html = message.get_body(("html",))
    assert 'cid:esim-qr' in html.get_content()
    related = next(part for part in message.walk()
                   if part.get_content_type() == "multipart/related")
    assert [p.get_content_type() for p in related.iter_parts()] == ["text/html", "image/png"]


def test_a_text_only_email_is_plain_text(relay: tuple[Relay, Settings]) -> None:
    server, settings = relay

    SmtpProvider(settings).send(welcome(html=None))

    [received] = server.received
    assert received.message.get_content_type() == "text/plain"
    assert received.message.get_content().strip() == "Hello Amina"


def test_each_send_is_exactly_one_message(relay: tuple[Relay, Settings]) -> None:
    server, settings = relay
    provider = SmtpProvider(settings)

    first = provider.send(welcome(to="a@example.com", delivery_id="del-a"))
    second = provider.send(welcome(to="b@example.com", delivery_id="del-b"))

    assert [r.rcpt_tos for r in server.received] == [["a@example.com"], ["b@example.com"]]
    assert first.provider_message_id != second.provider_message_id


def test_a_retried_delivery_repeats_its_message_id(relay: tuple[Relay, Settings]) -> None:
    # SMTP cannot prevent a duplicate after a lost reply; the same Message-ID lets mail
    # clients collapse it
    server, settings = relay
    provider = SmtpProvider(settings)

    provider.send(welcome(delivery_id="del-7"))
    provider.send(welcome(delivery_id="del-7"))

    ids = {r.message["Message-ID"] for r in server.received}
    assert len(ids) == 1


@pytest.mark.parametrize("stage", ["mail", "rcpt", "data"])
@pytest.mark.parametrize("reply", ["421 4.7.0 Try again later, closing connection",
                                   "451 4.3.0 Please try again later"])
def test_a_4xx_reply_is_transient_at_any_stage(relay: tuple[Relay, Settings], stage: str,
                                               reply: str) -> None:
    server, settings = relay
    setattr(server, f"{stage}_reply", reply)

    result = SmtpProvider(settings).send(welcome())

    assert result.failure_kind is FailureKind.TRANSIENT
    assert result.failure_code == f"smtp_{reply[:3]}"
    assert server.received == []


def test_an_unknown_recipient_is_terminal_and_does_not_repeat_the_address(
        relay: tuple[Relay, Settings]) -> None:
    server, settings = relay
    server.rcpt_reply = "550 5.1.1 <amina@example.com>: Recipient address rejected"

    result = SmtpProvider(settings).send(welcome())

    assert result.failure_kind is FailureKind.TERMINAL
    assert result.failure_code == "smtp_550"
    assert "amina@example.com" not in (result.failure_message or "")
    assert "Recipient address rejected" in (result.failure_message or "")


def test_relay_access_denied_is_refused_another_relay_may_send(
        relay: tuple[Relay, Settings]) -> None:
    server, settings = relay
    server.rcpt_reply = "554 5.7.1 <amina@example.com>: Relay access denied"

    result = SmtpProvider(settings).send(welcome())

    assert result.failure_kind is FailureKind.REFUSED
    assert result.failure_code == "smtp_554"
    assert "amina@example.com" not in (result.failure_message or "")


def test_a_refused_sender_is_refused(relay: tuple[Relay, Settings]) -> None:
    server, settings = relay
    server.mail_reply = "553 5.7.1 Sender address rejected: not owned by user"

    result = SmtpProvider(settings).send(welcome())

    assert result.failure_kind is FailureKind.REFUSED
    assert result.failure_code == "smtp_553"


def test_a_relay_refusing_to_serve_at_the_greeting_is_refused() -> None:
    with greeting_server("554 5.7.1 No SMTP service here") as port:
        result = SmtpProvider(Settings(smtp_host="127.0.0.1", smtp_port=port,
                                       smtp_starttls=False)).send(welcome())

    assert result.failure_kind is FailureKind.REFUSED
    assert result.failure_code == "smtp_554"


def test_connection_refused_is_transient() -> None:
    settings = Settings(smtp_host="127.0.0.1", smtp_port=find_free_port(), smtp_starttls=False)

    result = SmtpProvider(settings).send(welcome())

    assert result.failure_kind is FailureKind.TRANSIENT
    assert result.failure_code == "connection"


def test_a_relay_that_never_greets_hits_the_deadline_and_is_transient() -> None:
    # nothing was sent yet: failing over is safe
    with greeting_server(None) as port:
        started = time.monotonic()
        result = SmtpProvider(Settings(smtp_host="127.0.0.1", smtp_port=port,
                                       smtp_starttls=False), deadline_s=0.3).send(welcome())

    assert result.failure_kind is FailureKind.TRANSIENT
    assert time.monotonic() - started < 2.0


def test_a_relay_stalling_after_the_message_is_ambiguous(
        relay: tuple[Relay, Settings]) -> None:
    # the relay holds the whole message when the deadline hits: it may deliver it
    server, settings = relay
    server.data_delay_s = 3.0

    started = time.monotonic()
    result = SmtpProvider(settings, deadline_s=0.3).send(welcome())

    assert result.failure_kind is FailureKind.AMBIGUOUS
    assert result.failure_code == "timeout"
    assert time.monotonic() - started < 2.0


def test_a_connection_dropped_after_the_message_is_ambiguous(
        relay: tuple[Relay, Settings]) -> None:
    server, settings = relay
    server.drop_after_data = True

    result = SmtpProvider(settings).send(welcome())

    assert result.failure_kind is FailureKind.AMBIGUOUS
    assert result.failure_code == "connection_lost"
    # and indeed the relay has it: another provider would have delivered a second copy
    assert len(server.received) == 1


# AUTH without TLS is fine on a loopback test relay
@pytest.mark.filterwarnings("ignore:Requiring AUTH while not requiring TLS")
def test_credentials_are_used_and_a_rejected_login_is_refused() -> None:
    server, controller = start_relay(authenticator=authenticate, auth_required=True,
                                     auth_require_tls=False)
    try:
        base = {"smtp_host": "127.0.0.1", "smtp_port": controller.port,
                "smtp_starttls": False, "smtp_username": "herald"}
        good = SmtpProvider(Settings(**base, smtp_password="s3cret")).send(welcome())
        bad = SmtpProvider(Settings(**base, smtp_password="wrong")).send(welcome())
    finally:
        controller.stop()

    assert good.accepted
    assert len(server.received) == 1
    assert bad.failure_kind is FailureKind.REFUSED
    assert bad.failure_code == "smtp_535"


def test_a_required_starttls_the_relay_lacks_is_refused(
        relay: tuple[Relay, Settings]) -> None:
    server, settings = relay
    strict = settings.model_copy(update={"smtp_starttls": True})

    result = SmtpProvider(strict).send(welcome())

    assert result.failure_kind is FailureKind.REFUSED
    assert result.failure_code == "smtp_config"
    assert server.received == []
