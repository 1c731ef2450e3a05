"""``POST /v1/events`` under concurrent requests: each request is answered about its own
event, whatever other requests the app wrote to the database and queued with it.

Against the app on PostgreSQL + Redis (the ``pipeline`` fixture), many requests in flight
at once on one event loop, as ``herald web`` serves them."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx
import pytest
from fastapi.testclient import TestClient
from sqlalchemy import func
from sqlmodel import select

from herald.db import session as db_session
from herald.queue import queue
from herald.web import create_app
from models.notifications import Notification


def _post_all(bodies: list[dict[str, Any]]) -> list[httpx.Response]:
    """Every body posted to ``/v1/events`` at once; the responses in the same order."""
    app = create_app()

    async def post_all() -> list[httpx.Response]:
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://herald") as client:
            return list(await asyncio.gather(*(client.post("/v1/events", json=body)
                                               for body in bodies)))

    return asyncio.run(post_all())


@pytest.fixture
def account_id(pipeline: None) -> str:
    with TestClient(create_app()) as client:
        response = client.post("/v1/accounts", json={"email": "amal@example.com",
                                                     "phone": "+966501234567"})
    assert response.status_code == 201, response.text
    return str(response.json()["id"])


def test_concurrent_events_are_each_answered_about_their_own(account_id: str) -> None:
    # Given 40 requests in flight at once: 30 new occurrences, the same occurrence 5
    # times, an unknown account, an unknown type, and an event whose data is wrong
    new = [{"type": "account.welcome", "account_id": account_id, "occurrence": f"new-{n}"}
           for n in range(30)]
    repeated = [{"type": "account.welcome", "account_id": account_id,
                 "occurrence": "twice"}] * 5
    refused = [{"type": "account.welcome", "account_id": "no-such-account",
                "occurrence": "x"},
               {"type": "no.such.type", "account_id": account_id, "occurrence": "y"},
               {"type": "payment.receipt", "account_id": account_id, "occurrence": "z",
                "data": {"amount": "-1"}}]
    bodies = [*new[:10], *repeated, *new[10:20], refused[0], *new[20:], *refused[1:]]

    # When they are posted concurrently
    responses = _post_all(bodies)

    # Then each new occurrence has its own notification, accepted once
    answered = dict(zip((b["occurrence"] for b in bodies), responses, strict=True))
    for body in new:
        response = answered[body["occurrence"]]
        assert response.status_code == 202, response.text
        assert response.json()["occurrence"] == body["occurrence"]
        assert response.json()["account_id"] == account_id
    # the repeated occurrence is accepted by one request; the others get that notification
    twice = [r for b, r in zip(bodies, responses, strict=True) if b["occurrence"] == "twice"]
    assert sorted(r.status_code for r in twice) == [200, 200, 200, 200, 202]
    assert len({r.json()["id"] for r in twice}) == 1
    # and the refused ones are refused, alone
    assert answered["x"].status_code == 404
    assert answered["x"].json()["error"]["code"] == "account_not_found"
    assert [answered[o].status_code for o in ("y", "z")] == [422, 422]
    assert all(answered[o].json()["error"]["code"] == "invalid_event" for o in ("y", "z"))

    # And the database holds exactly the accepted notifications, each with its jobs queued
    with db_session() as session:
        stored = session.exec(select(func.count()).select_from(Notification)).one()
    assert stored == 31
    for response in [*(answered[b["occurrence"]] for b in new), twice[0]]:
        for delivery in response.json()["deliveries"]:
            if delivery["channel"] in ("email", "sms"):
                job = queue(f"notification-{delivery['channel']}").get(delivery["id"])
                assert job is not None and job.payload["delivery_id"] == delivery["id"]
