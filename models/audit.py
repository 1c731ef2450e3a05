"""The audit log: one row per operator action (every bulk action is audited).

Rows are append-only. ``actor`` names a role (``admin`` for the ADMIN_TOKEN holder,
``system`` for herald itself), never a person; ``detail`` carries ids and parameters,
never personal data.
"""

from __future__ import annotations

import logging
from datetime import datetime
from typing import Any

from sqlalchemy import JSON
from sqlmodel import Field, Session, SQLModel

from models.base import id_field, timestamp_field

log = logging.getLogger(__name__)

#: The actor recorded for the holder of ADMIN_TOKEN.
ADMIN_ACTOR = "admin"
#: The actor recorded for actions herald takes on its own (sweeps, the clock).
SYSTEM_ACTOR = "system"


class AuditEntry(SQLModel, table=True):
    """One audited action: who did what to which target, and how many things it touched."""

    __tablename__ = "audit_log"

    id: str = id_field()
    at: datetime = timestamp_field(index=True)
    #: A role, not a person: ``admin`` or ``system``.
    actor: str = Field(max_length=64)
    #: ``<noun>.<verb>``, e.g. ``queue.retry``.
    action: str = Field(max_length=64, index=True)
    #: What was acted on, e.g. a queue name or ``<queue>/<job id>``.
    target: str = Field(max_length=255)
    #: Parameters and outcome of the action as JSON (ids only).
    detail: dict[str, Any] | str | None = Field(
        default=None, sa_type=JSON(none_as_null=True), nullable=True
    )
    #: How many items the action affected (jobs retried, removed, cleaned …).
    count: int = Field(default=0)


def record_audit(
    session: Session,
    *,
    actor: str,
    action: str,
    target: str,
    detail: dict[str, Any] | str | None = None,
    count: int = 0,
) -> AuditEntry:
    """Add an audit row to ``session`` and flush it; it commits with the caller's transaction.

    The returned entry has its ``id`` and ``at`` set.
    """
    entry = AuditEntry(actor=actor, action=action, target=target, detail=detail, count=count)
    session.add(entry)
    session.flush()
    log.info("audit %s", action, extra={"actor": actor, "action": action, "target": target,
                                         "count": count, "audit_id": entry.id})
    return entry
