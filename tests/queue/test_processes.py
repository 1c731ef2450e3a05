"""Worker processes: crashes, long jobs, global rate limits and graceful shutdown."""

from __future__ import annotations

import os
import signal
import threading
import time

from herald.queue import current_app, enqueue, enqueue_many, now_ms, queue
from herald.queue.worker import QueueWorker, running_worker
from tests.queue.conftest import HeraldOn, wait_for
from tests.support.queue.queues import basic, brief, events, limited, open_gate, stall


def stop(process) -> None:
    if process.poll() is None:
        process.kill()
    process.wait(timeout=10)


def test_killed_worker_job_restarts_after_its_lock_expires(herald_on: HeraldOn) -> None:
    # Given a worker running a job on a queue with a 2 s lock
    enqueue(stall, {"key": "crash", "sleep_s": 1.5}, job_id="job-crash")
    first = herald_on.spawn_worker("t-stall")
    try:
        wait_for(lambda: events("start"), timeout=30, what="first start")
        # When the worker is killed mid-job, its last extension of the lock standing
        os.kill(first.pid, signal.SIGKILL)
        first.wait(timeout=10)
        ledger = current_app().ledger
        lock_deadline = ledger.client.zscore(ledger.base("t-stall") + "active", "job-crash")
        assert lock_deadline is not None
        second = herald_on.spawn_worker("t-stall")
        try:
            # Then another worker restarts it once the lock expired, and it completes
            wait_for(lambda: queue("t-stall").get("job-crash").state == "completed",
                     timeout=40, what="restarted job to complete")
        finally:
            stop(second)
    finally:
        stop(first)
    # Then the restart waited for the killed run's lock and counts as a start
    job = queue("t-stall").get("job-crash")
    assert job.attempts_started == 2
    assert job.attempts_made == 0
    assert job.processed_at.timestamp() * 1000 >= lock_deadline
    assert [e["attempts_started"] for e in events("start")] == [1, 2]


def test_long_job_keeps_its_lock(herald_on: HeraldOn) -> None:
    # A 5 s job on a 2 s lock must not be mistaken for a stalled one
    enqueue(stall, {"key": "slow", "sleep_s": 5}, job_id="job-slow")
    worker = herald_on.spawn_worker("t-stall")
    try:
        wait_for(lambda: queue("t-stall").get("job-slow").state == "completed", timeout=40)
    finally:
        stop(worker)
    assert queue("t-stall").get("job-slow").attempts_started == 1
    assert len(events("start")) == 1


def test_rate_limit_holds_across_two_processes(herald_on: HeraldOn) -> None:
    # Given t-limited allows 10 jobs per 2 s, served by two worker processes
    enqueue_many(limited, [{"key": f"l{i}"} for i in range(30)])
    workers = [herald_on.spawn_worker("t-limited"), herald_on.spawn_worker("t-limited")]
    try:
        wait_for(lambda: len(events("done")) == 30, timeout=60, what="30 jobs")
        # a job's record is finished just after its body returns: wait for that too
        wait_for(lambda: queue("t-limited").counts()["completed"] == 30, timeout=10,
                 what="30 completed records")
    finally:
        for worker in workers:
            stop(worker)
    starts = sorted(e["t"] for e in events("start"))
    # Then 30 jobs took at least two further windows: >= 4 s from first to last start
    assert starts[-1] - starts[0] >= 3.9
    assert len({e["pid"] for e in events("start")}) == 2
    counts = queue("t-limited").counts()
    assert (counts["completed"], counts["failed"]) == (30, 0)
    assert all(queue("t-limited").jobs("completed", per_page=50)[i].attempts_made == 0
               for i in range(30))


def test_sigterm_lets_the_running_job_finish(herald_on: HeraldOn) -> None:
    # Given a worker in the middle of a 3-second job
    enqueue(basic, {"key": "drain", "sleep_s": 3}, job_id="job-drain")
    worker = herald_on.spawn_worker("t-basic")
    try:
        wait_for(lambda: events("start"), timeout=30)
        # When it is sent SIGTERM, and a second signal during the drain
        worker.send_signal(signal.SIGTERM)
        time.sleep(0.3)
        worker.send_signal(signal.SIGTERM)
        code = worker.wait(timeout=30)
    finally:
        stop(worker)
    # Then the job completed before the process exited, cleanly
    assert code == 0
    assert queue("t-basic").get("job-drain").state == "completed"
    assert b"ignored" in worker.stderr.read()


def test_a_run_longer_than_its_1s_lock_keeps_it_and_is_never_restarted(
        herald_on: HeraldOn) -> None:
    # Given a queue with a 1 s lock and a job that runs 3 s
    enqueue(brief, {"key": "long", "sleep_s": 3}, job_id="job-long")
    ledger = current_app().ledger
    active = ledger.base("t-brief") + "active"
    left: list[float] = []

    def watch_the_lock() -> bool:
        deadline = ledger.client.zscore(active, "job-long")
        if deadline is not None:
            left.append(deadline - now_ms())
        job = queue("t-brief").get("job-long")
        return job.state in ("completed", "failed")

    # When a worker runs it
    with running_worker(["t-brief"]):
        wait_for(watch_the_lock, timeout=30, every=0.01, what="the long job to end")
    # Then its lock never came near running out (the worker extends it every third of
    # the lock), so nothing could take it for stalled; it ran once and completed
    assert len(left) > 100
    assert min(left) > 1000 / 3, min(left)
    job = queue("t-brief").get("job-long")
    assert (job.state, job.attempts_started) == ("completed", 1)
    assert [e["key"] for e in events("start")] == ["long"]


def test_jobs_fetched_but_not_started_at_shutdown_are_handed_back(herald_on: HeraldOn,
                                                                   ) -> None:
    # Given a worker (t-basic: 4 slots) stopping while one run still goes on, its idle
    # threads gone
    enqueue(basic, {"key": "busy", "gated": True}, job_id="job-busy")
    worker = QueueWorker(["t-basic"])
    worker.start()
    stopping = threading.Thread(target=worker.stop)
    try:
        wait_for(lambda: events("start"), what="the busy run")
        stopping.start()
        wait_for(lambda: sum(t.is_alive() for t in worker.worker.workers) == 1,
                 what="the idle threads to stop")
        # When jobs arrive and its consumer, still up, fetches them into free slots
        enqueue_many(basic, [({"key": f"late{i}"}, {"job_id": f"late{i}"})
                             for i in range(3)])
        if herald_on.kind != "rabbitmq":  # the ledger sees the Redis broker's fetches
            wait_for(lambda: queue("t-basic").counts()["active"] == 4,
                     what="the late jobs fetched")
        else:  # RabbitMQ hands them to the consumer: none left ready in the queue
            wait_for(lambda: _ready("t-basic") == 0, what="the late jobs delivered")
    finally:
        open_gate("busy")
        stopping.join(timeout=60)
    assert not stopping.is_alive()
    # Then none of them started, and each is waiting again, no attempt spent
    assert [e["key"] for e in events("start")] == ["busy"]
    for i in range(3):
        job = queue("t-basic").get(f"late{i}")
        assert (job.state, job.attempts_started) == ("waiting", 0), job
    # and another worker runs each once, as a first attempt
    with running_worker(["t-basic"]):
        wait_for(lambda: queue("t-basic").counts()["completed"] == 4, what="all four done")
    assert sorted(e["key"] for e in events("start")) == ["busy", "late0", "late1", "late2"]
    assert [queue("t-basic").get(f"late{i}").attempts_started for i in range(3)] == [1, 1, 1]


def _ready(name: str) -> int:
    """Messages of queue ``name`` RabbitMQ holds ready (not handed to a consumer)."""

    return current_app().broker.get_queue_message_counts(name)[0]
