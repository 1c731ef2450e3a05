"""Adapters to the outside world: one small contract, one module per provider.

Import the public names from here::

    from providers import Channel, OutboundMessage, SendResult, active_provider

The contract (``providers.base``): a :class:`Provider` has a ``name``, the ``channels``
it carries, and ``send(message) -> SendResult`` where a failure is classified
``transient`` or ``terminal`` instead of raised. The adapters (``mock``, ``smtp``,
``twilio``, ``taqnyat``, ``onesignal``) load on first use, so importing this package
does not import every provider's SDK.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from providers.base import (
    Attachment,
    Channel,
    FailureKind,
    OutboundMessage,
    Provider,
    SendResult,
)
from providers.select import active_provider, provider_chain, provider_named, reset_providers

if TYPE_CHECKING:
    from providers.mock import MockProvider
    from providers.onesignal import OneSignalProvider
    from providers.smtp import SmtpProvider
    from providers.taqnyat import TaqnyatProvider
    from providers.twilio import TwilioProvider

_ADAPTERS = {
    "MockProvider": "providers.mock",
    "SmtpProvider": "providers.smtp",
    "TwilioProvider": "providers.twilio",
    "TaqnyatProvider": "providers.taqnyat",
    "OneSignalProvider": "providers.onesignal",
}

__all__ = [
    "Attachment",
    "Channel",
    "FailureKind",
    "MockProvider",
    "OneSignalProvider",
    "OutboundMessage",
    "Provider",
    "SendResult",
    "SmtpProvider",
    "TaqnyatProvider",
    "TwilioProvider",
    "active_provider",
    "provider_chain",
    "provider_named",
    "reset_providers",
]


def __getattr__(name: str) -> Any:
    """Import an adapter class on first access (``providers.SmtpProvider``)."""
    if name in _ADAPTERS:
        return getattr(importlib.import_module(_ADAPTERS[name]), name)
    raise AttributeError(f"module 'providers' has no attribute {name!r}")
