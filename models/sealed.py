"""Secrets encrypted at rest (docs/configuration.md#secrets_key), at the model boundary:
column types that seal a value on its way into the database and open it on its way out,
so the code above reads and writes clear values and a dump of the database holds none.

- :class:`SealedText`: a text column that is always sealed (webhook signing secrets);
  writing one without a key raises :class:`~herald.secrets_box.SecretsKeyMissing`.
- :class:`SealedFields`: a JSON object whose named fields are sealed (an SFTP
  supplier's ``password``).
- :class:`SealedBytes`: a binary column sealed whenever a key exists (the stored answers
  of idempotent requests, some of which carry a secret).

Values stored in clear before herald encrypted them still read as they are;
:func:`reseal_all` (``herald secrets rotate``, and the migration that brought
encryption) seals them, and re-seals every sealed value under the newest key.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from sqlalchemy import JSON, Connection, LargeBinary, String, select, tuple_, update
from sqlalchemy.engine import Dialect
from sqlalchemy.sql import TableClause, column, table
from sqlalchemy.types import TypeDecorator

from herald.secrets_box import Box, SecretsKeyMissing, current_box, is_sealed, require_box


class SealedText(TypeDecorator[str]):
    """A text column stored sealed; reads a value stored in clear as it is."""

    impl = String
    cache_ok = True

    def process_bind_param(self, value: str | None, dialect: Dialect) -> str | None:
        """Seal ``value`` with the newest key (SecretsKeyMissing without a key)."""
        return None if value is None else require_box().seal(value)

    def process_result_value(self, value: str | None, dialect: Dialect) -> str | None:
        """The clear value of what is stored."""
        if value is None or not is_sealed(value):
            return value
        return require_box().open(value)


class SealedBytes(TypeDecorator[bytes]):
    """A binary column stored sealed whenever a key exists (else in clear: outside the
    embedded default with SECRETS_KEY unset, no route that makes a secret runs)."""

    impl = LargeBinary
    cache_ok = True

    def process_bind_param(self, value: bytes | None, dialect: Dialect) -> bytes | None:
        """Seal ``value`` with the newest key, when there is one."""
        box = current_box()
        return value if value is None or box is None else box.seal_bytes(value)

    def process_result_value(self, value: bytes | None, dialect: Dialect) -> bytes | None:
        """The clear value of what is stored."""
        if value is None or not is_sealed(bytes(value)):
            return value
        return require_box().open_bytes(bytes(value))


class SealedFields(TypeDecorator[dict[str, Any]]):
    """A JSON object column whose string ``fields`` are stored sealed (the other fields
    stay readable in the database)."""

    impl = JSON
    cache_ok = True

    def __init__(self, fields: Sequence[str], **json_options: Any) -> None:
        super().__init__(**json_options)
        self.fields = tuple(fields)

    def process_bind_param(self, value: Any, dialect: Dialect) -> Any:
        """The object with each of its ``fields`` that holds a string sealed."""
        if not isinstance(value, dict) or not any(
                isinstance(value.get(name), str) for name in self.fields):
            return value
        box = require_box()
        return {name: box.seal(item) if name in self.fields and isinstance(item, str) else item
                for name, item in value.items()}

    def process_result_value(self, value: Any, dialect: Dialect) -> Any:
        """The object with its sealed ``fields`` opened."""
        if not isinstance(value, dict) or not any(
                isinstance(value.get(name), str) and is_sealed(value[name])
                for name in self.fields):
            return value
        box = require_box()
        return {name: box.open(item) if name in self.fields and isinstance(item, str) else item
                for name, item in value.items()}


def require_sealing() -> None:
    """Raise :class:`~herald.secrets_box.SecretsKeyMissing` unless a secret can be
    stored now: called before a secret is made, so nothing is written (and no secret is
    shown) that could not be kept encrypted."""
    require_box()


# -- sealing and re-sealing what is stored ---------------------------------------------------
@dataclasses.dataclass
class Resealed:
    """What one pass did to one kind of secret: values sealed that were stored in clear,
    re-sealed under the newest key, and already sealed under it (left alone)."""

    encrypted: int = 0
    reencrypted: int = 0
    current: int = 0


#: Rows one statement of a pass reads.
RESEAL_BATCH = 500

# The columns as stored (no sealing types): the pass reads and writes sealed text itself.
_endpoints = table("webhook_endpoints", column("id", String), column("secret", String),
                   column("previous_secret", String))
_suppliers = table("suppliers", column("id", String), column("sftp", JSON))
_keys = table("idempotency_keys", column("scope", String), column("key", String),
              column("body", LargeBinary))
#: Each kind of secret: a label, its table, its key columns, its columns.
_KINDS: tuple[tuple[str, TableClause, tuple[str, ...], tuple[str, ...]], ...] = (
    ("webhook signing secrets", _endpoints, ("id",), ("secret", "previous_secret")),
    ("SFTP passwords", _suppliers, ("id",), ("sftp",)),
    ("idempotent answers", _keys, ("scope", "key"), ("body",)),
)


def reseal_all(connection: Connection, box: Box | None = None) -> dict[str, Resealed]:
    """Seal every secret stored in clear and re-seal every sealed one that the newest key
    does not open, in ``connection``'s transaction, each row locked while it is rewritten;
    a value already sealed under the newest key is left alone, so a second pass changes
    nothing. Returns what it did per kind (labels as ``herald secrets rotate`` prints them).

    ``box`` defaults to :func:`~herald.secrets_box.current_box`. Without any key:
    :class:`~herald.secrets_box.SecretsKeyMissing` when some secret is stored in clear
    (an idempotent answer counts when it carries a webhook secret), else nothing to do.
    :class:`~herald.secrets_box.SecretUnreadable` (the caller rolls back) when a sealed
    value opens with none of the keys."""
    box = box or current_box()
    if box is None:
        clear = _count_clear(connection)
        if clear:
            raise SecretsKeyMissing(f"{clear} secrets are stored in clear and cannot be "
                                    "encrypted without it")
        return {label: Resealed() for label, *_ in _KINDS}
    done = {}
    for label, stored, keys, columns in _KINDS:
        counts = done[label] = Resealed()
        _rewrite(connection, stored, keys, columns,
                 functools.partial(_reseal, box, counts=counts))
    return done


def unseal_all(connection: Connection) -> int:
    """Store every sealed secret in clear again (the downgrade of the migration that
    brought encryption), in ``connection``'s transaction; returns how many.
    :class:`~herald.secrets_box.SecretsKeyMissing` when some value is sealed and there is
    no key."""
    opened = 0

    def unseal(value: Any) -> Any:
        nonlocal opened
        if value is None or not is_sealed(value if isinstance(value, str) else bytes(value)):
            return value
        opened += 1
        if isinstance(value, str):
            return require_box().open(value)
        return require_box().open_bytes(bytes(value))

    for _, stored, keys, columns in _KINDS:
        _rewrite(connection, stored, keys, columns, unseal)
    return opened


def _rewrite(connection: Connection, stored: TableClause, keys: tuple[str, ...],
             columns: tuple[str, ...], change: Callable[[Any], Any]) -> None:
    """Store ``change(value)`` instead of each value of ``columns`` (the ``password`` of
    a JSON object) where it returns another object than the value it was given."""
    for row in _rows(connection, stored, keys, columns):
        changes = {}
        for name in columns:
            value = row[name]
            if isinstance(value, dict):
                password = value.get("password")
                new = password if not isinstance(password, str) else change(password)
                if new is not password:
                    changes[name] = {**value, "password": new}
            elif (new := change(value)) is not value:
                changes[name] = new
        if changes:
            connection.execute(update(stored).where(
                *[stored.c[key] == row[key] for key in keys]).values(**changes))


def _rows(connection: Connection, stored: TableClause, keys: tuple[str, ...],
          columns: tuple[str, ...]) -> Iterator[Any]:
    """Every row of ``stored`` (its keys and ``columns``) in key order, a batch of
    :data:`RESEAL_BATCH` at a time, each batch locked until the transaction ends."""
    key_columns = [stored.c[key] for key in keys]
    after: tuple[Any, ...] | None = None
    while True:
        query = (select(*key_columns, *[stored.c[name] for name in columns])
                 .order_by(*key_columns).limit(RESEAL_BATCH).with_for_update())
        if after is not None:
            query = query.where(tuple_(*key_columns) > tuple_(*after))
        batch = connection.execute(query).mappings().all()
        yield from batch
        if len(batch) < RESEAL_BATCH:
            return
        after = tuple(batch[-1][key] for key in keys)


def _reseal(box: Box, value: Any, counts: Resealed) -> Any:
    """The value to store instead of ``value`` (text or bytes), or ``value`` itself when
    it stays; ``counts`` counted."""
    if value is None:
        return value
    if isinstance(value, str):
        seal: Callable[[Any], Any] = box.seal
        open_: Callable[[Any], Any] = box.open
    else:
        value = bytes(value)
        seal, open_ = box.seal_bytes, box.open_bytes
    if not is_sealed(value):
        counts.encrypted += 1
        return seal(value)
    if box.is_current(value):
        counts.current += 1
        return value
    counts.reencrypted += 1
    return seal(open_(value))


def _count_clear(connection: Connection) -> int:
    """Secrets stored in clear (idempotent answers: those that carry a webhook secret)."""
    clear = 0
    for row in connection.execute(select(_endpoints.c.secret, _endpoints.c.previous_secret)):
        clear += sum(1 for value in row if value is not None and not is_sealed(value))
    for (sftp,) in connection.execute(select(_suppliers.c.sftp)):
        password = sftp.get("password") if isinstance(sftp, dict) else None
        clear += isinstance(password, str) and not is_sealed(password)
    for (body,) in connection.execute(select(_keys.c.body).where(_keys.c.body.is_not(None))):
        clear += not is_sealed(bytes(body)) and b'"whsec_' in bytes(body)
    return clear
