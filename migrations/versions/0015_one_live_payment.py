"""At most one live payment per order, kept by the database: a partial unique index on
``payments.order_id`` over the live statuses (pending, completed, settled). A payment's
creation for an order inserts ``ON CONFLICT DO NOTHING`` against it, in one statement
(docs/state-machines.md#payments). herald's creation already refused a second live
payment, so an existing database has none to fail the index.

Revision ID: 0015
Revises: 0014
Create Date: 2026-12-05
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0015"
down_revision: str | None = "0014"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

LIVE = sa.text("status IN ('pending', 'completed', 'settled')")


def upgrade() -> None:
    op.create_index("uq_payments_live_order", "payments", ["order_id"], unique=True,
                    postgresql_where=LIVE, sqlite_where=LIVE)


def downgrade() -> None:
    op.drop_index("uq_payments_live_order", table_name="payments")
