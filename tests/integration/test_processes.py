"""Worker processes: crashes, long jobs, global rate limits and graceful shutdown."""

from __future__ import annotations

import os
import signal
import time

from herald.jobs import enqueue, enqueue_many, queue
from tests.integration.conftest import HeraldOn, wait_for
from tests.integration.lanes import basic, events, limited, stall


def stop(process) -> None:
    if process.poll() is None:
        process.kill()
    process.wait(timeout=10)


def test_killed_worker_job_restarts_after_its_lock_expires(herald_on: HeraldOn) -> None:
    # Given a worker running a job on a lane with a 2 s lock
    enqueue(stall, {"key": "crash", "sleep_s": 1.5}, job_id="job-crash")
    first = herald_on.spawn_worker("t-stall")
    try:
        wait_for(lambda: events("start"), timeout=30, what="first start")
        # When the worker is killed mid-job
        os.kill(first.pid, signal.SIGKILL)
        first.wait(timeout=10)
        killed_at = time.time()
        second = herald_on.spawn_worker("t-stall")
        try:
            # Then another worker restarts it once the lock expired, and it completes
            wait_for(lambda: queue("t-stall").get("job-crash").state == "completed",
                     timeout=40, what="restarted job to complete")
        finally:
            stop(second)
    finally:
        stop(first)
    job = queue("t-stall").get("job-crash")
    assert job.attempts_started == 2
    assert job.attempts_made == 0
    restart = events("start")[1]
    assert restart["t"] >= killed_at - 1.5  # not before the first lock could expire


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
