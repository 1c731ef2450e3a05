"""The process-wide broker and ledger: made on first use from the settings, forgotten by
:func:`reset_brokers` (after a settings change; tests)."""

from __future__ import annotations

import threading

import dramatiq

from herald.queue import metrics
from herald.queue.actor import bind_all
from herald.queue.ledger import Ledger
from herald.queue.redis import redis_client, reset_redis_client
from herald.settings import get_settings

_lock = threading.RLock()
_broker: dramatiq.Broker | None = None
_ledger: Ledger | None = None


def get_ledger() -> Ledger:
    """The process-wide ledger on the shared Redis client."""
    global _ledger
    with _lock:
        if _ledger is None:
            _ledger = Ledger(redis_client(), get_settings().queue_prefix)
            metrics.register_collectors(get_ledger)  # /metrics reads the ledger of this process
        return _ledger


def get_broker() -> dramatiq.Broker:
    """The process-wide broker chosen by ``BROKER``, with every declared actor bound."""
    global _broker
    with _lock:
        if _broker is None:
            settings = get_settings()
            if settings.broker == "rabbitmq":
                from herald.queue.rabbitmq import HeraldRabbitmqBroker

                broker: dramatiq.Broker = HeraldRabbitmqBroker(url=settings.rabbitmq_url,
                                                               ledger=get_ledger())
            else:
                from herald.queue.broker import LedgerBroker

                broker = LedgerBroker(get_ledger())
            use_broker(broker)
        assert _broker is not None
        return _broker


def use_broker(broker: dramatiq.Broker) -> None:
    """Make ``broker`` the process-wide broker and bind every declared actor to it."""
    global _broker, _ledger
    with _lock:
        _broker = broker
        _ledger = getattr(broker, "ledger", _ledger)
        dramatiq.set_broker(broker)
        bind_all(broker)


def reset_brokers() -> None:
    """Forget the process-wide broker and ledger (after a settings change; tests)."""
    global _broker, _ledger
    with _lock:
        _broker = None
        _ledger = None
        bind_all(None)


def close_producers() -> None:
    """Close the process-wide broker's connections and the shared Redis client, then
    forget them; returns when both are closed. A later enqueue opens new ones."""
    global _broker, _ledger
    with _lock:
        broker, _broker, _ledger = _broker, None, None
        bind_all(None)
    if broker is not None:
        broker.close()
    reset_redis_client()
