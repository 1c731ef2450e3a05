"""Store orders written straight to the database, in whatever state a test needs."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

from herald import db

#: The price every such order has (the mock's ``mock-ok`` price).
PRICE = Decimal("5.00")


def store_order(state: str, *, order_status: str = "paid", **columns: Any) -> str:
    """An order of a new account (paid unless ``order_status`` says otherwise) for
    ``mock-ok`` at :data:`PRICE` USD, and its store order in issuance ``state`` with
    ``columns`` set; returns the order id."""
    from models.notifications import Account
    from models.store import Order, StoreOrder

    with db.session() as session:
        account = Account(email="buyer@example.com")
        session.add(account)
        session.flush()
        order = Order(account_id=account.id, status=order_status, amount=PRICE,
                      currency="USD")
        session.add(order)
        session.flush()
        session.add(StoreOrder(id=order.id, product_id="mock-ok", provider="mock",
                               issuance_state=state, idempotency_key=order.id, **columns))
    return order.id
