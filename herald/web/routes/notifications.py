"""``/v1/notifications/{id}`` and ``/v1/deliveries/{id}``: what became of an event, each
delivery with its outcome."""

from __future__ import annotations

from typing import Any

from actors import orchestration
from herald.web.auth import protected_router
from herald.web.errors import found

router = protected_router(["notifications"])


@router.get("/notifications/{notification_id}", summary="A notification and its deliveries")
def get_notification(notification_id: str) -> dict[str, Any]:
    """The notification with every delivery's outcome."""
    result = found(orchestration.get_notification(notification_id), "notification",
                   notification_id)
    return orchestration.notification_view(result)


@router.get("/deliveries/{delivery_id}", summary="One delivery")
def get_delivery(delivery_id: str) -> dict[str, Any]:
    """Channel, outcome, reason, provider, provider message id and attempts."""
    delivery = found(orchestration.get_delivery(delivery_id), "delivery", delivery_id)
    return orchestration.delivery_view(delivery)
