"""Fixtures of the store recovery tests: PostgreSQL + Redis, the eSIM store on, empty
store tables, and helpers that write store orders in any state at any age."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest
from sqlalchemy import text

from herald import db, settings
from tests.support.orders import store_order as store_order
from tests.support.queue_app import close_queue_app, install_queue_app


def use_env(monkeypatch: pytest.MonkeyPatch, **env: str) -> None:
    """Set herald's environment and drop every cached settings object and client."""
    for name, value in env.items():
        monkeypatch.setenv(name.upper(), value)
    settings.reset_settings()
    install_queue_app()
    db.reset_engine()


@pytest.fixture
def store(monkeypatch: pytest.MonkeyPatch, migrated_database: str,
          redis_url: str) -> Iterator[None]:
    """herald on PostgreSQL + Redis with the eSIM store on and no orders."""
    use_env(monkeypatch, database_url=migrated_database, redis_url=redis_url, broker="redis",
            queue_prefix=f"r{uuid.uuid4().hex[:10]}", feature_esim_store="true",
            log_level="WARNING")
    import actors.store_recovery  # noqa: F401  (declares the job, schedule and sweep)

    with db.get_engine().begin() as connection:
        connection.execute(text("TRUNCATE store_order_status_events, store_orders, orders, "
                                "accounts CASCADE"))
    yield
    db.reset_engine()
    close_queue_app()
    settings.reset_settings()


def ago(**delta: float) -> Any:
    """The time ``delta`` before now (timedelta keywords)."""
    from models.base import utcnow

    return utcnow() - timedelta(**delta)


def reload(order_id: str) -> Any:
    """The store order as the database holds it now."""
    from models.store import StoreOrder

    with db.session() as session:
        return session.get(StoreOrder, order_id)
