"""Provider delivery receipts (docs/state-machines.md#callback-receipts).

A receipt is persisted with its normalized fields when a provider calls back; its
``queued_at`` is the enqueue stamp (written only after the ``normalise_callback`` job was
accepted) and ``processed_at`` says normalization is done with it. (provider, event_id)
is unique: a provider redelivering the same event finds the receipt it already left.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import JSON, Index, UniqueConstraint, text, update
from sqlalchemy.dialects.postgresql import insert as postgresql_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert
from sqlmodel import Field, Session, SQLModel, col, select

from models.base import UtcDateTime, id_field, timestamp_field, utcnow


class CallbackReceipt(SQLModel, table=True):
    """One provider callback event, normalized."""

    __tablename__ = "callback_receipts"
    __table_args__ = (
        UniqueConstraint("provider", "event_id", name="uq_callback_receipts_provider_event"),
        # the sweep reads only unprocessed receipts, oldest received first
        Index("ix_callback_receipts_unprocessed", "received_at",
              postgresql_where=text("processed_at IS NULL"),
              sqlite_where=text("processed_at IS NULL")),
        # a delivery's receipts, for the console's search (docs/console.md#search)
        Index("ix_callback_receipts_message", "provider", "provider_message_id"),
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


# -- the receipt's transition helpers (none of them commits: the caller does) ----------------
#: What normalization did with a receipt.
RESULT_APPLIED = "applied"
RESULT_UNCHANGED = "unchanged"
RESULT_UNMATCHED = "unmatched"


def insert_or_find_receipt(session: Session, receipt: CallbackReceipt
                           ) -> tuple[CallbackReceipt, bool]:
    """Persist ``receipt`` unless its (provider, event_id) is already stored; returns the
    stored receipt and True when it is new.

    One ``INSERT … ON CONFLICT DO NOTHING``: two requests carrying the same event at once
    store one receipt, and neither fails.
    """
    dialect = session.get_bind().dialect.name
    insert = postgresql_insert if dialect == "postgresql" else sqlite_insert
    row = receipt.model_dump()
    inserted = session.execute(
        insert(CallbackReceipt).values(**row)
        .on_conflict_do_nothing(index_elements=["provider", "event_id"])
        .returning(col(CallbackReceipt.id))).scalar_one_or_none()
    if inserted is not None:
        return receipt, True
    existing = session.exec(select(CallbackReceipt).where(
        CallbackReceipt.provider == receipt.provider,
        CallbackReceipt.event_id == receipt.event_id)).one()
    return existing, False


def stamp_receipts(session: Session, receipt_ids: list[str], *,
                   now: datetime | None = None) -> int:
    """Write the enqueue stamp of these receipts that are still unprocessed (call it only
    after their job was accepted, or — the sweep — just before re-adding it); returns how
    many were stamped."""
    if not receipt_ids:
        return 0
    result = session.exec(
        update(CallbackReceipt)
        .where(col(CallbackReceipt.id).in_(receipt_ids),
               col(CallbackReceipt.processed_at).is_(None))
        .values(queued_at=now or utcnow()))
    return result.rowcount


def mark_receipt_processed(session: Session, receipt_id: str, *, result: str,
                           delivery_id: str | None = None, now: datetime | None = None) -> bool:
    """Record what normalization did (``applied``, ``unchanged`` or ``unmatched``) and the
    delivery it matched; False (nothing written) when it was processed already."""
    written = session.exec(
        update(CallbackReceipt)
        .where(col(CallbackReceipt.id) == receipt_id, col(CallbackReceipt.processed_at).is_(None))
        .values(processed_at=now or utcnow(), result=result, delivery_id=delivery_id))
    return written.rowcount == 1
