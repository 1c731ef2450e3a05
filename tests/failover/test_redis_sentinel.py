"""Redis fails over under a steady load of events: Sentinel promotes the replica when the
primary is killed, and herald's producers (the API), workers and clock find the new
primary on their own within ``REDIS_FAILOVER_S``; every event the API accepted ends with
its delivery sent (the handoff sweep re-drives what the writes the primary took with it
dropped). The test prints the seconds without progress.

A deployment of the test's own (one primary, one replica, three Sentinels with a quorum
of two and ``down-after-milliseconds`` 1000) on free ports; herald is configured with
``REDIS_SENTINELS`` only. The API runs under uvicorn in the test process; two
``herald worker`` processes and a ``herald clock`` (the handoff sweep every second, rows
older than 3 s) run as in production. The mock provider keeps its records on another
Redis, out of the failover's reach.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest

from herald.queue import REDIS_FAILOVER_S, queue
from providers.mock import MockProvider
from tests.support.event_load import (
    IN_FLIGHT_PER_PROCESS,
    ProgressWatch,
    create_accounts,
    delivery_outcomes,
    killed_at_end,
    pipeline_worker,
    serving_app,
    steady_load,
    wait_all_sent,
)
from tests.support.pipeline.steps import accepted_twice, breakable_pipeline
from tests.support.processes import spawn_herald
from tests.support.sentinels import MASTER_NAME, SentinelDeployment, sentinel_deployment
from tests.support.waiting import wait_for

pytestmark = pytest.mark.slow


@pytest.fixture
def sentinel_redis(pipeline: None, monkeypatch: pytest.MonkeyPatch, redis6_url: str,
                   tmp_path: Path) -> Iterator[SentinelDeployment]:
    """The pipeline on a Redis behind Sentinels of the test's own, the mock's records on
    another Redis, a fast handoff sweep; the workers and the clock inherit the
    environment."""
    with sentinel_deployment(tmp_path / "sentinel") as deployment, breakable_pipeline(
            monkeypatch, REDIS_SENTINELS=deployment.sentinels,
            REDIS_SENTINEL_NAME=MASTER_NAME, MOCK_STORE_URL=redis6_url):
        yield deployment


def _sweeps_since(moment: datetime) -> list[dict[str, int]]:
    """What each handoff sweep the clock added after ``moment`` and a worker ran did."""
    jobs = queue("notification-orchestration").jobs("completed", per_page=500)
    return [job.return_value for job in jobs if job.actor == "reconcile_handoffs_job"
            and job.created_at is not None and job.created_at > moment]


@pytest.mark.timeout(120)
def test_a_killed_primary_fails_over_and_herald_reconnects_losing_nothing(
        sentinel_redis: SentinelDeployment) -> None:
    started = time.monotonic()
    tag = uuid.uuid4().hex[:8]
    primary = sentinel_redis.master_port()
    processes = [pipeline_worker(), pipeline_worker(), spawn_herald("clock")]
    with (ProgressWatch(lambda: len(MockProvider.sends(accepted_only=True))) as progress,
          killed_at_end(processes) as exits, serving_app() as base):
        accounts = create_accounts(base, 20, f"snt{tag}")
        # Given a steady load that the workers keep up with
        with steady_load(base, accounts, tag) as load:
            # When the primary is killed
            sentinel_redis.kill_primary()
            killed_at = time.monotonic()
            sends_at_kill = len(MockProvider.sends(accepted_only=True))
            # Then Sentinel promotes the replica
            wait_for(lambda: sentinel_redis.master_port() not in (None, primary),
                     timeout=15, every=0.1, what="the replica's promotion")
            promoted_at = time.monotonic()
            promoted_wall = datetime.now(UTC)
            # and within REDIS_FAILOVER_S the workers send again and the clock adds
            # sweeps that a worker runs
            wait_for(lambda: len(MockProvider.sends(accepted_only=True)) > sends_at_kill + 40,
                     timeout=REDIS_FAILOVER_S, every=0.1, what="sends to progress again")
            wait_for(lambda: _sweeps_since(promoted_wall),
                     timeout=REDIS_FAILOVER_S - (time.monotonic() - promoted_at),
                     every=0.2, what="a sweep added after the failover")
            resumed_s = time.monotonic() - killed_at
        # and every event accepted, before, during or after, ends with its delivery sent
        wait_all_sent(load, timeout=45)
        stalled_s = progress.longest_stall(killed_at - 0.5, killed_at + resumed_s)
        sweeps = _sweeps_since(promoted_wall)
    # the workers and the clock rode it out: none exited (none needed restarting)
    assert exits == [None] * len(processes), exits
    assert sum(delivery_outcomes(load.accepted).values()) == len(load.accepted)
    # the API accepted events throughout: a Redis away is no reason to refuse one
    assert set(load.statuses) == {202}, (dict(load.statuses), load.bodies)
    twice = len(accepted_twice())
    assert twice <= 2 * IN_FLIGHT_PER_PROCESS, twice
    print(f"Redis Sentinel failover: {time.monotonic() - started:.0f} s, "
          f"{dict(load.statuses)}; replica promoted {promoted_at - killed_at:.1f} s after the "
          f"kill, "
          f"sends and a sweep again {resumed_s:.1f} s after it; longest time without a "
          f"send {stalled_s:.1f} s, without an accepted event "
          f"{load.longest_gap(killed_at - 0.5):.1f} s; {twice} deliveries sent twice; the "
          f"sweeps after the failover: {sweeps}")
