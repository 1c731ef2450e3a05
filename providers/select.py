"""Which providers send each channel: the chains ``EMAIL_PROVIDERS``, ``SMS_PROVIDERS``,
``PUSH_PROVIDERS``, or the single ``EMAIL_PROVIDER``, ``SMS_PROVIDER``, ``PUSH_PROVIDER``
as a chain of one (docs/pipeline.md#provider-chains).

Providers are built once per settings object and the same instances handed out after
that (they hold connection pools and are safe to share between threads). A provider of
a chain that cannot carry the channel is left out of it; an empty chain makes the
channel worker record ``suppressed`` / ``provider_unsupported``
(docs/pipeline.md#providers). A name of ``MOCK_INSTANCES`` is a mock provider of that
name (:class:`providers.mock.MockProvider`).
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
# each channel's chain, keyed as _built: read once per delivery, so built once
_chains: dict[tuple[int, Channel], tuple[Settings, tuple[Provider, ...]]] = {}


def provider_chain(channel: Channel | str, settings: Settings | None = None
                   ) -> tuple[Provider, ...]:
    """The providers of ``channel``'s chain able to carry it, in order (empty: none can,
    or the channel needs no provider, as ``in_app``)."""
    settings = settings or get_settings()
    try:
        channel = Channel(channel)
    except ValueError:
        return ()
    found = _chains.get((id(settings), channel))
    if found is not None and found[0] is settings:
        return found[1]
    chain = tuple(provider for provider in (
        provider_named(name, settings) for name in settings.provider_chain_names(channel))
        if channel in provider.channels)
    with _lock:
        _chains[(id(settings), channel)] = (settings, chain)
    return chain


def active_provider(channel: Channel | str, settings: Settings | None = None
                    ) -> Provider | None:
    """The first provider of ``channel``'s chain (:func:`provider_chain`), or None if none
    can carry the channel: what sends one-off operational messages.

    Accepts any channel name; one without a provider (``in_app``) gives None too.
    """
    chain = provider_chain(channel, settings)
    return chain[0] if chain else None


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
        _chains.clear()
    for _, providers in built:
        for provider in providers.values():
            close = getattr(provider, "close", None)
            if callable(close):
                close()


def _build(name: str, settings: Settings) -> Provider:
    if name in settings.mock_instance_names:
        from providers.mock import MockProvider

        return MockProvider(settings, instance=name)
    try:
        module_name, class_name = PROVIDER_CLASSES[name]
    except KeyError:
        raise ValueError(f"unknown provider {name!r}") from None
    provider_class: Callable[[Settings], Provider] = getattr(importlib.import_module(module_name),
                                                             class_name)
    return provider_class(settings)
