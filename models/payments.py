"""Payments: one row per payment for a store order or an operator activation
(docs/state-machines.md#payments).

``pending`` (created) → ``completed`` (the gateway says the money moved) → ``settled``
(herald handed the order or activation on). Settlement may be replayed after it
completed, so a failed downstream handoff can recover.

Every write to a payment's status is guarded by the status it expects: through
:func:`transition_payment` (:func:`pay_order` the order's half of a settlement) in an
ORM session, or on PostgreSQL as one statement that also reads what the caller needs
(:func:`complete_in_one`, :func:`settle_in_one`, :func:`insert_order_payment`): the
payment lane's hot path, run as :class:`herald.db.Prepared` statements.
"""

from __future__ import annotations

from datetime import datetime
from decimal import Decimal
from enum import StrEnum
from typing import Any

from sqlalchemy import (
    CTE,
    ColumnElement,
    Connection,
    Index,
    Numeric,
    bindparam,
    cast,
    exists,
    func,
    or_,
    select,
    text,
    update,
)
from sqlalchemy.dialects.postgresql import insert as upsert
from sqlmodel import Field, Session, SQLModel, col

from herald.db import Prepared
from models.activations import Activation
from models.base import (
    UtcDateTime,
    id_field,
    money,
    snapshot,
    table_of,
    table_reader,
    timestamp_field,
    utcnow,
)
from models.store import Order, OrderStatus
from models.webhooks import write_event_messages


class PaymentStatus(StrEnum):
    """Where a payment stands."""

    PENDING = "pending"
    COMPLETED = "completed"
    SETTLED = "settled"
    FAILED = "failed"


#: Payment statuses that block a second payment for the same order or activation.
LIVE_STATUSES = (PaymentStatus.PENDING.value, PaymentStatus.COMPLETED.value,
                 PaymentStatus.SETTLED.value)
_LIVE = "status IN ({})".format(", ".join(f"'{status}'" for status in LIVE_STATUSES))


class Payment(SQLModel, table=True):
    """One payment, for exactly one of an order or an activation."""

    __tablename__ = "payments"
    # an order's one live payment, kept by the database: the creation's one statement
    # inserts ON CONFLICT DO NOTHING against it (insert_order_payment)
    __table_args__ = (Index("uq_payments_live_order", "order_id", unique=True,
                            postgresql_where=text(_LIVE), sqlite_where=text(_LIVE)),)

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


# -- the hot path: one statement per step (PostgreSQL) ----------------------------------------
# Each statement is built once and run as a Prepared statement: SQLAlchemy's ORM cost more
# CPU per statement than PostgreSQL spent running it (bench/README.md, "Orders end to end").
_payments, _orders, _activations = table_of(Payment), table_of(Order), table_of(Activation)
_ID = bindparam("payment_id", type_=_payments.c.id.type)
_NOW = bindparam("now", type_=UtcDateTime)


def _after(changed: CTE) -> list[ColumnElement[Any]]:
    """The payment's columns as they stand once the statement ran: those the UPDATE
    ``changed`` set, from its RETURNING (the statement's own read of ``payments`` sees
    the row as it was before), the others as read."""
    return [func.coalesce(changed.c[column.key], column).label(column.key)
            if column.key in changed.c else column for column in _payments.c]


def _changed(changed: CTE) -> ColumnElement[bool]:
    return changed.c.id.is_not(None).label("changed")


def _transition(expect: PaymentStatus, to: PaymentStatus,
                *also: ColumnElement[bool]) -> Any:
    """The guarded UPDATE ``expect → to`` of payment ``:payment_id`` (stamping its
    timestamp), returning the columns it set."""
    stamp = _STAMPS[to]
    return (update(_payments)
            .where(_payments.c.id == _ID, _payments.c.status == expect.value, *also)
            .values({"status": to.value, stamp: _NOW, "updated_at": _NOW})
            .returning(_payments.c.id, _payments.c.status, _payments.c[stamp],
                       _payments.c.updated_at))


_completed = _transition(PaymentStatus.PENDING, PaymentStatus.COMPLETED).cte("completed")
#: ``pending → completed``, and the payment as it stands after, with the account that
#: pays (the order's or the activation's): what the settlement job carries.
_COMPLETE = Prepared(
    select(*_after(_completed), _changed(_completed),
           func.coalesce(_orders.c.account_id, _activations.c.account_id).label("account_id"))
    .select_from(_payments.outerjoin(_completed, _completed.c.id == _payments.c.id)
                 .outerjoin(_orders, _orders.c.id == _payments.c.order_id)
                 .outerjoin(_activations, _activations.c.id == _payments.c.activation_id))
    .where(_payments.c.id == _ID))

_paying = _payments.alias("paying")
#: The order's half: ``pending_payment → paid``, only for a payment still ``completed``.
_paid = (update(_orders)
         .where(_orders.c.id == _paying.c.order_id, _paying.c.id == _ID,
                _paying.c.status == PaymentStatus.COMPLETED.value,
                _orders.c.status == OrderStatus.PENDING_PAYMENT.value)
         .values(status=OrderStatus.PAID.value, updated_at=_NOW)
         .returning(_orders.c.id).cte("paid"))
#: The payment's half: ``completed → settled``, only with its order's move (if any).
_settled = _transition(PaymentStatus.COMPLETED, PaymentStatus.SETTLED,
                       or_(_payments.c.order_id.is_(None),
                           exists(select(_paid.c.id)))).cte("settled")
#: Both halves, and the payment as it stands after, with its order's status as it was.
_SETTLE = Prepared(
    select(*_after(_settled), _changed(_settled),
           _orders.c.status.label("order_status"))
    .select_from(_payments.outerjoin(_settled, _settled.c.id == _payments.c.id)
                 .outerjoin(_orders, _orders.c.id == _payments.c.order_id))
    .where(_payments.c.id == _ID))

_ORDER_ID = bindparam("order_id", type_=_orders.c.id.type)
_LIVE_OF_ORDER = (select(_payments.c.id)
                  .where(_payments.c.order_id == _ORDER_ID,
                         or_(*(_payments.c.status == status for status in LIVE_STATUSES)))
                  .limit(1))
_LIVE_PAYMENT = Prepared(_LIVE_OF_ORDER)
#: The order a payment is created for, its row locked until the statement commits.
_locked = (select(_orders.c.status, _orders.c.amount, _orders.c.currency)
           .where(_orders.c.id == _ORDER_ID).with_for_update().cte("locked"))
_values = {column.key: cast(bindparam(column.key, type_=column.type), column.type)
           for column in _payments.c if column.key != "order_id"}
#: The payment, if its order is payable at its price, unless the order has a live one:
#: the partial unique index decides, so a payment another transaction committed while
#: this one waited for the lock counts too.
_inserted = (upsert(_payments).from_select(
    list(_payments.c),
    select(*(_ORDER_ID if column.key == "order_id" else _values[column.key]
             for column in _payments.c))
    .where(_locked.c.status == OrderStatus.PENDING_PAYMENT.value,
           _locked.c.amount == _values["amount"], _locked.c.currency == _values["currency"]))
    .on_conflict_do_nothing(index_elements=[_payments.c.order_id], index_where=text(_LIVE))
    .returning(_payments.c.id).cte("inserted"))
#: The creation in one statement: the order as locked, whether the payment went in, and
#: the live payment the statement's snapshot saw.
_CREATE_FOR_ORDER = Prepared(
    select(_locked.c.status, _locked.c.amount, _locked.c.currency,
           select(_inserted.c.id).scalar_subquery().label("inserted"),
           _LIVE_OF_ORDER.scalar_subquery().label("live")))
_READ = Prepared(select(*_payments.c).where(_payments.c.id == _ID))


def _payment(row: dict[str, Any]) -> Payment:
    """A detached payment holding a row's payment columns."""
    return snapshot(Payment, **{column.key: row[column.key] for column in _payments.c})


def complete_in_one(connection: Connection, payment_id: str, *,
                    now: datetime | None = None) -> tuple[Payment, bool, str | None] | None:
    """``pending → completed`` in one statement on ``connection`` (PostgreSQL; atomic by
    itself on an autocommit connection). Returns the payment as it stands after, whether
    this statement moved it, and the paying account's id; None when no such payment.

    A payment still ``pending`` and not moved here lost a race with another completion
    that committed while this statement ran: the caller reads it again."""
    row = _COMPLETE.run(connection, {"payment_id": payment_id,
                                     "now": now or utcnow()}).first()
    if row is None:
        return None
    return _payment(row), bool(row["changed"]), row["account_id"]


def settle_in_one(connection: Connection, payment_id: str, *,
                  now: datetime | None = None) -> tuple[Payment, bool, str | None] | None:
    """Payment ``completed → settled`` and its order ``pending_payment → paid`` in one
    statement on ``connection`` (PostgreSQL; one transaction on an autocommit
    connection): both or neither. Returns the payment as it stands after, whether this
    statement settled it, and its order's status as it was; None when no such payment.

    Writes no webhook message: when an endpoint subscribes to ``payment.settled``, run
    it in a session's transaction and write them there (:func:`settled_messages`). A
    payment still ``completed`` and not settled here whose order was ``pending_payment``
    lost a race with another settlement: the caller reads it again."""
    row = _SETTLE.run(connection, {"payment_id": payment_id, "now": now or utcnow()}).first()
    if row is None:
        return None
    return _payment(row), bool(row["changed"]), row["order_status"]


def settled_messages(session: Session, payment: Payment) -> None:
    """Write ``payment``'s ``payment.settled`` messages (:data:`PAYMENT_EVENTS`) in
    ``session``'s transaction, the one that settled it."""
    write_event_messages(session, PAYMENT_EVENTS[PaymentStatus.SETTLED],
                         lambda: payment_view(payment))


def read_payment(connection: Connection, payment_id: str) -> Payment | None:
    """One payment, read in one prepared statement, or None."""
    row = _READ.run(connection, {"payment_id": payment_id}).first()
    return None if row is None else _payment(row)


def insert_order_payment(connection: Connection, payment: Payment) -> tuple[str, str | None]:
    """Insert ``payment`` (for an order) in one statement on ``connection`` (PostgreSQL;
    atomic by itself on an autocommit connection) unless its order refuses it: the
    order's row is locked, then the payment is inserted if the order is
    ``pending_payment`` at the payment's price, unless the order has a live payment (the
    partial unique index ``uq_payments_live_order``: two creations race to one payment).
    Returns what was found: ``("inserted", None)``, ``("missing", None)``, ``("status",
    <the order's status>)``, ``("price", "<amount> <currency>")`` or ``("live", <the live
    payment's id>)``."""
    assert payment.order_id is not None
    values = dict(zip(_COLUMN_KEYS, table_reader(_payments)(payment), strict=True))
    row = _CREATE_FOR_ORDER.run(connection, values).first()
    if row is None:
        return "missing", None
    if row["inserted"] is not None:
        return "inserted", None
    if row["status"] != OrderStatus.PENDING_PAYMENT:
        return "status", row["status"]
    if (payment.amount, payment.currency) != (row["amount"], row["currency"]):
        return "price", f"{money(row['amount'])} {row['currency']}"
    live = row["live"]
    if live is None:  # committed while this statement waited: a fresh read sees it
        found = _LIVE_PAYMENT.run(connection, {"order_id": payment.order_id}).first()
        live = found["id"] if found else None
    return "live", live


_COLUMN_KEYS = tuple(column.key for column in _payments.c)
