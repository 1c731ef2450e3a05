"""The mock provider: scripted per address in Redis, every send recorded."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator

import pytest

from herald.settings import Settings
from providers import Attachment, Channel, FailureKind, MockProvider, OutboundMessage
from tests.support.providers.fakes import forget_herald_state, use_herald_env


@pytest.fixture
def mock(monkeypatch: pytest.MonkeyPatch, redis_url: str) -> Iterator[MockProvider]:
    """A MockProvider on the test Redis under a fresh key prefix."""
    use_herald_env(monkeypatch, REDIS_URL=redis_url,
                   QUEUE_PREFIX=f"test-mock-{uuid.uuid4().hex[:8]}")
    yield MockProvider()
    MockProvider.reset()
    forget_herald_state()


def sms(to: str, delivery_id: str = "d-1") -> OutboundMessage:
    return OutboundMessage(channel=Channel.SMS, to=to, text="Your code is 1234",
                           idempotency_key=delivery_id)


def test_an_unscripted_send_is_accepted_and_recorded(mock: MockProvider) -> None:
    message = OutboundMessage(
        channel=Channel.EMAIL, to="amina@example.com", subject="Welcome", text="Hi",
        html="<p>Hi</p>", idempotency_key="d-42",
        attachments=(Attachment(filename="qr.png", content_type="image/png", data=b"png"),))

    result = mock.send(message)

    assert result.accepted
    assert result.provider_message_id is not None
    assert result.provider_message_id.startswith("mock-")
    [record] = MockProvider.sends()
    assert record["channel"] == "email"
    assert record["to"] == "amina@example.com"
    assert record["subject"] == "Welcome"
    assert record["text"] == "Hi"
    assert record["html"] is True
    assert record["attachments"] == ["qr.png"]
    assert record["idempotency_key"] == "d-42"
    assert record["provider_message_id"] == result.provider_message_id
    assert record["outcome"] == "ok"
    assert record["at"]


def test_transient_n_fails_n_times_then_succeeds(mock: MockProvider) -> None:
    MockProvider.script("+966500000001", "transient:2")

    results = [mock.send(sms("+966500000001")) for _ in range(3)]

    assert [r.failure_kind for r in results] == [FailureKind.TRANSIENT, FailureKind.TRANSIENT,
                                                None]
    assert results[2].accepted
    assert [r["outcome"] for r in MockProvider.sends()] == ["transient", "transient", "ok"]
    assert len(MockProvider.sends(accepted_only=True)) == 1


def test_script_applies_per_address(mock: MockProvider) -> None:
    MockProvider.script("+966500000002", "terminal")

    blocked = mock.send(sms("+966500000002"))
    other = mock.send(sms("+966500000003"))

    assert blocked.failure_kind is FailureKind.TERMINAL
    assert not blocked.retryable
    assert other.accepted


def test_terminal_fails_every_time(mock: MockProvider) -> None:
    MockProvider.script("+966500000004", "terminal")

    results = [mock.send(sms("+966500000004")) for _ in range(2)]

    assert all(r.failure_kind is FailureKind.TERMINAL for r in results)


def test_hang_delays_then_succeeds(mock: MockProvider) -> None:
    MockProvider.script("+966500000005", "hang:0.2")

    started = time.monotonic()
    result = mock.send(sms("+966500000005"))

    assert time.monotonic() - started >= 0.2
    assert result.accepted


def test_the_transient_budget_is_shared_across_threads(mock: MockProvider) -> None:
    # 2 threads × 20 sends to one address scripted transient:5: exactly 5 failures overall
    MockProvider.script("+966500000006", "transient:5")
    results = []
    lock = threading.Lock()

    def sender(thread: int) -> None:
        for n in range(20):
            result = mock.send(sms("+966500000006", delivery_id=f"d-{thread}-{n}"))
            with lock:
                results.append(result)

    threads = [threading.Thread(target=sender, args=(t,)) for t in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=10)

    assert sum(not r.accepted for r in results) == 5
    recorded = MockProvider.sends()
    assert len(recorded) == 40  # no record lost
    assert {r["idempotency_key"] for r in recorded} == {
        f"d-{t}-{n}" for t in range(2) for n in range(20)}


def test_reset_forgets_sends_and_scripts(mock: MockProvider) -> None:
    MockProvider.script("+966500000007", "terminal")
    mock.send(sms("+966500000007"))

    MockProvider.reset()

    assert MockProvider.sends() == []
    assert mock.send(sms("+966500000007")).accepted


def test_an_unknown_behaviour_is_refused(mock: MockProvider) -> None:
    with pytest.raises(ValueError, match="unknown mock behaviour"):
        MockProvider.script("+966500000008", "explode")


def test_another_process_obeys_the_script(mock: MockProvider) -> None:
    # worker subprocesses share the script through Redis (the child inherits the
    # REDIS_URL and QUEUE_PREFIX the fixture set, and installs its App as a herald
    # process does at start)
    MockProvider.script("+966500000009", "transient:1")
    code = ("from herald.queue_app import start_queue_app; start_queue_app(); "
            "from providers import Channel, MockProvider, OutboundMessage; "
            "m = OutboundMessage(channel=Channel.SMS, to='+966500000009', text='x'); "
            "print(MockProvider().send(m).failure_kind)")

    child = subprocess.run([sys.executable, "-c", code], env={**os.environ},
                           capture_output=True, text=True, timeout=30, check=True)

    assert child.stdout.strip() == "transient"
    assert mock.send(sms("+966500000009")).accepted
    assert [r["outcome"] for r in MockProvider.sends()] == ["transient", "ok"]


def test_an_instance_obeys_its_state_and_tags_its_records(mock: MockProvider) -> None:
    settings = instance_settings()
    a, b = MockProvider(settings, instance="mock-a"), MockProvider(settings, instance="mock-b")
    assert (a.name, b.name) == ("mock-a", "mock-b")
    # down: a definite (transient) failure, recorded; the other instance is unaffected
    MockProvider.set_state("mock-a", "down")
    down = a.send(sms("+966500000001", "d-1"))
    assert (down.failure_kind, down.definite) == (FailureKind.TRANSIENT, True)
    assert b.send(sms("+966500000001", "d-1")).accepted
    # ambiguous: accepted and recorded, then answered as a timeout
    MockProvider.set_state("mock-a", "ambiguous")
    lost = a.send(sms("+966500000001", "d-2"))
    assert (lost.failure_kind, lost.retryable) == (FailureKind.AMBIGUOUS, True)
    assert [(r["provider"], r["outcome"]) for r in MockProvider.sends()] == [
        ("mock-a", "transient"), ("mock-b", "ok"), ("mock-a", "ok")]
    assert [r["idempotency_key"] for r in MockProvider.sends(provider="mock-a",
                                                             accepted_only=True)] == ["d-2"]
    # the plain mock's records carry no tag and read as the mock's
    MockProvider().send(sms("+966500000001", "d-3"))
    assert [r["idempotency_key"] for r in MockProvider.sends(provider="mock")] == ["d-3"]


def test_an_instance_accepts_one_idempotency_key_once(mock: MockProvider) -> None:
    a = MockProvider(instance_settings(), instance="mock-a")
    MockProvider.set_state("mock-a", "ambiguous")
    first = a.send(sms("+966500000001", "d-1"))
    again = a.send(sms("+966500000001", "d-1"))  # still ambiguous: answered so, not re-accepted
    MockProvider.set_state("mock-a", "up")
    retry = a.send(sms("+966500000001", "d-1"))

    assert (first.accepted, again.accepted, retry.accepted) == (False, False, True)
    [accepted] = MockProvider.sends(accepted_only=True)
    assert retry.provider_message_id == accepted["provider_message_id"]
    assert [r["outcome"] for r in MockProvider.sends()] == ["ok", "replayed", "replayed"]
    # another key is another message
    assert a.send(sms("+966500000001", "d-2")).provider_message_id != accepted[
        "provider_message_id"]


def test_an_unknown_instance_state_is_refused(mock: MockProvider) -> None:
    with pytest.raises(ValueError, match="unknown mock instance state 'sideways'"):
        MockProvider.set_state("mock-a", "sideways")


def instance_settings() -> Settings:
    """The test's settings with MOCK_INSTANCES=mock-a,mock-b."""
    from herald.settings import get_settings

    return get_settings().model_copy(update={"mock_instances": "mock-a,mock-b"})
