"""The relay (actors/webhooks.py) with a real worker and a real receiver: each message
POSTed, verified by ``standardwebhooks``, retried on the schedule (or as Retry-After
asks) under the same ``webhook-id``, the endpoint disabled by a 410, the message failed
after its last attempt, and a message whose job Redis lost (FLUSHALL) re-driven by the
sweep (docs/api.md#webhooks)."""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Iterator
from datetime import datetime, timedelta
from typing import Any

import pytest
from fastapi.testclient import TestClient

from actors import webhooks as relay
from herald import db, settings
from herald.queue import current_app, running_worker
from herald.web import create_app
from models.base import queue_now, utcnow
from models.webhooks import WebhookEndpoint, WebhookMessage
from providers import webhook_http
from tests.support.pipeline.steps import use_redis
from tests.support.processes import spawn_herald
from tests.support.waiting import wait_for
from tests.webhooks.receiver import Framing, Receiver, running_receiver

BODY = {"type": "delivery.sent", "timestamp": "2026-12-05T03:00:00+00:00",
        "data": {"id": "d1", "outcome": "sent"}}


@pytest.fixture
def receiver(webhooks: None, monkeypatch: pytest.MonkeyPatch) -> Iterator[Receiver]:
    monkeypatch.setenv("WEBHOOK_ALLOW_HTTP", "1")
    monkeypatch.setenv("WEBHOOK_ALLOW_PRIVATE", "1")
    settings.reset_settings()
    with running_receiver() as receiver:
        yield receiver


def endpoint(receiver: Receiver) -> str:
    """An endpoint on the receiver, its secret given to the receiver to verify with."""
    answer = TestClient(create_app()).post("/v1/webhook-endpoints", json={
        "url": receiver.url, "events": ["delivery.sent"]})
    assert answer.status_code == 201, answer.text
    receiver.secrets.append(answer.json()["secret"])
    return str(answer.json()["id"])


def message(endpoint_id: str, *, enqueue: bool = True) -> str:
    """A pending message for the endpoint, its job added unless ``enqueue`` is False."""
    row = WebhookMessage(endpoint_id=endpoint_id, type="delivery.sent", body=BODY,
                         handed_off_at=utcnow())
    with db.session() as session:
        session.add(row)
    if enqueue:
        relay.enqueue_message(row.id, endpoint_id)
    return row.id


def read(message_id: str) -> WebhookMessage:
    with db.session() as session:
        row = session.get(WebhookMessage, message_id)
        assert row is not None
        return row


def settled(message_id: str) -> WebhookMessage | None:
    row = read(message_id)
    return row if row.status != "pending" else None


def codes(row: WebhookMessage) -> list[Any]:
    return [attempt["status_code"] for attempt in row.attempts]


def test_a_message_arrives_signed_once(receiver: Receiver) -> None:
    message_id = message(endpoint(receiver))
    with running_worker([relay.QUEUE]):
        row = wait_for(lambda: settled(message_id), what="delivered")
    assert isinstance(row, WebhookMessage) and row.status == "delivered"
    (got,) = receiver.received
    assert got.verified_by and got.headers["webhook-id"] == message_id
    assert got.payload == BODY
    assert codes(row) == [200] and row.attempts[0]["error"] is None


def test_a_500_is_retried_5_s_later_under_the_same_id(receiver: Receiver) -> None:
    receiver.answer(500)
    message_id = message(endpoint(receiver))
    with running_worker([relay.QUEUE]):
        row = wait_for(lambda: settled(message_id), timeout=30, what="delivered")
    assert isinstance(row, WebhookMessage) and codes(row) == [500, 200]
    assert [got.headers["webhook-id"] for got in receiver.received] == [message_id] * 2
    assert all(got.verified_by for got in receiver.received)
    first, second = (int(got.headers["webhook-timestamp"]) for got in receiver.received)
    assert 4 <= second - first <= 7  # 5 s ± 10 %, in whole seconds


def test_retry_after_is_honoured(receiver: Receiver) -> None:
    receiver.answer(429, {"retry-after": "1"})
    message_id = message(endpoint(receiver))
    with running_worker([relay.QUEUE]):
        row = wait_for(lambda: settled(message_id), timeout=30, what="delivered")
    assert isinstance(row, WebhookMessage) and codes(row) == [429, 200]
    first, second = (int(got.headers["webhook-timestamp"]) for got in receiver.received)
    assert second - first <= 2  # the receiver's 1 s, not the schedule's 5 s


def test_a_410_disables_the_endpoint_at_once(receiver: Receiver) -> None:
    receiver.answer(410)
    endpoint_id = endpoint(receiver)
    message_id = message(endpoint_id)
    with running_worker([relay.QUEUE]):
        row = wait_for(lambda: settled(message_id), what="failed")
    assert isinstance(row, WebhookMessage) and (row.status, codes(row)) == ("failed", [410])
    with db.session() as session:
        stored = session.get(WebhookEndpoint, endpoint_id)
        assert stored is not None and stored.disabled


def test_after_the_last_attempt_the_message_is_failed(receiver: Receiver,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(relay, "RETRY_SCHEDULE_S", (0.0, 0.2, 0.2))
    receiver.answer(503, times=10)
    message_id = message(endpoint(receiver))
    with running_worker([relay.QUEUE]):
        row = wait_for(lambda: settled(message_id), timeout=30, what="failed")
    assert isinstance(row, WebhookMessage) and (row.status, codes(row)) == ("failed",
                                                                            [503] * 3)
    assert len(receiver.received) == 3


def test_an_answer_slower_than_the_send_timeout_is_a_failed_attempt_retried_under_the_same_id(
        receiver: Receiver, monkeypatch: pytest.MonkeyPatch) -> None:
    # Given the documented send timeout (15 s), here 2 s so that the test waits less
    assert webhook_http.SEND_TIMEOUT_S == 15
    monkeypatch.setattr(webhook_http, "SEND_TIMEOUT_S", 2.0)
    # and a receiver that takes 3 s to answer the first request (it did get it)
    receiver.answer(200, after_s=3)
    message_id = message(endpoint(receiver))
    with running_worker([relay.QUEUE]):
        row = wait_for(lambda: settled(message_id), timeout=45, what="delivered")
    # Then the first attempt failed with no answer in time, the retry was delivered, and
    # the receiver saw the message twice under one webhook-id (its duplicate to drop)
    assert isinstance(row, WebhookMessage) and row.status == "delivered"
    assert codes(row) == [None, 200]
    assert row.attempts[0]["error"] == "timeout: no complete answer within 2 s"
    assert row.attempts[0]["duration_ms"] >= 2_000
    assert [got.headers["webhook-id"] for got in receiver.received] == [message_id] * 2
    assert all(got.verified_by for got in receiver.received)


@pytest.mark.parametrize("framing", ["close", "chunked", "length"])
def test_an_endless_answer_fails_the_attempt_and_closes_the_connection(
        receiver: Receiver, framing: Framing) -> None:
    # Given a receiver that answers 200 with a body streamed without end (64 MiB here, so
    # that a sender reading it all would still end): until the connection closes, in
    # chunks, or with a content-length that announces it
    stream = receiver.stream(framing)
    message_id = message(endpoint(receiver), enqueue=False)
    # When the relay attempts the message
    assert relay.attempt_message(message_id)["retry_in_s"] is not None
    # Then the attempt failed as too large an answer, to be retried
    (attempt,) = read(message_id).attempts
    assert (attempt["status_code"], attempt["error"]) == (
        200, "answer_too_large: the answer went past 64 KiB")
    # and the connection was closed: the receiver's writing broke off, having written
    # no more than the 64 KiB read and what the two sockets' buffers held (a few MiB on
    # loopback), nowhere near the stream
    wait_for(lambda: stream.ended is not None, timeout=10, what="the receiver's writing to end")
    assert stream.ended != "done"
    assert stream.written < 16 * 1024 * 1024, stream.written


TRICKLED = {
    # the status line and headers a byte a second
    "head": (b"", b"HTTP/1.0 200 OK\r\n\r\n", None),
    # the head at once, then the body a byte a second
    "body": (b"HTTP/1.1 200 OK\r\ncontent-length: 10\r\n\r\n", b"0123456789", 200),
}


@pytest.mark.parametrize("part", TRICKLED)
def test_an_answer_trickled_a_byte_a_second_ends_the_attempt_at_its_deadline(
        receiver: Receiver, monkeypatch: pytest.MonkeyPatch, part: str) -> None:
    # Given the attempt's deadline (15 s in all), here 2 s so that the test waits less,
    # and a receiver that trickles its answer a byte a second (each read gets a byte in
    # far less than the deadline)
    monkeypatch.setattr(webhook_http, "SEND_TIMEOUT_S", 2.0)
    at_once, trickled, status = TRICKLED[part]
    stream = receiver.trickle(trickled, every_s=1.0, at_once=at_once)
    message_id = message(endpoint(receiver), enqueue=False)
    # When the relay attempts the message
    started = time.monotonic()
    assert relay.attempt_message(message_id)["retry_in_s"] is not None
    took = time.monotonic() - started
    # Then the attempt failed at its deadline, recorded as a timeout
    (attempt,) = read(message_id).attempts
    assert (attempt["status_code"], attempt["error"]) == (
        status, "timeout: no complete answer within 2 s")
    assert 2_000 <= attempt["duration_ms"] <= 2_500 and took < 3.5, (attempt, took)
    # and the connection was closed: the receiver's next bytes met it closed
    wait_for(lambda: stream.ended is not None, timeout=5, what="the receiver's writing to end")
    assert stream.ended != "done"


def test_queue_time_walks_the_whole_retry_schedule(receiver: Receiver) -> None:
    # Given an endpoint that answers 500 to every attempt
    receiver.answer(500, times=len(relay.RETRY_SCHEDULE_S))
    message_id = message(endpoint(receiver))
    waits: list[float] = []
    dues: list[datetime] = []
    with running_worker([relay.QUEUE]):
        for attempt in range(1, len(relay.RETRY_SCHEDULE_S)):
            # When each attempt has failed, queue time moves to its next one's turn
            row = wait_for(lambda n=attempt: read(message_id) if len(
                read(message_id).attempts) == n else None, what=f"attempt {attempt}")
            assert isinstance(row, WebhookMessage) and row.next_attempt_at is not None
            last = datetime.fromisoformat(row.attempts[-1]["at"])
            waits.append((row.next_attempt_at - last).total_seconds())
            dues.append(row.next_attempt_at)
            current_app().time.advance(row.next_attempt_at - queue_now()
                                       + timedelta(milliseconds=100))
        final = wait_for(lambda: settled(message_id), what="failed")
    # Then every wait was the schedule's, within its ±10 %, none was made early, and after
    # the eighth attempt the message is failed and stays listed
    for wait, base in zip(waits, relay.RETRY_SCHEDULE_S[1:], strict=True):
        assert base * 0.9 <= wait <= base * 1.1, (wait, base)
    assert isinstance(final, WebhookMessage) and final.status == "failed"
    assert codes(final) == [500] * len(relay.RETRY_SCHEDULE_S)
    assert len(receiver.received) == len(relay.RETRY_SCHEDULE_S)
    ats = [datetime.fromisoformat(a["at"]) for a in final.attempts]
    assert all(at >= due for at, due in zip(ats[1:], dues, strict=True))
    assert (ats[-1] - ats[0]).total_seconds() >= 0.9 * sum(relay.RETRY_SCHEDULE_S)


def test_a_failing_streak_disables_the_endpoint(receiver: Receiver,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("WEBHOOK_DISABLE_AFTER_S", "0.5")
    settings.reset_settings()
    receiver.answer(500, times=100)
    endpoint_id = endpoint(receiver)
    message_id = message(endpoint_id)
    with running_worker([relay.QUEUE]):
        row = wait_for(lambda: settled(message_id), timeout=30, what="failed")
    assert isinstance(row, WebhookMessage) and (row.status, codes(row)) == ("failed",
                                                                            [500, 500])
    with db.session() as session:
        stored = session.get(WebhookEndpoint, endpoint_id)
        assert stored is not None and stored.disabled


def test_a_flushall_loses_no_message(receiver: Receiver, monkeypatch: pytest.MonkeyPatch,
                                     private_redis_url: str) -> None:
    use_redis(monkeypatch, private_redis_url)  # this test flushes it
    # Given pending messages whose jobs Redis lost
    endpoint_id = endpoint(receiver)
    ids = [message(endpoint_id) for _ in range(5)]
    current_app().client.flushall()
    # When the sweep runs
    assert relay.sweep_webhook_messages(age=timedelta(0)) == 5
    # Then every one is delivered, each once
    with running_worker([relay.QUEUE]):
        wait_for(lambda: all(settled(message_id) for message_id in ids), what="delivered")
    assert sorted(got.headers["webhook-id"] for got in receiver.received) == sorted(ids)


def test_failed_messages_are_listed_with_attempts_and_sent_again_on_retry_and_recover(
        receiver: Receiver, monkeypatch: pytest.MonkeyPatch) -> None:
    client = TestClient(create_app())
    # Given three messages that failed their only attempt
    monkeypatch.setattr(relay, "RETRY_SCHEDULE_S", (0.0,))
    receiver.answer(500, times=3)
    endpoint_id = endpoint(receiver)
    ids = [message(endpoint_id) for _ in range(3)]
    url = f"/v1/webhook-endpoints/{endpoint_id}/messages"
    with running_worker([relay.QUEUE]):
        wait_for(lambda: all(settled(message_id) for message_id in ids), what="failed")
        # Then ?status=failed lists them with their attempt
        listed = client.get(url, params={"status": "failed"}).json()["items"]
        assert sorted(item["id"] for item in listed) == sorted(ids)
        assert set(listed[0]["attempts"][0]) == {"at", "status_code", "duration_ms", "error"}
        assert listed[0]["attempts"][0]["status_code"] == 500
        # When one is retried
        answer = client.post(f"{url}/{ids[0]}/retry")
        assert answer.status_code == 202, answer.text
        wait_for(lambda: read(ids[0]).status == "delivered", what="the retry delivered")
        # and the others recovered since before they were made
        since = (read(ids[1]).created_at - timedelta(seconds=1)).isoformat()
        answer = client.post(f"/v1/webhook-endpoints/{endpoint_id}/recover",
                             json={"since": since})
        assert (answer.status_code, answer.json()) == (202, {"recovered": 2})
        wait_for(lambda: all(read(m).status == "delivered" for m in ids), what="recovered")
    # Then each was sent again under its own id, and keeps both attempts
    assert sorted(got.headers["webhook-id"] for got in receiver.received) == sorted(ids * 2)
    assert all(codes(read(message_id)) == [500, 200] for message_id in ids)
    assert client.get(url, params={"status": "failed"}).json() == {"items": []}
    # And a message that is not failed, or not there, is refused
    assert client.post(f"{url}/{ids[0]}/retry").status_code == 409
    assert client.post(f"{url}/msg_nothere/retry").status_code == 404


def test_a_relay_killed_mid_send_loses_no_message(receiver: Receiver) -> None:
    # Given a relay process whose first send the receiver holds for 30 s
    receiver.answer(200, after_s=30)
    endpoint_id = endpoint(receiver)
    first = message(endpoint_id)
    worker = spawn_herald("worker", "--import", "tests.webhooks.relay_worker", relay.QUEUE)
    try:
        wait_for(lambda: receiver.received, timeout=30, what="the first send in flight")
        # When the relay is SIGKILLed in the middle of it, with more messages pending
        worker.send_signal(signal.SIGKILL)
        worker.wait(timeout=10)
        more = [message(endpoint_id) for _ in range(3)]
        worker = spawn_herald("worker", "--import", "tests.webhooks.relay_worker", relay.QUEUE)
        # Then a new relay delivers every one
        wait_for(lambda: all(read(m).status == "delivered" for m in [first, *more]),
                 timeout=60, what="every message delivered")
    finally:
        worker.kill()
        worker.wait(timeout=10)
    # each verified; only the message in flight at the kill arrived twice
    ids = [got.headers["webhook-id"] for got in receiver.received]
    assert sorted(ids) == sorted([first, first, *more])
    assert all(got.verified_by for got in receiver.received)


def test_a_slow_endpoint_never_delays_another(receiver: Receiver) -> None:
    # Given an endpoint that holds every request 20 s, with more messages than its group
    # may run at once, and another endpoint that answers at once
    receiver.answer(200, after_s=20, times=10)
    slow = endpoint(receiver)
    stuck = [message(slow) for _ in range(10)]
    with running_receiver() as fast_receiver:
        fast = endpoint(fast_receiver)
        with running_worker([relay.QUEUE]):
            wait_for(lambda: len(receiver.received) == 2, what="the slow group full")
            # When the other endpoint's messages come
            quick = [message(fast) for _ in range(4)]
            # Then they are delivered while the slow endpoint's still wait
            wait_for(lambda: all(read(m).status == "delivered" for m in quick), timeout=10,
                     what="the fast endpoint's messages")
            assert all(read(m).status == "pending" for m in stuck)
            # its group never ran more than its limit
            assert len(receiver.received) == 2
            receiver.release()


def test_the_url_is_checked_again_at_each_send(receiver: Receiver,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    # Given an endpoint saved while private addresses were allowed, and then no more
    message_id = message(endpoint(receiver), enqueue=False)
    monkeypatch.setenv("WEBHOOK_ALLOW_PRIVATE", "0")
    settings.reset_settings()
    # When its message is attempted
    assert relay.attempt_message(message_id)["retry_in_s"] is not None
    # Then nothing was sent, and the attempt says why
    assert receiver.received == []
    (attempt,) = read(message_id).attempts
    assert attempt["status_code"] is None and "WEBHOOK_ALLOW_PRIVATE" in attempt["error"]


@pytest.fixture
def receiver_on_each_database(receiver: Receiver, empty_database: str,
                              monkeypatch: pytest.MonkeyPatch) -> Iterator[Receiver]:
    """The receiver, with herald on a migrated database of each kind: PostgreSQL, and
    SQLite (the embedded default's), whose SQL for the relay's statements is its own."""
    pipeline_database = os.environ["DATABASE_URL"]
    monkeypatch.setenv("DATABASE_URL", empty_database)
    settings.reset_settings()
    db.reset_engine()
    db.migrate(empty_database)
    yield receiver
    db.reset_engine()
    # the pipeline's fixtures empty their own database when the test ends
    monkeypatch.setenv("DATABASE_URL", pipeline_database)
    settings.reset_settings()


def test_on_each_database_a_retried_message_ends_delivered_once(
        receiver_on_each_database: Receiver) -> None:
    receiver = receiver_on_each_database
    # Given an endpoint whose receiver answers 500 first, and a pending message for it
    receiver.answer(500)
    endpoint_id = endpoint(receiver)
    message_id = message(endpoint_id, enqueue=False)
    now = utcnow()
    # When it is attempted, and again once its retry is due
    assert relay.attempt_message(message_id, now)["retry_in_s"] is not None
    with db.session() as session:
        failing = session.get(WebhookEndpoint, endpoint_id)
        assert failing is not None and failing.failing_since == now
    later = now + timedelta(seconds=10)
    assert relay.attempt_message(message_id, later) == {
        "status": "delivered", "retry_in_s": None}
    # Then both attempts are listed in order, and the endpoint's failing streak is over
    row = read(message_id)
    assert row.status == "delivered" and codes(row) == [500, 200]
    assert [attempt["at"] for attempt in row.attempts] == [now.isoformat(),
                                                           later.isoformat()]
    with db.session() as session:
        recovered = session.get(WebhookEndpoint, endpoint_id)
        assert recovered is not None and recovered.failing_since is None
    # And a delivered message is never sent again
    assert relay.attempt_message(message_id, later)["status"] == "delivered"
    assert len(receiver.received) == 2
