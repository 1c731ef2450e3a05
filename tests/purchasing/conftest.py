"""Fixtures of the purchasing tests: herald on PostgreSQL + Redis with empty purchasing
tables, a real SMTP relay (aiosmtpd) and a real SFTP server for the suppliers, and
factories for suppliers, catalog items and placed orders."""

from __future__ import annotations

import dataclasses
import uuid
from collections.abc import Iterator
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
from aiosmtpd.controller import Controller
from sqlalchemy import text

from actors.queues import registry
from herald import db
from herald.demo.sftp_server import SftpTestServer, start_sftp_server
from herald.queue import SECOND
from tests.support.providers.smtp_relay import Relay, start_relay
from tests.support.queue_app import close_queue_app, follow_settings
from tests.support.reset import reset_herald

#: The queues the purchasing tests run.
PURCHASING_QUEUES = ("supplier-dispatch", "backorder-reroute")
_TABLES = ("supplier_dispatch_outbox, supplier_dispatch_lines, purchase_order_events, "
           "vendor_documents, purchase_order_lines, supplier_dispatches, purchase_orders, "
           "supplier_mappings, catalog_items, suppliers, audit_log")
SENDER = "orders@herald.test"


@dataclasses.dataclass
class Mailbox:
    """The SMTP relay suppliers' emails go through, and what it received."""

    relay: Relay
    controller: Controller

    @property
    def messages(self) -> list[Any]:
        return self.relay.received


@pytest.fixture
def mailbox() -> Iterator[Mailbox]:
    """A real SMTP relay (aiosmtpd, no TLS) on a free port; not yet in the settings
    unless :func:`purchasing` is used, which points SMTP_* at it."""
    relay, controller = start_relay()
    yield Mailbox(relay, controller)
    controller.stop()


@pytest.fixture
def sftp(tmp_path: Path) -> Iterator[SftpTestServer]:
    """A real SFTP server confined to a temporary directory (the Sysco side)."""
    with start_sftp_server(tmp_path / "sftp") as server:
        yield server


@pytest.fixture
def purchasing(monkeypatch: pytest.MonkeyPatch, migrated_database: str, redis_url: str,
               mailbox: Mailbox, tmp_path: Path) -> Iterator[str]:
    """herald over PostgreSQL and the test Redis (a queue prefix of its own) with empty
    purchasing tables, supplier emails through :func:`mailbox`, PDFs stored under the
    test's directory; dispatch retries wait 100 ms, 200 ms. Yields the database URL."""
    for name, value in {"DATABASE_URL": migrated_database, "REDIS_URL": redis_url,
                        "BROKER": "redis", "QUEUE_PREFIX": f"p{uuid.uuid4().hex[:10]}",
                        "EMAIL_PROVIDER": "mock", "SMS_PROVIDER": "mock",
                        "SMTP_HOST": "127.0.0.1", "SMTP_PORT": str(mailbox.controller.port),
                        "SMTP_STARTTLS": "false", "EMAIL_FROM": SENDER,
                        "SUPPLIER_PDF_DIR": str(tmp_path / "pdfs"),
                        "DISPATCH_BACKOFF_MS": "100", "ADMIN_ALERT_EMAIL": "",
                        "LOG_LEVEL": "WARNING"}.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("HERALD_OPEN_API", "1")  # TestClient's client is not on loopback
    reset_herald()
    follow_settings()
    import actors.queues  # noqa: F401  (herald's queue table)

    with db.get_engine().begin() as connection:
        connection.execute(text(f"TRUNCATE {_TABLES} CASCADE"))
    with registry.redeclared(("backorder-reroute",), backoff_base=SECOND / 10):
        yield migrated_database
    reset_herald()
    close_queue_app()


# --------------------------------------------------------------------- factories


def make_supplier(type: str, *, name: str | None = None, email: str | None = None,
                  cc: list[str] | None = None, sftp: SftpTestServer | None = None,
                  active: bool = True, **sftp_overrides: Any) -> str:
    """A supplier row; returns its id. Email suppliers default to an address; a sysco
    supplier given ``sftp`` reaches that server."""
    from models.purchasing import Supplier

    settings = None
    if sftp is not None:
        settings = {**dataclasses.asdict(sftp.settings()), **sftp_overrides}
    if email is None and type != "sysco":
        email = f"{type.replace('_', '-')}@suppliers.test"
    supplier = Supplier(name=name or f"{type} supplier", type=type, email=email or None,
                        cc=cc or [], sftp=settings, active=active)
    with db.session() as session:
        session.add(supplier)
        supplier_id = supplier.id
    return supplier_id


def make_item(name: str, unit: str = "CA", *,
              mappings: list[tuple[str, str, bool]]) -> str:
    """A catalog item with ``(supplier_id, supplier_sku, preferred)`` mappings; returns
    its id."""
    from models.purchasing import CatalogItem, SupplierMapping

    item = CatalogItem(name=name, unit=unit)
    with db.session() as session:
        session.add(item)
        session.flush()
        for supplier_id, sku, preferred in mappings:
            session.add(SupplierMapping(catalog_item_id=item.id, supplier_id=supplier_id,
                                        supplier_sku=sku, unit_size="6/#10",
                                        preferred=preferred))
        item_id = item.id
    return item_id


@dataclasses.dataclass(frozen=True)
class Placed:
    """An order placed by :func:`place_order`: its id and its dispatches by supplier."""

    order_id: str
    dispatch_by_supplier: dict[str, str]
    line_ids: list[str]


def place_order(lines: list[tuple[str, float]], *, order_number: str = "PO-1001",
                restaurant_name: str = "Bistro Nord", **fields: Any) -> Placed:
    """Place an order of ``(catalog_item_id, quantity)`` lines as the API does (rows and
    outbox entries in one transaction), without relaying anything."""
    from sqlmodel import select

    from models.purchasing import (
        NewPurchaseOrder,
        OrderedLine,
        PurchaseOrderLine,
        SupplierDispatch,
        place_purchase_order,
    )

    new = NewPurchaseOrder(
        order_number=order_number, restaurant_id=str(uuid.uuid4()),
        restaurant_name=restaurant_name,
        restaurant_location=fields.get("restaurant_location", "12 Quai Nord, Lyon"),
        placed_by_email=fields.get("placed_by_email", "chef@bistro.test"),
        delivery_notes=fields.get("delivery_notes"),
        lines=tuple(OrderedLine(item, Decimal(str(quantity))) for item, quantity in lines))
    with db.session() as session:
        order = place_purchase_order(session, new)
        order_id = order.id
        dispatches = {d.supplier_id: d.id for d in session.exec(
            select(SupplierDispatch).where(SupplierDispatch.order_id == order_id))}
        line_ids = [line.id for line in session.exec(
            select(PurchaseOrderLine).where(PurchaseOrderLine.order_id == order_id)
            .order_by(PurchaseOrderLine.created_at))]
    return Placed(order_id, dispatches, line_ids)
