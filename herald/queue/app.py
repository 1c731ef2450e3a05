"""The one object that holds a process's queue wiring: :class:`App`.

An App is made from a :class:`~herald.queue.config.QueueConfig` and the application's
:class:`~herald.queue.registry.Registry` s, whose declarations it merges (the queues,
actors, schedules, sweeps and capsules the library reads). It owns what the queues
run on: its queue time, one :class:`~herald.queue.shards.Shard` per Redis (the config's
own, and one per configured shard: docs/queue.md#shards), each with its Redis client,
each thread's own connection to it, the ledger (with its queries and admin operations)
and the broker (Redis or RabbitMQ, as the config says), and the metrics collector that
reads the ledgers. :meth:`App.install` is the
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
from collections.abc import Callable, Iterable
from typing import Any

import dramatiq
from prometheus_client import REGISTRY

from herald.queue.capsules import Capsule
from herald.queue.config import DEFAULT_SHARD, QueueConfig
from herald.queue.dramatiq_internals import installed_broker, uninstall_broker
from herald.queue.errors import NoAppInstalled, UnknownQueue
from herald.queue.job_actor import JobActor
from herald.queue.metrics import LedgerCollector
from herald.queue.queue_time import QueueTime
from herald.queue.registry import APP_ATTRIBUTE, NO_APP, QueueSpec, Registry
from herald.queue.schedule_spec import Schedule
from herald.queue.shards import SHARD_ATTRIBUTE, Shard, one_shard


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
        #: the ledger's "now": the wall clock plus an offset a test may move (one for
        #: every shard: it is this process's clock, not a Redis's)
        self.time = QueueTime()
        self._check_shard_queues()  # before any client is made
        #: the config's own Redis: every queue no shard names (docs/queue.md#shards)
        self.default_shard = Shard(DEFAULT_SHARD, config, self.time, self)
        #: every shard by name, the default first
        self.shards: dict[str, Shard] = {DEFAULT_SHARD: self.default_shard}
        self.shards.update((name, Shard(name, config.shard_config(name), self.time, self))
                           for name in config.shards)
        self._queue_shards = {queue: self.shards[name]
                              for name, shard in config.shards.items() for queue in shard.queues}
        default = self.default_shard
        #: the default shard's parts, under the names they had before shards: what the
        #: application reads of its (default) Redis
        self.client, self.connections = default.client, default.connections
        self.ledger, self.queries, self.admin = default.ledger, default.queries, default.admin
        #: Dramatiq's global broker once installed; each shard's actors are bound to its own
        self.broker = default.broker
        self._collector = LedgerCollector(
            lambda name: self.shard(name).queries, lambda: [spec.name for spec in self.specs()])
        self._lock = threading.Lock()
        self._closed = False

    def _check_shard_queues(self) -> None:
        unknown = [f"shard {name!r} names queue {queue!r}, which no registry declares"
                   for name, shard in self.config.shards.items() for queue in shard.queues
                   if not self._knows(queue)]
        if unknown:
            raise ValueError("; ".join(unknown))

    def _knows(self, name: str) -> bool:
        try:
            self.spec(name)
        except UnknownQueue:
            return False
        return True

    def shard(self, queue: str) -> Shard:
        """The shard that holds queue ``queue`` (the default shard unless a shard names it)."""
        return self._queue_shards.get(queue, self.default_shard)

    def shard_of_queues(self, queues: Iterable[str]) -> Shard:
        """The one shard that holds all of ``queues``; :class:`MixedShards`, naming the
        shards and their queues, when they are on more than one."""
        return one_shard((queue, self.shard(queue)) for queue in queues)

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
        """Bind ``job_actor`` to the broker of its queue's shard (once: binding again does
        nothing): its jobs go to that shard's Redis."""
        broker = self.shard(job_actor.queue).broker
        if job_actor.broker is not broker:
            job_actor.bind(broker, self.spec(job_actor.queue).time_limit)

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
        """Close every shard's broker connections and Redis client (unless the config gave
        it: the application owns that one), and stop being the installed App. Returns
        when all are closed; closing twice is harmless."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
        self._unregister_collector()
        uninstall_broker(self.broker)
        for shard in self.shards.values():
            shard.close()

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


def shard_of(job_actor: JobActor[Any]) -> tuple[App, Shard]:
    """The App and shard of the broker ``job_actor`` is bound to (its queue's Redis,
    without a look-up by name); before it is bound, the installed App and its shard of
    the actor's queue (:class:`NoAppInstalled` when none is installed)."""
    shard = getattr(job_actor.broker, SHARD_ATTRIBUTE, None)
    if isinstance(shard, Shard):
        return shard.app, shard  # only an App builds shards
    app = current_app()
    return app, app.shard(job_actor.queue)


def get_spec(name: str) -> QueueSpec:
    """The spec of queue ``name`` in the installed App; :class:`UnknownQueue` (a KeyError)
    when undeclared."""
    return current_app().spec(name)


def now_ms() -> int:
    """Milliseconds since the epoch in the installed App's queue time (docs/queue.md#queue-time)."""
    return current_app().time.now_ms()
