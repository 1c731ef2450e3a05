"""Group limits: at most N active jobs of one group key across every worker process, while
the jobs of other groups go on (docs/queue.md#groups).

``t-groups`` (tests/support/queue/group_queues.py) lets one ``sysco`` job run at a time;
``costco`` is unlimited. Every run records its start and end, so a test reads when each
job held its group's slot.
"""

from __future__ import annotations

import contextlib
import dataclasses
import itertools
import math
import os
import signal
import subprocess
import threading
from collections.abc import Iterator
from datetime import timedelta

import pytest

from herald.queue import (
    InvalidPayload,
    QueueSpec,
    current_app,
    enqueue,
    enqueue_many,
    get_spec,
    queue,
)
from herald.queue.ledger import GROUP_WAIT_MS, RunEnd
from herald.queue.worker import QueueWorker, running_worker
from tests.queue.conftest import HeraldOn, wait_for
from tests.support.processes import spawn_herald
from tests.support.queue.group_queues import QUEUE, grouped
from tests.support.queue.queues import events, open_gate

Span = tuple[float, float, str, int]


def spawn_worker() -> subprocess.Popen[bytes]:
    """A real ``herald worker`` process running the test queue."""
    return spawn_herald("worker", "--import", "tests.support.queue.group_queues", QUEUE)


def stop(process: subprocess.Popen[bytes]) -> None:
    if process.poll() is None:
        process.kill()
    process.wait(timeout=10)


@contextlib.contextmanager
def worker_process() -> Iterator[subprocess.Popen[bytes]]:
    process = spawn_worker()
    try:
        yield process
    finally:
        stop(process)


def add(key: str, group: str | None, **step: object) -> None:
    """Add one job of ``group`` (None: no group) whose id and key are ``key``."""
    enqueue(grouped, {"key": key, **step}, job_id=key, group=group)


def spans(prefix: str) -> list[Span]:
    """(start, end, key, pid) of every run of the jobs whose key starts with ``prefix``,
    by start; a run that never ended (its process was killed) ends at infinity."""
    # a process runs one job's runs one after the other: its end closes its last start
    opened: dict[tuple[str, int], float] = {}
    ended: list[Span] = []
    for event in events():
        key, pid = event["key"], event["pid"]
        if not key.startswith(prefix):
            continue
        if event["kind"] == "start":
            opened[key, pid] = event["t"]
        elif event["kind"] == "end":
            ended.append((opened.pop((key, pid)), event["t"], key, pid))
    ended += [(t, math.inf, key, pid) for (key, pid), t in opened.items()]
    return sorted(ended)


def assert_one_at_a_time(runs: list[Span]) -> None:
    for (_, ended, first, _), (started, _, second, _) in itertools.pairwise(runs):
        assert started >= ended, f"{second} started while {first} still ran"


def state(key: str) -> str | None:
    job = queue(QUEUE).get(key)
    return None if job is None else job.state


def done(*keys: str) -> bool:
    return all(state(key) == "completed" for key in keys)


def started_keys() -> list[str]:
    return [event["key"] for event in events("start")]


def test_a_group_limited_to_one_runs_one_job_at_a_time_across_two_processes(
        herald_on: HeraldOn) -> None:
    # Given eight slow sysco jobs (limit 1) queued ahead of eight costco jobs (no limit)
    enqueue_many(grouped, [({"key": f"s{i}", "sleep_s": 0.2}, {"job_id": f"s{i}",
                                                              "group": "sysco"})
                           for i in range(8)])
    enqueue_many(grouped, [({"key": f"c{i}", "sleep_s": 0.2}, {"job_id": f"c{i}",
                                                              "group": "costco"})
                           for i in range(8)])
    # When two worker processes, four slots each, run the queue
    with worker_process(), worker_process():
        wait_for(lambda: queue(QUEUE).counts()["completed"] == 16, timeout=60,
                 what="all sixteen jobs")
    # Then no two sysco runs overlapped
    sysco = spans("s")
    assert len(sysco) == 8
    assert_one_at_a_time(sysco)
    # while costco runs went on beside them and beside each other
    costco = spans("c")
    assert any(c[0] < s[1] and s[0] < c[1] for c in costco for s in sysco)
    assert any(a[0] < b[1] and b[0] < a[1] for a, b in itertools.combinations(costco, 2))
    # and no slot is left held
    assert queue(QUEUE).group_counts() == {}


def test_a_slow_sysco_job_holds_back_sysco_in_the_other_process_but_not_costco(
        herald_on: HeraldOn) -> None:
    # Given a worker whose four slots are full: a slow sysco upload and three other jobs
    add("s-slow", "sysco", gated=True)
    for i in range(3):
        add(f"busy{i}", "other", gated=True)
    with worker_process() as first:
        wait_for(lambda: len(events("start")) == 4, timeout=30, what="the first worker full")
        assert {e["pid"] for e in events("start")} == {first.pid}
        # and a second worker, up: a costco job (none of the first's slots is free) runs
        with worker_process() as second:
            add("c-first", "costco")
            wait_for(lambda: done("c-first"), timeout=30, what="the second worker")
            # When sysco jobs are queued ahead of costco ones
            for i in range(4):
                add(f"s-next{i}", "sysco")
            for i in range(4):
                add(f"c-next{i}", "costco")
            # Then the costco jobs complete while the sysco upload still holds its slot
            wait_for(lambda: done(*(f"c-next{i}" for i in range(4))), timeout=30,
                     what="the costco jobs behind the sysco ones")
            assert state("s-slow") == "active"
            # and the second worker, free, started none of the sysco jobs
            assert not [k for k in started_keys() if k.startswith("s-next")]
            assert {e["pid"] for e in events("start") if e["key"].startswith("c-")} == {
                second.pid}
            # When the upload ends, the sysco jobs run, one at a time
            open_gate("s-slow")
            for i in range(3):
                open_gate(f"busy{i}")
            wait_for(lambda: done("s-slow", *(f"s-next{i}" for i in range(4))), timeout=30,
                     what="the sysco jobs")
    assert_one_at_a_time(spans("s-"))
    assert queue(QUEUE).group_counts() == {}


def test_failures_and_deferrals_give_the_slot_back(herald_on: HeraldOn) -> None:
    # Given sysco jobs: one failing once then succeeding, one deferring once, one failing
    # for good, one fine
    add("s-retry", "sysco", fail_times=1)
    add("s-defer", "sysco", defer_ms=200, defer_times=1)
    add("s-perm", "sysco", permanent=True)
    add("s-last", "sysco")
    # When a worker runs them
    with running_worker([QUEUE]):
        wait_for(lambda: done("s-retry", "s-defer", "s-last") and state("s-perm") == "failed",
                 what="every sysco job to end")
    # Then each failed attempt, deferral and failure freed the slot, one run at a time
    assert queue(QUEUE).get("s-retry").attempts_made == 1
    assert queue(QUEUE).get("s-defer").attempts_started == 2
    runs = spans("s-")
    assert len(runs) == 6
    assert_one_at_a_time(runs)
    assert queue(QUEUE).group_counts() == {}


def test_a_killed_workers_job_recovers_and_its_group_is_not_stuck(herald_on: HeraldOn,
                                                                   ) -> None:
    # Given a worker in the middle of a sysco job, another sysco job held back behind it
    add("s-crash", "sysco", gated=True)
    first = spawn_worker()
    try:
        wait_for(lambda: state("s-crash") == "active", timeout=30, what="the first worker")
        add("s-next", "sysco")
        add("c-sentinel", "costco")
        wait_for(lambda: done("c-sentinel"), what="the costco job behind it")
        assert started_keys() == ["s-crash", "c-sentinel"]
        # When the worker is killed mid-job
        os.kill(first.pid, signal.SIGKILL)
        first.wait(timeout=10)
    finally:
        stop(first)
    open_gate("s-crash")
    # Then another worker restarts it once its lock ran out, and the group goes on
    with worker_process():
        wait_for(lambda: done("s-crash", "s-next"), timeout=40, what="both sysco jobs")
    assert queue(QUEUE).get("s-crash").attempts_started == 2
    assert_one_at_a_time([run for run in spans("s-") if run[3] != first.pid])
    assert queue(QUEUE).group_counts() == {}


def test_a_job_handed_back_unstarted_at_shutdown_gives_its_slot_back(herald_on: HeraldOn,
                                                                       ) -> None:
    # Given a worker stopping while an ungrouped run still goes on, its idle threads gone
    add("busy", None, gated=True)
    worker = QueueWorker([QUEUE])
    worker.start()
    stopping = threading.Thread(target=worker.stop)
    try:
        wait_for(lambda: state("busy") == "active", what="the busy run")
        stopping.start()
        wait_for(lambda: sum(t.is_alive() for t in worker.worker.workers) == 1,
                 what="the idle threads to stop")
        # When a sysco job arrives and its consumer, still up, takes it into a free slot
        add("s-late", "sysco")
        if herald_on.kind != "rabbitmq":  # the Redis broker's fetch takes the slot
            wait_for(lambda: queue(QUEUE).group_counts() == {"sysco": 1},
                     what="the sysco job fetched")
        else:  # RabbitMQ's claim comes only when a thread runs it: it never does here
            wait_for(lambda: current_app().broker.get_queue_message_counts(QUEUE)[0] == 0,
                     what="the sysco job delivered")
    finally:
        open_gate("busy")
        stopping.join(timeout=60)
    assert not stopping.is_alive()
    # Then it was handed back unstarted, its slot free: another worker runs it, and the
    # sysco job after it
    assert (state("s-late"), queue(QUEUE).group_counts()) == ("waiting", {})
    add("s-after", "sysco")
    with running_worker([QUEUE]):
        wait_for(lambda: done("s-late", "s-after"), what="both sysco jobs")
    assert_one_at_a_time(spans("s-"))


def test_held_back_jobs_are_waiting_and_can_be_removed_or_drained(herald_on: HeraldOn,
                                                                    ) -> None:
    q = queue(QUEUE)
    add("s-hold", "sysco", gated=True)
    with running_worker([QUEUE]):
        wait_for(lambda: state("s-hold") == "active", what="the sysco job holding the slot")
        # Given three sysco jobs held back behind it (a costco job after them ran)
        for key in ("s-a", "s-b", "s-c"):
            add(key, "sysco")
        add("c-sentinel", "costco")
        wait_for(lambda: done("c-sentinel"), what="the costco job behind them")
        # Then every reader sees them waiting
        assert q.counts()["waiting"] == 3
        assert sorted(job.id for job in q.jobs("waiting")) == ["s-a", "s-b", "s-c"]
        assert [job.id for job in q.jobs("waiting", page=2, per_page=2)] == ["s-a"]
        assert (q.get("s-b").state, q.get("s-b").group) == ("waiting", "sysco")
        # When one is removed and the others drained
        assert q.remove("s-a")
        assert q.drain() == 2
        # Then none is left, anywhere, and the group still runs its next job
        assert q.counts()["waiting"] == 0 and q.jobs("waiting") == []
        open_gate("s-hold")
        add("s-after", "sysco")
        wait_for(lambda: done("s-hold", "s-after"), what="the sysco jobs after the removal")
    assert sorted(started_keys()) == ["c-sentinel", "s-after", "s-hold"]
    assert [q.get(key) for key in ("s-a", "s-b", "s-c")] == [None] * 3
    assert q.group_counts() == {}


def test_held_back_jobs_stay_paused_with_their_queue_and_run_after_resume(
        herald_on: HeraldOn) -> None:
    q = queue(QUEUE)
    add("s-hold", "sysco", gated=True)
    with running_worker([QUEUE]):
        wait_for(lambda: state("s-hold") == "active", what="the sysco job holding the slot")
        # Given two sysco jobs held back behind it
        add("s-a", "sysco")
        add("s-b", "sysco")
        add("c-sentinel", "costco")
        wait_for(lambda: done("c-sentinel"), what="the costco job behind them")
        # When the queue is paused, they show as paused; the running job ends meanwhile
        q.pause()
        assert (q.counts()["paused"], q.counts()["waiting"]) == (2, 0)
        assert sorted(job.id for job in q.jobs("paused")) == ["s-a", "s-b"]
        open_gate("s-hold")
        wait_for(lambda: done("s-hold"), what="the running job to end")
        assert (q.counts()["paused"], q.counts()["active"]) == (2, 0)
        # Then after resume both run, one at a time
        q.resume()
        wait_for(lambda: done("s-a", "s-b"), what="the held-back jobs after resume")
    assert_one_at_a_time(spans("s-"))
    assert q.group_counts() == {}


def test_a_held_back_job_keeps_its_place_by_priority_then_arrival(redis_only: HeraldOn,
                                                                   ) -> None:
    add("s-hold", "sysco", gated=True)
    with running_worker([QUEUE]):
        wait_for(lambda: state("s-hold") == "active", what="the sysco job holding the slot")
        # Given two normal sysco jobs, then an urgent one, held back behind it
        add("s-n1", "sysco")
        add("s-n2", "sysco")
        enqueue(grouped, {"key": "s-urgent"}, job_id="s-urgent", group="sysco", priority=1)
        add("c-sentinel", "costco")
        wait_for(lambda: done("c-sentinel"), what="the costco job behind them")
        # When the slot frees
        open_gate("s-hold")
        wait_for(lambda: done("s-n1", "s-n2", "s-urgent"), what="the held-back jobs")
    # Then the urgent one went first, then the others in arrival order
    assert [run[2] for run in spans("s-")] == ["s-hold", "s-urgent", "s-n1", "s-n2"]


def test_a_claim_held_back_by_its_group_spends_no_start_of_the_rate_limit(
        herald_on: HeraldOn) -> None:
    if herald_on.kind != "rabbitmq":
        pytest.skip("RabbitMQ's claim (the Redis broker's fetch parks the job unstarted)")
    # Given the queue allows 3 starts a minute, and a sysco job holds the group's slot
    ledger = current_app().ledger
    spec = dataclasses.replace(get_spec(QUEUE), rate_limit=(3, timedelta(minutes=1)))
    for key, group in (("s-hold", "sysco"), ("s-next", "sysco"), ("c-1", "costco")):
        add(key, group)

    def claim(key: str) -> tuple[str, object]:
        return ledger.start(spec, key, queue(QUEUE).get(key).message_id)

    verdict, (_, _, token) = claim("s-hold")
    assert verdict == "start"
    # When another sysco job's message is claimed again and again, it comes back later
    for _ in range(5):
        assert claim("s-next") == ("later", GROUP_WAIT_MS)
    # Then the window still has room for a costco job
    assert claim("c-1")[0] == "start"
    # and, once the slot is free, for the sysco job: the third start it allows
    ledger.cycle(spec, finishes=[RunEnd(job_id="s-hold", token=token,
                                        outcome=RunEnd.COMPLETED, value="null")],
                 external=True)
    assert claim("s-next")[0] == "start"
    assert queue(QUEUE).group_counts() == {"sysco": 1, "costco": 1}


def test_a_deduplicated_add_keeps_the_group_of_the_job_that_holds_the_key(
        herald_on: HeraldOn) -> None:
    first = enqueue(grouped, {"key": "d1"}, job_id="d1", group="sysco", dedup_id="order-1")
    again = enqueue(grouped, {"key": "d2"}, job_id="d2", group="costco", dedup_id="order-1")
    assert (first.status, again.status, again.job_id) == ("added", "deduplicated", "d1")
    assert queue(QUEUE).get("d1").group == "sysco" and queue(QUEUE).get("d2") is None


@pytest.mark.parametrize("group", ["", "x" * 201, 7])
def test_a_bad_group_key_is_refused_and_nothing_is_added(herald_on: HeraldOn,
                                                         group: object) -> None:
    with pytest.raises(InvalidPayload, match="group key"):
        enqueue(grouped, {"key": "bad"}, job_id="bad", group=group)  # type: ignore[arg-type]
    with pytest.raises(InvalidPayload, match="group key"):
        enqueue_many(grouped, [({"key": "ok"}, {"job_id": "ok"}),
                               ({"key": "bad"}, {"job_id": "bad", "group": group})])
    assert sum(queue(QUEUE).counts().values()) == 0


def test_a_spec_with_bad_group_limits_is_refused_naming_each_problem() -> None:
    with pytest.raises(ValueError) as refused:
        QueueSpec(name="q", group_limits={"sysco": 0, "": 2, "costco": 1.5},
                  default_group_limit=0)
    message = str(refused.value)
    for problem in ("group_limits['sysco'] must be an integer >= 1",
                    "group_limits['costco'] must be an integer >= 1",
                    "a group key must be a string",
                    "default_group_limit must be None or an integer >= 1"):
        assert problem in message
    spec = QueueSpec(name="q", group_limits={"sysco": 1}, default_group_limit=4)
    assert (spec.group_limit("sysco"), spec.group_limit("costco")) == (1, 4)
    assert QueueSpec(name="q").group_limit("sysco") is None
