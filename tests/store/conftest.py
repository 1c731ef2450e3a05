"""Fixtures of the eSIM store tests: herald on PostgreSQL (or SQLite) + Redis with the
store on, the mock eSIM provider's catalog in the database (what the catalog sync
writes), the mock providers' records reset, empty tables."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import text

from actors.queues import registry
from herald import db, settings
from herald.queue import SECOND
from tests.support.queue_app import close_queue_app, follow_settings
from tests.support.reset import reset_herald

#: The queues the store tests run: issuance, and the notifications an issued order sends.
STORE_QUEUES = ("store-fulfillment", "notification-email", "notification-sms")
_TABLES = ("store_order_status_events, payments, store_orders, orders, store_products, "
           "fx_rates, provider_health, deliveries, notifications, accounts")


@pytest.fixture(params=["postgres", "sqlite"])
def backend(request: pytest.FixtureRequest) -> str:
    """Which database a test runs on (tests that depend on it ask for this fixture)."""
    return str(request.param)


@pytest.fixture
def database(request: pytest.FixtureRequest) -> str:
    """The database URL: PostgreSQL unless the test asks for ``backend``."""
    if "backend" in request.fixturenames and request.getfixturevalue("backend") == "sqlite":
        url = str(request.getfixturevalue("fresh_sqlite"))
        db.migrate(url)
        return url
    return str(request.getfixturevalue("migrated_database"))


@pytest.fixture
def store(monkeypatch: pytest.MonkeyPatch, database: str, redis_url: str) -> Iterator[str]:
    """herald with the eSIM store on, over ``database`` and the test Redis (a queue prefix
    of its own); yields the database URL. The store's retries wait 1 s, not 2 s."""
    for name, value in {"DATABASE_URL": database, "REDIS_URL": redis_url, "BROKER": "redis",
                        "QUEUE_PREFIX": f"s{uuid.uuid4().hex[:10]}",
                        "FEATURE_ESIM_STORE": "true", "ESIM_PROVIDERS": "mock",
                        "EMAIL_PROVIDER": "mock", "SMS_PROVIDER": "mock",
                        "LOG_LEVEL": "WARNING"}.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("HERALD_OPEN_API", "1")  # TestClient's client is not on loopback
    reset_herald()
    follow_settings()
    import actors.notifications
    import actors.store  # noqa: F401  (declares the queues and their actors)

    if db.is_postgres():
        with db.get_engine().begin() as connection:
            connection.execute(text(f"TRUNCATE {_TABLES} CASCADE"))
    seed_catalog()
    with registry.redeclared(STORE_QUEUES, rate_limit=None, backoff_base=SECOND):
        yield database
    reset_herald()
    close_queue_app()


def seed_catalog() -> None:
    """The mock provider's products, as its catalog sync stores them, and its health."""
    from models.catalog import ProviderHealth, StoreProduct
    from providers.esim_mock import MockEsimProvider

    with db.session() as session:
        for product in MockEsimProvider(settings.get_settings()).catalog():
            session.add(StoreProduct(id=product.id, provider="mock", name=product.name,
                                     price=product.price, currency=product.currency))
        session.add(ProviderHealth(provider="mock", available=True))


@pytest.fixture
def client(store: str) -> Iterator[TestClient]:
    """The HTTP app over the store's database and Redis."""
    from herald.web import create_app

    with TestClient(create_app()) as test_client:
        yield test_client
