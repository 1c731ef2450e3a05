"""Provider delivery receipts on PostgreSQL + Redis: ``POST /v1/callbacks/{provider}`` and
the ``normalise_callback`` job (docs/pipeline.md#callbacks)."""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pytest
from fastapi.testclient import TestClient
from prometheus_client import REGISTRY
from sqlalchemy import update
from sqlmodel import select

from actors.callbacks import (
    CallbackJob,
    ReceiptUnmatched,
    enqueue_normalisation,
    normalise,
    normalise_callback,
)
from herald import db
from herald.db import session as db_session
from herald.queue import enqueue, queue, running_worker
from herald.web import create_app
from models.base import utcnow
from models.callbacks import CallbackReceipt
from providers.base import hmac_sha256_signature
from providers.esim_mock import signed_webhook
from providers.mock import MockProvider, signed_callback
from tests.support.callbacks import (
    CALLBACKS,
    Callback,
    configure,
    mock_callback,
    onesignal_callback,
    provider_secrets,
    taqnyat_callback,
    twilio_callback,
)
from tests.support.queue_app import install_queue_app
from tests.support.services import find_free_port
from tests.support.waiting import wait_for

ORCHESTRATION = "notification-orchestration"

#: Each provider's callback signed with a key that is not the configured one.
FORGED: dict[str, Callable[[], Callback]] = {
    "twilio": lambda: twilio_callback(token="not-the-token"),
    "taqnyat": lambda: taqnyat_callback(secret="not-the-secret"),
    "onesignal": lambda: onesignal_callback(secret="not-the-secret"),
    "mock": lambda: mock_callback(secret="not-the-secret"),
}


def post(client: TestClient, callback: Callback) -> Any:
    path, body, headers = callback
    return client.post(path, content=body, headers=headers)


def without_signature(callback: Callback) -> Callback:
    path, body, headers = callback
    return path, body, {k: v for k, v in headers.items() if "Signature" not in k}


def receipts() -> list[CallbackReceipt]:
    with db_session() as session:
        return list(session.exec(select(CallbackReceipt)
                                 .order_by(CallbackReceipt.received_at)).all())


def receipt(receipt_id: str) -> CallbackReceipt:
    with db_session() as session:
        found = session.get(CallbackReceipt, receipt_id)
    assert found is not None
    return found


def jobs_held() -> int:
    return sum(queue(ORCHESTRATION).counts().values())


def sent_sms(client: TestClient, phone: str = "+966501234567") -> dict[str, Any]:
    """A welcome SMS sent through the mock by a real worker: its delivery as JSON."""
    account = client.post("/v1/accounts", json={"phone": phone}).json()
    created = client.post("/v1/events", json={"type": "account.welcome", "channels": ["sms"],
                                              "account_id": account["id"],
                                              "occurrence": "signup"}).json()
    delivery_id = created["deliveries"][0]["id"]
    with running_worker(["notification-sms"]):
        wait_for(lambda: delivery(client, delivery_id)["outcome"] == "sent", what="sent")
    return delivery(client, delivery_id)


def delivery(client: TestClient, delivery_id: str) -> dict[str, Any]:
    return client.get(f"/v1/deliveries/{delivery_id}").json()


def processed(receipt_id: str) -> bool:
    return receipt(receipt_id).processed_at is not None


def use_redis(monkeypatch: pytest.MonkeyPatch, url: str) -> None:
    configure(monkeypatch, REDIS_URL=url)
    install_queue_app()


# -- signatures ---------------------------------------------------------------------------
@pytest.mark.parametrize("provider", sorted(CALLBACKS))
def test_a_signed_callback_is_accepted_and_a_forged_or_unsigned_one_stores_nothing(
        pipeline: None, monkeypatch: pytest.MonkeyPatch, provider: str) -> None:
    provider_secrets(monkeypatch)
    client = TestClient(create_app())
    # Given a forged and an unsigned callback: 401, and nothing stored or queued
    for refused in (FORGED[provider](), without_signature(CALLBACKS[provider]())):
        response = post(client, refused)
        assert response.status_code == 401, response.text
        assert response.json()["error"]["code"] == "invalid_signature"
    assert (receipts(), jobs_held()) == ([], 0)
    # When the provider signs it: 202, one receipt and one normalise_callback job
    response = post(client, CALLBACKS[provider]())
    assert response.status_code == 202, response.text
    assert response.json()["duplicate"] is False
    [stored] = receipts()
    assert (stored.id, stored.provider, stored.status) == (
        response.json()["receipt_id"], provider, "delivered")
    assert stored.queued_at is not None
    assert jobs_held() == 1


@pytest.mark.parametrize("provider", ["taqnyat", "onesignal"])
def test_shared_secret_providers_refuse_every_callback_while_the_secret_is_unset(
        pipeline: None, provider: str) -> None:
    client = TestClient(create_app())
    # signed with the empty key an unset secret would be
    response = post(client, CALLBACKS[provider](secret=""))
    assert response.status_code == 401
    assert receipts() == []


def test_twilio_signs_the_public_url_when_herald_sits_behind_a_proxy(
        pipeline: None, monkeypatch: pytest.MonkeyPatch) -> None:
    provider_secrets(monkeypatch)
    configure(monkeypatch, CALLBACK_BASE_URL="https://herald.example.com/")
    client = TestClient(create_app())
    public = twilio_callback(url="https://herald.example.com/v1/callbacks/twilio")
    internal = twilio_callback(url="http://testserver/v1/callbacks/twilio", status="sent")
    assert post(client, public).status_code == 202
    assert post(client, internal).status_code == 401


@pytest.mark.parametrize(("provider", "callback"), [
    ("mock", lambda: mock_callback(message_id="")),
    ("mock", lambda: mock_callback(status="exploded")),
    ("mock", lambda: mock_callback(channel="fax")),
    ("mock", lambda: mock_callback(message_id="mock-\x00")),
    ("twilio", lambda: twilio_callback(sid="")),
    ("taqnyat", lambda: taqnyat_callback(message_id="x" * 300)),
    ("onesignal", lambda: onesignal_callback(kind="message.iam.clicked")),
])
def test_a_signed_but_malformed_callback_is_422_and_stores_nothing(
        pipeline: None, monkeypatch: pytest.MonkeyPatch, provider: str,
        callback: Callable[[], Callback]) -> None:
    provider_secrets(monkeypatch)
    response = post(TestClient(create_app()), callback())
    assert response.status_code == 422, response.text
    assert response.json()["error"]["code"] == "invalid_callback"
    assert (receipts(), jobs_held()) == ([], 0)


def test_an_unknown_provider_is_404(pipeline: None) -> None:
    response = TestClient(create_app()).post("/v1/callbacks/sendgrid", content=b"{}")
    assert response.status_code == 404
    assert response.json()["error"]["code"] == "unknown_provider"
    assert receipts() == []


def mock_webhook() -> tuple[bytes, dict[str, str]]:
    """A store webhook signed with the mock's default secret."""
    return signed_webhook("mock-ref-1", "issued")


def test_the_mock_s_routes_are_gone_while_nothing_is_configured_to_use_it(
        pipeline: None, monkeypatch: pytest.MonkeyPatch) -> None:
    # Given real providers on every channel and no mock eSIM provider
    configure(monkeypatch, SMS_PROVIDER="twilio", EMAIL_PROVIDER="smtp",
              PUSH_PROVIDER="onesignal", ESIM_PROVIDERS="esimhub", FEATURE_ESIM_STORE="true")
    client = TestClient(create_app())
    # When a receipt and a store webhook come signed with the mock's default secret
    callback = post(client, mock_callback())
    body, headers = mock_webhook()
    webhook = client.post("/v1/store/webhooks/mock", content=body, headers=headers)
    # Then both are 404, and nothing is stored or queued
    assert (callback.status_code, webhook.status_code) == (404, 404)
    assert callback.json()["error"]["code"] == "unknown_provider"
    assert (receipts(), jobs_held()) == ([], 0)

    # When the mock carries one channel again (or is an eSIM provider), the receipt is taken
    configure(monkeypatch, PUSH_PROVIDER="mock")
    assert post(client, mock_callback()).status_code == 202
    configure(monkeypatch, PUSH_PROVIDER="onesignal", ESIM_PROVIDERS="esimhub,mock")
    assert post(client, mock_callback(status="sent")).status_code == 202
    assert len(receipts()) == 2


#: The largest callback or webhook body herald stores.
SIGNED_BODY_CAP = 64 * 1024


def padded_mock_callback(size: int) -> Callback:
    """A correctly signed mock receipt whose body is exactly ``size`` bytes."""
    fields = {"event_id": "mock-1-delivered", "provider_message_id": "mock-1",
              "channel": "sms", "status": "delivered", "pad": ""}
    fields["pad"] = "x" * (size - len(json.dumps(fields)))
    body = json.dumps(fields).encode()
    assert len(body) == size
    return "/v1/callbacks/mock", body, {
        "X-Herald-Signature": hmac_sha256_signature("herald-mock-secret", body),
        "Content-Type": "application/json"}


def test_a_callback_body_over_64_kib_is_413_and_stores_nothing(pipeline: None) -> None:
    client = TestClient(create_app())
    # When a signed receipt of 64 KiB + 1 byte comes, declared or chunked
    path, body, headers = padded_mock_callback(SIGNED_BODY_CAP + 1)
    declared = client.post(path, content=body, headers=headers)
    chunked = client.post(path, content=iter([body[:40_000], body[40_000:]]), headers=headers)
    # Then 413, and no receipt row or job exists
    assert (declared.status_code, chunked.status_code) == (413, 413)
    assert declared.json()["error"]["code"] == "payload_too_large"
    assert "65536" in declared.json()["error"]["message"]
    assert (receipts(), jobs_held()) == ([], 0)
    # and one of exactly 64 KiB is stored
    assert post(client, padded_mock_callback(SIGNED_BODY_CAP)).status_code == 202
    assert len(receipts()) == 1


def test_a_store_webhook_body_over_64_kib_is_413(pipeline: None,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    configure(monkeypatch, FEATURE_ESIM_STORE="true", ESIM_PROVIDERS="mock")
    body = b'{"provider_order_ref": "mock-ref-1", "status": "issued", "pad": "'
    body += b"x" * (SIGNED_BODY_CAP - len(body)) + b'"}'
    response = TestClient(create_app()).post(
        "/v1/store/webhooks/mock", content=body,
        headers={"X-Herald-Signature": hmac_sha256_signature("herald-mock-secret", body)})
    assert response.status_code == 413
    assert response.json()["error"]["code"] == "payload_too_large"


# -- ingestion: duplicates, Redis and the database down ----------------------------------------
def test_the_same_event_again_is_a_duplicate_with_one_receipt_and_one_job(
        pipeline: None) -> None:
    client = TestClient(create_app())
    first = post(client, mock_callback())
    again = post(client, mock_callback())
    assert (first.status_code, again.status_code) == (202, 200)
    assert again.json() == {"receipt_id": first.json()["receipt_id"], "duplicate": True}
    assert len(receipts()) == 1
    # the job carries the receipt id only, under the event's deterministic id, priority 5
    job = queue(ORCHESTRATION).get("notification-callback-mock-1-delivered")
    assert job is not None
    assert (job.payload, job.priority) == ({"receipt_id": first.json()["receipt_id"]}, 5)
    assert jobs_held() == 1


def test_redis_down_is_503_with_the_receipt_unstamped_and_the_senders_retry_repairs_it(
        pipeline: None, monkeypatch: pytest.MonkeyPatch, redis_url: str) -> None:
    client = TestClient(create_app())
    use_redis(monkeypatch, f"redis://127.0.0.1:{find_free_port()}/0")
    # Given Redis is down: the receipt persists, unstamped, and the sender is told to retry
    response = post(client, mock_callback())
    assert response.status_code == 503
    assert response.json()["error"]["code"] == "unavailable"
    [stored] = receipts()
    assert (stored.queued_at, stored.processed_at) == (None, None)
    # When Redis is back and the sender retries the same event
    use_redis(monkeypatch, redis_url)
    again = post(client, mock_callback())
    # Then it is a duplicate, now queued and stamped
    assert again.json() == {"receipt_id": stored.id, "duplicate": True}
    assert receipt(stored.id).queued_at is not None
    assert queue(ORCHESTRATION).get("notification-callback-mock-1-delivered") is not None
    # and a stamped receipt is not queued again
    post(client, mock_callback())
    assert jobs_held() == 1


def test_database_down_is_503_and_nothing_is_queued(
        pipeline: None, monkeypatch: pytest.MonkeyPatch) -> None:
    configure(monkeypatch, DATABASE_URL=f"postgresql://postgres@127.0.0.1:{find_free_port()}/h")
    db.reset_engine()
    response = post(TestClient(create_app()), mock_callback())
    assert response.status_code == 503
    assert response.json()["error"]["code"] == "unavailable"
    assert jobs_held() == 0


# -- normalization ------------------------------------------------------------------------
def test_a_delivered_receipt_marks_the_delivery_delivered_and_a_later_sent_changes_nothing(
        pipeline: None) -> None:
    client = TestClient(create_app())
    sms = sent_sms(client)
    [send] = MockProvider.sends()
    # Given the provider reports the SMS delivered
    body, headers = signed_callback(send, "delivered")
    accepted = client.post("/v1/callbacks/mock", content=body, headers=headers)
    assert accepted.status_code == 202
    receipt_id = accepted.json()["receipt_id"]
    job_id = f"notification-callback-{send['provider_message_id']}-delivered"
    assert queue(ORCHESTRATION).get(job_id) is not None
    with running_worker([ORCHESTRATION]):
        wait_for(lambda: processed(receipt_id), what="the receipt processed")
        # Then the delivery reads delivered, and the finished job left the ledger
        assert delivery(client, sms["id"])["outcome"] == "delivered"
        assert (receipt(receipt_id).result, receipt(receipt_id).delivery_id) == (
            "applied", sms["id"])
        wait_for(lambda: queue(ORCHESTRATION).get(job_id) is None, what="the job removed")
        # When a late "sent" receipt arrives, the delivery stays delivered
        body, headers = signed_callback(send, "sent")
        late = client.post("/v1/callbacks/mock", content=body, headers=headers)
        wait_for(lambda: processed(late.json()["receipt_id"]), what="the late receipt")
    assert receipt(late.json()["receipt_id"]).result == "unchanged"
    assert delivery(client, sms["id"])["outcome"] == "delivered"
    assert sum(queue(ORCHESTRATION).counts().values()) == 0


def test_a_failed_receipt_ends_the_delivery_failed_and_nothing_revives_it(
        pipeline: None) -> None:
    client = TestClient(create_app())
    sms = sent_sms(client)
    [send] = MockProvider.sends()
    with running_worker([ORCHESTRATION]):
        for status in ("failed", "delivered"):
            body, headers = signed_callback(send, status)
            receipt_id = client.post("/v1/callbacks/mock", content=body,
                                     headers=headers).json()["receipt_id"]
            wait_for(lambda receipt_id=receipt_id: processed(receipt_id), what=status)
    after = delivery(client, sms["id"])
    assert (after["outcome"], after["reason"]) == ("failed_terminal", "provider_undelivered")
    assert [r.result for r in receipts()] == ["applied", "unchanged"]


def test_an_unmatched_receipt_is_retried_until_30_minutes_old_then_marked_unmatched(
        pipeline: None) -> None:
    client = TestClient(create_app())
    sms = sent_sms(client)
    [send] = MockProvider.sends()
    # Given a receipt naming the SMS's message id on another channel: no delivery matches
    body, headers = signed_callback({**send, "channel": "email"}, "delivered")
    receipt_id = client.post("/v1/callbacks/mock", content=body,
                             headers=headers).json()["receipt_id"]
    job_id = f"notification-callback-{send['provider_message_id']}-delivered"
    with running_worker([ORCHESTRATION]):
        # Then while it is young the job is deferred (no failed attempt) for 10 s
        job = wait_for(lambda: (j := queue(ORCHESTRATION).get(job_id)) is not None
                       and j.state == "delayed" and j, what="the retry")
    assert job.attempts_made == 0
    assert job.run_at is not None and job.run_at - utcnow() > timedelta(seconds=5)
    assert receipt(receipt_id).processed_at is None
    with pytest.raises(ReceiptUnmatched):
        normalise(CallbackJob(receipt_id=receipt_id))
    # When it is 30 minutes old and re-driven (as the handoff sweep does)
    redrive_when_30_minutes_old(receipt_id, job_id)
    # Then it is processed unmatched and the delivery is untouched
    assert (receipt(receipt_id).result, receipt(receipt_id).delivery_id) == ("unmatched", None)
    assert delivery(client, sms["id"]) == sms


def test_a_job_for_a_receipt_that_does_not_exist_fails_at_once_and_leaves_no_record(
        pipeline: None, caplog: pytest.LogCaptureFixture) -> None:
    job_id = "notification-callback-gone"
    enqueue(normalise_callback, {"receipt_id": "no-such-receipt"}, job_id=job_id)
    # When a worker runs it (its record is removed whichever way it ends)
    with caplog.at_level(logging.WARNING, logger="herald.queue.middleware"), \
            running_worker([ORCHESTRATION]):
        wait_for(lambda: any(map(jobs_counted, RUN_ENDS)), what="its first run to end")
    # Then that run failed it for good: not completed, not retried (it has 9 attempts)
    assert {end: jobs_counted(end) for end in RUN_ENDS} == {
        "failed": 1, "completed": 0, "retried": 0}
    # with the reason logged against its id, and its record gone
    [logged] = [r for r in caplog.records if getattr(r, "job_id", None) == job_id]
    assert (logged.getMessage(), logged.outcome, logged.reason) == (
        "job failed", "failed", "callback receipt no-such-receipt does not exist")
    assert jobs_held() == 0


#: How a run can end, as ``queue_jobs_total`` counts it.
RUN_ENDS = ("failed", "completed", "retried")


def jobs_counted(outcome: str) -> float:
    """The orchestration queue's ``queue_jobs_total`` for ``outcome``, as /metrics shows it."""
    value = REGISTRY.get_sample_value("queue_jobs_total",
                                      {"queue": ORCHESTRATION, "outcome": outcome})
    return value or 0.0


def test_an_unmatched_receipt_logs_each_attempt_at_info_and_warns_once_when_given_up(
        pipeline: None, caplog: pytest.LogCaptureFixture) -> None:
    client = TestClient(create_app())
    sent_sms(client)
    [send] = MockProvider.sends()
    # Given a receipt no delivery matches (the SMS's message id on another channel)
    body, headers = signed_callback({**send, "channel": "email"}, "delivered")
    receipt_id = client.post("/v1/callbacks/mock", content=body,
                             headers=headers).json()["receipt_id"]
    job_id = f"notification-callback-{send['provider_message_id']}-delivered"
    caplog.set_level(logging.INFO)
    # When a worker tries it while it is young
    with running_worker([ORCHESTRATION]):
        wait_for(lambda: (j := queue(ORCHESTRATION).get(job_id)) is not None
                 and j.state == "delayed", what="the retry")
    # Then the attempt is told at INFO, by receipt id, and nothing is a warning
    assert [r for r in caplog.records if r.levelno >= logging.WARNING] == []
    told = [r for r in caplog.records if getattr(r, "receipt_id", None) == receipt_id]
    assert [r.levelno for r in told] == [logging.INFO], [r.getMessage() for r in told]
    # When it is 30 minutes old and tried again
    caplog.clear()
    redrive_when_30_minutes_old(receipt_id, job_id)
    # Then one warning says it was given up, by receipt id
    warned = [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert [getattr(r, "receipt_id", None) for r in warned] == [receipt_id], \
        [r.getMessage() for r in warned]


def redrive_when_30_minutes_old(receipt_id: str, job_id: str) -> None:
    """Age the receipt to 30 minutes and drive it again, as the handoff sweep does (its
    waiting job removed first), until a worker has processed it."""
    with db_session() as session:
        session.execute(update(CallbackReceipt).where(CallbackReceipt.id == receipt_id)
                        .values(received_at=utcnow() - timedelta(minutes=30)))
    queue(ORCHESTRATION).remove(job_id)
    assert enqueue_normalisation(receipt(receipt_id)) == "added"
    with running_worker([ORCHESTRATION]):
        wait_for(lambda: processed(receipt_id), what="the receipt processed")
