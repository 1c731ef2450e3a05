"""Transient failures of the dispatch worker: a supplier's server that is away is retried
with the queue's backoff; back in time, the dispatch goes on a later attempt; away for
every attempt, the dispatch fails for good and the operator is told."""

from __future__ import annotations

import asyncssh
import pytest

from actors.queues import registry
from herald import settings
from herald.demo.sftp_server import SftpTestServer
from herald.queue import SECOND, JobState, queue, running_worker
from providers.mock import MockProvider
from providers.select import reset_providers
from tests.purchasing.conftest import Mailbox, make_item, make_supplier, place_order
from tests.support.purchasing.dispatching import (
    dispatch_row,
    ended,
    enqueue_dispatch,
    events,
    files_under,
    line_statuses,
    order_row,
)
from tests.support.waiting import wait_for

QUEUE = "supplier-dispatch"


def test_a_server_back_before_the_last_attempt_gets_the_order_on_attempt_2(
        purchasing: str, sftp: SftpTestServer) -> None:
    # Given a Sysco supplier whose SFTP server is down (retries wait 3 s here)
    sysco = make_supplier("sysco", sftp=sftp)
    item = make_item("Flour", mappings=[(sysco, "SY-FLOUR", True)])
    placed = place_order([(item, 1)])
    sftp.stop()

    with registry.redeclared((QUEUE,), backoff_base=3 * SECOND), running_worker([QUEUE]):
        # When its first attempt fails on the refused connection
        job_id = enqueue_dispatch(placed, sysco).job_id
        wait_for(lambda: (job := queue(QUEUE).get(job_id)) is not None
                 and job.attempts_made == 1, what="the first attempt to fail")
        dispatch = dispatch_row(placed.dispatch_by_supplier[sysco])
        assert (dispatch.status, dispatch.failure_reason) == ("pending", None)

        # and the server is back on the same address before the retry
        back = SftpTestServer(sftp.root, sftp.username, sftp.password,
                              asyncssh.generate_private_key("ssh-ed25519"))
        back.port = sftp.port
        back.start()
        try:
            job = ended(job_id)
        finally:
            back.stop()

    # Then the second attempt delivered it, and the dispatch says so
    assert (job.state, job.attempts_made) == (JobState.COMPLETED, 1)
    dispatch = dispatch_row(placed.dispatch_by_supplier[sysco])
    assert (dispatch.status, dispatch.attempt, dispatch.failure_reason) == ("submitted", 2, None)
    assert files_under(sftp.root) == [f"outbound/{dispatch.reference}"]
    [event] = events(placed.order_id, "SUPPLIER_SUBMITTED")
    assert event["payload"]["attempt"] == 2
    assert events(placed.order_id, "SUPPLIER_DISPATCH_FAILED") == []


def test_a_relay_refusing_every_attempt_fails_the_dispatch_and_alerts_the_operator(
        purchasing: str, mailbox: Mailbox, sftp: SftpTestServer,
        monkeypatch: pytest.MonkeyPatch) -> None:
    # Given operator alerts on, and an order for Costco and Sysco whose Costco relay
    # answers "try again later" to every message
    monkeypatch.setenv("ADMIN_ALERT_EMAIL", "ops@herald.test")
    settings.reset_settings()
    reset_providers()
    costco = make_supplier("costco")
    sysco = make_supplier("sysco", sftp=sftp)
    towels = make_item("Paper towels", mappings=[(costco, "CO-PT", True)])
    flour = make_item("Flour", mappings=[(sysco, "SY-FLOUR", True)])
    placed = place_order([(towels, 2), (flour, 1)])
    mailbox.relay.data_reply = "451 4.3.0 mailbox busy, try again later"

    # When both dispatches run (three attempts each allowed)
    with running_worker([QUEUE]):
        costco_job = ended(enqueue_dispatch(placed, costco).job_id)
        sysco_job = ended(enqueue_dispatch(placed, sysco).job_id)

    # Then Costco's job used its three attempts and its dispatch failed at attempt 3
    assert (costco_job.state, costco_job.attempts_made) == (JobState.FAILED, 3)
    assert sysco_job.state == JobState.COMPLETED
    failed = dispatch_row(placed.dispatch_by_supplier[costco])
    assert (failed.status, failed.attempt) == ("failed", 3)
    assert failed.failure_reason and "451 4.3.0" in failed.failure_reason
    assert mailbox.messages == []

    # and its line is dispatch_failed while Sysco's is submitted: the order is partial
    lines = line_statuses(placed.order_id)
    assert sorted(lines.values()) == ["dispatch_failed", "submitted"]
    assert order_row(placed.order_id).status == "partial"

    # and the audit trail and the operator were told, once
    [event] = events(placed.order_id, "SUPPLIER_DISPATCH_FAILED")
    assert (event["payload"]["attempt"], event["payload"]["supplierType"]) == (3, "costco")
    [alert] = MockProvider.sends(accepted_only=True)
    assert alert["to"] == "ops@herald.test"
    assert alert["idempotency_key"] == f"dispatch-failed-{failed.id}"
    assert "PO-1001" in alert["subject"]
