"""RabbitMQ: a job the ledger holds whose message never went out.

``enqueue`` adds the job to the Redis ledger, then publishes its message to RabbitMQ. When
RabbitMQ is away the publish fails after the add, and the job waits in the ledger with no
message. Enqueueing the same job id again (what the handoff sweep does to re-drive a lost
job) must publish a message for it, and a job whose first message did go out must still
run once.
"""

from __future__ import annotations

import contextlib
import socket
from collections.abc import Callable, Iterator
from datetime import timedelta
from typing import Any

import dramatiq
import pytest

from herald.queue import current_app, enqueue, enqueue_many, enqueue_many_actors, queue
from herald.queue.worker import running_worker
from tests.queue.conftest import HeraldOn, reset_herald, wait_for
from tests.support.queue.queues import events, prio

# only the RabbitMQ setup: on the Redis broker the ledger is the queue, nothing to lose
pytestmark = pytest.mark.parametrize("herald_on", ["rabbitmq"], indirect=True)


@contextlib.contextmanager
def rabbitmq_away(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """herald configured, for the block, with a RabbitMQ URL whose port nothing listens on
    (connections are refused, as when RabbitMQ is down); then back to the real one."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    try:
        with monkeypatch.context() as patch:
            patch.setenv("RABBITMQ_URL", f"amqp://guest:guest@127.0.0.1:{port}/")
            reset_herald()
            yield
    finally:
        reset_herald()  # on the real URL again


def finished(job_id: str) -> bool:
    job = queue("t-prio").get(job_id)
    return job is not None and job.state in ("completed", "failed")


def run_until_sentinel() -> None:
    """Queue a sentinel job behind everything published so far (t-prio runs one job at a
    time, in order) and run the queue until the sentinel finished."""
    enqueue(prio, {"key": "sentinel"}, job_id="job-sentinel")
    with running_worker(["t-prio"]):
        wait_for(lambda: finished("job-sentinel"), what="the sentinel")


Adds = Callable[[str, dict[str, Any]], str]


def _one(job_id: str, payload: dict[str, Any]) -> str:
    return enqueue(prio, payload, job_id=job_id).status


def _many_actors(job_id: str, payload: dict[str, Any]) -> str:
    [[result]] = enqueue_many_actors([(prio, [(payload, {"job_id": job_id})])])
    return result.status


def _many(job_id: str, payload: dict[str, Any]) -> str:
    [result] = enqueue_many(prio, [(payload, {"job_id": job_id})])
    return result.status


def _sweep(job_id: str, payload: dict[str, Any]) -> str:
    """As the handoff sweep re-drives a job: a retained failure would be retried."""
    return enqueue(prio, payload, job_id=job_id, retry_failed=True).status


@pytest.mark.parametrize(("first", "again"), [(_one, _one), (_many_actors, _sweep),
                                              (_one, _many)],
                         ids=["enqueue", "groups-then-sweep", "enqueue-then-many"])
def test_a_job_whose_message_never_went_out_runs_once_when_enqueued_again(
        herald_on: HeraldOn, monkeypatch: pytest.MonkeyPatch, first: Adds, again: Adds) -> None:
    # Given a job added to the ledger while RabbitMQ was away: its publish failed
    with rabbitmq_away(monkeypatch), pytest.raises(dramatiq.errors.BrokerConnectionError):
        first("job-lost", {"key": "lost"})
    assert queue("t-prio").get("job-lost").state == "waiting"
    # When the same job id is enqueued again with RabbitMQ back
    status = again("job-lost", {"key": "lost"})
    # Then the caller hears it was a duplicate, and the job runs, once
    run_until_sentinel()
    assert status == "duplicated"
    assert [e["key"] for e in events("start")] == ["lost", "sentinel"]
    job = queue("t-prio").get("job-lost")
    assert (job.state, job.attempts_started) == ("completed", 1)


def test_a_delayed_job_whose_message_never_went_out_keeps_its_delay(
        herald_on: HeraldOn, monkeypatch: pytest.MonkeyPatch) -> None:
    # Given a delayed job added while RabbitMQ was away
    with rabbitmq_away(monkeypatch), pytest.raises(dramatiq.errors.BrokerConnectionError):
        enqueue(prio, {"key": "later"}, job_id="job-later", delay=timedelta(seconds=1))
    held = queue("t-prio").get("job-later")
    assert held.state == "delayed"
    # When it is enqueued again, with no delay, RabbitMQ back
    assert enqueue(prio, {"key": "later"}, job_id="job-later").status == "duplicated"
    # Then it runs once, and not before the time it was delayed to
    with running_worker(["t-prio"]):
        wait_for(lambda: finished("job-later"), what="the delayed job")
    job = queue("t-prio").get("job-later")
    assert (job.state, job.attempts_started) == ("completed", 1)
    assert job.processed_at >= held.run_at


def test_a_job_whose_message_did_go_out_still_runs_once_when_enqueued_again(
        herald_on: HeraldOn) -> None:
    # Given a job whose message was published
    assert enqueue(prio, {"key": "twice"}, job_id="job-twice").status == "added"
    # When the same job id is enqueued again (its payload changed: a duplicate is the job
    # the ledger holds, not the new payload)
    assert enqueue(prio, {"key": "changed"}, job_id="job-twice").status == "duplicated"
    # Then the job runs once, as first enqueued, and the earlier message is dropped
    run_until_sentinel()
    assert [e["key"] for e in events("start")] == ["twice", "sentinel"]
    assert queue("t-prio").get("job-twice").attempts_started == 1
    assert current_app().queries.metrics("t-prio")["duplicated"] == 1
