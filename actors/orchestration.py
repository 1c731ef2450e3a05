"""Orchestration: a domain event becomes one notification and its deliveries, persisted
first, enqueued second (docs/pipeline.md#events).

The HTTP layer only wraps these functions. The (account, type, occurrence) key of a
notification is durable: the same event again creates nothing and sends nothing, even
after Redis lost every job. In-app deliveries are persisted as delivered with no queue;
push produces no delivery row unless ``FEATURE_PUSH`` is on.

An event is checked whole before anything is written: its type, its data against the
type's model (:mod:`actors.render`), its category (a marketing type is never sent as
transactional; a transactional one may be sent as marketing, which only suppresses more)
and its channels (asking only for channels that are turned off is refused; off channels
in a mix are left out, as they are from a type's default channels).
"""

from __future__ import annotations

import dataclasses
import logging
import re
from typing import Any

from sqlalchemy.exc import IntegrityError
from sqlmodel import Session, select

from actors.render import (
    EVENT_TYPES,
    SUPPORTED_LOCALES,
    event_type,
    template_channel,
    validate_event_data,
)
from herald.db import autocommit
from herald.db import session as db_session
from herald.queue.registry import NORMAL_PRIORITY, URGENT_PRIORITY
from herald.settings import get_settings
from models.base import new_id, snapshot, utcnow
from models.notifications import (
    Account,
    Channel,
    Delivery,
    Notification,
    Outcome,
    persist_notification,
    stamp_handoffs,
)

log = logging.getLogger("herald.orchestration")

#: E.164: a plus and up to 15 digits, no leading zero.
E164 = re.compile(r"^\+[1-9]\d{6,14}$")
EMAIL = re.compile(r"^[^@\s]+@[^@\s]+\.[^@\s]+$")
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
    """Raise ValueError naming the field when an email or phone is malformed or the locale
    is not one the templates ship in."""
    if fields.get("email") is not None and not EMAIL.match(fields["email"]):
        raise ValueError("email: not an email address")
    if fields.get("phone") is not None and not E164.match(fields["phone"]):
        raise ValueError("phone: not an E.164 number (like +966501234567)")
    if "locale" in fields and fields["locale"] not in SUPPORTED_LOCALES:
        raise ValueError(f"locale: must be one of {', '.join(SUPPORTED_LOCALES)}")


def create_account(**fields: Any) -> Account:
    """Create an account; fields are validated before anything is written.

    Accounts are keyed by id: two accounts may share an email or phone (README.md, "The
    HTTP API")."""
    check_account_fields(fields)
    with db_session() as session:
        account = Account(**fields)
        session.add(account)
        session.flush()
        session.refresh(account)
        return account


def update_account(account_id: str, **changes: Any) -> Account:
    """Change an account's fields; AccountNotFound when it does not exist."""
    check_account_fields(changes)
    with db_session() as session:
        account = session.get(Account, account_id)
        if account is None:
            raise AccountNotFound(account_id)
        for name, value in changes.items():
            setattr(account, name, value)
        account.updated_at = utcnow()
        session.add(account)
        session.flush()
        session.refresh(account)
        return account


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
        channels = list(dict.fromkeys(requested))
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
        raise InvalidEvent(f"type: unknown event type {type_name!r}")
    if urgency not in URGENCIES:
        raise InvalidEvent("urgency: must be normal or urgent")
    try:
        validate_event_data(type_name, data)
    except ValueError as error:
        raise InvalidEvent(f"data: {error}") from None
    return _channels(type_name, channels)


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
    data = data or {}
    chosen = check_event(type, data, urgency, channels)
    transactional = event_category(type, transactional)
    # ids and timestamps given, not defaulted: the rows share one clock reading
    now = utcnow()
    notification = snapshot(
        Notification, id=new_id(), account_id=account_id, type=type, occurrence=occurrence,
        urgency=urgency, transactional=transactional, data=data, batch_id=batch_id,
        created_at=now)
    deliveries = [snapshot(
        Delivery, id=new_id(), notification_id=notification.id, channel=channel,
        outcome=(Outcome.DELIVERED if channel == Channel.IN_APP else Outcome.QUEUED).value,
        created_at=now, updated_at=now) for channel in chosen]
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
    log.info("notification persisted", extra={"notification_id": notification.id,
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
    deliveries = list(session.exec(select(Delivery).where(
        Delivery.notification_id == notification.id).order_by(Delivery.channel)).all())
    return EventResult(notification=notification, deliveries=deliveries, created=False)


def hand_off(deliveries: list[Delivery], priority: int) -> int:
    """Enqueue the channel jobs of the queued deliveries (job id = delivery id; one round
    trip for all channels) and stamp their handoff, in one statement; returns how many
    were handed off. A failed enqueue is logged by delivery id only and leaves the
    deliveries unstamped for the handoff sweep."""
    from actors.notifications import enqueue_new_deliveries

    queued = [delivery for delivery in deliveries if delivery.outcome == Outcome.QUEUED.value]
    if not queued:
        return 0
    try:
        enqueue_new_deliveries(queued, priority)
    except Exception as error:  # Redis away: the handoff sweep repairs it
        for delivery in queued:
            log.warning("enqueue failed: %s", type(error).__name__,
                        extra={"delivery_id": delivery.id})
        return 0
    # a single UPDATE is atomic by itself: no transaction round trips around it
    with autocommit() as connection:
        stamp_handoffs(connection, [delivery.id for delivery in queued])
    return len(queued)


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


def delivery_view(delivery: Delivery) -> dict[str, Any]:
    """A delivery as JSON."""
    return {"id": delivery.id, "notification_id": delivery.notification_id,
            "channel": delivery.channel, "outcome": delivery.outcome, "reason": delivery.reason,
            "provider": delivery.provider, "provider_message_id": delivery.provider_message_id,
            "attempts": delivery.attempts, "created_at": delivery.created_at.isoformat(),
            "updated_at": delivery.updated_at.isoformat()}


def notification_view(result: EventResult) -> dict[str, Any]:
    """A notification with its deliveries as JSON."""
    n = result.notification
    return {"id": n.id, "account_id": n.account_id, "type": n.type, "occurrence": n.occurrence,
            "urgency": n.urgency, "transactional": n.transactional,
            "created_at": n.created_at.isoformat(),
            "deliveries": [delivery_view(d) for d in result.deliveries]}
