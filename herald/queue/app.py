"""The one object that holds a process's queue wiring: :class:`App`.

An App is made from a :class:`~herald.queue.config.QueueConfig` and owns what the queues
run on: the Redis client, each thread's own connection to it, the ledger (with its
queries and admin operations), its queue time, the broker (Redis or RabbitMQ, as the config
says) and the metrics collector that reads the ledger. :meth:`App.install` is the one
place that sets Dramatiq's global broker and binds the declared actors to it;
:meth:`App.close` closes its connections. An application
builds one App per process, at start (herald's: ``herald/queue_app.py``); a test builds
its own.

Library functions that need the wiring and have no actor in hand (:func:`queue`,
:func:`find_jobs`, :func:`now_ms`...) find the installed App through Dramatiq's global
broker (:func:`current_app`): the library keeps no wiring of its own in module state.
"""

from __future__ import annotations

import contextlib
import threading

import dramatiq
from prometheus_client import REGISTRY

from herald.queue.config import QueueConfig
from herald.queue.dramatiq_internals import installed_broker, uninstall_broker
from herald.queue.errors import NoAppInstalled
from herald.queue.job_actor import declared_actors
from herald.queue.ledger import Ledger
from herald.queue.ledger_admin import LedgerAdmin
from herald.queue.ledger_queries import LedgerQueries
from herald.queue.metrics import LedgerCollector
from herald.queue.queue_time import QueueTime
from herald.queue.redis import ThreadConnections, new_redis_client

#: The attribute of a broker that names the App it belongs to.
_APP_ATTRIBUTE = "herald_app"


class App:
    """A process's queue wiring, made from ``config``; nothing is connected until used."""

    def __init__(self, config: QueueConfig) -> None:
        self.config = config
        #: the ledger's "now": the wall clock plus an offset a test may move
        self.clock = QueueTime()
        #: the producers' client (the application's own when the config gave one)
        self.client = new_redis_client(config)
        #: each thread's own connection to the client's server (the hot paths' scripts)
        self.connections = ThreadConnections(self.client)
        self.ledger = Ledger(self.client, config.prefix, clock=self.clock,
                             connections=self.connections)
        #: what an operator reads of the ledger, and does to it
        self.queries = LedgerQueries(self.ledger)
        self.admin = LedgerAdmin(self.ledger)
        self.broker = self._new_broker()
        setattr(self.broker, _APP_ATTRIBUTE, self)
        self._collector = LedgerCollector(self.queries)
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
        for job_actor in declared_actors():
            if job_actor.broker is not self.broker:  # installing twice binds once
                job_actor.bind(self.broker)
        with self._lock, contextlib.suppress(ValueError):  # already registered
            REGISTRY.register(self._collector)
        return self

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
    app = getattr(installed_broker(), _APP_ATTRIBUTE, None)
    return app if isinstance(app, App) else None


def current_app() -> App:
    """The installed App; :class:`NoAppInstalled` when no App is installed."""
    app = installed_app()
    if app is None:
        raise NoAppInstalled("no herald.queue App is installed in this process: build one "
                             "from a QueueConfig and call its install() "
                             "(docs/queue.md#the-app)")
    return app


def app_of(broker: dramatiq.Broker | None) -> App:
    """The App ``broker`` belongs to (an actor's broker), else the installed App."""
    app = getattr(broker, _APP_ATTRIBUTE, None)
    return app if isinstance(app, App) else current_app()


def now_ms() -> int:
    """Milliseconds since the epoch in the installed App's queue time (docs/queue.md#queue-time)."""
    return current_app().clock.now_ms()
