"""The ``/v1/batches`` HTTP API (docs/pipeline.md#batches); the work is in ``actors.batches``.

Routes only validate and translate: a malformed batch is answered 422 before anything is
persisted or enqueued.
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter
from pydantic import AwareDatetime, BaseModel, ConfigDict, Field, field_validator

from actors import batches
from herald.text import JSON_TEXT, SINGLE_LINE, SingleLine
from herald.web.auth import protected_router
from herald.web.errors import api_error, found, not_found

router: APIRouter = protected_router(["batches"])


class BatchIn(BaseModel):
    """One event type for many accounts, now (``scheduled_at`` null) or at a time."""

    model_config = ConfigDict(extra="forbid")
    type: SingleLine = Field(max_length=64)
    account_ids: list[Annotated[str, Field(min_length=1, max_length=36), SINGLE_LINE]]
    #: Its strings may span lines (tab, LF, CRLF); no other control character.
    data: Annotated[dict[str, Any], JSON_TEXT] = Field(default_factory=dict)
    #: ISO-8601 with a timezone; null (or absent) runs at once.
    scheduled_at: AwareDatetime | None = None

    @field_validator("scheduled_at", mode="before")
    @classmethod
    def _iso_8601_only(cls, value: Any) -> Any:
        # pydantic would also read a number as a Unix time; the API promises ISO-8601
        if value is not None and not isinstance(value, str):
            raise ValueError("must be an ISO-8601 date-time with a timezone")
        return value


@router.post("/batches", status_code=201, summary="Schedule a batch")
def create_batch(body: BatchIn) -> dict[str, Any]:
    """Persist the batch (status ``scheduled``) and schedule its run; 201 with the batch."""
    try:
        report = batches.create_batch(**body.model_dump())
    except batches.InvalidBatch as error:
        raise api_error(422, "invalid_batch", str(error)) from None
    return batches.batch_view(report)


@router.get("/batches/{batch_id}", summary="A batch and its delivery summary")
def get_batch(batch_id: str) -> dict[str, Any]:
    """Status, counts and the outcome → count summary of the batch's deliveries."""
    return batches.batch_view(found(batches.get_batch(batch_id), "batch", batch_id))


@router.post("/batches/{batch_id}/cancel", summary="Cancel a scheduled batch")
def cancel_batch(batch_id: str) -> dict[str, Any]:
    """200 with the cancelled batch (also when it already was); 409 when running or
    finished."""
    try:
        report = batches.cancel_batch(batch_id)
    except batches.BatchNotFound:
        raise not_found("batch", batch_id) from None
    except batches.BatchNotCancellable as error:
        raise api_error(409, "batch_not_cancellable", str(error)) from None
    return batches.batch_view(report)
