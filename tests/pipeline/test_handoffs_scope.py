"""A scoped handoff sweep (what ``herald demo`` runs) on PostgreSQL: it reads, stamps and
re-drives the rows of its own accounts and batches only."""

from __future__ import annotations

import uuid
from datetime import timedelta
from typing import Any

from actors.handoffs import Scope, reconcile_handoffs
from herald.db import session as db_session
from herald.queue import queue
from models.base import utcnow
from models.batches import Batch
from models.callbacks import CallbackReceipt
from models.notifications import Account, Delivery, Notification

#: Older than the sweep's handoff age: every row below is overdue.
LONG_AGO = timedelta(hours=1)


def _rows_of_one_account() -> dict[str, Any]:
    """An account with a delivery whose job was lost, a sent delivery with an unprocessed
    receipt about it, and an overdue scheduled batch (all persisted long ago)."""
    then = utcnow() - LONG_AGO
    account = Account(email=f"{uuid.uuid4().hex[:8]}@example.com")
    notification = Notification(account_id=account.id, type="account.welcome",
                                occurrence=uuid.uuid4().hex, created_at=then)
    lost = Delivery(notification_id=notification.id, channel="email", created_at=then)
    sent = Delivery(notification_id=notification.id, channel="sms", outcome="sent",
                    provider="mock", provider_message_id=f"mock-{uuid.uuid4().hex}",
                    created_at=then)
    receipt = CallbackReceipt(provider="mock", event_id=uuid.uuid4().hex, channel="sms",
                              provider_message_id=sent.provider_message_id,
                              status="delivered", received_at=then)
    batch = Batch(type="promo.offer", account_ids=[account.id], created_at=then)
    with db_session() as session:
        for row in (account, notification, lost, sent, receipt, batch):
            session.add(row)
            session.flush()
    return {"account": account.id, "lost": lost.id, "receipt": receipt,
            "batch": batch.id}


def _handed_off(rows: dict[str, Any]) -> dict[str, bool]:
    """Which of the rows have their job back in Redis and a handoff stamp."""
    orchestration = queue("notification-orchestration")
    with db_session() as session:
        delivery = session.get(Delivery, rows["lost"])
        receipt = session.get(CallbackReceipt, rows["receipt"].id)
        return {
            "delivery": (queue("notification-email").get(rows["lost"]) is not None
                         and delivery.queued_at is not None),
            "receipt": (orchestration.get(f"notification-callback-{receipt.event_id}")
                        is not None and receipt.queued_at is not None),
            "batch": orchestration.get(f"notification-batch-{rows['batch']}") is not None,
        }


def test_a_scoped_sweep_touches_only_the_rows_of_its_accounts_and_batches(
        pipeline: None) -> None:
    # Given stuck rows of two accounts: ours (a demo's) and someone else's
    ours, theirs = _rows_of_one_account(), _rows_of_one_account()

    # When a sweep scoped to our account and batch runs
    report = reconcile_handoffs(scope=Scope.of([ours["account"]], [ours["batch"]]))

    # Then our delivery, receipt and batch are handed off again, and nothing of theirs
    # is read, stamped or re-added
    assert (report.deliveries, report.receipts, report.batches) == (1, 1, 1)
    assert _handed_off(ours) == {"delivery": True, "receipt": True, "batch": True}
    assert _handed_off(theirs) == {"delivery": False, "receipt": False, "batch": False}

    # And the unscoped sweep (the clock's) still repairs theirs (our fresh stamps keep
    # ours out; batches carry no stamp, so ours is re-added under its job id: a no-op)
    report = reconcile_handoffs()
    assert (report.deliveries, report.receipts, report.batches) == (1, 1, 2)
    assert _handed_off(theirs) == {"delivery": True, "receipt": True, "batch": True}
