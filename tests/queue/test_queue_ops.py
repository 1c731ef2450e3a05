"""Priority, delays, retention and the operator's queue operations."""

from __future__ import annotations

import collections
import dataclasses
from datetime import timedelta

from herald.queue import Keep, enqueue, enqueue_many, now_ms, queue, running_worker
from tests.queue.conftest import HeraldOn, wait_for
from tests.support.queue.queues import aged, basic, events, kept, other, prio, registry


def test_urgent_jobs_overtake_a_normal_backlog(herald_on: HeraldOn) -> None:
    # Given 2,000 normal jobs waiting on a queue of concurrency 1
    enqueue_many(prio, [({"key": f"n{i}"}, {"priority": 5}) for i in range(2000)])
    with running_worker(["t-prio"]):
        wait_for(lambda: len(events("start")) >= 5, what="backlog to start")
        # When 10 urgent jobs are added afterwards
        enqueue_many(prio, [({"key": f"u{i}"}, {"priority": 1}) for i in range(10)])
        wait_for(lambda: sum(e["key"].startswith("u") for e in events("done")) == 10)
    # Then all of them started before 200 of the backlog had
    order = [e["key"] for e in events("start")]
    last_urgent = max(i for i, key in enumerate(order) if key.startswith("u"))
    assert sum(key.startswith("n") for key in order[:last_urgent]) < 200
    # and jobs of one priority start first in, first out
    normals = [int(key[1:]) for key in order if key.startswith("n")]
    assert normals == sorted(normals)


def test_delayed_job_never_starts_early(herald_on: HeraldOn) -> None:
    enqueue(basic, {"key": "later"}, job_id="job-late", delay=timedelta(seconds=2))
    job = queue("t-basic").get("job-late")
    assert job.state == "delayed" and queue("t-basic").counts()["delayed"] == 1
    assert job.run_at - job.created_at >= timedelta(milliseconds=1990)
    with running_worker(["t-basic"]):
        wait_for(lambda: events("done"), timeout=10)
    assert queue("t-basic").get("job-late").processed_at >= job.run_at


def test_retention_prunes_by_count_and_on_clean(redis_only: HeraldOn) -> None:
    # Given t-kept keeps 5 completed and 3 failed records
    enqueue_many(kept, [({"key": f"ok{i}"}, {"job_id": f"ok{i}"}) for i in range(12)])
    enqueue_many(kept, [({"key": f"bad{i}", "permanent": True}, {"job_id": f"bad{i}"})
                        for i in range(6)])
    with running_worker(["t-kept"]):
        wait_for(lambda: len(events("start")) == 18)
        wait_for(lambda: queue("t-kept").counts()["active"] == 0)
    counts = queue("t-kept").counts()
    assert (counts["completed"], counts["failed"]) == (5, 3)
    # the newest records survive
    assert queue("t-kept").get("ok11") is not None and queue("t-kept").get("ok0") is None
    assert queue("t-kept").clean("completed", older_than=timedelta(0)) == 5
    assert queue("t-kept").counts()["completed"] == 0


def test_listing_counts_retry_remove_drain_clean_obliterate(herald_on: HeraldOn) -> None:
    q = queue("t-basic")
    for i in range(5):
        enqueue(basic, {"key": f"bad{i}", "permanent": True}, job_id=f"bad{i}")
    with running_worker(["t-basic"]):
        wait_for(lambda: q.counts()["failed"] == 5)
    # newest first, paged from 1
    page1, page2 = q.jobs("failed", page=1, per_page=3), q.jobs("failed", page=2, per_page=3)
    listed = page1 + page2
    assert (len(page1), len(page2)) == (3, 2)
    assert sorted(j.id for j in listed) == [f"bad{i}" for i in range(5)]
    finish_times = [j.finished_at for j in listed]
    assert finish_times == sorted(finish_times, reverse=True)
    # retry acts on failed jobs only
    enqueue(basic, {"key": "later"}, job_id="later", delay=timedelta(hours=1))
    assert not q.retry("later")
    assert q.retry("bad0")
    assert q.get("bad0").state in ("waiting", "active")
    # remove, drain, clean, obliterate
    assert q.remove("bad1") and q.get("bad1") is None
    # drain takes the waiting (bad0, retried) and the delayed ("later"), not the failed
    assert q.drain() == 2
    assert q.get("bad0") is None and q.get("later") is None
    assert (q.counts()["waiting"], q.counts()["delayed"], q.counts()["failed"]) == (0, 0, 3)
    assert q.clean("failed", older_than=timedelta(0)) == 3
    q.obliterate()
    assert sum(q.counts().values()) == 0


def test_a_paused_queue_runs_nothing_until_resumed_then_in_priority_order(
        herald_on: HeraldOn) -> None:
    # Given a paused one-at-a-time queue: normal jobs, then urgent ones added after them,
    # and an urgent job delayed by two seconds
    q = queue("t-prio")
    q.pause()
    enqueue_many(prio, [({"key": f"n{i}"}, {"job_id": f"n{i}"}) for i in range(4)])
    enqueue_many(prio, [({"key": f"u{i}"}, {"job_id": f"u{i}", "priority": 1})
                        for i in range(3)])
    enqueue(prio, {"key": "d0"}, job_id="d0", priority=1, delay=timedelta(seconds=2))
    run_at = q.get("d0").run_at
    with running_worker(["t-prio", "t-other"]):
        # When a job of another queue, added after them, has run
        enqueue(other, {"key": "sentinel"})
        wait_for(lambda: "sentinel" in [e["key"] for e in events("done")],
                 what="the other queue's job")
        # Then none of the paused queue's jobs started, and they count as paused
        assert [e["key"] for e in events("start")] == ["sentinel"]
        counts = q.counts()
        assert (counts["paused"] + counts["delayed"], counts["waiting"]) == (8, 0)
        assert q.get("n0").state == "paused"
        # When the delayed job fell due during the pause, and the queue is resumed
        wait_for(lambda: now_ms() > run_at.timestamp() * 1000 + 100, timeout=5,
                 what="the delayed job to fall due")
        q.resume()
        wait_for(lambda: len(events("done")) == 9, timeout=20, what="the resumed jobs")
    # Then the urgent jobs ran first (the delayed one after those added before it), then
    # the normal ones in the order they were added
    assert [e["key"] for e in events("start")][1:] == ["u0", "u1", "u2", "d0",
                                                       "n0", "n1", "n2", "n3"]


def test_clean_delayed_removes_the_old_delayed_jobs_only(redis_only: HeraldOn) -> None:
    q = queue("t-basic")
    # Given two delayed jobs created two seconds apart, one holding a dedup id, and a
    # waiting job
    enqueue(basic, {"key": "old"}, job_id="old", delay=timedelta(hours=1), dedup_id="d-old")
    old_created = q.get("old").created_at
    wait_for(lambda: now_ms() - old_created.timestamp() * 1000 > 2000, timeout=5,
             what="the first job to be two seconds old")
    enqueue(basic, {"key": "young"}, job_id="young", delay=timedelta(hours=1))
    enqueue(basic, {"key": "now"}, job_id="now")
    # When the delayed jobs older than a second are cleaned
    assert q.clean("delayed", older_than=timedelta(seconds=1)) == 1
    # Then the old one is gone (its dedup id released), the young one and the waiting
    # one stay
    assert q.get("old") is None
    assert q.get("young").state == "delayed" and q.get("now").state == "waiting"
    assert enqueue(basic, {"key": "again"}, job_id="again", dedup_id="d-old").status == "added"


def test_prune_applies_age_and_count_retention_to_a_quiet_queue(
        redis_only: HeraldOn) -> None:
    q = queue("t-aged")  # keeps completed records one second, failed ones ten at most
    # Given two completed and three failed records, and a waiting job
    enqueue_many(aged, [({"key": f"ok{i}"}, {"job_id": f"ok{i}"}) for i in range(2)])
    enqueue_many(aged, [({"key": f"bad{i}", "permanent": True}, {"job_id": f"bad{i}"})
                        for i in range(3)])
    with running_worker(["t-aged"]):
        wait_for(lambda: (q.counts()["completed"], q.counts()["failed"]) == (2, 3))
    enqueue(aged, {"key": "waits"}, job_id="waits")
    # When the completed ones are older than a second, with no job finishing since
    wait_for(lambda: all(now_ms() - q.get(f"ok{i}").finished_at.timestamp() * 1000 > 1000
                         for i in range(2)), timeout=5, what="a second to pass")
    # Then prune removes exactly them
    assert q.prune() == 2
    assert (q.get("ok0"), q.get("ok1")) == (None, None)
    failed = {j.id: j.finished_at for j in q.jobs("failed")}
    assert set(failed) == {"bad0", "bad1", "bad2"}
    assert q.get("waits").state == "waiting"
    # and when the retention is tightened to one failed record, prune keeps the newest
    spec = registry.spec("t-aged")
    registry.declare(dataclasses.replace(
        spec, retention=dataclasses.replace(spec.retention, failed=Keep(count=1))))
    try:
        assert queue("t-aged").prune() == 2
    finally:
        registry.declare(spec)
    [kept_one] = q.jobs("failed")
    assert failed[kept_one.id] == max(failed.values())
    assert q.get("waits").state == "waiting"


def test_retry_all_failed_retries_each_failed_job_once(herald_on: HeraldOn) -> None:
    # Given 600 failed jobs (more than one page of the failed set)
    q = queue("t-other")
    enqueue_many(other, [({"key": f"bad{i}", "permanent": True}, {"job_id": f"bad{i}"})
                         for i in range(600)])
    with running_worker(["t-other"]):
        wait_for(lambda: q.counts()["failed"] == 600, timeout=60, what="600 failures")
        # When all are retried while a worker runs (they fail again at once)
        assert q.retry_all_failed() == 600
        # Then each runs once more: a job added behind them at the lowest priority runs
        # after every retried one, and none ran a third time
        enqueue(other, {"key": "sentinel"}, priority=10)
        wait_for(lambda: "sentinel" in [e["key"] for e in events("done")], timeout=60,
                 what="the job behind them")
        wait_for(lambda: q.counts()["failed"] == 600, timeout=30, what="the retries to fail")
    starts = collections.Counter(e["key"] for e in events("start"))
    assert starts.pop("sentinel") == 1
    assert set(starts.values()) == {2} and len(starts) == 600
    assert q.retry_all_failed() == 600 and q.counts()["failed"] == 0
