"""The console's search: accounts by email or phone, a delivery's receipts by its
provider's message id (docs/console.md#search).

Revision ID: 0007_search
Revises: 0006
Create Date: 2026-12-04
"""

from __future__ import annotations

from collections.abc import Sequence

from alembic import op

revision: str = "0007_search"
down_revision: str | None = "0006"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_index("ix_accounts_email", "accounts", ["email"])
    op.create_index("ix_accounts_phone", "accounts", ["phone"])
    op.create_index("ix_callback_receipts_message", "callback_receipts",
                    ["provider", "provider_message_id"])


def downgrade() -> None:
    op.drop_index("ix_callback_receipts_message", table_name="callback_receipts")
    op.drop_index("ix_accounts_phone", table_name="accounts")
    op.drop_index("ix_accounts_email", table_name="accounts")
