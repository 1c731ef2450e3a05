"""Alembic's entry point for herald's migrations.

:func:`herald.db.migrate` hands over an open connection inside a transaction
(``config.attributes["connection"]``); the plain ``alembic`` command line works too,
with the URL from the config or, failing that, from ``DATABASE_URL``.
"""

from __future__ import annotations

from alembic import context
from sqlalchemy import Connection
from sqlmodel import SQLModel

from models import import_every_table

import_every_table()  # every table on SQLModel.metadata, which autogenerate compares against
config = context.config
target_metadata = SQLModel.metadata


def _url() -> str:
    from herald.db import normalise_database_url

    return normalise_database_url(config.get_main_option("sqlalchemy.url") or None)


def _run(connection: Connection) -> None:
    context.configure(
        connection=connection,
        target_metadata=target_metadata,
        compare_type=True,
        # SQLite cannot ALTER most things; batch mode rebuilds the table instead.
        render_as_batch=connection.dialect.name == "sqlite",
    )
    with context.begin_transaction():
        context.run_migrations()


def run_offline() -> None:
    """Emit the SQL instead of running it (``alembic upgrade head --sql``)."""
    url = _url()
    context.configure(url=url, target_metadata=target_metadata, literal_binds=True,
                      render_as_batch=url.startswith("sqlite"))
    with context.begin_transaction():
        context.run_migrations()


def run_online() -> None:
    """Run the migrations on the given connection, or on a new engine of our own."""
    connection = config.attributes.get("connection")
    if connection is not None:
        _run(connection)
        return
    from herald.db import create_database_engine

    engine = create_database_engine(_url())
    try:
        with engine.begin() as own:
            _run(own)
    finally:
        engine.dispose()


if context.is_offline_mode():
    run_offline()
else:
    run_online()
