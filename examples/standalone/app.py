"""The application: two queues, two actors and one schedule declared on its registry,
and the App that wires them.

Nothing of herald but its queue library is used: no herald settings, no database. The
only configuration read is ``REDIS_URL``. Run it under Dramatiq's own CLI::

    REDIS_URL=redis://localhost:6379/0 dramatiq examples.standalone.app

or under herald's worker::

    REDIS_URL=redis://localhost:6379/0 herald worker --app examples.standalone.app:app
"""

from __future__ import annotations

import os
import time
from datetime import timedelta

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

#: The process's wiring; installing it makes its broker Dramatiq's global one.
app = App(QueueConfig(redis_url=os.environ["REDIS_URL"], prefix=PREFIX), registry).install()
