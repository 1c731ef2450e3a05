"""``GET /admin/mock/messages``: an operator trying herald without a real provider reads
what the mock sent (the tour's supplier order email among them), newest first; behind
ADMIN_TOKEN, and absent when nothing goes through the mock."""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient

from providers.base import Channel, OutboundMessage
from providers.mock import MockProvider
from tests.admin.conftest import ADMIN_HEADERS
from tests.support.queue_app import follow_settings
from tests.support.reset import reset_herald


def sent(channel: Channel, to: str, text: str, **more: object) -> None:
    assert MockProvider().send(OutboundMessage(channel=channel, to=to, text=text,
                                               **more)).accepted  # type: ignore[arg-type]


def test_the_mock_messages_newest_first_by_channel_and_address(client: TestClient) -> None:
    # Given three messages the mock sent
    sent(Channel.EMAIL, "orders@costco.example", "PO-1001", subject="Purchase order PO-1001",
         cc=("buyer@costco.example",))
    sent(Channel.SMS, "+966501234567", "your code")
    sent(Channel.EMAIL, "amal@example.com", "welcome", subject="Welcome")

    # When an operator reads them
    everything = client.get("/admin/mock/messages", headers=ADMIN_HEADERS)
    emails = client.get("/admin/mock/messages?channel=email&limit=1", headers=ADMIN_HEADERS)
    copied = client.get("/admin/mock/messages?to=buyer@costco.example", headers=ADMIN_HEADERS)

    # Then each answer lists what was sent, newest first, whole
    assert everything.status_code == 200, everything.text
    assert [m["text"] for m in everything.json()["messages"]] == [
        "welcome", "your code", "PO-1001"]
    assert [m["to"] for m in emails.json()["messages"]] == ["amal@example.com"]
    [order] = copied.json()["messages"]
    assert (order["subject"], order["cc"], order["outcome"]) == (
        "Purchase order PO-1001", ["buyer@costco.example"], "ok")


def test_the_messages_need_the_admin_token(client: TestClient) -> None:
    sent(Channel.SMS, "+966501234567", "your code")
    assert client.get("/admin/mock/messages").status_code == 401
    wrong = client.get("/admin/mock/messages", headers={"Authorization": "Bearer nope"})
    assert wrong.status_code == 401


def test_no_messages_route_when_nothing_goes_through_the_mock(
        monkeypatch: pytest.MonkeyPatch, client: TestClient) -> None:
    sent(Channel.SMS, "+966501234567", "your code")
    for name, value in {"EMAIL_PROVIDER": "smtp", "SMS_PROVIDER": "twilio",
                        "PUSH_PROVIDER": "onesignal", "SMTP_HOST": "mail.example"}.items():
        monkeypatch.setenv(name, value)
    reset_herald()
    follow_settings()

    response = client.get("/admin/mock/messages", headers=ADMIN_HEADERS)

    assert (response.status_code, response.json()["error"]["code"]) == (404, "not_found")
