"""When store recovery runs: the clock's schedule (behind FEATURE_ESIM_STORE), the job a
worker adds as it starts, and ``herald sweep store-recovery``."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from datetime import timedelta

import pytest
import redis

import actors.handoffs  # noqa: F401  (an ungated startup job: the clock's sentinel)
from actors.queues import esim_store_enabled
from actors.store_recovery import recover_store_orders, start_store_recovery
from herald.queue import (
    Job,
    current_app,
    fire_schedules,
    queue,
    running_worker,
)
from herald.settings import get_settings
from tests.store_recovery.conftest import ago, reload, store_order, use_env
from tests.support.waiting import wait_for

STORE = "store-fulfillment"


def startup_jobs(queue_name: str, name: str) -> list[Job]:
    return [job for job in queue(queue_name).jobs("waiting")
            if job.id.startswith(f"startup:{name}:")]


@pytest.fixture
def clock(store: None) -> Iterator[None]:
    """A clock running in this process while the block runs."""
    stop = threading.Event()
    thread = threading.Thread(target=fire_schedules, args=(stop,))
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join()


def test_the_schedule_runs_every_interval_behind_the_store_feature(store: None) -> None:
    [item] = [s for s in current_app().schedules().values() if s.name == "store-recovery"]
    assert item.actor is recover_store_orders
    assert item.every == timedelta(seconds=60)
    assert (item.run_at_start, item.feature_gate) == (True, esim_store_enabled)


def test_a_clock_with_the_store_on_adds_a_recovery_job_at_start(clock: None) -> None:
    [job] = wait_for(lambda: startup_jobs(STORE, "store-recovery"), timeout=10)
    assert job.actor == "recover_store_orders"
    assert current_app().client.zscore(f"{get_settings().queue_prefix}:schedules:next",
                                 "store-recovery") is not None


def test_a_clock_with_the_store_off_adds_no_recovery_and_drops_a_leftover_schedule(
        store: None, monkeypatch: pytest.MonkeyPatch) -> None:
    # Given a schedule left in Redis by an earlier store-enabled boot
    use_env(monkeypatch, feature_esim_store="false")
    next_key = f"{get_settings().queue_prefix}:schedules:next"
    current_app().client.zadd(next_key, {"store-recovery": 1})
    # When a clock starts with the store off
    stop = threading.Event()
    thread = threading.Thread(target=fire_schedules, args=(stop,))
    thread.start()
    try:
        # (the handoff sweep's startup job is added after every gated schedule is synced)
        wait_for(lambda: startup_jobs("notification-orchestration", "reconcile-handoffs"),
                 timeout=10)
    finally:
        stop.set()
        thread.join()
    # Then no recovery job was added and the leftover schedule is gone
    assert startup_jobs(STORE, "store-recovery") == []
    assert current_app().client.zscore(next_key, "store-recovery") is None


def test_a_worker_start_adds_a_recovery_job_that_runs_the_scans(store: None) -> None:
    stalled = store_order("in_flight", in_flight_at=ago(hours=1))
    # When a worker starts store recovery and serves the queue
    start_store_recovery()
    [job] = startup_jobs(STORE, "store-recovery")
    with running_worker([STORE]):
        done = wait_for(lambda: queue(STORE).get(job.id).state == "completed", timeout=30)
    assert done
    # Then the job ran the scans: the stalled order was requeued and stamped
    assert queue(STORE).get(job.id).return_value == {
        "stalled_scan": 1, "webhook_fallback": 0, "verification_deadline": 0, "live": 0}
    assert reload(stalled).recovered_at is not None


def test_starting_recovery_raises_when_the_job_cannot_be_added(
        store: None, monkeypatch: pytest.MonkeyPatch) -> None:
    use_env(monkeypatch, redis_url="redis://127.0.0.1:1/0")
    with pytest.raises(redis.ConnectionError):
        start_store_recovery()


def test_starting_recovery_with_the_store_off_adds_nothing(
        store: None, monkeypatch: pytest.MonkeyPatch) -> None:
    use_env(monkeypatch, feature_esim_store="false")
    start_store_recovery()
    assert queue(STORE).counts()["waiting"] == 0


def test_herald_sweep_runs_store_recovery(store: None) -> None:
    stalled = store_order("in_flight", in_flight_at=ago(hours=1))
    assert current_app().sweeps()["store-recovery"]() == 1
    assert reload(stalled).recovered_at is not None
