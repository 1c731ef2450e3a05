"""Fixtures of the operator console tests: herald on PostgreSQL + Redis (a queue prefix of
its own) with ADMIN_TOKEN set, the mock providers, empty domain tables and audit log."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import text

from herald import db
from tests.support.admin import workload
from tests.support.queue_app import close_queue_app, follow_settings
from tests.support.reset import reset_herald

#: The token the console tests sign in with.
ADMIN_TOKEN = "test-admin-token"
#: The header that signs a request in.
ADMIN_HEADERS = {"Authorization": f"Bearer {ADMIN_TOKEN}"}
_TABLES = ("audit_log, store_order_status_events, store_orders, orders, payments, "
           "deliveries, notifications, accounts, callback_receipts")


@pytest.fixture
def console(monkeypatch: pytest.MonkeyPatch, migrated_database: str,
            redis_url: str) -> Iterator[str]:
    """herald with the console on (ADMIN_TOKEN set) over the test PostgreSQL and Redis;
    yields the queue prefix."""
    prefix = f"a{uuid.uuid4().hex[:10]}"
    for name, value in {"DATABASE_URL": migrated_database, "REDIS_URL": redis_url,
                        "BROKER": "redis", "QUEUE_PREFIX": prefix, "ADMIN_TOKEN": ADMIN_TOKEN,
                        "EMAIL_PROVIDER": "mock", "SMS_PROVIDER": "mock",
                        "PUSH_PROVIDER": "mock", "LOG_LEVEL": "WARNING"}.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("HERALD_OPEN_API", "1")  # TestClient's client is not on loopback
    reset_herald()
    follow_settings(workload.registry)  # herald's queues and the console tests' own

    with db.get_engine().begin() as connection:
        connection.execute(text(f"TRUNCATE {_TABLES} CASCADE"))
    yield prefix
    reset_herald()
    close_queue_app()


@pytest.fixture
def client(console: str) -> Iterator[TestClient]:
    """The HTTP app with the console on (send :data:`ADMIN_HEADERS` to sign in)."""
    from herald.web import create_app

    with TestClient(create_app()) as test_client:
        yield test_client
