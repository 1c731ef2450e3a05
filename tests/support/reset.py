"""Forget what herald cached from the environment (settings, database engine,
providers), so the next use reads the test's environment afresh. The queue wiring is
not herald's cache: a test installs its own App (tests/support/queue_app.py)."""

from __future__ import annotations

from herald import db, settings


def reset_herald() -> None:
    """Drop herald's cached settings, database engine, providers and plugin instances."""
    from providers.esim import esim_providers
    from providers.fx import fx_providers
    from providers.operators import operators
    from providers.select import reset_providers

    settings.reset_settings()
    db.reset_engine()
    reset_providers()
    for plugin_registry in (esim_providers, operators, fx_providers):
        plugin_registry.reset()
