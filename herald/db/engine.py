"""The database: one engine per process, sessions that commit or roll back.

``DATABASE_URL`` picks the backend (already normalised by :mod:`herald.settings`):

- ``sqlite://…`` — the embedded default. WAL journal so readers never block the one
  writer, a busy timeout so concurrent writers from several processes wait instead of
  failing, foreign keys on (SQLite leaves them off).
- ``postgresql+psycopg://…`` — production, through psycopg 3, a small pool per process
  and a pre-ping so a connection the server dropped is replaced, not handed out.

Both keep bound parameters out of error text (``hide_parameters``): a failed statement's
exception is logged, and its parameters are addresses, phone numbers and secrets
(docs/deployment.md, "Logging").

Schema changes go through Alembic only (:mod:`herald.db.migrations`).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, TypeVar

from sqlalchemy import Connection, Engine, create_engine, event, text
from sqlalchemy.pool import StaticPool
from sqlmodel import Session

from herald.settings import Settings, get_settings

log = logging.getLogger(__name__)

#: Milliseconds a SQLite connection waits for another writer's lock before failing.
SQLITE_BUSY_TIMEOUT_MS = 5_000
#: Seconds psycopg waits for a PostgreSQL connect (libpq's smallest useful value is 2).
POSTGRES_CONNECT_TIMEOUT_S = 2
#: Connections kept open per process, and how many more a burst may open.
POOL_SIZE = 5
POOL_MAX_OVERFLOW = 10
#: The same for :func:`autocommit` connections, the channel workers' hot path: one per
#: worker thread stays open (a worker of the email and SMS queues runs 7), since every
#: connection opened past the kept ones is a new PostgreSQL backend, closed again on return.
AUTOCOMMIT_POOL_SIZE = 10
AUTOCOMMIT_POOL_MAX_OVERFLOW = 5
#: Seconds a session waits for a free pooled connection before failing.
POOL_TIMEOUT_S = 10
#: Seconds after which a pooled connection is replaced (outlives no proxy idle timeout).
POOL_RECYCLE_S = 1_800
#: Seconds :func:`check_database` may take before the database counts as unreachable.
CHECK_TIMEOUT_S = 2.5

T = TypeVar("T")

_lock = threading.Lock()
_engine: Engine | None = None
_autocommit: Engine | None = None


def normalise_database_url(database_url: str | None = None) -> str:
    """``database_url`` in the one spelling herald uses (default: ``DATABASE_URL``)."""
    if database_url is None:
        return get_settings().database_url
    # One place knows the accepted spellings (postgres://, postgresql://): the settings.
    return Settings(database_url=database_url).database_url


def is_postgres_url(url: str) -> bool:
    """True when ``url`` names a PostgreSQL database."""
    return url.startswith("postgresql")


def _is_memory_sqlite(url: str) -> bool:
    return url in ("sqlite://", "sqlite:///:memory:") or "mode=memory" in url


def create_database_engine(database_url: str | None = None, *,
                           autocommit: bool = False) -> Engine:
    """A new engine configured for herald (see the module docstring); the caller disposes
    it. ``autocommit``: its connections commit every statement as it runs."""
    url = normalise_database_url(database_url)
    if is_postgres_url(url):
        pool: dict[str, Any] = {"pool_size": POOL_SIZE, "max_overflow": POOL_MAX_OVERFLOW}
        if autocommit:
            # set once per connection, not per checkout; and nothing to roll back on return
            pool = {"isolation_level": "AUTOCOMMIT", "pool_reset_on_return": None,
                    "pool_size": AUTOCOMMIT_POOL_SIZE,
                    "max_overflow": AUTOCOMMIT_POOL_MAX_OVERFLOW}
        return create_engine(
            url,
            **pool,
            # no pre-ping: it costs a round trip on every checkout (a worker checks out
            # several times per delivery); a dead connection is invalidated by the
            # error it raises, and pool_recycle retires idle ones
            pool_pre_ping=False,
            pool_timeout=POOL_TIMEOUT_S,
            pool_recycle=POOL_RECYCLE_S,
            connect_args={"connect_timeout": POSTGRES_CONNECT_TIMEOUT_S,
                          "application_name": "herald"},
            hide_parameters=True,
        )
    options: dict[str, Any] = {"connect_args": {"check_same_thread": False},
                               "hide_parameters": True}
    if autocommit:
        options["isolation_level"] = "AUTOCOMMIT"
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


def _autocommit_engine() -> Engine:
    """The process-wide engine of :func:`autocommit` connections, created on first use."""
    global _autocommit
    engine = _autocommit
    if engine is not None:  # every delivery comes here: no lock once it exists
        return engine
    url = get_settings().database_url
    # every connection to an in-memory SQLite is a database of its own: share one
    shared = get_engine() if _is_memory_sqlite(url) else None
    with _lock:
        if _autocommit is None:
            _autocommit = (shared.execution_options(isolation_level="AUTOCOMMIT")
                           if shared is not None
                           else create_database_engine(url, autocommit=True))
        return _autocommit


def reset_engine() -> None:
    """Dispose the process-wide engines; the next :func:`get_engine` reads the settings
    again."""
    global _engine, _autocommit
    with _lock:
        for engine in (_autocommit, _engine):
            if engine is not None:
                engine.dispose()
        _engine = _autocommit = None


def is_postgres() -> bool:
    """True when ``DATABASE_URL`` points at PostgreSQL (SKIP LOCKED, advisory locks …)."""
    return is_postgres_url(get_settings().database_url)


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
    # connections of their own pool, switched to autocommit once: switching a shared
    # pool's connection on every checkout, and back on every return, cost more CPU than
    # the statements
    with _autocommit_engine().connect() as connection:
        yield connection


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
    value: T = outcome["value"]
    return value


def check_database(timeout_s: float = CHECK_TIMEOUT_S) -> None:
    """Raise unless the database answers ``SELECT 1`` within ``timeout_s`` seconds."""

    def ping() -> None:
        with get_engine().connect() as connection:
            connection.execute(text("SELECT 1")).scalar_one()

    _within(timeout_s, ping)
