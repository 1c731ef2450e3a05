"""The backorder-reroute worker's decision tree on real PostgreSQL and Redis with the
worker in process, the duplicate suppression at the queue and the database, and the
operator's reroute route."""

from __future__ import annotations

import threading
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from fastapi.testclient import TestClient
from prometheus_client import REGISTRY
from sqlmodel import select

from actors.backorder_reroute import enqueue_backorder_reroute, reroute_backorder
from actors.supplier_dispatch import enqueue_supplier_dispatch
from herald import db, settings
from herald.queue import Job, queue, running_worker
from herald.web.app import create_app
from models.audit import AuditEntry
from models.purchasing import (
    DispatchLine,
    DispatchOutbox,
    DispatchStatus,
    EventType,
    LineStatus,
    PurchaseOrder,
    PurchaseOrderEvent,
    PurchaseOrderLine,
    PurchaseOrderStatus,
    SupplierDispatch,
    roll_up_order,
    set_line_status,
    transition_dispatch,
)
from models.supplier_jobs import BackorderRerouteJob
from providers.mock import MockProvider
from tests.purchasing.conftest import Placed, make_item, make_supplier, place_order
from tests.support.waiting import wait_for

REROUTE = "backorder-reroute"
DISPATCH = "supplier-dispatch"
ADMIN = "buyer-oncall@herald.test"
ADMIN_TOKEN = "reroute-admin-token"


@pytest.fixture
def alerts(purchasing: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Operator alerts go to :data:`ADMIN` through the mock email provider."""
    monkeypatch.setenv("ADMIN_ALERT_EMAIL", ADMIN)
    monkeypatch.setenv("ADMIN_TOKEN", ADMIN_TOKEN)
    settings.reset_settings()
    yield
    settings.reset_settings()


def backordered(placed: Placed, line_id: str) -> None:
    """The line as an 855 leaves it: back-ordered."""
    with db.session() as session:
        set_line_status(session, [line_id], to=LineStatus.BACKORDERED)


def reroute_payload(placed: Placed, line_id: str, original: str, **extra: Any) -> dict[str, Any]:
    return {"orderId": placed.order_id, "lineItemId": line_id, "originalSupplierId": original,
            "ackCode": "IB", "reason": "Supplier acknowledgment IB on 855_1.edi", **extra}


def finished(job_id: str) -> Job:
    """Wait for the reroute job to end, and return it."""
    def ended() -> Job | None:
        job = queue(REROUTE).get(job_id)
        return job if job is not None and job.state in ("completed", "failed") else None
    return wait_for(ended, timeout=30, what=f"reroute job {job_id} to end")  # type: ignore[return-value]


def run_reroute(payload: dict[str, Any]) -> Job:
    """Enqueue a reroute and run the queue until it ends."""
    result = enqueue_backorder_reroute(payload)
    assert result.status == "added"
    with running_worker([REROUTE]):
        return finished(result.job_id)


def line_row(line_id: str) -> PurchaseOrderLine:
    with db.session() as session:
        line = session.get(PurchaseOrderLine, line_id)
        assert line is not None
        return line


def reroute_dispatches(order_id: str) -> list[SupplierDispatch]:
    with db.session() as session:
        return list(session.exec(select(SupplierDispatch).where(
            SupplierDispatch.order_id == order_id, SupplierDispatch.is_reroute.is_(True))))


def events(order_id: str, type: EventType) -> list[PurchaseOrderEvent]:
    with db.session() as session:
        return list(session.exec(select(PurchaseOrderEvent).where(
            PurchaseOrderEvent.order_id == order_id, PurchaseOrderEvent.type == type.value)))


def admin_emails() -> list[dict[str, Any]]:
    return [send for send in MockProvider.sends() if send["to"] == ADMIN]


def reroutes_counted(outcome: str) -> float:
    return REGISTRY.get_sample_value("backorder_reroutes_total", {"outcome": outcome}) or 0.0


def sysco_with_alternate(alternate_type: str = "costco", *, alternate_active: bool = True,
                         ) -> tuple[str, str, Placed]:
    """A Sysco-preferred item with one alternate; an order of it. Returns (sysco,
    alternate, order)."""
    sysco = make_supplier("sysco")
    alternate = make_supplier(alternate_type, active=alternate_active)
    item = make_item("San Marzano tomatoes", mappings=[(sysco, "SYS-1", True),
                                                       (alternate, "ALT-1", False)])
    other = make_item("Basil", mappings=[(sysco, "SYS-2", True)])
    placed = place_order([(item, 4), (other, 1)])
    backordered(placed, placed.line_ids[0])
    return sysco, alternate, placed


# -- the decision tree ------------------------------------------------------------------------
def test_a_missing_line_is_retried_until_its_attempts_are_spent(purchasing: str) -> None:
    payload = {"orderId": str(uuid.uuid4()), "lineItemId": str(uuid.uuid4()),
               "originalSupplierId": str(uuid.uuid4())}
    job = run_reroute(payload)
    assert job.state == "failed"
    assert job.attempts_made == 3  # retried, not discarded
    assert "does not exist" in (job.failed_reason or "")


def test_an_alternate_gets_a_reroute_dispatch_and_the_original_is_untouched(
        purchasing: str) -> None:
    sysco, costco, placed = sysco_with_alternate()
    line_id, original_dispatch = placed.line_ids[0], placed.dispatch_by_supplier[sysco]
    # (Sysco has the order: it is completed until the reroute)
    with db.session() as session:
        transition_dispatch(session, original_dispatch, to=DispatchStatus.SUBMITTED,
                            expect={DispatchStatus.PENDING}, reference="PO_sysco.edi")
        assert roll_up_order(session, placed.order_id) == PurchaseOrderStatus.COMPLETED
    with db.session() as session:
        before = session.get(SupplierDispatch, original_dispatch).model_dump()  # type: ignore[union-attr]
    rerouted_before = reroutes_counted("rerouted")

    job = run_reroute(reroute_payload(placed, line_id, sysco))

    # Then the job completed with a new reroute dispatch for the alternate
    assert job.state == "completed"
    [dispatch] = reroute_dispatches(placed.order_id)
    assert job.return_value == {"outcome": "rerouted", "dispatchId": dispatch.id,
                                "relayed": True}
    assert (dispatch.supplier_id, dispatch.supplier_type) == (costco, "costco")
    assert dispatch.reroute_of_dispatch_id == original_dispatch
    assert dispatch.status == "pending"
    # and the order waits for it again
    with db.session() as session:
        assert session.get(PurchaseOrder, placed.order_id).status == "pending"  # type: ignore[union-attr]
    # the line moved to it, and was part of both dispatches
    line = line_row(line_id)
    assert (line.status, line.dispatch_id, line.supplier_id) == ("rerouted", dispatch.id, costco)
    with db.session() as session:
        links = {link.dispatch_id for link in session.exec(
            select(DispatchLine).where(DispatchLine.line_id == line_id))}
        after = session.get(SupplierDispatch, original_dispatch).model_dump()  # type: ignore[union-attr]
        [entry] = session.exec(select(DispatchOutbox).where(
            DispatchOutbox.dispatch_id == dispatch.id)).all()
    assert links == {original_dispatch, dispatch.id}
    # the original dispatch is exactly as it was, the other line still on it
    assert after == before
    assert line_row(placed.line_ids[1]).dispatch_id == original_dispatch
    # one BACKORDER_REROUTED for the line and the supplier that back-ordered it
    [event] = events(placed.order_id, EventType.BACKORDER_REROUTED)
    assert (event.line_item_id, event.supplier_id) == (line_id, sysco)
    assert event.payload["dispatchId"] == dispatch.id
    # and the alternate's supplier-dispatch job is queued under the reroute's dedup id
    expected_dedup = f"dispatch:{placed.order_id}:costco:reroute:{line_id}"
    assert entry.dedup_id == expected_dedup and entry.relayed_at is not None
    [dispatch_job] = queue(DISPATCH).jobs("waiting")
    assert dispatch_job.dedup_id == expected_dedup
    assert dispatch_job.payload["dispatchId"] == dispatch.id
    assert [item["lineItemId"] for item in dispatch_job.payload["lineItems"]] == [line_id]
    assert dispatch_job.payload["lineItems"][0]["supplierSku"] == "ALT-1"
    assert reroutes_counted("rerouted") == rerouted_before + 1


def test_a_second_run_of_a_reroute_is_discarded_and_makes_no_second_dispatch(
        purchasing: str) -> None:
    sysco, _, placed = sysco_with_alternate()
    payload = reroute_payload(placed, placed.line_ids[0], sysco)
    first = run_reroute(payload)
    # When the same reroute runs again after the first ended (its dedup key released,
    # as after a stalled job is requeued)
    second = run_reroute(payload)
    assert first.return_value["outcome"] == "rerouted"  # type: ignore[index]
    assert second.state == "completed"
    assert second.return_value == {"outcome": "discarded", "reason": "already_rerouted"}
    assert len(reroute_dispatches(placed.order_id)) == 1
    assert len(queue(DISPATCH).jobs("waiting")) == 1


def test_concurrent_runs_of_one_reroute_make_one_dispatch(purchasing: str) -> None:
    # Given one back-order and four workers running its reroute at the same moment
    sysco, _, placed = sysco_with_alternate()
    job = BackorderRerouteJob.model_validate(reroute_payload(placed, placed.line_ids[0], sysco))
    start = threading.Barrier(4)
    outcomes: list[dict[str, Any]] = []

    def run() -> None:
        start.wait()
        outcomes.append(reroute_backorder(job))

    threads = [threading.Thread(target=run) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    # Then one rerouted the line, the others were discarded, and one dispatch exists
    assert sorted(outcome["outcome"] for outcome in outcomes) == [
        "discarded", "discarded", "discarded", "rerouted"]
    assert len(reroute_dispatches(placed.order_id)) == 1
    assert len(events(placed.order_id, EventType.BACKORDER_REROUTED)) == 1


def test_no_alternate_completes_marks_the_line_and_alerts_once(alerts: None) -> None:
    # Given an item only Sysco carries
    sysco = make_supplier("sysco")
    item = make_item("Saffron", mappings=[(sysco, "SAF-1", True)])
    placed = place_order([(item, 1)])
    line_id = placed.line_ids[0]
    backordered(placed, line_id)
    counted_before = reroutes_counted("no_alternate")

    job = run_reroute(reroute_payload(placed, line_id, sysco))

    # Then it is a business outcome: completed at its first attempt, not failed
    assert job.state == "completed" and job.attempts_started == 1
    assert job.return_value["outcome"] == "no_alternate"  # type: ignore[index]
    assert line_row(line_id).status == "backorder_no_alternate"
    [event] = events(placed.order_id, EventType.BACKORDER_NO_ALTERNATE)
    assert (event.line_item_id, event.supplier_id) == (line_id, sysco)
    [email] = admin_emails()
    assert line_id in email["subject"]
    assert reroutes_counted("no_alternate") == counted_before + 1
    assert reroute_dispatches(placed.order_id) == []


def test_a_dead_end_reported_before_is_discarded_without_a_second_email(alerts: None) -> None:
    sysco = make_supplier("sysco")
    item = make_item("Saffron", mappings=[(sysco, "SAF-1", True)])
    placed = place_order([(item, 1)])
    line_id = placed.line_ids[0]
    backordered(placed, line_id)
    payload = reroute_payload(placed, line_id, sysco)
    run_reroute(payload)
    # When the same back-order is rerouted again (a re-dropped acknowledgment)
    again = run_reroute(payload)
    assert again.state == "completed"
    assert again.return_value == {"outcome": "discarded", "reason": "already_no_alternate"}
    assert len(admin_emails()) == 1
    assert len(events(placed.order_id, EventType.BACKORDER_NO_ALTERNATE)) == 1


@pytest.mark.parametrize("case", ["inactive", "named_original", "named_missing",
                                  "named_unmapped"])
def test_an_unusable_alternate_is_no_alternate(alerts: None, case: str) -> None:
    sysco, _, placed = sysco_with_alternate(alternate_active=case != "inactive")
    extra = {"named_original": {"alternateSupplierId": sysco},
             "named_missing": {"alternateSupplierId": str(uuid.uuid4())},
             "named_unmapped": {"alternateSupplierId": make_supplier("central_kitchen")},
             }.get(case, {})
    job = run_reroute(reroute_payload(placed, placed.line_ids[0], sysco, **extra))
    assert job.state == "completed"
    assert job.return_value["outcome"] == "no_alternate"  # type: ignore[index]
    assert line_row(placed.line_ids[0]).status == "backorder_no_alternate"
    assert reroute_dispatches(placed.order_id) == []
    assert len(admin_emails()) == 1


def test_a_named_alternate_is_used(purchasing: str) -> None:
    sysco, _, placed = sysco_with_alternate()
    kitchen = make_supplier("central_kitchen")
    with db.session() as session:
        from models.purchasing import SupplierMapping
        line = session.get(PurchaseOrderLine, placed.line_ids[0])
        session.add(SupplierMapping(catalog_item_id=line.catalog_item_id,  # type: ignore[union-attr]
                                    supplier_id=kitchen, supplier_sku="CK-1"))
    job = run_reroute(reroute_payload(placed, placed.line_ids[0], sysco,
                                      alternateSupplierId=kitchen))
    [dispatch] = reroute_dispatches(placed.order_id)
    assert job.return_value["dispatchId"] == dispatch.id  # type: ignore[index]
    assert (dispatch.supplier_id, dispatch.supplier_type) == (kitchen, "central_kitchen")


# -- duplicates ---------------------------------------------------------------------------------
def test_a_duplicate_reroute_is_suppressed_at_the_queue(purchasing: str) -> None:
    sysco, _, placed = sysco_with_alternate()
    payload = reroute_payload(placed, placed.line_ids[0], sysco)
    first = enqueue_backorder_reroute(payload)
    # When Sysco's acknowledgment is read twice while the first reroute is still queued
    second = enqueue_backorder_reroute(payload)
    assert (first.status, second.status) == ("added", "deduplicated")
    assert second.job_id == first.job_id
    assert queue(REROUTE).counts()["waiting"] == 1
    with running_worker([REROUTE]):
        assert finished(first.job_id).return_value["outcome"] == "rerouted"  # type: ignore[index]
    assert len(reroute_dispatches(placed.order_id)) == 1


def test_a_same_type_reroute_is_not_swallowed_by_the_original_dispatch(
        purchasing: str) -> None:
    # Given a Costco line whose alternate is another Costco supplier, and the order's
    # original Costco dispatch job live in the queue
    costco = make_supplier("costco", name="Costco North")
    other = make_supplier("costco", name="Costco South")
    item = make_item("Paper towels", mappings=[(costco, "C-1", True), (other, "C-2", False)])
    placed = place_order([(item, 2)])
    with db.session() as session:
        [original] = session.exec(select(DispatchOutbox)).all()
    assert enqueue_supplier_dispatch(original.payload,
                                     dedup_id=original.dedup_id).status == "added"
    backordered(placed, placed.line_ids[0])

    job = run_reroute(reroute_payload(placed, placed.line_ids[0], costco))

    # Then the reroute's dispatch job is queued beside the original's
    [dispatch] = reroute_dispatches(placed.order_id)
    assert job.return_value == {"outcome": "rerouted", "dispatchId": dispatch.id,
                                "relayed": True}
    jobs = {j.dedup_id: j for j in queue(DISPATCH).jobs("waiting")}
    assert set(jobs) == {f"dispatch:{placed.order_id}:costco",
                         f"dispatch:{placed.order_id}:costco:reroute:{placed.line_ids[0]}"}
    assert jobs[f"dispatch:{placed.order_id}:costco:reroute:{placed.line_ids[0]}"].payload[
        "supplierId"] == other


# -- the operator's route ---------------------------------------------------------------------
def test_an_operator_reroutes_a_backordered_line(alerts: None) -> None:
    _, costco, placed = sysco_with_alternate()
    line_id = placed.line_ids[0]
    headers = {"Authorization": f"Bearer {ADMIN_TOKEN}"}
    with TestClient(create_app()) as client:
        unknown = client.post(f"/admin/backorders/{uuid.uuid4()}/reroute", headers=headers)
        not_backordered = client.post(f"/admin/backorders/{placed.line_ids[1]}/reroute",
                                      headers=headers)
        unauthorised = client.post(f"/admin/backorders/{line_id}/reroute")
        bad = client.post(f"/admin/backorders/{line_id}/reroute", headers=headers,
                          json={"alternate_supplier_id": "not-a-uuid"})
        first = client.post(f"/admin/backorders/{line_id}/reroute", headers=headers,
                            json={"alternate_supplier_id": costco, "reason": "Sysco is out"})
        second = client.post(f"/admin/backorders/{line_id}/reroute", headers=headers)
    assert (unknown.status_code, not_backordered.status_code, unauthorised.status_code,
            bad.status_code) == (404, 409, 401, 422)
    assert first.status_code == 202 and first.json()["status"] == "added"
    assert second.status_code == 202 and second.json() == {**first.json(),
                                                           "status": "deduplicated"}
    # the refused requests queued nothing; the accepted ones are in the audit log
    assert queue(REROUTE).counts()["waiting"] == 1
    with db.session() as session:
        audit = list(session.exec(select(AuditEntry).where(
            AuditEntry.action == "backorder.reroute")))
    assert sorted(entry.detail["status"] for entry in audit) == [  # type: ignore[index]
        "added", "deduplicated"]
    assert all(entry.actor == "admin" and entry.target == f"line:{line_id}" for entry in audit)
    job_id = first.json()["jobId"]
    with running_worker([REROUTE]):
        job = finished(job_id)
    assert job.payload["reason"] == "Sysco is out"
    [dispatch] = reroute_dispatches(placed.order_id)
    assert dispatch.supplier_id == costco
