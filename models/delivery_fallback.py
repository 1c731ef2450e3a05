"""The delivery-report fallback's writes on a delivery (docs/pipeline.md#delivery-report-fallback).

A fallback is taken by one conditional UPDATE that names its provider
(``fallback_provider``) while the delivery is still ``sent`` by the provider that accepted
it and no fallback was taken: whoever writes it, and only they, sends the second message,
so two workers, a retried job or a restarted one never send it twice. What the send did
is written afterwards under the same condition's result (``fallback_provider`` is ours).
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import Connection, and_, or_, select, update
from sqlmodel import Session

from models.base import table_of, utcnow
from models.callbacks import CallbackReceipt
from models.notifications import Account, Delivery, Notification, Outcome

_deliveries = table_of(Delivery)
_notifications, _accounts = table_of(Notification), table_of(Account)
_receipts = table_of(CallbackReceipt)

#: What the fallback's check reads of a delivery, its notification and its account.
_READ = (select(_deliveries.c.outcome, _deliveries.c.channel, _deliveries.c.provider,
                _deliveries.c.fallback_provider, _deliveries.c.attempts_log,
                _notifications.c.type, _notifications.c.data, _notifications.c.urgency,
                _accounts.c.phone, _accounts.c.locale)
         .join_from(_deliveries, _notifications,
                    _notifications.c.id == _deliveries.c.notification_id)
         .join(_accounts, _accounts.c.id == _notifications.c.account_id))


def read_for_fallback(db: Connection, delivery_id: str) -> dict[str, Any] | None:
    """The delivery's outcome, channel, provider, fallback provider and attempts log, its
    notification's type, data and urgency, its account's phone and locale (None: no such
    delivery)."""
    row = db.execute(_READ.where(_deliveries.c.id == delivery_id)).mappings().first()
    return dict(row) if row is not None else None


def take_fallback(db: Connection, delivery_id: str, *, accepted_by: str, provider: str,
                  attempts_log: list[dict[str, Any]]) -> bool:
    """Take the delivery's fallback for ``provider``, recording ``attempts_log`` (the
    intended send logged), in one conditional UPDATE; commits. True only when the
    delivery is still ``sent`` by ``accepted_by`` and no fallback was taken before: the
    caller may then send, once; False means another took it, or a receipt settled it."""
    written = db.execute(
        update(_deliveries)
        .where(_deliveries.c.id == delivery_id, _deliveries.c.outcome == Outcome.SENT.value,
               _deliveries.c.provider == accepted_by,
               _deliveries.c.fallback_provider.is_(None))
        .values(fallback_provider=provider, attempts_log=attempts_log,
                updated_at=utcnow())).rowcount == 1
    db.commit()
    return written


def record_fallback(db: Connection, delivery_id: str, *, provider: str,
                    message_id: str | None, attempts_log: list[dict[str, Any]]) -> bool:
    """Record what the fallback's send did: its message id (when accepted) and the
    attempts log, only on the delivery whose fallback ``provider`` took; commits. Whatever
    the outcome is by then (a receipt may have moved it), it is left alone."""
    values: dict[str, Any] = {"attempts_log": attempts_log, "updated_at": utcnow()}
    if message_id is not None:
        values["fallback_message_id"] = message_id
    written = db.execute(
        update(_deliveries)
        .where(_deliveries.c.id == delivery_id, _deliveries.c.fallback_provider == provider)
        .values(values)).rowcount == 1
    db.commit()
    return written


def sent_as(provider: str, message_id: str) -> Any:
    """SQL: the delivery's first message, or its fallback's, is ``provider``'s
    ``message_id`` (what a receipt correlates by)."""
    return or_(and_(_deliveries.c.provider == provider,
                    _deliveries.c.provider_message_id == message_id),
               and_(_deliveries.c.fallback_provider == provider,
                    _deliveries.c.fallback_message_id == message_id))


def other_message_failed(session: Session, delivery_id: str, receipt: CallbackReceipt
                         ) -> bool:
    """For a failure receipt of a delivery: True when the delivery had no fallback (its
    one message failed), when the fallback sent no message, or when its other message
    has a failure receipt stored too.

    Locks the delivery's row first, so that of two failure receipts applied at once the
    second sees the first: both messages failed is never missed.
    """
    row = session.execute(
        select(_deliveries.c.provider, _deliveries.c.provider_message_id,
               _deliveries.c.fallback_provider, _deliveries.c.fallback_message_id)
        .where(_deliveries.c.id == delivery_id).with_for_update()).mappings().first()
    if row is None or row["fallback_provider"] is None:
        return True
    if (row["provider"], row["provider_message_id"]) == (receipt.provider,
                                                         receipt.provider_message_id):
        other = (row["fallback_provider"], row["fallback_message_id"])
    else:
        other = (row["provider"], row["provider_message_id"])
    if other[1] is None:  # the fallback's send was refused (or never finished): no message
        return True
    found = session.execute(
        select(_receipts.c.id).where(
            _receipts.c.provider == other[0], _receipts.c.provider_message_id == other[1],
            _receipts.c.status == Outcome.FAILED_TERMINAL.value).limit(1)).first()
    return found is not None
