"""Running queues: Dramatiq's worker on herald's broker, one concurrency per queue, the
queues of a process started and stopped in capsules.

A worker process runs the queues it is given, each with the registry's concurrency and
independent of the others: the process gets as many threads as its queues' concurrencies
add up to, and each queue's consumer fetches only up to its own free slots.

An application sorts its queues into :class:`Capsule` s (``registry.declare_capsules``).
A capsule has a startup step (build what its actors need), a failure policy for that step
and a drain bound (its queues' ``shutdown_timeout``). At start every capsule of the
process runs its step, in declaration order, before any queue is consumed; then the
capsules that started consume. A failed step of a ``stop_all`` capsule stops the process
(exit code 1); a failed ``stop_capsule`` step leaves that capsule's queues unconsumed and
the rest running.

SIGTERM and SIGINT stop every capsule at once, each draining its in-flight jobs: a
capsule with a bound forces its runs past it, one without waits for them however long they take;
a second signal during the drain is logged and ignored. Then the producer clients close,
within :data:`PRODUCER_CLOSE_BOUND`. See docs/queue.md#lifecycle.
"""

from __future__ import annotations

import contextlib
import dataclasses
import importlib
import logging
import signal
import threading
from collections.abc import Callable, Iterator, Sequence
from datetime import timedelta
from types import FrameType
from typing import Protocol

import dramatiq

from herald.queue.app import App, current_app
from herald.queue.capsules import Capsule, OnFailure, plan_capsules, starting
from herald.queue.dramatiq_internals import drop_worker_middleware, install_deadline_join
from herald.queue.errors import MixedShards
from herald.queue.registry import Registry

log = logging.getLogger(__name__)
# Dramatiq logs each failed run with the message's arguments (personal data); the ledger
# middleware logs every outcome with ids only and the job record keeps the stack.
logging.getLogger("dramatiq.worker.WorkerThread").setLevel(logging.CRITICAL)

#: How long the producer clients get to close at the end of a worker process; past it
#: they are left to the process's exit, which drops their connections.
PRODUCER_CLOSE_BOUND = timedelta(seconds=5)
#: What Dramatiq is given for a drain without a deadline (it takes milliseconds, and
#: Python's thread joins refuse more than about 292 years).
_NO_DEADLINE_MS = 100 * 365 * 24 * 3600 * 1000
#: Exit code of a worker process whose start failed.
STARTUP_FAILED = 1
#: The readiness of a worker whose capsules all run (the health checks' "ok").
READY = "ok"

# a queue's drain bound is the time its runs get, however many threads it has
install_deadline_join()


def queues_or_all(queues: Sequence[str] | None, app: App | None = None) -> list[str]:
    """The queues asked for, checked against ``app``'s (the installed App's when not
    given); every queue when none given. :class:`UnknownQueue` on an unknown name."""
    app = app or current_app()
    if not queues:
        return [spec.name for spec in app.specs()]
    return [app.spec(name).name for name in queues]


def import_modules(modules: Sequence[str]) -> list[Registry]:
    """Import modules that declare queues and actors (``herald worker --import``);
    returns the :class:`Registry` each names ``registry``, for those that have one."""
    registries = []
    for module in modules:
        registry = getattr(importlib.import_module(module), "registry", None)
        if isinstance(registry, Registry):
            registries.append(registry)
    return registries


def drain_bound(queues: Sequence[str], app: App | None = None) -> timedelta | None:
    """How long a graceful stop of these queues of ``app`` (the installed App when not
    given) waits before forcing their runs: the longest ``shutdown_timeout`` among them,
    or None (no deadline) when one has none."""
    app = app or current_app()
    bounds = [app.spec(queue).shutdown_timeout for queue in queues]
    if not bounds or any(bound is None for bound in bounds):
        return None
    return max(b for b in bounds if b is not None)


class StartupFailed(Exception):
    """A ``stop_all`` capsule's startup step (or its workers' start) failed."""


def describe_error(error: BaseException) -> str:
    """``Type: message`` on one line (a KeyError's quotes and a multi-line text cut)."""
    text = str(error.args[0]) if isinstance(error, KeyError) and error.args else str(error)
    lines = text.strip().splitlines()
    return f"{type(error).__name__}: {lines[0]}" if lines else type(error).__name__


# -- one Dramatiq worker --------------------------------------------------------------
class Stoppable(Protocol):
    """Something running beside the worker that stops when asked (a health server)."""

    def stop(self) -> None:
        """Stop it; returns when it has stopped."""


class QueueWorker:
    """A started Dramatiq worker over some queues of the installed App, all on one shard
    (:class:`~herald.queue.errors.MixedShards` otherwise), on that shard's broker."""

    def __init__(self, queues: Sequence[str]) -> None:
        self.queues = queues_or_all(queues)
        self.app = current_app()
        self.shard = self.app.shard_of_queues(self.queues)
        self.broker = self.shard.broker
        for queue in self.queues:
            self.broker.declare_queue(queue)
        threads = sum(self.app.spec(queue).concurrency for queue in self.queues)
        self.worker = dramatiq.Worker(self.broker, queues=set(self.queues),
                                      worker_threads=threads, worker_timeout=1000)
        self.started = False

    def start(self) -> None:
        """Apply each queue's retention (a lowered limit takes effect now, not at the
        queue's next terminal event: docs/queue.md#retention), then start consuming;
        returns at once."""
        admin = self.shard.admin
        for queue in self.queues:
            try:
                admin.prune(self.app.spec(queue))
            except Exception as error:  # Redis away: the consumers will wait for it anyway
                log.warning("retention at start failed: %s", type(error).__name__,
                            extra={"queue": queue})
        self.worker.start()
        # the middleware Dramatiq's start added has done its one job (a consumer for each
        # queue declared so far: this worker's, declared above); left on the broker, the
        # next capsule's worker in this process would find one of its type and warn at
        # every start, and a queue declared later would get a consumer in every worker
        drop_worker_middleware(self.broker, self.worker)
        self.started = True
        log.info("queues started", extra={"queues": ",".join(self.queues)})

    def stop(self, timeout: timedelta | None = None) -> int:
        """End in-flight runs (waiting up to ``timeout``, else the queues'
        :func:`drain_bound`, which may be no deadline), hand unstarted jobs back, stop.
        Returns how many runs were still going at the bound (forced: their jobs keep
        their locks until those run out, then they are restarted: docs/queue.md#stalls)."""
        if not self.started:
            return 0
        bound = timeout if timeout is not None else drain_bound(self.queues, self.app)
        bound_ms = _NO_DEADLINE_MS if bound is None else int(bound.total_seconds() * 1000)
        self.worker.stop(timeout=bound_ms)
        self.started = False
        forced = sum(thread.is_alive() for thread in self.worker.workers)
        names = ",".join(self.queues)
        if forced:
            log.warning("drain bound of %g s reached: %d run(s) forced",
                        bound.total_seconds() if bound else 0, forced,
                        extra={"queues": names})
        log.info("queues stopped", extra={"queues": names})
        return forced


@contextlib.contextmanager
def running_worker(queues: Sequence[str] | None = None) -> Iterator[QueueWorker]:
    """Run the queues in this process (real broker) for the duration of the block, as one
    Dramatiq worker with no startup steps."""
    worker = QueueWorker(queues or [])
    worker.start()
    try:
        yield worker
    finally:
        worker.stop()


# -- a worker process -----------------------------------------------------------------
@dataclasses.dataclass
class _CapsuleRun:
    """One capsule in this process: its worker (None for a startup step only) and, once
    its startup failed, why."""

    capsule: Capsule
    worker: QueueWorker | None
    failure: str | None = None


class WorkerProcess:
    """The queues of one process, in their capsules (:func:`plan_capsules` over the
    declared capsules), all on one shard: :class:`~herald.queue.errors.MixedShards`, naming
    the shards, otherwise (docs/queue.md#shards)."""

    def __init__(self, queues: Sequence[str] | None = None) -> None:
        self.queues = queues_or_all(queues)
        current_app().shard_of_queues(self.queues)  # refuse a mix before any capsule starts
        self.runs = [_CapsuleRun(capsule, QueueWorker(mine) if mine else None)
                     for capsule, mine in plan_capsules(self.queues, current_app().capsules())]

    def start(self) -> None:
        """Run every capsule's startup step in order, then start the capsules that
        succeeded.

        Raises :class:`StartupFailed` at the first failure of a ``stop_all`` capsule (no
        queue has been consumed then, unless a worker's own start failed); a
        ``stop_capsule`` failure is logged and its queues are left out. When no capsule
        is left with queues to run, that is a failure of the process too.
        """
        for run in self.runs:
            if run.capsule.startup is not None:
                with starting(run.worker.queues if run.worker is not None else ()):
                    self._attempt(run, run.capsule.startup)
        for run in self.runs:
            if run.worker is not None and run.failure is None:
                self._attempt(run, run.worker.start)
        running = [queue for run in self.runs if run.worker is not None and run.failure is None
                   for queue in run.worker.queues]
        if self.queues and not running:
            raise StartupFailed("no queue left to run: " + self.readiness().removeprefix(
                "error: "))
        log.info("worker started", extra={"queues": ",".join(running),
                                          "actors": len(current_app().actors())})

    def _attempt(self, run: _CapsuleRun, step: Callable[[], None]) -> None:
        try:
            step()
        except Exception as error:
            message = f"{run.capsule.name} startup failed: {describe_error(error)}"
            if run.capsule.on_failure is OnFailure.STOP_ALL:
                raise StartupFailed(message) from error
            run.failure = describe_error(error)
            log.error("%s; its queues are not consumed, the others run on", message,
                      extra={"queues": ",".join(run.worker.queues if run.worker else ())})

    def readiness(self) -> str:
        """:data:`READY` when every capsule runs and each running capsule's own readiness
        check passes, else ``error: <capsule> down (<why>)`` / ``<capsule> not ready
        (<why>)``."""
        down = [f"{run.capsule.name} down ({run.failure})" for run in self.runs
                if run.failure]
        down += [f"{run.capsule.name} not ready ({problem})" for run in self.runs
                 if run.failure is None and (problem := _capsule_problem(run.capsule))]
        return f"error: {'; '.join(down)}" if down else READY

    def stop(self) -> None:
        """Stop every started capsule at once, each draining within its own bound; returns
        when all have stopped."""
        threads = [threading.Thread(target=run.worker.stop, name=f"herald-stop-{index}")
                   for index, run in enumerate(self.runs)
                   if run.worker is not None and run.worker.started]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        log.info("worker stopped")


def _capsule_problem(capsule: Capsule) -> str | None:
    """Why the capsule's readiness check fails (None when it passes or there is none)."""
    if capsule.readiness is None:
        return None
    try:
        answer = capsule.readiness()
    except Exception as error:
        return describe_error(error)
    return None if answer is True else str(answer or "not ready")


def close_producers(app: App, bound: timedelta = PRODUCER_CLOSE_BOUND) -> bool:
    """Close ``app``'s producer clients (the broker's connections and the Redis client),
    waiting up to ``bound``; past it they are left to the process's exit. True when they
    closed in time."""
    closing = threading.Thread(target=app.close, name="herald-close-producers", daemon=True)
    closing.start()
    closing.join(bound.total_seconds())
    if closing.is_alive():
        log.warning("producer clients not closed within %g s: forced", bound.total_seconds())
        return False
    log.info("producer clients closed")
    return True


def _stop_on_signals() -> threading.Event:
    """An event set by the first SIGTERM/SIGINT; later ones are logged and ignored."""
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
    return stopping


def run_worker_process(queues: Sequence[str], *, imports: Sequence[str] = (),
                       health: Callable[[Callable[[], str]], Stoppable] | None = None,
                       ) -> int:
    """Run queues of the installed App in their capsules until SIGTERM/SIGINT, then drain,
    then close the App. Returns the exit code:
    0 after a drain, :data:`STARTUP_FAILED` when the start failed (one error line says
    why).

    Shutdown order: the capsules' workers (each within its bound), then the health server,
    then the producer clients (:func:`close_producers`), so that runs still draining can
    enqueue. ``health(readiness)`` starts the process's health server (the CLI passes
    one that serves ``/healthz``, ``/readyz`` and ``/metrics``); ``readiness()`` is
    :meth:`WorkerProcess.readiness`.
    """
    app = current_app()
    for registry in import_modules(imports):  # their declarations join the App's
        app.include(registry)
    try:
        process = WorkerProcess(queues)
    except MixedShards as mixed:
        log.error("worker not started: %s", mixed)
        close_producers(app)
        return STARTUP_FAILED
    stopping = _stop_on_signals()
    server = health(process.readiness) if health is not None else None
    code = 0
    try:
        process.start()
    except StartupFailed as failure:
        log.error("worker not started: %s", failure)
        code = STARTUP_FAILED
    else:
        stopping.wait()
    process.stop()
    if server is not None:
        server.stop()
    close_producers(app)
    return code
