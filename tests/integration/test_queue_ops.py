"""Priority, delays, retention and the operator's queue operations."""

from __future__ import annotations

import time
from datetime import timedelta

from herald.jobs import enqueue, enqueue_many, queue
from herald.worker import running_worker
from tests.integration.conftest import HeraldOn, wait_for
from tests.integration.lanes import basic, events, kept, other, prio


def test_urgent_jobs_overtake_a_normal_backlog(herald_on: HeraldOn) -> None:
    # Given 2,000 normal jobs waiting on a lane of concurrency 1
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
    added = time.time()
    enqueue(basic, {"key": "later"}, job_id="job-late", delay=timedelta(seconds=2))
    assert queue("t-basic").get("job-late").state == "delayed"
    assert queue("t-basic").counts()["delayed"] == 1
    with running_worker(["t-basic"]):
        wait_for(lambda: events("done"), timeout=10)
    assert events("start")[0]["t"] - added >= 2.0


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
    assert q.drain() >= 1 and q.counts()["delayed"] == 0
    assert q.clean("failed", older_than=timedelta(0)) == 3
    q.obliterate()
    assert sum(q.counts().values()) == 0


def test_pause_stops_one_queue_while_others_continue(herald_on: HeraldOn) -> None:
    queue("t-basic").pause()
    enqueue(basic, {"key": "held"}, job_id="held")
    enqueue(other, {"key": "flows"}, job_id="flows")
    with running_worker(["t-basic", "t-other"]):
        wait_for(lambda: [e["key"] for e in events("done")] == ["flows"])
        time.sleep(0.5)  # give the paused lane every chance to (wrongly) run
        assert queue("t-basic").get("held").state in ("paused", "waiting")
        assert queue("t-basic").counts()["paused"] == 1 or herald_on.kind == "rabbitmq"
        assert [e["key"] for e in events("done")] == ["flows"]
        queue("t-basic").resume()
        wait_for(lambda: len(events("done")) == 2, timeout=10)
