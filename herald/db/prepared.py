"""Prepared statements for the hot paths: a Core statement compiled once per dialect and
run on the driver's cursor, or on an autocommit psycopg connection straight through libpq
(:mod:`herald.db.libpq`)."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from sqlalchemy import Connection, Float, Numeric
from sqlalchemy.engine import Dialect
from sqlalchemy.exc import DBAPIError
from sqlalchemy.sql.expression import ClauseElement
from sqlalchemy.types import TypeEngine

if TYPE_CHECKING:
    from herald.db import libpq


@dataclasses.dataclass(frozen=True, slots=True)
class _Form:
    """A statement as one dialect runs it: SQL text, bound values and column readers."""

    sql: str
    #: The SQL as the driver takes it: ASCII SQL as bytes for psycopg, which would otherwise
    #: encode the text on every execute (looking the connection's encoding up each time);
    #: ASCII reads the same in every client encoding
    driver_sql: str | bytes
    #: Bind names in placeholder order for positional paramstyles (SQLite's ``?``).
    positional: tuple[str, ...] | None
    #: Values of the statement's own literal binds (``outcome = 'queued'`` …).
    defaults: dict[str, Any]
    #: Type conversions on the way in, by bind name (only binds that need one).
    writers: dict[str, Callable[[Any], Any]]
    keys: tuple[str, ...]
    #: Type conversions on the way out, by column position (None: as the driver gives it).
    readers: tuple[Callable[[Any], Any] | None, ...]
    #: psycopg: the statement as :mod:`herald.db.libpq` runs it on autocommit connections
    #: (None: another driver)
    direct: libpq.Statement | None = None


#: PostgreSQL's type codes (OIDs) of ``numeric`` and ``double precision``.
_NUMERIC_OID, _FLOAT8_OID = 1700, 701


def _reader(type_: TypeEngine[Any], dialect: Dialect) -> Callable[[Any], Any] | None:
    """How a column of ``type_`` is read from ``dialect``'s rows (None: as the driver
    gives it)."""
    impl = type_.dialect_impl(dialect)
    coltype = None
    if dialect.name == "postgresql" and isinstance(impl, (Numeric, Float)):
        # PostgreSQL's numeric readers choose by the result column's type code, which a
        # statement compiled before it first runs does not know: the declared type's
        coltype = _FLOAT8_OID if isinstance(impl, Float) else _NUMERIC_OID
    return impl.result_processor(dialect, coltype)


@dataclasses.dataclass(frozen=True, slots=True)
class Ran:
    """What a :class:`Prepared` statement did: rows it returned (as mappings) and rowcount."""

    rowcount: int
    rows: list[dict[str, Any]]

    def first(self) -> dict[str, Any] | None:
        """The first row returned, or None."""
        return self.rows[0] if self.rows else None


class Prepared:
    """A Core statement compiled once per dialect and run on the driver's cursor.

    For the hot paths (a channel worker runs three statements per delivery): SQLAlchemy's
    execution layer costs more CPU per statement than PostgreSQL spends running a
    primary-key UPDATE; on an autocommit psycopg connection the statement also skips
    psycopg's cursor (:mod:`herald.db.libpq`). bench/libpq.md compares this with SQLAlchemy's
    compiled cache on psycopg's own prepared statements. The statement still comes from
    Core, so both dialects get their own SQL, and column types still convert values both
    ways (UTC timestamps, JSON on SQLite). Driver errors are raised as SQLAlchemy's
    (``IntegrityError`` …), a connection the server dropped is invalidated, and the
    engine's cursor-execute events fire, as ``Connection.execute`` would. Not for
    statements with expanding (``IN``-list) binds.
    """

    def __init__(self, statement: ClauseElement) -> None:
        self.statement = statement
        self._forms: dict[str, _Form] = {}

    def _form(self, dialect: Dialect) -> _Form:
        form = self._forms.get(dialect.name)
        if form is None:
            form = self._forms[dialect.name] = self._compile(dialect)
        return form

    def _compile(self, dialect: Dialect) -> _Form:
        compiled: Any = self.statement.compile(dialect=dialect)
        if compiled.literal_execute_params or compiled.post_compile_params:
            raise ValueError("Prepared statements cannot have expanding binds")
        defaults, writers = {}, {}
        for name, bind in compiled.binds.items():
            if not bind.required:
                defaults[name] = bind.effective_value
            writer = bind.type.dialect_impl(dialect).bind_processor(dialect)
            if writer is not None:
                writers[name] = writer
        columns = list(getattr(self.statement, "exported_columns", ()))
        psycopg = dialect.driver == "psycopg" and compiled.string.isascii()
        direct = None
        if psycopg and not compiled.escaped_bind_names:
            from herald.db import libpq  # psycopg only: SQLite processes need not import it

            direct = libpq.Statement.from_pyformat(compiled.string.encode("ascii"))
        return _Form(sql=compiled.string,
                     driver_sql=compiled.string.encode("ascii") if psycopg else compiled.string,
                     direct=direct,
                     positional=tuple(compiled.positiontup) if compiled.positional else None,
                     defaults=defaults, writers=writers,
                     keys=tuple(column.key for column in columns),
                     readers=tuple(_reader(column.type, dialect) for column in columns))

    def run(self, connection: Connection, params: Mapping[str, Any]) -> Ran:
        """Run the statement with ``params`` in the connection's current transaction (or
        committed at once, on an autocommit connection)."""
        dialect = connection.dialect
        form = self._form(dialect)
        values = {**form.defaults, **params}
        for name, writer in form.writers.items():
            values[name] = writer(values[name])
        raw = connection.connection.dbapi_connection
        assert raw is not None
        # psycopg in autocommit: straight to libpq, past the cursor (herald.db.libpq)
        direct = form.direct is not None and raw.autocommit is True
        bound: Any = (values if form.positional is None
                      else tuple(values[name] for name in form.positional))
        if not connection.in_transaction() and not _autocommitting(raw):
            # as Connection.execute would: the driver opens a transaction, and
            # connection.commit() must know to end it
            connection.begin()
        # the engine's listeners (and the Engine class's): a Connection's own dispatch
        # is rebuilt on every attribute read
        dispatch = connection.engine.dispatch
        listened = bool(dispatch.before_cursor_execute or dispatch.after_cursor_execute)
        # listeners are handed a cursor; the direct path has none of its own
        cursor = raw.cursor() if listened or not direct else None
        fetched: Sequence[Any]
        try:
            if dispatch.before_cursor_execute:  # tracing and counting listeners still see it
                dispatch.before_cursor_execute(connection, cursor, form.sql, bound, None, False)
            if direct:
                assert form.direct is not None
                fetched, rowcount = form.direct.run(raw, connection.connection.info, values)
            else:
                assert cursor is not None
                cursor.execute(form.driver_sql, bound)
                fetched = cursor.fetchall() if form.keys else []
                rowcount = cursor.rowcount
            if dispatch.after_cursor_execute:
                dispatch.after_cursor_execute(connection, cursor, form.sql, bound, None, False)
        except dialect.loaded_dbapi.Error as error:
            disconnected = dialect.is_disconnect(error, raw, cursor)
            if disconnected:
                connection.invalidate(error)
            raise DBAPIError.instance(form.sql, bound, error, dialect.loaded_dbapi.Error,
                                      connection_invalidated=disconnected,
                                      dialect=dialect) from error
        finally:
            if cursor is not None:
                cursor.close()
        readers = form.readers
        rows = [{key: value if read is None else read(value)
                 for key, read, value in zip(form.keys, readers, row, strict=True)}
                for row in fetched]
        return Ran(rowcount=rowcount, rows=rows)


def _autocommitting(dbapi_connection: Any) -> bool:
    """True when the driver's connection commits every statement by itself (psycopg's
    ``autocommit``; sqlite3's ``isolation_level`` None)."""
    switch = getattr(dbapi_connection, "autocommit", None)
    if switch is True:
        return True
    # sqlite3 before 3.12 has no switch, and from 3.12 on it says "legacy" (-1) by default
    return switch in (None, -1) and getattr(dbapi_connection, "isolation_level", "") is None
