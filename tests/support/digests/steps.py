"""Steps of the digest tests: activity events through the HTTP API, the activity digest
changed for one test, and what became of the buckets and their messages."""

from __future__ import annotations

import dataclasses
from datetime import timedelta
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlmodel import col, select

from actors import event_catalogue
from herald.db import session as db_session
from herald.queue import current_app
from models.digests import DigestBucket, DigestItem, DigestMode
from models.notifications import Delivery, Notification
from providers.mock import MockProvider

ACTIVITY = "account.activity"


def digest_activity(monkeypatch: pytest.MonkeyPatch, *, mode: DigestMode | None = None,
                    max_items: int | None = None, window: timedelta | None = None,
                    key: str | None = None) -> None:
    """Change the ``account.activity`` digest for this test (the catalogue entry is
    replaced, and put back by ``monkeypatch``)."""
    spec = event_catalogue.EVENT_TYPES[ACTIVITY]
    assert spec.digest is not None
    changes: dict[str, Any] = {}
    if mode is not None:
        changes["mode"] = mode
    if max_items is not None:
        changes["max_items"] = max_items
    if window is not None:
        changes["window"] = lambda: window
    if key is not None:
        changes["key"] = key
    digest = dataclasses.replace(spec.digest, **changes)
    monkeypatch.setitem(event_catalogue.EVENT_TYPES, ACTIVITY,
                        dataclasses.replace(spec, digest=digest))


def activity(client: TestClient, account_id: str, occurrence: str, text: str | None = None,
             **fields: Any) -> tuple[int, dict[str, Any]]:
    """Post an activity event; its status and body."""
    data = {"text": text or f"activity {occurrence}", **fields.pop("data", {})}
    response = client.post("/v1/events", json={"type": ACTIVITY, "account_id": account_id,
                                               "occurrence": occurrence, "data": data,
                                               **fields})
    return response.status_code, response.json()


def move_time(by: timedelta) -> None:
    """Move this process's queue time forward (docs/queue.md#queue-time)."""
    current_app().time.advance(by)


def buckets_of(account_id: str) -> list[DigestBucket]:
    with db_session() as session:
        return list(session.exec(select(DigestBucket)
                                 .where(DigestBucket.account_id == account_id)
                                 .order_by(col(DigestBucket.opened_at))).all())


def items_of(account_id: str) -> list[DigestItem]:
    with db_session() as session:
        return list(session.exec(select(DigestItem)
                                 .where(DigestItem.account_id == account_id)).all())


def messages_of(account_id: str) -> list[Notification]:
    """The account's activity notifications, oldest first."""
    with db_session() as session:
        return list(session.exec(select(Notification)
                                 .where(Notification.account_id == account_id,
                                        Notification.type == ACTIVITY)
                                 .order_by(col(Notification.created_at))).all())


def deliveries_of(notification_id: str) -> dict[str, Delivery]:
    with db_session() as session:
        return {d.channel: d for d in session.exec(
            select(Delivery).where(Delivery.notification_id == notification_id)).all()}


def emails_to(address: str) -> list[dict[str, Any]]:
    """What the mock provider accepted for ``address``, oldest first."""
    return [s for s in MockProvider.sends(accepted_only=True) if s["to"] == address]
