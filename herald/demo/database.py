"""The demo's own database: ``herald demo`` never writes to the user's tables.

Every row a demo phase makes — accounts, notifications, orders, suppliers, the webhook
endpoint — goes into a database of the demo's own, made fresh when the demo starts and
removed when it ends (normally, on an error, on Ctrl-C or SIGTERM):

- on SQLite (the embedded default) a file of its own, ``.herald/demo/herald.db``, beside
  the embedded Redis's state; the user's ``herald.db`` is never opened;
- on PostgreSQL a schema of its own, ``herald_demo``, in the database ``DATABASE_URL``
  names (the demo's connections put it first on their ``search_path``, so the
  migrations make every table there); the user's tables in ``public`` are never
  written. The schema is marked with a comment, and the demo drops only a schema that
  carries that mark: a ``herald_demo`` schema of someone else's makes it refuse.

A user's ``herald up`` on the same configuration therefore never sees a demo account,
supplier or webhook endpoint, and no relay of the user's sends a message to a URL the
demo listened on. If the demo is killed outright (SIGKILL), what it made stays in its own
file or schema, and the next run removes it before it starts.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import shutil
import signal
import threading
from collections.abc import Iterator
from pathlib import Path
from types import FrameType

from rich.console import Console
from sqlalchemy import Connection, make_url, text
from sqlalchemy.exc import SQLAlchemyError

from herald.settings import EMBEDDED_DIR

#: The demo's SQLite database directory, relative to the working directory (as the
#: embedded Redis's ``.herald/``); the whole directory is the demo's and is removed.
SQLITE_DIRECTORY = EMBEDDED_DIR / "demo"
#: The PostgreSQL schema the demo's tables live in.
SCHEMA = "herald_demo"
#: The comment that marks :data:`SCHEMA` as the demo's: only a marked schema is dropped.
SCHEMA_MARK = "herald demo: made and dropped by herald demo; holds no user data"
#: Milliseconds the demo's DROP SCHEMA waits for a lock before giving up (then the next
#: run drops it): a connection left open mid-transaction must not hang the exit.
DROP_LOCK_TIMEOUT_MS = 10_000


#: The providers the demo's tour runs on (the mock's), where the user named none: outside
#: the embedded default an unset one would turn its channel off (docs/configuration.md,
#: "Providers"), and the demo's database is its own anyway.
MOCK_PROVIDERS = ("EMAIL_PROVIDER", "SMS_PROVIDER", "PUSH_PROVIDER", "ESIM_PROVIDERS")


def _throwaway_defaults() -> dict[str, str]:
    """What the demo's own database needs that the user's configuration may lack: the mock
    as each unset provider, and a SECRETS_KEY of this run's alone when none is set (its
    secrets live in a database removed at the end, so they need no key that outlives it)."""
    from cryptography.fernet import Fernet

    defaults = {name: "mock" for name in MOCK_PROVIDERS if name not in os.environ}
    if not os.environ.get("SECRETS_KEY"):
        defaults["SECRETS_KEY"] = Fernet.generate_key().decode()
    return defaults


class DemoDatabaseError(RuntimeError):
    """The demo cannot make its own database (the reason is the message)."""


def demo_database_url(user_url: str) -> str:
    """The URL of the demo's own database for a user whose ``DATABASE_URL`` is
    ``user_url``: the same PostgreSQL database with :data:`SCHEMA` first on the search
    path, or (SQLite) the file under :data:`SQLITE_DIRECTORY`."""
    from herald.db.engine import is_postgres_url

    if not is_postgres_url(user_url):
        return f"sqlite:///{(Path.cwd() / SQLITE_DIRECTORY / 'herald.db').as_posix()}"
    url = make_url(user_url)
    options = url.query.get("options", "")
    if isinstance(options, tuple):
        options = " ".join(options)
    # libpq's options: later settings win, so the demo's search_path overrides the user's
    search_path = f"-csearch_path={SCHEMA}"
    url = url.update_query_dict({"options": f"{options} {search_path}".strip()})
    return url.render_as_string(hide_password=False)


def _marked(connection: Connection) -> bool | None:
    """None when :data:`SCHEMA` does not exist; else whether it carries the demo's mark."""
    row = connection.execute(text(
        "SELECT obj_description(oid, 'pg_namespace') FROM pg_namespace "
        "WHERE nspname = :schema"), {"schema": SCHEMA}).first()
    if row is None:
        return None
    return bool(row[0] == SCHEMA_MARK)


def _drop_schema(user_url: str, *, create: bool) -> None:
    from herald.db import create_database_engine

    engine = create_database_engine(user_url)
    try:
        with engine.begin() as connection:
            marked = _marked(connection)
            if marked is False:
                raise DemoDatabaseError(
                    f"the database has a schema {SCHEMA!r} the demo did not make; the demo "
                    "keeps its rows in a schema of that name and drops it when it ends, so "
                    "it will not run here")
            connection.execute(text(f"SET LOCAL lock_timeout = {DROP_LOCK_TIMEOUT_MS}"))
            if marked:
                connection.execute(text(f'DROP SCHEMA "{SCHEMA}" CASCADE'))
            if create:
                connection.execute(text(f'CREATE SCHEMA "{SCHEMA}"'))
                connection.execute(text(f"COMMENT ON SCHEMA \"{SCHEMA}\" IS '{SCHEMA_MARK}'"))
    finally:
        engine.dispose()


def _remove(user_url: str, *, create: bool = False) -> None:
    """Remove the demo's database (and make an empty one when ``create``)."""
    from herald.db.engine import is_postgres_url

    if is_postgres_url(user_url):
        _drop_schema(user_url, create=create)
        return
    directory = Path.cwd() / SQLITE_DIRECTORY
    shutil.rmtree(directory, ignore_errors=True)
    if create:
        directory.mkdir(parents=True, exist_ok=True)


@dataclasses.dataclass
class DemoDatabase:
    """Where the demo's rows live, and whether they were removed at the end."""

    where: str
    removed: bool = False


class Stopped(KeyboardInterrupt):
    """SIGTERM arrived: the demo unwinds (and removes what it made) as for Ctrl-C."""


def _stop_on_sigterm(signum: int, frame: FrameType | None) -> None:
    raise Stopped(f"signal {signum}")


@contextlib.contextmanager
def _shielded() -> Iterator[None]:
    """Ctrl-C and SIGTERM ignored for the block (the removal), in the main thread."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    saved = {sig: signal.signal(sig, signal.SIG_IGN) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for sig, handler in saved.items():
            signal.signal(sig, handler)


@contextlib.contextmanager
def own_database(console: Console) -> Iterator[DemoDatabase]:
    """Run the block with this process (and the worker processes it starts) on the demo's
    own database, made empty first; it is removed when the block ends, however it ends
    (SIGTERM is turned into the same unwinding as Ctrl-C for the block). Yields where the
    rows live; its ``removed`` is True once the block ended and they are gone.

    Raises :class:`DemoDatabaseError` before the block when that database cannot be made;
    a removal that fails at the end is reported on ``console`` (the next run retries it).
    """
    from herald.db import reset_engine
    from herald.db.engine import is_postgres_url
    from herald.demo.notifications import environment
    from herald.settings import get_settings

    user_url = get_settings().database_url
    url = demo_database_url(user_url)
    database = DemoDatabase(
        where=(f"schema {SCHEMA!r} of the configured PostgreSQL database"
               if is_postgres_url(user_url) else f"{SQLITE_DIRECTORY.as_posix()}/herald.db"))
    main_thread = threading.current_thread() is threading.main_thread()
    saved_sigterm = signal.signal(signal.SIGTERM, _stop_on_sigterm) if main_thread else None
    try:
        try:
            with _shielded():
                _remove(user_url, create=True)  # and what a killed run left
        except (SQLAlchemyError, OSError) as error:
            raise DemoDatabaseError(f"could not make the demo's own database "
                                    f"({database.where}): {error}") from error
        try:
            reset_engine()
            with environment(DATABASE_URL=url, **_throwaway_defaults()):
                reset_engine()
                yield database
        finally:
            reset_engine()
            try:
                with _shielded():
                    _remove(user_url)
                database.removed = True
                console.print(f"[dim]removed the demo's rows ({database.where})[/]")
            except Exception as error:  # reported, and the block's own outcome kept
                console.print(f"[red]✗ could not remove the demo's database "
                              f"({database.where}): {error}; the next herald demo removes "
                              "it[/]")
    finally:
        if saved_sigterm is not None:
            signal.signal(signal.SIGTERM, saved_sigterm)
