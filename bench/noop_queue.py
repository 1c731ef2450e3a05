"""The benchmarks' herald queue: ``bench-herald``, whose one actor does nothing.

Declared at import, on a registry of its own, so that a ``herald worker --import
bench.noop_queue bench-herald`` process reads the same declarations as the benchmark that
enqueues."""

from pydantic import BaseModel

from herald.queue import Keep, QueueSpec, Registry, Retention

#: Worker threads per process, for plain Dramatiq and for herald alike.
THREADS = 8
#: The queue every herald benchmark runs.
QUEUE = "bench-herald"

registry = Registry()
registry.declare(QueueSpec(name=QUEUE, concurrency=THREADS, attempts=1,
                           retention=Retention(completed=Keep(count=1000))))


class Noop(BaseModel):
    """One noop job."""

    n: int


@registry.actor(queue=QUEUE, payload=Noop, name="noop")
def noop(job: Noop) -> None:
    """Do nothing: the benchmark measures the queue."""
    return None
