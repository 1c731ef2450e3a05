"""The settlement repair (docs/sweeps.md#lost-settlements): a completed payment whose
settlement job was lost gets it again; a failed settlement is left to an operator."""

from __future__ import annotations

from datetime import timedelta

from actors.payments import resettle_lost_payments
from herald.db import session as db_session
from herald.queue import queue, running_worker
from models.base import utcnow
from models.payments import Payment
from models.store import Order
from tests.support.orders import PRICE, store_order
from tests.support.waiting import wait_for


def completed_payment(*, completed_ago: timedelta, order_status: str = "pending_payment"
                      ) -> tuple[str, str]:
    """A store order and its payment marked completed ``completed_ago``, with no
    settlement job (as after a crash between the completion's commit and the add)."""
    order_id = store_order("pending", order_status=order_status)
    with db_session() as session:
        payment = Payment(order_id=order_id, amount=PRICE, currency="USD",
                          status="completed", completed_at=utcnow() - completed_ago)
        session.add(payment)
        session.flush()
        return payment.id, order_id


def settlement_state(payment_id: str) -> str | None:
    job = queue("payment").get(f"{payment_id}-settle")
    return None if job is None else job.state


def test_a_completed_payment_whose_settlement_was_lost_is_settled(fulfillment: None) -> None:
    # Given a payment completed 20 minutes ago whose settlement job never made it, and one
    # completed a minute ago (its job may still be on the way)
    lost, order_id = completed_payment(completed_ago=timedelta(minutes=20))
    recent, _ = completed_payment(completed_ago=timedelta(minutes=1))
    # When the repair runs
    assert resettle_lost_payments() == 1
    # Then the lost one's settlement job is back under its own id, the recent one has none
    assert queue("payment").get(f"{recent}-settle") is None
    # and a worker settles it: the payment settled, the order paid, its issuance queued
    with running_worker(["payment"]):
        wait_for(lambda: settlement_state(lost) == "completed", timeout=30,
                 what="the settlement to run")
    with db_session() as session:
        assert session.get(Payment, lost).status == "settled"
        assert session.get(Order, order_id).status == "paid"
    assert queue("store-fulfillment").get(f"{order_id}-issue") is not None
    # And a second run adds nothing (the job is there, completed)
    assert resettle_lost_payments() == 0


def test_a_failed_settlement_is_left_to_an_operator(fulfillment: None) -> None:
    # Given a lost settlement whose order was cancelled meanwhile: its settlement fails
    payment_id, _ = completed_payment(completed_ago=timedelta(minutes=20),
                                      order_status="cancelled")
    assert resettle_lost_payments() == 1
    with running_worker(["payment"]):
        wait_for(lambda: settlement_state(payment_id) == "failed", timeout=60,
                 what="the settlement to fail")
    # When the repair runs again, the failed job is not retried behind the operator's back
    assert resettle_lost_payments() == 0
    job = queue("payment").get(f"{payment_id}-settle")
    assert (job.state, job.attempts_started) == ("failed", 1)
