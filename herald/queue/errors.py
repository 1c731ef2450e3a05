"""herald's errors and control-flow signals.

::

    Exception
     ├── dramatiq.errors.Retry
     │    └── Defer            control flow: run again after `delay`, no failed attempt counted
     ├── Permanent             the job fails now, whatever attempts remain
     │    └── InvalidMessage   a consumed message that cannot be decoded or validated
     └── HeraldError
          ├── InvalidPayload   (also a ValueError) a producer's payload failed the actor's model;
          │                    nothing was persisted or enqueued
          ├── UnknownQueue     (also a KeyError) a queue name that the registry does not declare
          └── NoAppInstalled   (also a RuntimeError) the queue wiring used before an App was
                               installed in the process

Anything else an actor raises is a transient failure: retried with the queue's backoff
until its attempts run out.
"""

from __future__ import annotations

from datetime import timedelta

from dramatiq.errors import Retry

__all__ = ["Defer", "HeraldError", "InvalidMessage", "InvalidPayload", "NoAppInstalled",
           "Permanent", "UnknownQueue"]


class HeraldError(Exception):
    """Base class of herald's own errors."""


class InvalidPayload(HeraldError, ValueError):
    """A payload did not match the actor's model; raised before anything is enqueued."""


class UnknownQueue(HeraldError, KeyError):
    """A queue name that the registry does not declare."""

    def __str__(self) -> str:
        return f"unknown queue {self.args[0]!r}"


class NoAppInstalled(HeraldError, RuntimeError):
    """A call that needs the process's queue wiring, made before any App was installed."""


class MixedShards(HeraldError, ValueError):
    """Queues asked to run in one worker process live on more than one shard
    (docs/queue.md#shards)."""


class Permanent(Exception):
    """Fail the job at once: no further attempt could succeed (BullMQ's UnrecoverableError)."""


class InvalidMessage(Permanent):
    """A consumed message could not be decoded or validated; it fails without a retry."""


class Defer(Retry):
    """Run the job again after ``delay`` without counting a failed attempt.

    Deferrals still count as started attempts, so ``max_started_attempts`` bounds a job
    that keeps deferring — unless ``count_start`` is False: a run that found its job not
    due yet (a time the domain sets, which always comes) gives its start back.
    """

    #: How long until the job runs again. Dramatiq's ``Retry.delay`` holds milliseconds;
    #: herald's ledger middleware reads this timedelta instead, and Dramatiq's Retries
    #: middleware, the reader of milliseconds, is not among the brokers' middleware
    #: (``default_middleware`` in middleware.py).
    delay: timedelta  # type: ignore[assignment]  # a public delay is a timedelta

    def __init__(self, delay: timedelta, reason: str = "deferred", *,
                 count_start: bool = True) -> None:
        super().__init__(reason, delay=int(delay.total_seconds() * 1000))
        self.delay = delay
        self.reason = reason
        self.count_start = count_start
