"""Capsules as declared: herald's table, and bad declarations refused."""

from __future__ import annotations

from datetime import timedelta

import pytest

from actors.lifecycle import BUSINESS_QUEUES, NOTIFICATION_QUEUES
from actors.queues import registry
from herald.queue import App, Capsule, OnFailure, QueueConfig
from herald.queue.capsules import plan_capsules
from herald.queue.worker import drain_bound

#: herald's declarations, read by an App that is never installed nor connected
HERALD = App(QueueConfig(redis_url="redis://localhost:1/0"), registry)


def plan(*queues: str) -> list[tuple[str, list[str], OnFailure]]:
    return [(capsule.name, mine, capsule.on_failure)
            for capsule, mine in plan_capsules(queues, HERALD.capsules())]


def test_herald_puts_its_queues_in_capsules_as_the_lifecycle_describes() -> None:
    # A process with every kind of queue starts them in herald's capsules, in order
    assert plan("fx-refresh", "store-fulfillment", "notification-sms", "payment") == [
        ("notification queues", ["notification-sms"], OnFailure.STOP_CAPSULE),
        ("business queues", ["store-fulfillment", "payment"], OnFailure.STOP_ALL),
        ("store recovery", [], OnFailure.STOP_ALL),
        ("queues of no capsule", ["fx-refresh"], OnFailure.STOP_ALL),
    ]
    # store recovery is a step of the process that runs store-fulfillment only
    assert [name for name, _, _ in plan("payment", "activation")] == ["business queues"]


def test_notification_queues_drain_within_5_s_and_business_queues_without_deadline() -> None:
    assert drain_bound(NOTIFICATION_QUEUES, HERALD) == timedelta(seconds=5)
    assert drain_bound(BUSINESS_QUEUES, HERALD) is None
    # one bound for both would be no bound at all: hence one drain per capsule
    assert drain_bound((*NOTIFICATION_QUEUES, *BUSINESS_QUEUES), HERALD) is None


def test_a_queue_claimed_by_a_second_capsule_is_refused_and_nothing_changes() -> None:
    before = registry.capsules()

    with pytest.raises(ValueError, match="'payment' is in capsules 'business queues' "
                                         "and 'billing'"):
        registry.declare_capsules(Capsule(name="fine", queues=("t-free",)),
                                  Capsule(name="billing", queues=("payment",)))

    assert registry.capsules() == before


@pytest.mark.parametrize(("fields", "error"), [
    ({"name": " "}, ValueError),
    ({"name": "c", "queues": "payment"}, TypeError),
    ({"name": "c", "on_failure": "stop_some"}, ValueError),
    # the policy's old value is no alias: one word, one meaning
    ({"name": "c", "on_failure": "stop_group"}, ValueError),
])
def test_a_malformed_capsule_is_refused(fields: dict[str, object], error: type[Exception],
                                        ) -> None:
    with pytest.raises(error):
        Capsule(**fields)  # type: ignore[arg-type]
