"""Orchestration: a domain event becomes one notification and its deliveries, persisted
first, enqueued second (docs/pipeline.md#events).

The HTTP layer only wraps these functions. The (account, type, occurrence) key of a
notification is durable: the same event again creates nothing and sends nothing, even
after Redis lost every job. In-app deliveries have no queue: they are persisted
delivered, or suppressed when the gates block them (an inactive account; a
non-transactional event to an account that opted out), in the same statement; push
produces no delivery row unless ``FEATURE_PUSH`` is on. Deliveries are listed in one
order everywhere: the channels' (:data:`models.notifications.CHANNEL_ORDER`).

An event is checked whole before anything is written: its type, its data against the
type's model (:mod:`actors.event_catalogue`), its category (a marketing type is never sent as
transactional; a transactional one may be sent as marketing, which only suppresses more)
and its channels (asking only for channels that are turned off is refused; off channels
in a mix are left out, as they are from a type's default channels).
"""

from __future__ import annotations

import dataclasses
import logging
import re
from collections.abc import Callable
from datetime import datetime
from typing import Any, NamedTuple

from sqlalchemy.exc import IntegrityError
from sqlmodel import Session, select

from actors.event_catalogue import EVENT_TYPES, event_type, validate_event_data
from actors.locales import SUPPORTED_LOCALES
from actors.quiet_hours import Release, check_quiet_hours, check_timezone, release_holds
from actors.render import template_channel
from herald.db import session as db_session
from herald.queue import NORMAL_PRIORITY, URGENT_PRIORITY
from herald.settings import email_address_problem, get_settings
from herald.write_behind import WriteBehind
from models.base import FieldReader, new_id, queue_now, snapshot, utcnow
from models.notifications import (
    CHANNEL_ORDER,
    Account,
    Channel,
    Delivery,
    Notification,
    Outcome,
    in_channel_order,
    persist_notification,
)
from models.notifications_bulk import (
    Key,
    find_occurrences,
    persist_new_notifications,
    stamp_many_handoffs,
    storable,
)

log = logging.getLogger("herald.orchestration")

#: E.164: a plus and up to 15 digits, no leading zero.
E164 = re.compile(r"^\+[1-9]\d{6,14}$")
URGENCIES = {"normal": NORMAL_PRIORITY, "urgent": URGENT_PRIORITY}


class AccountNotFound(LookupError):
    """The event names an account that does not exist."""


class InvalidEvent(ValueError):
    """The event cannot be accepted as given (unknown type, bad data, category or channel)."""


@dataclasses.dataclass(frozen=True, kw_only=True)
class EventResult:
    """A triggered event: its notification and deliveries, and whether it was new."""

    notification: Notification
    deliveries: list[Delivery]
    created: bool


# -- accounts ---------------------------------------------------------------------------
def check_account_fields(fields: dict[str, Any]) -> None:
    """Raise ValueError naming the field when an email or phone is malformed, the locale
    is not one the templates ship in, the time zone is unknown or the quiet hours are
    malformed (:mod:`actors.quiet_hours`). An email is checked as a supplier's is
    (:func:`herald.settings.email_address_problem`): one bare address."""
    if fields.get("email") is not None and (problem := email_address_problem(fields["email"])):
        raise ValueError(f"email: {problem}")
    if fields.get("phone") is not None and not E164.match(fields["phone"]):
        raise ValueError("phone: not an E.164 number (like +966501234567)")
    if "locale" in fields and fields["locale"] not in SUPPORTED_LOCALES:
        raise ValueError(f"locale: must be one of {', '.join(SUPPORTED_LOCALES)}")
    if fields.get("timezone") is not None:
        check_timezone(fields["timezone"])
    if fields.get("quiet_hours") is not None:
        check_quiet_hours(fields["quiet_hours"])


def create_account(**fields: Any) -> Account:
    """Create an account; fields are validated before anything is written.

    Accounts are keyed by id: two accounts may share an email or phone (docs/api.md, "Event
    types")."""
    check_account_fields(fields)
    with db_session() as session:
        account = Account(**fields)
        session.add(account)
        session.flush()
        session.refresh(account)
        return account


def update_account(account_id: str, **changes: Any) -> Account:
    """Change an account's fields; AccountNotFound when it does not exist.

    A change of quiet hours or time zone releases the account's held deliveries it no
    longer holds (:func:`actors.quiet_hours.release_holds`): their new ``not_before`` is
    committed with the change, then each one's delayed job is brought forward to it."""
    check_account_fields(changes)
    released: list[Release] = []
    with db_session() as session:
        account = session.get(Account, account_id)
        if account is None:
            raise AccountNotFound(account_id)
        for name, value in changes.items():
            setattr(account, name, value)
        account.updated_at = utcnow()
        session.add(account)
        session.flush()
        if {"quiet_hours", "timezone"} & changes.keys():
            released = release_holds(session, account)
        session.refresh(account)
    for release in released:
        _bring_forward(release)
    return account


def _bring_forward(release: Release) -> None:
    """Move a released delivery's delayed job to its new time: the job is removed (only
    while not running) and added again with the delivery's id, so one job at most runs it,
    and the claim it takes fences the send. Whatever fails here leaves the delivery late,
    never lost or doubled: the old job still runs at the old end, or, removed, the
    handoff sweep adds it again at the committed ``not_before`` (docs/sweeps.md)."""
    from actors.notifications import CHANNEL_QUEUES, enqueue_delivery
    from herald.queue import queue

    delivery = release.delivery
    try:
        if not queue(CHANNEL_QUEUES[delivery.channel]).remove(delivery.id):
            job = queue(CHANNEL_QUEUES[delivery.channel]).get(delivery.id)
            if job is not None:  # running now: its claim reads the new settings
                return
        delay = None if release.not_before is None else release.not_before - queue_now()
        enqueue_delivery(delivery, NORMAL_PRIORITY, delay=delay)
    except Exception as error:  # committed: the sweep or the old job still sends it
        log.warning("held delivery not brought forward: %s", type(error).__name__,
                    extra={"delivery_id": delivery.id})


# -- events -----------------------------------------------------------------------------
def _channels(type_name: str, requested: list[str] | None) -> list[str]:
    spec = event_type(type_name)
    known = [*spec.channels, *(["push"] if template_channel(spec, "push") else [])]
    if requested is None:
        channels = known
    else:
        unknown = [c for c in requested if c not in {ch.value for ch in Channel}]
        if unknown:
            raise InvalidEvent(f"channels: unknown channel {unknown[0]!r}")
        missing = [c for c in requested if c not in known]
        if missing:
            raise InvalidEvent(f"channels: {type_name} has no {missing[0]} template")
        # the one order of every answer's deliveries, whatever order they were asked in
        channels = sorted(dict.fromkeys(requested), key=CHANNEL_ORDER.__getitem__)
    if not get_settings().feature_push:
        channels = [c for c in channels if c != Channel.PUSH]
        if not channels:
            # accepting it would persist a notification with nothing to send and use up
            # its occurrence for good
            raise InvalidEvent("channels: push is turned off (FEATURE_PUSH); ask for a "
                               f"channel of {type_name}: {', '.join(spec.channels)}")
    return channels


def event_category(type_name: str, transactional: bool | None) -> bool:
    """Whether the event is sent as transactional: the type's own category when None.

    A marketing type may not be sent as transactional (it would reach accounts that opted
    out): InvalidEvent. A transactional type may be sent as marketing.
    """
    own = event_type(type_name).transactional
    if transactional is None:
        return own
    if transactional and not own:
        raise InvalidEvent(f"transactional: {type_name} is a marketing type; it cannot be "
                           "sent as transactional")
    return transactional


def check_event(type_name: str, data: dict[str, Any], urgency: str,
                channels: list[str] | None) -> list[str]:
    """Validate an event's type, urgency, data and channels before anything is persisted;
    returns its channels. InvalidEvent says what is wrong."""
    if type_name not in EVENT_TYPES:
        raise InvalidEvent(f"type: unknown event type {type_name!r} (the types: "
                           f"{', '.join(EVENT_TYPES)})")
    if urgency not in URGENCIES:
        raise InvalidEvent("urgency: must be normal or urgent")
    try:
        validate_event_data(type_name, data)
    except ValueError as error:
        raise InvalidEvent(f"data: {error}") from None
    return _channels(type_name, channels)


def new_notification(*, account_id: str, type: str, occurrence: str, data: dict[str, Any],
                     urgency: str, transactional: bool | None, channels: list[str] | None,
                     batch_id: str | None, now: datetime) -> tuple[Notification, list[Delivery]]:
    """The notification of a checked event and its deliveries, not persisted yet.

    InvalidEvent when the event fails :func:`check_event` or :func:`event_category`. In-app
    deliveries are ``delivered`` (no queue; the insert applies their gates), the others
    ``queued``; push is there only with FEATURE_PUSH. Ids and timestamps are given, not
    defaulted: the rows share ``now``.
    """
    chosen = check_event(type, data, urgency, channels)
    return notification_rows(
        account_id=account_id, type=type, occurrence=occurrence, data=data, urgency=urgency,
        transactional=event_category(type, transactional), channels=chosen,
        batch_id=batch_id, now=now)


def notification_rows(*, account_id: str, type: str, occurrence: str, data: dict[str, Any],
                      urgency: str, transactional: bool, channels: list[str],
                      batch_id: str | None, now: datetime
                      ) -> tuple[Notification, list[Delivery]]:
    """The rows of a notification whose type, data, category and ``channels`` are settled
    already (:func:`new_notification` checks an event's first; a digest's close builds its
    message's data itself), not persisted yet."""
    notification_id = new_id()
    notification = snapshot(
        Notification, id=notification_id, account_id=account_id, type=type,
        occurrence=occurrence, urgency=urgency, transactional=transactional, data=data,
        batch_id=batch_id, created_at=now)
    deliveries = [snapshot(
        Delivery, id=new_id(), notification_id=notification_id, channel=channel,
        outcome=_DELIVERED if channel == _IN_APP else _QUEUED,
        created_at=now, updated_at=now) for channel in channels]
    return notification, deliveries


# read once: an enum member's value is a property, a thousand events read it thousands
# of times
_DELIVERED, _QUEUED, _IN_APP = Outcome.DELIVERED.value, Outcome.QUEUED.value, Channel.IN_APP.value


def trigger_event(*, account_id: str, type: str, occurrence: str,
                  data: dict[str, Any] | None = None, urgency: str = "normal",
                  transactional: bool | None = None, channels: list[str] | None = None,
                  batch_id: str | None = None) -> EventResult:
    """Persist the notification and its deliveries, then enqueue the channel jobs.

    The same (account, type, occurrence) again returns the existing notification with
    ``created=False`` and enqueues nothing. An enqueue that fails leaves the delivery
    queued and unstamped for the handoff sweep. AccountNotFound when the account does not
    exist (nothing is persisted).
    """
    notification, deliveries = new_notification(
        account_id=account_id, type=type, occurrence=occurrence, data=data or {},
        urgency=urgency, transactional=transactional, channels=channels, batch_id=batch_id,
        now=utcnow())
    try:
        # no look-up first: the unique (account, type, occurrence) key and the account's
        # foreign key decide, and a refusal persists nothing
        persist_notification(notification, deliveries)
    except IntegrityError:
        # persisted before (or by a concurrent request): it stands — or no such account
        existing = _existing(account_id, type, occurrence)
        if existing is None:
            raise
        return existing
    hand_off(deliveries, URGENCIES[urgency])
    log.debug("notification persisted", extra={"notification_id": notification.id,
                                               "deliveries": len(deliveries)})
    return EventResult(notification=notification, deliveries=deliveries, created=True)


def _existing(account_id: str, type_name: str, occurrence: str) -> EventResult | None:
    """The notification of this occurrence with its deliveries; AccountNotFound when the
    account does not exist; None when neither explains a refused insert."""
    with db_session() as session:
        found = session.exec(select(Notification).where(
            Notification.account_id == account_id, Notification.type == type_name,
            Notification.occurrence == occurrence)).first()
        if found is not None:
            return _with_deliveries(session, found)
        if session.get(Account, account_id) is None:
            raise AccountNotFound(account_id)
        return None


def _with_deliveries(session: Session, notification: Notification) -> EventResult:
    deliveries = in_channel_order(list(session.exec(select(Delivery).where(
        Delivery.notification_id == notification.id)).all()))
    return EventResult(notification=notification, deliveries=deliveries, created=False)


#: A delivery's id and outcome, as :func:`hand_off` and :func:`hand_off_many` read them.
_READ_HANDOFF = FieldReader("id", "outcome")


def hand_off(deliveries: list[Delivery], priority: int) -> int:
    """Enqueue the channel jobs of the queued deliveries (job id = delivery id; one round
    trip for all channels), then have their handoff stamped in the background
    (:func:`flush_handoff_stamps` waits for it); returns how many were handed off. A
    failed enqueue is logged by delivery id only and leaves the deliveries unstamped for
    the handoff sweep, as does a stamp that fails or never runs (the process ended)."""
    return _hand_off([(delivery, priority) for delivery in deliveries], _stamps_behind.add)


def _hand_off(deliveries: list[tuple[Delivery, int]],
              stamp: Callable[[list[str]], None]) -> int:
    """Add the jobs of the queued deliveries, each ``(delivery, priority)``, in ONE round
    trip, then ``stamp`` their ids; how many were handed off. A failed add is logged by
    delivery id only and stamps nothing."""
    from actors.notifications import enqueue_prioritised_deliveries

    queued = [(d, priority) for d, priority in deliveries if _READ_HANDOFF(d)[1] == _QUEUED]
    if not queued or not _enqueued(
            [d for d, _ in queued],
            # one add for them all: at most 3 channel jobs per event, so a few thousand
            lambda: enqueue_prioritised_deliveries(queued, chunk_size=len(queued))):
        return 0
    stamp([_READ_HANDOFF(d)[0] for d, _ in queued])
    return len(queued)


def flush_handoff_stamps(timeout_s: float | None = None) -> bool:
    """Wait until the handoff stamps of every event triggered so far in this process are
    written; False when ``timeout_s`` ran out first."""
    return _stamps_behind.flush(timeout_s)


def _enqueued(deliveries: list[Delivery], enqueue: Callable[[], None]) -> bool:
    """Run ``enqueue`` (the add of these deliveries' jobs); False, with each delivery's
    failure logged by its id only, when it fails."""
    try:
        enqueue()
    except Exception as error:  # Redis away: the handoff sweep repairs it
        for delivery in deliveries:
            log.warning("enqueue failed: %s", type(error).__name__,
                        extra={"delivery_id": delivery.id})
        return False
    return True


# -- many events at once ------------------------------------------------------------------
#: The most events one :func:`trigger_events` call takes (docs/api.md, "Bulk events").
MAX_BULK_EVENTS = 1000
#: The handoff stamps of events triggered one at a time, written by a thread of their own,
#: those of many events in one UPDATE: a round trip less on each event's path, and a
#: statement less per event for the database (docs/pipeline.md#handoff).
_stamps_behind: WriteBehind[str] = WriteBehind(
    stamp_many_handoffs, name="herald-handoff-stamps", max_batch=MAX_BULK_EVENTS * 3,
    linger_s=0.02)


class UnstorableEvent(ValueError):
    """The event holds a value the database cannot store (a NUL character …)."""


#: What :func:`trigger_events` answers for one event: its result, or why it was refused.
EventOutcome = EventResult | InvalidEvent | AccountNotFound | UnstorableEvent


class _Candidate(NamedTuple):
    """The first valid event of an occurrence in a :func:`trigger_events` call."""

    index: int  # type: ignore[assignment]  # hides tuple.index, which nothing here calls
    notification: Notification
    deliveries: list[Delivery]


#: A notification's id and urgency, as :func:`trigger_events` reads them.
_READ_ID_URGENCY = FieldReader("id", "urgency")


def trigger_events(events: list[dict[str, Any]]) -> list[EventOutcome]:
    """Trigger many events at once; one outcome per event, in order.

    Each event (the keyword arguments of :func:`trigger_event`, without ``batch_id``) is
    answered as :func:`trigger_event` would answer it alone: an EventResult (``created``
    False for an occurrence that exists, nothing sent again), or InvalidEvent,
    AccountNotFound or UnstorableEvent returned (not raised) — one refused event never
    fails the others. An occurrence given twice is created by its first event; the later
    ones answer that notification with ``created=False``.

    Persisted first, enqueued second, in a fixed number of round trips whatever the count:
    the new notifications and their deliveries in multi-row INSERTs that land together
    (an unknown account's left out), then, only for those not inserted, one SELECT each
    for the notifications that existed and their deliveries, one add of every channel
    job (job id = delivery id, priority from each event's urgency), one UPDATE stamping
    their handoff. A failed add leaves the deliveries queued and unstamped for the handoff
    sweep, and the events accepted.
    """
    if len(events) > MAX_BULK_EVENTS:
        raise ValueError(f"at most {MAX_BULK_EVENTS} events at once")
    outcomes: list[EventOutcome | None] = [None] * len(events)
    now = utcnow()  # one clock reading for every row, as for one event
    # the first valid event of each key is its candidate; later ones repeat it
    candidates: dict[Key, _Candidate] = {}
    repeats: list[tuple[int, Key]] = []
    for index, event in enumerate(events):
        # the event's own values, not read back from the rows: the ORM's attribute reads
        # cost more than building the rows
        account_id, type_name, occurrence = (event["account_id"], event["type"],
                                             event["occurrence"])
        key = (account_id, type_name, occurrence)
        data = event.get("data") or {}
        try:
            notification, deliveries = new_notification(
                account_id=account_id, type=type_name, occurrence=occurrence, data=data,
                urgency=event.get("urgency", "normal"), transactional=event.get("transactional"),
                channels=event.get("channels"), batch_id=None, now=now)
        except InvalidEvent as error:
            outcomes[index] = error
            continue
        if not storable([account_id, occurrence, data]):
            outcomes[index] = UnstorableEvent("a value cannot be stored")
            continue
        if key in candidates:
            repeats.append((index, key))
        else:
            candidates[key] = _Candidate(index, notification, deliveries)
    # in key order: two requests inserting the same occurrences then wait on each other in
    # one order, never in a cycle (a deadlock PostgreSQL would break by failing one). An
    # unknown account's notification is left out by the insert itself, and found nowhere.
    keep = [candidates[key] for key in sorted(candidates)]
    inserted = persist_new_notifications(
        [candidate.notification for candidate in keep],
        [delivery for candidate in keep for delivery in candidate.deliveries])
    existing = find_occurrences([key for key, candidate in candidates.items()
                                 if _READ_ID_URGENCY(candidate.notification)[0]
                                 not in inserted])
    by_key: dict[Key, EventOutcome] = {}
    handed: list[tuple[Delivery, int]] = []
    for key, (index, notification, deliveries) in candidates.items():
        outcome: EventOutcome
        notification_id, urgency = _READ_ID_URGENCY(notification)
        if notification_id in inserted:
            outcome = EventResult(notification=notification, deliveries=deliveries,
                                  created=True)
            priority = URGENCIES[urgency]
            handed += [(delivery, priority) for delivery in deliveries]
        elif key in existing:
            found, found_deliveries = existing[key]
            outcome = EventResult(notification=found, deliveries=found_deliveries,
                                  created=False)
        else:  # neither inserted nor there: no such account (or it was removed)
            outcome = AccountNotFound(key[0])
        outcomes[index] = by_key[key] = outcome
    for index, key in repeats:
        first = by_key[key]
        outcomes[index] = (dataclasses.replace(first, created=False)
                           if isinstance(first, EventResult) else first)
    hand_off_many(handed)
    log.debug("notifications persisted", extra={"notifications": len(inserted),
                                               "deliveries": len(handed)})
    answered = [outcome for outcome in outcomes if outcome is not None]
    assert len(answered) == len(events), "every event is answered"
    return answered


def hand_off_many(deliveries: list[tuple[Delivery, int]]) -> int:
    """:func:`hand_off` for deliveries of many notifications, each ``(delivery,
    priority)``: the jobs of the queued ones added in one round trip, then their handoff
    stamped in one UPDATE, before it returns (one statement for the whole batch already);
    returns how many were handed off. A failed add is logged by delivery id only and
    leaves them unstamped for the handoff sweep."""
    return _hand_off(deliveries, stamp_many_handoffs)


# -- reading ----------------------------------------------------------------------------
def get_notification(notification_id: str) -> EventResult | None:
    """A notification with its deliveries, or None."""
    with db_session() as session:
        notification = session.get(Notification, notification_id)
        return None if notification is None else _with_deliveries(session, notification)


def get_delivery(delivery_id: str) -> Delivery | None:
    """One delivery, or None."""
    with db_session() as session:
        return session.get(Delivery, delivery_id)


_DELIVERY_FIELDS = ("id", "notification_id", "channel", "outcome", "reason", "provider",
                    "provider_message_id", "attempts", "attempts_log", "created_at",
                    "updated_at", "not_before")
_NOTIFICATION_FIELDS = ("id", "account_id", "type", "occurrence", "urgency", "transactional",
                        "created_at")


_READ_DELIVERY = FieldReader(*_DELIVERY_FIELDS)
_READ_NOTIFICATION = FieldReader(*_NOTIFICATION_FIELDS)


def _view(row: Notification | Delivery, read: FieldReader) -> dict[str, Any]:
    """The fields ``read`` names of a row as JSON values (timestamps in ISO 8601)."""
    view = dict(zip(read.names, read(row), strict=True))
    view["created_at"] = _iso(view["created_at"])
    if "updated_at" in view:
        view["updated_at"] = _iso(view["updated_at"])
    if view.get("not_before") is not None:  # set while quiet hours hold the delivery
        view["not_before"] = view["not_before"].isoformat()
    if "attempts_log" in view:
        view["attempts_log"] = view["attempts_log"] or []  # no attempt yet: an empty list
    return view


#: The last timestamp written by :func:`_iso` and its text.
_last_iso: tuple[datetime | None, str] = (None, "")


def _iso(moment: datetime) -> str:
    """``moment.isoformat()``, written once for the same timestamp asked again: the rows
    of a bulk request share one clock reading, seven timestamps per event."""
    global _last_iso
    last, text = _last_iso
    if moment is not last:
        text = moment.isoformat()
        _last_iso = (moment, text)  # one tuple: a reader in another thread sees a pair
    return text


def delivery_view(delivery: Delivery) -> dict[str, Any]:
    """A delivery as JSON."""
    return _view(delivery, _READ_DELIVERY)


def notification_view(result: EventResult) -> dict[str, Any]:
    """A notification with its deliveries as JSON."""
    view = _view(result.notification, _READ_NOTIFICATION)
    view["deliveries"] = [_view(d, _READ_DELIVERY) for d in result.deliveries]
    return view
