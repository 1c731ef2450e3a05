"""Schema migrations: Alembic only, run by ``herald migrate`` (the Procfile's ``release``
phase); the scripts live in the top-level ``migrations`` package."""

from __future__ import annotations

import importlib.util
import logging
import threading
from pathlib import Path
from typing import TYPE_CHECKING

from sqlalchemy import text

from herald.db.engine import create_database_engine, is_postgres_url, normalise_database_url

if TYPE_CHECKING:
    from alembic.config import Config

log = logging.getLogger(__name__)

#: The PostgreSQL advisory lock that serialises concurrent ``herald migrate`` runs.
MIGRATION_LOCK_KEY = int.from_bytes(b"herald", "big")
#: Alembic's ``context`` and ``op`` are process-wide proxies: one migration at a time here.
_migrate_lock = threading.Lock()


def migrations_directory() -> Path:
    """The directory of the ``migrations`` package (Alembic's script location)."""
    # found, not imported: the scripts import herald.db, and herald.db imports none of them
    spec = importlib.util.find_spec("migrations")
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError("the migrations package is not installed")
    # the search path rather than __file__: an editable install may see a namespace package
    return Path(next(iter(spec.submodule_search_locations))).resolve()


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
            if is_postgres_url(url):
                connection.execute(text("SELECT pg_advisory_xact_lock(:key)"),
                                   {"key": MIGRATION_LOCK_KEY})
            config.attributes["connection"] = connection
            command.upgrade(config, "head")
    finally:
        engine.dispose()
    log.info("database schema is at head", extra={"database": engine.url.get_backend_name()})
