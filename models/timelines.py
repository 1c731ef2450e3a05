"""Read-only views of the domain for the operator console's search (docs/console.md#search):
rows found by id or by address, and the timeline each row's columns and history keep.

Every query here is an indexed lookup (a primary key, ``provider_message_id``, an
account's ``email`` or ``phone``, a foreign key) and nothing here writes. Timelines are
oldest first; events at the same moment keep the order they happen in.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from datetime import datetime
from typing import Any

from sqlalchemy import ColumnElement
from sqlmodel import Session, col, or_, select

from models.callbacks import CallbackReceipt
from models.notifications import Account, Delivery, Notification, Outcome
from models.payments import Payment, PaymentStatus
from models.store import Order, StoreOrder, StoreOrderStatusEvent, status_events


@dataclasses.dataclass(frozen=True, kw_only=True)
class TimelineEvent:
    """One moment in a row's history: when, what, and its particulars (ids, states)."""

    at: datetime
    event: str
    detail: dict[str, Any] = dataclasses.field(default_factory=dict)


def _in_order(events: Iterable[TimelineEvent]) -> list[TimelineEvent]:
    # a stable sort: events stamped with the same moment keep the order they were built in
    return sorted(events, key=lambda event: event.at)


def _present(**values: Any) -> dict[str, Any]:
    return {name: value for name, value in values.items() if value is not None}


# -- finding rows ---------------------------------------------------------------------------
def deliveries_by_message_id(session: Session, provider_message_id: str, *,
                             limit: int) -> list[Delivery]:
    """Deliveries a provider knows by ``provider_message_id`` (newest first)."""
    return list(session.exec(select(Delivery)
                             .where(col(Delivery.provider_message_id) == provider_message_id)
                             .order_by(col(Delivery.created_at).desc()).limit(limit)))


def accounts_by_address(session: Session, *, emails: Iterable[str] = (),
                        phone: str | None = None, limit: int) -> list[Account]:
    """Accounts whose email is one of ``emails`` or whose phone is ``phone`` (newest
    first); two accounts may share an address."""
    conditions: list[ColumnElement[bool]] = []
    if emails := sorted(set(emails)):
        conditions.append(col(Account.email).in_(emails))
    if phone is not None:
        conditions.append(col(Account.phone) == phone)
    if not conditions:
        return []
    return list(session.exec(select(Account).where(or_(*conditions))
                             .order_by(col(Account.created_at).desc()).limit(limit)))


def recent_notifications(session: Session, account_id: str, *,
                         limit: int) -> list[Notification]:
    """An account's latest notifications, newest first."""
    return list(session.exec(select(Notification)
                             .where(col(Notification.account_id) == account_id)
                             .order_by(col(Notification.created_at).desc()).limit(limit)))


def recent_orders(session: Session, account_id: str, *, limit: int) -> list[Order]:
    """An account's latest orders, newest first."""
    return list(session.exec(select(Order).where(col(Order.account_id) == account_id)
                             .order_by(col(Order.created_at).desc()).limit(limit)))


def deliveries_of(session: Session, notification_id: str) -> list[Delivery]:
    """A notification's deliveries, by channel."""
    return list(session.exec(select(Delivery)
                             .where(col(Delivery.notification_id) == notification_id)
                             .order_by(col(Delivery.channel))))


def receipts_of(session: Session, delivery: Delivery) -> list[CallbackReceipt]:
    """The provider receipts that name the delivery's provider message id, oldest first
    (none before the provider accepted it)."""
    if delivery.provider is None or delivery.provider_message_id is None:
        return []
    return list(session.exec(
        select(CallbackReceipt)
        .where(col(CallbackReceipt.provider) == delivery.provider,
               col(CallbackReceipt.provider_message_id) == delivery.provider_message_id)
        .order_by(col(CallbackReceipt.received_at), col(CallbackReceipt.id))))


def store_order_of(session: Session, order_id: str) -> StoreOrder | None:
    """The issuance row of an order (same id), or None."""
    return session.get(StoreOrder, order_id)


def payments_of_order(session: Session, order_id: str) -> list[Payment]:
    """An order's payments, oldest first (a failed one may be followed by another)."""
    return list(session.exec(select(Payment).where(col(Payment.order_id) == order_id)
                             .order_by(col(Payment.created_at))))


# -- timelines --------------------------------------------------------------------------------
def delivery_timeline(delivery: Delivery, receipts: list[CallbackReceipt]) -> list[TimelineEvent]:
    """What the delivery row and its receipts keep: created, handed to its queue (the last
    handoff), claimed by an attempt (the last claim), its outcome (with provider, message
    id, attempts, reason and last error), each receipt's arrival and its processing."""
    ids = {"delivery_id": delivery.id, "channel": delivery.channel}
    events = [TimelineEvent(at=delivery.created_at, event="created", detail=dict(ids))]
    if delivery.queued_at is not None:
        events.append(TimelineEvent(at=delivery.queued_at, event="handed_off", detail=ids))
    if delivery.claimed_at is not None:
        events.append(TimelineEvent(at=delivery.claimed_at, event="claimed",
                                    detail=ids | {"attempts": delivery.attempts}))
    if delivery.outcome != Outcome.QUEUED.value:
        events.append(TimelineEvent(at=delivery.updated_at, event=delivery.outcome,
                                    detail=ids | _present(
                                        provider=delivery.provider,
                                        provider_message_id=delivery.provider_message_id,
                                        attempts=delivery.attempts, reason=delivery.reason,
                                        last_error=delivery.last_error)))
    for receipt in receipts:
        events.extend(_receipt_events(receipt, ids))
    return _in_order(events)


def _receipt_events(receipt: CallbackReceipt, ids: dict[str, Any]) -> list[TimelineEvent]:
    detail = ids | _present(receipt_id=receipt.id, event_id=receipt.event_id,
                            provider=receipt.provider,
                            provider_message_id=receipt.provider_message_id,
                            status=receipt.status, provider_detail=receipt.detail)
    events = [TimelineEvent(at=receipt.received_at, event="receipt_received", detail=detail)]
    if receipt.processed_at is not None:
        events.append(TimelineEvent(at=receipt.processed_at, event="receipt_processed",
                                    detail=detail | _present(result=receipt.result)))
    return events


def notification_timeline(notification: Notification,
                          deliveries: dict[str, list[TimelineEvent]]) -> list[TimelineEvent]:
    """The notification's creation merged with its deliveries' timelines (delivery id →
    timeline)."""
    created = TimelineEvent(at=notification.created_at, event="created",
                            detail=_present(notification_id=notification.id,
                                            type=notification.type,
                                            occurrence=notification.occurrence,
                                            batch_id=notification.batch_id))
    return _in_order([created, *(event for timeline in deliveries.values()
                                 for event in timeline)])


def payment_timeline(payment: Payment) -> list[TimelineEvent]:
    """A payment's creation, completion and settlement (or failure), as its row stamps
    them."""
    ids = _present(payment_id=payment.id, order_id=payment.order_id,
                   activation_id=payment.activation_id)
    events = [TimelineEvent(at=payment.created_at, event="payment_created",
                            detail=ids | {"amount": str(payment.amount),
                                          "currency": payment.currency,
                                          "gateway": payment.gateway})]
    for stamp, name in ((payment.completed_at, "payment_completed"),
                        (payment.settled_at, "payment_settled")):
        if stamp is not None:
            events.append(TimelineEvent(at=stamp, event=name, detail=ids))
    if payment.status == PaymentStatus.FAILED.value:
        events.append(TimelineEvent(at=payment.updated_at, event="payment_failed", detail=ids))
    return _in_order(events)


def order_timeline(session: Session, order: Order,
                   payments: list[Payment]) -> list[TimelineEvent]:
    """An order's issuance status events (source, from and to state, error code, note)
    merged with its payments' timelines."""
    events = [_status_event(event) for event in status_events(session, order.id)]
    events.extend(event for payment in payments for event in payment_timeline(payment))
    return _in_order(events)


def _status_event(event: StoreOrderStatusEvent) -> TimelineEvent:
    return TimelineEvent(at=event.created_at, event="status",
                         detail={"from_state": event.from_state, "to_state": event.to_state,
                                 "error_code": event.error_code, "source": event.source,
                                 "note": event.note})


def account_timeline(account: Account) -> list[TimelineEvent]:
    """An account's creation (its notifications and orders are results of their own)."""
    return [TimelineEvent(at=account.created_at, event="created",
                          detail={"account_id": account.id})]
