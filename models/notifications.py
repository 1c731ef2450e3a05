"""Accounts, notifications and their per-channel deliveries, with the helpers that guard
every state change of a delivery (seed 000: claims, fenced outcomes).

A delivery's ``claimed_at`` is the fencing token: an attempt claims the row by writing it,
and every later write of that attempt is conditional on it being unchanged, so an old
attempt can never overwrite a newer result.
"""

from __future__ import annotations

import dataclasses
from datetime import datetime, timedelta
from enum import StrEnum
from typing import Any

from sqlalchemy import JSON, Index, UniqueConstraint, text, update
from sqlmodel import Field, Session, SQLModel, select

from models.base import UtcDateTime, id_field, timestamp_field, utcnow

#: A claim older than this is abandoned and may be taken over (seed 000: 60 seconds).
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


class Account(SQLModel, table=True):
    """A recipient: addresses, locale and the gates' inputs."""

    __tablename__ = "accounts"

    id: str = id_field()
    email: str | None = Field(default=None, max_length=320)
    phone: str | None = Field(default=None, max_length=20)
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
    __table_args__ = (UniqueConstraint("account_id", "type", "occurrence",
                                       name="uq_notifications_recipient_occurrence"),)

    id: str = id_field()
    account_id: str = Field(foreign_key="accounts.id", max_length=36, index=True)
    type: str = Field(max_length=64)
    occurrence: str = Field(max_length=255)
    urgency: str = Field(default="normal", max_length=16)
    transactional: bool = True
    data: dict[str, Any] = Field(default_factory=dict, sa_type=JSON)
    batch_id: str | None = Field(default=None, max_length=36, index=True)
    created_at: datetime = timestamp_field()


class Delivery(SQLModel, table=True):
    """One channel of one notification, and what became of it."""

    __tablename__ = "deliveries"
    # the handoff sweep reads only queued/sending rows, oldest first: a partial index keeps
    # it flat however many finished deliveries accumulate
    __table_args__ = (Index("ix_deliveries_pending", "created_at",
                            postgresql_where=text("outcome IN ('queued', 'sending')"),
                            sqlite_where=text("outcome IN ('queued', 'sending')")),)

    id: str = id_field()
    notification_id: str = Field(foreign_key="notifications.id", max_length=36, index=True)
    channel: str = Field(max_length=16)
    outcome: str = Field(default=Outcome.QUEUED.value, max_length=24)
    reason: str | None = Field(default=None, max_length=64)
    provider: str | None = Field(default=None, max_length=32)
    provider_message_id: str | None = Field(default=None, max_length=255, index=True)
    #: Send attempts dispatched to a provider.
    attempts: int = 0
    last_error: str | None = Field(default=None, max_length=500)
    #: The live attempt's claim; the fencing token of its writes.
    claimed_at: datetime | None = Field(default=None, sa_type=UtcDateTime, nullable=True)
    #: When a channel job was last handed to the queue (the sweep's handoff stamp).
    queued_at: datetime | None = Field(default=None, sa_type=UtcDateTime, nullable=True)
    created_at: datetime = timestamp_field(index=True)
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
    #: For BUSY: how long until the other claim goes stale.
    retry_in: timedelta | None = None


def claim_delivery(session: Session, delivery_id: str, *, now: datetime | None = None,
                   stale_after: timedelta = CLAIM_STALE_AFTER) -> Claim:
    """Claim a queued (or abandoned) delivery for this attempt, in one conditional UPDATE.

    Succeeds only when the outcome is queued/sending and no live claim exists (none, or
    older than ``stale_after``). Commits.
    """
    now = now or utcnow()
    claimable = [Outcome.QUEUED.value, Outcome.SENDING.value]
    result = session.execute(
        update(Delivery)
        .where(Delivery.id == delivery_id, Delivery.outcome.in_(claimable),
               (Delivery.claimed_at.is_(None)) | (Delivery.claimed_at < now - stale_after))
        .values(outcome=Outcome.SENDING.value, claimed_at=now, updated_at=now))
    session.commit()
    if result.rowcount == 1:
        return Claim(verdict=ClaimVerdict.CLAIMED, token=now)
    row = session.get(Delivery, delivery_id, populate_existing=True)
    if row is None:
        return Claim(verdict=ClaimVerdict.MISSING)
    if row.outcome in FINAL_OUTCOMES:
        return Claim(verdict=ClaimVerdict.FINAL)
    held = row.claimed_at or now
    return Claim(verdict=ClaimVerdict.BUSY,
                 retry_in=max(held + stale_after - now, timedelta(seconds=1)))


def still_claimed(session: Session, delivery_id: str, token: datetime) -> bool:
    """True while this attempt's claim is the delivery's current one."""
    claimed_at = session.scalar(select(Delivery.claimed_at).where(Delivery.id == delivery_id))
    return claimed_at == token


def record_delivery_outcome(session: Session, delivery_id: str, *, token: datetime | None,
                            outcome: Outcome, reason: str | None = None,
                            provider: str | None = None, provider_message_id: str | None = None,
                            error: str | None = None, count_attempt: bool = False,
                            release_claim: bool = False) -> bool:
    """Write an attempt's outcome, fenced by its claim ``token``; commits.

    Returns False (and changes nothing) when the claim was taken over or the delivery
    already reached a final outcome. ``token=None`` writes without a claim (the queue
    layer's exhausted-restarts hook), still never over a final outcome.
    """
    now = utcnow()
    values: dict[str, Any] = {"outcome": outcome.value, "updated_at": now}
    if reason is not None:
        values["reason"] = reason
    if provider is not None:
        values["provider"] = provider
    if provider_message_id is not None:
        values["provider_message_id"] = provider_message_id
    if error is not None:
        values["last_error"] = error[:500]
    if count_attempt:
        values["attempts"] = Delivery.attempts + 1
    if release_claim:
        values["claimed_at"] = None
    condition = [Delivery.id == delivery_id,
                 Delivery.outcome.not_in([o.value for o in FINAL_OUTCOMES])]
    if token is not None:
        condition.append(Delivery.claimed_at == token)
    result = session.execute(update(Delivery).where(*condition).values(**values))
    session.commit()
    return result.rowcount == 1
