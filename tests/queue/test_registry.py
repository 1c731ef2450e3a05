"""herald's queue table declares every queue with its values
(docs/queue.md#the-queue-table)."""

from __future__ import annotations

from datetime import timedelta

import pytest

from actors.queues import herald_queues
from herald.queue.registry import DAY, HOUR, MINUTE, SECOND, Backoff, QueueSpec
from herald.settings import Settings

TABLE_QUEUES = {"notification-email", "notification-sms", "notification-push",
                "notification-orchestration",
               "activation", "payment", "store-fulfillment", "package-sync",
               "esim-product-sync", "fx-refresh", "supplier-dispatch", "backorder-reroute",
               "email-retry", "webhook-delivery"}


def specs(**settings: object) -> dict[str, QueueSpec]:
    return {s.name: s for s in herald_queues(Settings(**settings))}


def test_every_queue_of_the_table_is_declared() -> None:
    assert set(specs()) == TABLE_QUEUES


def test_a_spec_with_only_a_name_has_the_documented_defaults() -> None:
    spec = QueueSpec(name="x")
    # concurrency 1, attempts 3, exponential backoff from 1 s, no rate limit
    assert (spec.concurrency, spec.attempts, spec.backoff, spec.backoff_base,
            spec.rate_limit) == (1, 3, Backoff.EXPONENTIAL, SECOND, None)
    # retention keeps failures for inspection: longer and more of them than completions,
    # and never removed as they fail
    completed, failed = spec.retention.completed, spec.retention.failed
    assert (completed.count, completed.age, completed.remove) == (1000, DAY, False)
    assert (failed.count, failed.age, failed.remove) == (5000, 7 * DAY, False)
    # no time limit, no bound on starts, unbounded drain
    assert (spec.lock_duration, spec.time_limit, spec.max_started_attempts,
            spec.shutdown_timeout) == (30 * SECOND, None, None, None)


def test_notification_queues_carry_their_documented_values() -> None:
    q = specs()
    email, sms, orchestration = (q["notification-email"], q["notification-sms"],
                                 q["notification-orchestration"])
    assert (email.concurrency, email.rate_limit, email.attempts, email.backoff_base,
            email.max_started_attempts) == (5, (30, MINUTE), 5, 5 * SECOND, 5)
    assert (sms.concurrency, sms.rate_limit, sms.attempts, sms.backoff_base,
            sms.max_started_attempts) == (2, (10, MINUTE), 3, 5 * SECOND, 3)
    assert (orchestration.concurrency, orchestration.rate_limit, orchestration.attempts,
            orchestration.backoff_base) == (2, None, 5, SECOND)
    for spec in (email, sms, orchestration):
        assert spec.retention.completed.count == 500
        assert (spec.retention.failed.count, spec.retention.failed.age) == (5000, 7 * DAY)


def test_dispatch_queues_follow_their_environment() -> None:
    q = specs(dispatch_attempts=4, dispatch_backoff_ms=250, email_worker_concurrency=6,
              sysco_worker_concurrency=2)
    dispatch, reroute = q["supplier-dispatch"], q["backorder-reroute"]
    assert (dispatch.concurrency, dispatch.attempts, dispatch.backoff_base,
            dispatch.lock_duration) == (4, 4, timedelta(milliseconds=250), 120 * SECOND)
    assert dict(dispatch.group_limits) == {"sysco": 2}
    assert (dispatch.retention.completed.count, dispatch.retention.completed.age,
            dispatch.retention.failed.age) == (1000, HOUR, DAY)
    assert (reroute.concurrency, reroute.attempts) == (6, 3)
    retry = q["email-retry"]
    assert (retry.concurrency, retry.attempts, retry.backoff) == (4, 1, Backoff.NONE)


@pytest.mark.parametrize("bad", [{"concurrency": 0}, {"attempts": 0},
                                 {"rate_limit": (0, MINUTE)}, {"name": "a:b"}])
def test_a_spec_with_a_bad_value_is_refused(bad: dict) -> None:
    with pytest.raises(ValueError, match="QueueSpec"):
        QueueSpec(**{"name": "x", **bad})
