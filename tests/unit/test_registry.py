"""The registry declares every queue of SPEC section 3 with the seeds' values."""

from __future__ import annotations

import dataclasses
from datetime import timedelta

import pytest

from herald.registry import DAY, HOUR, MINUTE, SECOND, Backoff, QueueSpec, builtin_specs
from herald.settings import Settings

SPEC_QUEUES = {"notification-email", "notification-sms", "notification-orchestration",
               "activation", "payment", "store-fulfillment", "package-sync",
               "esim-product-sync", "fx-refresh", "supplier-dispatch", "backorder-reroute",
               "email-retry"}


def specs(**settings: object) -> dict[str, QueueSpec]:
    return {s.name: s for s in builtin_specs(Settings(**settings))}


def test_every_queue_of_the_spec_is_declared_with_every_value() -> None:
    declared = specs()
    assert set(declared) == SPEC_QUEUES
    for spec in declared.values():
        for field in dataclasses.fields(spec):
            value = getattr(spec, field.name)
            if field.name in ("rate_limit", "time_limit", "max_started_attempts",
                              "feature_gate", "shutdown_timeout"):
                continue  # None is a value here: "no limit" / "always on"
            assert value is not None and value != "", (spec.name, field.name)
        assert spec.description, spec.name


def test_notification_lanes_carry_seed_000s_values() -> None:
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
        assert spec.priority_lanes == (1, 5)


def test_dispatch_lanes_follow_seed_003_and_its_environment() -> None:
    q = specs(dispatch_attempts=4, dispatch_backoff_ms=250, email_worker_concurrency=6)
    dispatch, reroute = q["supplier-dispatch"], q["backorder-reroute"]
    assert (dispatch.concurrency, dispatch.attempts, dispatch.backoff_base,
            dispatch.lock_duration) == (1, 4, timedelta(milliseconds=250), 120 * SECOND)
    assert (dispatch.retention.completed.count, dispatch.retention.completed.age,
            dispatch.retention.failed.age) == (1000, HOUR, DAY)
    assert (reroute.concurrency, reroute.attempts) == (6, 3)
    retry = q["email-retry"]
    assert (retry.concurrency, retry.attempts, retry.backoff) == (4, 1, Backoff.NONE)
    assert (q["fx-refresh"].feature_gate, q["esim-product-sync"].feature_gate) == (
        "feature_esim_store", "feature_esim_store")


def test_exponential_backoff_doubles_from_the_base() -> None:
    spec = QueueSpec(name="x", attempts=3, backoff_base=SECOND)
    assert [spec.backoff_for(k) for k in (2, 3, 4)] == [SECOND, 2 * SECOND, 4 * SECOND]


@pytest.mark.parametrize("bad", [{"concurrency": 0}, {"attempts": 0},
                                 {"rate_limit": (0, MINUTE)}, {"name": "a:b"},
                                 {"priority_lanes": (0,)}])
def test_a_spec_with_a_bad_value_is_refused(bad: dict) -> None:
    with pytest.raises(ValueError, match="QueueSpec"):
        QueueSpec(**{"name": "x", **bad})
