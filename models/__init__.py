"""herald's SQLModel tables and the transition helpers that guard them.

Importing this package registers every table on ``SQLModel.metadata`` (Alembic's
autogenerate compares against it), so each table module is imported here.
"""

from models.audit import ADMIN_ACTOR, SYSTEM_ACTOR, AuditEntry, record_audit
from models.notifications import Account, Delivery, Notification

__all__ = ["ADMIN_ACTOR", "SYSTEM_ACTOR", "Account", "AuditEntry", "Delivery", "Notification",
           "record_audit"]
