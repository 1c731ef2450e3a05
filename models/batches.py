"""Notification batches: one event type sent to many accounts, now or at a scheduled time
(docs/state-machines.md#batches).

A batch's ``status`` moves ``scheduled → running → finished``, or ``scheduled →
cancelled``; every change goes through this module's transition helpers, each a
conditional UPDATE on the status that makes it safe.
"""

from __future__ import annotations

from datetime import datetime
from enum import StrEnum
from typing import Any

from sqlalchemy import JSON, Index, text, update
from sqlmodel import Field, Session, SQLModel, col

from models.base import UtcDateTime, id_field, timestamp_field, utcnow


class BatchStatus(StrEnum):
    """Where a batch is in its life."""

    SCHEDULED = "scheduled"
    RUNNING = "running"
    FINISHED = "finished"
    CANCELLED = "cancelled"


#: Statuses the handoff sweep may repair.
UNFINISHED_BATCH = (BatchStatus.SCHEDULED.value, BatchStatus.RUNNING.value)


class Batch(SQLModel, table=True):
    """One event type for a list of accounts; ``run_batch`` turns it into notifications."""

    __tablename__ = "notification_batches"
    # the sweep reads only unfinished batches, oldest first: a partial index keeps that
    # flat however many finished batches accumulate
    __table_args__ = (Index("ix_notification_batches_unfinished", "created_at",
                            postgresql_where=text("status IN ('scheduled', 'running')"),
                            sqlite_where=text("status IN ('scheduled', 'running')")),)

    id: str = id_field()
    type: str = Field(max_length=64)
    account_ids: list[str] = Field(default_factory=list, sa_type=JSON)
    data: dict[str, Any] = Field(default_factory=dict, sa_type=JSON)
    status: str = Field(default=BatchStatus.SCHEDULED.value, max_length=16)
    #: When to run (None: at once).
    scheduled_at: datetime | None = Field(default=None, sa_type=UtcDateTime, nullable=True)
    #: When a run last started (the sweep's age for a running batch).
    started_at: datetime | None = Field(default=None, sa_type=UtcDateTime, nullable=True)
    finished_at: datetime | None = Field(default=None, sa_type=UtcDateTime, nullable=True)
    notification_count: int = 0
    #: Every channel job of the batch's notifications was handed to the queue.
    fully_enqueued: bool = False
    created_at: datetime = timestamp_field()
    updated_at: datetime = timestamp_field()


# -- the batch's transition helpers ---------------------------------------------------------
def start_batch(session: Session, batch_id: str, *, now: datetime | None = None) -> bool:
    """Move a scheduled batch to running (a running one only gets ``started_at``
    refreshed: a re-run after a crash continues it); commits.

    One conditional UPDATE decides, so a run that loses the race to a cancel changes
    nothing. True when the batch is running for this run; False when it is cancelled,
    finished or missing.
    """
    now = now or utcnow()
    result = session.exec(
        update(Batch)
        .where(col(Batch.id) == batch_id, col(Batch.status).in_(UNFINISHED_BATCH))
        .values(status=BatchStatus.RUNNING.value, started_at=now, updated_at=now))
    session.commit()
    return result.rowcount == 1


def finish_batch(session: Session, batch_id: str, *, notification_count: int,
                 fully_enqueued: bool, now: datetime | None = None) -> bool:
    """Move a running batch to finished with its counts; commits. False (nothing written)
    when the batch is not running."""
    now = now or utcnow()
    result = session.exec(
        update(Batch)
        .where(col(Batch.id) == batch_id, col(Batch.status) == BatchStatus.RUNNING.value)
        .values(status=BatchStatus.FINISHED.value, finished_at=now, updated_at=now,
                notification_count=notification_count, fully_enqueued=fully_enqueued))
    session.commit()
    return result.rowcount == 1


def cancel_batch(session: Session, batch_id: str, *, now: datetime | None = None) -> bool:
    """Move a scheduled batch to cancelled; commits. False (nothing written) when it is
    running, finished, already cancelled or missing."""
    now = now or utcnow()
    result = session.exec(
        update(Batch)
        .where(col(Batch.id) == batch_id, col(Batch.status) == BatchStatus.SCHEDULED.value)
        .values(status=BatchStatus.CANCELLED.value, updated_at=now))
    session.commit()
    return result.rowcount == 1
