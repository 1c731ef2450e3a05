"""An issued profile sends the ``esim.ready`` email — with its QR code attached — through
the notification pipeline, once per profile however many runs see the order issued."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta

import pytest
from sqlalchemy import func
from sqlmodel import select

from actors.store import Trigger, enqueue_issuance, issuance_job_id
from actors.store_recovery import recover_orders
from herald import db
from herald.queue import running_worker
from models.base import utcnow
from models.notifications import Notification
from models.store import EventSource, IssuanceState, transition_store_order
from providers.esim_mock import MockEsimProvider
from providers.mock import MockProvider
from tests.store.conftest import STORE_QUEUES
from tests.support.store.steps import account, order, paid, store_row, wait_job, wait_state
from tests.support.waiting import wait_for


@pytest.fixture
def workers(store: str) -> Iterator[None]:
    MockEsimProvider.reset()
    MockProvider.reset()
    with running_worker(list(STORE_QUEUES)):
        yield
    MockProvider.reset()
    MockEsimProvider.reset()


def emails_to(address: str) -> list[dict[str, object]]:
    return [send for send in MockProvider.sends(accepted_only=True)
            if send["channel"] == "email" and send["to"] == address]


def test_the_esim_email_with_its_qr_code_is_sent_once_per_profile(workers: None) -> None:
    address = "buyer@example.com"
    order_id = paid("mock-ok", account(address))

    # When the order is issued
    enqueue_issuance(order_id)
    profile = wait_state(order_id, "issued")["profile"]

    # Then the eSIM email reaches the mock provider with the QR code attached
    [email] = wait_for(lambda: emails_to(address), what="the esim.ready email")  # type: ignore[misc]
    assert email["attachments"] == ["esim-qr.png"]
    assert profile["iccid"] in str(email["text"])

    # When more runs find the order issued (a requeue, a provider webhook)
    for trigger, key in ((Trigger.REQUEUE, "again"), (Trigger.PROVIDER_WEBHOOK, "late")):
        enqueue_issuance(order_id, trigger, run_key=key)
        wait_job(issuance_job_id(order_id, trigger, key), "completed")

    # Then there is still one notification of the profile and one email
    with db.session() as session:
        notifications = session.exec(select(func.count()).select_from(Notification).where(
            Notification.type == "esim.ready",
            Notification.occurrence == profile["iccid"])).one()
    assert notifications == 1
    assert len(emails_to(address)) == 1
    assert order(order_id)["status"] == "completed"


def test_an_issued_order_whose_run_ended_before_its_email_gets_it_from_recovery(
        workers: None) -> None:
    address = "late@example.com"
    order_id = paid("mock-ok", account(address))
    # Given an order issued by a run that was killed before it triggered the eSIM email
    # (no notification, announced_at unset), long enough ago for the stalled scan
    with db.session() as session:
        transition_store_order(session, order_id, to=IssuanceState.IN_FLIGHT,
                               expect={IssuanceState.PENDING}, source=EventSource.SYSTEM,
                               note="test: asking the provider",
                               in_flight_at=utcnow() - timedelta(hours=1))
    with db.session() as session:
        transition_store_order(session, order_id, to=IssuanceState.ISSUED,
                               expect={IssuanceState.IN_FLIGHT}, source=EventSource.SYSTEM,
                               note="test: issued", iccid="8999000000000000042",
                               activation_code="LPA:1$smdp.test$X", smdp_address="smdp.test")
    # When the recovery scans run
    assert recover_orders().stalled_scan == 1
    # Then the run they add sends the eSIM email, and the order counts as announced
    [email] = wait_for(lambda: emails_to(address), what="the esim.ready email")  # type: ignore[misc]
    assert "8999000000000000042" in str(email["text"])
    wait_for(lambda: store_row(order_id).announced_at is not None, what="the stamp")
    # and a later scan leaves it alone
    assert recover_orders().total == 0

