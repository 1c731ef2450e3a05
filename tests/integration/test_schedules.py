"""Repeatable schedules under several clocks, and feature gates at boot."""

from __future__ import annotations

import itertools
import logging
import os
import signal
import subprocess
import sys
import time

import pytest

from herald.connections import redis_client
from herald.jobs import queue
from herald.schedules import sync_schedules
from herald.settings import get_settings
from tests.integration.conftest import REPO, HeraldOn, wait_for


def tick_jobs() -> list[str]:
    q = queue("t-basic")
    return [j.id for j in q.jobs("waiting", per_page=1000) if j.id.startswith("repeat:t-tick:")]


def test_two_clocks_fire_an_every_second_schedule_once_per_tick(redis_only: HeraldOn) -> None:
    # Given two clock processes running the same every-second schedule
    clocks = [subprocess.Popen([sys.executable, "-m", "tests.integration.run_clock"], cwd=REPO,
                               env={**os.environ, **redis_only.env}) for _ in range(2)]
    try:
        wait_for(lambda: tick_jobs(), timeout=20, what="first tick")
        first = time.monotonic()
        # When they run for 10 seconds
        time.sleep(10 - (time.monotonic() - first))
        fired = tick_jobs()
    finally:
        for clock in clocks:
            clock.send_signal(signal.SIGTERM)
        for clock in clocks:
            clock.wait(timeout=10)
    # Then one job per tick was added: 10 ± 1 (+ the first one)
    assert 10 <= len(fired) <= 12, fired
    dues = sorted(int(job_id.rsplit(":", 1)[1]) for job_id in fired)
    assert all(b - a == 1000 for a, b in itertools.pairwise(dues))


def test_gated_off_schedule_is_removed_at_boot(redis_only: HeraldOn,
                                               caplog: pytest.LogCaptureFixture) -> None:
    key = f"{get_settings().queue_prefix}:schedules:next"
    # Given a schedule left in Redis by an earlier boot with the store enabled
    redis_client().zadd(key, {"t-gated": 1})
    # When the clock boots with FEATURE_ESIM_STORE off
    enabled = sync_schedules()
    # Then the gated schedule is gone and the ungated one is there
    assert "t-gated" not in enabled and "t-tick" in enabled
    assert redis_client().zscore(key, "t-gated") is None
    assert redis_client().zscore(key, "t-tick") is not None

    # And a removal that fails is a warning, not a crash
    def broken_remove(*_: object) -> int:
        raise ConnectionError("redis went away")

    with caplog.at_level(logging.WARNING, logger="herald.clock"):
        sync_schedules(remove=broken_remove)
    assert any("could not remove gated-off schedule" in r.getMessage() for r in caplog.records)
