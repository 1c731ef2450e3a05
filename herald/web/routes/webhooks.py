"""``/v1/webhook-endpoints``: the customer's URLs that herald's events are sent to, signed
(docs/api.md#webhooks). A URL is checked against server-side request forgery
(:mod:`providers.webhook_target`) when an endpoint is created or its URL changed: a 422
then, and nothing is written. The signing secret is shown only by the answers that make
one (create, rotate-secret); reading an endpoint never shows it.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from fastapi import Response
from pydantic import AwareDatetime, BaseModel, ConfigDict, Field, StringConstraints
from sqlmodel import col, select

from actors.webhooks import replay_failed
from herald import db
from herald.settings import get_settings
from herald.text import SINGLE_LINE
from herald.web.auth import protected_router
from herald.web.errors import api_error, found, not_found
from models.base import utcnow
from models.webhooks import (
    WEBHOOK_EVENT_TYPES,
    WebhookEndpoint,
    WebhookMessage,
    forget_subscribed_types,
)
from providers.webhook_target import UnsafeTarget, check_target

router = protected_router(["webhooks"])

EventType = Literal[WEBHOOK_EVENT_TYPES]  # type: ignore[valid-type]  # the tuple is constant
Url = Annotated[str, StringConstraints(strip_whitespace=True, min_length=1, max_length=2048),
                SINGLE_LINE]
Description = Annotated[str, StringConstraints(strip_whitespace=True, max_length=500),
                        SINGLE_LINE]
Events = Annotated[list[EventType], Field(min_length=1, max_length=len(WEBHOOK_EVENT_TYPES))]


class EndpointIn(BaseModel):
    """A new endpoint: its URL, the event types it gets, a note for the customer."""

    model_config = ConfigDict(extra="forbid")

    url: Url
    events: Events
    description: Description = ""


class EndpointPatch(BaseModel):
    """What a PATCH may change; a field left out stays as it is."""

    model_config = ConfigDict(extra="forbid")

    url: Url | None = None
    events: Events | None = None
    description: Description | None = None
    disabled: bool | None = None


def _checked_url(url: str) -> str:
    """``url`` when a webhook may be sent to it now; else a 422 saying why."""
    settings = get_settings()
    try:
        check_target(url, allow_http=settings.webhook_allow_http,
                     allow_private=settings.webhook_allow_private)
    except UnsafeTarget as error:
        raise api_error(422, "unsafe_webhook_url", f"url: {error}") from None
    return url


def endpoint_view(endpoint: WebhookEndpoint) -> dict[str, Any]:
    """An endpoint as JSON, without its secret."""
    return {"id": endpoint.id, "url": endpoint.url, "events": list(endpoint.events),
            "description": endpoint.description, "disabled": endpoint.disabled,
            "created_at": endpoint.created_at.isoformat(),
            "updated_at": endpoint.updated_at.isoformat()}


@router.post("/webhook-endpoints", status_code=201, summary="Create a webhook endpoint")
def create_endpoint(body: EndpointIn) -> dict[str, Any]:
    """201 with the endpoint and its signing `secret` (`whsec_…`), shown this once. 422
    for an event type herald does not send, or a URL it may not send to (not `https://`,
    or a host that resolves to a loopback, private, link-local or metadata address)."""
    endpoint = WebhookEndpoint(url=_checked_url(body.url),
                               events=list(dict.fromkeys(body.events)),
                               description=body.description)
    with db.session() as session:
        session.add(endpoint)
    forget_subscribed_types()
    return endpoint_view(endpoint) | {"secret": endpoint.secret}


@router.get("/webhook-endpoints", summary="The webhook endpoints")
def list_endpoints() -> dict[str, Any]:
    """Every endpoint, oldest first (secrets never shown)."""
    with db.session() as session:
        endpoints = session.exec(select(WebhookEndpoint).order_by(
            col(WebhookEndpoint.created_at), col(WebhookEndpoint.id))).all()
        return {"items": [endpoint_view(endpoint) for endpoint in endpoints]}


@router.get("/webhook-endpoints/{endpoint_id}", summary="A webhook endpoint")
def get_endpoint(endpoint_id: str) -> dict[str, Any]:
    """The endpoint (its secret never shown)."""
    with db.session() as session:
        return endpoint_view(found(session.get(WebhookEndpoint, endpoint_id),
                                   "webhook_endpoint", endpoint_id))


@router.patch("/webhook-endpoints/{endpoint_id}", summary="Change a webhook endpoint")
def patch_endpoint(endpoint_id: str, body: EndpointPatch) -> dict[str, Any]:
    """Change its `url`, `events`, `description` or `disabled`; a new URL is checked as
    at creation (422, nothing changed). Turning `disabled` off starts sending again."""
    changes = body.model_dump(exclude_none=True)
    if "url" in changes:
        _checked_url(changes["url"])
    if "events" in changes:
        changes["events"] = list(dict.fromkeys(changes["events"]))
    with db.session() as session:
        endpoint = found(session.get(WebhookEndpoint, endpoint_id), "webhook_endpoint",
                         endpoint_id)
        for name, value in changes.items():
            setattr(endpoint, name, value)
        if changes.get("disabled") is False:
            endpoint.failing_since = None  # re-enabled: its failing streak starts afresh
        endpoint.updated_at = utcnow()
        session.add(endpoint)
        session.flush()
        view = endpoint_view(endpoint)
    forget_subscribed_types()
    return view


@router.delete("/webhook-endpoints/{endpoint_id}", status_code=204,
               summary="Delete a webhook endpoint")
def delete_endpoint(endpoint_id: str) -> Response:
    """Delete the endpoint and its messages; nothing more is sent to it."""
    with db.session() as session:
        endpoint = found(session.get(WebhookEndpoint, endpoint_id), "webhook_endpoint",
                         endpoint_id)
        session.delete(endpoint)
    forget_subscribed_types()
    return Response(status_code=204)


@router.post("/webhook-endpoints/{endpoint_id}/rotate-secret",
             summary="Rotate a webhook endpoint's secret")
def rotate_secret(endpoint_id: str) -> dict[str, Any]:
    """The endpoint with its new `secret`, shown this once. For 24 hours every message is
    signed with both the old and the new secret, so the receiver can switch at leisure."""
    with db.session() as session:
        endpoint = found(session.get(WebhookEndpoint, endpoint_id), "webhook_endpoint",
                         endpoint_id)
        secret = endpoint.rotate_secret()
        session.add(endpoint)
        session.flush()
        return endpoint_view(endpoint) | {"secret": secret}


# -- messages --------------------------------------------------------------------------------
#: Most messages one listing shows.
MESSAGES_LIMIT = 100


def message_view(message: WebhookMessage) -> dict[str, Any]:
    """A message as JSON: its body and every attempt (``at``, ``status_code``,
    ``duration_ms``, ``error``)."""
    return {"id": message.id, "endpoint_id": message.endpoint_id, "type": message.type,
            "status": message.status, "body": message.body,
            "attempts": list(message.attempts),
            "next_attempt_at": (message.next_attempt_at.isoformat()
                                if message.next_attempt_at else None),
            "created_at": message.created_at.isoformat()}


def _endpoint_exists(endpoint_id: str) -> None:
    with db.session() as session:
        endpoint = found(session.get(WebhookEndpoint, endpoint_id), "webhook_endpoint",
                         endpoint_id)
        if endpoint.disabled:
            raise api_error(409, "webhook_endpoint_disabled",
                            f"webhook endpoint {endpoint_id} is disabled: PATCH it with "
                            f"\"disabled\": false first")


@router.get("/webhook-endpoints/{endpoint_id}/messages", summary="A webhook endpoint's messages")
def list_messages(endpoint_id: str,
                  status: Literal["pending", "delivered", "failed"] | None = None,
                  ) -> dict[str, Any]:
    """The endpoint's messages, newest first (at most 100), with their attempts;
    `?status=failed` (or `pending`, `delivered`) lists only those."""
    return endpoint_messages(endpoint_id, status)


def endpoint_messages(endpoint_id: str, status: str | None) -> dict[str, Any]:
    """``{"items": [message…]}``: the endpoint's messages (those in ``status`` when
    given), newest first, at most :data:`MESSAGES_LIMIT`; 404 for no such endpoint."""
    query = select(WebhookMessage).where(col(WebhookMessage.endpoint_id) == endpoint_id)
    if status is not None:
        query = query.where(col(WebhookMessage.status) == status)
    with db.session() as session:
        found(session.get(WebhookEndpoint, endpoint_id), "webhook_endpoint", endpoint_id)
        rows = session.exec(query.order_by(col(WebhookMessage.created_at).desc(),
                                           col(WebhookMessage.id).desc())
                            .limit(MESSAGES_LIMIT)).all()
        return {"items": [message_view(message) for message in rows]}


@router.post("/webhook-endpoints/{endpoint_id}/messages/{message_id}/retry",
             status_code=202, summary="Send a failed webhook message again")
def retry_message(endpoint_id: str, message_id: str) -> dict[str, Any]:
    """A `failed` message back to `pending` and sent again now (one more attempt); 404
    for no such message of the endpoint, 409 when it is not `failed` or the endpoint is
    disabled."""
    return retry_failed_message(endpoint_id, message_id)


def retry_failed_message(endpoint_id: str, message_id: str) -> dict[str, Any]:
    """Send the endpoint's failed message again (back to ``pending``, due now) and
    return it; 404 for no such endpoint or message of it, 409 when the message is not
    ``failed`` or the endpoint is disabled (nothing changed then)."""
    _endpoint_exists(endpoint_id)
    if not replay_failed(endpoint_id, message_id=message_id):
        with db.session() as session:
            message = session.get(WebhookMessage, message_id)
            if message is None or message.endpoint_id != endpoint_id:
                raise not_found("webhook_message", message_id)
            raise api_error(409, "webhook_message_not_failed",
                            f"webhook message {message_id} is {message.status}, not failed")
    with db.session() as session:
        return message_view(found(session.get(WebhookMessage, message_id),
                                  "webhook_message", message_id))


class RecoverIn(BaseModel):
    """Which failed messages to send again: those created at or after ``since``."""

    model_config = ConfigDict(extra="forbid")

    since: AwareDatetime


@router.post("/webhook-endpoints/{endpoint_id}/recover", status_code=202,
             summary="Send a webhook endpoint's failed messages again")
def recover_messages(endpoint_id: str, body: RecoverIn) -> dict[str, Any]:
    """Every `failed` message of the endpoint created since `since` back to `pending`
    and sent again; answers how many (`recovered`). 409 while the endpoint is disabled."""
    _endpoint_exists(endpoint_id)
    return {"recovered": len(replay_failed(endpoint_id, since=body.since))}
