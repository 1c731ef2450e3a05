"""The expiry sweep of idempotency keys: a key's answer is replayed for 24 hours, then
its row is deleted (docs/api.md#idempotency-key; docs/sweeps.md#idempotency-keys).

``herald clock`` runs it every :data:`EXPIRY_INTERVAL` on ``notification-orchestration``;
``herald sweep idempotency-keys`` runs it once."""

from __future__ import annotations

from datetime import datetime, timedelta

from pydantic import BaseModel, ConfigDict

from actors.queues import registry
from herald.db import autocommit
from herald.queue import Schedule
from models.idempotency import expire_keys

#: How often the clock sweeps expired keys.
EXPIRY_INTERVAL = timedelta(hours=1)


def expire_idempotency_keys(now: datetime | None = None) -> int:
    """Delete every idempotency key claimed more than 24 hours before ``now`` (default:
    the current time); returns how many. A retry after that runs as a new request."""
    with autocommit() as connection:
        return expire_keys(connection, now=now)


class ExpiryJob(BaseModel):
    """The sweep job carries nothing: it reads the database."""

    model_config = ConfigDict(extra="forbid")


@registry.actor(queue="notification-orchestration", payload=ExpiryJob)
def expire_idempotency_keys_job(job: ExpiryJob) -> dict[str, int]:
    """One expiry sweep as a job; its return value counts the keys deleted."""
    return {"expired": expire_idempotency_keys()}


registry.schedule(Schedule(name="expire-idempotency-keys", actor=expire_idempotency_keys_job,
                           every=EXPIRY_INTERVAL, run_at_start=True))
registry.sweep("idempotency-keys", expire_idempotency_keys)
