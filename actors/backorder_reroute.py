"""The ``backorder-reroute`` queue: move a back-ordered line to its alternate supplier
(docs/suppliers.md#backorder-reroute).

Jobs are added by the inbound acknowledgment processing (an 855 that back-orders a line)
and by an operator (``POST /admin/backorders/{lineItemId}/reroute``), through
:func:`enqueue_backorder_reroute`, deduplicated by
``reroute:{lineItemId}:{originalSupplierId}``.

The worker decides in five steps: the line must exist (else the job is retried); a line
already moved to a reroute dispatch, or already reported as a dead end for this supplier,
is discarded; with no usable alternate the line is ``backorder_no_alternate`` and an
operator is told once — a business outcome, the job completes; otherwise one transaction
writes the reroute dispatch, moves the line to it, records ``BACKORDER_REROUTED`` and puts
the dispatch's job in the outbox, which is relayed at once.
"""

from __future__ import annotations

import dataclasses
import logging
from typing import Any

from prometheus_client import Counter
from sqlmodel import Session, col, select

from actors import queues as _queues  # noqa: F401  (declares the queue)
from actors.email_retry import send_admin_alert
from actors.purchasing import relay_outbox
from actors.queues import registry
from herald.db import session as db_session
from herald.queue import EnqueueResult, Permanent, enqueue
from models.audit import ADMIN_ACTOR, record_audit
from models.purchasing import (
    DispatchLine,
    EventType,
    LineStatus,
    PurchaseOrderLine,
    Supplier,
    SupplierDispatch,
    SupplierMapping,
    add_outbox,
    append_event,
    dispatch_job,
    has_event,
    link_lines,
    roll_up_order,
    set_line_status,
)
from models.supplier_jobs import (
    BackorderRerouteJob,
    dispatch_dedup_id,
    reroute_dedup_id,
    reroute_suffix,
)

log = logging.getLogger("herald.suppliers")

QUEUE = "backorder-reroute"

#: What became of each reroute job: rerouted, no_alternate or discarded.
BACKORDER_REROUTES = Counter("backorder_reroutes", "Back-ordered lines by what the reroute did.",
                             ["outcome"])

#: Statuses of a line the reroute may still move (the others are its own outcomes).
_OPEN_LINE = frozenset(LineStatus) - {LineStatus.REROUTED, LineStatus.BACKORDER_NO_ALTERNATE}


@dataclasses.dataclass(frozen=True)
class _Line:
    """A back-ordered line with what the decision reads: its mappings' suppliers in
    candidate order and every dispatch it was part of."""

    line: PurchaseOrderLine
    alternates: list[Supplier]
    dispatches: list[SupplierDispatch]


@registry.actor(queue=QUEUE, payload=BackorderRerouteJob)
def reroute_backorder(job: BackorderRerouteJob) -> dict[str, Any]:
    """Decide what becomes of the back-ordered line ``job.line_item_id``, at most once per
    (line, original supplier): rerouted to one alternate, reported once as having none,
    or discarded when either already happened. A missing line raises (retried)."""
    line_id, original = str(job.line_item_id), str(job.original_supplier_id)
    with db_session() as session:
        loaded = _load(session, line_id, str(job.order_id))
        if any(dispatch.is_reroute for dispatch in loaded.dispatches):
            return _discarded("already_rerouted")
        if has_event(session, EventType.BACKORDER_NO_ALTERNATE, line_item_id=line_id,
                     supplier_id=original):
            return _discarded("already_no_alternate")
        alternate, why = _alternate(session, loaded, job)
        if alternate is None:
            return _no_alternate(session, loaded.line, job, why)
        return _reroute(session, loaded.line, alternate, job)


def _load(session: Session, line_id: str, order_id: str) -> _Line:
    line = session.get(PurchaseOrderLine, line_id)
    if line is None:
        # the reroute may have been enqueued by a transaction not yet visible: retried
        raise LookupError(f"purchase order line {line_id} does not exist")
    if line.order_id != order_id:
        raise Permanent(f"line {line_id} is not a line of order {order_id}")
    alternates = list(session.exec(
        select(Supplier)
        .join(SupplierMapping, col(SupplierMapping.supplier_id) == col(Supplier.id))
        .where(col(SupplierMapping.catalog_item_id) == line.catalog_item_id,
               col(SupplierMapping.preferred).is_(False))
        .order_by(col(Supplier.created_at), col(Supplier.id))))
    dispatches = list(session.exec(
        select(SupplierDispatch)
        .join(DispatchLine, col(DispatchLine.dispatch_id) == col(SupplierDispatch.id))
        .where(col(DispatchLine.line_id) == line_id)))
    return _Line(line, alternates, dispatches)


def _alternate(session: Session, loaded: _Line, job: BackorderRerouteJob,
               ) -> tuple[Supplier | None, str]:
    """The supplier to reroute to, or None and why there is none. The job's alternate
    when it names one, else the first active alternate mapping that is not the supplier
    that back-ordered the line."""
    original = str(job.original_supplier_id)
    if job.alternate_supplier_id is None:
        usable = [s for s in loaded.alternates if s.active and s.id != original]
        return (usable[0], "") if usable else (None, "no active alternate mapped")
    candidate = session.get(Supplier, str(job.alternate_supplier_id))
    if candidate is None:
        return None, "the alternate supplier does not exist"
    if not candidate.active:
        return None, "the alternate supplier is inactive"
    if candidate.id == original:
        return None, "the alternate is the supplier that back-ordered the line"
    if all(supplier.id != candidate.id for supplier in loaded.alternates):
        # without a mapping there is no SKU to order the item by
        return None, "the alternate supplier has no mapping for the item"
    return candidate, ""


def _no_alternate(session: Session, line: PurchaseOrderLine, job: BackorderRerouteJob,
                  why: str) -> dict[str, Any]:
    """The dead end: line status and event in one transaction, then the metric and one
    operator email (the event's uniqueness keeps a concurrent run from a second one)."""
    original = str(job.original_supplier_id)
    set_line_status(session, [line.id], to=LineStatus.BACKORDER_NO_ALTERNATE, expect=_OPEN_LINE)
    payload = {"reason": job.reason, "ackCode": job.ack_code, "why": why}
    if not append_event(session, line.order_id, EventType.BACKORDER_NO_ALTERNATE, payload,
                        line_item_id=line.id, supplier_id=original):
        session.rollback()
        return _discarded("already_no_alternate")
    session.commit()
    BACKORDER_REROUTES.labels(outcome="no_alternate").inc()
    _alert_no_alternate(line, job, why)
    return {"outcome": "no_alternate", "reason": why}


def _alert_no_alternate(line: PurchaseOrderLine, job: BackorderRerouteJob, why: str) -> None:
    # the dead end is committed: a failing alert must not turn it into a retry, which
    # would find the event and never alert at all
    try:
        send_admin_alert(
            f"Back-ordered line {line.id} has no alternate supplier",
            f"Order {line.order_id}, line {line.id} (catalog item {line.catalog_item_id}) "
            f"was back-ordered by supplier {job.original_supplier_id} "
            f"({job.ack_code or 'no code'}: {job.reason or 'no reason given'}) and cannot "
            f"be rerouted: {why}.",
            idempotency_key=f"backorder-no-alternate:{line.id}:{job.original_supplier_id}")
    except Exception as error:  # logged with the ids an operator needs
        log.error("no-alternate alert not sent: %s: %s", type(error).__name__, error,
                  extra={"line_id": line.id, "supplier_id": str(job.original_supplier_id)})


def _reroute(session: Session, line: PurchaseOrderLine, alternate: Supplier,
             job: BackorderRerouteJob) -> dict[str, Any]:
    """One transaction: the reroute dispatch, the line linked to it and moved, the event,
    the dispatch's job in the outbox, the order rolled up (pending again until the
    reroute's dispatch ends); then the outbox entry is relayed. The line's
    previous dispatch is not touched: it records what that supplier was sent."""
    original = str(job.original_supplier_id)
    dispatch = SupplierDispatch(order_id=line.order_id, supplier_id=alternate.id,
                                supplier_type=alternate.type, is_reroute=True,
                                reroute_of_dispatch_id=line.dispatch_id)
    session.add(dispatch)
    session.flush()
    link_lines(session, dispatch.id, [line.id])
    set_line_status(session, [line.id], to=LineStatus.REROUTED, expect=_OPEN_LINE,
                    dispatch_id=dispatch.id, supplier_id=alternate.id)
    payload = {"reason": job.reason, "ackCode": job.ack_code, "dispatchId": dispatch.id,
               "rerouteOfDispatchId": dispatch.reroute_of_dispatch_id,
               "alternateSupplierId": alternate.id, "supplierType": alternate.type}
    if not append_event(session, line.order_id, EventType.BACKORDER_REROUTED, payload,
                        line_item_id=line.id, supplier_id=original):
        session.rollback()  # another run rerouted it first
        return _discarded("already_rerouted")
    entry = add_outbox(session, dispatch.id, dispatch_job(session, dispatch.id)
                       .model_dump(mode="json"),
                       dispatch_dedup_id(line.order_id, alternate.type, reroute_suffix(line.id)))
    # the order waits for the reroute's dispatch like any other pending one
    roll_up_order(session, line.order_id)
    session.commit()
    BACKORDER_REROUTES.labels(outcome="rerouted").inc()
    relayed = relay_outbox(limit=1, ids=[entry.id])
    return {"outcome": "rerouted", "dispatchId": dispatch.id, "relayed": relayed.total == 1}


def _discarded(reason: str) -> dict[str, Any]:
    BACKORDER_REROUTES.labels(outcome="discarded").inc()
    return {"outcome": "discarded", "reason": reason}


def enqueue_backorder_reroute(payload: BackorderRerouteJob | dict[str, Any]) -> EnqueueResult:
    """Add the reroute's job (validated first; nothing is added when it fails), held by
    ``reroute:{lineItemId}:{originalSupplierId}`` until it ends: a second reroute of
    the same back-order while one is live is reported ``deduplicated``."""
    job = (payload if isinstance(payload, BackorderRerouteJob)
           else BackorderRerouteJob.model_validate(payload))
    return enqueue(reroute_backorder, job,
                   dedup_id=reroute_dedup_id(str(job.line_item_id), str(job.original_supplier_id)))


class LineNotFound(LookupError):
    """No purchase order line has that id."""


class NotBackordered(ValueError):
    """The line is not back-ordered, so there is nothing to reroute."""


def request_reroute(line_id: str, *, alternate_supplier_id: str | None = None,
                    reason: str | None = None) -> EnqueueResult:
    """An operator's reroute of a back-ordered line (away from the supplier it is with
    now, to ``alternate_supplier_id`` or the worker's pick), written to the audit log.
    Raises :class:`LineNotFound`, :class:`NotBackordered`, or pydantic's
    ValidationError for a bad alternate id; nothing is enqueued then."""
    with db_session() as session:
        line = session.get(PurchaseOrderLine, line_id)
        if line is None:
            raise LineNotFound(f"purchase order line {line_id} does not exist")
        if line.status != LineStatus.BACKORDERED.value:
            raise NotBackordered(f"line {line_id} is {line.status}, not backordered")
        job = BackorderRerouteJob.model_validate({
            "orderId": line.order_id, "lineItemId": line.id,
            "originalSupplierId": line.supplier_id,
            "alternateSupplierId": alternate_supplier_id,
            "reason": reason or "Rerouted by an operator"})
        result = enqueue_backorder_reroute(job)
        record_audit(session, actor=ADMIN_ACTOR, action="backorder.reroute",
                     target=f"line:{line.id}", queue=QUEUE, job_id=result.job_id,
                     count=int(result.status == "added"),
                     detail={"status": result.status, **job.model_dump(mode="json")})
    return result
