"""herald's SQLModel tables and the transition helpers that guard them.

Importing this package registers every table on ``SQLModel.metadata`` (Alembic's
autogenerate compares against it), so each table module is imported here.
"""

from models.audit import ADMIN_ACTOR, SYSTEM_ACTOR, AuditEntry, record_audit
from models.batches import Batch
from models.callbacks import CallbackReceipt
from models.notifications import Account, Delivery, Notification

__all__ = ["ADMIN_ACTOR", "SYSTEM_ACTOR", "Account", "AuditEntry", "Batch", "CallbackReceipt",
           "Delivery", "Notification", "record_audit"]
