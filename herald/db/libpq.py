"""Prepared statements run on psycopg's libpq connection directly (the hot paths).

psycopg's cursor spends CPU on its own machinery around one libpq call (query conversion,
the prepared-statement manager, the generators that drive the protocol), and a channel
worker runs three statements per delivery (bench/libpq.md has the measurements). Here a
statement is prepared once per connection, under a name of ours, and then executed with
one libpq call, which releases the GIL while it waits. Values are dumped and rows loaded
by psycopg's own Transformer (its C implementation), as a cursor would, so types convert
exactly as they do through :meth:`psycopg.Cursor.execute`.

Only for connections in autocommit: outside it, psycopg opens the transaction from the
cursor, which this bypasses.
"""

from __future__ import annotations

import dataclasses
import itertools
import re
from collections.abc import Mapping
from typing import Any

from psycopg import errors, pq
from psycopg.adapt import PyFormat, Transformer

_PLACEHOLDER = re.compile(rb"%\(([^)]+)\)s|%%")
#: Where a connection's state is kept: its pool entry's ``info``, which follows the
#: driver connection from checkout to checkout.
_INFO_KEY = "herald.libpq"
#: SQLSTATE of "prepared statement does not exist": something ran DEALLOCATE ALL or
#: DISCARD ALL on the connection.
_NO_SUCH_STATEMENT = b"26000"
_OK = (pq.ExecStatus.COMMAND_OK, pq.ExecStatus.TUPLES_OK)


@dataclasses.dataclass(frozen=True, slots=True)
class Statement:
    """A statement in libpq's form: ``$n`` SQL and its bind names in ``$n`` order."""

    sql: bytes
    names: tuple[str, ...]

    @classmethod
    def from_pyformat(cls, pyformat_sql: bytes) -> Statement:
        """The statement of pyformat SQL (``%(name)s``, ``%%``), as SQLAlchemy compiles it
        for psycopg; a name used twice is one parameter."""
        names: list[str] = []

        def number(match: re.Match[bytes]) -> bytes:
            if match.group(1) is None:
                return b"%"
            name = match.group(1).decode()
            if name not in names:
                names.append(name)
            return b"$%d" % (names.index(name) + 1)

        return cls(_PLACEHOLDER.sub(number, pyformat_sql), tuple(names))

    def run(self, connection: Any, info: dict[str, Any],
            values: Mapping[str, Any]) -> tuple[list[tuple[Any, ...]], int]:
        """Run the statement with ``values`` (by bind name) on the psycopg ``connection``,
        which must be in autocommit, as a statement prepared on it; ``info`` keeps the
        connection's prepared names. Returns the rows (tuples, loaded as a cursor loads
        them) and the row count (-1 when the command has none). Raises psycopg's errors."""
        params = [values[name] for name in self.names]
        session = _session(connection, info)
        transformer, pgconn = session.transformer, session.pgconn
        dumped = transformer.dump_sequence(params, [PyFormat.AUTO] * len(params))
        key = (self.sql, tuple(transformer.types))
        formats = transformer.formats
        name = session.names.get(key)
        if name is None:
            name = session.names[key] = _prepare(connection, session, key)
        result = pgconn.exec_prepared(name, dumped, formats)
        if (result.status == pq.ExecStatus.FATAL_ERROR
                and result.error_field(pq.DiagnosticField.SQLSTATE) == _NO_SUCH_STATEMENT):
            # our statements were deallocated under us: prepare this one again, once
            session.names.clear()
            name = session.names[key] = _prepare(connection, session, key)
            result = pgconn.exec_prepared(name, dumped, formats)
        _check(connection, result)
        if result.status == pq.ExecStatus.TUPLES_OK:
            rows: list[tuple[Any, ...]] = []
            if result.ntuples:
                transformer.set_pgresult(result)
                rows = transformer.load_rows(0, result.ntuples, tuple)
                transformer.set_pgresult(None)
            return rows, result.ntuples
        count = result.command_tuples
        return [], count if count is not None else -1


@dataclasses.dataclass(slots=True)
class _Session:
    """One libpq connection's statements prepared by us, and its Transformer."""

    pgconn: Any
    transformer: Any
    #: (SQL, parameter types) -> statement name: psycopg picks a value's type by the
    #: value (int2 … numeric, NULL as unknown), so one SQL may be prepared per type set
    names: dict[tuple[bytes, tuple[int, ...]], bytes] = dataclasses.field(
        default_factory=dict)
    counter: itertools.count[int] = dataclasses.field(default_factory=itertools.count)


def _session(connection: Any, info: dict[str, Any]) -> _Session:
    session = info.get(_INFO_KEY)
    if session is None or session.pgconn is not connection.pgconn:
        session = info[_INFO_KEY] = _Session(connection.pgconn, Transformer(connection))
    return session


def _check(connection: Any, result: Any) -> None:
    if result.status == pq.ExecStatus.FATAL_ERROR:
        raise errors.error_from_result(result, encoding=connection.info.encoding)
    if result.status not in _OK:
        raise errors.InternalError(
            f"unexpected result status {pq.ExecStatus(result.status).name}")


def _prepare(connection: Any, session: _Session,
             key: tuple[bytes, tuple[int, ...]]) -> bytes:
    name = b"herald_%d" % next(session.counter)
    _check(connection, session.pgconn.prepare(name, key[0], key[1]))
    return name
