"""Placing a purchase order: one dispatch per supplier, its job in the outbox with the
order's rows, and the audit trail's once-per-line events."""

from __future__ import annotations

import uuid

import pytest
from sqlmodel import select

from herald import db
from models.purchasing import (
    DispatchOutbox,
    EventType,
    NewPurchaseOrder,
    OrderedLine,
    PlacementError,
    PurchaseOrder,
    append_event,
    order_status_of,
    place_purchase_order,
)
from models.supplier_jobs import SupplierDispatchJob
from tests.purchasing.conftest import make_item, make_supplier, place_order


def test_eight_lines_for_one_supplier_are_one_dispatch_and_one_outbox_job(
        purchasing: str) -> None:
    # Given eight items Sysco delivers and one Costco delivers
    sysco = make_supplier("sysco")
    costco = make_supplier("costco")
    sysco_items = [make_item(f"Item {n}", mappings=[(sysco, f"SKU{n}", True)])
                   for n in range(8)]
    costco_item = make_item("Paper towels", mappings=[(costco, "C-1", True),
                                                      (sysco, "S-PT", False)])

    # When an order of all nine is placed
    placed = place_order([(item, 2) for item in sysco_items] + [(costco_item, 1.5)])

    # Then there is one dispatch per supplier, each with its job in the outbox, keyed by
    # the order and the supplier type
    assert set(placed.dispatch_by_supplier) == {sysco, costco}
    with db.session() as session:
        outbox = {entry.dispatch_id: entry for entry in session.exec(select(DispatchOutbox))}
    sysco_job = SupplierDispatchJob.model_validate(
        outbox[placed.dispatch_by_supplier[sysco]].payload)
    assert len(sysco_job.line_items) == 8
    assert [line.supplier_sku for line in sysco_job.line_items] == [f"SKU{n}" for n in range(8)]
    assert outbox[placed.dispatch_by_supplier[sysco]].dedup_id == (
        f"dispatch:{placed.order_id}:sysco")
    assert outbox[placed.dispatch_by_supplier[costco]].dedup_id == (
        f"dispatch:{placed.order_id}:costco")
    assert all(entry.relayed_at is None for entry in outbox.values())


def test_an_order_with_an_unknown_item_writes_nothing(purchasing: str) -> None:
    sysco = make_supplier("sysco")
    item = make_item("Flour", mappings=[(sysco, "F-1", True)])
    new = NewPurchaseOrder(order_number="PO-9", restaurant_id=str(uuid.uuid4()),
                           restaurant_name="Bistro", restaurant_location=None,
                           placed_by_email=None, delivery_notes=None,
                           lines=(OrderedLine(item, 1), OrderedLine(str(uuid.uuid4()), 1)))
    with pytest.raises(PlacementError, match="does not exist"), db.session() as session:
        place_purchase_order(session, new)
    with db.session() as session:
        assert session.exec(select(PurchaseOrder)).all() == []
        assert session.exec(select(DispatchOutbox)).all() == []


def test_a_dead_end_is_recorded_once_per_line_and_supplier(purchasing: str) -> None:
    sysco = make_supplier("sysco")
    item = make_item("Flour", mappings=[(sysco, "F-1", True)])
    placed = place_order([(item, 1)])
    line = placed.line_ids[0]
    with db.session() as session:
        first = append_event(session, placed.order_id, EventType.BACKORDER_NO_ALTERNATE, {},
                             line_item_id=line, supplier_id=sysco)
    with db.session() as session:
        second = append_event(session, placed.order_id, EventType.BACKORDER_NO_ALTERNATE, {},
                              line_item_id=line, supplier_id=sysco)
        other = append_event(session, placed.order_id, EventType.LINE_ITEM_BACKORDERED, {},
                             line_item_id=line, supplier_id=sysco)
        again = append_event(session, placed.order_id, EventType.LINE_ITEM_BACKORDERED, {},
                             line_item_id=line, supplier_id=sysco)
    assert (first, second, other, again) == (True, False, True, True)


@pytest.mark.parametrize(("statuses", "expected"), [
    (["pending", "submitted"], "pending"),
    (["submitted", "confirmed"], "completed"),
    (["failed", "failed"], "failed"),
    (["submitted", "failed"], "partial"),
])
def test_an_order_rolls_up_from_its_dispatches(statuses: list[str], expected: str) -> None:
    assert order_status_of(statuses).value == expected
