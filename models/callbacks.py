"""Provider delivery receipts (seed 000 "Batches and Callbacks", "Handoff Reconciliation").

A receipt is persisted with its normalized fields when a provider calls back; its
``queued_at`` is the enqueue stamp (written only after the ``normalise_callback`` job was
accepted) and ``processed_at`` says normalization is done with it. (provider, event_id)
is unique: a provider redelivering the same event finds the receipt it already left.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import JSON, Index, UniqueConstraint, text
from sqlmodel import Field, SQLModel

from models.base import UtcDateTime, id_field, timestamp_field


class CallbackReceipt(SQLModel, table=True):
    """One provider callback event, normalized."""

    __tablename__ = "callback_receipts"
    __table_args__ = (
        UniqueConstraint("provider", "event_id", name="uq_callback_receipts_provider_event"),
        # the sweep reads only unprocessed receipts, oldest received first
        Index("ix_callback_receipts_unprocessed", "received_at",
              postgresql_where=text("processed_at IS NULL"),
              sqlite_where=text("processed_at IS NULL")),
    )

    id: str = id_field()
    provider: str = Field(max_length=32)
    #: The provider's id of this event (unique per provider).
    event_id: str = Field(max_length=255)
    channel: str = Field(max_length=16)
    provider_message_id: str = Field(max_length=255)
    #: The delivery outcome the event reports (``sent``, ``delivered``, ``failed_terminal``).
    status: str = Field(max_length=24)
    #: The provider's own status / error code, for the operator.
    detail: str | None = Field(default=None, max_length=255)
    payload: dict[str, Any] = Field(default_factory=dict, sa_type=JSON)
    received_at: datetime = timestamp_field()
    #: When a normalise_callback job was last accepted for it (the enqueue stamp).
    queued_at: datetime | None = Field(default=None, sa_type=UtcDateTime, nullable=True)
    processed_at: datetime | None = Field(default=None, sa_type=UtcDateTime, nullable=True)
    #: What normalization did: ``applied``, ``unchanged`` or ``unmatched``.
    result: str | None = Field(default=None, max_length=16)
    delivery_id: str | None = Field(default=None, max_length=36)
