"""The job ledger: every job's record and state in Redis, each transition one Lua script.

This module knows queues and jobs, nothing about what the jobs do. On the Redis broker
the ledger *is* the broker (its wait set is what workers fetch from); on RabbitMQ the
messages travel through RabbitMQ and the ledger records their state and fences them with
the token of each run. Scripts live in ``herald/queue/lua/`` and run with EVALSHA (Redis 6.2+).
"""

from __future__ import annotations

import dataclasses
import heapq
import itertools
import json
import uuid
from collections.abc import Collection, Iterable, Sequence
from datetime import UTC, datetime, timedelta
from enum import StrEnum
from functools import cache
from pathlib import Path
from typing import Any, NamedTuple

import redis

from herald.queue.queue_time import QueueTime
from herald.queue.redis import ThreadConnections, run_script_on
from herald.queue.registry import Backoff, Keep, QueueSpec

LUA_DIR = Path(__file__).parent / "lua"
#: How often (at most) one queue's stalled jobs are looked for.
STALL_CHECK_MS = 1000
#: Jobs per ``add`` round trip in :meth:`Ledger.add_many`.
ADD_CHUNK = 1000
#: Records touched per script call by drain, clean and obliterate.
BULK_CHUNK = 1000
#: Failed records read per round trip while counting recent failures (:meth:`failed_since`).
FAILED_PAGE = 500
#: Minutes of throughput history kept per queue (the per-minute keys expire after it).
HISTORY_MINUTES = 60
#: How long a RabbitMQ message of a job whose group is at its limit waits before it is
#: delivered again (ms).
GROUP_WAIT_MS = 500
#: How long a remove's answer is kept for the same call sent again after its reply was
#: lost (ms): far longer than a client waits before sending again.
REPLY_KEPT_MS = 600_000


class JobState(StrEnum):
    """Where a job is in its life."""

    #: Ready to run, in priority then arrival order.
    WAITING = "waiting"
    #: Scheduled for later: a delay, or the backoff before its next attempt.
    DELAYED = "delayed"
    #: A worker runs it and holds its lock.
    ACTIVE = "active"
    #: Verdict successfully.
    COMPLETED = "completed"
    #: Failed for good (attempts exhausted, a Permanent error, or too many starts).
    FAILED = "failed"
    #: Waiting in a paused queue (reported instead of waiting while the queue is paused).
    PAUSED = "paused"


class AddStatus(StrEnum):
    """What an add did."""

    ADDED = "added"
    DUPLICATED = "duplicated"
    DEDUPLICATED = "deduplicated"
    RETRIED = "retried"
    #: A completed job run again in place (``replay_completed``).
    REPLAYED = "replayed"


#: Each add status by the bytes (or text) the add script answers with: an enum look-up
#: by value costs more than the rest of a result.
_ADD_STATUSES: dict[bytes | str, AddStatus] = {
    **{status.value.encode(): status for status in AddStatus},
    **{status.value: status for status in AddStatus}}


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class Reissued:
    """The message an add gave an existing job (RabbitMQ: a waiting or delayed duplicate,
    or a job retried or replayed in place): the job's own actor, payload (JSON) and
    priority, and when it runs (0: now)."""

    actor: str
    data: str
    priority: int
    run_at_ms: int


class AddResult(NamedTuple):
    """The outcome of one add: the status and the id of the job it concerns (a named
    tuple, like :class:`NewJob`: an add of thousands of jobs makes thousands).

    For ``deduplicated`` the id is the job that holds the dedup key. ``reissued`` is set
    when an existing job (RabbitMQ: a waiting or delayed ``duplicated`` one, or one
    ``retried`` or ``replayed`` in place) now awaits the message named by the add's token,
    which the caller must publish.
    """

    status: AddStatus
    job_id: str
    reissued: Reissued | None = None


class NewJob(NamedTuple):
    """A job to add (a validated payload, as JSON, plus its options); build it with
    keywords.

    A named tuple rather than a frozen dataclass: as unchangeable, and built at a third
    of the cost, which a bulk add pays thousands of times a request."""

    id: str
    actor: str
    data: str
    priority: int
    run_at_ms: int = 0
    dedup_id: str | None = None
    retry_failed: bool = False
    #: A completed job of this id runs again in place (settlement replay).
    replay_completed: bool = False
    attempts: int = 3
    backoff: Backoff = Backoff.EXPONENTIAL
    backoff_base_ms: int = 1000
    max_started_attempts: int | None = None
    remove_on_complete: bool = False
    remove_on_fail: bool = False
    #: RabbitMQ: the id of the message that will carry the job ("" on the Redis broker).
    token: str = ""
    #: The job's group key: the queue's group limits hold it back (docs/queue.md#groups).
    group: str | None = None


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class Job:
    """One job's record as the ledger holds it."""

    id: str
    queue: str
    actor: str
    payload: Any
    state: JobState
    priority: int
    attempts_made: int
    attempts_started: int
    created_at: datetime | None
    processed_at: datetime | None
    finished_at: datetime | None
    run_at: datetime | None
    failed_reason: str | None
    stacktrace: str | None
    return_value: Any
    dedup_id: str | None
    #: The fence token of the job's latest run: unique for good (no later run, retries
    #: included, ever has it), so a run that outlived its lock cannot finish a later one.
    token: str | None
    #: RabbitMQ: the id of the message that carries the job's current attempt.
    message_id: str | None
    #: The job's group key, if it has one.
    group: str | None = None


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class StartedJob:
    """A job the cycle script moved to active for this consumer."""

    id: str
    actor: str
    data: str
    token: str
    attempts_made: int
    attempts_started: int
    priority: int
    created_at_ms: int


# Not frozen: a frozen dataclass sets each field through object.__setattr__, and one of
# these is built for every run that does not simply complete.
@dataclasses.dataclass(kw_only=True, slots=True)
class RunEnd:
    """How one run ended, as the consumer reports it to the ledger."""

    #: Outcome codes of cycle.lua.
    COMPLETED = "c"
    FAILED = "f"
    PERMANENT = "p"
    DEFERRED = "d"
    RELEASED = "r"
    EXCEEDED = "x"

    job_id: str
    token: str
    outcome: str
    value: str = ""
    stack: str = ""
    next_token: str = ""
    #: The actor that ran (for logs only; not sent to Redis).
    actor: str = ""


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class Verdict:
    """What the ledger made of a :class:`RunEnd`: completed|failed|retry|deferred|released|
    stale — or ``exhausted`` for a job failed at fetch for too many starts (with its actor,
    payload and reason, for the actor's exhausted hook)."""

    job_id: str
    result: str
    run_at_ms: int
    actor: str = ""
    data: str = ""
    reason: str = ""


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class CycleResult:
    """The answer of one consumer round trip."""

    finished: list[Verdict]
    started: list[StartedJob]
    next_delayed_ms: int | None
    rate_limited_ms: int


def new_token() -> str:
    """A fresh message id (RabbitMQ messages carry one per attempt)."""
    return uuid.uuid4().hex


def _ms(value: timedelta | None) -> int:
    return -1 if value is None else int(value.total_seconds() * 1000)


def _keep_args(keep: Keep) -> list[int]:
    return [-1 if keep.count is None else keep.count, _ms(keep.age)]


def _dt(value: bytes | str | None) -> datetime | None:
    if value is None or value == b"" or value == "":
        return None
    return datetime.fromtimestamp(int(value) / 1000, tz=UTC)


@cache
def _source(name: str) -> str:
    common = (LUA_DIR / "common.lua").read_text()
    return common + "\n" + (LUA_DIR / f"{name}.lua").read_text()


def _text(value: bytes | str | None) -> str | None:
    if value is None:
        return None
    return value.decode() if isinstance(value, bytes) else value


def _glob_escape(text: str) -> str:
    """``text`` as a literal in a Redis glob pattern (SCAN MATCH)."""
    return "".join("\\" + c if c in "*?[]\\{}^-" else c for c in text)


def _group_args(spec: QueueSpec) -> list[Any]:
    """A queue's group limits as the scripts read them (``read_group_limits`` in
    common.lua): the default limit (0: none), how many groups are listed, then each group
    and its limit."""
    args: list[Any] = [spec.default_group_limit or 0, len(spec.group_limits)]
    for group, limit in spec.group_limits.items():
        args += [group, limit]
    return args


def _reissued_result(row: Sequence[Any]) -> AddResult:
    """An add script's row for a duplicate that now awaits a new message (see add.lua)."""
    status, job_id, actor, data, priority, run_at = row
    return AddResult(status=AddStatus(_text(status)), job_id=_text(job_id) or "",
                     reissued=Reissued(actor=_text(actor) or "", data=_text(data) or "null",
                                       priority=int(priority), run_at_ms=int(run_at)))


class Ledger:
    """Job records of every queue under one key prefix, on one Redis client."""

    def __init__(self, client: redis.Redis, prefix: str = "herald", *,
                 clock: QueueTime | None = None, connections: ThreadConnections | None = None,
                 ) -> None:
        self.client = client
        self.prefix = prefix
        #: the "now" of every time this ledger stores or compares
        self.clock = clock or QueueTime()
        self._scripts = {name: client.register_script(_source(name))
                         for name in ("add", "cycle", "start", "retry", "remove", "reissue")}
        #: each thread's own connection for its script calls (see :meth:`_run_own`)
        self._own = connections or ThreadConnections(client)

    def now_ms(self) -> int:
        """Milliseconds since the epoch in this ledger's queue time."""
        return self.clock.now_ms()

    # -- keys ---------------------------------------------------------------------------
    def base(self, queue: str) -> str:
        """The key prefix of one queue (hash-tagged so a queue lives in one cluster slot)."""
        return f"{self.prefix}:{{{queue}}}:"

    def marker_key(self, queue: str) -> str:
        """The list consumers block on while their queue is empty."""
        return self.base(queue) + "marker"

    # -- producing ------------------------------------------------------------------------
    def add(self, queue: str, jobs: Sequence[NewJob], *, client: Any = None) -> list[AddResult]:
        """Add jobs of one actor in one round trip; each gets added|duplicated|deduplicated|
        retried|replayed. The actor and its retry/retention config come from the first job."""
        return self.add_groups([(queue, jobs)], client=client)[0]

    def add_groups(self, groups: Sequence[tuple[str, Sequence[NewJob]]], *,
                   client: Any = None) -> list[list[AddResult]]:
        """Add several groups of jobs, each of one actor in one queue, in one round trip
        (one script call); the results come back per group, as :meth:`add` gives them."""
        filled = [(queue, jobs) for queue, jobs in groups if jobs]
        if not filled:
            return [[] for _ in groups]
        args: list[Any] = [self.now_ms(), len(filled), new_token()]
        for queue, jobs in filled:
            first = jobs[0]
            options = (("c" if first.remove_on_complete else "")
                       + ("f" if first.remove_on_fail else ""))
            config = (f"{first.attempts}:{first.backoff.value[0]}:{first.backoff_base_ms}:"
                      f"{options}")
            args += [self.base(queue), len(jobs), first.actor, config,
                     first.max_started_attempts or 0]
            for job in jobs:
                again = ("f" if job.retry_failed else "") + ("c" if job.replay_completed else "")
                args += [job.id, job.data, job.priority, job.run_at_ms, job.dedup_id or "",
                         again, job.token, job.group or ""]
        raw = iter(self._scripts["add"](args=args, client=client) if client is not None
                   else self._run_own("add", args))
        # a plain row is {status, id}; a longer one is rare (see _reissued_result)
        return [[AddResult(status=_ADD_STATUSES[row[0]], job_id=_text(row[1]) or "")
                 if len(row) == 2 else _reissued_result(row)
                 for row in itertools.islice(raw, len(jobs))]
                for _, jobs in groups]

    # -- consuming ------------------------------------------------------------------------
    @staticmethod
    def cycle_config(spec: QueueSpec) -> list[Any]:
        """The queue's fixed arguments of the cycle script (a consumer computes them once)."""
        rate_max, window_ms = (0, 0)
        if spec.rate_limit is not None:
            rate_max, window_ms = spec.rate_limit[0], _ms(spec.rate_limit[1])
        return [_ms(spec.lock_duration), rate_max, window_ms, STALL_CHECK_MS,
                *_keep_args(spec.retention.completed), *_keep_args(spec.retention.failed),
                *_group_args(spec)]

    def cycle_raw(self, spec: QueueSpec, config: Sequence[Any], *,
                  done: Iterable[tuple[str, ...]] = (), finishes: Sequence[RunEnd] = (),
                  extend: Sequence[tuple[str, str]] = (), fetch: int = 0,
                  external: bool = False, connection: Any = None) -> Any:
        """One cycle script call, its reply left as Redis returned it (the consumer's hot
        path: see cycle.lua for the reply's layout).

        ``done`` holds runs that completed with no return value, as ``(job id, token, …)``
        (items past the token are ignored): the script reports only the stale ones back,
        so the common case costs two arguments per run and nothing in the reply.
        ``config`` is :meth:`cycle_config` of ``spec``.
        """
        if not isinstance(done, Sequence):
            done = list(done)
        args: list[Any] = [self.base(spec.name), self.now_ms(), fetch, "1" if external else "0",
                           len(done), len(finishes), len(extend), *config]
        for job_id, token, *_ in done:
            args += (job_id, token)
        for f in finishes:
            args += (f.job_id, f.token, f.outcome, f.value, f.stack, f.next_token)
        for job_id, token in extend:
            args += (job_id, token)
        if connection is None:
            return self._run_own("cycle", args)
        return self.run_on(connection, "cycle", args)

    def cycle(self, spec: QueueSpec, *, finishes: Sequence[RunEnd] = (),
              extend: Iterable[tuple[str, str]] = (), fetch: int = 0,
              external: bool = False, connection: Any = None) -> CycleResult:
        """RunEnd runs, extend locks and (Redis broker) start up to ``fetch`` jobs, atomically.

        ``connection`` is a consumer's own connection (:meth:`run_on`): the hot path skips
        the client's pool, retry and response-callback layers.
        """
        raw = self.cycle_raw(spec, self.cycle_config(spec), finishes=finishes,
                             extend=list(extend), fetch=fetch, external=external,
                             connection=connection)
        finished_raw, started_raw, next_due, limited, _ = raw
        finished = [Verdict(job_id=_text(f[0]) or "", result=_text(f[1]) or "",
                             run_at_ms=int(f[2]), actor=_text(f[3]) if len(f) > 3 else "",
                             data=_text(f[4]) if len(f) > 4 else "",
                             reason=_text(f[5]) if len(f) > 5 else "")
                    for f in finished_raw]
        started = [StartedJob(id=_text(s[0]) or "", actor=_text(s[1]) or "",
                              data=_text(s[2]) or "null", token=_text(s[3]) or "",
                              attempts_made=int(s[4]), attempts_started=int(s[5]),
                              priority=int(s[6]), created_at_ms=int(s[7]))
                   for s in started_raw]
        return CycleResult(finished=finished, started=started,
                           next_delayed_ms=int(float(next_due)) if next_due else None,
                           rate_limited_ms=int(limited))

    def _run_own(self, name: str, args: Sequence[Any]) -> Any:
        """Run a script on this thread's own connection: a producer's adds and a worker
        thread's finishes skip the pool's checkout and the client's retry layers, which
        cost as much as the round trip (:class:`herald.queue.redis.ThreadConnections`)."""
        return self._own.run_script(self._scripts[name], args=args)

    def run_on(self, connection: Any, name: str, args: Sequence[Any]) -> Any:
        """Run a script on a dedicated connection (EVALSHA, loading it when Redis lost it)."""
        return run_script_on(connection, self._scripts[name], args=args)

    def start(self, spec: QueueSpec, job_id: str, message_id: str) -> tuple[str, Any]:
        """Claim a job whose message another broker delivered: ("start", (attempts made,
        attempts started, run token)), ("drop", None), ("later", ms) or ("failed", (reason,
        run token)). The run token, unique to this start, fences the run's finish and
        lock extensions; a redelivered message that takes over a stalled run gets a new
        one. Sent again after a lost reply (a client retry on a timeout), the call answers
        as its first send did: the claim id it carries is its own."""
        rate_max, window_ms = (0, 0)
        if spec.rate_limit is not None:
            rate_max, window_ms = spec.rate_limit[0], _ms(spec.rate_limit[1])
        raw = self._scripts["start"](args=[self.base(spec.name), self.now_ms(),
                                           _ms(spec.lock_duration), job_id, message_id,
                                           rate_max, window_ms, new_token(), GROUP_WAIT_MS,
                                           *_group_args(spec)])
        verdict = _text(raw[0])
        if verdict == "start":
            return "start", (int(raw[1]), int(raw[2]), _text(raw[3]))
        if verdict == "later":
            return "later", int(raw[1])
        if verdict == "failed":
            return "failed", (_text(raw[1]), _text(raw[2]))
        return "drop", None

    # -- reading --------------------------------------------------------------------------
    def counts(self, queue: str) -> dict[str, int]:
        """Jobs per state; waiting jobs count as paused while the queue is paused."""
        base = self.base(queue)
        pipe = self.client.pipeline(transaction=False)
        for key in ("wait", "parked", "active", "delayed", "completed", "failed"):
            pipe.zcard(base + key)
        pipe.hget(base + "meta", "paused")
        ready, parked, active, delayed, completed, failed, paused = pipe.execute()
        waiting = ready + parked  # a parked job waits for its group's slot
        is_paused = _text(paused) == "1"
        return {"waiting": 0 if is_paused else waiting, "active": active, "delayed": delayed,
                "completed": completed, "failed": failed,
                "paused": waiting if is_paused else 0}

    def metrics(self, queue: str) -> dict[str, int]:
        """Lifetime counters of one queue (completed, failed, retried, deduplicated, …)."""
        raw = self.client.hgetall(self.base(queue) + "metrics")
        return {_text(k) or "": int(v) for k, v in raw.items()}

    def get(self, queue: str, job_id: str) -> Job | None:
        """One job's record, or None when it does not exist (any more)."""
        return self._jobs(queue, [job_id])[0]

    def _jobs(self, queue: str, ids: Sequence[str]) -> list[Job | None]:
        base = self.base(queue)
        pipe = self.client.pipeline(transaction=False)
        for job_id in ids:
            pipe.hgetall(base + "job:" + job_id)
        pipe.hget(base + "meta", "paused")
        *records, paused = pipe.execute()
        return [self._job(queue, job_id, record, _text(paused) == "1")
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

    def failed_since(self, queue: str, since_ms: int, *, page_size: int = FAILED_PAGE) -> int:
        """How many jobs failed at or after ``since_ms``: the failed set is paged newest
        first and the count stops at the first record older than the cutoff, so retained
        older failures cost nothing and never count."""
        key = self.base(queue) + "failed"
        counted, start = 0, 0
        while True:
            page = self.client.zrevrange(key, start, start + page_size - 1, withscores=True)
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
        minute = (self.now_ms() if now is None else now) // 60_000
        first = minute - minutes + 1
        pipe = self.client.pipeline(transaction=False)
        for m in range(first, minute + 1):
            pipe.hmget(self.base(queue) + f"tp:{m}", "c", "f")
        return [(m * 60_000, int(c or 0), int(f or 0))
                for m, (c, f) in zip(range(first, minute + 1), pipe.execute(), strict=True)]

    def find_job_ids(self, queue: str, prefix: str, *, limit: int = 20) -> list[str]:
        """Ids of this queue's jobs that start with ``prefix`` (at most ``limit``, sorted).
        A SCAN of the queue's job keys: an operator's search, not a hot path."""
        base = self.base(queue) + "job:"
        pattern = _glob_escape(base + prefix) + "*"
        found: set[str] = set()
        for key in self.client.scan_iter(match=pattern, count=BULK_CHUNK):
            found.add((_text(key) or "")[len(base):])
            if len(found) >= limit:
                break
        return sorted(found)

    def find_job_refs(self, prefix: str, queues: Collection[str], *, limit: int = 50,
                      ) -> list[tuple[str, str]]:
        """``(queue, job id)`` of jobs in any of ``queues`` whose id starts with ``prefix``
        (at most ``limit``, sorted): one SCAN over the keyspace for every queue at once."""
        head = f"{self.prefix}:{{"
        pattern = _glob_escape(head) + "*" + _glob_escape("}:job:" + prefix) + "*"
        found: set[tuple[str, str]] = set()
        for raw in self.client.scan_iter(match=pattern, count=BULK_CHUNK):
            # a queue name has no braces, so the first "}:job:" ends it
            name, _, job_id = (_text(raw) or "")[len(head):].partition("}:job:")
            if name in queues and job_id.startswith(prefix):
                found.add((name, job_id))
                if len(found) >= limit:
                    break
        return sorted(found)

    def group_counts(self, queue: str) -> dict[str, int]:
        """Jobs active now per group key (groups with none active are left out)."""
        raw = self.client.hgetall(self.base(queue) + "groups")
        return {_text(k) or "": int(v) for k, v in raw.items() if int(v) > 0}

    def is_paused(self, queue: str) -> bool:
        """True while the queue is paused."""
        return _text(self.client.hget(self.base(queue) + "meta", "paused")) == "1"

    def job_ids(self, queue: str, state: JobState, start: int, stop: int) -> list[str]:
        """Ids in one state, newest first, positions start..stop inclusive (-1: the last).
        Waiting (or paused) jobs include the parked ones, in their wait order."""
        if state not in (JobState.WAITING, JobState.PAUSED):
            raw = self.client.zrevrange(self.base(queue) + state.value, start, stop)
            return [_text(i) or "" for i in raw]
        if self.is_paused(queue) != (state is JobState.PAUSED):
            return []
        return self._waiting_ids(queue, start, stop)

    def _waiting_ids(self, queue: str, start: int, stop: int) -> list[str]:
        """Positions start..stop of the wait and parked sets merged, newest (highest wait
        score) first: each set's first stop + 1 are enough to fill the page."""
        base = self.base(queue)
        pipe = self.client.pipeline(transaction=False)
        for key in ("wait", "parked"):
            pipe.zrevrange(base + key, 0, stop, withscores=True)
        ready, parked = pipe.execute()
        merged = heapq.merge(ready, parked, key=lambda row: row[1], reverse=True)
        end = None if stop < 0 else stop + 1
        return [_text(i) or "" for i, _ in itertools.islice(merged, start, end)]

    def jobs(self, queue: str, state: JobState, *, page: int = 1, per_page: int = 50,
             ) -> list[Job]:
        """One page of jobs in ``state``, newest first (pages count from 1)."""
        if page < 1 or per_page < 1:
            raise ValueError("page and per_page start at 1")
        start = (page - 1) * per_page
        ids = self.job_ids(queue, state, start, start + per_page - 1)
        return [job for job in self._jobs(queue, ids) if job is not None] if ids else []

    # -- operating ------------------------------------------------------------------------
    def retry(self, queue: str, job_id: str, message_id: str = "") -> bool:
        """Retry a failed job in place; False when the job is not failed. ``message_id``
        names the message that will carry it (RabbitMQ). Sent again after a lost reply
        (a client retry on a timeout), the call still answers True."""
        return bool(self._scripts["retry"](args=[self.base(queue), self.now_ms(), job_id,
                                                 message_id]))

    def remove(self, queue: str, job_ids: Sequence[str]) -> int:
        """Remove jobs that are not active; their dedup keys are released. Returns how many.
        Sent again after a lost reply (a client retry on a timeout), the call answers the
        first send's count and removes nothing more (not even a job re-added meanwhile)."""
        if not job_ids:
            return 0
        return int(self._scripts["remove"](args=[self.base(queue), new_token(),
                                                 REPLY_KEPT_MS, *job_ids]))

    def set_paused(self, queue: str, paused: bool) -> None:
        """Pause or resume the queue (workers stop or start taking its jobs)."""
        base = self.base(queue)
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
        rows: list[tuple[str, str, str, int, str]] = []
        after: str = "-inf"
        while True:
            chunk, last = self._scripts["reissue"](args=[self.base(queue), self.now_ms(),
                                                         token_prefix, after, BULK_CHUNK,
                                                         len(rows)])
            rows += [(_text(r[0]) or "", _text(r[1]) or "", _text(r[2]) or "null", int(r[3]),
                      _text(r[4]) or "") for r in chunk]
            if last is None or len(chunk) < BULK_CHUNK:
                return rows
            after = _text(last) or "-inf"

    def _remove_set(self, queue: str, key: str, max_score: float | str = "+inf") -> int:
        removed = 0
        while True:
            ids = self.client.zrangebyscore(self.base(queue) + key, "-inf", max_score,
                                            start=0, num=BULK_CHUNK)
            if not ids:
                return removed
            count = self.remove(queue, [_text(i) or "" for i in ids])
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
        cutoff = self.now_ms() - _ms(older_than)
        if state is JobState.DELAYED:
            # a delayed job's score is when it runs; age is measured from its creation
            ids = [i for i in self.job_ids(queue, state, 0, -1)
                   if (job := self.get(queue, i)) and job.created_at
                   and job.created_at.timestamp() * 1000 <= cutoff]
            return self.remove(queue, ids)
        return self._remove_set(queue, state.value, cutoff)

    def prune(self, spec: QueueSpec) -> int:
        """Apply the queue's retention now (also done lazily on every terminal event)."""
        removed = 0
        for state, keep in ((JobState.COMPLETED, spec.retention.completed),
                            (JobState.FAILED, spec.retention.failed)):
            key = self.base(spec.name) + state.value
            if keep.age is not None:
                removed += self._remove_set(spec.name, state.value, self.now_ms() - _ms(keep.age))
            if keep.count is not None:
                excess = self.client.zcard(key) - keep.count
                while excess > 0:
                    ids = self.client.zrange(key, 0, min(excess, BULK_CHUNK) - 1)
                    count = self.remove(spec.name, [_text(i) or "" for i in ids])
                    if count == 0:
                        break
                    removed += count
                    excess -= count
        return removed

    def obliterate(self, queue: str) -> int:
        """Delete the queue's every key, active jobs included. Returns keys deleted."""
        deleted = 0
        for key in self.client.scan_iter(match=_glob_escape(self.base(queue)) + "*",
                                         count=BULK_CHUNK):
            deleted += self.client.delete(key)
        return deleted
