"""Payments on PostgreSQL + Redis: completion, settlement and its handoff to issuance,
one settlement however often the gateway completes, settlement replay, a failed
settlement retried in place, and bad input on every payment route."""

from __future__ import annotations

from typing import Any

import pytest
from fastapi.testclient import TestClient

from herald.queue import queue, running_worker
from tests.support.payments.steps import (
    account,
    finished,
    job,
    order_status,
    payment,
    payments_count,
    post,
    receipts,
    set_order_status,
    store_order,
)
from tests.support.waiting import wait_for


def paid_order(client: TestClient) -> tuple[str, str, dict[str, Any]]:
    """An account, its order and a pending payment for it."""
    account_id = account(client)
    order_id = store_order(account_id)
    created = post(client, "/v1/payments", {"order_id": order_id, "amount": "50.00",
                                            "currency": "SAR"}, expect=201)
    return account_id, order_id, created


def settled(client: TestClient, payment_id: str) -> bool:
    return payment(client, payment_id)["status"] == "settled"


def test_a_completed_payment_settles_the_order_and_hands_it_to_issuance(
        client: TestClient) -> None:
    # Given a payment for a store order
    account_id, order_id, created = paid_order(client)
    assert {k: created[k] for k in ("status", "order_id", "activation_id", "amount",
                                    "currency", "gateway")} == {
        "status": "pending", "order_id": order_id, "activation_id": None,
        "amount": "50.00", "currency": "SAR", "gateway": "mock"}
    payment_id = created["id"]
    # When the gateway completes it
    completed = post(client, f"/v1/payments/{payment_id}/complete", expect=202)
    assert completed["status"] == "completed" and completed["completed_at"]
    settle = job("payment", f"{payment_id}-settle")
    assert settle is not None and settle.payload == {
        "type": "payment", "action": "settle_payment", "paymentId": payment_id,
        "orderId": order_id, "activationId": None, "userId": account_id, "gateway": "mock",
        "createdAt": settle.payload["createdAt"]}
    # and the payment worker runs
    with running_worker(["payment"]):
        wait_for(lambda: settled(client, payment_id), what="settlement")
        wait_for(lambda: finished("payment", f"{payment_id}-receipt"), what="the receipt")
    # Then the payment is settled, the order paid, and its issuance run is queued
    assert payment(client, payment_id)["settled_at"]
    assert order_status(order_id) == "paid"
    issue = job("store-fulfillment", f"{order_id}-issue")
    assert issue is not None and issue.state == "waiting"
    assert issue.payload["order_id"] == order_id
    assert job("payment", f"{payment_id}-settle").return_value["handoff"] == "added"
    # and the payer got one receipt
    assert receipts(account_id) == 1


def test_completing_twice_settles_once(client: TestClient) -> None:
    # Given a payment completed twice before any worker ran (the gateway retried)
    account_id, _, created = paid_order(client)
    payment_id = created["id"]
    post(client, f"/v1/payments/{payment_id}/complete", expect=202)
    post(client, f"/v1/payments/{payment_id}/complete", expect=202)
    with running_worker(["payment"]):
        wait_for(lambda: settled(client, payment_id), what="settlement")
        wait_for(lambda: finished("payment", f"{payment_id}-receipt"), what="the receipt")
        first = payment(client, payment_id)
        # When the gateway completes it once more, after settlement
        again = post(client, f"/v1/payments/{payment_id}/complete", expect=200)
        # Then it is answered 200 with the settled payment and nothing is queued
        assert again == first
        assert job("payment", f"{payment_id}-settle").state == "completed"
        # (a sentinel behind it proves no settlement slipped in)
        sentinel = post(client, "/v1/payments", {"order_id": store_order(account_id),
                                                 "amount": "50.00", "currency": "SAR"},
                        expect=201)
        post(client, f"/v1/payments/{sentinel['id']}/complete", expect=202)
        wait_for(lambda: settled(client, sentinel["id"]), what="the sentinel's settlement")
    settle = job("payment", f"{payment_id}-settle")
    assert (settle.state, settle.attempts_started) == ("completed", 1)
    assert payment(client, payment_id) == first
    assert queue("payment").counts()["completed"] == 4  # two settlements, two receipts
    assert receipts(account_id) == 2  # one per payment


def test_replaying_settlement_redoes_only_the_handoff(client: TestClient) -> None:
    # Given a settled payment whose issuance job was lost downstream
    account_id, order_id, created = paid_order(client)
    payment_id = created["id"]
    post(client, f"/v1/payments/{payment_id}/complete", expect=202)
    with running_worker(["payment"]):
        wait_for(lambda: settled(client, payment_id), what="settlement")
        wait_for(lambda: finished("payment", f"{payment_id}-receipt"), what="the receipt")
        before = payment(client, payment_id)
        assert queue("store-fulfillment").remove(f"{order_id}-issue")
        # When an operator replays the settlement
        replay = post(client, f"/v1/payments/{payment_id}/settle", expect=202)
        assert replay["settlement"] == {"job_id": f"{payment_id}-settle",
                                        "status": "replayed"}
        wait_for(lambda: job("store-fulfillment", f"{order_id}-issue") is not None,
                 what="the handoff again")
        wait_for(lambda: finished("payment", f"{payment_id}-settle"), what="the replay")
    # Then the issuance run is queued again, the settlement ran twice in place
    settle = job("payment", f"{payment_id}-settle")
    assert (settle.state, settle.attempts_started, settle.return_value) == (
        "completed", 1, {"payment_id": payment_id, "handoff": "added",
                         "receipt": "duplicated"})
    assert job("store-fulfillment", f"{order_id}-issue").state == "waiting"
    # and nothing else was redone: the payment and order as they were, the receipt job
    # (another payment action) deduplicated, one receipt
    assert payment(client, payment_id) == before
    assert order_status(order_id) == "paid"
    assert job("payment", f"{payment_id}-receipt").attempts_started == 1
    assert receipts(account_id) == 1


def test_a_failed_settlement_is_retried_in_place(client: TestClient) -> None:
    # Given a completed payment whose order was cancelled before it settled
    _, order_id, created = paid_order(client)
    payment_id = created["id"]
    set_order_status(order_id, "cancelled")
    post(client, f"/v1/payments/{payment_id}/complete", expect=202)
    with running_worker(["payment"]):
        wait_for(lambda: finished("payment", f"{payment_id}-settle"), what="settlement")
        failed = job("payment", f"{payment_id}-settle")
        assert failed.state == "failed" and "not pending_payment" in failed.failed_reason
        assert payment(client, payment_id)["status"] == "completed"
        assert order_status(order_id) == "cancelled"
        # When the order is put back and the gateway completes the payment again
        set_order_status(order_id, "pending_payment")
        post(client, f"/v1/payments/{payment_id}/complete", expect=202)
        wait_for(lambda: settled(client, payment_id), what="the retried settlement")
        wait_for(lambda: finished("payment", f"{payment_id}-settle"))
    # Then the same job ran again from its first attempt and settled the order
    settle = job("payment", f"{payment_id}-settle")
    assert (settle.state, settle.attempts_made, settle.attempts_started) == (
        "completed", 0, 1)
    assert order_status(order_id) == "paid"
    assert job("store-fulfillment", f"{order_id}-issue") is not None


# -- bad input -------------------------------------------------------------------------------
@pytest.mark.parametrize(("body", "status", "code"), [
    ({"amount": "50.00", "currency": "SAR"}, 422, "invalid_payment"),
    ({"order_id": "ORDER", "activation_id": "x", "amount": "50.00", "currency": "SAR"},
     422, "invalid_payment"),
    ({"order_id": "ORDER", "amount": "fifty", "currency": "SAR"}, 422, "invalid_payment"),
    ({"order_id": "ORDER", "amount": "-50", "currency": "SAR"}, 422, "invalid_payment"),
    ({"order_id": "ORDER", "amount": "0", "currency": "SAR"}, 422, "invalid_payment"),
    ({"order_id": "ORDER", "amount": "50.00001", "currency": "SAR"}, 422, "invalid_payment"),
    ({"order_id": "ORDER", "amount": "NaN", "currency": "SAR"}, 422, "invalid_payment"),
    ({"order_id": "ORDER", "amount": "49.99", "currency": "SAR"}, 422, "invalid_payment"),
    ({"order_id": "ORDER", "amount": "50.00", "currency": "USD"}, 422, "invalid_payment"),
    ({"order_id": "ORDER", "amount": "50.00", "currency": "sar"}, 422, "validation_error"),
    ({"order_id": "ORDER", "amount": 50, "currency": "SAR"}, 422, "validation_error"),
    ({"order_id": "ORDER", "amount": "50.00", "currency": "SAR", "gateway": "cash"},
     422, "invalid_payment"),
    ({"order_id": "no-such-order", "amount": "50.00", "currency": "SAR"}, 404,
     "order_not_found"),
    ({"activation_id": "no-such-activation", "amount": "50.00", "currency": "SAR"}, 404,
     "activation_not_found"),
    ({"order_id": "PAID", "amount": "50.00", "currency": "SAR"}, 409, "payment_conflict"),
    ({"order_id": "PAYING", "amount": "50.00", "currency": "SAR"}, 409, "payment_conflict"),
], ids=["no-target", "two-targets", "not-a-number", "negative", "zero", "five-places",
        "nan", "not-the-price", "not-the-currency", "lowercase-currency", "number-amount",
        "unknown-gateway", "unknown-order", "unknown-activation", "order-paid",
        "second-payment"])
def test_a_refused_payment_persists_nothing(client: TestClient, body: dict[str, Any],
                                            status: int, code: str) -> None:
    account_id = account(client)
    orders = {"ORDER": store_order(account_id), "PAID": store_order(account_id, status="paid"),
              "PAYING": store_order(account_id)}
    post(client, "/v1/payments", {"order_id": orders["PAYING"], "amount": "50.00",
                                  "currency": "SAR"}, expect=201)
    if "order_id" in body:
        body = {**body, "order_id": orders.get(body["order_id"], body["order_id"])}
    response = client.post("/v1/payments", json=body)
    assert response.status_code == status, response.text
    error = response.json()["error"]
    assert error["code"] == code
    assert payments_count() == 1
    assert order_status(orders["ORDER"]) == "pending_payment"


def test_unknown_payments_are_404_and_an_uncompleted_one_is_not_replayed(
        client: TestClient) -> None:
    for method, path in (("GET", "/v1/payments/nope"), ("POST", "/v1/payments/nope/complete"),
                         ("POST", "/v1/payments/nope/settle")):
        response = client.request(method, path)
        assert (response.status_code, response.json()["error"]["code"]) == (
            404, "payment_not_found"), path
    # a pending payment has nothing to settle yet: 409, and no job
    _, _, created = paid_order(client)
    response = client.post(f"/v1/payments/{created['id']}/settle")
    assert (response.status_code, response.json()["error"]["code"]) == (409, "payment_conflict")
    assert job("payment", f"{created['id']}-settle") is None
    assert payment(client, created["id"])["status"] == "pending"
