"""Payments: one row per payment for a store order or an operator activation
(docs/state-machines.md#payments).

``pending`` (created) → ``completed`` (the gateway says the money moved) → ``settled``
(herald handed the order or activation on). Settlement may be replayed after it
completed, so a failed downstream handoff can recover.
"""

from __future__ import annotations

from datetime import datetime
from decimal import Decimal
from enum import StrEnum

from sqlalchemy import Numeric
from sqlmodel import Field, SQLModel

from models.base import UtcDateTime, id_field, timestamp_field


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
