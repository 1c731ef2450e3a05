"""Digests: many events of a digested type become one message (docs/api.md#digests,
docs/pipeline.md#digests).

An event of a digested type (:attr:`actors.event_catalogue.EventType.digest`) is checked
as every event is, then written in one transaction: its bucket (opened, or joined by an
upsert on the one-open-bucket-per-key index) and its item (its occurrence unique for good:
the same event again answers the same bucket and adds nothing). In ``lookback`` mode the
event that opens a bucket is also sent at once, its notification written in the same
transaction.

A bucket closes once, through :func:`close_bucket`: one transaction whose conditional
UPDATE ``open → closed`` decides, which writes the message (a notification whose
``data.events`` are the items, oldest first) with its deliveries, then hands the
deliveries to the channel queues after the commit as every event's are
(:func:`actors.orchestration.hand_off`). Three things call it: the bucket's delayed job
(``digest-close:{bucket_id}``, due at its close time), the job a bucket that reaches
``max_items`` gets at once (``digest-close:{bucket_id}:full``), and the sweep of open
buckets past their close time (a lost job, a FLUSHALL). Whoever comes first makes the
message; the others find the bucket closed. A crash before the commit leaves the bucket
open for the job's next run or the sweep; one after it leaves queued deliveries for the
handoff sweep: one message per bucket, whatever races.
"""

from __future__ import annotations

import dataclasses
import logging
from datetime import datetime, timedelta
from typing import Any

from pydantic import BaseModel, ConfigDict
from sqlalchemy import Connection, select
from sqlalchemy.exc import IntegrityError

from actors.event_catalogue import EVENT_TYPES, Digest, event_type
from actors.orchestration import (
    AccountNotFound,
    EventOutcome,
    EventResult,
    InvalidEvent,
    UnstorableEvent,
    check_event,
    event_category,
    get_notification,
    hand_off,
    notification_rows,
    notification_view,
)
from actors.orchestration import trigger_events as trigger_plain_events
from actors.queues import registry
from herald.db import get_engine
from herald.queue import NORMAL_PRIORITY, Schedule, enqueue
from herald.settings import get_settings
from models import digests as buckets
from models.base import queue_now, table_of
from models.digests import DigestMode
from models.notifications import Account, Notification, insert_notification
from models.notifications_bulk import storable

log = logging.getLogger("herald.digests")

QUEUE = "notification-orchestration"


@dataclasses.dataclass(frozen=True, kw_only=True)
class DigestResult:
    """An accepted event of a digested type: the bucket it joined (``items``: its events
    so far), whether the event was new, and the notification sent at once for it
    (lookback's first event; else None)."""

    bucket_id: str
    closes_at: datetime
    items: int
    created: bool
    sent: EventResult | None = None


def is_digested(type_name: str) -> bool:
    """True when events of this type are collected into digests."""
    spec = EVENT_TYPES.get(type_name)
    return spec is not None and spec.digest is not None


def digest_view(result: DigestResult) -> dict[str, Any]:
    """The answer to a digested event: ``digest: {id, closes_at, items}``, and the
    ``notification`` when one was sent at once."""
    view: dict[str, Any] = {"digest": {"id": result.bucket_id,
                                       "closes_at": result.closes_at.isoformat(),
                                       "items": result.items}}
    if result.sent is not None:
        view["notification"] = notification_view(result.sent)
    return view


# -- accepting events -----------------------------------------------------------------------
def trigger_events(events: list[dict[str, Any]]) -> list[EventOutcome | DigestResult]:
    """:func:`actors.orchestration.trigger_events` for events of any type: those of a
    digested type are accepted here, one at a time (each its own transaction), the others
    by orchestration together; one outcome per event, in order."""
    digested = [i for i, event in enumerate(events) if is_digested(event["type"])]
    if not digested:
        return list(trigger_plain_events(events))
    outcomes: list[EventOutcome | DigestResult | None] = [None] * len(events)
    apart = set(digested)
    plain = [i for i in range(len(events)) if i not in apart]
    for index, outcome in zip(plain, trigger_plain_events([events[i] for i in plain]),
                              strict=True):
        outcomes[index] = outcome
    for index in digested:
        outcomes[index] = _outcome_of(events[index])
    return [outcome for outcome in outcomes if outcome is not None]


def _outcome_of(event: dict[str, Any]) -> EventOutcome | DigestResult:
    try:
        return trigger_digested(
            account_id=event["account_id"], type=event["type"], occurrence=event["occurrence"],
            data=event.get("data") or {}, urgency=event.get("urgency", "normal"),
            transactional=event.get("transactional"), channels=event.get("channels"))
    except (InvalidEvent, AccountNotFound, UnstorableEvent) as refused:
        return refused


def trigger_digested(*, account_id: str, type: str, occurrence: str,
                     data: dict[str, Any], urgency: str = "normal",
                     transactional: bool | None = None,
                     channels: list[str] | None = None) -> DigestResult:
    """Accept one event of a digested type into its bucket.

    The event is checked whole first (InvalidEvent; nothing written). Its bucket and item
    land in one transaction; the same (account, type, occurrence) again answers its bucket
    with ``created=False`` and writes nothing. The message goes on the type's own channels
    and category, at normal urgency: ``urgency``, ``channels`` and ``transactional`` are
    checked but do not change it. AccountNotFound when there is no such account.
    """
    check_event(type, data, urgency, channels)
    event_category(type, transactional)
    if not storable([account_id, occurrence, data]):
        raise UnstorableEvent("a value cannot be stored")
    digest = _digest_of(type)
    now = queue_now()  # the queue's clock: the close job is delayed on it
    try:
        with get_engine().begin() as connection:
            found = _answer_existing(connection, account_id, type, occurrence)
            if found is not None:
                return found
            joined = buckets.join_bucket(
                connection, account_id=account_id, type_name=type,
                key=digest.key_of(account_id, data), mode=digest.mode, now=now,
                closes_at=now + digest.window())
            at_once = joined.opened and digest.mode is DigestMode.LOOKBACK
            buckets.add_item(connection, bucket_id=joined.id, account_id=account_id,
                             type_name=type, occurrence=occurrence, data=data, at=now,
                             sent_at_once=at_once)
            sent = (_write_message(connection, account_id, type, occurrence,
                                   [_event(occurrence, data, now)], digest, now)
                    if at_once else None)
    except IntegrityError:
        # a concurrent request accepted the occurrence first (everything here rolled
        # back, the bucket's count too) — or the account does not exist
        with get_engine().connect() as connection:
            found = _answer_existing(connection, account_id, type, occurrence)
            if found is not None:
                return found
            if connection.execute(select(table_of(Account).c.id).where(
                    table_of(Account).c.id == account_id)).first() is None:
                raise AccountNotFound(account_id) from None
        raise
    if joined.opened:
        _schedule_close(joined.id, joined.closes_at, full=False)
    if joined.item_count >= digest.max_items:
        _schedule_close(joined.id, None, full=True)
    if sent is not None:
        hand_off(sent.deliveries, NORMAL_PRIORITY)
    return DigestResult(bucket_id=joined.id, closes_at=joined.closes_at,
                        items=joined.item_count, created=True, sent=sent)


def _digest_of(type_name: str) -> Digest:
    digest = event_type(type_name).digest
    assert digest is not None, f"{type_name} is not digested"
    return digest


def _answer_existing(connection: Connection, account_id: str, type_name: str,
                     occurrence: str) -> DigestResult | None:
    """The answer an occurrence accepted before gets again, or None."""
    found = buckets.find_item(connection, account_id, type_name, occurrence)
    if found is None:
        return None
    item, bucket = found
    sent = None
    if item.sent_at_once:
        notification_id = connection.execute(select(table_of(Notification).c.id).where(
            table_of(Notification).c.account_id == account_id,
            table_of(Notification).c.type == type_name,
            table_of(Notification).c.occurrence == occurrence)).scalar()
        existing = get_notification(notification_id) if notification_id else None
        sent = dataclasses.replace(existing, created=False) if existing else None
    return DigestResult(bucket_id=bucket.id, closes_at=bucket.closes_at,
                        items=bucket.item_count, created=False, sent=sent)


def _event(occurrence: str, data: dict[str, Any], at: datetime) -> dict[str, Any]:
    """One event as a digest message's ``data.events`` lists it."""
    return {"occurrence": occurrence, "data": data, "at": at.isoformat()}


def _write_message(connection: Connection, account_id: str, type_name: str,
                   occurrence: str, events: list[dict[str, Any]], digest: Digest,
                   now: datetime) -> EventResult:
    """Write, in the caller's transaction, the notification of these events (oldest
    first) and its deliveries: the type's channels and category, normal urgency."""
    channels = check_event(type_name, events[0]["data"], "normal", None)
    notification, deliveries = notification_rows(
        account_id=account_id, type=type_name, occurrence=occurrence,
        data={"events": events, "shown": digest.max_items}, urgency="normal",
        transactional=event_type(type_name).transactional, channels=channels, batch_id=None,
        now=now)
    insert_notification(connection, notification, deliveries)
    return EventResult(notification=notification, deliveries=deliveries, created=True)


# -- closing ----------------------------------------------------------------------------------
class DigestCloseJob(BaseModel):
    """A close job carries the bucket's id; the bucket row says the rest."""

    model_config = ConfigDict(extra="forbid")

    bucket_id: str


def close_job_id(bucket_id: str, *, full: bool = False) -> str:
    """The deterministic id of a bucket's close job (``:full`` for its early close)."""
    return f"digest-close:{bucket_id}" + (":full" if full else "")


def _schedule_close(bucket_id: str, at: datetime | None, *, full: bool) -> None:
    """Add the bucket's close job (at ``at``; None: now). A failed add is logged by id
    only: the sweep closes the bucket once it is due."""
    try:
        enqueue(close_digest, DigestCloseJob(bucket_id=bucket_id),
                job_id=close_job_id(bucket_id, full=full), at=at, retry_failed=True)
    except Exception as error:  # Redis away: the sweep closes it
        log.warning("digest close enqueue failed: %s", type(error).__name__,
                    extra={"bucket_id": bucket_id})


def close_bucket(bucket_id: str, now: datetime | None = None) -> EventResult | None:
    """Close an open bucket and send its message; the message, or None when there was
    nothing to do (closed already, or nothing collected: closed empty).

    One transaction: the conditional UPDATE ``open → closed`` decides (exactly one
    caller gets past it), then the notification (occurrence ``digest:{bucket_id}``,
    ``data.events`` oldest first) and its deliveries are written; after the commit the
    deliveries are handed to their queues (a lost handoff is the handoff sweep's).
    """
    now = now or queue_now()
    with get_engine().begin() as connection:
        closed = buckets.close_bucket(connection, bucket_id, now)
        if closed is None or not closed.items:
            return None
        message = _write_message(
            connection, closed.account_id, closed.type, f"digest:{bucket_id}",
            [_event(item.occurrence, item.data, item.at) for item in closed.items],
            _digest_of(closed.type), now)
        buckets.record_message(connection, bucket_id, message.notification.id)
    hand_off(message.deliveries, NORMAL_PRIORITY)
    log.info("digest closed", extra={"bucket_id": bucket_id,
                                     "notification_id": message.notification.id,
                                     "items": len(closed.items)})
    return message


@registry.actor(queue=QUEUE, payload=DigestCloseJob)
def close_digest(job: DigestCloseJob) -> dict[str, Any]:
    """Close one bucket (its delayed job, or its early close)."""
    message = close_bucket(job.bucket_id)
    return {"notification_id": message.notification.id if message else None}


def close_due_digests(now: datetime | None = None) -> int:
    """The sweep: close every open bucket past its close time (its job lost, or not run
    yet), at most HANDOFF_SWEEP_LIMIT per run, earliest first; returns how many it
    closed itself. Racing closers are harmless: each bucket closes once."""
    now = now or queue_now()
    with get_engine().connect() as connection:
        due = buckets.due_buckets(connection, now, get_settings().handoff_sweep_limit)
    closed = 0
    for bucket_id in due:
        try:
            closed += close_bucket(bucket_id, now) is not None
        except Exception as error:  # logged by id; the bucket stays open for the next run
            log.warning("digest close failed: %s", type(error).__name__,
                        extra={"bucket_id": bucket_id})
    return closed


class DigestSweepJob(BaseModel):
    """The sweep job carries nothing: it reads the database."""

    model_config = ConfigDict(extra="forbid")


@registry.actor(queue=QUEUE, payload=DigestSweepJob)
def close_due_digests_job(job: DigestSweepJob) -> dict[str, int]:
    """One run of the digest sweep as a job on the orchestration queue."""
    return {"closed": close_due_digests()}


registry.schedule(Schedule(name="close-due-digests", actor=close_due_digests_job,
                           every=timedelta(seconds=get_settings().handoff_sweep_interval_s),
                           run_at_start=True))
registry.sweep("digests", close_due_digests)
