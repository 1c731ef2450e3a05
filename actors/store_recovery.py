"""Store recovery: the scans that re-drive eSIM issuances no run is moving any more
(docs/sweeps.md#store-recovery).

An issuance can stop between a provider's answer and herald's next write: a worker killed
mid-call, a job Redis lost, a run that used up its attempts with the order ``in_flight``,
a webhook the provider never sent, a customer who never verified. Every
``STORE_RECOVERY_INTERVAL_S`` (and once when the clock or a worker starts)
``recover_store_orders`` runs three scans, each oldest first and at most
``STORE_RECOVERY_LIMIT`` rows:

1. **stalled order scan** — ``in_flight`` or ``reconciliation_required``, or ``pending``
   though paid (its first run lost, or its attempts used up on transient failures), or
   ``issued`` with its ``esim.ready`` notification never triggered (``announced_at``),
   for longer than ``STORE_STALLED_AGE_S``;
2. **webhook fallback check** — ``in_flight`` or ``reconciliation_required`` with a
   provider reference, no webhook since the last ``in_flight`` stamp, stamped longer than
   ``STORE_WEBHOOK_FALLBACK_S`` ago;
3. **verification deadline check** — ``pending_verification`` past its deadline.

Each re-drives a row by adding a store-fulfillment run with the scan's trigger; the queue
then reconciles through the provider (never issues again), and after a verification
deadline fails an order still unverified.

Locking: rows are claimed ``FOR UPDATE SKIP LOCKED`` on PostgreSQL and stamped
(``recovered_at``) in the claim's transaction, committed before any job is added; a row
stamped less than the scan's window ago is not taken again. So two clocks, or a clock and
``herald sweep``, never re-drive the same row twice. SQLite has no row locks: there the
stamp itself is a compare-and-set (``UPDATE … WHERE`` still eligible ``RETURNING id``), and
only the rows it stamped are re-driven.

No live job: a row whose order already has a waiting, delayed, active or paused
store-fulfillment job is left alone (unstamped, so the next run looks again) — that run
will move it. Every run of an order has a job id starting ``{order id}-`` (the payment's
``{id}-issue``, the others ``{id}-{trigger}-{key}``), whoever added it (the payment, a
webhook, an operator, a scan), so one listing of the queue's live job ids answers for
every row of the run; no marker has to be kept in step with the jobs, and nothing is lost
when Redis loses its jobs (then there is nothing live, and the scan re-drives).
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable, Iterable
from datetime import datetime, timedelta
from typing import Any

from pydantic import BaseModel, ConfigDict
from sqlalchemy import ColumnElement, and_, func, or_, update
from sqlmodel import col, select

from actors.queues import esim_store_enabled, registry
from actors.store import Trigger, enqueue_issuance
from herald.db import session as db_session
from herald.queue import JobState, Schedule, enqueue, now_ms, queue
from herald.settings import get_settings
from models.base import utcnow
from models.store import IssuanceState, Order, OrderStatus, StoreOrder

log = logging.getLogger("herald.store_recovery")

#: The queue the runs (and the scan job itself) live on.
STORE_QUEUE = "store-fulfillment"
#: Ledger states in which a job will still run.
LIVE_STATES = (JobState.WAITING, JobState.PAUSED, JobState.ACTIVE, JobState.DELAYED)


@dataclasses.dataclass(frozen=True, kw_only=True)
class RecoveryWindow:
    """What one recovery run looks at: ``now``, each scan's cutoff, and the row cap."""

    now: datetime
    #: In-flight stamps (and recovery stamps of the stalled and deadline scans) before
    #: this are stale.
    stalled_cutoff: datetime
    #: In-flight stamps (and recovery stamps of the fallback check) before this waited
    #: long enough for a webhook.
    fallback_cutoff: datetime
    limit: int

    @classmethod
    def current(cls, now: datetime | None = None) -> RecoveryWindow:
        """The window configured by STORE_STALLED_AGE_S, STORE_WEBHOOK_FALLBACK_S and
        STORE_RECOVERY_LIMIT, at ``now`` (default: the current time)."""
        settings = get_settings()
        now = now or utcnow()
        return cls(now=now,
                   stalled_cutoff=now - timedelta(seconds=settings.store_stalled_age_s),
                   fallback_cutoff=now - timedelta(seconds=settings.store_webhook_fallback_s),
                   limit=settings.store_recovery_limit)


@dataclasses.dataclass(frozen=True)
class Scan:
    """One recovery scan: the trigger its runs carry, which rows it wants, in which order,
    and how long a row it re-drove waits before it may take it again."""

    trigger: Trigger
    wanted: Callable[[RecoveryWindow], list[ColumnElement[bool]]]
    oldest_first: Callable[[], Any]
    rewait_cutoff: Callable[[RecoveryWindow], datetime]

    def eligible(self, window: RecoveryWindow) -> list[ColumnElement[bool]]:
        """The full WHERE: what the scan wants, not re-driven within its window."""
        cutoff = self.rewait_cutoff(window)
        return [*self.wanted(window),
                or_(col(StoreOrder.recovered_at).is_(None), col(StoreOrder.recovered_at) < cutoff)]

    def claim(self, window: RecoveryWindow) -> Any:
        """The rows to re-drive, oldest first, locked with SKIP LOCKED (PostgreSQL)."""
        return (select(StoreOrder).where(*self.eligible(window))
                .order_by(self.oldest_first()).limit(window.limit)
                .with_for_update(skip_locked=True))


def _in_flight_since() -> Any:
    # an in_flight row always has its stamp; updated_at stands in for a row written
    # without one, so no such row is stuck for ever
    return func.coalesce(StoreOrder.in_flight_at, StoreOrder.updated_at)


def _stalled(window: RecoveryWindow) -> list[ColumnElement[bool]]:
    # a paid order still pending lost its first run (or used up its attempts on transient
    # failures); a parked ambiguous one may have no reference for a webhook to name
    # and an issued one whose run ended before its eSIM notification was triggered
    paid = select(Order.id).where(Order.status == OrderStatus.PAID.value)
    return [or_(col(StoreOrder.issuance_state).in_([IssuanceState.IN_FLIGHT.value,
                                               IssuanceState.RECONCILIATION_REQUIRED.value]),
                and_(col(StoreOrder.issuance_state) == IssuanceState.PENDING.value,
                     col(StoreOrder.id).in_(paid)),
                and_(col(StoreOrder.issuance_state) == IssuanceState.ISSUED.value,
                     col(StoreOrder.announced_at).is_(None))),
            _in_flight_since() < window.stalled_cutoff]


def _awaiting_webhook(window: RecoveryWindow) -> list[ColumnElement[bool]]:
    return [col(StoreOrder.issuance_state).in_([IssuanceState.IN_FLIGHT.value,
                                           IssuanceState.RECONCILIATION_REQUIRED.value]),
            col(StoreOrder.provider_order_ref).is_not(None),
            _in_flight_since() < window.fallback_cutoff,
            # a webhook from before the last in_flight stamp says nothing of this call
            or_(col(StoreOrder.webhook_at).is_(None),
                and_(col(StoreOrder.in_flight_at).is_not(None),
                     col(StoreOrder.webhook_at) < col(StoreOrder.in_flight_at)))]


def _verification_overdue(window: RecoveryWindow) -> list[ColumnElement[bool]]:
    return [col(StoreOrder.issuance_state) == IssuanceState.PENDING_VERIFICATION.value,
            col(StoreOrder.verification_deadline) < window.now]


#: The scans, in the order a run takes them: a row two of them want (an old in_flight
#: order with a reference) is taken by the first, and its stamp keeps the second away.
SCANS: tuple[Scan, ...] = (
    Scan(Trigger.STALLED_SCAN, _stalled, _in_flight_since, lambda w: w.stalled_cutoff),
    Scan(Trigger.WEBHOOK_FALLBACK, _awaiting_webhook, _in_flight_since,
         lambda w: w.fallback_cutoff),
    Scan(Trigger.VERIFICATION_DEADLINE, _verification_overdue,
         lambda: StoreOrder.verification_deadline, lambda w: w.stalled_cutoff),
)


@dataclasses.dataclass(frozen=True, kw_only=True)
class RecoveryReport:
    """How many rows each scan re-drove (a run was added), and how many it passed over
    because their order had a live job."""

    stalled_scan: int
    webhook_fallback: int
    verification_deadline: int
    live: int

    @property
    def total(self) -> int:
        """All rows re-driven."""
        return self.stalled_scan + self.webhook_fallback + self.verification_deadline


# -- the live job check ----------------------------------------------------------------------
def live_order_ids(order_ids: Iterable[str]) -> set[str]:
    """Those of ``order_ids`` that have a store-fulfillment job still to run (waiting,
    delayed, active or paused), whatever asked for it.

    Every run's job id starts ``{order id}-`` (see the module's docstring), so each live
    id is cut at each of its hyphens and the pieces looked up: one listing per state,
    whatever the number of rows.
    """
    wanted = set(order_ids)
    if not wanted:
        return set()
    store = queue(STORE_QUEUE)
    live: set[str] = set()
    for state in LIVE_STATES:
        for job_id in store.queries.job_ids(STORE_QUEUE, state, 0, -1):
            cuts = [i for i, char in enumerate(job_id) if char == "-"]
            live.update(job_id[:i] for i in cuts if job_id[:i] in wanted)
    return live


# -- one scan: claim, check, stamp, commit, enqueue --------------------------------------------
def _stamp(session: Any, scan: Scan, window: RecoveryWindow, ids: list[str]) -> list[str]:
    """Stamp ``recovered_at`` on those of ``ids`` that are still eligible, and return
    them (on PostgreSQL the locks make that all of them; on SQLite it is the guard)."""
    if not ids:
        return []
    stamped = session.connection().execute(
        update(StoreOrder).where(col(StoreOrder.id).in_(ids), *scan.eligible(window))
        .values(recovered_at=window.now).returning(col(StoreOrder.id)))
    return [row[0] for row in stamped]


def run_scan(scan: Scan, window: RecoveryWindow) -> tuple[int, int]:
    """Run one scan; returns (rows re-driven, rows passed over for a live job).

    The stamp is committed before any run is added: a crash after the commit leaves the
    rows to the next window, never doubled. A failed add is logged by order id only and
    the row is eligible again once the scan's window has passed.
    """
    with db_session() as session:
        rows = session.exec(scan.claim(window)).all()
        # a Redis that cannot answer fails the scan here, before anything is stamped
        live = live_order_ids(row.id for row in rows)
        stamped = _stamp(session, scan, window, [row.id for row in rows if row.id not in live])
        session.commit()
    run_key = window.now.isoformat()
    for order_id in stamped:
        try:
            enqueue_issuance(order_id, scan.trigger, run_key)
        except Exception as error:  # logged by id only; the row comes back next window
            log.warning("store recovery enqueue failed: %s", type(error).__name__,
                        extra={"order_id": order_id, "trigger": scan.trigger.value})
    if stamped or live:
        log.info("store orders re-driven", extra={"trigger": scan.trigger.value,
                                                  "rows": len(stamped), "live": len(live)})
    return len(stamped), len(live)


def recover_orders(now: datetime | None = None) -> RecoveryReport:
    """Run the three scans once (stalled, webhook fallback, verification deadline) and
    report what each re-drove."""
    window = RecoveryWindow.current(now)
    counts = {scan.trigger: run_scan(scan, window) for scan in SCANS}
    return RecoveryReport(stalled_scan=counts[Trigger.STALLED_SCAN][0],
                          webhook_fallback=counts[Trigger.WEBHOOK_FALLBACK][0],
                          verification_deadline=counts[Trigger.VERIFICATION_DEADLINE][0],
                          live=sum(live for _, live in counts.values()))


# -- the job, its schedule, the sweep and the worker's start -------------------------------
class RecoveryJob(BaseModel):
    """The recovery job carries nothing: it reads the database."""

    model_config = ConfigDict(extra="forbid")


@registry.actor(queue=STORE_QUEUE, payload=RecoveryJob)
def recover_store_orders(job: RecoveryJob) -> dict[str, int]:
    """One recovery run as a job; its return value counts what each scan re-drove."""
    return dataclasses.asdict(recover_orders())


#: The schedule's name; the startup jobs' ids start ``startup:store-recovery:``.
SCHEDULE_NAME = "store-recovery"

registry.schedule(Schedule(name=SCHEDULE_NAME, actor=recover_store_orders,
                           every=timedelta(seconds=get_settings().store_recovery_interval_s),
                           run_at_start=True, feature_gate=esim_store_enabled))
registry.sweep(SCHEDULE_NAME, lambda: recover_orders().total)


def start_store_recovery() -> None:
    """Add one recovery job now (a worker calls it as it starts), when FEATURE_ESIM_STORE
    is on; raises whatever the enqueue raises, so a start that cannot schedule recovery
    fails instead of running without it."""
    if not get_settings().feature_esim_store:
        return
    enqueue(recover_store_orders, {}, job_id=f"startup:{SCHEDULE_NAME}:{now_ms()}")
