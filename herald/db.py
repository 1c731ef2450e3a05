"""The database: one engine per process, sessions that commit or roll back, migrations.

``DATABASE_URL`` picks the backend (already normalised by :mod:`herald.settings`):

- ``sqlite://…`` — the embedded default. WAL journal so readers never block the one
  writer, a busy timeout so concurrent writers from several processes wait instead of
  failing, foreign keys on (SQLite leaves them off).
- ``postgresql+psycopg://…`` — production, through psycopg 3, a small pool per process
  and a pre-ping so a connection the server dropped is replaced, not handed out.

Schema changes go through Alembic only (:func:`migrate`, run by ``herald migrate`` in the
Procfile's ``release`` phase); the scripts live in the top-level ``migrations`` package.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from sqlalchemy import Connection, Engine, create_engine, event, text
from sqlalchemy.pool import StaticPool
from sqlmodel import Session

from herald.settings import Settings, get_settings

if TYPE_CHECKING:
    from alembic.config import Config

log = logging.getLogger(__name__)

#: Milliseconds a SQLite connection waits for another writer's lock before failing.
SQLITE_BUSY_TIMEOUT_MS = 5_000
#: Seconds psycopg waits for a PostgreSQL connect (libpq's smallest useful value is 2).
POSTGRES_CONNECT_TIMEOUT_S = 2
#: Connections kept open per process, and how many more a burst may open.
POOL_SIZE = 5
POOL_MAX_OVERFLOW = 10
#: Seconds a session waits for a free pooled connection before failing.
POOL_TIMEOUT_S = 10
#: Seconds after which a pooled connection is replaced (outlives no proxy idle timeout).
POOL_RECYCLE_S = 1_800
#: Seconds :func:`check_database` may take before the database counts as unreachable.
CHECK_TIMEOUT_S = 2.5
#: Key of the PostgreSQL advisory lock that serialises concurrent ``herald migrate`` runs.
MIGRATION_LOCK_KEY = int.from_bytes(b"herald", "big")

T = TypeVar("T")

_lock = threading.Lock()
_engine: Engine | None = None
#: Alembic's ``context`` and ``op`` are process-wide proxies: one migration at a time here.
_migrate_lock = threading.Lock()


def normalise_database_url(database_url: str | None = None) -> str:
    """``database_url`` in the one spelling herald uses (default: ``DATABASE_URL``)."""
    if database_url is None:
        return get_settings().database_url
    # One place knows the accepted spellings (postgres://, postgresql://): the settings.
    return Settings(database_url=database_url).database_url


def _is_postgres_url(url: str) -> bool:
    return url.startswith("postgresql")


def _is_memory_sqlite(url: str) -> bool:
    return url in ("sqlite://", "sqlite:///:memory:") or "mode=memory" in url


def create_database_engine(database_url: str | None = None) -> Engine:
    """A new engine configured for herald (see the module docstring); the caller disposes it."""
    url = normalise_database_url(database_url)
    if _is_postgres_url(url):
        return create_engine(
            url,
            # no pre-ping: it costs a round trip on every checkout (a worker checks out
            # several times per delivery); a dead connection is invalidated by the
            # error it raises, and pool_recycle retires idle ones
            pool_pre_ping=False,
            pool_size=POOL_SIZE,
            max_overflow=POOL_MAX_OVERFLOW,
            pool_timeout=POOL_TIMEOUT_S,
            pool_recycle=POOL_RECYCLE_S,
            connect_args={"connect_timeout": POSTGRES_CONNECT_TIMEOUT_S,
                          "application_name": "herald"},
        )
    options: dict[str, Any] = {"connect_args": {"check_same_thread": False}}
    if _is_memory_sqlite(url):
        # Every connection to :memory: is a new empty database; share one instead.
        options["poolclass"] = StaticPool
    engine = create_engine(url, **options)
    event.listen(engine, "connect", _configure_sqlite_connection)
    return engine


def _configure_sqlite_connection(dbapi_connection: Any, _record: Any) -> None:
    cursor = dbapi_connection.cursor()
    try:
        cursor.execute("PRAGMA journal_mode=WAL")
        cursor.execute(f"PRAGMA busy_timeout={SQLITE_BUSY_TIMEOUT_MS}")
        cursor.execute("PRAGMA foreign_keys=ON")
        # WAL makes NORMAL durable across application crashes; FULL only adds power-loss safety.
        cursor.execute("PRAGMA synchronous=NORMAL")
    finally:
        cursor.close()


def get_engine() -> Engine:
    """The process-wide engine for ``DATABASE_URL``, created on first use."""
    global _engine
    with _lock:
        if _engine is None:
            _engine = create_database_engine()
        return _engine


def reset_engine() -> None:
    """Dispose the process-wide engine; the next :func:`get_engine` reads the settings again."""
    global _engine
    with _lock:
        if _engine is not None:
            _engine.dispose()
        _engine = None


def is_postgres() -> bool:
    """True when ``DATABASE_URL`` points at PostgreSQL (SKIP LOCKED, advisory locks …)."""
    return _is_postgres_url(get_settings().database_url)


@contextmanager
def session() -> Iterator[Session]:
    """A session on the process-wide engine: committed when the block exits normally,
    rolled back when it raises.

    Objects stay readable after the block (``expire_on_commit=False``), so a route can
    return what it just wrote without another query.
    """
    with Session(get_engine(), expire_on_commit=False) as db:
        try:
            yield db
            db.commit()
        except BaseException:
            db.rollback()
            raise


@contextmanager
def autocommit() -> Iterator[Connection]:
    """A pooled connection on which every statement commits by itself, as it runs.

    For hot paths whose writes are single statements, each atomic on its own (a
    conditional UPDATE): no BEGIN/COMMIT round trips around them. Never use it for writes
    that must land together — those need :func:`session` or ``get_engine().begin()``.
    """
    # the isolation level is the DBAPI's autocommit switch (no round trip); the pool puts
    # the connection's default back when it is returned
    with get_engine().connect() as connection:
        yield connection.execution_options(isolation_level="AUTOCOMMIT")


def _within(timeout_s: float, work: Callable[[], T]) -> T:
    """Run ``work`` in a daemon thread; raise TimeoutError if it has not finished in time.

    A blackholed database can hold a socket read far longer than any driver timeout we
    control; a daemon thread left blocked behind it never delays the caller or exit.
    """
    outcome: dict[str, Any] = {}

    def run() -> None:
        try:
            outcome["value"] = work()
        except BaseException as error:
            outcome["error"] = error

    worker = threading.Thread(target=run, name="herald-db-check", daemon=True)
    worker.start()
    worker.join(timeout_s)
    if worker.is_alive():
        raise TimeoutError(f"no answer within {timeout_s:g} s")
    if "error" in outcome:
        raise outcome["error"]
    return outcome["value"]


def check_database(timeout_s: float = CHECK_TIMEOUT_S) -> None:
    """Raise unless the database answers ``SELECT 1`` within ``timeout_s`` seconds."""

    def ping() -> None:
        with get_engine().connect() as connection:
            connection.execute(text("SELECT 1")).scalar_one()

    _within(timeout_s, ping)


def migrations_directory() -> Path:
    """The directory of the ``migrations`` package (Alembic's script location)."""
    import migrations

    # __path__ rather than __file__: an editable install may see it as a namespace package.
    return Path(next(iter(migrations.__path__))).resolve()


def alembic_config(database_url: str | None = None) -> Config:
    """An Alembic config for herald's migrations, with no alembic.ini needed.

    Usable with any ``alembic.command`` (``upgrade``, ``revision``, ``history`` …).
    """
    from alembic.config import Config  # only release and dev tools pay for importing Alembic

    config = Config()
    config.set_main_option("script_location", str(migrations_directory()))
    # '%' is ConfigParser's interpolation character; URLs may contain it (%2F, passwords).
    url = normalise_database_url(database_url)
    config.set_main_option("sqlalchemy.url", url.replace("%", "%%"))
    return config


def migrate(database_url: str | None = None) -> None:
    """Bring the database at ``database_url`` (default: ``DATABASE_URL``) to the newest schema.

    Idempotent: at head already, nothing changes. Concurrent runs wait for each other
    (threads of one process always; processes on PostgreSQL, through an advisory lock),
    and on PostgreSQL the schema change commits as one transaction.
    """
    from alembic import command

    url = normalise_database_url(database_url)
    config = alembic_config(url)
    engine = create_database_engine(url)
    try:
        with _migrate_lock, engine.begin() as connection:
            if _is_postgres_url(url):
                connection.execute(text("SELECT pg_advisory_xact_lock(:key)"),
                                   {"key": MIGRATION_LOCK_KEY})
            config.attributes["connection"] = connection
            command.upgrade(config, "head")
    finally:
        engine.dispose()
    log.info("database schema is at head", extra={"database": engine.url.get_backend_name()})
