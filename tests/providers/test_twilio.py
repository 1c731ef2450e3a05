"""The Twilio provider (the real SDK) against a local server speaking Twilio's API."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from herald.settings import Settings
from providers import Channel, FailureKind, OutboundMessage, TwilioProvider
from tests.support.providers.fakes import FakeTwilio
from tests.support.services import find_free_port

ACCOUNT_SID = "AC" + "0123456789abcdef" * 2
AUTH_TOKEN = "twilio-test-token"
FROM_NUMBER = "+15005550006"
BAD_NUMBER = "+15005550001"


@pytest.fixture
def twilio() -> Iterator[FakeTwilio]:
    with FakeTwilio(account_sid=ACCOUNT_SID, auth_token=AUTH_TOKEN,
                    invalid_numbers=frozenset({BAD_NUMBER})) as fake:
        yield fake


def provider_for(fake: FakeTwilio | None, *, timeout_s: float = 10.0,
                 **overrides: str) -> TwilioProvider:
    fields = {"twilio_account_sid": ACCOUNT_SID, "twilio_auth_token": AUTH_TOKEN,
              "twilio_from_number": FROM_NUMBER,
              "twilio_base_url": fake.url if fake else f"http://127.0.0.1:{find_free_port()}"}
    return TwilioProvider(Settings(**{**fields, **overrides}), timeout_s=timeout_s)


def sms(to: str = "+966500000001") -> OutboundMessage:
    return OutboundMessage(channel=Channel.SMS, to=to, text="Your eSIM is ready",
                           idempotency_key="del-1")


def test_twilio_receives_the_sms_and_the_sid_is_the_message_id(twilio: FakeTwilio) -> None:
    result = provider_for(twilio).send(sms())

    assert result.accepted
    [message] = twilio.messages
    assert message["to"] == "+966500000001"
    assert message["from"] == FROM_NUMBER
    assert message["body"] == "Your eSIM is ready"
    assert result.provider_message_id == message["sid"]
    assert message["sid"].startswith("SM")
    [request] = twilio.requests
    assert request.path == f"/2010-04-01/Accounts/{ACCOUNT_SID}/Messages.json"
    assert request.form() == {"To": "+966500000001", "From": FROM_NUMBER,
                              "Body": "Your eSIM is ready"}


def test_an_invalid_number_is_terminal_and_not_echoed(twilio: FakeTwilio) -> None:
    result = provider_for(twilio).send(sms(BAD_NUMBER))

    assert result.failure_kind is FailureKind.TERMINAL
    assert result.failure_code == "twilio_21211"
    assert BAD_NUMBER not in (result.failure_message or "")
    assert BAD_NUMBER.lstrip("+") not in (result.failure_message or "")
    assert twilio.messages == []


def test_wrong_credentials_are_refused(twilio: FakeTwilio) -> None:
    result = provider_for(twilio, twilio_auth_token="wrong").send(sms())

    assert result.failure_kind is FailureKind.REFUSED
    assert result.failure_code == "twilio_20003"
    assert twilio.messages == []


@pytest.mark.parametrize("status", [503, 429])
def test_an_outage_or_rate_limit_is_transient_and_the_retry_sends(
        twilio: FakeTwilio, status: int) -> None:
    provider = provider_for(twilio)
    twilio.fail_next(status)

    first = provider.send(sms())
    retry = provider.send(sms())

    assert first.failure_kind is FailureKind.TRANSIENT
    assert first.failure_code == f"twilio_20{status}"
    assert retry.accepted
    assert len(twilio.messages) == 1


@pytest.mark.parametrize(("code", "message"), [
    (21408, "Permission to send an SMS has not been enabled for the region indicated by "
            "the 'To' number"),
    (21612, "The 'To' phone number is not currently reachable using the 'From' phone number"),
    (21606, "The 'From' phone number provided is not a valid message-capable Twilio number"),
])
def test_a_destination_or_sender_twilio_does_not_serve_is_refused(
        twilio: FakeTwilio, code: int, message: str) -> None:
    twilio.fail_next(400, body={"code": code, "message": message, "status": 400})

    result = provider_for(twilio).send(sms())

    assert result.failure_kind is FailureKind.REFUSED
    assert result.failure_code == f"twilio_{code}"


def test_a_number_that_is_not_a_mobile_is_terminal(twilio: FakeTwilio) -> None:
    twilio.fail_next(400, body={"code": 21614, "status": 400,
                                "message": "'To' number is not a valid mobile number"})

    result = provider_for(twilio).send(sms())

    assert result.failure_kind is FailureKind.TERMINAL
    assert result.failure_code == "twilio_21614"


def test_no_answer_after_the_request_is_ambiguous(twilio: FakeTwilio) -> None:
    twilio.hang_next()

    result = provider_for(twilio, timeout_s=0.3).send(sms())

    assert result.failure_kind is FailureKind.AMBIGUOUS
    assert result.failure_code == "timeout"
    assert len(twilio.requests) == 1  # Twilio had the whole request


def test_a_connection_closed_after_the_request_is_ambiguous(twilio: FakeTwilio) -> None:
    twilio.drop_next()

    result = provider_for(twilio).send(sms())

    assert result.failure_kind is FailureKind.AMBIGUOUS
    assert result.failure_code == "connection_lost"
    assert len(twilio.requests) == 1


def test_an_unreachable_api_is_transient() -> None:
    result = provider_for(None).send(sms())

    assert result.failure_kind is FailureKind.TRANSIENT
    assert result.failure_code == "connection"


def test_missing_credentials_are_refused(twilio: FakeTwilio) -> None:
    result = provider_for(twilio, twilio_from_number="").send(sms())

    assert result.failure_kind is FailureKind.REFUSED
    assert result.failure_code == "not_configured"
    assert twilio.requests == []
