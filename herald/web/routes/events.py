"""``POST /v1/events``: a domain event becomes a notification and its deliveries
(README.md, "The HTTP API"). The work is in ``actors.orchestration``; a malformed event is
answered 422 before anything touches the database or a queue."""

from __future__ import annotations

from typing import Any, Literal

from fastapi.responses import JSONResponse
from pydantic import BaseModel, ConfigDict, Field

from actors import orchestration
from herald.web.auth import protected_router
from herald.web.errors import api_error

router = protected_router(["events"])


class EventIn(BaseModel):
    """A domain event for one account. ``data`` is checked against the type's model;
    ``transactional`` null (or absent) keeps the type's own category."""

    model_config = ConfigDict(extra="forbid")
    type: str = Field(max_length=64)
    account_id: str = Field(min_length=1, max_length=36)
    occurrence: str = Field(min_length=1, max_length=255)
    data: dict[str, Any] = Field(default_factory=dict)
    urgency: Literal["normal", "urgent"] = "normal"
    transactional: bool | None = None
    channels: list[Literal["email", "sms", "in_app", "push"]] | None = Field(
        default=None, min_length=1, max_length=4)


@router.post("/events", status_code=202, summary="Accept a domain event")
def post_event(body: EventIn) -> JSONResponse:
    """202 with the new notification; 200 with the existing one for a repeated occurrence."""
    try:
        result = orchestration.trigger_event(**body.model_dump())
    except orchestration.InvalidEvent as error:
        raise api_error(422, "invalid_event", str(error)) from None
    except orchestration.AccountNotFound:
        raise api_error(404, "account_not_found", f"no account {body.account_id}") from None
    return JSONResponse(orchestration.notification_view(result),
                        status_code=202 if result.created else 200)
