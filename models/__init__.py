"""herald's SQLModel tables and the transition helpers that guard them.

Importing this package registers every table on ``SQLModel.metadata`` (Alembic's
autogenerate compares against it), so each table module is imported here.
"""

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

__all__ = ["ADMIN_ACTOR", "SYSTEM_ACTOR", "Account", "Activation", "ActivationStepRecord",
           "AuditEntry", "Batch", "CallbackReceipt", "CatalogItem", "Delivery", "DigestBucket",
           "DigestItem", "DispatchLine", "DispatchOutbox", "FxRate", "IdempotencyKey",
           "Notification", "OperatorPackage",
           "Order", "Payment", "ProviderHealth", "PurchaseOrder", "PurchaseOrderEvent",
           "PurchaseOrderLine", "StoreOrder", "StoreOrderStatusEvent", "StoreProduct",
           "Supplier", "SupplierDispatch", "SupplierMapping", "VendorDocument", "WebhookEndpoint",
           "WebhookMessage", "begin_audit", "complete_audit", "recent_audit", "record_audit"]
