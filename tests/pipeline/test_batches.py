"""Notification batches on PostgreSQL + Redis: scheduled runs, re-runs, cancellation."""

from __future__ import annotations

import threading
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import func
from sqlmodel import select

from actors.batches import MAX_RECIPIENTS, enqueue_batch_run, run
from herald import settings
from herald.db import session as db_session
from herald.queue import Defer, queue, running_worker
from herald.web import create_app
from models.batches import Batch, start_batch
from models.notifications import Notification
from providers.mock import MockProvider
from tests.support.queue_app import install_queue_app
from tests.support.services import find_free_port
from tests.support.waiting import wait_for

ORCHESTRATION = "notification-orchestration"
ALL_QUEUES = [ORCHESTRATION, "notification-email", "notification-sms"]


@pytest.fixture
def client(pipeline: None) -> TestClient:
    return TestClient(create_app())


def accounts(client: TestClient, count: int) -> list[str]:
    ids = []
    for n in range(count):
        response = client.post("/v1/accounts", json={"email": f"user{n}@example.com",
                                                      "phone": f"+96650000{n:04d}"})
        assert response.status_code == 201, response.text
        ids.append(response.json()["id"])
    return ids


def post_batch(client: TestClient, account_ids: list[str], *,
               scheduled_at: datetime | None = None, **fields: Any) -> dict[str, Any]:
    body = {"type": "account.welcome", "account_ids": account_ids, "data": {},
            "scheduled_at": scheduled_at.isoformat() if scheduled_at else None, **fields}
    response = client.post("/v1/batches", json=body)
    assert response.status_code == 201, response.text
    return response.json()


def read(client: TestClient, batch_id: str) -> dict[str, Any]:
    response = client.get(f"/v1/batches/{batch_id}")
    assert response.status_code == 200, response.text
    return response.json()


def notifications_per_account(batch_id: str) -> dict[str, int]:
    with db_session() as session:
        rows = session.exec(select(Notification.account_id, func.count())
                            .where(Notification.batch_id == batch_id)
                            .group_by(Notification.account_id)).all()
    return dict(rows)


def settled(summary: dict[str, int]) -> bool:
    return summary["queued"] == summary["sending"] == 0


def test_a_future_batch_is_a_delayed_job_that_runs_at_its_time(client: TestClient) -> None:
    account_ids = accounts(client, 2)
    due = datetime.now(UTC).replace(microsecond=0) + timedelta(seconds=5)
    # Given a batch scheduled in the future
    future = post_batch(client, account_ids, scheduled_at=due)
    assert (future["status"], future["scheduled_at"]) == ("scheduled", due.isoformat())
    # Then its run is a delayed job under the batch's deterministic id, at normal priority
    job_id = f"notification-batch-{future['id']}"
    job = queue(ORCHESTRATION).get(job_id)
    assert job is not None
    assert (job.state, job.priority, job.run_at) == ("delayed", 5, due)
    # Given a batch due now, posted after it
    sentinel = post_batch(client, account_ids[:1])
    with running_worker([ORCHESTRATION]):
        # When the worker has run the batch due now
        wait_for(lambda: read(client, sentinel["id"])["status"] == "finished", timeout=30,
                 what="the batch due now to finish")
        # Then the future batch was left alone, still scheduled and its job still delayed
        assert read(client, future["id"])["status"] == "scheduled"
        assert queue(ORCHESTRATION).get(job_id).state == "delayed"
        # and at its time it runs
        wait_for(lambda: read(client, future["id"])["status"] == "finished", timeout=30,
                 what="the future batch to finish")
    # (the ledger's record of when its run started)
    assert queue(ORCHESTRATION).get(job_id).processed_at >= due
    assert notifications_per_account(future["id"]) == dict.fromkeys(account_ids, 1)


def test_a_run_picked_up_before_its_time_waits_for_it(client: TestClient) -> None:
    due = datetime.now(UTC) + timedelta(hours=1)
    batch = post_batch(client, accounts(client, 1), scheduled_at=due)
    # When its run starts early (a re-added or retried job)
    with pytest.raises(Defer) as deferred:
        run(batch["id"])
    # Then it waits for the batch's time and creates nothing
    assert timedelta(minutes=59) < deferred.value.delay <= timedelta(hours=1)
    assert read(client, batch["id"])["status"] == "scheduled"
    assert notifications_per_account(batch["id"]) == {}


def test_a_batch_due_now_runs_at_once_with_one_notification_per_account(
        client: TestClient) -> None:
    account_ids = accounts(client, 3)
    # Given a batch with no schedule and one scheduled in the past, each naming an
    # account that does not exist
    now_batch = post_batch(client, [*account_ids, "no-such-account"])
    past_batch = post_batch(client, [*account_ids, "no-such-account"],
                            scheduled_at=datetime.now(UTC) - timedelta(days=1))
    # When the workers run
    with running_worker(ALL_QUEUES):
        for batch in (now_batch, past_batch):
            wait_for(lambda b=batch: read(client, b["id"])["status"] == "finished"
                     and settled(read(client, b["id"])["delivery_summary"]), timeout=60,
                     what="the batch to finish and its deliveries to settle")
    # Then each finished with one notification per existing account, the missing one
    # skipped, every channel job handed off and every delivery at a terminal outcome
    for batch in (now_batch, past_batch):
        body = read(client, batch["id"])
        assert (body["status"], body["notification_count"], body["fully_enqueued"]) == (
            "finished", 3, True)
        assert {k: v for k, v in body["delivery_summary"].items() if v} == {
            "sent": 6, "delivered": 3}
        assert notifications_per_account(batch["id"]) == dict.fromkeys(account_ids, 1)
    assert len(MockProvider.sends()) == 12


def test_running_a_batch_again_creates_nothing_twice(client: TestClient) -> None:
    account_ids = accounts(client, 3)
    batch = post_batch(client, account_ids)
    # Given a batch left running, as by a worker that died mid-run
    with db_session() as session:
        assert start_batch(session, batch["id"])
    # When two re-runs race over it
    results: list[dict[str, Any]] = []
    runners = [threading.Thread(target=lambda: results.append(run(batch["id"])))
               for _ in range(2)]
    for runner in runners:
        runner.start()
    for runner in runners:
        runner.join(timeout=30)
    # Then every account has exactly one notification and the batch is finished
    assert [r["notification_count"] for r in results] == [3, 3]
    assert notifications_per_account(batch["id"]) == dict.fromkeys(account_ids, 1)
    assert read(client, batch["id"])["status"] == "finished"
    # When the run job is re-added and run once more by a worker, nothing changes
    job_id = f"notification-batch-{batch['id']}"
    assert enqueue_batch_run(batch["id"], None) == "duplicated"
    with running_worker([ORCHESTRATION]):
        wait_for(lambda: queue(ORCHESTRATION).get(job_id).state == "completed", timeout=30,
                 what="the re-added run to complete")
    assert queue(ORCHESTRATION).get(job_id).return_value == {"batch_id": batch["id"],
                                                             "skipped": "finished"}
    assert notifications_per_account(batch["id"]) == dict.fromkeys(account_ids, 1)
    assert read(client, batch["id"])["notification_count"] == 3


def test_cancelling_a_scheduled_batch_stops_it_for_good(client: TestClient) -> None:
    account_ids = accounts(client, 2)
    batch = post_batch(client, account_ids,
                       scheduled_at=datetime.now(UTC) + timedelta(hours=1))
    job_id = f"notification-batch-{batch['id']}"
    # When the scheduled batch is cancelled
    response = client.post(f"/v1/batches/{batch['id']}/cancel")
    # Then it is cancelled and its delayed job is gone
    assert (response.status_code, response.json()["status"]) == (200, "cancelled")
    assert queue(ORCHESTRATION).get(job_id) is None
    # and cancelling again answers the same
    again = client.post(f"/v1/batches/{batch['id']}/cancel")
    assert (again.status_code, again.json()["status"]) == (200, "cancelled")
    # When the runner runs anyway (a job whose removal failed), it does nothing
    assert run(batch["id"]) == {"batch_id": batch["id"], "skipped": "cancelled"}
    enqueue_batch_run(batch["id"], None)
    with running_worker([ORCHESTRATION]):
        wait_for(lambda: queue(ORCHESTRATION).get(job_id).state == "completed", timeout=30,
                 what="the stray run to complete")
    body = read(client, batch["id"])
    assert (body["status"], body["notification_count"]) == ("cancelled", 0)
    assert notifications_per_account(batch["id"]) == {}


def test_a_running_or_finished_batch_cannot_be_cancelled(client: TestClient) -> None:
    account_ids = accounts(client, 1)
    finished = post_batch(client, account_ids)
    run(finished["id"])
    running = post_batch(client, account_ids, scheduled_at=datetime.now(UTC) + timedelta(hours=1))
    with db_session() as session:
        assert start_batch(session, running["id"])
    for batch, status in ((finished, "finished"), (running, "running")):
        response = client.post(f"/v1/batches/{batch['id']}/cancel")
        assert response.status_code == 409
        assert response.json()["error"]["code"] == "batch_not_cancellable"
        assert read(client, batch["id"])["status"] == status
    unknown = [client.post(f"/v1/batches/{batch_id}/cancel") for batch_id in ("nope", "a%00b")]
    unknown += [client.get(f"/v1/batches/{batch_id}") for batch_id in ("nope", "a%00b")]
    for response in unknown:
        assert (response.status_code, response.json()["error"]["code"]) == (
            404, "batch_not_found")


BAD_BATCHES = {
    "unknown type": {"type": "no.such.event"},
    "data the type requires is missing": {"type": "payment.receipt", "data": {}},
    "no accounts": {"account_ids": []},
    "a repeated account": {"account_ids": ["a", "a"]},
    "a naive time": {"scheduled_at": "2030-01-01T09:00:00"},
    "a malformed time": {"scheduled_at": "next tuesday"},
    "a number for a time": {"scheduled_at": 1_900_000_000},
    "an extra field": {"urgency": "urgent"},
    "an account id no column can hold": {"account_ids": ["a\u0000b"]},
    "account ids not a list": {"account_ids": "a"},
}


@pytest.mark.parametrize("change", BAD_BATCHES.values(), ids=BAD_BATCHES.keys())
def test_bad_input_is_rejected_before_anything_is_persisted(
        client: TestClient, change: dict[str, Any]) -> None:
    body = {"type": "account.welcome", "account_ids": ["a"], "data": {},
            "scheduled_at": None, **change}
    response = client.post("/v1/batches", json=body)
    assert response.status_code == 422, response.text
    assert response.json()["error"]["message"]
    assert nothing_persisted_or_enqueued()


def test_too_many_accounts_is_rejected_naming_the_limit(client: TestClient) -> None:
    body = {"type": "account.welcome",
            "account_ids": [str(n) for n in range(MAX_RECIPIENTS + 1)]}
    response = client.post("/v1/batches", json=body)
    assert response.status_code == 422
    assert f"at most {MAX_RECIPIENTS} accounts" in response.json()["error"]["message"]
    assert nothing_persisted_or_enqueued()


def nothing_persisted_or_enqueued() -> bool:
    with db_session() as session:
        batches = session.exec(select(func.count()).select_from(Batch)).one()
    return batches == 0 and sum(queue(ORCHESTRATION).counts().values()) == 0


def test_with_redis_down_a_batch_is_accepted_and_finishes_not_fully_enqueued(
        client: TestClient, monkeypatch: pytest.MonkeyPatch) -> None:
    account_ids = accounts(client, 2)
    # Given Redis unreachable
    monkeypatch.setenv("REDIS_URL", f"redis://127.0.0.1:{find_free_port()}/0")
    settings.reset_settings()
    install_queue_app()
    # When a batch is posted, it is still accepted and persisted as scheduled
    batch = post_batch(client, account_ids)
    assert read(client, batch["id"])["status"] == "scheduled"
    # When it runs while the channel jobs cannot be handed off
    run(batch["id"])
    # Then it is finished with every notification persisted, but not fully enqueued:
    # its email and SMS deliveries wait, queued, for the handoff sweep
    body = read(client, batch["id"])
    assert (body["status"], body["notification_count"], body["fully_enqueued"]) == (
        "finished", 2, False)
    assert {k: v for k, v in body["delivery_summary"].items() if v} == {
        "queued": 4, "delivered": 2}
