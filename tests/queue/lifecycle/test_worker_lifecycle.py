"""``herald worker`` starts its queues in capsules and stops them in order: real processes
on a real Redis, each startup failure caused for real (docs/queue.md#capsules)."""

from __future__ import annotations

import json
import signal
import urllib.error
import urllib.request
from datetime import datetime
from typing import Any

import pytest
import redis

from herald.queue import enqueue, queue
from tests.queue.lifecycle.conftest import Lifecycle, WorkerRun, reset_herald
from tests.support.queue.probes import (
    Probe,
    events,
    lc_probe_email,
    lc_probe_store,
    open_gate,
)
from tests.support.waiting import wait_for

#: The notification queues' drain bound (their queues' shutdown_timeout).
NOTIFICATION_BOUND_S = 5.0


def states(*jobs: tuple[str, str]) -> list[str | None]:
    """The ledger state of each ``(queue, job id)``; None for a job the ledger lacks."""
    found = [queue(name).get(job_id) for name, job_id in jobs]
    return [job.state if job is not None else None for job in found]


def readyz(run: WorkerRun) -> tuple[int, dict[str, Any]]:
    """GET the worker's own /readyz (its port from its log)."""
    port = run.record("worker health server listening")["port"]
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=10) as answer:
            return answer.status, json.loads(answer.read())
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read())


@pytest.mark.parametrize(("setting", "value"), [("ESIM_PROVIDERS", "mock,nope"),
                                                ("OPERATORS", "nope")])
def test_a_business_startup_failure_stops_the_process_before_it_takes_a_job(
        lifecycle: Lifecycle, setting: str, value: str) -> None:
    # Given a job waiting on a notification queue and one on a business queue
    enqueue(lc_probe_email, Probe(key="n1"), job_id="n1")
    enqueue(lc_probe_store, Probe(key="b1"), job_id="b1")

    # When a worker for both starts with a plugin setting naming no known plugin
    run = lifecycle.spawn("notification-email", "store-fulfillment", **{setting: value})
    code = run.wait()

    # Then it exits non-zero with one error line naming the setting, and took no job
    assert code == 1
    errors = run.errors()
    assert len(errors) == 1, errors
    assert "business queues startup failed" in errors[0]
    assert setting in errors[0] and "'nope'" in errors[0]
    assert events("start") == []
    assert states(("notification-email", "n1"), ("store-fulfillment", "b1")) == [
        "waiting", "waiting"]
    # and it stopped its workers, then closed the producer clients
    assert run.index("worker stopped") < run.index("producer clients closed")


def test_a_notification_startup_failure_stops_only_the_notification_queues(
        lifecycle: Lifecycle) -> None:
    # Given a job waiting on a notification queue, then one on a business queue
    enqueue(lc_probe_email, Probe(key="n1"), job_id="n1")
    enqueue(lc_probe_store, Probe(key="b1"), job_id="b1")

    # When a worker for both starts with an email provider that cannot be built
    run = lifecycle.spawn("notification-email", "store-fulfillment",
                          EMAIL_PROVIDER="onesignal", ONESIGNAL_BASE_URL="::not a url::")

    # Then the business job is processed, the notification job is not taken
    wait_for(lambda: states(("store-fulfillment", "b1")) == ["completed"],
             what="the business job to complete")
    assert run.record("worker started")["queues"] == "store-fulfillment"
    assert events("start") == ["b1"]
    assert states(("notification-email", "n1")) == ["waiting"]
    # and the error names the queues and the setting; the process runs on, not ready
    errors = run.errors()
    assert len(errors) == 1, errors
    assert "notification queues startup failed" in errors[0] and "EMAIL_PROVIDER" in errors[0]
    status, checks = readyz(run)
    assert status == 503
    assert checks["queues"] == "down"
    # (asked from this machine, with no API_TOKEN set, the reason comes too)
    assert checks["errors"]["queues"].startswith("notification queues down")
    assert {checks["database"], checks["redis"], checks["broker"]} == {"ok"}
    assert run.process.poll() is None

    # When it is stopped, then it exits 0 and never took the notification job
    assert run.stop() == 0
    assert states(("notification-email", "n1")) == ["waiting"]


def test_a_worker_whose_capsules_all_start_is_ready(lifecycle: Lifecycle) -> None:
    # Given a worker for a notification queue and a business queue, every setting valid
    run = lifecycle.spawn("notification-email", "store-fulfillment")
    started = run.record("worker started")

    # Then it runs both, and its /readyz says its queues are up
    assert started["queues"] == "notification-email,store-fulfillment"
    assert readyz(run) == (200, {"database": "ok", "redis": "ok", "broker": "ok",
                                 "queues": "ok"})
    assert run.stop() == 0


def test_a_worker_of_several_capsules_starts_and_stops_without_a_warning(
        lifecycle: Lifecycle) -> None:
    # Given a worker whose queues fall in two capsules (two Dramatiq workers on one broker)
    run = lifecycle.spawn("notification-email", "store-fulfillment")
    run.record("worker started")

    # When it has started and stopped
    assert run.stop() == 0

    # Then nothing it logged was a warning or worse: a start that went as planned says so
    # at INFO only
    warned = [f"{r.get('level')}: {r.get('msg')}" for r in run.records
              if r.get("level") not in ("DEBUG", "INFO")]
    assert warned == [], warned


def test_a_store_recovery_startup_failure_stops_the_process(
        lifecycle: Lifecycle, private_redis_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    # Given a Redis whose "worker" user may use every key but store-fulfillment's
    prefix = lifecycle.env["QUEUE_PREFIX"]
    admin = redis.Redis.from_url(private_redis_url)
    admin.acl_setuser("worker", enabled=True, passwords=["+worker-secret"],
                      commands=["+@all"],
                      keys=[f"{prefix}:{{notification-*", f"{prefix}:{{activation}}:*",
                            f"{prefix}:{{payment}}:*", f"{prefix}:lc:*"])
    host_port = private_redis_url.removeprefix("redis://")
    monkeypatch.setenv("REDIS_URL", private_redis_url)
    reset_herald()
    # and a job waiting on a notification queue
    enqueue(lc_probe_email, Probe(key="n1"), job_id="n1")

    # When a worker hosting store-fulfillment starts as that user, so the store recovery
    # scan cannot be enqueued
    run = lifecycle.spawn("notification-email", "store-fulfillment",
                          REDIS_URL=f"redis://worker:worker-secret@{host_port}",
                          FEATURE_ESIM_STORE="true")  # recovery runs with the store only
    code = run.wait()

    # Then it exits non-zero with one error line naming store recovery, and took no job
    assert code == 1
    errors = run.errors()
    assert len(errors) == 1, errors
    assert "store recovery" in errors[0] and "startup failed" in errors[0]
    assert "can't access" in errors[0]  # the ACL refused the enqueue
    assert events("start") == []
    assert states(("notification-email", "n1")) == ["waiting"]
    assert sum(queue("store-fulfillment").counts().values()) == 0


def at(record: dict[str, Any]) -> float:
    """When a JSON log record was written (its ``ts``), in seconds since the epoch."""
    return datetime.fromisoformat(str(record["ts"]).replace("Z", "+00:00")).timestamp()


def test_shutdown_forces_notification_runs_after_their_bound_and_waits_for_business_runs(
        lifecycle: Lifecycle) -> None:
    # Given a worker running a long notification job and a business job that goes on
    # until the test lets it (then enqueues a follow-up job)
    enqueue(lc_probe_email, Probe(key="n-long", sleep_s=120), job_id="n-long")
    enqueue(lc_probe_store, Probe(key="b-gated", gated=True, then_enqueue="b-follow-up"),
            job_id="b-gated")
    run = lifecycle.spawn("notification-email", "store-fulfillment")
    wait_for(lambda: sorted(events("start")) == ["b-gated", "n-long"],
             what="both runs to start")

    # When it is sent SIGTERM
    run.process.send_signal(signal.SIGTERM)

    # Then the notification run is forced once its 5 s bound has passed since the drain
    # began (both times from the worker's own log, so no clock but its own is compared)
    draining = run.record("signal SIGTERM: draining", timeout=30)
    forced = run.record("drain bound of 5 s reached", timeout=30)
    assert forced["queues"] == "notification-email"
    assert at(forced) - at(draining) >= NOTIFICATION_BOUND_S - 0.1
    assert run.process.poll() is None

    # When the business run is let go after that
    open_gate("b-gated")

    # Then the process waited for it: it completed, its follow-up job was enqueued, and
    # the process exits 0 with the forced notification job left to restart later
    assert run.wait() == 0
    assert states(("store-fulfillment", "b-gated"), ("payment", "b-follow-up"),
                  ("notification-email", "n-long")) == ["completed", "waiting", "active"]
    assert "n-long" not in events("done")
    # and the producer clients closed only after every worker had stopped
    assert (run.index("queues stopped", queues="store-fulfillment")
            < run.index("producer clients closed"))
