"""Fixtures of the webhook tests: the notification pipeline's (PostgreSQL + Redis, the
mock providers, empty tables), shared with tests/pipeline, with no webhook endpoint left
from another test."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from sqlalchemy import text

from herald import db
from tests.pipeline.conftest import pipeline

__all__ = ["pipeline", "webhooks"]


@pytest.fixture
def webhooks(pipeline: None) -> Iterator[None]:
    """The pipeline with no webhook endpoint and no message."""
    with db.get_engine().begin() as connection:
        connection.execute(text("TRUNCATE webhook_messages, webhook_endpoints CASCADE"))
    yield
