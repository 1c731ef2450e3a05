"""The delivery-report fallback of urgent SMS (docs/pipeline.md#delivery-report-fallback):

* ``deliveries.fallback_provider``: the provider a deliberate second send went to (null:
  none yet); written before that send, so it is also the mark that the fallback was
  taken and is never taken twice;
* ``deliveries.fallback_message_id``: that provider's message id, indexed where set, so
  that its delivery receipts correlate to the delivery.

Revision ID: 0012
Revises: 0011
Create Date: 2026-12-05
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0012"
down_revision: str | None = "0011"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.add_column("deliveries", sa.Column("fallback_provider", sa.String(length=32),
                                          nullable=True))
    op.add_column("deliveries", sa.Column("fallback_message_id", sa.String(length=255),
                                          nullable=True))
    op.create_index("ix_deliveries_fallback_message_id", "deliveries",
                    ["fallback_message_id"],
                    postgresql_where=sa.text("fallback_message_id IS NOT NULL"),
                    sqlite_where=sa.text("fallback_message_id IS NOT NULL"))


def downgrade() -> None:
    op.drop_index("ix_deliveries_fallback_message_id", table_name="deliveries")
    with op.batch_alter_table("deliveries") as deliveries:
        deliveries.drop_column("fallback_message_id")
        deliveries.drop_column("fallback_provider")
