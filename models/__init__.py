"""herald's SQLModel tables and the transition helpers that guard them, one module per
table family.

Importing the package imports no table: a module's tables are registered on
``SQLModel.metadata`` when that module is first imported, so a process loads the tables
of the lanes it runs and no others (a notification worker never builds the purchasing or
store tables: docs/queue.md#the-queue-table). The names below are loaded with their
module on first access (``models.Account``); :func:`import_every_table` loads every
table, for what compares against the whole schema (Alembic's autogenerate).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from sqlalchemy import event
from sqlalchemy.orm import Mapper
from sqlmodel import SQLModel

if TYPE_CHECKING:
    from models.activations import Activation, ActivationStepRecord
    from models.audit import (
        ADMIN_ACTOR,
        SYSTEM_ACTOR,
        AuditEntry,
        begin_audit,
        complete_audit,
        recent_audit,
        record_audit,
    )
    from models.batches import Batch
    from models.callbacks import CallbackReceipt
    from models.catalog import FxRate, OperatorPackage, ProviderHealth, StoreProduct
    from models.digests import DigestBucket, DigestItem
    from models.idempotency import IdempotencyKey
    from models.notifications import Account, Delivery, Notification
    from models.payments import Payment
    from models.purchasing import (
        CatalogItem,
        DispatchLine,
        DispatchOutbox,
        PurchaseOrder,
        PurchaseOrderEvent,
        PurchaseOrderLine,
        Supplier,
        SupplierDispatch,
        SupplierMapping,
        VendorDocument,
    )
    from models.store import Order, StoreOrder, StoreOrderStatusEvent
    from models.webhooks import WebhookEndpoint, WebhookMessage

#: The package's names, each with the module that defines it (imported on first access).
_EXPORTS: dict[str, str] = {
    **dict.fromkeys(["Activation", "ActivationStepRecord"], "models.activations"),
    **dict.fromkeys(["ADMIN_ACTOR", "SYSTEM_ACTOR", "AuditEntry", "begin_audit",
                     "complete_audit", "recent_audit", "record_audit"], "models.audit"),
    "Batch": "models.batches",
    "CallbackReceipt": "models.callbacks",
    **dict.fromkeys(["FxRate", "OperatorPackage", "ProviderHealth", "StoreProduct"],
                    "models.catalog"),
    **dict.fromkeys(["DigestBucket", "DigestItem"], "models.digests"),
    "IdempotencyKey": "models.idempotency",
    **dict.fromkeys(["Account", "Delivery", "Notification"], "models.notifications"),
    "Payment": "models.payments",
    **dict.fromkeys(["CatalogItem", "DispatchLine", "DispatchOutbox", "PurchaseOrder",
                     "PurchaseOrderEvent", "PurchaseOrderLine", "Supplier", "SupplierDispatch",
                     "SupplierMapping", "VendorDocument"], "models.purchasing"),
    **dict.fromkeys(["Order", "StoreOrder", "StoreOrderStatusEvent"], "models.store"),
    **dict.fromkeys(["WebhookEndpoint", "WebhookMessage"], "models.webhooks"),
}
#: Every module that declares a table.
TABLE_MODULES: tuple[str, ...] = tuple(sorted(set(_EXPORTS.values())))

__all__ = ["ADMIN_ACTOR", "SYSTEM_ACTOR", "TABLE_MODULES", "Account", "Activation",
           "ActivationStepRecord", "AuditEntry", "Batch", "CallbackReceipt", "CatalogItem",
           "Delivery", "DigestBucket", "DigestItem", "DispatchLine", "DispatchOutbox", "FxRate",
           "IdempotencyKey", "Notification", "OperatorPackage", "Order", "Payment",
           "ProviderHealth", "PurchaseOrder", "PurchaseOrderEvent", "PurchaseOrderLine",
           "StoreOrder", "StoreOrderStatusEvent", "StoreProduct", "Supplier", "SupplierDispatch",
           "SupplierMapping", "VendorDocument", "WebhookEndpoint", "WebhookMessage",
           "begin_audit", "complete_audit", "import_every_table", "recent_audit", "record_audit"]


def import_every_table() -> None:
    """Import every module of :data:`TABLE_MODULES`: afterwards ``SQLModel.metadata``
    holds every table of herald's schema."""
    for name in TABLE_MODULES:
        importlib.import_module(name)


@event.listens_for(Mapper, "before_configured")
def _import_referenced_tables() -> None:
    """Before the ORM configures newly declared tables: when a foreign key of a table
    loaded names one that is not, load every table. The ORM orders the rows of a flush by
    their tables' foreign keys and fails on a key whose table it does not know (a module
    that imports the payments table alone, say, whose rows may name an activation)."""
    tables = SQLModel.metadata.tables
    if any(key.target_fullname.rpartition(".")[0] not in tables
           for table in list(tables.values()) for key in table.foreign_keys):
        import_every_table()


def __getattr__(name: str) -> Any:
    """Import the module defining ``name`` on first access (``models.Account``)."""
    if name in _EXPORTS:
        return getattr(importlib.import_module(_EXPORTS[name]), name)
    raise AttributeError(f"module 'models' has no attribute {name!r}")
