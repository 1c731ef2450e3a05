"""``/healthz`` (liveness, no I/O), ``/readyz`` (database, Redis, broker: ``ok`` or
``down``, the reasons only for a caller with the token) and ``/metrics`` (Prometheus,
behind METRICS_TOKEN while it is set) of the web process."""

from __future__ import annotations

from typing import Literal

from fastapi import APIRouter, Depends, Request
from fastapi.responses import JSONResponse, Response
from pydantic import BaseModel

from herald.health import (
    CONTENT_TYPE,
    OK,
    check_readiness,
    is_ready,
    metrics_text,
    readiness_report,
)
from herald.web.auth import check_metrics_token, has_api_access, metrics_scheme

router = APIRouter(tags=["health"])


# Load balancers probe with HEAD: the GET's status and headers, no body (Starlette's
# responses send only the headers to a HEAD request). HEAD is its own route so that each
# operation has an id of its own in the OpenAPI document.
@router.get("/healthz", summary="Liveness: the process answers (no I/O)")
@router.head("/healthz", summary="Liveness, headers only", operation_id="healthz_head")
async def healthz() -> dict[str, str]:
    """Always ``{"status": "ok"}`` while the process serves requests."""
    return {"status": OK}


class Readiness(BaseModel):
    """Each dependency's state, ``ok`` or ``down``; ``errors`` (each failed check's reason,
    which may name a host or port) only for a caller that passes the ``/v1`` check."""

    database: Literal["ok", "down"]
    redis: Literal["ok", "down"]
    broker: Literal["ok", "down"]
    errors: dict[str, str] | None = None


READINESS_RESPONSES: dict[int | str, dict[str, object]] = {
    200: {"model": Readiness, "description": "Every check passed"},
    503: {"model": Readiness, "description": "A check failed; the body names it"}}


@router.get("/readyz", summary="Readiness: database, Redis and broker", response_model=None,
            responses=READINESS_RESPONSES)
@router.head("/readyz", summary="Readiness, headers only", response_model=None,
             responses=READINESS_RESPONSES, operation_id="readyz_head")
def readyz(request: Request) -> JSONResponse:
    """Each dependency ``ok`` or ``down``, with the reasons for a caller ``/v1`` would let
    in (its token, or loopback while API_TOKEN is unset); 200 when all pass, 503
    otherwise."""
    checks = check_readiness()
    return JSONResponse(readiness_report(checks, detailed=has_api_access(request)),
                        status_code=200 if is_ready(checks) else 503)


@router.get("/metrics", summary="Prometheus metrics, the queues' included",
            response_class=Response, dependencies=[Depends(metrics_scheme)])
def metrics(request: Request) -> Response:
    """This process's metrics and every registry queue's counts (``queue_depth`` by queue
    and state, ``queue_jobs_total`` by outcome) in the Prometheus text format: the same
    text a worker's health port serves. A 401 without ``Authorization: Bearer
    <METRICS_TOKEN>`` while METRICS_TOKEN is set."""
    check_metrics_token(request)
    return Response(metrics_text(), media_type=CONTENT_TYPE)
