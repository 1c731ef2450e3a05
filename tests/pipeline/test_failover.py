"""Provider failover through real worker processes and two mock instances (``mock-a``
first, ``mock-b`` second in the email chain): a definite failure moves to the next
provider and is accepted once; an ambiguous one never does, and its retry is one message;
the shared circuit opens, skips, probes and closes with two worker processes; a SIGKILL
between the first provider's failure and the second's send still ends with one
acceptance."""

from __future__ import annotations

import signal
import time
from collections.abc import Iterator
from typing import Any

import pytest
from fastapi.testclient import TestClient
from prometheus_client import REGISTRY
from sqlalchemy import text

from herald import db
from herald.queue import running_worker
from herald.web import create_app
from providers.circuit import KNOWN_STATE_TTL_S
from providers.mock import MockProvider, signed_callback
from tests.support.pipeline.steps import account, delivery, event
from tests.support.pipeline.workers import email_worker, email_workers
from tests.support.providers.fakes import use_herald_env
from tests.support.waiting import wait_for

#: The circuit's cooldown in these tests (seconds).
COOLDOWN_S = 3


@pytest.fixture
def client(pipeline: None, monkeypatch: pytest.MonkeyPatch) -> Iterator[TestClient]:
    """The pipeline with MOCK_INSTANCES=mock-a,mock-b and EMAIL_PROVIDERS=mock-a,mock-b;
    the worker processes inherit the environment."""
    use_herald_env(monkeypatch, mock_instances="mock-a,mock-b",
                   email_providers="mock-a,mock-b",
                   provider_circuit_cooldown_s=str(COOLDOWN_S))
    MockProvider.reset()
    yield TestClient(create_app())
    MockProvider.reset()


def email(client: TestClient, account_id: str, occurrence: str) -> str:
    """Post an account.welcome event on email only; its delivery's id."""
    created = event(client, account_id, occurrence=occurrence, channels=["email"])
    return str(created["deliveries"][0]["id"])


def sent(client: TestClient, delivery_id: str) -> dict[str, Any] | None:
    body = delivery(client, delivery_id)
    return body if body["outcome"] == "sent" else None


def history(body: dict[str, Any]) -> list[tuple[str, str]]:
    """A delivery's attempts log as (provider, result) pairs."""
    return [(entry["provider"], entry["result"]) for entry in body["attempts_log"]]


def accepted(delivery_id: str) -> list[dict[str, Any]]:
    """Every acceptance any mock recorded for the delivery."""
    return [record for record in MockProvider.sends(accepted_only=True)
            if record["idempotency_key"] == delivery_id]


def gauge(provider: str) -> float | None:
    return REGISTRY.get_sample_value("provider_circuit_state", {"provider": provider})


def test_a_definite_failure_moves_to_the_next_provider_and_is_accepted_once(
        client: TestClient) -> None:
    # Given mock-a is down
    MockProvider.set_state("mock-a", "down")
    delivery_id = email(client, account(client), "signup")
    # When a worker process sends the delivery
    with email_workers(1):
        body = wait_for(lambda: sent(client, delivery_id), timeout=30, what="it to be sent")
    # Then mock-b accepted it, once, after mock-a's definite failure, in the same attempt
    assert isinstance(body, dict)
    assert (body["provider"], body["attempts"]) == ("mock-b", 2)
    assert history(body) == [("mock-a", "definite_failure"), ("mock-b", "accepted")]
    assert body["attempts_log"][0]["error"] == "mock_down: mock instance down"
    [only] = accepted(delivery_id)
    assert (only["provider"], only["provider_message_id"]) == (
        "mock-b", body["provider_message_id"])
    assert [r["outcome"] for r in MockProvider.sends(provider="mock-a")] == ["transient"]
    # and the accepting provider's receipt (its own callback route) marks it delivered
    payload, headers = signed_callback(only)
    response = client.post("/v1/callbacks/mock-b", content=payload, headers=headers)
    assert response.status_code == 202, response.text
    with running_worker(["notification-orchestration"]):
        wait_for(lambda: delivery(client, delivery_id)["outcome"] == "delivered",
                 timeout=30, what="the receipt to apply")


def test_an_ambiguous_answer_never_moves_on_and_its_retry_is_one_message(
        client: TestClient) -> None:
    # Given mock-a accepts every send and then answers with a timeout
    MockProvider.set_state("mock-a", "ambiguous")
    delivery_id = email(client, account(client), "signup")
    with email_workers(1):
        # When the first attempt gets the ambiguous answer (nothing went to mock-b)
        wait_for(lambda: history(delivery(client, delivery_id)), timeout=30,
                 what="the first attempt")
        assert history(delivery(client, delivery_id)) == [("mock-a", "ambiguous")]
        # and mock-a then fails definitely: the delivery is pinned to it, so the retry
        # does not move to mock-b (which could deliver it a second time)
        MockProvider.set_state("mock-a", "down")
        wait_for(lambda: len(history(delivery(client, delivery_id))) == 2, timeout=30,
                 what="the second attempt")
        assert history(delivery(client, delivery_id)) == [("mock-a", "ambiguous"),
                                                          ("mock-a", "definite_failure")]
        assert MockProvider.sends(provider="mock-b") == []
        # When mock-a answers again, the next retry is accepted
        MockProvider.set_state("mock-a", "up")
        body = wait_for(lambda: sent(client, delivery_id), timeout=30, what="the retry")
    assert isinstance(body, dict)
    log = history(body)
    assert log[0] == ("mock-a", "ambiguous") and log[-1] == ("mock-a", "accepted")
    assert {provider for provider, _ in log} == {"mock-a"}
    # and it is one message: the retry carried the same idempotency key, answered with the
    # first acceptance's message id, and mock-b never saw it
    [only] = accepted(delivery_id)
    assert (only["provider"], only["provider_message_id"]) == (
        "mock-a", body["provider_message_id"])
    assert MockProvider.sends(provider="mock-b") == []


def test_the_shared_circuit_opens_skips_probes_once_and_closes_across_two_workers(
        client: TestClient) -> None:
    assert gauge("mock-a") == 0
    MockProvider.set_state("mock-a", "down")
    someone = account(client)
    with email_workers(2):
        # Given five deliveries each fail at mock-a (and go out through mock-b)
        first = [email(client, someone, f"down-{n}") for n in range(5)]
        for delivery_id in first:
            wait_for(lambda d=delivery_id: sent(client, d), timeout=30, what="failover")
        # Then the fifth definite failure opened mock-a's circuit for both processes
        assert gauge("mock-a") == 1
        opened = time.monotonic()
        assert len(MockProvider.sends(provider="mock-a")) == 5
        # a process trusts a closed state it learnt for this long: let it pass
        time.sleep(KNOWN_STATE_TTL_S)
        # When more deliveries come while it is open, they skip mock-a
        skipping = [email(client, someone, f"open-{n}") for n in range(4)]
        for delivery_id in skipping:
            body = wait_for(lambda d=delivery_id: sent(client, d), timeout=30, what="skip")
            assert isinstance(body, dict)
            assert history(body) == [("mock-a", "skipped_open_circuit"),
                                     ("mock-b", "accepted")]
        assert len(MockProvider.sends(provider="mock-a")) == 5
        # When mock-a is back and the cooldown has passed, one probe goes through: it
        # hangs for a while (its address is scripted so), and meanwhile the circuit is
        # half-open and every other send still skips mock-a
        MockProvider.set_state("mock-a", "up")
        MockProvider.script("probe@example.com", "hang:3")
        time.sleep(max(0.0, COOLDOWN_S - (time.monotonic() - opened)))
        probe = email(client, account(client, email="probe@example.com"), "probe")
        wait_for(lambda: gauge("mock-a") == 2, timeout=30, what="half-open")
        other = email(client, someone, "during-probe")
        body = wait_for(lambda: sent(client, other), timeout=30, what="a send during it")
        assert isinstance(body, dict)
        assert history(body) == [("mock-a", "skipped_open_circuit"), ("mock-b", "accepted")]
        # Then the probe's acceptance closes the circuit, and sends go to mock-a again
        body = wait_for(lambda: sent(client, probe), timeout=30, what="the probe")
        assert isinstance(body, dict)
        assert history(body) == [("mock-a", "accepted")]
        assert gauge("mock-a") == 0
        after = email(client, someone, "closed")
        body = wait_for(lambda: sent(client, after), timeout=30, what="a send after it")
        assert isinstance(body, dict)
        assert history(body) == [("mock-a", "accepted")]


def test_a_kill_between_the_failure_and_the_next_providers_send_ends_with_one_acceptance(
        client: TestClient) -> None:
    # Given mock-a is down and mock-b stalls on this address, so the kill lands in its send
    MockProvider.set_state("mock-a", "down")
    MockProvider.script("stall@example.com", "hang:30")
    delivery_id = email(client, account(client, email="stall@example.com"), "signup")
    with email_workers(1) as workers:
        # When mock-a's failure is written (before mock-b is asked) and the worker dies
        wait_for(lambda: history(delivery(client, delivery_id)), timeout=30,
                 what="mock-a's failure to be written")
        assert history(delivery(client, delivery_id)) == [("mock-a", "definite_failure")]
        workers[0].send_signal(signal.SIGKILL)
        workers[0].wait(timeout=10)
        # its claim is left behind: age it past staleness instead of waiting a minute
        with db.get_engine().begin() as connection:
            connection.execute(text("UPDATE deliveries SET claimed_at = claimed_at - "
                                    "interval '2 minutes' WHERE id = :id"), {"id": delivery_id})
        MockProvider.script("stall@example.com", "ok")
        workers[0] = email_worker()
        body = wait_for(lambda: sent(client, delivery_id), timeout=60, what="the retry")
    # Then it was accepted exactly once, by mock-b, and the history survived the kill
    assert isinstance(body, dict)
    assert body["provider"] == "mock-b"
    assert len(accepted(delivery_id)) == 1
    assert history(body) == [("mock-a", "definite_failure"), ("mock-a", "definite_failure"),
                             ("mock-b", "accepted")]


def test_each_send_is_counted_by_provider_and_result(client: TestClient) -> None:
    def count(provider: str, result: str) -> float:
        return REGISTRY.get_sample_value("provider_sends_total",
                                         {"provider": provider, "result": result}) or 0.0

    before = {(p, r): count(p, r) for p, r in [("mock-a", "definite_failure"),
                                               ("mock-b", "accepted"), ("mock-a", "accepted")]}
    # Given mock-a is down, when a worker (in this process) sends one delivery
    MockProvider.set_state("mock-a", "down")
    delivery_id = email(client, account(client), "signup")
    with running_worker(["notification-email"]):
        wait_for(lambda: sent(client, delivery_id), timeout=30, what="it to be sent")
    # Then provider_sends_total counted mock-a's failure and mock-b's acceptance
    assert {key: count(*key) - value for key, value in before.items()} == {
        ("mock-a", "definite_failure"): 1, ("mock-b", "accepted"): 1, ("mock-a", "accepted"): 0}


def test_every_circuit_open_is_a_retry_not_a_failure(client: TestClient) -> None:
    from herald.queue import current_app, now_ms
    from herald.settings import get_settings

    # Given both providers' circuits opened just now (as another worker left them)
    prefix = get_settings().queue_prefix
    for provider in ("mock-a", "mock-b"):
        current_app().client.hset(f"{prefix}:circuit:{provider}",
                                  mapping={"state": "open", "since": now_ms()})
    delivery_id = email(client, account(client), "signup")
    with running_worker(["notification-email"]):
        # When the first attempt finds both open, it sends nothing and waits for a retry
        wait_for(lambda: len(history(delivery(client, delivery_id))) == 2, timeout=30,
                 what="the first attempt")
        body = delivery(client, delivery_id)
        assert (body["outcome"], body["attempts"]) == ("sending", 0)
        assert history(body) == [("mock-a", "skipped_open_circuit"),
                                 ("mock-b", "skipped_open_circuit")]
        assert MockProvider.sends() == []
        # Then the retry, after the cooldown, is mock-a's probe, and it is accepted
        body = wait_for(lambda: sent(client, delivery_id), timeout=30, what="the retry")
    assert isinstance(body, dict)
    assert history(body)[2:] == [("mock-a", "accepted")]
    assert gauge("mock-a") == 0 and gauge("mock-b") == 1
