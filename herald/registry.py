"""The queue registry: every queue declared once, with all of its values.

Producers, workers, the clock and the CLI read this and nothing else, so they cannot
drift apart. The environment overrides a few values (DISPATCH_ATTEMPTS,
DISPATCH_BACKOFF_MS, EMAIL_WORKER_CONCURRENCY); every queue and its values are listed in
docs/queue.md#the-queue-table.
"""

from __future__ import annotations

import contextlib
import dataclasses
import threading
from collections.abc import Iterable, Iterator
from datetime import timedelta
from enum import StrEnum
from typing import Any

from herald.errors import UnknownQueue
from herald.settings import Settings, get_settings

SECOND = timedelta(seconds=1)
MINUTE = timedelta(minutes=1)
HOUR = timedelta(hours=1)
DAY = timedelta(days=1)

#: The two priorities herald's producers use: urgent, and everything else (docs/queue.md#priority).
URGENT_PRIORITY = 1
NORMAL_PRIORITY = 5
#: Lowest and highest priority a job may carry.
PRIORITY_RANGE = range(1, 11)


class Backoff(StrEnum):
    """How the wait before attempt k grows."""

    #: ``base × 2^(k−2)``: 1 s, 2 s, 4 s … for base 1 s.
    EXPONENTIAL = "exponential"
    #: ``base`` before every retry.
    FIXED = "fixed"
    #: No automatic retry schedule (the lane runs its own, like email-retry).
    NONE = "none"


@dataclasses.dataclass(frozen=True, kw_only=True)
class Keep:
    """How many finished records of one kind to keep: by count, by age, or both."""

    #: Keep at most this many (None: no count limit).
    count: int | None = None
    #: Keep none older than this (None: no age limit).
    age: timedelta | None = None
    #: Remove the record as soon as the job finishes (when a database row is the durable one).
    remove: bool = False

    def __post_init__(self) -> None:
        if self.count is not None and self.count < 0:
            raise ValueError("Keep.count must be >= 0")


@dataclasses.dataclass(frozen=True, kw_only=True)
class Retention:
    """Retention of completed and failed job records."""

    completed: Keep = Keep(count=1000, age=DAY)
    failed: Keep = Keep(count=5000, age=7 * DAY)


#: Retention the notification queues share: 500 completed; 5,000 failed, none over 7 days.
NOTIFICATION_RETENTION = Retention(completed=Keep(count=500), failed=Keep(count=5000, age=7 * DAY))
#: The supplier queues' retention: 1,000 completed, none over 1 h; failed for 24 h.
DISPATCH_RETENTION = Retention(completed=Keep(count=1000, age=HOUR), failed=Keep(age=DAY))
#: email-retry's retention: 500 completed, none over a day; 5,000 failed, none over 7 days.
EMAIL_RETRY_RETENTION = Retention(completed=Keep(count=500, age=DAY),
                                  failed=Keep(count=5000, age=7 * DAY))


@dataclasses.dataclass(frozen=True, kw_only=True)
class QueueSpec:
    """One queue's whole configuration. Only ``name`` is required."""

    name: str
    #: Jobs one worker process runs at once on this lane (independent of other lanes).
    concurrency: int = 1
    #: ``(max_jobs, window)`` across all processes, or None.
    rate_limit: tuple[int, timedelta] | None = None
    #: Attempts before a job fails for good (failed attempts; deferrals do not count).
    attempts: int = 3
    backoff: Backoff = Backoff.EXPONENTIAL
    backoff_base: timedelta = SECOND
    retention: Retention = Retention()
    #: The priorities producers use on this queue (1 = urgent … 5 = normal).
    priority_lanes: tuple[int, ...] = (NORMAL_PRIORITY,)
    #: How long a started job's lock lasts before it counts as stalled (extended while it runs).
    lock_duration: timedelta = 30 * SECOND
    #: Longest one run may take (None: no limit).
    time_limit: timedelta | None = None
    #: Starts allowed, stalled restarts and deferrals included (None: unbounded).
    max_started_attempts: int | None = None
    #: Settings flag that must be true for the queue's schedules to exist (None: always).
    feature_gate: str | None = None
    #: Seconds a worker waits for in-flight jobs at shutdown before forcing (None: no bound).
    shutdown_timeout: timedelta | None = None
    #: Who produces and who consumes, for operators.
    description: str = ""

    def __post_init__(self) -> None:
        problems = []
        if not self.name or any(c in self.name for c in " :{}"):
            problems.append("name must be non-empty without spaces, ':' or braces")
        if self.concurrency < 1:
            problems.append("concurrency must be >= 1")
        if self.attempts < 1:
            problems.append("attempts must be >= 1")
        if self.rate_limit is not None:
            count, window = self.rate_limit
            if count < 1 or window <= timedelta(0):
                problems.append("rate_limit must be (max_jobs >= 1, window > 0)")
        if self.lock_duration < SECOND:
            problems.append("lock_duration must be at least 1 s")
        if self.max_started_attempts is not None and self.max_started_attempts < 1:
            problems.append("max_started_attempts must be >= 1")
        if any(p not in PRIORITY_RANGE for p in self.priority_lanes):
            problems.append(f"priority_lanes must lie in {PRIORITY_RANGE.start}..9")
        if problems:
            raise ValueError(f"QueueSpec {self.name!r}: " + "; ".join(problems))


def builtin_specs(settings: Settings) -> list[QueueSpec]:
    """herald's built-in queues (docs/queue.md#the-queue-table), with the environment's
    overrides applied."""
    notification = {"retention": NOTIFICATION_RETENTION, "backoff_base": 5 * SECOND,
                    "shutdown_timeout": 5 * SECOND, "priority_lanes": (URGENT_PRIORITY,
                                                                         NORMAL_PRIORITY)}
    business = {"concurrency": 2, "attempts": 3, "backoff_base": 2 * SECOND}
    sync = {"concurrency": 1, "attempts": 3, "backoff_base": 5 * SECOND, "lock_duration": MINUTE}
    return [
        QueueSpec(name="notification-email", concurrency=5, rate_limit=(30, MINUTE), attempts=5,
                  max_started_attempts=5, **notification,
                  description="orchestration → render and send one persisted email delivery"),
        QueueSpec(name="notification-sms", concurrency=2, rate_limit=(10, MINUTE), attempts=3,
                  max_started_attempts=3, **notification,
                  description="orchestration → render and send one persisted SMS delivery"),
        QueueSpec(name="notification-orchestration", concurrency=2, attempts=5,
                  **{**notification, "backoff_base": SECOND},
                  description="batches, handoff reconciliation, callback normalisation"),
        QueueSpec(name="activation", **business,
                  description="payment settlement → operator activation steps"),
        QueueSpec(name="payment", **business, description="API → settle completed payments"),
        QueueSpec(name="store-fulfillment", **business,
                  description="payment → issue eSIM profiles for paid store orders"),
        QueueSpec(name="package-sync", **sync, description="clock → sync operator packages"),
        QueueSpec(name="esim-product-sync", **sync, feature_gate="feature_esim_store",
                  description="clock → sync eSIM provider catalogs"),
        QueueSpec(name="fx-refresh", **sync, feature_gate="feature_esim_store",
                  description="clock and startup → refresh USD exchange rates"),
        QueueSpec(name="supplier-dispatch", concurrency=1, attempts=settings.dispatch_attempts,
                  backoff_base=timedelta(milliseconds=settings.dispatch_backoff_ms),
                  lock_duration=120 * SECOND, retention=DISPATCH_RETENTION,
                  description="order placement and reroute → transmit one order to one supplier"),
        QueueSpec(name="backorder-reroute", concurrency=settings.email_worker_concurrency,
                  attempts=3, backoff_base=SECOND, retention=DISPATCH_RETENTION,
                  description="inbound acknowledgments and admin → move a back-ordered line"),
        QueueSpec(name="email-retry", concurrency=4, attempts=1, backoff=Backoff.NONE,
                  retention=EMAIL_RETRY_RETENTION,
                  description="failed in-call sends → 5 min, 30 min, 2 h, 12 h, 24 h schedule"),
    ]


_lock = threading.Lock()
_declared: dict[str, QueueSpec] = {}
_builtins: dict[str, QueueSpec] | None = None


def _ensure_builtins() -> dict[str, QueueSpec]:
    global _builtins
    if _builtins is None:
        _builtins = {spec.name: spec for spec in builtin_specs(get_settings())}
    return _builtins


def declare(spec: QueueSpec) -> QueueSpec:
    """Declare (or redeclare) a queue; returns the spec. Builtins can be overridden too."""
    with _lock:
        _declared[spec.name] = spec
    return spec


@contextlib.contextmanager
def redeclared(names: Iterable[str], **changes: Any) -> Iterator[None]:
    """Run the block with these queues' specs changed (``rate_limit=None`` lifts their
    rate limits, say), in this process; the specs before it are declared again after."""
    saved = [get_spec(name) for name in names]
    for spec in saved:
        declare(dataclasses.replace(spec, **changes))
    try:
        yield
    finally:
        for spec in saved:
            declare(spec)


def get_spec(name: str) -> QueueSpec:
    """The spec of queue ``name``; :class:`UnknownQueue` (a KeyError) when undeclared."""
    with _lock:
        spec = _declared.get(name) or _ensure_builtins().get(name)
    if spec is None:
        raise UnknownQueue(name)
    return spec


def all_specs() -> list[QueueSpec]:
    """Every declared queue, builtins first in registry order."""
    with _lock:
        merged = dict(_ensure_builtins())
        merged.update(_declared)
    return list(merged.values())


def names() -> Iterator[str]:
    """The names of every declared queue."""
    return (spec.name for spec in all_specs())


def reset_registry() -> None:
    """Forget declared queues and rebuild builtins from the settings on next use (tests)."""
    global _builtins
    with _lock:
        _declared.clear()
        _builtins = None
