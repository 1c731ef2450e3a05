"""Secrets encrypted at rest (docs/configuration.md#secrets_key): the webhook signing
secret columns widened to hold a sealed value (a Fernet token), then every secret stored
in clear sealed with SECRETS_KEY's newest key — webhook signing secrets and previous
secrets, SFTP passwords, stored idempotent answers — by :func:`models.sealed.reseal_all`,
the pass ``herald secrets rotate`` runs.

Without a key (SECRETS_KEY unset outside the embedded default) the upgrade stops, naming
SECRETS_KEY, when some secret is stored in clear; an empty database needs none. The
downgrade opens every sealed value again (it needs the key) and narrows the columns.

Revision ID: 0016
Revises: 0015
Create Date: 2026-12-06
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0016"
down_revision: str | None = "0015"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_SECRET_COLUMNS = (("secret", False), ("previous_secret", True))


def upgrade() -> None:
    from models.sealed import reseal_all

    if op.get_bind().dialect.name == "postgresql":  # SQLite keeps any length in a VARCHAR
        for name, nullable in _SECRET_COLUMNS:
            op.alter_column("webhook_endpoints", name, type_=sa.String(),
                            existing_type=sa.String(length=64), existing_nullable=nullable)
    reseal_all(op.get_bind())


def downgrade() -> None:
    from models.sealed import unseal_all

    unseal_all(op.get_bind())
    if op.get_bind().dialect.name == "postgresql":
        for name, nullable in _SECRET_COLUMNS:
            op.alter_column("webhook_endpoints", name, type_=sa.String(length=64),
                            existing_type=sa.String(), existing_nullable=nullable)
