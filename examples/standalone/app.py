"""The application: two queues, two actors and one schedule declared on its registry,
and the App that wires them.

Nothing of herald but its queue library is used: no herald settings, no database. The
only configuration read is ``REDIS_URL``. From the repository root, run it under
Dramatiq's own CLI::

    REDIS_URL=redis://localhost:6379/0 dramatiq examples.standalone.app

or under herald's worker::

    REDIS_URL=redis://localhost:6379/0 herald worker --app examples.standalone.app:app

then add its jobs (``python -m examples.standalone.produce``) and fire its schedule
(``python -m examples.standalone.clock``, which logs each tick it fires).

No Redis on localhost:6379? ``herald up`` run in the repository root with no
``REDIS_URL`` set starts herald's embedded Redis, on the unix socket
``.herald/redis.sock``; while it runs, point every process of this example at it (its keys
all start with ``standalone:``, apart from herald's)::

    REDIS_URL=unix://$PWD/.herald/redis.sock herald worker --app examples.standalone.app:app

A process that adds or fires jobs stops at once with one line when Redis does not answer
(:func:`require_redis`); a worker keeps trying, as Dramatiq's workers do.
"""

from __future__ import annotations

import os
import sys
import time
from datetime import timedelta

import redis
from pydantic import BaseModel

from herald.queue import (
    App,
    Backoff,
    QueueConfig,
    QueueSpec,
    Registry,
    Schedule,
    attempts_made,
    current_app,
)

#: The key prefix of everything this application keeps in Redis.
PREFIX = "standalone"
#: The wait before each retry of a thumbnail: fixed, so its time is exact.
RETRY_AFTER = timedelta(seconds=2)
#: Everything this application declares: queues, actors, the schedule.
registry = Registry()

registry.declare(QueueSpec(name="thumbnails", concurrency=2, attempts=3, backoff=Backoff.FIXED,
                           backoff_base=RETRY_AFTER))
registry.declare(QueueSpec(name="reports", concurrency=1, attempts=1))


class Thumbnail(BaseModel):
    """Make one image's thumbnail; the first ``fail_first`` attempts fail."""

    image_id: int
    fail_first: int = 0


class Report(BaseModel):
    """Build one report."""

    kind: str


def attempts_key(image_id: int) -> str:
    """Where the start time (ms) of each attempt at ``image_id`` is kept."""
    return f"{PREFIX}:attempts:{image_id}"


@registry.actor(queue="thumbnails", payload=Thumbnail)
def make_thumbnail(job: Thumbnail) -> dict[str, int]:
    """Record when this attempt started, fail while asked to, then return the result."""
    current_app().client.rpush(attempts_key(job.image_id), int(time.time() * 1000))
    if attempts_made() < job.fail_first:
        raise RuntimeError(f"thumbnail {job.image_id}: the image store did not answer")
    return {"image_id": job.image_id, "attempt": attempts_made() + 1}


@registry.actor(queue="reports", payload=Report)
def build_report(job: Report) -> dict[str, str]:
    """Build the report (here: say which one)."""
    return {"built": job.kind}


registry.schedule(Schedule(name="every-second-report", actor=build_report,
                           payload={"kind": "every-second"}, every=timedelta(seconds=1)))

if not os.environ.get("REDIS_URL"):
    sys.exit("examples.standalone: set REDIS_URL to the application's Redis "
             "(see examples/standalone/app.py)")
#: The process's wiring; installing it makes its broker Dramatiq's global one.
app = App(QueueConfig(redis_url=os.environ["REDIS_URL"], prefix=PREFIX), registry).install()


def require_redis() -> None:
    """Return when the application's Redis answers; otherwise stop the process with one
    line saying so (a producer or a clock can do nothing without it)."""
    try:
        app.client.ping()
    except redis.RedisError as error:
        sys.exit(f"examples.standalone: Redis (REDIS_URL) does not answer: {error} "
                 "(see examples/standalone/app.py for herald's embedded one)")
