"""Queues and actors the queue-layer tests run, in-process and in worker subprocesses,
declared on their own registry (``registry``, which the tests' App reads beside herald's).

Each actor records what happened to it in Redis (``<prefix>:test:events``), so a test
can read what a worker in another process did.
"""

from __future__ import annotations

import json
import os
import time
from datetime import timedelta

from dramatiq.middleware import CurrentMessage
from pydantic import BaseModel

from herald.queue import (
    Backoff,
    Defer,
    Keep,
    Permanent,
    QueueSpec,
    Registry,
    Retention,
    Schedule,
    current_app,
)
from herald.queue.middleware import run_token
from herald.settings import get_settings

SECOND = timedelta(seconds=1)

#: The test queues, their actors and schedules.
registry = Registry()

registry.declare(QueueSpec(name="t-basic", concurrency=4, attempts=3, backoff_base=SECOND,
                           retention=Retention(completed=Keep(count=100_000),
                                               failed=Keep(count=100))))
registry.declare(QueueSpec(name="t-other", concurrency=2, attempts=1))
registry.declare(QueueSpec(name="t-prio", concurrency=1, attempts=1,
                           retention=Retention(completed=Keep(count=100_000))))
registry.declare(QueueSpec(name="t-limited", concurrency=4, attempts=1,
                           rate_limit=(10, timedelta(seconds=2))))
registry.declare(QueueSpec(name="t-stall", concurrency=2, attempts=3, lock_duration=2 * SECOND,
                           max_started_attempts=3))
registry.declare(QueueSpec(name="t-timed", concurrency=2, attempts=1,
                           time_limit=timedelta(milliseconds=500)))
registry.declare(QueueSpec(name="t-aged", concurrency=2, attempts=1,
                           retention=Retention(completed=Keep(age=SECOND), failed=Keep(count=10))))
registry.declare(QueueSpec(name="t-brief", concurrency=2, attempts=1, lock_duration=SECOND))
registry.declare(QueueSpec(name="t-exp", attempts=4, backoff_base=timedelta(milliseconds=100)))
registry.declare(QueueSpec(name="t-fixed", attempts=4, backoff=Backoff.FIXED,
                           backoff_base=timedelta(milliseconds=150)))
registry.declare(QueueSpec(name="t-none", attempts=4, backoff=Backoff.NONE))
registry.declare(QueueSpec(name="t-plain", concurrency=4, attempts=2,
                           backoff_base=timedelta(milliseconds=50),
                           retention=Retention(completed=Keep(count=100_000),
                                               failed=Keep(count=100))))
registry.declare(QueueSpec(name="t-kept", concurrency=4, attempts=1,
                           retention=Retention(completed=Keep(count=5), failed=Keep(count=3))))


class Step(BaseModel):
    """What a test job should do."""

    key: str
    sleep_s: float = 0.0
    fail_times: int = 0
    permanent: bool = False
    defer_ms: int = 0
    defer_times: int = 0
    #: defer with the start given back (``Defer(count_start=False)``), counting the
    #: deferrals by the starts recorded
    defer_uncounted: bool = False
    #: wait for the test to open this step's gate (see :func:`open_gate`), then fail
    #: if it said "fail", else go on
    gated: bool = False


def events_key() -> str:
    return f"{get_settings().queue_prefix}:test:events"


def record(kind: str, key: str, **extra: object) -> None:
    """Append one event (json) to the test's event list in Redis."""
    message = CurrentMessage.get_current_message()
    event = {"kind": kind, "key": key, "t": time.time(), "pid": os.getpid(),
             "attempts_made": message.options.get("attempts_made") if message else None,
             "attempts_started": message.options.get("attempts_started") if message else None,
             **extra}
    current_app().client.rpush(events_key(), json.dumps(event))


def gate_key(key: str) -> str:
    return f"{get_settings().queue_prefix}:test:gate:{key}"


def open_gate(key: str, verdict: str = "pass") -> None:
    """Let gated runs of step ``key`` go on ("pass") or fail ("fail"); :func:`close_gate`
    makes later runs wait again."""
    current_app().client.set(gate_key(key), verdict)


def close_gate(key: str) -> None:
    current_app().client.delete(gate_key(key))


def _wait_at_gate(key: str) -> None:
    deadline = time.monotonic() + 60
    while (verdict := current_app().client.get(gate_key(key))) is None:
        if time.monotonic() > deadline:
            raise RuntimeError(f"the gate of {key} never opened")
        time.sleep(0.02)
    if verdict == b"fail":
        raise RuntimeError(f"{key} failed at its gate")


def events(kind: str | None = None) -> list[dict]:
    """Every recorded event, oldest first (optionally of one kind)."""
    raw = current_app().client.lrange(events_key(), 0, -1)
    parsed = [json.loads(item) for item in raw]
    return [e for e in parsed if kind is None or e["kind"] == kind]


def _run(job: Step) -> dict:
    message = CurrentMessage.get_current_message()
    made = message.options["attempts_made"] if message else 0
    started = message.options["attempts_started"] if message else 0
    # the run's token, as the worker reports the run's end under it
    record("start", job.key, token=run_token(message) if message else None)
    if job.gated:
        _wait_at_gate(job.key)
    deadline = time.monotonic() + job.sleep_s
    while time.monotonic() < deadline:  # short naps: a time limit can interrupt between them
        time.sleep(min(0.05, max(deadline - time.monotonic(), 0)))
    if job.permanent:
        raise Permanent(f"{job.key} cannot succeed")
    if made < job.fail_times:
        raise RuntimeError(f"{job.key} failed on attempt {made + 1}")
    if job.defer_uncounted and len(events("start")) <= job.defer_times:
        raise Defer(timedelta(milliseconds=job.defer_ms), count_start=False)
    if started <= job.defer_times and job.defer_ms and not job.defer_uncounted:
        raise Defer(timedelta(milliseconds=job.defer_ms))
    record("done", job.key)
    return {"key": job.key}


@registry.actor(queue="t-basic", payload=Step)
def basic(job: Step) -> dict:
    """Does what the step says."""
    return _run(job)


@registry.actor(queue="t-other", payload=Step)
def other(job: Step) -> dict:
    """Same, on another queue."""
    return _run(job)


@registry.actor(queue="t-prio", payload=Step)
def prio(job: Step) -> dict:
    """Same, one at a time."""
    return _run(job)


@registry.actor(queue="t-limited", payload=Step)
def limited(job: Step) -> dict:
    """Same, under a rate limit of 10 per 2 s."""
    return _run(job)


def _exhausted(job: Step, reason: str) -> None:
    record("exhausted", job.key, reason=reason)


@registry.actor(queue="t-stall", payload=Step, on_exhausted=_exhausted)
def stall(job: Step) -> dict:
    """Same, with a 2 s lock."""
    return _run(job)


@registry.actor(queue="t-timed", payload=Step)
def timed(job: Step) -> dict:
    """Same, with a 500 ms time limit per run."""
    return _run(job)


@registry.actor(queue="t-brief", payload=Step)
def brief(job: Step) -> dict:
    """Same, with a 1 s lock."""
    return _run(job)


@registry.actor(queue="t-exp", payload=Step)
def exp(job: Step) -> dict:
    """Same, retried after 100, 200, 400 ms."""
    return _run(job)


@registry.actor(queue="t-fixed", payload=Step)
def fixed(job: Step) -> dict:
    """Same, retried after 150 ms each time."""
    return _run(job)


@registry.actor(queue="t-none", payload=Step)
def nobackoff(job: Step) -> dict:
    """Same, retried at once."""
    return _run(job)


@registry.actor(queue="t-kept", payload=Step)
def kept(job: Step) -> dict:
    """Same, keeping only 5 completed and 3 failed records."""
    return _run(job)


@registry.actor(queue="t-aged", payload=Step)
def aged(job: Step) -> dict:
    """Same, keeping completed records for one second only."""
    return _run(job)


registry.schedule(Schedule(name="t-tick", actor=basic, payload={"key": "tick"}, every=SECOND))
registry.schedule(Schedule(name="t-cron", actor=other, payload={"key": "cron"},
                           cron="* * * * * */2"))
registry.schedule(Schedule(name="t-gated", actor=basic, payload={"key": "gated"}, every=SECOND,
                           feature_gate=lambda: False))  # a feature that is off


@registry.actor(queue="t-plain", payload=Step)
def plain(job: Step) -> None:
    """:func:`basic` with no return value: its completion takes the Redis consumer's
    plain path (job id and token only)."""
    _run(job)
