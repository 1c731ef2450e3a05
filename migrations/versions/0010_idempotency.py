"""Idempotent creates (docs/api.md, "Idempotency-Key"):

* ``idempotency_keys``: each ``Idempotency-Key`` a token used, with the request it was
  claimed for and its first answer;
* purchase orders are unique per restaurant and order number. Orders placed twice before
  this revision keep the oldest one's number; each later one's number gets ``~`` and the
  start of its id, so the constraint can be made and no order is lost.

Revision ID: 0010
Revises: 0009
Create Date: 2026-12-04
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0010"
down_revision: str | None = "0009"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

#: The characters of an order number a renamed duplicate keeps (``~`` and 8 of its id follow).
_KEPT = 64 - 9


def upgrade() -> None:
    op.create_table(
        "idempotency_keys",
        sa.Column("scope", sa.String(length=64), nullable=False),
        sa.Column("key", sa.String(length=255), nullable=False),
        sa.Column("fingerprint", sa.String(length=64), nullable=False),
        sa.Column("claim", sa.String(length=36), nullable=False),
        sa.Column("claimed_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("status", sa.Integer(), nullable=True),
        sa.Column("headers", sa.String(), nullable=True),
        sa.Column("body", sa.LargeBinary(), nullable=True),
        sa.PrimaryKeyConstraint("scope", "key"),
    )
    op.create_index("ix_idempotency_keys_claimed_at", "idempotency_keys", ["claimed_at"])
    _rename_duplicate_orders()
    op.create_index("ux_purchase_orders_restaurant_order_number", "purchase_orders",
                    ["restaurant_id", "order_number"], unique=True)


def _rename_duplicate_orders() -> None:
    orders = sa.table("purchase_orders", sa.column("id"), sa.column("restaurant_id"),
                      sa.column("order_number"), sa.column("created_at"))
    bind = op.get_bind()
    repeated = bind.execute(
        sa.select(orders.c.restaurant_id, orders.c.order_number)
        .group_by(orders.c.restaurant_id, orders.c.order_number)
        .having(sa.func.count() > 1)).all()
    for restaurant_id, order_number in repeated:
        later = bind.execute(
            sa.select(orders.c.id)
            .where(orders.c.restaurant_id == restaurant_id,
                   orders.c.order_number == order_number)
            .order_by(orders.c.created_at, orders.c.id).offset(1)).scalars().all()
        for order_id in later:
            bind.execute(orders.update().where(orders.c.id == order_id).values(
                order_number=f"{order_number[:_KEPT]}~{order_id[:8]}"))


def downgrade() -> None:
    op.drop_index("ux_purchase_orders_restaurant_order_number", table_name="purchase_orders")
    op.drop_index("ix_idempotency_keys_claimed_at", table_name="idempotency_keys")
    op.drop_table("idempotency_keys")
