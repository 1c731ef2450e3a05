"""The operator console's work apart from HTTP (docs/console.md): queue health rows, job
views, throughput history, audited actions and the audit log.

Every queue name is checked against the registry first: a name outside it is a 404
``unknown_queue``, never an empty answer, so the console cannot drift away from the queues
herald actually runs.
"""

from __future__ import annotations

import asyncio
import itertools
import json
from collections.abc import AsyncIterator, Callable
from datetime import UTC, datetime, timedelta
from typing import Any

from prometheus_client import Gauge
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request

from herald import db
from herald.queue import (
    Job,
    JobState,
    Queue,
    QueueSpec,
    UnknownQueue,
    current_app,
    queue,
)
from herald.web.errors import api_error, error_body
from models.audit import ADMIN_ACTOR, AuditEntry, begin_audit, complete_audit, recent_audit

#: Failures younger than this count as recent (``failed_24h``); older retained ones stay
#: inspectable but do not flag the queue.
RECENT_FAILURES = timedelta(hours=24)
#: Seconds between two events of the live stream.
STREAM_INTERVAL_S = 5.0
#: Seconds between two checks, while the stream waits, that its client is still there.
DISCONNECT_POLL_S = 0.25
#: Characters of a payload (as JSON text) a job list shows; the job's own route shows all.
LIST_DATA_CHARS = 500
#: Characters of a stack trace or failure reason a job list shows.
LIST_STACK_CHARS = 1000
#: Jobs per page of a job list (unless asked otherwise) and audit rows per page.
PER_PAGE = 50
#: States ``clean`` takes (records aged by when they finished, or were created).
CLEANABLE = (JobState.COMPLETED, JobState.FAILED, JobState.DELAYED)

#: Live-stream clients connected right now (served on ``/metrics``): a client that went
#: away must leave this gauge, or it would keep costing a Redis read every interval.
LIVE_STREAMS = Gauge("herald_admin_streams",
                     "Clients of the operator console's live stream connected now.")


# -- queues --------------------------------------------------------------------------------
def known_queue(name: str) -> Queue:
    """The registry queue ``name``; a 404 ``unknown_queue`` for a name outside it."""
    try:
        return queue(name)
    except UnknownQueue:
        raise api_error(404, "unknown_queue", f"no queue {name} in the registry") from None


def _iso(moment: datetime | None) -> str | None:
    return None if moment is None else moment.isoformat()


def _rate_limit(spec: QueueSpec) -> dict[str, float] | None:
    if spec.rate_limit is None:
        return None
    count, window = spec.rate_limit
    return {"max": count, "per_s": window.total_seconds()}


def health_row(spec: QueueSpec) -> dict[str, Any]:
    """One queue's row: counts per state, failures within :data:`RECENT_FAILURES`, the
    registry's concurrency and rate limit, and whether it is paused."""
    q = queue(spec.name)
    return {"name": spec.name, **q.counts(),
            "failed_24h": q.failed_within(RECENT_FAILURES),
            "concurrency": spec.concurrency, "rate_limit": _rate_limit(spec),
            "is_paused": q.is_paused()}


def health_snapshot() -> dict[str, Any]:
    """``{"queues": [row…], "generated_at"}``: a row per registry queue, in registry order."""
    return {"queues": [health_row(spec) for spec in current_app().specs()],
            "generated_at": datetime.now(UTC).isoformat()}


# -- the live stream ---------------------------------------------------------------------
def _health_event() -> str:
    """One Server-Sent Event: the snapshot, or an ``error`` event while Redis is away (the
    stream stays open and tries again at the next interval)."""
    try:
        return f"data: {json.dumps(health_snapshot())}\n\n"
    except (RedisConnectionError, RedisTimeoutError):
        body = error_body("unavailable", "the redis is unavailable")
        return f"event: error\ndata: {json.dumps(body)}\n\n"


async def _client_left_within(request: Request, seconds: float) -> bool:
    """Wait ``seconds``; True as soon as the client disconnects (checked every
    :data:`DISCONNECT_POLL_S`)."""
    deadline = asyncio.get_running_loop().time() + seconds
    while (remaining := deadline - asyncio.get_running_loop().time()) > 0:
        if await request.is_disconnected():
            return True
        await asyncio.sleep(min(DISCONNECT_POLL_S, remaining))
    return await request.is_disconnected()


async def health_events(request: Request, limit: int | None = None) -> AsyncIterator[str]:
    """The snapshot at once, then every :data:`STREAM_INTERVAL_S`, until the client goes
    away (or ``limit`` events were sent): the wait notices a disconnect, and cancellation
    ends the stream too. Snapshots are read off the event loop. Counted in
    :data:`LIVE_STREAMS` while it runs."""
    LIVE_STREAMS.inc()
    try:
        for sent in itertools.count(1):
            yield await run_in_threadpool(_health_event)
            if sent == limit or await _client_left_within(request, STREAM_INTERVAL_S):
                return
    finally:
        LIVE_STREAMS.dec()


# -- jobs ----------------------------------------------------------------------------------
def _cut(text: str | None, limit: int) -> tuple[str | None, bool]:
    if text is None or len(text) <= limit:
        return text, False
    return text[:limit], True


def _timestamps(job: Job) -> dict[str, str | None]:
    return {"created": _iso(job.created_at), "processed": _iso(job.processed_at),
            "finished": _iso(job.finished_at), "run_at": _iso(job.run_at)}


def job_summary(job: Job) -> dict[str, Any]:
    """A job as a list shows it: the payload as JSON text cut to :data:`LIST_DATA_CHARS`,
    the failure reason and stack trace cut to :data:`LIST_STACK_CHARS`; ``truncated``
    says whether anything was cut."""
    data, data_cut = _cut(json.dumps(job.payload), LIST_DATA_CHARS)
    reason, reason_cut = _cut(job.failed_reason, LIST_STACK_CHARS)
    stack, stack_cut = _cut(job.stacktrace, LIST_STACK_CHARS)
    return {"id": job.id, "state": job.state.value, "actor": job.actor,
            "priority": job.priority, "attempts_made": job.attempts_made, "data": data,
            "failed_reason": reason, "stacktrace": stack,
            "truncated": data_cut or reason_cut or stack_cut, "timestamps": _timestamps(job)}


def job_detail(job: Job) -> dict[str, Any]:
    """The whole job: payload, attempts, failure reason, full stack trace, return value,
    dedup id and timestamps."""
    return {"id": job.id, "queue": job.queue, "state": job.state.value, "actor": job.actor,
            "data": job.payload, "priority": job.priority, "attempts_made": job.attempts_made,
            "attempts_started": job.attempts_started, "failed_reason": job.failed_reason,
            "stacktrace": job.stacktrace, "return_value": job.return_value,
            "dedup_id": job.dedup_id, "timestamps": _timestamps(job)}


def job_page(name: str, state: JobState, page: int, per_page: int) -> dict[str, Any]:
    """One page of a queue's jobs in ``state``, newest first; ``total`` is the state's
    count."""
    q = known_queue(name)
    jobs = q.jobs(state, page=page, per_page=per_page)
    return {"jobs": [job_summary(job) for job in jobs], "page": page, "per_page": per_page,
            "total": q.counts()[state.value]}


def known_job(q: Queue, job_id: str) -> Job:
    """A job of queue ``q``; 404 ``unknown_job`` when it has none of that id."""
    job = q.get(job_id)
    if job is None:
        raise api_error(404, "unknown_job", f"no job {job_id} in queue {q.name}")
    return job


def history(name: str) -> dict[str, Any]:
    """Completed and failed jobs per minute of the last hour, oldest minute first."""
    minutes = known_queue(name).history()
    return {"queue": name, "minutes": [{"at": at.isoformat(), "completed": completed,
                                        "failed": failed}
                                       for at, completed, failed in minutes]}


# -- audited actions -----------------------------------------------------------------------
def audited(action: str, *, queue_name: str, job_id: str | None, detail: dict[str, Any],
            work: Callable[[], int]) -> int:
    """Run ``work`` (which returns how many things it touched) between two audit writes:
    the row is committed before it runs and completed with its count after; when it
    raises, the row is completed with the error and the error goes on."""
    target = queue_name if job_id is None else f"{queue_name}/{job_id}"
    with db.session() as session:
        audit_id = begin_audit(session, actor=ADMIN_ACTOR, action=action, target=target,
                               queue=queue_name, job_id=job_id, detail=detail)
    try:
        count = work()
    except Exception as error:
        with db.session() as session:
            complete_audit(session, audit_id, count=0, error=f"{type(error).__name__}: {error}")
        raise
    with db.session() as session:
        complete_audit(session, audit_id, count=count)
    return count


def _set_paused(q: Queue, paused: bool) -> int:
    """Pause or resume; 1 when that changed the queue, 0 when it already was so."""
    if q.is_paused() == paused:
        return 0
    (q.pause if paused else q.resume)()
    return 1


def _obliterate(q: Queue) -> int:
    """Delete the queue's every key; returns the jobs it held."""
    held = sum(q.counts().values())
    q.obliterate()
    return held


def _queue_work(q: Queue, verb: str, parameters: dict[str, Any]) -> Callable[[], int]:
    """What ``verb`` does to ``q`` with its checked ``parameters``; returns its count."""
    works: dict[str, Callable[[], int]] = {
        "retry": q.retry_all_failed,
        "remove": lambda: q.remove_all(parameters["state"]),
        "pause": lambda: _set_paused(q, True),
        "resume": lambda: _set_paused(q, False),
        "drain": q.drain,
        "clean": lambda: q.clean(parameters["state"],
                                 timedelta(seconds=parameters["grace_s"])),
        "obliterate": lambda: _obliterate(q),
    }
    return works[verb]


def _action_parameters(verb: str, state: JobState | None,
                       grace_s: float | None) -> dict[str, Any]:
    """The parameters ``verb`` runs with (defaults filled in); 422 for a parameter it does
    not take or a state it cannot act on."""
    if verb == "remove":
        if state is None or state is JobState.ACTIVE or grace_s is not None:
            raise api_error(422, "invalid_action", "remove takes a state that is not active "
                            "(waiting, paused, delayed, completed or failed) and no grace_s")
        return {"state": state.value}
    if verb == "clean":
        state = state or JobState.COMPLETED
        if state not in CLEANABLE:
            raise api_error(422, "invalid_action",
                            "clean takes state completed, failed or delayed")
        return {"state": state.value, "grace_s": grace_s or 0}
    if state is not None or grace_s is not None:
        raise api_error(422, "invalid_action", f"{verb} takes no state or grace_s")
    return {}


def queue_action(name: str, verb: str, state: JobState | None,
                 grace_s: float | None) -> dict[str, Any]:
    """Run a bulk action on a registry queue, audited as ``queue.<verb>``; returns
    ``{"action", "queue", "count"}``. Bad parameters are refused before anything is
    written or changed."""
    q = known_queue(name)
    parameters = _action_parameters(verb, state, grace_s)
    count = audited(f"queue.{verb}", queue_name=name, job_id=None, detail=parameters,
                    work=_queue_work(q, verb, parameters))
    return {"action": verb, "queue": name, "count": count}


def job_action(name: str, job_id: str, verb: str) -> dict[str, Any]:
    """Retry (a failed job) or remove (a job that is not active), audited as
    ``job.<verb>``; 404 for an unknown queue or job, 409 for a job in a state the action
    does not take. ``count`` is 1, or 0 when the job moved on before the action ran."""
    q = known_queue(name)
    job = known_job(q, job_id)
    if verb == "retry" and job.state is not JobState.FAILED:
        raise api_error(409, "invalid_job_state",
                        f"job {job_id} is {job.state.value}: only a failed job is retried")
    if verb == "remove" and job.state is JobState.ACTIVE:
        raise api_error(409, "invalid_job_state", f"job {job_id} is active: it cannot be "
                        "removed while a worker runs it")
    run = q.retry if verb == "retry" else q.remove
    count = audited(f"job.{verb}", queue_name=name, job_id=job_id,
                    detail={"state": job.state.value}, work=lambda: int(run(job_id)))
    return {"action": verb, "queue": name, "count": count}


# -- the audit log -------------------------------------------------------------------------
def audit_view(entry: AuditEntry) -> dict[str, Any]:
    """One audit row as the API shows it."""
    return {"id": entry.id, "actor": entry.actor, "action": entry.action,
            "target": entry.target, "queue": entry.queue, "job_id": entry.job_id,
            "count": entry.count, "at": _iso(entry.at), "completed_at": _iso(entry.completed_at),
            "error": entry.error, "detail": entry.detail}


def audit_page(page: int, per_page: int = PER_PAGE) -> dict[str, Any]:
    """One page of the audit log, newest first."""
    with db.session() as session:
        entries = recent_audit(session, limit=per_page, offset=(page - 1) * per_page)
        return {"entries": [audit_view(entry) for entry in entries], "page": page,
                "per_page": per_page}
