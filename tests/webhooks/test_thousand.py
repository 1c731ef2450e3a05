"""A thousand deliveries through real worker processes become a thousand webhook messages,
each received and verified — and none is lost when the relay is SIGKILLed and Redis
loses every job (FLUSHALL) in the middle (docs/api.md#webhooks)."""

from __future__ import annotations

import contextlib
import signal
import subprocess
from collections import Counter
from collections.abc import Callable

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import func, select

from actors import webhooks as relay
from actors.queues import registry
from herald import db
from herald.queue import current_app
from models.notifications import Delivery
from models.webhooks import WebhookMessage
from tests.support.pipeline.steps import account, use_redis
from tests.support.processes import spawn_herald
from tests.support.waiting import wait_for
from tests.webhooks.receiver import Receiver
from tests.webhooks.test_delivery_events import client, receiver, subscribe

__all__ = ["client", "receiver"]

EVENTS = 1_000


def _count(*conditions: object) -> int:
    with db.session() as session:
        return int(session.scalar(select(func.count()).select_from(WebhookMessage)
                                  .where(*conditions)) or 0)


def _sent() -> int:
    with db.session() as session:
        return int(session.scalar(select(func.count()).select_from(Delivery)
                                  .where(Delivery.outcome == "sent")) or 0)


def _sweep_until(condition: Callable[[], bool], what: str) -> None:
    """Run ``herald sweep`` (every sweep, once) and give the workers up to 3 s to act on
    it, again and again until ``condition`` holds; fail after 40 rounds."""
    for _ in range(40):
        if condition():
            return
        assert spawn_herald("sweep").wait(timeout=120) == 0
        with contextlib.suppress(AssertionError):
            wait_for(condition, timeout=3, what=what)
    raise AssertionError(f"the sweeps never got to {what}")


def _stop(process: subprocess.Popen[bytes]) -> None:
    process.kill()
    process.wait(timeout=10)


@pytest.mark.slow
def test_a_thousand_deliveries_reach_the_endpoint_through_a_relay_kill_and_a_flushall(
        client: TestClient, receiver: Receiver, monkeypatch: pytest.MonkeyPatch,
        private_redis_url: str) -> None:
    use_redis(monkeypatch, private_redis_url)  # this test flushes it
    # the sweeps the test runs re-drive anything handed off before them
    monkeypatch.setenv("HANDOFF_SWEEP_AGE_S", "0.01")
    # Given an endpoint subscribed to delivery.sent, and a thousand emails accepted
    subscribe(client, receiver, ["delivery.sent"])
    person = account(client)
    for start in range(0, EVENTS, 500):
        answer = client.post("/v1/events/bulk", json={"events": [
            {"type": "account.welcome", "account_id": person, "channels": ["email"],
             "occurrence": f"change-{n}"} for n in range(start, start + 500)]})
        assert answer.status_code == 200, answer.text
    # When an email worker and a relay run as processes of their own
    email = spawn_herald("worker", "--import", "bench.unlimited", "notification-email")
    relay_worker = spawn_herald("worker", "--import", "tests.webhooks.relay_worker",
                                relay.QUEUE)
    try:
        wait_for(lambda: len(receiver.received) >= EVENTS // 4, timeout=120,
                 what="a quarter of the messages received")
        # And the relay is SIGKILLed mid-stream, then Redis loses every job
        relay_worker.send_signal(signal.SIGKILL)
        relay_worker.wait(timeout=10)
        current_app().client.flushall()
        # And a new relay starts, and the sweeps run until nothing is left (the clock runs
        # them every minute; each run re-drives at most 200 rows of a kind)
        relay_worker = spawn_herald("worker", "--import", "tests.webhooks.relay_worker",
                                    relay.QUEUE)
        # Then every delivery is sent and every message delivered
        _sweep_until(lambda: _sent() == EVENTS, what="every email sent")
        _sweep_until(lambda: _count(WebhookMessage.status == "delivered") == EVENTS,
                     what="every message delivered")
    finally:
        _stop(email)
        _stop(relay_worker)
    # One message per delivery, each received and verified; a message arrived twice only
    # when the kill or the lost job caught it in flight (at most the relay's slots)
    assert _count() == EVENTS
    seen = Counter(got.headers["webhook-id"] for got in receiver.received)
    with db.session() as session:
        assert set(seen) == set(session.scalars(select(WebhookMessage.id)))
    twice = [message_id for message_id, times in seen.items() if times > 1]
    assert len(twice) <= registry.spec(relay.QUEUE).concurrency, twice
    assert all(got.verified_by for got in receiver.received)
