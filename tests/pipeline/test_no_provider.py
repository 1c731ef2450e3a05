"""A deployment's channel with no provider configured is off: on PostgreSQL an unset
``*_PROVIDER`` is no provider, not the mock (docs/configuration.md#providers)."""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import text

from herald import db
from herald.queue import queue, running_worker
from herald.web import create_app
from providers.mock import MockProvider, signed_callback
from tests.support.pipeline.steps import settled
from tests.support.providers.fakes import use_herald_env
from tests.support.waiting import wait_for

TOKEN = "production-api-token"
MOCK_SECRET = "a-secret-of-this-deployment"


@pytest.fixture
def production(pipeline: None, monkeypatch: pytest.MonkeyPatch) -> TestClient:
    """herald as deployed: PostgreSQL and Redis, SMTP email, Twilio SMS, API_TOKEN set,
    push on but no push provider and no eSIM provider named."""
    for name in ("PUSH_PROVIDER", "ESIM_PROVIDERS", "HERALD_OPEN_API"):
        monkeypatch.delenv(name, raising=False)
    # a secret of its own: a 404 of the mock's routes is then the missing provider's doing
    use_herald_env(monkeypatch, EMAIL_PROVIDER="smtp", SMTP_HOST="127.0.0.1",
                   SMS_PROVIDER="twilio", TWILIO_ACCOUNT_SID="AC" + "0" * 32,
                   TWILIO_AUTH_TOKEN="twilio-token", TWILIO_FROM_NUMBER="+15005550006",
                   API_TOKEN=TOKEN, FEATURE_PUSH="1", MOCK_CALLBACK_SECRET=MOCK_SECRET)
    return TestClient(create_app(), headers={"Authorization": f"Bearer {TOKEN}"})


def receipts() -> int:
    with db.get_engine().connect() as connection:
        return int(connection.execute(text("SELECT count(*) FROM callback_receipts")
                                      ).scalar_one())


def test_the_mock_s_callback_route_does_not_exist(production: TestClient) -> None:
    # When someone posts a callback signed with the mock's secret
    body, headers = signed_callback({"provider_message_id": "m-1", "channel": "sms"},
                                    "delivered", secret=MOCK_SECRET)
    response = production.post("/v1/callbacks/mock", content=body, headers=headers)
    # Then there is no such route, and nothing is stored
    assert response.status_code == 404, response.text
    assert response.json()["error"]["code"] == "unknown_provider"
    assert receipts() == 0


def test_a_push_delivery_with_no_provider_is_suppressed_no_provider(
        production: TestClient) -> None:
    # Given an account with a push subscription
    created = production.post("/v1/accounts", json={
        "email": "amal@example.com", "push_subscription_id": "device-1"})
    assert created.status_code == 201, created.text
    # When an event asks for push
    response = production.post("/v1/events", json={
        "type": "account.welcome", "account_id": created.json()["id"],
        "occurrence": "signup", "channels": ["push"]})
    assert response.status_code == 202, response.text
    notification = response.json()
    (push,) = notification["deliveries"]
    with running_worker(["notification-push"]):
        wait_for(lambda: settled(production, notification["id"]),
                 timeout=30, what="the push delivery to settle")
    # Then it is suppressed no_provider and nothing was sent
    answer = production.get(f"/v1/deliveries/{push['id']}").json()
    assert (answer["outcome"], answer["reason"], answer["provider"]) == (
        "suppressed", "no_provider", None)
    job = queue("notification-push").get(push["id"])
    assert job is not None and job.return_value == {
        "delivery_id": push["id"], "suppressed": "no_provider"}
    assert MockProvider.sends() == []
