"""Layer 2 of the email-retry queue: the in-call retries of ``send_email`` and its hand-off
to the ``email-retry`` queue (job id from the key, due in 5 minutes, the full envelope)."""

from __future__ import annotations

import threading
from datetime import timedelta
from typing import Any

import pytest

from actors.email_retry import SendOutcome, send_email
from herald.queue import InvalidPayload, now_ms, queue
from providers.mock import MockProvider

pytestmark = pytest.mark.usefixtures("email_retry")

RECIPIENT = "ops@example.com"


def envelope(**fields: Any) -> dict[str, Any]:
    values: dict[str, Any] = {"from": "herald ops <alerts@herald.test>", "to": RECIPIENT,
                              "cc": ["oncall@example.com"], "subject": "Queue stalled",
                              "html": "<p>notification-email is stalled</p>",
                              "text": "notification-email is stalled"}
    values.update(fields)
    return values


def retry_counts() -> dict[str, int]:
    return queue("email-retry").counts()


def nothing_queued() -> bool:
    return all(count == 0 for count in retry_counts().values())


def test_a_transient_refusal_then_success_sends_once_and_queues_nothing() -> None:
    # Given a provider that refuses the first send transiently, then accepts
    MockProvider.script(RECIPIENT, "transient:1")

    # When an operational email is sent
    outcome = send_email(envelope(), "alert:stalled:1")

    # Then the second try sent it, once, and the queue got nothing
    assert outcome.sent and outcome.tries == 2 and outcome.retry_job_id is None
    accepted = MockProvider.sends(accepted_only=True)
    assert [send["to"] for send in accepted] == [RECIPIENT]
    assert accepted[0]["cc"] == ["oncall@example.com"]
    assert accepted[0]["from"] == "herald ops <alerts@herald.test>"
    assert nothing_queued()


def test_transient_failures_past_the_budget_queue_one_job_due_in_five_minutes() -> None:
    # Given a provider that keeps failing transiently (a 5xx / 429 outage)
    MockProvider.script(RECIPIENT, "transient:100")

    # When an operational email is sent
    before = now_ms()
    outcome = send_email(envelope(), "alert:stalled:2")
    after = now_ms()

    # Then it was tried three times in the call (the pauses of EMAIL_IN_CALL_BACKOFF_MS)
    assert not outcome.sent and outcome.tries == 3
    assert len(MockProvider.sends()) == 3
    # And one email-retry job carries it, its id built from the key, due in 5 minutes
    assert outcome.retry_job_id == "alert:stalled:2:1"
    assert retry_counts()["delayed"] == 1
    job = queue("email-retry").get("alert:stalled:2:1")
    assert job is not None and job.state == "delayed"
    assert job.run_at is not None
    five_minutes = int(timedelta(minutes=5).total_seconds() * 1000)
    assert before + five_minutes <= int(job.run_at.timestamp() * 1000) <= after + five_minutes
    # with the full envelope, the key and the queue's own attempt counter
    assert job.payload == {"envelope": envelope(), "idempotency_key": "alert:stalled:2",
                           "attempt": 1, "last_error": "mock_transient"}


def test_a_final_refusal_is_not_retried_in_the_call_but_goes_to_the_queue() -> None:
    # Given a provider that refuses the email as final (an SMTP 5xx, an HTTP 4xx)
    MockProvider.script(RECIPIENT, "terminal")

    # When an operational email is sent
    outcome = send_email(envelope(), "alert:stalled:3")

    # Then the call did not try again, and the queue has it (an operator may fix the cause)
    assert not outcome.sent and outcome.tries == 1
    assert outcome.result.failure_code == "mock_terminal"
    job = queue("email-retry").get("alert:stalled:3:1")
    assert job is not None and job.state == "delayed"
    assert job.payload["last_error"] == "mock_terminal"


def test_two_concurrent_calls_with_the_same_key_make_one_job() -> None:
    # Given a provider outage
    MockProvider.script(RECIPIENT, "transient:100")
    start = threading.Barrier(2)
    outcomes: list[SendOutcome] = []

    def call() -> None:
        start.wait()
        outcomes.append(send_email(envelope(), "alert:stalled:4"))

    # When two calls send the same email (same idempotency key) at once
    threads = [threading.Thread(target=call) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)

    # Then both handed it to the queue, and the queue holds it once
    assert [o.retry_job_id for o in outcomes] == ["alert:stalled:4:1"] * 2
    assert retry_counts()["delayed"] == 1
    assert [job.id for job in queue("email-retry").jobs("delayed")] == ["alert:stalled:4:1"]


@pytest.mark.parametrize(("fields", "key", "named"), [
    ({"to": "not-an-address"}, "k1", "envelope.to"),
    ({"cc": ["ok@example.com", "two@example.com, three@example.com"]}, "k2", "envelope.cc"),
    ({"from": "Evil\r\nBcc: all@example.com <a@example.com>"}, "k3", "envelope.from"),
    ({"subject": "Hi\r\nBcc: all@example.com"}, "k4", "envelope.subject"),
    ({"subject": ""}, "k5", "envelope.subject"),
    ({"text": "", "html": None}, "k6", "text or html is required"),
    ({"bcc": ["hidden@example.com"]}, "k7", "envelope.bcc"),
    ({}, "", "idempotency_key"),
    ({}, "has spaces in it", "idempotency_key"),
])
def test_a_bad_envelope_is_refused_before_anything_is_sent_or_queued(
        fields: dict[str, Any], key: str, named: str) -> None:
    # When an email with a malformed field (or key) is handed to the helper
    with pytest.raises(InvalidPayload) as refused:
        send_email(envelope(**fields), key)

    # Then the error names the field, and nothing was sent or queued
    assert named in str(refused.value)
    assert MockProvider.sends() == []
    assert nothing_queued()
