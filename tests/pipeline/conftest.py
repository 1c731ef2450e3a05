"""Fixtures of the notification pipeline tests: PostgreSQL + Redis, the mock provider,
the registry's rate limits lifted (speed is measured in bench/, not here)."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest
from sqlalchemy import text

from actors.queues import registry
from herald import db, settings
from tests.support.queue_app import close_queue_app, install_queue_app

NOTIFICATION_QUEUES = ("notification-email", "notification-sms", "notification-push")


@pytest.fixture
def pipeline(monkeypatch: pytest.MonkeyPatch, migrated_database: str,
             redis_url: str) -> Iterator[None]:
    """herald on PostgreSQL + Redis with the mock providers and empty tables."""
    for name, value in {"DATABASE_URL": migrated_database, "REDIS_URL": redis_url,
                        "BROKER": "redis", "QUEUE_PREFIX": f"p{uuid.uuid4().hex[:10]}",
                        "EMAIL_PROVIDER": "mock", "SMS_PROVIDER": "mock",
                        "PUSH_PROVIDER": "mock", "LOG_LEVEL": "WARNING"}.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("HERALD_OPEN_API", "1")  # TestClient's client is not on loopback
    settings.reset_settings()
    install_queue_app()
    db.reset_engine()
    import actors.notifications  # noqa: F401  (declares the channel actors)
    from providers.select import reset_providers

    reset_providers()
    with db.get_engine().begin() as connection:
        connection.execute(text("TRUNCATE deliveries, notifications, accounts, "
                                "notification_batches, callback_receipts CASCADE"))
    with registry.redeclared(NOTIFICATION_QUEUES, rate_limit=None):
        yield
    reset_providers()
    db.reset_engine()
    close_queue_app()
    settings.reset_settings()
