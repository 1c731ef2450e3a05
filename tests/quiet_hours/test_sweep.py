"""The handoff sweep and held deliveries (docs/sweeps.md#deliveries): held ones have a cap of
their own and come back delayed, so they never crowd out a lost delivery."""

from __future__ import annotations

from datetime import timedelta

from actors.handoffs import reconcile_handoffs
from herald.db import session as db_session
from herald.queue import queue
from models.base import utcnow
from models.notifications import Account, Delivery, Notification
from tests.quiet_hours.conftest import queue_now


def persisted(count: int, *, held_for: timedelta | None, age: timedelta) -> list[str]:
    """``count`` unstamped queued email deliveries created ``age`` ago (their jobs lost),
    held for ``held_for`` from now when given; their ids."""
    now = utcnow()
    ids = []
    with db_session() as session:
        account = Account(email="held@example.com")
        session.add(account)
        session.flush()
        for n in range(count):
            notification = Notification(account_id=account.id, type="account.welcome",
                                        occurrence=f"held-{held_for}-{n}")
            session.add(notification)
            session.flush()
            delivery = Delivery(notification_id=notification.id, channel="email",
                                created_at=now - age + timedelta(milliseconds=n),
                                not_before=None if held_for is None else now + held_for)
            session.add(delivery)
            ids.append(delivery.id)
    return ids


def test_a_nights_held_deliveries_never_crowd_a_lost_one_out_of_a_run(pipeline: None) -> None:
    # Given 200 held deliveries whose jobs were lost, all older than one lost delivery
    # that nothing holds
    held = persisted(200, held_for=timedelta(hours=8), age=timedelta(hours=2))
    [lost] = persisted(1, held_for=None, age=timedelta(hours=1))
    # When the sweep runs once
    report = reconcile_handoffs()
    # Then the lost delivery's job is back, waiting to run now
    assert report.deliveries == 201
    assert queue("notification-email").get(lost).state == "waiting"
    # and every held one's job is back, delayed to its hold's end
    for delivery_id in held[:: 40]:
        job = queue("notification-email").get(delivery_id)
        assert job is not None and job.state == "delayed"
        assert job.run_at is not None and job.run_at > queue_now() + timedelta(hours=7)
