"""The dispatch worker's email transports end to end: Costco's order table and the central
kitchen's PDF, through a real SMTP relay (aiosmtpd), rendered by the real Chromium; and a
supplier with no address failing for good at its first attempt."""

from __future__ import annotations

from pathlib import Path

from actors.supplier_dispatch import enqueue_supplier_dispatch
from herald import db
from herald.queue import JobState, running_worker
from herald.settings import get_settings
from models.purchasing import dispatch_job
from models.supplier_jobs import dispatch_dedup_id
from tests.purchasing.conftest import SENDER, Mailbox, make_item, make_supplier, place_order
from tests.support.purchasing.dispatching import (
    dispatch_row,
    ended,
    enqueue_dispatch,
    events,
    line_statuses,
    order_row,
)

QUEUES = ["supplier-dispatch"]
LINES = [("Paper towels", "CO-PT-12", 3), ("Olive oil", "CO-OIL-3L", 1.5),
         ("Sea salt", "CO-SALT", 2)]


def costco_order(supplier: str, **fields: object):  # type: ignore[no-untyped-def]
    items = [make_item(name, "CA", mappings=[(supplier, sku, True)]) for name, sku, _ in LINES]
    return place_order([(item, qty) for item, (_, _, qty) in zip(items, LINES, strict=True)],
                       order_number="PO-2002", restaurant_name="Bistro Nord", **fields)


def test_a_costco_order_is_one_email_with_every_line_in_both_parts(
        purchasing: str, mailbox: Mailbox) -> None:
    # Given a Costco supplier with a copy address, and an order of three of its items
    # whose job carries no delivery notes (the order has some)
    costco = make_supplier("costco", name="Costco Business", email="orders@costco.test",
                           cc=["buyer@costco.test"])
    placed = costco_order(costco, delivery_notes="Back door before 7am")
    with db.session() as session:
        job = dispatch_job(session, placed.dispatch_by_supplier[costco])
    job = job.model_copy(update={"delivery_notes": None})

    # When its dispatch job runs
    with running_worker(QUEUES):
        ended_job = ended(enqueue_supplier_dispatch(
            job, dedup_id=dispatch_dedup_id(placed.order_id, "costco")).job_id)

    # Then exactly one email went out, From EMAIL_FROM, To the supplier, Cc its copy
    assert ended_job.state == JobState.COMPLETED, ended_job.failed_reason
    [received] = mailbox.messages
    message = received.message
    assert message["Subject"] == "Purchase order PO-2002 — Bistro Nord"
    assert message["From"] == SENDER == get_settings().email_from
    assert message["To"] == "orders@costco.test"
    assert message["Cc"] == "buyer@costco.test"
    assert sorted(received.rcpt_tos) == ["buyer@costco.test", "orders@costco.test"]

    # and both alternatives list every line, and the order's own delivery notes
    html = message.get_body(("html",)).get_content()
    text = message.get_body(("plain",)).get_content()
    for part in (html, text):
        for name, sku, _ in LINES:
            assert name in part and sku in part
        assert "1.5" in part
        assert "Back door before 7am" in part

    # and the dispatch is submitted with the Message-ID as its reference
    dispatch = dispatch_row(placed.dispatch_by_supplier[costco])
    assert (dispatch.status, dispatch.attempt, dispatch.failure_reason) == ("submitted", 1, None)
    assert dispatch.reference == message["Message-ID"]
    assert set(line_statuses(placed.order_id).values()) == {"submitted"}
    assert order_row(placed.order_id).status == "completed"
    [event] = events(placed.order_id, "SUPPLIER_SUBMITTED")
    assert {key: event["payload"][key] for key in ("reference", "supplierType", "attempt",
                                                   "subject", "recipients")} == {
        "reference": message["Message-ID"], "supplierType": "costco", "attempt": 1,
        "subject": message["Subject"],
        "recipients": ["orders@costco.test", "buyer@costco.test"]}


def test_a_costco_supplier_without_an_address_fails_at_attempt_1_of_3(
        purchasing: str, mailbox: Mailbox) -> None:
    # Given a Costco supplier with no email address
    costco = make_supplier("costco", email="")
    placed = costco_order(costco)

    # When its dispatch job runs (three attempts allowed)
    with running_worker(QUEUES):
        job = ended(enqueue_dispatch(placed, costco).job_id)

    # Then the job failed on its first attempt, nothing was sent, and the dispatch is
    # failed at attempt 1 with why; its lines dispatch_failed, the order failed
    assert (job.state, job.attempts_made) == (JobState.FAILED, 1)
    assert mailbox.messages == []
    dispatch = dispatch_row(placed.dispatch_by_supplier[costco])
    assert (dispatch.status, dispatch.attempt) == ("failed", 1)
    assert "SupplierConfigError" in (dispatch.failure_reason or "")
    assert set(line_statuses(placed.order_id).values()) == {"dispatch_failed"}
    assert order_row(placed.order_id).status == "failed"
    [event] = events(placed.order_id, "SUPPLIER_DISPATCH_FAILED")
    assert {key: event["payload"][key] for key in ("attempt", "supplierType", "supplierId",
                                                   "dispatchId")} == {
        "attempt": 1, "supplierType": "costco", "supplierId": costco,
        "dispatchId": dispatch.id}
    assert event["payload"]["reason"] == dispatch.failure_reason


def test_a_central_kitchen_order_is_a_stored_pdf_attached_to_its_email(
        purchasing: str, mailbox: Mailbox) -> None:
    # Given a central kitchen supplier and an order of two of its items
    kitchen = make_supplier("central_kitchen", name="Central Kitchen",
                            email="kitchen@herald.test")
    soup = make_item("Onion soup base", "each", mappings=[(kitchen, "CK-SOUP", True)])
    bread = make_item("Sourdough loaves", "each", mappings=[(kitchen, "CK-BREAD", True)])
    placed = place_order([(soup, 4), (bread, 10)], order_number="PO-3003")

    # When its dispatch job runs
    with running_worker(QUEUES):
        job = ended(enqueue_dispatch(placed, kitchen).job_id)

    # Then the PDF is stored under SUPPLIER_PDF_DIR
    assert job.state == JobState.COMPLETED, job.failed_reason
    dispatch_id = placed.dispatch_by_supplier[kitchen]
    stored = Path(get_settings().supplier_pdf_dir,
                  f"purchase-orders/{placed.order_id}/{dispatch_id}.pdf")
    data = stored.read_bytes()
    assert data.startswith(b"%PDF-")

    # and the one email carries that same PDF as its attachment
    [received] = mailbox.messages
    [attachment] = list(received.message.iter_attachments())
    assert attachment.get_content_type() == "application/pdf"
    assert attachment.get_filename() == "purchase-order-PO-3003.pdf"
    assert attachment.get_content() == data

    # and the dispatch is submitted with the Message-ID; the audit names the PDF
    dispatch = dispatch_row(dispatch_id)
    assert (dispatch.status, dispatch.reference) == ("submitted", received.message["Message-ID"])
    [event] = events(placed.order_id, "SUPPLIER_SUBMITTED")
    payload = event["payload"]
    assert payload["pdfKey"] == f"purchase-orders/{placed.order_id}/{dispatch_id}.pdf"
    assert payload["pdfBytes"] == len(data)
    assert payload["pdfUrl"]
    assert (payload["supplierType"], payload["attempt"]) == ("central_kitchen", 1)
