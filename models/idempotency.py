"""Idempotency keys: the first answer to a creating ``POST`` sent with an
``Idempotency-Key`` header, kept so a retry gets it again instead of doing the work twice
(docs/api.md, "Idempotency-Key").

A key is unique per scope (a hash of the API token used, never the token itself). Its row
moves through one path, each step a single conditional statement, so two requests can
never both own a key:

- :func:`claim_key` — an ``INSERT … ON CONFLICT DO NOTHING``: whoever inserts the row
  owns the key and runs the request. Anybody else reads the row and gets its stored
  answer, or learns that it is still running or was made for another request.
- :func:`store_answer` — only the owner (its claim token) fills in the answer.
- :func:`release_key` — only the owner deletes a row that holds no answer (a 5xx or a
  crash): the retry runs again.
- :func:`expire_keys` — the sweep deletes rows older than :data:`KEY_TTL`.
"""

from __future__ import annotations

import dataclasses
import json
import uuid
from collections.abc import Collection
from datetime import datetime, timedelta

from sqlalchemy import Connection, delete, select, tuple_, update
from sqlalchemy.dialects import postgresql, sqlite
from sqlmodel import Field, SQLModel

from models.base import UtcDateTime, table_of, utcnow
from models.sealed import SealedBytes

#: How long a key's answer is replayed; older rows are taken over as new, and swept.
KEY_TTL = timedelta(hours=24)
#: How long a claim without an answer counts as still running. A process killed mid-request
#: leaves its claim behind; past this a retry takes it over instead of waiting for the TTL.
CLAIM_LEASE = timedelta(minutes=2)
#: Most rows one statement of the expiry sweep deletes.
EXPIRE_BATCH = 1000


class IdempotencyKey(SQLModel, table=True):
    """One ``Idempotency-Key`` of one scope: the request it was claimed for and, once that
    request finished below 500, its answer."""

    __tablename__ = "idempotency_keys"

    #: SHA-256 (hex) of the bearer token used, or :data:`ANONYMOUS` without one.
    scope: str = Field(primary_key=True, max_length=64)
    key: str = Field(primary_key=True, max_length=255)
    #: SHA-256 (hex) of the method, path, query and body (a JSON body as parsed:
    #: herald.web.idempotency.fingerprint): the same key for another request is refused.
    fingerprint: str = Field(max_length=64)
    #: Random per claim: only the request that claimed the row may answer or release it.
    claim: str = Field(max_length=36)
    claimed_at: datetime = Field(sa_type=UtcDateTime, nullable=False, index=True)
    #: The answer; all null while the request runs.
    status: int | None = Field(default=None, nullable=True)
    #: The answer's headers as a JSON list of ``[name, value]`` pairs.
    headers: str | None = Field(default=None, nullable=True)
    #: Stored encrypted (:class:`models.sealed.SealedBytes`): some answers carry a secret.
    body: bytes | None = Field(default=None, sa_type=SealedBytes, nullable=True)


#: The scope of requests that carry no bearer token (API_TOKEN unset).
ANONYMOUS = "-"


@dataclasses.dataclass(frozen=True)
class Claimed:
    """This request owns the key: run it, then :func:`store_answer` or
    :func:`release_key` with ``claim``."""

    claim: str


@dataclasses.dataclass(frozen=True)
class Answered:
    """The key's first request finished: its answer, to be sent again."""

    status: int
    headers: list[tuple[str, str]]
    body: bytes


@dataclasses.dataclass(frozen=True)
class InUse:
    """The key's first request is still running."""


@dataclasses.dataclass(frozen=True)
class Reused:
    """The key was claimed for another request (another body, path or method)."""


ClaimOutcome = Claimed | Answered | InUse | Reused

_keys = table_of(IdempotencyKey)


def claim_key(connection: Connection, scope: str, key: str, fingerprint: str, *,
              now: datetime | None = None, earlier: Collection[str] = ()) -> ClaimOutcome:
    """Claim ``key`` for the request ``fingerprint`` names, or say why not.

    Each statement commits alone (``connection`` is an autocommit one): the claim is the
    INSERT of the key's row, refused by its primary key when the row exists, so of any
    number of concurrent requests exactly one gets :class:`Claimed`. A row past
    :data:`KEY_TTL`, or a claim without an answer past :data:`CLAIM_LEASE`, is taken over
    by a conditional UPDATE (again at most one winner).

    ``earlier``: fingerprints the same request had under an earlier way of computing
    them; a row holding one of them is this request too (a retry across an upgrade is
    replayed, not refused). A claim always stores ``fingerprint``."""
    now = now or utcnow()
    same = {fingerprint, *earlier}
    claim = str(uuid.uuid4())
    for _ in range(3):  # a row deleted between our INSERT and SELECT: try the INSERT again
        values = {"scope": scope, "key": key, "fingerprint": fingerprint, "claim": claim,
                  "claimed_at": now, "status": None, "headers": None, "body": None}
        insert = (postgresql.insert if connection.dialect.name == "postgresql"
                  else sqlite.insert)(_keys)
        inserted = connection.execute(insert.values(**values).on_conflict_do_nothing()
                                      .returning(_keys.c.claim)).first()
        if inserted is not None:  # (rowcount is not reliable for a skipped INSERT)
            return Claimed(claim)
        row = connection.execute(select(_keys).where(_keys.c.scope == scope,
                                                     _keys.c.key == key)).first()
        if row is None:
            continue
        stale = (row.claimed_at < now - KEY_TTL
                 or (row.status is None and row.claimed_at < now - CLAIM_LEASE))
        if stale and (row.fingerprint in same or row.claimed_at < now - KEY_TTL):
            taken = connection.execute(
                update(_keys).where(_keys.c.scope == scope, _keys.c.key == key,
                                    _keys.c.claim == row.claim).values(**values)).rowcount
            if taken:
                return Claimed(claim)
            continue  # another request took it over first: read it again
        if row.fingerprint not in same:
            return Reused()
        if row.status is None:
            return InUse()
        return Answered(row.status, [tuple(pair) for pair in json.loads(row.headers or "[]")],
                        row.body or b"")
    return InUse()


def store_answer(connection: Connection, scope: str, key: str, claim: str, status: int,
                 headers: list[tuple[str, str]], body: bytes) -> bool:
    """Keep the answer of the request holding ``claim``; False when it no longer holds the
    key (taken over after :data:`CLAIM_LEASE`), and nothing changes."""
    return bool(connection.execute(
        update(_keys).where(_keys.c.scope == scope, _keys.c.key == key,
                            _keys.c.claim == claim, _keys.c.status.is_(None))
        .values(status=status, headers=json.dumps(headers), body=body)).rowcount)


def release_key(connection: Connection, scope: str, key: str, claim: str) -> bool:
    """Delete the claim of a request that has no answer to keep (a 5xx, a crash), so the
    retry runs again; only while ``claim`` still holds it and nothing was stored."""
    return bool(connection.execute(
        delete(_keys).where(_keys.c.scope == scope, _keys.c.key == key,
                            _keys.c.claim == claim, _keys.c.status.is_(None))).rowcount)


def expire_keys(connection: Connection, *, now: datetime | None = None) -> int:
    """Delete every key claimed more than :data:`KEY_TTL` ago, :data:`EXPIRE_BATCH` rows a
    statement (each commits alone, so no statement holds many locks); returns how many."""
    cutoff = (now or utcnow()) - KEY_TTL
    total = 0
    while True:
        oldest = (select(_keys.c.scope, _keys.c.key).where(_keys.c.claimed_at < cutoff)
                  .limit(EXPIRE_BATCH))
        deleted = connection.execute(
            delete(_keys).where(tuple_(_keys.c.scope, _keys.c.key).in_(oldest))).rowcount
        total += deleted
        if deleted < EXPIRE_BATCH:
            return total
