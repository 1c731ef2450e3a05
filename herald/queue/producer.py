"""Producing jobs: :func:`enqueue`, :func:`enqueue_many`, :func:`enqueue_many_actors`.

Payloads are validated by the actor's pydantic model on the producer's side: a shape
mistake raises :class:`~herald.queue.errors.InvalidPayload` and nothing reaches Redis or
the broker. On RabbitMQ the ledger records the job and the broker carries its message.
"""

from __future__ import annotations

import dataclasses
import itertools
import json
import logging
import operator
import os
from collections.abc import Iterable, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any, Protocol, cast

import dramatiq
from pydantic import BaseModel

from herald.queue.app import App, shard_of
from herald.queue.broker import message_for
from herald.queue.errors import InvalidPayload
from herald.queue.job_actor import JobActor
from herald.queue.ledger import (
    ADD_CHUNK,
    AddResult,
    AddStatus,
    NewJob,
    Reissued,
    new_token,
)
from herald.queue.registry import NORMAL_PRIORITY, PRIORITY_RANGE, group_key_problem, job_options
from herald.queue.shards import Shard

log = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class EnqueueResult:
    """What an enqueue did: ``status`` is added|duplicated|deduplicated|retried|replayed."""

    status: str
    job_id: str


def _run_at(app: App, delay: timedelta | None, at: datetime | None) -> int:
    if delay is not None and at is not None:
        raise ValueError("give delay or at, not both")
    if delay is not None:
        return app.time.now_ms() + int(delay.total_seconds() * 1000) if delay > timedelta(0) else 0
    if at is not None:
        if at.tzinfo is None:
            at = at.replace(tzinfo=UTC)
        return int(at.timestamp() * 1000)
    return 0


def _new_job(app: App, target: JobActor[Any], payload: dict[str, Any] | BaseModel, *,
             job_id: str | None = None, priority: int = NORMAL_PRIORITY,
             delay: timedelta | None = None, at: datetime | None = None,
             dedup_id: str | None = None, retry_failed: bool = False,
             replay_completed: bool = False, group: str | None = None, token: str = "",
             options: dict[str, Any] | None = None) -> NewJob:
    if priority not in PRIORITY_RANGE:
        raise InvalidPayload(f"priority must be {PRIORITY_RANGE.start}..{PRIORITY_RANGE.stop - 1}")
    if job_id is not None and (not job_id or len(job_id) > 512):
        raise InvalidPayload("job_id must be 1..512 characters")
    if group is not None and (problem := group_key_problem(group)) is not None:
        raise InvalidPayload(problem)
    data = target.validate(payload)
    return NewJob(id=job_id or os.urandom(16).hex(), actor=target.name, data=data,
                  priority=priority,
                  run_at_ms=0 if delay is None and at is None else _run_at(app, delay, at),
                  dedup_id=dedup_id,
                  retry_failed=retry_failed, replay_completed=replay_completed, token=token,
                  group=group, **(options or job_options(target.options, app.spec(target.queue))))


#: Add statuses after which the job awaits a run under the add's own message (RabbitMQ).
_NEW_RUN = frozenset({AddStatus.ADDED, AddStatus.RETRIED, AddStatus.REPLAYED})


def _check_target(target: object) -> None:
    if not isinstance(target, JobActor):
        raise TypeError(f"enqueue takes a registry's actor, not {type(target).__name__}")


def _submit(app: App, shard: Shard,
            per_actor: Sequence[tuple[JobActor[Any], Sequence[NewJob]]],
            ) -> list[list[AddResult]]:
    """Add lists of validated jobs (one actor each, every queue on ``shard``) in one round
    trip; on RabbitMQ, then publish the messages of those added, retried or replayed, and
    of those duplicated that were waiting or delayed (their message may never have gone
    out: a publish that failed after the add)."""
    broker = shard.broker
    results = shard.ledger.add_many_queues([(target.queue, jobs) for target, jobs in per_actor])
    external = app.config.external_broker
    now = app.time.now_ms()
    for (target, jobs), actor_results in zip(per_actor, results, strict=True):
        for job, result in zip(jobs, actor_results, strict=True):
            # an existing job (a reissued duplicate, a retry or replay in place) goes out
            # as the ledger holds it: its own payload and what is left of its delay
            sent: NewJob | Reissued | None = result.reissued or (
                job if external and result.status in _NEW_RUN else None)
            if sent is not None:
                publish(broker, target.queue, sent.actor, json.loads(sent.data),
                         job_id=job.id, token=job.token, priority=sent.priority,
                         delay_ms=max(sent.run_at_ms - now, 0))
            elif result.status is AddStatus.DEDUPLICATED:
                log.warning(
                    "add deduplicated", extra={"queue": target.queue, "job_id": result.job_id,
                                               "dedup_id": job.dedup_id})
    return results


class Publisher(Protocol):
    """A broker whose messages live outside the ledger (RabbitMQ): it publishes them."""

    def publish(self, message: dramatiq.Message[Any], *, priority: int,
                delay_ms: int = 0) -> None:
        """Publish one job's message with its priority, ``delay_ms`` from now."""


def publish(broker: dramatiq.Broker, queue_name: str, actor_name: str, payload: Any, *,
             job_id: str, token: str, priority: int, delay_ms: int = 0) -> None:
    """Publish the message that carries one job under ``token`` (external brokers)."""
    message = message_for(queue_name, actor_name, payload, job_id=job_id, token=token,
                          priority=priority)
    # only an App whose config names an external broker calls this: its broker publishes
    cast(Publisher, broker).publish(message, priority=priority, delay_ms=delay_ms)


def enqueue(target: JobActor[Any], payload: dict[str, Any] | BaseModel, *,
            job_id: str | None = None, priority: int = NORMAL_PRIORITY,
            delay: timedelta | None = None, at: datetime | None = None,
            dedup_id: str | None = None, retry_failed: bool = False,
            replay_completed: bool = False, group: str | None = None) -> EnqueueResult:
    """Validate ``payload`` and add one job; nothing is written when validation fails.

    A job id that exists and is live or completed reports ``duplicated``; a held
    ``dedup_id`` reports ``deduplicated`` (with the holder's id); ``retry_failed`` retries
    a retained failed job in place (``retried``); ``replay_completed`` runs a retained
    completed job again in place (``replayed``: same id, both attempt counters reset,
    its return value cleared) — a live job is never doubled by either. On RabbitMQ a
    ``duplicated`` job that is waiting or delayed gets a fresh message (its own payload,
    the rest of its delay): its first may never have gone out, if publishing failed after
    the add. An older message that did go out is dropped on arrival, so the job still runs
    once. ``group`` names the job's group: at most the queue's limit for that group run
    at once, across every process (docs/queue.md#groups).
    """
    _check_target(target)
    # the shard of the broker the actor is bound to: its queue's Redis, without a look-up
    app, shard = shard_of(target)
    token = new_token() if app.config.external_broker else ""
    job = _new_job(app, target, payload, job_id=job_id, priority=priority, delay=delay, at=at,
                   dedup_id=dedup_id, retry_failed=retry_failed,
                   replay_completed=replay_completed, group=group, token=token)
    result = _submit(app, shard, [(target, [job])])[0][0]
    return EnqueueResult(status=result.status.value, job_id=result.job_id)


def enqueue_many(target: JobActor[Any],
                 items: Iterable[dict[str, Any] | BaseModel | tuple[Any, dict[str, Any]]],
                 *, chunk_size: int = ADD_CHUNK) -> list[EnqueueResult]:
    """Add many jobs of one actor, one round trip per chunk.

    Each item is a payload or ``(payload, options)`` with the options of :func:`enqueue`.
    Every payload is validated before the first chunk is written.
    """
    return enqueue_many_actors([(target, items)], chunk_size=chunk_size)[0]


def enqueue_many_actors(per_actor: Sequence[tuple[JobActor[Any], Iterable[Any]]], *,
                        chunk_size: int = ADD_CHUNK) -> list[list[EnqueueResult]]:
    """Add the jobs of several actors (queues) together: one round trip for up to
    ``chunk_size`` jobs, however many queues they go to, per shard (docs/queue.md#shards);
    results per actor, in order.

    Each entry is ``(actor, items)`` with items as :func:`enqueue_many` takes them. Every
    payload is validated before anything is written.
    """
    if not per_actor:
        return []
    for target, _ in per_actor:
        _check_target(target)
    placed = [shard_of(target) for target, _ in per_actor]
    app, shards = placed[0][0], [shard for _, shard in placed]
    external = app.config.external_broker
    validated: list[tuple[JobActor[Any], list[NewJob]]] = []
    for target, items in per_actor:
        shared = job_options(target.options, app.spec(target.queue))
        jobs = []
        for item in items:
            payload, options = item if isinstance(item, tuple) else (item, {})
            jobs.append(_new_job(app, target, payload, token=new_token() if external else "",
                                 options=shared, **options))
        validated.append((target, jobs))
    results: list[list[EnqueueResult]] = [[] for _ in validated]
    # each shard's actors in order (one shard unless the App has shards)
    by_shard: dict[str, tuple[Shard, list[int]]] = {}
    for index, shard in enumerate(shards):
        by_shard.setdefault(shard.name, (shard, []))[1].append(index)
    for shard, indices in by_shard.values():
        # chunks of the jobs in order, whatever their actor; each chunk is one round trip
        flat = [(index, job) for index in indices for job in validated[index][1]]
        for start in range(0, len(flat), chunk_size):
            runs = [(index, [job for _, job in run]) for index, run in itertools.groupby(
                flat[start:start + chunk_size], key=operator.itemgetter(0))]
            added = _submit(app, shard, [(validated[index][0], jobs) for index, jobs in runs])
            for (index, _), added_jobs in zip(runs, added, strict=True):
                results[index] += [EnqueueResult(status=r.status.value, job_id=r.job_id)
                                   for r in added_jobs]
    return results


