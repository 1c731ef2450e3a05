"""The queue layer's public API: declare actors, enqueue jobs, operate queues.

::

    @actor(queue="thumbnails", payload=ThumbnailJob)
    def make_thumbnail(job: ThumbnailJob) -> dict | None: ...

    enqueue(make_thumbnail, {"image_id": 7}, job_id="img-7", priority=1)
    queue("thumbnails").counts()

Payloads are validated by the actor's pydantic model on the producer's side: a shape
mistake raises :class:`~herald.errors.InvalidPayload` and nothing reaches Redis or the
broker. On the worker side a payload that fails the model fails the job permanently.
"""

from __future__ import annotations

import dataclasses
import itertools
import json
import logging
import operator
import os
import threading
from collections.abc import Callable, Iterable, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any, Generic, TypeVar

import dramatiq
from dramatiq.middleware import CurrentMessage
from pydantic import BaseModel, ValidationError

from herald import metrics
from herald.connections import redis_client
from herald.errors import InvalidMessage, InvalidPayload
from herald.ledger import (
    ADD_CHUNK,
    AddResult,
    AddStatus,
    Job,
    JobState,
    Ledger,
    NewJob,
    Reissued,
    new_token,
    now_ms,
)
from herald.registry import NORMAL_PRIORITY, PRIORITY_RANGE, QueueSpec, get_spec
from herald.settings import get_settings

M = TypeVar("M", bound=BaseModel)

log = logging.getLogger("herald.jobs")

_lock = threading.RLock()
_actors: dict[str, JobActor[Any]] = {}
_broker: dramatiq.Broker | None = None
_ledger: Ledger | None = None


# -- actors ---------------------------------------------------------------------------------
@dataclasses.dataclass(frozen=True, kw_only=True)
class ActorOptions:
    """Per-actor overrides of the queue's values (retry and retention)."""

    attempts: int | None = None
    backoff_base: timedelta | None = None
    max_started_attempts: int | None = None
    remove_on_complete: bool = False
    remove_on_fail: bool = False


class JobActor(Generic[M]):
    """A function that runs one job of a queue, with the pydantic model of its payload."""

    def __init__(self, fn: Callable[[M], Any], *, queue: str, payload: type[M],
                 name: str, options: ActorOptions,
                 on_exhausted: Callable[[M, str], None] | None = None) -> None:
        self.fn = fn
        self.on_exhausted = on_exhausted
        self.queue = queue
        self.model = payload
        self.name = name
        self.options = options
        self.__doc__ = fn.__doc__

    def __call__(self, job: M) -> Any:
        """Run the function directly (no queue), e.g. in a unit test."""
        return self.fn(job)

    def validate(self, payload: dict[str, Any] | BaseModel) -> str:
        """The payload as JSON text; :class:`InvalidPayload` when it fails the model."""
        try:
            model = (payload if isinstance(payload, self.model)
                     else self.model.model_validate(payload))
        except ValidationError as error:
            problems = "; ".join(f"{'.'.join(str(p) for p in e['loc']) or 'payload'}: {e['msg']}"
                                 for e in error.errors())
            raise InvalidPayload(f"{self.name}: invalid payload: {problems}") from None
        return model.model_dump_json()

    def run_message(self, payload: Any) -> None:
        """What the worker runs: validate the consumed payload, then call the function.

        The return value goes on the message for the ledger (not back to Dramatiq, which
        would warn that no results backend stores it).
        """
        try:
            job = self.model.model_validate(payload)
        except ValidationError as error:
            raise InvalidMessage(f"{self.name}: payload failed validation: "
                                 f"{error.error_count()} problem(s): "
                                 f"{error.errors()[0]['msg']}") from None
        result = self.fn(job)
        message = CurrentMessage.get_current_message()
        if message is not None and result is not None:
            message.options["herald_result"] = result

    def bind(self, broker: dramatiq.Broker) -> dramatiq.Actor[Any, Any]:
        """Declare this actor on a Dramatiq broker."""
        spec = get_spec(self.queue)
        time_limit = {} if spec.time_limit is None else {
            "time_limit": int(spec.time_limit.total_seconds() * 1000)}
        return dramatiq.Actor(self.run_message, broker=broker, actor_name=self.name,
                              queue_name=self.queue, priority=0, options=time_limit)


def actor(*, queue: str, payload: type[M], name: str | None = None,
          attempts: int | None = None, backoff_base: timedelta | None = None,
          max_started_attempts: int | None = None, remove_on_complete: bool = False,
          remove_on_fail: bool = False, on_exhausted: Callable[[M, str], None] | None = None,
          ) -> Callable[[Callable[[M], Any]], JobActor[M]]:
    """Declare a job function on ``queue`` whose payload is validated by ``payload``.

    The queue must be in the registry (:func:`herald.registry.declare`); the keyword
    overrides replace the queue's values for this actor's jobs only. ``on_exhausted(job,
    reason)`` runs when a job fails for good without running, because it was started more
    than ``max_started_attempts`` times (stalls, deferrals).
    """
    get_spec(queue)  # fail now on an undeclared queue

    def decorate(fn: Callable[[M], Any]) -> JobActor[M]:
        job_actor = JobActor(fn, queue=queue, payload=payload, name=name or fn.__name__,
                             options=ActorOptions(attempts=attempts, backoff_base=backoff_base,
                                                  max_started_attempts=max_started_attempts,
                                                  remove_on_complete=remove_on_complete,
                                                  remove_on_fail=remove_on_fail),
                             on_exhausted=on_exhausted)
        with _lock:
            _actors[job_actor.name] = job_actor
            if _broker is not None:
                job_actor.bind(_broker)
        return job_actor

    return decorate


def exhausted_hook(actor_name: str, payload: Any, reason: str) -> None:
    """Run the named actor's ``on_exhausted`` hook, if it has one."""
    with _lock:
        job_actor = _actors.get(actor_name)
    if job_actor is not None and job_actor.on_exhausted is not None:
        job_actor.on_exhausted(job_actor.model.model_validate(payload), reason)


def declared_actors() -> list[JobActor[Any]]:
    """Every actor declared so far in this process."""
    with _lock:
        return list(_actors.values())


def job_options(options: ActorOptions, spec: QueueSpec) -> dict[str, Any]:
    """The retry and retention values a new job carries: the actor's overrides, else the
    queue's."""
    base = options.backoff_base or spec.backoff_base
    return {"attempts": options.attempts or spec.attempts, "backoff": spec.backoff,
            "backoff_base_ms": int(base.total_seconds() * 1000),
            "max_started_attempts": options.max_started_attempts or spec.max_started_attempts,
            "remove_on_complete": options.remove_on_complete or spec.retention.completed.remove,
            "remove_on_fail": options.remove_on_fail or spec.retention.failed.remove}


def declared_actor(name: str) -> JobActor[Any]:
    """The actor declared under ``name`` (KeyError when none is)."""
    with _lock:
        return _actors[name]


# -- brokers -----------------------------------------------------------------------------
def get_ledger() -> Ledger:
    """The process-wide ledger on the shared Redis client."""
    global _ledger
    with _lock:
        if _ledger is None:
            _ledger = Ledger(redis_client(), get_settings().queue_prefix)
            metrics.register_collectors()  # /metrics reads the ledger of this process
        return _ledger


def get_broker() -> dramatiq.Broker:
    """The process-wide broker chosen by ``BROKER``, with every declared actor bound."""
    global _broker
    with _lock:
        if _broker is None:
            settings = get_settings()
            if settings.broker == "rabbitmq":
                from herald.rabbit import HeraldRabbitmqBroker

                broker: dramatiq.Broker = HeraldRabbitmqBroker(url=settings.rabbitmq_url,
                                                               ledger=get_ledger())
            else:
                from herald.broker import LedgerBroker

                broker = LedgerBroker(get_ledger())
            use_broker(broker)
        assert _broker is not None
        return _broker


def use_broker(broker: dramatiq.Broker) -> None:
    """Make ``broker`` the process-wide broker and bind every declared actor to it."""
    global _broker, _ledger
    with _lock:
        _broker = broker
        _ledger = getattr(broker, "ledger", _ledger)
        dramatiq.set_broker(broker)
        for job_actor in _actors.values():
            job_actor.bind(broker)


def reset_brokers() -> None:
    """Forget the process-wide broker and ledger (after a settings change; tests)."""
    global _broker, _ledger
    with _lock:
        _broker = None
        _ledger = None


# -- producing ---------------------------------------------------------------------------
@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class EnqueueResult:
    """What an enqueue did: ``status`` is added|duplicated|deduplicated|retried."""

    status: str
    job_id: str


def _run_at(delay: timedelta | None, at: datetime | None) -> int:
    if delay is not None and at is not None:
        raise ValueError("give delay or at, not both")
    if delay is not None:
        return now_ms() + int(delay.total_seconds() * 1000) if delay > timedelta(0) else 0
    if at is not None:
        if at.tzinfo is None:
            at = at.replace(tzinfo=UTC)
        return int(at.timestamp() * 1000)
    return 0


def _new_job(target: JobActor[Any], payload: dict[str, Any] | BaseModel, *,
             job_id: str | None = None, priority: int = NORMAL_PRIORITY,
             delay: timedelta | None = None, at: datetime | None = None,
             dedup_id: str | None = None, retry_failed: bool = False,
             token: str = "", options: dict[str, Any] | None = None) -> NewJob:
    if priority not in PRIORITY_RANGE:
        raise InvalidPayload(f"priority must be {PRIORITY_RANGE.start}..{PRIORITY_RANGE.stop - 1}")
    if job_id is not None and (not job_id or len(job_id) > 512):
        raise InvalidPayload("job_id must be 1..512 characters")
    data = target.validate(payload)
    return NewJob(id=job_id or os.urandom(16).hex(), actor=target.name, data=data,
                  priority=priority, run_at_ms=_run_at(delay, at), dedup_id=dedup_id,
                  retry_failed=retry_failed, token=token,
                  **(options or job_options(target.options, get_spec(target.queue))))


def _check_target(target: object) -> None:
    if not isinstance(target, JobActor):
        raise TypeError(f"enqueue takes an @actor function, not {type(target).__name__}")


def _submit(groups: Sequence[tuple[JobActor[Any], Sequence[NewJob]]]) -> list[list[AddResult]]:
    """Add groups of validated jobs (one actor each) in one round trip; on RabbitMQ, then
    publish the messages of those added or retried, and of those duplicated that were
    waiting or delayed (their message may never have gone out: a publish that failed
    after the add)."""
    broker = get_broker()
    results = get_ledger().add_groups([(target.queue, jobs) for target, jobs in groups])
    external = getattr(broker, "external_ledger", False)
    now = now_ms()
    for (target, jobs), group_results in zip(groups, results, strict=True):
        for job, result in zip(jobs, group_results, strict=True):
            # a reissued duplicate goes out as the ledger holds it: its own payload and
            # what is left of its delay
            sent: NewJob | Reissued | None = (
                job if external and result.status in (AddStatus.ADDED, AddStatus.RETRIED)
                else result.reissued)
            if sent is not None:
                _publish(broker, target.queue, sent.actor, json.loads(sent.data),
                         job_id=job.id, token=job.token, priority=sent.priority,
                         delay_ms=max(sent.run_at_ms - now, 0))
            elif result.status is AddStatus.DEDUPLICATED:
                log.warning(
                    "add deduplicated", extra={"queue": target.queue, "job_id": result.job_id,
                                               "dedup_id": job.dedup_id})
    return results


def _publish(broker: dramatiq.Broker, queue_name: str, actor_name: str, payload: Any, *,
             job_id: str, token: str, priority: int, delay_ms: int = 0) -> None:
    """Publish the message that carries one job under ``token`` (external brokers)."""
    from herald.broker import message_for

    message = message_for(queue_name, actor_name, payload, job_id=job_id, token=token,
                          priority=priority)
    broker.publish(message, priority=priority,  # type: ignore[attr-defined]
                   delay_ms=delay_ms)


def _external() -> bool:
    return get_settings().broker == "rabbitmq"


def enqueue(target: JobActor[Any], payload: dict[str, Any] | BaseModel, *,
            job_id: str | None = None, priority: int = NORMAL_PRIORITY,
            delay: timedelta | None = None, at: datetime | None = None,
            dedup_id: str | None = None, retry_failed: bool = False) -> EnqueueResult:
    """Validate ``payload`` and add one job; nothing is written when validation fails.

    A job id that exists and is live or completed reports ``duplicated``; a held
    ``dedup_id`` reports ``deduplicated`` (with the holder's id); ``retry_failed`` retries
    a retained failed job in place (``retried``). On RabbitMQ a ``duplicated`` job that is
    waiting or delayed gets a fresh message (its own payload, the rest of its delay): its
    first may never have gone out, if publishing failed after the add. An older message
    that did go out is dropped on arrival, so the job still runs once.
    """
    _check_target(target)
    token = new_token() if _external() else ""
    job = _new_job(target, payload, job_id=job_id, priority=priority, delay=delay, at=at,
                   dedup_id=dedup_id, retry_failed=retry_failed, token=token)
    result = _submit([(target, [job])])[0][0]
    return EnqueueResult(status=result.status.value, job_id=result.job_id)


def enqueue_many(target: JobActor[Any],
                 items: Iterable[dict[str, Any] | BaseModel | tuple[Any, dict[str, Any]]],
                 *, chunk_size: int = ADD_CHUNK) -> list[EnqueueResult]:
    """Add many jobs of one actor, one round trip per chunk.

    Each item is a payload or ``(payload, options)`` with the options of :func:`enqueue`.
    Every payload is validated before the first chunk is written.
    """
    return enqueue_groups([(target, items)], chunk_size=chunk_size)[0]


def enqueue_groups(groups: Sequence[tuple[JobActor[Any], Iterable[Any]]], *,
                   chunk_size: int = ADD_CHUNK) -> list[list[EnqueueResult]]:
    """Add the jobs of several actors (queues) together: one round trip for up to
    ``chunk_size`` jobs, however many queues they go to; results per group, in order.

    Each group is ``(actor, items)`` with items as :func:`enqueue_many` takes them. Every
    payload is validated before anything is written.
    """
    external = _external()
    validated: list[tuple[JobActor[Any], list[NewJob]]] = []
    for target, items in groups:
        _check_target(target)
        shared = job_options(target.options, get_spec(target.queue))
        jobs = []
        for item in items:
            payload, options = item if isinstance(item, tuple) else (item, {})
            jobs.append(_new_job(target, payload, token=new_token() if external else "",
                                 options=shared, **options))
        validated.append((target, jobs))
    results: list[list[EnqueueResult]] = [[] for _ in validated]
    # chunks of the jobs in order, whatever their group; each chunk is one round trip
    flat = [(index, job) for index, (_, jobs) in enumerate(validated) for job in jobs]
    for start in range(0, len(flat), chunk_size):
        runs = [(index, [job for _, job in run]) for index, run in
                itertools.groupby(flat[start:start + chunk_size], key=operator.itemgetter(0))]
        added = _submit([(validated[index][0], jobs) for index, jobs in runs])
        for (index, _), group in zip(runs, added, strict=True):
            results[index] += [EnqueueResult(status=r.status.value, job_id=r.job_id)
                               for r in group]
    return results


# -- operating ---------------------------------------------------------------------------
class Queue:
    """Operations on one registry queue (counts, listing, retry, pause, clean, …)."""

    def __init__(self, spec: QueueSpec, ledger: Ledger) -> None:
        self.spec = spec
        self.name = spec.name
        self.ledger = ledger

    def counts(self) -> dict[str, int]:
        """Jobs per state: waiting, active, delayed, completed, failed, paused."""
        return self.ledger.counts(self.name)

    def get(self, job_id: str) -> Job | None:
        """One job, or None when absent."""
        return self.ledger.get(self.name, job_id)

    def jobs(self, state: str | JobState, page: int = 1, per_page: int = 50) -> list[Job]:
        """Jobs in ``state``, newest first, one page (pages count from 1)."""
        return self.ledger.jobs(self.name, JobState(state), page=page, per_page=per_page)

    def retry(self, job_id: str) -> bool:
        """Run a failed job again (counters reset); False for any other state.

        On RabbitMQ, should publishing its message fail after the retry, the job waits
        with none: enqueueing its id again publishes one (see :func:`enqueue`).
        """
        if _external():
            job = self.get(job_id)
            if job is None or job.state is not JobState.FAILED:
                return False
            token = new_token()
            if not self.ledger.retry(self.name, job_id, token):
                return False
            from herald.broker import message_for

            broker = get_broker()
            broker.publish(message_for(self.name, job.actor, job.payload,  # type: ignore[attr-defined]
                                       job_id=job_id, token=token, priority=job.priority),
                           priority=job.priority)
            return True
        return self.ledger.retry(self.name, job_id)

    def retry_all_failed(self) -> int:
        """Retry every job that was failed when the call began, once each: one that fails
        again while the call runs is left failed. Returns how many were retried."""
        # a snapshot, not pages of the live set: retried jobs that fail again at once
        # would land on the pages still to come (the set is bounded by the retention)
        ids = self.ledger.job_ids(self.name, JobState.FAILED, 0, -1)
        return sum(self.retry(job_id) for job_id in ids)

    def remove(self, job_id: str) -> bool:
        """Remove a job that is not active (releases its dedup key). True if removed."""
        return self.ledger.remove(self.name, [job_id]) == 1

    def pause(self) -> None:
        """Workers stop taking this queue's jobs (other queues continue)."""
        self.ledger.set_paused(self.name, True)

    def resume(self) -> None:
        """Workers take this queue's jobs again, in priority order.

        On RabbitMQ the messages of jobs held while paused went back to the broker in no
        useful order, so every waiting job gets a fresh message (its old one is dropped on
        arrival), published in priority order after the queue is resumed. Should that
        publishing fail part-way, call resume again: each call re-issues every waiting
        job's message.
        """
        if not _external():
            self.ledger.set_paused(self.name, False)
            return
        rows = self.ledger.reissue_waiting(self.name, new_token())
        self.ledger.set_paused(self.name, False)
        broker = get_broker()
        for job_id, actor_name, data, priority, token in rows:
            _publish(broker, self.name, actor_name, json.loads(data), job_id=job_id,
                     token=token, priority=priority)

    def is_paused(self) -> bool:
        """True while paused."""
        return self.ledger.is_paused(self.name)

    def drain(self) -> int:
        """Remove every waiting and delayed job; returns how many."""
        return self.ledger.drain(self.name)

    def clean(self, state: str | JobState, older_than: timedelta = timedelta(0)) -> int:
        """Remove completed/failed/delayed records older than ``older_than``."""
        return self.ledger.clean(self.name, JobState(state), older_than)

    def prune(self) -> int:
        """Apply the registry's retention now; returns records removed."""
        return self.ledger.prune(self.spec)

    def obliterate(self) -> int:
        """Delete everything the queue holds in Redis."""
        return self.ledger.obliterate(self.name)


def queue(name: str) -> Queue:
    """Operations on a registry queue; an unknown name raises KeyError (UnknownQueue)."""
    return Queue(get_spec(name), get_ledger())
