"""A worker host cut off from the network loses no delivery, and its late writes change
nothing (docs/failure-modes.md#partition).

500 email events go through two ``herald worker`` hosts, each in a network namespace of
its own; the mock provider takes 0.5 s per send. While sends are in flight, one host's
link to Redis and PostgreSQL goes down for longer than the email job lock and the
deliveries' claims; the other host restarts its stalled jobs and takes its deliveries
over. Then the link comes back and the cut-off host finishes what it was doing: its
job ends are refused by the run tokens (its log says so) and its outcome writes by the
claims (each delivery keeps the taking-over send's message id). Every delivery ends
``sent``; a delivery the provider accepted twice is one that was in flight at the cut.
"""

from __future__ import annotations

import collections
import time
import uuid
from concurrent.futures import ThreadPoolExecutor

import pytest
from sqlalchemy import func
from sqlmodel import select

from actors.notifications import OUTCOME_NOT_WRITTEN
from herald import settings
from herald.db import session as db_session
from models.notifications import FINAL_OUTCOMES, Delivery
from providers.mock import MockProvider
from tests.support.netns import Network
from tests.support.pipeline.steps import in_flight, open_deliveries
from tests.support.pipeline.timings import CLAIM_STALE_AFTER, NOTIFICATION_LOCK
from tests.support.waiting import wait_for

pytestmark = pytest.mark.slow

EVENTS = 500
ACCOUNTS = 50
#: What the mock takes per send.
SEND_HANG = "hang:0.5"
#: The most email attempts one worker process holds at once (the queue's concurrency).
IN_FLIGHT_PER_PROCESS = 5
#: A finished run whose job was taken over, as the worker logs it (docs/queue.md#logging).
RUN_IGNORED = "run ignored: job no longer holds this token"
WORKER = ("worker", "--import", "bench.unlimited", "--import", "tests.partition.short_locks",
          "notification-email")


def _all_final(ids: set[str]) -> bool:
    with db_session() as session:
        return session.exec(select(func.count()).select_from(Delivery).where(
            Delivery.id.in_(ids), Delivery.outcome.in_([o.value for o in FINAL_OUTCOMES]))
        ).one() == len(ids)


def _trigger_all(run: str) -> None:
    from actors.orchestration import create_account, trigger_event

    accounts = [create_account(email=f"cut{n}@example.com").id for n in range(ACCOUNTS)]
    for n in range(ACCOUNTS):
        MockProvider.script(f"cut{n}@example.com", SEND_HANG)

    def one(n: int) -> None:
        trigger_event(account_id=accounts[n % ACCOUNTS], type="payment.receipt",
                      occurrence=f"{run}-{n}", channels=["email"],
                      data={"amount": "10.00", "currency": "SAR", "order_id": f"o-{n}"})

    with ThreadPoolExecutor(max_workers=4) as pool:
        list(pool.map(one, range(EVENTS)))


def _sends() -> int:
    return len(MockProvider.sends())


@pytest.mark.timeout(300)
def test_a_partitioned_worker_host_loses_nothing_and_its_late_writes_are_refused(
        pipeline: None, monkeypatch: pytest.MonkeyPatch, redis6_url: str,
        network: Network) -> None:
    started = time.monotonic()
    monkeypatch.setenv("MOCK_STORE_URL", redis6_url)  # the provider is not the job Redis
    settings.reset_settings()
    MockProvider.reset()
    cut_off = network.hosts[0]
    for host in network.hosts:
        host.spawn_herald(*WORKER, label="worker")
    wait_for(lambda: all(host.log_lines("worker", "worker started") for host in network.hosts),
             timeout=60, every=0.2, what="both workers to start")

    with ThreadPoolExecutor(max_workers=1) as producer:
        done = producer.submit(_trigger_all, uuid.uuid4().hex[:8])
        # Given sends in flight on both hosts
        wait_for(lambda: _sends() > 60, timeout=60, every=0.1, what="sends to start")
        # When one host loses its link
        cut_off.cut()
        cut_at = time.monotonic()
        in_flight_at_cut = in_flight()
        # the other host restarts its stalled jobs and takes its claims over: every
        # delivery in flight at the cut ends final while the host is still cut off
        wait_for(lambda: _all_final(in_flight_at_cut), timeout=60, every=0.2,
                 what="the deliveries in flight at the cut to be taken over")
        cut_for = time.monotonic() - cut_at
        cut_off.restore()
        done.result(timeout=60)
    assert cut_for > max(NOTIFICATION_LOCK, CLAIM_STALE_AFTER).total_seconds()

    # Then every delivery ends final
    wait_for(lambda: open_deliveries() == 0, timeout=150, every=0.5,
             what="every delivery to end final")
    accepted = collections.defaultdict(list)
    for record in MockProvider.sends(accepted_only=True):
        accepted[record["idempotency_key"]].append(record["provider_message_id"])
    duplicated = {key for key, ids in accepted.items() if len(ids) > 1}
    # the cut-off host finishes its runs once it is back: each one's end is refused by
    # its run token (a run that sent or found its claim taken over alike)
    wait_for(lambda: cut_off.log_lines("worker", RUN_IGNORED) >= max(len(duplicated), 1),
             timeout=60, every=0.5, what="the cut-off host's late job ends to be refused")
    with db_session() as session:
        rows = {d.id: d for d in session.exec(select(Delivery)).all()}
    assert len(rows) == EVENTS
    assert collections.Counter(d.outcome for d in rows.values()) == {"sent": EVENTS}
    assert len(accepted) == EVENTS
    # a delivery accepted twice was in flight at the cut, at most one per email slot ...
    assert duplicated <= in_flight_at_cut, duplicated - in_flight_at_cut
    assert len(duplicated) <= IN_FLIGHT_PER_PROCESS
    # ... and its row keeps the taking-over send: the late outcome write was refused,
    # and the cut-off host's log says so, one line per refused write
    for key in duplicated:
        assert rows[key].provider_message_id == accepted[key][-1], key
    assert cut_off.log_lines("worker", OUTCOME_NOT_WRITTEN) >= len(duplicated)
    refused = cut_off.log_lines("worker", RUN_IGNORED)
    print(f"partition test: {time.monotonic() - started:.0f} s, cut for {cut_for:.1f} s, "
          f"{len(in_flight_at_cut)} in flight at the cut, {len(duplicated)} sent twice, "
          f"{refused} late job ends refused, "
          f"{cut_off.log_lines('worker', OUTCOME_NOT_WRITTEN)} late outcome writes refused")
