"""``/v1/webhook-endpoints``: created with a secret shown once, read, listed, changed,
rotated and deleted; a URL herald may not send to, or an event type it does not send, is
refused with a 422 and writes nothing (docs/api.md#webhooks)."""

from __future__ import annotations

import base64
from typing import Any

import pytest
from fastapi.testclient import TestClient

from herald import settings
from herald.web import create_app

PUBLIC = "https://93.184.215.14/hooks"
EVENTS = ["delivery.sent", "delivery.failed"]


@pytest.fixture
def client(webhooks: None) -> TestClient:
    return TestClient(create_app())


def create(client: TestClient, **fields: Any) -> dict[str, Any]:
    response = client.post("/v1/webhook-endpoints",
                           json={"url": PUBLIC, "events": EVENTS, **fields})
    assert response.status_code == 201, response.text
    return dict(response.json())


def test_create_shows_the_secret_once(client: TestClient) -> None:
    # When an endpoint is created
    created = create(client, description="orders system")
    # Then its answer carries a Standard Webhooks secret: whsec_ and 32 random bytes
    secret = created.pop("secret")
    assert secret.startswith("whsec_") and len(base64.b64decode(secret[6:])) == 32
    assert {key: created[key] for key in ("url", "events", "description", "disabled")} == {
        "url": PUBLIC, "events": EVENTS, "description": "orders system", "disabled": False}
    # And reading it, alone or in the list, never shows the secret again
    read = client.get(f"/v1/webhook-endpoints/{created['id']}").json()
    assert read == created and "secret" not in read
    assert client.get("/v1/webhook-endpoints").json() == {"items": [created]}
    assert create(client)["secret"] != secret


def test_patch_changes_what_it_names_and_keeps_the_rest(client: TestClient) -> None:
    created = create(client, description="first")
    answer = client.patch(f"/v1/webhook-endpoints/{created['id']}",
                          json={"events": ["payment.settled"], "disabled": True})
    assert answer.status_code == 200, answer.text
    expected = {"url": PUBLIC, "events": ["payment.settled"], "description": "first",
                "disabled": True}
    assert {key: answer.json()[key] for key in expected} == expected
    assert client.get(f"/v1/webhook-endpoints/{created['id']}").json() == answer.json()


def test_rotate_secret_gives_a_new_one_and_both_sign_for_a_day(client: TestClient) -> None:
    from herald import db
    from models.base import utcnow
    from models.webhooks import ROTATION_OVERLAP, WebhookEndpoint

    created = create(client)
    answer = client.post(f"/v1/webhook-endpoints/{created['id']}/rotate-secret")
    assert answer.status_code == 200, answer.text
    new = answer.json()["secret"]
    assert new.startswith("whsec_") and new != created["secret"]
    with db.session() as session:
        endpoint = session.get(WebhookEndpoint, created["id"])
        assert endpoint is not None
        # the old secret signs beside the new one for 24 h, then no more
        assert endpoint.signing_secrets() == [new, created["secret"]]
        later = utcnow() + ROTATION_OVERLAP
        assert endpoint.signing_secrets(later) == [new]


def test_delete_removes_it(client: TestClient) -> None:
    created = create(client)
    assert client.delete(f"/v1/webhook-endpoints/{created['id']}").status_code == 204
    answer = client.get(f"/v1/webhook-endpoints/{created['id']}")
    assert (answer.status_code, answer.json()["error"]["code"]) == (
        404, "webhook_endpoint_not_found")
    assert client.delete(f"/v1/webhook-endpoints/{created['id']}").status_code == 404
    assert client.get("/v1/webhook-endpoints").json() == {"items": []}


@pytest.mark.parametrize("body", [
    {"url": PUBLIC, "events": ["delivery.opened"]},
    {"url": PUBLIC, "events": []},
    {"url": PUBLIC},
    {"url": PUBLIC, "events": EVENTS, "secret": "whsec_mine"},
], ids=["unknown event type", "no event type", "events missing", "a secret given"])
def test_an_invalid_body_is_refused(client: TestClient, body: dict[str, Any]) -> None:
    assert client.post("/v1/webhook-endpoints", json=body).status_code == 422
    assert client.get("/v1/webhook-endpoints").json() == {"items": []}


@pytest.mark.parametrize("url", ["https://127.0.0.1:9/hook", "https://10.0.0.5/hook",
                                 "https://169.254.169.254/latest/meta-data/",
                                 "http://93.184.215.14/hook"],
                         ids=["loopback", "private", "cloud metadata", "plain http"])
def test_a_url_herald_may_not_send_to_is_refused_at_create_and_patch(
        client: TestClient, url: str) -> None:
    # When an endpoint is created, or changed, to point at it
    answer = client.post("/v1/webhook-endpoints", json={"url": url, "events": EVENTS})
    # Then a 422 says why, and nothing is written
    assert answer.status_code == 422, answer.text
    assert answer.json()["error"]["code"] == "unsafe_webhook_url"
    assert client.get("/v1/webhook-endpoints").json() == {"items": []}
    created = create(client)
    answer = client.patch(f"/v1/webhook-endpoints/{created['id']}", json={"url": url})
    assert answer.status_code == 422, answer.text
    assert client.get(f"/v1/webhook-endpoints/{created['id']}").json()["url"] == PUBLIC


def test_the_settings_let_a_local_receiver_through(client: TestClient,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("WEBHOOK_ALLOW_HTTP", "1")
    monkeypatch.setenv("WEBHOOK_ALLOW_PRIVATE", "1")
    settings.reset_settings()
    assert create(client, url="http://127.0.0.1:9/hook")["url"] == "http://127.0.0.1:9/hook"
