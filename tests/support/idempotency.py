"""The web app for tests of ``Idempotency-Key``, on a database holding no key yet."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from fastapi.testclient import TestClient
from sqlalchemy import text

from herald import db
from herald.web import create_app


@contextlib.contextmanager
def client_without_keys() -> Iterator[TestClient]:
    """A TestClient of the app, every idempotency key of earlier tests deleted first (keys
    are per token, and the tests share one token scope)."""
    with db.get_engine().begin() as connection:
        connection.execute(text("TRUNCATE idempotency_keys"))
    with TestClient(create_app()) as test_client:
        yield test_client
