"""The Redis ledger broker: a Dramatiq broker whose storage is the job ledger itself.

Each consumer round trip is one Lua script (:meth:`Ledger.cycle`) that finishes the runs
that ended since the last trip, extends the locks of long runs, promotes due delayed jobs,
restarts stalled ones and starts up to the queue's free slots — so fetching and
acknowledging ride on the same round trip, and a worker never holds more jobs than its
queue's concurrency. While a queue is empty the consumer blocks on the queue's marker list
until a producer wakes it, the next delayed job falls due, or the rate-limit window ends.
"""

from __future__ import annotations

import collections
import json
import logging
import threading
import time
from collections.abc import Iterable
from typing import Any

import dramatiq
import redis
from dramatiq.broker import Consumer, MessageProxy
from dramatiq.errors import ConnectionClosed, QueueJoinTimeout

from herald.queue.dramatiq_internals import HookDispatch
from herald.queue.ledger import Ledger, NewJob, RunEnd, new_token
from herald.queue.ledger_admin import LedgerAdmin
from herald.queue.ledger_queries import LedgerQueries
from herald.queue.middleware import (
    completions_logged,
    default_middleware,
    extend_interval,
    report,
    run_exhausted_hook,
)
from herald.queue.redis import dedicated_connection
from herald.queue.registry import QueueSpec, declarations_of, job_options

log = logging.getLogger(__name__)

#: Longest single block on an empty queue (ms); the consumer thread checks for shutdown
#: between blocks.
BLOCK_MS = 1000
#: Shortest block on the marker (s): Redis 6.2 reads a BLPOP timeout below about a
#: millisecond as 0, which means "wait forever".
MIN_BLOCK_S = 0.01
#: Runs whose end is buffered are flushed at least this often while slots are full (s).
FLUSH_WAIT_S = 0.25


class LedgerMessage(MessageProxy):
    """A consumed job. The message's fields are plain attributes: MessageProxy looks each
    one up through ``__getattr__``, and a run reads them about fifteen times."""

    def __init__(self, message: dramatiq.Message[Any]) -> None:
        super().__init__(message)
        self.queue_name = message.queue_name
        self.actor_name = message.actor_name
        self.args = message.args
        self.kwargs = message.kwargs
        self.options = message.options
        self.message_id = message.message_id
        self.message_timestamp = message.message_timestamp


class QueueSlots:
    """One queue's consumer bookkeeping in this process, shared by successive consumers."""

    def __init__(self, spec: QueueSpec) -> None:
        self.use(spec)
        self.lock = threading.Lock()
        #: notified (when the consumer thread waits on it) as a run ends
        self.slot_freed = threading.Condition(self.lock)
        self.waiting = False
        #: job id -> token of every job fetched and not yet reported finished
        self.inflight: dict[str, str] = {}
        #: (job id, token, actor) of runs that completed with no return value
        self.done: list[tuple[str, str, str]] = []
        #: every other end of a run
        self.pending: list[RunEnd] = []
        self.blocking = False
        self.last_extend = time.monotonic()

    def use(self, spec: QueueSpec) -> None:
        """Run the queue's next consumers with ``spec`` (the registry's at their start:
        a queue redeclared after the broker was made runs with its new values)."""
        self.spec = spec
        #: the cycle script's fixed arguments for this queue
        self.config = Ledger.cycle_config(spec)

    def take_pending(self) -> tuple[list[tuple[str, str, str]], list[RunEnd]]:
        """Take every buffered end of a run (plain completions, others)."""
        with self.lock:
            done, pending = self.done, self.pending
            self.done, self.pending = [], []
        return done, pending

    def put_back(self, done: list[tuple[str, str, str]], finishes: list[RunEnd]) -> None:
        """Return ends that could not be written, ahead of any buffered since."""
        with self.lock:
            self.done = done + self.done
            self.pending = finishes + self.pending


class LedgerBroker(HookDispatch, dramatiq.Broker):
    """Dramatiq broker on the Redis job ledger."""

    external_ledger = False

    def __init__(self, ledger: Ledger, middleware: list[dramatiq.Middleware] | None = None,
                 ) -> None:
        super().__init__(middleware=default_middleware() if middleware is None else middleware)
        self.ledger = ledger
        #: flush drains a queue, join waits on its counts
        self.admin = LedgerAdmin(ledger)
        self.queries = LedgerQueries(ledger)
        self.queues: dict[str, QueueSlots] = {}

    # -- queues ---------------------------------------------------------------------------
    def slots(self, queue_name: str) -> QueueSlots:
        """The bookkeeping of one queue (declares the queue on first use)."""
        if queue_name not in self.queues:
            self.declare_queue(queue_name)
        return self.queues[queue_name]

    def declare_queue(self, queue_name: str) -> None:
        if queue_name not in self.queues:
            self.emit_before("declare_queue", queue_name)
            self.queues[queue_name] = QueueSlots(declarations_of(self).spec(queue_name))
            self.emit_after("declare_queue", queue_name)

    def consume(self, queue_name: str, prefetch: int = 1, timeout: int = BLOCK_MS) -> Consumer:
        slots = self.slots(queue_name)
        spec = declarations_of(self).spec(queue_name)
        if spec is not slots.spec:
            slots.use(spec)
        return LedgerConsumer(self, slots, timeout)

    def enqueue(self, message: dramatiq.Message[Any], *, delay: int | None = None,
                ) -> dramatiq.Message[Any]:
        """Plain ``actor.send`` support: the message becomes a ledger job."""
        self.emit_before("enqueue", message, delay)
        payload = message.args[0] if message.args else dict(message.kwargs)
        job = NewJob(id=message.options.get("job_id") or message.message_id,
                     actor=message.actor_name, data=json.dumps(payload),
                     priority=message.options.get("priority", 5),
                     run_at_ms=self.ledger.now_ms() + delay if delay else 0,
                     **job_options(declarations_of(self).actor(message.actor_name).options,
                                     declarations_of(self).spec(message.queue_name)))
        self.ledger.add(message.queue_name, [job])
        self.emit_after("enqueue", message, delay)
        return message

    def flush(self, queue_name: str) -> None:
        self.admin.drain(queue_name)

    def flush_all(self) -> None:
        for queue_name in self.queues:
            self.flush(queue_name)

    def join(self, queue_name: str, *, timeout: int | None = None) -> None:
        """Wait until the queue has no waiting, delayed or active job (tests)."""
        deadline = None if timeout is None else time.monotonic() + timeout / 1000
        while True:
            counts = self.queries.counts(queue_name)
            if counts["waiting"] + counts["delayed"] + counts["active"] + counts["paused"] == 0:
                return
            if deadline is not None and time.monotonic() > deadline:
                raise QueueJoinTimeout(queue_name)
            time.sleep(0.05)


def _str(value: Any) -> str:
    # replies of the consumer thread's connection are decoded; other threads' are bytes
    return value.decode() if isinstance(value, bytes) else str(value)


class LedgerConsumer(Consumer):
    """Iterates a queue's jobs; finishing and fetching share one round trip."""

    def __init__(self, broker: LedgerBroker, slots: QueueSlots, timeout_ms: int) -> None:
        self.broker = broker
        self.ledger = broker.ledger
        self.slots = slots
        self.timeout_s = max(timeout_ms, 10) / 1000
        self.buffer: collections.deque[MessageProxy] = collections.deque()
        self.extend_every_s = extend_interval([slots.spec])
        # the consumer thread's own connection: its round trips skip the pool's layers
        self.connection: Any = None
        #: set when a fetch drained the wait set: once its jobs are handed out, block on
        #: the marker (next delayed time, rate-limit wait) instead of fetching again for
        #: nothing — a job added meanwhile left a marker, so the block returns at once
        self.drained: tuple[int | None, int] | None = None

    # -- acknowledging (called from worker threads) ---------------------------------------
    def ack(self, message: MessageProxy) -> None:
        finish = message.options.get("herald_finish")
        # none: it completed with no return value (LedgerMiddleware left it so)
        self._report(finish if finish is not None else
                     (message.options["job_id"], message.message_id, message.actor_name))

    def nack(self, message: MessageProxy) -> None:
        finish = message.options.get("herald_finish")
        if finish is None:  # failed before it ran, e.g. an actor this process lacks
            error = message._exception
            finish = RunEnd(job_id=message.options["job_id"], token=message.message_id,
                            outcome=RunEnd.PERMANENT,
                            value=str(error) if error else "rejected before it ran",
                            actor=message.actor_name)
        self._report(finish)

    def _report(self, end: RunEnd | tuple[str, str, str]) -> None:
        """Buffer a run's end for the consumer's next round trip and free its slot: a
        plain completion as (job id, token, actor), any other as its RunEnd."""
        slots = self.slots
        with slots.lock:
            if isinstance(end, RunEnd):
                slots.pending.append(end)
            else:
                slots.done.append(end)
            flush_here = slots.blocking
            if slots.waiting:
                slots.slot_freed.notify()
        if flush_here:
            # the consumer thread is blocked on an empty queue: write the outcome now
            self._round_trip(fetch=0)

    def requeue(self, messages: Iterable[MessageProxy]) -> None:
        """Hand fetched-but-unstarted jobs back to the queue (worker shutdown)."""
        finishes = [RunEnd(job_id=m.options["job_id"], token=m.message_id,
                           outcome=RunEnd.RELEASED) for m in messages]
        if finishes:
            with self.slots.lock:
                self.slots.pending.extend(finishes)
            self._round_trip(fetch=0)

    def close(self) -> None:
        try:
            self.requeue(list(self.buffer))
            self.buffer.clear()
            self._round_trip(fetch=0)
        except ConnectionClosed:
            log.warning("could not write outcomes at close", extra={"queue": self.slots.spec.name})
        finally:
            self._drop_connection()

    def _own_connection(self) -> Any:
        if self.connection is None:
            self.connection = dedicated_connection(self.ledger.client, decode=True)
        return self.connection

    def _drop_connection(self) -> None:
        """Close the consumer thread's connection (after an error, or at close): a later
        trip opens a fresh one."""
        if self.connection is not None:
            self.connection.disconnect()
            self.connection = None

    # -- fetching (the consumer thread) -------------------------------------------------
    def __next__(self) -> MessageProxy | None:
        slots = self.slots
        while True:
            if self.buffer:
                return self.buffer.popleft()
            with slots.lock:
                # a buffered end frees its slot in the same script that fetches (it
                # finishes before it starts), so it counts as free: one round trip both
                # reports the ends and refills the slots, never two
                inflight = slots.inflight
                ending = (sum(1 for d in slots.done if inflight.get(d[0]) == d[1])
                          + sum(1 for f in slots.pending if inflight.get(f.job_id) == f.token))
                free = slots.spec.concurrency - len(inflight) + ending
                has_pending = bool(slots.done or slots.pending)
                extend_due = (bool(inflight)
                              and time.monotonic() - slots.last_extend >= self.extend_every_s)
                quiet = not has_pending and not extend_due
                drained, self.drained = self.drained, None
                if free <= 0 and quiet:
                    # every slot busy: wait for a run to end, then write it and fetch in
                    # one trip
                    slots.waiting = True
                    try:
                        slots.slot_freed.wait(min(self.timeout_s, FLUSH_WAIT_S,
                                                 self.extend_every_s))
                    finally:
                        slots.waiting = False
                    return None
            if drained is not None and quiet:
                self._block(*drained)
                return None
            started, next_due, limited, drained_now = self._round_trip(
                fetch=max(free, 0), extend=extend_due, consumer=True)
            due = int(float(next_due)) if next_due else None
            if started:
                self._buffer(started)
                if drained_now:
                    self.drained = (due, int(limited))
                continue
            if free <= 0:
                return None
            self._block(due, int(limited))
            return None

    def _round_trip(self, *, fetch: int, extend: bool = False, consumer: bool = False) -> Any:
        """One cycle: write the buffered ends, extend locks, fetch up to ``fetch`` jobs,
        over the consumer thread's connection when ``consumer``, else over the calling
        thread's own (:meth:`Ledger.cycle_raw`). Returns the started rows, the next
        delayed job's time, the rate-limit wait and whether the fetch drained the wait set."""
        slots = self.slots
        done, finishes = slots.take_pending()
        extend_entries: list[tuple[str, str]] = []
        if extend:
            with slots.lock:
                extend_entries = list(slots.inflight.items())
            slots.last_extend = time.monotonic()
        try:
            raw = self.ledger.cycle_raw(slots.spec, slots.config, done=done, finishes=finishes,
                                        extend=extend_entries, fetch=fetch,
                                        connection=self._own_connection() if consumer else None)
        except redis.RedisError as error:
            slots.put_back(done, finishes)
            if consumer:
                self._drop_connection()
            raise ConnectionClosed(error) from error
        finished, started, next_due, limited, drained = raw
        with slots.lock:
            inflight = slots.inflight
            for job_id, token, _ in done:
                if inflight.get(job_id) == token:
                    del inflight[job_id]
            for finish in finishes:
                if inflight.get(finish.job_id) == finish.token:
                    del inflight[finish.job_id]
            for row in started:
                inflight[row[0]] = row[3]
        if finished or (done and completions_logged()):
            self._report_finished(finished, done, finishes)
        return started, next_due, limited, drained

    def _report_finished(self, finished: list[Any], done: list[tuple[str, str, str]],
                         finishes: list[RunEnd]) -> None:
        """Log (and count) what the cycle made of the ends it wrote; run the exhausted
        hooks of jobs it failed for too many starts."""
        queue = self.slots.spec.name
        by_id = {f.job_id: f for f in finishes}
        done_actors = {job_id: actor for job_id, _, actor in done}
        stale: set[str] = set()
        for row in finished:
            job_id, result = _str(row[0]), _str(row[1])
            if result == "exhausted":
                actor = _str(row[3])
                report(queue, job_id, "failed", actor)
                run_exhausted_hook(declarations_of(self.broker), actor, _str(row[4]), _str(row[5]))
            elif result != "released":
                finish = by_id.get(job_id)
                if finish is None:  # a plain completion that arrived too late
                    stale.add(job_id)
                    report(queue, job_id, result, done_actors.get(job_id, ""))
                else:
                    report(queue, job_id, result, finish.actor, finish.value)
        if done and completions_logged():
            for job_id, _, actor in done:
                if job_id not in stale:
                    report(queue, job_id, "completed", actor)

    def _buffer(self, started: list[Any]) -> None:
        queue = self.slots.spec.name
        buffer = self.buffer
        for job_id, actor, data, token, made, starts, priority, created_at_ms in started:
            try:
                payload = json.loads(data)
            except ValueError as error:
                self._report(RunEnd(job_id=job_id, token=token, outcome=RunEnd.PERMANENT,
                                    value=f"undecodable payload: {error}", actor=actor))
                continue
            options = {"job_id": job_id, "attempts_made": made, "attempts_started": starts,
                       "priority": priority}
            buffer.append(LedgerMessage(dramatiq.Message(
                queue_name=queue, actor_name=actor, args=(payload,), kwargs={},
                options=options, message_id=token, message_timestamp=created_at_ms)))

    def _block(self, next_delayed_ms: int | None, rate_limited_ms: int) -> None:
        timeout_s = self.timeout_s
        if next_delayed_ms is not None:
            timeout_s = min(timeout_s, (next_delayed_ms - self.ledger.now_ms()) / 1000)
        if rate_limited_ms > 0:
            timeout_s = min(timeout_s, rate_limited_ms / 1000)
        slots = self.slots
        with slots.lock:
            slots.blocking = True
            pending = bool(slots.done or slots.pending)
            if slots.inflight:
                # wake up in time to extend the locks of the runs still going
                next_extend = slots.last_extend + self.extend_every_s - time.monotonic()
                timeout_s = min(timeout_s, next_extend)
        try:
            if not pending:
                # on the consumer's own connection, like its cycles: no pool checkout
                connection = self._own_connection()
                connection.send_command("BLPOP", self.ledger.marker_key(slots.spec.name),
                                        max(timeout_s, MIN_BLOCK_S))
                connection.read_response()
        except redis.RedisError as error:
            self._drop_connection()
            raise ConnectionClosed(error) from error
        finally:
            with slots.lock:
                slots.blocking = False


def message_for(queue: str, actor: str, payload: dict[str, Any], *, job_id: str,
                token: str | None = None, priority: int = 5) -> dramatiq.Message[Any]:
    """The Dramatiq message that carries one job (RabbitMQ and ``actor.send``)."""
    return dramatiq.Message(queue_name=queue, actor_name=actor, args=(payload,), kwargs={},
                            options={"job_id": job_id, "priority": priority},
                            message_id=token or new_token())
