"""The handoff reconciliation sweep (docs/sweeps.md).

Rows are persisted first and enqueued second, so a crash between the two, a lost Redis
job or an abandoned send claim can leave a row that no job will ever move. Every minute
(and once when the clock starts) ``reconcile_handoffs`` re-drives, oldest first and at
most ``HANDOFF_SWEEP_LIMIT`` rows per kind:

1. email/SMS/push deliveries that are ``queued``, or ``sending`` with no live claim (older
   than 60 s, or released by a recorded retryable failure), and whose handoff stamp is
   missing or older than the handoff age (15 minutes); those quiet hours hold are taken
   apart (a cap of their own) and their job comes back delayed to the hold's end;
2. unfinished batches: a scheduled one created and due more than the age ago, a running
   one whose run started more than the age ago (never a healthy future batch);
3. unprocessed callback receipts whose enqueue stamp is missing or older than the age.

Rows are claimed with ``FOR UPDATE SKIP LOCKED`` on PostgreSQL, so overlapping sweeps
never take the same row; deliveries and receipts are stamped before their job is added,
and every job id is deterministic, so an overlapping handoff is a no-op. Outcomes and
claims are never touched: the channel worker decides again, so a sent, terminal or
suppressed delivery is never re-sent, and a retained completed job is left alone. A
failed re-enqueue is logged by id only and the row stays eligible.

A :class:`Scope` limits a run to the rows of some accounts: ``herald demo`` repairs
only what it made itself, never a user's own rows in the same database.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable, Collection, Sequence
from datetime import datetime, timedelta
from typing import Any

from pydantic import BaseModel, ConfigDict
from sqlalchemy import ColumnElement, and_, not_, or_
from sqlmodel import Session, col, select

from actors.batches import enqueue_batch_run
from actors.callbacks import enqueue_normalisation
from actors.notifications import CHANNEL_QUEUES, enqueue_delivery
from actors.queues import registry
from herald.db import session as db_session
from herald.queue import NORMAL_PRIORITY, Schedule
from herald.settings import get_settings
from models.base import queue_now, utcnow
from models.batches import UNFINISHED_BATCH, Batch, BatchStatus
from models.callbacks import CallbackReceipt, stamp_receipts
from models.notifications import (
    CLAIM_STALE_AFTER,
    Delivery,
    Notification,
    Outcome,
    stamp_handoffs,
)

log = logging.getLogger("herald.handoffs")


@dataclasses.dataclass(frozen=True, kw_only=True)
class SweepReport:
    """How many rows of each kind one sweep re-drove (re-enqueue attempted), and how many
    of those had lost their job (a new job was added or a failed one retried)."""

    deliveries: int
    batches: int
    receipts: int
    recreated: int

    @property
    def total(self) -> int:
        """All rows re-driven."""
        return self.deliveries + self.batches + self.receipts


@dataclasses.dataclass(frozen=True)
class Scope:
    """The rows of some accounts only: their notifications' deliveries, the receipts about
    those deliveries' provider messages, and the batches named."""

    account_ids: frozenset[str]
    batch_ids: frozenset[str] = frozenset()

    @classmethod
    def of(cls, account_ids: Collection[str], batch_ids: Collection[str] = ()) -> Scope:
        """The scope of these accounts and batches."""
        return cls(frozenset(account_ids), frozenset(batch_ids))

    def deliveries(self) -> ColumnElement[bool]:
        """True for a delivery of a notification to one of the accounts."""
        return col(Delivery.notification_id).in_(
            select(col(Notification.id)).where(col(Notification.account_id).in_(self.account_ids)))

    def receipts(self) -> ColumnElement[bool]:
        """True for a receipt about a message sent for one of those deliveries."""
        return col(CallbackReceipt.provider_message_id).in_(
            select(Delivery.provider_message_id)
            .where(self.deliveries(), col(Delivery.provider_message_id).is_not(None)))

    def batches(self) -> ColumnElement[bool]:
        """True for one of the batches named."""
        return col(Batch.id).in_(self.batch_ids)


@dataclasses.dataclass(frozen=True, kw_only=True)
class Window:
    """What one sweep run looks at: ``now``, the handoff cutoff, the row cap, and the
    :class:`Scope` (None: every row)."""

    now: datetime
    cutoff: datetime
    limit: int
    scope: Scope | None = None

    @classmethod
    def current(cls, now: datetime | None = None, age: timedelta | None = None,
                scope: Scope | None = None) -> Window:
        """The window configured by HANDOFF_SWEEP_AGE_S (unless ``age`` is given) and
        HANDOFF_SWEEP_LIMIT."""
        settings = get_settings()
        now = now or utcnow()
        age = age or timedelta(seconds=settings.handoff_sweep_age_s)
        return cls(now=now, cutoff=now - age, limit=settings.handoff_sweep_limit, scope=scope)

    def within(self, condition: Callable[[Scope], ColumnElement[bool]]) -> list[Any]:
        """The scope's ``condition`` as a WHERE criterion (none when every row is in)."""
        return [] if self.scope is None else [condition(self.scope)]


# -- what each kind selects (docs/sweeps.md), each one query on a partial index ----------
def stale_deliveries(window: Window, *, held: bool = False) -> Any:
    """Deliveries to hand off again, oldest first, locked with SKIP LOCKED: those quiet
    hours hold past ``window.now`` when ``held``, else the others (each kind has its own
    cap, so a night's held deliveries never crowd out a lost one)."""
    no_live_claim = or_(col(Delivery.outcome) == Outcome.QUEUED.value,
                        col(Delivery.claimed_at).is_(None),
                        col(Delivery.claimed_at) < window.now - CLAIM_STALE_AFTER)
    held_now = col(Delivery.not_before) > window.now
    return (select(Delivery)
            # the literal IN matches the partial index ix_deliveries_pending
            .where(col(Delivery.outcome).in_([Outcome.QUEUED.value, Outcome.SENDING.value]),
                   col(Delivery.channel).in_(list(CHANNEL_QUEUES)), no_live_claim,
                   or_(col(Delivery.queued_at).is_(None), col(Delivery.queued_at) < window.cutoff),
                   held_now if held else or_(col(Delivery.not_before).is_(None), not_(held_now)),
                   *window.within(Scope.deliveries))
            .order_by(col(Delivery.created_at)).limit(window.limit)
            .with_for_update(skip_locked=True))


def _hand_off_delivery(delivery: Delivery) -> str:
    """Add a delivery's channel job again with the single-add helper at normal urgency:
    a missing job comes back at priority 5 — delayed to the end of its quiet-hours hold
    when it has one, so nothing is sent early — a retained failed one is retried in
    place, a live or completed one stays."""
    delay = None
    if delivery.not_before is not None:
        delay = delivery.not_before - queue_now()
    return enqueue_delivery(delivery, NORMAL_PRIORITY, delay=delay)


def overdue_batches(window: Window) -> Any:
    """Unfinished batches whose run is overdue, oldest first, locked with SKIP LOCKED."""
    scheduled_overdue = and_(col(Batch.status) == BatchStatus.SCHEDULED.value,
                             col(Batch.created_at) < window.cutoff,
                             or_(col(Batch.scheduled_at).is_(None),
                                 col(Batch.scheduled_at) < window.cutoff))
    running_overdue = and_(col(Batch.status) == BatchStatus.RUNNING.value,
                           col(Batch.started_at) < window.cutoff)
    return (select(Batch)
            .where(col(Batch.status).in_(list(UNFINISHED_BATCH)),
                   or_(scheduled_overdue, running_overdue), *window.within(Scope.batches))
            .order_by(col(Batch.created_at)).limit(window.limit)
            .with_for_update(skip_locked=True))


def stale_receipts(window: Window) -> Any:
    """Unprocessed callback receipts to queue again, oldest received first, locked."""
    return (select(CallbackReceipt)
            .where(col(CallbackReceipt.processed_at).is_(None),
                   or_(col(CallbackReceipt.queued_at).is_(None),
                       col(CallbackReceipt.queued_at) < window.cutoff),
                   *window.within(Scope.receipts))
            .order_by(col(CallbackReceipt.received_at)).limit(window.limit)
            .with_for_update(skip_locked=True))


# -- one kind's run: claim, stamp, commit, enqueue ------------------------------------------
#: Add statuses meaning the row's job was gone (or failed) and is back.
RECREATED = frozenset({"added", "retried"})


def _redrive(kind: str, query: Any, enqueue: Callable[[Any], str], *,
             stamp: Callable[[Session, list[str]], object] | None) -> tuple[int, int]:
    """Claim the rows ``query`` selects and re-add each one's job; returns (rows, jobs
    re-created).

    With a ``stamp`` the rows are stamped and the transaction committed before any job
    is added (a crash after the commit leaves them for the next window, never doubled).
    Without one (batches, which carry no stamp) the row locks are held while the jobs
    are added, so an overlapping sweep skips them.
    """
    recreated = 0
    with db_session() as session:
        rows: Sequence[Any] = session.exec(query).all()
        if stamp is not None:
            stamp(session, [row.id for row in rows])
            session.commit()
        for row in rows:
            try:
                recreated += enqueue(row) in RECREATED
            except Exception as error:  # logged by id only; the row stays eligible
                log.warning("handoff re-enqueue failed: %s", type(error).__name__,
                            extra={f"{kind}_id": row.id})
    if rows:
        log.info("handoffs re-driven", extra={"kind": kind, "rows": len(rows),
                                              "recreated": recreated})
    return len(rows), recreated


def reconcile_handoffs(now: datetime | None = None, *, age: timedelta | None = None,
                       scope: Scope | None = None) -> SweepReport:
    """Run the sweep once: deliveries, then overdue batches, then callback receipts.

    ``age`` overrides HANDOFF_SWEEP_AGE_S (the demo's simulated loss uses a short one);
    with a ``scope`` no row outside it is read, stamped or re-driven.
    """
    window = Window.current(now, age, scope)
    def stamp(session: Session, ids: list[str]) -> None:
        stamp_handoffs(session, ids, now=window.now)

    deliveries = _redrive("delivery", stale_deliveries(window), _hand_off_delivery,
                          stamp=stamp)
    held = _redrive("delivery", stale_deliveries(window, held=True), _hand_off_delivery,
                    stamp=stamp)
    batches = _redrive("batch", overdue_batches(window),
                       lambda batch: enqueue_batch_run(batch.id, batch.scheduled_at),
                       stamp=None)
    receipts = _redrive("receipt", stale_receipts(window), enqueue_normalisation,
                        stamp=lambda session, ids: stamp_receipts(session, ids, now=window.now))
    return SweepReport(deliveries=deliveries[0] + held[0], batches=batches[0],
                       receipts=receipts[0],
                       recreated=deliveries[1] + held[1] + batches[1] + receipts[1])


# -- the job, its schedule and the CLI entry --------------------------------------------------
class SweepJob(BaseModel):
    """The sweep job carries nothing: it reads the database."""

    model_config = ConfigDict(extra="forbid")


@registry.actor(queue="notification-orchestration", payload=SweepJob)
def reconcile_handoffs_job(job: SweepJob) -> dict[str, int]:
    """One sweep run as a job on the orchestration queue."""
    return dataclasses.asdict(reconcile_handoffs())  # the job's return value


registry.schedule(Schedule(name="reconcile-handoffs", actor=reconcile_handoffs_job,
                           every=timedelta(seconds=get_settings().handoff_sweep_interval_s),
                           run_at_start=True))
registry.sweep("handoffs", lambda: reconcile_handoffs().total)
