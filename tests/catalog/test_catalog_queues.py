"""The sync queues as declared: their queues' retry values, and their schedules' gates,
intervals and startup jobs."""

from __future__ import annotations

import json
import subprocess
import sys
from datetime import timedelta
from pathlib import Path

import pytest

from actors.queues import registry
from herald.queue import Backoff
from tests.cli.test_cli import QUICK_S, herald_env

#: Prints every declared schedule as JSON: name → [every (s), feature gate's name, at start].
LIST_SCHEDULES = """
import json
from herald.commands.shared import load_actor_modules
from actors.queues import registry
load_actor_modules()
print(json.dumps({s.name: [s.every.total_seconds(), getattr(s.feature_gate, "__name__", None),
                           s.run_at_start] for s in registry.schedules().values()}))
"""


@pytest.mark.parametrize("name", ["package-sync", "esim-product-sync", "fx-refresh"])
def test_each_sync_queue_runs_one_job_at_a_time_with_three_attempts_5_s_exponential(
        name: str) -> None:
    spec = registry.spec(name)
    assert (spec.concurrency, spec.attempts, spec.backoff, spec.backoff_base) == (
        1, 3, Backoff.EXPONENTIAL, timedelta(seconds=5))


def test_the_schedules_their_gates_intervals_and_startup_jobs(tmp_path: Path) -> None:
    # Given the intervals set apart from each other
    env = herald_env(FX_REFRESH_INTERVAL_MS="90000", CATALOG_SYNC_INTERVAL_S="120")

    # When a process loads herald's actors (as the clock does)
    done = subprocess.run([sys.executable, "-c", LIST_SCHEDULES], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=QUICK_S)
    declared = json.loads(done.stdout)

    # Then FX refresh and the eSIM sync are behind the store's gate, the package sync is
    # not, each runs at the clock's start, at the interval its setting names
    assert declared["fx-refresh"] == [90.0, "esim_store_enabled", True]
    assert declared["esim-product-sync"] == [120.0, "esim_store_enabled", True]
    assert declared["package-sync"] == [120.0, None, True]
