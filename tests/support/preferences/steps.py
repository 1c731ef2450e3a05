"""Helpers of the preference tests: an account's document through the API, and what a
delivery recorded."""

from __future__ import annotations

from typing import Any

from fastapi.testclient import TestClient
from sqlmodel import select

from herald.db import session as db_session
from models.notifications import Delivery


def put_preferences(client: TestClient, account_id: str, document: dict[str, Any]) -> None:
    """Replace the account's preference document (it must be accepted)."""
    response = client.put(f"/v1/accounts/{account_id}/preferences", json=document)
    assert response.status_code == 200, response.text


def patch_preferences(client: TestClient, account_id: str, patch: dict[str, Any]) -> None:
    """Merge-patch the account's preference document (it must be accepted)."""
    response = client.patch(f"/v1/accounts/{account_id}/preferences", json=patch)
    assert response.status_code == 200, response.text


def recorded(delivery_id: str) -> tuple[str, str | None, str | None]:
    """A delivery's outcome, reason and last error, as stored."""
    with db_session() as session:
        row = session.exec(select(Delivery.outcome, Delivery.reason, Delivery.last_error)
                           .where(Delivery.id == delivery_id)).one()
    return row[0], row[1], row[2]
