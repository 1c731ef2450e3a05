"""Redis connections: one client per :class:`~herald.queue.app.App` for producers,
dedicated clients for blocking consumers.

Supports ``redis://``, ``rediss://`` (TLS), ``unix://`` and Sentinel, as the
:class:`~herald.queue.config.QueueConfig` says.

Producers fail fast (a few short retries) so an HTTP request never hangs on a dead
Redis; consumers turn connection errors into Dramatiq's ``ConnectionClosed`` and the
worker restarts them forever: a blocking reader must never kill its process.

A retry after a timeout sends a command again that Redis may already have run (its reply
was lost, not the command). herald's scripts are written for that: sent a second time,
each changes nothing more and gives the first send's answer (``herald/queue/lua/``).
"""

from __future__ import annotations

import os
import threading
from collections.abc import Sequence
from typing import Any, cast

import redis
from redis.backoff import ExponentialBackoff
from redis.commands.core import Script
from redis.retry import Retry

from herald.queue.config import QueueConfig

#: Seconds to wait for a TCP/unix connect before calling Redis unreachable.
CONNECT_TIMEOUT_S = 2.0
#: Retries of one command on a connection error (producers fail fast after these).
COMMAND_RETRIES = 2
#: Seconds within which producers, workers and the clock work on the new primary, on
#: their own, once Sentinel promoted a replica (Sentinel's own detection and election,
#: ``down-after-milliseconds`` plus a second or two, come before):
#: a worker's consumer restarts 3 s after a connection error and connects within
#: :data:`CONNECT_TIMEOUT_S`; docs/failure-modes.md#redis-sentinel-failover.
REDIS_FAILOVER_S = 10.0


def _retry() -> Retry:
    return Retry(ExponentialBackoff(cap=0.5, base=0.05), COMMAND_RETRIES)


def new_redis_client(config: QueueConfig, *, socket_timeout: float | None = 30.0,
                     ) -> redis.Redis:
    """A new client with its own pool, configured as ``config`` says (URL, TLS, Sentinel).
    Producers fail fast: a few short retries of a command on a connection error."""
    common: dict[str, Any] = {
        "socket_connect_timeout": CONNECT_TIMEOUT_S,
        "socket_timeout": socket_timeout,
        "retry": _retry(),
        "retry_on_error": [redis.ConnectionError, redis.TimeoutError],
        "health_check_interval": 30,
        **dict(config.redis_options),
    }
    if config.sentinel_hosts:
        from redis.sentinel import Sentinel

        sentinel = Sentinel(list(config.sentinel_hosts),
                            socket_connect_timeout=CONNECT_TIMEOUT_S)
        return cast(redis.Redis, sentinel.master_for(config.sentinel_name, **common))
    if config.redis_client is not None:
        return config.redis_client
    if config.redis_url.startswith("unix://"):
        common.pop("health_check_interval")  # a local socket needs no keep-alive probe
    return redis.Redis.from_url(config.redis_url, **common)


# -- a thread's own connection: the hot paths' round trips without the pool ---------------
def dedicated_connection(client: redis.Redis, *, decode: bool = False) -> Any:
    """A new connection with ``client``'s settings, connected, outside its pool: one
    thread's own. ``decode`` makes its replies ``str`` (decoded by the reply parser,
    which is cheaper than decoding each field in Python)."""
    pool = client.connection_pool
    if decode:
        connection = pool.connection_class(**{**pool.connection_kwargs,
                                              "decode_responses": True})
    else:
        connection = pool.make_connection()
    connection.connect()  # explicitly: a Sentinel-managed connection resolves the master
    return connection


def run_script_on(connection: Any, script: Script, keys: Sequence[Any] = (),
                  args: Sequence[Any] = ()) -> Any:
    """Run a script on one connection (EVALSHA; loaded first when Redis lost it)."""
    connection.send_command("EVALSHA", script.sha, len(keys), *keys, *args)
    try:
        return connection.read_response()
    except redis.exceptions.NoScriptError:
        connection.send_command("SCRIPT", "LOAD", script.script)
        connection.read_response()
        connection.send_command("EVALSHA", script.sha, len(keys), *keys, *args)
        return connection.read_response()


class ThreadConnections:
    """Each thread's own connection to one client's server, outside the client's pool.

    For the hot paths (a producer's adds, a worker thread's finishes, the mock's sends):
    the pool's checkout, with its readiness poll, and the client's retry layers cost as
    much CPU as the round trip itself. Per thread and per process (a forked child makes
    its own). On a connection error the connection is dropped and the call goes through
    the client instead, whose retry policy applies as it does everywhere else.
    """

    def __init__(self, client: redis.Redis) -> None:
        self._client = client
        self._local = threading.local()

    def run_script(self, script: Script, keys: Sequence[Any] = (),
                   args: Sequence[Any] = ()) -> Any:
        """Run ``script`` on this thread's connection (the client's, after an error)."""
        client = self._client
        own = self._local
        try:
            if getattr(own, "pid", None) != os.getpid() or own.connection is None:
                own.pid, own.connection = os.getpid(), None
                own.connection = dedicated_connection(client)
            return run_script_on(own.connection, script, keys, args)
        except (redis.ConnectionError, redis.TimeoutError):
            if own.connection is not None:
                own.connection.disconnect()
                own.connection = None
            return script(keys=list(keys), args=list(args), client=client)
