"""The webhook relay's hot path in the database (docs/api.md#webhooks): a message read
with its endpoint in one statement, a delivered attempt recorded in one conditional
UPDATE, the endpoint's failing streak ended only when one is open.

Every statement here is a :class:`herald.db.Prepared` one, run on an autocommit
connection (:func:`herald.db.autocommit`): each is atomic by itself, and SQLAlchemy's
ORM and execution layer cost the relay more CPU per message than the database spent on
it (bench/README.md, "Outbound webhooks"). A failed attempt, rare and with more to
decide, is recorded by the relay through the ORM.
"""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any

from sqlalchemy import JSON, Connection, String, bindparam, select, update
from sqlalchemy.ext.compiler import compiles
from sqlalchemy.sql.compiler import SQLCompiler
from sqlalchemy.sql.functions import FunctionElement

from herald.db import Prepared
from models.base import UtcDateTime, table_of
from models.webhooks import MessageStatus, WebhookEndpoint, WebhookMessage

_messages, _endpoints = table_of(WebhookMessage), table_of(WebhookEndpoint)


class _Appended(FunctionElement[Any]):
    """A JSON list column with one more item at its end (the item bound as JSON text),
    computed by the database: the append is atomic with the UPDATE that makes it."""

    type = JSON()
    inherit_cache = True


@compiles(_Appended, "postgresql")
def _appended_postgresql(element: _Appended, compiler: SQLCompiler, **kw: Any) -> str:
    column, item = (compiler.process(clause, **kw) for clause in element.clauses)
    # the column is json (not jsonb), which has no concatenation of its own
    return (f"CAST(CAST({column} AS JSONB) || jsonb_build_array(CAST({item} AS JSONB)) "
            f"AS JSON)")


@compiles(_Appended, "sqlite")
def _appended_sqlite(element: _Appended, compiler: SQLCompiler, **kw: Any) -> str:
    column, item = (compiler.process(clause, **kw) for clause in element.clauses)
    return f"json_insert({column}, '$[#]', json({item}))"


#: A message with what a send needs of its endpoint (no row: the message is gone).
_READ = Prepared(
    select(_messages.c.status, _messages.c.next_attempt_at, _messages.c.body,
           _messages.c.endpoint_id, _endpoints.c.url, _endpoints.c.disabled,
           _endpoints.c.secret, _endpoints.c.previous_secret,
           _endpoints.c.previous_secret_until, _endpoints.c.failing_since)
    .join_from(_messages, _endpoints, _endpoints.c.id == _messages.c.endpoint_id)
    .where(_messages.c.id == bindparam("message_id")))
_STILL_PENDING = (_messages.c.id == bindparam("message_id"),
                  _messages.c.status == MessageStatus.PENDING.value)
_DELIVERED = Prepared(
    update(_messages).where(*_STILL_PENDING)
    .values(status=MessageStatus.DELIVERED.value, next_attempt_at=None,
            attempts=_Appended(_messages.c.attempts, bindparam("attempt", type_=String)))
    .returning(_messages.c.endpoint_id))
_GIVEN_UP = Prepared(update(_messages).where(*_STILL_PENDING)
                     .values(status=MessageStatus.FAILED.value, next_attempt_at=None))
_STREAK_ENDED = Prepared(
    update(_endpoints)
    .where(_endpoints.c.id == bindparam("endpoint_id"), _endpoints.c.failing_since.is_not(None))
    .values(failing_since=None, updated_at=bindparam("now", type_=UtcDateTime)))


def read_message(connection: Connection, message_id: str) -> dict[str, Any] | None:
    """The message's ``status``, ``next_attempt_at``, ``body`` and ``endpoint_id``, with
    its endpoint's ``url``, ``disabled``, secrets and ``failing_since``, as one
    statement saw them; None when the message is gone."""
    return _READ.run(connection, {"message_id": message_id}).first()


def record_delivered(connection: Connection, message_id: str, attempt: dict[str, Any],
                     now: datetime, *, streak_open: bool = True) -> bool:
    """Mark a pending message delivered, ``attempt`` appended to its attempts, and end its
    endpoint's failing streak (``streak_open`` False: the caller saw none, so no statement
    is spent on it). False, and nothing written, when the message was no longer pending
    (delivered or failed already: it is never attempted again)."""
    ran = _DELIVERED.run(connection, {"message_id": message_id,
                                      "attempt": json.dumps(attempt)})
    row = ran.first()
    if row is None:
        return False
    if streak_open:
        _STREAK_ENDED.run(connection, {"endpoint_id": row["endpoint_id"], "now": now})
    return True


def give_up(connection: Connection, message_id: str) -> bool:
    """Mark a pending message failed without another attempt (its endpoint is disabled);
    False when it was no longer pending."""
    return _GIVEN_UP.run(connection, {"message_id": message_id}).rowcount == 1
