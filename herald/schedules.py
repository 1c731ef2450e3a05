"""Repeatable schedules: one job per tick, whichever and however many clocks run.

A schedule names an actor, a payload and either an interval (``every``) or a cron
expression. Its next run time lives in Redis (``<prefix>:schedules:next``); a clock fires a
tick only after winning a compare-and-set of that time (``tick.lua``), and the job it adds
has the deterministic id ``repeat:<name>:<due ms>`` — so two clock processes never
double-fire. A schedule behind a feature gate that is off is removed at boot; a failed
removal is logged as a warning so a leftover scheduler stays visible (seed 000).
"""

from __future__ import annotations

import dataclasses
import functools
import logging
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

from croniter import croniter

from herald.connections import redis_client
from herald.jobs import JobActor, enqueue, get_ledger
from herald.ledger import LUA_DIR, now_ms
from herald.registry import all_specs
from herald.settings import Settings, get_settings

log = logging.getLogger("herald.clock")

#: Longest the clock sleeps between looks at the schedule (s).
CLOCK_IDLE_S = 0.5
#: How often the clock applies every queue's retention (age limits on quiet queues) (s).
PRUNE_EVERY_S = 60.0
#: How often the clock re-adds schedules Redis lost (a FLUSHALL, a failover) (s).
RESYNC_EVERY_S = 5.0


@dataclasses.dataclass(frozen=True, kw_only=True)
class Schedule:
    """A job that repeats: every ``every`` or per ``cron`` (exactly one of them)."""

    name: str
    actor: JobActor[Any]
    payload: dict[str, Any] = dataclasses.field(default_factory=dict)
    every: timedelta | None = None
    cron: str | None = None
    #: Settings flag that must be true for the schedule to exist (None: always on).
    feature_gate: str | None = None
    #: Also add one job when the clock starts (seed 000's startup jobs).
    run_at_start: bool = False

    def __post_init__(self) -> None:
        if (self.every is None) == (self.cron is None):
            raise ValueError(f"schedule {self.name!r}: give every or cron, exactly one")
        if self.every is not None and self.every < timedelta(milliseconds=100):
            raise ValueError(f"schedule {self.name!r}: every must be at least 100 ms")
        if self.cron is not None and not croniter.is_valid(self.cron):
            raise ValueError(f"schedule {self.name!r}: invalid cron {self.cron!r}")
        self.actor.validate(self.payload)  # a bad payload fails at declaration

    def enabled(self, settings: Settings) -> bool:
        """True unless its feature gate is off."""
        return self.feature_gate is None or bool(getattr(settings, self.feature_gate))

    def following(self, due_ms: int) -> int:
        """The due time after ``due_ms``."""
        if self.every is not None:
            return due_ms + int(self.every.total_seconds() * 1000)
        start = datetime.fromtimestamp(due_ms / 1000, tz=UTC)
        return int(croniter(self.cron, start).get_next(datetime).timestamp() * 1000)

    def first(self, now: int) -> int:
        """The first due time from ``now`` (intervals align to multiples of ``every``)."""
        if self.every is not None:
            step = int(self.every.total_seconds() * 1000)
            return (now // step + 1) * step
        return self.following(now)


_lock = threading.Lock()
_schedules: dict[str, Schedule] = {}


def schedule(item: Schedule) -> Schedule:
    """Declare (or redeclare) a schedule."""
    with _lock:
        _schedules[item.name] = item
    return item


def declared_schedules() -> list[Schedule]:
    """Every schedule declared in this process."""
    with _lock:
        return list(_schedules.values())


def forget_schedules() -> None:
    """Forget declared schedules (tests)."""
    with _lock:
        _schedules.clear()


def _next_key() -> str:
    return f"{get_settings().queue_prefix}:schedules:next"


def sync_schedules(settings: Settings | None = None,
                   remove: Callable[[str, str], object] | None = None) -> list[str]:
    """At boot: add enabled schedules that Redis lacks, remove gated-off ones.

    Returns the names of enabled schedules. A removal that fails is logged as a warning
    (never raised): the clock still starts.
    """
    settings = settings or get_settings()
    client = redis_client()
    key = _next_key()
    remove = remove or client.zrem
    enabled = []
    for item in declared_schedules():
        if not item.enabled(settings):
            try:
                if remove(key, item.name):
                    log.info("schedule removed: feature gate %s is off", item.feature_gate,
                             extra={"schedule": item.name})
            except Exception as error:
                log.warning("could not remove gated-off schedule: %s", error,
                            extra={"schedule": item.name})
            continue
        client.zadd(key, {item.name: item.first(now_ms())}, nx=True)
        enabled.append(item.name)
    return enabled


@functools.cache
def _tick_source() -> str:
    return (LUA_DIR / "tick.lua").read_text()


def fire_due(names: list[str]) -> int:
    """Fire every tick that fell due among ``names``; returns how many this clock fired."""
    client = redis_client()
    key = _next_key()
    claim = client.register_script(_tick_source())
    fired = 0
    now = now_ms()
    for name, score in client.zrangebyscore(key, "-inf", now, withscores=True):
        name = name.decode()
        item = _schedules.get(name)
        if item is None or name not in names:
            continue
        due = int(score)
        following = item.following(due)
        while following <= now:  # skip ticks missed while no clock ran; fire the latest
            due, following = following, item.following(following)
        if claim(args=[key, name, int(score), following]):
            enqueue(item.actor, item.payload, job_id=f"repeat:{name}:{due}")
            fired += 1
            log.info("schedule fired", extra={"schedule": name, "job_id": f"repeat:{name}:{due}"})
    return fired


def next_due_in(names: list[str]) -> float:
    """Seconds until the earliest of ``names`` falls due (capped at the idle wait)."""
    scores = redis_client().zrange(_next_key(), 0, -1, withscores=True)
    dues = [int(s) for n, s in scores if n.decode() in names]
    if not dues:
        return CLOCK_IDLE_S
    return max(0.0, min(CLOCK_IDLE_S, (min(dues) - now_ms()) / 1000))


def prune_all() -> int:
    """Apply the retention of every registry queue; returns records removed."""
    ledger = get_ledger()
    return sum(ledger.prune(spec) for spec in all_specs())


def run_clock(stop: threading.Event) -> None:
    """Fire schedules until ``stop`` is set; the startup jobs go first."""
    names = sync_schedules()
    boot = now_ms()
    for item in declared_schedules():
        if item.run_at_start and item.name in names:
            enqueue(item.actor, item.payload, job_id=f"startup:{item.name}:{boot}")
    log.info("clock started", extra={"schedules": ",".join(names)})
    last_prune = 0.0
    last_sync = time.monotonic()
    while not stop.is_set():
        try:
            if time.monotonic() - last_sync >= RESYNC_EVERY_S:
                names = sync_schedules()  # adds only what is missing (ZADD NX)
                last_sync = time.monotonic()
            fire_due(names)
            if time.monotonic() - last_prune >= PRUNE_EVERY_S:
                prune_all()
                last_prune = time.monotonic()
            wait = next_due_in(names)
        except Exception as error:  # Redis away: keep the clock alive, try again soon
            log.warning("clock tick failed: %s", type(error).__name__)
            wait = 1.0
        stop.wait(wait)
    log.info("clock stopped")


def stop_on_signal() -> threading.Event:
    """An event set by SIGTERM/SIGINT (for the clock process)."""
    import signal

    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    return stop


