"""Outbound webhook endpoints and their messages (docs/api.md#webhooks).

An endpoint is a customer's URL, the event types it subscribes to and the secret its
messages are signed with. A rotation keeps the previous secret for
:data:`ROTATION_OVERLAP`, so that a receiver that has not switched yet still verifies
(both signatures are sent meanwhile). A message is one event for one endpoint: written
with the state change that causes it (the outbox pattern), then relayed.
"""

from __future__ import annotations

import base64
import secrets
from datetime import datetime, timedelta
from enum import StrEnum
from typing import Any

from sqlalchemy import JSON, Column, ForeignKey, Index, String, text
from sqlmodel import Field, SQLModel

from models.base import UtcDateTime, id_field, timestamp_field, utcnow

#: The event types an endpoint may subscribe to.
WEBHOOK_EVENT_TYPES = (
    "delivery.sent", "delivery.delivered", "delivery.failed", "delivery.suppressed",
    "order.issued", "order.failed", "order.verification_required", "payment.settled",
    "activation.completed", "activation.failed", "purchase_order.completed",
    "purchase_order.partial", "purchase_order.failed", "line_item.backordered",
    "line_item.rerouted",
)
#: How long a rotated-out secret still signs (beside the new one).
ROTATION_OVERLAP = timedelta(hours=24)
#: What every secret starts with (Standard Webhooks).
SECRET_PREFIX = "whsec_"


class MessageStatus(StrEnum):
    """Where a webhook message is: still to be delivered, delivered, or given up."""

    PENDING = "pending"
    DELIVERED = "delivered"
    FAILED = "failed"


def new_secret() -> str:
    """A fresh signing secret: ``whsec_`` and the base64 of 32 random bytes."""
    return SECRET_PREFIX + base64.b64encode(secrets.token_bytes(32)).decode()


class WebhookEndpoint(SQLModel, table=True):
    """A customer's URL, the event types it gets and the secrets its messages are signed
    with; ``disabled`` stops every send to it."""

    __tablename__ = "webhook_endpoints"

    id: str = id_field()
    url: str = Field(max_length=2048)
    events: list[str] = Field(default_factory=list, sa_type=JSON)
    description: str = Field(default="", max_length=500)
    disabled: bool = Field(default=False)
    secret: str = Field(default_factory=new_secret, max_length=64)
    #: The secret a rotation replaced, still signing until ``previous_secret_until``.
    previous_secret: str | None = Field(default=None, max_length=64, nullable=True)
    previous_secret_until: datetime | None = Field(default=None, sa_type=UtcDateTime,
                                                   nullable=True)
    #: Since when every attempt to it has failed (null: the last one succeeded).
    failing_since: datetime | None = Field(default=None, sa_type=UtcDateTime, nullable=True)
    created_at: datetime = timestamp_field()
    updated_at: datetime = timestamp_field()

    def rotate_secret(self, now: datetime | None = None) -> str:
        """Replace the secret with a fresh one, keeping the old one signing for
        :data:`ROTATION_OVERLAP`; returns the new secret."""
        now = now or utcnow()
        self.previous_secret, self.previous_secret_until = self.secret, now + ROTATION_OVERLAP
        self.secret, self.updated_at = new_secret(), now
        return self.secret

    def signing_secrets(self, now: datetime | None = None) -> list[str]:
        """The secrets a message is signed with now: the current one, and the previous one
        while its overlap lasts."""
        now = now or utcnow()
        if (self.previous_secret is not None and self.previous_secret_until is not None
                and self.previous_secret_until > now):
            return [self.secret, self.previous_secret]
        return [self.secret]


def message_id() -> str:
    """A message id: ``msg_`` and 27 random base32 characters (stable across retries)."""
    return "msg_" + base64.b32encode(secrets.token_bytes(17)).decode().rstrip("=").lower()


class WebhookMessage(SQLModel, table=True):
    """One event for one endpoint, and every attempt made to deliver it."""

    __tablename__ = "webhook_messages"
    # the sweep's scan: pending messages only, by when they were last handed off
    __table_args__ = (Index("ix_webhook_messages_pending", "handed_off_at",
                            postgresql_where=text("status = 'pending'"),
                            sqlite_where=text("status = 'pending'")),)

    id: str = Field(default_factory=message_id, primary_key=True, max_length=40)
    endpoint_id: str = Field(sa_column=Column(
        String(36), ForeignKey("webhook_endpoints.id", ondelete="CASCADE"), nullable=False,
        index=True))
    type: str = Field(max_length=48)
    body: dict[str, Any] = Field(default_factory=dict, sa_type=JSON)
    status: str = Field(default=MessageStatus.PENDING.value, max_length=16)
    #: ``{at, status_code, duration_ms, error}`` per attempt, oldest first.
    attempts: list[dict[str, Any]] = Field(default_factory=list, sa_type=JSON)
    next_attempt_at: datetime | None = Field(default=None, sa_type=UtcDateTime,
                                             nullable=True)
    #: When its relay job was last enqueued (the sweep re-enqueues pending ones).
    handed_off_at: datetime | None = Field(default=None, sa_type=UtcDateTime, nullable=True)
    created_at: datetime = timestamp_field()
