"""Notification batches, callback receipts, and the handoff sweep's partial indexes.

Revision ID: 0003
Revises: 0002
Create Date: 2026-12-02
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0003"
down_revision: str | None = "0002"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def _partial_index(name: str, table: str, column: str, where: str) -> None:
    op.create_index(name, table, [column], postgresql_where=sa.text(where),
                    sqlite_where=sa.text(where))


def upgrade() -> None:
    op.create_table(
        "notification_batches",
        sa.Column("id", sa.String(length=36), nullable=False),
        sa.Column("type", sa.String(length=64), nullable=False),
        sa.Column("account_ids", sa.JSON(), nullable=False),
        sa.Column("data", sa.JSON(), nullable=False),
        sa.Column("status", sa.String(length=16), nullable=False),
        sa.Column("scheduled_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("started_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("finished_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("notification_count", sa.Integer(), nullable=False),
        sa.Column("fully_enqueued", sa.Boolean(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("id"),
    )
    _partial_index("ix_notification_batches_unfinished", "notification_batches", "created_at",
                   "status IN ('scheduled', 'running')")
    op.create_table(
        "callback_receipts",
        sa.Column("id", sa.String(length=36), nullable=False),
        sa.Column("provider", sa.String(length=32), nullable=False),
        sa.Column("event_id", sa.String(length=255), nullable=False),
        sa.Column("channel", sa.String(length=16), nullable=False),
        sa.Column("provider_message_id", sa.String(length=255), nullable=False),
        sa.Column("status", sa.String(length=24), nullable=False),
        sa.Column("detail", sa.String(length=255), nullable=True),
        sa.Column("payload", sa.JSON(), nullable=False),
        sa.Column("received_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("queued_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("processed_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("result", sa.String(length=16), nullable=True),
        sa.Column("delivery_id", sa.String(length=36), nullable=True),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("provider", "event_id", name="uq_callback_receipts_provider_event"),
    )
    _partial_index("ix_callback_receipts_unprocessed", "callback_receipts", "received_at",
                   "processed_at IS NULL")
    _partial_index("ix_deliveries_pending", "deliveries", "created_at",
                   "outcome IN ('queued', 'sending')")


def downgrade() -> None:
    op.drop_index("ix_deliveries_pending", table_name="deliveries")
    op.drop_table("callback_receipts")
    op.drop_table("notification_batches")
