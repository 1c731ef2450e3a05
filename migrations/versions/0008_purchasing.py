"""Purchasing: suppliers, catalog items and their supplier mappings, purchase orders and
their lines, one dispatch per supplier per order, the order audit trail, inbound vendor
documents and the dispatch outbox (docs/suppliers.md#purchase-orders).

Revision ID: 0008
Revises: 0007
Create Date: 2026-12-04
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0008"
down_revision: str | None = "0007"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

#: Reroutes and dead-end reports are recorded once per line and supplier.
ONCE_PER_LINE = "type IN ('BACKORDER_REROUTED', 'BACKORDER_NO_ALTERNATE')"
#: The stale-dispatch sweep reads pending dispatches only.
PENDING = "status = 'pending'"
#: The relay reads entries not relayed yet.
UNRELAYED = "relayed_at IS NULL"


def upgrade() -> None:
    op.create_table(
        "catalog_items",
        sa.Column("id", sa.String(length=36), nullable=False),
        sa.Column("name", sa.String(length=255), nullable=False),
        sa.Column("unit", sa.String(length=32), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("id"),
    )
    op.create_table(
        "purchase_orders",
        sa.Column("id", sa.String(length=36), nullable=False),
        sa.Column("order_number", sa.String(length=64), nullable=False),
        sa.Column("restaurant_id", sa.String(length=64), nullable=False),
        sa.Column("restaurant_name", sa.String(length=255), nullable=False),
        sa.Column("restaurant_location", sa.String(length=255), nullable=True),
        sa.Column("placed_by_email", sa.String(length=320), nullable=True),
        sa.Column("delivery_notes", sa.String(length=2000), nullable=True),
        sa.Column("status", sa.String(length=16), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("id"),
    )
    op.create_table(
        "suppliers",
        sa.Column("id", sa.String(length=36), nullable=False),
        sa.Column("name", sa.String(length=255), nullable=False),
        sa.Column("type", sa.String(length=24), nullable=False),
        sa.Column("email", sa.String(length=320), nullable=True),
        sa.Column("cc", sa.JSON(), nullable=False),
        sa.Column("sftp", sa.JSON(none_as_null=True), nullable=True),
        sa.Column("active", sa.Boolean(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("id"),
    )
    op.create_table(
        "purchase_order_events",
        sa.Column("id", sa.String(length=36), nullable=False),
        sa.Column("order_id", sa.String(length=36), nullable=False),
        sa.Column("type", sa.String(length=48), nullable=False),
        sa.Column("line_item_id", sa.String(length=36), nullable=True),
        sa.Column("supplier_id", sa.String(length=36), nullable=True),
        sa.Column("actor_id", sa.String(length=64), nullable=False),
        sa.Column("payload", sa.JSON(), nullable=False),
        sa.Column("at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["order_id"],
            ["purchase_orders.id"],
        ),
        sa.PrimaryKeyConstraint("id"),
    )
    op.create_index(
        "ix_purchase_order_events_order_id", "purchase_order_events", ["order_id"], unique=False
    )
    op.create_index(
        "ux_purchase_order_events_once",
        "purchase_order_events",
        ["type", "line_item_id", "supplier_id"],
        unique=True,
        postgresql_where=sa.text(ONCE_PER_LINE),
        sqlite_where=sa.text(ONCE_PER_LINE),
    )
    op.create_table(
        "supplier_dispatches",
        sa.Column("id", sa.String(length=36), nullable=False),
        sa.Column("order_id", sa.String(length=36), nullable=False),
        sa.Column("supplier_id", sa.String(length=36), nullable=False),
        sa.Column("supplier_type", sa.String(length=24), nullable=False),
        sa.Column("status", sa.String(length=16), nullable=False),
        sa.Column("reference", sa.String(length=255), nullable=True),
        sa.Column("attempt", sa.Integer(), nullable=False),
        sa.Column("failure_reason", sa.String(length=500), nullable=True),
        sa.Column("submitted_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("confirmed_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("is_reroute", sa.Boolean(), nullable=False),
        sa.Column("reroute_of_dispatch_id", sa.String(length=36), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["order_id"],
            ["purchase_orders.id"],
        ),
        sa.ForeignKeyConstraint(
            ["reroute_of_dispatch_id"],
            ["supplier_dispatches.id"],
        ),
        sa.ForeignKeyConstraint(
            ["supplier_id"],
            ["suppliers.id"],
        ),
        sa.PrimaryKeyConstraint("id"),
    )
    op.create_index(
        "ix_supplier_dispatches_order_id", "supplier_dispatches", ["order_id"], unique=False
    )
    op.create_index(
        "ix_supplier_dispatches_pending",
        "supplier_dispatches",
        ["created_at"],
        unique=False,
        postgresql_where=sa.text(PENDING),
        sqlite_where=sa.text(PENDING),
    )
    op.create_index(
        "ix_supplier_dispatches_reference", "supplier_dispatches", ["reference"], unique=False
    )
    op.create_index(
        "ix_supplier_dispatches_supplier_id", "supplier_dispatches", ["supplier_id"], unique=False
    )
    op.create_table(
        "supplier_mappings",
        sa.Column("id", sa.String(length=36), nullable=False),
        sa.Column("catalog_item_id", sa.String(length=36), nullable=False),
        sa.Column("supplier_id", sa.String(length=36), nullable=False),
        sa.Column("supplier_sku", sa.String(length=48), nullable=False),
        sa.Column("supplier_product_code", sa.String(length=48), nullable=True),
        sa.Column("unit_size", sa.String(length=64), nullable=True),
        sa.Column("preferred", sa.Boolean(), nullable=False),
        sa.ForeignKeyConstraint(
            ["catalog_item_id"],
            ["catalog_items.id"],
        ),
        sa.ForeignKeyConstraint(
            ["supplier_id"],
            ["suppliers.id"],
        ),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint(
            "catalog_item_id", "supplier_id", name="uq_supplier_mappings_item_supplier"
        ),
    )
    op.create_index(
        "ix_supplier_mappings_catalog_item_id",
        "supplier_mappings",
        ["catalog_item_id"],
        unique=False,
    )
    op.create_index(
        "ix_supplier_mappings_supplier_id", "supplier_mappings", ["supplier_id"], unique=False
    )
    op.create_table(
        "vendor_documents",
        sa.Column("id", sa.String(length=36), nullable=False),
        sa.Column("supplier_id", sa.String(length=36), nullable=False),
        sa.Column("reference", sa.String(length=255), nullable=False),
        sa.Column("kind", sa.String(length=32), nullable=False),
        sa.Column("result", sa.JSON(), nullable=False),
        sa.Column("received_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["supplier_id"],
            ["suppliers.id"],
        ),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("supplier_id", "reference", name="uq_vendor_documents_reference"),
    )
    op.create_table(
        "purchase_order_lines",
        sa.Column("id", sa.String(length=36), nullable=False),
        sa.Column("order_id", sa.String(length=36), nullable=False),
        sa.Column("catalog_item_id", sa.String(length=36), nullable=False),
        sa.Column("quantity", sa.Numeric(precision=18, scale=4), nullable=False),
        sa.Column("supplier_id", sa.String(length=36), nullable=False),
        sa.Column("dispatch_id", sa.String(length=36), nullable=True),
        sa.Column("status", sa.String(length=32), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["catalog_item_id"],
            ["catalog_items.id"],
        ),
        sa.ForeignKeyConstraint(
            ["dispatch_id"],
            ["supplier_dispatches.id"],
        ),
        sa.ForeignKeyConstraint(
            ["order_id"],
            ["purchase_orders.id"],
        ),
        sa.ForeignKeyConstraint(
            ["supplier_id"],
            ["suppliers.id"],
        ),
        sa.PrimaryKeyConstraint("id"),
    )
    op.create_index(
        "ix_purchase_order_lines_order_id", "purchase_order_lines", ["order_id"], unique=False
    )
    op.create_table(
        "supplier_dispatch_outbox",
        sa.Column("id", sa.String(length=36), nullable=False),
        sa.Column("dispatch_id", sa.String(length=36), nullable=False),
        sa.Column("payload", sa.JSON(), nullable=False),
        sa.Column("dedup_id", sa.String(length=255), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("relayed_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("tries", sa.Integer(), nullable=False),
        sa.Column("last_error", sa.String(length=500), nullable=True),
        sa.ForeignKeyConstraint(
            ["dispatch_id"],
            ["supplier_dispatches.id"],
        ),
        sa.PrimaryKeyConstraint("id"),
    )
    op.create_index(
        "ix_supplier_dispatch_outbox_dispatch_id",
        "supplier_dispatch_outbox",
        ["dispatch_id"],
        unique=False,
    )
    op.create_index(
        "ix_supplier_dispatch_outbox_unrelayed",
        "supplier_dispatch_outbox",
        ["created_at"],
        unique=False,
        postgresql_where=sa.text(UNRELAYED),
        sqlite_where=sa.text(UNRELAYED),
    )
    op.create_table(
        "supplier_dispatch_lines",
        sa.Column("dispatch_id", sa.String(length=36), nullable=False),
        sa.Column("line_id", sa.String(length=36), nullable=False),
        sa.ForeignKeyConstraint(
            ["dispatch_id"],
            ["supplier_dispatches.id"],
        ),
        sa.ForeignKeyConstraint(
            ["line_id"],
            ["purchase_order_lines.id"],
        ),
        sa.PrimaryKeyConstraint("dispatch_id", "line_id"),
    )
    op.create_index(
        "ix_supplier_dispatch_lines_line_id", "supplier_dispatch_lines", ["line_id"], unique=False
    )


def downgrade() -> None:
    op.drop_index("ix_supplier_dispatch_lines_line_id", table_name="supplier_dispatch_lines")
    op.drop_table("supplier_dispatch_lines")
    op.drop_index("ix_supplier_dispatch_outbox_unrelayed", table_name="supplier_dispatch_outbox")
    op.drop_index("ix_supplier_dispatch_outbox_dispatch_id", table_name="supplier_dispatch_outbox")
    op.drop_table("supplier_dispatch_outbox")
    op.drop_index("ix_purchase_order_lines_order_id", table_name="purchase_order_lines")
    op.drop_table("purchase_order_lines")
    op.drop_table("vendor_documents")
    op.drop_index("ix_supplier_mappings_supplier_id", table_name="supplier_mappings")
    op.drop_index("ix_supplier_mappings_catalog_item_id", table_name="supplier_mappings")
    op.drop_table("supplier_mappings")
    op.drop_index("ix_supplier_dispatches_supplier_id", table_name="supplier_dispatches")
    op.drop_index("ix_supplier_dispatches_reference", table_name="supplier_dispatches")
    op.drop_index("ix_supplier_dispatches_pending", table_name="supplier_dispatches")
    op.drop_index("ix_supplier_dispatches_order_id", table_name="supplier_dispatches")
    op.drop_table("supplier_dispatches")
    op.drop_index("ux_purchase_order_events_once", table_name="purchase_order_events")
    op.drop_index("ix_purchase_order_events_order_id", table_name="purchase_order_events")
    op.drop_table("purchase_order_events")
    op.drop_table("suppliers")
    op.drop_table("purchase_orders")
    op.drop_table("catalog_items")
