"""Old import path of the queue library's public API, kept for existing code; new code
imports from :mod:`herald.queue`."""

from herald.queue import (
    App,
    EnqueueResult,
    JobActor,
    Queue,
    current_app,
    enqueue,
    enqueue_groups,
    enqueue_many,
    queue,
)

__all__ = ["App", "EnqueueResult", "JobActor", "Queue", "current_app", "enqueue",
           "enqueue_groups", "enqueue_many", "queue"]
