"""Many rows in one statement: the rows bound as JSON and read back in SQL, on
PostgreSQL and on SQLite.

However many rows, the statement's text is the same, so it is compiled once: the rows
travel as JSON arrays, one per column on PostgreSQL (:func:`postgres_columns`, zipped back
by ``ROWS FROM``: :func:`postgres_rows`), one of rows on SQLite (:func:`sqlite_json`, read
back with ``json_each``: :func:`sqlite_rows`). A multi-row VALUES list with a bind per
value is a new statement for every row count (compiling one of 3,000 deliveries costs
SQLAlchemy over a second); PostgreSQL arrays as parameters cost psycopg more, per element,
than the JSON encoder, and a JSON array of objects (``json_populate_recordset``) costs
PostgreSQL twice as much as these.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import datetime
from typing import Any

import orjson
from sqlalchemy import JSON, String, text
from sqlalchemy import column as result_column
from sqlmodel import SQLModel

from models.base import table_reader

# -- PostgreSQL: one JSON array per column, zipped back by ROWS FROM


def postgres_columns(records: Sequence[SQLModel], prefix: str) -> dict[str, str]:
    """The records as one JSON array per column, bound as ``<prefix>_<column>``."""
    table = _table(records)
    columns = zip(*_values(records), strict=True)
    return {f"{prefix}_{column.key}": _json_array(column, values)
            for column, values in zip(table.columns, columns, strict=True)}


def _json_array(column: Any, values: tuple[Any, ...]) -> str:
    if isinstance(column.type, JSON):  # events' data: NaN refused, as the json module does
        return json.dumps(list(values), default=_iso, ensure_ascii=False, allow_nan=False)
    # ids, texts, flags and timestamps (ISO 8601, as isoformat writes them) at a tenth of
    # the json module's cost
    return orjson.dumps(values).decode()


def _iso(value: Any) -> str:
    if isinstance(value, datetime):
        return value.isoformat()
    raise TypeError(f"{type(value).__name__} is not JSON")


def postgres_rows(table: Any, prefix: str, dialect: Any,
                  overrides: dict[str, str] | None = None) -> tuple[str, str, str]:
    """``(columns, the SELECT list, the FROM item)`` reading the rows of ``table`` back
    from the JSON arrays :func:`postgres_columns` binds, each value cast to its column's
    type (texts stay text and JSON stays JSON: the INSERT converts them); a column of
    ``overrides`` is selected as the SQL given there instead."""
    functions, values = [], []
    for column in table.columns:
        json_column = isinstance(column.type, JSON)
        function = "json_array_elements" if json_column else "json_array_elements_text"
        functions.append(f"{function}(CAST(:{prefix}_{column.key} AS json))")
        value = f"{prefix}.{dialect.identifier_preparer.quote(column.key)}"
        # texts stay text: the INSERT's own conversion to VARCHAR(n) refuses a longer
        # one, where a CAST would cut it short without a word
        text_column = isinstance(getattr(column.type, "impl", column.type), String)
        if overrides and column.key in overrides:
            values.append(overrides[column.key])
            continue
        values.append(value if json_column or text_column
                      else f"CAST({value} AS {column.type.compile(dialect=dialect)})")
    names = column_list(table, dialect)
    return names, ", ".join(values), f"ROWS FROM ({', '.join(functions)}) AS {prefix}({names})"


# -- SQLite: one JSON array of rows, read back with json_each


def sqlite_json(records: Sequence[SQLModel], dialect: Any) -> str:
    """The records as one JSON array of rows (arrays in column order), each value in the
    form SQLite stores it (the column type's bind processor: timestamps as SQLite's
    text, JSON columns as JSON)."""
    writers = [None if isinstance(column.type, JSON)
               else column.type.dialect_impl(dialect).bind_processor(dialect)
               for column in _table(records).columns]
    rows = [[value if write is None else write(value)
             for write, value in zip(writers, row, strict=True)] for row in _values(records)]
    return json.dumps(rows, ensure_ascii=False, allow_nan=False, separators=(",", ":"))


def sqlite_rows(table: Any, dialect: Any) -> tuple[str, str]:
    """``(columns, the SELECT list)`` reading the rows of a ``json_each`` of
    :func:`sqlite_json` back into ``table``'s columns (an object column stays JSON text,
    as SQLAlchemy stores it)."""
    values = ", ".join(f"json_extract(value, '$[{i}]')" for i in range(len(table.columns)))
    return column_list(table, dialect), values


# -- both dialects


def column_list(table: Any, dialect: Any, prefix: str = "") -> str:
    """``table``'s column names, quoted for ``dialect``, each after ``prefix``."""
    return ", ".join(prefix + dialect.identifier_preparer.quote(c.key) for c in table.columns)


def typed_select(sql: str, table: Any) -> Any:
    """``sql``, a SELECT of ``table``'s columns, read back through their types."""
    return text(sql).columns(*(result_column(c.key, c.type) for c in table.columns))


def _values(records: Sequence[SQLModel]) -> list[tuple[Any, ...]]:
    """Each record's column values, in the table's column order."""
    read = table_reader(_table(records))
    return [read(record) for record in records]


def _table(records: Sequence[SQLModel]) -> Any:
    return records[0].__table__  # type: ignore[attr-defined]
