"""Digest buckets and their items (docs/api.md#digests, docs/pipeline.md#digests), with
the helpers that guard every change of a bucket.

A bucket collects the events of one account, one digested type and one key until it
closes. At most one bucket per (account, type, key) is open: a partial unique index, which
the event's upsert (:func:`join_bucket`) lands on, so concurrent events of the same key
join one bucket. An item is one accepted event; its (account, type, occurrence) is unique
for good, as a notification's is. A bucket closes once: :func:`close_bucket` is the one
conditional UPDATE ``open → closed`` every closer goes through.

Every helper runs on the caller's connection, inside its transaction: the bucket, its
item and the message the close makes land together or not at all.
"""

from __future__ import annotations

import dataclasses
from datetime import datetime
from enum import StrEnum
from typing import Any

from sqlalchemy import (
    JSON,
    Connection,
    Index,
    UniqueConstraint,
    insert,
    select,
    text,
    update,
)
from sqlalchemy.dialects import postgresql, sqlite
from sqlmodel import Field, SQLModel

from models.base import UtcDateTime, id_field, new_id, table_of, timestamp_field


class DigestMode(StrEnum):
    """How a digested type's events are sent."""

    #: Every event of the window waits for the bucket's close: one message.
    COLLECT = "collect"
    #: The event that opens a bucket is sent at once; the repeats of its window wait for
    #: the close (none: nothing more is sent).
    LOOKBACK = "lookback"


class BucketStatus(StrEnum):
    """A bucket's state."""

    #: Events of its key join it.
    OPEN = "open"
    #: Its message is made (or it had nothing to send); it never changes again.
    CLOSED = "closed"


_OPEN = f"status = '{BucketStatus.OPEN.value}'"


class DigestBucket(SQLModel, table=True):
    """The events of one account, type and key within one window."""

    __tablename__ = "digest_buckets"
    # one open bucket per key (the upsert's conflict target); the sweep reads open
    # buckets by their close time
    __table_args__ = (Index("uq_digest_buckets_open", "account_id", "type", "key", unique=True,
                            postgresql_where=text(_OPEN), sqlite_where=text(_OPEN)),
                      Index("ix_digest_buckets_due", "closes_at",
                            postgresql_where=text(_OPEN), sqlite_where=text(_OPEN)))

    id: str = id_field()
    account_id: str = Field(foreign_key="accounts.id", max_length=36)
    type: str = Field(max_length=64)
    #: ``account``, or ``<field>=<value>`` for a type digested by a data field.
    key: str = Field(max_length=255)
    mode: str = Field(max_length=16)
    status: str = Field(default=BucketStatus.OPEN.value, max_length=16)
    opened_at: datetime = timestamp_field()
    closes_at: datetime = timestamp_field()
    #: Events that joined it (the one a lookback bucket sent at once included).
    item_count: int = 1
    closed_at: datetime | None = Field(default=None, sa_type=UtcDateTime, nullable=True)
    #: The message its close made (None: open, or closed with nothing to send).
    notification_id: str | None = Field(default=None, max_length=36)


class DigestItem(SQLModel, table=True):
    """One accepted event of a digested type."""

    __tablename__ = "digest_items"
    __table_args__ = (UniqueConstraint("account_id", "type", "occurrence",
                                       name="uq_digest_items_occurrence"),)

    id: str = id_field()
    bucket_id: str = Field(foreign_key="digest_buckets.id", max_length=36, index=True)
    account_id: str = Field(max_length=36)
    type: str = Field(max_length=64)
    occurrence: str = Field(max_length=255)
    data: dict[str, Any] = Field(default_factory=dict, sa_type=JSON)
    at: datetime = timestamp_field()
    #: Sent at once as the message of its own (lookback's first event): not in the
    #: bucket's message.
    sent_at_once: bool = False


_buckets, _items = table_of(DigestBucket), table_of(DigestItem)


@dataclasses.dataclass(frozen=True, kw_only=True)
class Joined:
    """The bucket an event joined: its id, close time and events so far; ``opened``
    when this event opened it."""

    id: str
    closes_at: datetime
    item_count: int
    opened: bool


def join_bucket(connection: Connection, *, account_id: str, type_name: str, key: str,
                mode: DigestMode, now: datetime, closes_at: datetime) -> Joined:
    """Open the key's bucket, or count one event more in the one that is open, in one
    upsert on the open-bucket index: of two concurrent events, one opens it and the other
    joins. Raises IntegrityError when the account does not exist."""
    proposed = new_id()
    dialect = postgresql if connection.dialect.name == "postgresql" else sqlite
    statement = (dialect.insert(_buckets)
                 .values(id=proposed, account_id=account_id, type=type_name, key=key,
                         mode=mode.value, status=BucketStatus.OPEN.value, opened_at=now,
                         closes_at=closes_at, item_count=1)
                 .on_conflict_do_update(index_elements=["account_id", "type", "key"],
                                        index_where=text(_OPEN),
                                        set_={"item_count": _buckets.c.item_count + 1})
                 .returning(_buckets.c.id, _buckets.c.closes_at, _buckets.c.item_count))
    row = connection.execute(statement).one()
    return Joined(id=row.id, closes_at=row.closes_at, item_count=row.item_count,
                  opened=row.id == proposed)


def add_item(connection: Connection, *, bucket_id: str, account_id: str, type_name: str,
             occurrence: str, data: dict[str, Any], at: datetime,
             sent_at_once: bool = False) -> None:
    """Insert an event's item; IntegrityError when its occurrence was accepted before
    (the caller's transaction, bucket count included, is then rolled back)."""
    connection.execute(insert(_items).values(
        id=new_id(), bucket_id=bucket_id, account_id=account_id, type=type_name,
        occurrence=occurrence, data=data, at=at, sent_at_once=sent_at_once))


def find_item(connection: Connection, account_id: str, type_name: str,
              occurrence: str) -> tuple[DigestItem, DigestBucket] | None:
    """The item of this occurrence and its bucket, or None."""
    row = connection.execute(
        select(_items, *[c.label(f"bucket__{c.key}") for c in _buckets.c])
        .join(_buckets, _buckets.c.id == _items.c.bucket_id)
        .where(_items.c.account_id == account_id, _items.c.type == type_name,
               _items.c.occurrence == occurrence)).mappings().first()
    if row is None:
        return None
    item = DigestItem.model_validate({c.key: row[c.key] for c in _items.c})
    bucket = DigestBucket.model_validate({c.key: row[f"bucket__{c.key}"] for c in _buckets.c})
    return item, bucket


@dataclasses.dataclass(frozen=True, kw_only=True)
class Closed:
    """A bucket this close moved to ``closed``: whose it is, and the items its message
    carries (oldest first; empty: nothing to send)."""

    id: str
    account_id: str
    type: str
    items: list[DigestItem]


def close_bucket(connection: Connection, bucket_id: str, now: datetime) -> Closed | None:
    """Move an open bucket to ``closed`` in one conditional UPDATE and read the items its
    message carries; None when it was closed already (or never existed). Of any number of
    closers, exactly one gets the bucket; the row lock it takes waits for any event
    still joining, so every item that joined is read."""
    row = connection.execute(
        update(_buckets)
        .where(_buckets.c.id == bucket_id, _buckets.c.status == BucketStatus.OPEN.value)
        .values(status=BucketStatus.CLOSED.value, closed_at=now)
        .returning(_buckets.c.account_id, _buckets.c.type)).first()
    if row is None:
        return None
    items = [DigestItem.model_validate(dict(item)) for item in connection.execute(
        select(_items).where(_items.c.bucket_id == bucket_id, _items.c.sent_at_once.is_(False))
        .order_by(_items.c.at, _items.c.id)).mappings()]
    return Closed(id=bucket_id, account_id=row.account_id, type=row.type, items=items)


def record_message(connection: Connection, bucket_id: str, notification_id: str) -> None:
    """Note on a closed bucket the message its close made."""
    connection.execute(update(_buckets).where(_buckets.c.id == bucket_id)
                       .values(notification_id=notification_id))


def due_buckets(connection: Connection, now: datetime, limit: int) -> list[str]:
    """Open buckets whose close time has passed, earliest first, at most ``limit``."""
    return list(connection.execute(
        select(_buckets.c.id)
        .where(_buckets.c.status == BucketStatus.OPEN.value, _buckets.c.closes_at <= now)
        .order_by(_buckets.c.closes_at).limit(limit)).scalars())
