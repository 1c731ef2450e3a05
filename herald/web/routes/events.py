"""``POST /v1/events``: a domain event becomes a notification and its deliveries
(docs/api.md, "Accounts and events"). The work is in ``actors.orchestration``; a malformed event is
answered 422 before anything touches the database or a queue.

``POST /v1/events/bulk`` does the same for up to 1,000 events in one request, each
answered with its own status, in order (docs/pipeline.md#bulk-events).

An event of a digested type joins its digest instead (``actors.digests``): 202 with
``digest: {id, closes_at, items}`` (docs/api.md#digests)."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from actors import digests, orchestration
from herald.text import JSON_TEXT, SingleLine
from herald.web.auth import protected_router
from herald.web.coalesce import Coalescer
from herald.web.errors import (
    INVALID_VALUE,
    ErrorDetail,
    error_body,
    not_found_message,
    validation_error_body,
)
from herald.web.fast_json import FastJSONResponse

router = protected_router(["events"])


class EventIn(BaseModel):
    """A domain event for one account. ``data`` is checked against the type's model;
    ``transactional`` null (or absent) keeps the type's own category."""

    model_config = ConfigDict(extra="forbid")
    type: SingleLine = Field(max_length=64)
    account_id: SingleLine = Field(min_length=1, max_length=36)
    occurrence: SingleLine = Field(min_length=1, max_length=255)
    #: Its strings may span lines (tab, LF, CRLF); no other control character.
    data: Annotated[dict[str, Any], JSON_TEXT] = Field(default_factory=dict)
    urgency: Literal["normal", "urgent"] = "normal"
    transactional: bool | None = None
    channels: list[Literal["email", "sms", "in_app", "push"]] | None = Field(
        default=None, min_length=1, max_length=4)


#: Each process accepts the events of its concurrent requests together: one batch of
#: :func:`orchestration.trigger_events` at a time, in a thread of its own, while the next
#: gathers (herald/web/coalesce.py).
_accepting = Coalescer(digests.trigger_events, max_batch=orchestration.MAX_BULK_EVENTS,
                       name="herald-events")


@router.post("/events", status_code=202, summary="Accept a domain event")
async def post_event(body: EventIn) -> FastJSONResponse:
    """202 with the new notification; 200 with the existing one for a repeated occurrence."""
    answer = _answer(body, await _accepting.submit(body.model_dump()))
    status = answer.pop("status")
    if "digest" in answer:
        return FastJSONResponse(answer, status_code=status)
    return FastJSONResponse(answer.get("notification") or answer, status_code=status)


class EventsIn(BaseModel):
    """Up to 1,000 events, each an :class:`EventIn`.

    The elements are validated one by one, in the route, not here: a malformed one is
    answered with its own 422 and does not fail the others."""

    model_config = ConfigDict(extra="forbid")
    events: list[Any] = Field(
        min_length=1, max_length=orchestration.MAX_BULK_EVENTS,
        # the schema still says what each element must be
        json_schema_extra={"items": {"$ref": "#/components/schemas/EventIn"}})


class EventAnswer(BaseModel):
    """One event's answer: ``status`` as ``POST /v1/events`` would answer it alone (202
    new, 200 existing, 4xx refused) with its ``notification`` (and its ``digest``, for a
    digested type) or its ``error``."""

    status: int
    notification: dict[str, Any] | None = None
    digest: dict[str, Any] | None = None
    error: ErrorDetail | None = None


class EventsOut(BaseModel):
    """The events' answers, in the order of the request."""

    results: list[EventAnswer]


@router.post("/events/bulk", summary="Accept many domain events",
             responses={200: {"model": EventsOut,
                              "description": "Each event's own answer, in order"}})
def post_events(body: EventsIn) -> FastJSONResponse:
    """200 with one answer per event, in order: 202 and the notification for a new one,
    200 and the existing one for a repeated occurrence (also within the request), or a
    4xx error of its own (422 ``validation_error``, ``invalid_event`` or
    ``invalid_value``; 404 ``account_not_found``) — one refused event never fails the
    others. Zero or over 1,000 events: 422 for the whole request, nothing written."""
    results: list[dict[str, Any] | None] = [None] * len(body.events)
    valid: list[tuple[int, EventIn]] = []
    for index, element in enumerate(body.events):
        try:
            valid.append((index, EventIn.model_validate(element)))
        except ValidationError as error:
            # located as if the whole body had been refused: body.events.<index>.<field>
            errors = [{**problem, "loc": ("body", "events", index, *problem["loc"])}
                      for problem in error.errors(include_url=False, include_input=False)]
            results[index] = {"status": 422, **validation_error_body(errors)}
    outcomes = digests.trigger_events([event.model_dump() for _, event in valid])
    for (index, event), outcome in zip(valid, outcomes, strict=True):
        results[index] = _answer(event, outcome)
    return FastJSONResponse({"results": results})


def _answer(event: EventIn, outcome: orchestration.EventOutcome | digests.DigestResult
            ) -> dict[str, Any]:
    """One event's answer, with the status and error ``POST /v1/events`` gives it."""
    if isinstance(outcome, digests.DigestResult):
        return {"status": 202 if outcome.created else 200, **digests.digest_view(outcome)}
    if isinstance(outcome, orchestration.EventResult):
        return {"status": 202 if outcome.created else 200,
                "notification": orchestration.notification_view(outcome)}
    if isinstance(outcome, orchestration.InvalidEvent):
        return {"status": 422, **error_body("invalid_event", str(outcome))}
    if isinstance(outcome, orchestration.AccountNotFound):
        return {"status": 404, **error_body("account_not_found",
                                            not_found_message("account", event.account_id))}
    return {"status": 422, **error_body(*INVALID_VALUE)}
