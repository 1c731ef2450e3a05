"""What an operator reads of the ledger: counts, job records, pages of jobs, throughput
history, searches by id (the console's and ``herald queues``' questions, not hot paths).

Each query is a read of the keys the ledger's scripts write (``herald/queue/lua/``); none
changes a job.
"""

from __future__ import annotations

import heapq
import itertools
import json
from collections.abc import Collection, Sequence
from datetime import UTC, datetime
from typing import cast

from herald.queue.ledger import (
    BULK_CHUNK,
    HISTORY_MINUTES,
    Job,
    JobState,
    Ledger,
    glob_escape,
    text_of,
)

#: A hash as the ledger's client reads it (redis-py types every reply as possibly awaitable:
#: the ledger's client is synchronous).
Hash = dict[bytes, bytes]
#: A sorted set's members with their scores, as the ledger's client reads them.
Scored = list[tuple[bytes, float]]

#: Failed records read per round trip while counting recent failures (:meth:`failed_since`).
FAILED_PAGE = 500


def _dt(value: bytes | str | None) -> datetime | None:
    if value is None or value == b"" or value == "":
        return None
    return datetime.fromtimestamp(int(value) / 1000, tz=UTC)


class LedgerQueries:
    """Reads of one ledger's records (every queue under its key prefix)."""

    def __init__(self, ledger: Ledger) -> None:
        self.ledger = ledger
        self.client = ledger.client

    def counts(self, queue: str) -> dict[str, int]:
        """Jobs per state; waiting jobs count as paused while the queue is paused."""
        base = self.ledger.base(queue)
        pipe = self.client.pipeline(transaction=False)
        for key in ("wait", "parked", "active", "delayed", "completed", "failed"):
            pipe.zcard(base + key)
        pipe.hget(base + "meta", "paused")
        ready, parked, active, delayed, completed, failed, paused = pipe.execute()
        waiting = ready + parked  # a parked job waits for its group's slot
        is_paused = text_of(paused) == "1"
        return {"waiting": 0 if is_paused else waiting, "active": active, "delayed": delayed,
                "completed": completed, "failed": failed,
                "paused": waiting if is_paused else 0}

    def metrics(self, queue: str) -> dict[str, int]:
        """Lifetime counters of one queue (completed, failed, retried, deduplicated, …)."""
        raw = cast(Hash, self.client.hgetall(self.ledger.base(queue) + "metrics"))
        return {text_of(k) or "": int(v) for k, v in raw.items()}

    def get(self, queue: str, job_id: str) -> Job | None:
        """One job's record, or None when it does not exist (any more)."""
        return self._jobs(queue, [job_id])[0]

    def _jobs(self, queue: str, ids: Sequence[str]) -> list[Job | None]:
        base = self.ledger.base(queue)
        pipe = self.client.pipeline(transaction=False)
        for job_id in ids:
            pipe.hgetall(base + "job:" + job_id)
        pipe.hget(base + "meta", "paused")
        *records, paused = pipe.execute()
        return [self._job(queue, job_id, record, text_of(paused) == "1")
                for job_id, record in zip(ids, records, strict=True)]

    @staticmethod
    def _job(queue: str, job_id: str, record: dict[bytes, bytes], paused: bool) -> Job | None:
        if not record:
            return None
        f = {k.decode(): v.decode() for k, v in record.items()}
        state = JobState(f.get("state", "waiting"))
        if state is JobState.WAITING and paused:
            state = JobState.PAUSED
        return Job(id=job_id, queue=queue, actor=f.get("actor", ""),
                   payload=json.loads(f["data"]) if "data" in f else None, state=state,
                   priority=int(f.get("prio", 5)), attempts_made=int(f.get("am", 0)),
                   attempts_started=int(f.get("as", 0)), created_at=_dt(f.get("ts")),
                   processed_at=_dt(f.get("pt")), finished_at=_dt(f.get("ft")),
                   run_at=_dt(f.get("run_at")), failed_reason=f.get("fr") or None,
                   stacktrace=f.get("st") or None,
                   return_value=json.loads(f["rv"]) if f.get("rv") else None,
                   dedup_id=f.get("dd") or None, token=f.get("tok") or None,
                   message_id=f.get("msg") or None, group=f.get("grp") or None)

    def dedup_holder_ids(self, queue: str, dedup_ids: Sequence[str]) -> list[str]:
        """The ids of the jobs holding these dedup ids, in one round trip (an id no live
        job holds is left out)."""
        base = self.ledger.base(queue)
        holders = cast(list[bytes | None],
                       self.client.mget([base + "dedup:" + dedup_id for dedup_id in dedup_ids]))
        return [text_of(holder) or "" for holder in holders if holder]

    def failed_since(self, queue: str, since_ms: int, *, page_size: int = FAILED_PAGE) -> int:
        """How many jobs failed at or after ``since_ms``: the failed set is paged newest
        first and the count stops at the first record older than the cutoff, so retained
        older failures cost nothing and never count."""
        key = self.ledger.base(queue) + "failed"
        counted, start = 0, 0
        while True:
            page = cast(Scored, self.client.zrevrange(key, start, start + page_size - 1,
                                                      withscores=True))
            for _, finished_at in page:
                if finished_at < since_ms:
                    return counted
                counted += 1
            if len(page) < page_size:
                return counted
            start += page_size

    def history(self, queue: str, *, minutes: int = HISTORY_MINUTES,
                now: int | None = None) -> list[tuple[int, int, int]]:
        """Completed and failed jobs per minute for the last ``minutes`` minutes, oldest
        first, the current minute last: ``(minute start ms, completed, failed)``.

        The consumer scripts count every job that finishes for good into one hash per
        queue and minute, ``<base>tp:<minute>`` (minute = ms // 60000) with fields ``c``
        and ``f``, which expires once it is older than the history keeps.
        """
        minute = (self.ledger.now_ms() if now is None else now) // 60_000
        first = minute - minutes + 1
        pipe = self.client.pipeline(transaction=False)
        for m in range(first, minute + 1):
            pipe.hmget(self.ledger.base(queue) + f"tp:{m}", ["c", "f"])
        return [(m * 60_000, int(c or 0), int(f or 0))
                for m, (c, f) in zip(range(first, minute + 1), pipe.execute(), strict=True)]

    def find_job_ids(self, queue: str, prefix: str, *, limit: int = 20) -> list[str]:
        """Ids of this queue's jobs that start with ``prefix`` (at most ``limit``, sorted).
        A SCAN of the queue's job keys: an operator's search, not a hot path."""
        base = self.ledger.base(queue) + "job:"
        pattern = glob_escape(base + prefix) + "*"
        found: set[str] = set()
        for key in self.client.scan_iter(match=pattern, count=BULK_CHUNK):
            found.add((text_of(key) or "")[len(base):])
            if len(found) >= limit:
                break
        return sorted(found)

    def find_job_refs(self, prefix: str, queues: Collection[str], *, limit: int = 50,
                      ) -> list[tuple[str, str]]:
        """``(queue, job id)`` of jobs in any of ``queues`` whose id starts with ``prefix``
        (at most ``limit``, sorted): one SCAN over the keyspace for every queue at once."""
        head = f"{self.ledger.prefix}:{{"
        pattern = glob_escape(head) + "*" + glob_escape("}:job:" + prefix) + "*"
        found: set[tuple[str, str]] = set()
        for raw in self.client.scan_iter(match=pattern, count=BULK_CHUNK):
            # a queue name has no braces, so the first "}:job:" ends it
            name, _, job_id = (text_of(raw) or "")[len(head):].partition("}:job:")
            if name in queues and job_id.startswith(prefix):
                found.add((name, job_id))
                if len(found) >= limit:
                    break
        return sorted(found)

    def group_counts(self, queue: str) -> dict[str, int]:
        """Jobs active now per group key (groups with none active are left out)."""
        raw = cast(Hash, self.client.hgetall(self.ledger.base(queue) + "groups"))
        return {text_of(k) or "": int(v) for k, v in raw.items() if int(v) > 0}

    def is_paused(self, queue: str) -> bool:
        """True while the queue is paused."""
        paused = cast(bytes | None, self.client.hget(self.ledger.base(queue) + "meta", "paused"))
        return text_of(paused) == "1"

    def job_ids(self, queue: str, state: JobState, start: int, stop: int) -> list[str]:
        """Ids in one state, newest first, positions start..stop inclusive (-1: the last).
        Waiting (or paused) jobs include the parked ones, in their wait order."""
        if state not in (JobState.WAITING, JobState.PAUSED):
            raw = cast(list[bytes],
                       self.client.zrevrange(self.ledger.base(queue) + state.value, start, stop))
            return [text_of(i) or "" for i in raw]
        if self.is_paused(queue) != (state is JobState.PAUSED):
            return []
        return self._waiting_ids(queue, start, stop)

    def _waiting_ids(self, queue: str, start: int, stop: int) -> list[str]:
        """Positions start..stop of the wait and parked sets merged, newest (highest wait
        score) first: each set's first stop + 1 are enough to fill the page."""
        base = self.ledger.base(queue)
        pipe = self.client.pipeline(transaction=False)
        for key in ("wait", "parked"):
            pipe.zrevrange(base + key, 0, stop, withscores=True)
        ready, parked = pipe.execute()
        merged = heapq.merge(ready, parked, key=lambda row: row[1], reverse=True)
        end = None if stop < 0 else stop + 1
        return [text_of(i) or "" for i, _ in itertools.islice(merged, start, end)]

    def jobs(self, queue: str, state: JobState, *, page: int = 1, per_page: int = 50,
             ) -> list[Job]:
        """One page of jobs in ``state``, newest first (pages count from 1)."""
        if page < 1 or per_page < 1:
            raise ValueError("page and per_page start at 1")
        start = (page - 1) * per_page
        ids = self.job_ids(queue, state, start, start + per_page - 1)
        return [job for job in self._jobs(queue, ids) if job is not None] if ids else []
