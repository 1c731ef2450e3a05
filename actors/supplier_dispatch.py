"""The ``supplier-dispatch`` queue: transmit one order to one supplier
(docs/suppliers.md#the-dispatch-worker).

Jobs are added by the outbox relay (an order's dispatches, a reroute's) and by the
stale-dispatch sweep, always through :func:`enqueue_supplier_dispatch`: deduplicated by
``dispatch:{orderId}:{supplierType}`` (plus a reroute's suffix), in the group of their
supplier type, so Sysco's uploads run one at a time across every worker while the
other types use the rest of the queue's slots.

The ``supplier_dispatches`` row, not the job, records whether the supplier was contacted:
the worker reads it before transmitting (a submitted or confirmed dispatch is never sent
again), and writes the outcome to it — submitted with its reference, or failed with the
attempt and the reason — before the audit event and the order's roll-up.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from typing import Any

from prometheus_client import Counter, Histogram

from actors import queues as _queues  # noqa: F401  (declares the queue)
from actors.email_retry import send_admin_alert
from actors.queues import registry
from herald import db
from herald.queue import (
    EnqueueResult,
    Permanent,
    attempts_made,
    current_app,
    enqueue,
    is_last_attempt,
)
from herald.settings import get_settings
from models.base import utcnow
from models.purchasing import (
    TRANSMITTED,
    DispatchStatus,
    EventType,
    LineStatus,
    PurchaseOrder,
    Supplier,
    SupplierDispatch,
    append_event,
    dispatch_line_ids,
    dispatch_with_parties,
    record_host_key,
    roll_up_order,
    set_line_status,
    transition_dispatch,
)
from models.supplier_jobs import SupplierDispatchJob
from providers.sftp import SftpHostKeyNotRecorded
from providers.supplier_transports import transmit
from providers.suppliers import (
    DocumentLine,
    PurchaseOrderDocument,
    SupplierConfigError,
    Transmission,
    is_permanent_failure,
)

log = logging.getLogger("herald.suppliers")

QUEUE = "supplier-dispatch"

DISPATCH_DURATION = Histogram(
    "supplier_dispatch_duration_seconds",
    "Time one transmission to a supplier took (successful or not).", ["supplier_type"],
    buckets=(0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120))
DISPATCH_FAILURES = Counter(
    "supplier_dispatch_failures_total",
    "Dispatches failed for good: kind=permanent (at once) or final (attempts ran out).",
    ["supplier_type", "kind"])

#: A line still waiting for its dispatch's outcome (a rerouted line travels elsewhere).
_AWAITING = frozenset({LineStatus.PENDING, LineStatus.SUBMITTED})


@dataclasses.dataclass(frozen=True)
class _Target:
    """What a run transmits: the dispatch's order and supplier rows."""

    order: PurchaseOrder
    supplier: Supplier


@registry.actor(queue=QUEUE, payload=SupplierDispatchJob)
def dispatch_to_supplier(job: SupplierDispatchJob) -> dict[str, Any]:
    """Transmit the dispatch ``job.dispatch_id`` to its supplier, at most once per
    successful run: a dispatch already submitted or confirmed is skipped without
    transmitting; a missing dispatch fails the job at once. A permanent failure (or the
    last attempt's) marks the dispatch failed, its lines ``dispatch_failed``, and alerts
    the operator; a transient one is retried by the queue."""
    dispatch_id = str(job.dispatch_id)
    attempt = attempts_made() + 1
    dispatch, order, supplier = _load_dispatch(dispatch_id, job.supplier_type)
    if dispatch.status in TRANSMITTED:
        log.info("dispatch already submitted: skipped",
                 extra={"queue": QUEUE, "dispatch_id": dispatch_id, "status": dispatch.status})
        return {"dispatchId": dispatch_id, "skipped": True, "reason": "already_submitted"}
    started = time.monotonic()
    try:
        target = _target(job, dispatch, order, supplier)
        transmission = transmit(
            document_of(job, target.order), target.supplier, settings=get_settings(),
            redis_client=current_app().client,
            on_new_host_key=lambda key: _record_host_key(target.supplier.id, key))
    except Exception as error:
        _handle_failure(job, attempt, error)
        raise
    finally:
        DISPATCH_DURATION.labels(supplier_type=job.supplier_type).observe(
            time.monotonic() - started)
    submitted = mark_submitted(job, attempt, transmission)
    return {"dispatchId": dispatch_id, "skipped": False, "reference": transmission.reference,
            "attempt": attempt, "recorded": submitted}


def _load_dispatch(dispatch_id: str, supplier_type: str
                   ) -> tuple[SupplierDispatch, PurchaseOrder, Supplier | None]:
    """The dispatch row with its order and supplier, read at once (one statement); Permanent
    when there is no such dispatch (nothing to send, nothing to mark)."""
    with db.session() as session:
        found = dispatch_with_parties(session, dispatch_id)
    if found is None:
        DISPATCH_FAILURES.labels(supplier_type=supplier_type, kind="permanent").inc()
        raise Permanent(f"supplier dispatch {dispatch_id} does not exist: nothing to dispatch")
    return found


def _target(job: SupplierDispatchJob, dispatch: SupplierDispatch, order: PurchaseOrder,
            supplier: Supplier | None) -> _Target:
    """The order and the supplier to transmit to; SupplierConfigError (permanent) when
    the supplier is missing, inactive, or not of the job's type."""
    if supplier is None:
        raise SupplierConfigError(f"supplier {dispatch.supplier_id} does not exist")
    if not supplier.active:
        raise SupplierConfigError(f"supplier {supplier.id} is inactive")
    if supplier.type != job.supplier_type:
        raise SupplierConfigError(f"supplier {supplier.id} is of type {supplier.type!r}, "
                                  f"not {job.supplier_type!r}")
    return _Target(order, supplier)


def document_of(job: SupplierDispatchJob, order: PurchaseOrder) -> PurchaseOrderDocument:
    """The document a transport writes out for ``job``; its delivery notes fall back to
    the order's own when the job carries none."""
    lines = tuple(DocumentLine(
        line_item_id=str(item.line_item_id), catalog_item_id=str(item.catalog_item_id),
        name=item.name, supplier_sku=item.supplier_sku,
        supplier_product_code=item.supplier_product_code, quantity=item.decimal_quantity(),
        unit=item.unit, unit_size=item.unit_size) for item in job.line_items)
    return PurchaseOrderDocument(
        order_id=str(job.order_id), dispatch_id=str(job.dispatch_id),
        order_number=job.order_number, restaurant_id=str(job.restaurant_id),
        restaurant_name=job.restaurant_name, restaurant_location=job.restaurant_location,
        placed_by_email=job.placed_by_email,
        delivery_notes=job.delivery_notes if job.delivery_notes is not None
        else order.delivery_notes,
        lines=lines)


def _record_host_key(supplier_id: str, key_line: str) -> None:
    """Pin the SFTP server's first key on the supplier (committed before the upload). When
    it was not recorded (a concurrent session recorded a key first), SftpHostKeyNotRecorded
    stops the session before the upload: the key this one trusted may not be the one the
    supplier now requires. It is transient: the retry requires the recorded key."""
    with db.session() as session:
        recorded = record_host_key(session, supplier_id, key_line)
    if not recorded:
        raise SftpHostKeyNotRecorded(supplier_id)
    log.info("SFTP host key recorded", extra={"supplier_id": supplier_id})


def mark_submitted(job: SupplierDispatchJob, attempt: int, transmission: Transmission) -> bool:
    """Record the transmission: the dispatch (submitted, reference, submitted_at, attempt)
    and its pending lines in one transaction; then, only if this run made that change,
    the ``SUPPLIER_SUBMITTED`` event and the order's roll-up. Returns whether it did."""
    dispatch_id = str(job.dispatch_id)
    with db.session() as session:
        changed = transition_dispatch(
            session, dispatch_id, to=DispatchStatus.SUBMITTED, expect={DispatchStatus.PENDING},
            reference=transmission.reference, submitted_at=utcnow(), attempt=attempt,
            failure_reason=None)
        if changed:
            set_line_status(session, dispatch_line_ids(dispatch_id), to=LineStatus.SUBMITTED,
                            expect={LineStatus.PENDING})
    if not changed:
        log.warning("dispatch transmitted but no longer pending: not recorded again",
                    extra={"queue": QUEUE, "dispatch_id": dispatch_id})
        return False
    payload = {"attempt": attempt, "reference": transmission.reference,
               "supplierType": job.supplier_type, "supplierId": str(job.supplier_id),
               "dispatchId": dispatch_id, **transmission.audit}
    _audit(job, EventType.SUPPLIER_SUBMITTED, payload)
    log.info("dispatch submitted", extra={"queue": QUEUE, "dispatch_id": dispatch_id,
                                          "attempt": attempt})
    return True


def _handle_failure(job: SupplierDispatchJob, attempt: int, error: Exception) -> None:
    """Decide what a failed transmission does: a permanent failure marks the dispatch
    failed and raises Permanent (no further attempt); the last attempt's failure marks it
    failed and lets the error end the job; any other failure lets the queue retry."""
    reason = f"{type(error).__name__}: {error}"
    if is_permanent_failure(error):
        mark_failed(job, attempt, reason)
        DISPATCH_FAILURES.labels(supplier_type=job.supplier_type, kind="permanent").inc()
        raise Permanent(reason) from error
    if is_last_attempt():
        mark_failed(job, attempt, reason)
        DISPATCH_FAILURES.labels(supplier_type=job.supplier_type, kind="final").inc()
        return
    log.warning("dispatch attempt failed; the queue retries it",
                extra={"queue": QUEUE, "dispatch_id": str(job.dispatch_id),
                       "attempt": attempt, "error": type(error).__name__})


def mark_failed(job: SupplierDispatchJob, attempt: int, reason: str) -> bool:
    """Record a failure for good: the pending dispatch (failed, attempt, reason) and its
    lines still waiting on it (``dispatch_failed``) in one transaction; then, only if this
    run made that change, ``SUPPLIER_DISPATCH_FAILED``, the order's roll-up and an
    operator alert (once per dispatch). Returns whether it did."""
    dispatch_id = str(job.dispatch_id)
    with db.session() as session:
        changed = transition_dispatch(
            session, dispatch_id, to=DispatchStatus.FAILED, expect={DispatchStatus.PENDING},
            attempt=attempt, failure_reason=reason)
        if changed:
            set_line_status(session, dispatch_line_ids(dispatch_id),
                            to=LineStatus.DISPATCH_FAILED, expect=_AWAITING)
    if not changed:
        return False
    payload = {"attempt": attempt, "reason": reason, "supplierType": job.supplier_type,
               "supplierId": str(job.supplier_id), "dispatchId": dispatch_id}
    _audit(job, EventType.SUPPLIER_DISPATCH_FAILED, payload)
    log.error("dispatch failed", extra={"queue": QUEUE, "dispatch_id": dispatch_id,
                                        "attempt": attempt})
    _alert(job, attempt, reason)
    return True


def _audit(job: SupplierDispatchJob, type: EventType, payload: dict[str, Any]) -> None:
    """Append the event and roll the order up, in a transaction after the dispatch's."""
    with db.session() as session:
        append_event(session, str(job.order_id), type, payload,
                     supplier_id=str(job.supplier_id))
        roll_up_order(session, str(job.order_id))


def _alert(job: SupplierDispatchJob, attempt: int, reason: str) -> None:
    """Email the operator about a failed dispatch (a no-op without ADMIN_ALERT_EMAIL). The
    dispatch is already marked failed: an alert that cannot be queued is logged only."""
    subject = f"Purchase order {job.order_number}: dispatch to {job.supplier_type} failed"
    text = (f"The dispatch {job.dispatch_id} of order {job.order_number} "
            f"({job.restaurant_name}) to supplier {job.supplier_id} ({job.supplier_type}) "
            f"failed at attempt {attempt}: {reason}\n\nIts lines are dispatch_failed; "
            "the supplier has not received them.")
    try:
        send_admin_alert(subject, text, idempotency_key=f"dispatch-failed-{job.dispatch_id}")
    except Exception:
        log.exception("the failed dispatch's operator alert was not sent",
                      extra={"dispatch_id": str(job.dispatch_id)})


def enqueue_supplier_dispatch(payload: SupplierDispatchJob | dict[str, Any], *,
                              dedup_id: str) -> EnqueueResult:
    """Add the dispatch's job (validated first; nothing is added when it fails), held
    by ``dedup_id`` until it ends, in its supplier type's group. A live job holding
    the key makes this a no-op reported ``deduplicated``."""
    job = (payload if isinstance(payload, SupplierDispatchJob)
           else SupplierDispatchJob.model_validate(payload))
    return enqueue(dispatch_to_supplier, job, dedup_id=dedup_id, group=job.supplier_type)
