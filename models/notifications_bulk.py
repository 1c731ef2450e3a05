"""Many notifications at once (``POST /v1/events/bulk``, docs/pipeline.md#bulk-events):
persisting them with their deliveries, finding those that exist, stamping their handoffs.

Each runs a fixed number of statements however many rows it is given, with the rows bound
as JSON (:mod:`models.json_rows`); on PostgreSQL ids are matched with ``= ANY(ARRAY(…))``,
which the primary key's index serves. The statements are built once per dialect.
"""

from __future__ import annotations

import functools
import json
import math
from datetime import datetime
from typing import Any

from sqlalchemy import String, bindparam, text
from sqlalchemy import column as result_column
from sqlalchemy.engine import Dialect

from herald.db import autocommit, get_engine
from models.base import UtcDateTime, snapshot, table_of, utcnow
from models.json_rows import (
    column_list,
    postgres_columns,
    postgres_rows,
    sqlite_json,
    sqlite_rows,
    typed_select,
)
from models.notifications import (
    Delivery,
    Notification,
    Outcome,
    gate_reason_sql,
    in_app_gate,
    in_channel_order,
    suppress_gated,
)

#: A notification's unique key: (account id, type, occurrence).
Key = tuple[str, str, str]

_notifications, _deliveries = table_of(Notification), table_of(Delivery)


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


def _statements(dialect_name: str) -> dict[str, Any]:
    """The bulk statements of one dialect, built once: ``persist`` (PostgreSQL: the
    notifications and their deliveries in one statement), ``notifications`` and
    ``deliveries`` (SQLite: the two INSERTs of one transaction), ``stamp`` (the handoff
    stamp of many deliveries), ``find`` and ``deliveries_of`` (notifications by key, and
    their deliveries)."""
    return _postgres_statements() if dialect_name == "postgresql" else _sqlite_statements()


@functools.cache
def _postgres_statements() -> dict[str, Any]:
    """:func:`_statements` on PostgreSQL: the rows as one JSON array per column."""
    from sqlalchemy.dialects import postgresql

    dialect: Dialect = postgresql.dialect()  # type: ignore[no-untyped-call]  # untyped class
    now = bindparam("now", type_=UtcDateTime)
    n_cols, n_values, notifications = postgres_rows(_notifications, "n", dialect)
    # an in-app delivery (the only ones built delivered) passes its notification's
    # gate here: that is its one chance (it has no channel job)
    in_app = f"d.outcome = '{Outcome.DELIVERED.value}'"
    reason, last_error = gate_reason_sql("notification.gate")
    d_cols, d_values, deliveries = postgres_rows(_deliveries, "d", dialect, overrides={
        "outcome": f"CASE WHEN {in_app} AND notification.gate IS NOT NULL "
                   f"THEN '{Outcome.SUPPRESSED.value}' ELSE d.outcome END",
        "reason": f"CASE WHEN {in_app} THEN {reason} ELSE d.reason END",
        "last_error": f"CASE WHEN {in_app} THEN {last_error} ELSE d.last_error END"})
    # the EXISTS leaves out a notification of an unknown account rather than fail the
    # batch on its foreign key; deliveries of a notification left out go with it
    persist = text(f"""
        WITH notification AS (
            INSERT INTO notifications ({n_cols})
            SELECT {n_values} FROM {notifications}
            WHERE EXISTS (SELECT 1 FROM accounts WHERE accounts.id = n.account_id)
            ON CONFLICT (account_id, type, occurrence) DO NOTHING
            RETURNING id, {in_app_gate(postgres=True)} AS gate),
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
        "find": typed_select(f"""
            SELECT {column_list(_notifications, dialect, "n.")} FROM notifications AS n
            JOIN ROWS FROM (json_array_elements_text(CAST(:account_ids AS json)),
                            json_array_elements_text(CAST(:types AS json)),
                            json_array_elements_text(CAST(:occurrences AS json)))
                AS k(account_id, type, occurrence)
            ON n.account_id = k.account_id AND n.type = k.type
               AND n.occurrence = k.occurrence""", _notifications),
        "deliveries_of": typed_select(f"SELECT {column_list(_deliveries, dialect)} "
                                      f"FROM deliveries WHERE notification_id = {ids}",
                                      _deliveries),
    }


@functools.cache
def _sqlite_statements() -> dict[str, Any]:
    """:func:`_statements` on SQLite: the rows as one JSON array of rows."""
    from sqlalchemy.dialects import sqlite

    dialect: Dialect = sqlite.dialect()
    now = bindparam("now", type_=UtcDateTime)
    n_cols, n_values = sqlite_rows(_notifications, dialect)
    d_cols, d_values = sqlite_rows(_deliveries, dialect)
    account = list(_notifications.columns).index(_notifications.c.account_id)
    ids = "IN (SELECT value FROM json_each(:ids))"
    # the WHERE also settles SQLite's parse of INSERT … SELECT … ON CONFLICT
    notifications = text(f"""
        INSERT INTO notifications ({n_cols})
        SELECT {n_values} FROM json_each(:notifications)
        WHERE EXISTS (SELECT 1 FROM accounts
                      WHERE accounts.id = json_extract(value, '$[{account}]'))
        ON CONFLICT (account_id, type, occurrence) DO NOTHING
        RETURNING id, {in_app_gate(postgres=False)} AS gate""")
    return {
        "notifications": notifications.columns(result_column("id", String),
                                               result_column("gate", String)),
        "deliveries": text(f"INSERT INTO deliveries ({d_cols}) "
                           f"SELECT {d_values} FROM json_each(:deliveries)"),
        "stamp": text(f"UPDATE deliveries SET queued_at = :now WHERE id {ids}")
        .bindparams(now),
        "find": typed_select(f"""
            SELECT {column_list(_notifications, dialect, "n.")} FROM json_each(:keys) AS k
            JOIN notifications AS n ON n.account_id = json_extract(k.value, '$[0]')
                AND n.type = json_extract(k.value, '$[1]')
                AND n.occurrence = json_extract(k.value, '$[2]')""", _notifications),
        "deliveries_of": typed_select(f"SELECT {column_list(_deliveries, dialect)} "
                                      f"FROM deliveries WHERE notification_id {ids}",
                                      _deliveries),
    }


def persist_new_notifications(notifications: list[Notification],
                              deliveries: list[Delivery]) -> set[str]:
    """Insert the notifications whose (account, type, occurrence) key is free, each with
    its deliveries, and commit them; returns the ids of those inserted.

    A notification whose key exists already (or appears earlier in the list), or whose
    account does not exist, is left out with its deliveries: never an error, so one event
    never fails the others. An in-app delivery passes its notification's gates as it is
    inserted (:func:`models.notifications.persist_notification`), and a blocked one is updated in
    ``deliveries``. What is inserted lands whole: on PostgreSQL one statement on an
    autocommit connection, elsewhere two in one transaction. Every text must be
    :func:`storable`.
    """
    if not notifications:
        return set()
    engine = get_engine()
    statements = _statements(engine.dialect.name)
    if engine.dialect.name == "postgresql":
        params = postgres_columns(notifications, "n")
        params |= (postgres_columns(deliveries, "d") if deliveries
                   else {f"d_{c.key}": "[]" for c in _deliveries.columns})
        with autocommit() as connection:
            gates = {id_: gate for id_, gate in connection.execute(statements["persist"],
                                                                   params)}
        suppress_gated(deliveries, gates)
        return set(gates)
    with engine.begin() as connection:
        gates = {id_: gate for id_, gate in connection.execute(statements["notifications"], {
            "notifications": sqlite_json(notifications, engine.dialect)})}
        kept = [d for d in deliveries if d.notification_id in gates]
        suppress_gated(kept, gates)
        if kept:
            connection.execute(statements["deliveries"],
                               {"deliveries": sqlite_json(kept, engine.dialect)})
    return set(gates)


def find_occurrences(keys: list[Key]) -> dict[Key, tuple[Notification, list[Delivery]]]:
    """The notifications of these (account, type, occurrence) keys that exist, each with
    its deliveries :func:`in_channel_order`: one SELECT for the notifications, one for
    their deliveries."""
    if not keys:
        return {}
    with get_engine().connect() as connection:
        statements = _statements(connection.dialect.name)
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
        statement = _statements(connection.dialect.name)["stamp"]
        connection.execute(statement, {"ids": json.dumps(delivery_ids),
                                       "now": now or utcnow()})
