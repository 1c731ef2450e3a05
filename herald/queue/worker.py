"""Running queues: Dramatiq's worker on herald's broker, one concurrency per queue.

A worker process runs the queues it is given, each with the registry's concurrency and
independent of the others: the process gets as many threads as its queues' concurrencies
add up to, and each queue's consumer fetches only up to its own free slots. SIGTERM and
SIGINT drain in-flight jobs without force (queues with a shutdown bound get forced after
it); a second signal during the drain is logged and ignored.
"""

from __future__ import annotations

import contextlib
import importlib
import logging
import signal
import threading
from collections.abc import Callable, Iterator, Sequence
from datetime import timedelta
from types import FrameType
from typing import Protocol

import dramatiq

from herald.queue.actor import declared_actors
from herald.queue.dramatiq_internals import drop_worker_middleware
from herald.queue.registry import all_specs, get_spec
from herald.queue.runtime import get_broker, get_ledger

log = logging.getLogger("herald.worker")
# Dramatiq logs each failed run with the message's arguments (personal data); the ledger
# middleware logs every outcome with ids only and the job record keeps the stack.
logging.getLogger("dramatiq.worker.WorkerThread").setLevel(logging.CRITICAL)

#: How long a drain may take when no queue names a bound (Dramatiq's own default: 10 min).
UNBOUNDED_DRAIN = timedelta(minutes=10)


def queues_or_all(queues: Sequence[str] | None) -> list[str]:
    """The queues asked for, checked against the registry; every queue when none given."""
    if not queues:
        return [spec.name for spec in all_specs()]
    return [get_spec(name).name for name in queues]


def import_modules(modules: Sequence[str]) -> None:
    """Import modules that declare queues and actors (``herald worker --import``)."""
    for module in modules:
        importlib.import_module(module)


def drain_timeout(queues: Sequence[str]) -> timedelta:
    """How long a graceful stop waits: the longest bound among the queues, unbounded
    (10 minutes, Dramatiq's default) if any queue has none."""
    bounds = [get_spec(queue).shutdown_timeout for queue in queues]
    if any(bound is None for bound in bounds):
        return UNBOUNDED_DRAIN
    return max(b for b in bounds if b is not None)


class Stoppable(Protocol):
    """Something running beside the worker that stops when asked (a health server)."""

    def stop(self) -> None:
        """Stop it; returns when it has stopped."""


class QueueWorker:
    """A started Dramatiq worker over some queues of the process-wide broker."""

    def __init__(self, queues: Sequence[str]) -> None:
        self.queues = queues_or_all(queues)
        self.broker = get_broker()
        for queue in self.queues:
            self.broker.declare_queue(queue)
        threads = sum(get_spec(queue).concurrency for queue in self.queues)
        self.worker = dramatiq.Worker(self.broker, queues=set(self.queues),
                                      worker_threads=threads, worker_timeout=1000)

    def start(self) -> None:
        """Apply each queue's retention (a lowered limit takes effect now, not at the
        queue's next terminal event: docs/queue.md#retention), then start consuming;
        returns at once."""
        ledger = get_ledger()
        for queue in self.queues:
            try:
                ledger.prune(get_spec(queue))
            except Exception as error:  # Redis away: the consumers will wait for it anyway
                log.warning("retention at start failed: %s", type(error).__name__,
                            extra={"queue": queue})
        self.worker.start()
        log.info("worker started", extra={"queues": ",".join(self.queues),
                                          "actors": len(declared_actors())})

    def stop(self, timeout: timedelta | None = None) -> None:
        """RunEnd in-flight jobs (up to ``timeout``), hand unstarted ones back, stop."""
        timeout = timeout or drain_timeout(self.queues)
        self.worker.stop(timeout=int(timeout.total_seconds() * 1000))
        drop_worker_middleware(self.broker, self.worker)
        log.info("worker stopped", extra={"queues": ",".join(self.queues)})


@contextlib.contextmanager
def running_worker(queues: Sequence[str] | None = None) -> Iterator[QueueWorker]:
    """Run the queues in this process (real broker) for the duration of the block."""
    worker = QueueWorker(queues or [])
    worker.start()
    try:
        yield worker
    finally:
        worker.stop()


def run_worker_process(queues: Sequence[str], *, imports: Sequence[str] = (),
                       health: Callable[[], Stoppable] | None = None) -> int:
    """Run queues until SIGTERM/SIGINT, then drain gracefully. Returns the exit code.

    ``health`` starts the process's health server (the CLI passes one that serves
    ``/healthz``, ``/readyz`` and ``/metrics``); it is stopped after the drain.
    """
    import_modules(imports)
    worker = QueueWorker(queues)
    stopping = threading.Event()

    def on_signal(signum: int, frame: FrameType | None) -> None:
        if stopping.is_set():
            log.warning("signal %s during drain ignored; still finishing in-flight jobs",
                        signal.Signals(signum).name)
            return
        log.info("signal %s: draining", signal.Signals(signum).name)
        stopping.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    server = health() if health is not None else None
    worker.start()
    stopping.wait()
    worker.stop()
    if server is not None:
        server.stop()
    return 0
