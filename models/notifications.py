"""Accounts, notifications and their per-channel deliveries, with the helpers that guard
every state change of a delivery (docs/state-machines.md#deliveries).

A delivery's ``claimed_at`` is the fencing token: an attempt claims the row by writing it,
and every later write of that attempt is conditional on it being unchanged, so an old
attempt can never overwrite a newer result.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import math
from datetime import datetime, timedelta
from enum import StrEnum
from typing import Any

import orjson
from sqlalchemy import (
    JSON,
    ColumnElement,
    Connection,
    Index,
    Insert,
    String,
    UniqueConstraint,
    and_,
    bindparam,
    insert,
    literal_column,
    not_,
    or_,
    text,
    update,
)
from sqlalchemy import column as result_column
from sqlalchemy.engine import Dialect
from sqlmodel import Field, Session, SQLModel, col, select

from herald.db import Prepared, autocommit, get_engine, is_postgres
from models.base import (
    FieldReader,
    UtcDateTime,
    id_field,
    snapshot,
    table_of,
    timestamp_field,
    utcnow,
)

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


#: The one order of a notification's deliveries in every answer (the 202 of an event and
#: every later read): the channels' order above.
CHANNEL_ORDER = {channel.value: rank for rank, channel in enumerate(Channel)}


def in_channel_order(deliveries: list[Delivery]) -> list[Delivery]:
    """``deliveries`` in :data:`CHANNEL_ORDER`, as an event's 202 lists them."""
    return sorted(deliveries, key=lambda d: CHANNEL_ORDER.get(d.channel, len(CHANNEL_ORDER)))


def _in_app_gate(account_id: str, transactional: str) -> str:
    """SQL: why the gates block an in-app delivery of ``account_id``'s notification (its
    ``transactional`` flag), else NULL. In-app has no channel job, so its gates are
    settled in the statement that persists it (no round trip more); they are the first
    two of the channel workers' (:func:`actors.notifications.gate`): an inactive account,
    then a non-transactional notification to an account that opted out."""
    return (f"(SELECT CASE WHEN NOT gated.active THEN '{SuppressionReason.INACTIVE.value}' "
            f"WHEN gated.marketing_opt_out AND NOT {transactional} "
            f"THEN '{SuppressionReason.OPTED_OUT.value}' END "
            f"FROM accounts AS gated WHERE gated.id = {account_id})")


#: The in-app gate of the notification an INSERT INTO notifications … RETURNING returns.
_IN_APP_GATE = _in_app_gate("notifications.account_id", "notifications.transactional")


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
    _accounts.c.active, _accounts.c.marketing_opt_out, _accounts.c.email, _accounts.c.phone,
    _accounts.c.push_subscription_id, _accounts.c.locale)


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
_CLAIM_VALUES = {"outcome": Outcome.SENDING.value,
                 "claimed_at": bindparam("now", type_=UtcDateTime),
                 "updated_at": bindparam("now", type_=UtcDateTime)}
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
    table = table_of(type(record))
    return dict(zip(_bound_names(table, suffix), _column_reader(table)(record), strict=True))


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
    row's outcome and reason; the deliveries' ids, outcomes and reasons are returned.
    Built once per shape."""
    notification = insert(_notifications).values(_bound_row(_notifications))
    if in_app is not None:
        notification = notification.returning(literal_column(_IN_APP_GATE).label("gate"))
    if not together:
        return Prepared(notification)
    rows = [_bound_row(_deliveries, f"_{i}") for i in range(deliveries)]
    if in_app is not None:
        gate = "(SELECT gate FROM notification)"
        rows[in_app] |= {
            "outcome": literal_column(f"CASE WHEN {gate} IS NULL THEN "
                                      f"'{Outcome.DELIVERED.value}' ELSE "
                                      f"'{Outcome.SUPPRESSED.value}' END", String),
            "reason": literal_column(gate, String)}
    statement = insert(_deliveries).values(rows).add_cte(notification.cte("notification"))
    if in_app is not None:
        statement = statement.returning(_deliveries.c.id, _deliveries.c.reason)
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
    inactive account's, or an opted-out account's non-transactional one, is persisted
    ``suppressed`` with its reason, and so updated in ``deliveries``. On PostgreSQL one
    statement on an autocommit connection (no BEGIN/COMMIT round trips); elsewhere two in
    a transaction. Raises IntegrityError, persisting nothing, when the (account, type,
    occurrence) key exists already or the account does not exist (its foreign key).
    """
    params = _row(notification)
    for i, delivery in enumerate(deliveries):
        params |= _row(delivery, f"_{i}")
    in_app = _in_app_index(deliveries)
    if deliveries and is_postgres():
        with autocommit() as connection:
            ran = _insert_notification(len(deliveries), together=True,
                                       in_app=in_app).run(connection, params)
        if in_app is not None:
            reasons = {row["id"]: row["reason"] for row in ran.rows}
            _suppress_gated(deliveries, {notification.id: reasons.get(deliveries[in_app].id)})
        return
    with get_engine().begin() as connection:
        ran = _insert_notification(len(deliveries), together=False,
                                   in_app=in_app).run(connection, params)
        if in_app is not None:
            gated = ran.first()
            _suppress_gated(deliveries, {notification.id: gated["gate"] if gated else None})
            params |= _row(deliveries[in_app], f"_{in_app}")
        if deliveries:
            _insert_deliveries(len(deliveries)).run(connection, params)


# -- many notifications at once (POST /v1/events/bulk, docs/pipeline.md#bulk-events) -------
# However many rows, each statement's text is the same, so it is compiled once: the rows
# travel as JSON arrays, one per column on PostgreSQL (zipped back by ROWS FROM), one of
# rows on SQLite (json_each). A multi-row VALUES list with a bind per value is a new
# statement for every row count (compiling one of 3,000 deliveries costs SQLAlchemy over a
# second); PostgreSQL arrays as parameters cost psycopg more, per element, than the JSON
# encoder, and a JSON array of objects (json_populate_recordset) costs PostgreSQL twice as
# much as these. On PostgreSQL ids are matched with ``= ANY(ARRAY(…))``, which the primary
# key's index serves.
Key = tuple[str, str, str]


def storable(value: Any) -> bool:
    """True when every text in ``value`` (a JSON-like value, at any depth) can be stored:
    no NUL character (PostgreSQL refuses it), no lone surrogate (not UTF-8), no NaN or
    infinity (not JSON). One such value must not fail the statement of a whole batch."""
    if isinstance(value, str):
        return "\x00" not in value and (value.isascii() or _utf8(value))
    if isinstance(value, float):
        return math.isfinite(value)
    if isinstance(value, dict):
        return all(storable(key) and storable(inner) for key, inner in value.items())
    if isinstance(value, list | tuple):
        return all(storable(inner) for inner in value)
    return True


def _utf8(text_: str) -> bool:
    try:
        text_.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _values(records: list[Notification] | list[Delivery]) -> list[tuple[Any, ...]]:
    """Each record's column values, in the table's column order."""
    read = _column_reader(_table(records))
    return [read(record) for record in records]


@functools.cache
def _column_reader(table: Any) -> FieldReader:
    return FieldReader(*(column.key for column in table.columns))


def _table(records: list[Notification] | list[Delivery]) -> Any:
    return table_of(type(records[0]))


def _pg_columns(records: list[Notification] | list[Delivery], prefix: str) -> dict[str, str]:
    """The records as one JSON array per column, bound as ``<prefix>_<column>``."""
    table = _table(records)
    columns = zip(*_values(records), strict=True)
    return {f"{prefix}_{column.key}": _json_array(column, values)
            for column, values in zip(table.columns, columns, strict=True)}


def _json_array(column: Any, values: tuple[Any, ...]) -> str:
    if isinstance(column.type, JSON):  # events' data: NaN refused, as the json module does
        return json.dumps(list(values), default=_iso, ensure_ascii=False, allow_nan=False)
    # ids, texts, flags and timestamps (ISO 8601, as isoformat writes them) at a tenth of
    # the json module's cost
    return orjson.dumps(values).decode()


def _iso(value: Any) -> str:
    if isinstance(value, datetime):
        return value.isoformat()
    raise TypeError(f"{type(value).__name__} is not JSON")


def _sqlite_json(records: list[Notification] | list[Delivery], dialect: Any) -> str:
    """The records as one JSON array of rows (arrays in column order), each value in the
    form SQLite stores it (the column type's bind processor: timestamps as SQLite's
    text, JSON columns as JSON)."""
    writers = [None if isinstance(column.type, JSON)
               else column.type.dialect_impl(dialect).bind_processor(dialect)
               for column in _table(records).columns]
    rows = [[value if write is None else write(value)
             for write, value in zip(writers, row, strict=True)] for row in _values(records)]
    return json.dumps(rows, ensure_ascii=False, allow_nan=False, separators=(",", ":"))


def _pg_rows(table: Any, prefix: str, dialect: Any,
             overrides: dict[str, str] | None = None) -> tuple[str, str, str]:
    """``(columns, the SELECT list, the FROM item)`` reading the rows of ``table`` back
    from the JSON arrays :func:`_pg_columns` binds, each value cast to its column's type
    (texts stay text and JSON stays JSON: the INSERT converts them); a column of
    ``overrides`` is selected as the SQL given there instead."""
    functions, values = [], []
    for column in table.columns:
        json_column = isinstance(column.type, JSON)
        function = "json_array_elements" if json_column else "json_array_elements_text"
        functions.append(f"{function}(CAST(:{prefix}_{column.key} AS json))")
        value = f"{prefix}.{dialect.identifier_preparer.quote(column.key)}"
        # texts stay text: the INSERT's own conversion to VARCHAR(n) refuses a longer
        # one, where a CAST would cut it short without a word
        text_column = isinstance(getattr(column.type, "impl", column.type), String)
        if overrides and column.key in overrides:
            values.append(overrides[column.key])
            continue
        values.append(value if json_column or text_column
                      else f"CAST({value} AS {column.type.compile(dialect=dialect)})")
    names = _columns(table, dialect)
    return names, ", ".join(values), f"ROWS FROM ({', '.join(functions)}) AS {prefix}({names})"


def _columns(table: Any, dialect: Any, prefix: str = "") -> str:
    return ", ".join(prefix + dialect.identifier_preparer.quote(c.key) for c in table.columns)


def _sqlite_rows(table: Any, dialect: Any) -> tuple[str, str]:
    """``(columns, the SELECT list)`` reading the rows of a ``json_each`` of
    :func:`_sqlite_json` back into ``table``'s columns (an object column stays JSON text,
    as SQLAlchemy stores it)."""
    values = ", ".join(f"json_extract(value, '$[{i}]')" for i in range(len(table.columns)))
    return _columns(table, dialect), values


@functools.cache
def _bulk_statements(dialect_name: str) -> dict[str, Any]:
    """The bulk statements of one dialect, built once: ``persist`` (PostgreSQL: the
    notifications and their deliveries in one statement), ``notifications`` and
    ``deliveries`` (SQLite: the two INSERTs of one transaction) and ``stamp`` (the
    handoff stamp of many deliveries)."""
    from sqlalchemy.dialects import postgresql, sqlite

    now = bindparam("now", type_=UtcDateTime)
    if dialect_name == "postgresql":
        dialect: Dialect = postgresql.dialect()  # type: ignore[no-untyped-call]  # untyped class
        n_cols, n_values, notifications = _pg_rows(_notifications, "n", dialect)
        # an in-app delivery (the only ones built delivered) passes its notification's
        # gate here: that is its one chance (it has no channel job)
        in_app = f"d.outcome = '{Outcome.DELIVERED.value}'"
        d_cols, d_values, deliveries = _pg_rows(_deliveries, "d", dialect, overrides={
            "outcome": f"CASE WHEN {in_app} AND notification.gate IS NOT NULL "
                       f"THEN '{Outcome.SUPPRESSED.value}' ELSE d.outcome END",
            "reason": f"CASE WHEN {in_app} THEN notification.gate ELSE d.reason END"})
        # the EXISTS leaves out a notification of an unknown account rather than fail the
        # batch on its foreign key; deliveries of a notification left out go with it
        persist = text(f"""
            WITH notification AS (
                INSERT INTO notifications ({n_cols})
                SELECT {n_values} FROM {notifications}
                WHERE EXISTS (SELECT 1 FROM accounts WHERE accounts.id = n.account_id)
                ON CONFLICT (account_id, type, occurrence) DO NOTHING
                RETURNING id, {_IN_APP_GATE} AS gate),
            delivery AS (
                INSERT INTO deliveries ({d_cols})
                SELECT {d_values} FROM {deliveries}
                JOIN notification ON notification.id = d.notification_id)
            SELECT id, gate FROM notification""")
        ids = "ANY(ARRAY(SELECT json_array_elements_text(CAST(:ids AS json))))"
        return {
            "persist": persist.columns(result_column("id", String),
                                       result_column("gate", String)),
            "stamp": text(f"UPDATE deliveries SET queued_at = :now WHERE id = {ids}")
            .bindparams(now),
            "find": _typed(f"""
                SELECT {_columns(_notifications, dialect, "n.")} FROM notifications AS n
                JOIN ROWS FROM (json_array_elements_text(CAST(:account_ids AS json)),
                                json_array_elements_text(CAST(:types AS json)),
                                json_array_elements_text(CAST(:occurrences AS json)))
                    AS k(account_id, type, occurrence)
                ON n.account_id = k.account_id AND n.type = k.type
                   AND n.occurrence = k.occurrence""", _notifications),
            "deliveries_of": _typed(f"SELECT {_columns(_deliveries, dialect)} FROM deliveries "
                                    f"WHERE notification_id = {ids}", _deliveries),
        }
    dialect = sqlite.dialect()
    n_cols, n_values = _sqlite_rows(_notifications, dialect)
    d_cols, d_values = _sqlite_rows(_deliveries, dialect)
    account = list(_notifications.columns).index(_notifications.c.account_id)
    ids = "IN (SELECT value FROM json_each(:ids))"
    # the WHERE also settles SQLite's parse of INSERT … SELECT … ON CONFLICT
    insert_notifications = text(f"""
        INSERT INTO notifications ({n_cols})
        SELECT {n_values} FROM json_each(:notifications)
        WHERE EXISTS (SELECT 1 FROM accounts
                      WHERE accounts.id = json_extract(value, '$[{account}]'))
        ON CONFLICT (account_id, type, occurrence) DO NOTHING
        RETURNING id, {_IN_APP_GATE} AS gate""")
    return {
        "notifications": insert_notifications.columns(result_column("id", String),
                                                      result_column("gate", String)),
        "deliveries": text(f"INSERT INTO deliveries ({d_cols}) "
                           f"SELECT {d_values} FROM json_each(:deliveries)"),
        "stamp": text(f"UPDATE deliveries SET queued_at = :now WHERE id {ids}")
        .bindparams(now),
        "find": _typed(f"""
            SELECT {_columns(_notifications, dialect, "n.")} FROM json_each(:keys) AS k
            JOIN notifications AS n ON n.account_id = json_extract(k.value, '$[0]')
                AND n.type = json_extract(k.value, '$[1]')
                AND n.occurrence = json_extract(k.value, '$[2]')""", _notifications),
        "deliveries_of": _typed(f"SELECT {_columns(_deliveries, dialect)} FROM deliveries "
                                f"WHERE notification_id {ids}", _deliveries),
    }


def _typed(sql: str, table: Any) -> Any:
    """``sql``, a SELECT of ``table``'s columns, read back through their types."""
    return text(sql).columns(*(result_column(c.key, c.type) for c in table.columns))


def persist_new_notifications(notifications: list[Notification],
                              deliveries: list[Delivery]) -> set[str]:
    """Insert the notifications whose (account, type, occurrence) key is free, each with
    its deliveries, and commit them; returns the ids of those inserted.

    A notification whose key exists already (or appears earlier in the list), or whose
    account does not exist, is left out with its deliveries: never an error, so one event
    never fails the others. An in-app delivery passes its notification's gates as it is
    inserted (:func:`persist_notification`), and a blocked one is updated in
    ``deliveries``. What is inserted lands whole: on PostgreSQL one statement on an
    autocommit connection, elsewhere two in one transaction. Every text must be
    :func:`storable`.
    """
    if not notifications:
        return set()
    engine = get_engine()
    statements = _bulk_statements(engine.dialect.name)
    if engine.dialect.name == "postgresql":
        params = _pg_columns(notifications, "n")
        params |= (_pg_columns(deliveries, "d") if deliveries
                   else {f"d_{c.key}": "[]" for c in _deliveries.columns})
        with autocommit() as connection:
            gates = {id_: gate for id_, gate in connection.execute(statements["persist"],
                                                                   params)}
        _suppress_gated(deliveries, gates)
        return set(gates)
    with engine.begin() as connection:
        gates = {id_: gate for id_, gate in connection.execute(statements["notifications"], {
            "notifications": _sqlite_json(notifications, engine.dialect)})}
        kept = [d for d in deliveries if d.notification_id in gates]
        _suppress_gated(kept, gates)
        if kept:
            connection.execute(statements["deliveries"],
                               {"deliveries": _sqlite_json(kept, engine.dialect)})
    return set(gates)


def _suppress_gated(deliveries: list[Delivery], gates: dict[str, str | None]) -> None:
    """Record on each in-app delivery the gate its notification's ``gates`` entry names
    (none for most)."""
    if any(gates.values()):
        for delivery in deliveries:
            if delivery.channel == Channel.IN_APP.value:
                reason = gates.get(delivery.notification_id)
                if reason:
                    delivery.__dict__.update(outcome=Outcome.SUPPRESSED.value, reason=reason)


def find_occurrences(keys: list[Key]) -> dict[Key, tuple[Notification, list[Delivery]]]:
    """The notifications of these (account, type, occurrence) keys that exist, each with
    its deliveries :func:`in_channel_order`: one SELECT for the notifications, one for
    their deliveries."""
    if not keys:
        return {}
    with get_engine().connect() as connection:
        statements = _bulk_statements(connection.dialect.name)
        params = ({"account_ids": json.dumps([k[0] for k in keys]),
                   "types": json.dumps([k[1] for k in keys]),
                   "occurrences": json.dumps([k[2] for k in keys])}
                  if connection.dialect.name == "postgresql" else {"keys": json.dumps(keys)})
        found = [snapshot(Notification, **row)
                 for row in connection.execute(statements["find"], params).mappings()]
        if not found:
            return {}
        deliveries: dict[str, list[Delivery]] = {n.id: [] for n in found}
        for row in connection.execute(statements["deliveries_of"],
                                      {"ids": json.dumps(list(deliveries))}).mappings():
            deliveries[row["notification_id"]].append(snapshot(Delivery, **row))
    return {(n.account_id, n.type, n.occurrence): (n, in_channel_order(deliveries[n.id]))
            for n in found}


def stamp_many_handoffs(delivery_ids: list[str], *, now: datetime | None = None) -> None:
    """Write the handoff stamp (``queued_at``) of these deliveries in one UPDATE (any
    number of them), committed as it runs; outcome and claim are left as they are."""
    if not delivery_ids:
        return
    with autocommit() as connection:
        statement = _bulk_statements(connection.dialect.name)["stamp"]
        connection.execute(statement, {"ids": json.dumps(delivery_ids),
                                       "now": now or utcnow()})

@functools.cache
def _outcome_update(columns: tuple[str, ...], *, fenced: bool, count_attempt: bool,
                    release_claim: bool) -> Prepared:
    """The fenced outcome UPDATE that sets ``columns`` (bound as ``new_<column>``), built
    once per shape: never over a final outcome, and only under this claim when fenced."""
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
    return Prepared(update(_deliveries).where(*condition).values(values))


def record_delivery_outcome(db: Db, delivery_id: str, *, token: datetime | None,
                            outcome: Outcome, reason: str | None = None,
                            provider: str | None = None, provider_message_id: str | None = None,
                            error: str | None = None, count_attempt: bool = False,
                            release_claim: bool = False) -> bool:
    """Write an attempt's outcome, fenced by its claim ``token``, in one conditional
    UPDATE; commits.

    Returns False (and changes nothing) when the claim was taken over or the delivery
    already reached a final outcome. ``token=None`` writes without a claim (the queue
    layer's exhausted-restarts hook), still never over a final outcome. Fields left None
    keep their stored value.
    """
    given = {name: value for name, value in (
        ("outcome", outcome.value), ("updated_at", utcnow()), ("reason", reason),
        ("provider", provider), ("provider_message_id", provider_message_id),
        ("last_error", None if error is None else error[:500])) if value is not None}
    statement = _outcome_update(tuple(given), fenced=token is not None,
                                count_attempt=count_attempt, release_claim=release_claim)
    params = {f"new_{name}": value for name, value in given.items()}
    params["delivery_id"] = delivery_id
    if token is not None:
        params["token"] = token
    written = statement.run(_connection(db), params).rowcount == 1
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
    receipt's mark.
    """
    predecessors = RECEIPT_FORWARD_FROM.get(outcome)
    if predecessors is None:
        raise ValueError(f"a receipt cannot move a delivery to {outcome.value}")
    values: dict[str, Any] = {"outcome": outcome.value, "updated_at": utcnow()}
    if outcome is Outcome.FAILED_TERMINAL:
        values |= {"reason": "provider_undelivered",
                   "last_error": None if detail is None else detail[:500]}
    result = session.exec(update(Delivery)
                          .where(col(Delivery.id) == delivery_id,
                                 col(Delivery.outcome).in_(sorted(predecessors)))
                          .values(**values))
    return result.rowcount == 1
