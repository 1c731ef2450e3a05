"""Job ids, deduplication, retries, deferrals and bad input, on every broker setup."""

from __future__ import annotations

import itertools
import json
import time
from datetime import timedelta

import pytest

from herald.errors import InvalidPayload
from herald.jobs import enqueue, enqueue_groups, enqueue_many, get_ledger, queue
from herald.worker import running_worker
from tests.integration.conftest import HeraldOn, wait_for
from tests.integration.lanes import basic, events, other, stall, timed


def finished(name: str, job_id: str) -> bool:
    job = queue(name).get(job_id)
    return job is not None and job.state in ("completed", "failed")


def test_duplicate_add_of_live_or_completed_job_runs_nothing(herald_on: HeraldOn) -> None:
    # Given a job that was added and ran to completion
    assert enqueue(basic, {"key": "a"}, job_id="job-a").status == "added"
    assert enqueue(basic, {"key": "a"}, job_id="job-a").status == "duplicated"  # live
    with running_worker(["t-basic"]):
        wait_for(lambda: finished("t-basic", "job-a"), what="job-a to finish")
        # When the same id is added again, with or without retry_failed
        again = enqueue(basic, {"key": "a"}, job_id="job-a")
        again_retry = enqueue(basic, {"key": "a"}, job_id="job-a", retry_failed=True)
        wait_for(lambda: queue("t-basic").counts()["waiting"] == 0)
    # Then nothing ran twice
    assert (again.status, again_retry.status) == ("duplicated", "duplicated")
    assert [e["key"] for e in events("done")] == ["a"]
    assert queue("t-basic").get("job-a").state == "completed"


def test_retry_failed_resets_counters_and_runs_again(herald_on: HeraldOn) -> None:
    # Given a job that failed permanently and is retained
    enqueue(basic, {"key": "p", "permanent": True}, job_id="job-p")
    with running_worker(["t-basic"]):
        wait_for(lambda: finished("t-basic", "job-p"))
        failed = queue("t-basic").get("job-p")
        assert (failed.state, failed.attempts_made, failed.attempts_started) == ("failed", 1, 1)
        assert failed.failed_reason == "p cannot succeed"
        assert "Permanent" in (failed.stacktrace or "")
        # When it is re-added with retry_failed (now able to succeed: same id, new payload
        # is ignored, so the retry fails again and proves it ran)
        result = enqueue(basic, {"key": "p", "permanent": True}, job_id="job-p",
                         retry_failed=True)
        assert result.status == "retried"
        wait_for(lambda: len(events("start")) == 2, what="second run")
        wait_for(lambda: finished("t-basic", "job-p"))
    job = queue("t-basic").get("job-p")
    assert (job.attempts_made, job.attempts_started) == (1, 1)


def test_dedup_key_held_across_retries_and_released_at_the_end(herald_on: HeraldOn) -> None:
    # Given a job holding a dedup id that fails once before succeeding
    first = enqueue(basic, {"key": "d1", "fail_times": 1}, dedup_id="dispatch:o1:sysco")
    assert first.status == "added"
    # Then a second add is suppressed while it waits
    held = enqueue(basic, {"key": "d2"}, dedup_id="dispatch:o1:sysco")
    assert (held.status, held.job_id) == ("deduplicated", first.job_id)
    with running_worker(["t-basic"]):
        # ... and while it waits for its retry (delayed, attempt 1 failed)
        wait_for(lambda: queue("t-basic").get(first.job_id).state == "delayed")
        assert enqueue(basic, {"key": "d3"}, dedup_id="dispatch:o1:sysco").status == \
            "deduplicated"
        wait_for(lambda: finished("t-basic", first.job_id), what="retry to complete")
        # When it completed, the key is free again
        after = enqueue(basic, {"key": "d4"}, dedup_id="dispatch:o1:sysco")
        assert after.status == "added"
        wait_for(lambda: finished("t-basic", after.job_id))
    assert get_ledger().metrics("t-basic")["deduplicated"] == 2
    assert sorted(e["key"] for e in events("done")) == ["d1", "d4"]


def test_dedup_key_released_by_terminal_failure_and_by_remove(herald_on: HeraldOn) -> None:
    doomed = enqueue(basic, {"key": "x", "permanent": True}, dedup_id="k1")
    with running_worker(["t-basic"]):
        wait_for(lambda: finished("t-basic", doomed.job_id))
    assert enqueue(basic, {"key": "y"}, dedup_id="k1", delay=timedelta(hours=1)).status == \
        "added"
    waiting = queue("t-basic").jobs("delayed")[0]
    assert queue("t-basic").remove(waiting.id)
    assert enqueue(basic, {"key": "z"}, dedup_id="k1").status == "added"
    # removing the old failed record must not release the key the new job holds
    assert queue("t-basic").remove(doomed.job_id)
    assert enqueue(basic, {"key": "w"}, dedup_id="k1").status == "deduplicated"


def test_retries_follow_the_registry_backoff_exactly(herald_on: HeraldOn) -> None:
    # Given t-basic: 3 attempts, exponential base 1 s; a job failing twice
    enqueue(basic, {"key": "r", "fail_times": 2}, job_id="job-r")
    with running_worker(["t-basic"]):
        wait_for(lambda: finished("t-basic", "job-r"), timeout=30)
    starts = [e["t"] for e in events("start")]
    gaps = [b - a for a, b in itertools.pairwise(starts)]
    assert len(starts) == 3
    assert 0.9 <= gaps[0] <= 1.1 + 0.15, gaps  # 1 s ±10% (+ scheduling slack)
    assert 1.8 <= gaps[1] <= 2.2 + 0.15, gaps  # 2 s ±10%
    job = queue("t-basic").get("job-r")
    assert (job.state, job.attempts_made, job.attempts_started) == ("completed", 2, 3)
    assert job.return_value == {"key": "r"}


def test_exhausted_attempts_fail_with_the_last_error(herald_on: HeraldOn) -> None:
    enqueue(basic, {"key": "e", "fail_times": 9}, job_id="job-e")
    with running_worker(["t-basic"]):
        wait_for(lambda: finished("t-basic", "job-e"), timeout=30)
    job = queue("t-basic").get("job-e")
    assert (job.state, job.attempts_made) == ("failed", 3)
    assert job.failed_reason == "e failed on attempt 3"


def test_a_queue_time_limit_stops_a_run_that_overstays_it(herald_on: HeraldOn) -> None:
    # Given a queue with a 500 ms time limit, a quick job and one that would take 5 s
    enqueue(timed, {"key": "quick", "sleep_s": 0.05}, job_id="job-quick")
    enqueue(timed, {"key": "slow", "sleep_s": 5}, job_id="job-slow")
    with running_worker(["t-timed"]):
        wait_for(lambda: finished("t-timed", "job-slow") and finished("t-timed", "job-quick"),
                 timeout=10)
    # Then the quick one completed and the slow one was stopped at its limit
    assert queue("t-timed").get("job-quick").state == "completed"
    slow = queue("t-timed").get("job-slow")
    assert slow.state == "failed" and "TimeLimitExceeded" in (slow.stacktrace or "")
    assert [e["key"] for e in events("done")] == ["quick"]


def test_defer_does_not_count_a_failure(herald_on: HeraldOn) -> None:
    enqueue(basic, {"key": "f", "defer_ms": 200, "defer_times": 2}, job_id="job-f")
    with running_worker(["t-basic"]):
        wait_for(lambda: finished("t-basic", "job-f"))
    job = queue("t-basic").get("job-f")
    assert (job.state, job.attempts_made, job.attempts_started) == ("completed", 0, 3)


def test_bad_payload_is_rejected_before_anything_is_written(herald_on: HeraldOn) -> None:
    with pytest.raises(InvalidPayload, match="key"):
        enqueue(basic, {"sleep_s": "soon"}, job_id="bad")
    with pytest.raises(InvalidPayload):
        enqueue_many(basic, [{"key": "ok"}, {"nokey": 1}])
    assert queue("t-basic").get("bad") is None
    assert sum(queue("t-basic").counts().values()) == 0


def test_undecodable_message_fails_permanently_without_crashing(redis_only: HeraldOn) -> None:
    # Given a job whose stored payload no longer fits the actor's model
    enqueue(basic, {"key": "fine"}, job_id="job-bad")
    ledger = get_ledger()
    ledger.client.hset(ledger.base("t-basic") + "job:job-bad", "data", json.dumps({"x": 1}))
    enqueue(basic, {"key": "next"}, job_id="job-next")
    with running_worker(["t-basic"]):
        wait_for(lambda: finished("t-basic", "job-bad") and finished("t-basic", "job-next"))
    bad = queue("t-basic").get("job-bad")
    assert (bad.state, bad.attempts_made) == ("failed", 1)
    assert "payload failed validation" in bad.failed_reason
    assert queue("t-basic").get("job-next").state == "completed"


def test_enqueue_many_adds_ten_thousand_in_chunks(herald_on: HeraldOn) -> None:
    results = enqueue_many(basic, [({"key": f"k{i}"}, {"job_id": f"bulk-{i}"})
                                   for i in range(10_000)], chunk_size=1000)
    assert [r.status for r in results].count("added") == 10_000
    assert queue("t-basic").counts()["waiting"] == 10_000
    again = enqueue_many(basic, [({"key": "k0"}, {"job_id": "bulk-0"}),
                                 ({"key": "new"}, {"job_id": "bulk-new"})])
    assert [r.status for r in again] == ["duplicated", "added"]


def test_enqueue_groups_adds_several_queues_together_and_they_run(herald_on: HeraldOn) -> None:
    # Given jobs for two queues, one group each (a chunk of 3 splits the t-basic group)
    results = enqueue_groups([
        (basic, [({"key": f"b{i}"}, {"job_id": f"b{i}"}) for i in range(4)]),
        (other, [({"key": "o0"}, {"job_id": "o0", "priority": 1})]),
    ], chunk_size=3)
    # Then each group gets its own results, in order
    assert [[(r.status, r.job_id) for r in group] for group in results] == [
        [("added", f"b{i}") for i in range(4)], [("added", "o0")]]
    assert queue("t-basic").counts()["waiting"] == 4
    assert (queue("t-other").get("o0").state, queue("t-other").get("o0").priority) == \
        ("waiting", 1)
    # and a repeat reports per job, per group
    again = enqueue_groups([(other, [({"key": "o0"}, {"job_id": "o0"})]),
                            (basic, [({"key": "b9"}, {"job_id": "b9"})])])
    assert [[r.status for r in group] for group in again] == [["duplicated"], ["added"]]
    # When workers run both lanes, every job runs once
    with running_worker(["t-basic", "t-other"]):
        wait_for(lambda: len(events("done")) == 6, what="six jobs done")
    assert sorted(e["key"] for e in events("done")) == ["b0", "b1", "b2", "b3", "b9", "o0"]


def test_enqueue_groups_validates_every_group_before_writing(herald_on: HeraldOn) -> None:
    with pytest.raises(InvalidPayload):
        enqueue_groups([(basic, [({"key": "fine"}, {"job_id": "g-fine"})]),
                        (other, [{"nokey": 1}])])
    assert queue("t-basic").get("g-fine") is None
    assert sum(queue("t-basic").counts().values()) == 0


def test_a_job_that_keeps_deferring_ends_at_max_started_attempts(herald_on: HeraldOn) -> None:
    # Given t-stall allows 3 starts and a job that defers on every start
    enqueue(stall, {"key": "forever", "defer_ms": 50, "defer_times": 99}, job_id="job-loop")
    with running_worker(["t-stall"]):
        wait_for(lambda: finished("t-stall", "job-loop"), timeout=20)
    job = queue("t-stall").get("job-loop")
    assert job.state == "failed"
    assert job.attempts_made == 0  # deferrals never counted as failures
    assert "more than max_started_attempts (3)" in job.failed_reason
    assert len(events("start")) == 3
    # and the actor's exhausted hook was told, so it can record the end durably
    exhausted = wait_for(lambda: events("exhausted"))
    assert [(e["key"], "max_started_attempts" in e["reason"]) for e in exhausted] == [
        ("forever", True)]


def test_a_redelivered_message_runs_the_job_once(herald_on: HeraldOn) -> None:
    enqueue(basic, {"key": "once", "sleep_s": 0.3}, job_id="job-once")
    ledger = get_ledger()
    if herald_on.kind == "rabbitmq":
        # When the broker delivers the job's message a second time
        from herald.broker import message_for
        from herald.jobs import get_broker

        token = ledger.client.hget(ledger.base("t-basic") + "job:job-once", "tok").decode()
        duplicate = message_for("t-basic", "basic", {"key": "once", "sleep_s": 0.3},
                                job_id="job-once", token=token)
        get_broker().publish(duplicate, priority=5)
    with running_worker(["t-basic"]):
        wait_for(lambda: finished("t-basic", "job-once"))
        if herald_on.kind != "rabbitmq":
            # When a worker reports a run under a token that is no longer the job's
            # (what a stalled worker's late message would do), it is ignored
            from herald.ledger import Finish
            from herald.registry import get_spec

            stale = ledger.cycle(get_spec("t-basic"), finishes=[Finish(
                job_id="job-once", token="job-once#1", outcome=Finish.FAILED, value="late")])
            assert [f.result for f in stale.finished] == ["stale"]
        else:
            wait_for(lambda: ledger.metrics("t-basic").get("completed") == 1)
            time.sleep(0.5)  # the duplicate, if it were to run, would have by now
    assert [e["key"] for e in events("start")] == ["once"]
    assert queue("t-basic").get("job-once").state == "completed"
