"""The delivery-report fallback of urgent SMS through real worker processes and two mock
instances (``mock-a`` first, ``mock-b`` second in the SMS chain), ``account.welcome``
opted in with SMS_FALLBACK_AFTER_S: an urgent SMS with no receipt is sent once more
through mock-b after the wait, and the attempts log says so; a ``delivered`` receipt
before the wait, normal urgency or a type not opted in send nothing more; mock-b's
receipt delivers it; two workers, a duplicate check job or a SIGKILL mid-send never make
a third send. SMS_FALLBACK_AFTER_S is checked at start."""

from __future__ import annotations

import signal
from collections.abc import Iterator
from datetime import datetime, timedelta
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import text

from actors.event_catalogue import EVENT_TYPES, fallback_after_s
from actors.lifecycle import StartupError, start_notification_queues
from actors.sms_fallback import FallbackJob, check_sms_fallback, fallback_job_id
from herald import db
from herald.queue import Job, current_app, enqueue, now_ms, queue, running_worker
from herald.settings import SettingsError, get_settings, load_settings
from herald.web import create_app
from models.delivery_fallback import take_fallback
from providers.mock import MockProvider, signed_callback
from tests.support.pipeline.steps import account, delivery, event
from tests.support.pipeline.workers import sms_worker, sms_workers
from tests.support.providers.fakes import use_herald_env
from tests.support.waiting import wait_for

#: The fallback's wait in these tests (seconds), and a longer one for the receipt test.
WAIT_S = 1.5
LONG_WAIT_S = 6.0
PHONE = "+966501234567"


def opt_in(monkeypatch: pytest.MonkeyPatch, waits: str) -> TestClient:
    """The pipeline with MOCK_INSTANCES=mock-a,mock-b, SMS_PROVIDERS=mock-a,mock-b and
    SMS_FALLBACK_AFTER_S=``waits``; the worker processes inherit the environment."""
    use_herald_env(monkeypatch, mock_instances="mock-a,mock-b", sms_providers="mock-a,mock-b",
                   sms_fallback_after_s=waits)
    MockProvider.reset()
    return TestClient(create_app())


@pytest.fixture
def client(pipeline: None, monkeypatch: pytest.MonkeyPatch) -> Iterator[TestClient]:
    """account.welcome opted in with a :data:`WAIT_S` wait."""
    yield opt_in(monkeypatch, f"account.welcome={WAIT_S}")
    MockProvider.reset()


def sms(client: TestClient, urgency: str = "urgent", type_: str = "account.welcome",
        **fields: Any) -> str:
    """Post an event on SMS only to a new account; its delivery's id."""
    created = event(client, account(client, phone=PHONE), type_, occurrence="now",
                    channels=["sms"], urgency=urgency, **fields)
    return str(created["deliveries"][0]["id"])


def history(delivery_id: str, client: TestClient) -> list[tuple[str, str, bool]]:
    """A delivery's attempts log as (provider, result, fallback) triples."""
    return [(entry["provider"], entry["result"], bool(entry.get("fallback")))
            for entry in delivery(client, delivery_id)["attempts_log"] or []]


def finished(queue_name: str, job_id: str) -> Job | None:
    """The job once it completed (None before, or when there is none)."""
    job = queue(queue_name).get(job_id)
    return job if job is not None and job.state == "completed" else None


def completed(job_id: str, what: str = "the fallback check") -> Job:
    """Wait for the notification-sms job ``job_id`` to complete; the job."""
    job = wait_for(lambda: finished("notification-sms", job_id), timeout=30, what=what)
    assert isinstance(job, Job)
    return job


def sent_by_a(client: TestClient, delivery_id: str) -> dict[str, Any]:
    """Wait for mock-a's acceptance and for its channel job to end; the delivery."""
    wait_for(lambda: finished("notification-sms", delivery_id), timeout=30,
             what="the channel job")
    body = delivery(client, delivery_id)
    assert (body["outcome"], body["provider"]) == ("sent", "mock-a")
    return body


def sends(provider: str, delivery_id: str) -> list[dict[str, Any]]:
    """What the mock instance ``provider`` recorded for the delivery."""
    return [record for record in MockProvider.sends(provider=provider)
            if record["idempotency_key"] == delivery_id]


def at(record: dict[str, Any]) -> datetime:
    return datetime.fromisoformat(record["at"])


def receipt(client: TestClient, provider: str, record: dict[str, Any], status: str) -> None:
    """Post mock ``provider``'s signed receipt for its recorded send."""
    payload, headers = signed_callback(record, status)
    response = client.post(f"/v1/callbacks/{provider}", content=payload, headers=headers)
    assert response.status_code == 202, response.text


def test_an_urgent_sms_without_a_receipt_is_sent_once_more_through_the_next_provider(
        client: TestClient) -> None:
    # Given an urgent account.welcome SMS (opted in) accepted by mock-a
    delivery_id = sms(client)
    with sms_workers(1):
        sent_by_a(client, delivery_id)
        # When no receipt comes within the wait
        check = completed(fallback_job_id(delivery_id))
    # Then mock-b sent it once, after the wait, and the attempts log says it on purpose
    assert check.return_value == {"delivery_id": delivery_id, "fallback_provider": "mock-b",
                                  "result": "accepted"}
    [first] = sends("mock-a", delivery_id)
    [second] = sends("mock-b", delivery_id)
    assert (first["outcome"], second["outcome"]) == ("ok", "ok")
    assert second["to"] == PHONE and second["text"] == first["text"]
    assert at(second) - at(first) >= timedelta(seconds=WAIT_S)
    body = delivery(client, delivery_id)
    assert (body["outcome"], body["provider"]) == ("sent", "mock-a")
    assert body["provider_message_id"] == first["provider_message_id"]
    assert history(delivery_id, client) == [("mock-a", "accepted", False),
                                            ("mock-b", "accepted", True)]
    fallback = body["attempts_log"][-1]
    assert fallback["provider_message_id"] == second["provider_message_id"]
    assert fallback["error"] is None


def test_a_delivered_receipt_within_the_wait_cancels_the_fallback(
        pipeline: None, monkeypatch: pytest.MonkeyPatch) -> None:
    client = opt_in(monkeypatch, f"account.welcome={LONG_WAIT_S}")
    delivery_id = sms(client)
    with sms_workers(1):
        sent_by_a(client, delivery_id)
        # Given mock-a reports the message delivered before the wait is over
        [first] = sends("mock-a", delivery_id)
        receipt(client, "mock-a", first, "delivered")
        with running_worker(["notification-orchestration"]):
            wait_for(lambda: delivery(client, delivery_id)["outcome"] == "delivered",
                     timeout=LONG_WAIT_S - 1, what="the receipt to apply")
        # When the check runs at the end of the wait
        check = completed(fallback_job_id(delivery_id))
    # Then it sent nothing
    assert check.return_value == {"delivery_id": delivery_id, "skipped": "outcome delivered"}
    assert sends("mock-b", delivery_id) == []
    assert history(delivery_id, client) == [("mock-a", "accepted", False)]


@pytest.mark.parametrize(("urgency", "type_", "data"), [
    ("normal", "account.welcome", {}),
    ("urgent", "esim.ready", {"iccid": "8901", "activation_code": "LPA:1$smdp.example$X"}),
], ids=["normal urgency", "a type not opted in"])
def test_no_fallback_for_normal_urgency_or_a_type_not_opted_in(
        client: TestClient, urgency: str, type_: str, data: dict[str, str]) -> None:
    # Given an SMS accepted by mock-a that is not urgent, or of a type not opted in
    delivery_id = sms(client, urgency=urgency, type_=type_, data=data)
    with sms_workers(1):
        # When its channel job has ended
        sent_by_a(client, delivery_id)
    # Then no fallback check was ever added, and mock-b saw nothing
    assert queue("notification-sms").get(fallback_job_id(delivery_id)) is None
    assert sends("mock-b", delivery_id) == []
    assert history(delivery_id, client) == [("mock-a", "accepted", False)]


def test_a_receipt_of_either_message_correlates_and_delivered_from_the_fallback_wins(
        client: TestClient) -> None:
    # Given a delivery sent a second time by the fallback through mock-b
    delivery_id = sms(client)
    with sms_workers(1):
        sent_by_a(client, delivery_id)
        completed(fallback_job_id(delivery_id))
    [first], [second] = sends("mock-a", delivery_id), sends("mock-b", delivery_id)
    with running_worker(["notification-orchestration"]):
        # When mock-a reports its message failed, the delivery stays sent (mock-b's may
        # still arrive) and the receipt is matched to it
        receipt(client, "mock-a", first, "failed")
        wait_for(lambda: _receipt_result(first) == "unchanged", timeout=30,
                 what="mock-a's receipt to be processed")
        assert delivery(client, delivery_id)["outcome"] == "sent"
        # and when mock-b reports its message delivered, so is the delivery
        receipt(client, "mock-b", second, "delivered")
        wait_for(lambda: delivery(client, delivery_id)["outcome"] == "delivered",
                 timeout=30, what="mock-b's receipt to apply")


def _receipt_result(record: dict[str, Any]) -> str | None:
    """What normalization did with the receipt of a recorded send (None: not yet)."""
    with db.get_engine().connect() as connection:
        return connection.execute(
            text("SELECT result FROM callback_receipts WHERE provider_message_id = :id"),
            {"id": record["provider_message_id"]}).scalar_one_or_none()


def test_two_workers_and_a_duplicate_check_still_send_one_fallback(
        client: TestClient) -> None:
    # Given an urgent SMS accepted by mock-a, and its check added a second time under
    # another job id (as a job re-added after a lost record would be)
    delivery_id = sms(client)
    with sms_workers(2):
        sent_by_a(client, delivery_id)
        enqueue(check_sms_fallback, FallbackJob(delivery_id=delivery_id),
                job_id=f"again-{delivery_id}", delay=timedelta(seconds=WAIT_S))
        # When both checks run in two worker processes
        checks = [completed(job_id, "both checks")
                  for job_id in (fallback_job_id(delivery_id), f"again-{delivery_id}")]
    # Then one of them sent, the other found the fallback taken
    results = sorted(check.return_value.get("skipped", "sent") for check in checks)
    assert results in (["fallback taken", "sent"], ["sent", "taken or settled meanwhile"])
    assert len(sends("mock-b", delivery_id)) == 1
    assert history(delivery_id, client) == [("mock-a", "accepted", False),
                                            ("mock-b", "accepted", True)]


def test_a_kill_during_the_fallback_send_never_sends_again(client: TestClient) -> None:
    delivery_id = sms(client)
    with sms_workers(1) as workers:
        sent_by_a(client, delivery_id)
        # Given mock-b stalls on this address, so the kill lands inside the fallback send
        MockProvider.script(PHONE, "hang:30")
        wait_for(lambda: len(history(delivery_id, client)) == 2, timeout=30,
                 what="the fallback to be taken")
        # When the worker dies mid-send and a new one takes the check over
        workers[0].send_signal(signal.SIGKILL)
        workers[0].wait(timeout=10)
        MockProvider.script(PHONE, "ok")
        workers[0] = sms_worker()
        check = completed(fallback_job_id(delivery_id), "the restarted check")
    # Then the restarted check sent nothing, and the log keeps the send as unconfirmed
    assert check.return_value == {"delivery_id": delivery_id, "skipped": "fallback taken"}
    assert sends("mock-b", delivery_id) == []
    assert history(delivery_id, client) == [("mock-a", "accepted", False),
                                            ("mock-b", "ambiguous", True)]
    assert delivery(client, delivery_id)["attempts_log"][-1]["error"].startswith(
        "fallback_unconfirmed")


def test_a_failed_fallback_send_is_logged_and_never_retried(client: TestClient) -> None:
    # Given mock-b is down when the fallback of a delivery accepted by mock-a comes
    MockProvider.set_state("mock-b", "down")
    delivery_id = sms(client)
    with sms_workers(1):
        sent_by_a(client, delivery_id)
        check = completed(fallback_job_id(delivery_id))
    # Then its one send failed, the log says so, and the check ended there (one run)
    assert check.return_value["result"] == "definite_failure"
    assert check.attempts_started == 1
    assert [r["outcome"] for r in sends("mock-b", delivery_id)] == ["transient"]
    assert history(delivery_id, client) == [("mock-a", "accepted", False),
                                            ("mock-b", "definite_failure", True)]
    assert delivery(client, delivery_id)["outcome"] == "sent"


def test_no_fallback_while_the_next_providers_circuit_is_open(client: TestClient) -> None:
    # Given mock-b's circuit was opened just now (as another worker left it)
    current_app().client.hset(f"{get_settings().queue_prefix}:circuit:mock-b",
                              mapping={"state": "open", "since": now_ms()})
    delivery_id = sms(client)
    with sms_workers(1):
        sent_by_a(client, delivery_id)
        check = completed(fallback_job_id(delivery_id))
    # Then nothing was sent a second time
    assert check.return_value["skipped"] == "no provider to fall back to"
    assert sends("mock-b", delivery_id) == []
    assert history(delivery_id, client) == [("mock-a", "accepted", False)]


def test_the_fallback_is_taken_once_whoever_read_the_delivery_before(
        client: TestClient) -> None:
    # Given a sent SMS that two checks both read as having no fallback yet
    delivery_id = sms(client)
    with sms_workers(1):
        sent_by_a(client, delivery_id)
        queue("notification-sms").remove(fallback_job_id(delivery_id))
    # When both write their take, one after the other
    with db.autocommit() as connection:
        takes = [take_fallback(connection, delivery_id, accepted_by="mock-a",
                               provider="mock-b", attempts_log=[]) for _ in range(2)]
    # Then only the first may send
    assert takes == [True, False]


@pytest.mark.parametrize(("value", "problem"), [
    ("esim.ready", "is not <event type>=<seconds>"),
    ("esim.ready=0", "must be positive seconds"),
    ("esim.ready=-5", "must be positive seconds"),
    ("esim.ready=nan", "must be positive seconds"),
    ("esim.ready=soon", "is not a number of seconds"),
    ("esim.ready=30,esim.ready=45", "named twice"),
])
def test_a_malformed_fallback_setting_stops_the_start(
        monkeypatch: pytest.MonkeyPatch, value: str, problem: str) -> None:
    monkeypatch.setenv("SMS_FALLBACK_AFTER_S", value)
    with pytest.raises(SettingsError, match=f"SMS_FALLBACK_AFTER_S: .*{problem}"):
        load_settings()


@pytest.mark.parametrize(("value", "problem"), [
    ("esim.readyy=30", "unknown event type 'esim.readyy'"),
    ("payment.receipt=30", "payment.receipt is never sent by SMS"),
])
def test_a_fallback_for_a_type_that_cannot_have_one_stops_the_notification_queues(
        monkeypatch: pytest.MonkeyPatch, value: str, problem: str) -> None:
    use_herald_env(monkeypatch, sms_fallback_after_s=value)
    with pytest.raises(StartupError, match=problem):
        start_notification_queues()


def test_the_setting_opts_types_in_and_no_built_in_type_has_a_fallback(
        monkeypatch: pytest.MonkeyPatch) -> None:
    assert all(spec.fallback_after_s is None for spec in EVENT_TYPES.values())
    use_herald_env(monkeypatch, sms_fallback_after_s="esim.ready=30, account.welcome=4.5")
    assert {name: fallback_after_s(name) for name in EVENT_TYPES} == {
        "account.welcome": 4.5, "payment.receipt": None, "esim.ready": 30.0,
        "promo.offer": None, "account.activity": None}
