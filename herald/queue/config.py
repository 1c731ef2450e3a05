"""What the queue library needs to know of its surroundings: where Redis is, which broker
carries the messages, and the key prefix — one frozen value, built by the application.

The library reads no environment and no application settings; an application builds a
:class:`QueueConfig` from its own configuration (herald's from its ``Settings``, in
``herald/queue_app.py``) and hands it to :class:`~herald.queue.app.App`.
"""

from __future__ import annotations

import dataclasses
import types
from collections.abc import Mapping
from typing import Literal

import redis

#: RabbitMQ's address when none is given (a local server with its default user).
DEFAULT_RABBITMQ_URL = "amqp://guest:guest@localhost:5672/%2F"
#: The key prefix of every Redis key the library writes, when none is given.
DEFAULT_PREFIX = "herald"
#: The name of the shard that holds every queue no :class:`ShardConfig` names.
DEFAULT_SHARD = "default"


@dataclasses.dataclass(frozen=True, kw_only=True)
class ShardConfig:
    """A Redis of its own for some queues (docs/queue.md#shards): their jobs, ledger and
    broker live there. Give exactly one of ``redis_url`` or ``redis_client``."""

    redis_url: str = ""
    redis_client: redis.Redis | None = dataclasses.field(default=None, compare=False)
    #: The queues this Redis holds (at least one; each in at most one shard).
    queues: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        object.__setattr__(self, "queues", tuple(self.queues))  # a list given stays put

    def problems(self) -> list[str]:
        """What is wrong with this shard on its own (empty when nothing is)."""
        problems = []
        if bool(self.redis_url) == (self.redis_client is not None):
            problems.append("needs exactly one of redis_url or redis_client")
        if not self.queues:
            problems.append("names no queue")
        return problems


@dataclasses.dataclass(frozen=True, kw_only=True)
class QueueConfig:
    """Where the queues live. Give exactly one of ``redis_url`` (``redis://``,
    ``rediss://`` for TLS, ``unix://``), ``redis_client`` (a ready client, used as it is
    and never closed by the library) or ``sentinel_hosts``."""

    redis_url: str = ""
    #: A client the application made and owns (its pool, TLS options, retries).
    redis_client: redis.Redis | None = dataclasses.field(default=None, compare=False)
    #: ``(host, port)`` of each Sentinel; the master is ``sentinel_name``.
    sentinel_hosts: tuple[tuple[str, int], ...] = ()
    sentinel_name: str = "mymaster"
    #: ``redis``: Redis carries the messages too; ``rabbitmq``: RabbitMQ carries them and
    #: Redis keeps the ledger (docs/queue.md#brokers).
    broker: Literal["redis", "rabbitmq"] = "redis"
    rabbitmq_url: str = DEFAULT_RABBITMQ_URL
    #: Prefix of every key (the ledger's and the schedules'); one per application.
    prefix: str = DEFAULT_PREFIX
    #: Keyword arguments for the Redis clients the library makes (``ssl_ca_certs``...).
    redis_options: tuple[tuple[str, object], ...] = ()
    #: Shards by name: each names queues that live on a Redis of their own; every other
    #: queue lives on the Redis above (docs/queue.md#shards). Not hashed: a mapping has
    #: no hash.
    shards: Mapping[str, ShardConfig] = dataclasses.field(default_factory=dict, hash=False)

    def __post_init__(self) -> None:
        given = [bool(self.redis_url), self.redis_client is not None, bool(self.sentinel_hosts)]
        if sum(given) != 1:
            raise ValueError("QueueConfig needs exactly one of redis_url, redis_client "
                             "or sentinel_hosts")
        if self.broker not in ("redis", "rabbitmq"):
            raise ValueError(f"QueueConfig.broker must be 'redis' or 'rabbitmq', "
                             f"not {self.broker!r}")
        if not self.prefix or ":" in self.prefix:
            raise ValueError("QueueConfig.prefix must be non-empty, without ':'")
        object.__setattr__(self, "sentinel_hosts", tuple(tuple(h) for h in self.sentinel_hosts))
        problems = self._shard_problems()
        if problems:
            raise ValueError("QueueConfig.shards: " + "; ".join(problems))
        # a copy nobody can change: the config stays what was built
        object.__setattr__(self, "shards", types.MappingProxyType(dict(self.shards)))

    def _shard_problems(self) -> list[str]:
        if not self.shards:
            return []
        if self.external_broker:
            return ["shards need the Redis broker (broker='redis')"]
        problems: list[str] = []
        owner: dict[str, str] = {}
        for name, shard in self.shards.items():
            if not name or name == DEFAULT_SHARD or any(c in name for c in " :;,="):
                problems.append(f"shard name {name!r} must be non-empty, not "
                                f"{DEFAULT_SHARD!r}, without spaces or ':;,='")
            problems += [f"shard {name!r} {problem}" for problem in shard.problems()]
            for queue in shard.queues:
                if queue in owner:
                    problems.append(f"queue {queue!r} is in shards {owner[queue]!r} and {name!r}")
                owner.setdefault(queue, name)
        return problems

    def shard_config(self, name: str) -> QueueConfig:
        """The config of shard ``name``'s Redis (its own URL or client, this config's
        prefix, broker and client options); this config itself for :data:`DEFAULT_SHARD`."""
        if name == DEFAULT_SHARD:
            return self
        shard = self.shards[name]
        return dataclasses.replace(self, redis_url=shard.redis_url,
                                   redis_client=shard.redis_client, sentinel_hosts=(),
                                   shards={})

    @property
    def external_broker(self) -> bool:
        """True when the messages travel outside Redis (RabbitMQ)."""
        return self.broker == "rabbitmq"

    def describe(self) -> str:
        """Where Redis is, for logs and command output, without credentials."""
        if self.sentinel_hosts:
            return f"sentinel {self.sentinel_name} via {len(self.sentinel_hosts)} hosts"
        if self.redis_client is not None:
            kwargs = self.redis_client.connection_pool.connection_kwargs
            return kwargs.get("path") or f"{kwargs.get('host', '?')}:{kwargs.get('port', '')}"
        url = redis.connection.parse_url(self.redis_url)
        if "path" in url:
            return str(url["path"])
        return f"{url.get('host', 'unix')}:{url.get('port', '')}"
