"""``/v1/suppliers``, ``/v1/catalog-items``, ``/v1/purchase-orders``: who delivers what,
and a restaurant's orders fanned out to one dispatch per supplier (docs/api.md,
"Purchasing"; docs/suppliers.md). Placing and relaying an order is
``actors.purchasing.place_and_relay``; these routes validate, write the reference rows and
shape the JSON. A refused request writes nothing and enqueues nothing.
"""

from __future__ import annotations

import dataclasses
from decimal import Decimal
from typing import Annotated, Any
from uuid import UUID

from fastapi import Response
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    StringConstraints,
    ValidationError,
    field_validator,
)
from sqlmodel import Session, col, select

from actors.purchasing import place_and_relay
from herald import db
from herald.settings import email_address_problem
from herald.text import MULTI_LINE, SINGLE_LINE, SingleLine, json_line_except
from herald.web.auth import protected_router
from herald.web.errors import api_error, found
from models.purchasing import (
    CatalogItem,
    NewPurchaseOrder,
    OrderedLine,
    OrderNumberTaken,
    PlacementError,
    PurchaseOrder,
    Supplier,
    SupplierMapping,
    purchase_order_view,
)
from models.sealed import require_sealing
from models.supplier_jobs import EmailAddress, SupplierTypeName
from providers.sftp import SftpSettings
from providers.suppliers import SftpConfigError, SupplierType
from providers.x12 import item_problem

router = protected_router(["purchasing"])

#: Most lines one order may carry.
MAX_ORDER_LINES = 500
#: Most copy addresses and mappings one supplier or item may carry.
MAX_CC = 20
MAX_MAPPINGS = 20

Text = Annotated[str, StringConstraints(strip_whitespace=True, min_length=1, max_length=255),
                SINGLE_LINE]
Code = Annotated[str, StringConstraints(strip_whitespace=True, min_length=1, max_length=48),
                SINGLE_LINE]


class _Body(BaseModel):
    model_config = ConfigDict(extra="forbid")


# -- suppliers ------------------------------------------------------------------------------------
class SupplierIn(_Body):
    """A supplier: ``sftp`` for sysco (required), ``email`` and ``cc`` for the email
    transports (an empty ``email`` makes their dispatches fail permanently)."""

    name: Text
    type: SupplierTypeName
    #: Empty or null: none (the email transports then fail such a dispatch permanently).
    email: SingleLine | None = Field(default=None, max_length=320)
    cc: list[EmailAddress] = Field(default_factory=list, max_length=MAX_CC)
    #: Every string on one line, but ``host_key``: one OpenSSH key per line.
    sftp: Annotated[dict[str, Any], json_line_except("host_key")] | None = None
    active: bool = True


    @field_validator("email")
    @classmethod
    def _address(cls, value: str | None) -> str | None:
        if not value:
            return None
        problem = email_address_problem(value)
        if problem:
            raise ValueError(problem)
        return value


def _sftp_settings(body: SupplierIn) -> dict[str, Any] | None:
    """The supplier's SFTP settings, checked; a 422 naming each problem."""
    if body.type != "sysco":
        if body.sftp is not None:
            raise api_error(422, "invalid_supplier", "sftp: only a sysco supplier has SFTP "
                            "settings")
        return None
    if body.sftp is None:
        raise api_error(422, "invalid_supplier", "sftp: a sysco supplier needs its SFTP "
                        "settings (host, port, username, password, outbound_dir, inbound_dir, "
                        "archive_dir)")
    try:
        settings = SftpSettings.from_mapping(body.sftp)
    except SftpConfigError as error:
        raise api_error(422, "invalid_supplier", f"sftp: {error}") from None
    if settings.host_key is None and not settings.trust_on_first_use:
        # else the password would go to whatever server answers first (docs/suppliers.md#host-keys)
        raise api_error(422, "host_key_required", "sftp: give host_key (the server's public "
                        "key as an OpenSSH line, like 'ssh-ed25519 AAAA…'), or "
                        "trust_on_first_use: true to accept the first key the server "
                        "presents")
    return dataclasses.asdict(settings)


def supplier_view(supplier: Supplier) -> dict[str, Any]:
    """A supplier as JSON; its SFTP password is never included (``password_set`` says
    whether it has one)."""
    sftp = None
    if supplier.sftp is not None:
        sftp = {key: value for key, value in supplier.sftp.items() if key != "password"}
        sftp["password_set"] = bool(supplier.sftp.get("password"))
    return {"id": supplier.id, "name": supplier.name, "type": supplier.type,
            "email": supplier.email, "cc": list(supplier.cc), "sftp": sftp,
            "active": supplier.active, "created_at": supplier.created_at.isoformat(),
            "updated_at": supplier.updated_at.isoformat()}


@router.post("/suppliers", status_code=201, summary="Create a supplier")
def create_supplier(body: SupplierIn) -> dict[str, Any]:
    """201 with the supplier (its password never echoed); 422 for a sysco supplier
    without valid SFTP settings or an address that is not one."""
    sftp = _sftp_settings(body)
    if sftp is not None:
        require_sealing()  # its password is stored encrypted: a 503 without a key
    supplier = Supplier(name=body.name, type=body.type, email=body.email,
                        cc=list(dict.fromkeys(body.cc)), sftp=sftp, active=body.active)
    with db.session() as session:
        session.add(supplier)
    return supplier_view(supplier)


@router.get("/suppliers/{supplier_id}", summary="A supplier")
def get_supplier(supplier_id: str) -> dict[str, Any]:
    """The supplier (its password never included)."""
    with db.session() as session:
        supplier = found(session.get(Supplier, supplier_id), "supplier", supplier_id)
    return supplier_view(supplier)


# -- catalog items -----------------------------------------------------------------------------
class MappingIn(_Body):
    """How one supplier knows the item."""

    supplier_id: SingleLine = Field(min_length=1, max_length=36)
    supplier_sku: Code
    supplier_product_code: Code | None = None
    unit_size: Annotated[str, StringConstraints(max_length=64), SINGLE_LINE] | None = None
    preferred: bool = False


class CatalogItemIn(_Body):
    """An item restaurants order; exactly one mapping is preferred (its supplier gets the
    orders), the others are alternates for a reroute."""

    name: Text
    unit: Annotated[str, StringConstraints(strip_whitespace=True, min_length=1,
                                           max_length=32), SINGLE_LINE]
    mappings: list[MappingIn] = Field(min_length=1, max_length=MAX_MAPPINGS)


def _check_mappings(session: Session, mappings: list[MappingIn], unit: str) -> None:
    """A 422 unless exactly one mapping is preferred and each names an existing supplier,
    once, and a Sysco supplier's X12 850 can carry the item as its mapping names it."""
    preferred = sum(mapping.preferred for mapping in mappings)
    if preferred != 1:
        raise api_error(422, "invalid_catalog_item",
                        f"mappings: exactly one must be preferred ({preferred} are)")
    ids = [mapping.supplier_id for mapping in mappings]
    if len(set(ids)) != len(ids):
        raise api_error(422, "invalid_catalog_item", "mappings: each supplier at most once")
    known = dict(session.exec(select(Supplier.id, Supplier.type)
                              .where(col(Supplier.id).in_(ids))).all())
    unknown = [supplier_id for supplier_id in ids if supplier_id not in known]
    if unknown:
        raise api_error(422, "invalid_catalog_item",
                        f"mappings: no supplier {', '.join(unknown)}")
    for index, mapping in enumerate(mappings):
        # alternates too: a reroute to one would otherwise fail in the worker
        problem = known[mapping.supplier_id] == SupplierType.SYSCO.value and item_problem(
            supplier_sku=mapping.supplier_sku, unit=unit,
            supplier_product_code=mapping.supplier_product_code)
        if problem:
            raise api_error(422, "invalid_catalog_item", f"mappings.{index}: the Sysco "
                            f"supplier's X12 850 cannot carry it: {problem}")


def catalog_item_view(item: CatalogItem, mappings: list[SupplierMapping]) -> dict[str, Any]:
    """A catalog item with its supplier mappings as JSON."""
    return {"id": item.id, "name": item.name, "unit": item.unit,
            "mappings": [{"id": m.id, "supplier_id": m.supplier_id,
                          "supplier_sku": m.supplier_sku,
                          "supplier_product_code": m.supplier_product_code,
                          "unit_size": m.unit_size, "preferred": m.preferred}
                         for m in mappings],
            "created_at": item.created_at.isoformat()}


@router.post("/catalog-items", status_code=201, summary="Create a catalog item")
def create_catalog_item(body: CatalogItemIn) -> dict[str, Any]:
    """201 with the item and its mappings; 422 unless exactly one mapping is preferred,
    every supplier exists, and a Sysco supplier's 850 can carry the item (its SKU, product
    code and unit)."""
    with db.session() as session:
        _check_mappings(session, body.mappings, body.unit)
        item = CatalogItem(name=body.name, unit=body.unit)
        session.add(item)
        session.flush()
        mappings = [SupplierMapping(catalog_item_id=item.id, **mapping.model_dump())
                    for mapping in body.mappings]
        session.add_all(mappings)
    return catalog_item_view(item, mappings)


# -- purchase orders ---------------------------------------------------------------------------
class RestaurantIn(_Body):
    """Who orders, and where to deliver."""

    id: UUID
    name: Text
    location: Annotated[str, StringConstraints(max_length=255), SINGLE_LINE] | None = None


class LineIn(_Body):
    """One catalog item and how many of its unit."""

    catalog_item_id: SingleLine = Field(min_length=1, max_length=36)
    quantity: Decimal = Field(gt=0, max_digits=18, decimal_places=4, allow_inf_nan=False)


class PurchaseOrderIn(_Body):
    """A restaurant's order; each line goes to its item's preferred supplier."""

    restaurant: RestaurantIn
    order_number: Annotated[str, StringConstraints(strip_whitespace=True, min_length=1,
                                                   max_length=64), SINGLE_LINE]
    placed_by_email: EmailAddress | None = None
    #: Lines of text: tab, LF and CRLF allowed (herald/text.py).
    delivery_notes: Annotated[str, StringConstraints(max_length=2000), MULTI_LINE] | None = None
    lines: list[LineIn] = Field(min_length=1, max_length=MAX_ORDER_LINES)

    def new_order(self) -> NewPurchaseOrder:
        """The order to place."""
        return NewPurchaseOrder(
            order_number=self.order_number, restaurant_id=str(self.restaurant.id),
            restaurant_name=self.restaurant.name,
            restaurant_location=self.restaurant.location,
            placed_by_email=self.placed_by_email, delivery_notes=self.delivery_notes,
            lines=tuple(OrderedLine(line.catalog_item_id, line.quantity)
                        for line in self.lines))


@router.post("/purchase-orders", status_code=201, summary="Place a purchase order",
             responses={200: {"description": "The restaurant's existing order of this "
                                             "number, placed before with the same lines"}})
def place_purchase_order(body: PurchaseOrderIn, response: Response) -> dict[str, Any]:
    """201 with the order, one ``pending`` dispatch per supplier and its lines; each
    dispatch's job is queued once the order is committed. A restaurant's order numbers
    are unique: the same number again with the same lines is answered 200 with the
    existing order (nothing new is written or sent), with other lines 409
    ``order_number_taken``. 422 for an unknown item, an item without a preferred
    supplier, an inactive supplier or a line its supplier's job cannot carry: nothing is
    written or queued then."""
    try:
        placement = place_and_relay(body.new_order())
    except OrderNumberTaken as error:
        raise api_error(409, "order_number_taken", str(error)) from None
    except PlacementError as error:
        raise api_error(422, "invalid_order", str(error)) from None
    except ValidationError as error:
        problems = "; ".join(f"{'.'.join(str(part) for part in e['loc'])}: {e['msg']}"
                             for e in error.errors()[:5])
        raise api_error(422, "invalid_order", f"the supplier's job cannot carry this "
                        f"order: {problems}") from None
    if not placement.created:
        response.status_code = 200
    return _read_order(placement.order_id, audit=False)


@router.get("/purchase-orders/{order_id}", summary="A purchase order and its audit trail")
def get_purchase_order(order_id: str) -> dict[str, Any]:
    """The order with its dispatches, lines and audit trail (oldest first)."""
    return _read_order(order_id, audit=True)


def _read_order(order_id: str, *, audit: bool) -> dict[str, Any]:
    with db.session() as session:
        order = found(session.get(PurchaseOrder, order_id), "purchase_order", order_id)
        return purchase_order_view(session, order, audit=audit)


