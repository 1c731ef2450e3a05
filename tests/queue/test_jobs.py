"""Job ids, deduplication, retries, fencing, deferrals and bad input, on every broker setup."""

from __future__ import annotations

import json
from datetime import timedelta

import pytest

from herald.queue import (
    JobActor,
    QueueSpec,
    current_app,
    enqueue,
    enqueue_many,
    enqueue_many_actors,
    get_spec,
    now_ms,
    queue,
)
from herald.queue.broker import message_for
from herald.queue.errors import InvalidPayload
from herald.queue.ledger import RunEnd, new_token
from herald.queue.worker import running_worker
from tests.queue.conftest import HeraldOn, wait_for
from tests.support.queue.queues import (
    basic,
    brief,
    close_gate,
    events,
    exp,
    fixed,
    nobackoff,
    open_gate,
    other,
    prio,
    stall,
    timed,
)


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


def test_an_id_added_twice_in_one_millisecond_is_a_duplicate_the_second_time(
        herald_on: HeraldOn) -> None:
    # Given one call adding the same job id twice (both adds share its millisecond,
    # as two producers' adds can)
    results = enqueue_many(basic, [({"key": "x"}, {"job_id": "job-x"}),
                                   ({"key": "y"}, {"job_id": "job-x"})])
    # Then only the first was added; the second is reported a duplicate, not taken for
    # the first add sent again after a lost reply
    assert [r.status for r in results] == ["added", "duplicated"]
    assert queue("t-basic").get("job-x").payload["key"] == "x"


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
    assert current_app().queries.metrics("t-basic")["deduplicated"] == 2
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
    ledger = current_app().ledger
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


def test_enqueue_many_actors_adds_several_queues_together_and_they_run(herald_on: HeraldOn) -> None:
    # Given jobs for two queues, one list per actor (a chunk of 3 splits the t-basic list)
    results = enqueue_many_actors([
        (basic, [({"key": f"b{i}"}, {"job_id": f"b{i}"}) for i in range(4)]),
        (other, [({"key": "o0"}, {"job_id": "o0", "priority": 1})]),
    ], chunk_size=3)
    # Then each actor gets its own results, in order
    assert [[(r.status, r.job_id) for r in jobs] for jobs in results] == [
        [("added", f"b{i}") for i in range(4)], [("added", "o0")]]
    assert queue("t-basic").counts()["waiting"] == 4
    assert (queue("t-other").get("o0").state, queue("t-other").get("o0").priority) == \
        ("waiting", 1)
    # and a repeat reports per job, per actor
    again = enqueue_many_actors([(other, [({"key": "o0"}, {"job_id": "o0"})]),
                            (basic, [({"key": "b9"}, {"job_id": "b9"})])])
    assert [[r.status for r in jobs] for jobs in again] == [["duplicated"], ["added"]]
    # When workers run both queues, every job runs once
    with running_worker(["t-basic", "t-other"]):
        wait_for(lambda: len(events("done")) == 6, what="six jobs done")
    assert sorted(e["key"] for e in events("done")) == ["b0", "b1", "b2", "b3", "b9", "o0"]


def test_enqueue_many_actors_validates_every_payload_before_writing(herald_on: HeraldOn) -> None:
    with pytest.raises(InvalidPayload):
        enqueue_many_actors([(basic, [({"key": "fine"}, {"job_id": "g-fine"})]),
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


def test_a_deferral_that_gives_its_start_back_is_not_bounded_by_max_started_attempts(
        herald_on: HeraldOn) -> None:
    # Given t-stall allows 3 starts and a job that defers 5 times with count_start=False
    enqueue(stall, {"key": "not-yet", "defer_ms": 20, "defer_times": 5,
                    "defer_uncounted": True}, job_id="job-not-yet")
    with running_worker(["t-stall"]):
        wait_for(lambda: finished("t-stall", "job-not-yet"), timeout=20)
    # Then it ran a sixth time and completed, with one start counted
    job = queue("t-stall").get("job-not-yet")
    assert (job.state, job.attempts_made, job.attempts_started) == ("completed", 0, 1)
    assert len(events("start")) == 6




def _text(value: object) -> object:
    return value.decode() if isinstance(value, bytes) else value


def assert_stale_and_harmless(herald_on: HeraldOn, name: str, job_id: str,
                              token: str) -> None:
    """Report a run's end under ``token`` every way a worker can (a plain completion, a
    return value, a failed attempt, a permanent failure): each is reported stale and the
    job's record stays exactly as it was."""
    ledger, spec = current_app().ledger, get_spec(name)
    external = herald_on.kind == "rabbitmq"
    before = queue(name).get(job_id)
    finished = ledger.cycle_raw(spec, ledger.cycle_config(spec), done=[(job_id, token)],
                                external=external)[0]
    assert [[_text(field) for field in row] for row in finished] == [[job_id, "stale", 0]]
    for outcome, value in ((RunEnd.COMPLETED, '{"late": true}'), (RunEnd.FAILED, "late"),
                           (RunEnd.PERMANENT, "late")):
        late = RunEnd(job_id=job_id, token=token, outcome=outcome, value=value,
                      next_token=new_token())
        result = ledger.cycle(spec, finishes=[late], external=external)
        assert [(f.job_id, f.result) for f in result.finished] == [(job_id, "stale")]
    assert queue(name).get(job_id) == before


@pytest.mark.parametrize("how", ["q.retry", "retry_failed"])
def test_a_run_from_before_a_retry_cannot_end_the_run_after_it(herald_on: HeraldOn,
                                                               how: str) -> None:
    # Given a job whose first life failed for good (t-other: one attempt)
    open_gate("z", "fail")
    enqueue(other, {"key": "z", "gated": True}, job_id="job-z")
    with running_worker(["t-other"]):
        wait_for(lambda: finished("t-other", "job-z"), what="the first life to fail")
        first_life = events("start")[0]["token"]
        # When it is retried in place and its second life is running
        close_gate("z")
        if how == "q.retry":
            assert queue("t-other").retry("job-z")
        else:
            assert enqueue(other, {"key": "z", "gated": True}, job_id="job-z",
                           retry_failed=True).status == "retried"
        wait_for(lambda: len(events("start")) == 2, what="the second life to start")
        running = queue("t-other").get("job-z")
        assert (running.state, running.attempts_made, running.attempts_started) == (
            "active", 0, 1)
        # Then whatever the first life reports now (a zombie of it) is stale and harmless
        assert_stale_and_harmless(herald_on, "t-other", "job-z", first_life)
        # and the second life still completes normally
        open_gate("z")
        wait_for(lambda: finished("t-other", "job-z"), what="the second life to end")
    job = queue("t-other").get("job-z")
    assert (job.state, job.attempts_made, job.attempts_started, job.return_value) == (
        "completed", 0, 1, {"key": "z"})
    assert [e["key"] for e in events("done")] == ["z"]


def test_a_run_that_outlived_its_lock_cannot_end_the_run_that_took_over(
        herald_on: HeraldOn) -> None:
    # Given a run of a job (1 s lock) that stopped extending its lock: a worker that hung
    enqueue(brief, {"key": "s", "gated": True}, job_id="job-s")
    ledger, spec = current_app().ledger, get_spec("t-brief")
    if herald_on.kind == "rabbitmq":  # claimed the way the RabbitMQ middleware claims
        verdict, (_, _, hung) = ledger.start(spec, "job-s",
                                             queue("t-brief").get("job-s").message_id)
        assert verdict == "start"
    else:  # fetched the way the Redis broker's consumer fetches
        [run] = ledger.cycle(spec, fetch=1).started
        hung = run.token
    lock = ledger.client.zscore(ledger.base("t-brief") + "active", "job-s")
    wait_for(lambda: now_ms() > lock, what="the hung run's lock to run out")
    # When a worker restarts the job and the new run is going
    with running_worker(["t-brief"]):
        wait_for(lambda: events("start"), what="the restart")
        assert queue("t-brief").get("job-s").state == "active"
        # Then the hung run's end, arriving now, is stale and harmless
        assert_stale_and_harmless(herald_on, "t-brief", "job-s", hung)
        open_gate("s")
        wait_for(lambda: finished("t-brief", "job-s"), what="the new run to end")
    job = queue("t-brief").get("job-s")
    assert (job.state, job.attempts_started, job.return_value) == (
        "completed", 2, {"key": "s"})
    assert current_app().queries.metrics("t-brief")["stalled"] == 1


def test_a_duplicated_message_runs_its_job_once(herald_on: HeraldOn) -> None:
    if herald_on.kind != "rabbitmq":
        pytest.skip("only RabbitMQ delivers a job's message more than once")
    # Given a job, and RabbitMQ delivering its message a second time (t-prio runs one job
    # at a time, in order)
    enqueue(prio, {"key": "once"}, job_id="job-once")
    current = queue("t-prio").get("job-once").message_id
    current_app().broker.publish(message_for("t-prio", "prio", {"key": "once"}, job_id="job-once",
                                     token=current), priority=5)
    # and a sentinel job queued behind both
    enqueue(prio, {"key": "sentinel"}, job_id="job-sentinel")
    with running_worker(["t-prio"]):
        wait_for(lambda: finished("t-prio", "job-sentinel"), what="the sentinel")
    # Then the job ran once before the sentinel, and never again
    assert [e["key"] for e in events("start")] == ["once", "sentinel"]
    assert queue("t-prio").get("job-once").attempts_started == 1


def _start_attempt(herald_on: HeraldOn, spec: QueueSpec, job_id: str, message_id: str,
                   ) -> str:
    """Start the job's next attempt as a worker does (the Redis broker's consumer: once
    it is due); returns the run's token."""
    ledger = current_app().ledger
    if herald_on.kind == "rabbitmq":  # RabbitMQ holds the message until it is due
        verdict, (_, _, token) = ledger.start(spec, job_id, message_id)
        assert verdict == "start"
        return token
    started = wait_for(lambda: ledger.cycle(spec, fetch=1).started, timeout=10,
                       what="the attempt to fall due")
    assert [run.id for run in started] == [job_id]
    return started[0].token


@pytest.mark.parametrize(("target", "delays"), [(exp, [100, 200, 400]),
                                                (fixed, [150, 150, 150]),
                                                (nobackoff, [0, 0, 0])],
                         ids=["exponential", "fixed", "none"])
def test_each_failed_attempt_is_scheduled_after_the_queues_backoff(
        herald_on: HeraldOn, target: JobActor, delays: list[int]) -> None:
    # Given a job of a queue with 4 attempts
    name = target.queue
    ledger, spec = current_app().ledger, get_spec(name)
    delayed = ledger.base(name) + "delayed"
    external = herald_on.kind == "rabbitmq"
    enqueue(target, {"key": "b"}, job_id="job-b")
    message = queue(name).get("job-b").message_id or ""
    for attempt, delay in enumerate(delays, start=1):
        # When an attempt fails
        token = _start_attempt(herald_on, spec, "job-b", message)
        message = new_token()
        before = now_ms()
        [end] = ledger.cycle(spec, external=external, finishes=[RunEnd(
            job_id="job-b", token=token, outcome=RunEnd.FAILED, value=f"attempt {attempt}",
            next_token=message)]).finished
        after = now_ms()
        # Then the next one is scheduled the backoff after the failure, to the millisecond
        # of the round trip that reported it
        assert end.result == "retry"
        assert before + delay <= end.run_at_ms <= after + delay, (attempt, delay)
        job = queue(name).get("job-b")
        assert (job.attempts_made, job.failed_reason) == (attempt, f"attempt {attempt}")
        if delay or external:  # scheduled (RabbitMQ: the broker holds the message till then)
            assert ledger.client.zscore(delayed, "job-b") == end.run_at_ms
            assert job.state == "delayed"
        else:  # no backoff: waiting again at once
            assert ledger.client.zscore(delayed, "job-b") is None
            assert job.state == "waiting"
    # and the last attempt's failure is final
    token = _start_attempt(herald_on, spec, "job-b", message)
    [end] = ledger.cycle(spec, external=external, finishes=[RunEnd(
        job_id="job-b", token=token, outcome=RunEnd.FAILED, value="attempt 4")]).finished
    assert end.result == "failed"
    assert (queue(name).get("job-b").state, queue(name).get("job-b").attempts_made) == (
        "failed", 4)
