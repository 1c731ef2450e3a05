"""What the queue library needs to know of its surroundings: where Redis is, which broker
carries the messages, and the key prefix — one frozen value, built by the application.

The library reads no environment and no application settings; an application builds a
:class:`QueueConfig` from its own configuration (herald's from its ``Settings``, in
``herald/queue_app.py``) and hands it to :class:`~herald.queue.app.App`.
"""

from __future__ import annotations

import dataclasses
from typing import Literal

import redis

#: RabbitMQ's address when none is given (a local server with its default user).
DEFAULT_RABBITMQ_URL = "amqp://guest:guest@localhost:5672/%2F"
#: The key prefix of every Redis key the library writes, when none is given.
DEFAULT_PREFIX = "herald"


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
