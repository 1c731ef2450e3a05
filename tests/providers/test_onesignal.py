"""The OneSignal provider against a local server speaking the Create Message API."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import closing

import pytest

from herald.settings import Settings
from providers import Attachment, Channel, FailureKind, OneSignalProvider, OutboundMessage
from tests.support.providers.fakes import FakeOneSignal
from tests.support.services import find_free_port

APP_ID = "5eb5a37e-b458-11e3-ac11-000c2940e62c"
API_KEY = "onesignal-test-key"


@pytest.fixture
def onesignal() -> Iterator[FakeOneSignal]:
    with FakeOneSignal(app_id=APP_ID, api_key=API_KEY,
                       unknown_external_ids=frozenset({"acct-without-device"})) as fake:
        yield fake


def make_provider(base_url: str, *, timeout_s: float = 10.0,
                  **overrides: str) -> OneSignalProvider:
    fields = {"onesignal_app_id": APP_ID, "onesignal_api_key": API_KEY,
              "onesignal_base_url": base_url}
    return OneSignalProvider(Settings(**{**fields, **overrides}), timeout_s=timeout_s)


@pytest.fixture
def provider(onesignal: FakeOneSignal) -> Iterator[OneSignalProvider]:
    with closing(make_provider(onesignal.url)) as provider:
        yield provider


def test_an_email_reaches_onesignal(onesignal: FakeOneSignal,
                                    provider: OneSignalProvider) -> None:
    message = OutboundMessage(channel=Channel.EMAIL, to="amina@example.com",
                              subject="Your receipt", text="Thanks", html="<p>Thanks</p>",
                              idempotency_key="del-email-1")

    result = provider.send(message)

    assert result.accepted
    [request] = onesignal.requests
    assert request.headers["authorization"] == f"Key {API_KEY}"
    assert request.json() == {
        "app_id": APP_ID, "target_channel": "email", "idempotency_key": "del-email-1",
        "email_to": ["amina@example.com"], "email_subject": "Your receipt",
        "email_body": "<p>Thanks</p>"}
    [notification] = onesignal.notifications
    assert result.provider_message_id == notification["id"]


def test_a_text_only_email_is_sent_as_escaped_html(onesignal: FakeOneSignal,
                                                   provider: OneSignalProvider) -> None:
    message = OutboundMessage(channel=Channel.EMAIL, to="amina@example.com", subject="Hi",
                              text="a < b\nsee you", idempotency_key="del-email-2")

    assert provider.send(message).accepted
    [notification] = onesignal.notifications
    assert notification["email_body"] == "a &lt; b<br>\nsee you"


def test_an_sms_reaches_onesignal(onesignal: FakeOneSignal,
                                  provider: OneSignalProvider) -> None:
    message = OutboundMessage(channel=Channel.SMS, to="+966500000001", text="Code 1234",
                              idempotency_key="del-sms-1")

    assert provider.send(message).accepted
    [notification] = onesignal.notifications
    assert notification["target_channel"] == "sms"
    assert notification["include_phone_numbers"] == ["+966500000001"]
    assert notification["contents"] == {"en": "Code 1234"}
    assert notification["idempotency_key"] == "del-sms-1"


def test_a_push_reaches_the_accounts_devices(onesignal: FakeOneSignal,
                                             provider: OneSignalProvider) -> None:
    message = OutboundMessage(channel=Channel.PUSH, to="acct-42", subject="eSIM ready",
                              text="Tap to install", idempotency_key="del-push-1")

    assert provider.send(message).accepted
    [notification] = onesignal.notifications
    assert notification["target_channel"] == "push"
    assert notification["include_aliases"] == {"external_id": ["acct-42"]}
    assert notification["contents"] == {"en": "Tap to install"}
    assert notification["headings"] == {"en": "eSIM ready"}


def test_a_retry_after_an_outage_sends_once(onesignal: FakeOneSignal,
                                            provider: OneSignalProvider) -> None:
    message = OutboundMessage(channel=Channel.SMS, to="+966500000001", text="Code 1234",
                              idempotency_key="del-sms-2")
    onesignal.fail_next(503)

    outage = provider.send(message)
    first = provider.send(message)
    repeat = provider.send(message)  # e.g. the worker died before recording `first`

    assert outage.failure_kind is FailureKind.TRANSIENT
    assert first.accepted and repeat.accepted
    # every request OneSignal received carried the delivery's key: what lets the real
    # service answer a repeat with the first notification instead of sending again
    assert [request.json().get("idempotency_key") for request in onesignal.requests] == [
        "del-sms-2"] * 3
    assert repeat.provider_message_id == first.provider_message_id
    assert len(onesignal.notifications) == 1


def test_a_rejected_message_is_terminal(onesignal: FakeOneSignal,
                                        provider: OneSignalProvider) -> None:
    result = provider.send(OutboundMessage(channel=Channel.SMS, to="+966500000001", text=""))

    assert result.failure_kind is FailureKind.TERMINAL
    assert result.failure_code == "http_400"
    assert result.failure_message == "Message Notifications must have English language content"
    assert onesignal.notifications == []


def test_an_invalid_phone_number_is_terminal(onesignal: FakeOneSignal,
                                             provider: OneSignalProvider) -> None:
    result = provider.send(OutboundMessage(channel=Channel.SMS, to="+12", text="Hi"))

    assert result.failure_kind is FailureKind.TERMINAL
    assert result.failure_code == "http_400"
    assert onesignal.notifications == []


def test_a_wrong_api_key_is_refused(onesignal: FakeOneSignal) -> None:
    with closing(make_provider(onesignal.url, onesignal_api_key="wrong")) as provider:
        result = provider.send(OutboundMessage(channel=Channel.PUSH, to="acct-42", text="Hi"))

    assert result.failure_kind is FailureKind.REFUSED
    assert result.failure_code == "http_403"


def test_an_app_id_that_is_not_the_accounts_is_refused(onesignal: FakeOneSignal) -> None:
    with closing(make_provider(onesignal.url, onesignal_app_id="another-app")) as provider:
        result = provider.send(OutboundMessage(channel=Channel.PUSH, to="acct-42", text="Hi"))

    assert result.failure_kind is FailureKind.REFUSED
    assert result.failure_code == "http_400"


def test_a_channel_the_app_has_not_set_up_is_refused() -> None:
    with FakeOneSignal(app_id=APP_ID, api_key=API_KEY,
                       unconfigured_channels=frozenset({"sms"})) as onesignal, \
            closing(make_provider(onesignal.url)) as provider:
        result = provider.send(OutboundMessage(channel=Channel.SMS, to="+966500000001",
                                               text="Code 1234"))

    assert result.failure_kind is FailureKind.REFUSED
    assert result.failure_code == "http_400"
    assert onesignal.notifications == []


def test_a_push_to_no_subscribed_device_is_refused_no_recipients(
        onesignal: FakeOneSignal, provider: OneSignalProvider) -> None:
    result = provider.send(OutboundMessage(channel=Channel.PUSH, to="acct-without-device",
                                           text="Hi"))

    assert result.failure_kind is FailureKind.REFUSED
    assert result.failure_code == "no_recipients"
    assert "acct-without-device" not in (result.failure_message or "")
    assert onesignal.notifications == []


def test_an_email_with_attachments_is_refused_before_sending(
        onesignal: FakeOneSignal, provider: OneSignalProvider) -> None:
    qr = Attachment(filename="qr.png", content_type="image/png", data=b"png")

    result = provider.send(OutboundMessage(channel=Channel.EMAIL, to="amina@example.com",
                                           subject="eSIM", text="Scan", attachments=(qr,)))

    assert result.failure_kind is FailureKind.REFUSED
    assert result.failure_code == "attachments_unsupported"
    assert onesignal.requests == []


def test_an_email_with_a_cc_is_refused_before_sending(
        onesignal: FakeOneSignal, provider: OneSignalProvider) -> None:
    result = provider.send(OutboundMessage(channel=Channel.EMAIL, to="amina@example.com",
                                           cc=("ops@example.com",), subject="Hi", text="Hi"))

    assert result.failure_kind is FailureKind.REFUSED
    assert result.failure_code == "cc_unsupported"
    assert onesignal.requests == []


def test_an_email_from_another_sender_names_it(onesignal: FakeOneSignal,
                                               provider: OneSignalProvider) -> None:
    message = OutboundMessage(channel=Channel.EMAIL, to="amina@example.com", subject="Hi",
                              text="Hi", sender="herald ops <alerts@herald.test>")

    assert provider.send(message).accepted
    [request] = onesignal.requests
    assert request.json()["email_from_address"] == "alerts@herald.test"
    assert request.json()["email_from_name"] == "herald ops"


def test_a_success_answer_without_an_id_is_ambiguous_and_the_retry_sends_once(
        onesignal: FakeOneSignal, provider: OneSignalProvider) -> None:
    message = OutboundMessage(channel=Channel.PUSH, to="acct-42", text="Hi",
                              idempotency_key="del-push-3")
    onesignal.fail_next(200, body={})

    first = provider.send(message)
    retry = provider.send(message)

    assert first.failure_kind is FailureKind.AMBIGUOUS
    assert first.failure_code == "bad_response"
    assert retry.accepted
    assert len(onesignal.notifications) == 1


@pytest.mark.parametrize("status", [503, 429])
def test_an_outage_or_rate_limit_is_transient(onesignal: FakeOneSignal,
                                              provider: OneSignalProvider,
                                              status: int) -> None:
    onesignal.fail_next(status)

    result = provider.send(OutboundMessage(channel=Channel.PUSH, to="acct-42", text="Hi"))

    assert result.failure_kind is FailureKind.TRANSIENT
    assert result.failure_code == f"http_{status}"


def test_no_answer_after_the_request_is_ambiguous(onesignal: FakeOneSignal) -> None:
    onesignal.hang_next()

    with closing(make_provider(onesignal.url, timeout_s=0.3)) as provider:
        result = provider.send(OutboundMessage(channel=Channel.PUSH, to="acct-42", text="Hi",
                                               idempotency_key="del-push-4"))

    assert result.failure_kind is FailureKind.AMBIGUOUS
    assert result.failure_code == "timeout"
    assert len(onesignal.requests) == 1  # OneSignal had the whole request


def test_a_connection_closed_after_the_request_is_ambiguous(
        onesignal: FakeOneSignal, provider: OneSignalProvider) -> None:
    onesignal.drop_next()

    result = provider.send(OutboundMessage(channel=Channel.PUSH, to="acct-42", text="Hi"))

    assert result.failure_kind is FailureKind.AMBIGUOUS
    assert result.failure_code == "connection_lost"
    assert len(onesignal.requests) == 1


def test_an_unreachable_api_is_transient() -> None:
    with closing(make_provider(f"http://127.0.0.1:{find_free_port()}")) as provider:
        result = provider.send(OutboundMessage(channel=Channel.PUSH, to="acct-42", text="Hi"))

    assert result.failure_kind is FailureKind.TRANSIENT
    assert result.failure_code == "connection"
