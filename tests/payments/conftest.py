"""Fixtures of the payment and activation tests: PostgreSQL (or SQLite) + Redis, the mock
operator, empty tables, and the activation and payment queues retrying after 100 ms (their real
backoff is seconds; speed is not what these tests look at)."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from datetime import timedelta

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import text

from actors.queues import registry
from herald import db, settings
from herald.web import create_app
from tests.support.queue_app import close_queue_app, install_queue_app

QUEUES = ("activation", "payment")


@pytest.fixture
def fulfillment(monkeypatch: pytest.MonkeyPatch, migrated_database: str,
                redis_url: str) -> Iterator[None]:
    """herald on PostgreSQL + Redis with the mock operator and empty tables."""
    yield from _herald_on(monkeypatch, migrated_database, redis_url)


@pytest.fixture(params=["postgres", "sqlite"])
def on_each_database(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch,
                     redis_url: str) -> Iterator[str]:
    """:func:`fulfillment` on PostgreSQL, then on a new SQLite file; yields which."""
    if request.param == "sqlite":
        url = str(request.getfixturevalue("fresh_sqlite"))
        db.migrate(url)
    else:
        url = str(request.getfixturevalue("migrated_database"))
    for _ in _herald_on(monkeypatch, url, redis_url):
        yield str(request.param)


def _herald_on(monkeypatch: pytest.MonkeyPatch, database_url: str,
               redis_url: str) -> Iterator[None]:
    for name, value in {"DATABASE_URL": database_url, "REDIS_URL": redis_url,
                        "BROKER": "redis", "QUEUE_PREFIX": f"f{uuid.uuid4().hex[:10]}",
                        "EMAIL_PROVIDER": "mock", "SMS_PROVIDER": "mock",
                        "OPERATORS": "mock", "LOG_LEVEL": "WARNING"}.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("HERALD_OPEN_API", "1")  # TestClient's client is not on loopback
    settings.reset_settings()
    install_queue_app()
    db.reset_engine()
    import actors.activation
    import actors.payments  # noqa: F401  (declares the actors)
    from providers.operators import operators

    operators.reset()
    if db.is_postgres():
        with db.get_engine().begin() as connection:
            connection.execute(text("TRUNCATE payments, activation_steps, activations, "
                                    "store_order_status_events, store_orders, orders, "
                                    "deliveries, notifications, webhook_messages, "
                                    "webhook_endpoints, accounts CASCADE"))
    with registry.redeclared(QUEUES, backoff_base=timedelta(milliseconds=100)):
        yield
    operators.reset()
    db.reset_engine()
    close_queue_app()
    settings.reset_settings()


@pytest.fixture
def client(fulfillment: None) -> TestClient:
    return TestClient(create_app())
