"""Old import path of the worker runner, kept for existing code; new code imports
:func:`herald.queue.running_worker`."""

import contextlib
from collections.abc import Iterator, Sequence

from herald.queue.worker import QueueWorker, run_worker_process
from herald.queue.worker import running_worker as _running_worker

__all__ = ["QueueWorker", "run_worker_process", "running_worker"]


@contextlib.contextmanager
def running_worker(queues: Sequence[str] | None = None, *,
                   lanes: Sequence[str] | None = None) -> Iterator[QueueWorker]:
    """:func:`herald.queue.running_worker`, also under its old keyword ``lanes``."""
    with _running_worker(queues if queues is not None else lanes) as worker:
        yield worker
