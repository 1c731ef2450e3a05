"""herald's database layer: the engine, sessions, the prepared hot-path statements and the
migrations runner. Models and their state transitions live in the ``models`` package."""

from herald.db.engine import (
    autocommit,
    check_database,
    create_database_engine,
    get_engine,
    is_postgres,
    normalise_database_url,
    reset_engine,
    session,
)
from herald.db.migrations import alembic_config, migrate, migrations_directory
from herald.db.prepared import Prepared

__all__ = [
    "Prepared",
    "alembic_config",
    "autocommit",
    "check_database",
    "create_database_engine",
    "get_engine",
    "is_postgres",
    "migrate",
    "migrations_directory",
    "normalise_database_url",
    "reset_engine",
    "session",
]
