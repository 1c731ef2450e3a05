"""Sysco's acknowledgments: reading one inbound EDI file (855s and 997s) and the poll
of every active Sysco supplier's inbound directory (docs/suppliers.md#inbound-acknowledgments).

:func:`process_inbound_edi` is the one place a file is read, whoever hands it over (the
poll, or an operator through ``POST /v1/inbound/sysco``): each file is applied once per
supplier and file name (``vendor_documents``), and a read of a file applied already reports
``alreadyProcessed``. An 855 confirms the dispatch it answers, marks each line that does
not ship ``backordered`` and enqueues its reroute.

The poll runs every ``SYSCO_POLL_INTERVAL_S`` as a job of the ``supplier-dispatch`` queue
in the ``sysco`` group, held by one dedup id: a tick that falls due while the last poll is
still waiting or running adds nothing, so polls never overlap across clocks and workers,
and the group's limit (``SYSCO_WORKER_CONCURRENCY``) keeps a poll from opening an SFTP
session beside an upload.
"""

from __future__ import annotations

import dataclasses
import functools
import logging
from datetime import timedelta
from typing import Any

from pydantic import BaseModel, ConfigDict
from sqlalchemy import case
from sqlalchemy.dialects import postgresql, sqlite
from sqlmodel import Session, col, select

from actors import queues as _queues  # noqa: F401  (declares the queue)
from actors.backorder_reroute import enqueue_backorder_reroute
from actors.email_retry import send_admin_alert
from actors.queues import registry
from herald.db import session as db_session
from herald.queue import Permanent, Schedule
from herald.settings import get_settings
from models.base import new_id, table_of, utcnow
from models.purchasing import (
    DispatchStatus,
    EventType,
    LineStatus,
    PurchaseOrder,
    PurchaseOrderLine,
    Supplier,
    SupplierDispatch,
    VendorDocument,
    append_event,
    dispatch_lines,
    record_host_key,
    roll_up_order,
    set_line_status,
    transition_dispatch,
)
from models.supplier_jobs import BackorderRerouteJob
from providers.sftp import (
    SftpFileTooLarge,
    SftpHostKeyNotRecorded,
    SftpSession,
    SftpSettings,
    sftp_session,
)
from providers.suppliers import SupplierType
from providers.x12 import Ack855, Ack997, X12ParseError, parse_acknowledgments

log = logging.getLogger("herald.suppliers")

#: The queue and group the poll runs in (beside Sysco's uploads, never with them).
POLL_QUEUE = "supplier-dispatch"
POLL_GROUP = SupplierType.SYSCO.value
SCHEDULE_NAME = "sysco-inbound-poll"
#: BAK02 types that reject the whole order.
REJECTED_ORDER = frozenset({"RJ", "RD"})
#: Line statuses an acknowledgment may still change (not yet back-ordered or moved).
_ACKNOWLEDGEABLE = frozenset({LineStatus.PENDING, LineStatus.SUBMITTED, LineStatus.CONFIRMED})
_vendor_documents = table_of(VendorDocument)


class UnknownSupplier(LookupError):
    """No Sysco supplier has that id."""


# -- one file -----------------------------------------------------------------------------
def process_inbound_edi(content: str, *, supplier_id: str, reference: str) -> dict[str, Any]:
    """Apply one inbound file of the supplier, once per ``reference`` (its file name).

    Returns ``{"status": "processed", "parsed": True, "documents": […], "reroutes": […]}``,
    ``{"status": "alreadyProcessed", "parsed": True, …}`` for a file applied already (its
    reroutes are enqueued again: a held dedup id or the worker's own checks make that
    harmless, and it finishes a read whose enqueue failed), or ``{"status":
    "notParsed", "parsed": False, "error": why}`` for input that is not an 855/997
    interchange (nothing is written). Raises :class:`UnknownSupplier` unless the
    supplier is a Sysco supplier, and whatever the database or the queue raises (the
    file may then be read again).
    """
    with db_session() as session:
        supplier = session.get(Supplier, supplier_id)
        if supplier is None or supplier.type != SupplierType.SYSCO.value:
            raise UnknownSupplier(f"no Sysco supplier has the id {supplier_id}")
        stored = _stored_result(session, supplier_id, reference)
    if stored is not None:
        return _already_processed(stored)
    try:
        documents = parse_acknowledgments(content)
    except X12ParseError as error:
        return {"status": "notParsed", "parsed": False, "reference": reference,
                "error": str(error)}
    with db_session() as session:
        result = _apply(session, documents, supplier_id=supplier_id, reference=reference)
        if result is None:  # another reader recorded the file first
            session.rollback()
            stored = _stored_result(session, supplier_id, reference)
            assert stored is not None
            return _already_processed(stored)
    return {**result, "status": "processed", "parsed": True,
            "enqueued": _enqueue_reroutes(result["reroutes"])}


def _stored_result(session: Session, supplier_id: str, reference: str) -> dict[str, Any] | None:
    document = session.exec(select(VendorDocument).where(
        col(VendorDocument.supplier_id) == supplier_id,
        col(VendorDocument.reference) == reference)).first()
    return None if document is None else dict(document.result)


def _already_processed(stored: dict[str, Any]) -> dict[str, Any]:
    return {**stored, "status": "alreadyProcessed", "parsed": True,
            "enqueued": _enqueue_reroutes(stored.get("reroutes", []))}


def _enqueue_reroutes(reroutes: list[dict[str, Any]]) -> list[dict[str, Any]]:
    enqueued = []
    for payload in reroutes:
        outcome = enqueue_backorder_reroute(payload)
        enqueued.append({"lineItemId": payload["lineItemId"], "status": outcome.status,
                         "jobId": outcome.job_id})
    return enqueued


def _apply(session: Session, documents: tuple[Ack855 | Ack997, ...], *, supplier_id: str,
           reference: str) -> dict[str, Any] | None:
    """Record the file and apply its documents in the caller's transaction; None when
    the file is recorded already (nothing applied)."""
    document_id = new_id()
    kind = ",".join(dict.fromkeys("855" if isinstance(d, Ack855) else "997" for d in documents))
    dialect = session.get_bind().dialect.name
    insert = (postgresql.insert if dialect == "postgresql" else sqlite.insert)(_vendor_documents)
    added = session.execute(insert.values(
        id=document_id, supplier_id=supplier_id, reference=reference, kind=kind, result={},
        received_at=utcnow()).on_conflict_do_nothing().returning(_vendor_documents.c.id)).first()
    if added is None:
        return None
    summaries: list[dict[str, Any]] = []
    reroutes: list[dict[str, Any]] = []
    for document in documents:
        if isinstance(document, Ack855):
            summary, jobs = _apply_855(session, document, supplier_id, reference)
            summaries.append(summary)
            reroutes.extend(job.model_dump(mode="json", exclude_none=True) for job in jobs)
        else:
            summaries.append(_summary_997(document))
    result = {"reference": reference, "supplierId": supplier_id, "kind": kind,
              "documents": summaries, "reroutes": reroutes}
    stored = session.get(VendorDocument, document_id)
    assert stored is not None
    stored.result = result
    session.add(stored)
    return result


def _apply_855(session: Session, ack: Ack855, supplier_id: str, reference: str,
               ) -> tuple[dict[str, Any], list[BackorderRerouteJob]]:
    """Confirm the dispatch the 855 answers (unless it rejects the order), back-order the
    lines that do not ship and return their reroutes."""
    summary: dict[str, Any] = {"type": "855", "orderNumber": ack.po_number,
                               "ackType": ack.ack_type, "dispatchId": None}
    dispatch = _answered_dispatch(session, supplier_id, ack.po_number)
    if dispatch is None:
        log.warning("an 855 answers no dispatch of the supplier",
                    extra={"supplier_id": supplier_id, "reference": reference,
                           "order_number": ack.po_number})
        return summary, []
    lines = dispatch_lines(session, dispatch.id)
    by_number = {str(n): line for n, line in enumerate(lines, start=1)}
    if ack.order_rejected:  # no line detail: nothing of the order ships
        not_shipping = {line.id: "IR" for line in lines}
    else:
        not_shipping = {by_number[a.line_number].id: a.reroute_code or "IB"
                        for a in ack.not_shipping_lines() if a.line_number in by_number}
    summary.update(
        dispatchId=dispatch.id,
        confirmed=_confirm(session, dispatch, ack, supplier_id, reference, not_shipping),
        partiallyBackordered=[by_number[a.line_number].id for a in ack.backordered_lines()
                              if a.line_number in by_number
                              and by_number[a.line_number].id not in not_shipping],
        unknownLines=[a.line_number for a in ack.lines if a.line_number not in by_number])
    jobs = [job for line in lines if line.id in not_shipping
            if (job := _backorder(session, line, dispatch, not_shipping[line.id],
                                  supplier_id, reference)) is not None]
    summary["backordered"] = [str(job.line_item_id) for job in jobs]
    roll_up_order(session, dispatch.order_id)
    return summary, jobs


def _answered_dispatch(session: Session, supplier_id: str, order_number: str,
                       ) -> SupplierDispatch | None:
    """The dispatch an 855 answers: BAK03 is the order number our 850 sent, so the
    supplier's most recent dispatch of an order with that number — a submitted one
    (awaiting its acknowledgment) before any other. A number names one order of a
    restaurant (docs/suppliers.md#purchase-orders), but two restaurants may share one,
    and a reroute may give the supplier a second dispatch of the same order."""
    awaiting = case((col(SupplierDispatch.status) == DispatchStatus.SUBMITTED.value, 0), else_=1)
    return session.exec(
        select(SupplierDispatch)
        .join(PurchaseOrder, col(PurchaseOrder.id) == col(SupplierDispatch.order_id))
        .where(col(SupplierDispatch.supplier_id) == supplier_id,
               col(PurchaseOrder.order_number) == order_number)
        .order_by(awaiting, col(SupplierDispatch.created_at).desc())).first()


def _confirm(session: Session, dispatch: SupplierDispatch, ack: Ack855, supplier_id: str,
             reference: str, not_shipping: dict[str, str]) -> bool:
    """Move a submitted dispatch to confirmed, with its shipping lines, and record
    SUPPLIER_CONFIRMED; an order the 855 rejects is not confirmed."""
    if ack.ack_type in REJECTED_ORDER:
        return False
    if not transition_dispatch(session, dispatch.id, to=DispatchStatus.CONFIRMED,
                               expect={DispatchStatus.SUBMITTED}, confirmed_at=utcnow()):
        return False
    shipping = [line.id for line in dispatch_lines(session, dispatch.id)
                if line.id not in not_shipping and line.dispatch_id == dispatch.id]
    set_line_status(session, shipping, to=LineStatus.CONFIRMED, expect={LineStatus.SUBMITTED})
    append_event(session, dispatch.order_id, EventType.SUPPLIER_CONFIRMED,
                 {"reference": reference, "dispatchId": dispatch.id, "ackType": ack.ack_type,
                  "sellerOrderNumber": ack.seller_order_number},
                 supplier_id=supplier_id, actor_id=f"supplier:{supplier_id}")
    return True


def _backorder(session: Session, line: PurchaseOrderLine, dispatch: SupplierDispatch,
               code: str, supplier_id: str, reference: str) -> BackorderRerouteJob | None:
    """Mark a line of the dispatch back-ordered and record LINE_ITEM_BACKORDERED; its
    reroute job, or None for a line that moved on already (rerouted, back-ordered)."""
    if line.dispatch_id != dispatch.id or not set_line_status(
            session, [line.id], to=LineStatus.BACKORDERED, expect=_ACKNOWLEDGEABLE):
        return None
    append_event(session, line.order_id, EventType.LINE_ITEM_BACKORDERED,
                 {"ackCode": code, "reference": reference, "dispatchId": dispatch.id},
                 line_item_id=line.id, supplier_id=supplier_id,
                 actor_id=f"supplier:{supplier_id}")
    return BackorderRerouteJob(order_id=line.order_id, line_item_id=line.id,
                               original_supplier_id=supplier_id, ack_code=code,
                               reason=f"Supplier acknowledgment {code} on {reference}"[:500])


def _summary_997(ack: Ack997) -> dict[str, Any]:
    return {"type": "997", "functionalId": ack.functional_id,
            "groupControlNumber": ack.group_control_number, "status": ack.status,
            "accepted": ack.accepted,
            "sets": [{"code": s.code, "controlNumber": s.control_number, "status": s.status,
                      "errors": list(s.errors)} for s in ack.transaction_sets]}


# -- the poll -----------------------------------------------------------------------------
@dataclasses.dataclass
class SupplierPoll:
    """One supplier's poll: files found, and what became of them."""

    supplier_id: str
    candidates: int = 0
    #: Applied now, then archived.
    processed: int = 0
    #: Applied before (``alreadyProcessed``), archived now.
    skipped: int = 0
    #: Not an 855/997 interchange, or over MAX_BODY_BYTES (not read): moved to
    #: ``archive_dir/failed``, an operator alerted.
    unparsable: int = 0
    #: Reading or applying it raised: left in place for the next poll.
    failed: int = 0
    #: The connection or listing failure, when the directory could not be read.
    error: str | None = None

    @property
    def systemic(self) -> bool:
        """True when the directory could not be read, or had files of which none was
        processed or skipped (one bad file among good ones is not systemic)."""
        return self.error is not None or (self.candidates > 0
                                          and self.processed + self.skipped == 0)

    def as_dict(self) -> dict[str, Any]:
        """The counts, the error and the systemic flag."""
        return {**dataclasses.asdict(self), "systemic": self.systemic}


@dataclasses.dataclass(frozen=True)
class PollReport:
    """A poll of every active Sysco supplier."""

    suppliers: tuple[SupplierPoll, ...]

    @property
    def systemic(self) -> bool:
        """True when any supplier's poll failed systemically."""
        return any(poll.systemic for poll in self.suppliers)

    def as_dict(self) -> dict[str, Any]:
        """Each supplier's counts and the run's systemic flag."""
        return {"suppliers": [poll.as_dict() for poll in self.suppliers],
                "systemic": self.systemic}


def poll_inbound() -> PollReport:
    """Poll each active Sysco supplier's inbound directory once, one SFTP session per
    supplier: every file is applied (:func:`process_inbound_edi`) and archived, an
    unparsable one — or one over MAX_BODY_BYTES, the cap of ``POST /v1/inbound/sysco``'s
    body, which is never read — moved to ``archive_dir/failed`` with an operator alert,
    one whose reading raised left in place."""
    with db_session() as session:
        suppliers = list(session.exec(
            select(Supplier).where(col(Supplier.type) == SupplierType.SYSCO.value,
                                   col(Supplier.active).is_(True))
            .order_by(col(Supplier.created_at), col(Supplier.id))))
    return PollReport(tuple(poll_supplier(supplier) for supplier in suppliers))


def poll_supplier(supplier: Supplier) -> SupplierPoll:
    """Poll one supplier's inbound directory in one SFTP session, closed however the poll
    ends; a failure to connect or to list is the report's ``error``."""
    report = SupplierPoll(supplier.id)
    try:
        settings = SftpSettings.from_mapping(supplier.sftp)
        with sftp_session(settings, on_new_host_key=functools.partial(
                _record_host_key, supplier.id)) as sftp:
            names = sftp.list_candidates(settings.inbound_dir)
            report.candidates = len(names)
            for name in names:  # one at a time: one session, one file in hand
                _take(sftp, settings, supplier.id, name, report)
    except Exception as error:  # the whole directory is out of reach: systemic
        report.error = f"{type(error).__name__}: {error}"
        log.error("sysco inbound poll failed: %s", report.error,
                  extra={"supplier_id": supplier.id})
    return report


def _record_host_key(supplier_id: str, key_line: str) -> None:
    """Pin the SFTP server's first key on the supplier before anything is read; when a
    concurrent session recorded a key first, SftpHostKeyNotRecorded ends this poll's
    session unread (the next poll requires the recorded key)."""
    with db_session() as session:
        recorded = record_host_key(session, supplier_id, key_line)
    if not recorded:
        raise SftpHostKeyNotRecorded(supplier_id)


def _take(sftp: SftpSession, settings: SftpSettings, supplier_id: str, name: str,
          report: SupplierPoll) -> None:
    """Read, apply and archive one file, counting what became of it; a file whose
    reading or applying raised is left where it is (the next poll tries it again)."""
    path = f"{settings.inbound_dir.rstrip('/')}/{name}"
    try:
        outcome = _read(sftp, path, supplier_id, name)
        if outcome["parsed"]:
            sftp.move(path, settings.archive_dir)
            report.processed += outcome["status"] == "processed"
            report.skipped += outcome["status"] == "alreadyProcessed"
            return
        failed_dir = f"{settings.archive_dir.rstrip('/')}/failed"
        sftp.ensure_dir(failed_dir)
        sftp.move(path, failed_dir)
        report.unparsable += 1
    except Exception as error:  # left in place and counted; the log has the trace
        report.failed += 1
        log.exception("inbound file not processed: %s", type(error).__name__,
                      extra={"supplier_id": supplier_id, "reference": name})
        return
    _alert_unparsable(supplier_id, name, outcome["error"])


def _read(sftp: SftpSession, path: str, supplier_id: str, name: str) -> dict[str, Any]:
    try:
        # the API's body cap: a file the route would refuse is not read into memory here
        content = sftp.get(path, max_bytes=get_settings().max_body_bytes).decode("utf-8")
    except SftpFileTooLarge as error:
        return {"status": "notParsed", "parsed": False, "reference": name,
                "error": f"too large: {error} (MAX_BODY_BYTES)"}
    except UnicodeDecodeError as error:
        return {"status": "notParsed", "parsed": False, "reference": name,
                "error": f"not UTF-8 text: {error}"}
    return process_inbound_edi(content, supplier_id=supplier_id, reference=name)


def _alert_unparsable(supplier_id: str, name: str, why: str) -> None:
    # the file is archived already: a failed alert is logged, not a reason to read it again
    try:
        send_admin_alert(f"Unreadable Sysco file {name}",
                         f"The file {name} from supplier {supplier_id} could not be read as "
                         f"an 855 or 997 interchange ({why}); it was moved to the archive's "
                         "failed/ directory.",
                         idempotency_key=f"sysco-unparsable:{supplier_id}:{name}")
    except Exception as error:
        log.error("unparsable-file alert not sent: %s: %s", type(error).__name__, error,
                  extra={"supplier_id": supplier_id, "reference": name})


# -- the job and its schedule -------------------------------------------------------------
class PollJob(BaseModel):
    """The poll job carries nothing: it reads the suppliers."""

    model_config = ConfigDict(extra="forbid")


@registry.actor(queue=POLL_QUEUE, payload=PollJob)
def poll_sysco_inbound(job: PollJob) -> dict[str, Any]:
    """One poll of every active Sysco supplier; its return value is the report. A
    systemic failure (a directory out of reach, or whose files all failed) fails the job
    for good with the report in its error: the next tick polls again."""
    report = poll_inbound()
    if report.systemic:
        raise Permanent(f"sysco inbound poll failed systemically: {report.as_dict()}")
    return report.as_dict()


registry.schedule(Schedule(name=SCHEDULE_NAME, actor=poll_sysco_inbound,
                           every=timedelta(seconds=get_settings().sysco_poll_interval_s),
                           group=POLL_GROUP, dedup_id=SCHEDULE_NAME))
