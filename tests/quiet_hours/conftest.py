"""Fixtures and steps of the quiet-hours tests: the pipeline's PostgreSQL + Redis with the
mock providers, and queue time moved to the instants a test names."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from fastapi.testclient import TestClient

from herald.queue import current_app, now_ms
from herald.web import create_app
from tests.pipeline.conftest import pipeline  # noqa: F401  (the fixture, shared)


@pytest.fixture
def client(pipeline: None) -> TestClient:  # noqa: F811  (the fixture imported above)
    """The HTTP app on the pipeline's servers."""
    return TestClient(create_app())


def queue_now() -> datetime:
    """Now in queue time."""
    return datetime.fromtimestamp(now_ms() / 1000, UTC)


def move_queue_time_to(instant: datetime) -> None:
    """Move this process's queue time forward to ``instant`` (the worker's delays and the
    holds read it; docs/queue.md#queue-time)."""
    current_app().time.advance(instant - queue_now())


def next_weekday_at(weekday: int, hour: int, minute: int = 0) -> datetime:
    """The first ``weekday`` (Monday 0) at ``hour:minute`` UTC at least a day ahead of queue
    time: an instant every run of a test meets on the same wall clocks."""
    start = queue_now() + timedelta(days=1)
    day = start.date() + timedelta(days=(weekday - start.weekday()) % 7)
    return datetime(day.year, day.month, day.day, hour, minute, tzinfo=UTC)
