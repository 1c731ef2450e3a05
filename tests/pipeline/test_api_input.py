"""Requests the database cannot store are the client's error (SPEC section 9: no 5xx)."""

from __future__ import annotations

from fastapi.testclient import TestClient
from sqlalchemy import func
from sqlmodel import select

from herald.db import session as db_session
from herald.web import create_app
from models.notifications import Account, Notification


def test_a_nul_character_is_a_422_and_stores_nothing(pipeline: None) -> None:
    client = TestClient(create_app(), raise_server_exceptions=False)
    # PostgreSQL refuses NUL in text: the answer is a client error, not a 500
    event = client.post("/v1/events", json={"type": "account.welcome", "account_id": "a\u0000b",
                                            "occurrence": "signup"})
    account = client.post("/v1/accounts", json={"email": "a\u0000@example.com"})
    assert (event.status_code, account.status_code) == (422, 422)
    assert event.json()["error"]["code"] == "invalid_value"
    with db_session() as session:
        assert session.exec(select(func.count()).select_from(Account)).one() == 0
        assert session.exec(select(func.count()).select_from(Notification)).one() == 0
