"""Purchasing: suppliers, the catalog items restaurants order, purchase orders, their lines,
one dispatch per supplier per order, the order's audit trail, the suppliers' inbound
documents and the dispatch outbox (docs/suppliers.md#purchase-orders).

State changes go through one helper per table, each guarded by the condition that makes
it safe: :func:`transition_dispatch` (a conditional UPDATE on the dispatch's status),
:func:`set_line_status` (on the lines' status), :func:`roll_up_order` (recomputed from the
dispatches), :func:`append_event` (append-only; the "once" events are unique per line and
supplier). None of them commits: the caller's transaction decides what changes together.
"""

from __future__ import annotations

import dataclasses
import functools
from collections import Counter
from collections.abc import Collection, Iterable, Sequence
from datetime import datetime
from decimal import Decimal
from enum import StrEnum
from typing import Any

from sqlalchemy import (
    JSON,
    ColumnElement,
    Index,
    Numeric,
    Select,
    UniqueConstraint,
    func,
    select,
    text,
    update,
)
from sqlalchemy.dialects import postgresql, sqlite
from sqlmodel import Field, Session, SQLModel, col
from sqlmodel import select as sqlmodel_select

from models.base import UtcDateTime, id_field, new_id, table_of, timestamp_field, utcnow
from models.sealed import SealedFields
from models.supplier_jobs import SupplierDispatchJob, dispatch_dedup_id
from models.webhooks import write_event_messages

#: The supplier types herald has a transport for.
SUPPLIER_TYPES = ("sysco", "costco", "central_kitchen")


class PurchaseOrderStatus(StrEnum):
    """An order's roll-up of its dispatches."""

    PENDING = "pending"
    COMPLETED = "completed"
    PARTIAL = "partial"
    FAILED = "failed"


class DispatchStatus(StrEnum):
    """Whether a supplier has been contacted about its part of an order.

    This row, not the queue's job, is the record of it: an SFTP drop or an email cannot be
    taken back, so a worker reads it before transmitting."""

    PENDING = "pending"
    SUBMITTED = "submitted"
    CONFIRMED = "confirmed"
    FAILED = "failed"


#: Statuses of a dispatch whose supplier has the order: never transmitted again.
TRANSMITTED = frozenset({DispatchStatus.SUBMITTED, DispatchStatus.CONFIRMED})


class LineStatus(StrEnum):
    """Where one ordered line stands."""

    PENDING = "pending"
    SUBMITTED = "submitted"
    CONFIRMED = "confirmed"
    DISPATCH_FAILED = "dispatch_failed"
    #: The supplier acknowledged it as back-ordered; a reroute decides what comes next.
    BACKORDERED = "backordered"
    #: Moved to an alternate supplier's dispatch.
    REROUTED = "rerouted"
    #: Back-ordered with no usable alternate: an operator has been told.
    BACKORDER_NO_ALTERNATE = "backorder_no_alternate"


class EventType(StrEnum):
    """The order audit trail's event types."""

    SUPPLIER_SUBMITTED = "SUPPLIER_SUBMITTED"
    SUPPLIER_DISPATCH_FAILED = "SUPPLIER_DISPATCH_FAILED"
    SUPPLIER_CONFIRMED = "SUPPLIER_CONFIRMED"
    LINE_ITEM_BACKORDERED = "LINE_ITEM_BACKORDERED"
    BACKORDER_REROUTED = "BACKORDER_REROUTED"
    BACKORDER_NO_ALTERNATE = "BACKORDER_NO_ALTERNATE"


#: Events recorded at most once per (line, supplier): a second reroute or dead-end report
#: for the same back-order is refused by the database itself.
ONCE_PER_LINE = frozenset({EventType.BACKORDER_REROUTED, EventType.BACKORDER_NO_ALTERNATE})
_ONCE_WHERE = "type IN ('BACKORDER_REROUTED', 'BACKORDER_NO_ALTERNATE')"
_PENDING_WHERE = "status = 'pending'"
_UNRELAYED_WHERE = "relayed_at IS NULL"


class Supplier(SQLModel, table=True):
    """A supplier and how to reach it (``type`` picks the transport)."""

    __tablename__ = "suppliers"

    id: str = id_field()
    name: str = Field(max_length=255)
    type: str = Field(max_length=24)
    #: Where the email transports send (empty: such a dispatch fails permanently).
    email: str | None = Field(default=None, max_length=320)
    cc: list[str] = Field(default_factory=list, sa_type=JSON)
    #: Sysco's SFTP settings (host, port, username, password, directories, host_key);
    #: the password is never returned by the API, and stored encrypted
    #: (:class:`models.sealed.SealedFields`).
    sftp: dict[str, Any] | None = Field(
        default=None, sa_type=SealedFields(("password",), none_as_null=True), nullable=True)
    active: bool = Field(default=True)
    created_at: datetime = timestamp_field()
    updated_at: datetime = timestamp_field()


class CatalogItem(SQLModel, table=True):
    """Something a restaurant orders, whichever supplier delivers it."""

    __tablename__ = "catalog_items"

    id: str = id_field()
    name: str = Field(max_length=255)
    unit: str = Field(max_length=32)
    created_at: datetime = timestamp_field()


class SupplierMapping(SQLModel, table=True):
    """How one supplier knows a catalog item; the preferred mapping's supplier receives
    the item's orders, the others are alternates for a reroute."""

    __tablename__ = "supplier_mappings"
    __table_args__ = (UniqueConstraint("catalog_item_id", "supplier_id",
                                       name="uq_supplier_mappings_item_supplier"),)

    id: str = id_field()
    catalog_item_id: str = Field(foreign_key="catalog_items.id", max_length=36, index=True)
    supplier_id: str = Field(foreign_key="suppliers.id", max_length=36, index=True)
    supplier_sku: str = Field(max_length=48)
    supplier_product_code: str | None = Field(default=None, max_length=48)
    unit_size: str | None = Field(default=None, max_length=64)
    preferred: bool = Field(default=False)


class PurchaseOrder(SQLModel, table=True):
    """A restaurant's order; ``status`` is rolled up from its dispatches. A restaurant's
    order numbers are unique: placing one again finds the order instead
    (docs/suppliers.md#purchase-orders)."""

    __tablename__ = "purchase_orders"
    __table_args__ = (Index("ux_purchase_orders_restaurant_order_number", "restaurant_id",
                            "order_number", unique=True),)

    id: str = id_field()
    order_number: str = Field(max_length=64)
    restaurant_id: str = Field(max_length=64)
    restaurant_name: str = Field(max_length=255)
    restaurant_location: str | None = Field(default=None, max_length=255)
    placed_by_email: str | None = Field(default=None, max_length=320)
    delivery_notes: str | None = Field(default=None, max_length=2000)
    status: str = Field(default=PurchaseOrderStatus.PENDING.value, max_length=16)
    created_at: datetime = timestamp_field()
    updated_at: datetime = timestamp_field()


class SupplierDispatch(SQLModel, table=True):
    """One order's lines for one supplier, and whether that supplier has them."""

    __tablename__ = "supplier_dispatches"
    __table_args__ = (
        Index("ix_supplier_dispatches_pending", "created_at",
              postgresql_where=text(_PENDING_WHERE), sqlite_where=text(_PENDING_WHERE)),
    )

    id: str = id_field()
    order_id: str = Field(foreign_key="purchase_orders.id", max_length=36, index=True)
    supplier_id: str = Field(foreign_key="suppliers.id", max_length=36, index=True)
    supplier_type: str = Field(max_length=24)
    status: str = Field(default=DispatchStatus.PENDING.value, max_length=16)
    #: What the supplier knows it by: the EDI file name, the email's Message-ID.
    reference: str | None = Field(default=None, max_length=255, index=True)
    #: The attempt that submitted it, or the last one that failed.
    attempt: int = Field(default=0)
    failure_reason: str | None = Field(default=None, max_length=500)
    submitted_at: datetime | None = Field(default=None, sa_type=UtcDateTime, nullable=True)
    confirmed_at: datetime | None = Field(default=None, sa_type=UtcDateTime, nullable=True)
    is_reroute: bool = Field(default=False)
    reroute_of_dispatch_id: str | None = Field(default=None, foreign_key="supplier_dispatches.id",
                                               max_length=36, nullable=True)
    created_at: datetime = timestamp_field()
    updated_at: datetime = timestamp_field()


class PurchaseOrderLine(SQLModel, table=True):
    """One ordered catalog item; ``dispatch_id`` is the dispatch it travels in now."""

    __tablename__ = "purchase_order_lines"

    id: str = id_field()
    order_id: str = Field(foreign_key="purchase_orders.id", max_length=36, index=True)
    catalog_item_id: str = Field(foreign_key="catalog_items.id", max_length=36)
    quantity: Decimal = Field(sa_type=Numeric(18, 4))
    supplier_id: str = Field(foreign_key="suppliers.id", max_length=36)
    dispatch_id: str | None = Field(default=None, foreign_key="supplier_dispatches.id",
                                    max_length=36, nullable=True)
    status: str = Field(default=LineStatus.PENDING.value, max_length=32)
    created_at: datetime = timestamp_field()
    updated_at: datetime = timestamp_field()


class DispatchLine(SQLModel, table=True):
    """A line was part of a dispatch (an original one, then perhaps a reroute's)."""

    __tablename__ = "supplier_dispatch_lines"

    dispatch_id: str = Field(foreign_key="supplier_dispatches.id", primary_key=True,
                             max_length=36)
    line_id: str = Field(foreign_key="purchase_order_lines.id", primary_key=True,
                         max_length=36, index=True)


class PurchaseOrderEvent(SQLModel, table=True):
    """One entry of an order's append-only audit trail."""

    __tablename__ = "purchase_order_events"
    __table_args__ = (
        Index("ux_purchase_order_events_once", "type", "line_item_id", "supplier_id",
              unique=True, postgresql_where=text(_ONCE_WHERE), sqlite_where=text(_ONCE_WHERE)),
    )

    id: str = id_field()
    order_id: str = Field(foreign_key="purchase_orders.id", max_length=36, index=True)
    type: str = Field(max_length=48)
    line_item_id: str | None = Field(default=None, max_length=36)
    supplier_id: str | None = Field(default=None, max_length=36)
    #: Who caused it: ``system``, ``admin`` or ``supplier:<id>``.
    actor_id: str = Field(default="system", max_length=64)
    payload: dict[str, Any] = Field(default_factory=dict, sa_type=JSON)
    at: datetime = timestamp_field()


class VendorDocument(SQLModel, table=True):
    """An inbound document (an 855 or a 997) read from a supplier, once per reference."""

    __tablename__ = "vendor_documents"
    __table_args__ = (UniqueConstraint("supplier_id", "reference",
                                       name="uq_vendor_documents_reference"),)

    id: str = id_field()
    supplier_id: str = Field(foreign_key="suppliers.id", max_length=36)
    #: The file's name on the supplier's server.
    reference: str = Field(max_length=255)
    #: ``855``, ``997`` or several, comma-separated.
    kind: str = Field(max_length=32)
    #: What processing it did (orders, lines back-ordered, reroutes enqueued).
    result: dict[str, Any] = Field(default_factory=dict, sa_type=JSON)
    received_at: datetime = timestamp_field()


class DispatchOutbox(SQLModel, table=True):
    """A dispatch job to enqueue, committed with the rows it is about; the relay adds the
    job and stamps ``relayed_at`` (docs/suppliers.md#the-outbox)."""

    __tablename__ = "supplier_dispatch_outbox"
    __table_args__ = (
        Index("ix_supplier_dispatch_outbox_unrelayed", "created_at",
              postgresql_where=text(_UNRELAYED_WHERE), sqlite_where=text(_UNRELAYED_WHERE)),
    )

    id: str = id_field()
    dispatch_id: str = Field(foreign_key="supplier_dispatches.id", max_length=36, index=True)
    #: The job's payload (the supplier-dispatch job's fields).
    payload: dict[str, Any] = Field(sa_type=JSON)
    dedup_id: str = Field(max_length=255)
    created_at: datetime = timestamp_field()
    relayed_at: datetime | None = Field(default=None, sa_type=UtcDateTime, nullable=True)
    #: The relay's failed tries and the last one's error.
    tries: int = Field(default=0)
    last_error: str | None = Field(default=None, max_length=500)


_dispatches = table_of(SupplierDispatch)
_lines = table_of(PurchaseOrderLine)
_orders = table_of(PurchaseOrder)
_events = table_of(PurchaseOrderEvent)
_links = table_of(DispatchLine)

#: Columns only :func:`transition_dispatch` writes through its own arguments.
_DISPATCH_GUARDED = frozenset({"status"})
#: The webhook event of each status an order's roll-up moves it to that has one, and of
#: each status a line enters that has one (docs/api.md#webhooks).
ORDER_EVENTS = {PurchaseOrderStatus.COMPLETED: "purchase_order.completed",
                PurchaseOrderStatus.PARTIAL: "purchase_order.partial",
                PurchaseOrderStatus.FAILED: "purchase_order.failed"}
LINE_EVENTS = {LineStatus.BACKORDERED: "line_item.backordered",
               LineStatus.REROUTED: "line_item.rerouted"}


# --------------------------------------------------------------------- transitions


def transition_dispatch(session: Session, dispatch_id: str, *, to: DispatchStatus,
                        expect: Collection[DispatchStatus], **columns: Any) -> bool:
    """Move a dispatch to ``to`` — the one write of ``supplier_dispatches.status`` —
    only while its status is one of ``expect`` (the conditional UPDATE checks it).
    ``columns`` are written with it (reference, attempt, failure_reason, submitted_at…).
    Does not commit; returns whether the row changed."""
    bad = set(columns) & _DISPATCH_GUARDED
    if bad or not set(columns) <= {c.key for c in _dispatches.columns}:
        raise ValueError(f"transition_dispatch cannot write {sorted(columns)}")
    if columns.get("failure_reason"):
        columns["failure_reason"] = str(columns["failure_reason"])[:500]
    result = session.exec(
        update(_dispatches)
        .where(_dispatches.c.id == dispatch_id,
               _dispatches.c.status.in_([state.value for state in expect]))
        .values(status=to.value, updated_at=utcnow(), **columns))
    return bool(result.rowcount)


def set_line_status(session: Session, line_ids: Iterable[str] | Select[tuple[str]], *,
                    to: LineStatus, expect: Collection[LineStatus] | None = None,
                    **columns: Any) -> int:
    """Set the lines' status to ``to`` (only those whose status is one of ``expect``,
    when given); ``columns`` (``dispatch_id``, ``supplier_id``) are written with it.
    ``line_ids`` are ids, or a query of them (:func:`dispatch_line_ids`) that the UPDATE
    runs as its subquery. Entering ``backordered`` or ``rerouted`` writes each changed
    line's webhook messages (:data:`LINE_EVENTS`) in the caller's transaction, handed to
    the relay after it commits. Does not commit; returns how many lines changed."""
    if not set(columns) <= {"dispatch_id", "supplier_id"}:
        raise ValueError(f"set_line_status cannot write {sorted(columns)}")
    if isinstance(line_ids, Select):
        condition: ColumnElement[bool] = _lines.c.id.in_(line_ids)
    else:
        ids = list(line_ids)
        if not ids:
            return 0
        condition = _lines.c.id.in_(ids)
    if expect is not None:
        condition = condition & _lines.c.status.in_([state.value for state in expect])
    statement = (update(_lines).where(condition)
                 .values(status=to.value, updated_at=utcnow(), **columns))
    event = LINE_EVENTS.get(to)
    if event is None:
        return int(session.exec(statement).rowcount)
    changed = session.execute(statement.returning(_lines.c.id)).scalars().all()
    for line_id in changed:
        write_event_messages(session, event, functools.partial(_line_data, session, line_id))
    return len(changed)


def _line_data(session: Session, line_id: str) -> dict[str, Any]:
    line = session.get(PurchaseOrderLine, line_id, populate_existing=True)
    assert line is not None  # it was just updated
    return line_view(line)


def order_status_of(statuses: Sequence[str]) -> PurchaseOrderStatus:
    """An order's roll-up of its dispatches' statuses: pending while one is pending,
    completed when every one reached its supplier, failed when none did, else partial."""
    if not statuses or DispatchStatus.PENDING.value in statuses:
        return PurchaseOrderStatus.PENDING
    transmitted = sum(status in TRANSMITTED for status in statuses)
    if transmitted == len(statuses):
        return PurchaseOrderStatus.COMPLETED
    return PurchaseOrderStatus.FAILED if transmitted == 0 else PurchaseOrderStatus.PARTIAL


def roll_up_order(session: Session, order_id: str) -> PurchaseOrderStatus:
    """Recompute the order's status from its dispatches (:func:`order_status_of`) and
    write it when it changed; a change to ``completed``, ``partial`` or ``failed``
    writes its webhook messages (:data:`ORDER_EVENTS`) in the caller's transaction,
    handed to the relay after it commits. Does not commit.

    Exact under concurrent roll-ups of one order: the order row is locked first (``FOR
    NO KEY UPDATE``, which the audit events' foreign keys do not conflict with), so the
    roll-ups of one order run one after another, and each reads the dispatches after the
    previous one committed (a new snapshot per statement): the last to run sees every
    dispatch committed before it began, never writing back a status read earlier."""
    session.execute(select(_orders.c.id).where(_orders.c.id == order_id)
                    .with_for_update(key_share=True))
    statuses = [row[0] for row in session.execute(
        select(_dispatches.c.status).where(_dispatches.c.order_id == order_id))]
    status = order_status_of(statuses)
    result = session.exec(update(_orders)
                          .where(_orders.c.id == order_id, _orders.c.status != status.value)
                          .values(status=status.value, updated_at=utcnow()))
    event = ORDER_EVENTS.get(status)
    if event is not None and result.rowcount == 1:
        write_event_messages(session, event, lambda: _order_data(session, order_id))
    return status


def _order_data(session: Session, order_id: str) -> dict[str, Any]:
    order = session.get(PurchaseOrder, order_id, populate_existing=True)
    assert order is not None  # it was just updated
    # without the audit trail: a concurrent transaction may still append to it (a
    # message is the order as this transaction changed it)
    return purchase_order_view(session, order)


def append_event(session: Session, order_id: str, type: EventType, payload: dict[str, Any],
                 *, line_item_id: str | None = None, supplier_id: str | None = None,
                 actor_id: str = "system") -> bool:
    """Append an event to the order's audit trail. An event of :data:`ONCE_PER_LINE`
    that exists already for the same line and supplier is not added again (the
    database's unique index decides, so two concurrent writers add one). Does not
    commit; returns whether the event was added."""
    values = {"id": new_id(), "order_id": order_id, "type": type.value,
              "line_item_id": line_item_id, "supplier_id": supplier_id,
              "actor_id": actor_id, "payload": payload, "at": utcnow()}
    dialect = session.get_bind().dialect.name
    insert = (postgresql.insert if dialect == "postgresql" else sqlite.insert)(_events)
    statement = insert.values(**values)
    if type in ONCE_PER_LINE:
        statement = statement.on_conflict_do_nothing()
    return session.execute(statement.returning(_events.c.id)).first() is not None


def has_event(session: Session, type: EventType, *, line_item_id: str,
              supplier_id: str | None = None) -> bool:
    """Whether the audit trail has an event of ``type`` for the line (and supplier)."""
    condition = (_events.c.type == type.value) & (_events.c.line_item_id == line_item_id)
    if supplier_id is not None:
        condition = condition & (_events.c.supplier_id == supplier_id)
    count: int = session.execute(select(func.count()).where(condition)).scalar_one()
    return count > 0


def link_lines(session: Session, dispatch_id: str, line_ids: Iterable[str]) -> None:
    """Record that the lines are part of the dispatch. Does not commit."""
    rows = [{"dispatch_id": dispatch_id, "line_id": line_id} for line_id in line_ids]
    if rows:
        session.execute(_links.insert(), rows)


def dispatch_line_ids(dispatch_id: str) -> Select[tuple[str]]:
    """The ids of the lines a dispatch carries, as a query to run inside a statement
    (:func:`set_line_status`), rather than read first in a round trip of its own."""
    return select(_links.c.line_id).where(_links.c.dispatch_id == dispatch_id)


def dispatch_lines(session: Session, dispatch_id: str) -> list[PurchaseOrderLine]:
    """The lines a dispatch carries, in the order they were placed."""
    return list(session.exec(
        sqlmodel_select(PurchaseOrderLine)
        .join(DispatchLine, col(DispatchLine.line_id) == col(PurchaseOrderLine.id))
        .where(col(DispatchLine.dispatch_id) == dispatch_id)
        .order_by(col(PurchaseOrderLine.created_at), col(PurchaseOrderLine.id))))


def order_outbox(session: Session, order_id: str) -> list[DispatchOutbox]:
    """The outbox entries of an order's dispatches (relayed or not), in one statement."""
    return list(session.exec(
        sqlmodel_select(DispatchOutbox)
        .join(SupplierDispatch, col(SupplierDispatch.id) == col(DispatchOutbox.dispatch_id))
        .where(col(SupplierDispatch.order_id) == order_id)))


def add_outbox(session: Session, dispatch_id: str, payload: dict[str, Any],
               dedup_id: str) -> DispatchOutbox:
    """Add the dispatch's job to the outbox, in the caller's transaction: it is relayed
    to the queue if and only if that transaction commits. Does not commit."""
    entry = DispatchOutbox(dispatch_id=dispatch_id, payload=payload, dedup_id=dedup_id)
    session.add(entry)
    return entry


# --------------------------------------------------------------------- as the API shows it


def dispatch_view(dispatch: SupplierDispatch) -> dict[str, Any]:
    """A dispatch as its order's JSON shows it."""
    return {"id": dispatch.id, "supplier_id": dispatch.supplier_id,
            "supplier_type": dispatch.supplier_type, "status": dispatch.status,
            "reference": dispatch.reference, "attempt": dispatch.attempt,
            "failure_reason": dispatch.failure_reason, "is_reroute": dispatch.is_reroute,
            "reroute_of_dispatch_id": dispatch.reroute_of_dispatch_id,
            "submitted_at": dispatch.submitted_at and dispatch.submitted_at.isoformat()}


def line_view(line: PurchaseOrderLine) -> dict[str, Any]:
    """A line as its order's JSON shows it."""
    return {"id": line.id, "order_id": line.order_id, "catalog_item_id": line.catalog_item_id,
            "quantity": f"{line.quantity.normalize():f}", "status": line.status,
            "supplier_id": line.supplier_id, "dispatch_id": line.dispatch_id}


def purchase_order_view(session: Session, order: PurchaseOrder, *,
                        audit: bool = False) -> dict[str, Any]:
    """An order with its dispatches and lines (and its audit trail, oldest first, when
    ``audit``)."""
    dispatches = session.exec(sqlmodel_select(SupplierDispatch)
                              .where(SupplierDispatch.order_id == order.id)
                              .order_by(col(SupplierDispatch.created_at),
                                        col(SupplierDispatch.id))).all()
    lines = session.exec(sqlmodel_select(PurchaseOrderLine)
                         .where(PurchaseOrderLine.order_id == order.id)
                         .order_by(col(PurchaseOrderLine.created_at),
                                   col(PurchaseOrderLine.id))).all()
    view = {"id": order.id, "order_number": order.order_number,
            "restaurant": {"id": order.restaurant_id, "name": order.restaurant_name,
                           "location": order.restaurant_location},
            "placed_by_email": order.placed_by_email, "delivery_notes": order.delivery_notes,
            "status": order.status, "dispatches": [dispatch_view(d) for d in dispatches],
            "lines": [line_view(line) for line in lines],
            "created_at": order.created_at.isoformat(),
            "updated_at": order.updated_at.isoformat()}
    if audit:
        events = session.exec(sqlmodel_select(PurchaseOrderEvent)
                              .where(PurchaseOrderEvent.order_id == order.id)
                              .order_by(col(PurchaseOrderEvent.at),
                                        col(PurchaseOrderEvent.id))).all()
        view["audit"] = [{"type": event.type, "payload": event.payload,
                          "at": event.at.isoformat()} for event in events]
    return view


# --------------------------------------------------------------------- placement


class PlacementError(ValueError):
    """An order that cannot be placed as asked (an unknown item, an item with no
    preferred supplier, an inactive supplier); nothing was written."""


@dataclasses.dataclass(frozen=True)
class OrderedLine:
    """One line of a new order."""

    catalog_item_id: str
    quantity: Decimal


@dataclasses.dataclass(frozen=True)
class NewPurchaseOrder:
    """What a restaurant asks for."""

    order_number: str
    restaurant_id: str
    restaurant_name: str
    restaurant_location: str | None
    placed_by_email: str | None
    delivery_notes: str | None
    lines: tuple[OrderedLine, ...]


class OrderNumberTaken(ValueError):
    """The restaurant already has an order of this number, with other lines; nothing was
    written."""


def find_placed_order(session: Session, new: NewPurchaseOrder) -> str | None:
    """The id of the restaurant's order numbered as ``new`` when it has the same lines (the
    same items in the same quantities, in any order): ``new`` is a repeat of it. None when
    the restaurant has no order of that number; :class:`OrderNumberTaken` when it has one
    with other lines."""
    order_id = session.exec(
        sqlmodel_select(PurchaseOrder.id)
        .where(col(PurchaseOrder.restaurant_id) == new.restaurant_id,
               col(PurchaseOrder.order_number) == new.order_number)).first()
    if order_id is None:
        return None
    placed = session.exec(
        sqlmodel_select(col(PurchaseOrderLine.catalog_item_id), col(PurchaseOrderLine.quantity))
        .where(col(PurchaseOrderLine.order_id) == order_id)).all()
    if _line_counts(placed) != _line_counts(
            (line.catalog_item_id, line.quantity) for line in new.lines):
        raise OrderNumberTaken(f"restaurant {new.restaurant_id} already has order "
                               f"{new.order_number!r} ({order_id}), with other lines")
    return order_id


def _line_counts(lines: Iterable[tuple[str, Decimal]]) -> Counter[tuple[str, Decimal]]:
    # normalised: 2, 2.0 and 2.0000 are the same quantity
    return Counter((item_id, Decimal(quantity).normalize()) for item_id, quantity in lines)


def place_purchase_order(session: Session, new: NewPurchaseOrder) -> PurchaseOrder:
    """Write the order, its lines and **one dispatch per supplier** (each line goes to its
    item's preferred supplier), and each dispatch's job to the outbox — all in the
    caller's transaction, so the jobs exist if and only if the order does.

    Every job payload is validated (:class:`~models.supplier_jobs.SupplierDispatchJob`)
    before the flush; :class:`PlacementError` or a pydantic ``ValidationError`` leaves
    the session to be rolled back. The jobs are built from the rows as written, in memory
    (the job :func:`dispatch_job` would read back). Does not commit.
    """
    preferred = _preferred_mappings(session, [line.catalog_item_id for line in new.lines])
    order = PurchaseOrder(order_number=new.order_number, restaurant_id=new.restaurant_id,
                          restaurant_name=new.restaurant_name,
                          restaurant_location=new.restaurant_location,
                          placed_by_email=new.placed_by_email, delivery_notes=new.delivery_notes)
    session.add(order)
    by_supplier: dict[str, list[PurchaseOrderLine]] = {}
    for ordered in new.lines:
        supplier = preferred[ordered.catalog_item_id][1]
        line = PurchaseOrderLine(order_id=order.id, catalog_item_id=ordered.catalog_item_id,
                                 quantity=ordered.quantity, supplier_id=supplier.id)
        by_supplier.setdefault(supplier.id, []).append(line)
    dispatches = []
    for supplier_id, lines in by_supplier.items():
        supplier = next(s for _, s, _ in preferred.values() if s.id == supplier_id)
        dispatch = SupplierDispatch(order_id=order.id, supplier_id=supplier.id,
                                    supplier_type=supplier.type)
        for line in lines:
            line.dispatch_id = dispatch.id
        dispatches.append((dispatch, lines))
    session.add_all([dispatch for dispatch, _ in dispatches])
    session.flush()
    session.add_all([line for _, lines in dispatches for line in lines])
    session.flush()
    for dispatch, lines in dispatches:
        link_lines(session, dispatch.id, [line.id for line in lines])
    # the entries after every link: each link's INSERT flushes what is pending, and added
    # here they go in with one INSERT at the end rather than one apiece
    for dispatch, lines in dispatches:
        job = _job_of(order, dispatch, [
            (line, preferred[line.catalog_item_id][2], preferred[line.catalog_item_id][0])
            for line in sorted(lines, key=lambda line: (line.created_at, line.id))])
        add_outbox(session, dispatch.id, job.model_dump(mode="json"),
                   dispatch_dedup_id(order.id, dispatch.supplier_type))
    session.flush()
    return order


def _preferred_mappings(session: Session, item_ids: Sequence[str],
                        ) -> dict[str, tuple[SupplierMapping, Supplier, CatalogItem]]:
    """Each item's preferred mapping, its supplier and the item; PlacementError naming what
    is missing."""
    rows = session.exec(
        sqlmodel_select(SupplierMapping, Supplier)
        .join(Supplier, col(Supplier.id) == col(SupplierMapping.supplier_id))
        .where(col(SupplierMapping.catalog_item_id).in_(set(item_ids)),
               col(SupplierMapping.preferred).is_(True))).all()
    found = {mapping.catalog_item_id: (mapping, supplier) for mapping, supplier in rows}
    known = {item.id: item for item in session.exec(
        sqlmodel_select(CatalogItem).where(col(CatalogItem.id).in_(set(item_ids))))}
    problems = []
    for item_id in dict.fromkeys(item_ids):
        if item_id not in known:
            problems.append(f"catalog item {item_id} does not exist")
        elif item_id not in found:
            problems.append(f"catalog item {item_id} has no preferred supplier")
        elif not found[item_id][1].active:
            problems.append(f"catalog item {item_id}'s preferred supplier is inactive")
    if problems:
        raise PlacementError("; ".join(problems))
    return {item_id: (*found[item_id], known[item_id]) for item_id in found}


def dispatch_job(session: Session, dispatch_id: str) -> SupplierDispatchJob:
    """The ``supplier-dispatch`` job of a dispatch, read from its rows: the order, the
    supplier, and every line it carries as that supplier knows the item. Raises
    LookupError when the dispatch does not exist, and pydantic's ValidationError when
    the rows do not make a valid job."""
    dispatch = session.get(SupplierDispatch, dispatch_id)
    if dispatch is None:
        raise LookupError(f"supplier dispatch {dispatch_id} does not exist")
    order = session.get(PurchaseOrder, dispatch.order_id)
    assert order is not None  # a foreign key
    rows = session.exec(
        sqlmodel_select(PurchaseOrderLine, CatalogItem, SupplierMapping)
        .join(DispatchLine, col(DispatchLine.line_id) == col(PurchaseOrderLine.id))
        .join(CatalogItem, col(CatalogItem.id) == col(PurchaseOrderLine.catalog_item_id))
        .outerjoin(SupplierMapping,
                   (col(SupplierMapping.catalog_item_id) == col(CatalogItem.id))
                   & (col(SupplierMapping.supplier_id) == dispatch.supplier_id))
        .where(col(DispatchLine.dispatch_id) == dispatch_id)
        .order_by(col(PurchaseOrderLine.created_at), col(PurchaseOrderLine.id))).all()
    return _job_of(order, dispatch, rows)


def _job_of(order: PurchaseOrder, dispatch: SupplierDispatch,
            rows: Iterable[tuple[PurchaseOrderLine, CatalogItem, SupplierMapping | None]],
            ) -> SupplierDispatchJob:
    """The job of ``dispatch`` of ``order`` carrying ``rows`` (each line, its item and the
    dispatch's supplier's mapping of it), in that order; validated."""
    items = [{"lineItemId": line.id, "catalogItemId": item.id, "name": item.name,
              "supplierSku": mapping.supplier_sku if mapping else "",
              "supplierProductCode": mapping.supplier_product_code if mapping else None,
              "quantity": float(line.quantity), "unit": item.unit,
              "unitSize": mapping.unit_size if mapping else None}
             for line, item, mapping in rows]
    return SupplierDispatchJob.model_validate({
        "orderId": order.id, "dispatchId": dispatch.id, "supplierId": dispatch.supplier_id,
        "supplierType": dispatch.supplier_type, "restaurantId": order.restaurant_id,
        "restaurantName": order.restaurant_name,
        "restaurantLocation": order.restaurant_location, "orderNumber": order.order_number,
        "placedByEmail": order.placed_by_email, "deliveryNotes": order.delivery_notes,
        "lineItems": items})


# --------------------------------------------------------------------- dispatch


def dispatch_with_parties(session: Session, dispatch_id: str
                          ) -> tuple[SupplierDispatch, PurchaseOrder, Supplier | None] | None:
    """A dispatch with its order and its supplier (None when the supplier row is gone), in
    one statement; None when there is no such dispatch."""
    row = session.exec(
        sqlmodel_select(SupplierDispatch, PurchaseOrder, Supplier)
        .join(PurchaseOrder, col(PurchaseOrder.id) == col(SupplierDispatch.order_id))
        .outerjoin(Supplier, col(Supplier.id) == col(SupplierDispatch.supplier_id))
        .where(col(SupplierDispatch.id) == dispatch_id)).first()
    return None if row is None else (row[0], row[1], row[2])


def record_host_key(session: Session, supplier_id: str, key_line: str) -> bool:
    """Record ``key_line`` as the supplier's SFTP host key when it has none yet, so the
    next session requires it (a key recorded meanwhile is kept). Does not commit;
    returns whether it was recorded: False (a key recorded meanwhile, the supplier or its
    SFTP settings gone) means the session that saw ``key_line`` must not go on."""
    supplier = session.get(Supplier, supplier_id, with_for_update=True)
    if supplier is None or not isinstance(supplier.sftp, dict) or supplier.sftp.get("host_key"):
        return False
    supplier.sftp = {**supplier.sftp, "host_key": key_line}
    supplier.updated_at = utcnow()
    session.add(supplier)
    return True
