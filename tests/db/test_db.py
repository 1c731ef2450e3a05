"""The database layer on real PostgreSQL and SQLite: migrations, sessions, the audit log."""

from __future__ import annotations

import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from datetime import UTC

import psycopg
import pytest
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import inspect, text
from sqlalchemy.exc import OperationalError
from sqlmodel import SQLModel

import models
from herald import db
from herald.db.engine import SQLITE_BUSY_TIMEOUT_MS
from herald.settings import reset_settings
from models import AuditEntry, record_audit


def use_database(monkeypatch: pytest.MonkeyPatch, url: str) -> None:
    """Point herald's settings and engine at ``url`` for the rest of the test."""
    monkeypatch.setenv("DATABASE_URL", url)
    reset_settings()
    db.reset_engine()


@pytest.fixture(autouse=True)
def _fresh_engine() -> Iterator[None]:
    yield
    db.reset_engine()
    reset_settings()


def head_revision() -> str:
    head = ScriptDirectory.from_config(db.alembic_config("sqlite://")).get_current_head()
    assert head is not None
    return head


def test_migrate_reaches_head_and_a_second_run_changes_nothing(empty_database: str) -> None:
    # Given an empty database
    engine = db.create_database_engine(empty_database)
    try:
        # When it is migrated
        db.migrate(empty_database)

        # Then audit_log exists, the schema matches the models, the version is head
        with engine.connect() as connection:
            assert "audit_log" in inspect(connection).get_table_names()
            context = MigrationContext.configure(connection, opts={"compare_type": True})
            assert compare_metadata(context, SQLModel.metadata) == []
            assert context.get_current_revision() == head_revision()
        with engine.begin() as connection:
            connection.execute(text(
                "INSERT INTO audit_log (id, at, actor, action, target, count) "
                "VALUES ('kept', CURRENT_TIMESTAMP, 'system', 'test.mark', 'db', 0)"))

        # When it is migrated again
        db.migrate(empty_database)

        # Then nothing changed: same revision, one version row, the row is still there
        with engine.connect() as connection:
            versions = connection.execute(text("SELECT version_num FROM alembic_version")).all()
            assert versions == [(head_revision(),)]
            kept = connection.execute(text("SELECT id FROM audit_log")).scalars().all()
            assert kept == ["kept"]
    finally:
        engine.dispose()


def test_concurrent_migrations_on_postgres_wait_for_each_other(fresh_postgres: str) -> None:
    # Given two release processes migrating the same empty database at once
    script = "import sys; from herald.db import migrate; migrate(sys.argv[1])"
    releases = [subprocess.Popen([sys.executable, "-c", script, fresh_postgres],
                                 stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
                for _ in range(2)]

    # Then both succeed and the schema is at head exactly once
    for release in releases:
        output, _ = release.communicate(timeout=120)
        assert release.returncode == 0, output.decode()
    engine = db.create_database_engine(fresh_postgres)
    try:
        with engine.connect() as connection:
            versions = connection.execute(text("SELECT version_num FROM alembic_version")).all()
            assert versions == [(head_revision(),)]
    finally:
        engine.dispose()


def test_migrate_uses_database_url_by_default(monkeypatch: pytest.MonkeyPatch,
                                              fresh_sqlite: str) -> None:
    use_database(monkeypatch, fresh_sqlite)

    db.migrate()

    with db.get_engine().connect() as connection:
        assert "audit_log" in inspect(connection).get_table_names()


@pytest.mark.parametrize("kind", ["postgresql", "sqlite"])
def test_record_audit_round_trip(kind: str, request: pytest.FixtureRequest,
                                 monkeypatch: pytest.MonkeyPatch) -> None:
    # Given a migrated database
    url = request.getfixturevalue("database_url" if kind == "postgresql" else "fresh_sqlite")
    use_database(monkeypatch, url)
    db.migrate()

    # (the PostgreSQL database is shared by the session: a target no other test uses)
    target = f"test-queue-{uuid.uuid4().hex[:8]}"

    # When an operator action is recorded and committed
    with db.session() as session:
        written = record_audit(session, actor=models.ADMIN_ACTOR, action="queue.retry",
                               target=target,
                               detail={"job_ids": ["j1", "j2"], "state": "failed"}, count=2)
        assert written.id and written.at.tzinfo is not None

    # Then a new session reads the same row back, with an aware UTC timestamp
    with db.session() as session:
        read = session.get(AuditEntry, written.id)
        assert read is not None
        assert (read.actor, read.action, read.target, read.count) == (
            "admin", "queue.retry", target, 2)
        assert read.detail == {"job_ids": ["j1", "j2"], "state": "failed"}
        assert read.at.tzinfo is not None and read.at.utcoffset() == UTC.utcoffset(None)
        assert abs((read.at - written.at).total_seconds()) < 1e-3
        session.delete(read)


def test_session_rolls_back_when_the_block_raises(monkeypatch: pytest.MonkeyPatch,
                                                   fresh_sqlite: str) -> None:
    use_database(monkeypatch, fresh_sqlite)
    db.migrate()

    with pytest.raises(RuntimeError, match=r"^abort$"), db.session() as session:
        entry = record_audit(session, actor="system", action="test.abort", target="db")
        raise RuntimeError("abort")

    with db.session() as session:
        assert session.get(AuditEntry, entry.id) is None


def test_sqlite_connections_use_wal_busy_timeout_and_foreign_keys(
        monkeypatch: pytest.MonkeyPatch, fresh_sqlite: str) -> None:
    use_database(monkeypatch, fresh_sqlite)

    with db.get_engine().connect() as connection:
        assert connection.exec_driver_sql("PRAGMA journal_mode").scalar() == "wal"
        assert connection.exec_driver_sql("PRAGMA busy_timeout").scalar() == (
            SQLITE_BUSY_TIMEOUT_MS)
        assert connection.exec_driver_sql("PRAGMA foreign_keys").scalar() == 1
    assert not db.is_postgres()


def test_check_database_passes_on_postgres(monkeypatch: pytest.MonkeyPatch,
                                           database_url: str) -> None:
    use_database(monkeypatch, database_url)

    db.check_database()

    assert db.is_postgres()


def test_check_database_fails_fast_when_postgres_is_down(
        monkeypatch: pytest.MonkeyPatch) -> None:
    use_database(monkeypatch, f"postgresql://postgres@127.0.0.1:{closed_port()}/herald")

    started = time.monotonic()
    with pytest.raises(OperationalError, match="Connection refused") as raised:
        db.check_database()

    # the driver's own connection error, not a bug of ours that happened to raise
    assert isinstance(raised.value.orig, psycopg.OperationalError)
    assert time.monotonic() - started < 3.5


def closed_port() -> int:
    """A local TCP port nothing listens on."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])
