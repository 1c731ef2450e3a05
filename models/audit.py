"""The audit log: one row per operator action (every bulk action is audited).

An action's row is written *before* the action runs (:func:`begin_audit`, committed at
once) and completed with its count after it (:func:`complete_audit`), so an action that
dies midway still leaves a trace: a row with no ``completed_at``. ``actor`` names a role
(``admin`` for the ADMIN_TOKEN holder, ``system`` for herald itself), never a person;
``detail`` carries ids and parameters, never personal data.
"""

from __future__ import annotations

import logging
from datetime import datetime
from typing import Any

from sqlalchemy import JSON, update
from sqlmodel import Field, Session, SQLModel, col, select

from models.base import UtcDateTime, id_field, timestamp_field, utcnow

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
    #: The queue acted on, when the action concerns a queue.
    queue: str | None = Field(default=None, max_length=128)
    #: The job acted on, when the action concerns one job.
    job_id: str | None = Field(default=None, max_length=255)
    #: Parameters and outcome of the action as JSON (ids only).
    detail: dict[str, Any] | str | None = Field(
        default=None, sa_type=JSON(none_as_null=True), nullable=True
    )
    #: How many items the action affected (jobs retried, removed, cleaned …).
    count: int = Field(default=0)
    #: When the action finished; None while it runs, and for good when it died midway.
    completed_at: datetime | None = Field(default=None, sa_type=UtcDateTime, nullable=True)
    #: Why the action failed, when it raised.
    error: str | None = Field(default=None, max_length=500)


def record_audit(
    session: Session,
    *,
    actor: str,
    action: str,
    target: str,
    detail: dict[str, Any] | str | None = None,
    count: int = 0,
    queue: str | None = None,
    job_id: str | None = None,
) -> AuditEntry:
    """Add a finished action's audit row to ``session`` and flush it; it commits with the
    caller's transaction. The returned entry has its ``id``, ``at`` and ``completed_at`` set.
    """
    entry = AuditEntry(actor=actor, action=action, target=target, detail=detail, count=count,
                       queue=queue, job_id=job_id, completed_at=utcnow())
    session.add(entry)
    session.flush()
    _log(entry)
    return entry


def begin_audit(session: Session, *, actor: str, action: str, target: str,
                queue: str | None = None, job_id: str | None = None,
                detail: dict[str, Any] | str | None = None) -> str:
    """Write the audit row of an action about to run and commit it; returns its id.

    Committed before the action runs, so an action that dies midway still leaves its row
    (with no ``completed_at``). Complete it with :func:`complete_audit`.
    """
    entry = AuditEntry(actor=actor, action=action, target=target, queue=queue, job_id=job_id,
                       detail=detail)
    session.add(entry)
    session.commit()
    _log(entry)
    return entry.id


def complete_audit(session: Session, audit_id: str, *, count: int,
                   error: str | None = None) -> bool:
    """Complete a row :func:`begin_audit` wrote with the action's count (and its error, when
    it raised), and commit. Only a row not completed yet changes; returns whether it did."""
    result = session.exec(
        update(AuditEntry)
        .where(col(AuditEntry.id) == audit_id, col(AuditEntry.completed_at).is_(None))
        .values(count=count, completed_at=utcnow(), error=(error or None) and error[:500]))
    session.commit()
    return bool(result.rowcount)


def recent_audit(session: Session, *, limit: int = 100, offset: int = 0) -> list[AuditEntry]:
    """Audit rows newest first."""
    return list(session.exec(select(AuditEntry).order_by(col(AuditEntry.at).desc(),
                                                         col(AuditEntry.id).desc())
                             .offset(offset).limit(limit)))


def _log(entry: AuditEntry) -> None:
    log.info("audit %s", entry.action,
             extra={"actor": entry.actor, "action": entry.action, "target": entry.target,
                    "count": entry.count, "audit_id": entry.id})
