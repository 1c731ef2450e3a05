"""Repeatable schedules: interval and cron under two clocks, missed ticks, a tick whose job
Redis refused, and feature gates at boot."""

from __future__ import annotations

import contextlib
import itertools
import logging
import os
import signal
import subprocess
import sys
import threading
import uuid
from collections.abc import Iterator
from dataclasses import dataclass

import pytest
import redis

from herald.queue import current_app, now_ms, queue
from herald.queue.schedules import fire_due, fire_schedules, sync_schedules
from herald.settings import get_settings
from tests.queue.conftest import REPO, HeraldOn, reset_herald, wait_for


def schedule_dues(queue_name: str, schedule: str, client: redis.Redis | None = None,
                  ) -> list[int]:
    """The due times (ms) of the schedule's jobs waiting in the queue, in order."""
    prefix = f"repeat:{schedule}:"
    base = f"{get_settings().queue_prefix}:{{{queue_name}}}:"
    ids = (client or current_app().client).zrange(base + "wait", 0, -1)
    return sorted(int(i.decode().removeprefix(prefix)) for i in ids
                  if i.decode().startswith(prefix))


def next_key() -> str:
    return f"{get_settings().queue_prefix}:schedules:next"


@contextlib.contextmanager
def clock_processes(env: dict[str, str], count: int = 1) -> Iterator[None]:
    """``count`` real clock processes (``tests.support.queue.run_clock``), stopped after."""
    clocks = [subprocess.Popen([sys.executable, "-m", "tests.support.queue.run_clock"],
                               cwd=REPO, env={**os.environ, **env},
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
              for _ in range(count)]
    try:
        yield
    finally:
        for clock in clocks:
            clock.send_signal(signal.SIGTERM)
        for clock in clocks:
            clock.wait(timeout=10)


def test_two_clocks_fire_interval_and_cron_schedules_once_per_tick(
        redis_only: HeraldOn) -> None:
    # Given two clock processes running an every-second schedule and a cron schedule of
    # every even second (six fields, seconds last)
    with clock_processes(redis_only.env, count=2):
        # When they run for several ticks of each
        wait_for(lambda: len(schedule_dues("t-basic", "t-tick")) >= 6, timeout=30,
                 what="six interval ticks")
        wait_for(lambda: len(schedule_dues("t-other", "t-cron")) >= 3, timeout=30,
                 what="three cron ticks")
    # Then each tick added one job, its id carrying the tick's due time. (A tick may be
    # skipped only when both clocks stalled past the next one, as a loaded CI machine can
    # make them; the skip is logged and tested on its own below.)
    ticks, crons = schedule_dues("t-basic", "t-tick"), schedule_dues("t-other", "t-cron")
    assert all((b - a) % 1000 == 0 for a, b in itertools.pairwise(ticks)), ticks
    assert all((b - a) % 2000 == 0 for a, b in itertools.pairwise(crons)), crons
    assert all(due % 2000 == 0 for due in crons), crons
    # and no clock ever tried to add a tick the other one had fired
    for name in ("t-basic", "t-other"):
        assert queue(name).queries.metrics(name).get("duplicated", 0) == 0


def test_a_clock_back_after_missed_ticks_fires_the_latest_tick_only(
        redis_only: HeraldOn, caplog: pytest.LogCaptureFixture) -> None:
    sync_schedules()
    # Given the every-second schedule's last clock stopped five ticks ago
    last_due = (now_ms() // 1000 - 5) * 1000
    current_app().client.zadd(next_key(), {"t-tick": last_due})
    # When a clock looks at the schedule again
    before = now_ms()
    with caplog.at_level(logging.WARNING, logger="herald.queue.schedules"):
        fired = fire_due(["t-tick"])
    after = now_ms()
    # Then it fires one job, for the latest tick that fell due, and skips the earlier ones
    assert fired == 1
    [due] = schedule_dues("t-basic", "t-tick")
    assert (due - last_due) % 1000 == 0 and before - 1000 < due <= after
    skipped = (due - last_due) // 1000
    assert skipped >= 5
    assert any(f"missed {skipped} ticks" in r.getMessage() for r in caplog.records)
    # and the next tick is the one after it
    assert current_app().client.zscore(next_key(), "t-tick") == due + 1000


def test_gated_off_schedule_is_removed_at_boot(redis_only: HeraldOn) -> None:
    # Given a schedule left in Redis by an earlier boot with its feature enabled
    current_app().client.zadd(next_key(), {"t-gated": 1})
    # When the clock boots with its feature gate off
    enabled = sync_schedules()
    # Then the gated schedule is gone and the ungated one is there
    assert "t-gated" not in enabled and "t-tick" in enabled
    assert current_app().client.zscore(next_key(), "t-gated") is None
    assert current_app().client.zscore(next_key(), "t-tick") is not None


@dataclass
class Restricted:
    """herald connected to a Redis of the test's own as user ``clock``, whose rights the
    test sets through ``admin``."""

    admin: redis.Redis
    env: dict[str, str]

    def allow(self, *rules: str) -> None:
        """Set the ``clock`` user's rules (ACL SETUSER, on top of its password)."""
        self.admin.execute_command("ACL", "SETUSER", "clock", "reset", "on", ">clock-pw",
                                   "&*", *rules)


@pytest.fixture
def restricted(private_redis_url: str, monkeypatch: pytest.MonkeyPatch,
               ) -> Iterator[Restricted]:
    """herald on a private Redis as an ACL user that may do everything until the test
    says otherwise."""
    admin = redis.Redis.from_url(private_redis_url)
    server = admin.connection_pool.connection_kwargs
    env = {"QUEUE_PREFIX": f"t{uuid.uuid4().hex[:10]}", "LOG_LEVEL": "WARNING",
           "BROKER": "redis",
           "REDIS_URL": f"redis://clock:clock-pw@{server['host']}:{server['port']}/0"}
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    setup = Restricted(admin=admin, env=env)
    setup.allow("~*", "+@all")
    reset_herald()
    yield setup
    reset_herald()
    admin.close()


def test_a_tick_whose_job_redis_refused_is_added_once_redis_accepts(
        restricted: Restricted) -> None:
    prefix = restricted.env["QUEUE_PREFIX"]
    # Given a clock whose Redis user may use the schedule table but no queue's keys
    restricted.allow(f"~{prefix}:schedules:*", "+@all")
    with clock_processes(restricted.env):
        first = wait_for(lambda: restricted.admin.zscore(next_key(), "t-tick"), timeout=20,
                         what="the clock to boot")
        # When the first tick falls due: the clock claims it and Redis refuses its job
        wait_for(lambda: restricted.admin.zscore(next_key(), "t-tick") != first,
                 timeout=20, what="the first tick to be claimed")
        assert schedule_dues("t-basic", "t-tick", restricted.admin) == []
        # and then Redis lets the clock write the queue's keys again
        restricted.allow("~*", "+@all")
        # Then the refused tick's job is added after all, and the ticks since with it
        wait_for(lambda: int(first) in schedule_dues("t-basic", "t-tick", restricted.admin),
                 timeout=20, what="the refused tick's job")
        granted_at = now_ms()
        wait_for(lambda: max(schedule_dues("t-basic", "t-tick", restricted.admin))
                 > granted_at, timeout=20, what="a tick after Redis accepted")
    # (a later tick may be skipped only as any clock skips one: stalled past the next
    # tick on a loaded machine, which is logged; never the refused one)
    dues = schedule_dues("t-basic", "t-tick", restricted.admin)
    assert dues[0] == int(first)
    assert all((b - a) % 1000 == 0 for a, b in itertools.pairwise(dues)), dues


def test_a_gated_off_schedule_redis_refuses_to_remove_is_a_warning_and_the_clock_runs(
        restricted: Restricted, caplog: pytest.LogCaptureFixture) -> None:
    prefix = restricted.env["QUEUE_PREFIX"]
    # Given a gated-off schedule left in Redis, and a clock whose Redis user may not
    # remove anything from the schedule table (ZREM only on the queues' keys and on
    # claimed ticks)
    restricted.admin.zadd(next_key(), {"t-gated": 1})
    restricted.allow("~*", "+@all", "-zrem", f"(~{prefix}:{{* +zrem)",
                     f"(~{prefix}:schedules:claimed +zrem)")
    # When the clock boots
    stop = threading.Event()
    with caplog.at_level(logging.WARNING, logger="herald.queue.schedules"):
        clock = threading.Thread(target=fire_schedules, args=(stop,))
        clock.start()
        try:
            # Then it runs: the every-second schedule fires
            wait_for(lambda: schedule_dues("t-basic", "t-tick", restricted.admin),
                     timeout=20, what="a tick")
        finally:
            stop.set()
            clock.join(timeout=10)
    # and the refused removal is a warning naming the schedule; the schedule is still there
    # (herald's own store schedules, gated off too, may be refused beside it when this
    # process has imported them)
    refused = {getattr(r, "schedule", None): r.getMessage() for r in caplog.records
               if r.getMessage().startswith("could not remove gated-off schedule")}
    assert "t-gated" in refused, refused
    assert "NOPERM" in refused["t-gated"] or "permission" in refused["t-gated"]
    assert restricted.admin.zscore(next_key(), "t-gated") == 1
