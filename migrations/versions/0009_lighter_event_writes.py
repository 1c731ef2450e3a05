"""Lighter writes per event (docs/pipeline.md#bulk-events):

* deliveries leave a fifth of each page free (PostgreSQL): the handoff stamp, which
  rewrites a delivery right after its insert, then fits beside it on its page and
  updates no index;
* ``batch_id`` and ``provider_message_id`` are indexed only where they are set: most
  rows have neither, and each such row wrote an index entry no look-up reads;
* notifications lose their index on ``account_id`` alone: the unique key (account, type,
  occurrence) begins with it and serves the same look-ups.

Revision ID: 0009
Revises: 0008
Create Date: 2026-12-04
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0009"
down_revision: str | None = "0008"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

#: (index, table, column) of the indexes kept only where their column is set.
WHERE_SET = [("ix_notifications_batch_id", "notifications", "batch_id"),
             ("ix_deliveries_provider_message_id", "deliveries", "provider_message_id")]


def upgrade() -> None:
    # pages written from now on; existing full pages keep their rows where they are
    if op.get_bind().dialect.name == "postgresql":
        op.execute("ALTER TABLE deliveries SET (fillfactor = 80)")
    for index, table, column in WHERE_SET:
        op.drop_index(index, table_name=table)
        op.create_index(index, table, [column],
                        postgresql_where=sa.text(f"{column} IS NOT NULL"),
                        sqlite_where=sa.text(f"{column} IS NOT NULL"))
    op.drop_index("ix_notifications_account_id", table_name="notifications")


def downgrade() -> None:
    op.create_index("ix_notifications_account_id", "notifications", ["account_id"])
    for index, table, column in WHERE_SET:
        op.drop_index(index, table_name=table)
        op.create_index(index, table, [column])
    if op.get_bind().dialect.name == "postgresql":
        op.execute("ALTER TABLE deliveries RESET (fillfactor)")
