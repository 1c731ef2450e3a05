"""Delivery outcomes become webhook messages: written with the outcome (one statement on
PostgreSQL), only for the endpoints subscribed to that type, relayed by a real worker and
verified by ``standardwebhooks`` at a real receiver (docs/api.md#webhooks)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import func, select

from actors import webhooks as relay
from herald import db, settings
from herald.queue import running_worker
from herald.web import create_app
from models.webhooks import DELIVERY_FIELDS, WebhookMessage, forget_subscribed_types
from tests.support.pipeline.steps import account, delivery, event
from tests.support.waiting import wait_for
from tests.webhooks.receiver import Receiver, running_receiver


@pytest.fixture
def client(webhooks: None, monkeypatch: pytest.MonkeyPatch) -> TestClient:
    monkeypatch.setenv("WEBHOOK_ALLOW_HTTP", "1")
    monkeypatch.setenv("WEBHOOK_ALLOW_PRIVATE", "1")
    settings.reset_settings()
    forget_subscribed_types()
    return TestClient(create_app())


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    with running_receiver() as receiver:
        yield receiver


def subscribe(client: TestClient, receiver: Receiver, events: list[str]) -> str:
    answer = client.post("/v1/webhook-endpoints", json={"url": receiver.url,
                                                        "events": events})
    assert answer.status_code == 201, answer.text
    receiver.secrets.append(answer.json()["secret"])
    return str(answer.json()["id"])


def email_of(notification: dict[str, Any]) -> str:
    return str(next(d["id"] for d in notification["deliveries"] if d["channel"] == "email"))


def messages() -> int:
    with db.session() as session:
        return int(session.scalar(select(func.count()).select_from(WebhookMessage)) or 0)


def test_a_sent_delivery_reaches_the_subscribed_endpoint_signed(
        client: TestClient, receiver: Receiver) -> None:
    # Given an endpoint subscribed to delivery.sent, another to payments only
    subscribe(client, receiver, ["delivery.sent"])
    subscribe(client, receiver, ["payment.settled"])
    # When an email is sent through the real worker
    email = email_of(event(client, account(client)))
    with running_worker(["notification-email", relay.QUEUE]):
        wait_for(lambda: receiver.received, what="the webhook")
        shown = delivery(client, email)
    # Then exactly one message arrived, verified, carrying the delivery as the API shows it
    (got,) = receiver.received
    assert got.verified_by == (receiver.secrets[0],)
    body = json.loads(got.body)
    assert body["type"] == "delivery.sent" and body["timestamp"]
    assert set(body["data"]) == set(DELIVERY_FIELDS)
    assert {key: body["data"][key] for key in ("id", "channel", "outcome", "provider")} == {
        key: shown[key] for key in ("id", "channel", "outcome", "provider")}
    assert body["data"]["outcome"] == "sent"
    assert messages() == 1


def test_no_endpoint_no_message(client: TestClient) -> None:
    email = email_of(event(client, account(client)))
    with running_worker(["notification-email"]):
        wait_for(lambda: delivery(client, email)["outcome"] == "sent", what="sent")
    assert messages() == 0


def test_an_endpoint_created_while_the_worker_runs_gets_the_next_delivery(
        client: TestClient, receiver: Receiver) -> None:
    # Given a worker that already sent an email while no endpoint subscribed (its
    # outcome statement is compiled and cached by then)
    person = account(client)
    first = email_of(event(client, person))
    with running_worker(["notification-email", relay.QUEUE]):
        wait_for(lambda: delivery(client, first)["outcome"] == "sent", what="the first")
        # When an endpoint subscribes to delivery.sent and the next email goes out
        subscribe(client, receiver, ["delivery.sent"])
        second = email_of(event(client, person, occurrence="second"))
        # Then its message arrives, carrying that delivery, and the first wrote none
        wait_for(lambda: receiver.received, what="the webhook")
        wait_for(lambda: delivery(client, second)["outcome"] == "sent", what="the second")
    (got,) = receiver.received
    assert got.verified_by and json.loads(got.body)["data"]["id"] == second
    assert messages() == 1


@pytest.fixture
def on_sqlite(fresh_sqlite: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """herald on a migrated SQLite file (the embedded default's database)."""
    monkeypatch.setenv("DATABASE_URL", fresh_sqlite)
    settings.reset_settings()
    db.reset_engine()
    db.migrate(fresh_sqlite)
    forget_subscribed_types()
    yield
    db.reset_engine()
    settings.reset_settings()


def test_on_sqlite_the_outcome_and_its_messages_land_together(on_sqlite: None) -> None:
    from herald.db import autocommit
    from models.notifications import (
        Account,
        Delivery,
        Notification,
        Outcome,
        record_delivery_outcome,
    )
    from models.webhooks import WebhookEndpoint

    # Given a delivery and two endpoints, one subscribed to delivery.failed
    with db.session() as session:
        person = Account(email="amal@example.com", locale="en")
        session.add(person)
        session.flush()
        notification = Notification(account_id=person.id, type="account.welcome",
                                    occurrence="signup", data={})
        session.add(notification)
        session.flush()
        row = Delivery(notification_id=notification.id, channel="email")
        failed = WebhookEndpoint(url="https://93.184.215.14/a", events=["delivery.failed"])
        other = WebhookEndpoint(url="https://93.184.215.14/b", events=["delivery.sent"])
        session.add_all([row, failed, other])
    # When the channel worker's autocommit connection writes the failure
    with autocommit() as connection:
        assert record_delivery_outcome(connection, row.id, token=None,
                                       outcome=Outcome.FAILED_TERMINAL, reason="x")
        # and a second write is refused (the outcome is final): no second message
        assert not record_delivery_outcome(connection, row.id, token=None,
                                           outcome=Outcome.FAILED_TERMINAL, reason="y")
    # Then one message, for the subscribed endpoint, carries the failed delivery
    with db.session() as session:
        (message,) = session.scalars(select(WebhookMessage)).all()
    assert (message.endpoint_id, message.type, message.status) == (
        failed.id, "delivery.failed", "pending")
    assert message.id.startswith("msg_") and message.handed_off_at is not None
    assert message.body["data"]["outcome"] == "failed_terminal"
    assert message.body["data"]["id"] == row.id


def test_a_delivered_receipt_reaches_the_endpoint_once(client: TestClient,
                                                       receiver: Receiver) -> None:
    from providers.mock import MockProvider, signed_callback

    # Given an endpoint subscribed to delivery.delivered, and an SMS sent
    subscribe(client, receiver, ["delivery.delivered"])
    person = client.post("/v1/accounts", json={"phone": "+966501234567"}).json()
    sms = client.post("/v1/events", json={"type": "account.welcome", "channels": ["sms"],
                                          "account_id": person["id"],
                                          "occurrence": "signup"}).json()["deliveries"][0]
    with running_worker(["notification-sms", "notification-orchestration", relay.QUEUE]):
        wait_for(lambda: delivery(client, sms["id"])["outcome"] == "sent", what="sent")
        [send] = MockProvider.sends()
        # When the provider reports it delivered, twice
        for _ in range(2):
            body, headers = signed_callback(send, "delivered")
            assert client.post("/v1/callbacks/mock", content=body,
                               headers=headers).status_code in (200, 202)
        wait_for(lambda: receiver.received, what="the webhook")
        wait_for(lambda: delivery(client, sms["id"])["outcome"] == "delivered", what="done")
    # Then one delivery.delivered message arrived, verified
    (got,) = receiver.received
    assert got.verified_by and json.loads(got.body)["type"] == "delivery.delivered"
    assert json.loads(got.body)["data"]["outcome"] == "delivered"
    assert messages() == 1
