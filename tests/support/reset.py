"""Forget what herald cached from the environment (settings, Redis client, brokers,
database engine, providers), so the next use reads the test's environment afresh."""

from __future__ import annotations

from herald import db, settings
from herald.queue import redis as queue_redis
from herald.queue import runtime


def reset_herald() -> None:
    """Drop herald's cached settings, connections, providers and plugin instances."""
    from providers.esim import esim_providers
    from providers.fx import fx_providers
    from providers.operators import operators
    from providers.select import reset_providers

    settings.reset_settings()
    queue_redis.reset_redis_client()
    runtime.reset_brokers()
    db.reset_engine()
    reset_providers()
    for plugin_registry in (esim_providers, operators, fx_providers):
        plugin_registry.reset()
