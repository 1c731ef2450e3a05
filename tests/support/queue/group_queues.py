"""The queue and actor of the group-limit tests (tests/queue/test_group_limits.py).

``t-groups`` lets one ``sysco`` job be active at a time across every process, and any
number of other groups' jobs (each process runs up to four jobs of the queue). Its
2-second lock makes a killed worker's job stall soon. Each run records ``start`` and
``end`` events (time, pid) through :func:`tests.support.queue.queues.record`, whatever the
run's outcome, so a test can read when each job held its slot.

A worker process runs it with ``herald worker --import tests.support.queue.group_queues
t-groups``.
"""

from __future__ import annotations

from datetime import timedelta

from herald.queue import Keep, QueueSpec, Retention
from tests.support.queue.queues import Step, _run, record, registry

QUEUE = "t-groups"

registry.declare(QueueSpec(name=QUEUE, concurrency=4, attempts=2,
                           backoff_base=timedelta(milliseconds=100),
                           lock_duration=timedelta(seconds=2),
                           retention=Retention(completed=Keep(count=100_000),
                                               failed=Keep(count=100)),
                           group_limits={"sysco": 1}))


@registry.actor(queue=QUEUE, payload=Step)
def grouped(job: Step) -> dict:
    """Does what the step says; records when the run ended, however it ended."""
    try:
        return _run(job)
    finally:
        record("end", job.key)
