"""``/v1/suppliers``, ``/v1/catalog-items``, ``/v1/purchase-orders``: what each creates and
answers, that a refused request (401, 404, each 422) writes and queues nothing, that an
order becomes one dispatch and one job per supplier, and that a supplier's SFTP password
is never answered."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import asyncssh
import pytest
from fastapi.testclient import TestClient
from sqlalchemy import func
from sqlmodel import select

from herald import db, settings
from herald.queue import queue
from models.purchasing import (
    CatalogItem,
    DispatchOutbox,
    PurchaseOrder,
    PurchaseOrderLine,
    Supplier,
    SupplierDispatch,
    SupplierMapping,
)
from models.supplier_jobs import SupplierDispatchJob
from providers.sftp import openssh_key_line
from tests.purchasing.conftest import make_item, make_supplier

PASSWORD = "s3cret-Pa55word"
#: The public key of the (imaginary) server at sftp.sysco.test.
HOST_KEY = openssh_key_line(asyncssh.generate_private_key("ssh-ed25519").convert_to_public())
SFTP = {"host": "sftp.sysco.test", "port": 2222, "username": "herald", "password": PASSWORD,
        "outbound_dir": "/outbound", "inbound_dir": "/inbound", "archive_dir": "/archive",
        "host_key": HOST_KEY}
TABLES = (Supplier, CatalogItem, SupplierMapping, PurchaseOrder, PurchaseOrderLine,
          SupplierDispatch, DispatchOutbox)


@pytest.fixture
def client(purchasing: str) -> Iterator[TestClient]:
    """The HTTP app over the purchasing database and Redis (no API_TOKEN: open)."""
    from herald.web import create_app

    with TestClient(create_app()) as test_client:
        yield test_client


def rows() -> dict[str, int]:
    """How many rows each purchasing table holds."""
    with db.session() as session:
        return {table.__tablename__: session.exec(  # type: ignore[attr-defined]
            select(func.count()).select_from(table)).one() for table in TABLES}


def dispatch_jobs() -> list[Any]:
    """Every job of the supplier-dispatch queue, whatever its state."""
    dispatch = queue("supplier-dispatch")
    return [job for state in ("waiting", "delayed", "active", "completed", "failed", "paused")
            for job in dispatch.jobs(state, per_page=500)]


def order_body(*lines: tuple[str, Any], **fields: Any) -> dict[str, Any]:
    return {"restaurant": {"id": str(uuid.uuid4()), "name": "Bistro Nord",
                           "location": "12 Quai Nord, Lyon"},
            "order_number": "PO-2001", "placed_by_email": "chef@bistro.test",
            "delivery_notes": "Back door", **fields,
            "lines": [{"catalog_item_id": item, "quantity": quantity}
                      for item, quantity in lines]}


# -- suppliers ----------------------------------------------------------------------------------
def test_a_sysco_supplier_is_created_and_read_without_its_password(client: TestClient) -> None:
    # When a sysco supplier is created with its SFTP settings
    created = client.post("/v1/suppliers", json={"name": "Sysco Lyon", "type": "sysco",
                                                  "sftp": SFTP})

    # Then it is answered with its settings but never its password, on create and on read
    assert created.status_code == 201, created.text
    supplier = created.json()
    assert supplier["type"] == "sysco" and supplier["active"] is True
    assert supplier["sftp"]["host"] == "sftp.sysco.test"
    assert supplier["sftp"]["host_key"] == HOST_KEY
    assert supplier["sftp"]["password_set"] is True
    assert "password" not in supplier["sftp"]
    read = client.get(f"/v1/suppliers/{supplier['id']}")
    assert read.status_code == 200
    assert read.json() == supplier
    assert PASSWORD not in created.text + read.text
    # And the password is stored for the transport
    with db.session() as session:
        row = session.get(Supplier, supplier["id"])
        assert row is not None and row.sftp is not None and row.sftp["password"] == PASSWORD


def test_an_email_supplier_keeps_its_copies_and_may_have_no_address(
        client: TestClient) -> None:
    costco = client.post("/v1/suppliers", json={
        "name": "Costco", "type": "costco", "email": "orders@costco.test",
        "cc": ["buyer@costco.test", "buyer@costco.test", "ap@costco.test"]})
    kitchen = client.post("/v1/suppliers", json={"name": "Kitchen", "type": "central_kitchen",
                                                 "email": ""})
    assert costco.status_code == 201 and kitchen.status_code == 201
    assert costco.json()["cc"] == ["buyer@costco.test", "ap@costco.test"]
    assert costco.json()["sftp"] is None
    assert kitchen.json()["email"] is None


@pytest.mark.parametrize(("body", "says"), [
    ({"name": "Sysco", "type": "sysco"}, "needs its SFTP settings"),
    ({"name": "Sysco", "type": "sysco", "sftp": {**SFTP, "port": 0}}, "port must be"),
    ({"name": "Sysco", "type": "sysco",
      "sftp": {k: v for k, v in SFTP.items() if k != "archive_dir"}}, "archive_dir"),
    ({"name": "Sysco", "type": "sysco", "sftp": {**SFTP, "colour": "red"}}, "colour"),
    ({"name": "Costco", "type": "costco", "sftp": SFTP}, "only a sysco supplier"),
    ({"name": "Costco", "type": "costco", "email": "not-an-address"}, "email"),
    ({"name": "Costco", "type": "costco", "email": "a@b.test", "cc": ["x@y.test", "nope"]},
     "cc.1"),
    ({"name": "Metro", "type": "metro", "email": "a@b.test"}, "type"),
    ({"name": " ", "type": "costco", "email": "a@b.test"}, "name"),
    ({"name": "Costco", "type": "costco", "email": "a@b.test", "phone": "+33"}, "phone"),
])
def test_a_bad_supplier_is_422_and_writes_nothing(client: TestClient, body: dict[str, Any],
                                                  says: str) -> None:
    response = client.post("/v1/suppliers", json=body)
    assert response.status_code == 422, response.text
    assert says in response.json()["error"]["message"]
    assert PASSWORD not in response.text
    assert rows()["suppliers"] == 0


def test_an_unknown_supplier_is_404(client: TestClient) -> None:
    response = client.get(f"/v1/suppliers/{uuid.uuid4()}")
    assert response.status_code == 404
    assert response.json()["error"]["code"] == "supplier_not_found"


# -- catalog items ---------------------------------------------------------------------------
def test_a_catalog_item_is_created_with_its_mappings(client: TestClient) -> None:
    sysco, costco = make_supplier("sysco"), make_supplier("costco")
    response = client.post("/v1/catalog-items", json={
        "name": "Roma tomatoes", "unit": "case", "mappings": [
            {"supplier_id": sysco, "supplier_sku": "SKU-1", "supplier_product_code": "PC-1",
             "unit_size": "6/#10", "preferred": True},
            {"supplier_id": costco, "supplier_sku": "C-77"}]})
    assert response.status_code == 201, response.text
    item = response.json()
    assert item["name"] == "Roma tomatoes" and item["unit"] == "case"
    assert [(m["supplier_id"], m["supplier_sku"], m["preferred"]) for m in item["mappings"]] == [
        (sysco, "SKU-1", True), (costco, "C-77", False)]
    with db.session() as session:
        stored = session.exec(select(SupplierMapping).where(
            SupplierMapping.catalog_item_id == item["id"])).all()
    assert {m.supplier_id for m in stored} == {sysco, costco}


@pytest.mark.parametrize(("mappings", "says"), [
    (lambda s, c: [{"supplier_id": s, "supplier_sku": "A"},
                   {"supplier_id": c, "supplier_sku": "B"}], "exactly one must be preferred"),
    (lambda s, c: [{"supplier_id": s, "supplier_sku": "A", "preferred": True},
                   {"supplier_id": c, "supplier_sku": "B", "preferred": True}],
     "exactly one must be preferred (2 are)"),
    (lambda s, c: [{"supplier_id": str(uuid.uuid4()), "supplier_sku": "A",
                    "preferred": True}], "no supplier"),
    (lambda s, c: [{"supplier_id": s, "supplier_sku": "", "preferred": True}],
     "supplier_sku"),
    (lambda s, c: [{"supplier_id": s, "supplier_sku": "A", "preferred": True},
                   {"supplier_id": s, "supplier_sku": "B"}], "each supplier at most once"),
    (lambda s, c: [], "mappings"),
])
def test_a_bad_catalog_item_is_422_and_writes_nothing(client: TestClient, mappings: Any,
                                                      says: str) -> None:
    sysco, costco = make_supplier("sysco"), make_supplier("costco")
    response = client.post("/v1/catalog-items", json={
        "name": "Flour", "unit": "bag", "mappings": mappings(sysco, costco)})
    assert response.status_code == 422, response.text
    assert says in response.json()["error"]["message"]
    assert rows()["catalog_items"] == rows()["supplier_mappings"] == 0


# -- purchase orders -------------------------------------------------------------------------
def test_eight_lines_of_one_supplier_are_one_dispatch_and_one_job(client: TestClient) -> None:
    # Given eight items Sysco delivers and one Costco delivers
    sysco, costco = make_supplier("sysco"), make_supplier("costco")
    sysco_items = [make_item(f"Item {n}", mappings=[(sysco, f"SKU{n}", True)])
                   for n in range(8)]
    towels = make_item("Paper towels", mappings=[(costco, "C-1", True), (sysco, "S-1", False)])

    # When a restaurant orders all nine
    response = client.post("/v1/purchase-orders", json=order_body(
        *[(item, 2) for item in sysco_items], (towels, 1.5)))

    # Then the order is answered with one pending dispatch per supplier and its nine lines
    assert response.status_code == 201, response.text
    order = response.json()
    assert order["status"] == "pending"
    assert {(d["supplier_id"], d["supplier_type"], d["status"], d["attempt"], d["is_reroute"])
            for d in order["dispatches"]} == {(sysco, "sysco", "pending", 0, False),
                                              (costco, "costco", "pending", 0, False)}
    assert len(order["lines"]) == 9
    assert {line["quantity"] for line in order["lines"]} == {"2", "1.5"}
    # And each dispatch has exactly one job, at once: Sysco's carries the eight lines
    jobs = dispatch_jobs()
    assert len(jobs) == 2
    by_type = {job.payload["supplierType"]: SupplierDispatchJob.model_validate(job.payload)
               for job in jobs}
    sysco_dispatch = next(d["id"] for d in order["dispatches"] if d["supplier_id"] == sysco)
    assert str(by_type["sysco"].dispatch_id) == sysco_dispatch
    assert [line.supplier_sku for line in by_type["sysco"].line_items] == [
        f"SKU{n}" for n in range(8)]
    assert len(by_type["costco"].line_items) == 1
    # And the outbox entries are relayed
    with db.session() as session:
        assert all(entry.relayed_at is not None and entry.tries == 0
                   for entry in session.exec(select(DispatchOutbox)))

    # And reading it answers the same order with its (empty) audit trail
    read = client.get(f"/v1/purchase-orders/{order['id']}")
    assert read.status_code == 200
    assert read.json() == {**order, "audit": []}


def test_an_unknown_purchase_order_is_404(client: TestClient) -> None:
    response = client.get("/v1/purchase-orders/no-such-order")
    assert response.status_code == 404
    # a sentence, not an identifier: what was looked for, and by which id
    assert response.json()["error"] == {"code": "purchase_order_not_found",
                                        "message": "no purchase order with id no-such-order"}


def _catalog() -> dict[str, str]:
    """Items of each refusal case: a good one, one with no preferred supplier, one whose
    supplier is inactive, one whose mapping makes no valid job (an empty SKU)."""
    active, inactive = make_supplier("costco"), make_supplier("costco", active=False)
    return {"good": make_item("Good", mappings=[(active, "G-1", True)]),
            "no_preferred": make_item("Orphan", mappings=[(active, "O-1", False)]),
            "inactive": make_item("Gone", mappings=[(inactive, "X-1", True)]),
            "bad_job": make_item("Blank", mappings=[(active, "", True)]),
            "unknown": str(uuid.uuid4())}


@pytest.mark.parametrize(("change", "says"), [
    (lambda items: order_body((items["unknown"], 1)), "does not exist"),
    (lambda items: order_body((items["good"], 1), (items["no_preferred"], 1)),
     "has no preferred supplier"),
    (lambda items: order_body((items["good"], 1), (items["inactive"], 1)),
     "preferred supplier is inactive"),
    (lambda items: order_body((items["bad_job"], 1)), "supplierSku"),
    (lambda items: order_body((items["good"], 0)), "quantity"),
    (lambda items: order_body((items["good"], -2)), "quantity"),
    (lambda items: order_body((items["good"], "1e400")), "quantity"),
    (lambda items: order_body(), "lines"),
    (lambda items: order_body((items["good"], 1), placed_by_email="chef"), "placed_by_email"),
    (lambda items: order_body((items["good"], 1), order_number=""), "order_number"),
    (lambda items: {**order_body((items["good"], 1)),
                    "restaurant": {"id": "bistro-7", "name": "Bistro"}}, "restaurant.id"),
    (lambda items: {**order_body((items["good"], 1)),
                    "restaurant": {"id": str(uuid.uuid4()), "name": ""}}, "restaurant.name"),
    (lambda items: order_body((items["good"], 1), priority="high"), "priority"),
])
def test_a_refused_order_is_422_and_writes_and_queues_nothing(
        client: TestClient, change: Any, says: str) -> None:
    items = _catalog()
    response = client.post("/v1/purchase-orders", json=change(items))
    assert response.status_code == 422, response.text
    assert says in response.json()["error"]["message"]
    counts = rows()
    assert counts["purchase_orders"] == counts["purchase_order_lines"] == 0
    assert counts["supplier_dispatches"] == counts["supplier_dispatch_outbox"] == 0
    assert dispatch_jobs() == []


@pytest.fixture
def token(client: TestClient, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """API_TOKEN set for the app."""
    monkeypatch.setenv("API_TOKEN", "purchasing-token")
    settings.reset_settings()
    yield "purchasing-token"
    settings.reset_settings()


@pytest.mark.parametrize(("method", "path", "body"), [
    ("post", "/v1/suppliers", {"name": "Costco", "type": "costco", "email": "a@b.test"}),
    ("get", "/v1/suppliers/{supplier}", None),
    ("post", "/v1/catalog-items", {"name": "Flour", "unit": "bag", "mappings": [
        {"supplier_id": "{supplier}", "supplier_sku": "F", "preferred": True}]}),
    ("post", "/v1/purchase-orders", "order"),
    ("get", "/v1/purchase-orders/{order}", None),
])
def test_every_route_needs_the_token_once_it_is_set(
        client: TestClient, token: str, method: str, path: str, body: Any) -> None:
    supplier = make_supplier("costco")
    item = make_item("Good", mappings=[(supplier, "G-1", True)])
    order = client.post("/v1/purchase-orders", json=order_body((item, 1)),
                        headers={"Authorization": f"Bearer {token}"}).json()["id"]
    before, jobs_before = rows(), len(dispatch_jobs())
    if body == "order":
        body = order_body((item, 1))
    elif body is not None:
        body = eval_placeholders(body, supplier=supplier)
    url = path.format(supplier=supplier, order=order)

    for headers in ({}, {"Authorization": "Bearer wrong"}):
        response = client.request(method.upper(), url, json=body, headers=headers)
        assert response.status_code == 401, response.text
    assert rows() == before and len(dispatch_jobs()) == jobs_before
    allowed = client.request(method.upper(), url, json=body,
                             headers={"Authorization": f"Bearer {token}"})
    assert allowed.status_code in (200, 201), allowed.text


def eval_placeholders(value: Any, **names: str) -> Any:
    """``value`` with ``{name}`` strings filled in, nested."""
    if isinstance(value, dict):
        return {key: eval_placeholders(item, **names) for key, item in value.items()}
    if isinstance(value, list):
        return [eval_placeholders(item, **names) for item in value]
    return value.format(**names) if isinstance(value, str) else value


def test_the_console_search_finds_a_purchase_order_with_its_jobs_and_audit(
        client: TestClient, monkeypatch: pytest.MonkeyPatch) -> None:
    from models.purchasing import EventType, append_event

    monkeypatch.setenv("ADMIN_TOKEN", "console-token")
    settings.reset_settings()
    sysco, costco = make_supplier("sysco"), make_supplier("costco")
    items = [make_item("Flour", mappings=[(sysco, "F-1", True)]),
             make_item("Towels", mappings=[(costco, "T-1", True)])]
    order = client.post("/v1/purchase-orders", json=order_body(
        *[(item, 1) for item in items])).json()
    with db.session() as session:
        append_event(session, order["id"], EventType.SUPPLIER_SUBMITTED,
                     {"attempt": 1, "reference": "PO_x.edi", "supplierType": "sysco"},
                     supplier_id=sysco)

    response = client.get("/admin/search", params={"q": order["id"]},
                          headers={"Authorization": "Bearer console-token"})

    assert response.status_code == 200, response.text
    [result] = [r for r in response.json()["results"] if r["kind"] == "purchase_order"]
    assert result["id"] == order["id"] and result["state"] == "pending"
    jobs = {job["id"]: job for job in result["jobs"]}
    assert {job.payload["dispatchId"] for job in dispatch_jobs() if job.id in jobs} == {
        d["id"] for d in order["dispatches"]}
    assert {job["queue"] for job in result["jobs"]} == {"supplier-dispatch"}
    assert [event["event"] for event in result["timeline"]] == ["placed", "SUPPLIER_SUBMITTED"]
    assert set(result["links"]["dispatch_ids"]) == {d["id"] for d in order["dispatches"]}
