"""``GET /admin/mock/messages``: what the mock provider sent, read from its store
(providers/mock.py), so that someone trying herald without a real provider can read the
emails and SMS it sent — the tour's supplier order email among them (docs/api.md,
"Purchasing"). Behind ADMIN_TOKEN like every ``/admin`` route: the messages hold
addresses and what was sent to them."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from fastapi import Query

from herald.settings import PROVIDER_CHANNELS, Settings, get_settings
from herald.web.auth import admin_router
from herald.web.errors import api_error
from providers.mock import MockProvider
from providers.supplier_mail import mail_goes_to_mock

router = admin_router(tags=["admin"])


def mock_sends_anything(settings: Settings) -> bool:
    """True when some message herald sends can go through the mock provider."""
    return (any("mock" in settings.provider_chain_names(channel)
                for channel in PROVIDER_CHANNELS)
            or mail_goes_to_mock(settings))


@router.get("/mock/messages", summary="The messages the mock provider sent, newest first")
def mock_messages(
        channel: Literal["email", "sms", "push"] | None = None,
        to: Annotated[str | None, Query(max_length=320, description=(
            "only the messages to this address or number (or copied to it)"))] = None,
        limit: Annotated[int, Query(ge=1, le=100)] = 20,
) -> dict[str, list[dict[str, Any]]]:
    """``{"messages": [...]}``, newest first, at most ``limit``: each as the mock recorded
    it (``channel``, ``to``, ``cc``, ``from``, ``subject``, ``text``, ``attachments``,
    ``provider_message_id``, ``outcome``, ``at``…). 404 when no channel and no supplier
    email goes through the mock."""
    if not mock_sends_anything(get_settings()):
        raise api_error(404, "not_found", "the mock provider sends nothing here")
    picked = []
    for record in reversed(MockProvider.sends()):
        if channel and record.get("channel") != channel:
            continue
        if to and to != record.get("to") and to not in record.get("cc", ()):
            continue
        picked.append(record)
        if len(picked) == limit:
            break
    return {"messages": picked}
