"""The dispatch worker's Sysco transport end to end: a placed order, the real worker, a
real SFTP server, the real X12 850 writer and the real control-number counter in Redis;
then what the supplier received and what the database says."""

from __future__ import annotations

import json
import re
from decimal import Decimal

import asyncssh

from herald import db
from herald.demo.sftp_server import SftpTestServer, start_sftp_server
from herald.queue import JobState, running_worker
from herald.settings import get_settings
from models.purchasing import DispatchStatus, Supplier, transition_dispatch
from providers.sftp import openssh_key_line
from providers.x12 import parse_envelope
from tests.purchasing.conftest import make_item, make_supplier, place_order
from tests.support.purchasing.dispatching import (
    dispatch_row,
    ended,
    enqueue_dispatch,
    events,
    files_under,
    line_statuses,
    order_row,
    supplier_row,
)
from tests.support.row_locks import held_elsewhere, lock_waiters
from tests.support.waiting import wait_for

QUEUES = ["supplier-dispatch"]


def test_a_sysco_order_becomes_one_850_on_the_server_and_a_submitted_dispatch(
        purchasing: str, sftp: SftpTestServer) -> None:
    # Given a Sysco supplier on a real SFTP server and an order of three of its items
    sysco = make_supplier("sysco", sftp=sftp)
    flour = make_item("Flour", "CA", mappings=[(sysco, "SY-FLOUR-25", True)])
    butter = make_item("Butter", "lb", mappings=[(sysco, "SY-BUTTER", True)])
    eggs = make_item("Eggs", "each", mappings=[(sysco, "SY-EGGS-12", True)])
    placed = place_order([(flour, 2), (butter, 1.5), (eggs, 12)], order_number="PO-1001",
                         restaurant_name="Bistro Nord")

    # When its dispatch job runs
    with running_worker(QUEUES):
        job = ended(enqueue_dispatch(placed, sysco).job_id)

    # Then the outbound directory holds one file, named after the restaurant, the order
    # and its ISA13, and nothing else was written
    assert job.state == JobState.COMPLETED, job.failed_reason
    [path] = files_under(sftp.root)
    match = re.fullmatch(r"outbound/(PO_bistro-nord_po-1001_(\d{9})\.edi)", path)
    assert match, path
    file_name, isa13 = match.groups()

    # and it is one valid 850 interchange to Sysco, test usage, with real counts
    settings = get_settings()
    interchange = parse_envelope((sftp.root / path).read_text())
    assert (interchange.sender_id, interchange.receiver_id, interchange.usage) == (
        settings.x12_sender_id, settings.x12_receiver_id, "T")
    assert interchange.control_number == isa13
    [group] = interchange.groups
    assert group.functional_id == "PO"
    assert group.control_number == str(int(isa13))
    [transaction] = group.transaction_sets
    assert transaction.code == "850"
    se = transaction.segments[-1]
    assert se.id == "SE" and int(se.get(1)) == len(transaction.segments)
    body = {segment.id: segment for segment in transaction.body}
    assert body["BEG"].get(3) == "PO-1001"
    po1s = [segment for segment in transaction.body if segment.id == "PO1"]
    assert [(s.get(1), Decimal(s.get(2)), s.get(3), s.get(6), s.get(7)) for s in po1s] == [
        ("1", Decimal("2"), "CA", "VN", "SY-FLOUR-25"),
        ("2", Decimal("1.5"), "LB", "VN", "SY-BUTTER"),
        ("3", Decimal("12"), "EA", "VN", "SY-EGGS-12")]
    assert body["CTT"].get(1) == "3"
    assert (body["N1"].get(1), body["N1"].get(2)) == ("ST", "Bistro Nord")

    # and the database says Sysco has it: the dispatch submitted on attempt 1 with the
    # file name as reference, its lines submitted, the order completed
    dispatch = dispatch_row(placed.dispatch_by_supplier[sysco])
    assert (dispatch.status, dispatch.reference, dispatch.attempt, dispatch.failure_reason) == (
        "submitted", file_name, 1, None)
    assert dispatch.submitted_at is not None
    assert set(line_statuses(placed.order_id).values()) == {"submitted"}
    assert order_row(placed.order_id).status == "completed"

    # and the audit trail has one SUPPLIER_SUBMITTED with the transport's keys
    [event] = events(placed.order_id, "SUPPLIER_SUBMITTED")
    payload = event["payload"]
    assert {key: payload[key] for key in ("reference", "supplierId", "supplierType",
                                          "lineCount", "segmentCount", "attempt",
                                          "remotePath", "dispatchId")} == {
        "reference": file_name, "supplierId": sysco, "supplierType": "sysco",
        "lineCount": 3, "segmentCount": len(transaction.segments), "attempt": 1,
        "remotePath": f"/outbound/{file_name}", "dispatchId": dispatch.id}
    assert payload["controlNumbers"] == {"interchange": isa13, "group": str(int(isa13)),
                                         "transaction": "0001"}
    assert [e["type"] for e in events(placed.order_id)] == ["SUPPLIER_SUBMITTED"]


def test_each_interchange_gets_a_fresh_higher_isa13_and_one_closed_session_per_job(
        purchasing: str, sftp: SftpTestServer) -> None:
    # Given a Sysco supplier whose outbound directory does not exist yet
    sysco = make_supplier("sysco", sftp=sftp, outbound_dir="/drop/orders/in")
    item = make_item("Flour", mappings=[(sysco, "SY-FLOUR", True)])
    assert not (sftp.root / "drop").exists()
    first = place_order([(item, 1)], order_number="PO-1")
    second = place_order([(item, 2)], order_number="PO-2")

    # When the two orders are dispatched one after the other
    with running_worker(QUEUES):
        jobs = [ended(enqueue_dispatch(placed, sysco).job_id) for placed in (first, second)]

    # Then the directory was created and holds both files
    assert [job.state for job in jobs] == [JobState.COMPLETED] * 2
    references = [dispatch_row(p.dispatch_by_supplier[sysco]).reference for p in (first, second)]
    assert files_under(sftp.root) == sorted(f"drop/orders/in/{name}" for name in references)

    # and the second interchange's control number is a fresh, higher one
    numbers = [int(parse_envelope((sftp.root / "drop/orders/in" / name).read_text())
                   .control_number) for name in references]
    assert numbers[0] < numbers[1]

    # and each job opened one session and closed it
    assert sftp.sessions_opened == 2
    assert sftp.sessions_open == 0


def test_the_first_host_key_seen_is_recorded_and_required_from_then_on(
        purchasing: str, sftp: SftpTestServer) -> None:
    # Given a Sysco supplier with no recorded host key
    sysco = make_supplier("sysco", sftp=sftp)
    item = make_item("Flour", mappings=[(sysco, "SY-FLOUR", True)])
    first = place_order([(item, 1)], order_number="PO-1")
    with running_worker(QUEUES):
        assert ended(enqueue_dispatch(first, sysco).job_id).state == JobState.COMPLETED

    # Then the key the server presented is recorded on the supplier
    sftp_settings = supplier_row(sysco).sftp
    assert sftp_settings is not None
    assert sftp_settings["host_key"] == sftp.host_key_line

    # When another server (another key) answers on that address
    sftp.stop()
    impostor = start_sftp_server(sftp.root.parent / "impostor")
    try:
        # point the supplier at it, keeping the recorded key
        with db.session() as session:
            row = session.get(Supplier, sysco)
            assert row is not None and row.sftp is not None
            row.sftp = {**row.sftp, "port": impostor.port}
            session.add(row)
        second = place_order([(item, 1)], order_number="PO-2")
        with running_worker(QUEUES):
            job = ended(enqueue_dispatch(second, sysco).job_id)

        # Then the dispatch fails at once (attempt 1) and nothing was written there
        assert (job.state, job.attempts_made) == (JobState.FAILED, 1)
        dispatch = dispatch_row(second.dispatch_by_supplier[sysco])
        assert (dispatch.status, dispatch.attempt) == ("failed", 1)
        assert "host key" in (dispatch.failure_reason or "")
        assert files_under(impostor.root) == []
    finally:
        impostor.stop()


def test_a_host_key_another_session_recorded_meanwhile_stops_the_upload(
        purchasing: str, sftp: SftpTestServer) -> None:
    # Given a Sysco supplier trusting its server's first key, and an order for it
    sysco = make_supplier("sysco", sftp=sftp, trust_on_first_use=True)
    item = make_item("Flour", mappings=[(sysco, "SY-FLOUR", True)])
    placed = place_order([(item, 1)], order_number="PO-1")
    # and another session that records another key while this dispatch is connecting:
    # it holds the supplier's row, updated, until the dispatch waits to record its own
    other_key = openssh_key_line(
        asyncssh.generate_private_key("ssh-ed25519").convert_to_public())
    before = supplier_row(sysco).sftp
    assert before is not None and before.get("host_key") is None
    recorded = json.dumps({**before, "host_key": other_key})
    with held_elsewhere(("UPDATE suppliers SET sftp = CAST(:sftp AS json) WHERE id = :id",
                         {"sftp": recorded, "id": sysco})) as release, \
            running_worker(QUEUES):
        job_id = enqueue_dispatch(placed, sysco).job_id
        wait_for(lambda: lock_waiters("%FOR UPDATE%") == 1,
                 what="the dispatch to wait for the supplier's row to record its key")
        release.set()
        job = ended(job_id)

    # Then the session that lost the race uploaded nothing, the key recorded is the other
    # session's, and the retry, which requires it, failed the dispatch for good
    assert files_under(sftp.root) == []
    after = supplier_row(sysco).sftp
    assert after is not None and after["host_key"] == other_key
    assert (job.state, job.attempts_made) == (JobState.FAILED, 2)
    dispatch = dispatch_row(placed.dispatch_by_supplier[sysco])
    assert (dispatch.status, dispatch.attempt) == ("failed", 2)
    assert "host key does not match" in (dispatch.failure_reason or "")


def test_an_already_submitted_or_confirmed_dispatch_is_skipped_without_sending(
        purchasing: str, sftp: SftpTestServer) -> None:
    # Given two Sysco orders whose dispatches are already submitted and confirmed
    sysco = make_supplier("sysco", sftp=sftp)
    item = make_item("Flour", mappings=[(sysco, "SY-FLOUR", True)])
    submitted = place_order([(item, 1)], order_number="PO-1")
    confirmed = place_order([(item, 1)], order_number="PO-2")
    with db.session() as session:
        for placed, status in ((submitted, DispatchStatus.SUBMITTED),
                               (confirmed, DispatchStatus.CONFIRMED)):
            assert transition_dispatch(session, placed.dispatch_by_supplier[sysco], to=status,
                                       expect={DispatchStatus.PENDING}, reference="earlier.edi")

    # When their jobs run (and a pending one after them, as a sentinel)
    pending = place_order([(item, 1)], order_number="PO-3")
    with running_worker(QUEUES):
        skipped = [ended(enqueue_dispatch(p, sysco).job_id) for p in (submitted, confirmed)]
        sentinel = ended(enqueue_dispatch(pending, sysco).job_id)

    # Then both completed as skipped, and only the sentinel's file reached the server
    for placed, job in zip((submitted, confirmed), skipped, strict=True):
        assert job.state == JobState.COMPLETED
        assert job.return_value == {"dispatchId": placed.dispatch_by_supplier[sysco],
                                    "skipped": True, "reason": "already_submitted"}
        assert dispatch_row(placed.dispatch_by_supplier[sysco]).reference == "earlier.edi"
        assert events(placed.order_id) == []
    assert sentinel.state == JobState.COMPLETED
    reference = dispatch_row(pending.dispatch_by_supplier[sysco]).reference
    assert files_under(sftp.root) == [f"outbound/{reference}"]
    assert sftp.sessions_opened == 1
