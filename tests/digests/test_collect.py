"""Digests through the HTTP API and a real worker (docs/api.md#digests): a burst of
activity events becomes one email and one in-app notification, listing them newest first;
the answer to each event names its digest; a repeated occurrence adds nothing; malformed
data is refused before anything is written; the account's preferences apply to the
digest's message."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from fastapi.testclient import TestClient

from herald.queue import running_worker
from tests.support.digests.steps import (
    activity,
    buckets_of,
    deliveries_of,
    digest_activity,
    emails_to,
    items_of,
    messages_of,
    move_time,
)
from tests.support.pipeline.steps import account
from tests.support.waiting import wait_for

QUEUES = ["notification-orchestration", "notification-email"]
ADDRESS = "amal@example.com"


def sent(account_id: str, count: int = 1) -> bool:
    """True once the account has ``count`` activity messages, each email settled."""
    messages = messages_of(account_id)
    return len(messages) == count and all(
        deliveries_of(m.id)["email"].outcome not in ("queued", "sending") for m in messages)


def test_fifty_events_become_one_email_listing_them_and_one_in_app_notification(
        client: TestClient) -> None:
    # Given an account, and its activity digested over the default hour, 50 at most
    account_id = account(client)
    # When 50 activity events arrive within the window
    answers = [activity(client, account_id, f"login-{n}", f"Sign-in number {n}")
               for n in range(50)]
    # Then each joined one digest, counted in the answer
    assert {status for status, _ in answers} == {202}
    assert {body["digest"]["id"] for _, body in answers} == {buckets_of(account_id)[0].id}
    assert [body["digest"]["items"] for _, body in answers] == list(range(1, 51))
    # and the 50th filled it, so it closes now rather than in an hour: one message
    with running_worker(QUEUES):
        wait_for(lambda: sent(account_id), timeout=30, what="the digest's email")
    [message] = messages_of(account_id)
    assert [e["occurrence"] for e in message.data["events"]] == [f"login-{n}"
                                                                for n in range(50)]
    deliveries = deliveries_of(message.id)
    assert deliveries["in_app"].outcome == "delivered"
    assert deliveries["email"].outcome == "sent"
    [email] = emails_to(ADDRESS)
    assert email["subject"] == "50 new activities on your account"
    lines = [line for line in email["text"].splitlines() if line.startswith("- ")]
    assert lines == [f"- Sign-in number {n}" for n in reversed(range(50))]  # newest first
    assert "more" not in email["text"]
    [bucket] = buckets_of(account_id)
    assert (bucket.status, bucket.item_count, bucket.notification_id) == ("closed", 50,
                                                                          message.id)


def test_the_window_closes_the_digest_and_the_email_lists_the_newest_then_and_k_more(
        client: TestClient, monkeypatch: pytest.MonkeyPatch) -> None:
    # Given a digest that lists at most 10 items
    digest_activity(monkeypatch, max_items=10)
    account_id = account(client)
    # When 25 events arrive before any worker runs (the 10th asks for the early close)
    for n in range(25):
        activity(client, account_id, f"order-{n}", f"Order {n} shipped")
    # Then one email lists the 10 newest and counts the other 15
    with running_worker(QUEUES):
        wait_for(lambda: sent(account_id), timeout=30, what="the digest's email")
        [email] = emails_to(ADDRESS)
        lines = [line for line in email["text"].splitlines() if line.startswith("- ")]
        assert lines == [f"- Order {n} shipped" for n in range(24, 14, -1)]
        assert "and 15 more" in email["text"]
        # and an event after the close opens a new digest, sent when its window ends
        status, body = activity(client, account_id, "order-25", "Order 25 shipped")
        assert status == 202 and body["digest"]["items"] == 1
        closes_at = datetime.fromisoformat(body["digest"]["closes_at"])
        assert closes_at - datetime.now(UTC) > timedelta(minutes=59)
        move_time(timedelta(hours=1, seconds=1))
        wait_for(lambda: sent(account_id, 2), timeout=30, what="the second digest")
    assert len(emails_to(ADDRESS)) == 2
    assert emails_to(ADDRESS)[1]["subject"] == "New activity on your account"
    assert [b.status for b in buckets_of(account_id)] == ["closed", "closed"]


def test_a_repeated_occurrence_answers_the_same_digest_and_adds_nothing(
        client: TestClient) -> None:
    # Given an account and one activity event accepted
    account_id = account(client)
    status, first = activity(client, account_id, "invoice-7")
    assert status == 202
    assert set(first) == {"digest"}
    assert set(first["digest"]) == {"id", "closes_at", "items"}
    # When the same occurrence comes again, alone and in a bulk request
    again_status, again = activity(client, account_id, "invoice-7")
    bulk = client.post("/v1/events/bulk", json={"events": [
        {"type": "account.activity", "account_id": account_id, "occurrence": "invoice-7",
         "data": {"text": "activity invoice-7"}},
        {"type": "account.activity", "account_id": account_id, "occurrence": "invoice-8",
         "data": {"text": "activity invoice-8"}},
        {"type": "account.activity", "account_id": account_id, "occurrence": "invoice-9",
         "data": {}}]}).json()["results"]
    # Then the repeat is answered 200 with the same digest, and only new events count
    assert again_status == 200 and again == first
    assert [r["status"] for r in bulk] == [200, 202, 422]
    assert bulk[0]["digest"] == first["digest"]
    assert bulk[1]["digest"]["id"] == first["digest"]["id"]
    assert bulk[1]["digest"]["items"] == 2
    assert len(items_of(account_id)) == 2
    assert buckets_of(account_id)[0].item_count == 2


def test_malformed_activity_is_refused_and_nothing_is_written(client: TestClient) -> None:
    # Given an account
    account_id = account(client)
    # When activity events come without their text, with an unknown key, for no account
    missing = client.post("/v1/events", json={"type": "account.activity",
                                              "account_id": account_id, "occurrence": "a",
                                              "data": {"url": "https://example.com"}})
    unknown = client.post("/v1/events", json={"type": "account.activity",
                                              "account_id": account_id, "occurrence": "b",
                                              "data": {"text": "x", "colour": "red"}})
    nobody = client.post("/v1/events", json={"type": "account.activity",
                                             "account_id": "no-such-account",
                                             "occurrence": "c", "data": {"text": "x"}})
    # Then they are refused, naming the key, and no bucket or item exists
    assert missing.status_code == 422 and "text" in missing.json()["error"]["message"]
    assert unknown.status_code == 422 and "colour" in unknown.json()["error"]["message"]
    assert nobody.status_code == 404
    assert buckets_of(account_id) == [] and items_of(account_id) == []
    assert buckets_of("no-such-account") == []


def test_the_preferences_apply_to_the_digest_message_not_to_each_event(
        client: TestClient) -> None:
    # Given an account that turned marketing email off
    account_id = account(client)
    response = client.put(f"/v1/accounts/{account_id}/preferences",
                          json={"categories": {"marketing": {"email": False}}})
    assert response.status_code == 200, response.text
    # When its activity digest closes
    for n in range(3):
        activity(client, account_id, f"tip-{n}")
    move_time(timedelta(hours=1, seconds=1))
    with running_worker(QUEUES):
        wait_for(lambda: sent(account_id), timeout=30, what="the digest's close")
    # Then its one message's email is suppressed by the preference; in-app is delivered
    [message] = messages_of(account_id)
    deliveries = deliveries_of(message.id)
    assert (deliveries["email"].outcome, deliveries["email"].reason) == ("suppressed",
                                                                        "preference")
    assert deliveries["in_app"].outcome == "delivered"
    assert emails_to(ADDRESS) == []
