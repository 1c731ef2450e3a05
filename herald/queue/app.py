"""The one object that holds a process's queue wiring: :class:`App`.

An App is made from a :class:`~herald.queue.config.QueueConfig` and the application's
:class:`~herald.queue.registry.Registry` s, whose declarations it merges (the queues,
actors, schedules, sweeps and capsules the library reads). It owns what the queues
run on: the Redis client, each thread's own connection to it, the ledger (with its
queries and admin operations), its queue time, the broker (Redis or RabbitMQ, as the
config says) and the metrics collector that reads the ledger. :meth:`App.install` is the
one place that sets Dramatiq's global broker and binds the registries' actors to it;
:meth:`App.close` closes its connections. An application builds one App per process, at
start (herald's: ``herald/queue_app.py``); a test builds its own.

Library functions that need the wiring and have no actor in hand (:func:`queue`,
:func:`find_jobs`, :func:`now_ms`...) find the installed App through Dramatiq's global
broker (:func:`current_app`): the library keeps no wiring of its own in module state.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable
from typing import Any

import dramatiq
from prometheus_client import REGISTRY

from herald.queue.capsules import Capsule
from herald.queue.config import QueueConfig
from herald.queue.dramatiq_internals import installed_broker, uninstall_broker
from herald.queue.errors import NoAppInstalled, UnknownQueue
from herald.queue.job_actor import JobActor
from herald.queue.ledger import Ledger
from herald.queue.ledger_admin import LedgerAdmin
from herald.queue.ledger_queries import LedgerQueries
from herald.queue.metrics import LedgerCollector
from herald.queue.queue_time import QueueTime
from herald.queue.redis import ThreadConnections, new_redis_client
from herald.queue.registry import APP_ATTRIBUTE, NO_APP, QueueSpec, Registry
from herald.queue.schedule_spec import Schedule


class App:
    """A process's queue wiring, made from ``config``, reading the declarations of
    ``registries`` (a later registry's declaration of a name wins); nothing is connected
    until used."""

    def __init__(self, config: QueueConfig, *registries: Registry) -> None:
        self.config = config
        self._registries: list[Registry] = []
        #: the queues the registries' tables listed when the App was built (or included)
        self._tabled: dict[str, QueueSpec] = {}
        for registry in registries:
            self._add(registry)
        #: the ledger's "now": the wall clock plus an offset a test may move
        self.time = QueueTime()
        #: the producers' client (the application's own when the config gave one)
        self.client = new_redis_client(config)
        #: each thread's own connection to the client's server (the hot paths' scripts)
        self.connections = ThreadConnections(self.client)
        self.ledger = Ledger(self.client, config.prefix, time=self.time,
                             connections=self.connections)
        #: what an operator reads of the ledger, and does to it
        self.queries = LedgerQueries(self.ledger)
        self.admin = LedgerAdmin(self.ledger)
        self.broker = self._new_broker()
        setattr(self.broker, APP_ATTRIBUTE, self)
        self._collector = LedgerCollector(
            self.queries, lambda: [spec.name for spec in self.specs()])
        self._lock = threading.Lock()
        self._closed = False

    def _new_broker(self) -> dramatiq.Broker:
        if self.config.external_broker:
            from herald.queue.rabbitmq import HeraldRabbitmqBroker

            return HeraldRabbitmqBroker(url=self.config.rabbitmq_url, ledger=self.ledger)
        from herald.queue.broker import LedgerBroker

        return LedgerBroker(self.ledger)

    @property
    def installed(self) -> bool:
        """True while this App is the process's (Dramatiq's global broker is its broker)."""
        return installed_broker() is self.broker

    def install(self) -> App:
        """Make this App the process's: Dramatiq's global broker becomes its broker, every
        declared actor (and every one declared later) is bound to it, and ``/metrics``
        reads its ledger instead of the previous App's. Returns the App."""
        previous = installed_app()
        if previous is not None and previous is not self:
            previous._unregister_collector()
        dramatiq.set_broker(self.broker)
        for job_actor in self.actors():
            self.bind(job_actor)
        with self._lock, contextlib.suppress(ValueError):  # already registered
            REGISTRY.register(self._collector)
        return self

    # -- declarations -------------------------------------------------------------
    def _add(self, registry: Registry) -> bool:
        if any(mine is registry for mine in self._registries):
            return False
        self._tabled.update(registry.table_specs())
        self._registries.append(registry)
        return True

    def include(self, registry: Registry) -> Registry:
        """Read ``registry``'s declarations too (its tables are read now); its actors are
        bound at once when this App is installed. Including it twice is harmless."""
        if self._add(registry) and self.installed:
            for job_actor in registry.actors().values():
                self.bind(job_actor)
        return registry

    @property
    def registries(self) -> tuple[Registry, ...]:
        """The registries this App reads, in order."""
        return tuple(self._registries)

    def reads(self, registry: Registry) -> bool:
        """True when this App reads ``registry``'s declarations."""
        return any(mine is registry for mine in self._registries)

    def bind(self, job_actor: JobActor[Any]) -> None:
        """Bind ``job_actor`` to this App's broker (once: binding again does nothing)."""
        if job_actor.broker is not self.broker:
            job_actor.bind(self.broker, self.spec(job_actor.queue).time_limit)

    def spec(self, name: str) -> QueueSpec:
        """Queue ``name``: as last declared in a registry, else as a table listed it;
        :class:`UnknownQueue` (a KeyError) when none has it."""
        for registry in reversed(self._registries):
            spec = registry.declared_specs().get(name)
            if spec is not None:
                return spec
        spec = self._tabled.get(name)
        if spec is None:
            raise UnknownQueue(name)
        return spec

    def specs(self) -> list[QueueSpec]:
        """Every queue: the tables' first, in their order, then those declared."""
        merged = dict(self._tabled)
        for registry in self._registries:
            merged.update(registry.declared_specs())
        return list(merged.values())

    def _merged(self, part: Callable[[Registry], dict[str, Any]]) -> dict[str, Any]:
        merged: dict[str, Any] = {}
        for registry in self._registries:
            merged.update(part(registry))
        return merged

    def actors(self) -> list[JobActor[Any]]:
        """Every actor of the registries."""
        return list(self._merged(Registry.actors).values())

    def actor(self, name: str) -> JobActor[Any]:
        """The actor declared under ``name`` (KeyError when none is)."""
        for registry in reversed(self._registries):
            job_actor = registry.actors().get(name)
            if job_actor is not None:
                return job_actor
        raise KeyError(name)

    def schedules(self) -> dict[str, Schedule]:
        """Every schedule of the registries, by name."""
        return self._merged(Registry.schedules)

    def sweeps(self) -> dict[str, Callable[[], int]]:
        """Every sweep of the registries, by name, in declaration order."""
        return self._merged(Registry.sweeps)

    def capsules(self) -> list[Capsule]:
        """Every capsule of the registries, in declaration order."""
        return list(self._merged(Registry.capsules).values())

    def _unregister_collector(self) -> None:
        with self._lock, contextlib.suppress(KeyError):  # not registered
            REGISTRY.unregister(self._collector)

    def close(self) -> None:
        """Close the broker's connections and the Redis client (unless the config gave
        it: the application owns that one), and stop being the installed App. Returns
        when both are closed; closing twice is harmless."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
        self._unregister_collector()
        uninstall_broker(self.broker)
        self.broker.close()
        if self.config.redis_client is None:
            self.client.close()

    def __repr__(self) -> str:
        return f"<App {self.config.broker} {self.config.describe()} prefix={self.config.prefix}>"


def installed_app() -> App | None:
    """The installed App, or None when no App is installed."""
    app = getattr(installed_broker(), APP_ATTRIBUTE, None)
    return app if isinstance(app, App) else None


def current_app() -> App:
    """The installed App; :class:`NoAppInstalled` when no App is installed."""
    app = installed_app()
    if app is None:
        raise NoAppInstalled(NO_APP)
    return app


def app_of(broker: dramatiq.Broker | None) -> App:
    """The App ``broker`` belongs to (an actor's broker), else the installed App."""
    app = getattr(broker, APP_ATTRIBUTE, None)
    return app if isinstance(app, App) else current_app()


def get_spec(name: str) -> QueueSpec:
    """The spec of queue ``name`` in the installed App; :class:`UnknownQueue` (a KeyError)
    when undeclared."""
    return current_app().spec(name)


def now_ms() -> int:
    """Milliseconds since the epoch in the installed App's queue time (docs/queue.md#queue-time)."""
    return current_app().time.now_ms()
