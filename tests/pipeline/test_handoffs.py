"""The handoff sweep's selection rules on PostgreSQL (docs/sweeps.md)."""

from __future__ import annotations

import logging
import threading
from datetime import datetime, timedelta
from typing import Any

import pytest

from actors.handoffs import Window, reconcile_handoffs, stale_deliveries
from actors.notifications import CHANNEL_QUEUES
from herald import settings
from herald.db import session as db_session
from herald.queue import queue, running_worker
from models.base import utcnow
from models.batches import Batch
from models.callbacks import CallbackReceipt
from models.notifications import Account, Delivery, Notification
from providers.mock import MockProvider
from tests.support.queue_app import install_queue_app
from tests.support.waiting import wait_for

AGE = timedelta(minutes=15)


def _delivery(*, outcome: str = "queued", channel: str = "email", age: timedelta = AGE * 2,
              claimed: timedelta | None = None, stamped: timedelta | None = None,
              ) -> Delivery:
    """A persisted delivery created ``age`` ago, claimed/stamped that long ago (None: not)."""
    now = utcnow()
    with db_session() as session:
        account = Account(email="sweep@example.com", phone="+966501234567")
        notification = Notification(account_id=account.id, type="account.welcome",
                                    occurrence=f"o-{now.timestamp()}-{id(object())}")
        delivery = Delivery(notification_id=notification.id, channel=channel, outcome=outcome,
                            created_at=now - age,
                            claimed_at=None if claimed is None else now - claimed,
                            queued_at=None if stamped is None else now - stamped)
        session.add(account)
        session.flush()
        session.add(notification)
        session.flush()
        session.add(delivery)
    return delivery


def _reload(model: Any, row_id: str) -> Any:
    with db_session() as session:
        return session.get(model, row_id)


def _job(delivery: Delivery) -> Any:
    """The delivery's channel job, wherever a channel has a queue (in-app has none)."""
    found = [queue(name).get(delivery.id) for name in CHANNEL_QUEUES.values()]
    return next((job for job in found if job is not None), None)


# -- deliveries -----------------------------------------------------------------------------
def test_the_sweep_hands_off_exactly_the_deliveries_the_seed_names(pipeline: None) -> None:
    # Given deliveries in every situation
    eligible = {
        "unstamped queued, however young": _delivery(age=timedelta(seconds=1)),
        "queued, stamped long ago": _delivery(stamped=AGE + timedelta(minutes=1)),
        "sending, abandoned claim": _delivery(outcome="sending", claimed=timedelta(minutes=2),
                                              stamped=AGE * 2),
        "sending, claim released by a failure": _delivery(outcome="sending", stamped=AGE * 2),
        "sms too": _delivery(channel="sms"),
    }
    left_alone = {
        "queued, stamped recently": _delivery(stamped=timedelta(minutes=1)),
        "sending, live claim": _delivery(outcome="sending", claimed=timedelta(seconds=30),
                                         stamped=AGE * 2),
        "sending, stale claim, stamped recently": _delivery(
            outcome="sending", claimed=timedelta(minutes=2), stamped=timedelta(minutes=1)),
        **{outcome: _delivery(outcome=outcome)
           for outcome in ("sent", "delivered", "failed_terminal", "suppressed")},
        "in-app": _delivery(channel="in_app", outcome="delivered"),
    }
    before = {name: _reload(Delivery, d.id) for name, d in eligible.items()}
    # When the sweep runs
    report = reconcile_handoffs()
    # Then each eligible delivery has its channel job back, at normal priority, and a fresh
    # stamp; its outcome and claim are untouched
    assert report.deliveries == len(eligible)
    for name, delivery in eligible.items():
        job = _job(delivery)
        assert job is not None and job.priority == 5, name
        after = _reload(Delivery, delivery.id)
        assert after.queued_at is not None and after.queued_at > utcnow() - timedelta(
            seconds=30), name
        assert (after.outcome, after.claimed_at) == (before[name].outcome,
                                                     before[name].claimed_at), name
    # and nothing else was touched
    for name, delivery in left_alone.items():
        assert _job(delivery) is None, name
        assert _reload(Delivery, delivery.id).queued_at == delivery.queued_at, name
    # When it runs again at once, the fresh stamps keep it from handing them off twice
    assert reconcile_handoffs().deliveries == 0


def test_the_sweep_takes_200_rows_per_run_oldest_first(pipeline: None) -> None:
    rows = [_delivery(age=timedelta(hours=3) - timedelta(seconds=n)) for n in range(205)]
    assert reconcile_handoffs().deliveries == 200
    # the 5 newest wait for the next run
    unstamped = [d.id for d in rows if _reload(Delivery, d.id).queued_at is None]
    assert unstamped == [d.id for d in rows[-5:]]
    assert reconcile_handoffs().deliveries == 5


def test_a_repaired_delivery_is_sent_once_and_a_completed_job_is_left_alone(
        pipeline: None) -> None:
    # Given a delivery whose job was lost (persisted, never enqueued)
    lost = _delivery(age=timedelta(seconds=5))
    # When the sweep runs and a worker serves the queue
    reconcile_handoffs()
    with running_worker(["notification-email"]):
        wait_for(lambda: _job(lost).state == "completed", timeout=30)
    # Then it was sent once
    assert _reload(Delivery, lost.id).outcome == "sent"
    assert len(MockProvider.sends()) == 1
    # When the row is (inconsistently) pending again while its completed job is retained
    with db_session() as session:
        row = session.get(Delivery, lost.id)
        row.outcome, row.queued_at = "queued", None
        session.add(row)
    assert reconcile_handoffs().deliveries == 1
    # Then the retained completed job is left alone: nothing waits to run it again
    job = _job(lost)
    assert (job.state, job.attempts_started) == ("completed", 1)
    assert queue("notification-email").counts()["waiting"] == 0


def test_a_failed_re_enqueue_is_logged_by_id_and_stays_eligible(
        pipeline: None, monkeypatch: pytest.MonkeyPatch,
        caplog: pytest.LogCaptureFixture) -> None:
    delivery = _delivery()
    # Given Redis unreachable
    monkeypatch.setenv("REDIS_URL", "redis://127.0.0.1:1/0")
    settings.reset_settings()
    install_queue_app()
    with caplog.at_level(logging.WARNING, logger="herald.handoffs"):
        reconcile_handoffs()
    # Then the failure is logged with the delivery's id
    failures = [r for r in caplog.records if r.getMessage().startswith("handoff re-enqueue")]
    assert [r.delivery_id for r in failures] == [delivery.id]
    # and once the handoff age has passed the delivery is eligible again
    later = utcnow() + AGE + timedelta(seconds=1)
    with db_session() as session:
        again = session.exec(stale_deliveries(Window.current(later))).all()
    assert [d.id for d in again] == [delivery.id]


def test_overlapping_sweeps_never_take_the_same_row(pipeline: None) -> None:
    rows = [_delivery(age=timedelta(hours=1) - timedelta(seconds=n)) for n in range(10)]
    locked = threading.Event()
    release = threading.Event()
    held: list[str] = []

    def first_sweep_holding_its_rows() -> None:
        with db_session() as session:
            window = Window(now=utcnow(), cutoff=utcnow() - AGE, limit=4)
            held.extend(d.id for d in session.exec(stale_deliveries(window)).all())
            locked.set()
            release.wait(10)

    holder = threading.Thread(target=first_sweep_holding_its_rows)
    holder.start()
    try:
        locked.wait(10)
        # When a second sweep runs while the first holds its rows
        report = reconcile_handoffs()
    finally:
        release.set()
        holder.join()
    # Then it skipped exactly the locked rows
    assert report.deliveries == 6
    assert {d.id for d in rows if _job(d) is not None} == {d.id for d in rows} - set(held)


# -- batches --------------------------------------------------------------------------------
def _batch(*, status: str = "scheduled", created: timedelta = AGE * 2,
           scheduled: timedelta | None = None, started: timedelta | None = None) -> Batch:
    """A batch created ``created`` ago; ``scheduled``/``started`` are offsets from now
    (positive: in the past)."""
    now = utcnow()

    def at(offset: timedelta | None) -> datetime | None:
        return None if offset is None else now - offset

    with db_session() as session:
        batch = Batch(type="account.welcome", account_ids=[], status=status,
                      created_at=now - created, scheduled_at=at(scheduled),
                      started_at=at(started))
        session.add(batch)
    return batch


def _batch_job(batch: Batch) -> Any:
    return queue("notification-orchestration").get(f"notification-batch-{batch.id}")


def test_the_sweep_re_enqueues_only_overdue_batches(pipeline: None) -> None:
    overdue = {
        "scheduled now, long ago": _batch(),
        "scheduled time long past": _batch(scheduled=AGE + timedelta(minutes=1)),
        "running, started long ago": _batch(status="running", started=AGE * 2),
    }
    healthy = {
        "future schedule": _batch(scheduled=-timedelta(hours=1)),
        "scheduled time inside the window": _batch(scheduled=timedelta(minutes=5)),
        "created recently": _batch(created=timedelta(minutes=5)),
        "running, started recently": _batch(status="running", started=timedelta(minutes=5)),
        "finished": _batch(status="finished", started=AGE * 2),
        "cancelled": _batch(status="cancelled"),
    }
    report = reconcile_handoffs()
    assert report.batches == len(overdue)
    for name, batch in overdue.items():
        assert _batch_job(batch) is not None, name
    for name, batch in healthy.items():
        assert _batch_job(batch) is None, name


def test_overlapping_sweeps_never_double_a_batch_run(pipeline: None) -> None:
    batch = _batch()
    # When two sweeps run at once
    threads = [threading.Thread(target=reconcile_handoffs) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    reconcile_handoffs()
    # Then one run_batch job exists for the batch
    job = _batch_job(batch)
    assert job is not None and job.attempts_started == 0
    assert queue("notification-orchestration").counts()["waiting"] == 1


# -- callback receipts -------------------------------------------------------------------
def _receipt(*, stamped: timedelta | None = None, processed: bool = False) -> CallbackReceipt:
    now = utcnow()
    with db_session() as session:
        receipt = CallbackReceipt(
            provider="mock", event_id=f"evt-{id(object())}-{now.timestamp()}", channel="email",
            provider_message_id="mock-x", status="delivered", received_at=now - AGE * 2,
            queued_at=None if stamped is None else now - stamped,
            processed_at=now if processed else None)
        session.add(receipt)
    return receipt


def _callback_job(receipt: CallbackReceipt) -> Any:
    return queue("notification-orchestration").get(f"notification-callback-{receipt.event_id}")


def test_the_sweep_re_drives_unprocessed_receipts_and_rewrites_their_stamp(
        pipeline: None) -> None:
    eligible = [_receipt(), _receipt(stamped=AGE + timedelta(minutes=1))]
    left_alone = [_receipt(stamped=timedelta(minutes=1)), _receipt(processed=True)]
    report = reconcile_handoffs()
    assert report.receipts == 2
    for receipt in eligible:
        assert _callback_job(receipt) is not None
        stamp = _reload(CallbackReceipt, receipt.id).queued_at
        assert stamp is not None and stamp > utcnow() - timedelta(seconds=30)
    for receipt in left_alone:
        assert _callback_job(receipt) is None
    # the rewritten stamp keeps the next sweep away for a full window
    assert reconcile_handoffs().receipts == 0


def test_the_clock_runs_the_sweep_at_start_and_every_minute(pipeline: None) -> None:
    from herald.queue import current_app, fire_schedules

    sweep = current_app().schedules()["reconcile-handoffs"]
    assert sweep.every == timedelta(minutes=1)

    def sweep_jobs() -> list[list[str]]:
        # the queue carries other schedules' startup jobs too (idempotency-key expiry)
        ids = [job.id.split(":")[:2] for job in queue("notification-orchestration")
               .jobs("waiting")]
        return [parts for parts in ids if parts[1:] == ["reconcile-handoffs"]]

    # When a clock starts, a sweep job is added at once
    stop = threading.Event()
    clock = threading.Thread(target=fire_schedules, args=(stop,))
    clock.start()
    try:
        waiting = wait_for(sweep_jobs, timeout=10, what="the sweep's startup job")
    finally:
        stop.set()
        clock.join()
    assert waiting == [["startup", "reconcile-handoffs"]]
