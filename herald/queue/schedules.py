"""Repeatable schedules: one job per tick, whichever and however many clocks run.

A schedule names an actor, a payload and either an interval (``every``) or a cron
expression (five fields, or six with seconds last). Its next run time lives in Redis
(``<prefix>:schedules:next``); a clock fires a tick only after winning a compare-and-set
of that time (``tick.lua``), and the job it adds has the deterministic id
``repeat:<name>:<due ms>`` — so two clock processes never double-fire.

- **A claimed tick is never lost.** The claim records the tick in
  ``<prefix>:schedules:claimed`` until its job is added. When the add fails (Redis
  refuses, RabbitMQ is away) the tick stays there, marked to be tried again at once; a
  tick whose clock died before adding it is taken over by any clock once its claim is
  :data:`CLAIM_LEASE_S` old. A retried tick keeps its job id, so it still runs once.
- **Missed ticks are not replayed.** When no clock ran for several ticks, the first
  clock back fires one job, for the latest tick that fell due, and logs how many it
  skipped: a schedule means "do this every N", not a backlog to work through.
- A schedule behind a feature gate that is off is removed at boot; a failed removal is
  logged as a warning (the clock still starts) so a leftover schedule stays visible.
"""

from __future__ import annotations

import functools
import logging
import threading
import time
from typing import cast

import redis

from herald.queue.app import App, current_app
from herald.queue.ledger import LUA_DIR
from herald.queue.ledger_queries import Scored
from herald.queue.producer import enqueue
from herald.queue.schedule_spec import Schedule

log = logging.getLogger(__name__)

#: Longest the clock sleeps between looks at the schedule (s).
CLOCK_IDLE_S = 0.5
#: How often the clock applies every queue's retention (age limits on quiet queues) (s).
PRUNE_EVERY_S = 60.0
#: How often the clock re-adds schedules Redis lost (a FLUSHALL, a failover) (s).
RESYNC_EVERY_S = 5.0
#: Age of a claim after which another clock adds the tick's job (its clock died) (s).
CLAIM_LEASE_S = 30.0


def next_key(app: App) -> str:
    """The sorted set of each schedule's next due time (ms), under the App's prefix."""
    return f"{app.config.prefix}:schedules:next"


def _claimed_key(app: App) -> str:
    return f"{app.config.prefix}:schedules:claimed"


def sync_schedules() -> list[str]:
    """At boot: add enabled schedules that Redis lacks, remove gated-off ones.

    Returns the names of enabled schedules. A removal that Redis refuses is logged as a
    warning (never raised): the clock still starts.
    """
    app = current_app()
    client = app.client
    key = next_key(app)
    enabled = []
    for item in app.schedules().values():
        if not item.enabled():
            try:
                if client.zrem(key, item.name):
                    log.info("schedule removed: its feature gate is off",
                             extra={"schedule": item.name})
            except redis.RedisError as error:
                log.warning("could not remove gated-off schedule: %s", error,
                            extra={"schedule": item.name})
            continue
        client.zadd(key, {item.name: item.first(app.time.now_ms())}, nx=True)
        enabled.append(item.name)
    return enabled


@functools.cache
def _tick_source() -> str:
    return (LUA_DIR / "tick.lua").read_text()


class _Ticks:
    """One round of a clock over the schedules named ``names``."""

    def __init__(self, app: App, names: list[str]) -> None:
        self.schedules = app.schedules()
        self.client = app.client
        self.claim = self.client.register_script(_tick_source())
        self.next_key, self.claimed_key = next_key(app), _claimed_key(app)
        self.names = names
        self.now = app.time.now_ms()

    def enabled_schedule(self, name: bytes | str) -> Schedule | None:
        """The declared, enabled schedule of that name (None: not this clock's)."""
        name = name.decode() if isinstance(name, bytes) else name
        item = self.schedules.get(name)
        return item if item is not None and name in self.names else None

    def fire_due(self) -> int:
        """Claim every tick that fell due and add its job; returns jobs added."""
        fired = 0
        fallen_due = cast(Scored, self.client.zrangebyscore(self.next_key, "-inf", self.now,
                                                            withscores=True))
        for name, score in fallen_due:
            item = self.enabled_schedule(name)
            if item is None:
                continue
            due, skipped = item.latest(int(score), self.now)
            tick = f"{due}:{item.name}"
            if self.claim(args=[self.next_key, item.name, int(score), item.following(due),
                                self.claimed_key, tick, self.now]):
                if skipped:
                    log.warning("schedule missed %d ticks while no clock ran; fired the "
                                "latest only", skipped, extra={"schedule": item.name})
                fired += self.add(item, due)
        return fired

    def retry_claimed(self) -> int:
        """Add the jobs of claimed ticks whose add failed, or whose clock died (its claim
        outlived the lease); returns jobs added."""
        fired = 0
        overdue = self.now - int(CLAIM_LEASE_S * 1000)
        claimed = cast(Scored, self.client.zrangebyscore(self.claimed_key, "-inf", overdue,
                                                         withscores=True))
        for tick, score in claimed:
            due, _, name = tick.decode().partition(":")
            item = self.enabled_schedule(name)
            # taking a claim over is a compare-and-set too: one clock retries each tick
            if item is not None and self.claim(args=[self.claimed_key, tick, int(score),
                                                     self.now, self.claimed_key, tick,
                                                     self.now]):
                fired += self.add(item, int(due))
        return fired

    def add(self, item: Schedule, due: int) -> int:
        """Add one claimed tick's job, then release the claim; when the add fails the
        claim stays, marked for a retry on the next round. Returns 1 when added."""
        tick, job_id = f"{due}:{item.name}", f"repeat:{item.name}:{due}"
        try:
            enqueue(item.actor, item.payload, job_id=job_id, **item.enqueue_options())
        except Exception as error:  # the tick is kept, whatever went wrong: never lost
            log.warning("schedule tick not added, will retry: %s: %s",
                        type(error).__name__, error,
                        extra={"schedule": item.name, "job_id": job_id})
            self.client.zadd(self.claimed_key, {tick: 0}, xx=True)
            return 0
        self.client.zrem(self.claimed_key, tick)
        log.info("schedule fired", extra={"schedule": item.name, "job_id": job_id})
        return 1


def fire_due(names: list[str]) -> int:
    """Fire every tick that fell due among ``names``, and retry claimed ticks whose job
    was not added; returns how many jobs this clock added."""
    ticks = _Ticks(current_app(), names)
    # earlier ticks first: a tick whose add failed goes before the ones due since
    return ticks.retry_claimed() + ticks.fire_due()


def next_due_in(names: list[str]) -> float:
    """Seconds until the earliest of ``names`` falls due (capped at the idle wait)."""
    app = current_app()
    scores = cast(Scored, app.client.zrange(next_key(app), 0, -1, withscores=True))
    dues = [int(s) for n, s in scores if n.decode() in names]
    if not dues:
        return CLOCK_IDLE_S
    return max(0.0, min(CLOCK_IDLE_S, (min(dues) - app.time.now_ms()) / 1000))


def prune_all() -> int:
    """Apply the retention of every registry queue, each on its shard; returns records
    removed."""
    app = current_app()
    return sum(app.shard(spec.name).admin.prune(spec) for spec in app.specs())


def fire_schedules(stop: threading.Event) -> None:
    """Fire schedules until ``stop`` is set; the startup jobs go first."""
    names = sync_schedules()
    app = current_app()
    boot = app.time.now_ms()
    for item in app.schedules().values():
        if item.run_at_start and item.name in names:
            enqueue(item.actor, item.payload, job_id=f"startup:{item.name}:{boot}",
                    **item.enqueue_options())
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


