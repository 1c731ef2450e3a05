"""A restaurant's order numbers are unique: placing the same order again (a client's
retry, with or without an ``Idempotency-Key``) answers the existing order and sends the
supplier nothing more; the same number with other lines is 409 ``order_number_taken``.

Against the app on PostgreSQL + Redis, a real SFTP server (Sysco) and a real SMTP relay
(Costco), with the real dispatch worker."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from fastapi.testclient import TestClient
from sqlalchemy import func, text
from sqlmodel import select

from herald import db
from herald.demo.sftp_server import SftpTestServer
from herald.queue import queue, running_worker
from herald.web import create_app
from models.purchasing import DispatchOutbox, PurchaseOrder, PurchaseOrderLine, SupplierDispatch
from tests.purchasing.conftest import Mailbox, make_item, make_supplier
from tests.support.idempotency import client_without_keys
from tests.support.purchasing.dispatching import files_under
from tests.support.waiting import wait_for

RESTAURANT = {"id": str(uuid.uuid4()), "name": "Bistro Nord", "location": "12 Quai Nord"}


@pytest.fixture
def client(purchasing: str) -> Iterator[TestClient]:
    with client_without_keys() as test_client:
        yield test_client


def order(*lines: tuple[str, Any], number: str = "PO-7001",
          restaurant: dict[str, str] = RESTAURANT) -> dict[str, Any]:
    return {"restaurant": restaurant, "order_number": number,
            "lines": [{"catalog_item_id": item, "quantity": quantity}
                      for item, quantity in lines]}


def rows() -> dict[str, int]:
    with db.session() as session:
        return {model.__tablename__: int(session.exec(  # type: ignore[attr-defined]
            select(func.count()).select_from(model)).one())
            for model in (PurchaseOrder, PurchaseOrderLine, SupplierDispatch, DispatchOutbox)}


def dispatch_jobs() -> int:
    return sum(queue("supplier-dispatch").counts().values())


def test_the_same_order_placed_twice_is_one_order_one_850_and_one_email(
        client: TestClient, sftp: SftpTestServer, mailbox: Mailbox) -> None:
    # Given a Sysco item (its 850 goes over SFTP) and a Costco item (an email)
    sysco = make_supplier("sysco", sftp=sftp)
    costco = make_supplier("costco", email="orders@costco.test")
    flour = make_item("Flour", mappings=[(sysco, "SY-FLOUR", True)])
    towels = make_item("Paper towels", mappings=[(costco, "CO-PT", True)])
    body = order((flour, 2), (towels, 1))

    # When the restaurant places the order, and places it again (a retry without a key;
    # the lines in another order, the quantity spelled otherwise)
    first = client.post("/v1/purchase-orders", json=body)
    again = client.post("/v1/purchase-orders", json=order((towels, "1.00"), (flour, 2)))

    # Then the first is created, the second answers that same order
    assert first.status_code == 201, first.text
    assert again.status_code == 200, again.text
    assert again.json() == first.json()
    assert rows() == {"purchase_orders": 1, "purchase_order_lines": 2,
                      "supplier_dispatches": 2, "supplier_dispatch_outbox": 2}
    assert dispatch_jobs() == 2

    # And once the worker has run, Sysco has one 850 and Costco one email
    with running_worker(["supplier-dispatch"]):
        wait_for(lambda: client.get(f"/v1/purchase-orders/{first.json()['id']}")
                 .json()["status"] == "completed", timeout=60, what="both dispatches sent")
    outbound = [path for path in files_under(sftp.root) if path.startswith("outbound/")]
    assert len(outbound) == 1, outbound
    assert len(mailbox.messages) == 1
    assert dispatch_jobs() == 2


def test_the_same_number_with_other_lines_is_409_and_writes_nothing(
        client: TestClient) -> None:
    costco = make_supplier("costco")
    towels = make_item("Paper towels", mappings=[(costco, "CO-PT", True)])
    salt = make_item("Salt", mappings=[(costco, "CO-SALT", True)])
    assert client.post("/v1/purchase-orders", json=order((towels, 1))).status_code == 201
    before = (rows(), dispatch_jobs())

    for other in (order((towels, 2)), order((towels, 1), (salt, 1)), order((salt, 1))):
        response = client.post("/v1/purchase-orders", json=other)
        assert response.status_code == 409, response.text
        assert response.json()["error"]["code"] == "order_number_taken"
        assert "PO-7001" in response.json()["error"]["message"]
    assert (rows(), dispatch_jobs()) == before


def test_another_restaurant_may_use_the_same_number(client: TestClient) -> None:
    costco = make_supplier("costco")
    towels = make_item("Paper towels", mappings=[(costco, "CO-PT", True)])
    first = client.post("/v1/purchase-orders", json=order((towels, 1)))
    other = client.post("/v1/purchase-orders", json=order(
        (towels, 1), restaurant={**RESTAURANT, "id": str(uuid.uuid4())}))
    assert (first.status_code, other.status_code) == (201, 201)
    assert first.json()["id"] != other.json()["id"]
    assert rows()["purchase_orders"] == 2


def test_concurrent_placements_of_one_order_make_one(client: TestClient) -> None:
    # Ten requests for the same order at once, each on its own database connection: the
    # unique index lets one insert; the others answer with its order
    costco = make_supplier("costco")
    towels = make_item("Paper towels", mappings=[(costco, "CO-PT", True)])
    body = order((towels, 3))

    async def post_all() -> list[httpx.Response]:
        transport = httpx.ASGITransport(app=create_app())
        async with httpx.AsyncClient(transport=transport, base_url="http://herald",
                                     timeout=30) as http:
            return list(await asyncio.gather(*(http.post("/v1/purchase-orders", json=body)
                                               for _ in range(10))))

    responses = asyncio.run(post_all())
    assert sorted(r.status_code for r in responses) == [200] * 9 + [201]
    assert len({r.json()["id"] for r in responses}) == 1
    assert rows() == {"purchase_orders": 1, "purchase_order_lines": 1,
                      "supplier_dispatches": 1, "supplier_dispatch_outbox": 1}
    assert dispatch_jobs() == 1


def test_a_retry_with_an_idempotency_key_replays_the_201(client: TestClient) -> None:
    costco = make_supplier("costco")
    towels = make_item("Paper towels", mappings=[(costco, "CO-PT", True)])
    headers = {"Idempotency-Key": "po-7001-try"}
    first = client.post("/v1/purchase-orders", json=order((towels, 1)), headers=headers)
    again = client.post("/v1/purchase-orders", json=order((towels, 1)), headers=headers)
    assert (first.status_code, again.status_code) == (201, 201)
    assert again.content == first.content
    assert again.headers["idempotent-replayed"] == "true"
    assert rows()["purchase_orders"] == 1
    assert dispatch_jobs() == 1


def test_migrating_keeps_orders_placed_twice_before_and_makes_the_number_unique(
        empty_database: str) -> None:
    # Given a database at the revision before the constraint, holding one order placed
    # twice (and another restaurant's order of the same number)
    from alembic import command
    from sqlalchemy import create_engine
    from sqlalchemy.exc import IntegrityError

    from herald.db.migrations import alembic_config

    command.upgrade(alembic_config(empty_database), "0009")
    engine = create_engine(empty_database)
    insert = text("INSERT INTO purchase_orders (id, order_number, restaurant_id, "
                  "restaurant_name, status, created_at, updated_at) VALUES (:id, :number, "
                  ":restaurant, 'Bistro', 'pending', :at, :at)")
    placed = [("a0000000-0000-0000-0000-000000000001", "bistro", "2026-01-01T10:00:00+00:00"),
              ("b0000000-0000-0000-0000-000000000002", "bistro", "2026-01-01T10:00:05+00:00"),
              ("c0000000-0000-0000-0000-000000000003", "cafe", "2026-01-01T10:00:09+00:00")]
    with engine.begin() as connection:
        for order_id, restaurant, at in placed:
            connection.execute(insert, {"id": order_id, "number": "PO-1", "at": at,
                                        "restaurant": restaurant})

    # When it is migrated
    command.upgrade(alembic_config(empty_database), "head")

    # Then every order is kept: the oldest with its number, the later one renamed
    with engine.connect() as connection:
        numbers = dict(connection.execute(text(
            "SELECT id, order_number FROM purchase_orders")).all())
    assert numbers == {placed[0][0]: "PO-1", placed[1][0]: "PO-1~b0000000",
                       placed[2][0]: "PO-1"}
    # and the number is unique per restaurant from now on
    with pytest.raises(IntegrityError), engine.begin() as connection:
        connection.execute(insert, {"id": str(uuid.uuid4()), "number": "PO-1",
                                    "restaurant": "bistro", "at": "2026-01-02T00:00:00+00:00"})
    engine.dispose()
