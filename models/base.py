"""Column helpers every table shares: UTC timestamps and UUID-string primary keys.

Timestamps are always timezone-aware UTC in Python, whatever the database stores
(SQLite has no time zones; :class:`UtcDateTime` puts UTC back on the way out).
"""

from __future__ import annotations

import functools
import operator
import os
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any, TypeVar

from sqlalchemy import DateTime, Table
from sqlalchemy.engine import Dialect
from sqlalchemy.orm import configure_mappers
from sqlalchemy.types import TypeDecorator
from sqlmodel import Field, SQLModel

from herald.queue import now_ms
from models.pydantic_internals import construct, field_values

M = TypeVar("M", bound=SQLModel)

#: Length of a UUID rendered as text (``8-4-4-4-12``).
ID_LENGTH = 36


def utcnow() -> datetime:
    """The current time, timezone-aware, in UTC."""
    return datetime.now(UTC)


def queue_now() -> datetime:
    """Now in queue time (:func:`herald.queue.now_ms`, docs/queue.md#queue-time): the
    clock a job's delay is counted on. What is decided and delayed on it (a quiet-hours
    hold, a webhook's next attempt) follows a test that moves it; it is the wall clock
    in every herald process."""
    return datetime.fromtimestamp(now_ms() / 1000, UTC)


#: Random bytes each thread draws at once for :func:`new_id`, 10 per id.
_RANDOM_POOL_BYTES = 10 * 256
#: The UUID variant digit (RFC 9562: 10xx) for each hexadecimal digit drawn.
_VARIANT = {digit: "89ab"[int(digit, 16) & 3] for digit in "0123456789abcdef"}


class _RandomPool(threading.local):
    """A thread's reserve of random bytes from ``os.urandom`` (as hexadecimal digits), and
    the id prefix of the current millisecond."""

    def __init__(self) -> None:
        self.digits = ""
        self.offset = 0
        self.ms = -1
        self.prefix = ""


_pool = _RandomPool()


def _fresh_pool() -> None:
    # a forked child must never hand out the ids its parent still holds in reserve
    global _pool
    _pool = _RandomPool()


os.register_at_fork(after_in_child=_fresh_pool)


def new_id() -> str:
    """A fresh UUID version 7 as a 36-character string (the default primary key): the
    creation time in milliseconds, then 74 random bits.

    Ids made later sort after those made earlier (within one millisecond, in any order),
    so each new row's key lands at the right edge of its indexes instead of on a random
    page: a fifth less database time per bulk insert already at a quarter of a million
    rows, more as tables grow (bench/README.md, "The HTTP front door"). The randomness is
    the operating system's, taken 256 ids at a time: a system call per id releases and
    takes back the interpreter lock, which under load costs far more than the call.
    """
    pool = _pool
    if pool.offset >= len(pool.digits):
        pool.digits, pool.offset = os.urandom(_RANDOM_POOL_BYTES).hex(), 0
    at = pool.offset
    pool.offset = at + 20
    ms = time.time_ns() // 1_000_000
    if ms != pool.ms:
        stamp = f"{ms:012x}"
        pool.ms, pool.prefix = ms, f"{stamp[:8]}-{stamp[8:]}-7"  # version 7
    digits = pool.digits
    return (f"{pool.prefix}{digits[at:at + 3]}-{_VARIANT[digits[at + 3]]}"
            f"{digits[at + 4:at + 7]}-{digits[at + 7:at + 19]}")


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


class FieldReader:
    """Reads fixed fields of table-model instances, as a tuple, straight from their loaded
    values (:func:`models.pydantic_internals.field_values`): the ORM's attribute reads
    cost more than the rest of a bulk request's handling of a row. A field not loaded (an
    expired attribute) is read through the ORM."""

    def __init__(self, *names: str) -> None:
        if len(names) < 2:  # one name would make itemgetter answer a value, not a tuple
            raise ValueError("read two fields or more")
        self.names = names
        self._pick = operator.itemgetter(*names)

    def __call__(self, row: SQLModel) -> tuple[Any, ...]:
        """The fields' values, in the order they were named."""
        try:
            return self._pick(field_values(row))  # type: ignore[no-any-return]  # 2+ names: a tuple
        except KeyError:
            return tuple(getattr(row, name) for name in self.names)


@functools.cache
def table_reader(table: Any) -> FieldReader:
    """A reader of all of ``table``'s columns, in the table's column order (one per
    table)."""
    return FieldReader(*(column.key for column in table.columns))


def snapshot(model: type[M], **values: Any) -> M:
    """A table model instance holding ``values``, to read, never to add to a session.

    Built without the ORM's attribute events, far cheaper than the constructor: for rows a
    hot path inserts itself and hands back.
    """
    constants, factories = _defaults(model)
    given = set(values)
    fields = constants.copy()
    fields.update(values)
    for name, factory in factories:
        if name not in values:
            fields[name] = factory()
    # what pydantic's model_construct does, less its per-field alias look-ups: a third of
    # the time, for a bulk request's thousands of rows
    return construct(model, fields, given)


@functools.cache
def _defaults(model: type[SQLModel]) -> tuple[dict[str, Any],
                                              list[tuple[str, Callable[[], Any]]]]:
    """The model's optional fields: those with a fixed default (``{field: default}``), and
    those with a default factory (``(field, factory)``). Configures the mappers first,
    once: the instances :func:`snapshot` builds are read through them."""
    if not model.__mapper__.configured:  # type: ignore[attr-defined]  # SQLModel sets it, untyped
        configure_mappers()
    optional = {name: field for name, field in model.model_fields.items()
                if not field.is_required()}
    return ({name: field.default for name, field in optional.items()
             if field.default_factory is None},
            [(name, field.default_factory)  # type: ignore[misc]  # ours take no argument
             for name, field in optional.items() if field.default_factory is not None])


def table_of(model: type[SQLModel]) -> Table:
    """The Core table SQLModel made for the table model ``model``."""
    table: Table = model.__table__  # type: ignore[attr-defined]  # SQLModel sets it, untyped
    return table


def id_field() -> Any:
    """A UUID-string primary key column filled in by Python on construction."""
    return Field(default_factory=new_id, primary_key=True, max_length=ID_LENGTH)


def timestamp_field(*, index: bool = False) -> Any:
    """A non-null UTC timestamp column that defaults to :func:`utcnow`."""
    return Field(default_factory=utcnow, sa_type=UtcDateTime, nullable=False, index=index)


def money(amount: Decimal) -> str:
    """An amount as the API writes it: a decimal string with at least 2 places (``50.00``,
    ``12.3456``), never an exponent. The console writes amounts with it too."""
    text = format(amount.normalize(), "f")
    whole, _, places = text.partition(".")
    return f"{whole}.{places.ljust(2, '0')}"
