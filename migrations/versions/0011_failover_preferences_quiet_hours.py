"""Provider failover, preferences and quiet hours (docs/pipeline.md#providers,
docs/api.md "Accounts and events"):

* ``accounts.preferences``: the account's preference document (null: everything on);
* ``accounts.timezone`` and ``accounts.quiet_hours``: the account's IANA time zone and the
  windows in which normal-urgency messages are held (null: never held);
* ``deliveries.attempts_log``: each provider attempt of a delivery (provider, when, result,
  error);
* ``deliveries.not_before``: set while quiet hours hold a delivery, the time it is due.

Revision ID: 0011
Revises: 0010
Create Date: 2026-12-05
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0011"
down_revision: str | None = "0010"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.add_column("accounts", sa.Column("preferences", sa.JSON(), nullable=True))
    op.add_column("accounts", sa.Column("timezone", sa.String(length=64), nullable=True))
    op.add_column("accounts", sa.Column("quiet_hours", sa.JSON(), nullable=True))
    op.add_column("deliveries", sa.Column("attempts_log", sa.JSON(), nullable=True))
    op.add_column("deliveries", sa.Column("not_before", sa.DateTime(timezone=True),
                                          nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("deliveries") as deliveries:
        deliveries.drop_column("not_before")
        deliveries.drop_column("attempts_log")
    with op.batch_alter_table("accounts") as accounts:
        accounts.drop_column("quiet_hours")
        accounts.drop_column("timezone")
        accounts.drop_column("preferences")
