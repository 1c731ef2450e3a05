"""The console's view of outbound webhooks: every endpoint with its messages counted by
status (and how many are failing and waiting for their next attempt), an endpoint's
failing messages with their attempts, and a failed message sent again — audited like
every console action; behind ADMIN_TOKEN (docs/console.md#webhooks)."""

from __future__ import annotations

from typing import Any, Literal

from sqlalchemy import func
from sqlmodel import col, select

from actors.webhooks import QUEUE
from herald import db
from herald.web import console
from herald.web.auth import admin_router
from herald.web.routes.webhooks import endpoint_messages, endpoint_view, retry_failed_message
from models.webhooks import MessageStatus, WebhookEndpoint, WebhookMessage

router = admin_router(tags=["admin"])


def _message_counts() -> dict[str, dict[str, int]]:
    """Per endpoint: its messages by status, and ``retrying`` — pending messages whose
    last attempt failed (they have a next attempt time)."""
    retrying = col(WebhookMessage.next_attempt_at).is_not(None)
    counts: dict[str, dict[str, int]] = {}
    with db.session() as session:
        rows = session.exec(select(WebhookMessage.endpoint_id, WebhookMessage.status,
                                   retrying, func.count())
                            .group_by(col(WebhookMessage.endpoint_id),
                                      col(WebhookMessage.status), retrying)).all()
    for endpoint_id, status, is_retrying, count in rows:
        mine = counts.setdefault(endpoint_id, {s.value: 0 for s in MessageStatus}
                                 | {"retrying": 0})
        mine[str(status)] += count
        if status == MessageStatus.PENDING and is_retrying:
            mine["retrying"] += count
    return counts


@router.get("/webhooks", summary="Webhook endpoints with their failure counts")
def webhook_endpoints() -> dict[str, Any]:
    """``{"endpoints": [endpoint…]}``, oldest first: each endpoint as the API shows it
    plus ``failing_since`` (the start of its current failing streak, or null) and
    ``messages`` (``pending``, ``delivered``, ``failed``, ``retrying``)."""
    counts = _message_counts()
    empty = {s.value: 0 for s in MessageStatus} | {"retrying": 0}
    with db.session() as session:
        endpoints = session.exec(select(WebhookEndpoint).order_by(
            col(WebhookEndpoint.created_at), col(WebhookEndpoint.id))).all()
        return {"endpoints": [
            endpoint_view(endpoint) | {
                "failing_since": (endpoint.failing_since.isoformat()
                                  if endpoint.failing_since else None),
                "messages": counts.get(endpoint.id, empty)}
            for endpoint in endpoints]}


@router.get("/webhooks/{endpoint_id}/messages", summary="A webhook endpoint's messages")
def webhook_messages(endpoint_id: str,
                     status: Literal["pending", "delivered", "failed"] = "failed",
                     ) -> dict[str, Any]:
    """``{"items": [message…]}``: the endpoint's messages in ``status`` (default
    ``failed``), newest first, each with its attempts; 404 for no such endpoint."""
    return endpoint_messages(endpoint_id, status)


@router.post("/webhooks/{endpoint_id}/messages/{message_id}/retry",
             summary="Send a failed webhook message again")
def retry_webhook_message(endpoint_id: str, message_id: str) -> dict[str, Any]:
    """``{"action": "retry", "queue": "webhook-delivery", "count": 1, "message"}``, the
    message back to ``pending`` and sent now; audited (with the error when refused: 404
    for no such message, 409 when it is not failed or the endpoint is disabled)."""
    shown: dict[str, Any] = {}

    def retry() -> int:
        shown.update(retry_failed_message(endpoint_id, message_id))
        return 1

    count = console.audited("webhook_retry", queue_name=QUEUE, job_id=message_id,
                            detail={"endpoint_id": endpoint_id}, work=retry)
    return {"action": "retry", "queue": QUEUE, "count": count, "message": shown}
