"""Lookback digests (docs/api.md#digests): the event that opens a bucket is sent at once,
the repeats of its window go together in one message at its close, and a window without
repeats sends nothing more."""

from __future__ import annotations

from datetime import timedelta

import pytest
from fastapi.testclient import TestClient

from herald.queue import running_worker
from models.digests import DigestMode
from tests.support.digests.steps import (
    activity,
    buckets_of,
    deliveries_of,
    digest_activity,
    emails_to,
    messages_of,
    move_time,
)
from tests.support.pipeline.steps import account
from tests.support.waiting import wait_for

QUEUES = ["notification-orchestration", "notification-email"]


def emails_settled(account_id: str, count: int) -> bool:
    messages = messages_of(account_id)
    return len(messages) == count and all(
        deliveries_of(m.id)["email"].outcome == "sent" for m in messages)


@pytest.fixture(autouse=True)
def lookback(monkeypatch: pytest.MonkeyPatch) -> None:
    digest_activity(monkeypatch, mode=DigestMode.LOOKBACK)


def test_the_first_event_is_sent_at_once_and_the_repeats_together_at_the_close(
        client: TestClient) -> None:
    # Given an account with no digest open
    account_id = account(client, email="lamya@example.com")
    with running_worker(QUEUES):
        # When an activity event arrives
        status, first = activity(client, account_id, "comment-1", "Omar commented")
        # Then it is answered with its digest and its own notification, sent at once
        assert status == 202
        assert first["digest"]["items"] == 1
        assert first["notification"]["occurrence"] == "comment-1"
        wait_for(lambda: emails_settled(account_id, 1), timeout=30, what="the first email")
        # When three more arrive within the window
        for n in range(2, 5):
            status, body = activity(client, account_id, f"comment-{n}", f"Comment {n}")
            assert status == 202 and "notification" not in body
            assert body["digest"]["id"] == first["digest"]["id"]
        assert len(emails_to("lamya@example.com")) == 1
        # and the window ends
        move_time(timedelta(hours=1, seconds=1))
        # Then one more email lists the three repeats, newest first, not the first event
        wait_for(lambda: emails_settled(account_id, 2), timeout=30, what="the digest")
    digest = emails_to("lamya@example.com")[1]
    lines = [line for line in digest["text"].splitlines() if line.startswith("- ")]
    assert lines == ["- Comment 4", "- Comment 3", "- Comment 2"]
    # and the repeated first occurrence still answers the notification it had
    status, again = activity(client, account_id, "comment-1", "Omar commented")
    assert status == 200 and again["notification"]["id"] == first["notification"]["id"]


def test_a_window_without_repeats_sends_nothing_more(client: TestClient) -> None:
    # Given an account whose first activity event was sent at once
    account_id = account(client, email="huda@example.com")
    with running_worker(QUEUES):
        activity(client, account_id, "badge-1", "You earned a badge")
        wait_for(lambda: emails_settled(account_id, 1), timeout=30, what="the first email")
        # When the window ends with no other event
        move_time(timedelta(hours=1, seconds=1))
        wait_for(lambda: buckets_of(account_id)[0].status == "closed", timeout=30,
                 what="the bucket's close")
    # Then the bucket closed empty: nothing more was made or sent
    [bucket] = buckets_of(account_id)
    assert bucket.notification_id is None
    assert len(messages_of(account_id)) == 1
    assert len(emails_to("huda@example.com")) == 1
