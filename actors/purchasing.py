"""Purchase orders reach the ``supplier-dispatch`` queue: placement with an outbox, the
outbox relay and the stale-dispatch sweep (docs/suppliers.md#the-outbox,
docs/suppliers.md#the-stale-dispatch-sweep).

- :func:`place_and_relay` commits an order with its dispatches' jobs in the outbox, then
  relays those entries at once, so the normal path waits for nothing; a repeat of an
  order (the same restaurant, number and lines) finds it instead.
- :func:`relay_outbox` adds the jobs of unrelayed entries (whatever left them: a request
  killed between its commit and its enqueue, Redis away at that moment). The clock runs
  it every :data:`RELAY_INTERVAL` and once at its start.
- :func:`sweep_stale_dispatches` re-adds the job of a dispatch still ``pending`` after
  DISPATCH_STALE_AFTER_S whose entry was relayed (or that has none): a job Redis lost,
  a job that ended without moving it. Every :data:`STALE_SWEEP_INTERVAL`.

Both add jobs under the dispatch's dedup id, so a job still live for it makes the add a
no-op (``deduplicated``); the dispatch worker also skips a dispatch already submitted.
Their schedules run on ``backorder-reroute`` (the ``worker-suppliers`` line runs it):
they only touch PostgreSQL and Redis, and must not wait behind a supplier's upload.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Collection, Iterable
from datetime import datetime, timedelta
from typing import Any

from pydantic import BaseModel, ConfigDict
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError
from sqlalchemy.exc import IntegrityError
from sqlmodel import Session, col, select

from actors.queues import registry
from actors.supplier_dispatch import document_of, enqueue_supplier_dispatch
from herald.db import session as db_session
from herald.queue import Schedule
from herald.settings import get_settings
from models.base import utcnow
from models.purchasing import (
    DispatchOutbox,
    DispatchStatus,
    NewPurchaseOrder,
    PlacementError,
    PurchaseOrder,
    SupplierDispatch,
    dispatch_job,
    dispatch_lines,
    find_placed_order,
    order_outbox,
    place_purchase_order,
)
from models.supplier_jobs import SupplierDispatchJob, dispatch_dedup_id, reroute_suffix
from providers.suppliers import SupplierType
from providers.x12 import problem_850

log = logging.getLogger("herald.suppliers")

#: The queue the relay and sweep jobs run on.
SWEEP_QUEUE = "backorder-reroute"
#: How often the clock relays the outbox (a safety net: a request relays its own entries).
RELAY_INTERVAL = timedelta(seconds=5)
#: Most entries one relay run takes.
RELAY_LIMIT = 100
#: How often the clock sweeps stale dispatches.
STALE_SWEEP_INTERVAL = timedelta(minutes=1)
#: Most dispatches one sweep run takes.
STALE_SWEEP_LIMIT = 200
#: Errors that mean Redis cannot be reached: the rest of a run would fail the same way.
_REDIS_AWAY = (RedisConnectionError, RedisTimeoutError)


@dataclasses.dataclass
class EnqueueCounts:
    """What one relay or sweep run did: jobs added, adds that found a live job holding the
    dedup id, adds that failed."""

    added: int = 0
    deduplicated: int = 0
    failed: int = 0

    def count(self, status: str) -> None:
        """Count one add by its enqueue status (``duplicated`` counts as deduplicated)."""
        if status in ("deduplicated", "duplicated"):
            self.deduplicated += 1
        else:
            self.added += 1

    @property
    def total(self) -> int:
        """Entries or dispatches handed to the queue (added or already there)."""
        return self.added + self.deduplicated


# -- placement ----------------------------------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class Placement:
    """The order a placement stands for, and whether this placement wrote it."""

    order_id: str
    created: bool


def place_and_relay(new: NewPurchaseOrder) -> Placement:
    """Place the order (rows and outbox entries in one transaction, see
    :func:`models.purchasing.place_purchase_order`), commit, then relay this order's
    entries at once.

    A restaurant's order numbers are unique (docs/suppliers.md#purchase-orders): when it
    already has this order with the same lines, that order is the answer (``created``
    False) and nothing is written or queued, however many requests place it at once;
    with other lines, :class:`~models.purchasing.OrderNumberTaken`. A placement that
    fails raises (PlacementError, a ValidationError) and writes nothing; so does an order
    a Sysco supplier's 850 could not carry (:func:`refuse_unwritable_850`). A relay that
    fails after the commit is logged, never raised: the order stands and the clock's
    relay adds its jobs."""
    try:
        with db_session() as session:
            existing = find_placed_order(session, new)
            if existing is not None:
                return Placement(existing, created=False)
            order = place_purchase_order(session, new)
            entries = order_outbox(session, order.id)
            refuse_unwritable_850(order, entries)
            order_id = order.id
            entry_ids = [entry.id for entry in entries]
    except IntegrityError:
        # a concurrent placement of the same number committed first (the unique index
        # decided): answer with its order, or refuse other lines
        with db_session() as session:
            existing = find_placed_order(session, new)
        if existing is None:
            raise
        return Placement(existing, created=False)
    try:
        relay_outbox(limit=len(entry_ids), ids=entry_ids)
    except Exception as error:  # the order is committed; the clock's relay adds its jobs
        log.warning("relay after placement failed: %s", type(error).__name__,
                    extra={"order_id": order_id})
    return Placement(order_id, created=True)


def refuse_unwritable_850(order: PurchaseOrder, entries: Iterable[DispatchOutbox]) -> None:
    """Raise PlacementError when a Sysco dispatch of ``order`` (its outbox ``entries``)
    could not be written as an X12 850 (an order number with ``*``, a unit with no X12
    code…): the writer's own verdict (:func:`providers.x12.problem_850`) on the very
    document the dispatch would send (its job, as the outbox holds it), asked at
    placement rather than met as a permanent failure in the worker."""
    for entry in entries:
        if entry.payload.get("supplierType") != SupplierType.SYSCO.value:
            continue
        job = SupplierDispatchJob.model_validate(entry.payload)
        problem = problem_850(document_of(job, order))
        if problem is not None:
            raise PlacementError(f"supplier {job.supplier_id} (sysco) cannot be sent "
                                 f"this order as X12: {problem}")


# -- the relay ----------------------------------------------------------------------------------
def _unrelayed(limit: int, ids: Collection[str] | None) -> Any:
    """Unrelayed entries, oldest first, locked with SKIP LOCKED (PostgreSQL): two relays
    at once never take the same entry, and neither waits for the other."""
    query = select(DispatchOutbox).where(col(DispatchOutbox.relayed_at).is_(None))
    if ids is not None:
        query = query.where(col(DispatchOutbox.id).in_(list(ids)))
    return (query.order_by(col(DispatchOutbox.created_at), col(DispatchOutbox.id))
            .limit(limit).with_for_update(skip_locked=True))


def relay_outbox(limit: int = RELAY_LIMIT, ids: Collection[str] | None = None
                 ) -> EnqueueCounts:
    """Add the job of each unrelayed outbox entry (at most ``limit``, oldest first; only
    those of ``ids`` when given) and stamp it ``relayed_at``.

    Each entry is enqueued first and stamped after, in the transaction that claimed it,
    committed at the end: a crash before the commit relays it again, which its dedup id
    (and the worker's own check) makes harmless. An add that fails leaves the entry
    unrelayed with ``tries`` + 1 and ``last_error``; once Redis cannot be reached, the
    rest of the run is left for the next one."""
    counts = EnqueueCounts()
    if ids is not None and not ids:
        return counts
    with db_session() as session:
        for entry in session.exec(_unrelayed(limit, ids)).all():
            try:
                result = enqueue_supplier_dispatch(entry.payload, dedup_id=entry.dedup_id)
            except Exception as error:
                counts.failed += 1
                entry.tries += 1
                entry.last_error = f"{type(error).__name__}: {error}"[:500]
                session.add(entry)
                log.warning("outbox relay failed: %s", type(error).__name__,
                            extra={"dispatch_id": entry.dispatch_id, "tries": entry.tries})
                if isinstance(error, _REDIS_AWAY):
                    break
                continue
            counts.count(result.status)
            entry.relayed_at = utcnow()
            session.add(entry)
    if counts.added or counts.deduplicated or counts.failed:
        log.info("outbox relayed", extra=dataclasses.asdict(counts))
    return counts


# -- the stale-dispatch sweep -----------------------------------------------------------------
def _stale(cutoff: datetime, limit: int) -> Any:
    """Pending dispatches created before ``cutoff`` whose outbox entry was relayed (or that
    have none: the relay owns the others), oldest first, locked with SKIP LOCKED."""
    unrelayed = select(DispatchOutbox.dispatch_id).where(
        col(DispatchOutbox.relayed_at).is_(None))
    return (select(SupplierDispatch)
            .where(SupplierDispatch.status == DispatchStatus.PENDING.value,
                   col(SupplierDispatch.created_at) < cutoff,
                   col(SupplierDispatch.id).not_in(unrelayed))
            .order_by(col(SupplierDispatch.created_at), col(SupplierDispatch.id))
            .limit(limit).with_for_update(skip_locked=True))


def dispatch_dedup_of(session: Session, dispatch: SupplierDispatch) -> str:
    """The dedup id a dispatch's job is held by: ``dispatch:{orderId}:{supplierType}``,
    plus ``:reroute:{lineItemId}`` for a reroute's dispatch (it carries one line)."""
    suffix = None
    if dispatch.is_reroute:
        lines = dispatch_lines(session, dispatch.id)
        suffix = reroute_suffix(lines[0].id) if lines else None
    return dispatch_dedup_id(dispatch.order_id, dispatch.supplier_type, suffix)


def _requeue(session: Session, dispatches: Iterable[SupplierDispatch],
             counts: EnqueueCounts) -> None:
    for dispatch in dispatches:
        try:
            result = enqueue_supplier_dispatch(dispatch_job(session, dispatch.id),
                                               dedup_id=dispatch_dedup_of(session, dispatch))
        except Exception as error:  # logged by id; the next sweep looks again
            counts.failed += 1
            log.warning("stale dispatch not re-enqueued: %s", type(error).__name__,
                        extra={"dispatch_id": dispatch.id})
            if isinstance(error, _REDIS_AWAY):
                return
            continue
        counts.count(result.status)


def sweep_stale_dispatches(now: datetime | None = None,
                           limit: int = STALE_SWEEP_LIMIT) -> EnqueueCounts:
    """Re-add the job of every dispatch still ``pending`` DISPATCH_STALE_AFTER_S after it
    was created (at most ``limit``, oldest first), unless its outbox entry is still
    unrelayed. A live job holding its dedup id makes the add a no-op (counted
    ``deduplicated``); a submitted, confirmed or failed dispatch is never taken. The rows
    stay locked while their jobs are added, so two sweeps never take the same one."""
    cutoff = (now or utcnow()) - timedelta(seconds=get_settings().dispatch_stale_after_s)
    counts = EnqueueCounts()
    with db_session() as session:
        _requeue(session, session.exec(_stale(cutoff, limit)).all(), counts)
    if counts.added or counts.failed:
        log.info("stale dispatches re-enqueued", extra=dataclasses.asdict(counts))
    return counts


# -- the jobs, their schedules and the sweeps ---------------------------------------------------
class SweepJob(BaseModel):
    """The relay and sweep jobs carry nothing: they read the database."""

    model_config = ConfigDict(extra="forbid")


@registry.actor(queue=SWEEP_QUEUE, payload=SweepJob)
def relay_dispatch_outbox(job: SweepJob) -> dict[str, int]:
    """One relay run as a job; its return value counts what it did."""
    return dataclasses.asdict(relay_outbox())


@registry.actor(queue=SWEEP_QUEUE, payload=SweepJob)
def sweep_stale_dispatches_job(job: SweepJob) -> dict[str, int]:
    """One stale-dispatch sweep as a job; its return value counts what it did."""
    return dataclasses.asdict(sweep_stale_dispatches())


registry.schedule(Schedule(name="relay-dispatch-outbox", actor=relay_dispatch_outbox,
                           every=RELAY_INTERVAL, run_at_start=True))
registry.schedule(Schedule(name="stale-dispatches", actor=sweep_stale_dispatches_job,
                           every=STALE_SWEEP_INTERVAL, run_at_start=True))
registry.sweep("supplier-outbox", lambda: relay_outbox().total)
registry.sweep("supplier-stale-dispatches", lambda: sweep_stale_dispatches().total)
