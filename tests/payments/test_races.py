"""Payments racing on PostgreSQL, where each step is one statement: two creations for one
order leave one payment, two completions add one settlement, two settlements settle once
(and write one ``payment.settled`` message). Each race is forced: the row both wait for
is held locked in another transaction until both are blocked behind it."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import pytest
from sqlalchemy import func, select, text
from sqlmodel import col

from actors.payments import (
    PaymentAction,
    PaymentConflict,
    PaymentJob,
    complete_payment,
    create_payment,
    settle_payment,
)
from herald import db
from models.base import utcnow
from models.webhooks import WebhookEndpoint, WebhookMessage, forget_subscribed_types
from tests.support.payments.steps import account, order_status, payment_status, store_order
from tests.support.row_locks import held_elsewhere, lock_waiters
from tests.support.waiting import wait_for


def race(table: str, row_id: str, step: Callable[[], Any]) -> list[Any]:
    """Run ``step`` twice at once, both started while ``table``'s row is held and let go
    once both wait for it; what each returned (or raised), in the order they ended."""
    ended: list[Any] = []

    def run() -> None:
        try:
            ended.append(step())
        except Exception as error:
            ended.append(error)

    threads = [threading.Thread(target=run) for _ in range(2)]
    with held_elsewhere((f"SELECT 1 FROM {table} WHERE id = :id FOR UPDATE", {"id": row_id})):
        for thread in threads:
            thread.start()
        wait_for(lambda: lock_waiters() >= 2, what="both steps to wait for the row")
    for thread in threads:
        thread.join(timeout=20)
    assert len(ended) == 2, ended
    return ended


def created_payment(client: Any) -> tuple[str, str, str]:
    """An account, its order and a pending payment for it."""
    account_id = account(client)
    order_id = store_order(account_id)
    payment = create_payment(order_id=order_id, amount="50.00", currency="SAR")
    return account_id, order_id, payment.id


def test_two_creations_for_one_order_leave_one_payment(client: Any) -> None:
    # Given an order waiting for its payment
    order_id = store_order(account(client))
    # When two payments for it are created at once
    ended = race("orders", order_id, lambda: create_payment(
        order_id=order_id, amount="50.00", currency="SAR"))
    # Then one was created and the other refused, naming the first
    created = [result for result in ended if not isinstance(result, Exception)]
    refused = [result for result in ended if isinstance(result, Exception)]
    assert len(created) == 1 and len(refused) == 1, ended
    assert isinstance(refused[0], PaymentConflict)
    assert f"already has payment {created[0].id}" in str(refused[0])
    with db.session() as session:
        assert session.execute(select(func.count()).select_from(text("payments"))
                               ).scalar_one() == 1


def test_two_completions_add_one_settlement(client: Any) -> None:
    # Given a pending payment
    _, _, payment_id = created_payment(client)
    # When the gateway completes it twice at once
    ended = race("payments", payment_id, lambda: complete_payment(payment_id))
    # Then both answer the completed payment, and one settlement job was added
    assert [payment.status for payment, _ in ended] == ["completed", "completed"]
    assert sorted(result.status for _, result in ended) == ["added", "duplicated"]
    assert ended[0][0].completed_at == ended[1][0].completed_at


@pytest.mark.parametrize("subscribed", [False, True], ids=["no-endpoint", "endpoint"])
def test_two_settlements_settle_once(client: Any, subscribed: bool) -> None:
    # Given a completed payment (and, for one run, an endpoint subscribed to its event)
    account_id, order_id, payment_id = created_payment(client)
    complete_payment(payment_id)
    if subscribed:
        with db.session() as session:
            session.add(WebhookEndpoint(url="https://example.com/hook",
                                        events=["payment.settled"]))
    forget_subscribed_types()
    job = PaymentJob(action=PaymentAction.SETTLE, payment_id=payment_id, order_id=order_id,
                     user_id=account_id, gateway="mock", created_at=utcnow())
    # When two settlements run at once (a redelivered job beside the first)
    ended = race("orders", order_id, lambda: settle_payment(job))
    # Then both end well: one handed the order to issuance, the other found it settled
    assert not [result for result in ended if isinstance(result, Exception)], ended
    assert sorted(result["handoff"] for result in ended) == ["added", "duplicated"]
    assert (payment_status(payment_id), order_status(order_id)) == ("settled", "paid")
    # and the settlement wrote its message once
    with db.session() as session:
        written = session.execute(select(func.count()).select_from(WebhookMessage)
                                  .where(col(WebhookMessage.type) == "payment.settled")
                                  ).scalar_one()
    assert written == (1 if subscribed else 0)
    forget_subscribed_types()
