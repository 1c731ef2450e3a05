"""Every place herald relies on psycopg's internals, in one module.

:mod:`herald.db.libpq` runs the hot paths' prepared statements on psycopg's libpq
connection directly, past psycopg's cursor (bench/libpq.md has the measurements). For that
it needs three things psycopg does not promise to keep: its libpq wrapper
(``psycopg.pq``: ``PGconn.prepare`` and ``exec_prepared``, a ``PGresult``'s status, fields
and counts), its ``Transformer`` (``psycopg.adapt``: the dumpers and loaders a cursor
uses, in their C implementation) and ``psycopg.errors.error_from_result`` (the exception a
cursor raises for a failed result). They meet in :class:`RawConnection`;
``tests/db/test_psycopg_internals.py`` checks each against the installed psycopg, so an
upgrade outside :data:`SUPPORTED_PSYCOPG` fails there, loudly, in one place.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from psycopg import Connection, errors, pq
from psycopg.abc import Buffer
from psycopg.adapt import PyFormat, Transformer

#: The psycopg versions whose internals this module was checked against (the same range
#: as the package's dependency).
SUPPORTED_PSYCOPG = (">=3.3", "<3.4")

#: SQLSTATE of "prepared statement does not exist": something ran DEALLOCATE ALL or
#: DISCARD ALL on the connection.
_NO_SUCH_STATEMENT = b"26000"
_OK = (pq.ExecStatus.COMMAND_OK, pq.ExecStatus.TUPLES_OK)

#: Values dumped for libpq: the values (``None`` for NULL), their types' oids, and their
#: formats (text or binary), in parameter order.
Dumped = tuple[Sequence[Buffer | None], tuple[int, ...], Sequence[pq.Format] | None]


class RawConnection:
    """A psycopg connection's libpq connection, and the Transformer that converts values
    to and from it exactly as a cursor of that connection would.

    Statements run here bypass psycopg's transaction handling: only for connections in
    autocommit.
    """

    __slots__ = ("_connection", "_transformer", "pgconn")

    def __init__(self, connection: Connection[Any]) -> None:
        self.pgconn = connection.pgconn
        self._connection = connection
        self._transformer = Transformer(connection)

    def is_for(self, connection: Connection[Any]) -> bool:
        """True while ``connection`` still runs on the libpq connection this one wraps (a
        reconnected one does not)."""
        return self.pgconn is connection.pgconn

    def dump(self, values: Sequence[Any]) -> Dumped:
        """``values`` dumped as a cursor dumps its parameters: each type picked by the
        value (an int as int2 … numeric, ``None`` as unknown)."""
        transformer = self._transformer
        dumped = transformer.dump_sequence(values, [PyFormat.AUTO] * len(values))
        return dumped, tuple(transformer.types or ()), transformer.formats

    def prepare(self, name: bytes, sql: bytes, types: tuple[int, ...]) -> None:
        """Prepare ``sql`` (``$n`` placeholders of these ``types``) as statement ``name``.
        Raises psycopg's error for the failure, as a cursor would."""
        self._check(self.pgconn.prepare(name, sql, types))

    def execute_prepared(self, name: bytes, dumped: Dumped) -> pq.abc.PGresult:
        """Run the prepared statement ``name`` with ``dumped`` values: one libpq call,
        which releases the GIL while it waits. The result is read by :meth:`read` (or
        found :meth:`missing`)."""
        values, _, formats = dumped
        # psycopg's stub leaves out the NULLs its own dumper returns (libpq sends None as
        # NULL)
        return self.pgconn.exec_prepared(name, values, formats)  # type: ignore[arg-type]

    @staticmethod
    def missing(result: pq.abc.PGresult) -> bool:
        """True when ``result`` says the statement run is not prepared on the connection
        (deallocated under us)."""
        return (result.status == pq.ExecStatus.FATAL_ERROR
                and result.error_field(pq.DiagnosticField.SQLSTATE) == _NO_SUCH_STATEMENT)

    def read(self, result: pq.abc.PGresult) -> tuple[list[tuple[Any, ...]], int]:
        """The rows of ``result`` (tuples, loaded as a cursor loads them) and its row count
        (-1 when the command has none). Raises psycopg's error when the statement failed,
        as a cursor would."""
        self._check(result)
        if result.status == pq.ExecStatus.TUPLES_OK:
            rows: list[tuple[Any, ...]] = []
            if result.ntuples:
                transformer = self._transformer
                transformer.set_pgresult(result)
                rows = transformer.load_rows(0, result.ntuples, tuple)
                transformer.set_pgresult(None)
            return rows, result.ntuples
        count = result.command_tuples
        return [], count if count is not None else -1

    def _check(self, result: pq.abc.PGresult) -> None:
        if result.status == pq.ExecStatus.FATAL_ERROR:
            raise errors.error_from_result(result, encoding=self._connection.info.encoding)
        if result.status not in _OK:
            raise errors.InternalError(
                f"unexpected result status {pq.ExecStatus(result.status).name}")
