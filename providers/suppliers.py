"""What a supplier transport is given and how its failures are classified.

A purchase order travels to one supplier as a :class:`PurchaseOrderDocument` (one per
supplier per order: eight lines for one supplier are one document). A transport (X12 850
over SFTP, an email table, a PDF attached to an email) turns it into the supplier's format
and returns a :class:`Transmission`. Its errors are either permanent — a second attempt
cannot succeed (missing configuration, a refused address, an invalid document, no
renderer) — or transient; :func:`is_permanent_failure` tells them apart. Anything not
marked permanent is retried: over-classifying as permanent loses an order a second
attempt would have delivered.
"""

from __future__ import annotations

import dataclasses
from decimal import Decimal
from enum import StrEnum
from typing import Any

from pydantic import ValidationError


class SupplierType(StrEnum):
    """Which transport serves a supplier."""

    #: An X12 850 file over SFTP.
    SYSCO = "sysco"
    #: An HTML + plain-text order table by email.
    COSTCO = "costco"
    #: A PDF of the order, stored and attached to an email.
    CENTRAL_KITCHEN = "central_kitchen"


@dataclasses.dataclass(frozen=True, kw_only=True)
class DocumentLine:
    """One ordered line, as the supplier knows the product."""

    line_item_id: str
    catalog_item_id: str
    name: str
    supplier_sku: str
    supplier_product_code: str | None
    quantity: Decimal
    unit: str
    unit_size: str | None = None


@dataclasses.dataclass(frozen=True, kw_only=True)
class PurchaseOrderDocument:
    """One order for one supplier: everything a transport writes out."""

    order_id: str
    dispatch_id: str
    order_number: str
    restaurant_id: str
    restaurant_name: str
    restaurant_location: str | None
    placed_by_email: str | None
    delivery_notes: str | None
    lines: tuple[DocumentLine, ...]


@dataclasses.dataclass(frozen=True, kw_only=True)
class Transmission:
    """What a transport did: the reference the supplier knows the order by (an EDI file
    name, an email's message id) and the keys it adds to the submission's audit event."""

    reference: str
    audit: dict[str, Any] = dataclasses.field(default_factory=dict)


class PermanentDispatchError(Exception):
    """A dispatch that cannot succeed on any attempt."""

    permanent = True


class SupplierConfigError(PermanentDispatchError):
    """The supplier's configuration is missing or wrong (no email address, no SFTP host)."""


class PermanentMailError(PermanentDispatchError):
    """The mail server refused the message for good (a 5xx reply)."""


class SftpConfigError(PermanentDispatchError):
    """The SFTP settings cannot work (authentication refused, host key mismatch)."""


class ChromiumUnavailableError(PermanentDispatchError):
    """The PDF renderer is not installed or cannot start."""


def is_permanent_failure(error: BaseException) -> bool:
    """True for a failure no further attempt can fix: the permanent classes above, an
    invalid document (a pydantic ValidationError) and anything carrying
    ``permanent = True``; everything else is retried."""
    return isinstance(error, ValidationError) or getattr(error, "permanent", False) is True
