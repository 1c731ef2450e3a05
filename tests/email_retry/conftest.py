"""Fixtures of the email-retry queue tests: herald on PostgreSQL + Redis (a queue prefix of
its own) with the mock email provider, short in-call pauses, an empty audit log, and a
queue App of the test's own (its clock starts on the wall clock)."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest
from sqlalchemy import text

from herald import db
from tests.support.queue_app import close_queue_app, follow_settings
from tests.support.reset import reset_herald

#: The in-call pauses the tests run with (ms): three tries, quickly.
PAUSES_MS = "10,20"


@pytest.fixture
def email_retry(monkeypatch: pytest.MonkeyPatch, migrated_database: str, redis_url: str
         ) -> Iterator[str]:
    """herald over the test PostgreSQL and Redis with the mock email provider; yields the
    queue prefix. The mock's records and the audit log start empty."""
    prefix = f"e{uuid.uuid4().hex[:10]}"
    for name, value in {"DATABASE_URL": migrated_database, "REDIS_URL": redis_url,
                        "BROKER": "redis", "QUEUE_PREFIX": prefix, "EMAIL_PROVIDER": "mock",
                        "EMAIL_IN_CALL_BACKOFF_MS": PAUSES_MS, "ADMIN_ALERT_EMAIL": "",
                        "LOG_LEVEL": "WARNING"}.items():
        monkeypatch.setenv(name, value)
    reset_herald()
    follow_settings()
    import actors.email_retry  # noqa: F401  (declares the queue's actor)
    from providers.mock import MockProvider

    MockProvider.reset()
    with db.get_engine().begin() as connection:
        connection.execute(text("TRUNCATE audit_log"))
    try:
        yield prefix
    finally:
        reset_herald()
        close_queue_app()
