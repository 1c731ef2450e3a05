"""Accounts, notifications and their per-channel deliveries, with the helpers that guard
every state change of a delivery (docs/state-machines.md#deliveries).

A delivery's ``claimed_at`` is the fencing token: an attempt claims the row by writing it,
and every later write of that attempt is conditional on it being unchanged, so an old
attempt can never overwrite a newer result.
"""

from __future__ import annotations

import dataclasses
import functools
from datetime import datetime, timedelta
from enum import StrEnum
from typing import Any

from sqlalchemy import (
    JSON,
    ColumnElement,
    Connection,
    Index,
    Insert,
    String,
    UniqueConstraint,
    Update,
    and_,
    bindparam,
    insert,
    literal_column,
    not_,
    or_,
    text,
    update,
)
from sqlmodel import Field, Session, SQLModel, col, select

from herald.db import Prepared, autocommit, get_engine, is_postgres
from models import webhooks
from models.base import (
    UtcDateTime,
    id_field,
    table_of,
    table_reader,
    timestamp_field,
    utcnow,
)
from models.pydantic_internals import set_field_values

#: A claim older than this is abandoned and may be taken over (docs/pipeline.md#claims).
CLAIM_STALE_AFTER = timedelta(seconds=60)


class Channel(StrEnum):
    """Where a notification goes."""

    EMAIL = "email"
    SMS = "sms"
    IN_APP = "in_app"
    PUSH = "push"


class Outcome(StrEnum):
    """A delivery's state."""

    #: Persisted; a channel job should be on its way.
    QUEUED = "queued"
    #: An attempt claimed it (or a retryable failure keeps it here for the next attempt).
    SENDING = "sending"
    #: The provider accepted it (SMTP ends here).
    SENT = "sent"
    #: The provider reported it delivered.
    DELIVERED = "delivered"
    #: It will not be sent: unrecoverable error, attempts or restarts exhausted.
    FAILED_TERMINAL = "failed_terminal"
    #: A gate blocked it; ``reason`` says which.
    SUPPRESSED = "suppressed"


#: Outcomes a channel worker never touches again.
FINAL_OUTCOMES = frozenset({Outcome.SENT, Outcome.DELIVERED, Outcome.FAILED_TERMINAL,
                            Outcome.SUPPRESSED})


class SuppressionReason(StrEnum):
    """Why a gate blocked a delivery."""

    INACTIVE = "inactive"
    OPTED_OUT = "opted_out"
    NO_ADDRESS = "no_address"
    PROVIDER_UNSUPPORTED = "provider_unsupported"
    #: No provider is configured for the channel (outside the embedded default an unset
    #: ``<CHANNEL>_PROVIDER`` turns the channel off, docs/configuration.md#providers).
    NO_PROVIDER = "no_provider"
    #: The account's preferences turn the channel off for this notification; the
    #: delivery's ``last_error`` names the setting (``preference types.promo.offer.sms``).
    PREFERENCE = "preference"


#: The one order of a notification's deliveries in every answer (the 202 of an event and
#: every later read): the channels' order above.
CHANNEL_ORDER = {channel.value: rank for rank, channel in enumerate(Channel)}


def in_channel_order(deliveries: list[Delivery]) -> list[Delivery]:
    """``deliveries`` in :data:`CHANNEL_ORDER`, as an event's 202 lists them."""
    return sorted(deliveries, key=lambda d: CHANNEL_ORDER.get(d.channel, len(CHANNEL_ORDER)))


def _in_app_gate(account_id: str, transactional: str, type_: str, *, postgres: bool) -> str:
    """SQL: why the gates block an in-app delivery of ``account_id``'s notification (its
    ``transactional`` flag and ``type_``), else NULL. In-app has no channel job, so its
    gates are settled in the statement that persists it (no round trip more); they are
    the channel workers' first three (:func:`actors.notifications.gate`): an inactive
    account, a non-transactional notification to an account that opted out, then the
    account's preferences for ``in_app`` (:func:`actors.preferences.blocking_setting`:
    type, then category, then channel; no type is required on in-app). A preference
    answers ``preference <setting>`` (:func:`gate_reason` splits it)."""
    category = f"(CASE WHEN {transactional} THEN 'transactional' ELSE 'marketing' END)"
    if postgres:  # the column is json: ->> answers 'true', 'false' or NULL (unset)
        by_type = f"(gated.preferences -> 'types' -> {type_} ->> 'in_app')"
        by_category = f"(gated.preferences -> 'categories' -> {category} ->> 'in_app')"
        by_channel = "(gated.preferences -> 'channels' ->> 'in_app')"
    else:  # SQLite: json_type answers 'true', 'false' or NULL (unset); type names hold dots
        by_type = f"json_type(gated.preferences, '$.types.\"' || {type_} || '\".in_app')"
        by_category = f"json_type(gated.preferences, '$.categories.' || {category} || '.in_app')"
        by_channel = "json_type(gated.preferences, '$.channels.in_app')"
    preference = f"'{SuppressionReason.PREFERENCE.value} "
    return (f"(SELECT CASE WHEN NOT gated.active THEN '{SuppressionReason.INACTIVE.value}' "
            f"WHEN gated.marketing_opt_out AND NOT {transactional} "
            f"THEN '{SuppressionReason.OPTED_OUT.value}' "
            f"WHEN {by_type} = 'false' THEN {preference}types.' || {type_} || '.in_app' "
            f"WHEN {by_type} IS NULL AND {by_category} = 'false' "
            f"THEN {preference}categories.' || {category} || '.in_app' "
            f"WHEN {by_type} IS NULL AND {by_category} IS NULL AND {by_channel} = 'false' "
            f"THEN {preference}channels.in_app' END "
            f"FROM accounts AS gated WHERE gated.id = {account_id})")


@functools.cache
def in_app_gate(*, postgres: bool) -> str:
    """The in-app gate (:func:`_in_app_gate`) of the notification an INSERT INTO
    notifications … RETURNING returns, on PostgreSQL or SQLite."""
    return _in_app_gate("notifications.account_id", "notifications.transactional",
                        "notifications.type", postgres=postgres)


def gate_reason(gate: str) -> tuple[str, str | None]:
    """An in-app gate's answer as the delivery records it: its reason, and what the
    delivery's ``last_error`` says (the preference setting that blocked it, else None)."""
    reason, _, setting = gate.partition(" ")
    return reason, gate if setting else None


def gate_reason_sql(gate: str) -> tuple[str, str]:
    """:func:`gate_reason` in PostgreSQL's SQL, of the gate the expression ``gate`` holds."""
    return f"split_part({gate}, ' ', 1)", f"(CASE WHEN strpos({gate}, ' ') > 0 THEN {gate} END)"


class Account(SQLModel, table=True):
    """A recipient: addresses, locale and the gates' inputs."""

    __tablename__ = "accounts"

    id: str = id_field()
    # indexed for the console's search by address (docs/console.md#search)
    email: str | None = Field(default=None, max_length=320, index=True)
    phone: str | None = Field(default=None, max_length=20, index=True)
    locale: str = Field(default="en", max_length=16)
    active: bool = True
    marketing_opt_out: bool = False
    #: The push subscription of a signed-in device (None: no device, push is suppressed).
    push_subscription_id: str | None = Field(default=None, max_length=128)
    #: The account's preference document (docs/api.md#preferences); None: everything on.
    preferences: dict[str, Any] | None = Field(default=None, sa_type=JSON(none_as_null=True),
                                               nullable=True)
    #: IANA time zone name its quiet hours are read in (None: UTC).
    timezone: str | None = Field(default=None, max_length=64)
    #: When normal-urgency messages are held (docs/api.md#quiet-hours); None: never.
    quiet_hours: dict[str, Any] | None = Field(default=None, sa_type=JSON(none_as_null=True),
                                               nullable=True)
    created_at: datetime = timestamp_field()
    updated_at: datetime = timestamp_field()


class Notification(SQLModel, table=True):
    """One domain event for one account; (account, type, occurrence) is unique for good."""

    __tablename__ = "notifications"
    # The unique key serves look-ups by account too (its first column), so account_id
    # has no index of its own; batch_id is indexed where it is set, and most rows have
    # none (migration 0009: an index entry less to write per event, two where null)
    __table_args__ = (UniqueConstraint("account_id", "type", "occurrence",
                                       name="uq_notifications_recipient_occurrence"),
                      Index("ix_notifications_batch_id", "batch_id",
                            postgresql_where=text("batch_id IS NOT NULL"),
                            sqlite_where=text("batch_id IS NOT NULL")))

    id: str = id_field()
    account_id: str = Field(foreign_key="accounts.id", max_length=36)
    type: str = Field(max_length=64)
    occurrence: str = Field(max_length=255)
    urgency: str = Field(default="normal", max_length=16)
    transactional: bool = True
    data: dict[str, Any] = Field(default_factory=dict, sa_type=JSON)
    batch_id: str | None = Field(default=None, max_length=36)
    created_at: datetime = timestamp_field()


#: Percent of each ``deliveries`` page PostgreSQL fills on insert.
DELIVERIES_FILLFACTOR = 80


class Delivery(SQLModel, table=True):
    """One channel of one notification, and what became of it."""

    __tablename__ = "deliveries"
    # the handoff sweep reads only queued/sending rows, oldest first: a partial index keeps
    # it flat however many finished deliveries accumulate
    # Room left in each page (migration 0009): the handoff stamp rewrites a delivery right
    # after its insert, and a new version that fits beside the old one on its page leaves
    # the indexes alone (a HOT update). The claim and the outcome change indexed values
    # (outcome, in the partial index's condition), so they cannot be HOT.
    # provider_message_id is indexed where a provider gave one (callbacks look it up)
    __table_args__ = (Index("ix_deliveries_pending", "created_at",
                            postgresql_where=text("outcome IN ('queued', 'sending')"),
                            sqlite_where=text("outcome IN ('queued', 'sending')")),
                      Index("ix_deliveries_provider_message_id", "provider_message_id",
                            postgresql_where=text("provider_message_id IS NOT NULL"),
                            sqlite_where=text("provider_message_id IS NOT NULL")),
                      Index("ix_deliveries_fallback_message_id", "fallback_message_id",
                            postgresql_where=text("fallback_message_id IS NOT NULL"),
                            sqlite_where=text("fallback_message_id IS NOT NULL")),
                      {"postgresql_with": {"fillfactor": DELIVERIES_FILLFACTOR}})

    id: str = id_field()
    notification_id: str = Field(foreign_key="notifications.id", max_length=36, index=True)
    channel: str = Field(max_length=16)
    outcome: str = Field(default=Outcome.QUEUED.value, max_length=24)
    reason: str | None = Field(default=None, max_length=64)
    provider: str | None = Field(default=None, max_length=32)
    provider_message_id: str | None = Field(default=None, max_length=255)
    #: Send attempts dispatched to a provider.
    attempts: int = 0
    last_error: str | None = Field(default=None, max_length=500)
    #: The live attempt's claim; the fencing token of its writes.
    claimed_at: datetime | None = Field(default=None, sa_type=UtcDateTime, nullable=True)
    #: When a channel job was last handed to the queue (the sweep's handoff stamp).
    queued_at: datetime | None = Field(default=None, sa_type=UtcDateTime, nullable=True)
    #: Each provider attempt: ``{provider, at, result, error}`` (docs/api.md#deliveries).
    attempts_log: list[dict[str, Any]] | None = Field(
        default=None, sa_type=JSON(none_as_null=True), nullable=True)
    #: While quiet hours hold the delivery: when it is due (None: not held).
    not_before: datetime | None = Field(default=None, sa_type=UtcDateTime, nullable=True)
    #: The provider of the delivery-report fallback's second send, written before it is
    #: sent (None: no fallback taken; docs/pipeline.md#delivery-report-fallback).
    fallback_provider: str | None = Field(default=None, max_length=32)
    #: That second send's message id: its receipts correlate to this delivery too.
    fallback_message_id: str | None = Field(default=None, max_length=255)
    # no index of its own: the sweep reads it through ix_deliveries_pending (migration 0004)
    created_at: datetime = timestamp_field()
    updated_at: datetime = timestamp_field()


# -- the delivery's transition helpers ------------------------------------------------------
class ClaimVerdict(StrEnum):
    """What a claim attempt found."""

    CLAIMED = "claimed"
    #: Already sent, delivered, failed for good or suppressed: nothing to do.
    FINAL = "final"
    #: Another attempt holds a live claim: try again later.
    BUSY = "busy"
    MISSING = "missing"


@dataclasses.dataclass(frozen=True, kw_only=True)
class Claim:
    """The result of :func:`claim_delivery`; ``token`` fences this attempt's writes."""

    verdict: ClaimVerdict
    token: datetime | None = None
    #: For CLAIMED: the notification and its account as they were at the claim
    #: (:data:`RECIPIENT_COLUMNS`, by name).
    recipient: dict[str, Any] | None = None
    #: For BUSY: how long until the other claim goes stale.
    retry_in: timedelta | None = None


#: Anything that runs a statement: an ORM session (its transaction; commit() ends it) or a
#: connection — on the channel workers' hot path an autocommit one
#: (:func:`herald.db.autocommit`), where every statement below is atomic by itself and
#: commit() costs no round trip.
Db = Session | Connection

_deliveries = table_of(Delivery)
_notifications, _accounts = table_of(Notification), table_of(Account)
_CLAIMABLE = (Outcome.QUEUED.value, Outcome.SENDING.value)
_FINAL = tuple(sorted(outcome.value for outcome in FINAL_OUTCOMES))

#: What a channel worker reads about a delivery once it holds the claim: the account's
#: activity, opt-out, address and locale are read after the claim, never before, so a
#: change made before the claim is always seen.
RECIPIENT_COLUMNS: tuple[ColumnElement[Any], ...] = (
    _notifications.c.type, _notifications.c.data, _notifications.c.transactional,
    _notifications.c.urgency,
    _accounts.c.active, _accounts.c.marketing_opt_out, _accounts.c.email, _accounts.c.phone,
    _accounts.c.push_subscription_id, _accounts.c.locale, _accounts.c.preferences,
    _accounts.c.timezone, _accounts.c.quiet_hours, _deliveries.c.attempts_log)


def _one_of(column: ColumnElement[Any], values: tuple[str, ...]) -> ColumnElement[bool]:
    """``column IN (values)`` for a fixed list, as plain bound equalities: a literal IN
    list would be expanded again on every execution (SQLAlchemy's post-compile step)."""
    return or_(*(column == value for value in values))


def _connection(db: Db) -> Connection:
    return db.connection() if isinstance(db, Session) else db


# The hot-path statements are built once, here, and run as Prepared statements: building
# one per call, or SQLAlchemy's execution layer, cost more CPU than the database spent
# running it.
_CLAIMABLE_NOW = and_(_deliveries.c.id == bindparam("delivery_id"),
                      _one_of(_deliveries.c.outcome, _CLAIMABLE),
                      or_(_deliveries.c.claimed_at.is_(None),
                          _deliveries.c.claimed_at < bindparam("stale_before",
                                                               type_=UtcDateTime)))
# a quiet-hours hold ends with the claim that follows it (a new hold sets it again): no
# statement of its own to clear it
_CLAIM_VALUES = {"outcome": Outcome.SENDING.value,
                 "claimed_at": bindparam("now", type_=UtcDateTime),
                 "updated_at": bindparam("now", type_=UtcDateTime),
                 "not_before": None}
_CLAIM = Prepared(update(_deliveries).where(_CLAIMABLE_NOW).values(_CLAIM_VALUES))
#: The claim and the read in one statement. PostgreSQL only: SQLite's RETURNING cannot
#: name the tables of an UPDATE's FROM. The rows read are those the claim's statement
#: sees, so nothing older than the claim is ever read.
_CLAIM_AND_READ = Prepared(
    update(_deliveries)
    .where(_CLAIMABLE_NOW, _deliveries.c.notification_id == _notifications.c.id,
           _notifications.c.account_id == _accounts.c.id)
    .values(_CLAIM_VALUES).returning(*RECIPIENT_COLUMNS))
_READ_RECIPIENT = Prepared(
    select(*RECIPIENT_COLUMNS)
    .join_from(_deliveries, _notifications,
               _notifications.c.id == _deliveries.c.notification_id)
    .join(_accounts, _accounts.c.id == _notifications.c.account_id)
    .where(_deliveries.c.id == bindparam("delivery_id")))
_CLAIM_STATE = Prepared(select(_deliveries.c.outcome, _deliveries.c.claimed_at)
                        .where(_deliveries.c.id == bindparam("delivery_id")))


def claim_delivery(db: Db, delivery_id: str, *, now: datetime | None = None,
                   stale_after: timedelta = CLAIM_STALE_AFTER) -> Claim:
    """Claim a queued (or abandoned) delivery for this attempt, in one conditional UPDATE,
    and read its notification and account as they are now (``Claim.recipient``). Commits.

    Succeeds only when the outcome is queued/sending and no live claim exists (none, or
    older than ``stale_after``). MISSING when the delivery does not exist (the foreign
    keys keep its notification and account).
    """
    now = now or utcnow()
    connection = _connection(db)
    params = {"delivery_id": delivery_id, "now": now, "stale_before": now - stale_after}
    recipient: dict[str, Any] | None
    if connection.dialect.name == "postgresql":
        recipient = _CLAIM_AND_READ.run(connection, params).first()
    else:
        claimed = _CLAIM.run(connection, params).rowcount == 1
        recipient = _READ_RECIPIENT.run(connection, params).first() if claimed else None
    db.commit()
    if recipient is not None:
        return Claim(verdict=ClaimVerdict.CLAIMED, token=now, recipient=recipient)
    row = _CLAIM_STATE.run(_connection(db), params).first()
    if row is None:
        return Claim(verdict=ClaimVerdict.MISSING)
    if row["outcome"] in FINAL_OUTCOMES:
        return Claim(verdict=ClaimVerdict.FINAL)
    # a live claim, or one released or gone stale since this claim was refused (a race
    # with another attempt): either way, try again once it would be claimable
    held = row["claimed_at"] or now
    return Claim(verdict=ClaimVerdict.BUSY,
                 retry_in=max(held + stale_after - now, timedelta(seconds=1)))


def still_claimed(db: Db, delivery_id: str, token: datetime) -> bool:
    """True while this attempt's claim is the delivery's current one (one read)."""
    row = _CLAIM_STATE.run(_connection(db), {"delivery_id": delivery_id}).first()
    return row is not None and row["claimed_at"] == token


@functools.cache
def _stamp(count: int) -> Prepared:
    """The handoff stamp of ``count`` deliveries (bound as ``id_<i>``), built once per count."""
    return Prepared(update(_deliveries)
                    .where(_deliveries.c.id.in_([bindparam(f"id_{i}") for i in range(count)]))
                    .values(queued_at=bindparam("now", type_=UtcDateTime)))


def stamp_handoffs(db: Db, delivery_ids: list[str], *,
                   now: datetime | None = None) -> None:
    """Write the handoff stamp (``queued_at``) of these deliveries, in one UPDATE; outcome
    and claim are left as they are. The caller commits (nothing to commit on an autocommit
    connection)."""
    if delivery_ids:
        params: dict[str, Any] = {f"id_{i}": id_ for i, id_ in enumerate(delivery_ids)}
        params["now"] = now or utcnow()
        _stamp(len(delivery_ids)).run(_connection(db), params)


def _row(record: SQLModel, suffix: str = "") -> dict[str, Any]:
    """A table model's column values, keyed as an INSERT binds them (``<column><suffix>``)."""
    table = record.__table__  # type: ignore[attr-defined]
    return dict(zip(_bound_names(table, suffix), table_reader(table)(record), strict=True))


@functools.cache
def _bound_names(table: Any, suffix: str) -> tuple[str, ...]:
    return tuple(f"{column.key}{suffix}" for column in table.columns)


def _bound_row(table: Any, suffix: str = "") -> dict[str, Any]:
    return {column.key: bindparam(f"{column.key}{suffix}", type_=column.type)
            for column in table.columns}


@functools.cache
def _insert_notification(deliveries: int, *, together: bool, in_app: int | None) -> Prepared:
    """The INSERT of a notification and, when ``together`` (PostgreSQL), of its
    ``deliveries`` in the same statement (a data-modifying WITH: one round trip, atomic
    by itself, the foreign key checked at its end). Row i of the deliveries is bound as
    ``<column>_<i>``. When one of them (row ``in_app``) is in-app, the notification's
    in-app gate (:func:`_in_app_gate`) is returned as ``gate`` and, together, settles that
    row's outcome, reason and last error; the deliveries' ids and the gate are returned.
    Built once per shape."""
    notification = insert(_notifications).values(_bound_row(_notifications))
    if in_app is not None:
        # together is PostgreSQL's shape; apart, a notification with deliveries is SQLite's
        notification = notification.returning(
            literal_column(in_app_gate(postgres=together)).label("gate"))
    if not together:
        return Prepared(notification)
    rows = [_bound_row(_deliveries, f"_{i}") for i in range(deliveries)]
    if in_app is not None:
        gate = "(SELECT gate FROM notification)"
        reason, last_error = gate_reason_sql(gate)
        rows[in_app] |= {
            "outcome": literal_column(f"CASE WHEN {gate} IS NULL THEN "
                                      f"'{Outcome.DELIVERED.value}' ELSE "
                                      f"'{Outcome.SUPPRESSED.value}' END", String),
            "reason": literal_column(reason, String),
            "last_error": literal_column(last_error, String)}
    statement = insert(_deliveries).values(rows).add_cte(notification.cte("notification"))
    if in_app is not None:
        statement = statement.returning(_deliveries.c.id,
                                        literal_column(gate, String).label("gate"))
    return Prepared(statement)


def _delivery_rows(count: int) -> Insert:
    return insert(_deliveries).values([_bound_row(_deliveries, f"_{i}") for i in range(count)])


@functools.cache
def _insert_deliveries(count: int) -> Prepared:
    """One multi-row INSERT of ``count`` deliveries (row i bound as ``<column>_<i>``)."""
    return Prepared(_delivery_rows(count))


def _in_app_index(deliveries: list[Delivery]) -> int | None:
    """The position of the in-app delivery, if there is one."""
    return next((i for i, d in enumerate(deliveries) if d.channel == Channel.IN_APP.value),
                None)


def persist_notification(notification: Notification, deliveries: list[Delivery]) -> None:
    """Insert a notification and its deliveries so that they land together or not at all,
    and commit them.

    An in-app delivery (built ``delivered``) passes the gates in the same statement: an
    inactive account's, an opted-out account's non-transactional one, or one the
    account's preferences turn off, is persisted ``suppressed`` with its reason (and the
    setting, as its last error), and so updated in ``deliveries``. On PostgreSQL one
    statement on an autocommit connection (no BEGIN/COMMIT round trips); elsewhere two in
    a transaction. Raises IntegrityError, persisting nothing, when the (account, type,
    occurrence) key exists already or the account does not exist (its foreign key).
    """
    if deliveries and is_postgres():
        with autocommit() as connection:
            insert_notification(connection, notification, deliveries)
        return
    with get_engine().begin() as connection:
        insert_notification(connection, notification, deliveries)


def insert_notification(connection: Connection, notification: Notification,
                        deliveries: list[Delivery]) -> None:
    """:func:`persist_notification` on the caller's connection, inside its transaction
    (commits nothing): for rows that must land with others (a digest's message with its
    bucket's close, docs/pipeline.md#digests). Raises IntegrityError as it does."""
    params = _row(notification)
    for i, delivery in enumerate(deliveries):
        params |= _row(delivery, f"_{i}")
    in_app = _in_app_index(deliveries)
    if deliveries and connection.dialect.name == "postgresql":
        ran = _insert_notification(len(deliveries), together=True,
                                   in_app=in_app).run(connection, params)
        if in_app is not None:
            gates = {row["id"]: row["gate"] for row in ran.rows}
            suppress_gated(deliveries, {notification.id: gates.get(deliveries[in_app].id)})
        return
    ran = _insert_notification(len(deliveries), together=False,
                               in_app=in_app).run(connection, params)
    if in_app is not None:
        gated = ran.first()
        suppress_gated(deliveries, {notification.id: gated["gate"] if gated else None})
        params |= _row(deliveries[in_app], f"_{in_app}")
    if deliveries:
        _insert_deliveries(len(deliveries)).run(connection, params)


def suppress_gated(deliveries: list[Delivery], gates: dict[str, str | None]) -> None:
    """Record on each in-app delivery the gate its notification's ``gates`` entry names
    (none for most): its reason, and the preference setting as its last error."""
    if any(gates.values()):
        for delivery in deliveries:
            if delivery.channel == Channel.IN_APP.value:
                gate = gates.get(delivery.notification_id)
                if gate:
                    reason, last_error = gate_reason(gate)
                    set_field_values(delivery, {"outcome": Outcome.SUPPRESSED.value,
                                                "reason": reason, "last_error": last_error})


@functools.cache
def _outcome_update(columns: tuple[str, ...], *, fenced: bool, count_attempt: bool,
                    release_claim: bool) -> Prepared:
    """The fenced outcome UPDATE that sets ``columns`` (bound as ``new_<column>``), built
    and compiled once per shape."""
    return Prepared(_outcome_statement(columns, fenced=fenced, count_attempt=count_attempt,
                                       release_claim=release_claim))


def _outcome_statement(columns: tuple[str, ...], *, fenced: bool, count_attempt: bool,
                       release_claim: bool) -> Update:
    """A new outcome UPDATE that sets ``columns`` (bound as ``new_<column>``): never over
    a final outcome, and only under this claim when fenced."""
    values: dict[str, Any] = {name: bindparam(f"new_{name}", type_=_deliveries.c[name].type)
                              for name in columns}
    if count_attempt:
        values["attempts"] = _deliveries.c.attempts + 1
    if release_claim:
        values["claimed_at"] = None
    condition = [_deliveries.c.id == bindparam("delivery_id"),
                 not_(_one_of(_deliveries.c.outcome, _FINAL))]
    if fenced:
        condition.append(_deliveries.c.claimed_at == bindparam("token", type_=UtcDateTime))
    return update(_deliveries).where(*condition).values(values)


def record_delivery_outcome(db: Db, delivery_id: str, *, token: datetime | None,
                            outcome: Outcome, reason: str | None = None,
                            provider: str | None = None, provider_message_id: str | None = None,
                            error: str | None = None, count_attempt: bool = False,
                            release_claim: bool = False,
                            attempts_log: list[dict[str, Any]] | None = None) -> bool:
    """Write an attempt's outcome, fenced by its claim ``token``, in one conditional
    UPDATE; commits.

    Returns False (and changes nothing) when the claim was taken over or the delivery
    already reached a final outcome. ``token=None`` writes without a claim (the queue
    layer's exhausted-restarts hook), still never over a final outcome. Fields left None
    keep their stored value; ``attempts_log`` replaces the stored list whole (the claim
    read it, and the fence keeps any other attempt from writing it meanwhile).
    """
    given = {name: value for name, value in (
        ("outcome", outcome.value), ("updated_at", utcnow()), ("reason", reason),
        ("provider", provider), ("provider_message_id", provider_message_id),
        ("last_error", None if error is None else error[:500]),
        ("attempts_log", attempts_log)) if value is not None}
    columns, fenced = tuple(given), token is not None
    params = {f"new_{name}": value for name, value in given.items()}
    params["delivery_id"] = delivery_id
    if token is not None:
        params["token"] = token
    event = webhooks.DELIVERY_EVENTS.get(outcome.value)
    if event is None or event not in webhooks.subscribed_types(_connection(db)):
        statement = _outcome_update(columns, fenced=fenced, count_attempt=count_attempt,
                                    release_claim=release_claim)
        written = statement.run(_connection(db), params).rowcount == 1
        db.commit()
        return written
    statement_with_messages = _outcome_with_messages(
        columns, fenced=fenced, count_attempt=count_attempt, release_claim=release_claim,
        event=event)
    if isinstance(db, Session) or is_postgres():
        # PostgreSQL: one statement; a session: its own transaction
        written, messages = statement_with_messages.run(_connection(db), params)
        db.commit()
    else:
        # an autocommit SQLite connection commits each statement: the two need a transaction
        with get_engine().begin() as connection:
            written, messages = statement_with_messages.run(connection, params)
    webhooks.hand_off_messages(messages)
    return written


@functools.cache
def _outcome_with_messages(columns: tuple[str, ...], *, fenced: bool, count_attempt: bool,
                           release_claim: bool, event: str) -> webhooks.PreparedWithMessages:
    """The outcome UPDATE of this shape with its ``event`` messages, built and compiled
    once (docs/api.md#webhooks)."""
    return webhooks.PreparedWithMessages(
        functools.partial(_outcome_statement, columns, fenced=fenced,
                          count_attempt=count_attempt, release_claim=release_claim),
        event, _deliveries)


def hold_delivery(db: Db, delivery_id: str, token: datetime, not_before: datetime) -> bool:
    """Hold a claimed delivery until ``not_before`` (quiet hours, docs/api.md#quiet-hours):
    back to ``queued`` with ``not_before`` set and this attempt's claim released, in one
    UPDATE fenced by the claim ``token``; commits. False (nothing written) when the claim
    was taken over or the outcome is final."""
    statement = _outcome_update(("outcome", "updated_at", "not_before"), fenced=True,
                                count_attempt=False, release_claim=True)
    written = statement.run(_connection(db), {
        "new_outcome": Outcome.QUEUED.value, "new_updated_at": utcnow(),
        "new_not_before": not_before, "delivery_id": delivery_id,
        "token": token}).rowcount == 1
    db.commit()
    return written


#: The outcomes a provider's receipt may move a delivery to, each from the outcomes
#: before it: queued < sending < sent < delivered | failed_terminal. Delivered, failed and
#: suppressed deliveries never change again (delivered never returns to sent).
RECEIPT_FORWARD_FROM: dict[Outcome, frozenset[str]] = {
    Outcome.SENT: frozenset({Outcome.QUEUED.value, Outcome.SENDING.value}),
    Outcome.DELIVERED: frozenset({Outcome.QUEUED.value, Outcome.SENDING.value,
                                  Outcome.SENT.value}),
    Outcome.FAILED_TERMINAL: frozenset({Outcome.QUEUED.value, Outcome.SENDING.value,
                                        Outcome.SENT.value}),
}


def advance_delivery_from_receipt(session: Session, delivery_id: str, outcome: Outcome, *,
                                  detail: str | None = None) -> bool:
    """Move a delivery forward to the ``outcome`` a provider's receipt reports, in one
    conditional UPDATE; False (nothing written) when that would not be a step forward.

    A ``failed_terminal`` receipt records reason ``provider_undelivered`` and the
    provider's ``detail``. Does not commit: the caller commits it together with the
    receipt's mark (and the webhook messages it writes, docs/api.md#webhooks).
    """
    predecessors = RECEIPT_FORWARD_FROM.get(outcome)
    if predecessors is None:
        raise ValueError(f"a receipt cannot move a delivery to {outcome.value}")
    values: dict[str, Any] = {"outcome": outcome.value, "updated_at": utcnow()}
    if outcome is Outcome.FAILED_TERMINAL:
        values |= {"reason": "provider_undelivered",
                   "last_error": None if detail is None else detail[:500]}
    event = webhooks.DELIVERY_EVENTS[outcome.value]
    if event in webhooks.subscribed_types(session.connection()):
        # its webhook messages in the same transaction, handed to the relay once committed
        written, messages = webhooks.update_with_messages(
            session.connection(),
            update(_deliveries).where(_deliveries.c.id == bindparam("delivery_id"),
                                      _deliveries.c.outcome.in_(sorted(predecessors)))
            .values(**values), {"delivery_id": delivery_id}, event, _deliveries)
        webhooks.hand_off_after_commit(session, messages)
        return written
    result = session.exec(update(Delivery)
                          .where(col(Delivery.id) == delivery_id,
                                 col(Delivery.outcome).in_(sorted(predecessors)))
                          .values(**values))
    return result.rowcount == 1
