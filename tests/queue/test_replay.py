"""Replaying a completed job in place (``enqueue(..., replay_completed=True)``), on every
broker setup: the completed job runs again under its own id with its counters reset; a
live job is never doubled; a failed job is left to ``retry_failed``."""

from __future__ import annotations

from herald.queue import enqueue, queue
from herald.queue.worker import running_worker
from tests.queue.conftest import HeraldOn, wait_for
from tests.queue.test_jobs import assert_stale_and_harmless, finished
from tests.support.queue.queues import close_gate, events, exp, open_gate, other


def test_a_completed_job_replayed_runs_again_in_place_with_its_counters_reset(
        herald_on: HeraldOn) -> None:
    # Given a job that failed once, then completed (attempts made 1, started 2)
    enqueue(exp, {"key": "r", "fail_times": 1}, job_id="job-r")
    with running_worker(["t-exp"]):
        wait_for(lambda: finished("t-exp", "job-r"), what="the first life")
        first = queue("t-exp").get("job-r")
        assert (first.state, first.attempts_made, first.attempts_started) == ("completed", 1, 2)
        # When it is added again with replay_completed
        result = enqueue(exp, {"key": "r", "fail_times": 1}, job_id="job-r",
                         replay_completed=True)
        assert (result.status, result.job_id) == ("replayed", "job-r")
        wait_for(lambda: len(events("done")) == 2, what="the replayed run")
        wait_for(lambda: finished("t-exp", "job-r"), what="the second life")
    # Then it ran again from attempt 1 (it failed once more, as a fresh job would), and
    # ended completed under the same id with a fresh outcome
    job = queue("t-exp").get("job-r")
    assert (job.state, job.attempts_made, job.attempts_started, job.return_value) == (
        "completed", 1, 2, {"key": "r"})
    assert [e["attempts_made"] for e in events("start")] == [0, 1, 0, 1]
    assert queue("t-exp").counts()["completed"] == 1


def test_a_live_job_is_not_doubled_by_a_replay(herald_on: HeraldOn) -> None:
    # Given a job that is running (held at its gate)
    enqueue(other, {"key": "live", "gated": True}, job_id="job-live")
    with running_worker(["t-other"]):
        wait_for(lambda: queue("t-other").get("job-live").state == "active")
        # When a replay of it is added, and waiting for it to start, another
        replay = enqueue(other, {"key": "live"}, job_id="job-live", replay_completed=True)
        open_gate("live")
        wait_for(lambda: finished("t-other", "job-live"), what="the live run")
        # and then a sentinel behind it
        enqueue(other, {"key": "sentinel"}, job_id="sentinel")
        wait_for(lambda: finished("t-other", "sentinel"), what="the sentinel")
    # Then the replay was a duplicate and the job ran once
    assert replay.status == "duplicated"
    assert [e["key"] for e in events("done")] == ["live", "sentinel"]


def test_a_failed_job_is_not_replayed_only_retried(herald_on: HeraldOn) -> None:
    # Given a job that failed for good (t-other: one attempt)
    enqueue(other, {"key": "f", "permanent": True}, job_id="job-f")
    with running_worker(["t-other"]):
        wait_for(lambda: finished("t-other", "job-f"))
        # When it is added with replay_completed alone, it stays failed
        assert enqueue(other, {"key": "f"}, job_id="job-f",
                       replay_completed=True).status == "duplicated"
        assert queue("t-other").get("job-f").state == "failed"
        # and with both flags it is retried in place (the same permanent payload fails again)
        assert enqueue(other, {"key": "f"}, job_id="job-f", replay_completed=True,
                       retry_failed=True).status == "retried"
        wait_for(lambda: len(events("start")) == 2, what="the retried run")
        wait_for(lambda: finished("t-other", "job-f"))
    assert queue("t-other").get("job-f").state == "failed"


def test_a_run_from_before_a_replay_cannot_end_the_replayed_run(herald_on: HeraldOn) -> None:
    # Given a job that completed once
    open_gate("z")
    enqueue(other, {"key": "z", "gated": True}, job_id="job-z")
    with running_worker(["t-other"]):
        wait_for(lambda: finished("t-other", "job-z"), what="the first life")
        first_life = events("start")[0]["token"]
        # When it is replayed and its second life is running
        close_gate("z")
        assert enqueue(other, {"key": "z", "gated": True}, job_id="job-z",
                       replay_completed=True).status == "replayed"
        wait_for(lambda: len(events("start")) == 2, what="the second life to start")
        assert queue("t-other").get("job-z").state == "active"
        # Then whatever the first life reports now is stale and harmless
        assert_stale_and_harmless(herald_on, "t-other", "job-z", first_life)
        open_gate("z")
        wait_for(lambda: finished("t-other", "job-z"), what="the second life to end")
    assert queue("t-other").get("job-z").state == "completed"
    assert [e["key"] for e in events("done")] == ["z", "z"]
