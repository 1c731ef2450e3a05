"""Sysco's acknowledgments: the inbound poll against a real SFTP server, the processing of
855s and 997s on PostgreSQL, the reroutes they enqueue on Redis, the poll's schedule and
the reprocessing route."""

from __future__ import annotations

import contextlib
import json
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import asyncssh
import pytest
import redis
from fastapi.testclient import TestClient
from sqlmodel import select

from actors.sysco_inbound import SCHEDULE_NAME, poll_inbound, poll_sysco_inbound
from herald import db, settings
from herald.demo.sftp_server import SftpTestServer
from herald.queue import (
    Job,
    current_app,
    enqueue,
    fire_due,
    now_ms,
    queue,
    running_worker,
)
from herald.web.app import create_app
from models.purchasing import (
    DispatchStatus,
    EventType,
    LineStatus,
    PurchaseOrderEvent,
    PurchaseOrderLine,
    Supplier,
    SupplierDispatch,
    VendorDocument,
    set_line_status,
    transition_dispatch,
)
from providers.mock import MockProvider
from providers.sftp import openssh_key_line
from tests.purchasing.conftest import Placed, make_item, make_supplier, place_order
from tests.support.queue_app import install_queue_app
from tests.support.row_locks import held_elsewhere, lock_waiters
from tests.support.waiting import wait_for

REROUTE = "backorder-reroute"
DISPATCH = "supplier-dispatch"
ADMIN = "buyer-oncall@herald.test"
X12_997 = (Path(__file__).parent.parent / "providers" / "x12" / "997_accepted.edi").read_text()


def ack_855(order_number: str, lines: list[list[str]], *, ack_type: str = "AC") -> str:
    """A valid 855 interchange answering ``order_number``: one PO1 per entry of ``lines``
    (the 850's line numbers 1, 2, …), with one ACK per code."""
    body = [f"BAK*00*{ack_type}*{order_number}*20250304****SYS-77*20250305"]
    for number, codes in enumerate(lines, start=1):
        body.append(f"PO1*{number}*2*CA***VN*SKU{number}")
        body.extend(f"ACK*{code}*2*CA" for code in codes)
    body.append(f"CTT*{len(lines)}")
    segments = ["ST*855*0001", *body, f"SE*{len(body) + 2}*0001"]
    return "~\n".join([
        "ISA*00*          *00*          *ZZ*SYSCOEDI       *ZZ*HERALD         *250305*0712*U"
        "*00401*000004711*0*T*>",
        "GS*PR*SYSCOEDI*HERALD*20250305*0712*4711*X*004010", *segments, "GE*1*4711",
        "IEA*1*000004711"]) + "~\n"


@pytest.fixture
def alerts(purchasing: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setenv("ADMIN_ALERT_EMAIL", ADMIN)
    settings.reset_settings()
    yield
    settings.reset_settings()


class Sysco:
    """A Sysco supplier on the test SFTP server with an order it has acknowledged nothing
    of yet: three lines submitted (the first has a Costco alternate)."""

    def __init__(self, server: SftpTestServer, root: Path) -> None:
        self.server, self.root = server, root
        self.id = make_supplier("sysco", sftp=server)
        self.costco = make_supplier("costco")
        items = [make_item("Tomatoes", mappings=[(self.id, "SKU1", True),
                                                 (self.costco, "C-1", False)]),
                 make_item("Basil", mappings=[(self.id, "SKU2", True)]),
                 make_item("Flour", mappings=[(self.id, "SKU3", True)])]
        self.order: Placed = place_order([(item, 2) for item in items], order_number="PO-2001")
        self.dispatch = self.order.dispatch_by_supplier[self.id]
        self.lines = self.order.line_ids
        with db.session() as session:  # as the dispatch job leaves it once the 850 is up
            transition_dispatch(session, self.dispatch, to=DispatchStatus.SUBMITTED,
                                expect={DispatchStatus.PENDING}, reference="PO_x.edi")
            set_line_status(session, self.lines, to=LineStatus.SUBMITTED)

    def drop(self, name: str, content: str | bytes) -> Path:
        """A file the supplier puts in its inbound directory."""
        path = self.root / "inbound" / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(content.encode() if isinstance(content, str) else content)
        return path

    def files(self, directory: str) -> list[str]:
        path = self.root / directory
        return sorted(p.name for p in path.iterdir() if p.is_file()) if path.exists() else []


@pytest.fixture
def sysco(purchasing: str, sftp: SftpTestServer, tmp_path: Path) -> Sysco:
    return Sysco(sftp, tmp_path / "sftp")


def statuses() -> dict[str, str]:
    with db.session() as session:
        return {line.id: line.status for line in session.exec(select(PurchaseOrderLine))}


def events(type: EventType) -> list[PurchaseOrderEvent]:
    with db.session() as session:
        return list(session.exec(select(PurchaseOrderEvent)
                                 .where(PurchaseOrderEvent.type == type.value)))


def reroute_jobs() -> list[Job]:
    return queue(REROUTE).jobs("waiting")


def only_poll(sysco: Sysco) -> dict[str, Any]:
    [poll] = poll_inbound().suppliers
    assert poll.supplier_id == sysco.id
    return poll.as_dict()


# -- the poll cycle ---------------------------------------------------------------------------
def test_a_poll_applies_and_archives_an_855_and_a_997_and_reroutes_the_backordered_line(
        sysco: Sysco) -> None:
    # Given an 855 back-ordering line 1 (line 2 ships, line 3 ships in part), a 997, and
    # files a reader must leave alone
    sysco.drop("855_0001.edi", ack_855("PO-2001", [["IB"], ["IA"], ["IA", "IB"]]))
    sysco.drop("997_0001.edi", X12_997)
    for name in (".in-progress.edi", "855_0002.edi.tmp", "855_0003.edi.part"):
        sysco.drop(name, "half a file")

    report = only_poll(sysco)

    # Then both were applied and archived, the others left where they are
    assert (report["candidates"], report["processed"], report["systemic"]) == (2, 2, False)
    assert sysco.files("archive") == ["855_0001.edi", "997_0001.edi"]
    assert sysco.files("inbound") == [".in-progress.edi", "855_0002.edi.tmp",
                                      "855_0003.edi.part"]
    # the dispatch is confirmed; line 1 is back-ordered by the supplier, the others confirmed
    with db.session() as session:
        dispatch = session.get(SupplierDispatch, sysco.dispatch)
        documents = {d.reference: d.kind for d in session.exec(select(VendorDocument))}
        supplier = session.get(Supplier, sysco.id)
    assert dispatch is not None and dispatch.status == "confirmed"
    assert documents == {"855_0001.edi": "855", "997_0001.edi": "997"}
    assert statuses() == {sysco.lines[0]: "backordered", sysco.lines[1]: "confirmed",
                          sysco.lines[2]: "confirmed"}
    [backordered] = events(EventType.LINE_ITEM_BACKORDERED)
    assert (backordered.line_item_id, backordered.supplier_id, backordered.actor_id) == (
        sysco.lines[0], sysco.id, f"supplier:{sysco.id}")
    assert len(events(EventType.SUPPLIER_CONFIRMED)) == 1
    # and one reroute is queued for line 1 only
    [job] = reroute_jobs()
    assert job.dedup_id == f"reroute:{sysco.lines[0]}:{sysco.id}"
    assert job.payload == {"orderId": sysco.order.order_id, "lineItemId": sysco.lines[0],
                           "originalSupplierId": sysco.id, "alternateSupplierId": None,
                           "ackCode": "IB",
                           "reason": "Supplier acknowledgment IB on 855_0001.edi"}
    # in one SFTP session, closed; the server's key is recorded for the next ones
    assert (sysco.server.sessions_opened, sysco.server.sessions_open) == (1, 0)
    assert supplier is not None and supplier.sftp is not None
    assert supplier.sftp["host_key"] == sysco.server.host_key_line


def test_a_poll_whose_first_host_key_another_session_recorded_meanwhile_reads_nothing(
        sysco: Sysco) -> None:
    # Given an 855 waiting for a supplier with no recorded host key
    sysco.drop("855_0001.edi", ack_855("PO-2001", [["IA"], ["IA"], ["IA"]]))
    # and another session that records another key while the poll is connecting: it
    # holds the supplier's row, updated, until the poll waits to record its own
    with db.session() as session:
        row = session.get(Supplier, sysco.id)
        assert row is not None and row.sftp is not None and not row.sftp.get("host_key")
        other_key = openssh_key_line(
            asyncssh.generate_private_key("ssh-ed25519").convert_to_public())
        recorded = json.dumps({**row.sftp, "host_key": other_key})
    with held_elsewhere(("UPDATE suppliers SET sftp = CAST(:sftp AS json) WHERE id = :id",
                         {"sftp": recorded, "id": sysco.id})) as release, \
            ThreadPoolExecutor(1) as pool:
        polling = pool.submit(only_poll, sysco)
        wait_for(lambda: lock_waiters("%FOR UPDATE%") == 1,
                 what="the poll to wait for the supplier's row to record its key")
        release.set()
        report = polling.result(timeout=30)

    # Then the poll stopped before reading: the file is where it was, nothing applied,
    # and the key recorded is the other session's
    assert report["error"] and "was not recorded" in report["error"]
    assert (report["candidates"], report["processed"]) == (0, 0)
    assert sysco.files("inbound") == ["855_0001.edi"]
    assert sysco.files("archive") == []
    assert statuses() == dict.fromkeys(sysco.lines, "submitted")
    with db.session() as session:
        supplier = session.get(Supplier, sysco.id)
    assert supplier is not None and supplier.sftp is not None
    assert supplier.sftp["host_key"] == other_key


def test_an_unparsable_file_goes_to_failed_with_an_alert_and_is_not_systemic(
        sysco: Sysco, alerts: None) -> None:
    sysco.drop("855_0001.edi", ack_855("PO-2001", [["IA"], ["IA"], ["IA"]]))
    sysco.drop("855_0002.edi", "Dear Sysco, please send tomatoes.")

    report = only_poll(sysco)

    assert (report["processed"], report["unparsable"], report["systemic"]) == (1, 1, False)
    assert sysco.files("archive") == ["855_0001.edi"]
    assert sysco.files("archive/failed") == ["855_0002.edi"]
    assert sysco.files("inbound") == []
    [alert] = [send for send in MockProvider.sends() if send["to"] == ADMIN]
    assert "855_0002.edi" in alert["subject"]
    with db.session() as session:  # nothing recorded of the unparsable file
        assert [d.reference for d in session.exec(select(VendorDocument))] == ["855_0001.edi"]


def test_a_file_over_the_api_body_cap_is_not_read_but_moved_to_failed_with_an_alert(
        sysco: Sysco, alerts: None, monkeypatch: pytest.MonkeyPatch) -> None:
    # Given the API's body cap at 4 KiB, a 997 under it and a 64 KiB file over it
    monkeypatch.setenv("MAX_BODY_BYTES", "4096")
    settings.reset_settings()
    sysco.drop("997_0001.edi", X12_997)
    sysco.drop("855_0002.edi", "ISA*" + "9" * 65_536 + "~")

    report = only_poll(sysco)

    # Then the small file is applied, the large one moved to failed/ without a byte of it
    # read, and an operator is told why
    assert (report["processed"], report["unparsable"], report["systemic"]) == (1, 1, False)
    assert sysco.files("archive/failed") == ["855_0002.edi"]
    assert sysco.files("inbound") == []
    assert sysco.server.bytes_read == len(X12_997.encode())
    [alert] = [send for send in MockProvider.sends() if send["to"] == ADMIN]
    assert "855_0002.edi" in alert["subject"]
    assert "over the 4096 bytes accepted (MAX_BODY_BYTES)" in alert["text"]


def test_a_directory_whose_files_all_fail_is_systemic(sysco: Sysco) -> None:
    sysco.drop("855_0001.edi", "ISA*garbage~")
    report = only_poll(sysco)
    assert (report["unparsable"], report["systemic"]) == (1, True)


def test_a_file_read_again_is_already_processed_and_changes_nothing(sysco: Sysco) -> None:
    content = ack_855("PO-2001", [["IB"], ["IA"], ["IA"]])
    sysco.drop("855_0001.edi", content)
    first = only_poll(sysco)
    # When Sysco drops the same file again
    sysco.drop("855_0001.edi", content)
    second = only_poll(sysco)
    # Then it is archived as already processed: no second event, no second reroute
    assert (first["processed"], second["processed"], second["skipped"]) == (1, 0, 1)
    assert second["systemic"] is False
    assert sysco.files("inbound") == [] and sysco.files("archive") == ["855_0001.edi"]
    assert len(events(EventType.LINE_ITEM_BACKORDERED)) == 1
    assert len(reroute_jobs()) == 1


def test_a_file_whose_processing_raises_stays_in_place_until_a_poll_completes_it(
        sysco: Sysco, monkeypatch: pytest.MonkeyPatch, private_redis_url: str,
        redis_url: str) -> None:
    sysco.drop("855_0001.edi", ack_855("PO-2001", [["IR"], ["IA"], ["IA"]]))
    # Given Redis refusing every call (the reroute cannot be enqueued)
    use_redis(monkeypatch, private_redis_url)
    with contextlib.suppress(redis.ConnectionError):
        redis.Redis.from_url(private_redis_url).shutdown(nosave=True)

    down = only_poll(sysco)

    # Then the file stays in the inbound directory, counted as failed
    assert (down["failed"], down["processed"], down["systemic"]) == (1, 0, True)
    assert sysco.files("inbound") == ["855_0001.edi"] and sysco.files("archive") == []
    # When Redis is back, the next poll finishes it: archived, its reroute queued
    use_redis(monkeypatch, redis_url)
    back = only_poll(sysco)
    assert (back["skipped"], back["failed"], back["systemic"]) == (1, 0, False)
    assert sysco.files("archive") == ["855_0001.edi"]
    [job] = reroute_jobs()
    assert (job.payload["lineItemId"], job.payload["ackCode"]) == (sysco.lines[0], "IR")


def use_redis(monkeypatch: pytest.MonkeyPatch, url: str) -> None:
    monkeypatch.setenv("REDIS_URL", url)
    settings.reset_settings()
    install_queue_app()


def test_an_sftp_server_out_of_reach_is_systemic(sysco: Sysco) -> None:
    sysco.drop("855_0001.edi", ack_855("PO-2001", [["IB"], ["IA"], ["IA"]]))
    sysco.server.stop()
    report = only_poll(sysco)
    assert report["systemic"] is True and report["error"]
    assert sysco.files("inbound") == ["855_0001.edi"]
    assert statuses()[sysco.lines[0]] == "submitted"


def test_an_inactive_sysco_supplier_is_not_polled(sysco: Sysco) -> None:
    with db.session() as session:
        supplier = session.get(Supplier, sysco.id)
        assert supplier is not None
        supplier.active = False
        session.add(supplier)
    sysco.drop("855_0001.edi", ack_855("PO-2001", [["IB"], ["IA"], ["IA"]]))
    assert poll_inbound().suppliers == ()
    assert sysco.server.sessions_opened == 0


def test_a_rejected_order_backorders_every_line_and_is_not_confirmed(sysco: Sysco) -> None:
    sysco.drop("855_0001.edi", ack_855("PO-2001", [], ack_type="RJ"))
    assert only_poll(sysco)["processed"] == 1
    with db.session() as session:
        assert session.get(SupplierDispatch, sysco.dispatch).status == "submitted"  # type: ignore[union-attr]
    assert set(statuses().values()) == {"backordered"}
    assert sorted(job.payload["lineItemId"] for job in reroute_jobs()) == sorted(sysco.lines)
    assert {job.payload["ackCode"] for job in reroute_jobs()} == {"IR"}


# -- the schedule -----------------------------------------------------------------------------
def test_the_poll_runs_on_its_schedule_in_the_sysco_group_one_at_a_time(sysco: Sysco) -> None:
    [item] = [s for s in current_app().schedules().values() if s.name == SCHEDULE_NAME]
    assert item.actor is poll_sysco_inbound
    assert item.every is not None and item.every.total_seconds() == 900
    sysco.drop("855_0001.edi", ack_855("PO-2001", [["IA"], ["IA"], ["IA"]]))
    next_key = f"{settings.get_settings().queue_prefix}:schedules:next"
    # Given a tick that fell due, and another one while its job is still waiting
    first_due = now_ms() - 2000
    current_app().client.zadd(next_key, {SCHEDULE_NAME: first_due})
    fire_due([SCHEDULE_NAME])
    second_due = now_ms() - 1000
    current_app().client.zadd(next_key, {SCHEDULE_NAME: second_due})
    fire_due([SCHEDULE_NAME])
    # Then one poll job is queued, in the sysco group; the second tick added none
    [job] = queue(DISPATCH).jobs("waiting")
    assert (job.id, job.group) == (f"repeat:{SCHEDULE_NAME}:{first_due}", "sysco")
    assert queue(DISPATCH).get(f"repeat:{SCHEDULE_NAME}:{second_due}") is None
    # When a supplier worker runs it, it polls and reports
    with running_worker([DISPATCH]):
        done = wait_for(lambda: queue(DISPATCH).get(job.id).state == "completed",  # type: ignore[union-attr]
                        timeout=30, what="the poll job")
    assert done
    report = queue(DISPATCH).get(job.id).return_value  # type: ignore[union-attr]
    assert report["systemic"] is False and report["suppliers"][0]["processed"] == 1
    # and once it ended, the next tick adds a poll again
    third_due = now_ms() - 500
    current_app().client.zadd(next_key, {SCHEDULE_NAME: third_due})
    fire_due([SCHEDULE_NAME])
    assert queue(DISPATCH).get(f"repeat:{SCHEDULE_NAME}:{third_due}") is not None


def test_a_systemic_poll_fails_its_job_without_retrying(sysco: Sysco) -> None:
    sysco.server.stop()
    added = enqueue(poll_sysco_inbound, {}, group="sysco")
    with running_worker([DISPATCH]):
        wait_for(lambda: queue(DISPATCH).get(added.job_id).state == "failed",  # type: ignore[union-attr]
                 timeout=60, what="the poll job to fail")
    job = queue(DISPATCH).get(added.job_id)
    assert job is not None and job.attempts_started == 1
    assert "systemically" in (job.failed_reason or "")


# -- the route ---------------------------------------------------------------------------------
def test_the_route_processes_a_file_once_and_says_what_it_did(sysco: Sysco) -> None:
    content = ack_855("PO-2001", [["IB"], ["IA"], ["IA"]])
    body = {"supplier_id": sysco.id, "filename": "855_manual.edi", "content": content}
    with TestClient(create_app()) as client:
        first = client.post("/v1/inbound/sysco", json=body)
        again = client.post("/v1/inbound/sysco", json=body)
        garbage = client.post("/v1/inbound/sysco", json={**body, "filename": "x.edi",
                                                         "content": "not X12"})
        unknown = client.post("/v1/inbound/sysco", json={**body,
                                                         "supplier_id": str(uuid.uuid4())})
        not_sysco = client.post("/v1/inbound/sysco", json={**body, "supplier_id": sysco.costco})
        bad = client.post("/v1/inbound/sysco", json={"supplier_id": sysco.id,
                                                     "filename": "../etc/x", "content": ""})
    assert first.status_code == 200
    assert first.json()["status"] == "processed"
    assert first.json()["documents"][0]["backordered"] == [sysco.lines[0]]
    assert first.json()["enqueued"][0]["status"] == "added"
    assert again.status_code == 200 and again.json()["status"] == "alreadyProcessed"
    assert again.json()["enqueued"][0]["status"] == "deduplicated"
    assert garbage.status_code == 200
    assert garbage.json()["status"] == "notParsed" and "ISA" in garbage.json()["error"]
    assert (unknown.status_code, not_sysco.status_code, bad.status_code) == (404, 404, 422)
    assert len(events(EventType.LINE_ITEM_BACKORDERED)) == 1
    assert len(reroute_jobs()) == 1
