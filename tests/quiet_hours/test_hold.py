"""Quiet hours hold, through the HTTP API and a real worker, on queue time the test moves
(docs/api.md#quiet-hours): held deliveries stay queued with ``not_before``, their jobs
wait until then, and they are sent once at the window's end — unless the account says
otherwise at that moment."""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlmodel import col, select

from actors.handoffs import reconcile_handoffs
from actors.orchestration import flush_handoff_stamps
from herald.db import session as db_session
from herald.queue import current_app, queue, running_worker
from models.notifications import (
    Delivery,
    Notification,
    Outcome,
    claim_delivery,
    hold_delivery,
    record_delivery_outcome,
)
from providers.mock import MockProvider
from tests.quiet_hours.conftest import move_queue_time_to, next_weekday_at
from tests.support.pipeline.steps import account, delivery, event, settled, use_redis
from tests.support.waiting import wait_for

EMAIL, SMS = "notification-email", "notification-sms"
NIGHTS = {"start": "22:00", "end": "07:00"}
#: Riyadh keeps UTC+3 all year: 22:00 there is 19:00 UTC, 07:00 is 04:00 UTC.
RIYADH = "Asia/Riyadh"


def by_channel(notification: dict[str, Any]) -> dict[str, str]:
    return {d["channel"]: d["id"] for d in notification["deliveries"]}


def held(client: TestClient, delivery_id: str, queue_name: str) -> dict[str, Any]:
    """Wait until the delivery is held: queued with ``not_before``, its job delayed until
    then; returns the delivery as the API shows it."""
    def is_held() -> dict[str, Any] | None:
        shown = delivery(client, delivery_id)
        job = queue(queue_name).get(delivery_id)
        return shown if (shown["not_before"] and job is not None
                         and job.state == "delayed") else None
    shown = wait_for(is_held, timeout=30, what="the delivery to be held")
    assert isinstance(shown, dict)
    job = queue(queue_name).get(delivery_id)
    assert shown["outcome"] == "queued"
    # due at the hold's end: the delay is counted from the run's end, never earlier
    not_before = datetime.fromisoformat(shown["not_before"])
    assert job is not None and job.run_at is not None
    assert not_before <= job.run_at < not_before + timedelta(seconds=2)
    return shown


def account_at_night(client: TestClient, weekday: int) -> tuple[datetime, str]:
    """Queue time at 23:00 Riyadh (20:00 UTC) on the next ``weekday``, and an account in
    Riyadh whose quiet hours (22:00–07:00) hold it: that time and the account's id."""
    night = next_weekday_at(weekday, 20)
    move_queue_time_to(night)
    return night, account(client, timezone=RIYADH, quiet_hours=NIGHTS)


def set_quiet_hours(client: TestClient, account_id: str, quiet_hours: Any) -> None:
    """PATCH the account's quiet hours (None clears them); the API must accept it."""
    response = client.patch(f"/v1/accounts/{account_id}", json={"quiet_hours": quiet_hours})
    assert response.status_code == 200, response.text



def sends_to(address: str) -> list[dict[str, Any]]:
    return [s for s in MockProvider.sends() if s["to"] == address]


def barrier(client: TestClient, queue_name: str) -> None:
    """Send an urgent message through ``queue_name`` and wait for it: the worker has
    looked at its delayed jobs since the caller's last step (it promotes due jobs on the
    round trip that starts this one)."""
    channel = "email" if queue_name == EMAIL else "sms"
    other = event(client, account(client, email="barrier@example.com", phone="+966500009999"),
                  occurrence=f"barrier-{datetime.now(UTC).timestamp()}", urgency="urgent",
                  channels=[channel])
    wait_for(lambda: settled(client, other["id"]), timeout=30, what="the barrier's send")


def test_a_message_inside_quiet_hours_is_held_then_sent_once_at_their_end(
        client: TestClient) -> None:
    # Given an account in Riyadh, quiet 22:00–07:00, and queue time at 23:00 there
    night = next_weekday_at(2, 20)  # a Wednesday, 20:00 UTC = 23:00 in Riyadh
    move_queue_time_to(night)
    account_id = account(client, timezone=RIYADH, quiet_hours=NIGHTS)
    with running_worker([EMAIL, SMS]):
        # When a normal welcome event arrives
        created = event(client, account_id)
        ids = by_channel(created)
        # Then email and SMS are held until 07:00 Riyadh (04:00 UTC) the next morning,
        # their jobs delayed until then; in-app is never held
        morning = (night + timedelta(days=1)).replace(hour=4)
        for channel, queue_name in (("email", EMAIL), ("sms", SMS)):
            shown = held(client, ids[channel], queue_name)
            assert datetime.fromisoformat(shown["not_before"]) == morning
            assert shown["attempts"] == 0
        in_app = delivery(client, ids["in_app"])
        assert (in_app["outcome"], in_app["not_before"]) == ("delivered", None)
        # and nothing was sent, even a minute before the end
        move_queue_time_to(morning - timedelta(minutes=1))
        barrier(client, EMAIL)
        assert sends_to("amal@example.com") == [] and sends_to("+966501234567") == []
        assert queue(EMAIL).get(ids["email"]).state == "delayed"
        # When queue time passes the end
        move_queue_time_to(morning + timedelta(seconds=1))
        # Then each is sent once, and not_before is gone
        wait_for(lambda: settled(client, created["id"]), timeout=30, what="the sends")
    for channel, address in (("email", "amal@example.com"), ("sms", "+966501234567")):
        shown = delivery(client, ids[channel])
        assert (shown["outcome"], shown["not_before"], shown["attempts"]) == ("sent", None, 1)
        assert len(sends_to(address)) == 1


def second_sunday_of_march(year: int) -> date:
    first = date(year, 3, 1)
    return first + timedelta(days=(6 - first.weekday()) % 7 + 7)


def test_a_hold_across_the_spring_forward_ends_at_the_first_instant_after_the_gap(
        client: TestClient) -> None:
    # Given a New York account quiet 22:00–02:30, and queue time at 01:30 EST on the
    # night the clocks skip from 02:00 to 03:00 (02:30 does not exist that night)
    today = datetime.fromtimestamp(current_app().time.now_ms() / 1000, UTC).date()
    change = next(day for year in (today.year, today.year + 1)
                  if (day := second_sunday_of_march(year)) > today + timedelta(days=1))
    move_queue_time_to(datetime(change.year, change.month, change.day, 6, 30, tzinfo=UTC))
    account_id = account(client, timezone="America/New_York",
                         quiet_hours={"start": "22:00", "end": "02:30"})
    with running_worker([EMAIL]):
        created = event(client, account_id, channels=["email"])
        email = by_channel(created)["email"]
        # Then it is held until 03:00 EDT, 07:00 UTC: half an hour, not an hour
        shown = held(client, email, EMAIL)
        gap_end = datetime(change.year, change.month, change.day, 7, tzinfo=UTC)
        assert datetime.fromisoformat(shown["not_before"]) == gap_end
        # and sent once then
        move_queue_time_to(gap_end + timedelta(seconds=1))
        wait_for(lambda: settled(client, created["id"]), timeout=30, what="the send")
    assert delivery(client, email)["outcome"] == "sent"
    assert len(sends_to("amal@example.com")) == 1


def test_urgent_events_required_channels_and_in_app_are_not_held(client: TestClient) -> None:
    # Given an account inside its quiet hours
    move_queue_time_to(next_weekday_at(3, 20))  # 23:00 in Riyadh
    account_id = account(client, timezone=RIYADH, quiet_hours=NIGHTS)
    with running_worker([EMAIL, SMS]):
        # When an urgent welcome and a normal esim.ready (email required) arrive
        urgent = event(client, account_id, urgency="urgent")
        ready = event(client, account_id, "esim.ready", "order-7",
                      data={"iccid": "8966000000000000007", "activation_code": "LPA:1$s$7"})
        # Then the urgent one is sent at once on every channel, esim.ready's email too
        wait_for(lambda: settled(client, urgent["id"]), timeout=30, what="urgent sends")
        ready_ids = by_channel(ready)
        wait_for(lambda: delivery(client, ready_ids["email"])["outcome"] == "sent",
                 timeout=30, what="the required email")
        # while esim.ready's SMS, not required, is held
        held(client, ready_ids["sms"], SMS)
    assert {c: delivery(client, i)["outcome"] for c, i in by_channel(urgent).items()} == {
        "email": "sent", "sms": "sent", "in_app": "delivered"}
    assert [s["channel"] for s in sends_to("amal@example.com")] == ["email", "email"]
    assert len(sends_to("+966501234567")) == 1


def test_an_account_deactivated_during_the_hold_is_suppressed_at_its_end(
        client: TestClient) -> None:
    night, account_id = account_at_night(client, 4)
    with running_worker([EMAIL]):
        created = event(client, account_id, channels=["email"])
        email = by_channel(created)["email"]
        held(client, email, EMAIL)
        # When the account is deactivated during the hold, then the hold ends
        assert client.patch(f"/v1/accounts/{account_id}",
                            json={"active": False}).status_code == 200
        move_queue_time_to((night + timedelta(days=1)).replace(hour=4, second=1))
        wait_for(lambda: settled(client, created["id"]), timeout=30, what="the end")
    # Then the state at that moment decides: suppressed, nothing sent
    shown = delivery(client, email)
    assert (shown["outcome"], shown["reason"], shown["not_before"]) == (
        "suppressed", "inactive", None)
    assert MockProvider.sends() == []


def test_a_flushall_during_the_hold_recreates_the_job_delayed_and_sends_once_after_it(
        client: TestClient, monkeypatch: pytest.MonkeyPatch, private_redis_url: str) -> None:
    use_redis(monkeypatch, private_redis_url)  # this test flushes it
    night = next_weekday_at(5, 20)
    move_queue_time_to(night)
    morning = (night + timedelta(days=1)).replace(hour=4)
    account_id = account(client, timezone=RIYADH, quiet_hours=NIGHTS)
    with running_worker([EMAIL]):
        created = event(client, account_id, channels=["email"])
        email = by_channel(created)["email"]
        held(client, email, EMAIL)
        flush_handoff_stamps()
    # When Redis loses every job during the hold
    current_app().client.flushall()
    assert queue(EMAIL).get(email) is None
    # and the handoff sweep runs (an age of 1 ms: the handoff counts as lost at once)
    report = reconcile_handoffs(age=timedelta(milliseconds=1))
    # Then the job is back, already delayed to the hold's end (no worker has run it), and
    # the delivery still held
    assert (report.deliveries, report.recreated) == (1, 1)
    shown = held(client, email, EMAIL)
    assert datetime.fromisoformat(shown["not_before"]) == morning
    assert queue(EMAIL).get(email).attempts_started == 0
    # and a sweep while the job lives re-creates nothing
    assert reconcile_handoffs(age=timedelta(milliseconds=1)).recreated == 0
    with running_worker([EMAIL]):
        # and nothing is sent before the end
        move_queue_time_to(morning - timedelta(minutes=1))
        barrier(client, EMAIL)
        assert sends_to("amal@example.com") == []
        # When the end passes, it is sent once
        move_queue_time_to(morning + timedelta(seconds=1))
        wait_for(lambda: settled(client, created["id"]), timeout=30, what="the send")
    assert delivery(client, email)["outcome"] == "sent"
    assert len(sends_to("amal@example.com")) == 1


def test_a_delivery_held_again_and_again_is_still_sent(client: TestClient) -> None:
    # Given an SMS held by quiet hours that the account keeps extending while it waits
    # (notification-sms allows 3 starts per job: each hold is one)
    night = next_weekday_at(1, 20)  # 23:00 in Riyadh
    move_queue_time_to(night)
    account_id = account(client, timezone=RIYADH,
                         quiet_hours={"start": "22:00", "end": "00:00"})
    with running_worker([SMS]):
        created = event(client, account_id, channels=["sms"])
        sms = by_channel(created)["sms"]
        held(client, sms, SMS)
        for end_hour in (1, 2, 3, 4):
            client.patch(f"/v1/accounts/{account_id}",
                         json={"quiet_hours": {"start": "22:00", "end": f"{end_hour:02}:00"}})
            move_queue_time_to(night.replace(hour=20) + timedelta(hours=end_hour)
                               + timedelta(seconds=1))
            wait_for(lambda h=end_hour: delivery(client, sms)["not_before"] == (
                night + timedelta(hours=h + 1)).isoformat(), timeout=30,
                what=f"hold until {end_hour + 1:02}:00")
        # When the last window ends
        move_queue_time_to(night + timedelta(hours=5, seconds=1))
        wait_for(lambda: settled(client, created["id"]), timeout=30, what="the send")
    # Then it was sent once, five holds later
    assert delivery(client, sms)["outcome"] == "sent"
    assert len(sends_to("+966501234567")) == 1


def deliveries_of(account_id: str) -> dict[str, str]:
    """Channel → delivery id of the account's one notification."""
    with db_session() as session:
        rows = session.exec(select(Delivery.channel, Delivery.id).join(
            Notification, col(Notification.id) == Delivery.notification_id).where(
            Notification.account_id == account_id)).all()
    return dict(rows)


def test_a_batch_to_two_time_zones_holds_each_account_by_its_own_clock(
        client: TestClient) -> None:
    # Given accounts in Tokyo (UTC+9) and São Paulo (UTC−3), both quiet 22:00–07:00,
    # and queue time at 14:00 UTC: 23:00 in Tokyo, 11:00 in São Paulo
    moment = next_weekday_at(0, 14)
    move_queue_time_to(moment)
    tokyo = account(client, email="tokyo@example.com", phone="+81312345678",
                    timezone="Asia/Tokyo", quiet_hours=NIGHTS)
    sao_paulo = account(client, email="sp@example.com", phone="+551112345678",
                        timezone="America/Sao_Paulo", quiet_hours=NIGHTS)
    with running_worker(["notification-orchestration", EMAIL, SMS]):
        # When a welcome batch goes to both
        response = client.post("/v1/batches", json={
            "type": "account.welcome", "account_ids": [tokyo, sao_paulo], "data": {}})
        assert response.status_code == 201, response.text
        # Then São Paulo's email and SMS are sent
        wait_for(lambda: len(sends_to("sp@example.com")) == len(sends_to("+551112345678"))
                 == 1, timeout=30, what="São Paulo's sends")
        # and Tokyo's are held until 07:00 there, 22:00 UTC
        ids = wait_for(lambda: deliveries_of(tokyo), timeout=30, what="Tokyo's deliveries")
        assert isinstance(ids, dict)
        for channel, queue_name in (("email", EMAIL), ("sms", SMS)):
            shown = held(client, ids[channel], queue_name)
            assert datetime.fromisoformat(shown["not_before"]) == moment.replace(hour=22)
    assert sends_to("tokyo@example.com") == sends_to("+81312345678") == []


def test_a_hold_is_fenced_by_the_claim_and_never_over_a_final_outcome(
        client: TestClient) -> None:
    # Given a delivery claimed by an attempt, then taken over by a newer one
    created = event(client, account(client), channels=["email"])
    delivery_id = by_channel(created)["email"]
    later = datetime.now(UTC) + timedelta(hours=1)
    with db_session() as session:
        old = claim_delivery(session, delivery_id)
        newer = claim_delivery(session, delivery_id, now=old.token + timedelta(seconds=61))
        # When the old attempt tries to hold it, nothing is written
        assert not hold_delivery(session, delivery_id, old.token, later)
        assert delivery(client, delivery_id)["not_before"] is None
        # the current attempt's hold lands, queued with its claim released
        assert hold_delivery(session, delivery_id, newer.token, later)
        shown = delivery(client, delivery_id)
        assert (shown["outcome"], shown["not_before"]) == ("queued", later.isoformat())
        # and the next claim clears not_before; once final, no hold moves it
        final = claim_delivery(session, delivery_id)
        assert delivery(client, delivery_id)["not_before"] is None
        assert record_delivery_outcome(session, delivery_id, token=final.token,
                                       outcome=Outcome.SENT, provider="mock")
        assert not hold_delivery(session, delivery_id, final.token, later)
    assert delivery(client, delivery_id)["outcome"] == "sent"


def test_clearing_quiet_hours_sends_the_held_deliveries_at_once_and_once(
        client: TestClient) -> None:
    # Given an email and an SMS held at 23:00 Riyadh until 07:00
    _, account_id = account_at_night(client, 3)
    with running_worker([EMAIL, SMS]):
        created = event(client, account_id)
        ids = by_channel(created)
        for channel, queue_name in (("email", EMAIL), ("sms", SMS)):
            held(client, ids[channel], queue_name)
        # When the account clears its quiet hours (queue time does not move)
        set_quiet_hours(client, account_id, None)
        # Then both are sent now, not at 07:00
        wait_for(lambda: settled(client, created["id"]), timeout=30, what="the sends")
        # and a handoff sweep afterwards sends nothing more
        flush_handoff_stamps()
        reconcile_handoffs(age=timedelta(milliseconds=1))
        barrier(client, EMAIL)
        barrier(client, SMS)
    for channel, address in (("email", "amal@example.com"), ("sms", "+966501234567")):
        shown = delivery(client, ids[channel])
        assert (shown["outcome"], shown["not_before"], shown["attempts"]) == ("sent", None, 1)
        assert len(sends_to(address)) == 1


def test_quiet_hours_that_end_sooner_release_the_held_delivery_at_the_new_end(
        client: TestClient) -> None:
    # Given an email held at 23:00 Riyadh (20:00 UTC) until 07:00
    night, account_id = account_at_night(client, 4)
    with running_worker([EMAIL]):
        created = event(client, account_id, channels=["email"])
        email = by_channel(created)["email"]
        held(client, email, EMAIL)
        # When the window is changed to end at midnight Riyadh (21:00 UTC)
        set_quiet_hours(client, account_id, {"start": "22:00", "end": "00:00"})
        # Then the delivery is held until midnight, its job delayed to then
        shown = held(client, email, EMAIL)
        assert datetime.fromisoformat(shown["not_before"]) == night.replace(hour=21)
        # and nothing goes before it
        move_queue_time_to(night.replace(hour=21) - timedelta(minutes=1))
        barrier(client, EMAIL)
        assert sends_to("amal@example.com") == []
        # then it is sent once, after midnight and hours before 07:00
        move_queue_time_to(night.replace(hour=21) + timedelta(seconds=1))
        wait_for(lambda: settled(client, created["id"]), timeout=30, what="the send")
    assert delivery(client, email)["outcome"] == "sent"
    assert len(sends_to("amal@example.com")) == 1


def test_a_window_moved_away_from_now_releases_the_held_delivery_at_once(
        client: TestClient) -> None:
    # Given an SMS held at 23:00 Riyadh until 07:00
    _, account_id = account_at_night(client, 6)
    with running_worker([SMS]):
        created = event(client, account_id, channels=["sms"])
        sms = by_channel(created)["sms"]
        held(client, sms, SMS)
        # When the quiet hours become 01:00–05:00, which 23:00 is outside of
        set_quiet_hours(client, account_id, {"start": "01:00", "end": "05:00"})
        # Then it is sent now, once
        wait_for(lambda: settled(client, created["id"]), timeout=30, what="the send")
    assert delivery(client, sms)["outcome"] == "sent"
    assert len(sends_to("+966501234567")) == 1
