"""The notification pipeline on PostgreSQL: events in, fenced outcomes out."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import text

from actors.notifications import DeliveryJob, deliver
from actors.queues import registry
from herald import db, settings
from herald.db import session as db_session
from herald.queue import current_app, queue, running_worker
from herald.web import create_app
from models.notifications import Delivery, Outcome, claim_delivery, record_delivery_outcome
from providers.mock import MockProvider
from tests.support.pipeline.steps import (
    account,
    event,
    outcomes,
    sessions_waiting_on,
    settled,
    use_redis,
)
from tests.support.services import find_free_port
from tests.support.waiting import wait_for

QUEUES = ["notification-email", "notification-sms"]
REPO = Path(__file__).resolve().parents[2]


def test_event_persists_then_enqueues_and_a_repeat_sends_nothing(
        pipeline: None, monkeypatch: pytest.MonkeyPatch, private_redis_url: str) -> None:
    use_redis(monkeypatch, private_redis_url)  # this test flushes it
    client = TestClient(create_app())
    # Given an account, when a welcome event arrives
    first = event(client, account(client), urgency="urgent")
    # Then one notification with a delivery per channel; in-app is delivered at once
    assert first["_status"] == 202
    by_channel = {d["channel"]: d for d in first["deliveries"]}
    assert {c: d["outcome"] for c, d in by_channel.items()} == {
        "email": "queued", "sms": "queued", "in_app": "delivered"}
    # and each channel job has the delivery id as job id, urgent → priority 1
    email_job = queue("notification-email").get(by_channel["email"]["id"])
    assert email_job is not None and email_job.priority == 1
    # When the same occurrence arrives again, even after Redis lost every job
    current_app().client.flushall()
    again = event(client, first["account_id"])
    # Then it is the same notification, and nothing new was enqueued or persisted
    assert (again["_status"], again["id"]) == (200, first["id"])
    assert [d["id"] for d in again["deliveries"]] == [d["id"] for d in first["deliveries"]]
    assert sum(queue("notification-email").counts().values()) == 0


def test_workers_send_each_delivery_once_through_the_provider(pipeline: None) -> None:
    client = TestClient(create_app())
    created = event(client, account(client), "esim.ready", "order-1",
                    data={"iccid": "8966000000000000001", "activation_code": "LPA:1$smdp.io$AB-1"})
    with running_worker(QUEUES):
        wait_for(lambda: settled(client, created["id"]), timeout=30)
    assert outcomes(client, created["id"]) == {"email": "sent", "sms": "sent"}
    sends = MockProvider.sends()
    assert sorted(s["channel"] for s in sends) == ["email", "sms"]
    email = next(s for s in sends if s["channel"] == "email")
    assert email["attachments"] == ["esim-qr.png"]
    delivery = client.get(f"/v1/deliveries/{email['idempotency_key']}").json()
    assert (delivery["provider"], delivery["attempts"]) == ("mock", 1)
    assert delivery["provider_message_id"] == email["provider_message_id"]


def test_gates_suppress_with_a_reason_and_send_nothing(pipeline: None) -> None:
    client = TestClient(create_app())
    inactive = event(client, account(client, active=False))
    opted_out = event(client, account(client, marketing_opt_out=True), "promo.offer", "spring",
                      data={"headline": "Spring", "code": "SPRING10"})
    no_phone = event(client, account(client, phone=None), channels=["sms"])
    with running_worker(QUEUES):
        for n in (inactive, opted_out, no_phone):
            wait_for(lambda n=n: settled(client, n["id"]), timeout=30)
    def gated(n: dict) -> dict[str, tuple[str, str | None]]:
        body = client.get(f"/v1/notifications/{n['id']}").json()
        return {d["channel"]: (d["outcome"], d["reason"]) for d in body["deliveries"]}

    assert gated(inactive) == {"email": ("suppressed", "inactive"),
                               "sms": ("suppressed", "inactive"),
                               "in_app": ("suppressed", "inactive")}
    assert gated(opted_out) == {"email": ("suppressed", "opted_out"),
                                "sms": ("suppressed", "opted_out")}
    assert gated(no_phone) == {"sms": ("suppressed", "no_address")}
    assert MockProvider.sends() == []


def test_an_attempt_whose_claim_was_taken_over_cannot_write(pipeline: None) -> None:
    client = TestClient(create_app())
    created = event(client, account(client), channels=["email"])
    delivery_id = created["deliveries"][0]["id"]
    with db_session() as session:
        old = claim_delivery(session, delivery_id)
        # the old claim goes stale and a newer attempt takes the delivery over
        from datetime import timedelta

        newer = claim_delivery(session, delivery_id, now=old.token + timedelta(seconds=61))
        assert newer.verdict == "claimed"
        # Then the old attempt's write is refused, the newer one's lands
        assert not record_delivery_outcome(session, delivery_id, token=old.token,
                                           outcome=Outcome.FAILED_TERMINAL, error="late")
        assert record_delivery_outcome(session, delivery_id, token=newer.token,
                                       outcome=Outcome.SENT, provider="mock")
        # and nothing moves a final outcome afterwards
        assert not record_delivery_outcome(session, delivery_id, token=newer.token,
                                           outcome=Outcome.FAILED_TERMINAL)
    assert client.get(f"/v1/deliveries/{delivery_id}").json()["outcome"] == "sent"


def test_transient_failure_retries_and_records_the_bookkeeping(pipeline: None) -> None:
    client = TestClient(create_app())
    MockProvider.script("+966500000001", "transient:1")
    created = event(client, account(client, phone="+966500000001"), channels=["sms"])
    with running_worker(["notification-sms"]):
        wait_for(lambda: settled(client, created["id"]), timeout=30)
    delivery = client.get(f"/v1/deliveries/{created['deliveries'][0]['id']}").json()
    assert (delivery["outcome"], delivery["attempts"]) == ("sent", 2)
    assert [s["outcome"] for s in MockProvider.sends()] == ["transient", "ok"]


def test_exhausted_attempts_end_failed_terminal(pipeline: None) -> None:
    client = TestClient(create_app())
    MockProvider.script("+966500000002", "transient:99")
    created = event(client, account(client, phone="+966500000002"), channels=["sms"])
    with running_worker(["notification-sms"]):
        wait_for(lambda: settled(client, created["id"]), timeout=60)
    delivery = client.get(f"/v1/deliveries/{created['deliveries'][0]['id']}").json()
    # notification-sms: 3 attempts
    assert (delivery["outcome"], delivery["attempts"]) == ("failed_terminal", 3)
    assert len(MockProvider.sends()) == 3


def test_two_workers_racing_on_one_delivery_send_it_once(pipeline: None) -> None:
    client = TestClient(create_app())
    MockProvider.script("amal@example.com", "hang:0.5")
    created = event(client, account(client), channels=["email"])
    job = DeliveryJob(delivery_id=created["deliveries"][0]["id"],
                      notification_id=created["id"], channel="email")
    results: list[object] = []

    def attempt() -> None:
        try:
            results.append(deliver(job))
        except Exception as error:  # the loser is deferred (a live claim)
            results.append(type(error).__name__)

    threads = [threading.Thread(target=attempt) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=10)
    assert sorted(str(type(r).__name__ if isinstance(r, dict) else r) for r in results) == [
        "Defer", "dict"]
    assert len(MockProvider.sends()) == 1


def test_push_is_off_by_default_and_a_queue_of_its_own_when_on(
        pipeline: None, monkeypatch: pytest.MonkeyPatch) -> None:
    client = TestClient(create_app())
    account_id = account(client, push_subscription_id="device-1")
    # Given FEATURE_PUSH off: an event that names push makes no push delivery
    off = event(client, account_id, occurrence="off")
    assert "push" not in {d["channel"] for d in off["deliveries"]}
    # When FEATURE_PUSH is on, push is offered (with the in-app text) and sent
    monkeypatch.setenv("FEATURE_PUSH", "1")
    settings.reset_settings()
    on = event(client, account_id, occurrence="on", channels=["push"])
    assert [d["channel"] for d in on["deliveries"]] == ["push"]
    with running_worker(["notification-push"]):
        wait_for(lambda: settled(client, on["id"]), timeout=30)
    assert outcomes(client, on["id"]) == {"push": "sent"}
    (send,) = MockProvider.sends()
    assert (send["channel"], send["to"]) == ("push", "device-1")


def test_a_delivery_whose_runs_keep_dying_ends_failed_terminal_when_starts_run_out(
        pipeline: None, migrated_database: str) -> None:
    client = TestClient(create_app())
    created = event(client, account(client), channels=["email"])
    delivery_id = created["deliveries"][0]["id"]
    # Given another transaction holds the delivery's row, so every run's claim waits on it
    engine = db.create_database_engine(migrated_database)
    holder = engine.connect()
    try:
        holder.execute(text("SELECT id FROM deliveries WHERE id = :id FOR UPDATE"),
                       {"id": delivery_id})
        holder_pid = holder.execute(text("SELECT pg_backend_pid()")).scalar_one()
        # When the worker running it is killed, five times (notification-email allows
        # five starts), each time while the run waits there
        for start in range(1, EMAIL_STARTS + 1):
            process = spawn_email_worker()
            try:
                wait_for(lambda start=start: started(delivery_id) == start
                         and sessions_waiting_on(holder_pid) == 1, timeout=60,
                         what=f"start {start} waiting for the row")
            finally:
                process.kill()
                process.wait(timeout=10)
            wait_for(lambda: sessions_waiting_on(holder_pid) == 0,
                     what=f"the session of killed run {start} to end")
    finally:
        holder.rollback()
        holder.close()
        engine.dispose()
    # Then the next start is refused: the job fails for good without running
    with running_worker(["notification-email"]):
        wait_for(lambda: queue("notification-email").get(delivery_id).state == "failed",
                 timeout=30, what="the job to fail")
    job = queue("notification-email").get(delivery_id)
    assert (job.attempts_started, job.attempts_made, job.failed_reason) == (
        EMAIL_STARTS + 1, 0, f"job started {EMAIL_STARTS + 1} times, more than "
        f"max_started_attempts ({EMAIL_STARTS})")
    # and the delivery ends failed_terminal, never sent
    delivery = client.get(f"/v1/deliveries/{delivery_id}").json()
    assert (delivery["outcome"], delivery["reason"], delivery["attempts"]) == (
        "failed_terminal", "restarts_exhausted", 0)
    assert MockProvider.sends() == []


#: Starts notification-email allows a job (its max_started_attempts).
EMAIL_STARTS = registry.spec("notification-email").max_started_attempts or 0


def spawn_email_worker() -> subprocess.Popen[bytes]:
    """A ``herald worker`` process on notification-email with a 1 s lock. Its database
    sessions check every 100 ms that the client is still there, so a killed worker leaves
    no backend waiting behind it."""
    env = {**os.environ, "WORKER_PORT": "0", "LOG_LEVEL": "ERROR",
           "PGOPTIONS": "-c client_connection_check_interval=100"}
    return subprocess.Popen([sys.executable, "-m", "herald.cli", "worker", "--import",
                             "tests.support.pipeline.short_lock", "notification-email"],
                            cwd=REPO, env=env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)


def started(job_id: str) -> int:
    """How often the email job has been started (0 while it has not been)."""
    job = queue("notification-email").get(job_id)
    return job.attempts_started if job is not None and job.state == "active" else 0


def handoff_stamps(created: dict) -> dict[str, object]:
    with db_session() as session:
        return {d["channel"]: session.get(Delivery, d["id"]).queued_at
                for d in created["deliveries"]}


def test_a_handoff_is_stamped_after_its_enqueue_and_redis_down_leaves_it_for_the_sweep(
        pipeline: None, monkeypatch: pytest.MonkeyPatch,
        caplog: pytest.LogCaptureFixture) -> None:
    client = TestClient(create_app())
    account_id = account(client)
    # Given Redis up: each queued delivery is enqueued and stamped; in-app has no queue
    up = event(client, account_id, occurrence="up")
    stamps = handoff_stamps(up)
    assert stamps["email"] is not None and stamps["sms"] is not None
    assert stamps["in_app"] is None
    # When Redis is down, an event is still accepted and persisted
    use_redis(monkeypatch, f"redis://127.0.0.1:{find_free_port()}/0")
    with caplog.at_level(logging.WARNING, logger="herald.orchestration"):
        down = event(client, account_id, occurrence="down")
    assert down["_status"] == 202
    # Then its deliveries stay queued and unstamped for the handoff sweep, each failed
    # enqueue logged by its delivery id
    assert outcomes(client, down["id"]) == {"email": "queued", "sms": "queued",
                                            "in_app": "delivered"}
    assert set(handoff_stamps(down).values()) == {None}
    logged = {getattr(r, "delivery_id", None) for r in caplog.records
              if r.getMessage().startswith("enqueue failed")}
    assert logged == {d["id"] for d in down["deliveries"] if d["channel"] != "in_app"}
    # and an event for an account that does not exist is refused
    missing = client.post("/v1/events", json={"type": "account.welcome",
                                               "account_id": "no-such-account",
                                               "occurrence": "x"})
    assert missing.status_code == 404
    assert missing.json()["error"]["code"] == "account_not_found"
