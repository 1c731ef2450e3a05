"""Turning the end of a run into the ledger's vocabulary, and the middleware that does it.

The :class:`LedgerMiddleware` runs on both brokers. It records how each run ended on the
message (``options["herald_finish"]``); the Redis ledger broker's consumer batches those
into its next round trip, while on RabbitMQ the middleware claims the job before it runs
(each run fenced by a token of its own) and writes the outcome itself before the message
is acked.
"""

from __future__ import annotations

import contextlib
import json
import logging
import threading
import time
import traceback
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any, Protocol, cast

import dramatiq
from dramatiq.middleware import CurrentMessage, Middleware, SkipMessage

from herald.queue.dramatiq_internals import NO_TIME_LIMIT_MS, QueueTimeLimit
from herald.queue.errors import Defer, Permanent
from herald.queue.ledger import Ledger, RunEnd, new_token
from herald.queue.metrics import Durations
from herald.queue.registry import Declarations, QueueSpec, declarations_of

if TYPE_CHECKING:
    from dramatiq.broker import MessageProxy

log = logging.getLogger(__name__)

#: Longest stack trace kept on a job record.
STACK_LIMIT = 8000
#: Lock extensions per lock duration: a live run's lock always has two thirds of its
#: duration left after a beat, so one late beat never makes it look stalled.
BEATS_PER_LOCK = 3


#: Return values as JSON, compact; unknown types as their ``str`` (one encoder for all runs:
#: ``json.dumps`` with options builds a new encoder per call).
_encode_result = json.JSONEncoder(default=str, separators=(",", ":")).encode


def run_token(message: MessageProxy) -> str:
    """The token that fences the run ``message`` carries: the one the ledger's claim
    issued (RabbitMQ), else the message id (the Redis broker names each run's message by
    its token). Only the job's latest run holds it; any other run's end is stale."""
    return message.options.get("herald_token") or message.message_id


def extend_interval(specs: Iterable[QueueSpec]) -> float:
    """Seconds between lock extensions of runs of these queues: a third of the shortest
    lock, so a live run's lock never runs out between two extensions."""
    return min(spec.lock_duration.total_seconds() for spec in specs) / BEATS_PER_LOCK


def finish_for(message: MessageProxy, *, result: Any = None,
               exception: BaseException | None = None) -> RunEnd:
    """The :class:`RunEnd` that reports this run's end to the ledger."""
    job_id, token, actor = message.options["job_id"], run_token(message), message.actor_name
    if exception is None:
        return RunEnd(job_id=job_id, token=token, outcome=RunEnd.COMPLETED,
                      value="null" if result is None else _encode_result(result), actor=actor)
    if isinstance(exception, Defer):
        return RunEnd(job_id=job_id, token=token,
                      outcome=RunEnd.DEFERRED if exception.count_start
                      else RunEnd.DEFERRED_UNCOUNTED,
                      value=str(int(exception.delay.total_seconds() * 1000)),
                      next_token=new_token(), actor=actor)
    stack = "".join(traceback.format_exception(exception))[-STACK_LIMIT:]
    reason = str(exception) or type(exception).__name__
    outcome = RunEnd.PERMANENT if isinstance(exception, Permanent) else RunEnd.FAILED
    return RunEnd(job_id=job_id, token=token, outcome=outcome, value=reason, stack=stack,
                  next_token=new_token(), actor=actor)


#: The level of a job's ``completed`` line. DEBUG, so not written at the default INFO:
#: at thousands of jobs a second one line per job cost 25–40 % of a worker's throughput
#: (docs/queue.md#logging), and every completion is counted anyway (``queue_jobs_total``,
#: the throughput history). What an operator must act on (a failure, a retry, a stale
#: run, a dropped duplicate) stays at INFO or above.
COMPLETED_LEVEL = logging.DEBUG


def report(queue: str, job_id: str, result: str, actor: str = "", reason: str = "") -> None:
    """Log one finished run with ids only: ``failed`` and ``retry`` at WARNING (with
    ``reason``, the first line of the run's error message, cut to 200 characters),
    ``stale`` and ``deferred`` at INFO, ``completed`` at :data:`COMPLETED_LEVEL` (DEBUG)."""
    if result == "stale":
        log.info("run ignored: job no longer holds this token",
                 extra={"queue": queue, "job_id": job_id, "outcome": "stale"})
        return
    failure = result in ("failed", "retry")
    level = (logging.WARNING if failure
             else COMPLETED_LEVEL if result == "completed" else logging.INFO)
    if not log.isEnabledFor(level):
        return
    extra = {"queue": queue, "job_id": job_id, "outcome": result}
    if actor:
        extra["actor"] = actor
    if failure and reason:
        # the first line only: a database error's DETAIL, on the next, quotes the row
        # (docs/deployment.md#logging); the job record keeps the whole message
        extra["reason"] = reason.partition("\n")[0][:200]
    log.log(level, "job %s", result, extra=extra)


def completions_logged() -> bool:
    """True when :func:`report` would write a ``completed`` line (``LOG_LEVEL=DEBUG``);
    the consumer skips gathering them when not."""
    return log.isEnabledFor(COMPLETED_LEVEL)


def run_exhausted_hook(app: Declarations, actor: str, data: str | Any, reason: str) -> None:
    """Tell ``app``'s actor that one of its jobs failed for good without running (too
    many starts), so it can record that durably; a failing hook is logged, never raised."""
    try:
        payload = json.loads(data) if isinstance(data, str) else data
        with contextlib.suppress(KeyError):  # not an actor of the App's registries
            app.actor(actor).run_exhausted(payload, reason)
    except Exception:
        log.exception("exhausted hook failed", extra={"actor": actor})


class ExternalLedgerBroker(Protocol):
    """What the middleware needs of a broker whose messages live outside the ledger
    (RabbitMQ): the ledger, and a way to send a message again later."""

    ledger: Ledger

    def publish_copy(self, message: Any, *, delay_ms: int, token: str | None = None) -> None:
        """Publish ``message`` again after ``delay_ms``, under ``token`` when given."""


class LedgerMiddleware(Middleware):
    """Records each run's outcome; on an external broker (RabbitMQ) also fences runs."""

    def __init__(self) -> None:
        self._durations = Durations()
        self._started: dict[str, float] = {}
        self._running: dict[tuple[str, str], tuple[str, str]] = {}
        self._running_lock = threading.Lock()
        # one lock heartbeat per started worker (a process may run several, one per
        # group of queues: docs/queue.md#lifecycle), each stopped with its own worker
        self._heartbeats: dict[int, threading.Event] = {}

    # -- both brokers ---------------------------------------------------------------------
    def before_process_message(self, broker: dramatiq.Broker, message: MessageProxy) -> None:
        if getattr(broker, "external_ledger", False):  # the flag says it is one
            self._claim(cast(ExternalLedgerBroker, broker), message)
        self._started[message.message_id] = time.perf_counter()

    def after_process_message(self, broker: dramatiq.Broker, message: MessageProxy, *,
                              result: Any = None, exception: BaseException | None = None,
                              ) -> None:
        started = self._started.pop(message.message_id, None)
        if started is not None:
            self._durations.observe(message.queue_name, time.perf_counter() - started)
        result = message.options.pop("herald_result", result)
        external = getattr(broker, "external_ledger", False)
        if exception is None and result is None and not external:
            # the common case: the Redis consumer's ack reports a plain completion itself
            return
        finish = finish_for(message, result=result, exception=exception)
        message.options["herald_finish"] = finish
        if external:
            self._settle(cast(ExternalLedgerBroker, broker), message, finish)

    # -- RabbitMQ -------------------------------------------------------------------------
    def _claim(self, broker: ExternalLedgerBroker, message: MessageProxy) -> None:
        spec = declarations_of(broker).spec(message.queue_name)
        job_id = message.options.get("job_id")
        if not job_id:
            raise SkipMessage("message without a job id")
        verdict, detail = broker.ledger.start(spec, job_id, message.message_id)
        if verdict == "drop":
            log.info("duplicate message dropped",
                     extra={"queue": spec.name, "job_id": job_id, "outcome": "dropped"})
            raise SkipMessage("not the job's current attempt")
        if verdict == "later":
            broker.publish_copy(message, delay_ms=max(int(detail), 10))
            raise SkipMessage("not now")
        if verdict == "failed":
            reason, token = detail
            finish = RunEnd(job_id=job_id, token=token, outcome=RunEnd.EXCEEDED, value=reason)
            self._settle(broker, message, finish)
            run_exhausted_hook(declarations_of(broker), message.actor_name, message.args[0], reason)
            raise SkipMessage(reason)
        made, started, token = detail
        message.options.update(attempts_made=made, attempts_started=started,
                               herald_token=token)
        with self._running_lock:
            self._running[(spec.name, job_id)] = (token, spec.name)

    def _settle(self, broker: ExternalLedgerBroker, message: MessageProxy,
                finish: RunEnd) -> None:
        spec = declarations_of(broker).spec(message.queue_name)
        key = (spec.name, finish.job_id)
        with self._running_lock:
            # a run that outlived its lock must not stop the heartbeat of the run after it
            if self._running.get(key, (finish.token,))[0] == finish.token:
                self._running.pop(key, None)
        result = broker.ledger.cycle(spec, finishes=[finish], external=True)
        for finished in result.finished:
            report(spec.name, finished.job_id, finished.result, message.actor_name,
                   finish.value)
            if finished.result in ("retry", "deferred"):
                delay_ms = max(finished.run_at_ms - broker.ledger.now_ms(), 0)
                broker.publish_copy(message, delay_ms=delay_ms, token=finish.next_token)

    def after_worker_boot(self, broker: dramatiq.Broker, worker: dramatiq.Worker) -> None:
        if getattr(broker, "external_ledger", False):
            stop = self._heartbeats[id(worker)] = threading.Event()
            consumed = set(worker.consumer_whitelist or ())
            every = declarations_of(broker).specs()
            specs = [spec for spec in every if not consumed or spec.name in consumed]
            interval = extend_interval(specs or every)
            threading.Thread(target=self._extend_locks, args=(broker, interval, stop, consumed),
                             name="herald-lock-heartbeat", daemon=True).start()

    def before_worker_shutdown(self, broker: dramatiq.Broker, worker: dramatiq.Worker) -> None:
        stop = self._heartbeats.pop(id(worker), None)
        if stop is not None:
            stop.set()

    def _extend_locks(self, broker: ExternalLedgerBroker, interval: float,
                      stop: threading.Event, consumed: set[str]) -> None:
        """Extend the lock of every run of this process on the ``consumed`` queues (all
        when empty) each ``interval`` seconds (see :func:`extend_interval`), until
        ``stop`` is set (its worker shuts down)."""
        while not stop.wait(interval):
            with self._running_lock:
                running = {key: value for key, value in self._running.items()
                           if not consumed or key[0] in consumed}
            by_queue: dict[str, list[tuple[str, str]]] = {}
            for (queue, job_id), (token, _) in running.items():
                by_queue.setdefault(queue, []).append((job_id, token))
            for queue, entries in by_queue.items():
                try:
                    broker.ledger.cycle(declarations_of(broker).spec(queue), extend=entries,
                                        external=True)
                except Exception:  # the next beat tries again; a stall is the fallback
                    log.warning("lock extension failed", extra={"queue": queue})

def default_middleware() -> list[dramatiq.Middleware]:
    """The middleware herald's brokers run: ledger outcomes, current message, time limits."""
    return [CurrentMessage(), QueueTimeLimit(time_limit=NO_TIME_LIMIT_MS), LedgerMiddleware()]
