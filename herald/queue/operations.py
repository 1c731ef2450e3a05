"""Operating a queue: counts, listing, retry, remove, pause, resume, drain, clean."""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta

from herald.queue.app import App, current_app
from herald.queue.ledger import BULK_CHUNK, HISTORY_MINUTES, Job, JobState, new_token
from herald.queue.producer import publish
from herald.queue.registry import QueueSpec


class Queue:
    """Operations on one registry queue (counts, listing, retry, pause, clean, …)."""

    def __init__(self, spec: QueueSpec, app: App) -> None:
        self.spec = spec
        self.name = spec.name
        self.app = app
        #: the Redis that holds this queue (docs/queue.md#shards)
        self.shard = app.shard(spec.name)
        self.ledger = self.shard.ledger
        self.queries = self.shard.queries
        self.admin = self.shard.admin

    def counts(self) -> dict[str, int]:
        """Jobs per state: waiting, active, delayed, completed, failed, paused."""
        return self.queries.counts(self.name)

    def failed_within(self, window: timedelta = timedelta(hours=24)) -> int:
        """Jobs that failed within the last ``window`` (the failed set paged newest first,
        stopping at the cutoff: older retained failures stay inspectable but do not count)."""
        cutoff = self.ledger.now_ms() - int(window.total_seconds() * 1000)
        return self.queries.failed_since(self.name, cutoff)

    def history(self, minutes: int = HISTORY_MINUTES) -> list[tuple[datetime, int, int]]:
        """``(minute, completed, failed)`` per minute of the last ``minutes`` minutes (at
        most the hour the ledger keeps), oldest first, the current minute last."""
        return [(datetime.fromtimestamp(start / 1000, tz=UTC), completed, failed)
                for start, completed, failed in self.queries.history(
                    self.name, minutes=min(minutes, HISTORY_MINUTES))]

    def find(self, id_prefix: str, limit: int = 20) -> list[Job]:
        """This queue's jobs whose id starts with ``id_prefix`` (the exact id first)."""
        exact = self.get(id_prefix)
        ids = [i for i in self.queries.find_job_ids(self.name, id_prefix, limit=limit)
               if exact is None or i != exact.id]
        found = [job for job in (self.get(i) for i in ids) if job is not None]
        return ([exact] if exact else []) + found[:limit - (1 if exact else 0)]

    def get(self, job_id: str) -> Job | None:
        """One job, or None when absent."""
        return self.queries.get(self.name, job_id)

    def dedup_holders(self, dedup_ids: Sequence[str]) -> list[Job]:
        """The jobs holding these dedup ids (docs/queue.md#dedup), in one round trip for
        the ids; an id no live job holds is left out."""
        if not dedup_ids:
            return []
        found = (self.get(job_id)
                 for job_id in self.queries.dedup_holder_ids(self.name, dedup_ids))
        return [job for job in found if job is not None]

    def jobs(self, state: str | JobState, page: int = 1, per_page: int = 50) -> list[Job]:
        """Jobs in ``state``, newest first, one page (pages count from 1)."""
        return self.queries.jobs(self.name, JobState(state), page=page, per_page=per_page)

    def retry(self, job_id: str) -> bool:
        """Run a failed job again (counters reset); False for any other state.

        On RabbitMQ, should publishing its message fail after the retry, the job waits
        with none: enqueueing its id again publishes one (see :func:`enqueue`).
        """
        if self.app.config.external_broker:
            job = self.get(job_id)
            if job is None or job.state is not JobState.FAILED:
                return False
            token = new_token()
            if not self.admin.retry(self.name, job_id, token):
                return False
            publish(self.shard.broker, self.name, job.actor, job.payload, job_id=job_id,
                    token=token, priority=job.priority)
            return True
        return self.admin.retry(self.name, job_id)

    def retry_all_failed(self) -> int:
        """Retry every job that was failed when the call began, once each: one that fails
        again while the call runs is left failed. Returns how many were retried."""
        # a snapshot, not pages of the live set: retried jobs that fail again at once
        # would land on the pages still to come (the set is bounded by the retention)
        ids = self.queries.job_ids(self.name, JobState.FAILED, 0, -1)
        return sum(self.retry(job_id) for job_id in ids)

    def remove(self, job_id: str) -> bool:
        """Remove a job that is not active (releases its dedup key). True if removed."""
        return self.admin.remove(self.name, [job_id]) == 1

    def remove_all(self, state: str | JobState) -> int:
        """Remove every job in ``state`` (any but active), a chunk of ids per round trip;
        returns how many. Jobs that turn active meanwhile are left where they are."""
        state = JobState(state)
        if state is JobState.ACTIVE:
            raise ValueError("an active job cannot be removed")
        removed = 0
        while ids := self.queries.job_ids(self.name, state, 0, BULK_CHUNK - 1):
            count = self.admin.remove(self.name, ids)
            removed += count
            if count == 0:  # the chunk turned active meanwhile: leave the rest
                return removed
        return removed

    def group_counts(self) -> dict[str, int]:
        """Jobs active now per group key, across every process (docs/queue.md#groups)."""
        return self.queries.group_counts(self.name)

    def pause(self) -> None:
        """Workers stop taking this queue's jobs (other queues continue)."""
        self.admin.set_paused(self.name, True)

    def resume(self) -> None:
        """Workers take this queue's jobs again, in priority order.

        On RabbitMQ the messages of jobs held while paused went back to the broker in no
        useful order, so every waiting job gets a fresh message (its old one is dropped on
        arrival), published in priority order after the queue is resumed. Should that
        publishing fail part-way, call resume again: each call re-issues every waiting
        job's message.
        """
        if not self.app.config.external_broker:
            self.admin.set_paused(self.name, False)
            return
        rows = self.admin.reissue_waiting(self.name, new_token())
        self.admin.set_paused(self.name, False)
        broker = self.shard.broker
        for job_id, actor_name, data, priority, token in rows:
            publish(broker, self.name, actor_name, json.loads(data), job_id=job_id,
                     token=token, priority=priority)

    def is_paused(self) -> bool:
        """True while paused."""
        return self.queries.is_paused(self.name)

    def drain(self) -> int:
        """Remove every waiting and delayed job; returns how many."""
        return self.admin.drain(self.name)

    def clean(self, state: str | JobState, older_than: timedelta = timedelta(0)) -> int:
        """Remove completed/failed/delayed records older than ``older_than``."""
        return self.admin.clean(self.name, JobState(state), older_than)

    def prune(self) -> int:
        """Apply the registry's retention now; returns records removed."""
        return self.admin.prune(self.spec)

    def obliterate(self) -> int:
        """Delete everything the queue holds in Redis."""
        return self.admin.obliterate(self.name)


def find_jobs(id_prefix: str, limit: int = 50) -> list[Job]:
    """Jobs of every registry queue whose id starts with ``id_prefix``, exact ids first
    (one pass over each shard's keyspace, not one per queue: an operator's search)."""
    app = current_app()
    by_shard: dict[str, list[str]] = {}
    for spec in app.specs():
        by_shard.setdefault(app.shard(spec.name).name, []).append(spec.name)
    exact: list[Job] = []
    more: list[Job] = []
    for shard_name, names in by_shard.items():
        queries = app.shards[shard_name].queries
        # the exact ids are looked up, not left to the scan: it stops at the limit
        exact += [job for name in names if (job := queries.get(name, id_prefix)) is not None]
        refs = queries.find_job_refs(id_prefix, set(names), limit=limit)
        more += [job for name, job_id in refs if job_id != id_prefix
                 and (job := queries.get(name, job_id)) is not None]
    more.sort(key=lambda job: (job.queue, job.id))  # each shard's scan came sorted
    return (exact + more)[:limit]


def queue(name: str) -> Queue:
    """Operations on a registry queue of the installed App; an unknown name raises
    KeyError (UnknownQueue)."""
    app = current_app()
    return Queue(app.spec(name), app)
