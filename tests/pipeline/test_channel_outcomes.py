"""What a channel worker records when a delivery cannot go out, through real workers:
the provider cannot carry the channel, the template cannot be rendered, another attempt
took the delivery over before dispatch, the provider refused the message."""

from __future__ import annotations

import threading
from datetime import timedelta

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import text

from herald import db
from herald.db import session as db_session
from herald.queue import queue, running_worker
from herald.web import create_app
from models.base import utcnow
from models.notifications import Claim, ClaimVerdict, Delivery, Notification, claim_delivery
from providers.mock import MockProvider
from tests.support.pipeline.steps import account, delivery, event, sessions_waiting_on, settled
from tests.support.providers.fakes import FakeTwilio, use_herald_env
from tests.support.waiting import wait_for

EMAIL = "notification-email"
SMS = "notification-sms"
TWILIO_SID = "AC" + "0123456789abcdef" * 2
TWILIO_TOKEN = "twilio-test-token"
#: A well-formed number Twilio refuses (its error 21211).
REFUSED_NUMBER = "+966500000099"


@pytest.fixture
def client(pipeline: None) -> TestClient:
    return TestClient(create_app())


def deliveries_by_channel(created: dict) -> dict[str, str]:
    return {d["channel"]: d["id"] for d in created["deliveries"]}


def test_a_channel_the_provider_cannot_carry_is_suppressed_and_nothing_is_sent(
        client: TestClient, monkeypatch: pytest.MonkeyPatch) -> None:
    # Given a mock provider that carries email only
    use_herald_env(monkeypatch, mock_channels="email")
    created = event(client, account(client), channels=["email", "sms"])
    ids = deliveries_by_channel(created)
    # When the workers run
    with running_worker([EMAIL, SMS]):
        wait_for(lambda: settled(client, created["id"]), timeout=30, what="both to settle")
    # Then the email is sent and the SMS suppressed as provider_unsupported, never sent
    sms = delivery(client, ids["sms"])
    assert (sms["outcome"], sms["reason"], sms["provider"], sms["attempts"]) == (
        "suppressed", "provider_unsupported", None, 0)
    assert delivery(client, ids["email"])["outcome"] == "sent"
    assert [s["channel"] for s in MockProvider.sends()] == ["email"]
    assert queue(SMS).get(ids["sms"]).return_value == {
        "delivery_id": ids["sms"], "suppressed": "provider_unsupported"}


def test_an_unsupported_mock_channel_is_refused_at_start(
        monkeypatch: pytest.MonkeyPatch) -> None:
    from herald.settings import SettingsError, load_settings

    monkeypatch.setenv("MOCK_CHANNELS", "email,fax")
    with pytest.raises(SettingsError, match=r"MOCK_CHANNELS: .*unknown channel 'fax'"):
        load_settings()


def test_a_delivery_its_template_cannot_render_fails_terminal_without_retrying(
        client: TestClient) -> None:
    created = event(client, account(client), "payment.receipt", "order-7",
                    data={"amount": "12.50", "currency": "SAR", "order_id": "order-7"})
    delivery_id = deliveries_by_channel(created)["email"]
    # Given its stored data lacks a key the template needs (a notification persisted
    # before a deploy made the key required)
    with db_session() as session:
        session.get(Notification, created["id"]).data = {"amount": "12.50", "currency": "SAR"}
    # When the worker runs it
    with running_worker([EMAIL]):
        wait_for(lambda: queue(EMAIL).get(delivery_id).state == "failed", timeout=30,
                 what="the job to fail")
    # Then the delivery ends failed_terminal / render_failed, nothing was sent, and the
    # job failed on its first attempt (of 5) saying which key is missing
    body = delivery(client, delivery_id)
    assert (body["outcome"], body["reason"], body["provider"], body["attempts"]) == (
        "failed_terminal", "render_failed", None, 0)
    job = queue(EMAIL).get(delivery_id)
    assert (job.attempts_made, job.failed_reason) == (
        1, "payment.receipt event data: order_id: Field required")
    assert MockProvider.sends() == []


def test_an_attempt_whose_claim_was_taken_over_before_dispatch_sends_nothing(
        client: TestClient, migrated_database: str) -> None:
    created = event(client, account(client), channels=["email"])
    delivery_id = deliveries_by_channel(created)["email"]
    engine = db.create_database_engine(migrated_database)
    holder, taker = engine.connect(), engine.connect()
    taken: list[Claim] = []

    def take_over() -> None:
        # another attempt: it waits for the whole table, then claims the delivery as one
        # may once this attempt's claim is older than 60 s (its clock runs 2 min ahead)
        taker.execute(text("LOCK TABLE deliveries IN ACCESS EXCLUSIVE MODE"))
        taken.append(claim_delivery(taker, delivery_id, now=utcnow() + timedelta(minutes=2)))

    try:
        # Given another transaction holds the delivery's row, so the worker's claim waits
        holder.execute(text("SELECT id FROM deliveries WHERE id = :id FOR UPDATE"),
                       {"id": delivery_id})
        holder_pid = holder.execute(text("SELECT pg_backend_pid()")).scalar_one()
        with running_worker([EMAIL]):
            wait_for(lambda: sessions_waiting_on(holder_pid) == 1, what="the claim to wait")
            # and another attempt queues for the table behind it: it gets the table the
            # moment the worker's claim commits, before the worker's next statement
            thief = threading.Thread(target=take_over)
            thief.start()
            wait_for(lambda: sessions_waiting_on(holder_pid) == 2, what="the other attempt")
            # When the row is released: the worker claims, the other attempt takes over
            holder.rollback()
            thief.join(timeout=30)
            wait_for(lambda: queue(EMAIL).get(delivery_id).state == "completed", timeout=30,
                     what="the worker's attempt to end")
    finally:
        holder.rollback()
        holder.close()
        taker.close()
        engine.dispose()
    # Then the worker's attempt saw the claim was no longer its own and sent nothing
    assert [t.verdict for t in taken] == [ClaimVerdict.CLAIMED]
    assert queue(EMAIL).get(delivery_id).return_value == {
        "delivery_id": delivery_id, "skipped": "claim taken over"}
    assert MockProvider.sends() == []
    # and wrote nothing: the delivery is the other attempt's, sending, not yet attempted
    with db_session() as session:
        row = session.get(Delivery, delivery_id)
        assert (row.outcome, row.attempts, row.claimed_at) == ("sending", 0, taken[0].token)


def test_a_message_the_provider_refuses_fails_terminal_after_one_send(
        client: TestClient, monkeypatch: pytest.MonkeyPatch) -> None:
    with FakeTwilio(account_sid=TWILIO_SID, auth_token=TWILIO_TOKEN,
                    invalid_numbers=frozenset({REFUSED_NUMBER})) as twilio:
        # Given SMS goes through Twilio, which refuses the account's number
        use_herald_env(monkeypatch, sms_provider="twilio", twilio_account_sid=TWILIO_SID,
                       twilio_auth_token=TWILIO_TOKEN, twilio_from_number="+15005550006",
                       twilio_base_url=twilio.url)
        created = event(client, account(client, phone=REFUSED_NUMBER), channels=["sms"])
        delivery_id = deliveries_by_channel(created)["sms"]
        # When the worker runs it
        with running_worker([SMS]):
            wait_for(lambda: queue(SMS).get(delivery_id).state == "failed", timeout=30,
                     what="the job to fail")
    # Then Twilio was asked once, and the delivery ends failed_terminal / provider_rejected
    # with that one attempt counted; the job is not retried (of 3)
    assert [r.form()["To"] for r in twilio.requests] == [REFUSED_NUMBER]
    assert twilio.messages == []
    body = delivery(client, delivery_id)
    assert (body["outcome"], body["reason"], body["provider"], body["attempts"]) == (
        "failed_terminal", "provider_rejected", "twilio", 1)
    job = queue(SMS).get(delivery_id)
    assert (job.attempts_made, job.failed_reason) == (
        1, "provider failure (twilio_21211)")
