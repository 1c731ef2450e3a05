"""The operator console's API: queue health (snapshot, live stream, throughput history),
jobs by state with drill-down, bulk actions and the audit log; all behind ADMIN_TOKEN
(docs/console.md). The work is in :mod:`herald.web.console`; routes only validate and
translate."""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated, Any

from fastapi import Query, Request
from fastapi.responses import StreamingResponse
from pydantic import BaseModel, ConfigDict, Field

from herald.queue import JobState
from herald.web import console
from herald.web.auth import admin_router

router = admin_router(tags=["admin"])

#: Far past any page a retained set fills; bounds the offset a caller can ask for.
MAX_PAGE = 100_000
Page = Annotated[int, Query(ge=1, le=MAX_PAGE, description="pages count from 1")]


class QueueVerb(StrEnum):
    """A bulk action on one queue."""

    RETRY = "retry"
    REMOVE = "remove"
    PAUSE = "pause"
    RESUME = "resume"
    DRAIN = "drain"
    CLEAN = "clean"
    OBLITERATE = "obliterate"


class JobVerb(StrEnum):
    """An action on one job."""

    RETRY = "retry"
    REMOVE = "remove"


class ActionIn(BaseModel):
    """A bulk action's parameters: ``state`` for remove (required) and clean (completed,
    failed or delayed; default completed), ``grace_s`` for clean (default 0)."""

    model_config = ConfigDict(extra="forbid")
    state: JobState | None = None
    #: clean removes only records older than this many seconds.
    grace_s: float | None = Field(default=None, ge=0, le=10 * 365 * 86400)


@router.get("/health/queues", summary="Every registry queue's health row")
def health_queues() -> dict[str, Any]:
    """``{"queues": [row…], "generated_at"}``: per queue its counts, ``failed_24h``,
    concurrency, rate limit and paused flag, in registry order."""
    return console.health_snapshot()


@router.get("/health/queues/stream", summary="The health rows, live (Server-Sent Events)",
            response_class=StreamingResponse,
            responses={200: {"content": {"text/event-stream": {}},
                             "description": "one `data:` event at once, then every 5 s"}})
async def health_stream(
        request: Request,
        events: Annotated[int | None, Query(ge=1, le=MAX_PAGE, description=(
            "end the stream after this many events (a script's look); none: until the "
            "client disconnects"))] = None,
) -> StreamingResponse:
    """``text/event-stream``: the same JSON as ``/health/queues`` at once, then every 5 s,
    until the client disconnects (or ``events`` were sent)."""
    return StreamingResponse(console.health_events(request, events),
                             media_type="text/event-stream",
                             headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"})


@router.get("/health/queues/{name}/jobs", summary="A queue's jobs in one state")
def queue_jobs(name: str, state: JobState = JobState.FAILED, page: Page = 1,
               per_page: Annotated[int, Query(ge=1, le=200)] = console.PER_PAGE,
               ) -> dict[str, Any]:
    """``{"jobs", "page", "per_page", "total"}``, newest first; payloads and stack traces
    truncated (``truncated: true``). ``state`` defaults to ``failed``."""
    return console.job_page(name, state, page, per_page)


@router.get("/health/queues/{name}/jobs/{job_id}", summary="One job, in full")
def queue_job(name: str, job_id: str) -> dict[str, Any]:
    """The whole job: payload, attempts, failure reason, full stack trace, timestamps."""
    return console.job_detail(console.known_job(console.known_queue(name), job_id))


@router.get("/health/queues/{name}/history", summary="Completed and failed per minute")
def queue_history(name: str) -> dict[str, Any]:
    """``{"queue", "minutes": [{"at", "completed", "failed"}…]}``: the last 60 minutes,
    oldest first."""
    return console.history(name)


@router.post("/health/queues/{name}/jobs/{job_id}/{verb}", summary="Retry or remove one job")
def job_action(name: str, job_id: str, verb: JobVerb) -> dict[str, Any]:
    """``{"action", "queue", "count"}`` (count 0 or 1), audited; 409 when the job is in a
    state the action does not take (retry: failed only; remove: not active)."""
    return console.job_action(name, job_id, verb.value)


@router.post("/health/queues/{name}/{verb}", summary="A bulk action on one queue")
def queue_action(name: str, verb: QueueVerb, body: ActionIn | None = None) -> dict[str, Any]:
    """``{"action", "queue", "count"}``, audited (the row is written before the action and
    completed with its count after). retry: every failed job; remove: every job in
    ``state``; pause/resume: 1 when it changed the queue; drain: waiting and delayed jobs;
    clean: ``state`` records older than ``grace_s``; obliterate: everything."""
    body = body or ActionIn()
    return console.queue_action(name, verb.value, body.state, body.grace_s)


@router.get("/audit", summary="The audit log, newest first")
def audit(page: Page = 1) -> dict[str, Any]:
    """``{"entries": [{"id", "actor", "action", "queue", "job_id", "count", "at",
    "completed_at", "error", "detail"}…], "page", "per_page"}``."""
    return console.audit_page(page)
