"""An eSIM order paid and issued with its lanes on one Redis and its notifications on
another (REDIS_SHARDS, docs/queue.md#shards), through real ``herald worker`` processes,
one per shard: every job's keys are on the Redis of its queue."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
import redis
from sqlmodel import select

from actors.payments import complete_payment, create_payment
from herald import db, settings
from herald.queue_app import build_queue_app
from herald.settings import Settings, SettingsError, load_settings
from models.notifications import Delivery, Notification, Outcome
from tests.support.processes import REPO, spawn_herald
from tests.support.queue_app import install_queue_app
from tests.support.store.steps import account, order, placed, wait_state
from tests.support.waiting import wait_for

#: The lanes' shard: settlement, its receipt job and the issuance.
FULFILLMENT = ("payment", "store-fulfillment")
#: The notification queues, on the default Redis (REDIS_URL).
NOTIFICATIONS = ("notification-orchestration", "notification-email", "notification-sms",
                 "notification-push")


def _sent(account_id: str) -> dict[str, set[str]]:
    """Each notification type of the account and the outcomes of its email deliveries."""
    with db.session() as session:
        rows = session.exec(select(Notification.type, Delivery.outcome).join(
            Delivery, Delivery.notification_id == Notification.id).where(
            Notification.account_id == account_id, Delivery.channel == "email")).all()
    found: dict[str, set[str]] = {}
    for kind, outcome in rows:
        found.setdefault(kind, set()).add(outcome)
    return found


def _job_queues(client: redis.Redis, prefix: str) -> set[str]:
    """The queues that have job records on ``client``'s Redis under ``prefix``."""
    head = f"{prefix}:{{"
    return {key.decode()[len(head):].partition("}:job:")[0]
            for key in client.scan_iter(match=f"{prefix}:{{*}}:job:*", count=1000)}


@pytest.mark.timeout(120)
def test_an_order_is_paid_issued_and_notified_with_lanes_and_notifications_on_two_redis(
        store: str, monkeypatch: pytest.MonkeyPatch, redis_url: str, redis6_url: str) -> None:
    # Given the lanes on a Redis of their own (the 6.2 server) and the rest on REDIS_URL
    monkeypatch.setenv("REDIS_SHARDS", f"fulfillment={redis6_url} {','.join(FULFILLMENT)}")
    settings.reset_settings()
    install_queue_app()
    prefix = settings.get_settings().queue_prefix
    default, lanes = redis.Redis.from_url(redis_url), redis.Redis.from_url(redis6_url)
    # And one worker process per shard
    workers = [spawn_herald("worker", *FULFILLMENT), spawn_herald("worker", *NOTIFICATIONS)]
    try:
        # When an order is placed and its payment completes
        buyer = account()
        order_id = placed("mock-ok", buyer)
        placed_order = order(order_id)
        payment = create_payment(order_id=order_id, amount=str(placed_order["amount"]),
                                 currency=placed_order["currency"])
        complete_payment(payment.id)
        # Then the order is issued, and its receipt and esim.ready emails are sent
        view = wait_state(order_id, "issued", timeout=60)
        assert view["status"] == "completed"
        wait_for(lambda: _sent(buyer).get("payment.receipt") == {Outcome.SENT.value}
                 and _sent(buyer).get("esim.ready") == {Outcome.SENT.value},
                 timeout=60, every=0.1, what="the receipt and esim.ready emails")
        assert all(worker.poll() is None for worker in workers)
    finally:
        for worker in workers:
            worker.terminate()
        for worker in workers:
            worker.wait(timeout=30)
    # And every job's record is on the Redis of its queue's shard
    on_lanes, on_default = _job_queues(lanes, prefix), _job_queues(default, prefix)
    assert on_lanes == set(FULFILLMENT)
    # (orchestration jobs leave no record once done: its queue removes them on completion)
    assert "notification-email" in on_default
    assert not on_default & set(FULFILLMENT)
    # And no key of a notification queue is on the lanes' Redis
    assert not [key for key in lanes.scan_iter(match=f"{prefix}:{{notification-*", count=1000)]
    for client in (default, lanes):
        client.close()


def test_a_worker_asked_for_queues_of_two_shards_refuses_to_start(
        store: str, monkeypatch: pytest.MonkeyPatch, redis6_url: str) -> None:
    # Given the lanes on a shard of their own
    monkeypatch.setenv("REDIS_SHARDS", f"fulfillment={redis6_url} {','.join(FULFILLMENT)}")
    # When one worker is asked for a lane and a notification queue
    worker = subprocess.run([sys.executable, "-m", "herald.cli", "worker", "payment",
                             "notification-email"], cwd=REPO, capture_output=True, text=True,
                            timeout=60, env={**os.environ, "WORKER_PORT": "0"})
    # Then it stops at start, naming each shard and its queues
    assert worker.returncode == 1, worker.stderr
    assert "shard 'default': notification-email" in worker.stderr
    assert "shard 'fulfillment': payment" in worker.stderr


def test_a_bad_redis_shards_stops_the_start_naming_the_bad_part(
        monkeypatch: pytest.MonkeyPatch, redis_url: str) -> None:
    # A part without queues (its URL's password is not repeated), a bad URL, a name twice
    for value, says in {"x=redis://:s3cret@h:1/0": "shard 'x' is not NAME=URL QUEUE",
                        "x=http://h payment": "shard 'x': the URL must start with redis://",
                        "x=redis://h payment; x=redis://h activation": "shard 'x' is named twice",
                        }.items():
        monkeypatch.setenv("REDIS_SHARDS", value)
        with pytest.raises(SettingsError) as refused:
            load_settings()
        assert "REDIS_SHARDS" in str(refused.value) and says in str(refused.value)
        assert "s3cret" not in str(refused.value)
    # A queue herald does not declare, or one in two shards, stops the App's build
    for value, says in {"x=redis://h nope": "shard 'x' names queue 'nope'",
                        "x=redis://h payment; y=redis://h payment":
                            "queue 'payment' is in shards 'x' and 'y'"}.items():
        monkeypatch.setenv("REDIS_SHARDS", value)
        with pytest.raises(SettingsError, match="REDIS_SHARDS: .*" + says):
            build_queue_app(Settings(redis_url=redis_url, redis_shards=value))
