"""The Taqnyat provider against a local server speaking Taqnyat's REST API."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import closing

import pytest

from herald.settings import Settings
from providers import Channel, FailureKind, OutboundMessage, TaqnyatProvider
from tests.support.providers.fakes import FakeTaqnyat
from tests.support.services import find_free_port

API_KEY = "taqnyat-test-key"
SENDER = "Herald"
BLOCKED = "966511111111"


@pytest.fixture
def taqnyat() -> Iterator[FakeTaqnyat]:
    with FakeTaqnyat(api_key=API_KEY, sender=SENDER,
                     rejected_numbers=frozenset({BLOCKED})) as fake:
        yield fake


def make_provider(base_url: str, *, timeout_s: float = 10.0,
                  **overrides: str) -> TaqnyatProvider:
    fields = {"taqnyat_api_key": API_KEY, "taqnyat_sender": SENDER,
              "taqnyat_base_url": base_url}
    return TaqnyatProvider(Settings(**{**fields, **overrides}), timeout_s=timeout_s)


@pytest.fixture
def provider(taqnyat: FakeTaqnyat) -> Iterator[TaqnyatProvider]:
    with closing(make_provider(taqnyat.url)) as provider:
        yield provider


def sms(to: str = "+966500000001", text: str = "رمز التحقق 1234") -> OutboundMessage:
    return OutboundMessage(channel=Channel.SMS, to=to, text=text, idempotency_key="del-1")


def test_taqnyat_receives_the_sms(taqnyat: FakeTaqnyat, provider: TaqnyatProvider) -> None:
    result = provider.send(sms())

    assert result.accepted
    [request] = taqnyat.requests
    assert request.headers["authorization"] == f"Bearer {API_KEY}"
    assert request.json() == {"recipients": ["966500000001"], "body": "رمز التحقق 1234",
                              "sender": SENDER}
    [message] = taqnyat.messages
    assert result.provider_message_id == str(message["messageId"])


def test_an_invalid_recipient_is_terminal(taqnyat: FakeTaqnyat,
                                          provider: TaqnyatProvider) -> None:
    result = provider.send(sms(to="not-a-number"))

    assert result.failure_kind is FailureKind.TERMINAL
    assert result.failure_code == "http_400"
    assert taqnyat.messages == []


def test_a_destination_taqnyat_rejects_is_refused(taqnyat: FakeTaqnyat,
                                                  provider: TaqnyatProvider) -> None:
    # a well-formed number Taqnyat will not send to: another provider may
    result = provider.send(sms(to="+" + BLOCKED))

    assert result.failure_kind is FailureKind.REFUSED
    assert result.failure_code == "recipient_rejected"
    assert taqnyat.messages == []


def test_a_wrong_api_key_is_refused(taqnyat: FakeTaqnyat) -> None:
    with closing(make_provider(taqnyat.url, taqnyat_api_key="wrong")) as provider:
        result = provider.send(sms())

    assert result.failure_kind is FailureKind.REFUSED
    assert result.failure_code == "http_401"
    assert taqnyat.messages == []


@pytest.mark.parametrize("status", [503, 429])
def test_an_outage_or_rate_limit_is_transient_and_the_retry_sends(
        taqnyat: FakeTaqnyat, provider: TaqnyatProvider, status: int) -> None:
    taqnyat.fail_next(status)

    first = provider.send(sms())
    retry = provider.send(sms())

    assert first.failure_kind is FailureKind.TRANSIENT
    assert first.failure_code == f"http_{status}"
    assert retry.accepted
    assert len(taqnyat.messages) == 1


def test_a_sender_not_registered_with_taqnyat_is_refused(taqnyat: FakeTaqnyat) -> None:
    with closing(make_provider(taqnyat.url, taqnyat_sender="Unregistered")) as provider:
        result = provider.send(sms())

    assert result.failure_kind is FailureKind.REFUSED
    assert result.failure_code == "http_400"
    assert result.failure_message == "Sender name is not active"
    assert taqnyat.messages == []


def test_no_answer_after_the_request_is_ambiguous(taqnyat: FakeTaqnyat) -> None:
    taqnyat.hang_next()

    with closing(make_provider(taqnyat.url, timeout_s=0.3)) as provider:
        result = provider.send(sms())

    assert result.failure_kind is FailureKind.AMBIGUOUS
    assert result.failure_code == "timeout"
    assert len(taqnyat.requests) == 1  # Taqnyat had the whole request


def test_a_connection_closed_after_the_request_is_ambiguous(
        taqnyat: FakeTaqnyat, provider: TaqnyatProvider) -> None:
    taqnyat.drop_next()

    result = provider.send(sms())

    assert result.failure_kind is FailureKind.AMBIGUOUS
    assert result.failure_code == "connection_lost"
    assert len(taqnyat.requests) == 1


def test_an_unreachable_api_is_transient() -> None:
    with closing(make_provider(f"http://127.0.0.1:{find_free_port()}")) as provider:
        result = provider.send(sms())

    assert result.failure_kind is FailureKind.TRANSIENT
    assert result.failure_code == "connection"


def test_a_missing_sender_is_refused(taqnyat: FakeTaqnyat) -> None:
    with closing(make_provider(taqnyat.url, taqnyat_sender="")) as provider:
        result = provider.send(sms())

    assert result.failure_kind is FailureKind.REFUSED
    assert result.failure_code == "not_configured"
    assert taqnyat.requests == []
