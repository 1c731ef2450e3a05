"""``/v1/store``: placing an order (201, 404, 409, 422 — a refusal persists nothing),
reading it, and the providers' signed status webhooks (the webhook only queues a
reconcile; the run moves the order)."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import update

from actors.store import Trigger, enqueue_issuance, issuance_job_id
from herald import db
from herald.queue import queue, running_worker
from herald.settings import get_settings
from models.catalog import ProviderHealth, StoreProduct
from providers.base import hmac_sha256_signature
from providers.esim_mock import MockEsimProvider, signed_webhook
from tests.support.store.steps import (
    account,
    events,
    order,
    paid,
    place,
    rows,
    store_row,
    wait_job,
    wait_state,
)

ORDER_KEYS = {"id", "account_id", "product_id", "amount", "currency", "status",
              "issuance_state", "provider", "provider_order_ref", "error_code",
              "failed_reason", "verification_url", "profile", "status_events",
              "created_at", "updated_at"}
EVENT_KEYS = {"from_state", "to_state", "error_code", "source", "note", "created_at"}


def test_an_order_is_placed_at_its_products_price(client: TestClient) -> None:
    buyer = account()
    response = place(client, {"account_id": buyer, "product_id": "mock-ambiguous"})

    assert response.status_code == 201, response.text
    body = response.json()
    assert set(body) == ORDER_KEYS
    assert (body["account_id"], body["product_id"], body["provider"]) == (
        buyer, "mock-ambiguous", "mock")
    assert (body["status"], body["issuance_state"], body["profile"]) == (
        "pending_payment", "pending", None)
    assert (body["amount"], body["currency"]) == ("2.50", "USD")
    [placed] = body["status_events"]
    assert set(placed) == EVENT_KEYS
    assert (placed["from_state"], placed["to_state"], placed["source"]) == (None, "pending", "api")
    assert client.get(f"/v1/store/orders/{body['id']}").json() == body


@pytest.mark.parametrize("body", [
    {"account_id": "a", "product_id": "mock-ok", "amount": "1.00"},   # an extra field
    {"account_id": "a"},                                              # a missing one
    {"account_id": 7, "product_id": "mock-ok"},                       # a number
    {"account_id": "", "product_id": "mock-ok"},                      # empty
    {"account_id": "a", "product_id": "x" * 65},                      # too long
    ["mock-ok"],                                                      # not an object
])
def test_a_malformed_order_is_422_and_persists_nothing(client: TestClient,
                                                       body: Any) -> None:
    response = place(client, body)
    assert response.status_code == 422, response.text
    assert response.json()["error"]["code"] == "validation_error"
    assert rows() == (0, 0, 0)


def test_an_unknown_account_or_product_is_404_and_persists_nothing(
        client: TestClient) -> None:
    with db.session() as session:  # a product the last sync no longer listed
        session.execute(update(StoreProduct).where(StoreProduct.id == "mock-terminal")
                        .values(active=False))
    buyer = account()
    cases = [({"account_id": "no-such-account", "product_id": "mock-ok"}, "account_not_found"),
             ({"account_id": buyer, "product_id": "no-such-product"}, "product_not_found"),
             ({"account_id": buyer, "product_id": "mock-terminal"}, "product_not_found")]
    for body, code in cases:
        response = place(client, body)
        assert (response.status_code, response.json()["error"]["code"]) == (404, code)
    assert rows() == (0, 0, 0)


def test_an_unavailable_provider_is_409_naming_it(client: TestClient) -> None:
    with db.session() as session:
        health = session.get(ProviderHealth, "mock")
        assert health is not None
        health.available, health.detail = False, "catalog endpoint answered 503"
        session.add(health)

    response = place(client, {"account_id": account(), "product_id": "mock-ok"})

    assert response.status_code == 409
    error = response.json()["error"]
    assert error["code"] == "provider_unavailable"
    assert "mock" in error["message"] and "503" in error["message"]
    assert rows() == (0, 0, 0)


def test_a_provider_whose_plugin_is_off_is_409(client: TestClient,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    from herald import settings

    monkeypatch.setenv("ESIM_PROVIDERS", "")
    settings.reset_settings()
    response = place(client, {"account_id": account(), "product_id": "mock-ok"})
    assert response.status_code == 409
    assert response.json()["error"]["code"] == "provider_unavailable"
    assert "ESIM_PROVIDERS" in response.json()["error"]["message"]
    assert rows() == (0, 0, 0)


def test_with_the_store_off_no_order_is_taken(client: TestClient,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    from herald import settings

    monkeypatch.setenv("FEATURE_ESIM_STORE", "false")
    settings.reset_settings()
    response = place(client, {"account_id": account(), "product_id": "mock-ok"})
    assert (response.status_code, response.json()["error"]["code"]) == (409, "store_disabled")
    assert rows() == (0, 0, 0)


def test_an_unknown_order_is_404(client: TestClient) -> None:
    response = client.get("/v1/store/orders/no-such-order")
    assert (response.status_code, response.json()["error"]["code"]) == (404, "order_not_found")


# -- webhooks -------------------------------------------------------------------------------
@pytest.fixture
def verifying(store: str) -> Iterator[str]:
    """A paid mock-verify order waiting for its customer (pending_verification); its id."""
    MockEsimProvider.reset()
    with running_worker(["store-fulfillment"]):
        order_id = paid("mock-verify")
        enqueue_issuance(order_id)
        wait_state(order_id, "pending_verification")
    yield order_id
    MockEsimProvider.reset()


def post(client: TestClient, body: bytes, headers: dict[str, str],
         provider: str = "mock") -> Any:
    return client.post(f"/v1/store/webhooks/{provider}", content=body, headers=headers)


def webhook_job(order_id: str, body: bytes) -> str:
    return issuance_job_id(order_id, Trigger.PROVIDER_WEBHOOK, hashlib.sha256(body).hexdigest())


def test_a_badly_signed_webhook_is_401_and_changes_nothing(client: TestClient,
                                                           verifying: str) -> None:
    reference = store_row(verifying).provider_order_ref
    assert reference is not None
    body, headers = MockEsimProvider.customer_verifies(reference)
    before = order(verifying)
    forged = {**headers, "X-Herald-Signature": "sha256=" + "0" * 64}
    for sent_headers in (forged, {"Content-Type": "application/json"}):
        response = post(client, body, sent_headers)
        assert (response.status_code, response.json()["error"]["code"]) == (
            401, "invalid_signature")
    signed_elsewhere = signed_webhook(reference, "verified", secret="another-secret")
    assert post(client, *signed_elsewhere).status_code == 401

    # nothing changed: no reconcile queued, no stamp, the order as it was
    assert queue("store-fulfillment").get(webhook_job(verifying, body)) is None
    assert store_row(verifying).webhook_at is None
    assert order(verifying) == before


def test_a_verified_webhook_reconciles_the_order_to_issued(client: TestClient,
                                                           verifying: str) -> None:
    reference = store_row(verifying).provider_order_ref
    assert reference is not None
    # Given the customer verified with the provider, which then posts its webhook
    body, headers = MockEsimProvider.customer_verifies(reference)

    # When it is posted (and redelivered)
    first, again = post(client, body, headers), post(client, body, headers)

    # Then both are 202, one reconcile run is queued, and the stamp is set; the webhook
    # itself left the issuance as it was
    assert (first.status_code, again.status_code) == (202, 202)
    assert first.json() == {"order_id": verifying, "reconcile": "queued"}
    assert store_row(verifying).webhook_at is not None
    assert order(verifying)["issuance_state"] == "pending_verification"
    job_id = webhook_job(verifying, body)
    assert queue("store-fulfillment").counts()["waiting"] == 1

    # And the run issues it
    with running_worker(["store-fulfillment"]):
        wait_job(job_id, "completed")
    view = order(verifying)
    assert (view["issuance_state"], view["status"]) == ("issued", "completed")
    assert events(verifying)[-1] == ("pending_verification", "issued", None, "system",
                                     "reconcile (provider webhook): issued")
    assert MockEsimProvider.charges(verifying) == 1


def test_webhooks_naming_no_provider_or_no_order_are_404_and_bad_bodies_422(
        client: TestClient, verifying: str) -> None:
    body, headers = signed_webhook("mock-esim-unknown", "issued")
    unknown_ref = post(client, body, headers)
    assert (unknown_ref.status_code, unknown_ref.json()["error"]["code"]) == (
        404, "order_not_found")
    unknown_provider = post(client, body, headers, provider="acme")
    assert (unknown_provider.status_code, unknown_provider.json()["error"]["code"]) == (
        404, "unknown_provider")
    reference = store_row(verifying).provider_order_ref
    wrong_status = json.dumps({"provider_order_ref": reference, "status": "lost"}).encode()
    for bad in (b"not json", wrong_status, b"[]"):
        signature = hmac_sha256_signature(get_settings().mock_callback_secret, bad)
        response = post(client, bad, {"X-Herald-Signature": signature})
        assert (response.status_code, response.json()["error"]["code"]) == (
            422, "invalid_webhook")
    assert store_row(verifying).webhook_at is None
    assert queue("store-fulfillment").counts()["waiting"] == 0


def test_the_order_routes_need_the_token_and_the_webhook_its_signature(
        client: TestClient, monkeypatch: pytest.MonkeyPatch) -> None:
    from herald import settings

    monkeypatch.setenv("API_TOKEN", "store-token")
    # a secret of its own: with API_TOKEN set, the public default hides the mock's routes
    monkeypatch.setenv("MOCK_CALLBACK_SECRET", "store-mock-secret")
    settings.reset_settings()
    buyer = account()
    body = {"account_id": buyer, "product_id": "mock-ok"}

    assert place(client, body).status_code == 401
    assert client.get("/v1/store/orders/x").status_code == 401
    assert rows() == (0, 0, 0)
    # the webhook carries no token: its signature is checked instead
    webhook = post(client, b"{}", {})
    assert (webhook.status_code, webhook.json()["error"]["code"]) == (401, "invalid_signature")
    placed = client.post("/v1/store/orders", json=body,
                         headers={"Authorization": "Bearer store-token"})
    assert placed.status_code == 201
