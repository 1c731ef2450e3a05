"""Digests (docs/api.md#digests): ``digest_buckets`` (the events of one account, type and
key within one window; at most one open per key, the partial unique index the event's
upsert lands on) and ``digest_items`` (one accepted event each, its occurrence unique).

Revision ID: 0014
Revises: 0013
Create Date: 2026-12-05
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0014"
down_revision: str | None = "0013"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

OPEN = sa.text("status = 'open'")


def upgrade() -> None:
    op.create_table(
        "digest_buckets",
        sa.Column("id", sa.String(length=36), nullable=False),
        sa.Column("account_id", sa.String(length=36), nullable=False),
        sa.Column("type", sa.String(length=64), nullable=False),
        sa.Column("key", sa.String(length=255), nullable=False),
        sa.Column("mode", sa.String(length=16), nullable=False),
        sa.Column("status", sa.String(length=16), nullable=False),
        sa.Column("opened_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("closes_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("item_count", sa.Integer(), nullable=False),
        sa.Column("closed_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("notification_id", sa.String(length=36), nullable=True),
        sa.ForeignKeyConstraint(["account_id"], ["accounts.id"]),
        sa.PrimaryKeyConstraint("id"),
    )
    op.create_index("uq_digest_buckets_open", "digest_buckets", ["account_id", "type", "key"],
                    unique=True, postgresql_where=OPEN, sqlite_where=OPEN)
    op.create_index("ix_digest_buckets_due", "digest_buckets", ["closes_at"],
                    postgresql_where=OPEN, sqlite_where=OPEN)
    op.create_table(
        "digest_items",
        sa.Column("id", sa.String(length=36), nullable=False),
        sa.Column("bucket_id", sa.String(length=36), nullable=False),
        sa.Column("account_id", sa.String(length=36), nullable=False),
        sa.Column("type", sa.String(length=64), nullable=False),
        sa.Column("occurrence", sa.String(length=255), nullable=False),
        sa.Column("data", sa.JSON(), nullable=False),
        sa.Column("at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("sent_at_once", sa.Boolean(), nullable=False),
        sa.ForeignKeyConstraint(["bucket_id"], ["digest_buckets.id"]),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("account_id", "type", "occurrence",
                            name="uq_digest_items_occurrence"),
    )
    op.create_index("ix_digest_items_bucket_id", "digest_items", ["bucket_id"])


def downgrade() -> None:
    op.drop_index("ix_digest_items_bucket_id", table_name="digest_items")
    op.drop_table("digest_items")
    op.drop_index("ix_digest_buckets_due", table_name="digest_buckets")
    op.drop_index("uq_digest_buckets_open", table_name="digest_buckets")
    op.drop_table("digest_buckets")
