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

from herald.queue.app import App, current_app, get_spec, installed_app, now_ms
from herald.queue.capsules import Capsule, OnFailure, capsule_queues
from herald.queue.config import QueueConfig, ShardConfig
from herald.queue.current import attempts_made, is_last_attempt
from herald.queue.errors import (
    Defer,
    InvalidMessage,
    InvalidPayload,
    MixedShards,
    NoAppInstalled,
    Permanent,
    UnknownQueue,
)
from herald.queue.job_actor import JobActor
from herald.queue.ledger import ADD_CHUNK, Job, JobState, Ledger
from herald.queue.ledger_admin import LedgerAdmin
from herald.queue.ledger_queries import LedgerQueries
from herald.queue.metrics import CONTENT_TYPE as METRICS_CONTENT_TYPE
from herald.queue.metrics import exposition as metrics_exposition
from herald.queue.operations import Queue, find_jobs, queue
from herald.queue.producer import EnqueueResult, enqueue, enqueue_many, enqueue_many_actors
from herald.queue.redis import REDIS_FAILOVER_S, ThreadConnections, new_redis_client
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
from herald.queue.schedules import fire_due, fire_schedules, stop_on_signal
from herald.queue.shards import Shard
from herald.queue.worker import (
    QueueWorker,
    import_modules,
    queues_or_all,
    run_worker_process,
    running_worker,
)

__all__ = [
    "ADD_CHUNK",
    "DAY",
    "HOUR",
    "METRICS_CONTENT_TYPE",
    "MINUTE",
    "NORMAL_PRIORITY",
    "REDIS_FAILOVER_S",
    "SECOND",
    "URGENT_PRIORITY",
    "App",
    "Backoff",
    "Capsule",
    "Defer",
    "EnqueueResult",
    "InvalidMessage",
    "InvalidPayload",
    "Job",
    "JobActor",
    "JobState",
    "Keep",
    "Ledger",
    "LedgerAdmin",
    "LedgerQueries",
    "MixedShards",
    "NoAppInstalled",
    "OnFailure",
    "Permanent",
    "Queue",
    "QueueConfig",
    "QueueSpec",
    "QueueTable",
    "QueueWorker",
    "Registry",
    "Retention",
    "Schedule",
    "Shard",
    "ShardConfig",
    "ThreadConnections",
    "UnknownQueue",
    "attempts_made",
    "capsule_queues",
    "current_app",
    "enqueue",
    "enqueue_many",
    "enqueue_many_actors",
    "find_jobs",
    "fire_due",
    "fire_schedules",
    "get_spec",
    "import_modules",
    "installed_app",
    "is_last_attempt",
    "metrics_exposition",
    "new_redis_client",
    "now_ms",
    "queue",
    "queues_or_all",
    "run_worker_process",
    "running_worker",
    "stop_on_signal",
]
