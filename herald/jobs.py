"""Old import path of the queue library's public API, kept for existing code; new code
imports from :mod:`herald.queue`."""

from herald.queue import (
    EnqueueResult,
    JobActor,
    Queue,
    actor,
    enqueue,
    enqueue_groups,
    enqueue_many,
    queue,
)
from herald.queue.runtime import get_broker, get_ledger, reset_brokers, use_broker

__all__ = ["EnqueueResult", "JobActor", "Queue", "actor", "enqueue", "enqueue_groups",
           "enqueue_many", "get_broker", "get_ledger", "queue", "reset_brokers", "use_broker"]
