"""Exactly one message per digest bucket, whatever races or breaks (docs/pipeline.md#digests):
two sweeps ("clocks") closing the same due buckets at once, two worker processes and a
sweep closing them together, a worker SIGKILLed inside the close's transaction, and a
FLUSHALL that loses every close job (the sweep closes the buckets)."""

from __future__ import annotations

import collections
import signal
import subprocess
import threading
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import pytest
import redis
from fastapi.testclient import TestClient

from actors.digests import close_due_digests
from actors.handoffs import reconcile_handoffs
from actors.queues import registry
from herald import settings
from herald.queue import running_worker
from providers.mock import MockProvider
from tests.support.digests.steps import (
    activity,
    buckets_of,
    deliveries_of,
    digest_activity,
    emails_to,
    messages_of,
    move_time,
)
from tests.support.pipeline.steps import account
from tests.support.processes import spawn_herald
from tests.support.queue_app import install_queue_app
from tests.support.waiting import wait_for

QUEUES = ["notification-orchestration", "notification-email"]
CLOSE_WORKER = "tests.support.digests.close_worker"


def accounts_with_activity(client: TestClient, count: int, events: int = 3) -> list[str]:
    """``count`` accounts (addresses ``digest<n>@example.com``), each with ``events``
    activity events in its open digest."""
    ids = [account(client, email=f"digest{n}@example.com") for n in range(count)]
    for account_id in ids:
        for n in range(events):
            assert activity(client, account_id, f"event-{n}")[0] == 202
    return ids


def one_message_each(ids: list[str], *, emailed: bool = True) -> bool:
    """True once every account has its digest's message (and its email sent)."""
    for account_id in ids:
        messages = messages_of(account_id)
        if len(messages) != 1:
            return False
        if emailed and deliveries_of(messages[0].id)["email"].outcome != "sent":
            return False
    return True


def assert_exactly_one_message_each(ids: list[str]) -> None:
    for n, account_id in enumerate(ids):
        [bucket] = buckets_of(account_id)
        [message] = messages_of(account_id)
        assert (bucket.status, bucket.notification_id) == ("closed", message.id)
        assert len(message.data["events"]) == 3
        assert len(emails_to(f"digest{n}@example.com")) == 1


def spawn_worker() -> subprocess.Popen[bytes]:
    return spawn_herald("worker", "--import", CLOSE_WORKER, *QUEUES)


@pytest.fixture
def workers() -> Iterator[list[subprocess.Popen[bytes]]]:
    """Worker processes a test starts, killed at its end."""
    processes: list[subprocess.Popen[bytes]] = []
    yield processes
    for process in processes:
        process.kill()
        process.wait(timeout=10)


def test_two_clocks_sweeping_the_same_due_buckets_make_one_message_each(
        client: TestClient) -> None:
    # Given ten accounts whose digests are past their close time
    ids = accounts_with_activity(client, 10)
    move_time(timedelta(hours=1, seconds=1))
    # When two sweeps run at the same instant, each closing every due bucket
    start = threading.Barrier(2)
    closed: list[int] = []

    def clock() -> None:
        start.wait()
        closed.append(close_due_digests())

    clocks = [threading.Thread(target=clock) for _ in range(2)]
    for thread in clocks:
        thread.start()
    for thread in clocks:
        thread.join(timeout=60)
    # Then between them they closed each bucket once
    assert sum(closed) == 10, closed
    assert one_message_each(ids, emailed=False)
    # and each account gets one email (the close jobs that fall due find nothing to do)
    with running_worker(QUEUES):
        wait_for(lambda: one_message_each(ids), timeout=60, what="the emails")
    assert_exactly_one_message_each(ids)


def test_two_workers_and_a_sweep_closing_together_make_one_message_each(
        client: TestClient, monkeypatch: pytest.MonkeyPatch,
        workers: list[subprocess.Popen[bytes]]) -> None:
    # Given digests with a 2-second window, and two worker processes
    digest_activity(monkeypatch, window=timedelta(seconds=2))
    workers += [spawn_worker(), spawn_worker()]
    ids = accounts_with_activity(client, 20)
    # When their close jobs fall due while a sweep runs here too
    def settled() -> bool:
        close_due_digests()
        return one_message_each(ids)

    wait_for(settled, timeout=90, every=0.05, what="every digest's email")
    # Then each bucket made one message, and each account got one email
    assert_exactly_one_message_each(ids)


def test_a_worker_killed_inside_the_close_leaves_the_bucket_to_be_closed_once(
        client: TestClient, monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
        workers: list[subprocess.Popen[bytes]]) -> None:
    # Given a digest with a 1-second window and a worker that stalls inside its close
    marker = tmp_path / "stalled"
    monkeypatch.setenv("DIGEST_STALL_MARKER", str(marker))
    digest_activity(monkeypatch, window=timedelta(seconds=1))
    workers.append(spawn_worker())
    ids = accounts_with_activity(client, 1)
    # When the worker is SIGKILLed while its close's transaction is open
    wait_for(marker.exists, timeout=60, what="the close to start")
    workers[0].send_signal(signal.SIGKILL)
    workers[0].wait(timeout=10)
    # Then nothing of that close stands: the bucket is still open, no message exists
    wait_for(lambda: buckets_of(ids[0])[0].status == "open", timeout=10,
             what="the killed close to roll back")
    assert messages_of(ids[0]) == []
    # and a new worker takes the close job up again: exactly one message, one email
    workers.append(spawn_worker())
    wait_for(lambda: one_message_each(ids), timeout=60, what="the digest's email")
    assert_exactly_one_message_each(ids)


def test_a_worker_killed_after_the_close_commits_leaves_its_message_to_the_handoff_sweep(
        client: TestClient, monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
        workers: list[subprocess.Popen[bytes]]) -> None:
    # Given a worker that stalls after its close committed, before the handoff
    marker = tmp_path / "stalled"
    monkeypatch.setenv("DIGEST_STALL_MARKER", str(marker))
    monkeypatch.setenv("DIGEST_STALL_AT", "handoff")
    digest_activity(monkeypatch, window=timedelta(seconds=1))
    workers.append(spawn_worker())
    ids = accounts_with_activity(client, 1)
    # When it is SIGKILLed there
    wait_for(marker.exists, timeout=60, what="the close to commit")
    workers[0].send_signal(signal.SIGKILL)
    workers[0].wait(timeout=10)
    # Then the message stands, its email queued with no job; the bucket is closed for good
    [message] = messages_of(ids[0])
    assert deliveries_of(message.id)["email"].outcome == "queued"
    assert buckets_of(ids[0])[0].status == "closed"
    # and once the handoff sweep re-drives it, a new worker sends it: one email
    workers.append(spawn_worker())
    assert reconcile_handoffs(age=timedelta(microseconds=1)).deliveries == 1
    wait_for(lambda: one_message_each(ids), timeout=60, what="the digest's email")
    assert close_due_digests() == 0
    assert_exactly_one_message_each(ids)


@pytest.fixture
def flushable(client: TestClient, monkeypatch: pytest.MonkeyPatch, private_redis_url: str,
              redis6_url: str) -> str:
    """The jobs on a Redis of this test's own (it is flushed), the mock's records on
    another; yields the job Redis's URL."""
    monkeypatch.setenv("REDIS_URL", private_redis_url)
    monkeypatch.setenv("MOCK_STORE_URL", redis6_url)
    settings.reset_settings()
    install_queue_app()
    MockProvider.reset()
    return private_redis_url


def test_a_flushall_after_the_events_loses_no_digest(client: TestClient,
                                                     flushable: str) -> None:
    # Given five accounts' digests, their close jobs waiting in Redis
    ids = accounts_with_activity(client, 5)
    # When Redis loses every job, and the window ends
    redis.Redis.from_url(flushable).flushall()
    move_time(timedelta(hours=1, seconds=1))
    with running_worker(QUEUES):
        # Then no close job is left to run them; the sweep closes each bucket, once
        assert all(b.status == "open" for i in ids for b in buckets_of(i))
        sweep = registry.sweeps()["digests"]
        assert sweep() == 5
        assert sweep() == 0
        wait_for(lambda: one_message_each(ids), timeout=60, what="the digests' emails")
    assert_exactly_one_message_each(ids)
    sent = collections.Counter(s["to"] for s in MockProvider.sends(accepted_only=True))
    assert sent == {f"digest{n}@example.com": 1 for n in range(5)}
