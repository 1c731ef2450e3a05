"""The ``/v1`` HTTP API: accounts, events, notifications and deliveries (SPEC section 7).

Routes only validate and translate; the orchestration service in ``actors`` does the
work. A malformed request is answered 4xx before anything touches the database or a queue.
``Authorization: Bearer $API_TOKEN`` is required when API_TOKEN is set.
"""

from __future__ import annotations

import hmac
from typing import Any, Literal

from fastapi import APIRouter, Depends, Header
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ConfigDict, Field

from actors import orchestration
from herald.settings import get_settings
from herald.web import api_error


def require_api_token(authorization: str | None = Header(default=None)) -> None:
    """401 unless the bearer token matches API_TOKEN (open when API_TOKEN is unset)."""
    expected = get_settings().api_token
    if not expected:
        return
    given = (authorization or "").removeprefix("Bearer ").strip()
    if not hmac.compare_digest(given.encode(), expected.encode()):
        raise api_error(401, "unauthorized", "a valid bearer token is required")


router = APIRouter(prefix="/v1", tags=["notifications"],
                   dependencies=[Depends(require_api_token)])


class AccountIn(BaseModel):
    """A new account."""

    model_config = ConfigDict(extra="forbid")
    email: str | None = Field(default=None, max_length=320)
    phone: str | None = Field(default=None, max_length=20)
    locale: str = Field(default="en", max_length=16)
    active: bool = True
    marketing_opt_out: bool = False
    push_subscription_id: str | None = Field(default=None, max_length=128)


class AccountPatch(BaseModel):
    """Changes to an account (only the fields given)."""

    model_config = ConfigDict(extra="forbid")
    email: str | None = Field(default=None, max_length=320)
    phone: str | None = Field(default=None, max_length=20)
    locale: str | None = Field(default=None, max_length=16)
    active: bool | None = None
    marketing_opt_out: bool | None = None
    push_subscription_id: str | None = Field(default=None, max_length=128)


class EventIn(BaseModel):
    """A domain event for one account."""

    model_config = ConfigDict(extra="forbid")
    type: str = Field(max_length=64)
    account_id: str = Field(min_length=1, max_length=36)
    occurrence: str = Field(min_length=1, max_length=255)
    data: dict[str, Any] = Field(default_factory=dict)
    urgency: Literal["normal", "urgent"] = "normal"
    transactional: bool | None = None
    channels: list[Literal["email", "sms", "in_app", "push"]] | None = Field(
        default=None, min_length=1, max_length=4)


def _account_view(account: Any) -> dict[str, Any]:
    return {"id": account.id, "email": account.email, "phone": account.phone,
            "locale": account.locale, "active": account.active,
            "marketing_opt_out": account.marketing_opt_out,
            "push_subscription_id": account.push_subscription_id,
            "created_at": account.created_at.isoformat(),
            "updated_at": account.updated_at.isoformat()}


@router.post("/accounts", status_code=201, summary="Create an account")
def create_account(body: AccountIn) -> dict[str, Any]:
    """Create an account (email, E.164 phone, locale, active, marketing opt-out)."""
    try:
        account = orchestration.create_account(**body.model_dump())
    except ValueError as error:
        raise api_error(422, "invalid_account", str(error)) from None
    return _account_view(account)


@router.patch("/accounts/{account_id}", summary="Change an account")
def update_account(account_id: str, body: AccountPatch) -> dict[str, Any]:
    """Change the given fields of an account."""
    try:
        account = orchestration.update_account(account_id, **body.model_dump(exclude_unset=True))
    except orchestration.AccountNotFound:
        raise api_error(404, "account_not_found", f"no account {account_id}") from None
    except ValueError as error:
        raise api_error(422, "invalid_account", str(error)) from None
    return _account_view(account)


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


@router.get("/notifications/{notification_id}", summary="A notification and its deliveries")
def get_notification(notification_id: str) -> dict[str, Any]:
    """The notification with every delivery's outcome."""
    result = orchestration.get_notification(notification_id)
    if result is None:
        raise api_error(404, "notification_not_found", f"no notification {notification_id}")
    return orchestration.notification_view(result)


@router.get("/deliveries/{delivery_id}", summary="One delivery")
def get_delivery(delivery_id: str) -> dict[str, Any]:
    """Channel, outcome, reason, provider, provider message id and attempts."""
    delivery = orchestration.get_delivery(delivery_id)
    if delivery is None:
        raise api_error(404, "delivery_not_found", f"no delivery {delivery_id}")
    return orchestration.delivery_view(delivery)
