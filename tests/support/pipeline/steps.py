"""Helpers of the pipeline tests: accounts and events through the HTTP API, deliveries
as a client reads them, and who waits on a PostgreSQL lock."""

from __future__ import annotations

import collections
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import func, text
from sqlmodel import select

from herald import db, settings
from providers.mock import MockProvider
from tests.support.queue_app import install_queue_app


def account(client: TestClient, **fields: object) -> str:
    """Create an account (email and phone set unless overridden); returns its id."""
    body = {"email": "amal@example.com", "phone": "+966501234567", "locale": "en", **fields}
    response = client.post("/v1/accounts", json=body)
    assert response.status_code == 201, response.text
    return str(response.json()["id"])


def event(client: TestClient, account_id: str, type_: str = "account.welcome",
          occurrence: str = "signup", **fields: object) -> dict[str, Any]:
    """Post an event; its notification as JSON, plus ``_status`` (202 new, 200 repeat)."""
    response = client.post("/v1/events", json={"type": type_, "account_id": account_id,
                                               "occurrence": occurrence, **fields})
    assert response.status_code in (200, 202), response.text
    return dict(response.json()) | {"_status": response.status_code}


def delivery(client: TestClient, delivery_id: str) -> dict[str, Any]:
    """One delivery as ``GET /v1/deliveries/{id}`` answers it."""
    response = client.get(f"/v1/deliveries/{delivery_id}")
    assert response.status_code == 200, response.text
    return dict(response.json())


def outcomes(client: TestClient, notification_id: str) -> dict[str, str]:
    """Channel → outcome of a notification's deliveries."""
    body = client.get(f"/v1/notifications/{notification_id}").json()
    return {d["channel"]: d["outcome"] for d in body["deliveries"]}


def settled(client: TestClient, notification_id: str) -> bool:
    """True once no delivery of the notification is queued or sending."""
    return all(o not in ("queued", "sending") for o in outcomes(client, notification_id).values())


def use_redis(monkeypatch: pytest.MonkeyPatch, url: str) -> None:
    """Point herald at the Redis at ``url`` for the rest of the test."""
    monkeypatch.setenv("REDIS_URL", url)
    settings.reset_settings()
    install_queue_app()


def sessions_waiting_on(holder_pid: int) -> int:
    """Database sessions waiting for a lock the session ``holder_pid`` holds (read in a
    transaction of its own: one transaction sees one snapshot of pg_stat_activity)."""
    with db.get_engine().connect() as connection:
        return int(connection.execute(text("SELECT count(*) FROM pg_stat_activity "
                                           "WHERE :pid = ANY(pg_blocking_pids(pid))"),
                                      {"pid": holder_pid}).scalar_one())


def open_deliveries() -> int:
    """How many deliveries are not final yet (queued or sending)."""
    from models.notifications import FINAL_OUTCOMES, Delivery

    with db.session() as session:
        return int(session.exec(select(func.count()).select_from(Delivery).where(
            Delivery.outcome.not_in([o.value for o in FINAL_OUTCOMES]))).one())


def in_flight() -> set[str]:
    """The deliveries an attempt holds a claim on right now."""
    from models.notifications import Delivery

    with db.session() as session:
        return set(session.exec(select(Delivery.id).where(
            Delivery.outcome == "sending", Delivery.claimed_at.is_not(None))).all())


def provider_acceptances() -> collections.Counter[str]:
    """How many times the mock provider accepted each delivery (by idempotency key)."""
    return collections.Counter(record["idempotency_key"]
                               for record in MockProvider.sends(accepted_only=True))


def accepted_twice() -> set[str]:
    """The deliveries the mock provider accepted more than once."""
    return {key for key, count in provider_acceptances().items() if count > 1}


@contextmanager
def breakable_pipeline(monkeypatch: pytest.MonkeyPatch, **env: str) -> Iterator[None]:
    """The pipeline for a test that kills or cuts off what it runs on: ``env`` set (the
    workers and the clock the test spawns inherit it) with the handoff sweep every second
    for deliveries 3 s old, herald's settings, engine and queue App made anew on it, the
    mock provider's records cleared before and after."""
    for name, value in {"HANDOFF_SWEEP_AGE_S": "3", "HANDOFF_SWEEP_INTERVAL_S": "1",
                        **env}.items():
        monkeypatch.setenv(name, value)
    settings.reset_settings()
    db.reset_engine()
    install_queue_app()
    MockProvider.reset()
    try:
        yield
    finally:
        db.reset_engine()
        MockProvider.reset()
