"""A test queue of the console tests and the real jobs they run on it.

``t-console`` is declared on this module's registry (``registry``), which the console
tests' App reads beside herald's, like any queue (so it gets a health row); its
actor completes, fails with a real exception, or holds until the test opens a gate.
Jobs run in a real in-process worker (:func:`herald.queue.running_worker`).
"""

from __future__ import annotations

import contextlib
import threading
from datetime import timedelta

import pytest
import redis
from pydantic import BaseModel

from herald import settings
from herald.queue import QueueSpec, Registry, current_app, enqueue, now_ms, queue, running_worker
from tests.support.queue_app import install_queue_app
from tests.support.waiting import wait_for

#: The console tests' queue: one attempt (a failure is final), failures kept.
QUEUE = "t-console"
#: The console tests' own declarations.
registry = Registry()
registry.declare(QueueSpec(name=QUEUE, concurrency=2, attempts=1,
                           rate_limit=(100, timedelta(seconds=10))))

#: Opened by a test to let held jobs finish.
GATE = threading.Event()


class Work(BaseModel):
    """What a console test job does."""

    key: str
    fail: bool = False
    #: wait for :data:`GATE` before finishing
    hold: bool = False
    #: padding that makes the payload (and a failure's message) long
    note: str = ""


class ConsoleTestFailure(RuntimeError):
    """The failure of a failing test job."""


@registry.actor(queue=QUEUE, payload=Work)
def console_work(job: Work) -> dict[str, str]:
    """Complete (returning the key), hold until the gate opens, or fail."""
    if job.hold:
        GATE.wait(timeout=60)
    if job.fail:
        raise ConsoleTestFailure(f"job {job.key} failed {job.note}")
    return {"key": job.key}


def run_jobs(ok: int = 0, failing: int = 0, *, prefix: str = "job", note: str = "") -> None:
    """Run ``ok`` completing and ``failing`` failing jobs (ids ``<prefix>-ok-<i>`` and
    ``<prefix>-bad-<i>``) in a real worker, until every one has finished."""
    q = queue(QUEUE)
    before = q.counts()
    for i in range(ok):
        enqueue(console_work, {"key": f"{prefix}-ok-{i}", "note": note},
                job_id=f"{prefix}-ok-{i}")
    for i in range(failing):
        enqueue(console_work, {"key": f"{prefix}-bad-{i}", "fail": True, "note": note},
                job_id=f"{prefix}-bad-{i}")
    with running_worker([QUEUE]):
        wait_for(lambda: (q.counts()["completed"] - before["completed"] == ok
                          and q.counts()["failed"] - before["failed"] == failing),
                 timeout=30, what=f"{ok} completed and {failing} failed jobs")


def age_failure(job_id: str, age: timedelta) -> None:
    """Make a real failed record look ``age`` old: its score in the queue's failed set
    (what recent-failure counting pages by) and its finish time ``ft`` are rewritten."""
    q = queue(QUEUE)
    at = now_ms() - int(age.total_seconds() * 1000)
    base = q.ledger.base(QUEUE)
    client = current_app().client
    assert client.zscore(base + "failed", job_id) is not None, f"{job_id} is not failed"
    client.zadd(base + "failed", {job_id: at})
    client.hset(base + "job:" + job_id, "ft", at)


def point_at_stopped_redis(monkeypatch: pytest.MonkeyPatch, private_url: str) -> None:
    """Point herald at the test's own Redis (``private_redis_url``), then shut that server
    down: every Redis call herald makes from now on is refused, as in an outage."""
    monkeypatch.setenv("REDIS_URL", private_url)
    settings.reset_settings()
    install_queue_app()
    queue(QUEUE).counts()  # herald's client is connected before the outage
    with contextlib.suppress(redis.ConnectionError):  # the server goes away mid-reply
        redis.Redis.from_url(private_url).shutdown(nosave=True)
    wait_for(lambda: _refused(private_url), timeout=10, what="the private Redis to stop")


def _refused(url: str) -> bool:
    try:
        redis.Redis.from_url(url, socket_connect_timeout=1).ping()
    except redis.ConnectionError:
        return True
    return False
