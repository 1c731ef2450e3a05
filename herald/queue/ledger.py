"""The job ledger: every job's record and state in Redis, each transition one Lua script.

This module holds the records and the transitions the brokers and workers make (add,
cycle, start). What an operator reads of the ledger is in ``ledger_queries.py``; what an
operator does to it (retry, remove, pause, drain, clean, obliterate) in ``ledger_admin.py``.

This module knows queues and jobs, nothing about what the jobs do. On the Redis broker
the ledger *is* the broker (its wait set is what workers fetch from); on RabbitMQ the
messages travel through RabbitMQ and the ledger records their state and fences them with
the token of each run. Scripts live in ``herald/queue/lua/`` and run with EVALSHA (Redis 6.2+).
"""

from __future__ import annotations

import dataclasses
import itertools
import uuid
from collections.abc import Iterable, Sequence
from datetime import datetime, timedelta
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
#: Jobs per ``add`` round trip of :func:`~herald.queue.enqueue_many`.
ADD_CHUNK = 1000
#: Records touched per script call by drain, clean and obliterate.
BULK_CHUNK = 1000
#: Minutes of throughput history kept per queue (the per-minute keys expire after it).
HISTORY_MINUTES = 60
#: How long a RabbitMQ message of a job whose group is at its limit waits before it is
#: delivered again (ms).
GROUP_WAIT_MS = 500


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
    #: Deferred, and the run's start given back (``Defer(count_start=False)``).
    DEFERRED_UNCOUNTED = "u"
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


def ms_of(value: timedelta | None) -> int:
    """``value`` in whole milliseconds, as the scripts take it; None is -1 (no limit)."""
    return -1 if value is None else int(value.total_seconds() * 1000)


def _keep_args(keep: Keep) -> list[int]:
    return [-1 if keep.count is None else keep.count, ms_of(keep.age)]


@cache
def _source(name: str) -> str:
    common = (LUA_DIR / "common.lua").read_text()
    return common + "\n" + (LUA_DIR / f"{name}.lua").read_text()


def text_of(value: bytes | str | None) -> str | None:
    """A Redis reply as text (None stays None)."""
    if value is None:
        return None
    return value.decode() if isinstance(value, bytes) else value


def glob_escape(text: str) -> str:
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
    return AddResult(status=AddStatus(text_of(status) or ""), job_id=text_of(job_id) or "",
                     reissued=Reissued(actor=text_of(actor) or "", data=text_of(data) or "null",
                                       priority=int(priority), run_at_ms=int(run_at)))


class Ledger:
    """Job records of every queue under one key prefix, on one Redis client."""

    def __init__(self, client: redis.Redis, prefix: str = "herald", *,
                 time: QueueTime | None = None, connections: ThreadConnections | None = None,
                 ) -> None:
        self.client = client
        self.prefix = prefix
        #: the "now" of every time this ledger stores or compares
        self.time = time or QueueTime()
        self._scripts = {name: client.register_script(_source(name))
                         for name in ("add", "cycle", "start", "retry", "remove", "reissue")}
        #: each thread's own connection for its script calls (see :meth:`_run_own`)
        self._own = connections or ThreadConnections(client)

    def now_ms(self) -> int:
        """Milliseconds since the epoch in this ledger's queue time."""
        return self.time.now_ms()

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
        return self.add_many_queues([(queue, jobs)], client=client)[0]

    def add_many_queues(self, per_queue: Sequence[tuple[str, Sequence[NewJob]]], *,
                        client: Any = None) -> list[list[AddResult]]:
        """Add the jobs of several actors, each list of one actor in one queue, in one round
        trip (one script call); the results come back per list, as :meth:`add` gives them."""
        filled = [(queue, jobs) for queue, jobs in per_queue if jobs]
        if not filled:
            return [[] for _ in per_queue]
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
        return [[AddResult(status=_ADD_STATUSES[row[0]], job_id=text_of(row[1]) or "")
                 if len(row) == 2 else _reissued_result(row)
                 for row in itertools.islice(raw, len(jobs))]
                for _, jobs in per_queue]

    # -- consuming ------------------------------------------------------------------------
    @staticmethod
    def cycle_config(spec: QueueSpec) -> list[Any]:
        """The queue's fixed arguments of the cycle script (a consumer computes them once)."""
        rate_max, window_ms = (0, 0)
        if spec.rate_limit is not None:
            rate_max, window_ms = spec.rate_limit[0], ms_of(spec.rate_limit[1])
        return [ms_of(spec.lock_duration), rate_max, window_ms, STALL_CHECK_MS,
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
        finished = [Verdict(job_id=text_of(f[0]) or "", result=text_of(f[1]) or "",
                             run_at_ms=int(f[2]),
                             actor=text_of(f[3]) or "" if len(f) > 3 else "",
                             data=text_of(f[4]) or "" if len(f) > 4 else "",
                             reason=text_of(f[5]) or "" if len(f) > 5 else "")
                    for f in finished_raw]
        started = [StartedJob(id=text_of(s[0]) or "", actor=text_of(s[1]) or "",
                              data=text_of(s[2]) or "null", token=text_of(s[3]) or "",
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

    def call(self, name: str, args: Sequence[Any]) -> Any:
        """Run one of the ledger's scripts through the client (its pool and retries): the
        operator's calls (``ledger_admin.py``), which are not hot paths."""
        return self._scripts[name](args=args)

    def start(self, spec: QueueSpec, job_id: str, message_id: str) -> tuple[str, Any]:
        """Claim a job whose message another broker delivered: ("start", (attempts made,
        attempts started, run token)), ("drop", None), ("later", ms) or ("failed", (reason,
        run token)). The run token, unique to this start, fences the run's finish and
        lock extensions; a redelivered message that takes over a stalled run gets a new
        one. Sent again after a lost reply (a client retry on a timeout), the call answers
        as its first send did: the claim id it carries is its own."""
        rate_max, window_ms = (0, 0)
        if spec.rate_limit is not None:
            rate_max, window_ms = spec.rate_limit[0], ms_of(spec.rate_limit[1])
        raw = self._scripts["start"](args=[self.base(spec.name), self.now_ms(),
                                           ms_of(spec.lock_duration), job_id, message_id,
                                           rate_max, window_ms, new_token(), GROUP_WAIT_MS,
                                           *_group_args(spec)])
        verdict = text_of(raw[0])
        if verdict == "start":
            return "start", (int(raw[1]), int(raw[2]), text_of(raw[3]))
        if verdict == "later":
            return "later", int(raw[1])
        if verdict == "failed":
            return "failed", (text_of(raw[1]), text_of(raw[2]))
        return "drop", None
