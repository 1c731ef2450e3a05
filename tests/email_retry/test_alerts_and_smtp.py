"""Operator alerts (ADMIN_ALERT_EMAIL) and the queue over a real SMTP relay (aiosmtpd) that
answers 4xx / 5xx on demand."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from actors.email_retry import send_admin_alert, send_email
from herald import settings
from herald.queue import queue
from providers.mock import MockProvider
from providers.select import reset_providers
from tests.support.providers.smtp_relay import Relay, start_relay

pytestmark = pytest.mark.usefixtures("email_retry")


def use_setting(monkeypatch: pytest.MonkeyPatch, name: str, value: str) -> None:
    monkeypatch.setenv(name, value)
    settings.reset_settings()
    reset_providers()


def nothing_queued() -> bool:
    return all(count == 0 for count in queue("email-retry").counts().values())


def test_an_alert_without_admin_alert_email_sends_and_queues_nothing() -> None:
    # Given ADMIN_ALERT_EMAIL unset (the conftest leaves it empty)
    # When an operator alert is raised
    outcome = send_admin_alert("Queue stalled", "notification-email is stalled",
                               idempotency_key="alert:stalled:9")

    # Then it is a no-op: no send, no queue job
    assert outcome is None
    assert MockProvider.sends() == []
    assert nothing_queued()


def test_an_alert_goes_to_admin_alert_email(monkeypatch: pytest.MonkeyPatch) -> None:
    # Given ADMIN_ALERT_EMAIL set
    use_setting(monkeypatch, "ADMIN_ALERT_EMAIL", "oncall@example.com")

    # When an operator alert is raised
    outcome = send_admin_alert("Queue stalled", "notification-email is stalled",
                               idempotency_key="alert:stalled:10")

    # Then that address gets it, from EMAIL_FROM, with the alert's key
    assert outcome is not None and outcome.sent
    [sent] = MockProvider.sends(accepted_only=True)
    assert (sent["to"], sent["subject"], sent["idempotency_key"]) == (
        "oncall@example.com", "Queue stalled", "alert:stalled:10")
    assert sent["from"] == settings.get_settings().email_from


def test_an_admin_alert_email_that_is_no_address_stops_at_start(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ADMIN_ALERT_EMAIL", "oncall at example dot com")
    settings.reset_settings()
    with pytest.raises(settings.SettingsError, match="ADMIN_ALERT_EMAIL"):
        settings.load_settings()


@pytest.fixture
def relay(monkeypatch: pytest.MonkeyPatch) -> Iterator[Relay]:
    """A real SMTP relay (no TLS, no auth) that EMAIL_PROVIDER=smtp sends through."""
    server, controller = start_relay()
    for name, value in {"EMAIL_PROVIDER": "smtp", "SMTP_HOST": "127.0.0.1",
                        "SMTP_PORT": str(controller.port), "SMTP_STARTTLS": "false"}.items():
        monkeypatch.setenv(name, value)
    settings.reset_settings()
    reset_providers()
    yield server
    reset_providers()
    controller.stop()


ENVELOPE = {"from": "herald ops <alerts@herald.test>", "to": "ops@example.com",
            "cc": ["oncall@example.com"], "subject": "Queue stalled",
            "html": "<p>stalled</p>", "text": "stalled"}


def test_the_relay_gets_the_envelope_sender_and_cc(relay: Relay) -> None:
    outcome = send_email(ENVELOPE, "alert:smtp:1")

    assert outcome.sent and outcome.tries == 1
    [received] = relay.received
    assert received.mail_from == "alerts@herald.test"
    assert received.rcpt_tos == ["ops@example.com", "oncall@example.com"]
    assert received.message["From"] == "herald ops <alerts@herald.test>"
    assert received.message["Cc"] == "oncall@example.com"
    assert nothing_queued()


def test_a_relay_answering_4xx_is_tried_three_times_then_queued(relay: Relay) -> None:
    # Given a relay that keeps answering "try again later"
    relay.rcpt_reply = "451 4.3.0 try again later"

    # When the email is sent
    outcome = send_email(ENVELOPE, "alert:smtp:2")

    # Then the call tried three times, and the queue holds it with the relay's code
    assert not outcome.sent and outcome.tries == 3
    job = queue("email-retry").get("alert:smtp:2:1")
    assert job is not None and job.state == "delayed"
    assert job.payload["last_error"] == "smtp_451"
    assert relay.received == []


def test_a_relay_refusing_with_5xx_is_tried_once_then_queued(relay: Relay) -> None:
    relay.rcpt_reply = "550 5.1.1 mailbox unavailable"

    outcome = send_email(ENVELOPE, "alert:smtp:3")

    assert not outcome.sent and outcome.tries == 1
    job = queue("email-retry").get("alert:smtp:3:1")
    assert job is not None and job.payload["last_error"] == "smtp_550"
