"""Outbound webhook endpoints and their messages (docs/api.md#webhooks).

An endpoint is a customer's URL, the event types it subscribes to and the secret its
messages are signed with. A rotation keeps the previous secret for
:data:`ROTATION_OVERLAP`, so that a receiver that has not switched yet still verifies
(both signatures are sent meanwhile). A message is one event for one endpoint: written
with the state change that causes it (the outbox pattern), then relayed.
"""

from __future__ import annotations

import base64
import logging
import secrets
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime, timedelta
from enum import StrEnum
from typing import Any

from sqlalchemy import (
    JSON,
    Column,
    ColumnElement,
    Connection,
    ForeignKey,
    FromClause,
    Index,
    String,
    Table,
    Update,
    bindparam,
    cast,
    exists,
    func,
    insert,
    literal,
    select,
    text,
    true,
)
from sqlalchemy import event as orm_events
from sqlalchemy.dialects.postgresql import JSONB
from sqlmodel import Field, Session, SQLModel

from herald.db import Prepared
from models.base import UtcDateTime, id_field, table_of, timestamp_field, utcnow
from models.sealed import SealedText, require_sealing

log = logging.getLogger(__name__)

#: The event types an endpoint may subscribe to.
WEBHOOK_EVENT_TYPES = (
    "delivery.sent", "delivery.delivered", "delivery.failed", "delivery.suppressed",
    "order.issued", "order.failed", "order.verification_required", "payment.settled",
    "activation.completed", "activation.failed", "purchase_order.completed",
    "purchase_order.partial", "purchase_order.failed", "line_item.backordered",
    "line_item.rerouted",
)
#: How long a rotated-out secret still signs (beside the new one).
ROTATION_OVERLAP = timedelta(hours=24)
#: What every secret starts with (Standard Webhooks).
SECRET_PREFIX = "whsec_"


class MessageStatus(StrEnum):
    """Where a webhook message is: still to be delivered, delivered, or given up."""

    PENDING = "pending"
    DELIVERED = "delivered"
    FAILED = "failed"


def new_secret() -> str:
    """A fresh signing secret: ``whsec_`` and the base64 of 32 random bytes.
    :class:`~herald.secrets_box.SecretsKeyMissing` when it could not be stored encrypted
    (no key: docs/configuration.md#secrets_key), before any is made."""
    require_sealing()
    return SECRET_PREFIX + base64.b64encode(secrets.token_bytes(32)).decode()


class WebhookEndpoint(SQLModel, table=True):
    """A customer's URL, the event types it gets and the secrets its messages are signed
    with; ``disabled`` stops every send to it."""

    __tablename__ = "webhook_endpoints"

    id: str = id_field()
    url: str = Field(max_length=2048)
    events: list[str] = Field(default_factory=list, sa_type=JSON)
    description: str = Field(default="", max_length=500)
    disabled: bool = Field(default=False)
    #: Stored encrypted (:class:`models.sealed.SealedText`), read in clear.
    secret: str = Field(default_factory=new_secret, sa_type=SealedText)
    #: The secret a rotation replaced, still signing until ``previous_secret_until``.
    previous_secret: str | None = Field(default=None, sa_type=SealedText, nullable=True)
    previous_secret_until: datetime | None = Field(default=None, sa_type=UtcDateTime,
                                                   nullable=True)
    #: Since when every attempt to it has failed (null: the last one succeeded).
    failing_since: datetime | None = Field(default=None, sa_type=UtcDateTime, nullable=True)
    created_at: datetime = timestamp_field()
    updated_at: datetime = timestamp_field()

    def rotate_secret(self, now: datetime | None = None) -> str:
        """Replace the secret with a fresh one, keeping the old one signing for
        :data:`ROTATION_OVERLAP`; returns the new secret."""
        now = now or utcnow()
        self.previous_secret, self.previous_secret_until = self.secret, now + ROTATION_OVERLAP
        self.secret, self.updated_at = new_secret(), now
        return self.secret

    def signing_secrets(self, now: datetime | None = None) -> list[str]:
        """The secrets a message is signed with now: the current one, and the previous one
        while its overlap lasts."""
        return signing_secrets(self.secret, self.previous_secret, self.previous_secret_until,
                               now or utcnow())


def signing_secrets(secret: str, previous_secret: str | None,
                    previous_secret_until: datetime | None, now: datetime) -> list[str]:
    """An endpoint's signing secrets at ``now``, from its columns: ``secret``, and
    ``previous_secret`` while ``previous_secret_until`` is still ahead."""
    if (previous_secret is not None and previous_secret_until is not None
            and previous_secret_until > now):
        return [secret, previous_secret]
    return [secret]


def message_id() -> str:
    """A message id: ``msg_`` and 27 random base32 characters (stable across retries)."""
    return "msg_" + base64.b32encode(secrets.token_bytes(17)).decode().rstrip("=").lower()


class WebhookMessage(SQLModel, table=True):
    """One event for one endpoint, and every attempt made to deliver it."""

    __tablename__ = "webhook_messages"
    # the sweep's scan: pending messages only, by when they were last handed off
    __table_args__ = (Index("ix_webhook_messages_pending", "handed_off_at",
                            postgresql_where=text("status = 'pending'"),
                            sqlite_where=text("status = 'pending'")),)

    id: str = Field(default_factory=message_id, primary_key=True, max_length=40)
    endpoint_id: str = Field(sa_column=Column(
        String(36), ForeignKey("webhook_endpoints.id", ondelete="CASCADE"), nullable=False,
        index=True))
    type: str = Field(max_length=48)
    body: dict[str, Any] = Field(default_factory=dict, sa_type=JSON)
    status: str = Field(default=MessageStatus.PENDING.value, max_length=16)
    #: ``{at, status_code, duration_ms, error}`` per attempt, oldest first.
    attempts: list[dict[str, Any]] = Field(default_factory=list, sa_type=JSON)
    next_attempt_at: datetime | None = Field(default=None, sa_type=UtcDateTime,
                                             nullable=True)
    #: When its relay job was last enqueued (the sweep re-enqueues pending ones).
    handed_off_at: datetime | None = Field(default=None, sa_type=UtcDateTime, nullable=True)
    created_at: datetime = timestamp_field()


# -- messages written with the state change that causes them ---------------------------------
#: The webhook event type of each delivery outcome that has one.
DELIVERY_EVENTS = {"sent": "delivery.sent", "delivered": "delivery.delivered",
                   "failed_terminal": "delivery.failed", "suppressed": "delivery.suppressed"}
#: Seconds a process trusts its list of subscribed event types: an endpoint created or
#: changed is seen within this, and a state change no endpoint subscribes to costs no
#: statement beyond its own.
SUBSCRIBED_TTL_S = 2.0
#: The delivery as GET /v1/deliveries/{id} shows it (pinned fields), in a message's data.
DELIVERY_FIELDS = ("id", "notification_id", "channel", "outcome", "reason", "provider",
                   "provider_message_id", "attempts", "created_at", "updated_at")

_endpoints, _messages = table_of(WebhookEndpoint), table_of(WebhookMessage)
_subscribed: tuple[float, frozenset[str]] = (-SUBSCRIBED_TTL_S, frozenset())
_subscribed_lock = threading.Lock()
#: A relay: called with ``(message id, endpoint id)`` pairs after their transaction
#: committed, it adds their delivery jobs.
Relay = Callable[[list[tuple[str, str]]], None]
_relay: Relay | None = None
#: Where a session keeps the messages it wrote until it commits or rolls back.
_PENDING_KEY = "webhook_messages"


def set_relay(relay: Relay | None) -> None:
    """Make ``relay`` the one that committed messages are handed to (None: none; the
    sweep adds their jobs). The relay lives in ``actors.webhooks``, a layer above this
    module (docs/layout.md), so it registers itself here when it is imported instead of
    being imported."""
    global _relay
    _relay = relay


def hand_off_messages(messages: list[tuple[str, str]]) -> None:
    """Give committed messages to the relay (:func:`set_relay`); a failure is logged by
    count only: the messages stay pending and the relay's sweep adds their jobs."""
    if not messages or _relay is None:
        return
    try:
        _relay(messages)
    except Exception as error:  # Redis down: the sweep repairs it
        log.warning("webhook hand-off failed: %s", type(error).__name__,
                    extra={"messages": len(messages)})


def hand_off_after_commit(session: Session, messages: list[tuple[str, str]]) -> None:
    """Hand ``messages`` to the relay once ``session`` commits (never before: a job that
    ran first would find no message); a rollback drops them with their rows, so that a
    later commit of the same session hands off only what it wrote."""
    if not messages:
        return
    pending = session.info.get(_PENDING_KEY)
    if pending is None:
        pending = session.info[_PENDING_KEY] = []
        orm_events.listen(session, "after_commit", _committed)
        orm_events.listen(session, "after_rollback", _rolled_back)
    pending.extend(messages)


def _committed(session: Session) -> None:
    messages = session.info.get(_PENDING_KEY) or []
    session.info[_PENDING_KEY] = []
    hand_off_messages(list(messages))


def _rolled_back(session: Session) -> None:
    session.info[_PENDING_KEY] = []


def subscribed_types(connection: Connection) -> frozenset[str]:
    """The event types some enabled endpoint subscribes to, read at most every
    :data:`SUBSCRIBED_TTL_S` per process."""
    global _subscribed
    read_at, types = _subscribed
    if time.monotonic() - read_at < SUBSCRIBED_TTL_S:
        return types
    rows = connection.execute(select(_endpoints.c.events)
                              .where(_endpoints.c.disabled.is_(False))).scalars()
    types = frozenset(event for events in rows for event in events)
    with _subscribed_lock:
        _subscribed = (time.monotonic(), types)
    return types


def forget_subscribed_types() -> None:
    """Read the subscribed types afresh on next use (an endpoint was just changed here)."""
    global _subscribed
    with _subscribed_lock:
        _subscribed = (-SUBSCRIBED_TTL_S, frozenset())


def message_rows(source: FromClause, event: str, postgres: bool) -> Any:
    """SELECT of one message row per enabled endpoint subscribed to ``event``, for each
    row of ``source`` (deliveries, or the rows an UPDATE returned): the columns of
    ``webhook_messages`` in :data:`MESSAGE_COLUMNS` order."""
    build = func.json_build_object if postgres else func.json_object
    data = build(*[part for name in DELIVERY_FIELDS for part in (literal(name),
                                                                  source.c[name])])
    now = func.now() if postgres else func.strftime("%Y-%m-%d %H:%M:%S", "now")
    body = build(literal("type"), literal(event), literal("timestamp"), now,
                 literal("data"), data)
    if postgres:
        new_id = literal("msg_") + func.replace(cast(func.gen_random_uuid(), String), "-", "")
    else:
        new_id = literal("msg_") + func.lower(func.hex(func.randomblob(16)))
    return (select(new_id, _endpoints.c.id, literal(event), body,
                   literal(MessageStatus.PENDING.value), literal([], JSON), now, now)
            .select_from(source).join(_endpoints, true())
            .where(*_subscribed_to(event, postgres)))


def _subscribed_to(event: str, postgres: bool) -> tuple[ColumnElement[bool], ...]:
    """The condition of an endpoint that is enabled and subscribed to ``event``."""
    if postgres:
        subscribed = _endpoints.c.events.cast(JSONB).has_key(event)
    else:
        each = func.json_each(_endpoints.c.events).table_valued("value")
        subscribed = exists(select(literal(1)).select_from(each).where(each.c.value == event))
    return _endpoints.c.disabled.is_(False), subscribed


def write_event_messages(session: Session, event: str,
                         data: Callable[[], dict[str, Any]]) -> list[tuple[str, str]]:
    """Write one ``event`` message, its ``data`` read by calling ``data()``, for each
    enabled endpoint subscribed to it, in ``session``'s transaction (the caller's state
    change commits or rolls back with them), and hand them to the relay once it commits.

    When no endpoint subscribes to ``event`` (:func:`subscribed_types`, cached) nothing
    is read or written: ``data`` is not called. Returns the ``(message id, endpoint
    id)`` pairs written. For the ORM session paths; a delivery's outcome has its own
    single statement (:func:`update_with_messages`)."""
    if event not in WEBHOOK_EVENT_TYPES:
        raise ValueError(f"{event!r} is not a webhook event type")
    if event not in subscribed_types(session.connection()):
        return []
    postgres = session.get_bind().dialect.name == "postgresql"
    endpoint_ids = session.execute(select(_endpoints.c.id)
                                   .where(*_subscribed_to(event, postgres))).scalars().all()
    if not endpoint_ids:
        return []
    # the caller's pending ORM changes reach the database first: ``data`` reads the rows
    # afresh, and must neither miss them nor overwrite them
    session.flush()
    now = utcnow()
    body = {"type": event, "timestamp": now.isoformat(), "data": data()}
    rows = [{"id": message_id(), "endpoint_id": endpoint_id, "type": event, "body": body,
             "status": MessageStatus.PENDING.value, "attempts": [], "handed_off_at": now,
             "created_at": now} for endpoint_id in endpoint_ids]
    session.execute(insert(_messages), rows)
    messages = [(row["id"], row["endpoint_id"]) for row in rows]
    hand_off_after_commit(session, messages)
    return messages


MESSAGE_COLUMNS = ("id", "endpoint_id", "type", "body", "status", "attempts",
                   "handed_off_at", "created_at")


def _with_messages_postgres(update_statement: Update, event: str, deliveries: Table) -> Any:
    """One statement: ``update_statement`` (a delivery's conditional UPDATE) and, for the
    row it changed, one ``event`` message per subscribed endpoint (a data-modifying WITH).
    It returns one row per message written (one row with no message when none was):
    ``changed`` (1 when the UPDATE changed the row), ``message_id``, ``endpoint_id``."""
    columns = [_messages.c[name] for name in MESSAGE_COLUMNS]
    changed = update_statement.returning(
        *[deliveries.c[name] for name in DELIVERY_FIELDS]).cte("changed")
    written = (insert(_messages).from_select(columns, message_rows(changed, event, True))
               .returning(_messages.c.id, _messages.c.endpoint_id).cte("written"))
    return (select(select(func.count()).select_from(changed).scalar_subquery().label("changed"),
                   written.c.id.label("message_id"), written.c.endpoint_id.label("endpoint_id"))
            .select_from(select(literal(1).label("one")).subquery().outerjoin(written, true())))


def _messages_of_delivery(event: str, deliveries: Table) -> Any:
    """INSERT of one ``event`` message per subscribed endpoint for the delivery
    ``:delivery_id``, returning each message's id and endpoint (the UPDATE ran before it,
    in the same transaction: SQLite has no data-modifying WITH)."""
    columns = [_messages.c[name] for name in MESSAGE_COLUMNS]
    source = select(deliveries).where(deliveries.c.id == bindparam("delivery_id")).subquery()
    return (insert(_messages).from_select(columns, message_rows(source, event, False))
            .returning(_messages.c.id.label("message_id"),
                       _messages.c.endpoint_id.label("endpoint_id")))


def _written(rows: Sequence[Mapping[Any, Any]]) -> list[tuple[str, str]]:
    return [(row["message_id"], row["endpoint_id"]) for row in rows
            if row["message_id"] is not None]


def update_with_messages(connection: Connection, update_statement: Update,
                         params: dict[str, Any], event: str,
                         deliveries: Table) -> tuple[bool, list[tuple[str, str]]]:
    """Run ``update_statement`` (one delivery's conditional UPDATE) and, only when it
    changed the row, write one ``event`` message per subscribed endpoint with it: one
    statement on PostgreSQL (a data-modifying WITH), one transaction elsewhere (the
    caller commits). Returns whether the row changed and the messages written. Built
    for each call: for a statement of one shape run again and again, see
    :class:`PreparedWithMessages`."""
    if connection.dialect.name == "postgresql":
        rows = connection.execute(_with_messages_postgres(update_statement, event, deliveries),
                                  params).mappings().all()
        return rows[0]["changed"] == 1, _written(rows)
    if connection.execute(update_statement, params).rowcount != 1:
        return False, []
    rows = connection.execute(_messages_of_delivery(event, deliveries), params).mappings().all()
    return True, _written(rows)


class PreparedWithMessages:
    """:func:`update_with_messages` for one UPDATE shape and one event, compiled once per
    dialect (:class:`herald.db.Prepared`): the channel workers' outcome writes, where
    building and compiling the combined statement on each call cost more than running it.

    ``make_update`` builds a new copy of the UPDATE for each statement made from it: a
    compiled statement keeps its (empty) list of returned columns, so a RETURNING added
    to the one the UPDATE alone runs as would return nothing."""

    def __init__(self, make_update: Callable[[], Update], event: str,
                 deliveries: Table) -> None:
        self._combined = Prepared(_with_messages_postgres(make_update(), event, deliveries))
        self._update = Prepared(make_update())
        self._insert = Prepared(_messages_of_delivery(event, deliveries))

    def run(self, connection: Connection,
            params: dict[str, Any]) -> tuple[bool, list[tuple[str, str]]]:
        """As :func:`update_with_messages`; on SQLite ``connection`` must be in a
        transaction the caller commits (both statements land together)."""
        if connection.dialect.name == "postgresql":
            rows = self._combined.run(connection, params).rows
            return rows[0]["changed"] == 1, _written(rows)
        if self._update.run(connection, params).rowcount != 1:
            return False, []
        return True, _written(self._insert.run(connection, params).rows)
