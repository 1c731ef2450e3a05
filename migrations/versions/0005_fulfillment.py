"""Fulfillment: orders and their eSIM issuance with its status events, payments,
operator activations and their steps, the synced catalogs, provider health and FX rates.

Revision ID: 0005
Revises: 0004
Create Date: 2026-12-03
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0005"
down_revision: str | None = "0004"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

#: The issuances the store recovery scans read (a partial index keeps them flat).
UNFINISHED = ("issuance_state IN ('pending', 'in_flight', 'reconciliation_required', "
              "'pending_verification') OR (issuance_state = 'issued' AND announced_at IS NULL)")


def upgrade() -> None:
    op.create_table(
        "fx_rates",
        sa.Column("currency", sa.String(length=3), nullable=False),
        sa.Column("rate", sa.Numeric(precision=24, scale=10), nullable=False),
        sa.Column("provider", sa.String(length=32), nullable=False),
        sa.Column("fetched_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("currency"),
    )
    op.create_table(
        "operator_packages",
        sa.Column("id", sa.String(length=36), nullable=False),
        sa.Column("operator_slug", sa.String(length=32), nullable=False),
        sa.Column("code", sa.String(length=64), nullable=False),
        sa.Column("name", sa.String(length=255), nullable=False),
        sa.Column("price", sa.Numeric(precision=18, scale=4), nullable=False),
        sa.Column("currency", sa.String(length=3), nullable=False),
        sa.Column("active", sa.Boolean(), nullable=False),
        sa.Column("synced_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("operator_slug", "code", name="uq_operator_packages_code"),
    )
    op.create_index(
        "ix_operator_packages_operator_slug", "operator_packages", ["operator_slug"], unique=False
    )
    op.create_table(
        "provider_health",
        sa.Column("provider", sa.String(length=32), nullable=False),
        sa.Column("available", sa.Boolean(), nullable=False),
        sa.Column("detail", sa.String(length=500), nullable=True),
        sa.Column("checked_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("provider"),
    )
    op.create_table(
        "store_products",
        sa.Column("id", sa.String(length=64), nullable=False),
        sa.Column("provider", sa.String(length=32), nullable=False),
        sa.Column("name", sa.String(length=255), nullable=False),
        sa.Column("price", sa.Numeric(precision=18, scale=4), nullable=False),
        sa.Column("currency", sa.String(length=3), nullable=False),
        sa.Column("active", sa.Boolean(), nullable=False),
        sa.Column("synced_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("id"),
    )
    op.create_index("ix_store_products_provider", "store_products", ["provider"], unique=False)
    op.create_table(
        "activations",
        sa.Column("id", sa.String(length=36), nullable=False),
        sa.Column("account_id", sa.String(length=36), nullable=False),
        sa.Column("operator_slug", sa.String(length=32), nullable=False),
        sa.Column("msisdn", sa.String(length=20), nullable=False),
        sa.Column("step", sa.String(length=24), nullable=False),
        sa.Column("status", sa.String(length=16), nullable=False),
        sa.Column("operator_ref", sa.String(length=255), nullable=True),
        sa.Column("failed_reason", sa.String(length=500), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["account_id"],
            ["accounts.id"],
        ),
        sa.PrimaryKeyConstraint("id"),
    )
    op.create_index("ix_activations_account_id", "activations", ["account_id"], unique=False)
    op.create_table(
        "orders",
        sa.Column("id", sa.String(length=36), nullable=False),
        sa.Column("account_id", sa.String(length=36), nullable=False),
        sa.Column("status", sa.String(length=24), nullable=False),
        sa.Column("amount", sa.Numeric(precision=18, scale=4), nullable=False),
        sa.Column("currency", sa.String(length=3), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["account_id"],
            ["accounts.id"],
        ),
        sa.PrimaryKeyConstraint("id"),
    )
    op.create_index("ix_orders_account_id", "orders", ["account_id"], unique=False)
    op.create_table(
        "activation_steps",
        sa.Column("id", sa.String(length=36), nullable=False),
        sa.Column("activation_id", sa.String(length=36), nullable=False),
        sa.Column("step", sa.String(length=24), nullable=False),
        sa.Column("status", sa.String(length=16), nullable=False),
        sa.Column("detail", sa.String(length=500), nullable=True),
        sa.Column("at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["activation_id"],
            ["activations.id"],
        ),
        sa.PrimaryKeyConstraint("id"),
    )
    op.create_index(
        "ix_activation_steps_activation_id", "activation_steps", ["activation_id"], unique=False
    )
    op.create_table(
        "payments",
        sa.Column("id", sa.String(length=36), nullable=False),
        sa.Column("order_id", sa.String(length=36), nullable=True),
        sa.Column("activation_id", sa.String(length=36), nullable=True),
        sa.Column("amount", sa.Numeric(precision=18, scale=4), nullable=False),
        sa.Column("currency", sa.String(length=3), nullable=False),
        sa.Column("gateway", sa.String(length=32), nullable=False),
        sa.Column("status", sa.String(length=16), nullable=False),
        sa.Column("completed_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("settled_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["activation_id"],
            ["activations.id"],
        ),
        sa.ForeignKeyConstraint(
            ["order_id"],
            ["orders.id"],
        ),
        sa.PrimaryKeyConstraint("id"),
    )
    op.create_index("ix_payments_activation_id", "payments", ["activation_id"], unique=False)
    op.create_index("ix_payments_order_id", "payments", ["order_id"], unique=False)
    op.create_table(
        "store_orders",
        sa.Column("id", sa.String(length=36), nullable=False),
        sa.Column("product_id", sa.String(length=64), nullable=False),
        sa.Column("provider", sa.String(length=32), nullable=False),
        sa.Column("issuance_state", sa.String(length=32), nullable=False),
        sa.Column("provider_order_ref", sa.String(length=255), nullable=True),
        sa.Column("idempotency_key", sa.String(length=64), nullable=False),
        sa.Column("error_code", sa.String(length=64), nullable=True),
        sa.Column("failed_reason", sa.String(length=500), nullable=True),
        sa.Column("verification_url", sa.String(length=1000), nullable=True),
        sa.Column("verification_deadline", sa.DateTime(timezone=True), nullable=True),
        sa.Column("iccid", sa.String(length=32), nullable=True),
        sa.Column("activation_code", sa.String(length=255), nullable=True),
        sa.Column("smdp_address", sa.String(length=255), nullable=True),
        sa.Column("in_flight_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("webhook_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("announced_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("recovered_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["id"],
            ["orders.id"],
        ),
        sa.PrimaryKeyConstraint("id"),
    )
    op.create_index(
        "ix_store_orders_provider_order_ref", "store_orders", ["provider_order_ref"], unique=False
    )
    op.create_index(
        "ix_store_orders_unfinished",
        "store_orders",
        ["updated_at"],
        unique=False,
        postgresql_where=sa.text(UNFINISHED),
        sqlite_where=sa.text(UNFINISHED),
    )
    op.create_table(
        "store_order_status_events",
        sa.Column("id", sa.String(length=36), nullable=False),
        sa.Column("store_order_id", sa.String(length=36), nullable=False),
        sa.Column("from_state", sa.String(length=32), nullable=True),
        sa.Column("to_state", sa.String(length=32), nullable=False),
        sa.Column("error_code", sa.String(length=64), nullable=True),
        sa.Column("source", sa.String(length=32), nullable=False),
        sa.Column("note", sa.String(length=255), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["store_order_id"],
            ["store_orders.id"],
        ),
        sa.PrimaryKeyConstraint("id"),
    )
    op.create_index(
        "ix_store_order_status_events_store_order_id",
        "store_order_status_events",
        ["store_order_id"],
        unique=False,
    )


def downgrade() -> None:
    for table in (
        "store_order_status_events",
        "store_orders",
        "payments",
        "activation_steps",
        "orders",
        "activations",
        "store_products",
        "provider_health",
        "operator_packages",
        "fx_rates",
    ):
        op.drop_table(table)
