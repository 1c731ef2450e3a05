"""Another transaction holding rows of the test database (PostgreSQL), for the tests
that force a race: what a write does while a row it needs is taken."""

from __future__ import annotations

import threading
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any

from sqlalchemy import text

from herald import db


@contextmanager
def held_elsewhere(*statements: tuple[str, Mapping[str, Any]]) -> Iterator[threading.Event]:
    """Run ``statements`` (SQL, parameters) in one transaction on a thread of its own,
    which keeps the row locks they took until the yielded event is set or the block ends,
    then commits. The block starts once they have run."""
    release, held = threading.Event(), threading.Event()

    def hold() -> None:
        with db.get_engine().connect() as connection, connection.begin():
            for sql, params in statements:
                connection.execute(text(sql), dict(params))
            held.set()
            release.wait(30)

    holder = threading.Thread(target=hold, name="row-holder")
    holder.start()
    assert held.wait(10), "the holding transaction did not start"
    try:
        yield release
    finally:
        release.set()
        holder.join(10)


def lock_waiters(like: str = "%") -> int:
    """Sessions of this database waiting for a lock, running a statement ``LIKE like``."""
    with db.get_engine().connect() as connection:
        return int(connection.execute(text(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()"
            " AND wait_event_type = 'Lock' AND query LIKE :like"), {"like": like}).scalar_one())
