"""Helpers of the payment and activation tests: accounts and payments through the HTTP
API, store orders as placement leaves them, and the rows and jobs a client cannot see."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

from fastapi.testclient import TestClient
from sqlalchemy import func
from sqlmodel import select

from herald.db import session as db_session
from herald.queue import Job, queue
from models.notifications import Notification
from models.payments import Payment
from models.store import Order, StoreOrder


def account(client: TestClient) -> str:
    """A fresh account's id."""
    response = client.post("/v1/accounts", json={"email": "amal@example.com",
                                                  "phone": "+966501234567"})
    assert response.status_code == 201, response.text
    return str(response.json()["id"])


def store_order(account_id: str, *, amount: str = "50.00", currency: str = "SAR",
                status: str = "pending_payment") -> str:
    """An order as placement leaves it (waiting for its payment, issuance pending)."""
    order = Order(account_id=account_id, amount=Decimal(amount), currency=currency,
                  status=status)
    with db_session() as session:
        session.add(order)
        session.flush()
        session.add(StoreOrder(id=order.id, product_id="mock-ok", provider="mock",
                               idempotency_key=f"idem-{order.id}"))
    return order.id


def order_status(order_id: str) -> str:
    with db_session() as session:
        order = session.get(Order, order_id)
        assert order is not None
        return order.status


def payment_status(payment_id: str) -> str:
    with db_session() as session:
        found = session.get(Payment, payment_id)
        assert found is not None
        return found.status


def set_order_status(order_id: str, status: str) -> None:
    with db_session() as session:
        order = session.get(Order, order_id)
        assert order is not None
        order.status = status
        session.add(order)


def post(client: TestClient, path: str, body: dict[str, Any] | None = None,
         expect: int = 200) -> dict[str, Any]:
    """POST and check the status; the JSON answer."""
    response = client.post(path, json=body) if body is not None else client.post(path)
    assert response.status_code == expect, response.text
    return dict(response.json())


def payment(client: TestClient, payment_id: str) -> dict[str, Any]:
    response = client.get(f"/v1/payments/{payment_id}")
    assert response.status_code == 200, response.text
    return dict(response.json())


def payments_count() -> int:
    with db_session() as session:
        return int(session.exec(select(func.count()).select_from(Payment)).one())


def receipts(account_id: str) -> int:
    """How many payment.receipt notifications the account got."""
    with db_session() as session:
        return int(session.exec(select(func.count()).select_from(Notification).where(
            Notification.account_id == account_id,
            Notification.type == "payment.receipt")).one())


def job(queue_name: str, job_id: str) -> Job | None:
    return queue(queue_name).get(job_id)


def finished(queue_name: str, job_id: str) -> bool:
    found = job(queue_name, job_id)
    return found is not None and found.state in ("completed", "failed")
