"""Outbound webhooks (docs/api.md#webhooks): ``webhook_endpoints`` (a customer's URL, the
event types it subscribes to, its signing secrets) and ``webhook_messages`` (one event for
one endpoint, its status and attempts), with the index the relay's sweep reads pending
messages by.

Revision ID: 0013
Revises: 0012
Create Date: 2026-12-05
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0013"
down_revision: str | None = "0012"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "webhook_endpoints",
        sa.Column("id", sa.String(length=36), nullable=False),
        sa.Column("url", sa.String(length=2048), nullable=False),
        sa.Column("events", sa.JSON(), nullable=False),
        sa.Column("description", sa.String(length=500), nullable=False),
        sa.Column("disabled", sa.Boolean(), nullable=False),
        sa.Column("secret", sa.String(length=64), nullable=False),
        sa.Column("previous_secret", sa.String(length=64), nullable=True),
        sa.Column("previous_secret_until", sa.DateTime(timezone=True), nullable=True),
        sa.Column("failing_since", sa.DateTime(timezone=True), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("id"),
    )
    op.create_table(
        "webhook_messages",
        sa.Column("id", sa.String(length=40), nullable=False),
        sa.Column("endpoint_id", sa.String(length=36), nullable=False),
        sa.Column("type", sa.String(length=48), nullable=False),
        sa.Column("body", sa.JSON(), nullable=False),
        sa.Column("status", sa.String(length=16), nullable=False),
        sa.Column("attempts", sa.JSON(), nullable=False),
        sa.Column("next_attempt_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("handed_off_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(["endpoint_id"], ["webhook_endpoints.id"],
                                ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id"),
    )
    op.create_index("ix_webhook_messages_endpoint_id", "webhook_messages", ["endpoint_id"])
    # the sweep's scan: pending messages only, by when they were last handed off
    op.create_index("ix_webhook_messages_pending", "webhook_messages", ["handed_off_at"],
                    postgresql_where=sa.text("status = 'pending'"),
                    sqlite_where=sa.text("status = 'pending'"))


def downgrade() -> None:
    op.drop_index("ix_webhook_messages_pending", table_name="webhook_messages")
    op.drop_index("ix_webhook_messages_endpoint_id", table_name="webhook_messages")
    op.drop_table("webhook_messages")
    op.drop_table("webhook_endpoints")
