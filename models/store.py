"""The eSIM store: orders, their issuance (store orders) and the issuance's history
(docs/state-machines.md#store-orders).

An ``orders`` row is what the customer bought and paid for (``status``); its
``store_orders`` row (same id) is the eSIM issuance behind it (``issuance_state``). Every
write to ``issuance_state``, ``error_code`` or ``failed_reason`` goes through
:func:`transition_store_order`, which appends a ``store_order_status_events`` row in the
same transaction whenever the state or the error code changes.
"""

from __future__ import annotations

from collections.abc import Collection
from datetime import datetime
from decimal import Decimal
from enum import StrEnum
from typing import Any

from sqlalchemy import ColumnElement, Index, Numeric, Row, insert, select, text, update
from sqlmodel import Field, Session, SQLModel, col
from sqlmodel import select as sqlmodel_select

from models.base import (
    UtcDateTime,
    id_field,
    money,
    new_id,
    table_of,
    timestamp_field,
    utcnow,
)
from models.webhooks import write_event_messages


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


#: The issuances the recovery scans read (unfinished ones, and issued ones whose eSIM
#: notification was never triggered): a partial index over them keeps the scans flat
#: however many issued orders accumulate.
UNFINISHED_ISSUANCE = ("issuance_state IN ('pending', 'in_flight', 'reconciliation_required', "
                       "'pending_verification') "
                       "OR (issuance_state = 'issued' AND announced_at IS NULL)")


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
    __table_args__ = (
        Index("ix_store_orders_unfinished", "updated_at",
              postgresql_where=text(UNFINISHED_ISSUANCE),
              sqlite_where=text(UNFINISHED_ISSUANCE)),
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
    #: When the issued profile's ``esim.ready`` notification was triggered (None until it
    #: was: the recovery scans re-drive an issued order that has none).
    announced_at: datetime | None = Field(default=None, sa_type=UtcDateTime, nullable=True)
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


class EventSource(StrEnum):
    """Who made a status change (``store_order_status_events.source``)."""

    #: herald's own runs: the issuance job and store recovery.
    SYSTEM = "system"
    #: A request to the HTTP API (placing the order).
    API = "api"


class _Keep:
    """The type of :data:`KEEP`."""

    def __repr__(self) -> str:
        return "KEEP"


#: Leave the column as it is (the default of ``error_code`` / ``failed_reason``).
KEEP: Any = _Keep()

_store = table_of(StoreOrder)
_orders = table_of(Order)
_events = table_of(StoreOrderStatusEvent)

#: The webhook event of each issuance state a transition enters that has one
#: (docs/api.md#webhooks).
ISSUANCE_EVENTS = {IssuanceState.ISSUED: "order.issued", IssuanceState.FAILED: "order.failed",
                   IssuanceState.PENDING_VERIFICATION: "order.verification_required"}
#: What a final issuance does to its order, and the order status it may do it from.
ORDER_OUTCOMES = {IssuanceState.ISSUED: OrderStatus.COMPLETED,
                  IssuanceState.FAILED: OrderStatus.FAILED}
_ORDER_SETTLES_FROM = OrderStatus.PAID.value
#: Columns only :func:`transition_store_order` writes, through its own arguments.
_GUARDED = frozenset({"issuance_state", "error_code", "failed_reason"})
_FREE = frozenset(c.key for c in _store.columns) - _GUARDED - {"id", "created_at", "updated_at"}
#: Reads of a row that another writer changed before this one's UPDATE (SQLite only: on
#: PostgreSQL the read holds the row lock, so the first try decides).
_TRIES = 5


def _read_issuance(session: Session, order_id: str) -> Row[Any] | None:
    """The order's issuance state and error code, its row locked until the transaction
    ends on PostgreSQL (FOR UPDATE; SQLAlchemy leaves the clause out on SQLite)."""
    return session.execute(select(_store.c.issuance_state, _store.c.error_code)
                           .where(_store.c.id == order_id).with_for_update()).first()


def transition_store_order(session: Session, order_id: str, *, to: IssuanceState,
                           expect: Collection[IssuanceState], source: EventSource | str,
                           note: str, error_code: str | None = KEEP,
                           failed_reason: str | None = KEEP,
                           guard: ColumnElement[bool] | None = None,
                           now: datetime | None = None, **columns: Any) -> bool:
    """Move a store order's issuance to ``to`` — the one write of ``issuance_state``,
    ``error_code`` and ``failed_reason`` (docs/state-machines.md#store-orders). Commits;
    returns whether the write applied (False: nothing changed).

    It applies only while the state is one of ``expect`` and ``guard`` (any further
    condition the write needs, over the ``store_orders`` columns) holds, checked by the
    conditional UPDATE itself. ``columns`` are other ``store_orders`` columns written with
    it (a profile, ``in_flight_at``, ...); ``error_code``/``failed_reason`` left at
    :data:`KEEP` keep their value. When the state or the error code changes, a
    ``store_order_status_events`` row (from, to, error code, ``source``, ``note``) is
    added in the same transaction. Moving to ``issued`` (``failed``) also moves the paid
    order to ``completed`` (``failed``) in that transaction. Entering ``issued``,
    ``failed`` or ``pending_verification`` writes its webhook messages
    (:data:`ISSUANCE_EVENTS`) in that transaction too, handed to the relay after it
    commits.

    Locking: the store-order row is locked before the order row. On PostgreSQL the read
    of the current state takes the store-order row (``SELECT … FOR UPDATE``) and the
    order's UPDATE then takes the order row. SQLite has no row locks: its first write
    takes the database's one write lock, which serialises the whole write transaction
    against every other writer; the UPDATE is then a compare-and-set on the state and
    error code it read, re-read when another writer got in between.
    """
    unknown = set(columns) - _FREE
    if unknown:
        raise ValueError(f"transition_store_order cannot write {', '.join(sorted(unknown))}")
    allowed = {IssuanceState(state).value for state in expect}
    now = now or utcnow()
    values = {**columns, "issuance_state": IssuanceState(to).value, "updated_at": now}
    if error_code is not KEEP:
        values["error_code"] = error_code
    if failed_reason is not KEEP:
        values["failed_reason"] = None if failed_reason is None else failed_reason[:500]
    seen = _read_issuance(session, order_id)
    for _ in range(_TRIES):
        if seen is None or seen.issuance_state not in allowed:
            break
        condition = [_store.c.id == order_id, _store.c.issuance_state == seen.issuance_state,
                     _store.c.error_code.is_not_distinct_from(seen.error_code)]
        if guard is not None:
            condition.append(guard)
        if session.exec(update(_store).where(*condition).values(values)).rowcount == 1:
            _after_transition(session, order_id, seen, values, source, note, now)
            session.commit()
            return True
        again = _read_issuance(session, order_id)
        if again is not None and tuple(again) == tuple(seen):
            break  # the guard, not a concurrent writer, refused it
        seen = again
    session.rollback()
    return False


def _after_transition(session: Session, order_id: str, seen: Row[Any],
                      values: dict[str, Any], source: EventSource | str, note: str,
                      now: datetime) -> None:
    """The status event of an applied transition and its order's move, in its transaction."""
    to = values["issuance_state"]
    error_code = values.get("error_code", seen.error_code)
    if to != seen.issuance_state or error_code != seen.error_code:
        _insert_event(session, order_id, from_state=seen.issuance_state, to_state=to,
                      error_code=error_code, source=source, note=note, now=now)
    outcome = ORDER_OUTCOMES.get(IssuanceState(to))
    if outcome is not None:
        # the store-order row is held already: the order row is always taken second
        session.execute(update(_orders)
                        .where(_orders.c.id == order_id,
                               _orders.c.status == _ORDER_SETTLES_FROM)
                        .values(status=outcome.value, updated_at=now))
    event = ISSUANCE_EVENTS.get(IssuanceState(to))
    if event is not None and to != seen.issuance_state:
        write_event_messages(session, event, lambda: _view(session, order_id))


def _view(session: Session, order_id: str) -> dict[str, Any]:
    view = read_order_view(session, order_id)
    assert view is not None  # its row was just updated
    return view


def _insert_event(session: Session, order_id: str, *, from_state: str | None, to_state: str,
                  error_code: str | None, source: EventSource | str, note: str,
                  now: datetime) -> None:
    session.execute(insert(_events).values(
        id=new_id(), store_order_id=order_id, from_state=from_state, to_state=to_state,
        error_code=error_code, source=str(source), note=note[:255], created_at=now))


def record_provider_reference(session: Session, order_id: str, reference: str) -> bool:
    """Persist the provider's reference of an order being issued (``in_flight``) as soon
    as it is known; commits. False when the order is not in flight any more."""
    result = session.exec(
        update(_store)
        .where(_store.c.id == order_id,
               _store.c.issuance_state == IssuanceState.IN_FLIGHT.value)
        .values(provider_order_ref=reference[:255], updated_at=utcnow()))
    session.commit()
    return result.rowcount == 1


def stamp_webhook(session: Session, order_id: str, *, now: datetime | None = None) -> None:
    """Record that the provider's status webhook for the order arrived (``webhook_at``);
    commits. The issuance state is left to the reconcile the webhook asks for."""
    now = now or utcnow()
    session.execute(update(_store).where(_store.c.id == order_id)
                    .values(webhook_at=now, updated_at=now))
    session.commit()


def mark_announced(session: Session, order_id: str) -> None:
    """Record that the issued order's ``esim.ready`` notification was triggered
    (``announced_at``); commits."""
    session.execute(update(_store).where(_store.c.id == order_id,
                                         _store.c.announced_at.is_(None))
                    .values(announced_at=utcnow()))
    session.commit()


def find_by_reference(session: Session, provider: str, reference: str) -> StoreOrder | None:
    """The store order ``provider`` knows as ``reference``, or None."""
    return session.exec(sqlmodel_select(StoreOrder).where(
        StoreOrder.provider == provider, StoreOrder.provider_order_ref == reference)).first()


def status_events(session: Session, order_id: str) -> list[StoreOrderStatusEvent]:
    """A store order's status events, oldest first."""
    return list(session.exec(sqlmodel_select(StoreOrderStatusEvent)
                             .where(StoreOrderStatusEvent.store_order_id == order_id)
                             .order_by(col(StoreOrderStatusEvent.created_at),
                                       StoreOrderStatusEvent.id)).all())


def insert_store_order(session: Session, *, account_id: str, product_id: str, provider: str,
                       amount: Decimal, currency: str, source: EventSource | str = EventSource.API,
                       note: str = "order placed") -> tuple[Order, StoreOrder]:
    """Persist a new order (``pending_payment``), its store order (issuance ``pending``)
    and the store order's first status event, together; commits. Raises IntegrityError,
    persisting nothing, when the account does not exist."""
    now = utcnow()
    order = Order(account_id=account_id, amount=amount, currency=currency,
                  created_at=now, updated_at=now)
    store_order = StoreOrder(id=order.id, product_id=product_id, provider=provider,
                             idempotency_key=order.id, created_at=now, updated_at=now)
    session.add(order)
    session.flush()  # the store order's foreign key needs the order first
    session.add(store_order)
    session.flush()
    _insert_event(session, order.id, from_state=None, to_state=store_order.issuance_state,
                  error_code=None, source=source, note=note, now=now)
    session.commit()
    return order, store_order


# -- the order as the API shows it ------------------------------------------------------
def order_view(order: Order, store_order: StoreOrder, events: list[Any]) -> dict[str, Any]:
    """A store order as JSON (docs/api.md, "The eSIM store"); ``events`` oldest first."""
    profile = None
    if store_order.issuance_state == IssuanceState.ISSUED.value:
        profile = {"iccid": store_order.iccid, "activation_code": store_order.activation_code,
                   "smdp_address": store_order.smdp_address}
    updated = max(order.updated_at, store_order.updated_at)
    return {"id": order.id, "account_id": order.account_id,
            "product_id": store_order.product_id, "amount": money(order.amount),
            "currency": order.currency, "status": order.status,
            "issuance_state": store_order.issuance_state, "provider": store_order.provider,
            "provider_order_ref": store_order.provider_order_ref,
            "error_code": store_order.error_code, "failed_reason": store_order.failed_reason,
            "verification_url": store_order.verification_url, "profile": profile,
            "status_events": [{"from_state": e.from_state, "to_state": e.to_state,
                               "error_code": e.error_code, "source": e.source,
                               "note": e.note, "created_at": e.created_at.isoformat()}
                              for e in events],
            "created_at": order.created_at.isoformat(), "updated_at": updated.isoformat()}


def read_order_view(session: Session, order_id: str) -> dict[str, Any] | None:
    """The store order as ``GET /v1/store/orders/{id}`` shows it, read afresh in
    ``session`` (its own uncommitted writes included), or None."""
    order = session.get(Order, order_id, populate_existing=True)
    store_order = session.get(StoreOrder, order_id, populate_existing=True)
    if order is None or store_order is None:
        return None
    return order_view(order, store_order, status_events(session, order_id))
