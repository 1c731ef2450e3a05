"""The ``/v1`` HTTP API: accounts, events, notifications and deliveries (README.md,
"Notifications" and "The HTTP API").

Routes only validate and translate; the orchestration service in ``actors`` does the
work. A malformed request is answered 4xx before anything touches the database or a queue.
``Authorization: Bearer $API_TOKEN`` is required when API_TOKEN is set, and checked before
the body is read: a caller without the token learns nothing about the body's schema.
"""

from __future__ import annotations

import hmac
from collections.abc import Callable, Coroutine
from typing import Any, Literal

from fastapi import APIRouter, Depends, Request, Response
from fastapi.responses import JSONResponse
from fastapi.routing import APIRoute
from fastapi.security import HTTPBearer
from pydantic import BaseModel, ConfigDict, Field

from actors import orchestration
from actors.render import Locale
from herald.settings import get_settings
from herald.web import api_error


def check_bearer_token(authorization: str | None) -> None:
    """Raise a 401 (with ``WWW-Authenticate: Bearer``) unless ``authorization`` is
    ``Bearer <API_TOKEN>``; the scheme is case-insensitive, a bare token is refused.
    Open when API_TOKEN is unset."""
    expected = get_settings().api_token
    if not expected:
        return
    scheme, _, token = (authorization or "").strip().partition(" ")
    if scheme.lower() != "bearer" or not hmac.compare_digest(token.strip().encode(),
                                                             expected.encode()):
        raise api_error(401, "unauthorized",
                        "a valid bearer token is required (Authorization: Bearer <token>)",
                        headers={"WWW-Authenticate": "Bearer"})


class BearerRoute(APIRoute):
    """A route behind API_TOKEN: the token is checked before the body is read, parsed or
    validated (FastAPI's own dependencies run only after the body is parsed)."""

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        """The route's handler, preceded by the bearer token check."""
        handler = super().get_route_handler()

        async def checked(request: Request) -> Response:
            check_bearer_token(request.headers.get("authorization"))
            return await handler(request)

        return checked


#: Declares the bearer scheme in OpenAPI; the check itself is :class:`BearerRoute`'s.
bearer_scheme = HTTPBearer(auto_error=False, description="API_TOKEN, when it is set")


def protected_router(tags: list[str]) -> APIRouter:
    """A ``/v1`` router whose routes all require the bearer token (when API_TOKEN is set)."""
    return APIRouter(prefix="/v1", tags=tags, route_class=BearerRoute,
                     dependencies=[Depends(bearer_scheme)])


router = protected_router(["notifications"])


def _absent_when_unset(schema: dict[str, Any]) -> None:
    # the default only stands for "leave unchanged": null is not a value of these fields
    schema.pop("default", None)


def _unchanged() -> Any:
    """A PATCH field that may be left out but, given, may not be null."""
    return Field(default=None, json_schema_extra=_absent_when_unset)


class AccountIn(BaseModel):
    """A new account. Accounts are keyed by id: an email or phone may appear on several."""

    model_config = ConfigDict(extra="forbid")
    email: str | None = Field(default=None, max_length=320)
    phone: str | None = Field(default=None, max_length=20)
    locale: Locale = "en"
    active: bool = True
    marketing_opt_out: bool = False
    push_subscription_id: str | None = Field(default=None, max_length=128)


class AccountPatch(BaseModel):
    """Changes to an account (only the fields given). ``email``, ``phone`` and
    ``push_subscription_id`` may be set to null (removed); the others may not."""

    model_config = ConfigDict(extra="forbid")
    email: str | None = Field(default=None, max_length=320)
    phone: str | None = Field(default=None, max_length=20)
    locale: Locale = _unchanged()
    active: bool = _unchanged()
    marketing_opt_out: bool = _unchanged()
    push_subscription_id: str | None = Field(default=None, max_length=128)


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
