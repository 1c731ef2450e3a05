"""Column helpers every table shares: UTC timestamps and UUID-string primary keys.

Timestamps are always timezone-aware UTC in Python, whatever the database stores
(SQLite has no time zones; :class:`UtcDateTime` puts UTC back on the way out).
"""

from __future__ import annotations

import uuid
from datetime import UTC, datetime
from typing import Any, TypeVar

from sqlalchemy import DateTime
from sqlalchemy.engine import Dialect
from sqlalchemy.orm import configure_mappers
from sqlalchemy.types import TypeDecorator
from sqlmodel import Field, SQLModel

M = TypeVar("M", bound=SQLModel)

#: Length of a UUID rendered as text (``8-4-4-4-12``).
ID_LENGTH = 36


def utcnow() -> datetime:
    """The current time, timezone-aware, in UTC."""
    return datetime.now(UTC)


def new_id() -> str:
    """A fresh random UUID as a 36-character string (the default primary key)."""
    return str(uuid.uuid4())


class UtcDateTime(TypeDecorator[datetime]):
    """``TIMESTAMP WITH TIME ZONE`` that always yields aware UTC datetimes.

    A naive value written is taken to be UTC already; an aware one is converted.
    """

    impl = DateTime(timezone=True)
    cache_ok = True

    def process_bind_param(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        if value.tzinfo is None:
            return value.replace(tzinfo=UTC)
        return value.astimezone(UTC)

    def process_result_value(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        if value.tzinfo is None:
            return value.replace(tzinfo=UTC)
        return value.astimezone(UTC)


def snapshot(model: type[M], **values: Any) -> M:
    """A table model instance holding ``values``, to read, never to add to a session.

    Built without the ORM's attribute events, far cheaper than the constructor: for rows a
    hot path inserts itself and hands back.
    """
    configure_mappers()  # attribute reads need configured mappers; a no-op once they are
    return model.model_construct(**values)


def id_field() -> Any:
    """A UUID-string primary key column filled in by Python on construction."""
    return Field(default_factory=new_id, primary_key=True, max_length=ID_LENGTH)


def timestamp_field(*, index: bool = False) -> Any:
    """A non-null UTC timestamp column that defaults to :func:`utcnow`."""
    return Field(default_factory=utcnow, sa_type=UtcDateTime, nullable=False, index=index)
