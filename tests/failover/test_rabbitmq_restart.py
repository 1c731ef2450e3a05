"""RabbitMQ restarts under a steady load of events (``BROKER=rabbitmq``): the workers'
consumers and the producers (the API, the clock) reconnect on their own; every event the
API accepted ends with its delivery sent, and the provider accepted a delivery twice only
when its send was in flight at the restart.

A RabbitMQ node of the test's own (the session's is shared: its clients must not be cut)
is stopped with ``rabbitmqctl stop_app`` — every connection closed — and started again
after 5 s; the Redis ledger stays up. The API runs under uvicorn in the test process; two
``herald worker`` processes and a ``herald clock`` (the handoff sweep every second, rows
older than 3 s) run as in production.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator

import pytest
from sqlmodel import select

from herald import db
from herald.queue import queue
from models.notifications import Delivery
from providers.mock import MockProvider
from tests.support.event_load import (
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
from tests.support.restartable_rabbitmq import RestartableRabbitmq, restartable_rabbitmq
from tests.support.waiting import wait_for

pytestmark = pytest.mark.slow

#: Seconds a fifth of the sends take.
HANG_S = 1.5
#: Seconds the broker stays down.
DOWN_S = 3.0


@pytest.fixture
def restarted_broker(pipeline: None,
                     monkeypatch: pytest.MonkeyPatch) -> Iterator[RestartableRabbitmq]:
    """The pipeline with RabbitMQ carrying the messages, on a node of the test's own, and
    a fast handoff sweep; the workers and the clock inherit the environment."""
    with restartable_rabbitmq() as node, breakable_pipeline(
            monkeypatch, BROKER="rabbitmq", RABBITMQ_URL=node.url):
        yield node


def _run_twice(notifications: list[str]) -> set[str]:
    """The accepted events' deliveries whose channel job started more than one run."""
    with db.session() as session:
        rows = session.exec(select(Delivery.id, Delivery.channel).where(
            Delivery.notification_id.in_(notifications))).all()
    return {delivery_id for delivery_id, channel in rows
            if (job := queue(f"notification-{channel}").get(delivery_id)) is not None
            and job.attempts_started > 1}


def _in_flight() -> set[str]:
    """Deliveries an attempt holds a claim on right now."""
    with db.session() as session:
        return set(session.exec(select(Delivery.id).where(
            Delivery.outcome == "sending", Delivery.claimed_at.is_not(None))).all())


@pytest.mark.timeout(150)
def test_a_rabbitmq_restart_under_load_loses_nothing_and_runs_nothing_twice(
        restarted_broker: RestartableRabbitmq) -> None:
    started = time.monotonic()
    tag = uuid.uuid4().hex[:8]
    processes = [pipeline_worker(), pipeline_worker(), spawn_herald("clock")]
    with (ProgressWatch(lambda: len(MockProvider.sends(accepted_only=True))) as progress,
          killed_at_end(processes) as exits, serving_app() as base):
        accounts = create_accounts(base, 20, f"rmq{tag}")
        # a fifth of the sends take 1.5 s: runs are in flight when the broker stops
        for n in range(0, 20, 5):
            MockProvider.script(f"rmq{tag}{n}@example.com", f"hang:{HANG_S}")
            MockProvider.script(f"+96654{n:07d}", f"hang:{HANG_S}")
        # Given a steady load that the workers keep up with
        with steady_load(base, accounts, tag) as load:
            # When the broker stops (every connection closed) and starts again
            restarted_broker.stop()
            down_at = time.monotonic()
            in_flight = _in_flight()  # sends the stop caught (and some claimed since)
            time.sleep(max(0.0, DOWN_S - (time.monotonic() - down_at)))
            restarted_broker.start()
            up_at = time.monotonic()
            sends_at_start = len(MockProvider.sends(accepted_only=True))
            # Then the workers send again and the API keeps accepting events
            wait_for(lambda: len(MockProvider.sends(accepted_only=True))
                     > sends_at_start + 40, timeout=30, every=0.1,
                     what="sends to progress again")
            resumed_s = time.monotonic() - up_at
        # and every accepted event's delivery ends sent
        wait_all_sent(load, timeout=45)
        stalled_s = progress.longest_stall(down_at - 0.5, up_at + resumed_s)
    # the workers and the clock rode it out: none exited (none needed restarting)
    assert exits == [None] * len(processes), exits
    assert sum(delivery_outcomes(load.accepted).values()) == len(load.accepted)
    # the API accepted every event: the broker away is no reason to refuse one
    assert set(load.statuses) == {202}, (dict(load.statuses), load.bodies)
    # the provider accepted each delivery once, but a send in flight at the stop
    twice = accepted_twice()
    assert twice <= in_flight, twice - in_flight
    # and ran a delivery's job twice only when it was in flight at the stop
    reruns = _run_twice(load.accepted)
    assert reruns <= in_flight, reruns - in_flight
    print(f"RabbitMQ restart: {time.monotonic() - started:.0f} s, {dict(load.statuses)}; "
          f"down {up_at - down_at:.1f} s, sends again {resumed_s:.1f} s after the start; "
          f"longest time without a send {stalled_s:.1f} s, without an accepted event "
          f"{load.longest_gap(down_at - 0.5):.1f} s; {len(twice)} deliveries sent twice, "
          f"{len(reruns)} jobs run twice, {len(in_flight)} in flight at the stop")
