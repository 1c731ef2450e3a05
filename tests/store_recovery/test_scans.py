"""The store recovery scans on PostgreSQL (docs/sweeps.md#store-recovery): which rows each
one re-drives, with which trigger, stamped so that no scan doubles them."""

from __future__ import annotations

import threading
from datetime import timedelta
from typing import Any

import pytest
import redis

from actors.store import StoreJob, Trigger, enqueue_issuance, issue_store_order
from actors.store_recovery import SCANS, RecoveryWindow, recover_orders
from herald.db import session as db_session
from herald.queue import Job, enqueue, queue
from models.base import utcnow
from tests.store_recovery.conftest import ago, reload, store_order, use_env

STORE = "store-fulfillment"


def runs(order_id: str) -> list[Job]:
    """The order's store-fulfillment jobs waiting to run."""
    return [job for job in queue(STORE).jobs("waiting", per_page=1000)
            if job.id.startswith(f"{order_id}-")]


def recovery_triggers(order_id: str) -> list[str]:
    """The triggers of the order's waiting runs that a scan added."""
    return sorted(job.payload["trigger"] for job in runs(order_id)
                  if job.payload["trigger"] in {"stalled_scan", "webhook_fallback",
                                                "verification_deadline"})


def assert_re_driven(rows: dict[str, str], trigger: Trigger) -> None:
    """Each row has exactly one run of ``trigger`` and a fresh recovery stamp."""
    for name, order_id in rows.items():
        assert recovery_triggers(order_id) == [trigger.value], name
        stamp = reload(order_id).recovered_at
        assert stamp is not None and stamp > utcnow() - timedelta(seconds=30), name


def assert_left_alone(rows: dict[str, str], stamps: dict[str, Any]) -> None:
    """No scan added a run for these rows, nor touched their stamp or state."""
    for name, order_id in rows.items():
        assert recovery_triggers(order_id) == [], name
        row = reload(order_id)
        assert (row.recovered_at, row.issuance_state) == stamps[name], name


def snapshot(rows: dict[str, str]) -> dict[str, Any]:
    return {name: (reload(i).recovered_at, reload(i).issuance_state) for name, i in rows.items()}


# -- stalled order scan -------------------------------------------------------------------
def test_the_stalled_scan_requeues_old_in_flight_orders_with_no_live_job(store: None) -> None:
    stalled = {
        "in flight past the stalled age": store_order("in_flight", in_flight_at=ago(minutes=16)),
        "recovered more than a window ago": store_order(
            "in_flight", in_flight_at=ago(hours=2), recovered_at=ago(minutes=16)),
        "paid, pending, its first run lost": store_order("pending", updated_at=ago(hours=1)),
        "reconciliation required, no reference": store_order(
            "reconciliation_required", in_flight_at=ago(hours=1)),
        "issued, its eSIM notification never triggered": store_order(
            "issued", in_flight_at=ago(hours=1)),
    }
    payment_run = store_order("in_flight", in_flight_at=ago(hours=1))
    webhook_run = store_order("in_flight", in_flight_at=ago(hours=1))
    left_alone = {
        "in flight recently": store_order("in_flight", in_flight_at=ago(minutes=5)),
        "recovered within the window": store_order(
            "in_flight", in_flight_at=ago(hours=1), recovered_at=ago(minutes=5)),
        "its payment run still waits": payment_run,
        "a webhook's run still waits": webhook_run,
        "issued and announced": store_order("issued", in_flight_at=ago(hours=1),
                                            announced_at=ago(hours=1)),
        "failed": store_order("failed", in_flight_at=ago(hours=1)),
        "pending, paid recently": store_order("pending", updated_at=ago(minutes=5)),
        "pending, not paid": store_order("pending", order_status="pending_payment",
                                         updated_at=ago(hours=1)),
    }
    enqueue_issuance(payment_run, Trigger.PAYMENT)
    enqueue_issuance(webhook_run, Trigger.PROVIDER_WEBHOOK, "evt-1")
    before = snapshot(left_alone)
    # When the scans run
    report = recover_orders()
    # Then each stalled order has one stalled-scan run and a fresh stamp
    assert (report.stalled_scan, report.webhook_fallback, report.verification_deadline,
            report.live) == (5, 0, 0, 2)
    assert_re_driven(stalled, Trigger.STALLED_SCAN)
    # and nothing else was touched: the orders with a live run keep that one run only
    assert_left_alone(left_alone, before)
    assert [job.id for job in runs(payment_run)] == [f"{payment_run}-issue"]
    assert len(runs(webhook_run)) == 1
    # When the scans run again at once, the stamps keep them from requeueing twice
    assert recover_orders().total == 0
    assert_re_driven(stalled, Trigger.STALLED_SCAN)


def test_a_live_job_is_looked_up_in_every_live_state(store: None) -> None:
    # Given stalled orders whose runs wait, wait for a retry (delayed) or sit in a paused
    # queue
    waiting, delayed, paused = (store_order("in_flight", in_flight_at=ago(hours=1))
                                for _ in range(3))
    enqueue_issuance(waiting, Trigger.REQUEUE, "operator")
    enqueue(issue_store_order, StoreJob(order_id=delayed), job_id=f"{delayed}-issue",
            delay=timedelta(hours=1))
    # When the scan runs while the queue is paused
    queue(STORE).pause()
    enqueue_issuance(paused, Trigger.PAYMENT)
    report = recover_orders()
    # Then none was requeued
    assert (report.total, report.live) == (0, 3)
    for order_id in (waiting, delayed, paused):
        assert reload(order_id).recovered_at is None


# -- webhook fallback check ----------------------------------------------------------------
def test_the_webhook_fallback_reconciles_orders_whose_webhook_never_came(store: None) -> None:
    awaiting = {
        "in flight with a reference": store_order(
            "in_flight", provider_order_ref="ref-1", in_flight_at=ago(minutes=11)),
        "reconciliation required with a reference": store_order(
            "reconciliation_required", provider_order_ref="ref-2",
            in_flight_at=ago(minutes=11)),
        "last webhook older than the in-flight stamp": store_order(
            "in_flight", provider_order_ref="ref-3", in_flight_at=ago(minutes=11),
            webhook_at=ago(minutes=30)),
    }
    both = {"stalled too: the stalled scan takes it": store_order(
        "in_flight", provider_order_ref="ref-4", in_flight_at=ago(minutes=20))}
    left_alone = {
        "no reference": store_order("in_flight", in_flight_at=ago(minutes=11)),
        "a webhook since the stamp": store_order(
            "in_flight", provider_order_ref="ref-5", in_flight_at=ago(minutes=11),
            webhook_at=ago(minutes=10)),
        "stamped recently": store_order("in_flight", provider_order_ref="ref-6",
                                        in_flight_at=ago(minutes=5)),
        "recovered within the window": store_order(
            "in_flight", provider_order_ref="ref-7", in_flight_at=ago(minutes=11),
            recovered_at=ago(minutes=5)),
        "issued": store_order("issued", provider_order_ref="ref-8",
                              in_flight_at=ago(hours=1), announced_at=ago(hours=1)),
        "pending verification": store_order("pending_verification",
                                             provider_order_ref="ref-9",
                                             in_flight_at=ago(hours=1)),
    }
    before = snapshot(left_alone)
    report = recover_orders()
    assert (report.stalled_scan, report.webhook_fallback) == (1, 3)
    assert_re_driven(awaiting, Trigger.WEBHOOK_FALLBACK)
    assert_re_driven(both, Trigger.STALLED_SCAN)
    assert_left_alone(left_alone, before)
    assert recover_orders().total == 0


# -- verification deadline check -----------------------------------------------------------
def test_the_verification_deadline_check_reconciles_overdue_verifications(
        store: None) -> None:
    overdue = {"deadline passed": store_order("pending_verification",
                                              verification_deadline=ago(minutes=1),
                                              in_flight_at=ago(days=1))}
    left_alone = {
        "deadline ahead": store_order("pending_verification",
                                      verification_deadline=ago(hours=-1)),
        "no deadline": store_order("pending_verification"),
        "recovered within the window": store_order(
            "pending_verification", verification_deadline=ago(hours=1),
            recovered_at=ago(minutes=5)),
        "already failed": store_order("failed", verification_deadline=ago(hours=1)),
    }
    before = snapshot(left_alone)
    report = recover_orders()
    assert (report.total, report.verification_deadline) == (1, 1)
    assert_re_driven(overdue, Trigger.VERIFICATION_DEADLINE)
    assert_left_alone(left_alone, before)
    # When its run is lost, the order is reconciled again once the window has passed
    [lost] = runs(overdue["deadline passed"])
    assert queue(STORE).remove(lost.id)
    later = recover_orders(utcnow() + timedelta(minutes=16))
    # (with the order whose recovery stamp was 5 minutes old then)
    assert later.verification_deadline == 2
    assert recovery_triggers(overdue["deadline passed"]) == ["verification_deadline"]


# -- the run's shape: limit, locks, concurrent clocks --------------------------------------
def test_each_scan_takes_its_limit_per_run_oldest_first(
        store: None, monkeypatch: pytest.MonkeyPatch) -> None:
    use_env(monkeypatch, store_recovery_limit="3")
    rows = [store_order("in_flight", in_flight_at=ago(hours=3, seconds=-n)) for n in range(5)]
    assert recover_orders().stalled_scan == 3
    assert [reload(i).recovered_at is not None for i in rows] == [True] * 3 + [False] * 2
    assert recover_orders().stalled_scan == 2


def test_a_scan_skips_rows_another_scan_holds(store: None) -> None:
    rows = [store_order("in_flight", in_flight_at=ago(hours=1, seconds=-n)) for n in range(10)]
    locked, release = threading.Event(), threading.Event()
    held: list[str] = []

    def other_scan_holding_its_rows() -> None:
        window = RecoveryWindow.current()
        with db_session() as session:
            claim = SCANS[0].claim(RecoveryWindow(
                now=window.now, stalled_cutoff=window.stalled_cutoff,
                fallback_cutoff=window.fallback_cutoff, limit=4))
            held.extend(row.id for row in session.exec(claim).all())
            locked.set()
            release.wait(10)

    holder = threading.Thread(target=other_scan_holding_its_rows)
    holder.start()
    try:
        assert locked.wait(10)
        report = recover_orders()
    finally:
        release.set()
        holder.join()
    assert report.stalled_scan == 6
    assert {i for i in rows if recovery_triggers(i)} == set(rows) - set(held)
    assert all(reload(i).recovered_at is None for i in held)


def test_two_clocks_scanning_at_once_never_double_a_row(store: None) -> None:
    rows = {store_order("in_flight", in_flight_at=ago(hours=1, seconds=-n)) for n in range(20)}
    start = threading.Barrier(2)
    reports: list[Any] = []

    def clock() -> None:
        start.wait(10)
        reports.append(recover_orders())

    threads = [threading.Thread(target=clock) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sum(report.stalled_scan for report in reports) == len(rows)
    assert {i: recovery_triggers(i) for i in rows} == {i: ["stalled_scan"] for i in rows}
    assert queue(STORE).counts()["waiting"] == len(rows)


def test_a_scan_redis_cannot_answer_stamps_nothing(
        store: None, monkeypatch: pytest.MonkeyPatch, redis_url: str) -> None:
    order_id = store_order("in_flight", in_flight_at=ago(hours=1))
    use_env(monkeypatch, redis_url="redis://127.0.0.1:1/0")
    with pytest.raises(redis.ConnectionError):
        recover_orders()
    # Then the row is not stamped: the next run, with Redis back, requeues it at once
    assert reload(order_id).recovered_at is None
    use_env(monkeypatch, redis_url=redis_url)
    assert recover_orders().stalled_scan == 1
    assert recovery_triggers(order_id) == ["stalled_scan"]
