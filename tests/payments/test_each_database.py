"""The payment lane step by step on each database: PostgreSQL runs each step as one
statement (two for a creation), SQLite through the ORM session; both answer the same.
The actors are called in process, as a worker calls them."""

from __future__ import annotations

from typing import Any

import pytest
from fastapi.testclient import TestClient

from actors.payments import PaymentAction, PaymentJob, send_receipt, settle_payment
from herald.queue import Permanent
from herald.web import create_app
from models.base import utcnow
from tests.support.payments.steps import (
    account,
    job,
    order_status,
    payment,
    payments_count,
    post,
    receipts,
    set_order_status,
    store_order,
)


def settlement(payment_view: dict[str, Any], account_id: str) -> PaymentJob:
    """The settlement job the completion adds (as its payload holds it)."""
    return PaymentJob(action=PaymentAction.SETTLE, payment_id=payment_view["id"],
                      order_id=payment_view["order_id"], user_id=account_id,
                      gateway=payment_view["gateway"], created_at=utcnow())


def test_a_payment_goes_from_created_to_its_receipt(on_each_database: str) -> None:
    client = TestClient(create_app())
    # Given an order, and a payment created for it
    account_id = account(client)
    order_id = store_order(account_id)
    created = post(client, "/v1/payments", {"order_id": order_id, "amount": "50.00",
                                            "currency": "SAR"}, expect=201)
    assert created == payment(client, created["id"])
    assert (created["status"], created["amount"], created["completed_at"]) == (
        "pending", "50.00", None)
    # When the gateway completes it
    completed = post(client, f"/v1/payments/{created['id']}/complete", expect=202)
    # Then it answers the payment as stored, completed, and the settlement job is queued
    assert completed == payment(client, created["id"])
    assert completed["status"] == "completed" and completed["completed_at"]
    queued = job("payment", f"{created['id']}-settle")
    assert queued is not None and queued.payload["userId"] == account_id
    # When the settlement runs
    answer = settle_payment(settlement(created, account_id))
    # Then the payment is settled, the order paid, its issuance and receipt queued
    settled = payment(client, created["id"])
    assert (settled["status"], order_status(order_id)) == ("settled", "paid")
    assert settled["settled_at"] and settled["completed_at"] == completed["completed_at"]
    assert answer == {"payment_id": created["id"], "handoff": "added", "receipt": "added"}
    assert job("store-fulfillment", f"{order_id}-issue") is not None
    # and a late completion adds nothing, answering the settled payment (200)
    assert post(client, f"/v1/payments/{created['id']}/complete", expect=200) == settled
    # and a replayed settlement redoes only the handoff, the payment as it was
    assert settle_payment(settlement(created, account_id))["handoff"] == "duplicated"
    assert payment(client, created["id"]) == settled
    # and the receipt goes to the payer once
    receipt = settlement(created, account_id).model_copy(
        update={"action": PaymentAction.SEND_RECEIPT})
    assert send_receipt(receipt)["created"] is True
    assert send_receipt(receipt)["created"] is False
    assert receipts(account_id) == 1


@pytest.mark.parametrize(("order", "body", "status", "code"), [
    ("paid", {}, 409, "payment_conflict"),
    ("pending_payment", {"amount": "49.99"}, 422, "invalid_payment"),
    ("pending_payment", {"currency": "USD"}, 422, "invalid_payment"),
    ("missing", {}, 404, "order_not_found"),
    ("paying", {}, 409, "payment_conflict"),
], ids=["order-paid", "not-the-price", "not-the-currency", "unknown-order",
        "second-payment"])
def test_a_refused_payment_persists_nothing(on_each_database: str, order: str,
                                            body: dict[str, str], status: int,
                                            code: str) -> None:
    client = TestClient(create_app())
    account_id = account(client)
    order_id = ("no-such-order" if order == "missing"
                else store_order(account_id, status="pending_payment" if order == "paying"
                                 else order))
    if order == "paying":
        post(client, "/v1/payments", {"order_id": order_id, "amount": "50.00",
                                      "currency": "SAR"}, expect=201)
    response = client.post("/v1/payments", json={"order_id": order_id, "amount": "50.00",
                                                  "currency": "SAR", **body})
    assert (response.status_code, response.json()["error"]["code"]) == (status, code)
    assert payments_count() == (1 if order == "paying" else 0)


def test_a_settlement_of_an_order_no_longer_waiting_changes_nothing(
        on_each_database: str) -> None:
    client = TestClient(create_app())
    # Given a completed payment whose order was cancelled meanwhile
    account_id = account(client)
    order_id = store_order(account_id)
    created = post(client, "/v1/payments", {"order_id": order_id, "amount": "50.00",
                                            "currency": "SAR"}, expect=201)
    completed = post(client, f"/v1/payments/{created['id']}/complete", expect=202)
    set_order_status(order_id, "cancelled")
    # When its settlement runs, it fails for good, saying why
    with pytest.raises(Permanent, match=f"order {order_id} is cancelled, not pending_payment"):
        settle_payment(settlement(created, account_id))
    # and neither the payment nor the order moved
    assert payment(client, created["id"]) == completed
    assert order_status(order_id) == "cancelled"


@pytest.mark.parametrize(("body", "message"), [
    ({"currency": "USD"}, 'currency: the order is priced in SAR, not USD; send "currency": '
                          '"SAR" with "amount": "50.00"'),
    ({"currency": "USD", "amount": "13.33"},
     'currency: the order is priced in SAR, not USD; send "currency": "SAR" with '
     '"amount": "50.00"'),
    ({"amount": "49.99"}, 'amount: the order costs 50.00 SAR; send "amount": "50.00"'),
    ({"amount": 4.6}, 'amount: must be a decimal string, like "4.60", not a JSON number'),
    ({"amount": 50}, 'amount: must be a decimal string, like "4.60", not a JSON number'),
], ids=["another-currency", "another-currency-and-amount", "not-the-price", "float-amount",
        "integer-amount"])
def test_a_payment_that_is_not_the_orders_price_says_which_field_and_what_to_send(
        on_each_database: str, body: dict[str, Any], message: str) -> None:
    client = TestClient(create_app())
    # Given an order of 50.00 SAR
    order_id = store_order(account(client))
    # When a payment of another currency or amount, or an amount as a JSON number, is sent
    response = client.post("/v1/payments", json={"order_id": order_id, "amount": "50.00",
                                                  "currency": "SAR", **body})
    # Then 422 names the field at fault and says what to send instead
    error = response.json()["error"]
    code = "validation_error" if not isinstance(body.get("amount", ""), str) else \
        "invalid_payment"
    assert (response.status_code, error["code"], error["message"]) == (422, code, message)
    # and nothing was written: no payment, the order still waits for one
    assert payments_count() == 0
    assert order_status(order_id) == "pending_payment"
