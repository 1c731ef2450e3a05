"""The process-wide broker and ledger: made on first use from the settings, forgotten by
:func:`reset_brokers` (after a settings change; tests)."""

from __future__ import annotations

import contextlib
import sys
import threading
from collections.abc import Iterator

import dramatiq

from herald.queue import metrics
from herald.queue.actor import bind_all
from herald.queue.ledger import Ledger
from herald.queue.redis import (
    embedded_redis_running,
    embedded_socket_path,
    redis_client,
    reset_redis_client,
    stop_embedded_redis,
)
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


@contextlib.contextmanager
def owning_embedded_redis(embedded: bool) -> Iterator[None]:
    """Run the block as the owner of an embedded Redis it starts: on the embedded default
    (``embedded``), when none answered before the block and one answers after it, this
    process's connections are closed and the server shut down (saving its data), unless
    another process still uses it (then one line on stderr says so). A server that was
    running before the block is never this block's to stop
    (docs/deployment.md#the-herald-command)."""
    owner = embedded and not embedded_redis_running()
    try:
        yield
    finally:
        if owner and embedded_redis_running():
            close_producers()
            if not stop_embedded_redis(unless_in_use=True):
                print(f"herald: left the embedded Redis running ({embedded_socket_path()}): "
                      "another process still uses it", file=sys.stderr)
