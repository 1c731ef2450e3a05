"""The pipeline loses nothing under crashes and lost jobs.

1,200 events over email and SMS go through real ``herald worker`` processes and a real
``herald clock`` (which runs the handoff sweep every second, with the handoff age
shortened by configuration). While it runs, workers are killed with SIGKILL three times
and Redis loses every job once (``FLUSHALL``, on a Redis of the test's own). Every
delivery still ends terminal, and the mock provider (whose records live in another Redis,
out of the flush's reach) accepted each delivery once — except sends in flight at a kill,
which are counted and bounded.
"""

from __future__ import annotations

import collections
import signal
import time
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import pytest
import redis
from sqlmodel import select

from herald.db import session as db_session
from models.notifications import Delivery
from providers.mock import MockProvider
from tests.support.event_load import IN_FLIGHT_PER_PROCESS, pipeline_worker
from tests.support.pipeline.steps import (
    accepted_twice,
    breakable_pipeline,
    in_flight,
    open_deliveries,
    provider_acceptances,
)
from tests.support.processes import spawn_herald
from tests.support.waiting import wait_for

EVENTS = 1200
ACCOUNTS = 100
#: A killed process's jobs and claims are taken over after seconds, not a minute.
SHORT_LOCK = "tests.support.pipeline.short_lock"


@pytest.fixture
def crash_env(pipeline: None, monkeypatch: pytest.MonkeyPatch, private_redis_url: str,
              redis6_url: str) -> Iterator[str]:
    """The pipeline on a job Redis of the test's own (it is flushed: no other test's keys
    may live there), the mock's records in a second Redis and a fast sweep; yields the
    job Redis's URL. The workers and the clock inherit these variables."""
    with breakable_pipeline(monkeypatch, REDIS_URL=private_redis_url,
                            MOCK_STORE_URL=redis6_url):
        yield private_redis_url


def _trigger_all(run: str) -> None:
    from actors.orchestration import create_account, trigger_event

    accounts = [create_account(email=f"crash{n}@example.com", phone=f"+96655{n:07d}").id
                for n in range(ACCOUNTS)]
    # a few addresses fail transiently once, so retries are in flight when things break
    for n in range(0, ACCOUNTS, 10):
        MockProvider.script(f"crash{n}@example.com", "transient:1")

    def one(n: int) -> None:
        receipt = {"amount": "10.00", "currency": "SAR", "order_id": f"o-{n}"}
        kind = ("payment.receipt", ["email"], receipt) if n % 2 else ("account.welcome",
                                                                      ["sms"], {})
        trigger_event(account_id=accounts[n % ACCOUNTS], type=kind[0], occurrence=f"{run}-{n}",
                      channels=kind[1], data=kind[2])

    with ThreadPoolExecutor(max_workers=4) as pool:
        list(pool.map(one, range(EVENTS)))


@pytest.mark.timeout(170)
def test_kills_and_a_flushall_lose_no_delivery(crash_env: str) -> None:
    started = time.monotonic()
    workers = [pipeline_worker(SHORT_LOCK), pipeline_worker(SHORT_LOCK)]
    clock = spawn_herald("clock")
    in_flight_at_kills: set[str] = set()
    kills = 0
    try:
        with ThreadPoolExecutor(max_workers=1) as producer:
            done = producer.submit(_trigger_all, uuid.uuid4().hex[:8])
            # When workers die mid-send three times and Redis loses every job once
            for step, victim in enumerate([0, 1, 0, None]):
                wait_for(lambda step=step: _sends() > 150 * (step + 1), timeout=60, every=0.2,
                         what="sends to progress")
                if victim is None:
                    redis.Redis.from_url(crash_env).flushall()
                    continue
                workers[victim].send_signal(signal.SIGKILL)
                workers[victim].wait(timeout=10)
                kills += 1
                in_flight_at_kills |= in_flight()  # the killed process's claims stay behind
                workers[victim] = pipeline_worker(SHORT_LOCK)
            done.result(timeout=120)
        # Then every delivery ends terminal: none is lost
        wait_for(lambda: open_deliveries() == 0, timeout=150, every=0.5,
                 what="every delivery to end terminal")
    finally:
        for process in [*workers, clock]:
            process.kill()
            process.wait(timeout=10)
    with db_session() as session:
        outcomes = collections.Counter(session.exec(select(Delivery.outcome)).all())
        deliveries = sum(outcomes.values())
    assert deliveries == EVENTS
    assert outcomes["sent"] == EVENTS, outcomes
    # and the mock accepted each delivery once, except sends in flight at a kill
    assert len(provider_acceptances()) == EVENTS
    duplicated = accepted_twice()
    assert duplicated <= in_flight_at_kills, duplicated - in_flight_at_kills
    assert len(duplicated) <= kills * IN_FLIGHT_PER_PROCESS
    print(f"crash test: {time.monotonic() - started:.0f} s, {kills} kills, 1 FLUSHALL, "
          f"{len(duplicated)} duplicated sends of {len(in_flight_at_kills)} in flight at kills")


def _sends() -> int:
    return len(MockProvider.sends())
