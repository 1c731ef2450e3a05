"""The payloads of the ``supplier-dispatch`` and ``backorder-reroute`` jobs and their
deduplication ids: one contract for producers and workers (docs/suppliers.md#jobs).

On the wire the fields are camelCase (``orderId``, ``lineItems``…); in Python they are
snake_case. A payload that fails these models is refused before anything is persisted or
enqueued.
"""

from __future__ import annotations

from decimal import Decimal
from typing import Annotated, Literal
from uuid import UUID

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    PositiveFloat,
    StringConstraints,
)
from pydantic.alias_generators import to_camel

from herald.settings import email_address_problem
from herald.text import SingleLine

NonEmpty = Annotated[str, StringConstraints(min_length=1)]
#: The X12 855 line acknowledgment codes (ACK01) that can trigger a reroute.
AckCode = Literal["IA", "IB", "IR", "IC", "IP", "IQ", "DR", "BP", "SP"]
SupplierTypeName = Literal["sysco", "costco", "central_kitchen"]


def _email(value: str) -> str:
    problem = email_address_problem(value)
    if problem:
        raise ValueError(problem)
    return value


#: One bare address; a control character in it is refused as such first (herald/text.py).
EmailAddress = Annotated[SingleLine, AfterValidator(_email)]


def _finite(value: float) -> float:
    if value != value or value in (float("inf"), float("-inf")):
        raise ValueError("must be a finite number")
    return value


class _Contract(BaseModel):
    """camelCase on the wire, snake_case in Python; unknown fields refused."""

    model_config = ConfigDict(alias_generator=to_camel, validate_by_name=True,
                              validate_by_alias=True, serialize_by_alias=True,
                              extra="forbid", frozen=True)


class DispatchLineItem(_Contract):
    """One line of a dispatch, as the supplier knows the product."""

    line_item_id: UUID
    catalog_item_id: UUID
    #: The catalog item's name, for email and PDF rows.
    name: NonEmpty
    #: PO107's product id.
    supplier_sku: NonEmpty
    supplier_product_code: str | None = None
    quantity: Annotated[PositiveFloat, AfterValidator(_finite)]
    unit: NonEmpty
    unit_size: str | None = None

    def decimal_quantity(self) -> Decimal:
        """The quantity as a Decimal, as it was written (no binary float residue)."""
        return Decimal(repr(self.quantity))


class SupplierDispatchJob(_Contract):
    """Transmit one order to one supplier: every line the order has for it."""

    order_id: UUID
    #: The supplier_dispatches row this job owns.
    dispatch_id: UUID
    supplier_id: UUID
    supplier_type: SupplierTypeName
    restaurant_id: UUID
    restaurant_name: NonEmpty
    restaurant_location: str | None = None
    order_number: NonEmpty
    placed_by_email: EmailAddress | None = None
    #: Falls back to the order's own notes in the worker.
    delivery_notes: str | None = None
    line_items: list[DispatchLineItem] = Field(min_length=1)


class BackorderRerouteJob(_Contract):
    """Move a back-ordered line to its alternate supplier."""

    order_id: UUID
    line_item_id: UUID
    #: The supplier that back-ordered the line.
    original_supplier_id: UUID
    #: Omitted when unknown: the worker resolves it.
    alternate_supplier_id: UUID | None = None
    reason: str | None = Field(default=None, max_length=500)
    ack_code: AckCode | None = None


def dispatch_dedup_id(order_id: str, supplier_type: str, suffix: str | None = None) -> str:
    """``dispatch:{orderId}:{supplierType}``, plus ``:{suffix}`` when given (a reroute
    passes ``reroute:{lineItemId}`` so a same-type alternate is not taken for the
    order's original dispatch)."""
    base = f"dispatch:{order_id}:{supplier_type}"
    return f"{base}:{suffix}" if suffix else base


def reroute_dedup_id(line_item_id: str, original_supplier_id: str) -> str:
    """``reroute:{lineItemId}:{originalSupplierId}``."""
    return f"reroute:{line_item_id}:{original_supplier_id}"


def reroute_suffix(line_item_id: str) -> str:
    """The dedup suffix a reroute's dispatch carries: ``reroute:{lineItemId}``."""
    return f"reroute:{line_item_id}"
