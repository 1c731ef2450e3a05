"""Fixtures of the webhook tests: the notification pipeline's (PostgreSQL + Redis, the
mock providers, empty tables), shared with tests/pipeline, with no webhook endpoint left
from another test."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from sqlalchemy import text

from herald import db
from models.webhooks import forget_subscribed_types
from tests.pipeline.conftest import pipeline

__all__ = ["pipeline", "webhooks"]


@pytest.fixture
def webhooks(pipeline: None) -> Iterator[None]:
    """The pipeline with no webhook endpoint and no message, and none left behind for
    the tests that follow (their deliveries would write messages otherwise)."""
    _empty()
    yield
    _empty()


def _empty() -> None:
    with db.get_engine().begin() as connection:
        connection.execute(text("TRUNCATE webhook_messages, webhook_endpoints CASCADE"))
    forget_subscribed_types()
