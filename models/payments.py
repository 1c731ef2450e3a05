"""Payments: one row per payment for a store order or an operator activation
(docs/state-machines.md#payments).

``pending`` (created) → ``completed`` (the gateway says the money moved) → ``settled``
(herald handed the order or activation on). Settlement may be replayed after it
completed, so a failed downstream handoff can recover.

Every write to a payment's status goes through :func:`transition_payment`, guarded by
the status it expects; :func:`pay_order` is the order's half of a settlement.
"""

from __future__ import annotations

from datetime import datetime
from decimal import Decimal
from enum import StrEnum
from typing import Any

from sqlalchemy import Numeric, update
from sqlmodel import Field, Session, SQLModel, col

from models.base import UtcDateTime, id_field, money, timestamp_field, utcnow
from models.store import Order, OrderStatus
from models.webhooks import write_event_messages


class PaymentStatus(StrEnum):
    """Where a payment stands."""

    PENDING = "pending"
    COMPLETED = "completed"
    SETTLED = "settled"
    FAILED = "failed"


class Payment(SQLModel, table=True):
    """One payment, for exactly one of an order or an activation."""

    __tablename__ = "payments"

    id: str = id_field()
    order_id: str | None = Field(default=None, foreign_key="orders.id", max_length=36,
                                 index=True)
    activation_id: str | None = Field(default=None, foreign_key="activations.id",
                                      max_length=36, index=True)
    amount: Decimal = Field(sa_type=Numeric(18, 4))
    currency: str = Field(max_length=3)
    gateway: str = Field(default="mock", max_length=32)
    status: str = Field(default=PaymentStatus.PENDING.value, max_length=16)
    completed_at: datetime | None = Field(default=None, sa_type=UtcDateTime, nullable=True)
    settled_at: datetime | None = Field(default=None, sa_type=UtcDateTime, nullable=True)
    created_at: datetime = timestamp_field()
    updated_at: datetime = timestamp_field()


#: The timestamp column each status stamps when a payment enters it.
_STAMPS = {PaymentStatus.COMPLETED: "completed_at", PaymentStatus.SETTLED: "settled_at"}
#: The webhook event of each status a payment enters that has one (docs/api.md#webhooks).
PAYMENT_EVENTS = {PaymentStatus.SETTLED: "payment.settled"}


def _stamp(moment: datetime | None) -> str | None:
    return moment.isoformat() if moment else None


def payment_view(payment: Payment) -> dict[str, Any]:
    """A payment as JSON (``GET /v1/payments/{id}``)."""
    return {"id": payment.id, "status": payment.status, "order_id": payment.order_id,
            "activation_id": payment.activation_id, "amount": money(payment.amount),
            "currency": payment.currency, "gateway": payment.gateway,
            "created_at": payment.created_at.isoformat(),
            "completed_at": _stamp(payment.completed_at),
            "settled_at": _stamp(payment.settled_at),
            "updated_at": payment.updated_at.isoformat()}


# -- the payment's transition helper ----------------------------------------------------------
def transition_payment(session: Session, payment_id: str, expect: PaymentStatus,
                       to: PaymentStatus, *, now: datetime | None = None) -> bool:
    """Move a payment from ``expect`` to ``to`` (stamping ``completed_at`` or
    ``settled_at``) in the caller's transaction. One conditional UPDATE decides: False,
    with nothing written, when the payment is not in ``expect`` (or does not exist), so
    two completions or two settlements race to one winner. Entering ``settled`` writes
    its webhook messages (:data:`PAYMENT_EVENTS`) in that transaction, handed to the
    relay after it commits."""
    now = now or utcnow()
    values: dict[str, object] = {"status": to.value, "updated_at": now}
    if to in _STAMPS:
        values[_STAMPS[to]] = now
    result = session.exec(update(Payment)
                          .where(col(Payment.id) == payment_id,
                                 col(Payment.status) == expect.value)
                          .values(**values))
    if result.rowcount != 1:
        return False
    event = PAYMENT_EVENTS.get(to)
    if event is not None:
        write_event_messages(session, event, lambda: _view(session, payment_id))
    return True


def _view(session: Session, payment_id: str) -> dict[str, Any]:
    payment = session.get(Payment, payment_id, populate_existing=True)
    assert payment is not None  # its row was just updated
    return payment_view(payment)


def pay_order(session: Session, order_id: str, *, now: datetime | None = None) -> bool:
    """Move a store order ``pending_payment → paid`` in the caller's transaction (a
    settlement's other half). False, nothing written, when the order is not waiting for
    its payment (or does not exist)."""
    now = now or utcnow()
    result = session.exec(update(Order)
                          .where(col(Order.id) == order_id,
                                 col(Order.status) == OrderStatus.PENDING_PAYMENT.value)
                          .values(status=OrderStatus.PAID.value, updated_at=now))
    return result.rowcount == 1
