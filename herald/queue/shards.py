"""A shard: one Redis of an :class:`~herald.queue.app.App` and what runs on it — its
client, each thread's own connection to it, the ledger (with its queries and admin
operations) and the broker.

An App has the default shard (the config's own Redis, which holds every queue no
:class:`~herald.queue.config.ShardConfig` names) and one more per configured shard. Each
shard's broker names the shard (:data:`SHARD_ATTRIBUTE`) and the App, so that what has an
actor in hand (a producer) finds its queue's Redis through the broker the actor is bound
to, with no look-up by queue name (docs/queue.md#shards).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import dramatiq

from herald.queue.config import QueueConfig
from herald.queue.errors import MixedShards
from herald.queue.ledger import Ledger
from herald.queue.ledger_admin import LedgerAdmin
from herald.queue.ledger_queries import LedgerQueries
from herald.queue.queue_time import QueueTime
from herald.queue.redis import ThreadConnections, new_redis_client
from herald.queue.registry import APP_ATTRIBUTE

if TYPE_CHECKING:
    from collections.abc import Iterable

#: The attribute of a broker that names the shard it carries.
SHARD_ATTRIBUTE = "herald_shard"


class Shard:
    """One Redis of an App, with its ledger and broker; nothing is connected until used."""

    def __init__(self, name: str, config: QueueConfig, time: QueueTime, app: Any) -> None:
        self.name = name
        #: where this shard's Redis is (:meth:`QueueConfig.shard_config`)
        self.config = config
        #: the App this shard belongs to (typed loosely: the App's module builds shards,
        #: and a cast would cost a call per enqueue)
        self.app = app
        #: the producers' client (the application's own when the config gave one)
        self.client = new_redis_client(config)
        #: each thread's own connection to the client's server (the hot paths' scripts)
        self.connections = ThreadConnections(self.client)
        self.ledger = Ledger(self.client, config.prefix, time=time,
                             connections=self.connections)
        #: what an operator reads of the ledger, and does to it
        self.queries = LedgerQueries(self.ledger)
        self.admin = LedgerAdmin(self.ledger)
        self.broker = _new_broker(config, self.ledger)
        setattr(self.broker, APP_ATTRIBUTE, app)
        setattr(self.broker, SHARD_ATTRIBUTE, self)

    def close(self) -> None:
        """Close the broker's connections and the Redis client (unless the config gave
        it: the application owns that one)."""
        self.broker.close()
        if self.config.redis_client is None:
            self.client.close()

    def __repr__(self) -> str:
        return f"<Shard {self.name} {self.config.describe()}>"


def _new_broker(config: QueueConfig, ledger: Ledger) -> dramatiq.Broker:
    if config.external_broker:
        from herald.queue.rabbitmq import HeraldRabbitmqBroker

        return HeraldRabbitmqBroker(url=config.rabbitmq_url, ledger=ledger)
    from herald.queue.broker import LedgerBroker

    return LedgerBroker(ledger)


def one_shard(shards: Iterable[tuple[str, Shard]]) -> Shard:
    """The one shard of these ``(queue, shard)`` pairs; :class:`MixedShards`, naming each
    shard and its queues, when they are on more than one (or there are none)."""
    by_shard: dict[str, list[str]] = {}
    found: Shard | None = None
    for queue, shard in shards:
        by_shard.setdefault(shard.name, []).append(queue)
        found = shard
    if found is None or len(by_shard) != 1:
        raise MixedShards("a worker process serves the queues of one shard, and these are "
                          "on " + "; ".join(f"shard {name!r}: {', '.join(queues)}"
                                            for name, queues in by_shard.items())
                          + ": start one worker per shard (docs/queue.md#shards)")
    return found
