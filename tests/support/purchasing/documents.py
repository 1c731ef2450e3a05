"""Purchase order documents as a supplier transport is handed them (the Costco case):
the supplier email, PDF and storage tests build theirs here."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

from providers.suppliers import DocumentLine, PurchaseOrderDocument

#: The purchasing sender the supplier emails come from.
SENDER = "Lucille purchasing <orders@lucille.test>"
COSTCO = "orders@costco-business.test"
COSTCO_CC = ("buyer@costco-business.test", "warehouse@costco-business.test")


def line(number: int, **fields: Any) -> DocumentLine:
    """Line ``number`` of an order (a case of item ``number``), ``fields`` overriding."""
    values: dict[str, Any] = {
        "line_item_id": f"line-{number}", "catalog_item_id": f"item-{number}",
        "name": f"Item number {number}", "supplier_sku": f"CO-{7000 + number}",
        "supplier_product_code": f"UPC{number:05d}", "quantity": Decimal(number) + 1,
        "unit": "case", "unit_size": f"{number + 5} x 1 lb"}
    values.update(fields)
    return DocumentLine(**values)


def order(*lines: DocumentLine, **fields: Any) -> PurchaseOrderDocument:
    """Lucille Downtown's order PO-1042 of ``lines`` (else lines 1 to 3), ``fields``
    overriding."""
    values: dict[str, Any] = {
        "order_id": "order-1", "dispatch_id": "dispatch-1", "order_number": "PO-1042",
        "restaurant_id": "restaurant-1", "restaurant_name": "Lucille Downtown",
        "restaurant_location": "12 Main Street", "placed_by_email": "chef@lucille.test",
        "delivery_notes": "Back door before 7 am",
        "lines": lines or tuple(line(n) for n in range(1, 4))}
    values.update(fields)
    return PurchaseOrderDocument(**values)
