"""Batches: one event type for many accounts, now or at a scheduled time
(docs/pipeline.md#batches).

:func:`create_batch` validates everything, persists the batch as ``scheduled``, then adds
its ``run_batch`` job (job id ``notification-batch-{id}``, priority 5, delayed until
``scheduled_at`` when that is in the future). A failed add leaves the batch persisted and
scheduled; the handoff sweep re-adds it through :func:`enqueue_batch_run`.

:func:`run_batch` checks the persisted status before doing work, moves ``scheduled →
running`` (a cancel that won the race leaves nothing to do), calls the orchestration
trigger in recipient chunks with an occurrence derived from the batch id (so a re-run
creates nothing twice), and ends ``finished`` once every notification is persisted, even
when some channel job could not be handed to the queue (then ``fully_enqueued`` is
false). Delivery success is a separate aggregate, ``delivery_summary``, never the status.

:func:`cancel_batch` conditionally moves ``scheduled → cancelled``; removing the job
afterwards is best-effort cleanup, not the decision.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Iterator, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

from pydantic import BaseModel, Field
from sqlalchemy import exists, func
from sqlmodel import Session, col, select

from actors.event_catalogue import EVENT_TYPES
from actors.orchestration import (
    AccountNotFound,
    InvalidEvent,
    check_event,
    flush_handoff_stamps,
    trigger_event,
)
from actors.queues import registry
from herald.db import session as db_session
from herald.queue import NORMAL_PRIORITY, Defer, enqueue, queue
from models import batches as transitions
from models.base import ID_LENGTH, utcnow
from models.batches import UNFINISHED_BATCH, Batch, BatchStatus
from models.notifications import Delivery, Notification, Outcome

log = logging.getLogger("herald.batches")

ORCHESTRATION_QUEUE = "notification-orchestration"
#: Most accounts one batch may name (a bigger audience is several batches).
MAX_RECIPIENTS = 10_000
#: Accounts triggered between two progress log lines.
CHUNK_SIZE = 100
#: How long a run's end waits for its events' handoff stamps to be written (s).
STAMPS_WAIT_S = 10.0


class InvalidBatch(ValueError):
    """The batch cannot be accepted as given; nothing was persisted or enqueued."""


class BatchNotFound(LookupError):
    """No batch has this id."""


class BatchNotCancellable(RuntimeError):
    """Only a scheduled batch can be cancelled; this one is running or finished."""

    def __init__(self, batch_id: str, status: str) -> None:
        super().__init__(f"batch {batch_id} is {status}: only a scheduled batch can be "
                         "cancelled")
        self.status = status


@dataclasses.dataclass(frozen=True, kw_only=True)
class BatchReport:
    """A batch with the outcome counts of its notifications' deliveries."""

    batch: Batch
    delivery_summary: dict[str, int]


class BatchRunJob(BaseModel):
    """A run job carries the batch id only; everything else is read from the batch row."""

    batch_id: str = Field(min_length=1, max_length=36)


def batch_job_id(batch_id: str) -> str:
    """The deterministic job id of a batch's run (concurrent re-adds cannot double it)."""
    return f"notification-batch-{batch_id}"


def batch_occurrence(batch_id: str) -> str:
    """The occurrence of every notification a batch triggers: the durable dedupe key that
    makes a re-run create nothing twice."""
    return f"batch:{batch_id}"


# -- creating ---------------------------------------------------------------------------
def check_batch(type_name: str, account_ids: Sequence[str], data: dict[str, Any],
                scheduled_at: datetime | None) -> datetime | None:
    """Validate a batch before anything is persisted; returns ``scheduled_at`` in UTC.

    Raises :class:`InvalidBatch` naming the field: an unknown type or data it lacks, no
    accounts, more than :data:`MAX_RECIPIENTS`, a repeated account, an id no column can
    hold, a naive time.
    """
    try:
        check_event(type_name, data, "normal", None)
    except InvalidEvent as error:
        raise InvalidBatch(str(error)) from None
    if EVENT_TYPES[type_name].digest is not None:
        # its messages are digests of its events (docs/api.md#digests), never one per batch
        raise InvalidBatch(f"type: {type_name} is digested; send its events one by one")
    if not account_ids:
        raise InvalidBatch("account_ids: name at least one account")
    if len(account_ids) > MAX_RECIPIENTS:
        raise InvalidBatch(f"account_ids: at most {MAX_RECIPIENTS} accounts per batch "
                           f"(got {len(account_ids)}); split the audience into several")
    if len(set(account_ids)) != len(account_ids):
        raise InvalidBatch("account_ids: each account may appear only once")
    if not all(_storable_id(account_id) for account_id in account_ids):
        # such an id could never match an account, and would fail every run of the batch
        raise InvalidBatch(f"account_ids: ids are 1..{ID_LENGTH} characters, no NUL")
    return _utc(scheduled_at)


def _storable_id(value: str) -> bool:
    """True when ``value`` can be an id column's value (PostgreSQL text refuses NUL)."""
    return 0 < len(value) <= ID_LENGTH and "\x00" not in value


def _utc(moment: datetime | None) -> datetime | None:
    if moment is None:
        return None
    if moment.tzinfo is None:
        raise InvalidBatch("scheduled_at: needs a timezone (like 2030-01-31T09:00:00Z)")
    try:
        return moment.astimezone(UTC)
    except OverflowError:  # an offset that pushes year 9999 past the calendar
        raise InvalidBatch("scheduled_at: out of range") from None


def create_batch(*, type: str, account_ids: Sequence[str], data: dict[str, Any] | None = None,
                 scheduled_at: datetime | None = None) -> BatchReport:
    """Validate, persist the batch as scheduled, then add its run job.

    Nothing is written when validation fails (:class:`InvalidBatch`). A failed add (Redis
    away) is logged and the batch stays scheduled for the handoff sweep to re-add.
    """
    data = data or {}
    scheduled_at = check_batch(type, account_ids, data, scheduled_at)
    with db_session() as session:
        batch = Batch(type=type, account_ids=list(account_ids), data=data,
                      scheduled_at=scheduled_at)
        session.add(batch)
    try:
        enqueue_batch_run(batch.id, batch.scheduled_at)
    except Exception as error:  # Redis away: the handoff sweep re-adds overdue batches
        # (``type`` is the event type here: the class name is read off the error)
        log.warning("batch run enqueue failed: %s", error.__class__.__name__,
                    extra={"batch_id": batch.id})
    log.info("batch scheduled", extra={"batch_id": batch.id, "accounts": len(account_ids)})
    return BatchReport(batch=batch, delivery_summary=_empty_summary())


def enqueue_batch_run(batch_id: str, scheduled_at: datetime | None) -> str:
    """Add a batch's run job (also how the handoff sweep re-adds it); returns the add status.

    Job id ``notification-batch-{id}``, priority 5. A null or past schedule runs at once, a
    future one is delayed until then. A live or completed job is left alone
    (``duplicated``), a retained failed one is retried in place (``retried``). Raises when
    the queue is unreachable.
    """
    due_later = scheduled_at is not None and scheduled_at > utcnow()
    result = enqueue(run_batch, BatchRunJob(batch_id=batch_id), job_id=batch_job_id(batch_id),
                     priority=NORMAL_PRIORITY, at=scheduled_at if due_later else None,
                     retry_failed=True)
    return result.status


# -- reading and cancelling ---------------------------------------------------------------
def get_batch(batch_id: str) -> BatchReport | None:
    """A batch with its delivery summary, or None."""
    if not _storable_id(batch_id):
        return None
    with db_session() as session:
        batch = session.get(Batch, batch_id)
        if batch is None:
            return None
        return BatchReport(batch=batch, delivery_summary=delivery_summary(session, batch_id))


def cancel_batch(batch_id: str) -> BatchReport:
    """Cancel a scheduled batch; an already cancelled one is returned as it is.

    The conditional status change is the decision (:class:`BatchNotCancellable` when the
    batch is running or finished, :class:`BatchNotFound` when there is none); removing
    its run job afterwards is best-effort, since the runner checks the status anyway.
    """
    if not _storable_id(batch_id):
        raise BatchNotFound(batch_id)
    with db_session() as session:
        cancelled = transitions.cancel_batch(session, batch_id)
    if cancelled:
        log.info("batch cancelled", extra={"batch_id": batch_id})
        _remove_run_job(batch_id)
    report = get_batch(batch_id)
    if report is None:
        raise BatchNotFound(batch_id)
    if report.batch.status != BatchStatus.CANCELLED.value:
        raise BatchNotCancellable(batch_id, report.batch.status)
    return report


def _remove_run_job(batch_id: str) -> None:
    try:
        removed = queue(ORCHESTRATION_QUEUE).remove(batch_job_id(batch_id))
    except Exception as error:  # cleanup only: the cancelled status already decided
        log.warning("batch job removal failed: %s", type(error).__name__,
                    extra={"batch_id": batch_id})
        return
    if not removed:  # absent (lost, or never added) or active: the runner will skip it
        log.info("no batch job to remove", extra={"batch_id": batch_id})


def _empty_summary() -> dict[str, int]:
    return {outcome.value: 0 for outcome in Outcome}


def delivery_summary(session: Session, batch_id: str) -> dict[str, int]:
    """Outcome → count over the deliveries of the batch's notifications (every outcome
    present, zero when none)."""
    rows = session.exec(select(Delivery.outcome, func.count())
                        .join(Notification, col(Notification.id) == col(Delivery.notification_id))
                        .where(Notification.batch_id == batch_id)
                        .group_by(Delivery.outcome)).all()
    return _empty_summary() | {outcome: count for outcome, count in rows}


def batch_view(report: BatchReport) -> dict[str, Any]:
    """A batch as JSON (the ``/v1/batches`` answers)."""
    batch = report.batch
    return {"id": batch.id, "type": batch.type, "status": batch.status,
            "scheduled_at": batch.scheduled_at.isoformat() if batch.scheduled_at else None,
            "notification_count": batch.notification_count,
            "fully_enqueued": batch.fully_enqueued,
            "delivery_summary": report.delivery_summary}


# -- running -----------------------------------------------------------------------------
@registry.actor(queue=ORCHESTRATION_QUEUE, payload=BatchRunJob)
def run_batch(job: BatchRunJob) -> dict[str, Any]:
    """Turn a persisted batch into notifications (see :func:`run`)."""
    return run(job.batch_id)


def run(batch_id: str) -> dict[str, Any]:
    """Run a batch once; safe to repeat.

    A missing, cancelled or finished batch is left alone. A scheduled one becomes running
    (unless a cancel won the race), a running one (a re-run after a crash) continues; every
    account gets its notification at most once, a missing account is skipped, and the
    batch ends finished with its counts. Returns what it did (the job's return value).
    """
    with db_session() as session:
        batch = session.get(Batch, batch_id)
    if batch is None or batch.status not in UNFINISHED_BATCH:
        return {"batch_id": batch_id, "skipped": batch.status if batch else "missing"}
    _defer_until_due(batch)
    with db_session() as session:
        if not transitions.start_batch(session, batch_id):
            return {"batch_id": batch_id, "skipped": "cancelled before it started"}
    missing = sum(_trigger_chunk(batch, chunk) for chunk in _chunks(batch.account_ids))
    return _finish(batch_id) | {"missing_accounts": missing}


def _defer_until_due(batch: Batch) -> None:
    # a retried or re-added job may be picked up early; a batch never runs before its time
    if batch.status != BatchStatus.SCHEDULED.value or batch.scheduled_at is None:
        return
    wait = batch.scheduled_at - utcnow()
    if wait > timedelta(0):
        raise Defer(wait, reason="batch not due yet")


def _chunks(account_ids: Sequence[str]) -> Iterator[Sequence[str]]:
    for start in range(0, len(account_ids), CHUNK_SIZE):
        yield account_ids[start:start + CHUNK_SIZE]


def _trigger_chunk(batch: Batch, account_ids: Sequence[str]) -> int:
    """Trigger the batch's event for each account; returns how many accounts were missing."""
    missing = 0
    for account_id in account_ids:
        try:
            trigger_event(account_id=account_id, type=batch.type,
                          occurrence=batch_occurrence(batch.id), data=batch.data,
                          batch_id=batch.id)
        except AccountNotFound:
            missing += 1
            log.warning("batch account missing, skipped",
                        extra={"batch_id": batch.id, "account_id": account_id})
    log.info("batch chunk triggered", extra={"batch_id": batch.id,
                                              "accounts": len(account_ids)})
    return missing


def _finish(batch_id: str) -> dict[str, Any]:
    """Mark the batch finished with its notification count and whether every channel job
    was handed to the queue (no delivery still queued without a handoff stamp)."""
    # the stamps of the events just triggered are written behind them: wait for them
    flush_handoff_stamps(timeout_s=STAMPS_WAIT_S)
    with db_session() as session:
        count = session.scalar(select(func.count()).select_from(Notification)
                               .where(Notification.batch_id == batch_id)) or 0
        unhanded = session.scalar(select(exists().where(
            col(Delivery.notification_id) == col(Notification.id),
            col(Notification.batch_id) == batch_id,
            col(Delivery.outcome) == Outcome.QUEUED.value, col(Delivery.queued_at).is_(None))))
        finished = transitions.finish_batch(session, batch_id, notification_count=count,
                                            fully_enqueued=not unhanded)
    log.info("batch finished" if finished else "batch already finished",
             extra={"batch_id": batch_id, "notifications": count,
                    "fully_enqueued": not unhanded})
    return {"batch_id": batch_id, "notification_count": count, "fully_enqueued": not unhanded}
