"""The console's webhooks view: every endpoint with its messages counted by status, an
endpoint's failed messages with their last answer, and a failed message sent again behind
a confirmation — through the API and in a real headless chromium (docs/console.md)."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta

import pytest
from fastapi.testclient import TestClient
from playwright.sync_api import Browser, Page, expect, sync_playwright
from sqlalchemy import text

from actors.webhooks import QUEUE
from herald import db
from herald.queue import queue
from models.base import utcnow
from models.webhooks import MessageStatus, WebhookEndpoint, WebhookMessage
from tests.admin.conftest import ADMIN_HEADERS, ADMIN_TOKEN
from tests.support.admin.browser import EXPECT_MS, launch_chromium, serving, sign_in


def _empty() -> None:
    with db.get_engine().begin() as connection:
        connection.execute(text("TRUNCATE webhook_messages, webhook_endpoints CASCADE"))


@pytest.fixture
def endpoints(console: str) -> Iterator[dict[str, str]]:
    """Two endpoints: ``failing`` with messages in every state (two delivered, one
    failed after two attempts, one pending after a failed attempt, two pending not yet
    tried), ``quiet`` with none. Yields their ids and the failed message's."""
    _empty()
    now = utcnow()
    failing = WebhookEndpoint(url="https://hooks.example.com/herald", events=["delivery.sent"],
                              description="billing system", failing_since=now)
    quiet = WebhookEndpoint(url="https://quiet.example.com/in", events=["payment.settled"])
    refused = {"at": now.isoformat(), "status_code": 500, "duration_ms": 12, "error": None}
    failed = WebhookMessage(endpoint_id=failing.id, type="delivery.sent", body={"n": 1},
                            status=MessageStatus.FAILED,
                            attempts=[refused, refused | {"status_code": 503}])
    rows = [failing, quiet, failed,
            *[WebhookMessage(endpoint_id=failing.id, type="delivery.sent", body={"n": n},
                             status=MessageStatus.DELIVERED) for n in (2, 3)],
            WebhookMessage(endpoint_id=failing.id, type="delivery.sent", body={"n": 4},
                           attempts=[refused], next_attempt_at=now + timedelta(seconds=5)),
            *[WebhookMessage(endpoint_id=failing.id, type="delivery.sent", body={"n": n})
              for n in (5, 6)]]
    with db.session() as session:
        session.add_all(rows)
    yield {"failing": failing.id, "quiet": quiet.id, "failed": failed.id}
    _empty()


def test_the_endpoints_are_listed_with_their_messages_counted(
        client: TestClient, endpoints: dict[str, str]) -> None:
    # Without the token, nothing
    assert client.get("/admin/webhooks").status_code == 401
    # With it: both endpoints, oldest first, counted by status
    shown = client.get("/admin/webhooks", headers=ADMIN_HEADERS).json()["endpoints"]
    assert [e["id"] for e in shown] == [endpoints["failing"], endpoints["quiet"]]
    failing, quiet = shown
    assert failing["messages"] == {"pending": 3, "retrying": 1, "failed": 1, "delivered": 2}
    assert failing["failing_since"] and failing["description"] == "billing system"
    assert quiet["messages"] == {"pending": 0, "retrying": 0, "failed": 0, "delivered": 0}
    assert quiet["failing_since"] is None
    assert all("secret" not in e for e in shown)


def test_a_failed_message_is_listed_with_its_attempts_and_sent_again_audited(
        client: TestClient, endpoints: dict[str, str]) -> None:
    path = f"/admin/webhooks/{endpoints['failing']}/messages"
    # The failed messages: the one, with both attempts
    (listed,) = client.get(path, headers=ADMIN_HEADERS).json()["items"]
    assert listed["id"] == endpoints["failed"]
    assert [a["status_code"] for a in listed["attempts"]] == [500, 503]
    # When it is retried
    answer = client.post(f"{path}/{endpoints['failed']}/retry", headers=ADMIN_HEADERS)
    assert answer.status_code == 200, answer.text
    assert answer.json()["count"] == 1 and answer.json()["message"]["status"] == "pending"
    # Then its relay job is waiting, it is no longer failed, and the audit log says who did it
    job = queue(QUEUE).get(endpoints["failed"])
    assert job is not None and job.state == "waiting"
    assert client.get(path, headers=ADMIN_HEADERS).json()["items"] == []
    entry = client.get("/admin/audit", headers=ADMIN_HEADERS).json()["entries"][0]
    assert (entry["action"], entry["job_id"], entry["count"]) == (
        "webhook_retry", endpoints["failed"], 1)
    # And a second retry is refused (it is pending now), the refusal audited too
    again = client.post(f"{path}/{endpoints['failed']}/retry", headers=ADMIN_HEADERS)
    assert again.status_code == 409
    assert again.json()["error"]["code"] == "webhook_message_not_failed"
    entry = client.get("/admin/audit", headers=ADMIN_HEADERS).json()["entries"][0]
    assert entry["action"] == "webhook_retry" and "not failed" in entry["error"]


def test_an_unknown_endpoint_is_a_404(client: TestClient, endpoints: dict[str, str]) -> None:
    answer = client.get("/admin/webhooks/we_nope/messages", headers=ADMIN_HEADERS)
    assert answer.status_code == 404


# -- in a browser ------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    with sync_playwright() as driver:
        chromium = launch_chromium(driver)
        yield chromium
        chromium.close()


@pytest.fixture
def page(browser: Browser) -> Iterator[Page]:
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    yield context.new_page()
    context.close()


def test_the_console_shows_a_failing_endpoint_and_retries_its_failed_message(
        endpoints: dict[str, str], page: Page) -> None:
    from herald.web import create_app

    with serving(create_app()) as origin:
        # Given the operator signed in
        sign_in(page, origin, ADMIN_TOKEN)
        row = page.locator(f'#webhooks tr[data-endpoint="{endpoints["failing"]}"]')
        # Then the failing endpoint is amber with its counts
        expect(row.locator('[data-field="failed"]')).to_have_text("1", timeout=EXPECT_MS)
        expect(row.locator('[data-field="retrying"]')).to_have_text("1")
        expect(row.locator(".badge")).to_have_class("badge amber")
        expect(page.locator(f'#webhooks tr[data-endpoint="{endpoints["quiet"]}"] .badge')
               ).to_have_text("ok")
        # When its failed messages are opened
        row.get_by_role("button", name="https://hooks.example.com/herald").click()
        message = page.locator(f'#webhook-messages tr[data-message="{endpoints["failed"]}"]')
        expect(message).to_contain_text("HTTP 503", timeout=EXPECT_MS)
        # And the message is retried, behind a confirmation
        message.get_by_role("button", name="Retry").click()
        expect(page.locator("#confirm")).to_be_visible()
        page.locator("#confirm-ok").click()
        # Then it leaves the failed list, the counts follow, and its job is waiting
        expect(page.locator("#webhook-messages")).to_contain_text("No failed messages.",
                                                                  timeout=EXPECT_MS)
        expect(row.locator('[data-field="failed"]')).to_have_text("0", timeout=EXPECT_MS)
        expect(row.locator('[data-field="pending"]')).to_have_text("4")
        job = queue(QUEUE).get(endpoints["failed"])
        assert job is not None and job.state == "waiting"


