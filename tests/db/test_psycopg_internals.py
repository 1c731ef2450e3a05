"""herald relies on a few psycopg internals (herald/db/psycopg_internals.py); these tests
pin them to the supported psycopg range on a real PostgreSQL, so an upgrade that moves one
fails here."""

from __future__ import annotations

import tomllib
from collections.abc import Iterator
from datetime import UTC, datetime
from decimal import Decimal
from importlib.metadata import version
from pathlib import Path
from typing import Any

import psycopg
import pytest
from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet
from sqlalchemy import make_url

from herald.db.psycopg_internals import SUPPORTED_PSYCOPG, RawConnection

PYPROJECT = Path(__file__).parents[2] / "pyproject.toml"

#: One value of each kind the hot paths bind: ids, counts of every size, flags, money,
#: UTC timestamps, JSON text and NULL.
VALUES: list[Any] = ["d-1", 7, 70_000, 2**40, 2**70, True, Decimal("12.3456"),
                     datetime(2026, 12, 4, 23, 0, 1, 250_000, tzinfo=UTC), '{"a": [1]}', None]


def supported() -> SpecifierSet:
    return SpecifierSet(",".join(SUPPORTED_PSYCOPG))


def test_the_installed_psycopg_is_one_the_internals_were_checked_against() -> None:
    assert version("psycopg") in supported()


def test_the_package_depends_on_exactly_the_supported_range() -> None:
    dependencies = tomllib.loads(PYPROJECT.read_text())["project"]["dependencies"]
    psycopg_requirement = next(Requirement(d) for d in dependencies
                               if Requirement(d).name == "psycopg")
    assert psycopg_requirement.specifier == supported()


@pytest.fixture
def connection(database_url: str) -> Iterator[psycopg.Connection[Any]]:
    """A psycopg connection to the test PostgreSQL, in autocommit."""
    url = make_url(database_url).set(drivername="postgresql")
    with psycopg.connect(url.render_as_string(hide_password=False),
                         autocommit=True) as opened:
        yield opened


def test_values_go_and_come_back_as_through_a_cursor(
        connection: psycopg.Connection[Any]) -> None:
    # Given values of every kind, and the same SELECT in libpq's form and a cursor's
    placeholders = ", ".join(f"${i + 1}" for i in range(len(VALUES)))
    raw = RawConnection(connection)

    # When they are dumped, prepared on and read back through the raw connection
    dumped = raw.dump(VALUES)
    values, types, formats = dumped
    raw.prepare(b"t_echo", f"SELECT {placeholders}".encode(), types)
    rows, count = raw.read(raw.execute_prepared(b"t_echo", dumped))

    # Then each value was dumped with a type of its own, and the row read back is the one
    # a cursor reads for the same parameters
    assert len(values) == len(types) == len(formats) == len(VALUES)
    assert values[-1] is None
    assert len(set(types[1:5])) == 4  # int2, int4, int8, numeric: picked by the value
    cursor_sql = "SELECT " + ", ".join(["%s"] * len(VALUES))
    assert rows == connection.execute(cursor_sql, VALUES).fetchall()
    assert count == 1


def test_a_command_returns_its_row_count_or_none(connection: psycopg.Connection[Any]) -> None:
    raw = RawConnection(connection)
    connection.execute("CREATE TEMPORARY TABLE t_counts (id int)")
    dumped = raw.dump([3])
    raw.prepare(b"t_fill", b"INSERT INTO t_counts SELECT generate_series(1, $1)", dumped[1])
    raw.prepare(b"t_set", b"SET application_name = 'herald-test'", ())

    assert raw.read(raw.execute_prepared(b"t_fill", dumped)) == ([], 3)
    assert raw.read(raw.execute_prepared(b"t_set", raw.dump([]))) == ([], -1)


def test_a_deallocated_statement_is_found_missing(connection: psycopg.Connection[Any]) -> None:
    # Given a statement prepared on the connection
    raw = RawConnection(connection)
    dumped = raw.dump([41])
    raw.prepare(b"t_next", b"SELECT $1 + 1", dumped[1])
    found = raw.execute_prepared(b"t_next", dumped)
    assert not raw.missing(found)
    # When something deallocates every statement of the connection
    connection.execute("DEALLOCATE ALL")
    # Then running it is found missing (not raised), and it runs once prepared again
    gone = raw.execute_prepared(b"t_next", dumped)
    assert raw.missing(gone)
    raw.prepare(b"t_next", b"SELECT $1 + 1", dumped[1])
    assert raw.read(raw.execute_prepared(b"t_next", dumped)) == ([(42,)], 1)


def test_failures_raise_the_errors_a_cursor_raises(connection: psycopg.Connection[Any]) -> None:
    raw = RawConnection(connection)
    with pytest.raises(psycopg.errors.SyntaxError):
        raw.prepare(b"t_bad", b"SELEC 1", ())
    dumped = raw.dump([0])
    raw.prepare(b"t_divide", b"SELECT 1 / $1", dumped[1])
    with pytest.raises(psycopg.errors.DivisionByZero) as raised:
        raw.read(raw.execute_prepared(b"t_divide", dumped))
    assert raised.value.sqlstate == "22012"
    with pytest.raises(psycopg.errors.DivisionByZero):
        connection.execute("SELECT 1 / %s", [0])


def test_a_raw_connection_knows_its_own_libpq_connection(
        connection: psycopg.Connection[Any], database_url: str) -> None:
    raw = RawConnection(connection)
    url = make_url(database_url).set(drivername="postgresql")
    with psycopg.connect(url.render_as_string(hide_password=False), autocommit=True) as other:
        assert raw.is_for(connection)
        assert not raw.is_for(other)
