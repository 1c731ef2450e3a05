"""The operator console: audit rows name their queue and job, and say when the action
finished (a row written before its action and never completed is an action that died).

Revision ID: 0006
Revises: 0005
Create Date: 2026-12-03
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0006"
down_revision: str | None = "0005"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("audit_log") as batch:
        batch.add_column(sa.Column("queue", sa.String(length=128), nullable=True))
        batch.add_column(sa.Column("job_id", sa.String(length=255), nullable=True))
        batch.add_column(sa.Column("completed_at", sa.DateTime(timezone=True), nullable=True))
        batch.add_column(sa.Column("error", sa.String(length=500), nullable=True))
    # rows from before this revision recorded finished actions
    op.execute("UPDATE audit_log SET completed_at = at")


def downgrade() -> None:
    with op.batch_alter_table("audit_log") as batch:
        batch.drop_column("error")
        batch.drop_column("completed_at")
        batch.drop_column("job_id")
        batch.drop_column("queue")
