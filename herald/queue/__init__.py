"""herald's queue library: BullMQ's job semantics on Dramatiq, with Redis as the ledger.

One import line serves an application::

    from herald.queue import App, QueueConfig, QueueSpec, Registry, enqueue, queue

    registry = Registry()
    registry.declare(QueueSpec(name="thumbnails", concurrency=2, attempts=3))

    @registry.actor(queue="thumbnails", payload=ThumbnailJob)
    def make_thumbnail(job: ThumbnailJob) -> dict | None: ...

    App(QueueConfig(redis_url="redis://localhost:6379/0"), registry).install()
    enqueue(make_thumbnail, {"image_id": 7}, job_id="img-7", priority=1)
    queue("thumbnails").counts()

The semantics (ids, deduplication, retries, stalls, priorities, rate limits, schedules,
retention) are described in docs/queue.md. The library knows nothing of notifications or
orders: herald's own queues are declared by ``actors`` on its registry.
"""

from herald.queue.actor import JobActor
from herald.queue.app import App, current_app, get_spec, installed_app, now_ms
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
from herald.queue.groups import OnFailure, WorkerGroup
from herald.queue.ledger import Job, JobState
from herald.queue.operations import Queue, find_jobs, queue
from herald.queue.producer import EnqueueResult, enqueue, enqueue_groups, enqueue_many
from herald.queue.registry import (
    DAY,
    HOUR,
    MINUTE,
    NORMAL_PRIORITY,
    SECOND,
    URGENT_PRIORITY,
    Backoff,
    Keep,
    QueueSpec,
    QueueTable,
    Registry,
    Retention,
)
from herald.queue.schedule_spec import Schedule
from herald.queue.schedules import fire_schedules, stop_on_signal
from herald.queue.worker import running_worker

__all__ = [
    "DAY",
    "HOUR",
    "MINUTE",
    "NORMAL_PRIORITY",
    "SECOND",
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
    "OnFailure",
    "Permanent",
    "Queue",
    "QueueConfig",
    "QueueSpec",
    "QueueTable",
    "Registry",
    "Retention",
    "Schedule",
    "UnknownQueue",
    "WorkerGroup",
    "attempts_made",
    "current_app",
    "enqueue",
    "enqueue_groups",
    "enqueue_many",
    "find_jobs",
    "fire_schedules",
    "get_spec",
    "installed_app",
    "is_last_attempt",
    "now_ms",
    "queue",
    "running_worker",
    "stop_on_signal",
]
