"""What an operator does to the ledger: retry, remove, pause and resume, drain, clean,
prune, obliterate (the console's and ``herald``'s tools' operations, not hot paths).

Changes to one job are Lua scripts, like the ledger's transitions (``herald/queue/lua/``),
so a call sent again after a lost reply does no more than its first send.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import timedelta
from typing import cast

from herald.queue.ledger import (
    BULK_CHUNK,
    JobState,
    Ledger,
    glob_escape,
    ms_of,
    new_token,
    text_of,
)
from herald.queue.ledger_queries import LedgerQueries
from herald.queue.registry import QueueSpec

#: How long a remove's answer is kept for the same call sent again after its reply was
#: lost (ms): far longer than a client waits before sending again.
REPLY_KEPT_MS = 600_000


class LedgerAdmin:
    """Operations on one ledger's jobs (every queue under its key prefix)."""

    def __init__(self, ledger: Ledger) -> None:
        self.ledger = ledger
        self.client = ledger.client
        #: clean reads the records it removes by age
        self.queries = LedgerQueries(ledger)

    def retry(self, queue: str, job_id: str, message_id: str = "") -> bool:
        """Retry a failed job in place; False when the job is not failed. ``message_id``
        names the message that will carry it (RabbitMQ). Sent again after a lost reply
        (a client retry on a timeout), the call still answers True."""
        ledger = self.ledger
        return bool(ledger.call("retry", [ledger.base(queue), ledger.now_ms(), job_id,
                                          message_id]))

    def remove(self, queue: str, job_ids: Sequence[str]) -> int:
        """Remove jobs that are not active; their dedup keys are released. Returns how many.
        Sent again after a lost reply (a client retry on a timeout), the call answers the
        first send's count and removes nothing more (not even a job re-added meanwhile)."""
        if not job_ids:
            return 0
        return int(self.ledger.call("remove", [self.ledger.base(queue), new_token(),
                                               REPLY_KEPT_MS, *job_ids]))

    def set_paused(self, queue: str, paused: bool) -> None:
        """Pause or resume the queue (workers stop or start taking its jobs)."""
        base = self.ledger.base(queue)
        pipe = self.client.pipeline(transaction=True)
        pipe.hset(base + "meta", "paused", "1" if paused else "0")
        if not paused:
            pipe.lpush(base + "marker", "1")
        pipe.execute()

    def reissue_waiting(self, queue: str, token_prefix: str,
                        ) -> list[tuple[str, str, str, int, str]]:
        """Give each waiting job of a queue whose messages live in another broker a fresh
        token (``token_prefix`` and a number), after making delayed jobs that fell due
        waiting; an older message of the job is dropped when it arrives. Returns (id,
        actor, data, priority, token) per job, in priority then arrival order, for the
        caller to publish."""
        ledger = self.ledger
        rows: list[tuple[str, str, str, int, str]] = []
        after: str = "-inf"
        while True:
            chunk, last = ledger.call("reissue", [ledger.base(queue), ledger.now_ms(),
                                                  token_prefix, after, BULK_CHUNK, len(rows)])
            rows += [(text_of(r[0]) or "", text_of(r[1]) or "", text_of(r[2]) or "null",
                      int(r[3]), text_of(r[4]) or "") for r in chunk]
            if last is None or len(chunk) < BULK_CHUNK:
                return rows
            after = text_of(last) or "-inf"

    def _remove_set(self, queue: str, key: str, max_score: float | str = "+inf") -> int:
        removed = 0
        while True:
            ids = cast(list[bytes], self.client.zrangebyscore(
                self.ledger.base(queue) + key, "-inf", max_score, start=0, num=BULK_CHUNK))
            if not ids:
                return removed
            count = self.remove(queue, [text_of(i) or "" for i in ids])
            removed += count
            if count == 0:
                return removed

    def drain(self, queue: str) -> int:
        """Remove every waiting (parked included) and delayed job. Returns how many."""
        return sum(self._remove_set(queue, key) for key in ("wait", "parked", "delayed"))

    def clean(self, queue: str, state: JobState, older_than: timedelta) -> int:
        """Remove finished (or delayed) records older than ``older_than``. Returns how many."""
        if state not in (JobState.COMPLETED, JobState.FAILED, JobState.DELAYED):
            raise ValueError("clean takes completed, failed or delayed")
        cutoff = self.ledger.now_ms() - ms_of(older_than)
        if state is JobState.DELAYED:
            # a delayed job's score is when it runs; age is measured from its creation
            ids = [i for i in self.queries.job_ids(queue, state, 0, -1)
                   if (job := self.queries.get(queue, i)) and job.created_at
                   and job.created_at.timestamp() * 1000 <= cutoff]
            return self.remove(queue, ids)
        return self._remove_set(queue, state.value, cutoff)

    def prune(self, spec: QueueSpec) -> int:
        """Apply the queue's retention now (also done lazily on every terminal event)."""
        removed = 0
        for state, keep in ((JobState.COMPLETED, spec.retention.completed),
                            (JobState.FAILED, spec.retention.failed)):
            key = self.ledger.base(spec.name) + state.value
            if keep.age is not None:
                cutoff = self.ledger.now_ms() - ms_of(keep.age)
                removed += self._remove_set(spec.name, state.value, cutoff)
            if keep.count is not None:
                excess = cast(int, self.client.zcard(key)) - keep.count
                while excess > 0:
                    ids = cast(list[bytes], self.client.zrange(key, 0, min(excess, BULK_CHUNK) - 1))
                    count = self.remove(spec.name, [text_of(i) or "" for i in ids])
                    if count == 0:
                        break
                    removed += count
                    excess -= count
        return removed

    def obliterate(self, queue: str) -> int:
        """Delete the queue's every key, active jobs included. Returns keys deleted."""
        deleted = 0
        for key in self.client.scan_iter(match=glob_escape(self.ledger.base(queue)) + "*",
                                         count=BULK_CHUNK):
            deleted += cast(int, self.client.delete(key))
        return deleted
