"""Layer 3 of the email-retry queue: the ``email-retry`` worker re-attempts on the 5 min →
30 min → 2 h → 12 h → 24 h schedule, driven by queue time instead of real hours."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest
from sqlmodel import select

from actors.email_retry import DELIVERY_FAILED, retry_email, send_email
from herald.db import session
from herald.queue import Job, current_app, enqueue, now_ms, queue, running_worker
from models.audit import AuditEntry
from providers.mock import MockProvider
from tests.support.waiting import wait_for

RECIPIENT = "ops@example.com"
#: Where the sentinel jobs' emails go (the mock accepts them).
SENTINEL_TO = "sentinel@example.com"
MINUTE = timedelta(minutes=1)
ENVELOPE = {"to": RECIPIENT, "subject": "Payment provider down",
            "text": "The payment provider has refused 40 settlements."}
#: The queue's schedule: how long after the previous failure each attempt runs.
STEPS = (timedelta(minutes=5), timedelta(minutes=30), timedelta(hours=2), timedelta(hours=12),
         timedelta(hours=24))
#: Tries of the in-call layer (the conftest's EMAIL_IN_CALL_BACKOFF_MS has two pauses).
IN_CALL_TRIES = 3


@pytest.fixture
def worker(email_retry: str) -> Iterator[None]:
    """The email-retry queue consumed in this process."""
    with running_worker(["email-retry"]):
        yield


def ms(value: timedelta) -> int:
    return int(value.total_seconds() * 1000)


def epoch_ms(job: Job, field: str) -> int:
    value = getattr(job, field)
    assert value is not None, f"{job.id} has no {field}"
    return int(value.timestamp() * 1000)


def finished(job_id: str) -> Job:
    """Wait until the queue's job ``job_id`` has run to an end (completed or failed)."""
    def ended() -> Job | None:
        job = queue("email-retry").get(job_id)
        return job if job is not None and job.state in ("completed", "failed") else None
    return wait_for(ended, timeout=20, what=f"{job_id} to finish")  # type: ignore[return-value]


def run_attempt(job_id: str) -> Job:
    """Move the clock to a minute before the delayed job is due and show that it does not
    run (a sentinel job queued behind the clock move runs first); then move it to the
    due time and wait for the worker to run the job."""
    job = queue("email-retry").get(job_id)
    assert job is not None and job.state == "delayed", job
    current_app().time.advance(timedelta(milliseconds=epoch_ms(job, "run_at") - now_ms()) - MINUTE)
    sentinel = f"sentinel-{job_id}"
    enqueue(retry_email, {"envelope": {**ENVELOPE, "to": SENTINEL_TO},
                          "idempotency_key": sentinel, "attempt": 1}, job_id=sentinel)
    assert finished(sentinel).state == "completed"
    early = queue("email-retry").get(job_id)
    assert early is not None and early.state == "delayed", "an attempt ran before its time"
    current_app().time.advance(MINUTE)
    return finished(job_id)


def sends_to(address: str, *, accepted_only: bool = False) -> list[dict[str, Any]]:
    return [send for send in MockProvider.sends(accepted_only=accepted_only)
            if send["to"] == address]


def audit_rows() -> list[AuditEntry]:
    with session() as db:
        return list(db.exec(select(AuditEntry).where(AuditEntry.action == DELIVERY_FAILED)))


@pytest.mark.usefixtures("worker")
def test_each_attempt_waits_its_step_and_exhaustion_is_audited_and_failed() -> None:
    # Given a provider outage that outlasts the whole schedule
    MockProvider.script(RECIPIENT, "transient:1000")
    key = "alert:payments-down"

    # When the email is sent: the in-call tries fail and attempt 1 is queued in 5 minutes
    outcome = send_email(ENVELOPE, key)
    assert outcome.retry_job_id == f"{key}:1"

    # Then each failed attempt n queues attempt n+1 exactly its step later
    for attempt in range(1, len(STEPS)):
        ran = run_attempt(f"{key}:{attempt}")
        assert ran.state == "completed"
        assert ran.return_value is not None
        assert ran.return_value["next_job_id"] == f"{key}:{attempt + 1}"
        following = queue("email-retry").get(f"{key}:{attempt + 1}")
        assert following is not None and following.state == "delayed"
        step = ms(STEPS[attempt])
        assert (epoch_ms(ran, "processed_at") + step <= epoch_ms(following, "run_at")
                <= epoch_ms(ran, "finished_at") + step)
        assert following.payload["attempt"] == attempt + 1

    # When the last attempt fails too
    last = run_attempt(f"{key}:{len(STEPS)}")

    # Then that job failed for good and stays in the failed set
    assert last.state == "failed"
    assert last.failed_reason is not None and "after 5 attempts" in last.failed_reason
    assert [job.id for job in queue("email-retry").jobs("failed")] == [f"{key}:5"]
    # And nothing more is queued
    counts = queue("email-retry").counts()
    assert counts["delayed"] == counts["waiting"] == counts["active"] == 0
    assert queue("email-retry").get(f"{key}:6") is None
    # And the provider saw the in-call tries plus one send per queue attempt
    assert len(sends_to(RECIPIENT)) == IN_CALL_TRIES + len(STEPS)
    # And one email_delivery_failed row names the key, attempts and last error, no address
    [row] = audit_rows()
    assert (row.actor, row.queue, row.job_id) == ("system", "email-retry", f"{key}:5")
    assert row.detail == {"idempotency_key": key, "attempts": 5, "last_error": "mock_transient"}
    assert RECIPIENT not in repr(row.model_dump())


@pytest.mark.usefixtures("worker")
def test_a_success_midway_completes_the_chain() -> None:
    # Given an outage that ends during the third queue attempt (3 in-call + 2 queue failures)
    MockProvider.script(RECIPIENT, f"transient:{IN_CALL_TRIES + 2}")
    key = "alert:outage-ends"
    send_email(ENVELOPE, key)

    # When the schedule runs up to the third attempt
    for attempt in (1, 2):
        assert run_attempt(f"{key}:{attempt}").state == "completed"
    third = run_attempt(f"{key}:3")

    # Then the third attempt sent it and queued nothing after it
    assert third.state == "completed"
    assert third.return_value is not None and third.return_value["sent"] is True
    assert queue("email-retry").get(f"{key}:4") is None
    counts = queue("email-retry").counts()
    assert counts["delayed"] == counts["waiting"] == counts["failed"] == 0
    # And the email went out once, with no failure audited
    assert len(sends_to(RECIPIENT, accepted_only=True)) == 1
    assert audit_rows() == []
