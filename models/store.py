"""The eSIM store: orders, their issuance (store orders) and the issuance's history
(docs/state-machines.md#store-orders).

An ``orders`` row is what the customer bought and paid for (``status``); its
``store_orders`` row (same id) is the eSIM issuance behind it (``issuance_state``). Every
write to ``issuance_state``, ``error_code`` or ``failed_reason`` goes through
:func:`transition_store_order` (or :func:`start_fresh_issuance`, its ``pending →
in_flight`` write with a run's read, the same statement), which appends a
``store_order_status_events`` row in the same transaction whenever the state or the
error code changes.
"""

from __future__ import annotations

import functools
from collections.abc import Collection, Iterator
from contextlib import contextmanager
from datetime import datetime
from decimal import Decimal
from enum import StrEnum
from typing import Any

from sqlalchemy import (
    ColumnElement,
    Connection,
    Index,
    Numeric,
    Row,
    and_,
    bindparam,
    exists,
    false,
    insert,
    literal,
    or_,
    select,
    text,
    update,
)
from sqlmodel import Field, Session, SQLModel, col
from sqlmodel import select as sqlmodel_select

from herald.db import Prepared, autocommit, is_postgres
from herald.db import session as db_session
from models.base import (
    UtcDateTime,
    id_field,
    money,
    new_id,
    snapshot,
    table_of,
    table_reader,
    timestamp_field,
    utcnow,
)
from models.catalog import StoreProduct
from models.webhooks import subscribed_types, write_event_messages


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
_products = table_of(StoreProduct)

#: Anything the store's writes run on: an ORM session (its transaction; the write
#: commits it) or, on PostgreSQL, an autocommit connection (:func:`store_db`), where each
#: write below is one statement, atomic by itself.
Db = Session | Connection

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


@contextmanager
def store_db() -> Iterator[Db]:
    """What the store's hot paths write on: an autocommit connection on PostgreSQL (each
    write is one statement there: no BEGIN/COMMIT round trips), a session elsewhere (SQLite
    runs a transition as several statements, which must land together)."""
    if is_postgres():
        with autocommit() as connection:
            yield connection
    else:
        with db_session() as session:
            yield session


def connection_of(db: Db) -> Connection:
    """The connection ``db`` runs its statements on (a session's: in its transaction)."""
    return db.connection() if isinstance(db, Session) else db


def _commit(db: Db) -> None:
    if isinstance(db, Session):
        db.commit()


def _read_issuance(session: Session, order_id: str) -> Row[Any] | None:
    """The order's issuance state and error code (SQLite: no row locks, see
    :func:`transition_store_order`)."""
    return session.execute(select(_store.c.issuance_state, _store.c.error_code)
                           .where(_store.c.id == order_id)).first()


def transition_store_order(db: Db, order_id: str, *, to: IssuanceState,
                           expect: Collection[IssuanceState], source: EventSource | str,
                           note: str, error_code: str | None = KEEP,
                           failed_reason: str | None = KEEP,
                           guard: ColumnElement[bool] | None = None,
                           now: datetime | None = None, **columns: Any) -> bool:
    """Move a store order's issuance to ``to`` — the one write of ``issuance_state``,
    ``error_code`` and ``failed_reason`` (docs/state-machines.md#store-orders). Commits
    (``db`` a session) or runs as one statement (``db`` an autocommit connection, on
    PostgreSQL); returns whether the write applied (False: nothing changed).

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

    PostgreSQL: one statement, a data-modifying WITH (the row's UPDATE, its status event,
    its order's move), which takes the store-order row first (the sub-select of the
    state it moves from, ``FOR UPDATE``) and the order row second; with webhook messages
    to write, that statement and the messages are one transaction of a session.
    SQLite has no row locks: its first write takes the database's one write lock, which
    serialises the whole write transaction against every other writer; the UPDATE is a
    compare-and-set on the state and error code it read, re-read when another writer got
    in between, then the event and the order's move follow in its transaction.
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
    connection = connection_of(db)
    if connection.dialect.name != "postgresql":
        assert isinstance(db, Session), "SQLite's transitions run in a session"
        return _transition_in_steps(db, order_id, allowed, values, source, note, guard, now)
    event = ISSUANCE_EVENTS.get(IssuanceState(to))
    if (isinstance(db, Connection) and event is not None
            and event in subscribed_types(connection)):
        # its webhook messages must land with it: one transaction, in a session
        with db_session() as session:
            return transition_store_order(
                session, order_id, to=to, expect=expect, source=source, note=note,
                error_code=error_code, failed_reason=failed_reason, guard=guard, now=now,
                **columns)
    statement = (_move(frozenset(allowed), tuple(sorted(values)), values["issuance_state"])
                 if guard is None else
                 Prepared(_move_statement(frozenset(allowed), tuple(sorted(values)),
                                          values["issuance_state"], guard)))
    params = {f"new_{name}": value for name, value in values.items()}
    params |= {"order_id": order_id, "event_id": new_id(), "source": str(source),
               "note": note[:255], "now": now}
    moved = statement.run(connection, params).first()
    if moved is None:
        if isinstance(db, Session):
            db.rollback()
        return False
    if isinstance(db, Session) and event is not None and moved["from_state"] != values[
            "issuance_state"]:
        write_event_messages(db, event, lambda: _view(db, order_id))
    _commit(db)
    return True


@functools.cache
def _move(allowed: frozenset[str], names: tuple[str, ...], to: str) -> Prepared:
    """:func:`_move_statement` without a guard, built and compiled once per shape."""
    return Prepared(_move_statement(allowed, names, to))


def _move_statement(allowed: frozenset[str], names: tuple[str, ...], to: str,
                    guard: ColumnElement[bool] | None = None, *, read: bool = False) -> Any:
    """A transition as one PostgreSQL statement: the store order's conditional UPDATE
    (from one of ``allowed``, ``guard`` holding; the columns ``names`` bound as
    ``new_<name>``), its status event when the state or the error code changes, and the
    paid order's move when ``to`` is final. Returns one row (the state and error code it
    moved from) when it applied, none when it did not; with ``read``, that row is
    :data:`RUN_READ` instead.

    The sub-select ``FOR UPDATE`` takes the row lock before the UPDATE reads the row, and
    hands the UPDATE the row's current state (waiting for a concurrent writer to end, and
    then seeing what it wrote): the event's ``from`` is the state the write replaced. The
    order's UPDATE runs only once the store order's has (its EXISTS on it is evaluated
    before its scan), so the store-order row is always taken before the order row."""
    held = _store.alias("held")
    before = (select(held.c.id, held.c.issuance_state, held.c.error_code, held.c.in_flight_at)
              .where(held.c.id == bindparam("order_id")).with_for_update().subquery("before"))
    condition = [_store.c.id == before.c.id,
                 or_(*(_store.c.issuance_state == state for state in sorted(allowed)))]
    if guard is not None:
        condition.append(guard)
    moved = (update(_store).where(*condition)
             .values({name: bindparam(f"new_{name}", type_=_store.c[name].type)
                      for name in names})
             .returning(_store.c.id, before.c.issuance_state.label("from_state"),
                        before.c.error_code.label("from_error_code"),
                        before.c.in_flight_at.label("from_in_flight_at"),
                        _store.c.issuance_state, _store.c.error_code,
                        *(_store.c[name] for name in RUN_READ if read and name in _store.c
                          and name not in ("id", "issuance_state", "in_flight_at")))
             .cte("moved"))
    now = bindparam("now", type_=UtcDateTime)
    evented = (insert(_events).from_select(
        ["id", "store_order_id", "from_state", "to_state", "error_code", "source", "note",
         "created_at"],
        select(bindparam("event_id", type_=_events.c.id.type), moved.c.id,
               moved.c.from_state, moved.c.issuance_state, moved.c.error_code,
               bindparam("source", type_=_events.c.source.type),
               bindparam("note", type_=_events.c.note.type), now)
        .where(or_(moved.c.from_state != moved.c.issuance_state,
                   moved.c.from_error_code.is_distinct_from(moved.c.error_code))))
        .cte("evented"))
    statement = select(moved.c.from_state, moved.c.from_error_code).add_cte(evented)
    if read:
        # what the run read before it (the store order as the write found it), beside
        # its order and its product: the orders row is not written by this statement
        statement = (select(*(moved.c[name] for name in RUN_READ if name in _store.c
                              and name not in ("issuance_state", "in_flight_at")),
                            moved.c.from_state.label("issuance_state"),
                            moved.c.from_in_flight_at.label("in_flight_at"),
                            _orders.c.account_id, _orders.c.status.label("order_status"),
                            _products.c.name.label("product_name"))
                     .select_from(moved.join(_orders, _orders.c.id == moved.c.id)
                                  .outerjoin(_products, _products.c.id == moved.c.product_id))
                     .add_cte(evented))
    outcome = ORDER_OUTCOMES.get(IssuanceState(to))
    if outcome is not None:
        settled = (update(_orders)
                   .where(_orders.c.id == bindparam("order_id"),
                          _orders.c.status == _ORDER_SETTLES_FROM,
                          exists(select(literal(1)).select_from(moved)))
                   .values(status=outcome.value, updated_at=now)
                   .cte("settled"))
        statement = statement.add_cte(settled)
    return statement


#: What a run reads of its order before it starts (``actors.store.Snapshot``'s fields).
RUN_READ = ("id", "account_id", "order_status", "product_id", "provider", "issuance_state",
            "provider_order_ref", "idempotency_key", "in_flight_at", "verification_deadline",
            "product_name")


@functools.cache
def _start_fresh(providers: tuple[str, ...]) -> Prepared:
    """:func:`start_fresh_issuance`'s statement for these providers, compiled once."""
    paid = exists(select(literal(1)).where(_orders.c.id == _store.c.id,
                                           _orders.c.status == OrderStatus.PAID.value))
    guard = and_(paid, or_(false(), *(_store.c.provider == name for name in providers)))
    return Prepared(_move_statement(frozenset({IssuanceState.PENDING.value}),
                                    ("in_flight_at", "issuance_state", "updated_at"),
                                    IssuanceState.IN_FLIGHT.value, guard, read=True))


def start_fresh_issuance(connection: Connection, order_id: str, *,
                         providers: Collection[str], note: str,
                         now: datetime | None = None) -> dict[str, Any] | None:
    """A fresh run's start in one statement (PostgreSQL, an autocommit ``connection``):
    the ``pending → in_flight`` transition (``in_flight_at`` = now, its status event,
    ``source`` system, ``note``) of a *paid* order whose provider is one of ``providers``,
    committed before the provider is asked, and the run's read of the order
    (:data:`RUN_READ`, as it was before the stamp). None when it did not apply — not
    pending, not paid, another provider, no such order: nothing changed, the run reads
    and decides as usual."""
    now = now or utcnow()
    return _start_fresh(tuple(sorted(providers))).run(connection, {
        "new_in_flight_at": now, "new_issuance_state": IssuanceState.IN_FLIGHT.value,
        "new_updated_at": now, "order_id": order_id, "event_id": new_id(),
        "source": str(EventSource.SYSTEM), "note": note[:255], "now": now}).first()


def _transition_in_steps(session: Session, order_id: str, allowed: set[str],
                         values: dict[str, Any], source: EventSource | str, note: str,
                         guard: ColumnElement[bool] | None, now: datetime) -> bool:
    """:func:`transition_store_order` on SQLite: read, compare-and-set, then the event,
    the order's move and the messages in the UPDATE's transaction; commits."""
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
        session.execute(insert(_events).values(
            id=new_id(), store_order_id=order_id, from_state=seen.issuance_state,
            to_state=to, error_code=error_code, source=str(source), note=note[:255],
            created_at=now))
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


_RECORD_REFERENCE = Prepared(
    update(_store)
    .where(_store.c.id == bindparam("order_id"),
           _store.c.issuance_state == IssuanceState.IN_FLIGHT.value)
    .values(provider_order_ref=bindparam("reference", type_=_store.c.provider_order_ref.type),
            updated_at=bindparam("now", type_=UtcDateTime)))


def record_provider_reference(db: Db, order_id: str, reference: str) -> bool:
    """Persist the provider's reference of an order being issued (``in_flight``) as soon
    as it is known; commits (one statement). False when the order is not in flight any
    more."""
    written = _RECORD_REFERENCE.run(connection_of(db), {
        "order_id": order_id, "reference": reference[:255], "now": utcnow()}).rowcount
    _commit(db)
    return written == 1


def stamp_webhook(session: Session, order_id: str, *, now: datetime | None = None) -> None:
    """Record that the provider's status webhook for the order arrived (``webhook_at``);
    commits. The issuance state is left to the reconcile the webhook asks for."""
    now = now or utcnow()
    session.execute(update(_store).where(_store.c.id == order_id)
                    .values(webhook_at=now, updated_at=now))
    session.commit()


def mark_announced(order_ids: list[str], *, now: datetime | None = None) -> None:
    """Record that these issued orders' ``esim.ready`` notifications were triggered
    (``announced_at``, kept where it is set) in one UPDATE, committed as it runs."""
    if not order_ids:
        return
    with autocommit() as connection:
        connection.execute(update(_store).where(col(_store.c.id).in_(order_ids),
                                                _store.c.announced_at.is_(None))
                           .values(announced_at=now or utcnow()))


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


# -- placing an order: three rows, one statement on PostgreSQL ---------------------------
#: The bind-name suffix of each table's columns in the INSERTs of a new order.
_PLACED = ((_orders, "_o"), (_store, "_s"), (_events, "_e"))


def _bound_row(table: Any, suffix: str) -> dict[str, Any]:
    return {column.key: bindparam(f"{column.key}{suffix}", type_=column.type)
            for column in table.columns}


@functools.cache
def _place(together: bool) -> tuple[Prepared, ...]:
    """The INSERTs of a new order, its store order and their first status event: on
    PostgreSQL one statement (a data-modifying WITH: atomic by itself, the foreign keys
    checked at its end), elsewhere three, run in one transaction."""
    inserts = [insert(table).values(_bound_row(table, suffix)) for table, suffix in _PLACED]
    if not together:
        return tuple(Prepared(statement) for statement in inserts)
    order, store_order, event = inserts
    return (Prepared(event.add_cte(order.cte("placed_order"))
                     .add_cte(store_order.cte("placed_store_order"))),)


def new_store_order(*, account_id: str, product_id: str, provider: str, amount: Decimal,
                    currency: str, source: EventSource | str = EventSource.API,
                    note: str = "order placed"
                    ) -> tuple[Order, StoreOrder, StoreOrderStatusEvent]:
    """A new order (``pending_payment``), its store order (issuance ``pending``) and the
    store order's first status event, built to be written by :func:`write_store_order`
    (nothing is persisted here)."""
    now = utcnow()
    order = snapshot(Order, id=new_id(), account_id=account_id, amount=amount,
                     currency=currency, created_at=now, updated_at=now)
    store_order = snapshot(StoreOrder, id=order.id, product_id=product_id, provider=provider,
                           idempotency_key=order.id, created_at=now, updated_at=now)
    event = snapshot(StoreOrderStatusEvent, id=new_id(), store_order_id=order.id,
                     from_state=None, to_state=store_order.issuance_state, error_code=None,
                     source=str(source), note=note[:255], created_at=now)
    return order, store_order, event


def write_store_order(db: Db, order: Order, store_order: StoreOrder,
                      event: StoreOrderStatusEvent) -> None:
    """Persist what :func:`new_store_order` built, together: one statement on PostgreSQL
    (``db`` a session: in its transaction, which the caller commits), three in the
    session's transaction elsewhere. Raises IntegrityError, persisting nothing, when the
    account does not exist."""
    params: dict[str, Any] = {}
    for record, (table, suffix) in zip((order, store_order, event), _PLACED, strict=True):
        params |= {f"{name}{suffix}": value for name, value in zip(
            (column.key for column in table.columns), table_reader(table)(record),
            strict=True)}
    connection = connection_of(db)
    for statement in _place(connection.dialect.name == "postgresql"):
        statement.run(connection, params)


def insert_store_order(db: Db, *, account_id: str, product_id: str, provider: str,
                       amount: Decimal, currency: str, source: EventSource | str = EventSource.API,
                       note: str = "order placed") -> tuple[Order, StoreOrder]:
    """Persist a new order (``pending_payment``), its store order (issuance ``pending``)
    and the store order's first status event, together; commits. Raises IntegrityError,
    persisting nothing, when the account does not exist. The rows returned are what was
    written (not attached to a session)."""
    order, store_order, event = new_store_order(
        account_id=account_id, product_id=product_id, provider=provider, amount=amount,
        currency=currency, source=source, note=note)
    write_store_order(db, order, store_order, event)
    _commit(db)
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
