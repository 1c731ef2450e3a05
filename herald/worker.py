"""Running lanes: Dramatiq's worker on herald's broker, one concurrency per lane.

A worker process runs the lanes it is given, each with the registry's concurrency and
independent of the others: the process gets as many threads as its lanes' concurrencies
add up to, and each lane's consumer fetches only up to its own free slots. SIGTERM and
SIGINT drain in-flight jobs without force (lanes with a shutdown bound get forced after
it); a second signal during the drain is logged and ignored.
"""

from __future__ import annotations

import contextlib
import importlib
import logging
import signal
import threading
from collections.abc import Iterator, Sequence
from datetime import timedelta
from types import FrameType

import dramatiq
from dramatiq.worker import _WorkerMiddleware

from herald.jobs import declared_actors, get_broker, get_ledger
from herald.registry import all_specs, get_spec

log = logging.getLogger("herald.worker")
# Dramatiq logs each failed run with the message's arguments (personal data); the ledger
# middleware logs every outcome with ids only and the job record keeps the stack.
logging.getLogger("dramatiq.worker.WorkerThread").setLevel(logging.CRITICAL)

#: How long a drain may take when no lane names a bound (Dramatiq's own default: 10 min).
UNBOUNDED_DRAIN = timedelta(minutes=10)


def lanes_or_all(lanes: Sequence[str] | None) -> list[str]:
    """The lanes asked for, checked against the registry; every lane when none given."""
    if not lanes:
        return [spec.name for spec in all_specs()]
    return [get_spec(name).name for name in lanes]


def import_modules(modules: Sequence[str]) -> None:
    """Import modules that declare queues and actors (``herald worker --import``)."""
    for module in modules:
        importlib.import_module(module)


def drain_timeout(lanes: Sequence[str]) -> timedelta:
    """How long a graceful stop waits: the longest bound among the lanes, unbounded
    (10 minutes, Dramatiq's default) if any lane has none."""
    bounds = [get_spec(lane).shutdown_timeout for lane in lanes]
    if any(bound is None for bound in bounds):
        return UNBOUNDED_DRAIN
    return max(b for b in bounds if b is not None)


class LaneWorker:
    """A started Dramatiq worker over some lanes of the process-wide broker."""

    def __init__(self, lanes: Sequence[str]) -> None:
        self.lanes = lanes_or_all(lanes)
        self.broker = get_broker()
        for lane in self.lanes:
            self.broker.declare_queue(lane)
        threads = sum(get_spec(lane).concurrency for lane in self.lanes)
        self.worker = dramatiq.Worker(self.broker, queues=set(self.lanes),
                                      worker_threads=threads, worker_timeout=1000)

    def start(self) -> None:
        """Apply each queue's retention (a lowered limit takes effect now, not at the
        queue's next terminal event: docs/queue.md#retention), then start consuming;
        returns at once."""
        ledger = get_ledger()
        for lane in self.lanes:
            try:
                ledger.prune(get_spec(lane))
            except Exception as error:  # Redis away: the consumers will wait for it anyway
                log.warning("retention at start failed: %s", type(error).__name__,
                            extra={"queue": lane})
        self.worker.start()
        log.info("worker started", extra={"lanes": ",".join(self.lanes),
                                          "actors": len(declared_actors())})

    def stop(self, timeout: timedelta | None = None) -> None:
        """Finish in-flight jobs (up to ``timeout``), hand unstarted ones back, stop."""
        timeout = timeout or drain_timeout(self.lanes)
        self.worker.stop(timeout=int(timeout.total_seconds() * 1000))
        # Dramatiq adds one of these per started worker; drop ours so a later worker on the
        # same broker does not run its hooks twice
        self.broker.middleware = [m for m in self.broker.middleware
                                  if not (isinstance(m, _WorkerMiddleware)
                                          and m.worker is self.worker)]
        log.info("worker stopped", extra={"lanes": ",".join(self.lanes)})


@contextlib.contextmanager
def running_worker(lanes: Sequence[str] | None = None) -> Iterator[LaneWorker]:
    """Run the lanes in this process (real broker) for the duration of the block."""
    worker = LaneWorker(lanes or [])
    worker.start()
    try:
        yield worker
    finally:
        worker.stop()


def run_worker_process(lanes: Sequence[str], *, imports: Sequence[str] = (),
                       health_port: int | None = None) -> int:
    """Run lanes until SIGTERM/SIGINT, then drain gracefully. Returns the exit code."""
    import_modules(imports)
    worker = LaneWorker(lanes)
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
    health = None
    if health_port is not None:
        from herald.health import serve_worker_health

        health = serve_worker_health(health_port)
    worker.start()
    stopping.wait()
    worker.stop()
    if health is not None:
        health.stop()
    return 0
