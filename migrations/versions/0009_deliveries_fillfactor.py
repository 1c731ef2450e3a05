"""Deliveries leave a fifth of each page free (PostgreSQL): the handoff stamp, which
rewrites a delivery right after its insert, then fits beside it on its page and updates
no index (docs/pipeline.md#bulk-events).

Revision ID: 0009
Revises: 0008
Create Date: 2026-12-04
"""

from __future__ import annotations

from collections.abc import Sequence

from alembic import op

revision: str = "0009"
down_revision: str | None = "0008"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    # pages written from now on; existing full pages keep their rows where they are
    if op.get_bind().dialect.name == "postgresql":
        op.execute("ALTER TABLE deliveries SET (fillfactor = 80)")


def downgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        op.execute("ALTER TABLE deliveries RESET (fillfactor)")
