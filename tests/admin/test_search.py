"""``GET /admin/search`` on PostgreSQL + Redis: jobs by id or prefix in every queue, and
deliveries, notifications, accounts, orders and payments made by the real pipeline, each
with its jobs and its timeline (docs/console.md#search)."""

from __future__ import annotations

import uuid
from decimal import Decimal
from typing import Any

import pytest
from fastapi.testclient import TestClient
from hypothesis import HealthCheck, given
from hypothesis import settings as hypothesis_settings
from hypothesis import strategies as st

from herald import db, settings
from herald.queue import enqueue, running_worker
from tests.admin.conftest import ADMIN_HEADERS
from tests.support.waiting import wait_for

ORCHESTRATION = "notification-orchestration"
EMAIL = "amal.search@example.com"
PHONE = "+966501234567"


# -- helpers ------------------------------------------------------------------------------------
def search(client: TestClient, q: str) -> list[dict[str, Any]]:
    """The results of a search (asserting a 200 and the echoed query)."""
    response = client.get("/admin/search", params={"q": q}, headers=ADMIN_HEADERS)
    assert response.status_code == 200, response.text
    assert response.json()["q"] == q
    return list(response.json()["results"])


def hit(results: list[dict[str, Any]], kind: str, id_: str) -> dict[str, Any]:
    """The one result of ``kind`` with ``id_``."""
    found = [r for r in results if (r["kind"], r["id"]) == (kind, id_)]
    assert len(found) == 1, f"{kind} {id_} in {[(r['kind'], r['id']) for r in results]}"
    return found[0]


def events(result: dict[str, Any]) -> list[str]:
    """The timeline's event names, asserting it is oldest first."""
    stamps = [event["at"] for event in result["timeline"]]
    assert stamps == sorted(stamps), stamps
    return [event["event"] for event in result["timeline"]]


def jobs(result: dict[str, Any]) -> set[tuple[str, str, str]]:
    return {(job["queue"], job["id"], job["state"]) for job in result["jobs"]}


def account(client: TestClient, **fields: object) -> str:
    body = {"email": EMAIL, "phone": PHONE, **fields}
    response = client.post("/v1/accounts", json=body)
    assert response.status_code == 201, response.text
    return str(response.json()["id"])


def welcome(client: TestClient, account_id: str, **fields: object) -> dict[str, Any]:
    """An ``account.welcome`` event through the API; its notification."""
    response = client.post("/v1/events", json={"type": "account.welcome", "occurrence": "signup",
                                               "account_id": account_id, **fields})
    assert response.status_code == 202, response.text
    return dict(response.json())


def delivery(client: TestClient, delivery_id: str) -> dict[str, Any]:
    return dict(client.get(f"/v1/deliveries/{delivery_id}").json())


def delivered_sms(client: TestClient) -> dict[str, Any]:
    """A welcome SMS sent by a real worker through the mock provider, then reported
    delivered by the mock's signed receipt and normalised by a real worker: the delivery."""
    from models.callbacks import CallbackReceipt
    from providers.mock import signed_callback

    notification = welcome(client, account(client), channels=["sms"])
    delivery_id = notification["deliveries"][0]["id"]
    with running_worker(["notification-sms"]):
        wait_for(lambda: delivery(client, delivery_id)["outcome"] == "sent", what="sent")
    sent = delivery(client, delivery_id)
    body, headers = signed_callback(sent, "delivered")
    receipt = client.post("/v1/callbacks/mock", content=body, headers=headers)
    assert receipt.status_code == 202, receipt.text

    def processed() -> bool:
        with db.session() as session:
            found = session.get(CallbackReceipt, receipt.json()["receipt_id"])
            return found is not None and found.processed_at is not None

    with running_worker([ORCHESTRATION]):
        wait_for(processed, what="the receipt processed")
    return delivery(client, delivery_id)


# -- jobs -------------------------------------------------------------------------------------
def test_a_job_is_found_by_exact_id_first_and_by_prefix_in_every_queue(client: TestClient) -> None:
    from actors.batches import BatchRunJob, run_batch
    from actors.payments import ResettleJob, resettle_lost_payments_job

    # Given jobs whose ids share a prefix, in two queues (no worker runs them); the
    # exact id below sits in the later queue of the registry
    token = uuid.uuid4().hex[:12]
    enqueue(run_batch, BatchRunJob(batch_id="b-10"), job_id=f"{token}-10")
    enqueue(run_batch, BatchRunJob(batch_id="b-2"), job_id=f"{token}-2")
    enqueue(resettle_lost_payments_job, ResettleJob(), job_id=f"{token}-1")

    # When searching by the prefix: all three, each with its queue and state
    by_prefix = search(client, token)
    assert {(r["kind"], r.get("queue"), r["id"], r["state"]) for r in by_prefix} == {
        ("job", ORCHESTRATION, f"{token}-10", "waiting"),
        ("job", ORCHESTRATION, f"{token}-2", "waiting"),
        ("job", "payment", f"{token}-1", "waiting")}
    assert hit(by_prefix, "job", f"{token}-10")["links"] == {"batch_id": "b-10"}

    # When searching by one exact id: that job first, then the ids it is a prefix of
    by_id = search(client, f"{token}-1")
    assert [(r["queue"], r["id"]) for r in by_id] == [("payment", f"{token}-1"),
                                                      (ORCHESTRATION, f"{token}-10")]
    assert (by_id[0]["jobs"], by_id[0]["timeline"]) == ([], [])


def test_a_miss_finds_nothing(client: TestClient) -> None:
    account(client)
    assert search(client, "no-such-thing-anywhere") == []


# -- deliveries and notifications -------------------------------------------------------------
def test_a_delivery_by_id_and_by_provider_message_id_shows_its_receipts_and_its_job(
        client: TestClient) -> None:
    # Given an SMS sent, then reported delivered by the provider's receipt
    sms = delivered_sms(client)
    assert sms["outcome"] == "delivered"

    # When searching by the delivery's id
    results = search(client, sms["id"])
    found = hit(results, "delivery", sms["id"])

    # Then its history runs from creation to the receipt, oldest first
    assert found["state"] == "delivered"
    assert events(found) == ["created", "handed_off", "claimed", "receipt_received",
                             "delivered", "receipt_processed"]
    received = found["timeline"][3]["detail"]
    assert (received["event_id"], received["status"], received["provider_message_id"]) == (
        f"{sms['provider_message_id']}-delivered", "delivered", sms["provider_message_id"])
    assert found["timeline"][-1]["detail"]["result"] == "applied"
    assert sms["provider_message_id"] in found["summary"]
    # and its channel job (job id = delivery id), also a hit of its own
    assert jobs(found) == {("notification-sms", sms["id"], "completed")}
    assert hit(results, "job", sms["id"])["queue"] == "notification-sms"
    assert found["links"]["notification_id"] == sms["notification_id"]

    # When searching by the provider's message id: the same delivery and history
    by_message = hit(search(client, sms["provider_message_id"]), "delivery", sms["id"])
    assert by_message["timeline"] == found["timeline"]


def test_a_notification_lists_its_deliveries_jobs_and_merges_their_timelines(
        client: TestClient) -> None:
    # Given a welcome (email, SMS, in-app) whose channel jobs wait for a worker
    account_id = account(client)
    notification = welcome(client, account_id)
    by_channel = {d["channel"]: d["id"] for d in notification["deliveries"]}

    # When searching by the notification's id
    found = hit(search(client, notification["id"]), "notification", notification["id"])

    # Then it links its account and deliveries, lists both channel jobs (in-app has none)
    assert found["state"] == "in_progress"
    assert found["links"]["account_id"] == account_id
    assert sorted(found["links"]["delivery_ids"]) == sorted(by_channel.values())
    assert jobs(found) == {("notification-email", by_channel["email"], "waiting"),
                           ("notification-sms", by_channel["sms"], "waiting")}
    # and its timeline merges every delivery's (the in-app one is delivered at once)
    names = events(found)
    assert names[0] == "created"
    assert names.count("created") == 4 and names.count("handed_off") == 2
    assert "delivered" in names
    delivered = next(e for e in found["timeline"] if e["event"] == "delivered")
    assert delivered["detail"]["delivery_id"] == by_channel["in_app"]


# -- accounts ---------------------------------------------------------------------------------
@pytest.mark.parametrize("typed", [EMAIL, "Amal.Search@Example.COM", "  " + EMAIL + " ",
                                   "+966 50 123 4567", "00966-50-123-4567"])
def test_an_account_is_found_by_its_email_or_phone_with_its_notifications(
        client: TestClient, typed: str) -> None:
    # Given an account with a notification, and another account with other addresses
    account_id = account(client)
    notification = welcome(client, account_id, channels=["email"])
    other = account(client, email="someone.else@example.com", phone="+966509999999")
    welcome(client, other, channels=["email"])

    # When searching by its address, as an operator might type it
    results = search(client, typed)

    # Then the account comes first, then its notification; never the other account
    assert [(r["kind"], r["id"]) for r in results] == [("account", account_id),
                                                       ("notification", notification["id"])]
    found = results[0]
    assert (found["state"], found["links"]["notification_ids"]) == ("active",
                                                                   [notification["id"]])
    assert EMAIL in found["summary"] and PHONE in found["summary"]
    assert events(found) == ["created"]


def test_an_account_is_found_by_its_id(client: TestClient) -> None:
    account_id = account(client)
    assert hit(search(client, account_id), "account", account_id)["state"] == "active"


# -- orders and payments ------------------------------------------------------------------------
def test_an_order_and_its_payment_show_their_status_events_payments_and_jobs(
        client: TestClient, monkeypatch: pytest.MonkeyPatch) -> None:
    from models.notifications import Account
    from models.store import insert_store_order
    from providers.esim_mock import MockEsimProvider

    monkeypatch.setenv("FEATURE_ESIM_STORE", "true")
    settings.reset_settings()
    MockEsimProvider.reset()
    # Given an order placed for mock-ok, paid through the API and issued by real workers
    with db.session() as session:
        buyer = Account(email="buyer@example.com")
        session.add(buyer)
        session.flush()
        order, _ = insert_store_order(session, account_id=buyer.id, product_id="mock-ok",
                                      provider="mock", amount=Decimal("5.00"), currency="USD")
    created = client.post("/v1/payments", json={"order_id": order.id, "amount": "5.00",
                                                "currency": "USD"})
    assert created.status_code == 201, created.text
    payment_id = created.json()["id"]
    assert client.post(f"/v1/payments/{payment_id}/complete").status_code == 202
    with running_worker(["payment", "store-fulfillment"]):
        wait_for(lambda: client.get(f"/v1/store/orders/{order.id}").json()["issuance_state"]
                 == "issued", timeout=30, what="the order issued")
        wait_for(lambda: client.get(f"/v1/payments/{payment_id}").json()["status"]
                 == "settled", what="the payment settled")

    # When searching by the order's id
    found = hit(search(client, order.id), "order", order.id)

    # Then its status events and its payment's history, oldest first, and its jobs
    assert found["state"] == "completed"
    assert "issued" in found["summary"]
    # with its amount written as the API writes it
    api_amount = client.get(f"/v1/store/orders/{order.id}").json()["amount"]
    assert f"order {api_amount} USD" in found["summary"], (api_amount, found["summary"])
    status = [(e["detail"]["from_state"], e["detail"]["to_state"], e["detail"]["source"])
              for e in found["timeline"] if e["event"] == "status"]
    assert status == [(None, "pending", "api"), ("pending", "in_flight", "system"),
                      ("in_flight", "issued", "system")]
    assert [name for name in events(found) if name.startswith("payment_")] == [
        "payment_created", "payment_completed", "payment_settled"]
    assert {(q, i) for q, i, _ in jobs(found)} >= {
        ("store-fulfillment", f"{order.id}-issue"), ("payment", f"{payment_id}-settle")}
    assert found["links"] == {"account_id": buyer.id, "payment_ids": [payment_id]}

    # When searching by the payment's id: its history, its jobs, its order
    payment = hit(search(client, payment_id), "payment", payment_id)
    assert payment["state"] == "settled"
    api_amount = client.get(f"/v1/payments/{payment_id}").json()["amount"]
    assert f"payment {api_amount} USD" in payment["summary"], (api_amount, payment["summary"])
    assert events(payment) == ["payment_created", "payment_completed", "payment_settled"]
    assert ("payment", f"{payment_id}-settle", "completed") in jobs(payment)
    assert payment["links"] == {"order_id": order.id}


# -- refusals -------------------------------------------------------------------------------------
def test_search_needs_the_admin_token(client: TestClient) -> None:
    response = client.get("/admin/search", params={"q": "anything"})
    assert response.status_code == 401
    assert response.json()["error"]["code"] == "unauthorized"
    wrong = client.get("/admin/search", params={"q": "anything"},
                       headers={"Authorization": "Bearer not-the-token"})
    assert wrong.status_code == 401


@pytest.mark.parametrize("q", ["", "   ", "x" * 321, "a\x00b"])
def test_an_empty_overlong_or_nul_query_is_422(client: TestClient, q: str) -> None:
    response = client.get("/admin/search", params={"q": q}, headers=ADMIN_HEADERS)
    assert response.status_code == 422, response.text
    assert response.json()["error"]["code"] == "validation_error"
    assert response.json()["error"]["message"].startswith("q")


def test_a_missing_query_is_422(client: TestClient) -> None:
    response = client.get("/admin/search", headers=ADMIN_HEADERS)
    assert response.status_code == 422
    assert response.json()["error"]["code"] == "validation_error"


@hypothesis_settings(max_examples=60, deadline=None,
                     suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(q=st.text(min_size=1, max_size=330))
def test_any_query_answers_200_or_422_never_an_error(client: TestClient, q: str) -> None:
    response = client.get("/admin/search", params={"q": q}, headers=ADMIN_HEADERS)
    assert response.status_code in (200, 422), response.text
    if response.status_code == 200:
        assert response.json()["results"] == []
