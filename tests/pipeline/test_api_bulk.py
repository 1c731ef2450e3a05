"""``POST /v1/events/bulk``: many events in one request, each answered on its own, in order.

Through the HTTP interface of the app on PostgreSQL + Redis (the ``pipeline`` fixture) and
on the embedded SQLite: what each event is answered, which rows exist afterwards, and which
channel jobs the ledger holds."""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from httpx import Response
from sqlalchemy import func
from sqlmodel import select

from actors import orchestration
from actors.event_catalogue import EVENT_TYPES
from herald import db, settings
from herald.db import session as db_session
from herald.queue import queue
from herald.web import create_app
from models.notifications import Delivery, Notification
from tests.pipeline.conftest import NOTIFICATION_QUEUES
from tests.support.pipeline.steps import use_redis
from tests.support.services import find_free_port

RECEIPT = {"amount": "49.00", "currency": "SAR", "order_id": "ORD-1"}


@pytest.fixture
def client(pipeline: None) -> Iterator[TestClient]:
    with TestClient(create_app(), raise_server_exceptions=False) as test_client:
        yield test_client


@pytest.fixture
def sqlite_client(pipeline: None, monkeypatch: pytest.MonkeyPatch,
                  tmp_path: Path) -> Iterator[TestClient]:
    """The app on the embedded default: a SQLite file (Redis as in ``pipeline``)."""
    url = f"sqlite:///{tmp_path}/herald.db"
    db.migrate(url)
    monkeypatch.setenv("DATABASE_URL", url)
    settings.reset_settings()
    db.reset_engine()
    with TestClient(create_app(), raise_server_exceptions=False) as test_client:
        yield test_client
    db.reset_engine()


def new_account(client: TestClient) -> str:
    response = client.post("/v1/accounts", json={"email": "amal@example.com",
                                                 "phone": "+966501234567"})
    assert response.status_code == 201, response.text
    return str(response.json()["id"])


def welcome(account_id: str, occurrence: str, **fields: Any) -> dict[str, Any]:
    return {"type": "account.welcome", "account_id": account_id, "occurrence": occurrence,
            **fields}


def bulk(client: TestClient, events: list[Any], **kwargs: Any) -> Response:
    return client.post("/v1/events/bulk", json={"events": events}, **kwargs)


def answered(response: Response) -> list[dict[str, Any]]:
    assert response.status_code == 200, response.text
    return list(response.json()["results"])


def rows(model: type) -> int:
    with db_session() as session:
        return int(session.exec(select(func.count()).select_from(model)).one())


def jobs_in_notification_queues() -> int:
    return sum(sum(queue(name).counts().values()) for name in NOTIFICATION_QUEUES)


def by_channel(notification: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {d["channel"]: d for d in notification["deliveries"]}


def check_mixed_batch(client: TestClient) -> None:
    """The mixed batch of the tests below, on whichever database the client is on."""
    # Given an account with one notification already
    account_id = new_account(client)
    before = client.post("/v1/events", json=welcome(account_id, "before"))
    assert before.status_code == 202, before.text
    jobs_before = jobs_in_notification_queues()
    # When one request carries a new event, the same occurrence again, the existing one,
    # an unknown account, an unknown type, a malformed element and an urgent receipt
    results = answered(bulk(client, [
        welcome(account_id, "new"),
        welcome(account_id, "new"),
        welcome(account_id, "before"),
        welcome("no-such-account", "x"),
        {"type": "no.such.type", "account_id": account_id, "occurrence": "y"},
        {"type": 7, "account_id": account_id, "occurrence": "z", "extra": True},
        {"type": "payment.receipt", "account_id": account_id, "occurrence": "order-1",
         "data": RECEIPT, "urgency": "urgent"},
    ]))
    # Then each event has its own answer, in the order sent
    assert [r["status"] for r in results] == [202, 200, 200, 404, 422, 422, 202]
    new, again, existing, unknown, bad_type, malformed, receipt = results
    # the repeat within the request is the first one's notification, nothing new
    assert again["notification"]["id"] == new["notification"]["id"]
    assert ({d["id"] for d in again["notification"]["deliveries"]}
            == {d["id"] for d in new["notification"]["deliveries"]})
    # an occurrence from before is answered whole, as GET /v1/notifications/{id} has it
    assert existing["notification"] == client.get(
        f"/v1/notifications/{before.json()['id']}").json()
    assert existing["notification"]["id"] == before.json()["id"]
    assert unknown["error"] == {"code": "account_not_found",
                                "message": "no account with id no-such-account"}
    assert bad_type["error"]["code"] == "invalid_event"
    # the refusal lists the types there are, so the user need not guess
    assert "unknown event type" in bad_type["error"]["message"]
    assert all(name in bad_type["error"]["message"] for name in EVENT_TYPES)
    # the malformed element is described as a malformed body would be, never quoted
    assert malformed["error"]["code"] == "validation_error"
    assert malformed["error"]["message"].startswith("events.5.")
    locations = {tuple(p["loc"]) for p in malformed["error"]["details"]}
    assert locations == {("body", "events", "5", "type"), ("body", "events", "5", "extra")}
    # a new notification answers as POST /v1/events does: in-app delivered, others queued
    assert {c: d["outcome"] for c, d in by_channel(new["notification"]).items()} == {
        "email": "queued", "sms": "queued", "in_app": "delivered"}
    # read back, it is what the answer said, its deliveries in the same order
    assert client.get(f"/v1/notifications/{new['notification']['id']}").json() == \
        new["notification"]
    # And exactly the two new notifications were persisted, with their deliveries
    assert (rows(Notification), rows(Delivery)) == (3, 3 + 3 + 1)
    # and exactly their channel jobs enqueued: job id = delivery id, priority by urgency
    assert jobs_in_notification_queues() == jobs_before + 3
    email, sms = by_channel(new["notification"])["email"], by_channel(new["notification"])["sms"]
    receipt_email = by_channel(receipt["notification"])["email"]
    for name, delivery, priority in [("notification-email", email, 5),
                                     ("notification-sms", sms, 5),
                                     ("notification-email", receipt_email, 1)]:
        job = queue(name).get(delivery["id"])
        assert job is not None and job.priority == priority, (name, delivery)
    # and the event's data is stored as sent (the channel worker renders from it)
    with db_session() as session:
        stored = session.get(Notification, receipt["notification"]["id"])
        assert stored is not None and stored.data == RECEIPT
        assert (stored.urgency, stored.transactional) == ("urgent", True)
    # and the handed-off deliveries are stamped (the sweep leaves them alone)
    with db_session() as session:
        for delivery in (email, sms, receipt_email):
            stored = session.get(Delivery, delivery["id"])
            assert stored is not None and stored.queued_at is not None


def test_a_mixed_batch_answers_each_event_in_order_and_persists_only_the_new(
        client: TestClient) -> None:
    check_mixed_batch(client)


def test_the_mixed_batch_on_the_embedded_sqlite(sqlite_client: TestClient) -> None:
    check_mixed_batch(sqlite_client)


@pytest.mark.parametrize("count", [0, 1001])
def test_no_events_or_over_1000_is_a_422_and_stores_nothing(client: TestClient,
                                                            count: int) -> None:
    account_id = new_account(client)
    response = bulk(client, [welcome(account_id, f"o-{i}") for i in range(count)])
    assert response.status_code == 422, response.text
    error = response.json()["error"]
    assert error["code"] == "validation_error" and error["message"].startswith("events:")
    assert (rows(Notification), rows(Delivery), jobs_in_notification_queues()) == (0, 0, 0)


def test_a_body_that_is_not_an_envelope_is_a_422(client: TestClient) -> None:
    for body in ([], {"events": "x"}, {"events": [], "more": 1}, {}):
        response = client.post("/v1/events/bulk", json=body)
        assert response.status_code == 422, body
        assert response.json()["error"]["code"] == "validation_error"
    assert rows(Notification) == 0


def test_1000_events_fit_the_default_body_limit_and_are_all_accepted(
        client: TestClient) -> None:
    # Given 1,000 receipts, as large as typical ones get
    account_id = new_account(client)
    events = [{"type": "payment.receipt", "account_id": account_id,
               "occurrence": f"order-{i:012d}",
               "data": RECEIPT | {"order_id": f"ORD-{i:012d}", "description": "eSIM 10 GB",
                                  "receipt_url": f"https://shop.example.com/r/{i:012d}"},
               "urgency": "normal", "transactional": None, "channels": ["email"]}
              for i in range(1000)]
    # When they are sent at once, under the default MAX_BODY_BYTES
    results = answered(bulk(client, events))
    # Then every one is new, in order, with one email job each
    assert [r["status"] for r in results] == [202] * 1000
    assert [r["notification"]["occurrence"] for r in results] == [e["occurrence"]
                                                                  for e in events]
    assert (rows(Notification), rows(Delivery)) == (1000, 1000)
    assert sum(queue("notification-email").counts().values()) == 1000
    # and the same request again sends nothing new
    assert [r["status"] for r in answered(bulk(client, events))] == [200] * 1000
    assert sum(queue("notification-email").counts().values()) == 1000


def test_a_value_the_database_cannot_store_fails_only_its_own_event(
        client: TestClient) -> None:
    # NUL (which PostgreSQL cannot store in text) is a control character: refused in the
    # element that holds it, before anything is written
    account_id = new_account(client)
    results = answered(bulk(client, [welcome(account_id, "a\u0000b"),
                                     welcome("a\u0000b", "x"),
                                     welcome(account_id, "fine")]))
    assert [r["status"] for r in results] == [422, 422, 202]
    assert {r["error"]["code"] for r in results[:2]} == {"control_character"}
    assert [r["error"]["message"].split(":")[0] for r in results[:2]] == [
        "events.0.occurrence", "events.1.account_id"]
    assert rows(Notification) == 1


def test_without_the_token_it_is_a_401_and_stores_nothing(
        client: TestClient, monkeypatch: pytest.MonkeyPatch) -> None:
    account_id = new_account(client)
    monkeypatch.setenv("API_TOKEN", "s3cret-token")
    settings.reset_settings()
    refused = bulk(client, [welcome(account_id, "o")])
    assert refused.status_code == 401
    assert refused.json()["error"]["code"] == "unauthorized"
    assert rows(Notification) == 0
    accepted = bulk(client, [welcome(account_id, "o")],
                    headers={"Authorization": "Bearer s3cret-token"})
    assert [r["status"] for r in answered(accepted)] == [202]


def test_redis_down_still_accepts_the_events_and_leaves_them_for_the_sweep(
        client: TestClient, monkeypatch: pytest.MonkeyPatch,
        caplog: pytest.LogCaptureFixture) -> None:
    account_id = new_account(client)
    # Given Redis is unreachable
    use_redis(monkeypatch, f"redis://127.0.0.1:{find_free_port()}/0")
    # When a bulk request arrives
    with caplog.at_level(logging.WARNING, logger="herald.orchestration"):
        results = answered(bulk(client, [welcome(account_id, "a"), welcome(account_id, "b")]))
    # Then the events are accepted and persisted
    assert [r["status"] for r in results] == [202, 202]
    assert (rows(Notification), rows(Delivery)) == (2, 6)
    # and their deliveries stay queued and unstamped for the handoff sweep, each failed
    # enqueue logged by delivery id
    queued = {d["id"] for r in results for d in r["notification"]["deliveries"]
              if d["channel"] != "in_app"}
    with db_session() as session:
        for delivery_id in queued:
            stored = session.get(Delivery, delivery_id)
            assert stored is not None
            assert (stored.outcome, stored.queued_at) == ("queued", None)
    logged = {getattr(r, "delivery_id", None) for r in caplog.records
              if r.getMessage().startswith("enqueue failed")}
    assert logged == queued


def test_the_schema_documents_the_route_and_its_elements(client: TestClient) -> None:
    schema = client.get("/openapi.json").json()
    operation = schema["paths"]["/v1/events/bulk"]["post"]
    assert operation["security"]  # behind the bearer token like every /v1 route
    body = schema["components"]["schemas"]["EventsIn"]["properties"]["events"]
    assert body["items"] == {"$ref": "#/components/schemas/EventIn"}
    assert (body["minItems"], body["maxItems"]) == (1, 1000)
    assert "EventsOut" in str(operation["responses"]["200"])


def test_concurrent_requests_with_the_same_occurrences_create_each_once(
        client: TestClient) -> None:
    # Given two requests carrying the same 300 occurrences, in opposite orders
    account_id = new_account(client)
    events = [welcome(account_id, f"o-{i:03d}") for i in range(300)]
    answers: dict[str, Any] = {}
    start = threading.Barrier(2)

    def send(name: str, batch: list[dict[str, Any]]) -> None:
        start.wait(timeout=10)
        try:
            answers[name] = orchestration.trigger_events(batch)
        except Exception as error:  # a deadlock, say: checked below
            answers[name] = error

    for _ in range(3):
        answers.clear()
        threads = [threading.Thread(target=send, args=("up", events)),
                   threading.Thread(target=send, args=("down", events[::-1]))]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=60)
        # Then both are answered in full (neither fails on the other's locks) and each
        # occurrence was created by exactly one of them: the same notification for both
        assert not [a for a in answers.values() if isinstance(a, Exception)], answers
        up, down = answers["up"], answers["down"][::-1]
        assert all(isinstance(r, orchestration.EventResult) for r in up + down)
        for first, second in zip(up, down, strict=True):
            assert first.notification.id == second.notification.id
            assert first.created != second.created
        events = [welcome(account_id, f"{e['occurrence']}-again") for e in events]
    assert rows(Notification) == 900


@pytest.mark.parametrize("push", ["false", "true"])
def test_push_is_a_channel_only_while_feature_push_is_on(
        client: TestClient, monkeypatch: pytest.MonkeyPatch, push: str) -> None:
    monkeypatch.setenv("FEATURE_PUSH", push)
    settings.reset_settings()
    account_id = new_account(client)
    # When one event asks for push alone and one for email and push
    results = answered(bulk(client, [welcome(account_id, "a", channels=["push"]),
                                     welcome(account_id, "b", channels=["email", "push"],
                                             urgency="urgent")]))
    if push == "false":
        # Then push alone is refused (the occurrence stays free), and the mix leaves it out
        assert [r["status"] for r in results] == [422, 202]
        assert "FEATURE_PUSH" in results[0]["error"]["message"]
        assert list(by_channel(results[1]["notification"])) == ["email"]
        assert sum(queue("notification-push").counts().values()) == 0
        return
    # Then with push on both are sent, each push job on its own queue at its priority
    assert [r["status"] for r in results] == [202, 202]
    for result, priority in zip(results, (5, 1), strict=True):
        job = queue("notification-push").get(by_channel(result["notification"])["push"]["id"])
        assert job is not None and job.priority == priority
