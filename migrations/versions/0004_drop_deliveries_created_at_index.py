"""Drop the full ``deliveries.created_at`` index.

Nothing reads deliveries by creation time but the handoff sweep, which uses the partial
``ix_deliveries_pending`` index. Every claim and outcome write changes ``outcome`` (the
partial index's condition), so PostgreSQL cannot update those rows in place and inserts
into every index of the table: each index nobody reads costs two index insertions per
delivery.

Revision ID: 0004
Revises: 0003
Create Date: 2026-12-02
"""

from __future__ import annotations

from collections.abc import Sequence

from alembic import op

revision: str = "0004"
down_revision: str | None = "0003"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.drop_index("ix_deliveries_created_at", table_name="deliveries")


def downgrade() -> None:
    op.create_index("ix_deliveries_created_at", "deliveries", ["created_at"])
