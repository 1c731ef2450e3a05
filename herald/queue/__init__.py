"""herald's queue library: BullMQ's job semantics on Dramatiq, with Redis as the ledger.

One import line serves an application::

    from herald.queue import App, QueueConfig, QueueSpec, actor, declare, enqueue, queue

    declare(QueueSpec(name="thumbnails", concurrency=2, attempts=3))

    @actor(queue="thumbnails", payload=ThumbnailJob)
    def make_thumbnail(job: ThumbnailJob) -> dict | None: ...

    App(QueueConfig(redis_url="redis://localhost:6379/0")).install()
    enqueue(make_thumbnail, {"image_id": 7}, job_id="img-7", priority=1)
    queue("thumbnails").counts()

The semantics (ids, deduplication, retries, stalls, priorities, rate limits, schedules,
retention) are described in docs/queue.md. The library knows nothing of notifications or
orders: herald's own queues are declared by ``actors``.
"""

from herald.queue.actor import JobActor, actor
from herald.queue.app import App, current_app, now_ms
from herald.queue.config import QueueConfig
from herald.queue.current import attempts_made, is_last_attempt
from herald.queue.errors import (
    Defer,
    InvalidMessage,
    InvalidPayload,
    NoAppInstalled,
    Permanent,
    UnknownQueue,
)
from herald.queue.ledger import Job, JobState
from herald.queue.operations import Queue, find_jobs, queue
from herald.queue.producer import EnqueueResult, enqueue, enqueue_groups, enqueue_many
from herald.queue.registry import (
    NORMAL_PRIORITY,
    URGENT_PRIORITY,
    Backoff,
    Keep,
    QueueSpec,
    Retention,
    declare,
    get_spec,
)
from herald.queue.schedules import Schedule, schedule
from herald.queue.worker import running_worker

__all__ = [
    "NORMAL_PRIORITY",
    "URGENT_PRIORITY",
    "App",
    "Backoff",
    "Defer",
    "EnqueueResult",
    "InvalidMessage",
    "InvalidPayload",
    "Job",
    "JobActor",
    "JobState",
    "Keep",
    "NoAppInstalled",
    "Permanent",
    "Queue",
    "QueueConfig",
    "QueueSpec",
    "Retention",
    "Schedule",
    "UnknownQueue",
    "actor",
    "attempts_made",
    "current_app",
    "declare",
    "enqueue",
    "enqueue_groups",
    "enqueue_many",
    "find_jobs",
    "get_spec",
    "is_last_attempt",
    "now_ms",
    "queue",
    "running_worker",
    "schedule",
]
