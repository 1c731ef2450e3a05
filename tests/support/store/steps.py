"""Helpers of the store tests: paid orders, what the database says of them, waiting."""

from __future__ import annotations

import uuid
from typing import Any

from fastapi.testclient import TestClient
from sqlalchemy import func, update
from sqlmodel import select

from herald import db
from herald.queue import queue
from models.store import Order, OrderStatus, StoreOrder, StoreOrderStatusEvent, status_events
from tests.support.waiting import wait_for


def account(email: str | None = None) -> str:
    """A new account with an email and a phone; its id."""
    from actors.orchestration import create_account

    return create_account(email=email or f"buyer-{uuid.uuid4().hex[:8]}@example.com",
                          phone="+966501234567").id


def placed(product_id: str, account_id: str | None = None) -> str:
    """An order for ``product_id`` placed by a new account (``pending_payment``); its id."""
    from actors.store import place_order

    return str(place_order(account_id or account(), product_id)["id"])


def mark_paid(order_id: str) -> None:
    """What settlement does to the order before it hands the issuance over."""
    with db.session() as session:
        session.execute(update(Order).where(Order.id == order_id)
                        .values(status=OrderStatus.PAID.value))


def paid(product_id: str, account_id: str | None = None) -> str:
    """A paid order for ``product_id``; its id (no issuance run queued yet)."""
    order_id = placed(product_id, account_id)
    mark_paid(order_id)
    return order_id


def order(order_id: str) -> dict[str, Any]:
    """The order as ``GET /v1/store/orders/{id}`` answers it."""
    from actors.store import get_order

    found = get_order(order_id)
    assert found is not None, order_id
    return found


def store_row(order_id: str) -> StoreOrder:
    with db.session() as session:
        row = session.get(StoreOrder, order_id)
        assert row is not None
        return row


def events(order_id: str) -> list[tuple[str | None, str, str | None, str, str]]:
    """(from, to, error code, source, note) of each status event, oldest first."""
    with db.session() as session:
        return [(e.from_state, e.to_state, e.error_code, e.source, e.note)
                for e in status_events(session, order_id)]


def wait_state(order_id: str, *states: str, timeout: float = 30) -> dict[str, Any]:
    """Wait until the order's issuance is one of ``states``; the order as JSON."""
    wait_for(lambda: order(order_id)["issuance_state"] in states, timeout=timeout,
             every=0.05, what=f"order {order_id} to reach {' or '.join(states)}")
    return order(order_id)


def wait_job(job_id: str, *states: str, timeout: float = 30) -> Any:
    """Wait until the store job ``job_id`` is in one of ``states``; the job."""
    def reached() -> Any:
        job = queue("store-fulfillment").get(job_id)
        return job if job is not None and job.state in states else None

    return wait_for(reached, timeout=timeout, every=0.05,
                    what=f"job {job_id} to be {' or '.join(states)}")


def rows() -> tuple[int, int, int]:
    """How many orders, store orders and status events exist."""
    with db.session() as session:
        return tuple(session.exec(select(func.count()).select_from(table)).one()  # type: ignore[return-value]
                     for table in (Order, StoreOrder, StoreOrderStatusEvent))


def place(client: TestClient, body: Any) -> Any:
    """``POST /v1/store/orders`` with ``body``; the response."""
    return client.post("/v1/store/orders", json=body)
