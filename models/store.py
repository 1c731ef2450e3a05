"""The eSIM store: orders, their issuance (store orders) and the issuance's history
(docs/state-machines.md#store-orders).

An ``orders`` row is what the customer bought and paid for (``status``); its
``store_orders`` row (same id) is the eSIM issuance behind it (``issuance_state``). Every
write to ``issuance_state``, ``error_code`` or ``failed_reason`` goes through
:func:`transition_store_order`, which appends a ``store_order_status_events`` row in the
same transaction whenever the state or the error code changes.
"""

from __future__ import annotations

from datetime import datetime
from decimal import Decimal
from enum import StrEnum

from sqlalchemy import Index, Numeric, text
from sqlmodel import Field, SQLModel

from models.base import UtcDateTime, id_field, timestamp_field


class OrderStatus(StrEnum):
    """What the customer sees of an order."""

    PENDING_PAYMENT = "pending_payment"
    PAID = "paid"
    COMPLETED = "completed"
    FAILED = "failed"
    CANCELLED = "cancelled"


class IssuanceState(StrEnum):
    """Where the eSIM issuance behind a paid order stands."""

    #: Not yet asked of the provider (or a transient failure put it back).
    PENDING = "pending"
    #: Stamped and committed before every provider call: the provider may have it.
    IN_FLIGHT = "in_flight"
    ISSUED = "issued"
    FAILED = "failed"
    #: The provider's answer was ambiguous: only a reconcile may move it on.
    RECONCILIATION_REQUIRED = "reconciliation_required"
    #: The provider waits for the customer to verify (``verification_url``).
    PENDING_VERIFICATION = "pending_verification"


#: States a run reconciles through the provider instead of issuing again.
RECONCILE_STATES = frozenset({IssuanceState.IN_FLIGHT, IssuanceState.RECONCILIATION_REQUIRED,
                              IssuanceState.PENDING_VERIFICATION})
#: States no run changes any more.
FINAL_ISSUANCE_STATES = frozenset({IssuanceState.ISSUED, IssuanceState.FAILED})


class Order(SQLModel, table=True):
    """A customer's order: what was bought, for how much, and whether it is done."""

    __tablename__ = "orders"

    id: str = id_field()
    account_id: str = Field(foreign_key="accounts.id", max_length=36, index=True)
    status: str = Field(default=OrderStatus.PENDING_PAYMENT.value, max_length=24)
    amount: Decimal = Field(sa_type=Numeric(18, 4))
    currency: str = Field(max_length=3)
    created_at: datetime = timestamp_field()
    updated_at: datetime = timestamp_field()


class StoreOrder(SQLModel, table=True):
    """The eSIM issuance of one order (same id as the order)."""

    __tablename__ = "store_orders"
    # the recovery scans read only unfinished issuances, oldest first: a partial index
    # keeps them flat however many issued orders accumulate
    __table_args__ = (
        Index("ix_store_orders_unfinished", "updated_at",
              postgresql_where=text("issuance_state IN ('in_flight', "
                                    "'reconciliation_required', 'pending_verification')"),
              sqlite_where=text("issuance_state IN ('in_flight', "
                                "'reconciliation_required', 'pending_verification')")),
    )

    id: str = Field(foreign_key="orders.id", primary_key=True, max_length=36)
    product_id: str = Field(max_length=64)
    #: The eSIM provider plugin that issues it (``mock``, ...).
    provider: str = Field(max_length=32)
    issuance_state: str = Field(default=IssuanceState.PENDING.value, max_length=32)
    #: The provider's own reference, persisted as soon as the provider answers with it.
    provider_order_ref: str | None = Field(default=None, max_length=255, index=True)
    #: Sent to providers that accept one: a provider that saw it answers with the first
    #: order instead of charging again.
    idempotency_key: str = Field(max_length=64)
    error_code: str | None = Field(default=None, max_length=64)
    failed_reason: str | None = Field(default=None, max_length=500)
    verification_url: str | None = Field(default=None, max_length=1000)
    #: When a pending verification is given up on (the verification deadline check).
    verification_deadline: datetime | None = Field(default=None, sa_type=UtcDateTime,
                                                   nullable=True)
    iccid: str | None = Field(default=None, max_length=32)
    activation_code: str | None = Field(default=None, max_length=255)
    smdp_address: str | None = Field(default=None, max_length=255)
    #: When the last in_flight stamp was committed (the stalled order scan's age).
    in_flight_at: datetime | None = Field(default=None, sa_type=UtcDateTime, nullable=True)
    #: When the provider's last status webhook for it arrived.
    webhook_at: datetime | None = Field(default=None, sa_type=UtcDateTime, nullable=True)
    #: When a recovery scan last re-drove it (so the next scan waits a window).
    recovered_at: datetime | None = Field(default=None, sa_type=UtcDateTime, nullable=True)
    created_at: datetime = timestamp_field()
    updated_at: datetime = timestamp_field()


class StoreOrderStatusEvent(SQLModel, table=True):
    """One change of a store order's state or error code, and which run made it."""

    __tablename__ = "store_order_status_events"

    id: str = id_field()
    store_order_id: str = Field(foreign_key="store_orders.id", max_length=36, index=True)
    from_state: str | None = Field(default=None, max_length=32)
    to_state: str = Field(max_length=32)
    error_code: str | None = Field(default=None, max_length=64)
    #: Who made the change: ``system`` (herald's runs) or ``api``.
    source: str = Field(max_length=32)
    #: What happened and which run did it, e.g. ``reconcile (provider webhook)``.
    note: str = Field(max_length=255)
    created_at: datetime = timestamp_field()
