"""Helpers of the dispatch worker tests: enqueue a placed order's dispatch as the relay
does, wait for its job to end, read back the rows a user would look at."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from sqlmodel import col, select

from actors.supplier_dispatch import QUEUE, enqueue_supplier_dispatch
from herald import db
from herald.queue import EnqueueResult, Job, JobState, queue
from models.purchasing import (
    PurchaseOrder,
    PurchaseOrderEvent,
    PurchaseOrderLine,
    Supplier,
    SupplierDispatch,
    dispatch_job,
)
from models.supplier_jobs import dispatch_dedup_id
from tests.purchasing.conftest import Placed
from tests.support.waiting import wait_for

#: Seconds a dispatch job gets to end in these tests (a PDF render takes a few).
JOB_S = 60.0


def enqueue_dispatch(placed: Placed, supplier_id: str) -> EnqueueResult:
    """Enqueue the order's dispatch to ``supplier_id`` with its job built from the rows."""
    with db.session() as session:
        job = dispatch_job(session, placed.dispatch_by_supplier[supplier_id])
    return enqueue_supplier_dispatch(
        job, dedup_id=dispatch_dedup_id(placed.order_id, job.supplier_type))


def ended(job_id: str, timeout: float = JOB_S) -> Job:
    """Wait until the job completed or failed for good; its record."""
    def done() -> Job | None:
        job = queue(QUEUE).get(job_id)
        return job if job is not None and job.state in (JobState.COMPLETED,
                                                         JobState.FAILED) else None
    found = wait_for(done, timeout=timeout, what=f"dispatch job {job_id} to end")
    assert isinstance(found, Job)
    return found


def dispatch_row(dispatch_id: str) -> SupplierDispatch:
    with db.session() as session:
        row = session.get(SupplierDispatch, dispatch_id)
    assert row is not None
    return row


def order_row(order_id: str) -> PurchaseOrder:
    with db.session() as session:
        row = session.get(PurchaseOrder, order_id)
    assert row is not None
    return row


def supplier_row(supplier_id: str) -> Supplier:
    with db.session() as session:
        row = session.get(Supplier, supplier_id)
    assert row is not None
    return row


def line_statuses(order_id: str) -> dict[str, str]:
    with db.session() as session:
        return {line.id: line.status for line in session.exec(
            select(PurchaseOrderLine).where(col(PurchaseOrderLine.order_id) == order_id))}


def events(order_id: str, type: str | None = None) -> list[dict[str, Any]]:
    """The order's audit trail, oldest first: ``{"type", "supplier_id", "payload"}``."""
    with db.session() as session:
        rows = session.exec(select(PurchaseOrderEvent)
                            .where(col(PurchaseOrderEvent.order_id) == order_id)
                            .order_by(col(PurchaseOrderEvent.at))).all()
    return [{"type": row.type, "supplier_id": row.supplier_id, "payload": row.payload}
            for row in rows if type is None or row.type == type]


def files_under(root: Path) -> list[str]:
    """Every regular file under ``root``, as paths relative to it, sorted."""
    return sorted(str(path.relative_to(root)) for path in root.rglob("*") if path.is_file())
