"""Fixtures of the catalog, provider health and FX tests: PostgreSQL + Redis, the store
feature on, the test plugins (``tests.support.catalog.plugins``) registered, empty catalog
tables, and the sync queues' backoff shortened (speed is measured in bench/, not here)."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from contextlib import ExitStack
from dataclasses import dataclass, field
from datetime import timedelta

import pytest
from sqlalchemy import text

from actors.queues import registry
from herald import db
from tests.support.catalog import plugins
from tests.support.catalog.plugins import FakeCatalog
from tests.support.queue_app import close_queue_app, follow_settings
from tests.support.reset import reset_herald

SYNC_QUEUES = ("package-sync", "esim-product-sync", "fx-refresh")
#: The test plugins: registry name → class in tests.support.catalog.plugins.
ESIM_PLUGINS = {"alpha": "Alpha", "beta": "Beta"}
OPERATOR_PLUGINS = {"gamma": "Gamma"}


@dataclass
class Store:
    """herald with the store on; ``configure`` changes settings, ``catalog`` starts a
    test owner's catalog server."""

    monkeypatch: pytest.MonkeyPatch
    servers: ExitStack
    env: dict[str, str] = field(default_factory=dict)

    def configure(self, **variables: str) -> None:
        """Set environment variables and make herald read them again."""
        for name, value in variables.items():
            self.monkeypatch.setenv(name, value)
            self.env[name] = value
        reset_herald()
        follow_settings()

    def catalog(self, owner: str, *items: dict[str, object]) -> FakeCatalog:
        """A running catalog server for the test owner ``owner`` listing ``items``."""
        server = self.servers.enter_context(FakeCatalog(list(items)))
        plugins.ENDPOINTS[owner] = server.url
        return server

    def unreachable(self, owner: str) -> None:
        """Point ``owner`` at a port nothing listens on any more (connection refused)."""
        with FakeCatalog() as gone:
            plugins.ENDPOINTS[owner] = gone.url


@pytest.fixture
def store(monkeypatch: pytest.MonkeyPatch, migrated_database: str,
          redis_url: str) -> Iterator[Store]:
    """herald on PostgreSQL + Redis, FEATURE_ESIM_STORE on, the mock providers, the test
    plugins registered (enabled only when a test names them), empty catalog tables."""
    from providers.esim import esim_providers
    from providers.operators import operators

    with ExitStack() as servers:
        setup = Store(monkeypatch, servers)
        setup.configure(DATABASE_URL=migrated_database, REDIS_URL=redis_url, BROKER="redis",
                        QUEUE_PREFIX=f"c{uuid.uuid4().hex[:10]}", FEATURE_ESIM_STORE="true",
                        ESIM_PROVIDERS="mock", OPERATORS="mock", FX_PROVIDER="mock",
                        LOG_LEVEL="WARNING",
                        HERALD_OPEN_API="1")  # TestClient's client is not on loopback
        import actors.catalog  # noqa: F401  (declares the sync actors, and actors.fx)

        for name, cls in ESIM_PLUGINS.items():
            monkeypatch.setitem(esim_providers.classes, name, (plugins.__name__, cls))
        for name, cls in OPERATOR_PLUGINS.items():
            monkeypatch.setitem(operators.classes, name, (plugins.__name__, cls))
        with db.get_engine().begin() as connection:
            connection.execute(text("TRUNCATE store_products, operator_packages, "
                                    "provider_health, fx_rates CASCADE"))
        with registry.redeclared(SYNC_QUEUES, backoff_base=timedelta(milliseconds=200)):
            yield setup
    plugins.ENDPOINTS.clear()
    monkeypatch.undo()
    reset_herald()
    close_queue_app()
