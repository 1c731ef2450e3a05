"""Which provider sends each channel: ``EMAIL_PROVIDER``, ``SMS_PROVIDER``, ``PUSH_PROVIDER``.

:func:`active_provider` builds the configured provider once per settings object and
hands out the same instance after that (providers hold connection pools and are safe to
share between threads). It returns None when the configured provider cannot carry the
channel; the channel worker then records ``suppressed`` / ``provider_unsupported``
(docs/pipeline.md#providers).
"""

from __future__ import annotations

import importlib
import threading
from collections.abc import Callable

from herald.settings import Settings, get_settings
from providers.base import Channel, Provider

#: Provider name → (module, class); imported on first use so that a process that never
#: sends SMS through Twilio never loads the Twilio SDK.
PROVIDER_CLASSES: dict[str, tuple[str, str]] = {
    "mock": ("providers.mock", "MockProvider"),
    "smtp": ("providers.smtp", "SmtpProvider"),
    "twilio": ("providers.twilio", "TwilioProvider"),
    "taqnyat": ("providers.taqnyat", "TaqnyatProvider"),
    "onesignal": ("providers.onesignal", "OneSignalProvider"),
}

#: The setting that names each channel's provider.
SERVICE_SETTINGS: dict[Channel, str] = {
    Channel.EMAIL: "email_provider",
    Channel.SMS: "sms_provider",
    Channel.PUSH: "push_provider",
}

_lock = threading.Lock()
# keyed by id(settings); the settings object is kept alongside so its id is never reused
_built: dict[int, tuple[Settings, dict[str, Provider]]] = {}


def active_provider(channel: Channel | str, settings: Settings | None = None
                    ) -> Provider | None:
    """The provider configured for ``channel``, or None if it cannot carry the channel.

    Accepts any channel name; one without a provider (``in_app``) gives None too.
    """
    settings = settings or get_settings()
    try:
        channel = Channel(channel)
    except ValueError:
        return None
    provider = provider_named(getattr(settings, SERVICE_SETTINGS[channel]), settings)
    return provider if channel in provider.channels else None


def provider_named(name: str, settings: Settings | None = None) -> Provider:
    """The provider called ``name``, built once per settings object."""
    settings = settings or get_settings()
    with _lock:
        _, providers = _built.setdefault(id(settings), (settings, {}))
        if name not in providers:
            providers[name] = _build(name, settings)
        return providers[name]


def reset_providers() -> None:
    """Close and forget every built provider (tests, or after a settings change)."""
    with _lock:
        built = list(_built.values())
        _built.clear()
    for _, providers in built:
        for provider in providers.values():
            close = getattr(provider, "close", None)
            if callable(close):
                close()


def _build(name: str, settings: Settings) -> Provider:
    try:
        module_name, class_name = PROVIDER_CLASSES[name]
    except KeyError:
        raise ValueError(f"unknown provider {name!r}") from None
    provider_class: Callable[[Settings], Provider] = getattr(importlib.import_module(module_name),
                                                             class_name)
    return provider_class(settings)
