"""Fixtures of the digest tests: the pipeline's PostgreSQL + Redis with the mock
providers, the HTTP app on them, and the ``account.activity`` digest as a test wants it."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from fastapi.testclient import TestClient

from providers.mock import MockProvider
from tests.pipeline.conftest import pipeline  # noqa: F401  (the fixture, shared)


@pytest.fixture
def client(pipeline: None) -> Iterator[TestClient]:  # noqa: F811  (the fixture imported above)
    """The HTTP app on the pipeline's servers, the mock's record empty."""
    from herald.web import create_app

    MockProvider.reset()
    yield TestClient(create_app())
    MockProvider.reset()
